//! The fair-share rule of seed 000, and the attempt that applies it.
//!
//! ```text
//! active(pool)  = tenants that held or asked for a permit in the last window
//! share(t)      = max(FLOOR, POOL * w_t / sum of active weights)
//! admit(t, u)   = in_use + u <= POOL          when t holds <  share(t)
//!               = in_use + u <= POOL - FLOOR  when t holds >= share(t)
//! ```
//!
//! [`decide`] is exact integer arithmetic (`held * W < POOL * w`), so no float tolerance
//! enters the rule. The capacity bound depends only on `decide` running under the
//! pool's serialization (`ops`); the active weight is a priority input, kept with
//! Relaxed atomics: being a few ms stale moves a share, never the bound.

use crate::error::Result;
use crate::layout::{held_word, pair, tenant_state};
use crate::ops::{self, AcqOutcome, Desc};
use crate::region::Region;
use crate::sync::Ordering::*;

/// The outcome of the rule for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Admit,
    /// Under its share, but `short` more units would have to be free.
    PoolFull {
        short: u32,
    },
    /// At or past its share, and `short` units more would eat into the floor.
    OverShare {
        short: u32,
    },
}

/// `true` when a tenant holding `held` is below its share.
#[inline]
pub fn under_share(held: u32, d: &Desc) -> bool {
    let w = d.weight as u128;
    let total = (d.active_weight as u128).max(w).max(1);
    held < d.floor || (held as u128) * total < (d.cap as u128) * w
}

/// The rule, exactly. Pure: every helper of an op computes the same answer.
#[inline]
pub fn decide(in_use: u32, held: u32, d: &Desc) -> Decision {
    let want = in_use as u64 + d.units as u64;
    if under_share(held, d) {
        match want.checked_sub(d.cap as u64) {
            None | Some(0) => Decision::Admit,
            Some(short) => Decision::PoolFull {
                short: short as u32,
            },
        }
    } else {
        let limit = (d.cap as u64).saturating_sub(d.floor as u64);
        match want.checked_sub(limit) {
            None | Some(0) => Decision::Admit,
            Some(short) => Decision::OverShare {
                short: short as u32,
            },
        }
    }
}

/// `share(t)` as a real number, for reports.
pub fn share(cap: u32, floor: u32, weight: u32, active_weight: u64) -> f64 {
    let total = active_weight.max(weight as u64).max(1) as f64;
    (cap as f64 * weight as f64 / total).max(floor as f64)
}

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
}

/// Scans the directory for the tenants active in pool `p` at `now`.
pub fn scan<R: Region>(r: &R, p: usize, now: u64, window: u64) -> Scan {
    let mut out = Scan {
        tenants: 0,
        weight: 0,
        next_change: now.saturating_add(window),
    };
    for t in 0..r.geometry().tenants {
        let rec = r.tenant(t);
        if tenant_state::status(rec.state.load(Acquire)) != tenant_state::READY {
            continue;
        }
        let tp = r.tenant_pool(p, t);
        let held = held_word::held(tp.held.load(Relaxed));
        let last = tp.last_active_ms.load(Relaxed);
        let counted = held > 0 || recent(last, now, window);
        if counted {
            out.tenants += 1;
            out.weight += rec.weight.load(Relaxed) as u64;
            if held == 0 {
                out.next_change = out.next_change.min(last.saturating_add(window));
            }
        }
    }
    out
}

