//! `Table`: the public face. A mapped segment plus this process's registration.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::admission::{self, Admitted, Attempt};
use crate::anchor;
use crate::clock;
use crate::config::{Config, check_name_bytes};
use crate::error::{Error, Result};
use crate::liveness;
use crate::ops::Desc;
use crate::recovery::{self, Reaped};
use crate::refusal::{Reason, Refusal};
use crate::region::Region;
use crate::segment::{self, Segment};
use crate::stats::{self, Snapshot};
use crate::sync::{AtomicU64, Ordering::*};
use crate::tenants;
use crate::waiting::{self, Class};

/// How often a blocked acquirer sweeps for dead processes itself, by default: the
/// backup to the kernel's robust-futex wake (see `acquire`).
pub const DEFAULT_SWEEP: Duration = Duration::from_millis(250);
/// First bound on a waiter's wait for a dying process to finish exiting; it doubles
/// (the wait ends as soon as the process is gone: see `liveness::wait_exit`).
const DYING_PAUSE: Duration = Duration::from_millis(1);

/// What to acquire.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub pool: &'a str,
    pub tenant: &'a str,
    /// Permits asked for; granted all or nothing.
    pub units: u32,
    /// Declared hold in ms (0: not declared). Recorded in the lease; also the first
    /// retry-after estimate before any hold was observed.
    pub hold_ms: u64,
}

impl<'a> Request<'a> {
    /// One permit of `pool` for `tenant`, hold not declared.
    pub fn new(pool: &'a str, tenant: &'a str) -> Self {
        Request {
            pool,
            tenant,
            units: 1,
            hold_ms: 0,
        }
    }
    pub fn units(mut self, units: u32) -> Self {
        self.units = units;
        self
    }
    pub fn hold_ms(mut self, ms: u64) -> Self {
        self.hold_ms = ms;
        self
    }
}

/// A lease's identity: its slot and the slot's claim generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LeaseId {
    pub index: u32,
    pub generation: u32,
}

impl std::fmt::Display for LeaseId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{}/{}", self.index, self.generation)
    }
}

/// A shared fair-share table.
pub struct Table {
    seg: Segment,
    pools: HashMap<String, usize>,
    /// `pid << 32 | slot + 1` of this process's registration; 0 before it.
    reg: AtomicU64,
    reg_lock: Mutex<()>,
    /// Where this process's next lease search starts.
    hint: AtomicU64,
    /// A blocked acquirer's backup sweep period, in µs.
    sweep_us: AtomicU64,
    /// This process's anchor for its registration, with the pid it was started by (a
    /// forked child inherits the parent's entry, whose thread it does not have).
    anchor: Mutex<Option<(u64, anchor::Anchor)>>,
}

impl Table {
    fn from_segment(seg: Segment) -> Table {
        let pools = seg
            .config()
            .pools
            .iter()
            .enumerate()
            .map(|(i, p)| (p.name.clone(), i))
            .collect();
        Table {
            seg,
            pools,
            reg: AtomicU64::new(0),
            reg_lock: Mutex::new(()),
            hint: AtomicU64::new(0),
            sweep_us: AtomicU64::new(DEFAULT_SWEEP.as_micros() as u64),
            anchor: Mutex::new(None),
        }
    }

    /// Creates segment `name` with mode 0600. Fails if it exists.
    pub fn create(name: &str, cfg: &Config) -> Result<Table> {
        Self::create_with_mode(name, cfg, 0o600)
    }

    /// Creates segment `name` with file mode `mode` (e.g. 0o660 for a group).
    pub fn create_with_mode(name: &str, cfg: &Config, mode: u32) -> Result<Table> {
        Segment::create(name, cfg, mode).map(Self::from_segment)
    }

    /// Opens an existing segment with whatever config it was created with.
    pub fn open(name: &str) -> Result<Table> {
        Self::open_with(name, None, segment::READY_WAIT)
    }

    /// Opens an existing segment, which must have exactly config `cfg`.
    pub fn open_expecting(name: &str, cfg: &Config) -> Result<Table> {
        Self::open_with(name, Some(cfg), segment::READY_WAIT)
    }

