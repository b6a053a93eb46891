//! The retry-after of a refusal: when this tenant's next request is likely to be
//! admitted, so that a client which waits that long stays out of the server's queue
//! instead of coming back at once ahead of other tenants.
//!
//! Each tenant has a turn clock per pool (`TenantPoolRec::turn_at_us`): the turn
//! promised to its latest refused request. A refusal takes the next turn, one
//! *interval* after that clock, or half an interval after now when the clock is not
//! ahead of now, and the hint is the time until it. The interval is how often a permit
//! that can serve this tenant comes free:
//! - `over_share`: only the tenant's own releases make room for it (it is at or past
//!   its share), so the interval is its mean hold over the units it holds;
//! - `pool_full`: any release does, so the mean hold of the units in use over their
//!   count (times the units asked, or the pool's shortfall when more: a `per_worker`
//!   pool that shrank below what is held needs that much to come free first). The mean
//!   hold is the holders' (`PoolRec::hold_mean_us`: the units over the rate at which
//!   they free, each holder's units over its hold average, as of the last scan of the
//!   active set), not the asker's: a light
//!   tenant of short requests, refused while a heavy one's long requests fill the
//!   pool, would otherwise be told to come back many times too soon. Before any
//!   holder's hold is known, the asker's own stands in.
//!
//! So a tenant with a backlog of B refused requests hands out turns spread over B
//! intervals: its clients come back about as fast as its permits turn over (Little's
//! law: B waiting, served at held / hold per ms, wait B x hold / held), and not sooner
//! than the rule can be expected to honour: releases come one interval apart, and a
//! refusal comes on average half an interval after the last, so the first of them is
//! due half an interval from now, the k-th k - 1/2 intervals from now. (Until
//! 2026-12-02 the first turn was a whole interval away: a client that pauses its whole
//! tenant for a hint then left its permits free for half an interval a refusal; see
//! the README's "A client that pauses the whole tenant".) The hint
//! adds a jitter of up to a quarter interval, a hash of the turn, so that clients given
//! neighbouring turns do not come back in lockstep. Everything is integer arithmetic
//! under the caller's `now`, so a recorded sequence of refusals replays to the same
//! hints.
//!
//! The clock never runs more than [`MAX_HINT_MS`] ahead of now: clients that ignore
//! their hints (and so take turn after turn) cannot push the hints of their tenant's
//! polite clients past that.
//!
//! Over its share, a tenant's released permits are contended by its own new requests
//! as well as by its refused ones: a client in a closed loop asks again the moment its
//! response arrives, and often retakes the permit it just gave back. So a refused
//! request gets one of its tenant's turnovers only as often as the tenant's attempts
//! succeed: with G grants to R refusals in its recent traffic, an attempt is admitted
//! with probability G / (G + R), and the turn a refused request can count on comes
//! every interval x (1 + R / G) ([`contended_interval_us`]). Its permits turn over
//! once an interval, so R / G is the interval over the mean gap between its refusals,
//! which each refusal measures ([`next_gap`]): nothing is added to a grant. A tenant
//! refused now and then (gaps far longer than its turnover) keeps the plain interval;
//! one refused once per grant or more gets turns twice as far apart, the most.

/// Default hold time assumed before any release was observed, in µs.
pub const DEFAULT_HOLD_US: u64 = 10_000;
/// The longest hint, and how far the turn clock may run ahead of now, in ms.
pub const MAX_HINT_MS: u64 = 10_000;

/// A refusal's turn: the new value of the turn clock and the hint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Turn {
    /// The turn clock after this refusal took its turn (µs).
    pub turn_at_us: u64,
    /// The hint, in ms, rounded up, at least 1.
    pub hint_ms: u64,
    /// Turns that were promised ahead of this one and not yet due: the backlog.
    pub queued: u32,
    /// The interval between turns, µs.
    pub interval_us: u64,
}

/// The mean hold to assume: the observed moving average, else the declared hold, else
/// [`DEFAULT_HOLD_US`].
pub fn hold_us(hold_ewma_us: u64, declared_hold_ms: u64) -> u64 {
    if hold_ewma_us > 0 {
        hold_ewma_us
    } else if declared_hold_ms > 0 {
        declared_hold_ms.saturating_mul(1000)
    } else {
        DEFAULT_HOLD_US
    }
}

/// The interval between turns: the time for `units` to come free when `turning`
/// units turn over, each held `hold_us` on average. At least 1 µs.
pub fn interval_us(hold_us: u64, units: u32, turning: u32) -> u64 {
    (hold_us.saturating_mul(units.max(1) as u64) / turning.max(1) as u64).max(1)
}

