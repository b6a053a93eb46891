//! A wake passed on goes to the under-share half first. A waiter asleep there that has
//! tried since the last release (it started after it) takes it, is refused, and before
//! passed nothing on: a sleeper past its share behind, whose ask fits, slept on to its
//! deadline. It must hand the wake to the other half.
//!
//! One test in a binary of its own: it arms a point to run code in a window
//! (`fairshm::crash::run_at`), and an armed point is the whole process's.
mod common;

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{Seg, wait_until};
use fairshm::{Config, LeaseId, PoolConfig, Request, Table};

fn waiters(t: &Table) -> u32 {
    t.snapshot().pool("requests").unwrap().waiters
}

/// A blocking acquire of `units` for `tenant` on a thread of its own: how long it
/// took and the lease if granted. Returns once it is counted among the pool's waiters
/// (`before` were) and had time to fall asleep.
fn waiter(
    t: &Arc<Table>,
    tenant: &'static str,
    units: u32,
    patience: Duration,
    before: u32,
) -> std::thread::JoinHandle<(Duration, Option<LeaseId>)> {
    let t2 = t.clone();
    let h = std::thread::spawn(move || {
        let asked = Instant::now();
        let got = t2
            .acquire(&Request::new("requests", tenant).units(units), patience)
            .unwrap();
        (asked.elapsed(), got.ok().map(|l| l.into_id()))
    });
    wait_until(None, "a waiter", Duration::from_millis(1), || {
        waiters(t) > before
    });
    // Past its try after the announcement: asleep.
    std::thread::sleep(Duration::from_millis(100));
    h
}

/// Pool `requests` of 6 (floor 1), "a", "b" and "c" active (shares of 2; a window of
/// 20 s, so no recount of the active set wakes anyone), holding 3, 1 and 1.
/// - O, "a" asks 1: past its share, 5 + 1 does not fit below the floor: asleep past
///   its share.
/// - U1, "b" asks 3: under its share, 5 + 3 > 6: asleep under its share.
///
/// "c" releases its unit (4 in use): the release wakes one sleeper, under-share first:
/// U1. Woken, before its try, U2 ("c" asks 3, under its share: 4 + 3 > 6) falls asleep
/// under its share, having tried after the release. U1 is refused (4 + 3 > 6) and
/// passes the wake on, under-share first: to U2, refused as before. O's 1 fits (4 + 1
/// <= 5): U2 must hand the wake to the sleepers past their share. Before, it slept
/// again, and O slept on to its deadline.
#[test]
fn a_wake_passed_to_a_sleeper_that_tried_since_the_release_reaches_the_other_half() {
    const PATIENCE: Duration = Duration::from_secs(5);
    let seg = Seg::new("hand-over");
    let cfg = Config::with_pools(vec![PoolConfig::new("requests", 6).window_ms(20_000)]);
    let t = Arc::new(seg.create(&cfg));
    t.set_sweep_interval(Duration::from_secs(3600));
    let take = |tenant: &str, units: u32| {
        t.try_acquire(&Request::new("requests", tenant).units(units))
            .unwrap()
            .unwrap_or_else(|r| panic!("{tenant}'s {units}: {r}"))
    };
    let a = take("a", 3);
    let b = take("b", 1);
    let c = take("c", 1);
    let o = waiter(&t, "a", 1, PATIENCE, 0);
    let u1 = waiter(&t, "b", 3, PATIENCE, 1);
    let (started, u2) = mpsc::channel();
    let t2 = t.clone();
    fairshm::crash::run_at("wait.woken", 0, move || {
        started.send(waiter(&t2, "c", 3, PATIENCE, 2)).unwrap();
    });
    drop(c);
    let u2 = u2
        .recv_timeout(Duration::from_secs(30))
        .expect("U1 was woken by the release");
    let (took, lease) = o.join().unwrap();
    assert!(
        lease.is_some() && took < PATIENCE / 2,
        "O (a asks 1, past its share, its unit free below the floor) was {} after \
         {took:?}: the wake passed to U2 went no further",
        if lease.is_some() {
            "granted"
        } else {
            "refused"
        }
    );
    // Let U1 and U2 go: with "a"'s units back, both fit in turn.
    t.release_id(lease.unwrap()).unwrap();
    drop((a, b));
    for u in [u1, u2] {
        let (_, lease) = u.join().unwrap();
        if let Some(l) = lease {
            t.release_id(l).unwrap();
        }
    }
}
