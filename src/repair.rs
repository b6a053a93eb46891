//! Checking the counters against the lease records, and rebuilding them
//! (`Table::check`, `Table::repair`): what heals a pool whose words a hostile writer or
//! a bug broke, while the other pools keep working.
//!
//! The lease records are the truth: a pool word must count exactly the units of the
//! pool's `HELD` leases, and a held word those of its tenant's, at any moment when no
//! lease of the pool is mid-op (`ACQUIRING` / `RELEASING`: their units are in one word
//! and not yet, or no longer, in the other). A check or a repair of pool `p`:
//! 1. reads the pool word and the pool's held words;
//! 2. scans every lease; a lease of `p` mid-op means "not now": it starts again (up
//!    to a bound, then reports the pool busy);
//! 3. reads the pool word again: if it moved, starts again;
//! 4. (repair) CASes each held word that differs from its sum, from the value read in
//!    step 1, to the sum with no tag, and the pool word likewise. A CAS that fails
//!    (an op came in) starts again.
//!
//! Why a CAS from the value read before the scan is enough: every op changes the held
//! word, then the pool word (acquire) or the pool word, then the held word (release),
//! each by a CAS that a repair's CAS would fail or be failed by. An acquire that
//! publishes after the scan passed its lease has changed no word yet; its CAS then
//! lands on the rebuilt word and adds its units to it. A release that starts after the
//! scan counted its lease `HELD` takes its units back from the rebuilt words. A tag
//! replaced by a repair names no lease mid-op (step 2), so nothing needs settling.
//!
//! Quarantined leases count nowhere; once every pool is rebuilt without them, a
//! repair frees them. Lease records in a state no version writes are quarantined; a
//! process slot in a state no version writes is taken and emptied as a reaper would.

use crate::error::{Error, Result};
use crate::layout::{lease_state as ls, op_word, proc_state as ps, residency, resident_word};
use crate::ops::{check_desc, read_desc};
use crate::recovery::{Reaped, Reaper};
use crate::region::Region;
use std::time::{Duration, Instant};

use crate::sync::{Backoff, Ordering::*};

/// How long `Table::repair` looks for a moment with no op of a pool in flight.
pub const REPAIR_BUDGET: Duration = Duration::from_secs(1);
/// The same for the repair a failed call makes of its own pool (it must return soon).
pub const INLINE_BUDGET: Duration = Duration::from_millis(5);

/// What a repair of one pool changed.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PoolRepair {
    pub pool: usize,
    /// Units in use before and after.
    pub in_use_before: u32,
    pub in_use_after: u32,
    /// Tenants whose held word was rebuilt.
    pub tenants_fixed: usize,
    /// The pool's `waiters` before and after `Table::repair` set it to what the process
    /// slots announce, when the two disagreed (see `shm-layout.md`, "Waiting").
    pub waiters: Option<(u32, u32)>,
}

/// The sums the lease records give for pool `p`, read while no lease of it was mid-op,
/// with the words they were compared to.
struct Sums {
    pool_word: u64,
    held_words: Vec<u64>,
    total: u64,
    held: Vec<u64>,
}

/// Reads the lease sums of pool `p` at a moment with no op of it in flight.
fn sums<R: Region>(r: &R, p: usize, deadline: Instant) -> Result<Sums> {
    let geo = *r.geometry();
    let backoff = Backoff::new();
    loop {
        // SeqCst: as every reader of the pool word; `evictions` likewise (a transfer
        // moves a unit from its victim's lease to its own without touching the pool
        // word, and bumps it before it is HELD).
        let evictions = r.pool(p).evictions.load(SeqCst);
        let pool_word = r.pool(p).word.load(SeqCst);
        // Acquire: pairs with the ops' AcqRel CASes.
        let held_words: Vec<u64> = (0..geo.tenants)
            .map(|t| r.tenant_pool(p, t).held.load(Acquire))
            .collect();
        let mut total = 0u64;
        let mut held = vec![0u64; geo.tenants];
        let mut busy = false;
        for l in 0..geo.leases() {
            // Acquire: publishes the lease's fields (the seqlock of `ops`).
            let s = r.lease(l).state.load(Acquire);
            let st = ls::state(s);
            if !matches!(st, ls::ACQUIRING | ls::HELD | ls::RELEASING) {
                continue;
            }
            let Some(d) = read_desc(r.lease(l), ls::generation(s)) else {
                busy = true; // changed under us
                break;
            };
            if check_desc(r, l, &d).is_err() || d.pool as usize != p {
                continue;
            }
            if st != ls::HELD {
                busy = true;
                break;
            }
            // A revoked resident's pool unit is its revoker's; its tenant still holds
            // it until the release.
            // SeqCst: the record is read between the two loads of `evictions`.
            let revoked = residency::is_resident(d.inputs[2])
                && crate::residents::held_resident(r, l, SeqCst).is_some_and(|(_, st, g)| {
                    st == resident_word::REVOKED && g == ls::generation(s)
                });
            if !revoked {
                total += d.units as u64;
            }
            held[d.tenant as usize] += d.units as u64;
        }
        if !busy
            && r.pool(p).word.load(SeqCst) == pool_word
            && r.pool(p).evictions.load(SeqCst) == evictions
        {
            return Ok(Sums {
                pool_word,
                held_words,
                total,
                held,
            });
        }
        if Instant::now() >= deadline {
            return Err(Error::Corrupt(format!(
                "pool {p}: never found without an op in flight in the repair's time; retry"
            )));
        }
        backoff.snooze();
    }
}

