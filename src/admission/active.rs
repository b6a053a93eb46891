//! The active set of seed 000: the tenants that held, or asked within the window
//! before `now`, and the running sum of their weights that every decision reads.
//!
//! Relaxed throughout: the active weight is a priority input (see `admission`), never
//! the capacity bound.

use crate::layout::{TenantPoolRec, held_word, tenant_state};
use crate::region::Region;
use crate::sync::Ordering::*;

/// Whether a tenant whose last activity was `last` is still in the window at `now`.
#[inline]
pub fn recent(last: u64, now: u64, window: u64) -> bool {
    last != 0 && last.saturating_add(window) > now
}

/// Counts `(tenants, weight)` active in pool `p` at `now` by scanning the directory.
pub fn scan_active<R: Region>(r: &R, p: usize, now: u64, window: u64) -> (usize, u64) {
    let s = scan(r, p, now, window);
    (s.tenants, s.weight)
}

/// What a scan of the directory finds for one pool at `now`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scan {
    pub tenants: usize,
    pub weight: u64,
    /// The earliest instant the window of a counted tenant that holds nothing ends,
    /// capped at `now + window` (a holder that releases later counts a window from
    /// then): no departure can change the set before it.
    pub next_change: u64,
    /// The tenant whose window ends at `next_change`, if one does (`None`: the cap).
    pub next_leaver: Option<usize>,
    /// The mean hold of the units held, µs, as their releases come: the units over the
    /// rate at which they free (each holder's units over its hold average), over the
    /// holders with one known (0: none known). A harmonic mean: 7 units held 100 ms and
    /// 1 held 5 ms free about every 3.7 ms, as units held 30 ms would, not 88 ms.
    pub hold_mean_us: u64,
}

/// Scans the directory for the tenants active in pool `p` at `now`.
pub fn scan<R: Region>(r: &R, p: usize, now: u64, window: u64) -> Scan {
    let mut out = Scan {
        tenants: 0,
        weight: 0,
        next_change: now.saturating_add(window),
        next_leaver: None,
        hold_mean_us: 0,
    };
    // The rate at which the held units free (units per µs, in 2^-32ths: each holder's
    // units over its hold average), and those units. u128: 2^24 units x 2^32 x 2^16
    // tenants cannot overflow it.
    let (mut rate, mut hold_units) = (0u128, 0u64);
    for t in 0..r.geometry().tenants {
        let rec = r.tenant(t);
        // Acquire: READY publishes the name's weight (read below). The rest is Relaxed:
        // the active weight is a priority input (module docs), never the bound.
        if tenant_state::status(rec.state.load(Acquire)) != tenant_state::READY {
            continue;
        }
        let tp = r.tenant_pool(p, t);
        let held = held_word::held(tp.held.load(Relaxed));
        let last = tp.last_active_ms.load(Relaxed);
        let counted = held > 0 || recent(last, now, window);
        // Relaxed: an estimate's input, on the line the scan reads `held` from.
        let hold = if held > 0 { tp.hold_ewma_us.load(Relaxed) } else { 0 };
        if hold > 0 {
            rate += ((held as u128) << 32) / hold as u128;
            hold_units += held as u64;
        }
        if counted {
            out.tenants += 1;
            out.weight += rec.weight.load(Relaxed) as u64;
            let ends = last.saturating_add(window);
            // The first tenant found that leaves first (a tie with the cap included).
            if held == 0
                && (ends < out.next_change || ends == out.next_change && out.next_leaver.is_none())
            {
                out.next_change = ends;
                out.next_leaver = Some(t);
            }
        }
    }
    if let Some(mean) = ((hold_units as u128) << 32).checked_div(rate) {
        out.hold_mean_us = mean.min(u32::MAX as u128) as u64;
    }
    out
}

