//! A release: `HELD -> RELEASING`, then the effects taken back (pool, extra, held), each
//! unless done, then `FREE` (or the thread's spare).

use super::{Desc, Word, check_desc, crash_point, settle};
use crate::error::{Error, Result};
use crate::layout::{LeaseRec, lease_state as ls, op_word, pair, residency};
use crate::region::Region;
use crate::sync::{AtomicU64, Ordering::*, SpinBackoff, fence, store_over_rmw};

/// Releases lease `l` of generation `generation`: `HELD` -> `RELEASING` -> `FREE`.
/// Exactly one caller can win the first step; any other gets `AlreadyReleased`.
///
/// `known` is the caller's copy of the descriptor (the owner has it); without it the
/// descriptor is read from the lease. (The library's own releases go through
/// `release_keeping` and a reaper's through `release_reporting`; this is the models'.)
#[cfg(any(test, loom))]
pub(crate) fn release<R: Region>(
    r: &R,
    l: usize,
    generation: u32,
    known: Option<&Desc>,
) -> Result<Desc> {
    release_keeping(r, l, generation, known, None)
}

/// A reaper's release of lease `l` (generation `generation`), which its dead owner left
/// `HELD` (`held`: released here, as `release` does) or `RELEASING` (finished here, as
/// `finish_release` does). Reports what went back: the descriptor, and whether its
/// units went back to the pool (`false` for a revoked resident's: that unit is its
/// revoker's, and only the tenant's held unit is given back).
pub(crate) fn release_reporting<R: Region>(
    r: &R,
    l: usize,
    generation: u32,
    held: bool,
) -> Result<(Desc, bool)> {
    if held {
        start_release(r.lease(l), l, generation)?;
        crash_point("release.published")?;
    }
    finish_release_keeping(r, l, generation, None, None, held)
}

/// `HELD -> RELEASING`, keeping the record of what the grant charged. Exactly one
/// caller wins; any other gets `AlreadyReleased`.
fn start_release(lease: &LeaseRec, l: usize, generation: u32) -> Result<()> {
    let already = || Error::AlreadyReleased {
        lease: format!("#{l}/{generation}"),
    };
    // Relaxed: the CAS below re-checks the whole word.
    let s = lease.state.load(Relaxed);
    if s & !ls::CHARGES_EXTRA != ls::make(generation, ls::HELD) {
        return Err(already());
    }
    let releasing = ls::make(generation, ls::RELEASING) | (s & ls::CHARGES_EXTRA);
    // AcqRel: Acquire to read the fields of this cycle; Release publishes the change.
    lease
        .state
        .compare_exchange(s, releasing, AcqRel, Relaxed)
        .map(|_| ())
        .map_err(|_| already())
}

/// `release`, which with `keep: Some(tid)` (the owner thread `tid`) keeps the slot as
/// that thread's spare (see `finish_release_keeping`); the spare's generation is
/// `generation + 1`.
#[inline(always)]
pub(crate) fn release_keeping<R: Region>(
    r: &R,
    l: usize,
    generation: u32,
    known: Option<&Desc>,
    keep: Option<u32>,
) -> Result<Desc> {
    start_release(r.lease(l), l, generation)?;
    crash_point("release.published")?;
    finish_release_keeping(r, l, generation, known, keep, true).map(|(d, _)| d)
}

/// Drives a lease in `RELEASING` (of generation `generation`) to `FREE`: its pool step,
/// then its held step, each unless done (I1). The caller must be its only driver: the
/// owner, or the reaper of a dead owner.
#[inline(always)]
pub(crate) fn finish_release<R: Region>(
    r: &R,
    l: usize,
    generation: u32,
    known: Option<&Desc>,
) -> Result<Desc> {
    finish_release_keeping(r, l, generation, known, None, false).map(|(d, _)| d)
}

