//! Seed 001's guaranteed policy: a ceiling shared by fixed, weighted tenants, each
//! guaranteed its apportioned part; what an idle tenant leaves is lent, for no longer
//! than the reclaim horizon, and comes back on that deadline.
//!
//! - `config`: the pool's configuration, validated, and the integer apportionment;
//! - `state`: the rules, as a sequential state machine that a replay runs alone;
//! - `estimate`: a refusal's retry-after, by projecting the state to its next changes;
//! - `report`: `stats()`, the fairness report and `plan()`;
//! - `words`: the state as the words of a shared block;
//! - `shared`: the block in the segment, replaced by one CAS (the op protocol of this
//!   policy, crash-safe by construction);
//! - `waiters` and `wait`: waiting for units to come back (the handshake with the
//!   releasers; the engine's wait, asking again until granted, timed out or cancelled);
//!   `pass`: one wake a release, passed on from waiter to waiter while units are free.

#[cfg(not(loom))]
mod api;
pub mod config;
mod estimate;
#[cfg(not(loom))]
pub(crate) mod pass;
pub mod report;
#[doc(hidden)]
pub mod shared;
pub mod state;
#[cfg(not(loom))]
mod wait;
#[doc(hidden)]
pub mod waiters;
pub mod words;

#[cfg(not(loom))]
pub(crate) use api::BlockLock;
#[cfg(not(loom))]
pub use api::{GReleased, Guaranteed};

pub use config::{FairnessUnit, GuaranteedConfig, apportion};
pub use report::{FairnessReport, GStats, LeaseStats, PlanEntry, TenantShare, TenantStats};
pub use state::{
    Blocking, Call, Effect, GRefused, Grant, LeaseEntry, Model, Released, Rules, Slice, State,
    TenantState,
};

use crate::refusal::Reason;

/// A guaranteed pool of a table, resolved from its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GPoolId(pub(crate) u32);

impl GPoolId {
    /// The pool's index among the config's guaranteed pools.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A guaranteed lease: its pool and its number there. Round-trips through one `u64`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GLeaseId {
    pub pool: u32,
    pub no: u32,
}

/// Bit 63, set in every guaranteed lease's `u64` id and in no fair-share lease's (whose
/// top half is a lease index, below 2^31): each release of the C ABI tells the other
/// policy's leases from its own, and says which call releases them.
/// (`FAIRSHM_GUARANTEED_LEASE_TAG` in C.)
pub(crate) const G_LEASE_TAG: u64 = 1 << 63;

impl GLeaseId {
    pub fn to_u64(self) -> u64 {
        debug_assert!(
            self.pool < 1 << 31,
            "guaranteed pool {} beyond the tag",
            self.pool
        );
        G_LEASE_TAG | (self.pool as u64) << 32 | self.no as u64
    }
    /// The lease `v` names, or `None` when `v` is not a guaranteed lease's id.
    pub fn from_u64(v: u64) -> Option<GLeaseId> {
        (v & G_LEASE_TAG != 0).then_some(GLeaseId {
            pool: ((v & !G_LEASE_TAG) >> 32) as u32,
            no: v as u32,
        })
    }
}

/// A grant: the lease and how it was funded.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct GGrant {
    #[serde(skip)]
    pub id: GLeaseId,
    /// `tenant#no`.
    pub name: String,
    pub grant: Grant,
    /// The seq of the state this call published (its place in a replay).
    pub seq: u64,
    /// The call as applied (with its owner slot): what a replay records.
    pub call: Call,
}

/// A refusal: its facts, with the names to explain them.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct GRefusal {
    pub pool: String,
    pub tenant: String,
    pub reason: Reason,
    pub retry_after_ms: Option<u64>,
    /// The blocking leases' names (`tenant#no`), earliest deadline first.
    pub blocking_leases: Vec<String>,
    pub facts: GRefused,
    pub unit: FairnessUnit,
    pub seq: u64,
    pub call: Call,
}

/// What a guaranteed acquire came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GOutcome {
    Granted(GGrant),
    Refused(GRefusal),
}

impl GOutcome {
    pub fn seq(&self) -> u64 {
        match self {
            GOutcome::Granted(g) => g.seq,
            GOutcome::Refused(r) => r.seq,
        }
    }
}

/// Blocking leases a `guarantee_on_loan` explanation names; it counts the rest.
const EXPLAINED_LEASES: usize = 5;

