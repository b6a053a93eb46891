//! Arbitrary sequences of calls on a guaranteed pool (seed 001), applied through the
//! very code that runs on the mapping (`guaranteed::shared` over a heap region: read the
//! block under the head word, apply the rules in place, write a block of the caller's
//! slot, CAS the head, through one set of buffers reused by every step, as the engine
//! reuses its thread's) by three process slots, and to the sequential model alone (its
//! copying `apply`, which leaves the state as it was on an error): the same effect
//! at every step, the same state after it, and the pool's invariants (decoding checks
//! them) throughout. A death reaps the slot as a reaper does.
//!
//! Input: a first byte, whose low bit turns the demand signal off (the seed's trace
//! "without the demand signal"), then chunks of 3 bytes `[op, a, b]`:
//! - `op % 5` 0 or 1: slot `a % 3` asks for `1 + b % 12` for tenant `(a >> 2) % 3`,
//!   declaring a hold of `10 * (b >> 4)` ms;
//! - 2: slot `a % 3` releases the `b`-th outstanding lease (modulo how many there are);
//! - 3: time moves on by `b` ms;
//! - 4: slot `a % 3` dies and is reaped.
//!
//! Beside the model, an oracle written from seed 001 (not from the library) checks
//! each effect against its own record of what was granted, lent, asked and released:
//! a request that fits the tenant's free guarantee is granted from it; a loan goes
//! only to a hold within the horizon, takes the whole free own part first and the
//! rest from idle lenders (holding nothing, no attempt or release for `idle_after`),
//! largest available first; a request that such lenders could fund is not refused;
//! grants are all or nothing; a `guarantee_on_loan` refusal names exactly the leases
//! holding the asker's guarantee, and has no retry-after when one of them has overrun.
//! A retry-after is checked by replaying the state forward with every lease released
//! at its declared deadline: at the retry-after the same request is granted, and one
//! millisecond before it (when that is later than the refusal) it is not.
//!
//! Run: `cd fuzz && cargo fuzz run -s none guaranteed_sequence`.
#![no_main]

use fairshm::guaranteed::{Call, Effect, FairnessUnit, GuaranteedConfig, Model, State, shared};
use fairshm::refusal::Reason;
use fairshm::region::{HeapRegion, Region};
use libfuzzer_sys::fuzz_target;

fn config(demand_signal: bool) -> GuaranteedConfig {
    GuaranteedConfig::new("g", 24)
        .demand_signal(demand_signal)
        .unit(FairnessUnit::Cost)
        .tenant("a", 1)
        .tenant("b", 1)
        .tenant("c", 2)
        .reclaim_horizon_ms(60)
        .idle_after_ms(100)
        .max_leases(8)
}

/// Guarantees of the config (24 by weights 1, 1, 2), its horizon and idleness.
const G: [u64; 3] = [6, 6, 12];
const HORIZON: u64 = 60;
const IDLE: u64 = 100;

struct OLease {
    no: u32,
    tenant: usize,
    owner: u16,
    own: u64,
    borrowed: Vec<(u16, u64)>,
}

/// Seed 001's promises, from the oracle's own record.
struct Oracle {
    /// Whether a refused attempt counts as activity (the demand signal).
    demand: bool,
    /// Each tenant's last attempt (granted, or with the demand signal any) or release.
    last: [Option<u64>; 3],
    leases: Vec<OLease>,
}

impl Oracle {
    fn own_used(&self, t: usize) -> u64 {
        self.leases
            .iter()
            .filter(|l| l.tenant == t)
            .map(|l| l.own)
            .sum()
    }
    fn lent(&self, t: usize) -> u64 {
        let slices = self.leases.iter().flat_map(|l| l.borrowed.iter());
        slices.filter(|b| b.0 as usize == t).map(|b| b.1).sum()
    }
    fn lendable(&self, t: usize, now: u64) -> bool {
        !self.leases.iter().any(|l| l.tenant == t) && self.last[t].is_none_or(|l| now >= l + IDLE)
    }