/// Marks tenant `t` active in pool `p` (asking counts, granted or not) and returns the
/// active weight to decide with (which includes `t`) and the instant the active set can
/// next lose a tenant.
///
/// The pool keeps a running sum. A tenant that turns active adds its weight at once
/// (the `fetch_max` that moves its stamp out of the window decides who adds). A
/// departure is applied by a scan, which runs at the first decision at or after the
/// earliest instant a counted tenant's window can end (`rescan_at_ms`); the scan
/// replaces the sum and schedules the next one. So for a sequence of calls (a replay)
/// the set is exact at every decision: a departed tenant stops counting at the instant
/// its window ends, and a returning one counts once. Under concurrency a decision may
/// use a sum a scan is replacing: a priority input, never the capacity bound.
pub fn touch<R: Region>(
    r: &R,
    p: usize,
    t: usize,
    weight: u32,
    now: u64,
    window: u64,
) -> (u64, u64) {
    let pool = r.pool(p);
    let tp = r.tenant_pool(p, t);
    // Relaxed throughout: see the module docs (a priority input, not the bound). The
    // stamp is written only when it moves (ms resolution), and then by `fetch_max`,
    // whose result says which of two racing arrivals adds the weight.
    let seen = tp.last_active_ms.load(Relaxed);
    let prev = if seen < now {
        tp.last_active_ms.fetch_max(now, Relaxed)
    } else {
        seen
    };
    if held_word::held(tp.held.load(Relaxed)) == 0 && !recent(prev, now, window) {
        pool.active_weight.fetch_add(weight as u64, Relaxed);
    }
    let mut at = pool.rescan_at_ms.load(Relaxed);
    if now >= at {
        at = rescan(r, p, at, now, window);
    }
    (pool.active_weight.load(Relaxed).max(weight as u64), at)
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
    let next = if pool
        .active_weight
        .compare_exchange(before, s.weight, Relaxed, Relaxed)
        .is_ok()
    {
        s.next_change
    } else {
        now // an arrival raced the scan: count again at the next decision
    };
    pool.rescan_at_ms.store(next, Relaxed);
    next
}

/// Default hold time assumed before any release was observed, in µs.
pub const DEFAULT_HOLD_US: u64 = 10_000;

/// Estimated ms until `short` units come free in a pool with `in_use` units held,
/// assuming holds of the observed average length end evenly. Rounded up, at least 1.
pub fn retry_after_ms(hold_ewma_us: u64, declared_hold_ms: u64, short: u32, in_use: u32) -> u64 {
    let hold_us = if hold_ewma_us > 0 {
        hold_ewma_us
    } else if declared_hold_ms > 0 {
        declared_hold_ms.saturating_mul(1000)
    } else {
        DEFAULT_HOLD_US
    };
    let us = hold_us.saturating_mul(short.max(1) as u64) / (in_use.max(1) as u64);
    us.div_ceil(1000).max(1)
}

/// Folds one observed hold time into tenant `t`'s moving average in pool `p` (weight
/// 1/8). The line is the tenant's own, which its release just wrote.
pub fn observe_hold<R: Region>(r: &R, p: usize, t: usize, hold_us: u64) {
    let ewma = &r.tenant_pool(p, t).hold_ewma_us;
    let sample = hold_us.clamp(1, u32::MAX as u64) as u32;
    // Relaxed load/store: a lost update only skips one sample of an estimate.
    let old = ewma.load(Relaxed);
    let new = if old == 0 {
        sample
    } else {
        old - old / 8 + sample / 8
    };
    if new.max(1) != old {
        ewma.store(new.max(1), Relaxed);
    }
}

/// One acquire attempt, as the core sees it (indices already resolved and checked).
#[derive(Clone, Copy, Debug)]
pub struct Attempt {
    pub pool: usize,
    pub tenant: usize,
    pub units: u32,
    pub hold_ms: u64,
    pub now: u64,
    pub window_ms: u64,
    pub weight: u32,
    pub tid: u32,
    /// The pool's `limits` word (capacity, floor) as the caller read it, once: it is
    /// frozen into the descriptor, and the caller checked `units` against it.
    pub limits: u64,
}

/// The facts a refusal is explained by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RefusalFacts {
    pub decision: Decision,
    pub in_use: u32,
    pub held: u32,
    pub cap: u32,
    pub floor: u32,
    pub weight: u32,
    pub active_weight: u64,
    pub retry_after_ms: u64,
}

