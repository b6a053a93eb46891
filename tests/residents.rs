//! Residents (seed 000): an `evict` pool revokes the idlest resident instead of
//! refusing: the over-share asker's own, else the furthest-over-share tenant's; never
//! one in a call; nothing while there is room; a refusal only after a second with
//! nothing evictable. The victim learns of it and releases.
mod common;

use std::time::{Duration, Instant};

use common::{Seg, fork_child, wait};
use fairshm::{Config, Error, PoolConfig, Reason, Request, Table};

fn residents(cap: u32) -> Config {
    Config::with_pools(vec![PoolConfig::new("residents", cap).evicting()])
}

/// A residents pool of 8 (floor 1) whose blocking spawns wait up to `wait_ms` for
/// something to evict.
fn patient_residents(wait_ms: u32) -> PoolConfig {
    PoolConfig::new("residents", 8)
        .evicting()
        .evict_wait_ms(wait_ms)
}

fn spawn<'t>(t: &'t Table, tenant: &str, now: u64) -> fairshm::Lease<'t> {
    t.try_acquire_at(&Request::new("residents", tenant), now)
        .unwrap()
        .unwrap_or_else(|r| panic!("{tenant} at {now}: {r}"))
}

/// [`spawn`] at the monotonic clock's `now`.
fn spawn_now<'t>(t: &'t Table, tenant: &str) -> fairshm::Lease<'t> {
    t.try_acquire(&Request::new("residents", tenant))
        .unwrap()
        .unwrap_or_else(|r| panic!("{tenant}: {r}"))
}

