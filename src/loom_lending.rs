//! loom models of the policy seam with a toy policy whose decision reads a third word
//! and whose grants may change it: *lending*. Each tenant is guaranteed one of the
//! pool's two permits; a tenant asking beyond its guarantee borrows, which charges the
//! pool's `extra` word, and at most one unit may be on loan at a time. The decision
//! ("this grant borrows") is recorded in the lease before any effect
//! (`CHARGES_EXTRA`), the effects are three tagged CASes (held, extra, pool), and a
//! release or a reaper undoes exactly the recorded ones: see "Policies that change more
//! words" in `shm-layout.md`.
//!
//! The models assert the policy's contract (never two units on loan, never more than
//! `POOL` in use) and that every word, the extra one included, ends at zero, also when
//! a process stops at any crash point and is reaped.

use loom::sync::Arc;
use loom::sync::atomic::AtomicUsize;

use crate::layout::{lease_state as ls, op_word, pair, proc_state as ps};
use crate::loom_tests::assert_all_zero;
use crate::ops::{self, AcqOutcome, Desc};
use crate::policy::{Inputs, Policy, Verdict};
use crate::region::{HeapRegion, Region};
use crate::sync::Ordering::*;

const CAP: u32 = 2;
const A: usize = 0;
const B: usize = 1;
/// The refusal reason of a loan that would exceed the lending limit (toy).
const NO_LENDER: u32 = 9;

/// The toy policy.
struct Lending;

impl Policy for Lending {
    const USES_EXTRA: bool = true;

    fn decide(&self, _: &Inputs, in_use: u32, held: u32, extra: u32, units: u32) -> Verdict {
        if in_use + units > CAP {
            return Verdict::Refuse {
                reason: 1,
                short: in_use + units - CAP,
            };
        }
        if held + units <= 1 {
            return Verdict::Admit; // within its guarantee
        }
        if extra + units > 1 {
            return Verdict::Refuse {
                reason: NO_LENDER,
                short: extra + units - 1,
            };
        }
        Verdict::AdmitCharging
    }

    fn capacity(&self, _: &Inputs) -> u32 {
        CAP
    }
}

fn setup() -> Arc<HeapRegion> {
    let r = HeapRegion::new(1, 2, 3, 1);
    r.pool(0).limits.store(pair::make(CAP, 1), Relaxed);
    for (t, name) in [(A, b"A"), (B, b"B")] {
        let got = crate::tenants::find_or_claim(&r, name, &|| 1, 0, &|_| false).unwrap();
        assert_eq!(got, t);
    }
    Arc::new(r)
}

fn desc(tenant: usize) -> Desc {
    Desc {
        generation: 0,
        pool: 0,
        tenant: tenant as u32,
        units: 1,
        inputs: [0; 3],
    }
}

fn acquire(r: &HeapRegion, slot: usize, tenant: usize) -> crate::Result<Option<(usize, Desc)>> {
    let (l, d, o) = ops::acquire(r, &Lending, slot, 0, desc(tenant), 0, 10, 0)?;
    Ok(matches!(o, AcqOutcome::Granted { .. }).then(|| (l.expect("a grant has a lease"), d)))
}

/// Whether granted lease `l` borrowed (its recorded decision).
fn borrowed(r: &HeapRegion, l: usize) -> bool {
    r.lease(l).state.load(SeqCst) & ls::CHARGES_EXTRA != 0
}

/// While holding: at most one unit on loan (a witness of the loans granted), and the
/// pool bound.
fn check_holding(r: &HeapRegion, l: usize, loans: &AtomicUsize) -> bool {
    let b = borrowed(r, l);
    if b {
        let n = loans.fetch_add(1, SeqCst) + 1;
        assert!(n <= 1, "{n} units on loan at once");
    }
    let in_use = op_word::count(r.pool(0).word.load(SeqCst));
    assert!(in_use <= CAP, "in_use {in_use} exceeds POOL {CAP}");
    b
}

/// A holds its guaranteed unit (granted before the threads start, lease 2).
fn a_holds_one(r: &HeapRegion) -> (usize, Desc) {
    let (l, d) = acquire(r, 2, A).unwrap().expect("A's guarantee");
    assert!(!borrowed(r, l));
    (l, d)
}