/// What [`try_acquire`] came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admitted {
    Granted {
        lease: usize,
        desc: Desc,
    },
    /// `claimed`: the lease that was claimed (and freed again) before the refusal.
    Refused {
        facts: RefusalFacts,
        claimed: Option<usize>,
    },
}

/// The protocol part of an acquire, which loom checks (see [`ops::acquire`]): claims a
/// lease of process slot `slot` if the rule admits, applies the grant, and frees the
/// lease unless granted. Returns the lease index (none if refused before claiming
/// one), the descriptor and the outcome.
pub fn admit<R: Region>(
    r: &R,
    slot: usize,
    hint: usize,
    d: Desc,
    tid: u32,
    now: u64,
    hold_ms: u64,
) -> Result<(Option<usize>, Desc, AcqOutcome)> {
    ops::acquire(r, slot, hint, d, tid, now, hold_ms)
}

/// The protocol part of a release, which loom checks (see [`ops::release`]).
pub fn unadmit<R: Region>(r: &R, l: usize, generation: u32, known: Option<&Desc>) -> Result<Desc> {
    ops::release(r, l, generation, known)
}

/// Marks activity, freezes the decision inputs, runs [`admit`], and keeps statistics.
pub fn try_acquire<R: Region>(
    r: &R,
    slot: usize,
    hint: usize,
    a: &Attempt,
    spare: Option<(usize, u32)>,
) -> Result<Admitted> {
    debug_assert!(a.units > 0 && a.pool < r.geometry().pools && a.tenant < r.geometry().tenants);
    let (active_weight, set_changes_at) = touch(r, a.pool, a.tenant, a.weight, a.now, a.window_ms);
    let (cap, floor) = (pair::lo(a.limits), pair::hi(a.limits));
    let d = Desc {
        generation: 0,
        pool: a.pool as u32,
        tenant: a.tenant as u32,
        units: a.units,
        cap,
        floor,
        weight: a.weight,
        active_weight,
    };
    let (l, d, outcome) =
        ops::acquire_with_spare(r, slot, hint, d, a.tid, a.now, a.hold_ms, spare)?;
    let tp = r.tenant_pool(a.pool, a.tenant);
    // Statistics: grants are counted in the lease slot by its owner (no RMW) and reach
    // the tenant's counter when the slot serves another tenant; refusals are counted
    // on the tenant's own line (Relaxed). The pool's totals are sums (see `stats`).
    match (outcome, l) {
        (AcqOutcome::Granted, Some(l)) => {
            ops::count_grant(r, r.lease(l));
            Ok(Admitted::Granted { lease: l, desc: d })
        }
        (AcqOutcome::Granted, None) => unreachable!("a grant has a lease"),
        (
            AcqOutcome::Refused {
                in_use,
                held,
                decision,
            },
            claimed,
        ) => {
            let (code, short) = match decision {
                Decision::PoolFull { short } => (1, short),
                Decision::OverShare { short } => (2, short),
                Decision::Admit => unreachable!("a refusal carries a refusing decision"),
            };
            tp.refusals[code - 1].fetch_add(1, Relaxed);
            let ewma = tp.hold_ewma_us.load(Relaxed) as u64;
            let facts = RefusalFacts {
                decision,
                in_use,
                held,
                cap,
                floor,
                weight: a.weight,
                active_weight,
                retry_after_ms: {
                    let est = retry_after_ms(ewma, a.hold_ms, short, in_use);
                    // Over its share, the tenant's share grows when another leaves the
                    // active set: not before `set_changes_at`, perhaps then.
                    match decision {
                        Decision::OverShare { .. } if set_changes_at > a.now => {
                            est.min(set_changes_at - a.now)
                        }
                        _ => est,
                    }
                },
            };
            Ok(Admitted::Refused { facts, claimed })
        }
    }
}