    fn acquire(&mut self, t: usize, units: u64, hold: u64, owner: u16, now: u64, e: &Effect) {
        if self.demand || matches!(e, Effect::Granted(_)) {
            self.last[t] = Some(now); // asking counts, granted or (with the signal) not
        }
        let own_free = G[t] - self.own_used(t) - self.lent(t);
        let need = units.saturating_sub(own_free);
        let mut lenders: Vec<(u16, u64)> = (0..3)
            .filter(|&l| l != t && self.lendable(l, now))
            .map(|l| (l as u16, G[l] - self.lent(l)))
            .filter(|l| l.1 > 0)
            .collect();
        lenders.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let lendable: u64 = lenders.iter().map(|l| l.1).sum();
        match e {
            Effect::Granted(g) => {
                assert_eq!(g.units, units, "all or nothing");
                assert_eq!(g.tenant as usize, t);
                if need == 0 {
                    assert_eq!(
                        (g.own, g.borrowed.len()),
                        (units, 0),
                        "within its guarantee"
                    );
                } else {
                    assert!(hold <= HORIZON, "a loan for {hold} ms outlives the horizon");
                    assert_eq!(g.own, own_free, "its own free part first");
                    let mut left = need;
                    let mut want = Vec::new();
                    for (l, avail) in lenders {
                        if left > 0 {
                            want.push((l, avail.min(left)));
                            left -= avail.min(left);
                        }
                    }
                    assert_eq!(left, 0, "a loan that idle lenders could not fund");
                    assert_eq!(g.borrowed, want, "idle lenders, largest available first");
                }
                self.leases.push(OLease {
                    no: g.lease,
                    tenant: t,
                    owner,
                    own: g.own,
                    borrowed: g.borrowed.clone(),
                });
            }
            Effect::Refused(r) => {
                assert!(
                    need > 0,
                    "refused {units} with {own_free} of its guarantee free"
                );
                assert!(
                    hold > HORIZON || lendable < need,
                    "refused a loan of {need} that idle lenders ({lendable}) could fund"
                );
                if r.reason == Reason::HoldExceedsReclaimHorizon {
                    assert!(hold > HORIZON);
                }
                let mut blocking: Vec<u32> = self
                    .leases
                    .iter()
                    .filter(|l| l.borrowed.iter().any(|b| b.0 as usize == t))
                    .map(|l| l.no)
                    .collect();
                let mut named: Vec<u32> = r.blocking.iter().map(|b| b.lease).collect();
                blocking.sort_unstable();
                named.sort_unstable();
                if r.reason == Reason::GuaranteeOnLoan {
                    assert!(!blocking.is_empty(), "on loan with nothing lent");
                    assert_eq!(named, blocking, "the leases holding its guarantee");
                    if r.blocking.iter().any(|b| b.overrun_ms > 0) {
                        assert_eq!(r.retry_after_ms, None, "a blocking lease has overrun");
                    }
                }
            }
            e => panic!("an acquire's effect {e:?}"),
        }
    }

    fn release(&mut self, no: u32, now: u64) {
        let i = self
            .leases
            .iter()
            .position(|l| l.no == no)
            .expect("outstanding");
        let l = self.leases.remove(i);
        self.last[l.tenant] = Some(now);
    }

    /// Outstanding: what was granted and neither released nor reaped, overrun or not
    /// (an overrunning lease is never silently freed).
    fn same_leases(&self, st: &State) {
        let mut mine: Vec<u32> = self.leases.iter().map(|l| l.no).collect();
        let mut theirs: Vec<u32> = st.leases.iter().map(|l| l.no).collect();
        mine.sort_unstable();
        theirs.sort_unstable();
        assert_eq!(mine, theirs, "outstanding leases");
    }

    fn reap(&mut self, owner: u16, clock: u64) {
        for l in self.leases.iter().filter(|l| l.owner == owner) {
            self.last[l.tenant] = Some(clock);
        }
        self.leases.retain(|l| l.owner != owner);
    }
}

