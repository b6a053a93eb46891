//! Sleeping on the segment: process-shared futexes on `PoolRec.wake`.
//!
//! Never `FUTEX_PRIVATE_FLAG`: the private flag keys the futex by this process's address
//! space, so a waker in another process would never find the waiter.
//!
//! Protocol (no lost wake-up):
//! - a waiter reads `wake` (the sequence), tries to acquire, and when refused bumps
//!   `waiters`, re-reads `wake`, and sleeps only if it is unchanged; the kernel
//!   re-checks `*wake == seq` atomically with going to sleep;
//! - a releaser bumps `wake` after its release, then reads `waiters` and wakes if any.
//!
//! Those four accesses are SeqCst: it is a store-load pattern on two words (Dekker), and
//! only a single total order forbids both sides reading the old value of the other's
//! word. Each waiter sleeps under a bit of its class: [`UNDER`] (refused `pool_full`,
//! under its share) or [`OVER`] (refused `over_share`). A release of `n` units wakes at
//! most `n` waiters, under-share ones first, so no herd wakes for one permit and the
//! tenant the rule favours is served first.

use std::time::{Duration, Instant};

use crate::layout::PoolRec;
use crate::sync::Ordering::SeqCst;

/// Waiters refused while under their share.
pub const UNDER: u32 = 1;
/// Waiters refused at or past their share.
pub const OVER: u32 = 2;

/// Sleeps on `pool.wake` while it equals `seq`, for at most until `until`, as class
/// `bits`. Returns early on a wake, a signal or a changed word.
pub fn sleep(pool: &PoolRec, seq: u32, bits: u32, until: Instant) {
    let now = Instant::now();
    if until <= now {
        return;
    }
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let left = until - now;
    let mut abs = Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32) + left;
    abs = abs.min(Duration::from_secs(i32::MAX as u64));
    let deadline = libc::timespec {
        tv_sec: abs.as_secs() as libc::time_t,
        tv_nsec: abs.subsec_nanos() as _,
    };
    // SAFETY:
    //   * `pool.wake.as_ptr()` points at a 4-byte aligned u32 inside the mapping, which
    //     outlives this call; the kernel only reads it;
    //   * FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC deadline (no
    //     FUTEX_CLOCK_REALTIME), a non-zero bitset, and ignores uaddr2;
    //   * no FUTEX_PRIVATE_FLAG: the word is shared with other processes.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            pool.wake.as_ptr(),
            libc::FUTEX_WAIT_BITSET,
            seq,
            &deadline as *const libc::timespec,
            std::ptr::null::<u32>(),
            bits,
        )
    };
}

/// Wakes up to `n` waiters of class `bits`; returns how many woke.
pub fn wake(pool: &PoolRec, n: u32, bits: u32) -> u32 {
    // SAFETY: as in `sleep`; FUTEX_WAKE_BITSET ignores the timeout and uaddr2 arguments.
    let woke = unsafe {
        libc::syscall(
            libc::SYS_futex,
            pool.wake.as_ptr(),
            libc::FUTEX_WAKE_BITSET,
            n.min(i32::MAX as u32),
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            bits,
        )
    };
    woke.max(0) as u32
}

/// After `units` came free in `pool`: bumps the sequence and wakes up to `units`
/// waiters, under-share ones first.
pub fn released(pool: &PoolRec, units: u32) {
    // SeqCst: see the module docs (pairs with the waiter's `waiters` bump and re-read).
    pool.wake.fetch_add(1, SeqCst);
    if pool.waiters.load(SeqCst) == 0 {
        return;
    }
    let woke = wake(pool, units, UNDER);
    if woke < units {
        wake(pool, units - woke, OVER);
    }
}
