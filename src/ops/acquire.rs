//! An acquire: decide on a validated snapshot, record the decision, apply its effects
//! (held, extra, pool), each a tagged CAS; back out if the pool word refuses.

use super::release::finish_release_keeping;
use super::{AcqOutcome, Desc, Word, crash_point, free_lease_from, publish_acquire, settle, spare_or_claim};
use crate::error::{Error, Result};
use crate::layout::{PoolRec, TenantPoolRec, lease_state as ls, op_word};
use crate::policy::{Policy, Verdict};
use crate::region::Region;
use crate::sync::{AtomicU64, Ordering::*, SpinBackoff, store_over_rmw};

/// Runs an acquire for `d` (its generation is filled in) by a thread of process slot
/// `slot`. Returns the lease (if one was claimed: a refusal on the first look claims
/// none), the descriptor and the outcome. A granted lease is `HELD`; any other claimed
/// lease is `FREE` again.
/// (Without a spare: what the models and unit tests run; the engine calls
/// [`acquire_with_spare`].)
#[cfg(test)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn acquire<R: Region, P: Policy>(
    r: &R,
    policy: &P,
    slot: usize,
    hint: usize,
    d: Desc,
    tid: u32,
    now: u64,
    hold_ms: u64,
) -> Result<(Option<usize>, Desc, AcqOutcome)> {
    let tp = r.tenant_pool(d.pool as usize, d.tenant as usize);
    acquire_with_spare(r, policy, tp, slot, hint, d, tid, now, hold_ms, None)
}

/// `acquire`, which takes spare lease `(index, generation)` of the calling thread if it
/// is still `CLAIMED` in that generation, instead of claiming one with a CAS. `tp` is
/// the tenant's record in the pool (`r.tenant_pool(d.pool, d.tenant)`), which the
/// caller has fetched already.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) fn acquire_with_spare<R: Region, P: Policy>(
    r: &R,
    policy: &P,
    tp: &TenantPoolRec,
    slot: usize,
    hint: usize,
    mut d: Desc,
    tid: u32,
    now: u64,
    hold_ms: u64,
    spare: Option<(usize, u32)>,
) -> Result<(Option<usize>, Desc, AcqOutcome)> {
    let p = d.pool as usize;
    let t = d.tenant as usize;
    let pool = r.pool(p);
    debug_assert!(std::ptr::eq(tp, r.tenant_pool(p, t)));
    let backoff = SpinBackoff::new();
    // The lease published for this acquire, if any, and the last one claimed (freed
    // again, or not): the caller learns from it whether its spare was used.
    let mut lease: Option<usize> = None;
    let mut claimed: Option<usize> = None;
    let mut spare = spare;
    // Whether the published lease charges the extra word (the recorded decision).
    let mut charging = false;
    // A pool word and the held word read after it, from a held CAS that lost: the
    // next decision is made on them (I3 holds: the held word is read after `w`)
    // instead of reading the pool word again, whose line another process may hold.
    let mut looked: Option<(u64, u64)> = None;
    loop {
        let (w, tw) = looked.take().unwrap_or_else(|| {
            // SeqCst: the waiter's half of the handshake in `waiting` (a waiter
            // announced in `waiters` must then see every release that did not see it).
            let w = pool.word.load(SeqCst);
            (w, tp.held.load(Acquire))
        });
        // Read after the pool word, like the held word: it only overstates (I2).
        let ew = if P::USES_EXTRA {
            pool.extra.load(Acquire)
        } else {
            0
        };
        let (x, h) = (op_word::count(w), op_word::count(tw));
        let verdict = policy.decide(&d.inputs, x, h, op_word::count(ew), d.units);
        let charges = verdict == Verdict::AdmitCharging;
        if let Some(l) = lease.filter(|_| !verdict.admits() || charges != charging) {
            // Refused now, or the decision changed what it charges: the published lease
            // has changed no word yet, so it is simply freed (and claimed again below).
            let published = ls::make(d.generation, ls::ACQUIRING)
                | if charging { ls::CHARGES_EXTRA } else { 0 };
            // Only a write from outside changes it under its owner (no word names it
            // yet, so nobody settles it): then the slot stays as written, for `repair`
            // to quarantine, and the claim below takes another. (Shared memory is input:
            // not an assertion, which a debug build under a hostile writer would fail.)
            let _ = free_lease_from(r.lease(l), published);
            lease = None;
            spare = None;
        }
        if !verdict.admits() {
            let refused = AcqOutcome::Refused {
                in_use: x,
                held: h,
                verdict,
            };
            return Ok((claimed, d, refused));
        }
        let l = match lease {
            Some(l) => l,
            None => {
                let (l, generation) = spare_or_claim(r, slot, hint, spare.take())?;
                claimed = Some(l);
                crash_point("acquire.claimed")?;
                d.generation = generation;
                charging = charges;
                publish_acquire(r, l, &d, tid, now, hold_ms, charging);
                crash_point("acquire.published")?;
                lease = Some(l);
                l
            }
        };
        let tag = op_word::make_tag(l, false, d.generation);
        let Some(nh) = h.checked_add(d.units).filter(|&n| n <= op_word::MAX_COUNT) else {
            return Err(Error::Corrupt(format!(
                "pool {p} tenant {t}: held {h} + {} overflows",
                d.units
            )));
        };
        settle(r, op_word::raw_tag(tw), p, Word::Held(d.tenant), l)?;
        // AcqRel: Acquire to see what the previous op published; Release so that a
        // settler that sees our tag sees our published lease (already Released). The
        // failure's Acquire: the word it returns is the next decision's, as a load.
        if let Err(now_held) =
            tp.held
                .compare_exchange(tw, op_word::make(nh, tag), AcqRel, Acquire)
        {
            backoff.spin();
            looked = Some((w, now_held));
            continue;
        }
        crash_point("acquire.held_applied")?;
        if charging {
            add_to(r, l, &d, &pool.extra, tag, Word::Extra)?;
            crash_point("acquire.extra_applied")?;
        }
        let seen = match apply_pool_acquire(r, policy, (pool, tp), l, &d, w, tag, charging, h)? {
            PoolStep::Applied { in_use, held } => AcqOutcome::Granted { in_use, held },
            PoolStep::Refused(refused) => {
                back_out(r, l, &d, charging)?;
                return Ok((claimed, d, refused));
            }
            PoolStep::Changed => {
                // The decision now charges differently: undo, and decide afresh.
                back_out(r, l, &d, charging)?;
                lease = None;
                continue;
            }
        };
        crash_point("acquire.pool_applied")?;
        // Release: the grant's effects happen before any later release of the lease.
        // A plain store: a settler's concurrent flag CAS names ACQUIRING and so either
        // lands before this (and is overwritten by HELD, which implies every flag) or
        // fails (see `sync::store_over_rmw` for how loom is told so).
        let held = ls::make(d.generation, ls::HELD) | if charging { ls::CHARGES_EXTRA } else { 0 };
        store_over_rmw(&r.lease(l).state, held);
        if crate::layout::residency::is_resident(d.inputs[2]) {
            super::resident::granted(r, d.pool as usize, l, d.generation);
        }
        return Ok((lease, d, seen));
    }
}

