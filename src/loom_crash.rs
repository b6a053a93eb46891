//! Crash points under loom: a model thread armed with `arm(k)` stops at its `k`-th
//! crash point, as a process killed there would. `ops::crash_point` then returns
//! [`Error::Crashed`], which every caller passes straight up without another atomic
//! step, so the thread's last step on the region is the one before the crash point.
//!
//! loom runs every thread of a model on one OS thread, so the plan lives in a std
//! thread-local keyed by loom's thread id.

use std::cell::RefCell;

use crate::error::{Error, Result};

struct Plan {
    thread: loom::thread::ThreadId,
    left: usize,
    stopped_at: Option<&'static str>,
}

std::thread_local! {
    static PLAN: RefCell<Option<Plan>> = const { RefCell::new(None) };
}

#[cfg(test)]
/// The calling model thread stops at its `k`-th crash point (k >= 1).
pub(crate) fn arm(k: usize) {
    assert!(k >= 1);
    PLAN.with(|p| {
        *p.borrow_mut() = Some(Plan {
            thread: loom::thread::current().id(),
            left: k,
            stopped_at: None,
        })
    });
}

#[cfg(test)]
/// Forgets the plan (call at the start of each execution).
pub(crate) fn disarm() {
    PLAN.with(|p| *p.borrow_mut() = None);
}

#[cfg(test)]
/// Where the armed thread stopped, if it did.
pub(crate) fn stopped_at() -> Option<&'static str> {
    PLAN.with(|p| p.borrow().as_ref().and_then(|p| p.stopped_at))
}

pub(crate) fn hit(label: &'static str) -> Result<()> {
    PLAN.with(|p| {
        let mut p = p.borrow_mut();
        let Some(plan) = p.as_mut() else {
            return Ok(());
        };
        if plan.thread != loom::thread::current().id() || plan.left == 0 {
            return Ok(());
        }
        plan.left -= 1;
        if plan.left == 0 {
            plan.stopped_at = Some(label);
            return Err(Error::Crashed);
        }
        Ok(())
    })
}
