//! Seed 001's rules as a sequential state machine: a [`State`] and the [`Call`]s that
//! change it. Pure and deterministic: the same state and call give the same state and
//! effect, so a recorded sequence of calls replays to identical decisions and
//! statistics. The shared segment runs exactly this code inside its CAS loop (see
//! `shared`); a replay runs it alone ([`Model`]).
//!
//! Accounting, per tenant `t` with guarantee `G[t]` (integers, in the fairness unit):
//! - `own_used[t]`: the units of `t`'s leases funded by its own guarantee;
//! - `lent[t]`: the units of other tenants' leases funded by `t` (slices naming `t`);
//! - free in `t`'s guarantee: `G[t] - own_used[t] - lent[t]`, never negative (I1).
//!
//! A lease's units are its own part plus its slices (I2), and `sum G = ceiling`, so the
//! units held never exceed the ceiling (I3). Every entry point takes `now`; a `now`
//! earlier than the latest one seen counts as that one, so the pool's clock only moves
//! forward and the deficit integral is never negative.

use serde::Serialize;

use super::config::{FairnessUnit, GuaranteedConfig};
use crate::error::{Error, Result};
use crate::refusal::Reason;

mod by_no;
mod check;
#[cfg(test)]
mod check_tests;
mod lend;

pub(crate) use by_no::ByNo;
use check::PerTenant;

/// `last_activity` of a tenant that has never acted: idle, hence lendable, from the
/// start (nothing is reserved for a tenant that is not there).
pub const NEVER: u64 = u64::MAX;

/// What the rules need from the config, resolved once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rules {
    pub name: String,
    pub unit: FairnessUnit,
    pub ceiling: u64,
    pub names: Vec<String>,
    pub weights: Vec<u32>,
    pub guarantees: Vec<u64>,
    pub horizon: u64,
    pub idle_after: u64,
    pub started_at: u64,
    pub max_leases: usize,
    pub max_slices: usize,
    pub demand_signal: bool,
}

impl Rules {
    /// From a validated config.
    pub fn new(c: &GuaranteedConfig) -> Rules {
        Rules {
            name: c.name.clone(),
            unit: c.unit_or_cost(),
            ceiling: c.ceiling as u64,
            names: c.tenants.iter().map(|t| t.0.clone()).collect(),
            weights: c.tenants.iter().map(|t| t.1).collect(),
            guarantees: c.guarantees(),
            horizon: c.reclaim_horizon_ms as u64,
            idle_after: c.idle_after_ms as u64,
            started_at: c.started_at_ms,
            max_leases: c.max_leases as usize,
            max_slices: c.max_slices(),
            demand_signal: c.demand_signal,
        }
    }
    pub fn tenants(&self) -> usize {
        self.weights.len()
    }
    /// `tenant#no`, the name a lease goes by in refusals and reports.
    pub fn lease_name(&self, tenant: u16, no: u32) -> String {
        let t = self.names.get(tenant as usize).map_or("?", |s| s.as_str());
        // By hand, not `format!`: every grant names its lease, and the formatting
        // machinery cost about a tenth of a guaranteed pair.
        let mut digits = [0u8; 10];
        let (mut i, mut n) = (digits.len(), no);
        loop {
            i -= 1;
            digits[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        let mut name = String::with_capacity(t.len() + 1 + digits.len() - i);
        name.push_str(t);
        name.push('#');
        name.extend(digits[i..].iter().map(|&d| d as char));
        name
    }
}

/// One tenant's part of the state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TenantState {
    /// The last attempt (with the demand signal, refused ones too) or release; [`NEVER`].
    pub last_activity: u64,
    /// The outstanding want: the largest single refused request (units) since the
    /// tenant was last served; 0 for none.
    pub want: u64,
    /// When the outstanding want began (its first refusal).
    pub want_since: u64,
    /// Its latest refusal.
    pub want_last_ask: u64,
    /// `deficit_unit_ms`: the integral of entitled minus held while short, up to the
    /// state's clock.
    pub deficit: u64,
    /// `worst_reclaim_ms`: the longest wait that ended in being served.
    pub worst_reclaim_ms: u64,
    /// Wants that ended in being served.
    pub reclaims: u64,
    pub grants: u64,
    pub cost_granted: u64,
    /// Refusals by reason: hold_exceeds_reclaim_horizon, guarantee_on_loan,
    /// guarantee_exhausted.
    pub refusals: [u64; 3],
}

impl Default for TenantState {
    fn default() -> Self {
        TenantState {
            last_activity: NEVER,
            want: 0,
            want_since: 0,
            want_last_ask: 0,
            deficit: 0,
            worst_reclaim_ms: 0,
            reclaims: 0,
            grants: 0,
            cost_granted: 0,
            refusals: [0; 3],
        }
    }
}

/// An outstanding lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct LeaseEntry {
    /// Unique among outstanding leases of the pool, never 0.
    pub no: u32,
    pub tenant: u16,
    /// The process slot that acquired it (its death releases it).
    pub owner: u16,
    /// Units counted against the ceiling: `unit.units(cost)`.
    pub units: u64,
    pub cost: u64,
    /// Units funded by the tenant's own guarantee; the rest is in slices.
    pub own: u64,
    pub granted_at: u64,
    pub hold_ms: u64,
}

