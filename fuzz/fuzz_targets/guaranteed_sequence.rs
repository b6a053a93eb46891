//! Arbitrary sequences of calls on a guaranteed pool (seed 001), applied through the
//! very code that runs on the mapping (`guaranteed::shared` over a heap region: read the
//! block under the head word, apply the rules, write a block of the caller's slot, CAS
//! the head) by three process slots, and to the sequential model alone: the same effect
//! at every step, the same state after it, and the pool's invariants (decoding checks
//! them) throughout. A death reaps the slot as a reaper does.
//!
//! Input: chunks of 3 bytes `[op, a, b]`:
//! - `op % 5` 0 or 1: slot `a % 3` asks for `1 + b % 12` for tenant `(a >> 2) % 3`,
//!   declaring a hold of `10 * (b >> 4)` ms;
//! - 2: slot `a % 3` releases the `b`-th outstanding lease (modulo how many there are);
//! - 3: time moves on by `b` ms;
//! - 4: slot `a % 3` dies and is reaped.
//!
//! Run: `cd fuzz && cargo fuzz run -s none guaranteed_sequence`.
#![no_main]

use fairshm::guaranteed::{Call, FairnessUnit, GuaranteedConfig, Model, shared};
use fairshm::region::{HeapRegion, Region};
use libfuzzer_sys::fuzz_target;

fn config() -> GuaranteedConfig {
    GuaranteedConfig::new("g", 24)
        .unit(FairnessUnit::Cost)
        .tenant("a", 1)
        .tenant("b", 1)
        .tenant("c", 2)
        .reclaim_horizon_ms(60)
        .idle_after_ms(100)
        .max_leases(8)
}

fuzz_target!(|data: &[u8]| {
    let cfg = config();
    let r = HeapRegion::new(0, 1, 3, 1).with_guaranteed(std::slice::from_ref(&cfg));
    let mut model = Model::new(&cfg).unwrap();
    let rules = r.g_rules(0).clone();
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
                continue;
            }
        };
        let want = model.apply(call);
        let got = shared::update(&r, 0, slot, |st| st.apply(&rules, call)).map(|(e, _)| e);
        match (&want, &got) {
            (Ok(w), Ok(g)) => assert_eq!(w, g, "{call:?}"),
            (Err(w), Err(g)) => assert_eq!(w.kind(), g.kind(), "{call:?}"),
            _ => panic!("{call:?}: model {want:?}, segment {got:?}"),
        }
        let (_, st) = shared::read(&r, 0).unwrap();
        assert_eq!(st, model.state, "after {call:?}");
        assert!(st.in_use() <= 24);
    }
});
