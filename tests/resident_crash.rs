//! Eviction under SIGKILL: a process killed at every labelled step of a transfer (the
//! acquire that revokes a victim) or of a revoked resident's release leaves the pool
//! exact after reaping: no unit leaked, none given back twice, the capacity never
//! exceeded.
#![cfg(feature = "crash-points")]
mod common;

use std::time::Duration;

use common::{Seg, fork_child, wait};
use fairshm::{Config, PoolConfig, Request, Table};

const CAP: u32 = 2;

fn residents() -> Config {
    Config::with_pools(vec![PoolConfig::new("residents", CAP).evicting()])
}

/// After the child is gone and reaped: the parent's revoked leases are released, and
/// then the pool counts exactly the parent's remaining ones, `check` is clean, and
/// the rest of the capacity (no more) can be taken.
fn assert_exact(t: &Table, mine: Vec<fairshm::Lease<'_>>, what: &str) {
    let (gone, kept): (Vec<_>, Vec<_>) = mine.into_iter().partition(|l| l.is_revoked().unwrap());
    for l in gone {
        l.release().unwrap();
    }
    let snap = t.snapshot();
    let pool = snap.pool("residents").unwrap();
    assert_eq!(
        pool.in_use,
        kept.len() as u32,
        "{what}: in_use {:?}",
        snap.leases
    );
    assert_eq!(
        snap.leases.len(),
        kept.len(),
        "{what}: leases {:?}",
        snap.leases
    );
    assert!(t.check().unwrap().is_empty(), "{what}: {:?}", t.check());
    let free = CAP - kept.len() as u32;
    let rest = Request::new("residents", "probe").units(free);
    if free > 0 {
        let got = t.try_acquire(&rest).unwrap();
        assert!(
            got.is_ok(),
            "{what}: {free} free units not grantable: {:?}",
            got.err()
        );
        assert_eq!(
            t.snapshot().pool("residents").unwrap().in_use,
            CAP,
            "{what}"
        );
    }
    drop(kept);
}

/// Two residents of `tenant`, granted at 5 and 6 ms (the first is the idler): the
/// pool full.
fn two_residents<'t>(t: &'t Table, tenant: &str) -> Vec<fairshm::Lease<'t>> {
    (0..2)
        .map(|i| {
            t.try_acquire_at(&Request::new("residents", tenant), 5 + i)
                .unwrap()
                .unwrap()
        })
        .collect()
}

fn reaped(t: &Table, code: i32, what: &str) {
    assert!(code == 0 || code == 128 + 9, "{what}: child exited {code}");
    t.reap_dead().unwrap();
    common::wait_until(
        None,
        "the child's slot to be reaped",
        Duration::from_millis(1),
        || t.snapshot().processes.len() == 1,
    );
}

/// The revoker dies: the parent's two residents fill the pool (it is past its share
/// once the child asks), the child, under its share, evicts one.
#[test]
fn a_process_killed_while_evicting_loses_nothing() {
    let labels = fairshm::crash::LABELS
        .iter()
        .chain(fairshm::crash::RESIDENT_LABELS)
        .filter(|l| !l.starts_with("register") && **l != "release.closed");
    let mut crashed = Vec::new();
    for &label in labels.chain(["release.closed"].iter()) {
        let seg = Seg::new("rcrash-evict");
        let t = seg.create(&residents());
        let mine = two_residents(&t, "parent");
        let name = seg.name.clone();
        let child = fork_child(move || {
            fairshm::crash::arm(label, 0);
            let t = Table::open(&name).unwrap();
            let l = t
                .try_acquire_at(&Request::new("residents", "child"), 10)
                .unwrap()
                .expect("an evicting spawn");
            l.release_at(11).unwrap();
            0
        });
        let code = wait(child);
        reaped(&t, code, label);
        if code == 137 {
            crashed.push(label);
        }
        // Exactly one of the parent's residents was revoked, if the child got as far
        // as the revocation; the permit went to the child, which is gone.
        let revoked = mine.iter().filter(|l| l.is_revoked().unwrap()).count();
        assert!(revoked <= 1, "{label}: {revoked} revoked");
        assert_exact(&t, mine, &format!("revoker killed at {label}"));
    }
    for label in [
        "acquire.published",
        "evict.held_applied",
        "evict.revoked",
        "release.closed",
    ] {
        assert!(
            crashed.contains(&label),
            "never crashed at {label}: {crashed:?}"
        );
    }
}

/// The victim dies while it releases its revoked resident.
#[test]
fn a_victim_killed_while_releasing_its_revoked_resident_loses_nothing() {
    let mut crashed = Vec::new();
    for label in [
        "release.published",
        "release.closed",
        "release.pool_applied",
        "release.held_applied",
    ] {
        let seg = Seg::new("rcrash-victim");
        let t = seg.create(&residents());
        let name = seg.name.clone();
        let child = fork_child(move || {
            let t = Table::open(&name).unwrap();
            let mine = two_residents(&t, "victim");
            if !mine[0].wait_revoked(Duration::from_secs(20)).unwrap() {
                return 3;
            }
            fairshm::crash::arm(label, 0);
            let mut mine = mine.into_iter();
            mine.next().unwrap().release().unwrap();
            // Not armed for this one any more if the first crashed.
            drop(mine);
            0
        });
        // Killed and reaped if the test fails before it exits (it would wait 20 s).
        let mut kids = common::Children(vec![child]);
        common::wait_until(
            Some(child),
            "the victim's residents",
            Duration::from_millis(1),
            || t.snapshot().pool("residents").unwrap().in_use == CAP,
        );
        let l = t
            .try_acquire_at(&Request::new("residents", "parent"), 10)
            .unwrap()
            .expect("an evicting spawn");
        let code = wait(child);
        kids.0.clear(); // reaped
        reaped(&t, code, label);
        if code == 137 {
            crashed.push(label);
        }
        assert!(!l.is_revoked().unwrap(), "{label}");
        assert_exact(&t, vec![l], &format!("victim killed at {label}"));
    }
    assert_eq!(crashed.len(), 4, "crashed at {crashed:?}");
}

/// The victim's process is killed with its residents idle; before anyone reaps it, an
/// acquire evicts one of them (a dead owner's resident is as evictable as any); the
/// reap then gives back the rest and the revoked one's held unit only.
#[test]
fn a_dead_owners_resident_is_evicted_then_reaped_exactly() {
    let seg = Seg::new("rcrash-dead");
    let t = seg.create(&residents());
    let name = seg.name.clone();
    let child = fork_child(move || {
        let t = Table::open(&name).unwrap();
        let mine = two_residents(&t, "victim");
        std::thread::sleep(Duration::from_secs(30));
        drop(mine);
        0
    });
    let mut kids = common::Children(vec![child]);
    common::wait_until(
        Some(child),
        "the victim's residents",
        Duration::from_millis(1),
        || t.snapshot().pool("residents").unwrap().in_use == CAP,
    );
    // Stop it first, so that no anchor of ours reaps it before the eviction.
    nix::sys::signal::kill(child, nix::sys::signal::SIGSTOP).unwrap();
    let l = t
        .try_acquire_at(&Request::new("residents", "parent"), 10)
        .unwrap()
        .expect("an evicting spawn");
    assert_eq!(t.snapshot().pool("residents").unwrap().in_use, CAP);
    let code = kids.kill_all()[0];
    assert_eq!(code, 128 + 9);
    reaped(&t, code, "dead owner");
    assert!(!l.is_revoked().unwrap());
    assert_exact(&t, vec![l], "a dead owner's resident evicted, then reaped");
}
