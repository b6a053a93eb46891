//! The engine: a mapped segment, this process's registration, and acquire / release
//! by handles. Names are resolved once ([`Engine::pool`], [`Engine::tenant`]) into
//! small `Copy` handles; an acquire returns a `Copy` [`Outcome`] and allocates nothing,
//! granted or refused. The Rust façade ([`crate::Table`]), and later the C ABI, sit on
//! top of it.

use std::sync::Mutex;

use crate::admission::{self, Admitted, Attempt};
use crate::anchor;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::layout::{LeaseRec, pair};
use crate::recovery;
use crate::refusal::Refused;
use crate::region::Region;
use crate::segment::Segment;
use crate::sync::{AtomicU32, AtomicU64, Ordering::*};

mod calls;
mod errors;
mod ids;
mod names;
mod register;
mod spare;
mod upkeep;

pub use ids::{LeaseId, Outcome, PoolId, Repaired, TenantId};
use spare::{LIVE, NEXT_ENGINE, SPARE, Spare, free_spare, keep_spare};

/// How far a request got before this try of it. A waiting acquire is one request,
/// however often it tries: its first try is counted, logged, given a turn of its
/// tenant's and takes a token of the tenant's request rate; its later tries are decided
/// as any and mark the tenant active, but are quiet (see `admission::Attempt::quiet`),
/// and once one of them has passed the tenant's rates the request has its token and
/// takes no other (before, a wait on a full pool took a token at every try: a tenant of
/// 1 request a second waiting one second for a release was served a second late, after
/// 40 `rate_limited` refusals of its own tries).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Asked {
    /// This try is the request's first.
    No,
    /// It asked before and has not yet passed its rates (a rate refused it, or it has
    /// not reached them): quiet, and it takes a token.
    Unrated,
    /// It asked before and passed its rates (took its token, or the pool has none):
    /// quiet, and its rates are not asked again.
    Rated,
}

impl Asked {
    /// After a try refused for `reason`: a refusal by the rates leaves the request
    /// `Unrated` (it took no token); one by the pool's rule says it passed them.
    pub(crate) fn after(self, reason: crate::refusal::Reason) -> Asked {
        match self {
            Asked::Rated => Asked::Rated,
            _ if reason.is_rate() => Asked::Unrated,
            _ => Asked::Rated,
        }
    }
}

/// A shared table as one process sees it: the mapping and this process's registration.
pub struct Engine {
    seg: Segment,
    /// This engine's id in `LIVE`, for thread spares.
    id: u64,
    /// `pid << 32 | slot + 1` of this process's registration as what this handle is (a
    /// worker, or a tool for a tool's handle); 0 before it.
    reg: AtomicU64,
    /// The same, of a worker's handle whose process registered only to claim tenant
    /// names, as a tool (`per_worker` pools do not count it); moved to `reg` when it
    /// becomes a worker. Apart from `reg` so that the acquire's test of `reg` stays one
    /// comparison.
    claimed: AtomicU64,
    reg_lock: Mutex<()>,
    /// This process's start time, as registered (with `reg`).
    start: AtomicU64,
    /// Where this process's next lease search starts.
    hint: AtomicU64,
    /// 1 while this handle logs its decisions (see `decisions`), 0 once switched off.
    log: AtomicU32,
    /// Registers as a tool (`Table::open_tool`): no worker of `per_worker` pools.
    tool: bool,
    /// This process's anchor for its registration, with the pid it was started by (a
    /// forked child inherits the parent's entry, whose thread it does not have).
    anchor: Mutex<Option<(u64, anchor::Anchor)>>,
    /// The pid of the thread's process that is writing this engine's blocks of a
    /// guaranteed pool (see `guaranteed::api`); 0 when none. Process-local.
    pub(crate) g_lock: AtomicU32,
}

/// The slot a registration word (`Engine::reg`, `Engine::claimed`) names for process
/// `pid`, if it names one.
#[inline]
fn slot_of(r: u64, pid: u64) -> Option<usize> {
    (r >> 32 == pid && r as u32 != 0).then(|| (r as u32 - 1) as usize)
}

impl Engine {
    pub(crate) fn from_segment(seg: Segment) -> Engine {
        // Relaxed: a unique number is all that is asked.
        let id = NEXT_ENGINE.fetch_add(1, Relaxed);
        let geo = *seg.geometry();
        let first = seg.lease(0) as *const LeaseRec as usize;
        LIVE.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((id, first, geo.leases()));
        Engine {
            seg,
            id,
            reg: AtomicU64::new(0),
            claimed: AtomicU64::new(0),
            reg_lock: Mutex::new(()),
            start: AtomicU64::new(0),
            hint: AtomicU64::new(0),
            log: AtomicU32::new(1),
            tool: false,
            anchor: Mutex::new(None),
            g_lock: AtomicU32::new(0),
        }
    }

