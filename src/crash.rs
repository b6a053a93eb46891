//! Crash points (feature `crash-points`, tests only): the process kills itself with
//! SIGKILL when it reaches the labelled step named by `FAIRSHM_CRASH_AT`, after
//! `FAIRSHM_CRASH_SKIP` earlier hits of that label (default 0).

use crate::sync::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

struct Plan {
    label: String,
    skip: u64,
    hits: AtomicU64,
}

fn plan() -> Option<&'static Plan> {
    static PLAN: OnceLock<Option<Plan>> = OnceLock::new();
    PLAN.get_or_init(|| {
        let label = std::env::var("FAIRSHM_CRASH_AT").ok()?;
        let skip = std::env::var("FAIRSHM_CRASH_SKIP")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        Some(Plan {
            label,
            skip,
            hits: AtomicU64::new(0),
        })
    })
    .as_ref()
}

/// Every labelled step, for tests that visit them all.
pub const LABELS: &[&str] = &[
    "acquire.before_install",
    "acquire.installed",
    "complete.decided",
    "apply.before_cas",
    "complete.before_clear",
    "release.published",
    "release.installed",
];

pub(crate) fn hit(label: &'static str) {
    if let Some(p) = plan()
        && p.label == label
        && p.hits.fetch_add(1, Relaxed) >= p.skip
    {
        // SAFETY: kill and getpid have no memory-safety preconditions.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    }
}
