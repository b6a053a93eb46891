//! The clock every implicit-`now` entry point uses: `CLOCK_MONOTONIC`.
//!
//! It is system-wide, so times written by one process compare with another's, and it is
//! the clock the futex deadlines in `waiting` are absolute on.

use std::time::{Duration, Instant};

/// `CLOCK_MONOTONIC` now, since its (boot-time) origin.
pub fn monotonic() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    debug_assert_eq!(rc, 0);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Nanoseconds of `CLOCK_MONOTONIC` (for latency stamps shared across processes).
pub fn now_ns() -> u64 {
    monotonic().as_nanos() as u64
}

/// Milliseconds of `CLOCK_MONOTONIC` (never 0, which the segment reads as "never").
pub fn now_ms() -> u64 {
    (monotonic().as_millis() as u64).max(1)
}

/// The segment's time for a caller's `now` (ms): `now + 1`. The segment's time stamps
/// read 0 as "never", so its times start at 1; moving every time by the same one keeps
/// every difference, so a trace whose explicit `now` starts at 0 decides exactly as the
/// same trace moved to any later start (a window, a hold, a rate's interval all end at
/// the same caller's instant). Every engine call that takes a `now` converts it here,
/// and every time it reports goes back through `external`.
#[inline(always)]
pub fn internal(now: u64) -> u64 {
    now.saturating_add(1)
}

/// The caller's time of a segment time `t` (see `internal`); `None` for 0, "never".
#[inline]
pub fn external(t: u64) -> Option<u64> {
    t.checked_sub(1)
}

/// `external`, for a report field where a stamp never written shows as 0.
pub fn external_or_0(t: u64) -> u64 {
    external(t).unwrap_or(0)
}

/// The library's clock as a segment time: `internal(now_ms())`.
pub fn segment_now() -> u64 {
    internal(now_ms())
}

/// Milliseconds of `CLOCK_REALTIME` since the Unix epoch (0 before it), for the times
/// the segment records for people: creation, deaths.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The "for ever" of a wait too long for an `Instant` (136 years): a caller's timeout,
/// sweep interval or budget may be `Duration::MAX`, and `Instant + Duration::MAX`
/// overflows and panics.
pub const FOREVER: Duration = Duration::from_secs(u32::MAX as u64);

/// `start + wait`, or `start + FOREVER` when that is not representable.
pub fn after(start: Instant, wait: Duration) -> Instant {
    start.checked_add(wait).unwrap_or_else(|| start + FOREVER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_times_are_callers_times_plus_one_and_zero_is_never() {
        assert_eq!((internal(0), internal(41)), (1, 42));
        assert_eq!(internal(u64::MAX), u64::MAX, "saturates, never wraps to never");
        assert_eq!((external(0), external(1), external(42)), (None, Some(0), Some(41)));
        for now in [0, 1, 999, u64::MAX - 1] {
            assert_eq!(external(internal(now)), Some(now));
        }
    }

    #[test]
    fn a_wait_of_duration_max_is_far_off_and_does_not_overflow() {
        let now = Instant::now();
        assert_eq!(after(now, Duration::from_millis(5)), now + Duration::from_millis(5));
        assert!(after(now, Duration::MAX) >= now + Duration::from_secs(100 * 365 * 86_400));
    }
}