    /// Switches the decision log (`shmtool log`) on or off for this handle's decisions
    /// (on by default). Off, its decisions cost no log write and cannot be explained
    /// afterwards.
    pub fn set_decision_log(&self, on: bool) {
        // Relaxed: a process-local switch that orders nothing.
        self.log.store(on as u32, Relaxed);
    }

    /// Whether this handle logs its decisions.
    pub fn decision_log(&self) -> bool {
        // Relaxed: as in `set_decision_log`.
        self.log.load(Relaxed) != 0
    }

    /// `Err(ReadOnly)` on an observer's mapping, before `what` could write to it.
    #[inline]
    pub(crate) fn writable(&self, what: &'static str) -> Result<()> {
        if self.seg.read_only() {
            return Err(Error::ReadOnly {
                name: self.seg.name().to_owned(),
                what,
            });
        }
        Ok(())
    }

    /// This handle, registering (when it must: to claim a tenant, say) as a tool,
    /// which `per_worker` pools do not count as a worker (see `Table::open_tool`).
    pub(crate) fn into_tool(mut self) -> Engine {
        self.tool = true;
        self
    }

    /// Whether this handle registers as a tool (see `Table::open_tool`).
    pub fn is_tool(&self) -> bool {
        self.tool
    }

    /// Whether this handle observes only (see `Table::open_observer`).
    pub fn is_observer(&self) -> bool {
        self.seg.read_only()
    }

    pub(crate) fn seg(&self) -> &Segment {
        &self.seg
    }
    pub fn name(&self) -> &str {
        self.seg.name()
    }
    pub fn config(&self) -> &Config {
        self.seg.config()
    }
    pub fn size(&self) -> usize {
        self.seg.size()
    }

    /// Applies the pool's rule to `units` of `pool` for `tenant` at time `now` (ms; any
    /// monotonic base, 0 included), declaring a hold of `hold_ms` (0: not declared).
    /// `Err` is something wrong with the request or the table; a refusal is an
    /// [`Outcome::Refused`].
    pub fn acquire(
        &self,
        pool: PoolId,
        tenant: TenantId,
        units: u32,
        hold_ms: u64,
        now: u64,
    ) -> Result<Outcome> {
        self.acquire_at(pool, tenant, units, hold_ms, now, None, Asked::No)
    }

    /// [`Engine::acquire`] of a request that waited `queued_us` in the server's own
    /// queue before it asked (from the front proxy's `X-Request-Start`; `None`: not
    /// known). The wait is noted as by [`Engine::note_queue`], and an over-share
    /// refusal's hint is stretched by it at once (see `server_queue`).
    pub fn acquire_queued(
        &self,
        pool: PoolId,
        tenant: TenantId,
        units: u32,
        hold_ms: u64,
        now: u64,
        queued_us: Option<u64>,
    ) -> Result<Outcome> {
        self.acquire_at(pool, tenant, units, hold_ms, now, queued_us, Asked::No)
    }

