//! The check of a decoded state: invariants I1-I3 (see the parent module) and every
//! index, in O((L + S) log L) for L leases and S slices, since it runs on every op's
//! read of a guaranteed pool's block; and the per-tenant counters it shares with the
//! acquire and the clock's advance.

use super::{ByNo, Rules, State};

impl State {
    /// Checks invariants I1-I3 and every index; `Err` names the first violation.
    pub fn check(&self, rules: &Rules) -> std::result::Result<(), String> {
        let n = rules.tenants();
        if self.tenants.len() != n {
            return Err(format!(
                "{} tenant records, the config has {n}",
                self.tenants.len()
            ));
        }
        if self.leases.len() > rules.max_leases || self.slices.len() > rules.max_slices {
            return Err(format!(
                "{} leases and {} slices",
                self.leases.len(),
                self.slices.len()
            ));
        }
        // In O((L + S) log L), not O(L * S): this runs on every op's read of the block.
        let by_no = ByNo::new(&self.leases);
        // Each lease's borrowed units, by position (a lease's number twice gives them
        // all to the first, which is checked before the second is found a repeat);
        // `None` past u64 (no lease can count that).
        let mut sliced = Vec::new();
        if !self.slices.is_empty() {
            sliced.resize(self.leases.len(), Some(0u64));
        }
        for s in &self.slices {
            if let Some(i) = by_no.find(s.lease) {
                sliced[i] = sliced[i].and_then(|u| u.checked_add(s.units));
            }
        }
        // Sums by tenant (own, then lent) and of the pool, in the same passes, that
        // saturate (a hostile block's huge counts must not wrap round to small ones).
        let mut sums = PerTenant::new();
        let (own, lent) = sums.two(n);
        let mut in_use = 0u64;
        for (i, l) in self.leases.iter().enumerate() {
            if l.tenant as usize >= n || l.no == 0 {
                return Err(format!("lease {} names tenant {}", l.no, l.tenant));
            }
            let own = &mut own[l.tenant as usize];
            *own = own.saturating_add(l.own);
            in_use = in_use.saturating_add(l.units);
            if by_no.repeats_earlier(i) {
                return Err(format!("lease {} appears twice", l.no));
            }
            let borrowed = sliced.get(i).copied().unwrap_or(Some(0));
            if l.units == 0 || borrowed.and_then(|b| l.own.checked_add(b)) != Some(l.units) {
                return Err(format!(
                    "lease {} counts {} units but funds {} own + {} borrowed (I2)",
                    l.no,
                    l.units,
                    l.own,
                    units_text(borrowed)
                ));
            }
        }
        for s in &self.slices {
            // No number is twice here (the loop above returned): the one lease found is
            // the only one.
            let lease = by_no.find(s.lease).map(|i| &self.leases[i]);
            if s.lender as usize >= n || s.units == 0 || lease.is_none() {
                return Err(format!(
                    "slice of lease {} from lender {} is dangling",
                    s.lease, s.lender
                ));
            }
            if lease.is_some_and(|l| l.tenant == s.lender) {
                return Err(format!("lease {} borrows from its own tenant", s.lease));
            }
            let lent = &mut lent[s.lender as usize];
            *lent = lent.saturating_add(s.units);
        }
        for t in 0..n {
            let (own, lent) = (own[t], lent[t]);
            if own.saturating_add(lent) > rules.guarantees[t] {
                return Err(format!(
                    "tenant {} uses {} own + {} lent of a guarantee of {} (I1)",
                    rules.names[t],
                    units_text(Some(own)),
                    units_text(Some(lent)),
                    rules.guarantees[t]
                ));
            }
        }
        if in_use > rules.ceiling {
            return Err(format!(
                "{} units in use over a ceiling of {} (I3)",
                units_text(Some(in_use)),
                rules.ceiling
            ));
        }
        Ok(())
    }
}

/// Two zeroed counters a tenant, for one pass over the leases and the slices instead of
/// one a tenant: on the stack for up to 8 tenants (most pools: no allocation, and little
/// to zero), else on the heap.
pub(in crate::guaranteed::state) struct PerTenant {
    stack: [u64; 16],
    heap: Vec<u64>,
}

impl PerTenant {
    pub(in crate::guaranteed::state) fn new() -> PerTenant {
        PerTenant {
            stack: [0; 16],
            heap: Vec::new(),
        }
    }

    /// The two counters of each of `n` tenants, as two slices of `n`.
    pub(in crate::guaranteed::state) fn two(&mut self, n: usize) -> (&mut [u64], &mut [u64]) {
        let both = if 2 * n <= self.stack.len() {
            &mut self.stack[..2 * n]
        } else {
            self.heap.resize(2 * n, 0);
            &mut self.heap[..]
        };
        both.split_at_mut(n)
    }
}

/// A sum of units for an error's text: `None` is a sum past what a u64 counts, and a
/// saturated sum (`u64::MAX`) may be one.
fn units_text(sum: Option<u64>) -> String {
    match sum {
        Some(u) if u < u64::MAX => u.to_string(),
        _ => format!("{} or more", u64::MAX),
    }
}
