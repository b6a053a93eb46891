//! What a guaranteed pool reports: per-tenant statistics (`stats`), the fairness
//! report, and the weighted max-min plan, all computed at an explicit `now` from a copy
//! of the state (reading never changes it).

use serde::Serialize;

use super::config::{FairnessUnit, apportion};
use super::state::{NEVER, Rules, State};

/// One tenant, as `stats()` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TenantStats {
    pub name: String,
    pub weight: u32,
    pub guarantee: u64,
    /// Units of its own leases (own and borrowed).
    pub held: u64,
    /// Of those, funded by its own guarantee.
    pub own_used: u64,
    /// Units of its guarantee on loan, and to whom: `(borrower, units)`.
    pub lent: u64,
    pub lent_to: Vec<(String, u64)>,
    /// Units it borrows, and from whom: `(lender, units)`.
    pub borrowed: u64,
    pub borrowed_from: Vec<(String, u64)>,
    /// Milliseconds since its last attempt or release; `None` if it never acted.
    pub idle_ms: Option<u64>,
    pub lendable: bool,
    /// The largest single refused request outstanding (units): its stated demand.
    pub demand: u64,
    /// Since when it has been waiting (its outstanding want's first refusal).
    pub wanting_since: Option<u64>,
    pub deficit_unit_ms: u64,
    /// The longest wait that ended in its being served; `None` before any.
    pub worst_reclaim_ms: Option<u64>,
    pub grants: u64,
    pub cost_granted: u64,
    pub refusals: u64,
    pub refusals_hold_exceeds_reclaim_horizon: u64,
    pub refusals_guarantee_on_loan: u64,
    pub refusals_guarantee_exhausted: u64,
}

/// An outstanding lease, as `stats()` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LeaseStats {
    /// `tenant#no`.
    pub name: String,
    pub lease: u32,
    pub tenant: String,
    pub owner_slot: u16,
    pub units: u64,
    pub cost: u64,
    pub own: u64,
    /// `(lender, units)`.
    pub borrowed_from: Vec<(String, u64)>,
    pub granted_at: u64,
    pub hold_ms: u64,
    pub deadline: u64,
    /// Past its declared deadline by this much (0: in time). Overrunning leases stay
    /// counted against the ceiling and are never freed silently.
    pub overrun_ms: u64,
}

/// `stats()` of a guaranteed pool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GStats {
    pub name: String,
    pub now_ms: u64,
    pub unit: FairnessUnit,
    pub ceiling: u64,
    pub in_use: u64,
    /// Units on loan in all.
    pub on_loan: u64,
    pub reclaim_horizon_ms: u64,
    pub idle_after_ms: u64,
    /// Calls applied (the replay order's length).
    pub seq: u64,
    pub tenants: Vec<TenantStats>,
    pub leases: Vec<LeaseStats>,
    /// The names of leases past their declared deadline.
    pub overrun_leases: Vec<String>,
}

/// One tenant's shares in the fairness report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TenantShare {
    pub name: String,
    pub weight_share: f64,
    pub cost_share: f64,
    pub request_share: f64,
    /// Its share in the pool's fairness unit over its weight share (1.0: exactly its
    /// weight); 0 when nothing was granted.
    pub skew: f64,
}

/// The fairness report: both share vectors side by side, whatever the unit.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FairnessReport {
    pub unit: FairnessUnit,
    pub tenants: Vec<TenantShare>,
    /// The largest tenant skew (1.0: every tenant got exactly its weight).
    pub skew: f64,
    /// Whether cost and request shares tell different stories: some tenant's two shares
    /// differ by more than 0.1 (ten points of the whole).
    pub units_disagree: bool,
}

/// One tenant's line of `plan()`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PlanEntry {
    pub name: String,
    pub weight: u32,
    /// What it holds plus its outstanding want.
    pub demand: u64,
    /// Its weighted max-min allocation.
    pub target: u64,
    pub held: u64,
    /// `held - target`: how far it has drifted from the yardstick.
    pub drift: i64,
}

