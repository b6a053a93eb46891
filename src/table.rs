//! `Table`: the friendly Rust façade over the [`Engine`]. Requests by name, a lease
//! guard that releases on drop (borrowed, [`Lease`], or owned over an `Arc<Table>`,
//! [`OwnedLease`]), refusals with names and explanations, and the blocking acquire.

use std::borrow::Borrow;
use std::sync::Arc;
use std::time::Duration;

use crate::clock;
use crate::config::Config;
use crate::engine::{Engine, LeaseId, Outcome, PoolId, TenantId};
use crate::error::{Error, Result};
use crate::recovery::Reaped;
use crate::refusal::Refusal;
use crate::segment::{self, Segment};
use crate::stats::Snapshot;
use crate::sync::{AtomicU64, Ordering::*};
use crate::waiting::Cancel;

/// How often a blocked acquirer sweeps for dead processes itself, by default: the
/// backup to the kernel's robust-futex wake (see `Table::acquire`).
pub const DEFAULT_SWEEP: Duration = Duration::from_millis(250);

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

/// A shared fair-share table.
pub struct Table {
    engine: Engine,
    /// A blocked acquirer's backup sweep period, in µs.
    sweep_us: AtomicU64,
}

impl Table {
    fn from_segment(seg: Segment) -> Table {
        Self::from_engine(Engine::from_segment(seg))
    }

