//! The clock every implicit-`now` entry point uses: `CLOCK_MONOTONIC`.
//!
//! It is system-wide, so times written by one process compare with another's, and it is
//! the clock the futex deadlines in `waiting` are absolute on.

use std::time::Duration;

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

/// Milliseconds of `CLOCK_REALTIME` since the Unix epoch (0 before it), for the times
/// the segment records for people: creation, deaths.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
