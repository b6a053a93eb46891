//! The guaranteed pools through the engine (handles, explicit `now`) and the table's
//! façade ([`Guaranteed`]).

use super::*;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::region::Region;
use crate::sync::{AtomicU32, Backoff, Ordering::*};
use crate::table::Table;
use crate::waiting::Cancel;

std::thread_local! {
    /// This thread's buffers for its ops on guaranteed pools (see `shared::Scratch`).
    static SCRATCH: std::cell::RefCell<super::shared::Scratch> =
        std::cell::RefCell::new(super::shared::Scratch::new());
}

/// A release, with its place in the replay order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct GReleased {
    pub released: Released,
    pub seq: u64,
    pub call: Call,
}

/// Held while this process writes its blocks of a guaranteed pool (they have one
/// writer at a time: `shared`'s module docs). Process-local: the word holds the pid of
/// the holder's process, so a child forked while a thread of its parent held it (the
/// child has no such thread) takes it over instead of waiting forever.
pub(crate) struct BlockLock<'a>(&'a AtomicU32);

impl<'a> BlockLock<'a> {
    pub(crate) fn take(word: &'a AtomicU32) -> BlockLock<'a> {
        let me = crate::selfid::pid();
        let backoff = Backoff::new();
        loop {
            // Relaxed: the CAS below is what orders.
            let cur = word.load(Relaxed);
            // Acquire: the previous holder's block writes happen before ours.
            if cur != me && word.compare_exchange(cur, me, Acquire, Relaxed).is_ok() {
                return BlockLock(word);
            }
            backoff.snooze();
        }
    }
}

impl Drop for BlockLock<'_> {
    fn drop(&mut self) {
        // Release: our block writes happen before the next holder's.
        self.0.store(0, Release);
    }
}

impl Engine {
    /// Resolves a guaranteed pool by name.
    pub fn guaranteed_pool(&self, name: &str) -> Result<GPoolId> {
        match self.config().guaranteed.iter().position(|g| g.name == name) {
            Some(i) => Ok(GPoolId(i as u32)),
            None => Err(self.unknown_guaranteed_pool(name)),
        }
    }

    /// The rules of a guaranteed pool.
    pub fn guaranteed_rules(&self, pool: GPoolId) -> Result<&Rules> {
        let seg = self.seg();
        if pool.index() >= seg.g_pools() {
            return Err(Error::InvalidRequest(format!(
                "guaranteed pool handle {} of a table with {}",
                pool.index(),
                seg.g_pools()
            )));
        }
        Ok(seg.g_rules(pool.index()))
    }

    /// Resolves one of a guaranteed pool's tenants (fixed at creation) by name.
    pub fn guaranteed_tenant(&self, pool: GPoolId, name: &str) -> Result<u16> {
        let rules = self.guaranteed_rules(pool)?;
        match rules.names.iter().position(|n| n == name) {
            Some(i) => Ok(i as u16),
            None => Err(Error::InvalidTenant {
                name: name.to_owned(),
                why: "not one of the guaranteed pool's tenants (they are fixed at creation)",
            }),
        }
    }

    /// Applies `call` (whose owner is this process's slot) to a guaranteed pool, once
    /// `check` (given the state it applies to, the pool's rules and that slot) passes;
    /// publishes nothing if it fails.
    fn guaranteed_apply(
        &self,
        pool: GPoolId,
        call: impl Fn(u16) -> Call,
        check: impl Fn(&State, &Rules, usize) -> Result<()>,
    ) -> Result<(Effect, u64, Call)> {
        self.writable("a guaranteed pool's acquire or release")?;
        let rules = self.guaranteed_rules(pool)?;
        let slot = self.process_slot()?;
        let call = call(slot as u16);
        let _lock = BlockLock::take(&self.g_lock);
        let op = |scratch: &mut super::shared::Scratch| {
            super::shared::update_with(self.seg(), pool.index(), slot, scratch, |st| {
                check(st, rules, slot)?;
                // In place: an `Err` publishes nothing, and the next op reads afresh.
                st.apply_in_place(rules, call)
            })
        };
        // The thread's buffers; fresh ones if they are in use (never, but a borrow
        // that fails must not panic) or gone (a call from a destructor at thread exit).
        let reused = SCRATCH.try_with(|c| c.try_borrow_mut().ok().map(|mut s| op(&mut s)));
        let (effect, seq) = match reused {
            Ok(Some(done)) => done,
            _ => op(&mut super::shared::Scratch::new()),
        }?;
        Ok((effect, seq, call))
    }

