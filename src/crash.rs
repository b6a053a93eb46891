//! Crash points (feature `crash-points`, tests only): after `arm(label, skip)`, the
//! process kills itself with SIGKILL the `skip + 1`-th time it reaches the labelled
//! step. A test forks a child, arms it, and lets it run into its death.

use std::sync::Mutex;

use crate::sync::{AtomicU32, Ordering::Relaxed};

pub use crate::guaranteed::shared::CRASH_LABELS as GUARANTEED_LABELS;
pub use crate::ops::CRASH_LABELS as LABELS;
pub use crate::ops::RESIDENT_CRASH_LABELS as RESIDENT_LABELS;

/// The steps of a segment's creation a creator can die after: the file created, its
/// size set (a header of zeros), everything written but `ready`.
pub const CREATE_LABELS: &[&str] = &["create.opened", "create.sized", "create.written"];

/// Non-zero once armed; Relaxed: read and written by this process only.
static ARMED: AtomicU32 = AtomicU32::new(0);
static PLAN: Mutex<Option<(&'static str, u64)>> = Mutex::new(None);

/// Dies at the `skip + 1`-th hit of `label` from now on.
pub fn arm(label: &'static str, skip: u64) {
    assert!(
        LABELS.contains(&label)
            || GUARANTEED_LABELS.contains(&label)
            || RESIDENT_LABELS.contains(&label)
            || CREATE_LABELS.contains(&label),
        "unknown crash point {label:?}"
    );
    *PLAN.lock().unwrap_or_else(|e| e.into_inner()) = Some((label, skip));
    // Relaxed: the plan is behind the mutex; the flag only spares unarmed hits it.
    ARMED.store(1, Relaxed);
}

pub(crate) fn hit(label: &'static str) {
    if ARMED.load(Relaxed) == 0 {
        return;
    }
    let mut plan = PLAN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((l, skip)) = plan.as_mut()
        && *l == label
    {
        if *skip == 0 {
            // SAFETY: kill and getpid have no memory-safety preconditions.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
        *skip -= 1;
    }
}