fn revoked(leases: &[fairshm::Lease<'_>]) -> Vec<bool> {
    leases.iter().map(|l| l.is_revoked().unwrap()).collect()
}

#[test]
fn an_over_share_asker_evicts_its_own_idlest() {
    let seg = Seg::new("res-own");
    let t = seg.create(&residents(4));
    let a: Vec<_> = [10, 20, 30].iter().map(|&n| spawn(&t, "a", n)).collect();
    let b = spawn(&t, "b", 35);
    // Full: a holds 3, past its share of 2; its next spawn puts its own idlest to sleep.
    let new = spawn(&t, "a", 40);
    assert_eq!(revoked(&a), [true, false, false]);
    assert!(!b.is_revoked().unwrap());
    assert!(!new.is_revoked().unwrap());
    let snap = t.snapshot_at(41);
    let pool = snap.pool("residents").unwrap();
    assert_eq!(pool.in_use, 4, "the pool never exceeds its capacity");
    let res = pool.residents.as_ref().unwrap();
    assert_eq!((res.idle, res.revoked, res.evictions), (4, 1, 1));
    // The revoked resident still counts in its tenant's held until it is released.
    assert_eq!(snap.held("residents", "a"), 4);
    assert!(t.check().unwrap().is_empty(), "{:?}", t.check());
    let mut a = a.into_iter();
    a.next().unwrap().release_at(42).unwrap();
    let snap = t.snapshot_at(43);
    assert_eq!(snap.pool("residents").unwrap().in_use, 4);
    assert_eq!(snap.held("residents", "a"), 3);
    assert!(t.check().unwrap().is_empty(), "{:?}", t.check());
}

#[test]
fn an_under_share_asker_evicts_the_idlest_of_the_furthest_over_share() {
    let seg = Seg::new("res-furthest");
    let t = seg.create(&residents(6));
    let b_old = spawn(&t, "b", 5); // the idlest of all, but b is only at its share
    let a: Vec<_> = [10, 20, 30, 40]
        .iter()
        .map(|&n| spawn(&t, "a", n))
        .collect();
    let b_new = spawn(&t, "b", 50);
    // c is under its share (2 of 6 among three): a is 2 past its share, b at it.
    let c = spawn(&t, "c", 60);
    assert_eq!(revoked(&a), [true, false, false, false]);
    assert!(!b_old.is_revoked().unwrap() && !b_new.is_revoked().unwrap());
    assert!(!c.is_revoked().unwrap());
    let snap = t.snapshot_at(61);
    assert_eq!(snap.pool("residents").unwrap().in_use, 6);
    let tenant = |n: &str| {
        snap.pool("residents")
            .unwrap()
            .tenants
            .iter()
            .find(|x| x.name == n)
            .unwrap()
            .clone()
    };
    assert_eq!((tenant("a").revoked, tenant("c").evictions), (1, 1));
    assert_eq!((tenant("b").revoked, tenant("a").evictions), (0, 0));
}

#[test]
fn a_resident_in_a_call_is_never_the_victim() {
    let seg = Seg::new("res-call");
    let t = seg.create(&residents(3));
    let a: Vec<_> = [10, 20].iter().map(|&n| spawn(&t, "a", n)).collect();
    let b = spawn(&t, "b", 25);
    a[0].begin_call_at(26).unwrap(); // the idlest, busy now (and so no longer idlest)
    a[1].begin_call_at(27).unwrap();
    a[1].end_call_at(28).unwrap();
    // a (past its share) evicts its own idlest that is not in a call: a[1].
    let _n = spawn(&t, "a", 30);
    assert_eq!(revoked(&a), [false, true]);
    // All of a's idle ones gone or busy, a asks again: nothing of its own to evict.
    let r = t
        .try_acquire_at(&Request::new("residents", "a"), 31)
        .unwrap();
    let _n2 = match r {
        Ok(l) => {
            // Its fresh one (granted at 30) was idle: that one went to sleep.
            assert!(_n.is_revoked().unwrap());
            l
        }
        Err(e) => panic!("{e}"),
    };
    _n2.begin_call_at(32).unwrap();
    let r = t
        .try_acquire_at(&Request::new("residents", "a"), 33)
        .unwrap()
        .unwrap_err();
    assert_eq!(r.reason, Reason::TooManyResidents, "{r}");
    assert!(r.to_string().contains("in a call"), "{r}");
    assert!(
        !r.to_string().contains("  "),
        "one space between words: {r}"
    );
    assert!(!b.is_revoked().unwrap(), "a past its share never takes b's");
    // Calls nest: two begins need two ends before the resident is evictable.
    a[0].begin_call_at(34).unwrap();
    a[0].end_call_at(35).unwrap();
    let r = t
        .try_acquire_at(&Request::new("residents", "a"), 36)
        .unwrap()
        .unwrap_err();
    assert_eq!(r.reason, Reason::TooManyResidents);
    a[0].end_call_at(37).unwrap();
    let _n3 = spawn(&t, "a", 38);
    assert!(a[0].is_revoked().unwrap());
    // An end without a begin is an error that names it.
    match a[1].end_call_at(39) {
        Err(Error::NotResident { why, .. }) => assert!(why.contains("end_call"), "{why}"),
        other => panic!("{other:?}"),
    }
}

/// What ends a `too_many_residents` refusal is a resident's call ending, which how long
/// residents stay does not tell: its hint is not taken from the holders' residencies
/// (here 60 s of b's), as a `pool_full` hint is from their holds.
#[test]
fn a_too_many_residents_hint_is_not_a_residency_long() {
    let seg = Seg::new("res-hint");
    let t = seg.create(&residents(2));
    spawn(&t, "b", 1_000).release_at(61_000).unwrap();
    spawn(&t, "a", 1_000).release_at(1_010).unwrap();
    let b = spawn(&t, "b", 70_000);
    let a = spawn(&t, "a", 70_000);
    b.begin_call_at(70_001).unwrap();
    a.begin_call_at(70_001).unwrap();
    // A window later, so the scan this refusal runs first sees both holders.
    let r = t
        .try_acquire_at(&Request::new("residents", "a"), 71_100)
        .unwrap()
        .unwrap_err();
    assert_eq!(r.reason, Reason::TooManyResidents, "{r}");
    assert!(matches!(r.retry_after_ms, Some(1..=10)), "{r}");
    b.end_call_at(71_101).unwrap();
    a.end_call_at(71_101).unwrap();
}

#[test]
fn nothing_is_evicted_while_the_pool_has_room() {
    let seg = Seg::new("res-room");
    let t = seg.create(&residents(4));
    let a: Vec<_> = [10, 20].iter().map(|&n| spawn(&t, "a", n)).collect();
    let b = spawn(&t, "b", 30);
    let c = spawn(&t, "c", 40);
    assert_eq!(revoked(&a), [false, false]);
    assert!(!b.is_revoked().unwrap() && !c.is_revoked().unwrap());
    let snap = t.snapshot_at(41);
    let pool = snap.pool("residents").unwrap();
    assert_eq!(pool.in_use, 4);
    assert_eq!(pool.residents.as_ref().unwrap().evictions, 0);
}

#[test]
fn a_pool_that_does_not_evict_refuses_and_has_no_calls() {
    let seg = Seg::new("res-plain");
    let t = seg.create(&Config::with_pools(vec![
        PoolConfig::new("requests", 1),
        PoolConfig::new("residents", 1).evicting(),
    ]));
    let l = t
        .try_acquire_at(&Request::new("requests", "a"), 10)
        .unwrap()
        .unwrap();
    let r = t
        .try_acquire_at(&Request::new("requests", "b"), 11)
        .unwrap()
        .unwrap_err();
    assert_eq!(r.reason, Reason::PoolFull);
    assert!(matches!(l.begin_call(), Err(Error::NotResident { .. })));
    assert!(t.snapshot().pool("requests").unwrap().residents.is_none());
}

#[test]
fn a_full_pool_of_busy_residents_refuses_after_one_second() {
    let seg = Seg::new("res-second");
    let t = seg.create(&residents(2));
    let a: Vec<_> = (0..2).map(|i| spawn(&t, "a", 10 + i)).collect();
    for l in &a {
        l.begin_call().unwrap();
    }
    let start = Instant::now();
    let r = t
        .acquire(&Request::new("residents", "b"), Duration::from_secs(5))
        .unwrap()
        .unwrap_err();
    let waited = start.elapsed();
    assert_eq!(r.reason, Reason::TooManyResidents, "{r}");
    assert!(
        waited >= Duration::from_millis(1000) && waited < Duration::from_millis(1800),
        "waited {waited:?}, not one second"
    );
    assert!(r.waited_ms.is_some_and(|w| w >= 1000), "{r:?}");
    let said = format!("nothing became evictable in {} ms", r.waited_ms.unwrap());
    assert!(r.explanation().starts_with(&said), "{r}");
    assert_eq!(revoked(&a), [false, false]);
}

#[test]
fn a_resident_that_ends_its_call_within_the_second_is_evicted() {
    let seg = Seg::new("res-ends");
    let t = seg.create(&residents(2));
    let a: Vec<_> = (0..2).map(|i| spawn(&t, "a", 10 + i)).collect();
    for l in &a {
        l.begin_call().unwrap();
    }
    std::thread::scope(|s| {
        let ender = s.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            a[1].end_call().unwrap();
        });
        let start = Instant::now();
        let got = t
            .acquire(&Request::new("residents", "b"), Duration::from_secs(5))
            .unwrap();
        let waited = start.elapsed();
        ender.join().unwrap();
        let lease = got.unwrap_or_else(|r| panic!("{r}"));
        assert!(
            waited >= Duration::from_millis(300) && waited < Duration::from_millis(1000),
            "waited {waited:?}"
        );
        assert_eq!(revoked(&a), [false, true]);
        drop(lease);
    });
}