    /// The body of [`Engine::acquire`] and [`Engine::acquire_queued`], inlined into
    /// each: the plain acquire, the uncontended pair's half, then neither passes nor
    /// tests a queue wait it does not have, and its `asked` is a constant
    /// [`Asked::No`]. The waiting acquire (`blocking`) calls it too, saying how far its
    /// request got before this try (see [`Asked`]).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn acquire_at(
        &self,
        pool: PoolId,
        tenant: TenantId,
        units: u32,
        hold_ms: u64,
        now: u64,
        queued_us: Option<u64>,
        asked: Asked,
    ) -> Result<Outcome> {
        let p = pool.index();
        let geo = self.seg.geometry();
        if p >= geo.pools || tenant.index() >= geo.tenants {
            return Err(self.bad_handles(p, tenant.index()));
        }
        if units == 0 {
            return Err(errors::zero_units());
        }
        // The pool's config, this process's own copy (a pool handle below `geo.pools`
        // is one of its pools).
        let pc = &self.config().pools[p];
        // The segment's time (the caller's + 1: see `clock::internal`).
        let now = crate::clock::internal(now);
        // The tenant's rates first: over them, nothing else is done (no pool is
        // touched, nothing is registered). One load when they are unbounded. A pool
        // without rates (`PoolConfig::rates`) takes no token and refuses no debt.
        let token = if pc.rates && asked != Asked::Rated {
            match crate::rates::admit(&self.seg, tenant.index(), now) {
                Ok(token) => token,
                Err(l) => return Ok(self.rate_refusal(p, tenant, units, now, &l)),
            }
        } else {
            None
        };
        // Registered first: a per_worker pool counts this process before sizing. (Each
        // error from here on gives the token back: see `undecided`.)
        let slot = match self.process_slot() {
            Ok(slot) => slot,
            Err(e) => return Err(self.undecided(tenant, token, e)),
        };
        // SeqCst: capacity and floor are inputs, frozen into the lease descriptor, and a
        // per_worker pool grows by a store here that wakes waiters (`capacity`): a
        // blocked acquire's try follows its announcement in `waiters`, so either the
        // grower sees that announcement and wakes it, or this load sees the new
        // capacity (the store-load pattern of `waiting`). A plain load on x86-64.
        let limits = self.seg.pool(p).limits.load(SeqCst);
        let cap = pair::lo(limits);
        if cap > crate::layout::op_word::MAX_COUNT {
            return Err(self.undecided(tenant, token, self.garbage_capacity(p, cap)));
        }
        if units > cap {
            return Err(self.undecided(tenant, token, self.units_exceed(pool, units, cap)));
        }
        let attempt = Attempt {
            pool: p,
            tenant: tenant.index(),
            units,
            hold_ms,
            now,
            window_ms: pc.window_ms as u64,
            weight: tenant.weight.max(1),
            tid: crate::selfid::tid(),
            pid: crate::selfid::pid(),
            log: self.decision_log(),
            limits,
            evict: pc.evict,
            queued_us: match queued_us {
                Some(q) => {
                    crate::server_queue::note(self.seg.pool(p), q, now);
                    q.min(crate::server_queue::UNKNOWN as u64 - 1) as u32
                }
                None => crate::server_queue::UNKNOWN,
            },
            quiet: asked != Asked::No,
        };
        // Relaxed: a hint only, where the last release left a free slot (threads that
        // race may start at the same lease; any start finds a free one if there is one).
        let hint = self.hint.load(Relaxed);
        let spare = SPARE.with(|c| c.0.take()).and_then(|s| {
            // Another engine's spare goes back. One inherited across fork names a lease
            // of the parent's slot: the protocol does not take it, claims a lease of our
            // own, and so it is spent below, never put back nor freed.
            if s.engine == self.id {
                Some((s.lease as usize, s.generation))
            } else {
                SPARE.with(|c| c.0.set(Some(s)));
                None
            }
        });
        let admitted = admission::try_acquire(&self.seg, slot, hint as usize, &attempt, spare);
        let spent = matches!(
            admitted,
            Ok(Admitted::Granted { .. }
                | Admitted::Refused {
                    claimed: Some(_),
                    ..
                })
        );
        if let (Some((l, g)), false) = (spare, spent) {
            // Refused before claiming anything (or an error): the spare is still ours,
            // as its next use checks.
            SPARE.with(|c| {
                c.0.set(Some(Spare {
                    engine: self.id,
                    lease: l as u32,
                    generation: g,
                }))
            });
        }
        let admitted = match admitted {
            Ok(a) => a,
            Err(e) => {
                let e = self.after_error(slot, p, None, e);
                return Err(self.undecided(tenant, token, e));
            }
        };
        match admitted {
            Admitted::Granted { lease, desc } => Ok(Outcome::Granted(LeaseId {
                index: lease as u32,
                generation: desc.generation,
            })),
            Admitted::Refused { facts, .. } => {
                Ok(Outcome::Refused(Refused::from_facts(units, &facts)))
            }
        }
    }

    /// An acquire that errs after it passed the tenant's rates was never decided (bad
    /// input, a full table, a broken segment): it gives back the request token it took
    /// (`token`), so that an error loses nothing (a refusal has used its token: the rate
    /// counts the requests that arrive). Returns `e`. Cold, and called only on the
    /// error paths, so that the pair pays nothing for it.
    #[cold]
    fn undecided(&self, tenant: TenantId, token: Option<crate::rates::Token>, e: Error) -> Error {
        if let Some(token) = token {
            crate::rates::give_back(&self.seg, tenant.index(), token);
        }
        e
    }

    /// Releases a lease of this process at `now`. A second release of the same lease is
    /// `AlreadyReleased` and changes nothing. Returns the pool it was released in.
    pub fn release(&self, id: LeaseId, now: u64) -> Result<PoolId> {
        self.writable("releasing")?;
        let l = self.own_lease(id)?;
        let geo = self.seg.geometry();
        // Keep the slot as this thread's spare if the thread has none of this engine's: a
        // spare of another engine is given back first (a thread that switches tables).
        // (Tiny closures: each access stays a plain thread-local load or store.)
        let keep = match SPARE.with(|c| c.0.get()) {
            None => Some(crate::selfid::tid()),
            Some(s) if s.engine != self.id => {
                SPARE.with(|c| c.0.set(None));
                free_spare(s);
                Some(crate::selfid::tid())
            }
            Some(_) => None,
        };
        let now = crate::clock::internal(now); // the segment's time
        let d = match admission::release(&self.seg, l, id.generation, None, now, keep) {
            Ok(d) => d,
            Err(e @ Error::AlreadyReleased { .. }) => return Err(e),
            // Our own lease, which we stopped driving: resolved now, never left
            // RELEASING with a count raised.
            Err(e) => {
                return Err(self.after_error(l / geo.leases_per_proc, usize::MAX, Some(l), e));
            }
        };
        if keep.is_none() {
            // Relaxed: a hint (see `acquire`).
            self.hint.store((l % geo.leases_per_proc) as u64, Relaxed);
        }
        if keep.is_some() {
            keep_spare(Spare {
                engine: self.id,
                lease: id.index,
                generation: id.generation.wrapping_add(1) & crate::layout::lease_state::GEN_MASK,
            });
        }
        let (p, t) = (d.pool as usize, d.tenant as usize);
        crate::waiting::released_by(self.seg.pool(p), d.units, t, || {
            admission::under_share_now(&self.seg, p, t)
        });
        Ok(PoolId(d.pool))
    }

    /// Lease `id`'s index, checked to lie in this process's lease range (no division:
    /// this runs on every release).
    #[inline(always)]
    fn own_lease(&self, id: LeaseId) -> Result<usize> {
        let l = id.index as usize;
        let geo = self.seg.geometry();
        if l >= geo.leases() {
            return Err(Error::InvalidRequest(format!(
                "lease {id} is beyond the lease table"
            )));
        }
        // The slot's range written out, not `Geometry::slot_leases`: on the release's
        // path, where that form cost the pair 7 instructions in CI's build (callgrind).
        let lpp = geo.leases_per_proc;
        if !self
            .registered(crate::selfid::pid() as u64)
            .is_some_and(|s| (s * lpp..(s + 1) * lpp).contains(&l))
        {
            return Err(self.not_owner(id.to_string(), l / lpp));
        }
        Ok(l)
    }
}

