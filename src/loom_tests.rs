//! loom models of the admission rule, run on the very code that runs on the mapping,
//! over a [`HeapRegion`] of loom atomics.
//!
//! The models drive [`admission::admit`] and [`admission::unadmit`]: the claim, publish,
//! op protocol (install, decide, apply, clear, with helping) and free that
//! `Table::try_acquire` and `Lease::release` run. They leave out the soft bookkeeping
//! around it (activity stamps, statistics, the hold average), which are Relaxed
//! counters the capacity bound does not read; with them the 3-thread state space does
//! not finish in hours.
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --lib loom_`

use loom::sync::Arc;
use loom::sync::atomic::AtomicUsize;

use crate::admission::{self, Decision, decide};
use crate::layout::{held_word, lease_state as ls, pool_word as pw};
use crate::ops::{AcqOutcome, Desc};
use crate::region::{HeapRegion, Region};
use crate::sync::Ordering::*;

const CAP: u32 = 2;
const FLOOR: u32 = 1;
const A: usize = 0;
const B: usize = 1;

/// Pool 0 of capacity 2 (floor 1); tenants A and B both active (weight 2 in all), so
/// each one's share is 1: whoever holds 1 may only use the pool up to 1.
fn setup() -> Arc<HeapRegion> {
    let r = HeapRegion::new(1, 2, 3, 1);
    let p = r.pool(0);
    p.limits
        .store(crate::layout::pair::make(CAP, FLOOR), Relaxed);
    p.active_weight.store(2, Relaxed);
    p.active_at_ms.store(10, Relaxed); // no rescan during the model
    for (t, name) in [(A, b"A"), (B, b"B")] {
        let got = crate::tenants::find_or_claim(&r, name, &|| 1, 0, &|_| false).unwrap();
        assert_eq!(got, t);
        r.tenant_pool(0, t).last_active_ms.store(10, Relaxed);
    }
    Arc::new(r)
}

/// The decision inputs `Table::try_acquire` would freeze for `tenant` here.
fn desc(tenant: usize) -> Desc {
    Desc {
        generation: 0,
        pool: 0,
        tenant: tenant as u32,
        units: 1,
        cap: CAP,
        floor: FLOOR,
        weight: 1,
        active_weight: 2,
    }
}

/// The contract, checked while a permit is held.
fn check_holding(r: &HeapRegion, tenant: usize, a_witness: &AtomicUsize) -> bool {
    let in_use = pw::in_use(r.pool(0).word.load(SeqCst));
    assert!(in_use <= CAP, "in_use {in_use} exceeds POOL {CAP}");
    if tenant == A {
        // A at its share (1) may use the pool only up to POOL - FLOOR = 1, so it can
        // never hold 2: the second permit would be the floor.
        let held = a_witness.fetch_add(1, SeqCst) + 1;
        assert!(
            held <= 1,
            "tenant A at its share took the floor ({held} held)"
        );
    }
    true
}

fn assert_all_zero(r: &HeapRegion) {
    assert_eq!(
        r.pool(0).word.load(SeqCst),
        pw::idle(0),
        "pool word not back to idle 0"
    );
    for t in [A, B] {
        assert_eq!(held_word::held(r.tenant_pool(0, t).held.load(SeqCst)), 0);
    }
    for l in 0..r.geometry().leases() {
        assert_eq!(
            ls::state(r.lease(l).state.load(SeqCst)),
            ls::FREE,
            "lease {l} not free"
        );
    }
}

fn worker(r: &HeapRegion, slot: usize, tenant: usize, a_witness: &AtomicUsize) {
    let (lease, d, outcome) = admission::admit(r, slot, 0, desc(tenant), 0, 10, 0).unwrap();
    if outcome == AcqOutcome::Granted {
        check_holding(r, tenant, a_witness);
        if tenant == A {
            a_witness.fetch_sub(1, SeqCst);
        }
        admission::unadmit(r, lease, d.generation, Some(&d)).unwrap();
    }
}

/// B holds one permit, granted before the threads start (in_use 1).
fn b_holds_one(r: &HeapRegion) -> (usize, Desc) {
    let (lease, d, outcome) = admission::admit(r, 2, 0, desc(B), 0, 10, 0).unwrap();
    assert_eq!(outcome, AcqOutcome::Granted);
    (lease, d)
}

/// Two processes of tenant A race for permits while B releases the one it holds; the
/// A leases are released after the join (through the same code). A may take one
/// permit (its share), never the second, which is the floor. Exhaustive at
/// `LOOM_MAX_PREEMPTIONS=1` takes tens of minutes (millions of executions, from loom's
/// weak-memory branching on every load); CI explores it with a permutation budget.
#[test]
fn loom_three_processes_respect_pool_and_floor() {
    loom::model(|| {
        let r = setup();
        let (b_lease, b_desc) = b_holds_one(&r);
        let a_witness = Arc::new(AtomicUsize::new(0));
        let acquirer = |slot: usize| {
            let (r, w) = (r.clone(), a_witness.clone());
            loom::thread::spawn(move || {
                let (l, d, o) = admission::admit(&*r, slot, 0, desc(A), 0, 10, 0).unwrap();
                (o == AcqOutcome::Granted && check_holding(&r, A, &w)).then_some((l, d))
            })
        };
        let (t1, t2) = (acquirer(0), acquirer(1));
        admission::unadmit(&*r, b_lease, b_desc.generation, None).unwrap();
        for t in [t1, t2] {
            if let Some((l, d)) = t.join().unwrap() {
                a_witness.fetch_sub(1, SeqCst);
                admission::unadmit(&*r, l, d.generation, Some(&d)).unwrap();
            }
        }
        assert_all_zero(&r);
    });
}

/// Two processes of tenant A run whole acquire/release cycles against each other.
#[test]
fn loom_two_full_cycles_respect_the_floor() {
    loom::model(|| {
        let r = setup();
        let a_witness = Arc::new(AtomicUsize::new(0));
        let (r2, w2) = (r.clone(), a_witness.clone());
        let t = loom::thread::spawn(move || worker(&r2, 0, A, &w2));
        worker(&r, 1, A, &a_witness);
        t.join().unwrap();
        assert_all_zero(&r);
    });
}

/// An acquire races a release that needs helping: B's release and A's whole cycle.
#[test]
fn loom_acquire_races_a_release() {
    loom::model(|| {
        let r = setup();
        let (b_lease, b_desc) = b_holds_one(&r);
        let a_witness = Arc::new(AtomicUsize::new(0));
        let (r2, w2) = (r.clone(), a_witness.clone());
        let t = loom::thread::spawn(move || worker(&r2, 0, A, &w2));
        admission::unadmit(&*r, b_lease, b_desc.generation, None).unwrap();
        t.join().unwrap();
        assert_all_zero(&r);
    });
}

/// The classic bug the protocol exists to prevent: decide on a snapshot, then add.
fn broken_worker(r: &HeapRegion, tenant: usize, a_witness: &AtomicUsize) {
    let pool = r.pool(0);
    let tp = r.tenant_pool(0, tenant);
    let in_use = pw::in_use(pool.word.load(SeqCst));
    let held = held_word::held(tp.held.load(SeqCst));
    if decide(in_use, held, &desc(tenant)) != Decision::Admit {
        return;
    }
    pool.word.fetch_add(1, SeqCst);
    tp.held.fetch_add(1, SeqCst);
    check_holding(r, tenant, a_witness);
    if tenant == A {
        a_witness.fetch_sub(1, SeqCst);
    }
    tp.held.fetch_sub(1, SeqCst);
    pool.word.fetch_sub(1, SeqCst);
}

#[test]
#[should_panic(expected = "took the floor")]
fn loom_catches_check_then_add() {
    loom::model(|| {
        let r = setup();
        let a_witness = Arc::new(AtomicUsize::new(0));
        let (r2, w2) = (r.clone(), a_witness.clone());
        let t = loom::thread::spawn(move || broken_worker(&r2, A, &w2));
        broken_worker(&r, A, &a_witness);
        t.join().unwrap();
    });
}