#[test]
fn the_victim_learns_of_it_and_releases() {
    let seg = Seg::new("res-victim");
    let t = seg.create(&residents(1));
    let a = spawn(&t, "a", 10);
    assert!(!a.wait_revoked(Duration::from_millis(20)).unwrap());
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let start = Instant::now();
            let woke = a.wait_revoked(Duration::from_secs(10)).unwrap();
            (woke, start.elapsed())
        });
        std::thread::sleep(Duration::from_millis(50));
        let b = spawn(&t, "b", 20);
        let (woke, after) = waiter.join().unwrap();
        assert!(woke, "woken by the revocation");
        assert!(after < Duration::from_secs(5), "{after:?}");
        assert!(matches!(a.begin_call(), Err(Error::Revoked { .. })));
        assert_eq!(t.revoked_leases(), vec![a.id()]);
        assert_eq!(t.snapshot().pool("residents").unwrap().in_use, 1);
        drop(b);
    });
    let id = a.id();
    a.release().unwrap();
    // Its permit went to b, which released it: the pool is empty and exact.
    let snap = t.snapshot();
    assert_eq!(snap.pool("residents").unwrap().in_use, 0);
    assert_eq!(snap.held("residents", "a"), 0);
    assert!(t.revoked_leases().is_empty());
    assert!(matches!(
        t.release_id(id),
        Err(Error::AlreadyReleased { .. })
    ));
    assert!(t.check().unwrap().is_empty(), "{:?}", t.check());
}