fn amount(unit: FairnessUnit, n: u64) -> String {
    match (unit, n) {
        (FairnessUnit::Cost, 1) => "1 cost unit".into(),
        (FairnessUnit::Cost, n) => format!("{n} cost units"),
        (FairnessUnit::Requests, 1) => "1 request".into(),
        (FairnessUnit::Requests, n) => format!("{n} requests"),
    }
}

impl GRefusal {
    // Its one caller, `api`, is not built for the loom models.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn new(rules: &Rules, facts: GRefused, seq: u64, call: Call) -> GRefusal {
        GRefusal {
            pool: rules.name.clone(),
            tenant: rules
                .names
                .get(facts.tenant as usize)
                .cloned()
                .unwrap_or_default(),
            reason: facts.reason,
            retry_after_ms: facts.retry_after_ms,
            blocking_leases: facts
                .blocking
                .iter()
                .map(|b| rules.lease_name(b.tenant, b.lease))
                .collect(),
            unit: rules.unit,
            facts,
            seq,
            call,
        }
    }

    /// What was asked, what blocked it, and the ways out that can help (see `smaller`).
    pub fn explanation(&self) -> String {
        let x = &self.facts;
        let (t, u) = (&self.tenant, self.unit);
        let asked = amount(u, x.units);
        let retry = |then: &str| match x.retry_after_ms {
            Some(ms) => format!("Retry after {ms} ms ({then})"),
            None => "Retry later: no time can be promised".to_owned(),
        };
        match x.reason {
            Reason::HoldExceedsReclaimHorizon => format!(
                "Tenant {t:?} asked to hold {asked} for {}ms, which exceeds the reclaim \
                 horizon of {}ms, and the request needs to borrow capacity because only \
                 {} of its own guarantee is free. Borrowed capacity may not be committed \
                 for longer than the horizon, because nothing here is preempted and a \
                 lender that comes back would otherwise wait for the whole hold. Retry \
                 with hold_ms of {} or less, {}, or raise reclaim_horizon_ms if the \
                 tenants really can tolerate waiting that long for their share.",
                x.hold_ms,
                x.horizon_ms,
                x.own_free,
                x.horizon_ms,
                match (u, x.guarantee) {
                    // Weights that apportion nothing to it (a ceiling smaller than the
                    // tenants): it has nothing of its own to fit in.
                    (_, 0) =>
                        "give the tenant a weight that guarantees it some units \
                               when the segment is next created",
                    (FairnessUnit::Cost, _) => {
                        "split the work so it fits inside the tenant's own guarantee"
                    }
                    // Every lease counts one request whatever its cost: splitting the
                    // work would ask for more, not less.
                    (FairnessUnit::Requests, _) => {
                        "wait until one of its own leases ends so that the request fits \
                         inside the tenant's own guarantee"
                    }
                },
            ),
            Reason::GuaranteeOnLoan => {
                // The earliest due first (as `blocking` is ordered), at most
                // `EXPLAINED_LEASES` of them and a count of the rest (all are in
                // `blocking_leases`), so the text stays short enough to read, and to fit
                // the C ABI's `FAIRSHM_GUARANTEED_WHY_MAX`, however many there are.
                let leases: Vec<String> = x
                    .blocking
                    .iter()
                    .zip(&self.blocking_leases)
                    .take(EXPLAINED_LEASES)
                    .map(|(b, name)| {
                        if b.overrun_ms > 0 {
                            format!(
                                "{name} ({}, {} ms past its declared deadline)",
                                amount(u, b.units),
                                b.overrun_ms
                            )
                        } else {
                            format!(
                                "{name} ({}, due in {} ms)",
                                amount(u, b.units),
                                b.deadline.saturating_sub(x.at)
                            )
                        }
                    })
                    .collect();
                let overrun = x.blocking.iter().any(|b| b.overrun_ms > 0);
                let n = x.blocking.len();
                let in_leases = match n {
                    1 => format!("in lease {}", leases.join(", ")),
                    _ if n <= EXPLAINED_LEASES => format!("in leases {}", leases.join(", ")),
                    _ => format!(
                        "in {n} leases, the earliest due first: {} and {} more due no \
                         sooner",
                        leases.join(", "),
                        n - EXPLAINED_LEASES
                    ),
                };
                format!(
                    "Tenant {t:?} asked for {asked} for {}ms. Its guarantee is {}, of which \
                     {} are free: {} are on loan to other tenants, {in_leases}. Nothing \
                     here is preempted, so the loan comes back as those leases end, and \
                     while {t:?} keeps asking no new loan is written against its \
                     guarantee.{} {}{}; or lower reclaim_horizon_ms so that loans come \
                     back sooner.",
                    x.hold_ms,
                    amount(u, x.guarantee),
                    x.own_free,
                    x.lent,
                    if overrun {
                        " A lease past its declared deadline breaks the bound: it stays \
                         counted against the ceiling (the work behind it is still \
                         running) and is listed in stats' overrun_leases."
                    } else {
                        ""
                    },
                    retry(when_due(x)),
                    smaller(u, x.own_free, "ask for no more than the", "free now"),
                )
            }
            _ => format!(
                "Tenant {t:?} asked for {asked} for {}ms. Its guarantee is {}; its own \
                 leases use {}, so {} are free, and idle tenants can lend {} of the {} it \
                 would have to borrow (a tenant lends only when it holds nothing and has \
                 neither asked nor released for idle_after_ms). {}{}; or give {t:?} a \
                 larger weight when the segment is next created (guarantees are fixed for \
                 its life).",
                x.hold_ms,
                amount(u, x.guarantee),
                x.own_used,
                x.own_free,
                x.lendable,
                x.need,
                retry("when leases are due or a tenant turns idle"),
                smaller(u, x.own_free, "split the work to fit the", "free"),
            ),
        }
    }
}