    /// Asks for `cost` (always recorded; it counts against the ceiling when the unit is
    /// `cost`) for tenant `tenant` of `pool`, declaring a hold of `hold_ms`, at `now`.
    pub fn guaranteed_acquire(
        &self,
        pool: GPoolId,
        tenant: u16,
        cost: u64,
        hold_ms: u64,
        now: u64,
    ) -> Result<GOutcome> {
        let acquire = |owner| Call::Acquire {
            tenant,
            cost,
            hold_ms,
            owner,
            now,
        };
        let (effect, seq, call) = self.guaranteed_apply(pool, acquire, |_, _, _| Ok(()))?;
        let rules = self.guaranteed_rules(pool)?;
        // The ask after a wake passes it on, granted or refused, while units are free
        // for the waiters of the releases it woke for (`pass`).
        self.guaranteed_pass_owed(pool, rules, now);
        Ok(match effect {
            Effect::Granted(grant) => GOutcome::Granted(GGrant {
                id: GLeaseId {
                    pool: pool.0,
                    no: grant.lease,
                },
                name: rules.lease_name(grant.tenant, grant.lease),
                grant,
                seq,
                call,
            }),
            Effect::Refused(facts) => GOutcome::Refused(GRefusal::new(rules, facts, seq, call)),
            other => {
                return Err(Error::Corrupt(format!("an acquire applied as {other:?}")));
            }
        })
    }

    /// Releases a guaranteed lease at `now`. A second release is `AlreadyReleased`; a
    /// lease acquired through another handle, or by another process, `NotOwner`, as in
    /// a fair-share pool.
    pub fn guaranteed_release(&self, id: GLeaseId, now: u64) -> Result<GReleased> {
        self.guaranteed_release_as(id, now, true)
    }

    /// [`Engine::guaranteed_release`], by its owner only (`owner_only`) or, for the
    /// repair of a lease whose owner slot is free, by this handle whoever owns it.
    pub(crate) fn guaranteed_release_as(
        &self,
        id: GLeaseId,
        now: u64,
        owner_only: bool,
    ) -> Result<GReleased> {
        // The waiters this release may serve (`waiters::release_bits`), from the state
        // it applies to (the last one tried, which the CAS published).
        let bits = std::cell::Cell::new(super::waiters::EVERY_BIT);
        // A lease no longer outstanding is `AlreadyReleased`, by the rules.
        let owned =
            |st: &State, rules: &Rules, slot: usize| match st.leases.iter().find(|l| l.no == id.no)
            {
                // Not outstanding: the rules answer `AlreadyReleased`, and nobody is woken.
                None => Ok(()),
                Some(l) if owner_only && l.owner as usize != slot => Err(self.not_owner(
                    format!("#{} of guaranteed pool {:?}", id.no, rules.name),
                    l.owner as usize,
                )),
                Some(l) => {
                    bits.set(super::waiters::release_bits(st, rules, l, now));
                    Ok(())
                }
            };
        let (effect, seq, call) = self.guaranteed_apply(
            GPoolId(id.pool),
            |_| Call::Release { lease: id.no, now },
            owned,
        )?;
        // The units came back: the first waiter they may serve is woken, and passes
        // the wake on while units are free for the others (`pass`).
        crate::waiting::guaranteed_freed(self.seg(), id.pool as usize, bits.get(), 1);
        match effect {
            Effect::Released(released) => Ok(GReleased {
                released,
                seq,
                call,
            }),
            other => Err(Error::Corrupt(format!("a release applied as {other:?}"))),
        }
    }

    /// A validated copy of a guaranteed pool's state.
    pub fn guaranteed_state(&self, pool: GPoolId) -> Result<State> {
        self.guaranteed_rules(pool)?;
        Ok(super::shared::read(self.seg(), pool.index())?.1)
    }

    /// `stats()` at `now`: guarantees, loans by lender and borrower, demand, idle
    /// times, deficits, reclaims, overrunning leases.
    pub fn guaranteed_stats(&self, pool: GPoolId, now: u64) -> Result<GStats> {
        Ok(self
            .guaranteed_state(pool)?
            .stats(self.guaranteed_rules(pool)?, now))
    }

    /// The fairness report: cost, request and weight shares, skew, `units_disagree`.
    pub fn guaranteed_report(&self, pool: GPoolId) -> Result<FairnessReport> {
        Ok(self
            .guaranteed_state(pool)?
            .fairness_report(self.guaranteed_rules(pool)?))
    }

    /// The weighted max-min allocation for current demand at `now`.
    pub fn guaranteed_plan(&self, pool: GPoolId, now: u64) -> Result<Vec<PlanEntry>> {
        Ok(self
            .guaranteed_state(pool)?
            .plan(self.guaranteed_rules(pool)?, now))
    }
}