/// Forked workers of several tenants spawn, call, and release revoked residents as fast
/// as they can, while the parent samples the pool: never over its capacity, and exact
/// once they are done.
#[test]
fn concurrent_spawns_never_exceed_capacity() {
    const CAP: u32 = 6;
    const WORKERS: usize = 4;
    let seg = Seg::new("res-fork");
    let t = seg.create(&residents(CAP));
    let mut kids = common::Children(Vec::new());
    for w in 0..WORKERS {
        let name = seg.name.clone();
        kids.0.push(fork_child(move || {
            let t = Table::open(&name).unwrap();
            let tenant = format!("t{}", w % 3);
            let mut mine: Vec<fairshm::Lease<'_>> = Vec::new();
            let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ w as u64;
            let end = Instant::now() + Duration::from_millis(1500);
            while Instant::now() < end {
                // Put revoked objects to sleep.
                let (gone, kept): (Vec<_>, Vec<_>) =
                    mine.drain(..).partition(|l| l.is_revoked().unwrap());
                for l in gone {
                    l.release().unwrap();
                }
                mine = kept;
                match common::xorshift(&mut x) % 4 {
                    0 | 1 => {
                        if let Ok(Ok(l)) = t.try_acquire(&Request::new("residents", &tenant)) {
                            mine.push(l);
                        }
                    }
                    2 if !mine.is_empty() => {
                        let i = common::xorshift(&mut x) as usize % mine.len();
                        if mine[i].begin_call().is_ok() {
                            mine[i].end_call().unwrap();
                        }
                    }
                    _ if mine.len() > 3 => {
                        mine.swap_remove(0).release().unwrap();
                    }
                    _ => {}
                }
            }
            drop(mine);
            0
        }));
    }
    let mut max_seen = 0;
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(1600) {
        let p = t.snapshot();
        let in_use = p.pool("residents").unwrap().in_use;
        assert!(in_use <= CAP, "in_use {in_use} over capacity {CAP}");
        max_seen = max_seen.max(in_use);
        std::thread::sleep(Duration::from_micros(300));
    }
    let codes: Vec<i32> = kids.0.drain(..).map(wait).collect();
    assert!(codes.iter().all(|&c| c == 0), "workers exited {codes:?}");
    assert_eq!(max_seen, CAP, "the workers kept the pool full");
    let snap = t.snapshot();
    let pool = snap.pool("residents").unwrap();
    assert_eq!(pool.in_use, 0, "{:?}", snap.leases);
    assert!(
        pool.residents.as_ref().unwrap().evictions > 0,
        "the drill evicted nothing"
    );
    assert!(t.check().unwrap().is_empty(), "{:?}", t.check());
}

#[test]
fn the_decision_log_replays_evictions_and_too_many_residents() {
    let seg = Seg::new("res-log");
    let t = seg.create(&residents(2));
    t.engine().set_decision_log(true);
    let a: Vec<_> = (0..2).map(|i| spawn(&t, "a", 10 + i)).collect();
    let b = spawn(&t, "b", 20); // the rule refuses pool_full; b evicts a[0]
    b.begin_call_at(21).unwrap();
    a[1].begin_call_at(22).unwrap();
    let r = t
        .try_acquire_at(&Request::new("residents", "c"), 23)
        .unwrap()
        .unwrap_err();
    assert_eq!(r.reason, Reason::TooManyResidents);
    assert!(a[0].is_revoked().unwrap());
    let (log, skipped) = fairshm::decisions::read_all(t.region());
    assert_eq!(skipped, 0);
    let outcomes: Vec<u32> = log.iter().map(|l| l.entry.outcome).collect();
    assert_eq!(outcomes, [0, 0, 0, 10]);
    assert!(
        log.iter()
            .all(|l| l.entry.policy == fairshm::decisions::POLICY_FAIR_SHARE_EVICT)
    );
    assert!(
        fairshm::decisions::replay(&log).is_empty(),
        "{:?}",
        fairshm::decisions::replay(&log)
    );
    // A refusal logged for the rule's own reason replays too; an outcome the rule could
    // not have led to does not.
    let mut bad = log.clone();
    bad[3].entry.outcome = 1;
    assert_eq!(
        fairshm::decisions::replay(&bad).len(),
        0,
        "pool_full is the rule's own answer"
    );
    bad[2].entry.outcome = 2;
    assert_eq!(fairshm::decisions::replay(&bad).len(), 1);
}