/// The way out of a refusal by asking for less (`"; {before} N units {after}"`), only
/// where one exists: a request of cost units when some of the tenant's own guarantee is
/// free. With none free no smaller request fits either, and under `requests` every lease
/// counts one however small its work, so a refusal there always has none free.
fn smaller(unit: FairnessUnit, own_free: u64, before: &str, after: &str) -> String {
    match unit {
        FairnessUnit::Cost if own_free > 0 => {
            format!("; {before} {} {after}", amount(unit, own_free))
        }
        _ => String::new(),
    }
}

/// What a `guarantee_on_loan` refusal's retry-after waits for: the blocking leases'
/// deadlines, or only some of them, or more than them (the rest of what the request
/// needs is free only later: other leases end or a lender turns idle).
fn when_due(x: &GRefused) -> &'static str {
    let Some(ms) = x.retry_after_ms else {
        return "";
    };
    let last = x
        .blocking
        .iter()
        .map(|b| b.deadline.saturating_sub(x.at))
        .max();
    match last {
        Some(last) if ms < last => "when enough of the blocking leases are due",
        Some(last) if ms > last => {
            "when the rest it needs is free too: the blocking leases are due sooner, \
             but other leases must end or a tenant turn idle to lend"
        }
        _ => "when the blocking leases are due",
    }
}

impl std::fmt::Display for GRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.reason.as_str(), self.explanation())
    }
}

/// Where a guaranteed pool lives in the segment's guaranteed region (byte offsets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GPlace {
    /// Its head record: the head word, alone on a 128-byte line.
    pub head_off: usize,
    pub blocks_off: usize,
    pub block_words: usize,
    pub blocks: usize,
}

/// Words of a pool's head record.
pub const HEAD_WORDS: usize = 16;

/// Places every guaranteed pool of `cfgs` one after the other from byte `base`
/// (128-aligned), with two blocks per process slot. Returns the places and the words
/// they take in all.
pub fn places(cfgs: &[GuaranteedConfig], procs: usize, base: usize) -> (Vec<GPlace>, usize) {
    let mut off = base;
    let mut out = Vec::with_capacity(cfgs.len());
    for c in cfgs {
        let block_words =
            words::block_words(c.tenants.len(), c.max_leases as usize, c.max_slices());
        let blocks = 2 * procs;
        out.push(GPlace {
            head_off: off,
            blocks_off: off + HEAD_WORDS * 8,
            block_words,
            blocks,
        });
        off += (HEAD_WORDS + blocks * block_words) * 8;
    }
    (out, (off - base) / 8)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A guaranteed lease's id round-trips and carries the tag; a fair-share lease's id
    /// (a lease index of up to 31 bits above a generation) never reads as one.
    #[test]
    fn lease_ids_of_the_two_policies_never_meet() {
        for (pool, no) in [(0, 1), (3, u32::MAX), ((1 << 31) - 1, 0)] {
            let id = GLeaseId { pool, no };
            assert_ne!(id.to_u64() & G_LEASE_TAG, 0);
            assert_eq!(GLeaseId::from_u64(id.to_u64()), Some(id));
        }
        for (index, generation) in [(0, 1), (16_383, (1 << 24) - 1), (i32::MAX as u32, 7)] {
            let fair = crate::engine::LeaseId { index, generation }.to_u64();
            assert_eq!(GLeaseId::from_u64(fair), None, "{index}/{generation}");
        }
    }
}
