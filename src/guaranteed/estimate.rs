//! The retry-after of a refusal: the earliest moment the same request would be
//! admitted if every holder releases at its declared deadline and nobody else acts.
//!
//! The state changes only at known instants: a lease's deadline (its units return, and
//! its holder's idleness starts counting), and `idle_after` after a tenant's last
//! activity (it becomes lendable). The estimate projects the state to each such instant
//! in order and asks the rule; the first that admits is the answer, exact to the ms.
//! An overrunning lease has no known end, so the projection keeps it held: when the
//! request cannot fit without it, there is no honest estimate and the answer is `None`.

use std::collections::HashMap;

use super::state::{NEVER, Rules, State};

impl State {
    /// Milliseconds from `now` (at least 1) until a request of `units` for `hold_ms` by tenant `t`
    /// would be admitted, by projection; `None` if no instant in view admits it.
    pub(super) fn estimate(
        &self,
        rules: &Rules,
        t: usize,
        units: u64,
        hold_ms: u64,
        now: u64,
    ) -> Option<u64> {
        let mut at: Vec<u64> = Vec::new();
        for l in self.leases.iter().filter(|l| !l.overrun(now)) {
            at.push(l.deadline());
            at.push(l.deadline().saturating_add(rules.idle_after));
        }
        for (l, ts) in self.tenants.iter().enumerate() {
            if l != t && ts.last_activity != NEVER {
                at.push(ts.last_activity.saturating_add(rules.idle_after));
            }
        }
        // A lease due at `now` itself has not been released yet: its deadline counts.
        at.retain(|&a| a >= now);
        at.sort_unstable();
        at.dedup();
        // Where each lease is, by number: the projection looks up every slice's lease.
        let index: HashMap<u32, usize> = self
            .leases
            .iter()
            .enumerate()
            .map(|(i, l)| (l.no, i))
            .collect();
        at.into_iter()
            .find(|&a| self.admits_at(rules, &index, t, units, hold_ms, now, a))
            .map(|a| (a - now).max(1))
    }

    /// The rule's answer at instant `at` on the state projected from `now`: leases not
    /// overrun at `now` and due by `at` are released at their deadlines.
    #[allow(clippy::too_many_arguments)]
    fn admits_at(
        &self,
        rules: &Rules,
        index: &HashMap<u32, usize>,
        t: usize,
        units: u64,
        hold_ms: u64,
        now: u64,
        at: u64,
    ) -> bool {
        let n = rules.tenants();
        let mut own_used = vec![0u64; n];
        let mut lent = vec![0u64; n];
        let mut holds = vec![false; n];
        let mut last: Vec<u64> = self.tenants.iter().map(|ts| ts.last_activity).collect();
        let ends = |l: &super::state::LeaseEntry| !l.overrun(now) && l.deadline() <= at;
        for l in &self.leases {
            let k = l.tenant as usize;
            if ends(l) {
                last[k] = if last[k] == NEVER {
                    l.deadline()
                } else {
                    last[k].max(l.deadline())
                };
                continue;
            }
            own_used[k] += l.own;
            holds[k] = true;
        }
        for s in &self.slices {
            if index.get(&s.lease).is_some_and(|&i| !ends(&self.leases[i])) {
                lent[s.lender as usize] += s.units;
            }
        }
        let own_free = rules.guarantees[t].saturating_sub(own_used[t] + lent[t]);
        if units <= own_free {
            return true;
        }
        if hold_ms > rules.horizon {
            return false;
        }
        let lendable: u64 = (0..n)
            .filter(|&l| {
                l != t
                    && !holds[l]
                    && (last[l] == NEVER || at >= last[l].saturating_add(rules.idle_after))
            })
            .map(|l| rules.guarantees[l].saturating_sub(lent[l]))
            .sum();
        own_free + lendable >= units
    }
}