    fn from_engine(engine: Engine) -> Table {
        Table {
            engine,
            sweep_us: AtomicU64::new(DEFAULT_SWEEP.as_micros() as u64),
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
    pub fn open_with(name: &str, expected: Option<&Config>, ready_wait: Duration) -> Result<Table> {
        Segment::open(name, expected, ready_wait).map(Self::from_segment)
    }

    /// Opens an existing segment to observe it: read-only, never registered, so it
    /// changes nothing and counts as no worker. Whoever may read the file may observe
    /// it (root any user's). Snapshots work; acquiring, releasing, claiming a tenant
    /// and reaping are `Error::ReadOnly`.
    pub fn open_observer(name: &str) -> Result<Table> {
        Segment::open_read_only(name, segment::READY_WAIT).map(Self::from_segment)
    }

    /// Opens an existing segment for an administrative tool (`shmtool rates` sets a
    /// tenant's rates through one): it may do whatever a worker's handle does, but when
    /// it registers (to claim a tenant's name, say) it does so as a tool, which no
    /// `per_worker` pool counts as a worker, so it never changes their tickets. A
    /// worker's own handles should be [`Table::open`]'s.
    pub fn open_tool(name: &str) -> Result<Table> {
        Segment::open(name, None, segment::READY_WAIT)
            .map(|seg| Self::from_engine(Engine::from_segment(seg).into_tool()))
    }

    /// Opens segment `name`, creating it with `cfg` if it does not exist. A file there
    /// that its creator never made ready (killed between creating the file and marking
    /// it ready: `NotReady`, a zero header, a file shorter than a header) is replaced,
    /// after the usual wait for its creator, if the creator is gone: a creator holds
    /// the file's `flock` until the segment is ready (see `segment::abandoned`). Every
    /// other error is returned as it is, `ConfigMismatch` included.
    pub fn open_or_create(name: &str, cfg: &Config) -> Result<Table> {
        // Rounds: a replaced file may be raced for by other starters; one of them
        // creates it and the others open theirs.
        for _ in 0..3 {
            match Self::create(name, cfg) {
                Err(Error::AlreadyExists { .. }) => {}
                other => return other,
            }
            // The file this open will judge (if another replaces it meanwhile, the
            // judgement below finds it gone, and the next round opens the new one).
            let seen = segment::named_file_id(name).ok();
            match Self::open_expecting(name, cfg) {
                Err(e) if segment::is_never_ready_error(&e) => {
                    if segment::remove_if_never_ready_seen(name, seen)?
                        != segment::Abandoned::Removed
                    {
                        return Err(e);
                    }
                }
                other => return other,
            }
        }
        Self::open_expecting(name, cfg)
    }

    /// Removes segment `name` from `/dev/shm` (mappings stay valid).
    pub fn unlink(name: &str) -> Result<()> {
        segment::unlink(name)
    }

    /// The handle-based engine under this table.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }
    pub fn name(&self) -> &str {
        self.engine.name()
    }
    pub fn config(&self) -> &Config {
        self.engine.config()
    }
    /// `Err` with what an acquire of `units` from `pool` would return because the
    /// config can never grant it: `UnitsExceedCapacity` for more than a fixed pool
    /// holds, or than a `per_worker` pool holds with a worker in every process slot;
    /// `InvalidRequest` for 0; `UnknownPool`. Claims and registers nothing: what a
    /// middleware checks its configured units with when it is built (the C ABI's
    /// `fairshm_check_units`).
    pub fn check_units(&self, pool: &str, units: u32) -> Result<()> {
        let p = self.engine.pool(pool)?;
        self.engine.never_granted(p, units)
    }
    pub fn size(&self) -> usize {
        self.engine.size()
    }
    #[doc(hidden)]
    pub fn region(&self) -> &Segment {
        self.engine.seg()
    }

    /// Registers this process as a worker now (it would be on its first acquire), so
    /// that `per_worker` pools count it. Returns its process slot.
    pub fn register(&self) -> Result<usize> {
        self.engine.register()
    }

    /// This process's slot, registering it (again, after a fork) if needed.
    pub fn process_slot(&self) -> Result<usize> {
        self.engine.process_slot()
    }

    /// `try_acquire_at` with the monotonic clock.
    pub fn try_acquire(&self, req: &Request<'_>) -> Result<Result<Lease<'_>, Refusal>> {
        self.acquire_inner(req, clock::now_ms(), None)
    }

    /// Applies the fair-share rule at time `now` (ms; any monotonic base, 0 included).
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
        self.acquire_inner(req, now, Some(now))
    }

    /// The handles of a request's names. (Registration, which a `per_worker` pool
    /// needs before it is sized, is the engine's first step of every acquire.) A new
    /// tenant name claims a directory slot, kept for the segment's life, only for a
    /// request that could be granted (`Engine::never_granted`); a known name costs one
    /// lookup, as before, and the engine's acquire checks the request itself.
    fn resolve(&self, req: &Request<'_>) -> Result<(PoolId, TenantId)> {
        let pool = self.engine.pool(req.pool)?;
        let tenant = match self.engine.lookup_tenant(req.tenant)? {
            Some(t) => t,
            None => {
                self.engine.never_granted(pool, req.units)?;
                self.engine.tenant(req.tenant)?
            }
        };
        Ok((pool, tenant))
    }

    fn acquire_inner(
        &self,
        req: &Request<'_>,
        now: u64,
        explicit: Option<u64>,
    ) -> Result<Result<Lease<'_>, Refusal>> {
        let (pool, tenant) = self.resolve(req)?;
        match self
            .engine
            .acquire(pool, tenant, req.units, req.hold_ms, now)?
        {
            Outcome::Granted(id) => Ok(Ok(Lease {
                table: self,
                inner: Held::new(id, pool, req.units, explicit),
            })),
            Outcome::Refused(facts) => Ok(Err(Refusal::new(req.pool, req.tenant, facts))),
        }
    }

    /// Like `try_acquire`, but when refused sleeps until a release makes room or
    /// `timeout` runs out; then the refusal is `timed_out`, saying what it waited for.
    /// Under-share waiters are woken first; a release of `n` units wakes at most `n`.
    /// Refused by the tenant's rates, it sleeps until the next token; when that comes
    /// after the timeout, it returns the rate's refusal (`rate_limited` or
    /// `work_debt`) at once instead of waiting for nothing.
    ///
    /// When a process it waits behind dies, the kernel wakes a watcher of that process
    /// (see `anchor`: this process's own anchor among them), which reaps it and so
    /// returns its permits at once, waking the waiter. A waiter in a process whose
    /// anchor could not start watches those processes itself. As a backup, a waiter
    /// sweeps for dead processes every [`Table::set_sweep_interval`] (default
    /// [`DEFAULT_SWEEP`]).
    pub fn acquire(
        &self,
        req: &Request<'_>,
        timeout: Duration,
    ) -> Result<Result<Lease<'_>, Refusal>> {
        self.acquire_cancellable(req, timeout, None)
    }