/// A guaranteed pool of a [`Table`], by name: seed 001's API, with an explicit `now`
/// (ms) on every call.
///
/// ```no_run
/// use fairshm::{Config, FairnessUnit, GuaranteedConfig, Table};
/// let cfg = Config::with_pools(vec![]).guaranteed(
///     GuaranteedConfig::new("tokens", 100_000)
///         .unit(FairnessUnit::Cost)
///         .tenant("acme", 3)
///         .tenant("globex", 1)
///         .reclaim_horizon_ms(250)
///         .idle_after_ms(1_000),
/// );
/// let table = Table::open_or_create("fairshm-tokens", &cfg)?;
/// let tokens = table.guaranteed("tokens")?;
/// match tokens.acquire("acme", 4_200, 200, 0)? {
///     Ok(lease) => { /* call the model */ tokens.release(lease.id, 180)?; }
///     Err(refusal) => eprintln!("{:?} {:?} {}", refusal.reason, refusal.retry_after_ms, refusal),
/// }
/// # Ok::<(), fairshm::Error>(())
/// ```
pub struct Guaranteed<'t> {
    table: &'t Table,
    id: GPoolId,
}

impl Table {
    /// A guaranteed pool of this table, by name.
    pub fn guaranteed(&self, name: &str) -> Result<Guaranteed<'_>> {
        Ok(Guaranteed {
            table: self,
            id: self.engine().guaranteed_pool(name)?,
        })
    }
}

impl<'t> Guaranteed<'t> {
    pub fn id(&self) -> GPoolId {
        self.id
    }
    pub fn rules(&self) -> &'t Rules {
        self.table
            .engine()
            .guaranteed_rules(self.id)
            .expect("resolved by name")
    }
    /// Asks for `cost` for `tenant`, declaring a hold of `hold_ms`, at `now`. `Err` is
    /// something wrong with the request or the table; a refusal is `Ok(Err(..))`.
    pub fn acquire(
        &self,
        tenant: &str,
        cost: u64,
        hold_ms: u64,
        now: u64,
    ) -> Result<std::result::Result<GGrant, GRefusal>> {
        let e = self.table.engine();
        let t = e.guaranteed_tenant(self.id, tenant)?;
        Ok(
            match e.guaranteed_acquire(self.id, t, cost, hold_ms, now)? {
                GOutcome::Granted(g) => Ok(g),
                GOutcome::Refused(r) => Err(r),
            },
        )
    }
    pub fn release(&self, lease: GLeaseId, now: u64) -> Result<GReleased> {
        if lease.pool != self.id.0 {
            return Err(Error::InvalidRequest(format!(
                "lease of guaranteed pool {} released through pool {}",
                lease.pool, self.id.0
            )));
        }
        self.table.engine().guaranteed_release(lease, now)
    }
    pub fn stats(&self, now: u64) -> Result<GStats> {
        self.table.engine().guaranteed_stats(self.id, now)
    }
    pub fn fairness_report(&self) -> Result<FairnessReport> {
        self.table.engine().guaranteed_report(self.id)
    }
    pub fn plan(&self, now: u64) -> Result<Vec<PlanEntry>> {
        self.table.engine().guaranteed_plan(self.id, now)
    }

    /// [`Guaranteed::acquire`] on the library's clock, asking again until granted or
    /// `timeout` has passed: as soon as units come back to the pool (a release, a
    /// reap: they wake the pool's waiters), else at each refusal's retry-after, and at
    /// least every half `idle_after_ms`, so that the tenant's demand (which lapses
    /// `idle_after_ms` after its last ask) stays signalled and its guarantee frozen
    /// while it waits. Returns the last refusal when the time is up, and at once for a
    /// refusal that waiting cannot end (`hold_exceeds_reclaim_horizon` with no
    /// retry-after).
    pub fn acquire_timeout(
        &self,
        tenant: &str,
        cost: u64,
        hold_ms: u64,
        timeout: std::time::Duration,
    ) -> Result<std::result::Result<GGrant, GRefusal>> {
        self.acquire_timeout_cancellable(tenant, cost, hold_ms, timeout, None)
    }

    /// `acquire_timeout`, which another thread can end early with `cancel` (at once,
    /// even mid-sleep): it then returns the last refusal, as at the deadline. A token
    /// cancelled before the call still lets the first ask through: granted, the grant
    /// is returned.
    pub fn acquire_timeout_cancellable(
        &self,
        tenant: &str,
        cost: u64,
        hold_ms: u64,
        timeout: std::time::Duration,
        cancel: Option<&Cancel>,
    ) -> Result<std::result::Result<GGrant, GRefusal>> {
        let e = self.table.engine();
        let t = e.guaranteed_tenant(self.id, tenant)?;
        Ok(
            match e.guaranteed_acquire_wait(self.id, t, cost, hold_ms, timeout, cancel)? {
                GOutcome::Granted(g) => Ok(g),
                GOutcome::Refused(r) => Err(r),
            },
        )
    }
    pub fn state(&self) -> Result<State> {
        self.table.engine().guaranteed_state(self.id)
    }
}
