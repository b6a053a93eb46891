//! The clock every implicit-`now` entry point uses: `CLOCK_MONOTONIC` in ms.
//!
//! It is system-wide, so times written by one process compare with another's.

/// Milliseconds of `CLOCK_MONOTONIC` (never 0, which the segment reads as "never").
pub fn now_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    debug_assert_eq!(rc, 0);
    (ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000).max(1)
}