/// What breaks the invariants of pool `p`, one line each (empty: none).
pub fn check_pool<R: Region>(r: &R, p: usize) -> Result<Vec<String>> {
    let s = sums(r, p, Instant::now() + REPAIR_BUDGET)?;
    let mut out = Vec::new();
    let in_use = op_word::count(s.pool_word) as u64;
    if in_use != s.total {
        out.push(format!(
            "pool {p}: in_use is {in_use}, its held leases hold {}",
            s.total
        ));
    }
    for (t, (&w, &sum)) in s.held_words.iter().zip(&s.held).enumerate() {
        if op_word::count(w) as u64 != sum {
            out.push(format!(
                "pool {p} tenant {t}: held is {}, its held leases hold {sum}",
                op_word::count(w)
            ));
        }
    }
    Ok(out)
}

/// Rebuilds the counters of pool `p` from its lease records (see the module docs).
/// Gives up (an error: retry) after `budget` without a moment free of its ops.
pub fn repair_pool<R: Region>(r: &R, p: usize, budget: Duration) -> Result<PoolRepair> {
    let deadline = crate::clock::after(Instant::now(), budget);
    'again: loop {
        let s = sums(r, p, deadline)?;
        let mut out = PoolRepair {
            pool: p,
            in_use_before: op_word::count(s.pool_word),
            in_use_after: op_word::count(s.pool_word),
            tenants_fixed: 0,
            waiters: None,
        };
        for (t, (&w, &sum)) in s.held_words.iter().zip(&s.held).enumerate() {
            if op_word::count(w) as u64 == sum {
                continue;
            }
            let sum = sum.min(op_word::MAX_COUNT as u64) as u32;
            // AcqRel: as an op's CAS of the word.
            if r.tenant_pool(p, t)
                .held
                .compare_exchange(w, op_word::make(sum, 0), AcqRel, Relaxed)
                .is_err()
            {
                continue 'again;
            }
            out.tenants_fixed += 1;
        }
        if op_word::count(s.pool_word) as u64 != s.total {
            let total = s.total.min(op_word::MAX_COUNT as u64) as u32;
            // SeqCst: as an op's CAS of the pool word (the waiters' handshake).
            if r.pool(p)
                .word
                .compare_exchange(s.pool_word, op_word::make(total, 0), SeqCst, Relaxed)
                .is_err()
            {
                continue 'again;
            }
            out.in_use_after = total;
        }
        return Ok(out);
    }
}

/// Quarantines every lease in a state no version writes; returns how many.
pub fn quarantine_unknown<R: Region>(r: &R) -> usize {
    (0..r.geometry().leases())
        .filter(|&l| {
            // Relaxed: a state no op writes cannot be a step of one.
            let st = ls::state(r.lease(l).state.load(Relaxed));
            st > ls::QUARANTINED && {
                crate::recovery::quarantine(r, l);
                true
            }
        })
        .count()
}

/// Frees every quarantined lease (after every pool was rebuilt without them); returns
/// how many.
pub fn free_quarantined<R: Region>(r: &R) -> usize {
    (0..r.geometry().leases())
        .filter(|&l| {
            let lease = r.lease(l);
            // Acquire: as any reader of a state word.
            let s = lease.state.load(Acquire);
            ls::state(s) == ls::QUARANTINED && crate::ops::free_lease_from(lease, s)
        })
        .count()
}

/// Process slots in a state no version writes, as (slot, state word).
pub fn odd_slots<R: Region>(r: &R) -> Vec<(usize, u64)> {
    (0..r.geometry().procs)
        .filter_map(|s| {
            // Acquire: as any reader of a slot.
            let st = r.proc_slot(s).state.load(Acquire);
            (ps::status(st) > ps::REAPING).then_some((s, st))
        })
        .collect()
}

/// Frees the quarantined leases whose descriptor names pool `p` (after `p` was rebuilt
/// without them); returns how many.
pub fn free_quarantined_of<R: Region>(r: &R, p: usize) -> usize {
    (0..r.geometry().leases())
        .filter(|&l| {
            let lease = r.lease(l);
            // Acquire: as any reader of a state word.
            let s = lease.state.load(Acquire);
            ls::state(s) == ls::QUARANTINED
                && read_desc(lease, ls::generation(s)).is_some_and(|d| d.pool as usize == p)
                && crate::ops::free_lease_from(lease, s)
        })
        .count()
}

