//! Waiting on a guaranteed pool through the engine: the wake word's value before an
//! ask, the sleep after a refusal (`waiters` has the handshake with the releasers), and
//! the whole wait, asking again until granted, timed out or cancelled.

use std::time::{Duration, Instant};

use super::*;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::region::Region;
use crate::sync::Ordering::*;
use crate::waiting::Cancel;

impl Engine {
    /// Before an ask that may end in a sleep: the value of `pool`'s wake word, to give
    /// [`Engine::guaranteed_sleep`] after a refusal (see `guaranteed::waiters`).
    pub fn guaranteed_wake_seen(&self, pool: GPoolId) -> Result<u32> {
        self.guaranteed_rules(pool)?;
        super::pass::before_ask(self.seg(), pool.index());
        Ok(super::waiters::seen(self.seg(), pool.index()))
    }

    /// After a refused ask: sleeps until units come back to `pool` (a release, a reap,
    /// a reset since `seen`, [`Engine::guaranteed_wake_seen`]'s value before the ask),
    /// `cancel` is cancelled, a signal arrives, or `until`. `true` when units came back
    /// (at once if they did before the sleep began), `false` otherwise; the caller asks
    /// again either way, or gives up at its deadline.
    ///
    /// A long sleep is announced (`sleep_until_ms`) half `idle_after_ms` at a time, so
    /// that a waiter that leaves or dies keeps releases waking nobody for no longer.
    ///
    /// Any release may wake it (it does not say who it is):
    /// [`Engine::guaranteed_sleep_as`] sleeps through the releases that cannot serve
    /// its request. A release wakes one waiter, which passes the wake on with its next
    /// [`Engine::guaranteed_acquire`] of the pool on the same thread, granted or
    /// refused (after the `guaranteed_wake_seen` before its ask on that thread): ask
    /// again after every `true`, or, ending the wait there, call
    /// [`Engine::guaranteed_wait_end`]; else a waiter behind this one waits for its own
    /// retry-after.
    pub fn guaranteed_sleep(
        &self,
        pool: GPoolId,
        seen: u32,
        until: std::time::Instant,
        cancel: Option<&Cancel>,
    ) -> Result<bool> {
        // A plain value: any move of the word is for it.
        let mut seen = seen as u64;
        self.guaranteed_sleep_bits(pool, &mut seen, (0, waiters::EVERY_BIT), until, cancel)
    }

    /// Before an ask of `tenant` that may end in a sleep of
    /// [`Engine::guaranteed_sleep_as`]: a cookie of the pool's wake word and of the
    /// epochs of the tenant's waiters (see `guaranteed::waiters`).
    pub fn guaranteed_wake_seen_as(&self, pool: GPoolId, tenant: u16) -> Result<u64> {
        self.guaranteed_tenant_checked(pool, tenant)?;
        super::pass::before_ask(self.seg(), pool.index());
        Ok(waiters::seen_as(self.seg(), pool.index(), tenant))
    }

    /// [`Engine::guaranteed_sleep`] for a refused request of `tenant` to hold for
    /// `hold_ms`, with the cookie `seen` that [`Engine::guaranteed_wake_seen_as`] gave
    /// before the ask: woken only by a release that may serve it (units back to its own
    /// guarantee, or, when it may borrow, to an idle lender: `guaranteed::waiters`), a
    /// reap, a reset, `cancel`, a signal or `until`. It sleeps on through the releases
    /// that cannot serve it, moving `seen` on past them, so that the next sleep with
    /// the same cookie (a caller sleeping in slices) does not take them for its own.
    pub fn guaranteed_sleep_as(
        &self,
        pool: GPoolId,
        tenant: u16,
        hold_ms: u64,
        seen: &mut u64,
        until: std::time::Instant,
        cancel: Option<&Cancel>,
    ) -> Result<bool> {
        let rules = self.guaranteed_tenant_checked(pool, tenant)?;
        let bits = waiters::waiter_bits(tenant, hold_ms, rules.horizon);
        self.guaranteed_sleep_bits(pool, seen, (tenant, bits), until, cancel)
    }

    /// After a wait on `pool` that ends without its next [`Engine::guaranteed_acquire`]
    /// (an exception, or a cancel, between the calls of a binding's loop): passes on the
    /// wake that ended this thread's last sleep, if it owes one (`guaranteed::pass`: a
    /// release wakes one waiter, which passes the wake on with its next ask). Nothing
    /// if it owes none, so a wait may call it whenever it ends.
    pub fn guaranteed_wait_end(&self, pool: GPoolId) -> Result<()> {
        let rules = self.guaranteed_rules(pool)?;
        self.guaranteed_pass_owed(pool, rules, crate::clock::now_ms());
        Ok(())
    }

    /// The pass this thread owes on `pool`, if any, made now: to the bits of the
    /// releases since its snapshot, if the pool's state at `now` has units free for
    /// them (`guaranteed::pass`). One thread-local read when nothing is owed.
    #[inline]
    pub(super) fn guaranteed_pass_owed(&self, pool: GPoolId, rules: &Rules, now: u64) {
        if !super::pass::owes_any() {
            return;
        }
        let (seg, gp) = (self.seg(), pool.index());
        super::pass::after_ask(seg, gp, |bits| {
            super::shared::read(seg, gp)
                .is_ok_and(|(_, st)| super::pass::may_serve(&st, rules, bits, now))
        });
    }

    /// The rules of `pool`, with `tenant` checked to be one of its tenants.
    fn guaranteed_tenant_checked(&self, pool: GPoolId, tenant: u16) -> Result<&Rules> {
        let rules = self.guaranteed_rules(pool)?;
        if tenant as usize >= rules.names.len() {
            return Err(Error::InvalidRequest(format!(
                "tenant handle {tenant} is not one of guaranteed pool {:?}'s {} tenants",
                rules.name,
                rules.names.len()
            )));
        }
        Ok(rules)
    }