/// Adds `d.units` to op word `word` with the acquire's `tag` (an effect that needs no
/// decision of its own: the pool CAS validates the decision that made it; a transfer's
/// held step, whose pool step is the revocation).
pub(super) fn add_to<R: Region>(r: &R, l: usize, d: &Desc, word: &AtomicU64, tag: u64, which: Word) -> Result<()> {
    let backoff = SpinBackoff::new();
    loop {
        let v = word.load(Acquire);
        let Some(n) = op_word::count(v)
            .checked_add(d.units)
            .filter(|&n| n <= op_word::MAX_COUNT)
        else {
            return Err(Error::Corrupt(format!(
                "pool {} {which:?} word: {} + {} overflows",
                d.pool,
                op_word::count(v),
                d.units
            )));
        };
        settle(r, op_word::raw_tag(v), d.pool as usize, which, l)?;
        // AcqRel: as the held word's CAS.
        if word
            .compare_exchange(v, op_word::make(n, tag), AcqRel, Relaxed)
            .is_ok()
        {
            return Ok(());
        }
        backoff.spin();
    }
}

/// What the pool step of an acquire came to.
enum PoolStep {
    /// Added, on a word of `in_use` units with the tenant holding `held` (the look
    /// whose decision admitted it).
    Applied { in_use: u32, held: u32 },
    /// The rule refuses on the moved word (nothing was added to the pool).
    Refused(AcqOutcome),
    /// The rule admits on the moved word, but charging differently than recorded.
    Changed,
}