/// `finish_release`, which with `keep: Some(tid)` leaves the slot `CLAIMED` under the
/// next generation for thread `tid` (a *spare*: its next acquire needs no claim CAS)
/// instead of `FREE`. A spare is counted nowhere, like any claimed lease. Returns the
/// descriptor, and whether the pool's units went back (see [`release_reporting`]).
///
/// `fresh`: the caller has just moved the lease to `RELEASING` and made no step of it,
/// so neither step can be done yet and neither is checked.
#[inline(always)]
pub(super) fn finish_release_keeping<R: Region>(
    r: &R,
    l: usize,
    generation: u32,
    known: Option<&Desc>,
    keep: Option<u32>,
    fresh: bool,
) -> Result<(Desc, bool)> {
    let lease = r.lease(l);
    let d = match known {
        Some(d) => *d,
        // The only driver of a RELEASING lease reads its fields: they are stable (written
        // while CLAIMED, published by the Release store of ACQUIRING, which the driver's
        // state CAS or load acquired), so no seqlock is needed.
        None => {
            let pt = lease.pool_tenant.load(Relaxed);
            Desc {
                generation,
                pool: pair::lo(pt),
                tenant: pair::hi(pt),
                units: lease.units.load(Relaxed),
                // Only the residency is needed to give units back (same line).
                inputs: [0, 0, lease.inputs[2].load(Relaxed)],
            }
        }
    };
    debug_assert_eq!(d.generation, generation);
    check_desc(r, l, &d)?;
    let (p, t) = (d.pool as usize, d.tenant as usize);
    let pool = r.pool(p);
    let tag = op_word::make_tag(l, true, generation);
    // Relaxed: our own lease's state, which we (its only driver) moved to RELEASING.
    let s0 = lease.state.load(Relaxed);
    // A resident's record is closed first: after it, no revocation lands, and a
    // revoked lease's unit in the pool word is its revoker's, not ours to give back.
    let revoked = if residency::is_resident(d.inputs[2]) {
        let revoked = super::resident::close(r, l, generation)?;
        crash_point("release.closed")?;
        revoked
    } else {
        false
    };
    // A fresh release whose pool part is marked done (an acquire backing out) skips it,
    // as does a revoked resident's.
    let pool_skipped = revoked || (fresh && s0 & ls::POOL_DONE != 0);
    if !pool_skipped {
        take_back(r, (l, lease), &d, &pool.word, tag, Word::Pool, fresh)?;
    }
    crash_point("release.pool_applied")?;
    if s0 & ls::CHARGES_EXTRA != 0 {
        take_back(r, (l, lease), &d, &pool.extra, tag, Word::Extra, fresh)?;
        crash_point("release.extra_applied")?;
    }
    let held = &r.tenant_pool(p, t).held;
    take_back(r, (l, lease), &d, held, tag, Word::Held(d.tenant), fresh)?;
    crash_point("release.held_applied")?;
    match keep {
        // Release: every change of this cycle happens before the slot is claimed again.
        // A plain store: a settler's flag CAS names RELEASING and fails or is
        // overwritten.
        None => store_over_rmw(&lease.state, ls::make(generation, ls::FREE)),
        Some(tid) => {
            // Relaxed: the slot's own field; the state store below publishes it.
            lease.tid.store(tid, Relaxed);
            // As a claim: the generation moves on, then a Release fence orders it before
            // the next cycle's field writes (the seqlock in `read_desc`).
            store_over_rmw(&lease.state, ls::make(generation.wrapping_add(1), ls::CLAIMED));
            fence(Release);
        }
    }
    Ok((d, !revoked))
}

/// Takes `d.units` back from `word` with the release's `tag`, unless that step is done:
/// the word carries the tag, or the lease the step's `flag` (read in that order: I1).
///
/// `fresh`: the caller knows the step is not done (see `finish_release_keeping`).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn take_back<R: Region>(
    r: &R,
    (l, lease): (usize, &LeaseRec),
    d: &Desc,
    word: &AtomicU64,
    tag: u64,
    t: Word,
    fresh: bool,
) -> Result<()> {
    debug_assert!(std::ptr::eq(lease, r.lease(l)));
    let flag = t.flag();
    let backoff = SpinBackoff::new();
    loop {
        // SeqCst (the pool word): the releaser's half of the waiter handshake.
        let w = word.load(SeqCst);
        if !fresh && (op_word::raw_tag(w) == tag || lease.state.load(Acquire) & flag != 0) {
            return Ok(());
        }
        let n = op_word::count(w);
        let Some(left) = n.checked_sub(d.units) else {
            return Err(Error::Corrupt(format!(
                "pool {} {t:?} word: {n} counted but lease {l} gives back {}",
                d.pool, d.units
            )));
        };
        settle(r, op_word::raw_tag(w), d.pool as usize, t, l)?;
        // SeqCst: see the load above; Release publishes the settle before it.
        if word
            .compare_exchange(w, op_word::make(left, tag), SeqCst, Relaxed)
            .is_ok()
        {
            return Ok(());
        }
        backoff.spin();
    }
}

