//! The consequences of seed 000, each on a real segment with explicit `now`.
#![allow(clippy::result_large_err)] // the test helpers return a refusal by value
mod common;

use common::{Seg, one_pool};
use fairshm::{Config, Lease, PoolConfig, Reason, Request, Table};

fn take<'t>(t: &'t Table, tenant: &str, now: u64) -> Result<Lease<'t>, fairshm::Refusal> {
    t.try_acquire_at(&Request::new("requests", tenant), now)
        .expect("no error")
}

fn take_all<'t>(t: &'t Table, tenant: &str, now: u64) -> (Vec<Lease<'t>>, fairshm::Refusal) {
    let mut got = Vec::new();
    loop {
        match take(t, tenant, now) {
            Ok(l) => got.push(l),
            Err(r) => return (got, r),
        }
    }
}

#[test]
fn a_node_with_room_refuses_nothing() {
    let seg = Seg::new("room");
    let t = seg.create(&one_pool(8));
    let mut held = Vec::new();
    // Four tenants take two each: 8 permits, no refusal while there is room.
    for (i, name) in ["a", "b", "c", "d"].iter().enumerate() {
        for _ in 0..2 {
            held.push(take(&t, name, 10 + i as u64).expect("room, so granted"));
        }
    }
    assert_eq!(t.snapshot_at(20).pool("requests").unwrap().in_use, 8);
}

#[test]
fn a_lone_tenant_gets_the_whole_pool() {
    let seg = Seg::new("alone");
    let t = seg.create(&one_pool(8));
    let (got, refusal) = take_all(&t, "big", 100);
    assert_eq!(got.len(), 8);
    // Holding all 8 it holds exactly its share (8), so the literal rule refuses it at
    // the floor; the pool is full either way.
    assert_eq!(refusal.reason, Reason::OverShare);
    assert_eq!(refusal.share(), 8.0);
    assert_eq!(t.snapshot_at(100).held("requests", "big"), 8);
}

#[test]
fn over_share_stops_one_floor_short_and_a_late_arrival_gets_its_floor_at_once() {
    let seg = Seg::new("floor");
    let t = seg.create(&one_pool(8));
    // small asks once (and leaves at once): it is active for the window.
    drop(take(&t, "small", 100).unwrap());
    let (big, refusal) = take_all(&t, "big", 101);
    assert_eq!(big.len(), 7, "POOL - FLOOR = 8 - 1");
    assert_eq!(refusal.reason, Reason::OverShare);
    assert_eq!(refusal.facts.floor, 1);
    assert!(
        refusal.explanation().contains("floor"),
        "{}",
        refusal.explanation()
    );
    // The late arrival finds its floor free, with no release needed.
    let small = take(&t, "small", 102).expect("the floor is free");
    assert_eq!(t.snapshot_at(102).pool("requests").unwrap().in_use, 8);
    drop((big, small));
}

#[test]
fn a_full_pool_refuses_the_over_share_tenant_and_admits_the_under_share_one_on_release() {
    let seg = Seg::new("full");
    let t = seg.create(&one_pool(8));
    // big alone fills the pool.
    let (mut big, _) = take_all(&t, "big", 100);
    assert_eq!(big.len(), 8);
    // small arrives: full, so refused, but under its share (pool_full) and now active.
    let r = take(&t, "small", 101).unwrap_err();
    assert_eq!(r.reason, Reason::PoolFull);
    assert_eq!(r.facts.held, 0);
    assert!(r.retry_after_ms.unwrap() >= 1);
    // One release: big (past its share of 4) may not take it back...
    big.pop().unwrap().release_at(102).unwrap();
    let r = take(&t, "big", 102).unwrap_err();
    assert_eq!(r.reason, Reason::OverShare);
    // ...and small, under its share, gets it at once.
    let s = take(&t, "small", 102).expect("under share, admitted on release");
    let snap = t.snapshot_at(102);
    assert_eq!(snap.held("requests", "big"), 7);
    assert_eq!(snap.held("requests", "small"), 1);
    drop(s);
}

#[test]
fn a_tenant_that_left_no_longer_shrinks_the_others_share() {
    let seg = Seg::new("window");
    let t = seg.create(&one_pool(8)); // window 1000 ms
    drop(take(&t, "small", 100).unwrap());
    let (big, _) = take_all(&t, "big", 200);
    assert_eq!(big.len(), 7);
    drop(big);
    // Two windows later small is gone: big may fill the pool again.
    let (big, r) = take_all(&t, "big", 2_200);
    assert_eq!(big.len(), 8, "refused with {r}");
}

fn weighted(acme_weight: u32) -> Config {
    Config::with_pools(vec![PoolConfig::new("requests", 100)]).weight("acme", acme_weight)
}