impl Drop for Engine {
    /// Deregisters this process if this handle registered it: detaches its anchor,
    /// releases what leases detached with `Lease::into_id` still hold, and frees its
    /// slot, so opening and dropping tables leaks neither slots nor threads. A forked
    /// child's inherited handle that never registered the child touches nothing.
    fn drop(&mut self) {
        // First out of `LIVE`, so no exiting thread touches the mapping from here on.
        LIVE.lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(id, ..)| *id != self.id);
        // This thread's spare of this engine is freed with the slot, below. (Another
        // thread's is dropped at its next use or exit, as its engine is gone.)
        let _ = SPARE.try_with(|c| {
            if c.0.get().is_some_and(|s| s.engine == self.id) {
                c.0.set(None);
            }
        });
        let pid = crate::selfid::pid() as u64;
        match self
            .anchor
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            Some((p, a)) if p == pid => a.detach(),
            Some((_, inherited)) => std::mem::forget(inherited),
            None => {}
        }
        // Relaxed: written by this process's registration, which `drop` follows.
        let start = self.start.load(Relaxed);
        // A truncated segment is left alone: touching it would raise SIGBUS.
        // Relaxed: this process's own registration, which `drop` follows.
        let (worker, claimer) = (
            slot_of(self.reg.load(Relaxed), pid),
            slot_of(self.claimed.load(Relaxed), pid),
        );
        if self.seg.check_size().is_ok()
            && let Some((slot, tool)) = worker
                .map(|s| (s, self.tool))
                .or(claimer.map(|s| (s, true)))
            && let Some(gone) = recovery::retire_slot(&self.seg, slot, pid as u32, start, tool)
        {
            crate::peers::announce(&self.seg, &[gone]);
        }
    }
}