    /// Opens an existing segment (with `expected`, it must have exactly that config),
    /// waiting up to `ready_wait` for a creator that has not finished building it.
    pub fn open_with(
        name: &str,
        expected: Option<&Config>,
        ready_wait: std::time::Duration,
    ) -> Result<Table> {
        Segment::open(name, expected, ready_wait).map(Self::from_segment)
    }

    /// Opens segment `name`, creating it with `cfg` if it does not exist.
    pub fn open_or_create(name: &str, cfg: &Config) -> Result<Table> {
        match Self::create(name, cfg) {
            Err(Error::AlreadyExists { .. }) => Self::open_expecting(name, cfg),
            other => other,
        }
    }

    /// Removes segment `name` from `/dev/shm` (mappings stay valid).
    pub fn unlink(name: &str) -> Result<()> {
        segment::unlink(name)
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
    #[doc(hidden)]
    pub fn region(&self) -> &Segment {
        &self.seg
    }

    fn pool_index(&self, pool: &str) -> Result<usize> {
        self.pools
            .get(pool)
            .copied()
            .ok_or_else(|| Error::UnknownPool {
                pool: pool.to_owned(),
                known: self
                    .config()
                    .pools
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// Registers this process as a worker now (it would be on its first acquire), so
    /// that `per_worker` pools count it. Returns its process slot.
    pub fn register(&self) -> Result<usize> {
        self.process_slot()
    }

    /// This process's slot, registering it (again, after a fork) if needed.
    pub fn process_slot(&self) -> Result<usize> {
        let pid = crate::selfid::pid() as u64;
        match self.registered(pid) {
            Some(slot) => Ok(slot),
            None => self.register_slow(pid),
        }
    }

    /// The slot this handle registered for process `pid`, if it did (a forked child's
    /// inherited handle names the parent's).
    fn registered(&self, pid: u64) -> Option<usize> {
        // Acquire: pairs with the Release store in `register_slow` (same process, other
        // thread), so the registration it names is complete.
        let r = self.reg.load(Acquire);
        (r >> 32 == pid && r as u32 != 0).then(|| (r as u32 - 1) as usize)
    }

    #[cold]
    fn register_slow(&self, pid: u64) -> Result<usize> {
        let _g = self.reg_lock.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = self.registered(pid) {
            return Ok(slot);
        }
        let (pid32, start) = liveness::me();
        let now = clock::now_ms();
        let slot = match liveness::register(&self.seg, pid32, start, now) {
            Err(Error::ProcessTableFull { .. }) => {
                self.reap_dead()?;
                liveness::register(&self.seg, pid32, start, now)?
            }
            other => other?,
        };
        crate::ops::crash_point("register.live")?;
        // The anchor makes our death wake waiters. Without one (it could not start) we
        // are judged by `/proc`, through the sweeps; `Snapshot` shows which processes
        // are anchored.
        let word = self.seg.geometry().procs_off
            + slot * crate::layout::RECORD
            + std::mem::offset_of!(crate::layout::ProcRec, owner_futex);
        let attached = anchor::attach(self.seg.file(), word as u64).ok();
        let mut a = self.anchor.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, inherited)) = a.take() {
            // The parent's: its thread does not exist here; leave it alone.
            std::mem::forget(inherited);
        }
        *a = attached.map(|x| (pid, x));
        drop(a);
        // Release: see the Acquire load in `process_slot`.
        self.reg.store(pid << 32 | (slot as u64 + 1), Release);
        crate::capacity::recompute(&self.seg, self.config());
        Ok(slot)
    }

    /// `try_acquire_at` with the monotonic clock.
    pub fn try_acquire(&self, req: &Request<'_>) -> Result<Result<Lease<'_>, Refusal>> {
        self.acquire_inner(req, clock::now_ms(), false)
    }

    /// Applies the fair-share rule at time `now` (ms; any monotonic base, at least 1).
    /// `Ok(Err(refusal))` is a refusal; `Err` is something wrong with the request or
    /// the table.
    ///
    /// A guard from here that is dropped (not released with `release_at`) releases at
    /// this same `now`, so a replayed sequence never mixes in the real clock.
    pub fn try_acquire_at(
        &self,
        req: &Request<'_>,
        now: u64,
    ) -> Result<Result<Lease<'_>, Refusal>> {
        self.acquire_inner(req, now, true)
    }

    fn acquire_inner(
        &self,
        req: &Request<'_>,
        now: u64,
        explicit: bool,
    ) -> Result<Result<Lease<'_>, Refusal>> {
        let p = self.pool_index(req.pool)?;
        check_name_bytes(req.tenant.as_bytes()).map_err(|why| Error::InvalidTenant {
            name: req.tenant.to_owned(),
            why,
        })?;
        if req.units == 0 {
            return Err(Error::InvalidRequest("asked for 0 units".into()));
        }
        // Registered first: a per_worker pool counts this process before sizing.
        let slot = self.process_slot()?;
        // Relaxed: capacity and floor are inputs, frozen into the lease descriptor; the
        // decision made under serialization uses the frozen values.
        let limits = self.seg.pool(p).limits.load(Relaxed);
        let cap = crate::layout::pair::lo(limits);
        if req.units > cap {
            return Err(Error::UnitsExceedCapacity {
                pool: req.pool.to_owned(),
                units: req.units,
                capacity: cap,
            });
        }
        // The configured weight is looked up only when the name claims a slot.
        let weight = || self.config().weight_of(req.tenant.as_bytes());
        let t = tenants::find_or_claim(&self.seg, req.tenant.as_bytes(), &weight, slot, &|s| {
            liveness::slot_dead(&self.seg, s, &liveness::is_dead)
        })?;
        let attempt = Attempt {
            pool: p,
            tenant: t,
            units: req.units,
            hold_ms: req.hold_ms,
            now: now.max(1),
            window_ms: self.config().pools[p].window_ms as u64,
            // The weight the tenant was claimed with (all processes share the config).
            // Relaxed: written before the slot's READY, which `find_or_claim` acquired.
            weight: self.seg.tenant(t).weight.load(Relaxed).max(1),
            tid: crate::selfid::tid(),
            limits,
        };
        // Relaxed, and a load and a store rather than an RMW: a hint only (threads that
        // race may start at the same lease; any start finds a free one if there is one).
        let hint = self.hint.load(Relaxed);
        self.hint.store(hint.wrapping_add(1), Relaxed);
        let hint = hint as usize;
        match admission::try_acquire(&self.seg, slot, hint, &attempt)? {
            Admitted::Granted { lease, desc } => Ok(Ok(Lease {
                table: self,
                id: LeaseId {
                    index: lease as u32,
                    generation: desc.generation,
                },
                desc,
                pool: p,
                units: req.units,
                live: true,
                explicit_now: explicit.then_some(now),
            })),
            Admitted::Refused(facts) => Ok(Err(Refusal::from_facts(
                req.pool, req.tenant, req.units, &facts,
            ))),
        }
    }

    /// Like `try_acquire`, but when refused sleeps until a release makes room or
    /// `timeout` runs out; then the refusal is `timed_out`, saying what it waited for.
    /// Under-share waiters are woken first; a release of `n` units wakes at most `n`.
    ///
    /// A sleeping waiter also watches the owner words of the processes it waits behind
    /// (see `anchor`): when one dies the kernel wakes a watcher, which reaps it and so
    /// returns its permits at once. As a backup, a waiter sweeps for dead processes
    /// every [`Table::set_sweep_interval`] (default [`DEFAULT_SWEEP`]).
    pub fn acquire(
        &self,
        req: &Request<'_>,
        timeout: Duration,
    ) -> Result<Result<Lease<'_>, Refusal>> {
        let start = Instant::now();
        let deadline = start + timeout;
        let p = self.pool_index(req.pool)?;
        let pool = self.seg.pool(p);
        // Relaxed: a tuning value, no data hangs on it.
        let sweep = Duration::from_micros(self.sweep_us.load(Relaxed));
        let mut next_sweep = start + sweep;
        let mut pause = DYING_PAUSE;
        let mut woken_at: Option<u64> = None;
        let mut watch = Vec::new();
        loop {
            // SeqCst, these three: the waiter's half of the handshake in `waiting`: we
            // announce ourselves, read `wake`, then try (whose first load of the pool
            // word is SeqCst); a release we do not see will see us and bump `wake`.
            pool.waiters.fetch_add(1, SeqCst);
            let seqs = pool.wake.load(SeqCst);
            let refusal = match self.try_acquire(req) {
                Ok(Ok(lease)) => {
                    pool.waiters.fetch_sub(1, SeqCst);
                    return Ok(Ok(lease));
                }
                Ok(Err(r)) => r,
                Err(e) => {
                    pool.waiters.fetch_sub(1, SeqCst);
                    return Err(e);
                }
            };
            let now = Instant::now();
            if now >= deadline {
                pool.waiters.fetch_sub(1, SeqCst);
                return Ok(Err(self.timed_out(req, refusal, now - start)));
            }
            let class = if refusal.reason == Reason::OverShare {
                Class::Over
            } else {
                Class::Under
            };
            if woken_at.is_some_and(|w| w != seqs) {
                // Woken, yet refused: pass the wake on once, so a waiter that could use
                // the permit is not left asleep behind us.
                waiting::pass_on(pool);
            }
            watch.clear();
            let behind = match self.process_slot() {
                Ok(me) => anchor::watch(&self.seg, me, p, &mut watch),
                Err(e) => {
                    pool.waiters.fetch_sub(1, SeqCst);
                    return Err(e);
                }
            };
            let until = deadline.min(next_sweep);
            if behind.dying > 0 {
                pool.waiters.fetch_sub(1, SeqCst);
                // A process died: reap it now. If it is still exiting (its anchor went
                // first), wait for its last thread to go, then look again.
                if self.reap_dead()?.is_empty() {
                    let left = until.saturating_duration_since(Instant::now());
                    liveness::wait_exit(behind.dying_procs(), pause.min(left));
                    pause = (pause * 2).min(sweep);
                }
                continue;
            }
            let seq = waiting::half(seqs, class);
            if waiting::half(pool.wake.load(SeqCst), class) == seq {
                waiting::sleep(pool, class, seq, &watch, until);
            }
            pool.waiters.fetch_sub(1, SeqCst);
            woken_at = Some(seqs);
            let now = Instant::now();
            if now >= next_sweep {
                self.reap_dead()?; // the backup sweep: wakes us if a holder died
                next_sweep = now + sweep;
            }
        }
    }