/// A reap that gives back only a revoked resident returns no pool unit (that unit is
/// its revoker's), but its tenant now holds one less, which can admit that tenant's
/// waiter where it was past its share: the reap wakes the pool's waiters for it, as
/// the owner's own release of a revoked resident does. Pool of 8, floor 1.
#[test]
fn reaping_a_revoked_resident_wakes_its_tenants_waiter() {
    let seg = Seg::new("res-reap-wake");
    // A window of 3 s: a waiter refused with nothing to evict also wakes at the pool's
    // next recount of the active set, a window after the last; the reap's wake comes
    // long before that.
    let cfg = Config::with_pools(vec![patient_residents(10_000).window_ms(3_000)]);
    let t = seg.create(&cfg);
    // Only a wake ends the waiter's sleep early: its own backup sweep is far off.
    t.set_sweep_interval(Duration::from_secs(60));
    let name = seg.name.clone();
    // The child's resident of "v" is the one that gets revoked (the idlest, not in a
    // call); the child stays alive until killed.
    let mut children = common::Children(vec![fork_child(move || {
        let t = Table::open(&name).unwrap();
        let l = t
            .try_acquire(&Request::new("residents", "v"))
            .unwrap()
            .unwrap();
        std::mem::forget(l);
        std::thread::sleep(Duration::from_secs(30));
        0
    })]);
    let child = children.0[0];
    common::wait_until(
        Some(child),
        "the child's resident",
        Duration::from_millis(1),
        || t.snapshot().held("residents", "v") == 1,
    );
    let get = |tenant: &str| spawn_now(&t, tenant);
    let v: Vec<_> = (0..3).map(|_| get("v")).collect();
    for l in &v {
        l.begin_call().unwrap();
    }
    let w: Vec<_> = (0..3).map(|_| get("w")).collect();
    let x1 = get("x");
    // Full: v 4, w 3, x 1 of a share of 2 each. x, under it, evicts the idlest of v,
    // the furthest over: the child's.
    let x2 = get("x");
    assert_eq!(revoked(&v), [false; 3]);
    let snap = t.snapshot();
    assert_eq!(snap.pool("residents").unwrap().in_use, 8);
    assert_eq!(snap.held("residents", "v"), 4, "the revoked one counts");
    // w leaves: once out of the window, v and x share 4 each; x takes two more.
    drop(w);
    std::thread::sleep(Duration::from_millis(3_100));
    let x34 = [get("x"), get("x")];
    assert_eq!(t.snapshot().pool("residents").unwrap().in_use, 7);
    std::thread::scope(|s| {
        // v holds its share of 4 (its revoked one counted): past it, refused at
        // in_use 7 (8 less the floor), with nothing of its own to evict.
        let waiter = s.spawn(|| {
            let got = t.acquire(&Request::new("residents", "v"), Duration::from_secs(10));
            (got.map(|r| r.is_ok()), Instant::now())
        });
        common::wait_until(Some(child), "v's waiter", Duration::from_millis(1), || {
            t.snapshot()
                .pool("residents")
                .is_some_and(|p| p.waiters > 0)
        });
        std::thread::sleep(Duration::from_millis(50));
        let killed = Instant::now();
        assert_eq!(children.kill_all(), [128 + 9]);
        // The parent's anchor reaps the child: v holds 3, under its share, and 7 < 8.
        let (granted, at) = waiter.join().unwrap();
        assert!(granted.unwrap(), "v's waiter granted");
        let after = at.duration_since(killed);
        assert!(
            after < Duration::from_millis(1_500),
            "woken {after:?} after the death, not by the reap"
        );
    });
    assert!(t.check().unwrap().is_empty(), "{:?}", t.check());
    drop((x1, x2, x34, v));
}