/// Marks tenant `t` active in pool `p` (asking counts, granted or not) and returns the
/// active weight to decide with (which includes `t`) and the instant the active set can
/// next lose a tenant. If `t` joins the set now (it held nothing and its stamp was out
/// of the window) and the pool evicts (`evict`), wakes the pool's spawns: see
/// `joined`.
///
/// The pool keeps a running sum. A tenant that turns active adds its weight at once
/// (the `fetch_max` that moves its stamp out of the window decides who adds). A
/// departure is applied by a scan, which runs at the first decision at or after the
/// earliest instant a counted tenant's window can end (`rescan_at_ms`); the scan
/// replaces the sum and schedules the next one. So for a sequence of calls (a replay)
/// the set is exact at every decision: a departed tenant stops counting at the instant
/// its window ends, and a returning one counts once. Under concurrency a decision may
/// use a sum a scan is replacing: a priority input, never the capacity bound.
///
/// The sum is as of the last scan's `now` (`scanned_at_ms`) or later. A decision at an
/// earlier `now` (an explicit time that steps back; a clock read that another process's
/// scan overtook) is behind it: see `behind`.
#[inline(always)] // one caller, on the hot path: see `try_acquire`
pub fn touch<R: Region>(
    r: &R,
    p: usize,
    tp: &TenantPoolRec,
    weight: u32,
    now: u64,
    window: u64,
    evict: bool,
) -> (u64, u64) {
    let pool = r.pool(p);
    // Relaxed, but for the sum's add and load below: see the module docs (a priority
    // input, not the bound). The stamp is written only when it moves (ms resolution),
    // and then by `fetch_max`, whose result says which of two racing arrivals adds the
    // weight.
    let seen = tp.last_active_ms.load(Relaxed);
    let prev = if seen < now {
        tp.last_active_ms.fetch_max(now, Relaxed)
    } else {
        seen
    };
    // Relaxed: a priority input, as the sum it dates (module docs).
    let scanned = pool.scanned_at_ms.load(Relaxed);
    if now < scanned {
        return behind(r, p, tp, weight, prev, now, scanned, window, evict);
    }
    if held_word::held(tp.held.load(Relaxed)) == 0 && !recent(prev, now, window) {
        // SeqCst: the arrival's half of a handshake with a spawn of an `evict` pool
        // (this add, then `joined`'s SeqCst load of `waiters`; the spawn announces
        // itself in `waiters`, then loads the sum below with SeqCst): a spawn that
        // decided on the sum before this add is seen waiting, and woken.
        pool.active_weight.fetch_add(weight as u64, SeqCst);
        joined(pool, evict);
    }
    let mut at = pool.rescan_at_ms.load(Relaxed);
    if now >= at {
        at = rescan(r, p, at, now, window);
    }
    // SeqCst: the waiter's half of the handshake above (a plain load on x86-64).
    (pool.active_weight.load(SeqCst).max(weight as u64), at)
}

/// A tenant joined pool `p`'s active set: if the pool evicts, every share fell, and a
/// spawn asleep with nothing to evict may evict now (one past its share, its own
/// tenant's idle residents; one under it, those of a tenant put past its share), with
/// nothing released: [`crate::waiting::shares_fell`] wakes the spawns. Whatever the
/// ask comes to: a grant's own wake reaches one of them only. In a pool that does not
/// evict, lower shares admit nobody: no wake.
#[inline(always)]
fn joined(pool: &crate::layout::PoolRec, evict: bool) {
    #[cfg(not(loom))]
    if evict {
        crate::waiting::shares_fell(pool);
    }
    #[cfg(loom)]
    let _ = (pool, evict);
}

/// [`touch`] for a decision at `now`, earlier than the last scan (`scanned`): the
/// running sum is as of a later time, which may no longer count tenants that are in
/// the window at `now`, nor this one. The decision counts its set by a scan at `now`
/// (exact for a sequence of calls, as every other decision), and leaves the sum as of
/// its later time; but if the sum may not count this tenant (it holds nothing and its
/// stamp was out of the window at the scan), which its ask may make a holder, the
/// next decision recounts (`rescan_at_ms` to 0). Cold: explicit times that step back
/// are a replay's, and clock reads that a scan overtakes are rare and a few ms behind.
#[cold]
#[allow(clippy::too_many_arguments)]
fn behind<R: Region>(
    r: &R,
    p: usize,
    tp: &TenantPoolRec,
    weight: u32,
    prev: u64,
    now: u64,
    scanned: u64,
    window: u64,
    evict: bool,
) -> (u64, u64) {
    let pool = r.pool(p);
    // Relaxed: priority inputs (module docs); a recount that comes a decision late
    // misjudges one share, never the bound.
    let holds_nothing = held_word::held(tp.held.load(Relaxed)) == 0;
    if holds_nothing && !recent(prev, scanned, window) {
        pool.rescan_at_ms.store(0, Relaxed);
    }
    // New to the set at `now`: the next decision's recount counts it (above), and a
    // spawn woken makes that decision.
    if holds_nothing && !recent(prev, now, window) {
        joined(pool, evict);
    }
    let s = scan(r, p, now, window);
    (s.weight.max(weight as u64), s.next_change)
}