    /// The sleep of a waiter of `tenant` sleeping with `bits`, from the cookie `seen`.
    fn guaranteed_sleep_bits(
        &self,
        pool: GPoolId,
        seen: &mut u64,
        (tenant, bits): (u16, u32),
        until: std::time::Instant,
        cancel: Option<&Cancel>,
    ) -> Result<bool> {
        // The announcement writes to the segment: an observer's mapping is read-only.
        self.writable("a guaranteed pool's wait")?;
        self.guaranteed_rules(pool)?;
        let (seg, gp) = (self.seg(), pool.index());
        let step = Duration::from_millis(waiters::announce_step_ms(seg, gp));
        // Whether `wake`, read as `now`, moved for this waiter; else the cookie moves on.
        let for_me = |seen: &mut u64, now: u32| {
            let mine = waiters::for_me(seg, gp, *seen, tenant, bits, now);
            if !mine {
                *seen = waiters::moved_on(*seen, now);
            }
            mine
        };
        loop {
            let now = Instant::now();
            let part_end = crate::clock::after(now, step).min(until);
            let part_ms = part_end.saturating_duration_since(now).as_millis() as u64;
            let end_ms = crate::clock::now_ms()
                .saturating_add(part_ms)
                .saturating_add(1);
            if for_me(seen, waiters::announce(seg, gp, end_ms)) {
                return Ok(true);
            }
            let on = waiters::cookie_wake(*seen);
            // A wake of the pool's word: for its bits (`FUTEX_WAIT_BITSET`: a release
            // that may serve it, a reap, a reset, or a process of a library before the
            // bits, which wakes every sleeper and adds no epochs), or, with a cancel
            // token, for any release (`futex_waitv` matches every bitset), which the
            // epochs tell apart (a releaser's add and bump come before its wake).
            let woken = crate::waiting::guaranteed_sleep(seg, gp, on, bits, cancel, part_end);
            if woken && cancel.is_none() {
                // The wake was for its bits: it asks, and passes the wake on (`pass`).
                super::pass::woken(seg, gp);
                return Ok(true);
            }
            let before = *seen;
            // Acquire: as in `seen` (a bump read here: the release is visible to the ask).
            if for_me(seen, seg.g_head_rec(gp).wake.load(Acquire)) {
                if woken {
                    super::pass::woken(seg, gp);
                }
                return Ok(true);
            }
            if woken {
                // Ended by a wake for other bits (`futex_waitv` matches every one),
                // which another waiter may need: passed on before it sleeps on.
                super::pass::not_for_me(seg, gp);
            }
            if (woken || *seen != before)
                && Instant::now() < part_end
                && !cancel.is_some_and(Cancel::is_cancelled)
            {
                continue; // past releases not for it, before its time: asleep again
            }
            // Back early (a signal, a cancel), or at the end: the caller decides.
            let back = Instant::now();
            if back < part_end || part_end >= until || cancel.is_some_and(Cancel::is_cancelled) {
                return Ok(false);
            }
        }
    }

    /// Asks for `cost` for `tenant` of `pool`, declaring a hold of `hold_ms`, on the
    /// library's clock, again until granted or `timeout` has passed: as soon as units
    /// come back to the pool (a release, a reap: they wake the pool's waiters), else at
    /// each refusal's retry-after, and at least every half `idle_after_ms`, so that the
    /// tenant's demand (which lapses `idle_after_ms` after its last ask) stays signalled
    /// and its guarantee frozen while it waits. Returns the last refusal when the time
    /// is up or `cancel` is cancelled (at once, even mid-sleep), and at once for a
    /// refusal that waiting cannot end (`hold_exceeds_reclaim_horizon` with no
    /// retry-after). A token cancelled before the call still lets the first ask through.
    pub fn guaranteed_acquire_wait(
        &self,
        pool: GPoolId,
        tenant: u16,
        cost: u64,
        hold_ms: u64,
        timeout: Duration,
        cancel: Option<&Cancel>,
    ) -> Result<GOutcome> {
        let deadline = crate::clock::after(Instant::now(), timeout);
        let rules = self.guaranteed_tenant_checked(pool, tenant)?;
        // The bits it sleeps with: the same for every refusal of this request.
        let bits = waiters::waiter_bits(tenant, hold_ms, rules.horizon);
        let (seg, gp) = (self.seg(), pool.index());
        // Asked again at least this often (half idle_after_ms), so that the tenant's
        // demand never lapses: the sleep's own announcement step.
        let keep_asking = waiters::announce_step_ms(seg, gp);
        loop {
            let mut seen = self.guaranteed_wake_seen_as(pool, tenant)?;
            let refusal = match self.guaranteed_acquire(
                pool,
                tenant,
                cost,
                hold_ms,
                crate::clock::now_ms(),
            )? {
                GOutcome::Refused(r) => r,
                granted => return Ok(granted),
            };
            let now = Instant::now();
            let left = deadline.saturating_duration_since(now);
            let hopeless = refusal.reason == Reason::HoldExceedsReclaimHorizon
                && refusal.retry_after_ms.is_none();
            if left.is_zero() || hopeless || cancel.is_some_and(Cancel::is_cancelled) {
                return Ok(GOutcome::Refused(refusal));
            }
            let wait = refusal
                .retry_after_ms
                .unwrap_or(keep_asking)
                .clamp(1, keep_asking);
            let until = now + Duration::from_millis(wait).min(left);
            // Asleep until the retry-after, or until units that may serve it come back,
            // if sooner.
            self.guaranteed_sleep_bits(pool, &mut seen, (tenant, bits), until, cancel)?;
        }
    }
}