/// A spawn past its share with nothing of its own to evict (all in a call) waits; when
/// another tenant leaves the active set and the shares grow, it is admitted without an
/// eviction, though nothing is released to wake it: it sleeps no longer than the
/// pool's next recount of the set. Pool of 8, floor 1.
#[test]
fn a_spawn_with_nothing_to_evict_is_admitted_when_a_tenant_leaves() {
    let seg = Seg::new("res-depart");
    let cfg = Config::with_pools(vec![patient_residents(10_000)]);
    let t = seg.create(&cfg);
    t.set_sweep_interval(Duration::from_secs(3600));
    let busy = |l: &fairshm::Lease<'_>| l.begin_call().unwrap();
    let held = common::admitted_when_b_leaves(&t, "residents", busy, Reason::TooManyResidents);
    assert_eq!(revoked(&held), [false; 8], "nothing evicted");
    drop(held);
}

/// A resident just granted is idle, so evictable: the grant wakes the pool's waiters as
/// a call ending does, for an acquire waiting for something to evict may have scanned
/// the residents while this one was still being granted (`PENDING`, which no scan
/// takes), found nothing and gone to sleep. A grant from a free unit and a grant by
/// eviction each wake one; with nobody waiting, a grant leaves `wake` alone.
#[test]
fn a_resident_granted_while_an_acquire_waits_wakes_it() {
    use fairshm::region::Region;
    use std::sync::atomic::Ordering::SeqCst;
    let seg = Seg::new("res-grant-wake");
    let t = seg.create(&residents(2));
    let pool = t.region().pool(0);
    let a0 = spawn(&t, "a", 10);
    assert_eq!(pool.wake.load(SeqCst), 0, "nobody waits: no wake");
    // A waiter announced, as `blocking` does before it sleeps.
    pool.waiters.fetch_add(1, SeqCst);
    let a1 = spawn(&t, "a", 20); // the pool's last free unit
    let after_free = pool.wake.load(SeqCst);
    assert_ne!(after_free, 0, "a grant from a free unit woke nobody");
    let b = spawn(&t, "b", 30); // evicts a's idlest
    let a = [a0, a1];
    assert_eq!(revoked(&a), [true, false]);
    assert_ne!(
        pool.wake.load(SeqCst),
        after_free,
        "a grant by eviction woke nobody"
    );
    pool.waiters.fetch_sub(1, SeqCst);
    drop(b);
}

/// A resident whose call ends wakes a waiting spawn only if it may be that spawn's
/// victim: its tenant is at or past its share. One of a tenant under its share is
/// nobody's victim, and the spawn woken would scan, find nothing and pass the wake on.
/// (A grant wakes either way: `a_resident_granted_while_an_acquire_waits_wakes_it`.)
/// Pool of 8 (floor 1); "a" and "b" active, shares of 4; a waiter announced, as
/// `blocking` does before it sleeps.
#[test]
fn a_call_ended_by_a_tenant_under_its_share_wakes_nobody() {
    use fairshm::region::Region;
    use std::sync::atomic::Ordering::SeqCst;
    let seg = Seg::new("res-idle-under");
    let t = seg.create(&Config::with_pools(vec![patient_residents(1_000)]));
    let pool = t.region().pool(0);
    let b: Vec<_> = (0..4).map(|i| spawn(&t, "b", 10 + i)).collect();
    let a: Vec<_> = (0..3).map(|i| spawn(&t, "a", 20 + i)).collect(); // 3 of its 4
    pool.waiters.fetch_add(1, SeqCst);
    let wake = || pool.wake.load(SeqCst);
    let before = wake();
    a[0].begin_call().unwrap();
    a[0].end_call().unwrap();
    assert_eq!(wake(), before, "a call ended under its share woke a spawn");
    // "b", at its share: its residents are victims of an under-share spawn ("a"'s).
    b[0].begin_call().unwrap();
    b[0].end_call().unwrap();
    let after_b = wake();
    assert_ne!(after_b, before, "a call ended at the share woke nobody");
    let a3 = spawn(&t, "a", 30); // "a" at its share: its residents are victims now
    let after_grant = wake();
    assert_ne!(after_grant, after_b, "a grant woke nobody");
    a[1].begin_call().unwrap();
    a[1].end_call().unwrap();
    assert_ne!(wake(), after_grant, "a call ended at the share woke nobody");
    pool.waiters.fetch_sub(1, SeqCst);
    drop((b, a, a3));
}

