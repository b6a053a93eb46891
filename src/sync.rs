//! The one door to atomics.
//!
//! Every atomic in fairshm, in shared memory or not, is named through this module, so
//! that `--cfg loom` swaps all of them for loom's model-checked versions at once. Under
//! loom the records live on the heap (see [`crate::region::HeapRegion`]); otherwise they
//! are `#[repr(C)]` overlays on the mapping, and std's atomics have the exact size and
//! alignment of the integers they wrap, which the layout relies on.
//!
//! `clippy.toml` bans `std::sync::atomic` and `core::sync::atomic` everywhere else.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};

#[cfg(not(loom))]
#[allow(clippy::disallowed_types)]
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

    /// Called after a failed CAS or while waiting for another process's step.
    #[inline]
    pub(crate) fn snooze(&self) {
        #[cfg(loom)]
        loom::thread::yield_now();
        #[cfg(not(loom))]
        self.inner.snooze();
    }
}