impl LeaseEntry {
    /// The declared deadline.
    pub fn deadline(&self) -> u64 {
        self.granted_at.saturating_add(self.hold_ms)
    }
    /// Past its declared deadline at `now`.
    pub fn overrun(&self, now: u64) -> bool {
        now > self.deadline()
    }
}

/// A borrowed slice of a lease: `units` of `lender`'s guarantee.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Slice {
    pub lease: u32,
    pub lender: u16,
    pub units: u64,
}

/// The whole state of one guaranteed pool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct State {
    /// Calls applied so far, modulo 2^44 (as the pool's head word counts them): the
    /// order of a replay.
    pub seq: u64,
    /// The latest `now` seen (ms).
    pub clock: u64,
    pub next_no: u32,
    pub tenants: Vec<TenantState>,
    pub leases: Vec<LeaseEntry>,
    pub slices: Vec<Slice>,
}

/// One entry point's call, as recorded for a replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub enum Call {
    Acquire {
        tenant: u16,
        cost: u64,
        hold_ms: u64,
        owner: u16,
        now: u64,
    },
    Release {
        lease: u32,
        now: u64,
    },
    /// A dead process's leases given back, at the pool's clock.
    ReapOwner {
        owner: u16,
    },
}

/// A lease granted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Grant {
    pub lease: u32,
    pub tenant: u16,
    pub units: u64,
    pub own: u64,
    /// `(lender, units)`, largest lender first.
    pub borrowed: Vec<(u16, u64)>,
    pub at: u64,
}

/// A lease whose units the asker is waiting for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Blocking {
    pub lease: u32,
    /// The borrower holding it.
    pub tenant: u16,
    /// Units of the asker's guarantee it holds.
    pub units: u64,
    pub deadline: u64,
    /// How far past its deadline it is (0: not overrun).
    pub overrun_ms: u64,
}

/// A refusal's facts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GRefused {
    pub reason: Reason,
    /// When the request is next expected to fit, if every holder releases by its
    /// declared deadline; `None` when a blocking lease has overrun (or nothing in view
    /// would make room).
    pub retry_after_ms: Option<u64>,
    pub tenant: u16,
    pub cost: u64,
    pub units: u64,
    pub hold_ms: u64,
    pub guarantee: u64,
    /// The asker's own leases' units, and its units on loan to others.
    pub own_used: u64,
    pub lent: u64,
    /// Free in its guarantee now.
    pub own_free: u64,
    /// Units it would have had to borrow.
    pub need: u64,
    /// Units idle lenders could lend now.
    pub lendable: u64,
    pub horizon_ms: u64,
    pub at: u64,
    /// The leases holding the asker's guarantee on loan (`guarantee_on_loan`).
    pub blocking: Vec<Blocking>,
}