/// The longest gap between refusals that the average takes in, µs: a refusal after
/// a long quiet spell counts as one this far from the last.
pub const MAX_GAP_US: u64 = MAX_HINT_MS * 1000;

/// The refusal-gap word (`TenantPoolRec.refusal_gap`) after a refusal at `now_ms`:
/// the latest refusal's time (low 32 bits of ms, never 0) and the moving average
/// (weight 1/8) of the gaps between refusals, µs, each gap at most [`MAX_GAP_US`].
/// The first refusal (a word of 0) only records its time.
pub fn next_gap(word: u64, now_ms: u64) -> u64 {
    let (last, avg) = (word as u32, (word >> 32) as u32);
    let stamp = due_lo(now_ms);
    if last == 0 {
        return stamp as u64;
    }
    // Wrapping: the low 32 bits of ms wrap every 49 days; a gap that long is capped.
    let gap = (((now_ms as u32).wrapping_sub(last) as u64) * 1000).min(MAX_GAP_US) as u32;
    let avg = if avg == 0 { gap } else { avg - avg / 8 + gap / 8 };
    (avg as u64) << 32 | stamp as u64
}

/// The moving average (weight 1/8) of a tenant's hints, µs
/// (`TenantPoolRec.hint_avg_us`), after a hint of `hint_ms`; the first hint (an
/// average of 0) is taken as it is.
pub fn next_hint_avg(avg_us: u64, hint_ms: u64) -> u64 {
    let h = hint_ms.min(MAX_HINT_MS) * 1000;
    let avg = avg_us.min(MAX_HINT_MS * 1000);
    if avg == 0 { h } else { avg - avg / 8 + h / 8 }
}

/// The mean gap between refusals in a refusal-gap word, µs; 0 while unknown (fewer
/// than two refusals, or refusals within the same ms so far).
pub fn gap_us(word: u64) -> u64 {
    word >> 32
}

/// The turn interval of an over-share refusal: the tenant's turnover `interval_us`
/// stretched by its refusals per grant (module docs), `interval x (1 + min(interval /
/// gap, 1))`, with `gap_us` the mean gap between its refusals (0: unknown, the
/// interval as it is). At most twice the interval: a tenant's clients bring at most
/// one new request per grant (a client in a closed loop asks again once per
/// response), so refusals beyond one per grant are the same requests coming back,
/// not more competition; and a burst of refusals within one ms (gaps of 0 on a ms
/// clock) cannot stretch it further.
pub fn contended_interval_us(interval_us: u64, gap_us: u64) -> u64 {
    if gap_us == 0 {
        return interval_us;
    }
    let extra = (interval_us.saturating_mul(interval_us) / gap_us).min(interval_us);
    interval_us.saturating_add(extra)
}

/// The next turn after the clock `turn_at_us`, for a refusal at `now_ms`.
pub fn next_turn(turn_at_us: u64, now_ms: u64, interval_us: u64) -> Turn {
    let now_us = now_ms.saturating_mul(1000);
    let horizon = now_us.saturating_add(MAX_HINT_MS * 1000);
    let start = turn_at_us.clamp(now_us, horizon);
    // The turns ahead: the clock is half an interval past now after one turn, and one
    // interval further per turn after it (rounded, so a clock partly drained counts the
    // turn it is in).
    let queued = ((start - now_us + interval_us / 2) / interval_us).min(u32::MAX as u64) as u32;
    // With no turn ahead, now is on average half an interval after the tenant's last
    // release (releases come one interval apart), so its next is half an interval away.
    let step = if start == now_us {
        interval_us.div_ceil(2)
    } else {
        interval_us
    };
    let turn = start.saturating_add(step).min(horizon);
    let jitter = spread(turn) % (interval_us / 4 + 1);
    let hint_us = (turn - now_us + jitter).min(MAX_HINT_MS * 1000);
    Turn {
        turn_at_us: turn,
        hint_ms: hint_us.div_ceil(1000).max(1),
        queued,
        interval_us,
    }
}

/// When the turn of a refusal with `queued` turns ahead of it is due at the earliest,
/// in ms rounded up: one interval per turn ahead and half of one for the first. A hint of
/// [`next_turn`] is never shorter (it adds its jitter to the turn); one that is was cut
/// afterwards (at [`MAX_HINT_MS`], or by the caller).
pub fn turn_ms(queued: u32, interval_us: u64) -> u64 {
    (2 * queued as u64 + 1)
        .saturating_mul(interval_us)
        .div_ceil(2000)
}

