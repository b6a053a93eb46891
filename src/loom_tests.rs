//! loom models of the admission rule, run on the very code that runs on the mapping,
//! over a [`HeapRegion`] of loom atomics.
//!
//! The models drive [`ops::acquire`] (with the fair-share policy) and [`ops::release`]:
//! the decision on a
//! validated snapshot, the claim and publish, the tagged CASes of the held and pool
//! words with settling, the back-out, and the release, that `Engine::acquire` and
//! `Engine::release` run. They leave out the soft bookkeeping around it (activity
//! stamps, statistics, the hold average), Relaxed counters the capacity bound does not
//! read.
//!
//! The crash model (`loom_a_process_stopped_at_any_crash_point_loses_nothing`) adds
//! liveness and recovery: a victim registers, acquires and releases, and stops at its
//! k-th crash point (see `loom_crash.rs`) for k = 1, 2, ... until it no longer stops;
//! a reaper then recovers its slot while another process is still releasing. A reaper
//! that trusts the lease state alone, ignoring the tags and flags that say which words
//! an interrupted acquire had changed, is caught
//! (`loom_catches_a_reaper_that_ignores_the_tags`).
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --lib loom_`

use loom::sync::Arc;
use loom::sync::atomic::AtomicUsize;

use crate::layout::{held_word, lease_state as ls, pool_word as pw};
use crate::ops;
use crate::ops::{AcqOutcome, Desc};
use crate::policy::Verdict;
use crate::policy::fair_share::{FairShare, Frozen, decide};
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
    p.rescan_at_ms.store(1000, Relaxed); // no rescan during the model
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
        inputs: frozen().inputs(),
    }
}

fn frozen() -> Frozen {
    Frozen {
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

/// Every word and lease back to zero: the pool's in-use and extra words, A's and B's
/// held words, every lease FREE. Shared with the lending models.
pub(crate) fn assert_all_zero(r: &HeapRegion) {
    let p = r.pool(0);
    assert_eq!(pw::in_use(p.word.load(SeqCst)), 0, "in use not back to 0");
    let extra = crate::layout::op_word::count(p.extra.load(SeqCst));
    assert_eq!(extra, 0, "loans not back to 0");
    for t in [A, B] {
        let held = held_word::held(r.tenant_pool(0, t).held.load(SeqCst));
        assert_eq!(held, 0, "tenant {t}'s held not back to 0");
    }
    for l in 0..r.geometry().leases() {
        let sw = r.lease(l).state.load(SeqCst);
        assert_eq!(
            ls::state(sw),
            ls::FREE,
            "lease {l} not back to FREE (state word {sw:#x})"
        );
    }
}

fn worker(r: &HeapRegion, slot: usize, tenant: usize, a_witness: &AtomicUsize) {
    let (lease, d, outcome) = ops::acquire(r, &FairShare, slot, 0, desc(tenant), 0, 10, 0).unwrap();
    if matches!(outcome, AcqOutcome::Granted { .. }) {
        check_holding(r, tenant, a_witness);
        if tenant == A {
            a_witness.fetch_sub(1, SeqCst);
        }
        ops::release(r, lease.unwrap(), d.generation, Some(&d)).unwrap();
    }
}

/// B holds one permit, granted before the threads start (in_use 1).
fn b_holds_one(r: &HeapRegion) -> (usize, Desc) {
    let (lease, d, outcome) = ops::acquire(r, &FairShare, 2, 0, desc(B), 0, 10, 0).unwrap();
    assert!(matches!(outcome, AcqOutcome::Granted { .. }));
    (lease.unwrap(), d)
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
                let (l, d, o) = ops::acquire(&*r, &FairShare, slot, 0, desc(A), 0, 10, 0).unwrap();
                (matches!(o, AcqOutcome::Granted { .. }) && check_holding(&r, A, &w))
                    .then(|| (l.unwrap(), d))
            })
        };
        let (t1, t2) = (acquirer(0), acquirer(1));
        ops::release(&*r, b_lease, b_desc.generation, None).unwrap();
        for t in [t1, t2] {
            if let Some((l, d)) = t.join().unwrap() {
                a_witness.fetch_sub(1, SeqCst);
                ops::release(&*r, l, d.generation, Some(&d)).unwrap();
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

/// An acquire races a release: B's release and A's whole cycle (A may settle B's tags).
#[test]
fn loom_acquire_races_a_release() {
    loom::model(|| {
        let r = setup();
        let (b_lease, b_desc) = b_holds_one(&r);
        let a_witness = Arc::new(AtomicUsize::new(0));
        let (r2, w2) = (r.clone(), a_witness.clone());
        let t = loom::thread::spawn(move || worker(&r2, 0, A, &w2));
        ops::release(&*r, b_lease, b_desc.generation, None).unwrap();
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
    if decide(&frozen(), in_use, held, 1) != Verdict::Admit {
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

/// Pid of the victim in the crash models: never a real process (above pid_max), so a
/// slot it left CLAIMING is judged dead by `/proc`, as a dead registrant's would be.
/// `% 3 == 0`, so its registration probes slot 0 first.
const VICTIM_PID: u32 = 16_000_002;
/// B's process slot, LIVE before the model starts.
const B_SLOT: usize = 2;

/// A victim process: registers, acquires one permit of A, releases it; armed to stop at
/// its `k`-th crash point.
fn victim(r: &HeapRegion, k: usize) -> crate::Result<()> {
    crate::loom_crash::arm(k);
    let slot = crate::liveness::register(r, VICTIM_PID, 1, 10, false)?;
    let (lease, d, outcome) = ops::acquire(r, &FairShare, slot, 0, desc(A), 0, 10, 0)?;
    if let (AcqOutcome::Granted { .. }, Some(lease)) = (outcome, lease) {
        ops::release(r, lease, d.generation, Some(&d))?;
    }
    Ok(())
}

/// One execution: B holds one permit; the victim runs until its `k`-th crash point
/// while B releases; once the victim has stopped, a reaper recovers its slot while B
/// may still be releasing. Everything must end exact: B's release unharmed, and every
/// counter, lease and process slot (but B's) back to zero. Returns where the victim
/// stopped.
fn crash_execution(k: usize, reap: fn(&HeapRegion, usize)) -> Option<&'static str> {
    use crate::layout::proc_state as ps;
    crate::loom_crash::disarm();
    let r = setup();
    r.proc_slot(B_SLOT)
        .state
        .store(ps::make(ps::LIVE, 7, 0), Relaxed);
    let (b_lease, b_desc) = b_holds_one(&r);
    let r2 = r.clone();
    let b = loom::thread::spawn(move || {
        ops::release(&*r2, b_lease, b_desc.generation, Some(&b_desc)).unwrap();
    });
    let r3 = r.clone();
    let v = loom::thread::spawn(move || {
        let res = victim(&r3, k);
        let at = crate::loom_crash::stopped_at();
        assert_eq!(res.is_err(), at.is_some(), "{res:?}");
        at
    });
    let stopped_at = v.join().unwrap();
    for s in 0..B_SLOT {
        reap(&r, s);
    }
    b.join().unwrap();
    assert_all_zero(&r);
    for s in 0..B_SLOT {
        assert_eq!(r.proc_slot(s).state.load(SeqCst), ps::make(ps::FREE, 0, 0));
    }
    stopped_at
}

/// The real reaper, judging every slot dead.
fn reap(r: &HeapRegion, s: usize) {
    crate::recovery::reap_slot(r, s, crate::recovery::Reaper::with_pid(3), &|_, _| true).unwrap();
}

/// Liveness and recovery with crash points: a process stopped at its 1st, 2nd, ...
/// crash point (registration, acquire, release)
/// loses nothing, in every interleaving with a live process and the reaper. Ends at
/// the first `k` past the victim's last crash point in every execution.
#[test]
fn loom_a_process_stopped_at_any_crash_point_loses_nothing() {
    use std::collections::BTreeSet;
    use std::sync::Mutex;
    static SEEN: Mutex<(BTreeSet<&'static str>, bool)> = Mutex::new((BTreeSet::new(), false));
    for k in 1..=32 {
        SEEN.lock().unwrap().1 = false;
        let started = std::time::Instant::now();
        loom::model(move || {
            if let Some(label) = crash_execution(k, reap) {
                let mut seen = SEEN.lock().unwrap();
                seen.0.insert(label);
                seen.1 = true;
            }
        });
        let seen = SEEN.lock().unwrap();
        eprintln!(
            "crash point #{k}: {:?} ({:.1} s)",
            seen.0,
            started.elapsed().as_secs_f64()
        );
        if !seen.1 {
            // Every step of the model's code; `register.live` is `Table`'s, outside it.
            for label in crate::ops::CRASH_LABELS
                .iter()
                .filter(|l| **l != "register.live")
            {
                assert!(seen.0.contains(label), "never stopped at {label}");
            }
            return;
        }
    }
    panic!("the victim still had crash points after 32");
}

/// A reaper that trusts the lease state alone: an interrupted acquire is taken to have
/// counted nothing, whatever the tags in its words say. The crash model must catch it.
fn naive_reap(r: &HeapRegion, s: usize) {
    use crate::layout::proc_state as ps;
    let lease = r.lease(s); // one lease per slot in these models
    let sw = lease.state.load(SeqCst);
    let (generation, state) = (ls::generation(sw), ls::state(sw));
    match state {
        ls::FREE => {}
        ls::HELD => {
            let _ = crate::ops::release(r, s, generation, None);
        }
        ls::RELEASING => {
            let _ = crate::ops::finish_release(r, s, generation, None);
        }
        _ => {
            crate::ops::free_lease_from(lease, sw);
        }
    }
    r.proc_slot(s).state.store(ps::make(ps::FREE, 0, 0), SeqCst);
}

#[test]
#[should_panic(expected = "not back to 0")]
fn loom_catches_a_reaper_that_ignores_the_tags() {
    for k in 1..=6 {
        loom::model(move || {
            crash_execution(k, naive_reap);
        });
    }
}

/// A process keeps the lease it released as its spare and takes it again without a
/// claim CAS, while another process cycles: the bound, the floor and the end state hold.
#[test]
fn loom_a_spare_lease_is_taken_again_without_a_claim() {
    loom::model(|| {
        let r = setup();
        let a_witness = Arc::new(AtomicUsize::new(0));
        let (r2, w2) = (r.clone(), a_witness.clone());
        let t = loom::thread::spawn(move || worker(&r2, 0, A, &w2));
        let (l, d, o) = ops::acquire(&*r, &FairShare, 1, 0, desc(B), 0, 10, 0).unwrap();
        let mut spare = None;
        if let (AcqOutcome::Granted { .. }, Some(l)) = (o, l) {
            check_holding(&r, B, &a_witness);
            crate::ops::release_keeping(&*r, l, d.generation, Some(&d), Some(7)).unwrap();
            spare = Some((l, d.generation.wrapping_add(1)));
        }
        let (l2, d2, o2) = crate::ops::acquire_with_spare(
            &*r,
            &FairShare,
            r.tenant_pool(0, B),
            1,
            0,
            desc(B),
            0,
            10,
            0,
            spare,
        )
        .unwrap();
        if let (AcqOutcome::Granted { .. }, Some(l2)) = (o2, l2) {
            if let Some((s, _)) = spare {
                assert_eq!(l2, s, "the spare was not taken");
            }
            check_holding(&r, B, &a_witness);
            ops::release(&*r, l2, d2.generation, Some(&d2)).unwrap();
        } else if let (Some((s, g)), None) = (spare, l2) {
            // Refused on the first look: the spare is still CLAIMED; free it.
            assert!(crate::ops::free_lease(r.lease(s), g, ls::CLAIMED));
        }
        t.join().unwrap();
        assert_all_zero(&r);
    });
}