/// A release.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Released {
    pub lease: u32,
    pub tenant: u16,
    pub units: u64,
    pub at: u64,
    /// How far past its deadline it was released (0: in time).
    pub overran_ms: u64,
}

/// What a call did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Effect {
    Granted(Grant),
    Refused(GRefused),
    Released(Released),
    Reaped { leases: u32, units: u64 },
}

fn refusal_index(r: Reason) -> usize {
    match r {
        Reason::HoldExceedsReclaimHorizon => 0,
        Reason::GuaranteeOnLoan => 1,
        _ => 2,
    }
}

impl State {
    /// A state of no tenants, leases or slices, at seq 0 (no pool's state: a buffer to
    /// decode into).
    pub fn empty() -> State {
        State {
            seq: 0,
            clock: 0,
            next_no: 0,
            tenants: Vec::new(),
            leases: Vec::new(),
            slices: Vec::new(),
        }
    }

    /// The state at creation: nobody has acted, nothing is held.
    pub fn new(rules: &Rules) -> State {
        State {
            seq: 0,
            clock: rules.started_at,
            next_no: 1,
            tenants: vec![TenantState::default(); rules.tenants()],
            leases: Vec::new(),
            slices: Vec::new(),
        }
    }

    /// Units held by tenant `t`'s leases (own and borrowed).
    pub fn held(&self, t: usize) -> u64 {
        self.leases
            .iter()
            .filter(|l| l.tenant as usize == t)
            .map(|l| l.units)
            .sum()
    }
    pub fn own_used(&self, t: usize) -> u64 {
        self.leases
            .iter()
            .filter(|l| l.tenant as usize == t)
            .map(|l| l.own)
            .sum()
    }
    /// Units of `t`'s guarantee on loan.
    pub fn lent(&self, t: usize) -> u64 {
        self.slices
            .iter()
            .filter(|s| s.lender as usize == t)
            .map(|s| s.units)
            .sum()
    }
    fn holds_any(&self, t: usize) -> bool {
        self.leases.iter().any(|l| l.tenant as usize == t)
    }
    /// Units in use against the ceiling.
    pub fn in_use(&self) -> u64 {
        self.leases.iter().map(|l| l.units).sum()
    }
    fn idle(rules: &Rules, last: u64, now: u64) -> bool {
        last == NEVER || now >= last.saturating_add(rules.idle_after)
    }
    /// Whether `t` may lend at `now`: it holds nothing, and has neither asked nor
    /// released for `idle_after` (idleness runs from the release, so a tenant in the
    /// middle of a long call is never taken for gone).
    pub fn lendable(&self, rules: &Rules, t: usize, now: u64) -> bool {
        !self.holds_any(t) && Self::idle(rules, self.tenants[t].last_activity, now)
    }
    /// When tenant `t`'s want lapses: `idle_after` after its last sign of life.
    fn lapse_at(rules: &Rules, ts: &TenantState) -> u64 {
        let last = if ts.last_activity == NEVER {
            ts.want_last_ask
        } else {
            ts.last_activity.max(ts.want_last_ask)
        };
        last.saturating_add(rules.idle_after)
    }

    /// Moves the clock to `now` (never back), integrating every short tenant's deficit
    /// up to `now` or the moment its want lapses, whichever is first; a lapsed want is
    /// dropped (an abandoned wait is not a reclaim).
    pub fn advance(&mut self, rules: &Rules, now: u64) {
        let now = now.max(self.clock).max(rules.started_at);
        // The units each tenant holds, in one pass over the leases (not one a tenant
        // that wants), and only when one wants.
        let mut sums;
        let held_by: &[u64] = if self.tenants.iter().any(|ts| ts.want > 0) {
            sums = PerTenant::new();
            let (held_by, _) = sums.two(self.tenants.len());
            for l in &self.leases {
                if let Some(held) = held_by.get_mut(l.tenant as usize) {
                    *held = held.saturating_add(l.units);
                }
            }
            held_by
        } else {
            &[]
        };
        let clock = self.clock;
        for (t, ts) in self.tenants.iter_mut().enumerate() {
            if ts.want == 0 {
                continue;
            }
            let held = held_by[t];
            let lapse = Self::lapse_at(rules, ts);
            let end = now.min(lapse);
            let entitled = rules.guarantees[t].min(held.saturating_add(ts.want));
            if end > clock && entitled > held {
                ts.deficit = ts
                    .deficit
                    .saturating_add((entitled - held).saturating_mul(end - clock));
            }
            if now >= lapse {
                ts.want = 0;
            }
        }
        self.clock = now;
    }