/// Leases in a state no version writes, and quarantined leases.
pub fn odd_leases<R: Region>(r: &R) -> (usize, usize) {
    let (mut odd, mut quarantined) = (0, 0);
    for l in 0..r.geometry().leases() {
        // Relaxed: a count for a report.
        match ls::state(r.lease(l).state.load(Relaxed)) {
            ls::QUARANTINED => quarantined += 1,
            s if s > ls::QUARANTINED => odd += 1,
            _ => {}
        }
    }
    (odd, quarantined)
}

/// Takes, empties and frees every free process slot whose lease range is not all free
/// (no process drives those leases: only a hostile write or a bug puts them there), so
/// that they count nowhere and keep no pool "busy". Taking the slot first keeps anyone
/// from registering into it meanwhile.
pub fn resolve_orphans<R: Region>(r: &R, reaper: Reaper) -> Vec<Reaped> {
    (0..r.geometry().procs)
        .filter_map(|s| {
            // Acquire: as any reader of a slot.
            let st = r.proc_slot(s).state.load(Acquire);
            let busy = r.geometry().slot_leases(s).any(|l| {
                // Relaxed: a first look; the walk re-reads each lease with Acquire.
                let ls = ls::state(r.lease(l).state.load(Relaxed));
                ls != ls::FREE && ls != ls::QUARANTINED
            });
            (ps::status(st) == ps::FREE && busy)
                .then(|| crate::recovery::take_slot(r, s, st, reaper))
                .flatten()
        })
        .collect()
}

/// How many reads of a pool's waiter counts must agree, `WAITER_GAP` apart, before
/// [`steady_waiters`] trusts them: a live waiter is between its two counts (the pool's
/// `waiters` and its slot's) for two instructions, a reaper between its `swap` and its
/// CAS for a few more.
const WAITER_READS: usize = 3;
const WAITER_GAP: Duration = Duration::from_millis(2);

/// Pool `p`'s `waiters` and the sum of what the process slots in use announce in it
/// (their `WaitingRec` counts; a free slot announces nothing, whatever its words say),
/// when `WAITER_READS` reads agree; `None` while they move. They differ for good only
/// when a waiter was killed between its two counts (its reaper takes out what its slot
/// counts), a reaper was killed between its two steps, or something wrote the words.
pub fn steady_waiters<R: Region>(r: &R, p: usize) -> Option<(u32, u64)> {
    let read = || {
        // SeqCst: as every access to `waiters` (the handshake in `waiting`).
        let counted = r.pool(p).waiters.load(SeqCst);
        let announced: u64 = (0..r.geometry().procs)
            // Acquire: as any reader of a slot.
            .filter(|&s| ps::status(r.proc_slot(s).state.load(Acquire)) != ps::FREE)
            // Acquire: pairs with the waiter's Release raise, as the reaper's swap.
            .map(|s| r.slot_waiters(s, p).load(Acquire) as u64)
            .sum();
        (counted, announced)
    };
    let first = read();
    for _ in 1..WAITER_READS {
        std::thread::sleep(WAITER_GAP);
        if read() != first {
            return None;
        }
    }
    Some(first)
}

/// Sets pool `p`'s `waiters` to what the process slots announce when the two disagree
/// steadily ([`steady_waiters`]), by a CAS from the value read, so that a waiter that
/// came or went meanwhile makes it read again; gives up, changing nothing, after
/// `budget` (as [`repair_pool`]). Returns the count before and after when it changed it.
///
/// A count above the truth costs a `FUTEX_WAKE` for nobody at every release of the pool;
/// one below it lets a release skip the wake of a sleeper, which then waits for its
/// sweep. A waiter stalled for the whole of [`steady_waiters`]' reads between its two
/// counts (descheduled there) is recounted without the one it is missing: the count
/// is one low until the pool's waiters are gone (a waiter leaves by a CAS that never
/// takes it below 0).
pub fn recount_waiters<R: Region>(r: &R, p: usize, budget: Duration) -> Option<(u32, u32)> {
    let deadline = crate::clock::after(Instant::now(), budget);
    while Instant::now() < deadline {
        let Some((counted, announced)) = steady_waiters(r, p) else {
            continue;
        };
        if counted as u64 == announced {
            return None;
        }
        let to = announced.min(u32::MAX as u64) as u32;
        // SeqCst: as every access to `waiters`.
        if r.pool(p)
            .waiters
            .compare_exchange(counted, to, SeqCst, Relaxed)
            .is_ok()
        {
            return Some((counted, to));
        }
    }
    None
}
