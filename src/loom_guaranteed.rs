//! loom models of the guaranteed pool's shared state (`guaranteed::shared`), run on the
//! very code that runs on the mapping, over a heap region of loom atomics.
//!
//! Three tenants, each guaranteed one unit of a ceiling of three. b and c hold their own
//! unit; both race to borrow the last unit, a's idle one, while a returns and asks for
//! it. Every interleaving of the three processes' reads, block writes and head CASes must
//! keep the ceiling and the pool's invariants (the final state is decoded and checked),
//! lose no update (every grant returned is in the final state, and nothing else), lend
//! the unit at most once, and keep the reclaim bound: a lease holding a's unit ends no
//! later than a horizon after a asked. A borrower stopped at either crash point, then
//! reaped, leaves everything exact.
//!
//! Each op copies the whole state, so a model thread takes about 150 atomic steps per
//! op; these models run with at most one preemption (`LOOM_MAX_PREEMPTIONS` is capped
//! at 1 here). The two-process crash models are exhaustive at that bound; the
//! three-process race explores a budget of 3,000 executions (`FAIRSHM_LOOM_BUDGET` sets
//! another), since its exhaustive exploration does not end in CI time. A deliberately
//! broken publisher (a store instead of the CAS) is caught.

use loom::sync::Arc;

use crate::guaranteed::shared;
use crate::guaranteed::{Call, Effect, FairnessUnit, GuaranteedConfig, Rules};
use crate::region::{HeapRegion, Region};
use crate::sync::Ordering::*;

const A: u16 = 0;
const B: u16 = 1;
const C: u16 = 2;
const HORIZON: u64 = 100;

fn cfg() -> GuaranteedConfig {
    GuaranteedConfig::new("g", 3)
        .unit(FairnessUnit::Cost)
        .tenant("a", 1)
        .tenant("b", 1)
        .tenant("c", 1)
        .reclaim_horizon_ms(HORIZON as u32)
        .idle_after_ms(150)
        .max_leases(4)
}

fn region() -> Arc<HeapRegion> {
    Arc::new(HeapRegion::new(0, 1, 3, 1).with_guaranteed(&[cfg()]))
}

fn acquire(
    r: &HeapRegion,
    slot: usize,
    tenant: u16,
    hold_ms: u64,
    now: u64,
) -> crate::Result<Effect> {
    let rules: &Rules = r.g_rules(0);
    let call = Call::Acquire {
        tenant,
        cost: 1,
        hold_ms,
        owner: slot as u16,
        now,
    };
    Ok(shared::update(r, 0, slot, |st| st.apply(rules, call))?.0)
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    bounded(None, f)
}

/// `model`, exploring at most `budget` executions (the three-process model: exhaustive
/// exploration of its ~450 steps does not end in CI time).
fn bounded(budget: Option<usize>, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.max_permutations = budget;
    b.preemption_bound = Some(b.preemption_bound.unwrap_or(1).min(1));
    // Each op copies the state word by word: far more steps than loom's default allows.
    b.max_branches = 1_000_000;
    b.check(f);
}

