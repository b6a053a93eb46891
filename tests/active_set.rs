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

/// A decision at a `now` earlier than the last scan of the active set (a caller's
/// explicit time that steps back, or a process whose clock read another process's scan
/// overtook) counts the set at its own `now`, the asker included; and what it asked
/// keeps counting for the decisions after it. (The running sum is as of the later scan:
/// `a`, out of its window at the scan, was left out of it, of its own decision and of
/// the next ones until the scan after.)
#[test]
fn a_decision_behind_the_last_scan_counts_the_set_at_its_own_now() {
    let seg = Seg::new("active-behind-ask");
    let t = setup(&seg);
    let e = t.engine();
    let (p, a) = (e.pool("requests").unwrap(), e.tenant("a").unwrap());
    // At 1011 a has left (it released at 11): b alone, granted; the set is scanned then.
    assert_eq!(b_asks(&t, 1011), None, "b alone gets the pool");
    // a asks at 1005, behind that scan: in its window then, and asking.
    let Outcome::Refused(r) = e.acquire(p, a, 2, 0, 1005).unwrap() else {
        panic!("7 of 8 in use: 2 units do not fit")
    };
    assert_eq!((r.reason, r.active_weight), (Reason::PoolFull, 2), "{r:?}");
    assert_eq!(t.snapshot_at(1005).pools[0].active_weight, 2);
    // a asked at 1005, so it counts until 2005: b, at 7 of its share of 4, is held to
    // POOL - FLOOR.
    let r = b_asks(&t, 1012).expect("b is over its share while a is active");
    assert_eq!((r.reason, r.active_weight), (Reason::OverShare, 2), "{r:?}");
    assert!(b_asks(&t, 2004).is_some(), "a counts until its window ends");
    assert_eq!(b_asks(&t, 2005), None, "then b is alone again");
}

/// A release at a `now` earlier than the last scan: the tenant's window runs from that
/// release, and it stops counting when that window ends, not at the next scheduled
/// scan (which, since it held at the last scan, nothing had brought forward).
#[test]
fn a_release_behind_the_last_scan_ends_its_window_on_time() {
    let seg = Seg::new("active-behind-release");
    let t = setup(&seg);
    let e = t.engine();
    let (p, a) = (e.pool("requests").unwrap(), e.tenant("a").unwrap());
    let Outcome::Granted(held) = e.acquire(p, a, 1, 0, 1100).unwrap() else {
        panic!("a under its share, 7 of 8 in use: granted")
    };
    // At 3000 a holds: it counts, and b is over its share. The set is scanned then.
    let r = b_asks(&t, 3000).expect("refused");
    assert_eq!((r.reason, r.active_weight), (Reason::OverShare, 2), "{r:?}");
    // a releases at 1500, behind that scan: its window ends at 2500.
    e.release(held, 1500).unwrap();
    assert_eq!(t.snapshot_at(3001).pools[0].active_weight, 1);
    assert_eq!(b_asks(&t, 3001), None, "b alone gets the pool");
}