    /// Applies one call. On `Err` the state is left as it was (nothing to publish).
    pub fn apply(&mut self, rules: &Rules, call: Call) -> Result<Effect> {
        let mut next = self.clone();
        let effect = next.apply_in_place(rules, call)?;
        *self = next;
        Ok(effect)
    }

    /// [`State::apply`] without its copy: on `Err` the state may be left partly
    /// changed, so only a caller that then drops it may use this (an op on the shared
    /// block, which publishes nothing on `Err` and reads the state afresh next time).
    pub fn apply_in_place(&mut self, rules: &Rules, call: Call) -> Result<Effect> {
        let effect = match call {
            Call::Acquire {
                tenant,
                cost,
                hold_ms,
                owner,
                now,
            } => self.acquire(rules, tenant, cost, hold_ms, owner, now)?,
            Call::Release { lease, now } => self.release(rules, lease, now)?,
            Call::ReapOwner { owner } => self.reap_owner(owner),
        };
        // Modulo 2^44, as the head word counts (`shared`): a replay numbers its states
        // as the pool did.
        self.seq = super::shared::next_seq(self.seq);
        Ok(effect)
    }

    fn release(&mut self, rules: &Rules, no: u32, now: u64) -> Result<Effect> {
        let Some(i) = self.leases.iter().position(|l| l.no == no) else {
            return Err(Error::AlreadyReleased {
                lease: format!(
                    "#{no} of guaranteed pool {:?} (not outstanding: released already, \
                     reaped with its dead process, or never granted)",
                    rules.name
                ),
            });
        };
        self.advance(rules, now);
        let now = self.clock;
        let l = self.leases.remove(i);
        self.slices.retain(|s| s.lease != no);
        // A release is activity: idleness is measured from it.
        self.tenants[l.tenant as usize].last_activity = now;
        Ok(Effect::Released(Released {
            lease: no,
            tenant: l.tenant,
            units: l.units,
            at: now,
            overran_ms: now.saturating_sub(l.deadline()),
        }))
    }

    /// Gives back every lease of process slot `owner` (dead), at the pool's clock.
    pub(crate) fn reap_owner(&mut self, owner: u16) -> Effect {
        let now = self.clock;
        let (mut leases, mut units) = (0, 0);
        let gone: Vec<LeaseEntry> = self
            .leases
            .iter()
            .filter(|l| l.owner == owner)
            .copied()
            .collect();
        for l in &gone {
            leases += 1;
            units += l.units;
            self.tenants[l.tenant as usize].last_activity = now;
        }
        // One pass over the slices, not one a lease gone: each looks its lease up by
        // number among those gone.
        let gone_by_no = ByNo::new(&gone);
        self.slices.retain(|s| gone_by_no.find(s.lease).is_none());
        self.leases.retain(|l| l.owner != owner);
        Effect::Reaped { leases, units }
    }

    /// Whether any outstanding lease belongs to process slot `owner`.
    pub fn owns_any(&self, owner: u16) -> bool {
        self.leases.iter().any(|l| l.owner == owner)
    }
}

/// The rules applied alone, in one process: what a replay of recorded calls runs.
#[derive(Clone, Debug)]
pub struct Model {
    pub rules: Rules,
    pub state: State,
}