    /// `acquire`, which another thread can end early with `cancel`: the refusal is then
    /// `cancelled` (what a Python `KeyboardInterrupt` or a Ruby `Thread#raise` needs).
    pub fn acquire_cancellable(
        &self,
        req: &Request<'_>,
        timeout: Duration,
        cancel: Option<&Cancel>,
    ) -> Result<Result<Lease<'_>, Refusal>> {
        let (pool, tenant) = self.resolve(req)?;
        // Relaxed: a tuning value, read once per `acquire`.
        let sweep = Duration::from_micros(self.sweep_us.load(Relaxed));
        let outcome = crate::blocking::acquire(
            &self.engine,
            pool,
            tenant,
            req.units,
            req.hold_ms,
            timeout,
            sweep,
            cancel,
            false,
            crate::engine::Asked::No,
        )?;
        match outcome {
            Ok(id) => Ok(Ok(Lease {
                table: self,
                inner: Held::new(id, pool, req.units, None),
            })),
            Err((facts, waited)) => {
                let mut r = Refusal::new(req.pool, req.tenant, facts.last);
                r.reason = facts.reason;
                r.waited_ms = Some(waited.as_millis().min(u32::MAX as u128) as u32);
                Ok(Err(r))
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

    /// How often a blocked `acquire` sweeps for dead processes itself.
    pub fn sweep_interval(&self) -> Duration {
        // Relaxed: a tuning value.
        Duration::from_micros(self.sweep_us.load(Relaxed))
    }

    /// Releases a lease by id, at `now`. The lease must belong to this process.
    pub fn release_id_at(&self, id: LeaseId, now: u64) -> Result<()> {
        self.engine.release(id, now).map(|_| ())
    }

    pub fn release_id(&self, id: LeaseId) -> Result<()> {
        self.release_id_at(id, clock::now_ms())
    }

    /// Sets `tenant`'s rates: requests per second and work units per second, each a
    /// token bucket with a burst of one second's worth; 0 is unbounded. Applies at once
    /// to every process: over the request rate an acquire is refused `rate_limited`,
    /// in work debt `work_debt`, before any pool is touched.
    pub fn set_rates(
        &self,
        tenant: &str,
        requests_per_s: u32,
        work_units_per_s: u32,
    ) -> Result<()> {
        let t = self.engine.tenant(tenant)?;
        self.engine.set_rates(t, requests_per_s, work_units_per_s)
    }

    /// `tenant`'s rates: (requests per second, work units per second); 0 is unbounded,
    /// as are the rates of a tenant not seen yet (nothing is claimed). A name no tenant
    /// can have is `InvalidTenant`, as everywhere else.
    pub fn rates(&self, tenant: &str) -> Result<(u32, u32)> {
        match self.engine.lookup_tenant(tenant)? {
            Some(t) => self.engine.rates(t),
            None => Ok((0, 0)),
        }
    }

    /// Charges `units` of work done for `tenant` now (after the work: it may put the
    /// tenant in debt). Returns the ms until it is out of debt (0: not in debt).
    pub fn charge(&self, tenant: &str, units: u64) -> Result<u64> {
        self.charge_at(tenant, units, crate::clock::now_ms())
    }

    /// [`Table::charge`] at an explicit `now` (ms, the engine's clock).
    pub fn charge_at(&self, tenant: &str, units: u64, now: u64) -> Result<u64> {
        let t = self.engine.tenant(tenant)?;
        self.engine.charge(t, units, now)
    }

    /// Notes that a request for `pool` waited `queued_us` in the server's own queue
    /// (from the front proxy's `X-Request-Start` to the application) before it asked:
    /// while such waits show a queue, a tenant over its share is told to come
    /// back later, so that its retries stay out of that queue (see "Retry-after" in
    /// `shm-layout.md`). The middlewares call it for every request that carries the
    /// header.
    pub fn note_queue(&self, pool: &str, queued_us: u64) -> Result<()> {
        self.note_queue_at(pool, queued_us, crate::clock::now_ms())
    }

    /// [`Table::note_queue`] at an explicit `now` (ms, the engine's clock).
    pub fn note_queue_at(&self, pool: &str, queued_us: u64, now: u64) -> Result<()> {
        let p = self.engine.pool(pool)?;
        self.engine.note_queue(p, queued_us, now)
    }

    /// A snapshot of the whole table, read now.
    pub fn snapshot(&self) -> Snapshot {
        self.engine.snapshot()
    }

    /// A snapshot with activity judged at `now`.
    pub fn snapshot_at(&self, now: u64) -> Snapshot {
        self.engine.snapshot_at(now)
    }

    /// Returns the permits of every registered process that has died.
    pub fn reap_dead(&self) -> Result<Vec<Reaped>> {
        self.engine.reap_dead()
    }

    /// A snapshot, with the segment's size checked first: `Err(Truncated)` instead of
    /// the SIGBUS that reading a truncated mapping raises.
    pub fn try_snapshot(&self) -> Result<Snapshot> {
        self.engine.try_snapshot()
    }

    /// [`Table::try_snapshot`] with activity judged at `now`.
    pub fn try_snapshot_at(&self, now: u64) -> Result<Snapshot> {
        self.engine.try_snapshot_at(now)
    }

    /// Checks the invariants the lease records let one check (see [`Engine::check`]):
    /// one line per violation, empty when the table is sound.
    pub fn check(&self) -> Result<Vec<String>> {
        self.engine.check()
    }

    /// Repairs the table in place while it is in use (see [`Engine::repair`]):
    /// rebuilds every pool's counters from its lease records, and clears or
    /// quarantines what no version writes.
    pub fn repair(&self) -> Result<crate::Repaired> {
        self.engine.repair()
    }

    /// This process's resident leases that were revoked and are not yet released (the
    /// objects to put to sleep).
    pub fn revoked_leases(&self) -> Vec<LeaseId> {
        self.engine.revoked_leases()
    }

    /// Like `try_acquire`, with a guard that owns a reference to the table, so it can
    /// be kept or moved without a lifetime (a binding's handle, a spawned task).
    pub fn try_acquire_owned(
        self: &Arc<Self>,
        req: &Request<'_>,
    ) -> Result<Result<OwnedLease, Refusal>> {
        Ok(match self.try_acquire(req)? {
            Ok(lease) => {
                let inner = lease.into_held();
                Ok(OwnedLease {
                    table: Arc::clone(self),
                    inner,
                })
            }
            Err(r) => Err(r),
        })
    }
}

/// What a guard holds, shared by [`Lease`] and [`OwnedLease`].
#[derive(Clone, Copy, Debug)]
struct Held {
    id: LeaseId,
    pool: PoolId,
    units: u32,
    live: bool,
    /// The `now` of an explicit-time acquire, used again when the guard is dropped.
    explicit_now: Option<u64>,
}

impl Held {
    fn new(id: LeaseId, pool: PoolId, units: u32, explicit_now: Option<u64>) -> Held {
        Held {
            id,
            pool,
            units,
            live: true,
            explicit_now,
        }
    }

    fn release_at(&mut self, engine: &Engine, now: u64) -> Result<()> {
        self.live = false;
        engine.release(self.id, now).map(|_| ())
    }

    fn drop_release(&mut self, engine: &Engine) {
        if self.live {
            // A guard inherited across fork is not ours to release (NotOwner): the
            // parent still holds the lease. Any other error was a corrupt table.
            let now = self.explicit_now.unwrap_or_else(clock::now_ms);
            let _ = self.release_at(engine, now);
        }
    }
}

/// A granted lease, over any handle to its table (`&Table` or `Arc<Table>`); released
/// on drop, or explicitly to see errors. Use the aliases [`Lease`] and [`OwnedLease`].
#[must_use = "a lease is released as soon as it is dropped"]
pub struct LeaseGuard<T: Borrow<Table>> {
    table: T,
    inner: Held,
}

/// A granted lease that borrows its table.
pub type Lease<'t> = LeaseGuard<&'t Table>;

/// A granted lease that owns a reference to its table, to keep or move without a
/// lifetime (a binding's handle, another thread).
pub type OwnedLease = LeaseGuard<Arc<Table>>;

impl<T: Borrow<Table>> LeaseGuard<T> {
    pub fn id(&self) -> LeaseId {
        self.inner.id
    }
    pub fn units(&self) -> u32 {
        self.inner.units
    }
    pub fn pool(&self) -> &str {
        self.table.borrow().engine.pool_name(self.inner.pool)
    }
    pub fn release(self) -> Result<()> {
        self.release_at(clock::now_ms())
    }
    pub fn release_at(mut self, now: u64) -> Result<()> {
        self.inner.release_at(&self.table.borrow().engine, now)
    }
    /// A resident (a lease of an `evict` pool): starts a call, during which it is never
    /// revoked. `Err(Revoked)` once it was revoked: put the object to sleep and
    /// release the lease.
    pub fn begin_call(&self) -> Result<()> {
        self.begin_call_at(clock::now_ms())
    }
    /// `begin_call` at an explicit `now` (ms).
    pub fn begin_call_at(&self, now: u64) -> Result<()> {
        self.table.borrow().engine.begin_call(self.inner.id, now)
    }
    /// Ends a call begun with `begin_call`; the resident is evictable again once its
    /// last call ends.
    pub fn end_call(&self) -> Result<()> {
        self.end_call_at(clock::now_ms())
    }
    /// `end_call` at an explicit `now` (ms).
    pub fn end_call_at(&self, now: u64) -> Result<()> {
        self.table.borrow().engine.end_call(self.inner.id, now)
    }
    /// Whether this resident was revoked (its permit passed to another acquire).
    pub fn is_revoked(&self) -> Result<bool> {
        Ok(self.table.borrow().engine.resident_status(self.inner.id)?
            == crate::residents::Status::Revoked)
    }
    /// Waits up to `timeout` for this resident to be revoked; `Ok(true)` once it is.
    pub fn wait_revoked(&self, timeout: Duration) -> Result<bool> {
        self.table
            .borrow()
            .engine
            .wait_revoked(self.inner.id, timeout)
    }
    /// Detaches the guard: the lease stays held until `Table::release_id`.
    pub fn into_id(mut self) -> LeaseId {
        self.inner.live = false;
        self.inner.id
    }
    fn into_held(mut self) -> Held {
        let held = self.inner;
        self.inner.live = false;
        held
    }
}

impl<T: Borrow<Table>> Drop for LeaseGuard<T> {
    fn drop(&mut self) {
        self.inner.drop_release(&self.table.borrow().engine);
    }
}

impl<T: Borrow<Table>> std::fmt::Debug for LeaseGuard<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Lease({} of {:?}, {} units)",
            self.inner.id,
            self.pool(),
            self.inner.units
        )
    }
}