/// A tenant new to an `evict` pool's active set lowers every share, so a spawn asleep
/// with nothing to evict may evict now, though nothing came free: the arrival wakes the
/// spawns, also when it is itself refused (a grant wakes for itself). "a" holds 3 idle
/// residents of 8 and "b" 5 in calls: "a", under its share of 4, has no victim. "c"
/// arrives asking 2 units, which no idle resident has, and is refused; with 3 active,
/// "a" is past its share (3 of 8/3) and evicts its own idlest. A refusal of a tenant
/// already active, and an arrival in a pool that does not evict, wake nobody.
#[test]
fn a_tenant_that_arrives_in_an_evict_pool_wakes_the_spawns_even_refused() {
    use fairshm::region::Region;
    use std::sync::atomic::Ordering::SeqCst;
    let seg = Seg::new("res-arrival");
    let cfg = Config::with_pools(vec![
        patient_residents(1_000),
        PoolConfig::new("requests", 2),
    ]);
    let t = seg.create(&cfg);
    // "b" first: alone, its share is the pool (past it, "b" would evict its own).
    let b: Vec<_> = (0..5).map(|i| spawn(&t, "b", 10 + i)).collect();
    for l in &b {
        l.begin_call().unwrap();
    }
    let a: Vec<_> = (0..3).map(|i| spawn(&t, "a", 20 + i)).collect();
    let refused = |tenant: &str, units: u32, now: u64| {
        let req = Request::new("residents", tenant).units(units);
        let got = t.try_acquire_at(&req, now).unwrap();
        assert_eq!(
            got.as_ref().err().map(|r| r.reason),
            Some(Reason::TooManyResidents),
            "{tenant} asking {units} at {now}"
        );
    };
    refused("a", 1, 30); // under its share, and "b"'s residents are all in calls
    let (pool, requests) = (t.region().pool(0), t.region().pool(1));
    pool.waiters.fetch_add(1, SeqCst);
    requests.waiters.fetch_add(1, SeqCst);
    let wake = |p: &fairshm::layout::PoolRec| p.wake.load(SeqCst);
    let before = wake(pool);
    refused("b", 1, 31); // active already
    assert_eq!(
        wake(pool),
        before,
        "a refusal of an active tenant woke the spawns"
    );
    refused("c", 2, 32); // an arrival: every share falls
    let after = wake(pool);
    assert_ne!(after, before, "a refused arrival woke no spawn");
    refused("c", 2, 33); // active now
    assert_eq!(
        wake(pool),
        after,
        "a second refusal of the arrival woke the spawns"
    );
    // What the wake is for: "a", past its share now, evicts its own idlest.
    let got = spawn(&t, "a", 34);
    assert_eq!(revoked(&a), [true, false, false]);
    let before_requests = wake(requests);
    let r = t
        .try_acquire_at(&Request::new("requests", "d"), 35)
        .unwrap();
    assert!(r.is_ok(), "the requests pool has room");
    assert_eq!(
        wake(requests),
        before_requests,
        "an arrival in a pool that does not evict woke its waiters"
    );
    pool.waiters.fetch_sub(1, SeqCst);
    requests.waiters.fetch_sub(1, SeqCst);
    drop((a, b, got, r));
}