impl State {
    /// The statistics at `now` (the state advanced to it on a copy).
    pub fn stats(&self, rules: &Rules, now: u64) -> GStats {
        let mut s = self.clone();
        s.advance(rules, now);
        let now = s.clock;
        let name_of = |t: u16| rules.names.get(t as usize).cloned().unwrap_or_default();
        let tenants = (0..rules.tenants())
            .map(|t| {
                let ts = &s.tenants[t];
                let mut lent_to = Vec::new();
                let mut borrowed_from = Vec::new();
                for sl in &s.slices {
                    let Some(l) = s.leases.iter().find(|l| l.no == sl.lease) else {
                        continue;
                    };
                    if sl.lender as usize == t {
                        lent_to.push((name_of(l.tenant), sl.units));
                    }
                    if l.tenant as usize == t {
                        borrowed_from.push((name_of(sl.lender), sl.units));
                    }
                }
                TenantStats {
                    name: rules.names[t].clone(),
                    weight: rules.weights[t],
                    guarantee: rules.guarantees[t],
                    held: s.held(t),
                    own_used: s.own_used(t),
                    lent: s.lent(t),
                    lent_to,
                    borrowed: s.held(t) - s.own_used(t),
                    borrowed_from,
                    idle_ms: (ts.last_activity != NEVER)
                        .then(|| now.saturating_sub(ts.last_activity)),
                    lendable: s.lendable(rules, t, now),
                    demand: ts.want,
                    wanting_since: (ts.want > 0).then_some(ts.want_since),
                    deficit_unit_ms: ts.deficit,
                    worst_reclaim_ms: (ts.reclaims > 0).then_some(ts.worst_reclaim_ms),
                    grants: ts.grants,
                    cost_granted: ts.cost_granted,
                    // Saturating: counters read from shared memory may be garbage.
                    refusals: ts.refusals.iter().fold(0u64, |a, &n| a.saturating_add(n)),
                    refusals_hold_exceeds_reclaim_horizon: ts.refusals[0],
                    refusals_guarantee_on_loan: ts.refusals[1],
                    refusals_guarantee_exhausted: ts.refusals[2],
                }
            })
            .collect();
        let leases: Vec<LeaseStats> = s
            .leases
            .iter()
            .map(|l| LeaseStats {
                name: rules.lease_name(l.tenant, l.no),
                lease: l.no,
                tenant: name_of(l.tenant),
                owner_slot: l.owner,
                units: l.units,
                cost: l.cost,
                own: l.own,
                borrowed_from: s
                    .slices
                    .iter()
                    .filter(|sl| sl.lease == l.no)
                    .map(|sl| (name_of(sl.lender), sl.units))
                    .collect(),
                granted_at: l.granted_at,
                hold_ms: l.hold_ms,
                deadline: l.deadline(),
                overrun_ms: now.saturating_sub(l.deadline()),
            })
            .collect();
        GStats {
            name: rules.name.clone(),
            now_ms: now,
            unit: rules.unit,
            ceiling: rules.ceiling,
            in_use: s.in_use(),
            on_loan: s.slices.iter().map(|sl| sl.units).sum(),
            reclaim_horizon_ms: rules.horizon,
            idle_after_ms: rules.idle_after,
            seq: s.seq,
            overrun_leases: leases
                .iter()
                .filter(|l| l.overrun_ms > 0)
                .map(|l| l.name.clone())
                .collect(),
            tenants,
            leases,
        }
    }

    /// Cost share, request share and weight share of every tenant, side by side.
    pub fn fairness_report(&self, rules: &Rules) -> FairnessReport {
        let cost: u128 = self.tenants.iter().map(|t| t.cost_granted as u128).sum();
        let reqs: u128 = self.tenants.iter().map(|t| t.grants as u128).sum();
        let w: u128 = rules.weights.iter().map(|&x| x as u128).sum();
        let frac = |a: u128, b: u128| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        let mut disagree = false;
        let tenants: Vec<TenantShare> = (0..rules.tenants())
            .map(|t| {
                let (c, r) = (
                    self.tenants[t].cost_granted as u128,
                    self.tenants[t].grants as u128,
                );
                // |c/cost - r/reqs| > 1/10, in integers: 10 |c reqs - r cost| > cost reqs.
                let diff = (c * reqs).abs_diff(r * cost);
                disagree |= cost > 0 && reqs > 0 && 10 * diff > cost * reqs;
                let weight_share = frac(rules.weights[t] as u128, w);
                let (cost_share, request_share) = (frac(c, cost), frac(r, reqs));
                let in_unit = match rules.unit {
                    FairnessUnit::Cost => cost_share,
                    FairnessUnit::Requests => request_share,
                };
                TenantShare {
                    name: rules.names[t].clone(),
                    weight_share,
                    cost_share,
                    request_share,
                    skew: if weight_share > 0.0 {
                        in_unit / weight_share
                    } else {
                        0.0
                    },
                }
            })
            .collect();
        FairnessReport {
            unit: rules.unit,
            skew: tenants.iter().map(|t| t.skew).fold(0.0, f64::max),
            units_disagree: disagree,
            tenants,
        }
    }

    /// The weighted max-min allocation of the ceiling for current demand (held plus
    /// outstanding want), by progressive filling: every tenant with unmet demand rises
    /// in proportion to its weight; one whose demand is met stops and the rest go on.
    /// Exact in integers: the last round's remainder is apportioned like guarantees.
    pub fn plan(&self, rules: &Rules, now: u64) -> Vec<PlanEntry> {
        let mut s = self.clone();
        s.advance(rules, now);
        let n = rules.tenants();
        let demand: Vec<u64> = (0..n)
            .map(|t| s.held(t).saturating_add(s.tenants[t].want))
            .collect();
        let mut target = vec![0u64; n];
        let mut open: Vec<usize> = (0..n).filter(|&t| demand[t] > 0).collect();
        let mut left = rules.ceiling;
        while !open.is_empty() && left > 0 {
            let w: u128 = open.iter().map(|&t| rules.weights[t] as u128).sum();
            // Met at this round's level: unmet * W <= left * w.
            let (met, unmet): (Vec<usize>, Vec<usize>) = open.iter().partition(|&&t| {
                (demand[t] - target[t]) as u128 * w <= left as u128 * rules.weights[t] as u128
            });
            if met.is_empty() {
                let ws: Vec<u32> = unmet.iter().map(|&t| rules.weights[t]).collect();
                for (&t, part) in unmet.iter().zip(apportion(left, &ws)) {
                    target[t] += part;
                }
                break;
            }
            for &t in &met {
                left -= demand[t] - target[t];
                target[t] = demand[t];
            }
            open = unmet;
        }
        (0..n)
            .map(|t| {
                let held = s.held(t);
                PlanEntry {
                    name: rules.names[t].clone(),
                    weight: rules.weights[t],
                    demand: demand[t],
                    target: target[t],
                    held,
                    drift: held as i64 - target[t] as i64,
                }
            })
            .collect()
    }
}
