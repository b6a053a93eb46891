//! A process SIGKILLed at every labelled step of acquire, release and registration in
//! turn: after `reap_dead`, every counter is exact (no leak, no double free).
#![cfg(feature = "crash-points")]
mod common;

use std::time::Duration;

use common::{Seg, fork_child, one_pool, wait};
use fairshm::{Request, Table};

const CAP: u32 = 4;

/// Checks the table holds exactly the parent's one permit, then that the whole
/// capacity can still be taken (nothing leaked) and no more (nothing double-freed).
fn assert_exact(t: &Table, what: &str) {
    let snap = t.snapshot_at(20);
    let pool = snap.pool("requests").unwrap();
    assert_eq!(pool.in_use, 1, "{what}: in_use");
    assert_eq!(snap.held("requests", "victim"), 0, "{what}: victim's held");
    assert_eq!(snap.held("requests", "other"), 1, "{what}: other's held");
    assert_eq!(snap.leases.len(), 1, "{what}: leases {:?}", snap.leases);
    // Everything else is free (nothing leaked): a fresh tenant, under its share, gets
    // the rest in one all-or-nothing grant...
    let rest = Request::new("requests", "probe").units(CAP - 1);
    let got = t.try_acquire_at(&rest, 21).unwrap();
    assert!(
        got.is_ok(),
        "{what}: {} free units not grantable: {:?}",
        CAP - 1,
        got.err()
    );
    // ...and then the pool is full (nothing freed twice).
    let r = t
        .try_acquire_at(&Request::new("requests", "probe2"), 21)
        .unwrap()
        .unwrap_err();
    assert_eq!(r.reason, fairshm::Reason::PoolFull, "{what}");
}

#[test]
fn a_process_killed_at_any_step_loses_nothing() {
    let mut crashed = std::collections::BTreeMap::new();
    for &label in fairshm::crash::LABELS {
        for skip in 0..2 {
            let seg = Seg::new("crash");
            let t = seg.create(&one_pool(CAP));
            let mine = t
                .try_acquire_at(&Request::new("requests", "other"), 5)
                .unwrap()
                .unwrap();
            let name = seg.name.clone();
            let child = fork_child(move || {
                fairshm::crash::arm(label, skip);
                let t = Table::open(&name).unwrap();
                for now in [10, 12] {
                    let req = Request::new("requests", "victim").units(2);
                    if let Ok(lease) = t.try_acquire_at(&req, now).unwrap() {
                        lease.release_at(now + 1).unwrap();
                    }
                }
                0
            });
            let code = wait(child);
            assert!(
                code == 0 || code == 128 + 9,
                "{label}/{skip}: child exited {code}"
            );
            // A killed child's slot is reaped (by our anchor, which watches it, or by
            // this call, whichever comes first); one that finished dropped its table,
            // which deregistered it.
            let reaped = t.reap_dead().unwrap();
            assert!(
                reaped.len() <= usize::from(code == 128 + 9),
                "{label}/{skip}"
            );
            common::wait_until(
                None,
                "the child's slot to be reaped",
                Duration::from_millis(1),
                || t.snapshot().processes.len() == 1,
            );
            if code == 128 + 9 {
                let snap = t.snapshot();
                let d = snap.deaths.iter().find(|d| d.pid == child.as_raw() as u32);
                assert!(d.is_some(), "{label}/{skip}: the death is recorded");
            }
            if code == 137 {
                *crashed.entry(label).or_insert(0) += 1;
            }
            assert_exact(&t, &format!("killed at {label} (skip {skip})"));
            drop(mine);
        }
    }
    for label in fairshm::crash::LABELS {
        assert!(
            crashed.contains_key(label),
            "never crashed at {label}: {crashed:?}"
        );
    }
}

#[test]
fn a_reused_pid_is_not_taken_for_the_dead_process() {
    let seg = Seg::new("pidreuse");
    let t = seg.create(&one_pool(CAP));
    let (pid, start) = fairshm::liveness::me();
    // A slot recorded with our pid but another start time: the process that owned it
    // is dead, and we (same pid) must not be taken for it.
    let fake = fairshm::liveness::register(t.region(), pid, start - 1, 1, false).unwrap();
    // Our first acquire registers us, and a registration reaps the dead first.
    let lease = t
        .try_acquire_at(&Request::new("requests", "live"), 5)
        .unwrap()
        .unwrap();
    assert!(t.reap_dead().unwrap().is_empty(), "reaped once, already");
    let snap = t.snapshot_at(6);
    let reaped: Vec<_> = snap.deaths.iter().map(|d| (d.slot, d.pid, d.how)).collect();
    assert_eq!(
        reaped,
        vec![(fake, pid, "register")],
        "the fake slot, not ours"
    );
    assert_eq!(snap.processes.len(), 1, "our own slot stays");
    assert_eq!(snap.processes[0].start_time, start);
    assert_eq!(
        snap.pool("requests").unwrap().in_use,
        1,
        "our lease is untouched"
    );
    drop(lease);
}
