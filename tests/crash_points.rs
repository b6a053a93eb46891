//! A process SIGKILLed at every labelled step of acquire, release and registration in
//! turn: after `reap_dead`, every counter is exact (no leak, no double free).
#![cfg(feature = "crash-points")]
mod common;

use std::time::Duration;

use common::{Seg, fork_child, mono_ms, one_pool, wait};
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

/// Forks a process that opens table `name`, arms the crash point `label` and blocks in
/// an acquire of one unit of pool `requests` for tenant "b" (its sweep an hour off), to
/// die at that point: its exit code says whether it got there (128 + SIGKILL) or not.
fn doomed_waiter(name: &str, label: &'static str) -> nix::unistd::Pid {
    let name = name.to_owned();
    fork_child(move || {
        let t = Table::open(&name).unwrap();
        t.set_sweep_interval(Duration::from_secs(3600));
        fairshm::crash::arm(label, 0);
        let got = t.acquire(&Request::new("requests", "b"), Duration::from_secs(60));
        // Not reached: killed at the point.
        i32::from(!matches!(got, Ok(Ok(_))))
    })
}

/// A waiter SIGKILLed as a wake ends its sleep, before its try, takes that wake with
/// it. Its reaper, taking it out of the pool's waiters, must wake for it, or a waiter
/// behind it, whose ask now fits, sleeps on to its deadline (its sweep is an hour
/// here): before, a reap that returned no units woke nobody.
#[test]
fn a_waiter_killed_as_a_wake_ends_its_sleep_leaves_no_one_asleep_for_it() {
    use std::sync::Arc;
    use std::time::Instant;
    const PATIENCE: Duration = Duration::from_secs(10);
    let waiters = |t: &Table| t.snapshot().pool("requests").unwrap().waiters;
    let seg = Seg::new("woken-killed");
    let t = Arc::new(seg.create(&one_pool(1)));
    t.set_sweep_interval(Duration::from_secs(3600));
    let mine = t
        .try_acquire(&Request::new("requests", "a"))
        .unwrap()
        .unwrap();
    let doomed = doomed_waiter(&seg.name, "wait.woken");
    let mut kids = common::Children(vec![doomed]);
    common::wait_until(
        Some(doomed),
        "the doomed waiter",
        Duration::from_millis(1),
        || waiters(&t) == 1,
    );
    // Past its try after the announcement: asleep, first in the futex's queue.
    std::thread::sleep(Duration::from_millis(100));
    // Forked before: a thread of ours waits behind it.
    let t2 = t.clone();
    let live = std::thread::spawn(move || {
        let start = Instant::now();
        let got = t2
            .acquire(&Request::new("requests", "c"), PATIENCE)
            .unwrap();
        (start.elapsed(), got.ok().map(|l| l.into_id()))
    });
    common::wait_until(None, "the live waiter", Duration::from_millis(1), || {
        waiters(&t) == 2
    });
    std::thread::sleep(Duration::from_millis(100));
    // The release wakes one waiter: the doomed one, which dies at the wake.
    drop(mine);
    assert_eq!(wait(doomed), 128 + 9, "killed at its wake");
    kids.0.clear();
    let (took, lease) = live.join().unwrap();
    assert!(
        lease.is_some() && took < PATIENCE / 2,
        "the live waiter, its unit free once the doomed one died, was {} after {took:?}: \
         the wake died with the waiter it woke",
        if lease.is_some() {
            "granted"
        } else {
            "refused"
        }
    );
    t.release_id(lease.unwrap()).unwrap();
    assert_eq!(waiters(&t), 0, "the dead waiter taken out");
}

