//! The one door to atomics.
//!
//! Every atomic in fairshm, in shared memory or not, is named through this module, so
//! that `--cfg loom` swaps all of them for loom's model-checked versions at once. Under
//! loom the records live on the heap (see [`crate::region::HeapRegion`]); otherwise they
//! are `#[repr(C)]` overlays on the mapping, and std's atomics have the exact size and
//! alignment of the integers they wrap, which the layout relies on.
//!
//! `tests/shim_only.rs` fails if any other file under `src/` names `std::sync::atomic`
//! or `core::sync::atomic`.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};

/// Back-off for a CAS loop that lost a race.
///
/// Under loom, a spinning thread must yield so that the model lets the other threads
/// run; otherwise it is crossbeam's exponential spin-then-yield.
pub(crate) struct Backoff {
    #[cfg(not(loom))]
    inner: crossbeam_utils::Backoff,
}

impl Backoff {
    #[inline]
    pub(crate) fn new() -> Self {
        Backoff {
            #[cfg(not(loom))]
            inner: crossbeam_utils::Backoff::new(),
        }
    }

    /// Called after a CAS lost to another process's step, before retrying at once.
    ///
    /// Such a retry never waits for anyone (the loss means someone made progress), so
    /// under loom it is a no-op: a yield there would add a free scheduling branch per
    /// contention point, which is what made the 3-thread model explode.
    #[inline]
    pub(crate) fn snooze(&self) {
        #[cfg(not(loom))]
        self.inner.snooze();
    }

    /// Called while waiting for another process to finish a step (a tenant name being
    /// written): under loom this must yield, or the waiting thread would spin forever.
    #[inline]
    pub(crate) fn wait(&self) {
        #[cfg(loom)]
        loom::thread::yield_now();
        #[cfg(not(loom))]
        self.inner.snooze();
    }
}
