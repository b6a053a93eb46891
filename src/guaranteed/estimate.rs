//! The retry-after of a refusal: the earliest moment the same request would be
//! admitted if every holder releases at its declared deadline and nobody else acts.
//!
//! The state changes only at known instants: a lease's deadline (its units return, and
//! its holder's idleness starts counting), and `idle_after` after a tenant's last
//! activity (it becomes lendable). The estimate projects the state to each such instant
//! in order and asks the rule; the first that admits is the answer, exact to the ms.
//! An overrunning lease has no known end, so the projection keeps it held: when the
//! request cannot fit without it, there is no honest estimate and the answer is `None`.

use super::state::{ByNo, NEVER, Rules, State};

/// What the projection keeps of one tenant as leases end.
#[derive(Clone, Copy)]
struct Projected {
    /// Units of its guarantee its leases not yet ended use.
    own_used: u64,
    /// Its leases not yet ended.
    leases: usize,
    /// Its last activity: a lease's end is a release.
    last: u64,
    /// Units of its guarantee on loan to leases not yet ended.
    lent: u64,
}

impl State {
    /// Milliseconds from `now` (at least 1) until a request of `units` for `hold_ms` by tenant `t`
    /// would be admitted, by projection; `None` if no instant in view admits it.
    ///
    /// One sweep over the instants in order, ending each lease at its deadline as it
    /// passes: O((L + S) log L + K n) for L leases, S slices, n tenants and K instants,
    /// not a projection of the whole state at every instant.
    pub(super) fn estimate(
        &self,
        rules: &Rules,
        t: usize,
        units: u64,
        hold_ms: u64,
        now: u64,
    ) -> Option<u64> {
        // Every lease held, every slice whose lease is outstanding lent.
        let mut p: Vec<Projected> = self
            .tenants
            .iter()
            .map(|ts| Projected {
                own_used: 0,
                leases: 0,
                last: ts.last_activity,
                lent: 0,
            })
            .collect();
        for l in &self.leases {
            let k = &mut p[l.tenant as usize];
            k.own_used += l.own;
            k.leases += 1;
        }
        // Each slice's lease by position, so that a lease's end gives back its slices.
        let by_no = ByNo::new(&self.leases);
        let mut slices: Vec<(usize, usize)> = Vec::with_capacity(self.slices.len());
        for (i, s) in self.slices.iter().enumerate() {
            if let Some(lease) = by_no.find(s.lease) {
                p[s.lender as usize].lent += s.units;
                slices.push((lease, i));
            }
        }
        slices.sort_unstable();
        // The leases that end (not overrun at `now`: an overrun has no known end), by
        // deadline: `(deadline, position)`.
        let mut ending: Vec<(u64, usize)> = (self.leases.iter().enumerate())
            .filter(|(_, l)| !l.overrun(now))
            .map(|(i, l)| (l.deadline(), i))
            .collect();
        ending.sort_unstable();
        // The instants the state changes at, in order: each deadline, `idle_after` after
        // each (the holder turns idle), and `idle_after` after each other tenant's last
        // activity. A lease due at `now` itself has not been released yet: its deadline
        // counts.
        let mut idle_from: Vec<u64> = (self.tenants.iter().enumerate())
            .filter(|&(l, ts)| l != t && ts.last_activity != NEVER)
            .map(|(_, ts)| ts.last_activity.saturating_add(rules.idle_after))
            .collect();
        idle_from.sort_unstable();
        let deadlines = ending.iter().map(|&(d, _)| d);
        let holders_idle = ending
            .iter()
            .map(|&(d, _)| d.saturating_add(rules.idle_after));
        let instants = merged(merged(deadlines, holders_idle), idle_from.iter().copied());
        let (mut ended, mut previous) = (0, None);
        for a in instants.filter(|&a| a >= now) {
            if previous.replace(a) == Some(a) {
                continue;
            }
            // Release, at its deadline, every lease due by `a`.
            while let Some(&(deadline, i)) = ending.get(ended) {
                if deadline > a {
                    break;
                }
                let l = &self.leases[i];
                let k = &mut p[l.tenant as usize];
                k.own_used -= l.own;
                k.leases -= 1;
                k.last = if k.last == NEVER {
                    l.deadline()
                } else {
                    k.last.max(l.deadline())
                };
                let first = slices.partition_point(|&(lease, _)| lease < i);
                for &(_, s) in slices[first..].iter().take_while(|&&(lease, _)| lease == i) {
                    let s = &self.slices[s];
                    p[s.lender as usize].lent -= s.units;
                }
                ended += 1;
            }
            if Self::admits_projected(rules, &p, t, units, hold_ms, a) {
                return Some((a - now).max(1));
            }
        }
        None
    }