/// Releases lease `l` of generation `generation` at `now`, with the owner's copy of
/// its descriptor if it has one; marks activity and feeds the hold estimate.
/// With `keep: Some(tid)` the slot stays `CLAIMED` as thread `tid`'s spare.
pub fn release<R: Region>(
    r: &R,
    l: usize,
    generation: u32,
    known: Option<&Desc>,
    now: u64,
    keep: Option<u32>,
) -> Result<Desc> {
    // Relaxed: our own lease, stable until we free it.
    let granted = r.lease(l).granted_ms.load(Relaxed);
    let d = match keep {
        None => unadmit(r, l, generation, known)?,
        Some(tid) => ops::release_keeping(r, l, generation, known, tid)?,
    };
    let (p, t) = (d.pool as usize, d.tenant as usize);
    // Relaxed: activity and the hold estimate are soft (module docs).
    let stamp = &r.tenant_pool(p, t).last_active_ms;
    if stamp.load(Relaxed) < now {
        stamp.fetch_max(now, Relaxed);
    }
    observe_hold(r, p, t, now.saturating_sub(granted).saturating_mul(1000));
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(cap: u32, floor: u32, w: u32, total: u64, units: u32) -> Desc {
        Desc {
            generation: 1,
            pool: 0,
            tenant: 0,
            units,
            cap,
            floor,
            weight: w,
            active_weight: total,
        }
    }

    #[test]
    fn room_refuses_nothing_and_alone_gets_all() {
        let d = desc(8, 1, 1, 1, 1);
        for held in 0..8 {
            assert_eq!(decide(held, held, &d), Decision::Admit, "held {held}");
        }
        // Holding all 8 it holds exactly its share: refused at the floor (the pool is
        // full either way); a lone tenant under its share finds the pool full instead.
        assert_eq!(decide(8, 8, &d), Decision::OverShare { short: 2 });
        assert_eq!(
            decide(8, 7, &desc(8, 1, 1, 1, 1)),
            Decision::PoolFull { short: 1 }
        );
    }

    #[test]
    fn over_share_stops_one_floor_short() {
        let d = desc(8, 1, 1, 2, 1); // share 4
        assert_eq!(decide(6, 3, &d), Decision::Admit); // under share: up to POOL
        assert_eq!(decide(6, 4, &d), Decision::Admit); // 7 <= 8 - 1
        assert_eq!(decide(7, 4, &d), Decision::OverShare { short: 1 });
        assert_eq!(decide(7, 3, &d), Decision::Admit); // under share takes the floor
    }

    #[test]
    fn weights_and_floor_set_the_share() {
        // POOL 100, weights 3:1 -> shares 75 and 25; floor 5.
        let heavy = desc(100, 5, 3, 4, 1);
        let light = desc(100, 5, 1, 4, 1);
        assert!(under_share(74, &heavy) && !under_share(75, &heavy));
        assert!(under_share(24, &light) && !under_share(25, &light));
        // 30 tenants of weight 1: POOL/30 = 3.3 < floor 5, so the floor is the share.
        let many = desc(100, 5, 1, 30, 1);
        assert!(under_share(4, &many) && !under_share(5, &many));
        assert_eq!(share(100, 5, 1, 30), 5.0);
        assert_eq!(share(100, 5, 3, 4), 75.0);
    }

    #[test]
    fn all_or_nothing() {
        let d = desc(8, 1, 1, 1, 3);
        assert_eq!(decide(6, 0, &d), Decision::PoolFull { short: 1 });
        assert_eq!(decide(5, 0, &d), Decision::Admit);
    }

    #[test]
    fn retry_after_rounds_up_and_is_never_zero() {
        assert_eq!(retry_after_ms(5_000, 0, 1, 8), 1); // 0.625 ms -> 1
        assert_eq!(retry_after_ms(5_000, 0, 4, 2), 10);
        assert_eq!(retry_after_ms(0, 3, 1, 1), 3);
        assert_eq!(retry_after_ms(0, 0, 1, 1), 10);
        assert_eq!(retry_after_ms(1, 0, 1, 1000), 1);
    }
}
