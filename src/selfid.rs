//! This process's pid and this thread's tid, cached without a syscall on the fast path.
//!
//! `getpid` and `gettid` are real syscalls (glibc caches neither), a few hundred ns each
//! on a VM: more than the whole acquire protocol. The pid is cached in a global that a
//! `pthread_atfork` child handler clears, and the tid in a thread-local stamped with a
//! fork epoch that the same handler bumps (a forked child's one thread inherits the
//! parent thread's thread-locals). A child made by a raw `clone`/`vfork` syscall that
//! skips glibc's fork handlers would keep the parent's cache: use `fork()`.

use std::cell::Cell;
use std::sync::Once;

use crate::sync::{AtomicU32, AtomicU64, Ordering::Relaxed};

/// Cached pid, 0 when unknown. Relaxed: process-local; the atfork handler runs in the
/// child before any other code of the child.
static PID: AtomicU32 = AtomicU32::new(0);
/// Bumped in every forked child.
static EPOCH: AtomicU64 = AtomicU64::new(0);
static HANDLER: Once = Once::new();

extern "C" fn in_child() {
    PID.store(0, Relaxed);
    EPOCH.fetch_add(1, Relaxed);
}

fn install() {
    HANDLER.call_once(|| {
        // SAFETY: `in_child` is an `extern "C" fn()` that only touches atomics, which is
        // async-signal-safe as the child handler of fork requires.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
        debug_assert_eq!(rc, 0);
    });
}

/// This process's pid.
#[inline]
pub fn pid() -> u32 {
    // Relaxed: see `PID`.
    match PID.load(Relaxed) {
        0 => {
            install();
            let p = std::process::id();
            PID.store(p, Relaxed);
            p
        }
        p => p,
    }
}

thread_local! {
    static TID: Cell<(u64, u32)> = const { Cell::new((u64::MAX, 0)) };
}

/// The fork epoch of this process: one more in a forked child than in its parent at
/// the fork, once the parent has called this (or `pid`, `tid`), which installs the
/// handler that counts.
#[inline]
pub fn epoch() -> u64 {
    install();
    EPOCH.load(Relaxed)
}

/// This thread's kernel thread id.
#[inline]
pub fn tid() -> u32 {
    install();
    let epoch = EPOCH.load(Relaxed);
    TID.with(|c| {
        let (e, t) = c.get();
        if e == epoch {
            return t;
        }
        // SAFETY: `gettid` has no preconditions and cannot fail.
        let t = unsafe { libc::gettid() } as u32;
        c.set((epoch, t));
        t
    })
}
