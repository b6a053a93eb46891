//! An acquire adds its units to its tenant's held word before the pool word; when the
//! pool word then refuses it, it backs out (the held word as it was). A waiter of the
//! same tenant refused meanwhile, on the held word with those units in it, may be
//! admitted once they are gone: the back-out must wake it, as a release does.
//!
//! One test in a binary of its own: it arms a crash point to run code in that window
//! (`fairshm::crash::run_at`), and an armed point is the whole process's.
mod common;

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{Seg, wait_until};
use fairshm::{Config, PoolConfig, Reason, Request, Table};

fn waiters(t: &Table) -> u32 {
    t.snapshot().pool("requests").unwrap().waiters
}

/// Pool `requests` of 4 (floor 1), "a" and "b" holding one each (shares of 2, a window
/// of 20 s so that no recount of the active set wakes anyone during the test). "a"
/// asks for 2 (admitted: it holds less than its share and 2 + 2 fit); in the window
/// after its held word counts them (3, past its share), "b" takes a unit (3 in use) and
/// a waiter of "a" asks for 1: refused past its share, as 3 + 1 does not fit below the
/// floor. "a"'s ask of 2 is then refused by the pool word (3 + 2 > 4) and backs out:
/// "a" holds 1 again, under its share, and the waiter's 1 fits (4 <= 4). Before, no
/// one woke it: it slept to its deadline with a unit free for it.
#[test]
fn an_acquire_backed_out_wakes_the_waiter_refused_on_its_units() {
    const PATIENCE: Duration = Duration::from_secs(5);
    let seg = Seg::new("back-out");
    let cfg = Config::with_pools(vec![PoolConfig::new("requests", 4).window_ms(20_000)]);
    let t = Arc::new(seg.create(&cfg));
    t.set_sweep_interval(Duration::from_secs(3600));
    let a = t
        .try_acquire(&Request::new("requests", "a"))
        .unwrap()
        .unwrap();
    let b = t
        .try_acquire(&Request::new("requests", "b"))
        .unwrap()
        .unwrap();
    let (done, waited) = mpsc::channel();
    // The window's work runs on the asking thread; the waiter is a thread of its own.
    let t3 = t.clone();
    fairshm::crash::run_at("acquire.held_applied", 0, move || {
        let b2 = t3
            .try_acquire_owned(&Request::new("requests", "b"))
            .unwrap()
            .expect("b's second unit (3 in use)");
        let t4 = t3.clone();
        let waiter = std::thread::spawn(move || {
            let asked = Instant::now();
            let got = t4
                .acquire(&Request::new("requests", "a"), PATIENCE)
                .unwrap();
            let granted = got.is_ok();
            (granted, asked.elapsed(), got.err().map(|r| r.reason))
        });
        wait_until(None, "the waiter", Duration::from_millis(1), || {
            waiters(&t3) == 1
        });
        // Past its try after the announcement: asleep.
        std::thread::sleep(Duration::from_millis(100));
        done.send((b2, waiter)).unwrap();
    });
    let refused = t
        .try_acquire(&Request::new("requests", "a").units(2))
        .unwrap()
        .expect_err("a's 2 do not fit once b took its unit");
    assert_eq!(refused.reason, Reason::PoolFull, "{refused}");
    let (b2, waiter) = waited
        .recv_timeout(Duration::from_secs(30))
        .expect("the window ran");
    let (granted, took, why) = waiter.join().unwrap();
    // Before: granted by the last try at its deadline, or refused.
    assert!(
        granted && took < PATIENCE / 2,
        "the waiter of a, under its share once a's ask backed out, was {} after {took:?} \
         ({why:?}): the back-out woke nobody",
        if granted { "granted" } else { "refused" }
    );
    drop((a, b, b2));
}