#[test]
fn weights_change_shares_as_the_formula_says() {
    // POOL 100, FLOOR 5. acme holds 65 and globex 30 (95 in use), acme asks for 1.
    // Weight 3: share = 100 * 3/4 = 75 > 65, so acme may go to POOL: granted.
    // Weight 1: share = 100 * 1/2 = 50 <= 65, so acme stops at POOL - FLOOR = 95: refused.
    for (w, expect_grant) in [(3, true), (1, false)] {
        let seg = Seg::new("weights");
        let t = seg.create(&weighted(w));
        let many = |tenant: &str, n: u32| {
            t.try_acquire_at(&Request::new("requests", tenant).units(n), 100)
                .unwrap()
                .unwrap()
        };
        let g = many("globex", 30);
        let a = many("acme", 65);
        let r = take(&t, "acme", 101);
        assert_eq!(
            r.is_ok(),
            expect_grant,
            "weight {w}: {:?}",
            r.as_ref().err()
        );
        if let Err(r) = &r {
            assert_eq!(r.reason, Reason::OverShare);
            assert_eq!(r.share(), 50.0);
        }
        let snap = t.snapshot_at(101);
        let acme = snap
            .pool("requests")
            .unwrap()
            .tenants
            .iter()
            .find(|x| x.name == "acme")
            .unwrap();
        assert_eq!(acme.share, if w == 3 { 75.0 } else { 50.0 });
        drop((g, a, r));
    }
}

#[test]
fn grants_are_all_or_nothing() {
    let seg = Seg::new("aon");
    let t = seg.create(&one_pool(8));
    let a = t
        .try_acquire_at(&Request::new("requests", "a").units(6), 10)
        .unwrap()
        .unwrap();
    let r = t
        .try_acquire_at(&Request::new("requests", "a").units(3), 11)
        .unwrap()
        .unwrap_err();
    assert_eq!(r.reason, Reason::PoolFull);
    assert_eq!(
        t.snapshot_at(11).pool("requests").unwrap().in_use,
        6,
        "nothing partially granted"
    );
    // The pool has room, just not 3 units of it: the explanation does not call it full.
    let text = r.explanation();
    assert!(
        text.contains("which has only 2 of 8 units free (6 in use)") && !text.contains("full"),
        "{text}"
    );
    // Full to the last unit, it is full.
    let b = t.try_acquire_at(&Request::new("requests", "a").units(2), 12);
    let b = b.unwrap().unwrap();
    let r = t
        .try_acquire_at(&Request::new("requests", "b"), 13)
        .unwrap()
        .unwrap_err();
    assert_eq!(r.reason, Reason::PoolFull);
    assert!(
        r.explanation().contains("which is full (8 of 8 in use)"),
        "{r}"
    );
    drop((a, b));
}

#[test]
fn bad_requests_are_typed_errors() {
    let seg = Seg::new("badreq");
    let t = seg.create(&one_pool(8));
    let e = t.try_acquire(&Request::new("nope", "a")).unwrap_err();
    assert!(
        matches!(e, fairshm::Error::UnknownPool { .. }) && e.to_string().contains("requests"),
        "{e}"
    );
    let e = t
        .try_acquire(&Request::new("requests", "a").units(9))
        .unwrap_err();
    assert!(
        matches!(e, fairshm::Error::UnitsExceedCapacity { capacity: 8, .. }),
        "{e}"
    );
    let e = t
        .try_acquire(&Request::new("requests", "a").units(0))
        .unwrap_err();
    assert!(matches!(e, fairshm::Error::InvalidRequest(_)), "{e}");
    let e = t.try_acquire(&Request::new("requests", "")).unwrap_err();
    assert!(matches!(e, fairshm::Error::InvalidTenant { .. }), "{e}");
    let long = "x".repeat(49);
    assert!(t.try_acquire(&Request::new("requests", &long)).is_err());
    // A request that can never be granted claims no tenant slot for its name (a slot
    // is kept for the segment's life): neither through the façade's try nor its wait.
    let before = t.snapshot().tables.tenants;
    for units in [0, 9] {
        let req = Request::new("requests", "newcomer").units(units);
        assert!(t.try_acquire(&req).is_err(), "{units} units");
        let waited = t.acquire(&req, std::time::Duration::from_millis(5));
        assert!(waited.is_err(), "{units} units, waiting");
    }
    let after = t.snapshot();
    assert_eq!(
        after.tables.tenants, before,
        "slots claimed by bad requests"
    );
    assert!(!after.tenants.iter().any(|x| x.name == "newcomer"));
    // So for a per_worker pool: more than a worker in each of its 4 process slots
    // could ever have (1 ticket each) is never granted, and claims nothing either;
    // what the live workers lack today but more would have claims its name.
    let seg = Seg::new("badreq-pw");
    let mut cfg = fairshm::Config::with_pools(vec![fairshm::PoolConfig::per_worker("db", 1.0, 0)]);
    cfg.max_processes = 4;
    let t = seg.create(&cfg);
    let before = t.snapshot().tables.tenants;
    assert!(t.check_units("db", 4).is_ok() && t.check_units("db", 5).is_err());
    assert!(matches!(
        t.check_units("nope", 1),
        Err(fairshm::Error::UnknownPool { .. })
    ));
    let e = t
        .try_acquire(&Request::new("db", "newcomer").units(5))
        .unwrap_err();
    assert!(
        matches!(e, fairshm::Error::UnitsExceedCapacity { units: 5, .. })
            && e.to_string()
                .contains("at most 4 with every process slot a worker"),
        "{e}"
    );
    assert_eq!(
        t.snapshot().tables.tenants,
        before,
        "a slot claimed by 5 of at most 4"
    );
    let e = t
        .try_acquire(&Request::new("db", "newcomer").units(4))
        .unwrap_err();
    assert!(
        matches!(
            e,
            fairshm::Error::UnitsExceedCapacity {
                units: 4,
                capacity: 1,
                ..
            }
        ),
        "{e}"
    );
    assert!(t.snapshot().tenants.iter().any(|x| x.name == "newcomer"));
}