    /// Sets how often a blocked `acquire` sweeps for dead processes itself (the backup
    /// to the robust-futex wake), at least 1 ms.
    pub fn set_sweep_interval(&self, every: Duration) {
        // Relaxed: a tuning value, read once per `acquire`.
        self.sweep_us.store(
            every.as_micros().clamp(1000, u64::MAX as u128) as u64,
            Relaxed,
        );
    }

    fn timed_out(&self, req: &Request<'_>, last: Refusal, waited: Duration) -> Refusal {
        if let (Some(t), Ok(p)) = (
            tenants::find(&self.seg, req.tenant.as_bytes()),
            self.pool_index(req.pool),
        ) {
            // Relaxed: a statistic.
            self.seg.tenant_pool(p, t).refusals[Reason::TimedOut as usize - 1]
                .fetch_add(1, Relaxed);
        }
        Refusal {
            reason: Reason::TimedOut,
            explanation: format!(
                "timed out after {} ms waiting for {} of pool {:?} for tenant {:?}; what blocked it last: {}",
                waited.as_millis(),
                req.units,
                req.pool,
                req.tenant,
                last.explanation
            ),
            ..last
        }
    }

    /// Releases a lease by id, at `now`. The lease must belong to this process.
    pub fn release_id_at(&self, id: LeaseId, now: u64) -> Result<()> {
        self.release_inner(id, None, now)
    }

