//! Crash points (feature `crash-points`, tests only): after `arm(label, skip)`, the
//! process kills itself with SIGKILL the `skip + 1`-th time it reaches the labelled
//! step. A test forks a child, arms it, and lets it run into its death.
//!
//! [`run_at`] arms a point to run a closure there instead, once, on the thread that
//! reaches it: a test's way to put other ops in the window between two steps of one
//! (in a test binary of its own: the plan is the process's).

use std::sync::Mutex;

use crate::sync::{AtomicU32, Ordering::Relaxed};

pub use crate::guaranteed::shared::CRASH_LABELS as GUARANTEED_LABELS;
pub use crate::ops::CRASH_LABELS as LABELS;
pub use crate::ops::RESIDENT_CRASH_LABELS as RESIDENT_LABELS;

/// The steps of a segment's creation a creator can die after: the file created, its
/// size set (a header of zeros), everything written but `ready`.
pub const CREATE_LABELS: &[&str] = &["create.opened", "create.sized", "create.written"];

/// The points of a blocking acquire's wait: `wait.announced`, counted in the pool's
/// `waiters` and not yet in its process slot's count; `wait.woken`, a sleep on the
/// pool's word ended by a wake of it, before the waiter's next try; `guaranteed.woken`,
/// the same on a guaranteed pool, before the ask that would pass the wake on.
pub const WAIT_LABELS: &[&str] = &["wait.announced", "wait.woken", "guaranteed.woken"];

/// Non-zero once armed; Relaxed: read and written by this process only.
static ARMED: AtomicU32 = AtomicU32::new(0);
/// What to do at the armed hit: die, or run a closure (once).
type Action = Option<Box<dyn FnOnce() + Send>>;
static PLAN: Mutex<Option<(&'static str, u64, Action)>> = Mutex::new(None);

/// Dies at the `skip + 1`-th hit of `label` from now on.
pub fn arm(label: &'static str, skip: u64) {
    plan(label, skip, None);
}

/// Runs `action` at the `skip + 1`-th hit of `label` from now on, on the thread that
/// hits it, before that step's next one; then the point is disarmed.
pub fn run_at(label: &'static str, skip: u64, action: impl FnOnce() + Send + 'static) {
    plan(label, skip, Some(Box::new(action)));
}

/// Takes back a plan that has not come due (its action is dropped, not run).
pub fn disarm() {
    *PLAN.lock().unwrap_or_else(|e| e.into_inner()) = None;
    // Relaxed: as in `plan`.
    ARMED.store(0, Relaxed);
}

fn plan(label: &'static str, skip: u64, action: Action) {
    assert!(
        LABELS.contains(&label)
            || GUARANTEED_LABELS.contains(&label)
            || RESIDENT_LABELS.contains(&label)
            || CREATE_LABELS.contains(&label)
            || WAIT_LABELS.contains(&label),
        "unknown crash point {label:?}"
    );
    *PLAN.lock().unwrap_or_else(|e| e.into_inner()) = Some((label, skip, action));
    // Relaxed: the plan is behind the mutex; the flag only spares unarmed hits it.
    ARMED.store(1, Relaxed);
}

pub(crate) fn hit(label: &'static str) {
    if ARMED.load(Relaxed) == 0 {
        return;
    }
    let mut plan = PLAN.lock().unwrap_or_else(|e| e.into_inner());
    let Some((l, skip, action)) = plan.as_mut() else {
        return;
    };
    if *l != label {
        return;
    }
    if *skip > 0 {
        *skip -= 1;
        return;
    }
    let Some(action) = action.take() else {
        // SAFETY: kill and getpid have no memory-safety preconditions.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        unreachable!("SIGKILL returned");
    };
    *plan = None;
    // Relaxed: as in `plan`.
    ARMED.store(0, Relaxed);
    // The lock is let go first: the action's own ops pass crash points too.
    drop(plan);
    action();
}
