//! The active set is exact at every decision of a sequence of calls (explicit `now`):
//! a tenant counts while it holds, or while its last attempt or release is within the
//! window before `now`; the snapshot agrees with the decision at the same `now`.
mod common;

use common::{Seg, one_pool};
use fairshm::{Outcome, Reason, Refused, Table};

const WINDOW: u64 = 1000;

/// A pool of 8 (floor 1) where `b` holds 7, and `a` came by once, at 10 and 11.
fn setup(seg: &Seg) -> Table {
    let t = seg.create(&one_pool(8));
    let e = t.engine();
    let (p, a, b) = (
        e.pool("requests").unwrap(),
        e.tenant("a").unwrap(),
        e.tenant("b").unwrap(),
    );
    let Outcome::Granted(id) = e.acquire(p, a, 1, 0, 10).unwrap() else {
        panic!("a alone is granted")
    };
    e.release(id, 11).unwrap();
    for now in 500..507 {
        assert!(matches!(
            e.acquire(p, b, 1, 0, now).unwrap(),
            Outcome::Granted(_)
        ));
    }
    t
}

/// `b` asks for one more at `now`: granted, or the refusal.
fn b_asks(t: &Table, now: u64) -> Option<Refused> {
    let e = t.engine();
    let (p, b) = (e.pool("requests").unwrap(), e.tenant("b").unwrap());
    match e.acquire(p, b, 1, 0, now).unwrap() {
        Outcome::Granted(id) => {
            e.release(id, now).unwrap();
            None
        }
        Outcome::Refused(r) => Some(r),
    }
}

#[test]
fn a_departed_tenant_stops_counting_the_instant_its_window_ends() {
    let seg = Seg::new("active-depart");
    let t = setup(&seg);
    // a released at 11: it counts while now < 11 + WINDOW.
    let last_in = 11 + WINDOW - 1;
    let r = b_asks(&t, last_in).expect("b at its share is held to POOL - FLOOR");
    assert_eq!((r.reason, r.active_weight), (Reason::OverShare, 2));
    let snap = t.snapshot_at(last_in).pool("requests").unwrap().clone();
    assert_eq!(
        snap.active_weight, 2,
        "the snapshot agrees with the decision"
    );
    // At 11 + WINDOW, b is alone: its share is the whole pool and it gets the 8th.
    assert_eq!(b_asks(&t, 11 + WINDOW), None, "b alone gets the pool");
    let snap = t.snapshot_at(11 + WINDOW).pool("requests").unwrap().clone();
    assert_eq!((snap.active_tenants, snap.active_weight), (1, 1));
}

#[test]
fn a_returning_tenant_counts_once() {
    let seg = Seg::new("active-return");
    let t = setup(&seg);
    let e = t.engine();
    let (p, a) = (e.pool("requests").unwrap(), e.tenant("a").unwrap());
    // Nobody decides between a's departure (1011) and its return at 1500.
    let Outcome::Refused(r) = e.acquire(p, a, 2, 0, 1500).unwrap() else {
        panic!("7 of 8 in use: 2 units do not fit")
    };
    assert_eq!(r.active_weight, 2, "a and b, a counted once: {r:?}");
    let r = b_asks(&t, 1500).expect("b is over its share of 4 again");
    assert_eq!(r.active_weight, 2, "{r:?}");
    assert_eq!(t.snapshot_at(1500).pools[0].active_weight, 2);
}

#[test]
fn a_holder_counts_however_long_it_is_quiet() {
    let seg = Seg::new("active-holder");
    let t = seg.create(&one_pool(8));
    let e = t.engine();
    let (p, a, b) = (
        e.pool("requests").unwrap(),
        e.tenant("a").unwrap(),
        e.tenant("b").unwrap(),
    );
    let Outcome::Granted(held) = e.acquire(p, a, 1, 0, 10).unwrap() else {
        panic!("granted")
    };
    for now in 20..26 {
        assert!(matches!(
            e.acquire(p, b, 1, 0, now).unwrap(),
            Outcome::Granted(_)
        ));
    }
    // Long after a's window, a still holds: b (6 held, share 4) stays at POOL - FLOOR.
    let Outcome::Refused(r) = e.acquire(p, b, 1, 0, 50_000).unwrap() else {
        panic!("b is over its share while a holds")
    };
    assert_eq!((r.reason, r.active_weight), (Reason::OverShare, 2));
    // a releases at 50_001; it counts one window more, then b is alone.
    e.release(held, 50_001).unwrap();
    assert!(matches!(
        e.acquire(p, b, 2, 0, 50_001 + WINDOW - 1).unwrap(),
        Outcome::Refused(Refused {
            reason: Reason::OverShare,
            active_weight: 2,
            ..
        })
    ));
    assert!(matches!(
        e.acquire(p, b, 2, 0, 50_001 + WINDOW).unwrap(),
        Outcome::Granted(_)
    ));
}

#[test]
fn an_over_share_retry_after_does_not_outlast_the_next_departure() {
    let seg = Seg::new("active-retry");
    let t = setup(&seg);
    let r = b_asks(&t, 900).expect("refused");
    assert_eq!(r.reason, Reason::OverShare);
    assert!(
        r.retry_after_ms <= 11 + WINDOW - 900,
        "a leaves the set at 1011: retry after {} ms",
        r.retry_after_ms
    );
}