    fn release_inner(&self, id: LeaseId, known: Option<&Desc>, now: u64) -> Result<()> {
        let l = id.index as usize;
        let geo = self.seg.geometry();
        if l >= geo.leases() {
            return Err(Error::InvalidRequest(format!(
                "lease {id} is beyond the lease table"
            )));
        }
        if self.registered(crate::selfid::pid() as u64) != Some(l / geo.leases_per_proc) {
            return Err(Error::NotOwner {
                lease: id.to_string(),
            });
        }
        let d = admission::release(&self.seg, l, id.generation, known, now.max(1))?;
        waiting::released(self.seg.pool(d.pool as usize), d.units);
        Ok(())
    }

    pub fn release_id(&self, id: LeaseId) -> Result<()> {
        self.release_id_at(id, clock::now_ms())
    }

    /// A snapshot of the whole table, read now.
    pub fn snapshot(&self) -> Snapshot {
        self.snapshot_at(clock::now_ms())
    }

    /// A snapshot with activity judged at `now`.
    pub fn snapshot_at(&self, now: u64) -> Snapshot {
        stats::snapshot(&self.seg, self.config(), now)
    }

    /// Returns the permits of every registered process that has died.
    pub fn reap_dead(&self) -> Result<Vec<Reaped>> {
        let me = crate::selfid::pid();
        let mut out = Vec::new();
        for s in 0..self.seg.geometry().procs {
            if let Some(r) = recovery::reap_slot(&self.seg, s, me, &liveness::is_dead)? {
                out.push(r);
            }
        }
        self.announce(&out);
        Ok(out)
    }

