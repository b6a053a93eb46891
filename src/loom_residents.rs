//! loom models of eviction (`ops::transfer`, `residents`), on the code that runs on
//! the mapping:
//! - a revocation and the victim's `begin_call` cannot both win;
//! - a revocation and the victim's release cannot both give the unit back: the pool
//!   ends exact, and never counts past its capacity;
//! - a revoker stopped at any crash point, reaped while the victim releases, loses
//!   nothing.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test --release --lib loom_res`

use loom::sync::Arc;

use crate::layout::{held_word, lease_state as ls, pool_word as pw, residency};
use crate::ops::{self, AcqOutcome, Desc, Transferred};
use crate::policy::fair_share::{FairShare, Frozen};
use crate::region::{HeapRegion, Region};
use crate::sync::Ordering::*;

/// The victim's tenant and the asker's.
const V: usize = 0;
const A: usize = 1;
/// The victim's lease (slot 0) and the asker's slot.
const VICTIM_SLOT: usize = 0;
const ASKER_SLOT: usize = 1;

fn desc(tenant: usize) -> Desc {
    let f = Frozen {
        cap: 1,
        floor: 1,
        weight: 1,
        active_weight: 2,
    };
    let mut inputs = f.inputs();
    inputs[2] = residency::RESIDENT;
    Desc {
        generation: 0,
        pool: 0,
        tenant: tenant as u32,
        units: 1,
        inputs,
    }
}

/// A pool of one resident unit, held by V's resident (idle).
fn setup() -> (Arc<HeapRegion>, usize, Desc) {
    let r = HeapRegion::new(1, 2, 2, 1).with_residents();
    r.pool(0)
        .limits
        .store(crate::layout::pair::make(1, 1), Relaxed);
    let (l, d, out) = ops::acquire(&r, &FairShare, VICTIM_SLOT, 0, desc(V), 0, 10, 0).unwrap();
    assert!(matches!(out, AcqOutcome::Granted { .. }));
    (Arc::new(r), l.unwrap(), d)
}

fn in_use(r: &HeapRegion) -> u32 {
    pw::in_use(r.pool(0).word.load(SeqCst))
}
fn held(r: &HeapRegion, t: usize) -> u32 {
    held_word::held(r.tenant_pool(0, t).held.load(SeqCst))
}

/// The asker's transfer from the victim's lease `(vl, vg)`.
fn transfer(r: &HeapRegion, vl: usize, vg: u32) -> crate::Result<(usize, Desc, Transferred)> {
    ops::transfer(r, ASKER_SLOT, 0, desc(A), (vl, vg), 0, 20, 0, None)
}

#[test]
fn loom_res_revocation_and_begin_call_cannot_both_win() {
    loom::model(|| {
        let (r, vl, vd) = setup();
        let r2 = r.clone();
        let asker = loom::thread::spawn(move || transfer(&r2, vl, vd.generation).unwrap());
        let call = crate::residents::begin_call(&*r, vl, vd.generation, 15, "v");
        let (al, ad, out) = asker.join().unwrap();
        match (&call, out) {
            (Ok(()), Transferred::Lost) => {
                assert_eq!((held(&r, A), in_use(&r)), (0, 1));
            }
            (Err(crate::Error::Revoked { .. }), Transferred::Granted) => {
                // The permit passed: the pool still counts one unit, now the asker's.
                assert_eq!((held(&r, A), held(&r, V), in_use(&r)), (1, 1, 1));
                ops::release(&*r, al, ad.generation, Some(&ad)).unwrap();
            }
            other => panic!("both or neither won: {other:?}"),
        }
        ops::release(&*r, vl, vd.generation, Some(&vd)).unwrap();
        assert_eq!((held(&r, A), held(&r, V), in_use(&r)), (0, 0, 0));
    });
}

#[test]
fn loom_res_revocation_and_release_give_the_unit_back_once() {
    loom::model(|| {
        let (r, vl, vd) = setup();
        let r2 = r.clone();
        let asker = loom::thread::spawn(move || {
            let out = transfer(&r2, vl, vd.generation).unwrap();
            // Never past the capacity, at any point the asker can see.
            assert!(in_use(&r2) <= 1);
            out
        });
        ops::release(&*r, vl, vd.generation, Some(&vd)).unwrap();
        assert!(in_use(&r) <= 1);
        let (al, ad, out) = asker.join().unwrap();
        assert_eq!(held(&r, V), 0);
        if out == Transferred::Granted {
            assert_eq!((held(&r, A), in_use(&r)), (1, 1));
            ops::release(&*r, al, ad.generation, Some(&ad)).unwrap();
        }
        assert_eq!((held(&r, A), in_use(&r)), (0, 0));
        assert_eq!(ls::state(r.lease(al).state.load(SeqCst)), ls::FREE);
    });
}

/// The asker stops at its `k`-th crash point while the victim releases; the asker's
/// slot is then recovered. Returns where it stopped.
fn crash_execution(k: usize) -> Option<&'static str> {
    crate::loom_crash::disarm();
    let (r, vl, vd) = setup();
    let r2 = r.clone();
    let asker = loom::thread::spawn(move || {
        crate::loom_crash::arm(k);
        let res = transfer(&r2, vl, vd.generation);
        let at = crate::loom_crash::stopped_at();
        assert_eq!(res.is_err(), at.is_some(), "{res:?}");
        (res.ok(), at)
    });
    let released = ops::release(&*r, vl, vd.generation, Some(&vd));
    assert!(released.is_ok(), "{released:?}");
    let (done, at) = asker.join().unwrap();
    // A finished transfer's lease is released by its owner; a stopped one recovered.
    match done {
        Some((al, ad, Transferred::Granted)) => {
            ops::release(&*r, al, ad.generation, Some(&ad)).unwrap();
        }
        Some((_, _, Transferred::Lost)) => {}
        None => {
            let mut out = crate::recovery::Reaped::new(ASKER_SLOT, 0, 1);
            crate::recovery::resolve_lease(&*r, ASKER_SLOT, &mut out);
            assert_eq!(out.quarantined, 0);
        }
    }
    assert_eq!(
        (held(&r, A), held(&r, V), in_use(&r)),
        (0, 0, 0),
        "stopped at {at:?}"
    );
    for l in 0..2 {
        assert_eq!(
            ls::state(r.lease(l).state.load(SeqCst)),
            ls::FREE,
            "lease {l}"
        );
    }
    at
}

#[test]
fn loom_res_a_revoker_stopped_at_any_crash_point_loses_nothing() {
    use std::collections::BTreeSet;
    use std::sync::Mutex;
    static SEEN: Mutex<(BTreeSet<&'static str>, bool)> = Mutex::new((BTreeSet::new(), false));
    for k in 1..=16 {
        SEEN.lock().unwrap().1 = false;
        loom::model(move || {
            if let Some(label) = crash_execution(k) {
                let mut seen = SEEN.lock().unwrap();
                seen.0.insert(label);
                seen.1 = true;
            }
        });
        let seen = SEEN.lock().unwrap();
        eprintln!("transfer crash point #{k}: {:?}", seen.0);
        if !seen.1 {
            for label in [
                "acquire.claimed",
                "acquire.published",
                "evict.held_applied",
                "evict.revoked",
            ] {
                assert!(seen.0.contains(label), "never stopped at {label}");
            }
            return;
        }
    }
    panic!("the asker still had crash points after 16");
}
