//! The guaranteed policy across processes: two forked processes play seed 001's
//! demand-signal trace through the segment, and the calls they recorded replay in one
//! process to the same decisions and the same state; a torture run SIGKILLs workers at
//! random and guarantees and loans stay exact; a process killed at every labelled step
//! of an op loses nothing after reaping.
mod common;

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

use common::{Children, Seg, fork_child, shared_words, wait, wait_until};
use fairshm::guaranteed::{Call, Effect, GOutcome, Model};
use fairshm::{Config, FairnessUnit, Table};

fn cfg(tenants: &[(&str, u32)], ceiling: u32, procs: u32) -> Config {
    common::guaranteed(
        "ceiling",
        ceiling,
        FairnessUnit::Cost,
        tenants,
        (100, 150),
        procs,
    )
}

const REC: usize = 8;

/// Writes a call and its outcome as `REC` words: seq, kind, a, b, c, owner, now, result
/// (lease number granted, or 1000 + reason code, or 0 for a release).
fn record(out: &[AtomicU64], n: &AtomicU64, seq: u64, call: Call, result: u64) {
    let i = n.fetch_add(1, SeqCst) as usize * REC;
    let w = match call {
        Call::Acquire {
            tenant,
            cost,
            hold_ms,
            owner,
            now,
        } => [
            seq,
            1,
            tenant as u64,
            cost,
            hold_ms,
            owner as u64,
            now,
            result,
        ],
        Call::Release { lease, now } => [seq, 2, lease as u64, 0, 0, 0, now, result],
        Call::ReapOwner { owner } => [seq, 3, owner as u64, 0, 0, 0, 0, result],
    };
    for (k, v) in w.into_iter().enumerate() {
        out[i + k].store(v, SeqCst);
    }
}

fn decode(w: &[u64]) -> (u64, Call, u64) {
    let call = match w[1] {
        1 => Call::Acquire {
            tenant: w[2] as u16,
            cost: w[3],
            hold_ms: w[4],
            owner: w[5] as u16,
            now: w[6],
        },
        2 => Call::Release {
            lease: w[2] as u32,
            now: w[6],
        },
        _ => Call::ReapOwner { owner: w[2] as u16 },
    };
    (w[0], call, w[7])
}

fn result_of(o: &GOutcome) -> u64 {
    match o {
        GOutcome::Granted(g) => g.grant.lease as u64,
        GOutcome::Refused(r) => 1000 + r.reason.code() as u64,
    }
}

fn step_to(step: &AtomicU64, k: u64) {
    let deadline = Instant::now() + common::DEADLINE;
    while step.load(SeqCst) != k {
        assert!(Instant::now() < deadline, "step {k} never came");
        std::thread::sleep(Duration::from_micros(100));
    }
}