    /// After slots were emptied: resizes `per_worker` pools and wakes waiters for the
    /// units that came back.
    fn announce(&self, out: &[Reaped]) {
        if !out.is_empty() {
            crate::capacity::recompute(&self.seg, self.config());
            for (p, &units) in out.iter().flat_map(|r| r.units_returned.iter().enumerate()) {
                if units > 0 {
                    waiting::released(self.seg.pool(p), units.min(u32::MAX as u64) as u32);
                }
            }
        }
    }
}

impl Drop for Table {
    /// Deregisters this process if this handle registered it: detaches its anchor,
    /// releases what leases detached with `Lease::into_id` still hold, and frees its
    /// slot, so opening and dropping tables leaks neither slots nor threads. A forked
    /// child's inherited handle that never registered the child touches nothing.
    fn drop(&mut self) {
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
        if let Some(slot) = self.registered(pid) {
            if let Ok(Some(gone)) = recovery::retire_slot(&self.seg, slot, pid as u32) {
                self.announce(&[gone]);
            }
        }
    }
}

/// A granted lease; released on drop (or explicitly, to see errors).
#[must_use = "a lease is released as soon as it is dropped"]
pub struct Lease<'t> {
    table: &'t Table,
    id: LeaseId,
    /// The descriptor as granted, so that releasing need not read it back.
    desc: Desc,
    pool: usize,
    units: u32,
    live: bool,
    /// The `now` of an explicit-time acquire, used again when the guard is dropped.
    explicit_now: Option<u64>,
}

impl Lease<'_> {
    pub fn id(&self) -> LeaseId {
        self.id
    }
    pub fn units(&self) -> u32 {
        self.units
    }
    pub fn pool(&self) -> &str {
        &self.table.config().pools[self.pool].name
    }
    pub fn release(self) -> Result<()> {
        self.release_at(clock::now_ms())
    }
    pub fn release_at(mut self, now: u64) -> Result<()> {
        self.live = false;
        self.table.release_inner(self.id, Some(&self.desc), now)
    }
    /// Detaches the guard: the lease stays held until `Table::release_id`.
    pub fn into_id(mut self) -> LeaseId {
        self.live = false;
        self.id
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if self.live {
            // A guard inherited across fork is not ours to release (NotOwner): the
            // parent still holds the lease. Any other error was a corrupt table.
            let now = self.explicit_now.unwrap_or_else(clock::now_ms);
            let _ = self.table.release_inner(self.id, Some(&self.desc), now);
        }
    }
}

impl std::fmt::Debug for Lease<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Lease({} of {:?}, {} units)",
            self.id,
            self.pool(),
            self.units
        )
    }
}