/// After a release at `now`: if the release is behind the last scan (`scanned_at_ms`),
/// the tenant's window, from its stamp, may end before the scan due (it held, so no
/// scan scheduled its departure): the next decision recounts. (At or after the last
/// scan, its window ends at least a window after that scan, when the next one is due
/// at the latest.)
#[inline(always)] // on the release's path: one load
pub fn released<R: Region>(r: &R, p: usize, now: u64) {
    let pool = r.pool(p);
    // Relaxed: a priority input (module docs).
    if now < pool.scanned_at_ms.load(Relaxed) {
        pool.rescan_at_ms.store(0, Relaxed);
    }
}

/// Recomputes pool `p`'s active weight at `now` if this caller wins the rescan that was
/// due at `due`; returns when the next one is due.
#[cold]
fn rescan<R: Region>(r: &R, p: usize, due: u64, now: u64, window: u64) -> u64 {
    let pool = r.pool(p);
    // Claim the rescan: whoever moves `rescan_at_ms` from `due` does it. The claim
    // sets it a window ahead, so a scanner that dies here delays departures by at most
    // one window.
    if pool
        .rescan_at_ms
        .compare_exchange(due, now.saturating_add(window), Relaxed, Relaxed)
        .is_err()
    {
        return now; // another process is scanning; its sum lands in a moment
    }
    let before = pool.active_weight.load(Relaxed);
    let s = scan(r, p, now, window);
    let (next, leaver) = if pool
        .active_weight
        .compare_exchange(before, s.weight, Relaxed, Relaxed)
        .is_ok()
    {
        // Relaxed: a priority input; the time the sum is now as of.
        pool.scanned_at_ms.store(now, Relaxed);
        (s.next_change, s.next_leaver)
    } else {
        (now, None) // an arrival raced the scan: count again at the next decision
    };
    // Relaxed, both: inputs of an estimate (`leaves_at`); a reader that pairs a
    // new instant with an old tenant only misjudges one hint.
    pool.rescan_for
        .store(leaver.map_or(0, |t| t as u32 + 1), Relaxed);
    // Relaxed: an estimate's input (`pool_full` hints), as of this scan.
    pool.hold_mean_us.store(s.hold_mean_us, Relaxed);
    pool.rescan_at_ms.store(next, Relaxed);
    next
}

/// Whether another tenant than `me` leaves pool `p`'s active set at `at`, the instant
/// the next scan is due, as far as the last scan tells: true if the tenant whose window
/// ends then (`PoolRec::rescan_for`) has neither asked nor held since that scan; false
/// if nobody is known to be leaving (the scan's cap set `at`, or that tenant asked
/// again, so its window now ends later).
///
/// `at` is only a lower bound on a departure: a tenant that keeps asking never leaves.
/// A refusal that cut every hint to it would send all of a tenant's waiting clients
/// back at that one instant, once a window, into a set that did not change (seen
/// through real servers: a burst of ~50 retries a second, and the other tenant's
/// request queued 20 ms behind them).
#[cold]
pub fn leaves_at<R: Region>(r: &R, p: usize, me: usize, at: u64, window: u64) -> bool {
    // Relaxed: an estimate's inputs (see `rescan`). The index is read from shared
    // memory: bounds-checked before use.
    let Some(k) = (r.pool(p).rescan_for.load(Relaxed) as usize).checked_sub(1) else {
        return false;
    };
    if k == me || k >= r.geometry().tenants {
        return false;
    }
    let tp = r.tenant_pool(p, k);
    held_word::held(tp.held.load(Relaxed)) == 0
        && tp.last_active_ms.load(Relaxed).saturating_add(window) <= at
}
