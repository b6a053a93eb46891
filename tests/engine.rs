//! The handle-based engine, the owned lease and cancellation, on real segments.
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Seg, one_pool};
use fairshm::{Cancel, Error, LeaseId, Outcome, Reason, Request, Table};

#[test]
fn handles_resolve_once_and_acquire_without_names() {
    let seg = Seg::new("engine");
    let t = seg.create(&one_pool(4).weight("acme", 3));
    let e = t.engine();
    let pool = e.pool("requests").unwrap();
    assert_eq!(e.pool_name(pool), "requests");
    let acme = e.tenant("acme").unwrap();
    assert_eq!(
        acme.weight(),
        3,
        "the configured weight rides in the handle"
    );
    assert_eq!(e.find_tenant("acme"), Some(acme));
    assert_eq!(e.tenant_name(acme).as_deref(), Some("acme"));
    assert_eq!(e.find_tenant("nobody"), None, "find claims nothing");
    let err = e.pool("nope").unwrap_err();
    assert!(
        matches!(&err, Error::UnknownPool { known, .. } if known == r#"fair-share pools ["requests"]"#),
        "{err}"
    );
    let Outcome::Granted(id) = e.acquire(pool, acme, 3, 10, 5).unwrap() else {
        panic!("a room pool refuses nothing")
    };
    assert_eq!(t.snapshot_at(5).held("requests", "acme"), 3);
    // The id round-trips through one u64 (what a binding keeps).
    let back = LeaseId::from_u64(id.to_u64());
    assert_eq!(back, id);
    assert_eq!(e.release(back, 6).unwrap(), pool);
    let again = e.release(back, 7).unwrap_err();
    assert!(matches!(again, Error::AlreadyReleased { .. }), "{again}");
    assert_eq!(t.snapshot_at(7).pool("requests").unwrap().in_use, 0);
}

#[test]
fn a_refusal_is_a_copy_value_with_its_facts() {
    let seg = Seg::new("engine-refused");
    let t = seg.create(&one_pool(4));
    let e = t.engine();
    let (pool, a) = (e.pool("requests").unwrap(), e.tenant("a").unwrap());
    let Outcome::Granted(id) = e.acquire(pool, a, 4, 0, 10).unwrap() else {
        panic!("granted")
    };
    let Outcome::Refused(r) = e.acquire(pool, a, 1, 0, 10).unwrap() else {
        panic!("the pool is full")
    };
    let copy = r; // Copy
    assert_eq!(copy, r);
    assert_eq!(
        (r.reason, r.in_use, r.held, r.capacity, r.floor, r.units),
        (Reason::OverShare, 4, 4, 4, 1, 1)
    );
    assert!(r.retry_after_ms >= 1);
    // The façade adds names and writes the explanation only when asked.
    let refusal = fairshm::Refusal::new("requests", "a", r);
    assert!(refusal.explanation().contains("\"a\""), "{refusal}");
    e.release(id, 11).unwrap();
}

#[test]
fn a_handle_of_another_shape_is_an_error_not_a_fault() {
    let seg = Seg::new("engine-bad");
    let t = seg.create(&one_pool(4));
    let other = Seg::new("engine-bad2");
    let mut cfg = one_pool(4);
    cfg.max_tenants = 2048;
    let big = other.create(&cfg);
    // A tenant slot index of a larger table may lie beyond this table's directory.
    let far = (0..2048)
        .map(|i| big.engine().tenant(&format!("t{i}")).unwrap())
        .find(|t| t.index() >= 1024)
        .expect("some of 2048 names hash past slot 1024");
    let e = t.engine();
    let pool = e.pool("requests").unwrap();
    let err = e.acquire(pool, far, 1, 0, 5).unwrap_err();
    assert!(matches!(err, Error::InvalidRequest(_)), "{err}");
    let said = format!(
        "tenant handle {} is beyond this table's 1024 tenant slots",
        far.index()
    );
    assert!(err.to_string().contains(&said), "{err}");
    // A pool handle of a table with more pools names the pool handles this one has.
    let third = Seg::new("engine-bad3");
    let mut two = one_pool(4);
    two.pools.push(fairshm::PoolConfig::new("flights", 4));
    let wide = third.create(&two);
    let flights = wide.engine().pool("flights").unwrap();
    let err = e
        .acquire(flights, e.tenant("a").unwrap(), 1, 0, 5)
        .unwrap_err();
    assert!(matches!(err, Error::InvalidRequest(_)), "{err}");
    assert!(
        err.to_string().contains(
            "pool handle 1 is not of this table: its fair-share pools are handles 0 to 0"
        ),
        "{err}"
    );
    let zero = e
        .acquire(pool, e.tenant("a").unwrap(), 0, 0, 5)
        .unwrap_err();
    assert!(matches!(zero, Error::InvalidRequest(_)), "{zero}");
}

#[test]
fn an_owned_lease_outlives_the_borrow_and_releases_on_drop() {
    let seg = Seg::new("engine-owned");
    let t = Arc::new(seg.create(&one_pool(2)));
    let lease = t
        .try_acquire_owned(&Request::new("requests", "a"))
        .unwrap()
        .unwrap();
    assert_eq!(lease.pool(), "requests");
    let t2 = Arc::clone(&t);
    // Moved into another thread of this process, and dropped there.
    std::thread::spawn(move || {
        assert_eq!(t2.snapshot().held("requests", "a"), 1);
        drop(lease);
    })
    .join()
    .unwrap();
    assert_eq!(t.snapshot().pool("requests").unwrap().in_use, 0);
}

#[test]
fn another_thread_cancels_a_blocking_acquire_at_once() {
    let seg = Seg::new("engine-cancel");
    let t = seg.create(&one_pool(1));
    let held = t
        .try_acquire(&Request::new("requests", "a"))
        .unwrap()
        .unwrap();
    // No sweep in the test's time: only the token's futex wake can end the sleep early.
    t.set_sweep_interval(Duration::from_secs(60));
    let cancel = Cancel::new();
    let started = Instant::now();
    let refusal = std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            t.acquire_cancellable(
                &Request::new("requests", "b"),
                Duration::from_secs(20),
                Some(&cancel),
            )
            .unwrap()
            .unwrap_err()
        });
        std::thread::sleep(Duration::from_millis(50));
        cancel.cancel();
        waiter.join().unwrap()
    });
    let took = started.elapsed();
    assert_eq!(refusal.reason, Reason::Cancelled, "{refusal}");
    assert!(
        refusal.explanation().starts_with("cancelled after"),
        "{refusal}"
    );
    assert!(
        took < Duration::from_secs(1),
        "cancelling took {took:?} (the sweep is 60 s, the timeout 20 s)"
    );
    // A cancelled token cancels the next wait at once, until reset.
    let again = t
        .acquire_cancellable(
            &Request::new("requests", "b"),
            Duration::from_secs(20),
            Some(&cancel),
        )
        .unwrap()
        .unwrap_err();
    assert_eq!(again.reason, Reason::Cancelled);
    cancel.reset();
    let timed = t
        .acquire_cancellable(
            &Request::new("requests", "b"),
            Duration::from_millis(20),
            Some(&cancel),
        )
        .unwrap()
        .unwrap_err();
    assert_eq!(timed.reason, Reason::TimedOut);
    drop(held);
    let _ = Table::unlink(&seg.name);
}

