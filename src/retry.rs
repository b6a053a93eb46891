//! The retry-after of a refusal: when this tenant's next request is likely to be
//! admitted, so that a client which waits that long stays out of the server's queue
//! instead of coming back at once ahead of other tenants.
//!
//! Each tenant has a turn clock per pool (`TenantPoolRec::turn_at_us`): the turn
//! promised to its latest refused request. A refusal takes the next turn, one
//! *interval* after the later of that clock and now, and the hint is the time until
//! it. The interval is how often a permit that can serve this tenant comes free:
//! - `over_share`: only the tenant's own releases make room for it (it is at or past
//!   its share), so the interval is its mean hold over the units it holds;
//! - `pool_full`: any release does, so the mean hold over the units in use.
//!
//! So a tenant with a backlog of B refused requests hands out turns spread over B
//! intervals: its clients come back about as fast as its permits turn over (Little's
//! law: B waiting, served at held / hold per ms, wait B x hold / held), and never
//! sooner than the rule can honour (one interval: the first of its releases). The hint
//! adds a jitter of up to a quarter interval, a hash of the turn, so that clients given
//! neighbouring turns do not come back in lockstep. Everything is integer arithmetic
//! under the caller's `now`, so a recorded sequence of refusals replays to the same
//! hints.
//!
//! The clock never runs more than [`MAX_HINT_MS`] ahead of now: clients that ignore
//! their hints (and so take turn after turn) cannot push the hints of their tenant's
//! polite clients past that.

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

/// The next turn after the clock `turn_at_us`, for a refusal at `now_ms`.
pub fn next_turn(turn_at_us: u64, now_ms: u64, interval_us: u64) -> Turn {
    let now_us = now_ms.saturating_mul(1000);
    let horizon = now_us.saturating_add(MAX_HINT_MS * 1000);
    let start = turn_at_us.clamp(now_us, horizon);
    let queued = ((start - now_us) / interval_us).min(u32::MAX as u64) as u32;
    let turn = start.saturating_add(interval_us).min(horizon);
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
/// in ms rounded up: one interval per turn ahead and one for its own. A hint of
/// [`next_turn`] is never shorter (it adds its jitter to the turn); one that is was cut
/// afterwards (at [`MAX_HINT_MS`], or by the caller).
pub fn turn_ms(queued: u32, interval_us: u64) -> u64 {
    (queued as u64 + 1).saturating_mul(interval_us).div_ceil(1000)
}

/// A hash of a turn (SplitMix64's finaliser): the jitter's source.
fn spread(x: u64) -> u64 {
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
        assert_eq!(clock, 1_000_000 + 4 * 2_500);
        // Turn k is due (k + 1) x 2.5 ms from now, plus a jitter under 625 µs.
        for (k, h) in hints.iter().enumerate() {
            let base = (k as u64 + 1) * 2_500;
            assert!(
                (base.div_ceil(1000)..=(base + 625).div_ceil(1000)).contains(h),
                "hint {k}: {h}"
            );
        }
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
        assert_eq!((t.turn_at_us, t.queued), (51_000, 0));
        // 10 ms later the old turn is past: the next one starts from now.
        let u = next_turn(t.turn_at_us, 60, i);
        assert_eq!((u.turn_at_us, u.queued), (61_000, 0));
        // A clock 5 turns ahead of now queues the refusal behind them.
        let v = next_turn(65_000, 60, i);
        assert_eq!((v.turn_at_us, v.queued), (66_000, 5));
        assert_eq!(v.hint_ms, 6 + (spread(66_000) % 251).div_ceil(1000).min(1));
    }

    #[test]
    fn hints_are_never_shorter_than_one_interval_nor_zero() {
        for (hold, units, turning) in [(1, 1, 1000), (5_000, 1, 4), (30_000, 3, 2), (0, 1, 1)] {
            let i = interval_us(hold_us(hold, 0), units, turning);
            let t = next_turn(0, 7, i);
            assert!(t.hint_ms >= 1);
            assert!(t.hint_ms * 1000 >= i, "hint {} ms, interval {i} µs", t.hint_ms);
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
    fn due_times_compare_across_the_32_bit_wrap() {
        let now = (1u64 << 32) - 5;
        assert!(before_due(due_lo(now + 10), now));
        assert!(!before_due(due_lo(now - 1), now));
        assert!(!before_due(due_lo(now), now));
        assert!(!before_due(0, now));
        assert_eq!(due_lo(1u64 << 32), 1);
    }
}