/// The same through a real blocked spawn: asleep with nothing to evict, in a pool whose
/// active set is not recounted for 20 s (its window) and whose spawns wait up to 10 s,
/// it is served as soon as a refused tenant's arrival lets it evict (before, only at
/// its deadline).
#[test]
fn a_spawn_asleep_is_served_when_a_refused_arrival_lets_it_evict() {
    let seg = Seg::new("res-arrival-wait");
    let cfg = Config::with_pools(vec![
        PoolConfig::new("residents", 8)
            .evicting()
            .evict_wait_ms(10_000)
            .window_ms(20_000),
    ]);
    let t = seg.create(&cfg);
    t.set_sweep_interval(Duration::from_secs(3600));
    let take = |tenant: &str| spawn_now(&t, tenant);
    let b: Vec<_> = (0..5).map(|_| take("b")).collect();
    for l in &b {
        l.begin_call().unwrap();
    }
    let a: Vec<_> = (0..3).map(|_| take("a")).collect();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let start = Instant::now();
            let got = t
                .acquire(&Request::new("residents", "a"), Duration::from_secs(10))
                .unwrap();
            (got.map(|l| l.into_id()), start.elapsed())
        });
        // Announced, tried again and asleep (no release or arrival comes meanwhile).
        let deadline = Instant::now() + Duration::from_secs(5);
        while t.snapshot().pool("residents").unwrap().waiters == 0 {
            assert!(Instant::now() < deadline, "the spawn never waited");
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(50));
        let asked = Instant::now();
        let r = t
            .try_acquire(&Request::new("residents", "c").units(2))
            .unwrap();
        assert_eq!(r.err().map(|r| r.reason), Some(Reason::TooManyResidents));
        let (got, waited) = waiter.join().unwrap();
        let id = got.unwrap_or_else(|r| panic!("the spawn was refused: {r}"));
        eprintln!(
            "res-arrival-wait: served {:?} after the arrival",
            asked.elapsed()
        );
        assert!(
            waited < Duration::from_secs(5),
            "the spawn waited {waited:?}: the arrival did not wake it"
        );
        t.release_id(id).unwrap();
    });
    assert_eq!(revoked(&a), [true, false, false]);
    drop((a, b));
}

/// "t" holds 4 residents of 8, every one in a call, at its share of 4, and 8 spawns of
/// its wait for one of its own to come idle; "u", at its share too, ends a call on one
/// of its 4 again and again. "t" may evict only its own, so none of those ends can
/// serve it: the waiter each end wakes, refused again, passes the wake to no waiter of
/// its own tenant asking as many units, whose scan would find what its found
/// (`waiting::pass_bits`). Before, it woke the next, which woke the next: all 8 for
/// every call "u" ended (360 wakes in 40 turns; now 40, the ends' own, and any of the
/// active set's recounts that falls in the test). ("u" under its share would wake
/// nobody: the test above.)
#[test]
fn a_busy_tenants_spawns_do_not_all_wake_for_another_tenants_idle_resident() {
    const WAITERS: usize = 8;
    const TURNS: usize = 40;
    let seg = Seg::new("res-herd");
    let cfg = Config::with_pools(vec![patient_residents(20_000)]);
    let t = seg.create(&cfg);
    t.set_sweep_interval(Duration::from_secs(3600));
    let mine: Vec<_> = (0..4).map(|i| spawn(&t, "t", 10 + i)).collect();
    for l in &mine {
        l.begin_call().unwrap();
    }
    let others: Vec<_> = (0..3).map(|i| spawn(&t, "u", 20 + i)).collect();
    for l in &others {
        l.begin_call().unwrap();
    }
    let theirs = spawn(&t, "u", 30);
    let req = Request::new("residents", "t");
    let body = || {
        for _ in 0..TURNS {
            theirs.begin_call().unwrap();
            theirs.end_call().unwrap();
            std::thread::sleep(Duration::from_millis(10));
        }
        mine
    };
    let let_go = |mine: Vec<fairshm::Lease<'_>>| {
        for l in &mine {
            l.end_call().unwrap();
        }
        drop(mine);
    };
    let (woke, served) = common::herd(&t, &req, "residents", WAITERS, body, let_go);
    eprintln!("res-herd: the spawns slept again {woke} times in {TURNS} turns");
    assert!(
        served,
        "a spawn was not served once its tenant's residents went"
    );
    drop((theirs, others));
    // The one each end wakes, and the active set's recounts (at most once a second
    // each, in turns of about half a second).
    assert!(
        woke < (TURNS + 3 * WAITERS) as u64,
        "the spawns woke {woke} times in {TURNS} turns"
    );
}