/// The same request replayed on `st` at `at`, every lease not overrun at `now` released
/// at its declared deadline if that is `at` or earlier: `Some(granted)`, or `None` when
/// the lease table is full then (no answer either way).
fn replayed(
    st: &State,
    rules: &fairshm::guaranteed::Rules,
    call: Call,
    now: u64,
    at: u64,
) -> Option<bool> {
    let Call::Acquire {
        tenant,
        cost,
        hold_ms,
        owner,
        ..
    } = call
    else {
        unreachable!()
    };
    let mut st = st.clone();
    let mut due: Vec<(u64, u32)> = st
        .leases
        .iter()
        .filter(|l| !l.overrun(now) && l.deadline() <= at)
        .map(|l| (l.deadline(), l.no))
        .collect();
    due.sort_unstable();
    for (deadline, lease) in due {
        st.apply(
            rules,
            Call::Release {
                lease,
                now: deadline,
            },
        )
        .expect("outstanding");
    }
    let again = Call::Acquire {
        tenant,
        cost,
        hold_ms,
        owner,
        now: at,
    };
    match st.apply(rules, again) {
        Ok(Effect::Granted(_)) => Some(true),
        Ok(Effect::Refused(_)) => Some(false),
        Ok(e) => panic!("{e:?}"),
        Err(_) => None,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, data)) = data.split_first() else {
        return;
    };
    let demand = first & 1 == 0;
    let cfg = config(demand);
    let r = HeapRegion::new(0, 1, 3, 1).with_guaranteed(std::slice::from_ref(&cfg));
    let mut model = Model::new(&cfg).unwrap();
    let mut oracle = Oracle {
        demand,
        last: [None; 3],
        leases: Vec::new(),
    };
    let rules = r.g_rules(0).clone();
    let mut scratch = shared::Scratch::new();
    let mut now = 1u64;
    for c in data.chunks_exact(3) {
        let (op, a, b) = (c[0] % 5, c[1], c[2]);
        let slot = (a % 3) as usize;
        let call = match op {
            0 | 1 => Call::Acquire {
                tenant: ((a >> 2) % 3) as u16,
                cost: 1 + (b % 12) as u64,
                hold_ms: 10 * (b >> 4) as u64,
                owner: slot as u16,
                now,
            },
            2 => {
                let live = &model.state.leases;
                if live.is_empty() {
                    continue;
                }
                Call::Release {
                    lease: live[b as usize % live.len()].no,
                    now,
                }
            }
            3 => {
                now += b as u64;
                continue;
            }
            _ => {
                let want = model.apply(Call::ReapOwner { owner: slot as u16 });
                oracle.reap(slot as u16, model.state.clock);
                shared::reap_slot(&r, slot).unwrap();
                let (_, got) = shared::read(&r, 0).unwrap();
                if model.state.leases.iter().any(|l| l.owner == slot as u16) {
                    panic!("the model kept a dead slot's lease");
                }
                // A reap with nothing to give back publishes nothing; the model counts
                // the call anyway: compare all but the seq.
                let _ = want;
                model.state.seq = got.seq;
                assert_eq!(got, model.state, "after reaping slot {slot}");
                oracle.same_leases(&got);
                continue;
            }
        };
        let before = model.state.clone();
        let want = model.apply(call);
        match (call, &want) {
            (
                Call::Acquire {
                    tenant,
                    cost,
                    hold_ms,
                    owner,
                    now,
                },
                Ok(e),
            ) => {
                // The fairness unit is cost: a request's units are its cost.
                oracle.acquire(tenant as usize, cost, hold_ms, owner, now, e);
                if let Effect::Refused(r) = e
                    && let Some(x) = r.retry_after_ms
                {
                    let st = &model.state;
                    // `None`: the lease table is full then, no answer either way.
                    assert_ne!(
                        replayed(st, &rules, call, now, now + x),
                        Some(false),
                        "not granted at its retry-after {x} ({r:?}) on {before:?}"
                    );
                    if x > 1 {
                        assert_ne!(
                            replayed(st, &rules, call, now, now + x - 1),
                            Some(true),
                            "granted before its retry-after {x} ({r:?}) on {before:?}"
                        );
                    }
                }
            }
            (Call::Release { lease, now }, Ok(_)) => oracle.release(lease, now),
            _ => {}
        }
        // As the engine applies it: in place, through buffers that every step reuses.
        let got = shared::update_with(&r, 0, slot, &mut scratch, |st| {
            st.apply_in_place(&rules, call)
        })
        .map(|(e, _)| e);
        match (&want, &got) {
            (Ok(w), Ok(g)) => assert_eq!(w, g, "{call:?}"),
            (Err(w), Err(g)) => assert_eq!(w.kind(), g.kind(), "{call:?}"),
            _ => panic!("{call:?}: model {want:?}, segment {got:?}"),
        }
        let (_, st) = shared::read(&r, 0).unwrap();
        assert_eq!(st, model.state, "after {call:?}");
        assert!(st.in_use() <= 24);
        oracle.same_leases(&st);
    }
});
