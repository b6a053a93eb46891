//! The engine: a mapped segment, this process's registration, and acquire / release
//! by handles. Names are resolved once ([`Engine::pool`], [`Engine::tenant`]) into
//! small `Copy` handles; an acquire returns a `Copy` [`Outcome`] and allocates nothing,
//! granted or refused. The Rust façade ([`crate::Table`]), and later the C ABI, sit on
//! top of it.

use std::sync::Mutex;

use crate::admission::{self, Admitted, Attempt};
use crate::anchor;
use crate::clock;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::layout::{LeaseRec, pair};
use crate::liveness;
use crate::recovery::{self, Reaped};
use crate::refusal::Refused;
use crate::region::Region;
use crate::segment::Segment;
use crate::sync::{AtomicU32, AtomicU64, Ordering::*};

mod calls;
mod ids;
mod names;
mod spare;
mod upkeep;

pub use ids::{LeaseId, Outcome, PoolId, Repaired, TenantId};
use spare::{LIVE, NEXT_ENGINE, SPARE, Spare, free_spare, keep_spare};

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

    /// Registers this process as a worker now (it would be on its first acquire), so
    /// that `per_worker` pools count it. Returns its process slot.
    pub fn register(&self) -> Result<usize> {
        self.process_slot()
    }

    /// This process's slot as a worker (a tool's, for a tool's handle), registering it
    /// (again, after a fork) if needed, or making a registration that only claimed
    /// tenant names so far a worker's.
    #[inline]
    pub fn process_slot(&self) -> Result<usize> {
        let pid = crate::selfid::pid() as u64;
        // Acquire: pairs with the Release stores in `register_slow` (same process,
        // other thread), so the registration it names is complete.
        match slot_of(self.reg.load(Acquire), pid) {
            Some(slot) => Ok(slot),
            None => self.register_slow(pid, self.tool),
        }
    }

    /// This process's slot, of either kind, for a call that is no worker's (claiming a
    /// tenant's name to set its rates, say): a process not registered yet registers as
    /// a tool, which `per_worker` pools do not count until it acquires.
    pub(crate) fn claimer_slot(&self) -> Result<usize> {
        let pid = crate::selfid::pid() as u64;
        match self.registered(pid) {
            Some(slot) => Ok(slot),
            None => self.register_slow(pid, true),
        }
    }

    /// The slot this handle registered for process `pid`, if it did (a forked child's
    /// inherited handle names the parent's), of either kind.
    #[inline]
    pub(crate) fn registered(&self, pid: u64) -> Option<usize> {
        // Acquire, both: as in `process_slot`.
        slot_of(self.reg.load(Acquire), pid).or_else(|| slot_of(self.claimed.load(Acquire), pid))
    }

    /// Whether this process has a running anchor of this handle's registration (a
    /// forked child has none until it registers; an anchor may also fail to start).
    pub(crate) fn anchored(&self) -> bool {
        let pid = crate::selfid::pid() as u64;
        self.anchor
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|(p, _)| *p == pid)
    }

    /// Test-only (feature `internals`): detaches this process's anchor, as if it had
    /// never started (its owner word reads unanchored from then on), so that a blocked
    /// acquire of this process watches the processes ahead of it itself.
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub fn detach_anchor(&self) {
        let taken = self.anchor.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some((_, a)) = taken {
            a.detach();
        }
    }

    /// Registers this process (as a tool if `tool`), or makes its tool's registration a
    /// worker's (`tool` false).
    #[cold]
    fn register_slow(&self, pid: u64, tool: bool) -> Result<usize> {
        self.writable("registering a worker")?;
        self.seg.check_pid_ns("registering a worker")?;
        let _g = self.reg_lock.lock().unwrap_or_else(|e| e.into_inner());
        // Relaxed, these two: under the lock, which the stores below are made under.
        if let Some(slot) = slot_of(self.reg.load(Relaxed), pid) {
            return Ok(slot);
        }
        if let Some(slot) = slot_of(self.claimed.load(Relaxed), pid) {
            if !tool {
                // It claimed names so far; now it works: counted from here on.
                // Relaxed: this process's own start time, stored with `claimed`.
                let start = self.start.load(Relaxed);
                liveness::become_worker(&self.seg, slot, pid as u32, start)?;
                // Release: as below.
                self.reg.store(pid << 32 | (slot as u64 + 1), Release);
                self.claimed.store(0, Relaxed);
                crate::capacity::recompute(&self.seg, self.config());
            }
            return Ok(slot);
        }
        let (pid32, start) = liveness::me();
        let now = clock::segment_now();
        let slot = match liveness::register(&self.seg, pid32, start, now, tool) {
            Err(Error::ProcessTableFull { .. }) => {
                self.reap_dead_as(crate::layout::noticed::CALL)?;
                liveness::register(&self.seg, pid32, start, now, tool)?
            }
            other => other?,
        };
        crate::ops::crash_point("register.live")?;
        // The anchor makes our death wake waiters. Without one (it could not start) we
        // are judged by `/proc`, through the sweeps; `Snapshot` shows which processes
        // are anchored.
        let attached = anchor::attach(&self.seg, slot, (pid32, start)).ok();
        let attached_ok = attached.is_some();
        let mut a = self.anchor.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, inherited)) = a.take() {
            // The parent's: its thread does not exist here; leave it alone.
            std::mem::forget(inherited);
        }
        *a = attached.map(|x| (pid, x));
        drop(a);
        self.start.store(start, Relaxed);
        // Release: see the Acquire load in `process_slot`. A worker's handle that
        // registered as a tool keeps it in `claimed`, which the acquire does not test.
        let word = if tool && !self.tool {
            &self.claimed
        } else {
            &self.reg
        };
        word.store(pid << 32 | (slot as u64 + 1), Release);
        if attached_ok {
            // Release: pairs with the Acquire load in `peers::run`, which then sees our
            // slot LIVE with our anchor's tid, and watches it.
            self.seg.registry().fetch_add(1, Release);
            crate::waiting::wake_word(self.seg.registry().as_ptr(), u32::MAX);
        }
        // A process that died with no live process to notice it (the last worker) is
        // still LIVE in its slot, holding its permits, until our anchor's first scan
        // reaps it. Reaped now, before our first acquire and before the pools are
        // sized: its permits are back for that acquire, and a `per_worker` pool does
        // not count a worker that is gone (Semian's count, kept by the kernel, drops
        // at the exit).
        self.reap_dead_as(crate::layout::noticed::REGISTER)?;
        crate::capacity::recompute(&self.seg, self.config());
        Ok(slot)
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
        self.acquire_at(pool, tenant, units, hold_ms, now, None, false)
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
        self.acquire_at(pool, tenant, units, hold_ms, now, queued_us, false)
    }

    /// The body of [`Engine::acquire`] and [`Engine::acquire_queued`], inlined into
    /// each: the plain acquire, the uncontended pair's half, then neither passes nor
    /// tests a queue wait it does not have, and its `quiet` is a constant `false`. The
    /// waiting acquire (`blocking`) calls it too: `quiet` for its later tries, which
    /// are decided and mark the tenant active as any, but whose refusals are not
    /// counted, logged or given a turn again (see `admission::Attempt::quiet`).
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
        quiet: bool,
    ) -> Result<Outcome> {
        let p = pool.index();
        let geo = self.seg.geometry();
        if p >= geo.pools || tenant.index() >= geo.tenants {
            return Err(self.bad_handles(p, tenant.index()));
        }
        if units == 0 {
            return Err(Error::InvalidRequest("asked for 0 units".into()));
        }
        // The pool's config, this process's own copy (a pool handle below `geo.pools`
        // is one of its pools).
        let pc = &self.config().pools[p];
        // The segment's time (the caller's + 1: see `clock::internal`).
        let now = crate::clock::internal(now);
        // The tenant's rates first: over them, nothing else is done (no pool is
        // touched, nothing is registered). One load when they are unbounded. A pool
        // without rates (`PoolConfig::rates`) takes no token and refuses no debt.
        if pc.rates {
            if let Err(l) = crate::rates::admit(&self.seg, tenant.index(), now) {
                return Ok(self.rate_refusal(p, tenant, units, now, &l));
            }
        }
        // Registered first: a per_worker pool counts this process before sizing.
        let slot = self.process_slot()?;
        // SeqCst: capacity and floor are inputs, frozen into the lease descriptor, and a
        // per_worker pool grows by a store here that wakes waiters (`capacity`): a
        // blocked acquire's try follows its announcement in `waiters`, so either the
        // grower sees that announcement and wakes it, or this load sees the new
        // capacity (the store-load pattern of `waiting`). A plain load on x86-64.
        let limits = self.seg.pool(p).limits.load(SeqCst);
        let cap = pair::lo(limits);
        if cap > crate::layout::op_word::MAX_COUNT {
            return Err(self.garbage_capacity(p, cap));
        }
        if units > cap {
            return Err(self.units_exceed(pool, units, cap));
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
            quiet,
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
            Err(e) => return Err(self.after_error(slot, p, None, e)),
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
        crate::waiting::released(self.seg.pool(d.pool as usize), d.units);
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
        let lpp = geo.leases_per_proc;
        if !self
            .registered(crate::selfid::pid() as u64)
            .is_some_and(|s| (s * lpp..(s + 1) * lpp).contains(&l))
        {
            return Err(self.not_owner(id.to_string(), l / lpp));
        }
        Ok(l)
    }

    /// `InvalidRequest` naming the handle of an acquire that is beyond this table: the
    /// pool handle `p`, else the tenant handle `t`.
    #[cold]
    #[inline(never)]
    pub(crate) fn bad_handles(&self, p: usize, t: usize) -> Error {
        let geo = self.seg.geometry();
        Error::InvalidRequest(if p >= geo.pools && geo.pools == 0 {
            format!("pool handle {p} is not of this table: it has no fair-share pools")
        } else if p >= geo.pools {
            format!(
                "pool handle {p} is not of this table: its fair-share pools are handles 0 \
                 to {}",
                geo.pools - 1
            )
        } else {
            format!(
                "tenant handle {t} is beyond this table's {} tenant slots",
                geo.tenants
            )
        })
    }

    /// `NotOwner` for `lease` (its label), owned by process slot `slot` (as recorded in
    /// shared memory: checked here), saying who holds it: a process (its slot `LIVE`)
    /// or another table handle of this one, which has a slot of its own and must
    /// release its own leases.
    #[cold]
    #[inline(never)]
    pub(crate) fn not_owner(&self, lease: String, slot: usize) -> Error {
        use crate::layout::proc_state as ps;
        // Acquire: as every reader of a process slot's state (a wrong answer here only
        // words the error). A slot beyond the table reads as free.
        let st = if slot < self.seg.geometry().procs {
            self.seg.proc_slot(slot).state.load(Acquire)
        } else {
            0
        };
        let why = if ps::status(st) != ps::LIVE {
            "is not held by this process".to_owned()
        } else if ps::pid(st) == crate::selfid::pid() {
            format!(
                "was acquired through another table handle of this process (process slot \
                 {slot}): release it through that handle"
            )
        } else {
            format!(
                "is not held by this process: process {} holds it (process slot {slot})",
                ps::pid(st)
            )
        };
        Error::NotOwner { lease, why }
    }

    /// `UnitsExceedCapacity` for `units` over capacity `cap`, saying whether it ever can
    /// be granted: never for a fixed capacity; for a `per_worker` pool, once more
    /// workers have registered, unless even a worker in every process slot is too few.
    #[cold]
    #[inline(never)]
    fn units_exceed(&self, pool: PoolId, units: u32, cap: u32) -> Error {
        let per_worker = self
            .config()
            .pools
            .get(pool.index())
            .and_then(|c| c.per_worker);
        let when = match per_worker {
            None => crate::error::NEVER.to_owned(),
            Some(pw) => {
                let most = pw.most_tickets(self.seg.geometry().procs);
                if units > most {
                    format!(
                        " for its live workers now, and at most {most} with every process \
                         slot a worker{}",
                        crate::error::NEVER
                    )
                } else {
                    " for its live workers now (a per_worker pool): it can be granted once \
                     more workers have registered"
                        .to_owned()
                }
            }
        };
        Error::UnitsExceedCapacity {
            pool: self.pool_name(pool).to_owned(),
            units: units as u64,
            capacity: cap as u64,
            when,
        }
    }

    /// A capacity no op word can count is garbage: the config's values go back (a
    /// `per_worker` pool's recomputed), so that the next call works; this one reports it.
    #[cold]
    #[inline(never)]
    fn garbage_capacity(&self, p: usize, cap: u32) -> Error {
        crate::capacity::reset(&self.seg, self.config());
        Error::Corrupt(format!(
            "pool {p} has capacity {cap}, beyond the {} an op word counts",
            crate::layout::op_word::MAX_COUNT
        ))
    }

    /// After an error in an op of this thread: resolves the lease it left mid-op (`l`,
    /// or, for an acquire, every `ACQUIRING` lease of this thread in slot `slot`) as a
    /// reaper would, quarantining what cannot be finished, so that errors never use up
    /// this process's leases or leave a count raised; then, if the error was a broken
    /// invariant or a lease was quarantined, rebuilds pool `p`'s counters (`repair`),
    /// so that the pool heals at once instead of failing every later call.
    /// Returns `e`, for the caller to return. (Out of line: the fast paths stay as
    /// they were.) `p` is `usize::MAX` for a release: read from the lease.
    #[cold]
    #[inline(never)]
    fn after_error(&self, slot: usize, p: usize, l: Option<usize>, e: Error) -> Error {
        let corrupt = matches!(e, Error::Corrupt(_));
        let geo = self.seg.geometry();
        let p = match l {
            Some(l) if p == usize::MAX => {
                // Acquire: the lease's fields were published by its state's stores.
                let s = self.seg.lease(l).state.load(Acquire);
                crate::ops::read_desc(self.seg.lease(l), crate::layout::lease_state::generation(s))
                    .map_or(usize::MAX, |d| d.pool as usize)
            }
            _ => p,
        };
        let tid = crate::selfid::tid();
        let mut out = Reaped {
            units_returned: vec![0; geo.pools],
            ..Reaped::default()
        };
        let range = slot * geo.leases_per_proc..(slot + 1) * geo.leases_per_proc;
        for k in range {
            let lease = self.seg.lease(k);
            // Relaxed: our own leases; `resolve_lease` re-reads with Acquire.
            let st = crate::layout::lease_state::state(lease.state.load(Relaxed));
            let ours = match l {
                Some(l) => k == l,
                None => {
                    st == crate::layout::lease_state::ACQUIRING && lease.tid.load(Relaxed) == tid
                }
            };
            if ours {
                recovery::resolve_lease(&self.seg, k, &mut out);
            }
        }
        if (corrupt || out.quarantined > 0)
            && p < geo.pools
            && crate::repair::repair_pool(&self.seg, p, crate::repair::INLINE_BUDGET).is_ok()
        {
            crate::repair::free_quarantined_of(&self.seg, p);
        }
        crate::peers::announce(&self.seg, &[out]);
        e
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