/// Two processes of A each ask for one more unit (beyond A's guarantee: a loan) while
/// A's first unit is released: at most one loan at a time, and all back to zero.
#[test]
fn loom_lending_two_borrowers_never_overdraw() {
    loom::model(|| {
        let r = setup();
        let (l0, d0) = a_holds_one(&r);
        let loans = Arc::new(AtomicUsize::new(0));
        let borrower = |slot: usize| {
            let (r, loans) = (r.clone(), loans.clone());
            loom::thread::spawn(move || {
                if let Some((l, d)) = acquire(&r, slot, A).unwrap() {
                    if check_holding(&r, l, &loans) {
                        loans.fetch_sub(1, SeqCst);
                    }
                    ops::release(&*r, l, d.generation, Some(&d)).unwrap();
                }
            })
        };
        let (t1, t2) = (borrower(0), borrower(1));
        ops::release(&*r, l0, d0.generation, Some(&d0)).unwrap();
        t1.join().unwrap();
        t2.join().unwrap();
        assert_all_zero(&r);
    });
}

/// A process of A that borrows stops at its k-th crash point (after every step of its
/// acquire and release in turn) while A's guaranteed unit is released; the reaper then
/// undoes exactly what its recorded decision had applied, the loan included.
#[test]
fn loom_lending_a_borrower_stopped_anywhere_loses_nothing() {
    borrower_stopped_anywhere(reap);
}

/// The real reaper.
fn reap(r: &HeapRegion) {
    crate::recovery::reap_slot(r, 0, crate::recovery::Reaper::with_pid(3), &|_, _| true).unwrap();
}

/// A reaper that forgets the recorded decision to charge the extra word (it drops
/// `CHARGES_EXTRA` from the dead lease, then reaps as usual): the loan it leaves behind
/// must be caught.
fn forgetful_reap(r: &HeapRegion) {
    let lease = r.lease(0);
    let s = lease.state.load(SeqCst);
    lease.state.store(s & !ls::CHARGES_EXTRA, SeqCst);
    // It may also trip over the words it misreads; what it leaves is checked after.
    let _ = crate::recovery::reap_slot(r, 0, crate::recovery::Reaper::with_pid(3), &|_, _| true);
}

#[test]
#[should_panic(expected = "not back to")]
fn loom_lending_catches_a_reaper_that_forgets_the_loan() {
    borrower_stopped_anywhere(forgetful_reap);
}

fn borrower_stopped_anywhere(reap: fn(&HeapRegion)) {
    use std::collections::BTreeSet;
    use std::sync::Mutex;
    static SEEN: Mutex<(BTreeSet<&'static str>, bool)> = Mutex::new((BTreeSet::new(), false));
    for k in 1..=16 {
        SEEN.lock().unwrap().1 = false;
        loom::model(move || {
            crate::loom_crash::disarm();
            let r = setup();
            let (l0, d0) = a_holds_one(&r);
            r.proc_slot(0)
                .state
                .store(ps::make(ps::LIVE, 16_000_002, 0), Relaxed);
            let r2 = r.clone();
            let releaser = loom::thread::spawn(move || {
                ops::release(&*r2, l0, d0.generation, Some(&d0)).unwrap();
            });
            let r3 = r.clone();
            let victim = loom::thread::spawn(move || {
                crate::loom_crash::arm(k);
                let res = acquire(&r3, 0, A).and_then(|got| match got {
                    Some((l, d)) => ops::release(&*r3, l, d.generation, Some(&d)).map(|_| ()),
                    None => Ok(()),
                });
                let at = crate::loom_crash::stopped_at();
                assert_eq!(res.is_err(), at.is_some(), "{res:?}");
                at
            });
            let at = victim.join().unwrap();
            reap(&r);
            releaser.join().unwrap();
            assert_all_zero(&r);
            if let Some(label) = at {
                let mut seen = SEEN.lock().unwrap();
                seen.0.insert(label);
                seen.1 = true;
            }
        });
        let seen = SEEN.lock().unwrap();
        eprintln!("lending crash point #{k}: {:?}", seen.0);
        if !seen.1 {
            for label in ["acquire.extra_applied", "release.extra_applied"] {
                assert!(seen.0.contains(label), "never stopped at {label}");
            }
            return;
        }
    }
    panic!("the victim still had crash points after 16");
}
