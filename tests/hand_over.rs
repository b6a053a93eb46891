//! A wake passed on goes to the under-share half first. A waiter asleep there that has
//! tried since the last release (it started after it) takes it, is refused, and before
//! passed nothing on: a sleeper past its share behind, whose ask fits, slept on to its
//! deadline. It must hand the wake to the other half.
//!
//! A waiter woken and refused whose wait then ends (its deadline, a cancel, the rates)
//! must pass the wake it took on as well.
//!
//! A binary of its own: its tests arm a point to run code in a window
//! (`fairshm::crash::run_at`), and an armed point is the whole process's (they take
//! turns: [`ONE_AT_A_TIME`]).
mod common;

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{Seg, wait_until};
use fairshm::{Config, LeaseId, PoolConfig, Request, Table};

/// The tests' turns: an armed point is the whole process's.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

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
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
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

/// Pool `requests` of 2, "a" holding both. W1 ("b" asks 2, a deadline 1 s away) sleeps
/// first, then W2 ("c" asks 1). "a" releases one unit: the release wakes one sleeper,
/// W1, which is held up past its deadline before its try (in the window after its
/// wake), is refused (1 + 2 > 2) and ends its wait, timed out. W2's 1 fits: W1 must pass
/// the wake it took on as it goes. Before, a waiter whose wait ended passed nothing on,
/// and W2 slept to its deadline.
#[test]
fn a_waiter_woken_whose_wait_then_ends_passes_its_wake_on() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    const PATIENCE: Duration = Duration::from_secs(10);
    const SHORT: Duration = Duration::from_secs(1);
    let seg = Seg::new("wait-ends");
    let cfg = Config::with_pools(vec![PoolConfig::new("requests", 2).window_ms(20_000)]);
    let t = Arc::new(seg.create(&cfg));
    t.set_sweep_interval(Duration::from_secs(3600));
    let a1 = t
        .try_acquire(&Request::new("requests", "a"))
        .unwrap()
        .unwrap();
    let a2 = t
        .try_acquire(&Request::new("requests", "a"))
        .unwrap()
        .unwrap();
    let w1 = waiter(&t, "b", 2, SHORT, 0);
    let w2 = waiter(&t, "c", 1, PATIENCE, 1);
    let (held_up, done) = mpsc::channel();
    fairshm::crash::run_at("wait.woken", 0, move || {
        std::thread::sleep(SHORT + Duration::from_millis(200));
        held_up.send(()).unwrap();
    });
    drop(a1);
    done.recv_timeout(Duration::from_secs(30))
        .expect("W1 was woken by the release");
    let (_, lease) = w1.join().unwrap();
    assert!(lease.is_none(), "W1's 2 do not fit");
    let (took, lease) = w2.join().unwrap();
    assert!(
        lease.is_some() && took < PATIENCE / 2,
        "W2 (c asks 1, its unit free) was {} after {took:?}: the wake W1 took ended \
         with its wait",
        if lease.is_some() {
            "granted"
        } else {
            "refused"
        }
    );
    t.release_id(lease.unwrap()).unwrap();
    drop(a2);
}
