//! The blocking acquire: try, and when refused sleep on the pool's futex (and on a
//! cancel token, and, in a process without an anchor, on the owner words of the
//! processes ahead) until a release, a death, the deadline or a cancellation. The
//! handshake with releasers is in `waiting`; the death wake in `anchor`.

use std::time::{Duration, Instant};

use crate::clock;
use crate::engine::{Asked, Engine, LeaseId, Outcome, PoolId, TenantId};
use crate::error::Result;
use crate::layout::PoolRec;
use crate::liveness;
use crate::refusal::{Reason, Refused};
use crate::region::Region;
use crate::sync::{AtomicU32, Ordering::*};
use crate::waiting::{self, Cancel, Class};

/// First bound on a waiter's wait for a dying process to finish exiting; it doubles
/// (the wait ends as soon as the process is gone: see `liveness::wait_exit`).
const DYING_PAUSE: Duration = Duration::from_millis(1);

/// Why a blocking acquire gave up, with the last refusal by the rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ended {
    /// `TimedOut` or `Cancelled`; `TooManyResidents` for an `evict` pool; or the
    /// rates' reason when their next token comes after the deadline.
    pub reason: Reason,
    pub last: Refused,
}

/// A waiter announced in its pool's `waiters` for as long as this lives, and counted
/// in its process slot's count for that pool (`WaitingRec`), so that if the process
/// dies while waiting, its reaper takes it out of `waiters` (`recovery`): else every
/// release of the pool would bump `wake` and call `FUTEX_WAKE` for nobody, for ever.
///
/// The slot's count is raised after the pool's and lowered before it, so at every
/// instant it counts at most the announcements in `waiters` that are the slot's: a
/// reaper never takes out one that is not (which could let a release miss a live
/// waiter). A death between the two steps leaves one announcement in `waiters` that
/// nobody takes out: spurious wakes, never a lost one.
struct Announced<'a> {
    pool: &'a PoolRec,
    mine: &'a AtomicU32,
}

impl<'a> Announced<'a> {
    fn new(pool: &'a PoolRec, mine: &'a AtomicU32) -> Self {
        // SeqCst: the waiter's half of the handshake in `waiting`.
        pool.waiters.fetch_add(1, SeqCst);
        // The window between the two counts: a waiter killed here is in `waiters` and
        // not in its slot's count, so its reaper cannot take it out (`Table::repair`
        // recounts `waiters` from the slots). Without `crash-points` this is nothing;
        // a constructor has no `Result` for `ops::crash_point` to return.
        #[cfg(feature = "crash-points")]
        crate::crash::hit("wait.announced");
        // Release: a reaper that reads this count (its `swap`, Acquire) finds our
        // announcement above in `waiters` before it takes it out.
        mine.fetch_add(1, Release);
        Announced { pool, mine }
    }
}

impl Drop for Announced<'_> {
    fn drop(&mut self) {
        // Relaxed: our own slot's count, which only a reaper of our dead process reads
        // (and then an RMW, which reads the last value).
        self.mine.fetch_sub(1, Relaxed);
        // Never below 0 (a count lowered from outside, or recounted by `repair`
        // without us): at 0 it is whole again once its waiters are gone.
        crate::recovery::take_out(self.pool, 1);
    }
}

/// When pool `rec`'s active set is next recounted (`rescan_at_ms`: the earliest instant
/// a counted tenant's window can end, at most a window ahead), as an instant of the
/// clock `now` is of; 1 ms ahead when that is due already (a recount by another
/// process in flight, or one a reaper asked for, which the next try makes).
fn next_recount(rec: &PoolRec, now: Instant) -> Instant {
    // Relaxed: a priority input (see `admission::active`); a stale value only moves
    // this try earlier or later, never past the deadline or the sweep.
    let at = rec.rescan_at_ms.load(Relaxed);
    let ms = at.saturating_sub(clock::segment_now()).max(1);
    clock::after(now, Duration::from_millis(ms))
}

/// The sleep of a request refused by tenant `t`'s rates, until `until` (its token, or
/// the wait's end), a cancellation, or a change of the tenant's rates: a rate set
/// meanwhile applies to it at once (lifted or raised, it may be admitted sooner). No
/// futex is woken by a change of rates, so the sleep looks at them every `sweep`,
/// without asking again (an ask would count another refusal).
fn sleep_for_token(
    seg: &crate::segment::Segment,
    t: usize,
    until: Instant,
    sweep: Duration,
    cancel: Option<&Cancel>,
) {
    let rates = crate::rates::limits(seg, t);
    loop {
        let now = Instant::now();
        let part = until.min(clock::after(now, sweep));
        match cancel {
            Some(c) => waiting::sleep_on(&[c.watch()], part),
            None => std::thread::sleep(part.saturating_duration_since(now)),
        }
        if Instant::now() >= until
            || cancel.is_some_and(Cancel::is_cancelled)
            || crate::rates::limits(seg, t) != rates
        {
            return;
        }
    }
}

