//! A refusal is a value: a stable reason code, a retry-after, and an explanation that
//! says what was asked, what blocked it and what to do.

use crate::admission::{Decision, RefusalFacts, share};
use serde::Serialize;

/// Stable reason codes (also the C ABI's integers). Never renumbered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[repr(u32)]
pub enum Reason {
    /// Under its share, but the pool has no room for the units asked.
    PoolFull = 1,
    /// At or past its share; granting would eat into the floor kept for others.
    OverShare = 2,
    /// A blocking acquire's timeout ran out.
    TimedOut = 3,
}

impl Reason {
    /// Reasons with a per-tenant counter in the segment (index = code - 1).
    pub const ALL_COUNTED: [Reason; 3] = [Reason::PoolFull, Reason::OverShare, Reason::TimedOut];

    pub fn code(self) -> u32 {
        self as u32
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::PoolFull => "pool_full",
            Reason::OverShare => "over_share",
            Reason::TimedOut => "timed_out",
        }
    }
}

/// Why an acquire was not granted.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Refusal {
    pub reason: Reason,
    /// When to try again, in ms, rounded up; `None` when no estimate is honest.
    pub retry_after_ms: Option<u64>,
    pub explanation: String,
    pub pool: String,
    pub tenant: String,
    pub units: u32,
    pub in_use: u32,
    pub capacity: u32,
    pub floor: u32,
    pub held: u32,
    pub share: f64,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.reason.as_str(), self.explanation)
    }
}

fn plural(n: u32, one: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {one}s")
    }
}

impl Refusal {
    /// Builds the refusal of `units` of `pool` for `tenant` from the facts seen.
    pub fn from_facts(pool: &str, tenant: &str, units: u32, f: &RefusalFacts) -> Refusal {
        let sh = share(f.cap, f.floor, f.weight, f.active_weight);
        let others = f.active_weight.saturating_sub(f.weight as u64);
        let company = if others == 0 {
            "it is the only active tenant".to_owned()
        } else {
            format!(
                "active weight {} (its own {})",
                f.active_weight.max(f.weight as u64),
                f.weight
            )
        };
        let retry = f.retry_after_ms;
        let (reason, explanation) = match f.decision {
            Decision::PoolFull { .. } | Decision::Admit => (
                Reason::PoolFull,
                format!(
                    "tenant {tenant:?} asked for {} of pool {pool:?}, which is full \
                     ({} of {} in use). It holds {}, under its share of {sh:.1} ({company}), \
                     so it is first in line: retry after {retry} ms, when a release is \
                     expected; it is admitted as soon as {} free{}.",
                    plural(units, "unit"),
                    f.in_use,
                    f.cap,
                    f.held,
                    plural(units, "unit"),
                    if units == 1 { "s" } else { "" },
                ),
            ),
            Decision::OverShare { short } => (
                Reason::OverShare,
                format!(
                    "tenant {tenant:?} asked for {} of pool {pool:?} ({} of {} in use). \
                     It holds {}, at or past its share of {sh:.1} ({company}), so it may \
                     use the pool only up to {} (capacity less the floor of {} kept for \
                     other tenants), and that is {} short. Retry after {retry} ms, or \
                     lower this tenant's concurrency.",
                    plural(units, "unit"),
                    f.in_use,
                    f.cap,
                    f.held,
                    f.cap.saturating_sub(f.floor),
                    f.floor,
                    plural(short, "unit"),
                ),
            ),
        };
        Refusal {
            reason,
            retry_after_ms: Some(retry),
            explanation,
            pool: pool.to_owned(),
            tenant: tenant.to_owned(),
            units,
            in_use: f.in_use,
            capacity: f.cap,
            floor: f.floor,
            held: f.held,
            share: sh,
        }
    }
}