impl Model {
    pub fn new(cfg: &GuaranteedConfig) -> Result<Model> {
        cfg.validate()?;
        let rules = Rules::new(cfg);
        let state = State::new(&rules);
        Ok(Model { rules, state })
    }
    pub fn apply(&mut self, call: Call) -> Result<Effect> {
        self.state.apply(&self.rules, call)
    }
    pub fn acquire(&mut self, tenant: u16, cost: u64, hold_ms: u64, now: u64) -> Result<Effect> {
        self.apply(Call::Acquire {
            tenant,
            cost,
            hold_ms,
            owner: 0,
            now,
        })
    }
    pub fn release(&mut self, lease: u32, now: u64) -> Result<Effect> {
        self.apply(Call::Release { lease, now })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A pool `g` of 100 in cost, split evenly between `first` and `b`; a horizon of
    /// 100 ms, idle after 150.
    pub(crate) fn even_pair(first: &str) -> GuaranteedConfig {
        GuaranteedConfig::new("g", 100)
            .unit(FairnessUnit::Cost)
            .tenant(first, 1)
            .tenant("b", 1)
            .reclaim_horizon_ms(100)
            .idle_after_ms(150)
    }

    /// A fixed linear congruential sequence from `seed`: `next(m)` is below `m` (0 for
    /// `m` = 0), the same numbers every run.
    pub(crate) fn lcg(mut seed: u64) -> impl FnMut(u64) -> u64 {
        move |m| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 33) % m.max(1)
        }
    }

    /// A random call on `st` with `now` moved on by less than `step` ms first: twice in
    /// three (and always with nothing outstanding) an acquire by one of `n` tenants of
    /// 1 to `cost` for less than `hold` ms, else the release of an outstanding lease.
    pub(crate) fn random_call(
        next: &mut impl FnMut(u64) -> u64,
        st: &State,
        n: u64,
        now: &mut u64,
        (step, cost, hold): (u64, u64, u64),
    ) -> Call {
        *now += next(step);
        if next(3) > 0 || st.leases.is_empty() {
            Call::Acquire {
                tenant: next(n) as u16,
                cost: 1 + next(cost),
                hold_ms: next(hold),
                owner: 0,
                now: *now,
            }
        } else {
            let no = st.leases[next(st.leases.len() as u64) as usize].no;
            Call::Release {
                lease: no,
                now: *now,
            }
        }
    }

    #[test]
    fn a_lease_name_is_its_tenant_and_number() {
        let rules = Rules::new(&even_pair("acme"));
        for no in [0, 1, 9, 10, 99, 100, 12_345, 1_000_000_000, u32::MAX] {
            assert_eq!(rules.lease_name(0, no), format!("acme#{no}"));
            assert_eq!(rules.lease_name(1, no), format!("b#{no}"));
            assert_eq!(rules.lease_name(7, no), format!("?#{no}"));
        }
    }

    /// A reap gives back the dead process's leases and their slices, and only theirs:
    /// the lenders of its loans get their units back, another process's loan stays.
    #[test]
    fn a_reap_takes_its_leases_loans_and_leaves_the_others() {
        let rules = Rules::new(
            &GuaranteedConfig::new("g", 90)
                .unit(FairnessUnit::Cost)
                .tenant("a", 1)
                .tenant("b", 1)
                .tenant("c", 1)
                .reclaim_horizon_ms(100)
                .idle_after_ms(150),
        );
        let mut st = State::new(&rules);
        let ask = |tenant, cost, owner| Call::Acquire {
            tenant,
            cost,
            hold_ms: 50,
            owner,
            now: 0,
        };
        // Guarantees of 30 each. a (process 1) takes 45: its 30 and 15 of b's (the
        // largest idle lender, the earlier on a tie); b (process 2) takes 25: the 15
        // left of its own and 10 of c's (a holds, so does not lend); a takes 5 more,
        // all of c's (b holds now).
        for (tenant, cost, owner) in [(0, 45, 1), (1, 25, 2), (0, 5, 1)] {
            assert!(matches!(
                st.apply(&rules, ask(tenant, cost, owner)),
                Ok(Effect::Granted(_))
            ));
        }
        assert_eq!(st.slices.len(), 3, "{st:?}");
        assert_eq!((st.lent(1), st.lent(2), st.in_use()), (15, 15, 75));
        let reaped = st.apply(&rules, Call::ReapOwner { owner: 1 }).unwrap();
        assert_eq!(
            reaped,
            Effect::Reaped {
                leases: 2,
                units: 50
            }
        );
        // b's loan of 10 from c is all that is left on loan.
        assert_eq!(st.leases.len(), 1);
        assert_eq!(st.slices.len(), 1, "{st:?}");
        assert_eq!(
            (st.slices[0].lease, st.lent(1), st.lent(2)),
            (st.leases[0].no, 0, 10)
        );
        assert_eq!(st.check(&rules), Ok(()));
    }

    /// The deficit integrates what a tenant was entitled to over what it held: a tenant
    /// holding part of its guarantee is short only of the rest.
    #[test]
    fn the_deficit_counts_what_a_holder_was_short_of_not_what_it_held() {
        let rules = Rules::new(&even_pair("a"));
        let mut st = State::new(&rules);
        let ask = |tenant, cost, hold_ms, now| Call::Acquire {
            tenant,
            cost,
            hold_ms,
            owner: 0,
            now,
        };
        // b takes its 50 and 30 of a's (idle); a then takes the 20 it has left.
        for call in [ask(1, 80, 100, 0), ask(0, 20, 1000, 0)] {
            assert!(matches!(st.apply(&rules, call), Ok(Effect::Granted(_))));
        }
        // a asks for 40 more: refused (its other 30 are on loan), it wants 40.
        for now in [0, 60] {
            let refused = st.apply(&rules, ask(0, 40, 10, now));
            assert!(matches!(refused, Ok(Effect::Refused(_))), "{refused:?}");
        }
        // Entitled to min(50, 20 held + 40 wanted) = 50 for 60 ms, holding 20: short
        // of 30 (not of the 40 it asked for, nor of 50).
        assert_eq!(st.tenants[0].want, 40);
        assert_eq!(st.tenants[0].deficit, 30 * 60);
    }

    /// In place, a call makes the state and effect the copying `apply` makes.
    #[test]
    fn apply_in_place_is_apply_without_the_copy() {
        let rules = Rules::new(&even_pair("a"));
        let (mut copied, mut in_place) = (State::new(&rules), State::new(&rules));
        let calls = [
            Call::Acquire {
                tenant: 1,
                cost: 80,
                hold_ms: 100,
                owner: 0,
                now: 0,
            },
            Call::Acquire {
                tenant: 0,
                cost: 40,
                hold_ms: 10,
                owner: 1,
                now: 10,
            },
            Call::Release { lease: 1, now: 20 },
            Call::Acquire {
                tenant: 0,
                cost: 40,
                hold_ms: 10,
                owner: 1,
                now: 30,
            },
            Call::ReapOwner { owner: 1 },
        ];
        for call in calls {
            let a = copied.apply(&rules, call).unwrap();
            let b = in_place.apply_in_place(&rules, call).unwrap();
            assert_eq!((a, &copied), (b, &in_place), "{call:?}");
        }
        // A call that fails after it changed something (the clock, the asker's
        // activity): the copying apply leaves the state as it was; in place it does not,
        // which is why only a caller that drops the state on `Err` may use it.
        let rules = Rules::new(&even_pair("a").max_leases(1));
        let mut st = State::new(&rules);
        let ask = |tenant, now| Call::Acquire {
            tenant,
            cost: 10,
            hold_ms: 10,
            owner: 0,
            now,
        };
        st.apply(&rules, ask(0, 0)).unwrap();
        let before = st.clone();
        let full = st.apply(&rules, ask(1, 50));
        assert!(
            matches!(full, Err(Error::PoolLeasesFull { .. })),
            "{full:?}"
        );
        assert_eq!(st, before);
        assert!(st.apply_in_place(&rules, ask(1, 50)).is_err());
        assert_ne!(st, before, "the failed call advanced the clock");
    }
}