#[test]
fn a_released_lease_released_again_is_an_error_and_loses_nothing() {
    let seg = Seg::new("double");
    let t = seg.create(&one_pool(8));
    let a = take(&t, "a", 10).unwrap();
    let b = take(&t, "a", 10).unwrap();
    let id = a.into_id();
    t.release_id_at(id, 11).unwrap();
    let e = t.release_id_at(id, 12).unwrap_err();
    assert!(matches!(e, fairshm::Error::AlreadyReleased { .. }), "{e}");
    let snap = t.snapshot_at(12);
    assert_eq!(snap.pool("requests").unwrap().in_use, 1);
    assert_eq!(snap.held("requests", "a"), 1);
    drop(b);
    assert_eq!(t.snapshot_at(13).pool("requests").unwrap().in_use, 0);
}

#[test]
fn a_full_tenant_table_is_a_typed_error() {
    let seg = Seg::new("tenants");
    let mut cfg = one_pool(8);
    cfg.max_tenants = 2;
    let t = seg.create(&cfg);
    drop(take(&t, "a", 1).unwrap());
    drop(take(&t, "b", 1).unwrap());
    let e = t
        .try_acquire_at(&Request::new("requests", "c"), 2)
        .unwrap_err();
    assert!(
        matches!(e, fairshm::Error::TenantTableFull { max: 2, .. }),
        "{e}"
    );
    // It says what to change.
    assert!(e.to_string().contains("raise max_tenants"), "{e}");
}

#[test]
fn a_full_lease_table_is_a_typed_error_that_loses_nothing() {
    let seg = Seg::new("leases");
    let mut cfg = one_pool(8);
    cfg.leases_per_process = 2;
    let t = seg.create(&cfg);
    let held = [take(&t, "a", 1).unwrap(), take(&t, "a", 1).unwrap()];
    let e = t
        .try_acquire_at(&Request::new("requests", "a"), 2)
        .unwrap_err();
    assert!(
        matches!(e, fairshm::Error::LeaseTableFull { max: 2 }),
        "{e}"
    );
    assert!(e.to_string().contains("raise leases_per_process"), "{e}");
    // Nothing was taken or counted for it, and a release makes room again.
    assert_eq!(t.snapshot_at(2).held("requests", "a"), 2);
    drop(held);
    assert!(take(&t, "a", 3).is_ok());
}

#[test]
fn the_snapshot_counts_grants_and_refusals_by_reason() {
    let seg = Seg::new("snap");
    let t = seg.create(&one_pool(2));
    let (held, _) = take_all(&t, "a", 5);
    let _ = take(&t, "b", 6).unwrap_err();
    let snap = t.snapshot_at(6);
    let pool = snap.pool("requests").unwrap();
    assert_eq!((pool.grants, pool.refusals, pool.active_tenants), (2, 2, 2));
    let b = pool.tenants.iter().find(|x| x.name == "b").unwrap();
    assert_eq!(b.refusals, vec![("pool_full".to_owned(), 1)]);
    assert_eq!(snap.leases.len(), 2);
    assert!(
        snap.leases
            .iter()
            .all(|l| l.state == "held" && l.tenant == "a")
    );
    assert_eq!(snap.processes.len(), 1);
    assert_eq!(snap.processes[0].pid, std::process::id());
    drop(held);
    assert_eq!(t.snapshot_at(7).leases.len(), 0);
}
