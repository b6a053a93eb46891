//! The acquire of seed 001's rules: within the tenant's own guarantee, else funded by
//! lenders (the largest available first, each slice attributed), and refused with the
//! leases that block it when neither fits.

use super::{
    Blocking, ByNo, Effect, GRefused, Grant, LeaseEntry, PerTenant, Rules, Slice, State,
    refusal_index,
};
use crate::error::{Error, Result};
use crate::refusal::Reason;

impl State {
    pub(super) fn acquire(
        &mut self,
        rules: &Rules,
        tenant: u16,
        cost: u64,
        hold_ms: u64,
        owner: u16,
        now: u64,
    ) -> Result<Effect> {
        let t = tenant as usize;
        if t >= rules.tenants() {
            return Err(Error::InvalidRequest(format!(
                "tenant index {t} of guaranteed pool {:?}, which has {} tenants",
                rules.name,
                rules.tenants()
            )));
        }
        if cost == 0 {
            return Err(Error::InvalidRequest(
                "cost must be at least 1: it is always required and recorded".into(),
            ));
        }
        let units = rules.unit.units(cost);
        if units > rules.ceiling {
            return Err(Error::UnitsExceedCapacity {
                pool: rules.name.clone(),
                units,
                capacity: rules.ceiling,
                when: crate::error::NEVER.into(),
            });
        }
        self.advance(rules, now);
        let now = self.clock;
        if rules.demand_signal {
            // Asking counts, even when the answer is no: the reclaim freeze.
            self.tenants[t].last_activity = now;
        }
        let g = rules.guarantees[t];
        let (own_used, lent) = (self.own_used(t), self.lent(t));
        let own_free = g.saturating_sub(own_used + lent);
        if units <= own_free {
            return self.grant(rules, t, owner, units, cost, hold_ms, units, Vec::new());
        }
        let need = units - own_free;
        // Whether each tenant holds a lease, and what it has lent: one pass over the
        // leases and one over the slices, not one of each a tenant.
        let mut sums = PerTenant::new();
        let (holds, lent_by) = sums.two(rules.tenants());
        for l in &self.leases {
            holds[l.tenant as usize] = 1;
        }
        for s in &self.slices {
            let lent = &mut lent_by[s.lender as usize];
            *lent = lent.saturating_add(s.units);
        }
        // The lendable (holding nothing, idle: `State::lendable`) with what they have free.
        let mut lenders: Vec<(u16, u64)> = (0..rules.tenants())
            .filter(|&l| {
                l != t && holds[l] == 0 && Self::idle(rules, self.tenants[l].last_activity, now)
            })
            .map(|l| (l as u16, rules.guarantees[l].saturating_sub(lent_by[l])))
            .filter(|&(_, avail)| avail > 0)
            .collect();
        // Largest available lender first (ties: the earlier tenant), so that as few
        // lenders as possible are exposed to a loan.
        lenders.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let lendable: u64 = lenders.iter().map(|l| l.1).sum();
        // Within its own guarantee once its loans come back: it waits for them, it
        // does not borrow.
        let fits_own_later = lent > 0 && units <= g.saturating_sub(own_used);
        let reason = if hold_ms > rules.horizon {
            if fits_own_later {
                Reason::GuaranteeOnLoan
            } else {
                Reason::HoldExceedsReclaimHorizon
            }
        } else if lendable >= need {
            let mut left = need;
            let mut borrowed = Vec::new();
            for (l, avail) in lenders {
                if left == 0 {
                    break;
                }
                let take = avail.min(left);
                borrowed.push((l, take));
                left -= take;
            }
            return self.grant(rules, t, owner, units, cost, hold_ms, own_free, borrowed);
        } else if lent > 0 {
            Reason::GuaranteeOnLoan
        } else {
            Reason::GuaranteeExhausted
        };
        let blocking = if reason == Reason::GuaranteeOnLoan {
            self.blocking(t, now)
        } else {
            Vec::new()
        };
        let retry_after_ms = if blocking.iter().any(|b| b.overrun_ms > 0) {
            None
        } else {
            self.estimate(rules, t, units, hold_ms, now)
        };
        let ts = &mut self.tenants[t];
        ts.refusals[refusal_index(reason)] += 1;
        if ts.want == 0 {
            ts.want_since = now;
        }
        // The largest single refused request, not the sum: retrying cannot inflate it.
        ts.want = ts.want.max(units);
        ts.want_last_ask = now;
        Ok(Effect::Refused(GRefused {
            reason,
            retry_after_ms,
            tenant,
            cost,
            units,
            hold_ms,
            guarantee: g,
            own_used,
            lent,
            own_free,
            need,
            lendable,
            horizon_ms: rules.horizon,
            at: now,
            blocking,
        }))
    }

    #[allow(clippy::too_many_arguments)]
    fn grant(
        &mut self,
        rules: &Rules,
        t: usize,
        owner: u16,
        units: u64,
        cost: u64,
        hold_ms: u64,
        own: u64,
        borrowed: Vec<(u16, u64)>,
    ) -> Result<Effect> {
        if self.leases.len() >= rules.max_leases {
            return Err(Error::PoolLeasesFull {
                pool: rules.name.clone(),
                what: "leases",
                max: rules.max_leases,
            });
        }
        if self.slices.len() + borrowed.len() > rules.max_slices {
            return Err(Error::PoolLeasesFull {
                pool: rules.name.clone(),
                what: "loan slices",
                max: rules.max_slices,
            });
        }
        let now = self.clock;
        let mut no = self.next_no;
        while no == 0 || self.leases.iter().any(|l| l.no == no) {
            no = no.wrapping_add(1);
        }
        self.next_no = no.wrapping_add(1);
        let held_before = self.held(t);
        self.leases.push(LeaseEntry {
            no,
            tenant: t as u16,
            owner,
            units,
            cost,
            own,
            granted_at: now,
            hold_ms,
        });
        for &(lender, u) in &borrowed {
            self.slices.push(Slice {
                lease: no,
                lender,
                units: u,
            });
        }
        let g = rules.guarantees[t];
        let ts = &mut self.tenants[t];
        ts.last_activity = now;
        ts.grants += 1;
        ts.cost_granted = ts.cost_granted.saturating_add(cost);
        if ts.want > 0 {
            let entitled = g.min(held_before.saturating_add(ts.want));
            if units >= ts.want || held_before + units >= entitled {
                ts.worst_reclaim_ms = ts.worst_reclaim_ms.max(now - ts.want_since);
                ts.reclaims += 1;
                ts.want = 0;
            }
        }
        Ok(Effect::Granted(Grant {
            lease: no,
            tenant: t as u16,
            units,
            own,
            borrowed,
            at: now,
        }))
    }

    /// The leases holding `t`'s guarantee on loan, earliest deadline first.
    fn blocking(&self, t: usize, now: u64) -> Vec<Blocking> {
        let mut out: Vec<Blocking> = Vec::new();
        let by_no = ByNo::new(&self.leases);
        for s in self.slices.iter().filter(|s| s.lender as usize == t) {
            if let Some(l) = by_no.find(s.lease).map(|i| &self.leases[i]) {
                out.push(Blocking {
                    lease: l.no,
                    tenant: l.tenant,
                    units: s.units,
                    deadline: l.deadline(),
                    overrun_ms: now.saturating_sub(l.deadline()),
                });
            }
        }
        out.sort_by_key(|b| (b.deadline, b.lease));
        out
    }
}