#[test]
fn loom_two_borrowers_race_for_the_last_unit_while_its_lender_returns() {
    let budget = std::env::var("FAIRSHM_LOOM_BUDGET")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3_000);
    bounded(Some(budget), || {
        let r = region();
        // b and c each hold their own unit (b's in slot 0, c's in slot 1).
        assert!(matches!(
            acquire(&r, 0, B, 1000, 0).unwrap(),
            Effect::Granted(_)
        ));
        assert!(matches!(
            acquire(&r, 1, C, 1000, 0).unwrap(),
            Effect::Granted(_)
        ));
        let spawn = |slot: usize, tenant: u16, hold: u64, now: u64| {
            let r = r.clone();
            loom::thread::spawn(move || acquire(&r, slot, tenant, hold, now).unwrap())
        };
        let b = spawn(0, B, HORIZON, 1);
        let c = spawn(1, C, HORIZON, 1);
        let a = spawn(2, A, 50, 2);
        let (b, c, a) = (b.join().unwrap(), c.join().unwrap(), a.join().unwrap());
        let (_, st) = shared::read(&*r, 0).unwrap(); // decoding checks I1-I3
        let rules = r.g_rules(0);
        assert!(st.in_use() <= rules.ceiling);
        let granted: Vec<u32> = [&b, &c, &a]
            .iter()
            .filter_map(|e| match e {
                Effect::Granted(g) => Some(g.lease),
                _ => None,
            })
            .collect();
        // No lost update: the final state holds the two setup leases and every grant.
        assert_eq!(
            st.leases.len(),
            2 + granted.len(),
            "{:?} vs {granted:?}",
            st.leases
        );
        for no in &granted {
            assert!(st.leases.iter().any(|l| l.no == *no));
        }
        // a's unit is lent at most once, and a gets it or is told who holds it.
        let loans = [&b, &c]
            .iter()
            .filter(|e| matches!(e, Effect::Granted(_)))
            .count();
        assert!(loans <= 1, "a's one unit lent {loans} times");
        match &a {
            Effect::Granted(_) => assert_eq!(loans, 0),
            Effect::Refused(x) => {
                assert_eq!(x.reason, crate::Reason::GuaranteeOnLoan);
                assert_eq!(loans, 1);
                // The reclaim bound: the loan ends within a horizon of a's ask.
                for bl in &x.blocking {
                    assert!(
                        bl.deadline <= x.at + HORIZON,
                        "{bl:?} outlives {} + {HORIZON}",
                        x.at
                    );
                }
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(st.seq, 5);
    });
}

#[test]
fn loom_a_borrower_stopped_at_any_crash_point_is_reaped_exactly() {
    for k in 1..=shared::CRASH_LABELS.len() {
        model(move || {
            crate::loom_crash::disarm();
            let r = region();
            assert!(matches!(
                acquire(&r, 0, B, 1000, 0).unwrap(),
                Effect::Granted(_)
            ));
            let rb = r.clone();
            let b = loom::thread::spawn(move || {
                crate::loom_crash::arm(k);
                let out = acquire(&rb, 0, B, HORIZON, 1);
                (out.is_err(), crate::loom_crash::stopped_at())
            });
            let ra = r.clone();
            let a = loom::thread::spawn(move || acquire(&ra, 2, A, 50, 2).unwrap());
            let (crashed, at) = b.join().unwrap();
            let a = a.join().unwrap();
            assert!(crashed, "stopped at {at:?}");
            // The dead process's slot is reaped: its leases come back, whatever it did.
            shared::reap_slot(&*r, 0).unwrap();
            let (_, st) = shared::read(&*r, 0).unwrap();
            assert!(st.leases.iter().all(|l| l.owner != 0), "{:?}", st.leases);
            // (Decoding checked that every slice left is of a lease left: a's, which may
            // have borrowed idle c's unit if b's loan of a's came first.)
            let a_held = matches!(a, Effect::Granted(_)) as u64;
            assert_eq!(st.in_use(), a_held);
        });
    }
}

/// A publisher that stores the head instead of CASing it loses updates: loom finds it.
#[test]
#[should_panic(expected = "an update was lost")]
fn loom_catches_a_publisher_that_stores_instead_of_cas() {
    fn broken(r: &HeapRegion, slot: usize, tenant: u16, now: u64) {
        let rules = r.g_rules(0);
        let (h, mut st) = shared::read(r, 0).unwrap();
        st.apply(
            rules,
            Call::Acquire {
                tenant,
                cost: 1,
                hold_ms: 10,
                owner: slot as u16,
                now,
            },
        )
        .unwrap();
        let seq = shared::head_seq(h) + 1;
        st.seq = seq;
        let mine = if shared::head_block(h) == 2 * slot {
            2 * slot + 1
        } else {
            2 * slot
        };
        for (d, v) in r
            .g_block(0, mine)
            .iter()
            .zip(crate::guaranteed::words::encode(&st))
        {
            d.store(v, Relaxed);
        }
        r.g_head(0).store(seq << 20 | mine as u64, Release);
    }
    model(|| {
        let r = region();
        let (r1, r2) = (r.clone(), r.clone());
        let x = loom::thread::spawn(move || broken(&r1, 0, B, 1));
        let y = loom::thread::spawn(move || broken(&r2, 1, C, 1));
        x.join().unwrap();
        y.join().unwrap();
        let (_, st) = shared::read(&*r, 0).unwrap();
        assert_eq!(st.leases.len(), 2, "an update was lost");
    });
}

/// Each tenant holds its own unit (a's by slot 0, b's by 1, c's by 2), so nobody is
/// idle to lend: a's second ask can only be served by a's own unit coming back.
/// Returns a's lease.
fn each_holds_its_own(r: &HeapRegion) -> crate::guaranteed::Grant {
    let Effect::Granted(own) = acquire(r, 0, A, 1000, 0).unwrap() else {
        panic!("a's own unit")
    };
    for (slot, t) in [(1, B), (2, C)] {
        assert!(matches!(
            acquire(r, slot, t, 1000, 0).unwrap(),
            Effect::Granted(_)
        ));
    }
    own
}

/// Releases lease `no` through slot 0's blocks, then gives the waiters what
/// `after_freeing` does (the real one, or a broken one): whether it woke them.
fn release_then(r: &HeapRegion, no: u32, after_freeing: impl FnOnce(&HeapRegion) -> bool) -> bool {
    let rules = r.g_rules(0);
    let call = Call::Release { lease: no, now: 1 };
    shared::update(r, 0, 0, |st| st.apply(rules, call)).unwrap();
    after_freeing(r)
}

/// One waiter's turn (`guaranteed::waiters`): `seen`, a refused ask, `announce`.
/// Returns whether the ask was granted, and, refused, whether it would then sleep
/// (`wake` unchanged since `seen`) and on what value.
fn waiter_turn(r: &HeapRegion, slot: usize, tenant: u16) -> (bool, Option<u32>) {
    use crate::guaranteed::waiters;
    let seen = waiters::seen(r, 0);
    if matches!(acquire(r, slot, tenant, 50, 1).unwrap(), Effect::Granted(_)) {
        return (true, None);
    }
    let now = waiters::announce(r, 0, 100);
    (false, (now == seen).then_some(seen))
}

/// The release-versus-waiter race of the model below, with the releaser's side given
/// as `after_freeing` (the real one, or a broken one).
fn release_races_a_waiter(after_freeing: fn(&HeapRegion) -> bool) {
    model(move || {
        let r = region();
        let own = each_holds_its_own(&r);
        let rw = r.clone();
        let waiter = loom::thread::spawn(move || waiter_turn(&rw, 1, A));
        let rr = r.clone();
        let releaser = loom::thread::spawn(move || release_then(&rr, own.lease, after_freeing));
        let (granted, sleeps_on) = waiter.join().unwrap();
        let woke = releaser.join().unwrap();
        if let Some(v) = sleeps_on {
            assert!(!granted);
            assert!(woke, "a waiter announced and asleep was not woken");
            assert_ne!(
                r.g_head_rec(0).wake.load(SeqCst),
                v,
                "the wake word still holds what the waiter sleeps on"
            );
        }
    });
}

/// A waiter refused while a release of the unit it needs runs is never left asleep:
/// either its ask sees the release (granted), or it does not sleep (`wake` moved), or
/// the releaser finds it announced and wakes it, and `wake` no longer holds the value
/// it sleeps on (the kernel's check then fails, or the wake finds it asleep).
#[test]
fn loom_a_release_never_leaves_a_waiter_asleep() {
    use crate::guaranteed::waiters::{EVERY_BIT, after_freeing};
    release_races_a_waiter(|r| after_freeing(r, 0, EVERY_BIT, || 1));
}

/// A waiter of a that says who it is (`seen_as`, `for_me`, `moved_on`), while a
/// release that cannot serve it (b's: its bits are b's alone) and one of a's own unit
/// race with its ask: it sleeps on past b's release at most, never past a's. Either its
/// ask sees a's release (granted), or it finds a's release for it after its
/// announcement and asks again, or it sleeps on a value that a's bump has since
/// changed and a's releaser, finding it announced, wakes a's bits.
#[test]
fn loom_a_waiter_sleeps_on_past_others_releases_only() {
    use crate::guaranteed::waiters::{
        after_freeing, announce, cookie_wake, for_me, moved_on, seen_as, tenant_bit, waiter_bits,
    };
    model(|| {
        let r = region();
        let own = each_holds_its_own(&r);
        let rw = r.clone();
        let waiter = loom::thread::spawn(move || {
            let cookie = seen_as(&*rw, 0, A);
            if matches!(acquire(&rw, 1, A, 50, 1).unwrap(), Effect::Granted(_)) {
                return (true, None);
            }
            let bits = waiter_bits(A, 50, HORIZON);
            let now = announce(&*rw, 0, 100);
            if for_me(&*rw, 0, cookie, A, bits, now) {
                return (false, None); // asks again at once
            }
            (false, Some(cookie_wake(moved_on(cookie, now))))
        });
        // b's release, which gives a nothing: only its wake and its epoch.
        let rb = r.clone();
        let other = loom::thread::spawn(move || after_freeing(&*rb, 0, tenant_bit(B), || 1));
        let ra = r.clone();
        let releaser = loom::thread::spawn(move || {
            release_then(&ra, own.lease, |r| after_freeing(r, 0, tenant_bit(A), || 1))
        });
        let (granted, sleeps_on) = waiter.join().unwrap();
        other.join().unwrap();
        let woke = releaser.join().unwrap();
        if let Some(v) = sleeps_on {
            assert!(!granted);
            assert!(
                woke,
                "a waiter announced and asleep was not woken by a's release"
            );
            assert_ne!(
                r.g_head_rec(0).wake.load(SeqCst),
                v,
                "the waiter sleeps on a value that includes a's release"
            );
        }
    });
}

/// A waiter that took every move of `wake` after its announcement for someone else's
/// (no epochs) sleeps through a's release: loom finds it.
#[test]
#[should_panic(expected = "includes a's release")]
fn loom_catches_a_waiter_that_ignores_the_epochs() {
    use crate::guaranteed::waiters::{after_freeing, announce, seen, tenant_bit};
    model(|| {
        let r = region();
        let own = each_holds_its_own(&r);
        let rw = r.clone();
        let waiter = loom::thread::spawn(move || {
            let _ = seen(&*rw, 0);
            if matches!(acquire(&rw, 1, A, 50, 1).unwrap(), Effect::Granted(_)) {
                return None;
            }
            Some(announce(&*rw, 0, 100)) // asleep on whatever it reads
        });
        let ra = r.clone();
        let releaser = loom::thread::spawn(move || {
            release_then(&ra, own.lease, |r| after_freeing(r, 0, tenant_bit(A), || 1))
        });
        let sleeps_on = waiter.join().unwrap();
        releaser.join().unwrap();
        if let Some(v) = sleeps_on {
            assert_ne!(
                r.g_head_rec(0).wake.load(SeqCst),
                v,
                "the waiter sleeps on a value that includes a's release"
            );
        }
    });
}

/// A releaser that bumps `wake` and reads `sleep_until_ms` without the SeqCst fence
/// between them (a store-load pair each side, Dekker's) misses an announced waiter:
/// loom finds it.
#[test]
#[should_panic(expected = "not woken")]
fn loom_catches_a_releaser_without_the_fence() {
    release_races_a_waiter(|r| {
        let rec = r.g_head_rec(0);
        rec.wake.fetch_add(1, Release);
        let until = rec.sleep_until_ms.load(Relaxed);
        until != 0 && until >= 1
    });
}