/// Step 4 of an acquire: adds `d.units` to the pool word, starting from `w` (the word
/// the first decision read, with the tenant holding `held`). If the word moved,
/// decides again.
#[allow(clippy::too_many_arguments)]
#[inline(always)] // the acquire's hot path (see `publish_acquire`)
fn apply_pool_acquire<R: Region, P: Policy>(
    r: &R,
    policy: &P,
    (pool, tp): (&PoolRec, &TenantPoolRec),
    l: usize,
    d: &Desc,
    mut w: u64,
    tag: u64,
    charging: bool,
    mut held: u32,
) -> Result<PoolStep> {
    let p = d.pool as usize;
    debug_assert!(std::ptr::eq(pool, r.pool(p)));
    debug_assert!(std::ptr::eq(tp, r.tenant_pool(p, d.tenant as usize)));
    let backoff = SpinBackoff::new();
    let mut first = true;
    loop {
        let x = op_word::count(w);
        if !first {
            // The word moved: decide again on it, with the held (and extra) word as it
            // is now less our own units (I3: read after `w`; I2: they overstate, never
            // understate).
            let h = op_word::count(tp.held.load(Acquire)).saturating_sub(d.units);
            let e = if P::USES_EXTRA {
                let e = op_word::count(pool.extra.load(Acquire));
                if charging { e.saturating_sub(d.units) } else { e }
            } else {
                0
            };
            let verdict = policy.decide(&d.inputs, x, h, e, d.units);
            if !verdict.admits() {
                return Ok(PoolStep::Refused(AcqOutcome::Refused {
                    in_use: x,
                    held: h,
                    verdict,
                }));
            }
            if (verdict == Verdict::AdmitCharging) != charging {
                return Ok(PoolStep::Changed);
            }
            held = h;
        }
        first = false;
        debug_assert!(
            x + d.units <= policy.capacity(&d.inputs),
            "the policy admitted past the capacity"
        );
        settle(r, op_word::raw_tag(w), p, Word::Pool, l)?;
        // SeqCst: the pool word is the releaser's side of the waiter handshake too;
        // Release so that a settler that sees our tag sees our lease.
        match pool
            .word
            .compare_exchange(w, op_word::make(x + d.units, tag), SeqCst, SeqCst)
        {
            Ok(_) => {
                // The record's units are `d.units` unless a write from outside changed
                // them (input, not asserted): the op goes by its own copy, `d`.
                return Ok(PoolStep::Applied { in_use: x, held });
            }
            Err(now) => {
                w = now;
                backoff.spin();
            }
        }
    }
}

/// An acquire that added to the held (and extra) word and was then refused on the pool:
/// it turns into a release whose pool part is already done, and runs that to `FREE`.
pub(super) fn back_out<R: Region>(r: &R, l: usize, d: &Desc, charging: bool) -> Result<()> {
    let lease = r.lease(l);
    let charges = if charging { ls::CHARGES_EXTRA } else { 0 };
    let releasing = ls::make(d.generation, ls::RELEASING | ls::POOL_DONE) | charges;
    loop {
        // ACQUIRING (with any flags a settler set), unless a write from outside changed
        // it (input, not asserted): the owner takes the slot back from whatever it says.
        let s = lease.state.load(Acquire);
        // AcqRel: as any state change a settler may race with.
        if lease
            .state
            .compare_exchange(s, releasing, AcqRel, Relaxed)
            .is_ok()
        {
            break;
        }
    }
    finish_release_keeping(r, l, d.generation, Some(d), None, true)?;
    // The held (and extra) word no longer counts our units: a waiter of our tenant
    // refused on it meanwhile (past its share with them) may be admitted now, and no
    // release of ours will come to wake it. Wake as a release by our tenant does (cold:
    // only after a refusal on the pool word or a lost victim; `tests/back_out.rs`).
    #[cfg(not(loom))]
    {
        let pool = r.pool(d.pool as usize);
        // SeqCst RMW that changes nothing: the release's pool step of the waiter
        // handshake (`waiting`). A waiter whose announcement our load of `waiters`
        // below misses reads the pool word after this, so after the held word's
        // restoring CAS (sequenced before it), and sees our tenant's held as it is now.
        pool.word.fetch_add(0, SeqCst);
        let (p, t) = (d.pool as usize, d.tenant as usize);
        crate::waiting::released_by(pool, d.units, t, || {
            crate::admission::under_share_now(r, p, t)
        });
    }
    Ok(())
}