#[test]
fn two_processes_play_the_demand_trace_and_it_replays_in_one() {
    let seg = Seg::new("gp-trace");
    let c = cfg(&[("a", 1), ("b", 1)], 100, 4);
    let t: Table = seg.create(&c);
    let words = shared_words(2 + 2 * 16 * REC);
    let (step, counts) = (&words[0], &words[1]);
    let recs = &words[2..];
    let name = seg.name.clone();
    let mut kids = Children(Vec::new());
    let n2 = name.clone();
    kids.push(fork_child(move || {
        let t = Table::open(&n2).unwrap();
        let g = t.guaranteed("ceiling").unwrap();
        let e = t.engine();
        let b = e.guaranteed_tenant(g.id(), "b").unwrap();
        step_to(step, 0);
        let own = e.guaranteed_acquire(g.id(), b, 50, 10_000, 0).unwrap();
        record(recs, counts, own.seq(), call_of(&own), result_of(&own));
        let loan = e.guaranteed_acquire(g.id(), b, 50, 100, 0).unwrap();
        record(recs, counts, loan.seq(), call_of(&loan), result_of(&loan));
        let GOutcome::Granted(loan) = loan else {
            return 2;
        };
        step.store(1, SeqCst);
        step_to(step, 2);
        let rel = g.release(loan.id, 100).unwrap();
        record(recs, counts, rel.seq, rel.call, 0);
        let renew = e.guaranteed_acquire(g.id(), b, 50, 100, 100).unwrap();
        record(
            recs,
            counts,
            renew.seq(),
            call_of(&renew),
            result_of(&renew),
        );
        step.store(3, SeqCst);
        step_to(step, 5);
        0
    }));
    kids.push(fork_child(move || {
        let t = Table::open(&name).unwrap();
        let g = t.guaranteed("ceiling").unwrap();
        let e = t.engine();
        let a = e.guaranteed_tenant(g.id(), "a").unwrap();
        step_to(step, 1);
        let first = e.guaranteed_acquire(g.id(), a, 50, 50, 10).unwrap();
        record(
            recs,
            counts,
            first.seq(),
            call_of(&first),
            result_of(&first),
        );
        step.store(2, SeqCst);
        step_to(step, 3);
        let second = e.guaranteed_acquire(g.id(), a, 50, 50, 100).unwrap();
        record(
            recs,
            counts,
            second.seq(),
            call_of(&second),
            result_of(&second),
        );
        step.store(4, SeqCst);
        step_to(step, 5);
        0
    }));
    wait_until(None, "the trace to end", Duration::from_millis(1), || {
        step.load(SeqCst) == 4
    });
    let shared = t.guaranteed("ceiling").unwrap().state().unwrap();
    step.store(5, SeqCst);
    for pid in kids.0.drain(..) {
        assert_eq!(wait(pid), 0);
    }
    let n = counts.load(SeqCst) as usize;
    let mut calls: Vec<(u64, Call, u64)> = (0..n)
        .map(|i| {
            decode(
                &recs[i * REC..(i + 1) * REC]
                    .iter()
                    .map(|w| w.load(SeqCst))
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    calls.sort_by_key(|c| c.0);
    assert_eq!(
        calls.iter().map(|c| c.0).collect::<Vec<_>>(),
        (1..=6).collect::<Vec<_>>()
    );
    // The seed's outcome, played by two processes: the renewal is refused, a is served.
    let refused = |code: fairshm::Reason| 1000 + code.code() as u64;
    let results: Vec<u64> = calls.iter().map(|c| c.2).collect();
    assert_eq!(
        results,
        vec![
            1,
            2,
            refused(fairshm::Reason::GuaranteeOnLoan),
            0,
            refused(fairshm::Reason::GuaranteeExhausted),
            3
        ]
    );
    // Replayed alone, in seq order: the same decisions and the same state.
    let mut m = Model::new(&c.guaranteed[0]).unwrap();
    for (seq, call, result) in &calls {
        let e = m.apply(*call).unwrap();
        let r = match e {
            Effect::Granted(g) => g.lease as u64,
            Effect::Refused(r) => 1000 + r.reason.code() as u64,
            _ => 0,
        };
        assert_eq!(r, *result, "call {seq} decided differently in the replay");
    }
    assert_eq!(
        m.state, shared,
        "the replay's state differs from the segment's"
    );
    assert_eq!(m.state.stats(&m.rules, 500), shared.stats(&m.rules, 500));
    // The children's exit gave their leases back (deregistration reaps its own slot).
    let after = t.guaranteed("ceiling").unwrap().state().unwrap();
    assert!(after.leases.is_empty(), "{:?}", after.leases);
}

fn call_of(o: &GOutcome) -> Call {
    match o {
        GOutcome::Granted(g) => g.call,
        GOutcome::Refused(r) => r.call,
    }
}

/// Workers loop on random acquires and releases; the parent SIGKILLs one at random
/// every few ms and starts another. Every state read meanwhile satisfies the pool's
/// invariants (decoding checks them), and once every worker is gone and reaped nothing
/// is held or on loan.
#[test]
fn torture_kills_keep_guarantees_and_loans_exact() {
    let kills: usize = common::env_or("FAIRSHM_G_TORTURE_KILLS", 60);
    let seg = Seg::new("gp-torture");
    let t: Table = seg.create(&cfg(&[("a", 1), ("b", 1), ("c", 2), ("d", 3)], 70, 8));
    let g = t.guaranteed("ceiling").unwrap();
    let t0 = Instant::now();
    let spawn = |seed: u64| {
        let name = seg.name.clone();
        fork_child(move || {
            let t = Table::open(&name).unwrap();
            let g = t.guaranteed("ceiling").unwrap();
            let mut x = seed | 1;
            let mut mine = Vec::new();
            loop {
                let now = t0.elapsed().as_millis() as u64;
                let r = common::xorshift(&mut x);
                if r % 3 == 0 && !mine.is_empty() {
                    let id = mine.swap_remove((r >> 8) as usize % mine.len());
                    g.release(id, now).unwrap();
                } else {
                    let tn = ["a", "b", "c", "d"][(r >> 4) as usize % 4];
                    let cost = (r >> 12) % 25 + 1;
                    let hold = (r >> 20) % 150;
                    if let Ok(l) = g.acquire(tn, cost, hold, now).unwrap() {
                        mine.push(l.id);
                    }
                }
            }
        })
    };
    let mut kids = Children((0..4).map(|i| spawn(i * 7919 + 1)).collect());
    let mut x = 0x9e37_79b9u64;
    let mut checked = 0;
    for k in 0..kills {
        std::thread::sleep(Duration::from_millis(3));
        let st = g.state().unwrap(); // decode checks I1-I3 and every index
        assert!(st.in_use() <= 70);
        checked += 1;
        let i = common::xorshift(&mut x) as usize % kids.len();
        let victim = kids.0.swap_remove(i);
        nix::sys::signal::kill(victim, nix::sys::signal::SIGKILL).unwrap();
        assert_eq!(wait(victim), 128 + 9);
        kids.push(spawn(k as u64 * 31 + 17));
    }
    let granted: u64 = g.stats(0).unwrap().tenants.iter().map(|t| t.grants).sum();
    kids.kill_all();
    wait_until(
        None,
        "every dead worker to be reaped",
        Duration::from_millis(2),
        || {
            let _ = t.reap_dead();
            t.snapshot().processes.is_empty()
        },
    );
    let st = g.state().unwrap();
    assert!(
        st.leases.is_empty() && st.slices.is_empty(),
        "left after reaping: {:?}",
        st.leases
    );
    assert!(
        granted > kills as u64,
        "the workers made progress ({granted} grants)"
    );
    // All of every guarantee is usable again.
    let now = t0.elapsed().as_millis() as u64 + 1000;
    for (tn, gu) in [("a", 10), ("b", 10), ("c", 20), ("d", 30)] {
        assert!(g.acquire(tn, gu, 10, now).unwrap().is_ok(), "{tn}'s {gu}");
    }
    eprintln!("{kills} kills, {granted} grants, {checked} states checked");
}

#[cfg(feature = "crash-points")]
#[test]
fn a_process_killed_at_any_step_of_an_op_loses_nothing() {
    let mut crashed = std::collections::BTreeSet::new();
    for &label in fairshm::crash::GUARANTEED_LABELS {
        for skip in 0..4 {
            let seg = Seg::new("gp-crash");
            let t: Table = seg.create(&cfg(&[("a", 1), ("b", 1)], 10, 4));
            let g = t.guaranteed("ceiling").unwrap();
            let mine = g.acquire("b", 3, 10_000, 1).unwrap().unwrap();
            let name = seg.name.clone();
            let child = fork_child(move || {
                fairshm::crash::arm(label, skip);
                let t = Table::open(&name).unwrap();
                let g = t.guaranteed("ceiling").unwrap();
                // a's own 5, then a loan of b's 2 (b holds 3 of its 5, but is active:
                // refused), then a release: every kind of op.
                let l = g.acquire("a", 5, 50, 10).unwrap().unwrap();
                let _ = g.acquire("a", 2, 50, 11).unwrap();
                g.release(l.id, 12).unwrap();
                let _l = g.acquire("a", 4, 50, 13).unwrap().unwrap();
                0
            });
            let code = wait(child);
            assert!(
                code == 0 || code == 128 + 9,
                "{label}/{skip}: child exited {code}"
            );
            if code == 128 + 9 {
                crashed.insert(label);
            }
            wait_until(
                None,
                "the child's slot to be reaped",
                Duration::from_millis(1),
                || {
                    let _ = t.reap_dead();
                    t.snapshot().processes.len() == 1
                },
            );
            let st = g.state().unwrap();
            assert_eq!(
                st.leases.len(),
                1,
                "{label}/{skip}: only the parent's lease: {:?}",
                st.leases
            );
            assert_eq!(st.in_use(), 3, "{label}/{skip}");
            // Everything else is free: a's whole 5 and b's other 2, and no more.
            assert!(
                g.acquire("a", 5, 50, 100).unwrap().is_ok(),
                "{label}/{skip}"
            );
            assert!(
                g.acquire("b", 2, 50, 100).unwrap().is_ok(),
                "{label}/{skip}"
            );
            assert!(
                g.acquire("b", 1, 50, 100).unwrap().is_err(),
                "{label}/{skip}"
            );
            g.release(mine.id, 101).unwrap();
        }
    }
    for label in fairshm::crash::GUARANTEED_LABELS {
        assert!(crashed.contains(label), "never crashed at {label}");
    }
}

/// `check` names a guaranteed lease that no live process holds and a state that cannot
/// be read; `repair` releases the one and resets the other.
#[cfg(feature = "internals")]
#[test]
fn check_names_orphans_and_corrupt_states_and_repair_mends_them() {
    use fairshm::guaranteed::shared;
    use fairshm::region::Region;
    let seg = Seg::new("gp-repair");
    let t: Table = seg.create(&cfg(&[("a", 1), ("b", 1)], 10, 4));
    let g = t.guaranteed("ceiling").unwrap();
    let mine = g.acquire("b", 2, 1000, 1).unwrap().unwrap();
    let slot = t.process_slot().unwrap();
    let free = (0..4).find(|&s| s != slot).unwrap();
    // A lease that names a free slot, as a scribble (or a reap that failed) leaves one.
    let rules = t.region().g_rules(0).clone();
    shared::update(t.region(), 0, slot, |st| {
        st.apply(
            &rules,
            Call::Acquire {
                tenant: 0,
                cost: 5,
                hold_ms: 10,
                owner: free as u16,
                now: 2,
            },
        )
    })
    .unwrap();
    let found = t.check().unwrap();
    assert!(
        found
            .iter()
            .any(|f| f.contains(&format!("process slot {free}"))),
        "{found:?}"
    );
    let r = t.repair().unwrap();
    assert_eq!(r.guaranteed_orphans_released, 1);
    assert!(t.check().unwrap().is_empty(), "{:?}", t.check());
    assert_eq!(g.state().unwrap().leases.len(), 1, "the live lease stays");
    // A scribbled checksum: every read is Corrupt until repair resets the pool.
    let h = t
        .region()
        .g_head(0)
        .load(std::sync::atomic::Ordering::Acquire);
    let block = t.region().g_block(0, shared::head_block(h));
    block[4].fetch_xor(1, std::sync::atomic::Ordering::Relaxed);
    assert!(matches!(g.state(), Err(fairshm::Error::Corrupt(_))));
    assert!(t.check().unwrap().iter().any(|f| f.contains("checksum")));
    let r = t.repair().unwrap();
    assert_eq!(r.guaranteed_reset, vec!["ceiling".to_owned()]);
    let st = g.state().unwrap();
    assert!(st.leases.is_empty() && st.seq > 0);
    assert!(matches!(
        g.release(mine.id, 3),
        Err(fairshm::Error::AlreadyReleased { .. })
    ));
    assert!(g.acquire("a", 5, 10, 3).unwrap().is_ok());
}