/// Acquires `units` of `pool` for `tenant`, waiting up to `timeout`; sweeps for dead
/// processes every `sweep` as the backup to the kernel's death wake. `Ok(Err(..))` says
/// why it gave up and how long it waited.
///
/// A refusal by the tenant's rates whose next token comes after the deadline ends the
/// wait at once, with that refusal (`rate_limited` or `work_debt`): no release changes
/// it, so waiting out the timeout could only end the same way, later.
///
/// With `sliced`, this call is one slice of a longer wait (a binding waits in slices so
/// that its language's interrupts land between them): an end by timeout or cancellation
/// is not counted in the tenant's refusals (the binding's last slice, not sliced, counts
/// it), and a rate refusal waits to the slice's end like any other, as the whole wait
/// may still outlast the token (the binding, which knows, makes its last call early).
///
/// A waiting acquire is one request, refused when it first asked: only its first try
/// counts a refusal, takes a turn of its tenant's and is logged; its later tries (and,
/// with `asked` other than [`Asked::No`], every try of a slice that continues a wait
/// whose earlier slice asked) are quiet (see `admission::Attempt::quiet`), though each
/// marks its tenant active as any ask does. It takes one token of its tenant's request
/// rate, at the first try that passes the rates (`Asked::Rated`: an earlier slice's
/// did). A grant counts as any grant, and an end unserved once more (`timed_out`,
/// `cancelled`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn acquire(
    engine: &Engine,
    pool: PoolId,
    tenant: TenantId,
    units: u32,
    hold_ms: u64,
    timeout: Duration,
    sweep: Duration,
    cancel: Option<&Cancel>,
    sliced: bool,
    asked: Asked,
) -> Result<std::result::Result<LeaseId, (Ended, Duration)>> {
    let start = Instant::now();
    let seg = engine.seg();
    let p = pool.index();
    // An `evict` pool waits at most its eviction wait for a resident to become
    // evictable, then fails `too_many_residents` (seed 000: one second).
    let evict_wait = engine
        .config()
        .pools
        .get(p)
        .filter(|c| c.evict)
        .map(|c| Duration::from_millis(c.evict_wait_ms as u64));
    let timeout = evict_wait.map_or(timeout, |w| timeout.min(w));
    let deadline = clock::after(start, timeout);
    // The handle may come from a binding as a bare integer: checked before its record
    // is touched (the engine's acquire checks it again, on every try).
    if p >= seg.geometry().pools {
        return Err(engine.bad_handles(p, tenant.index()));
    }
    let rec = seg.pool(p);
    let mut next_sweep = clock::after(start, sweep);
    let mut pause = DYING_PAUSE;
    let mut woken_at: Option<u64> = None;
    // Whether our last sleep was in the under-share half, ended by a wake of it.
    let mut slept_under = false;
    let mut watch = Vec::new();
    // Before a sleep we announce ourselves (for as long as we wait), read `wake`, then
    // try (whose first load of the pool word is SeqCst): a release we do not see will
    // see us and bump `wake`. The first try goes unannounced: granted at once, a
    // blocking acquire costs what a `try_acquire` does; refused by the pool, it
    // announces itself and tries again before any sleep.
    let mut announced: Option<Announced> = None;
    let mut asked = asked;
    loop {
        // SeqCst: the handshake in `waiting`. Woken, we read it with an RMW (adding
        // 0): the releaser bumped it last, and our `waiters` decrement on a grant
        // writes the same line, so taking it for writing now saves a second transfer
        // of the line on the way from the kernel to the grant.
        let seqs = if woken_at.is_some() {
            rec.wake.fetch_add(0, SeqCst)
        } else {
            rec.wake.load(SeqCst)
        };
        let tried =
            engine.acquire_at(pool, tenant, units, hold_ms, clock::now_ms(), None, asked)?;
        let last = match tried {
            Outcome::Granted(id) => return Ok(Ok(id)),
            Outcome::Refused(r) => r,
        };
        asked = asked.after(last.reason);
        let class = if last.reason == Reason::OverShare {
            Class::Over
        } else {
            Class::Under
        };
        // Woken, yet refused: pass the wake on, so a waiter that could use the permit
        // is not left asleep behind us (not to our tenant's, when none of them could:
        // `pass_bits`). Before anything else: also when the wait ends now (its
        // deadline, a cancel) or sleeps for the rates' token, which before took the
        // wake along. Once a release, under-share sleepers first; woken from the
        // under-share half with no release we had not seen (a wake passed on, or the
        // wake of a release we tried after), to the other half (see `hand_over`).
        let woken_under = std::mem::take(&mut slept_under);
        let new_release = woken_at.is_some_and(|w| w != seqs);
        if (new_release || woken_under)
            && let Some(bits) = waiting::pass_bits(&last, tenant.index())
        {
            if new_release {
                waiting::pass_on(rec, bits);
            } else {
                waiting::hand_over(rec, bits);
            }
        }
        // Passed (or nothing to pass): the next pass is for a release after this one.
        if woken_at.is_some() {
            woken_at = Some(seqs);
        }
        let now = Instant::now();
        // Refused by the tenant's rates, whose next token comes after the deadline: no
        // release changes that, so the wait ends now, with this refusal.
        let token = last
            .reason
            .is_rate()
            .then(|| clock::after(now, Duration::from_millis(last.retry_after_ms)));
        let rate_past_deadline = !sliced && token.is_some_and(|t| t > deadline);
        let ended = if cancel.is_some_and(Cancel::is_cancelled) {
            Some(Reason::Cancelled)
        } else if rate_past_deadline {
            Some(last.reason)
        } else if now >= deadline && last.reason == Reason::TooManyResidents {
            Some(Reason::TooManyResidents)
        } else if now >= deadline {
            Some(Reason::TimedOut)
        } else {
            None
        };
        if let Some(reason) = ended {
            // Relaxed: a statistic (`too_many_residents` and the rates' reasons were
            // counted at each refusal already).
            if !sliced && reason != Reason::TooManyResidents && !reason.is_rate() {
                seg.tenant_pool(p, tenant.index()).refusals[reason as usize - 1]
                    .fetch_add(1, Relaxed);
            }
            return Ok(Err((Ended { reason, last }, now - start)));
        }
        if now >= next_sweep {
            // The backup sweep (it wakes us if a holder died), checked after a refusal
            // rather than on every wake: a grant does not need it. Then try again at
            // once, as the sweep may have returned permits.
            engine.reap_dead_as(crate::layout::noticed::WAITER)?;
            next_sweep = clock::after(now, sweep);
            continue;
        }
        if let Some(token) = token {
            // Refused by the tenant's rates: no release of the pool changes that, only
            // time does, or a change of the rates. Sleep until its token (before the
            // deadline, or this is a slice), then try again.
            announced = None; // no release is ours to wait for
            sleep_for_token(seg, tenant.index(), deadline.min(token), sweep, cancel);
            continue;
        }
        if announced.is_none() {
            // Refused by the pool unannounced: announce ourselves (in our slot, which
            // that try registered), then try again before any sleep.
            let slot = engine.process_slot()?;
            announced = Some(Announced::new(rec, seg.slot_waiters(slot, p)));
            continue;
        }
        watch.clear();
        if let Some(c) = cancel {
            watch.push(c.watch());
        }
        // `sleep` adds the pool's word to these: one `futex_waitv` takes WAITV_MAX.
        // With an anchor of our own, none: our anchor watches every process we could
        // wait behind, reaps a dead one and wakes us with its permits (`peers`), and a
        // sleep on the pool's word alone wakes sooner than one on many words.
        let room = if engine.anchored() {
            0
        } else {
            waiting::WAITV_MAX - 1 - watch.len()
        };
        let behind = waiting::watch::watch(seg, engine.process_slot()?, Some(p), room, &mut watch);
        let until = deadline.min(next_sweep);
        // Past its share, the tenant may be admitted with nothing released, when
        // another leaves the active set and the shares grow: no release wakes it then,
        // so it sleeps no longer than the pool's next recount of the set. (So does a
        // spawn with nothing to evict, which may have been past its share too.)
        let until = if class == Class::Over || last.reason == Reason::TooManyResidents {
            until.min(next_recount(rec, now))
        } else {
            until
        };
        if behind.dying > 0 {
            announced = None; // not while we reap: our own releases need not wake us
            // A process died: reap it now. If it is still exiting (its anchor went
            // first), wait for its last thread to go, then look again.
            if engine
                .reap_dead_as(crate::layout::noticed::WAITER)?
                .is_empty()
            {
                let left = until.saturating_duration_since(Instant::now());
                liveness::wait_exit(behind.dying_procs(), pause.min(left));
                pause = (pause * 2).min(sweep);
            }
            continue;
        }
        let seq = waiting::half(seqs, class);
        // SeqCst: the handshake in `waiting`.
        if waiting::half(rec.wake.load(SeqCst), class) == seq {
            let bits = waiting::sleep_bits(&last, tenant.index());
            let woken = waiting::sleep(rec, class, seq, bits, &watch, until);
            if woken {
                crate::ops::crash_point("wait.woken")?;
            }
            slept_under = woken && class == Class::Under;
        }
        woken_at = Some(seqs);
    }
}