#[test]
fn an_observer_reads_everything_and_writes_nothing() {
    let seg = Seg::new("engine-observer");
    let t = seg.create(&one_pool(4));
    let held = t
        .try_acquire(&Request::new("requests", "acme"))
        .unwrap()
        .unwrap();
    let o = Table::open_observer(&seg.name).unwrap();
    assert!(o.engine().is_observer());
    let snap = o.snapshot();
    assert_eq!(snap.held("requests", "acme"), 1);
    assert_eq!(
        snap.tenants
            .iter()
            .map(|e| e.name.as_str())
            .collect::<Vec<_>>(),
        vec!["acme"],
        "the snapshot lists the claimed tenants only"
    );
    assert_eq!(snap.processes.len(), 1, "the observer did not register");
    // A known tenant resolves (a read); every write is a typed error.
    let e = o.engine();
    let acme = e.find_tenant("acme").unwrap();
    let pool = e.pool("requests").unwrap();
    for err in [
        o.try_acquire(&Request::new("requests", "acme"))
            .unwrap_err(),
        e.acquire(pool, acme, 1, 0, 5).unwrap_err(),
        e.tenant("newcomer").unwrap_err(),
        e.release(held.id(), 5).unwrap_err(),
        o.reap_dead().unwrap_err(),
    ] {
        assert!(matches!(err, Error::ReadOnly { .. }), "{err}");
    }
    assert_eq!(o.snapshot().processes.len(), 1);
    drop(o);
    assert_eq!(
        t.snapshot().held("requests", "acme"),
        1,
        "the observer's drop touched nothing"
    );
    drop(held);
}

#[test]
fn root_observes_another_users_segment_that_it_may_not_use() {
    if nix::unistd::geteuid().as_raw() != 0 {
        eprintln!("SKIPPED: needs root to give the segment to another user");
        return;
    }
    let seg = Seg::new("engine-foreign");
    drop(seg.create(&one_pool(4)));
    let path = format!("/dev/shm/{}", seg.name);
    std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
    let err = Table::open(&seg.name)
        .err()
        .expect("a worker's open is refused");
    assert!(
        matches!(err, Error::WrongOwner { owner: 65534, .. }),
        "{err}"
    );
    let o = Table::open_observer(&seg.name).unwrap();
    assert_eq!(o.snapshot().pools[0].capacity, 4);
}