    /// The rule's answer at instant `at` on the projected tenants.
    fn admits_projected(
        rules: &Rules,
        p: &[Projected],
        t: usize,
        units: u64,
        hold_ms: u64,
        at: u64,
    ) -> bool {
        let own_free = rules.guarantees[t].saturating_sub(p[t].own_used + p[t].lent);
        if units <= own_free {
            return true;
        }
        if hold_ms > rules.horizon {
            return false;
        }
        let lendable: u64 = (0..p.len())
            .filter(|&l| {
                l != t
                    && p[l].leases == 0
                    && (p[l].last == NEVER || at >= p[l].last.saturating_add(rules.idle_after))
            })
            .map(|l| rules.guarantees[l].saturating_sub(p[l].lent))
            .sum();
        own_free + lendable >= units
    }
}

/// Two ascending sequences as one ascending sequence.
fn merged(a: impl Iterator<Item = u64>, b: impl Iterator<Item = u64>) -> impl Iterator<Item = u64> {
    let (mut a, mut b) = (a.peekable(), b.peekable());
    std::iter::from_fn(move || match (a.peek(), b.peek()) {
        (Some(x), Some(y)) if x > y => b.next(),
        (Some(_), _) => a.next(),
        (None, _) => b.next(),
    })
}

#[cfg(test)]
mod tests {
    use super::super::config::{FairnessUnit, GuaranteedConfig};
    use super::super::state::Effect;
    use super::super::state::tests::{lcg, random_call};
    use super::*;

    /// The projection the sweep replaced, kept as its oracle: the whole state projected
    /// afresh at every instant, O(K (L + S)).
    fn projected_afresh(
        st: &State,
        rules: &Rules,
        t: usize,
        units: u64,
        hold_ms: u64,
        now: u64,
    ) -> Option<u64> {
        let mut at: Vec<u64> = Vec::new();
        for l in st.leases.iter().filter(|l| !l.overrun(now)) {
            at.push(l.deadline());
            at.push(l.deadline().saturating_add(rules.idle_after));
        }
        for (l, ts) in st.tenants.iter().enumerate() {
            if l != t && ts.last_activity != NEVER {
                at.push(ts.last_activity.saturating_add(rules.idle_after));
            }
        }
        at.retain(|&a| a >= now);
        at.sort_unstable();
        at.dedup();
        let n = rules.tenants();
        at.into_iter()
            .find(|&a| {
                let ends =
                    |l: &super::super::state::LeaseEntry| !l.overrun(now) && l.deadline() <= a;
                let (mut own_used, mut lent, mut holds) = (vec![0; n], vec![0; n], vec![false; n]);
                let mut last: Vec<u64> = st.tenants.iter().map(|ts| ts.last_activity).collect();
                for l in &st.leases {
                    let k = l.tenant as usize;
                    if ends(l) {
                        last[k] = if last[k] == NEVER {
                            l.deadline()
                        } else {
                            last[k].max(l.deadline())
                        };
                    } else {
                        own_used[k] += l.own;
                        holds[k] = true;
                    }
                }
                for s in &st.slices {
                    if st.leases.iter().any(|l| l.no == s.lease && !ends(l)) {
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
                            && (last[l] == NEVER || a >= last[l].saturating_add(rules.idle_after))
                    })
                    .map(|l| rules.guarantees[l].saturating_sub(lent[l]))
                    .sum();
                own_free + lendable >= units
            })
            .map(|a| (a - now).max(1))
    }

    #[test]
    fn the_sweep_answers_as_a_projection_afresh_at_every_instant() {
        let cfg = GuaranteedConfig::new("g", 120)
            .unit(FairnessUnit::Cost)
            .tenant("a", 1)
            .tenant("b", 2)
            .tenant("c", 1)
            .tenant("d", 2)
            .reclaim_horizon_ms(100)
            .idle_after_ms(150)
            .max_leases(40);
        let rules = Rules::new(&cfg);
        let mut next = lcg(0x2545_f491_4f6c_dd1d);
        let (mut compared, mut somewhere, mut never) = (0, 0, 0);
        for _ in 0..40 {
            let mut st = State::new(&rules);
            let mut now = 0u64;
            for _ in 0..120 {
                let call = random_call(&mut next, &st, 4, &mut now, (60, 50, 250));
                let _: Option<Effect> = st.apply(&rules, call).ok();
                // Every tenant and a spread of requests, on this state.
                for t in 0..4 {
                    for (units, hold) in [(1, 10), (next(120) + 1, next(250)), (60, 100)] {
                        let sweep = st.estimate(&rules, t, units, hold, st.clock);
                        let afresh = projected_afresh(&st, &rules, t, units, hold, st.clock);
                        assert_eq!(sweep, afresh, "tenant {t}, {units} for {hold} ms on {st:?}");
                        compared += 1;
                        somewhere += usize::from(sweep.is_some_and(|ms| ms > 1));
                        never += usize::from(sweep.is_none());
                    }
                }
            }
        }
        // The states reached both kinds of answer, not only "now" or only "never".
        assert!(
            somewhere > 1000 && never > 100,
            "{compared}: {somewhere} later, {never} never"
        );
    }
}