/// A waiter SIGKILLed between its two counts (the pool's `waiters`, then its process
/// slot's) is in `waiters` and not in its slot: its reaper, which takes out what the
/// slot counts, leaves it there, and every release of the pool would make a wake for
/// nobody from then on. `check` names the difference, and `repair` recounts `waiters`
/// from the process slots.
#[test]
fn a_waiter_killed_between_its_two_counts_is_named_by_check_and_recounted_by_repair() {
    let seg = Seg::new("announce-killed");
    let t = seg.create(&one_pool(1));
    let mine = t
        .try_acquire(&Request::new("requests", "a"))
        .unwrap()
        .unwrap();
    let doomed = doomed_waiter(&seg.name, "wait.announced");
    assert_eq!(wait(doomed), 128 + 9, "killed between its counts");
    // Reaped (by our anchor, or here): nothing of its slot counts the waiter.
    t.reap_dead().unwrap();
    common::wait_until(
        None,
        "the dead waiter's slot freed",
        Duration::from_millis(1),
        || t.snapshot().processes.len() == 1,
    );
    let waiters = |t: &Table| t.snapshot().pool("requests").unwrap().waiters;
    assert_eq!(waiters(&t), 1, "the dead waiter left in `waiters`");
    let found = t.check().unwrap();
    assert_eq!(
        found,
        vec![
            "pool 0: waiters is 1, its processes announce 0 (a waiter or its reaper killed \
             between its two counts, or a write from outside; repair recounts it)"
                .to_owned()
        ]
    );
    let repaired = t.repair().unwrap();
    assert_eq!(repaired.pools[0].waiters, Some((1, 0)));
    assert_eq!(waiters(&t), 0);
    assert_eq!(t.check().unwrap(), Vec::<String>::new());
    drop(mine);
    // Nothing to recount now.
    assert_eq!(t.repair().unwrap().pools[0].waiters, None);
}

/// The guaranteed pools' twin of the test above: a release wakes one waiter, which
/// passes the wake on with its next ask (`guaranteed::pass`). One SIGKILLed as the
/// wake ends its sleep, before that ask, takes the wake with it; the reap of its
/// process, which held nothing, must wake the pool's waiters, or the one behind it,
/// whose ask now fits, sleeps on to its next ask of its own (30 s here).
#[test]
fn a_guaranteed_waiter_killed_as_a_wake_ends_its_sleep_leaves_no_one_asleep_for_it() {
    use fairshm::FairnessUnit;
    use std::time::Instant;
    const PATIENCE: Duration = Duration::from_secs(10);
    let seg = Seg::new("g-woken-killed");
    // idle_after 60 s: a waiter asks again on its own every 30 s; b and c have acted,
    // so they lend nothing.
    let c = common::guaranteed(
        "ceiling",
        30,
        FairnessUnit::Cost,
        &[("a", 1), ("b", 1), ("c", 1)],
        (5_000, 60_000),
        8,
    );
    let t = seg.create(&c);
    t.set_sweep_interval(Duration::from_secs(3600));
    let g = t.guaranteed("ceiling").unwrap();
    for other in ["b", "c"] {
        let l = g.acquire(other, 1, 1_000, mono_ms()).unwrap().unwrap();
        g.release(l.id, mono_ms()).unwrap();
    }
    let mine = g.acquire("a", 10, 60_000, mono_ms()).unwrap().unwrap();
    let refusals = || {
        let s = g.stats(mono_ms()).unwrap();
        s.tenants.iter().find(|t| t.name == "a").unwrap().refusals
    };
    let name = seg.name.clone();
    let doomed = fork_child(move || {
        let t = Table::open(&name).unwrap();
        t.set_sweep_interval(Duration::from_secs(3600));
        let g = t.guaranteed("ceiling").unwrap();
        fairshm::crash::arm("guaranteed.woken", 0);
        let got = g.acquire_timeout("a", 10, 100, Duration::from_secs(60));
        // Not reached: killed at the point.
        i32::from(!matches!(got, Ok(Ok(_))))
    });
    let mut kids = common::Children(vec![doomed]);
    common::wait_until(
        Some(doomed),
        "the doomed waiter's refusal",
        Duration::from_millis(1),
        || refusals() == 1,
    );
    // Asleep, first in the futex's queue.
    std::thread::sleep(Duration::from_millis(100));
    // Forked before: a thread of ours waits behind it.
    let live = std::thread::scope(|s| {
        let live = s.spawn(|| {
            let start = Instant::now();
            let got = g.acquire_timeout("a", 10, 100, PATIENCE).unwrap();
            (start.elapsed(), got.ok())
        });
        common::wait_until(
            None,
            "the live waiter's refusal",
            Duration::from_millis(1),
            || refusals() == 2,
        );
        std::thread::sleep(Duration::from_millis(100));
        // The release wakes one waiter: the doomed one, which dies at the wake.
        g.release(mine.id, mono_ms()).unwrap();
        assert_eq!(wait(doomed), 128 + 9, "killed at its wake");
        kids.0.clear();
        live.join().unwrap()
    });
    let (took, lease) = live;
    assert!(
        lease.is_some() && took < PATIENCE / 2,
        "the live waiter, its units free once the doomed one died, was {} after {took:?}: \
         the wake died with the waiter it woke",
        if lease.is_some() {
            "granted"
        } else {
            "refused"
        }
    );
    g.release(lease.unwrap().id, mono_ms()).unwrap();
}