/// A hash of a turn (SplitMix64's finaliser): the jitter's source.
pub fn spread(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Whether `now_ms` is before the due time whose low 32 bits are `due_lo` (0: none).
/// Hints are at most [`MAX_HINT_MS`], so the wrapping difference is exact.
pub fn before_due(due_lo: u32, now_ms: u64) -> bool {
    due_lo != 0 && (due_lo.wrapping_sub(now_ms as u32) as i32) > 0
}

/// The low 32 bits of a due time, never 0 (0 means none).
pub fn due_lo(due_ms: u64) -> u32 {
    (due_ms as u32).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backlog_is_spread_one_interval_apart() {
        // 5 ms holds, 2 units held: a permit of this tenant's frees every 2.5 ms.
        let i = interval_us(hold_us(5_000, 0), 1, 2);
        assert_eq!(i, 2_500);
        let mut clock = 0;
        let mut hints = Vec::new();
        for k in 0..4u32 {
            let t = next_turn(clock, 1_000, i);
            assert_eq!(t.queued, k, "turns ahead of the {k}th refusal");
            clock = t.turn_at_us;
            hints.push(t.hint_ms);
        }
        assert_eq!(clock, 1_000_000 + 1_250 + 3 * 2_500);
        // Turn k is due (k + 1/2) x 2.5 ms from now, plus a jitter under 625 µs.
        for (k, h) in hints.iter().enumerate() {
            let base = k as u64 * 2_500 + 1_250;
            assert!(
                (base.div_ceil(1000)..=(base + 625).div_ceil(1000)).contains(h),
                "hint {k}: {h}"
            );
        }
    }

    #[test]
    fn the_hint_average_moves_an_eighth_and_starts_at_the_first() {
        assert_eq!(next_hint_avg(0, 3), 3_000);
        assert_eq!(next_hint_avg(3_000, 11), 3_000 - 375 + 1_375);
        // A hint past the longest counts as the longest, and so does a word that holds
        // more (shared memory may hold anything).
        assert_eq!(next_hint_avg(0, u64::MAX), MAX_HINT_MS * 1000);
        assert_eq!(next_hint_avg(u64::MAX, MAX_HINT_MS), MAX_HINT_MS * 1000);
        let mut avg = 0;
        for _ in 0..64 {
            avg = next_hint_avg(avg, 700);
        }
        assert_eq!(avg, 700_000);
    }

    #[test]
    fn a_hint_is_never_shorter_than_its_turn_unless_capped() {
        for i in [1, 999, 2_500, 40_000] {
            let mut clock = 0;
            for _ in 0..2_000 {
                let t = next_turn(clock, 1_000, i);
                clock = t.turn_at_us;
                let turn = turn_ms(t.queued, i);
                assert!(
                    t.hint_ms >= turn || t.hint_ms == MAX_HINT_MS,
                    "interval {i} µs, {} queued: hint {} ms, turn {turn} ms",
                    t.queued,
                    t.hint_ms
                );
            }
        }
    }

    #[test]
    fn the_clock_drains_as_time_passes_and_never_lags_now() {
        let i = 1_000;
        let t = next_turn(0, 50, i);
        assert_eq!((t.turn_at_us, t.queued), (50_500, 0));
        // 10 ms later the old turn is past: the next one starts from now.
        let u = next_turn(t.turn_at_us, 60, i);
        assert_eq!((u.turn_at_us, u.queued), (60_500, 0));
        // A clock 5 turns ahead of now queues the refusal behind them.
        let v = next_turn(65_000, 60, i);
        assert_eq!((v.turn_at_us, v.queued), (66_000, 5));
        assert_eq!(v.hint_ms, 6 + (spread(66_000) % 251).div_ceil(1000).min(1));
    }

    #[test]
    fn hints_are_never_shorter_than_half_an_interval_nor_zero() {
        for (hold, units, turning) in [(1, 1, 1000), (5_000, 1, 4), (30_000, 3, 2), (0, 1, 1)] {
            let i = interval_us(hold_us(hold, 0), units, turning);
            let t = next_turn(0, 7, i);
            assert!(t.hint_ms >= 1);
            assert!(t.hint_ms * 2000 >= i, "hint {} ms, interval {i} µs", t.hint_ms);
            // The next refusal's turn is a whole interval after the first.
            let u = next_turn(t.turn_at_us, 7, i);
            assert_eq!(u.turn_at_us - t.turn_at_us, i);
        }
    }

    #[test]
    fn the_clock_is_capped_so_ignored_hints_cannot_run_it_away() {
        let mut clock = 0;
        for _ in 0..100_000 {
            clock = next_turn(clock, 1_000, 2_500).turn_at_us;
        }
        assert_eq!(clock, 1_000_000 + MAX_HINT_MS * 1000);
        let t = next_turn(clock, 1_000, 2_500);
        assert_eq!(t.hint_ms, MAX_HINT_MS);
        // A clock left far ahead (garbage, or an old burst) is clamped the same way.
        assert_eq!(next_turn(u64::MAX, 1_000, 2_500).hint_ms, MAX_HINT_MS);
    }

    #[test]
    fn the_hold_assumed_is_observed_then_declared_then_the_default() {
        assert_eq!(hold_us(7_000, 50), 7_000);
        assert_eq!(hold_us(0, 50), 50_000);
        assert_eq!(hold_us(0, 0), DEFAULT_HOLD_US);
        assert_eq!(interval_us(10_000, 4, 2), 20_000);
        assert_eq!(interval_us(10_000, 1, 0), 10_000);
    }

    #[test]
    fn jitter_spreads_neighbouring_turns() {
        let hints: std::collections::BTreeSet<u64> = (0..64)
            .map(|k| spread(1_000_000 + k * 20_000) % (20_000 / 4 + 1))
            .collect();
        assert!(hints.len() > 50, "64 neighbouring turns get distinct jitters");
        assert!(hints.iter().all(|&j| j <= 5_000));
    }

    #[test]
    fn the_gap_between_refusals_is_averaged_from_the_second_one() {
        let w = next_gap(0, 1_000);
        assert_eq!((w as u32, gap_us(w)), (1_000, 0), "the first only records its time");
        let w = next_gap(w, 1_003);
        assert_eq!((w as u32, gap_us(w)), (1_003, 3_000), "the second sets the average");
        // Then 1/8 of each new gap: 3 ms + (1 ms - 3 ms) / 8.
        let w = next_gap(w, 1_004);
        assert_eq!(gap_us(w), 3_000 - 375 + 125);
        // Refusals 2 ms apart pull it to 2 ms.
        let mut w = w;
        for k in 1..200 {
            w = next_gap(w, 1_004 + 2 * k);
        }
        // (Within the truncation of the integer average.)
        assert!((1_990..=2_010).contains(&gap_us(w)), "{}", gap_us(w));
        // A refusal after a quiet hour counts as one 10 s gap, not an hour's.
        let w = next_gap(w, 3_600_000);
        assert!(gap_us(w) > 1_250_000 && gap_us(w) < 1_260_000, "{}", gap_us(w));
    }

    #[test]
    fn a_gap_spans_the_32_bit_wrap_of_ms() {
        let t = (1u64 << 32) - 2;
        let w = next_gap(next_gap(next_gap(0, t - 4), t), t + 5);
        // Gaps of 4 and 5 ms (the second across the wrap), folded in at 1/8.
        assert_eq!(gap_us(w), 4_000 - 500 + 625);
        assert_eq!(w as u32, due_lo(t + 5));
    }

    #[test]
    fn turns_stretch_by_the_refusals_per_grant() {
        // Turnover every 3 ms, refused every 3 ms (one refusal per grant): twice apart.
        assert_eq!(contended_interval_us(3_000, 3_000), 6_000);
        // Refused every 30 ms (one per ten grants): a tenth further.
        assert_eq!(contended_interval_us(3_000, 30_000), 3_300);
        // Every 6 ms (one per two grants): half again.
        assert_eq!(contended_interval_us(3_000, 6_000), 4_500);
        // Refused rarely, or not yet twice: the plain interval.
        assert_eq!(contended_interval_us(3_000, MAX_GAP_US), 3_000);
        assert_eq!(contended_interval_us(3_000, 0), 3_000);
        // Seven refusals per grant (clients that retry at once), or a burst within one
        // ms: twice, the most.
        assert_eq!(contended_interval_us(700, 100), 1_400);
        assert_eq!(contended_interval_us(1_700, 1), 3_400);
        assert_eq!(contended_interval_us(u64::MAX / 2, 1), u64::MAX - 1);
    }

    #[test]
    fn due_times_compare_across_the_32_bit_wrap() {
        let now = (1u64 << 32) - 5;
        assert!(before_due(due_lo(now + 10), now));
        assert!(!before_due(due_lo(now - 1), now));
        assert!(!before_due(due_lo(now), now));
        assert!(!before_due(0, now));
        assert_eq!(due_lo(1u64 << 32), 1);
    }
}
