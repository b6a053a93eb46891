//! SIGKILL torture: workers loop acquire / hold / release; the parent kills random
//! workers at random moments, reaps the dead and respawns them. `in_use` must never
//! exceed `POOL`, and after the last death and recovery every counter is zero.
mod common;

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use common::{Seg, fork_child, one_pool};
use fairshm::layout::pool_word;
use fairshm::region::Region;
use fairshm::{Request, Table};

const CAP: u32 = 4;
const WORKERS: usize = 6;

fn kills() -> usize {
    common::env_or("FAIRSHM_TORTURE_KILLS", 1000)
}

fn spawn(name: &str, i: usize, witness: &'static [AtomicU64]) -> nix::unistd::Pid {
    let name = name.to_owned();
    fork_child(move || {
        let t = Table::open(&name).unwrap();
        let tenant = ["a", "b", "c"][i % 3];
        let mut x = (std::process::id() as u64) << 1 | 1;
        loop {
            common::xorshift(&mut x);
            let req = Request::new("requests", tenant).units(1 + (x % 2) as u32);
            if let Ok(lease) = t.try_acquire(&req).unwrap() {
                let in_use = pool_word::in_use(t.region().pool(0).word.load(SeqCst));
                if in_use > CAP {
                    witness[0].fetch_add(1, SeqCst);
                }
                witness[1].fetch_add(1, SeqCst);
                for _ in 0..(x % 200) {
                    std::hint::spin_loop();
                }
                lease.release().unwrap();
            }
        }
    })
}

#[test]
fn a_thousand_sigkills_lose_nothing() {
    torture(true);
}

/// The same with no blocking waiter and no `reap_dead` call anywhere, even at the end:
/// the parent is one more live registered process (as a pre-fork server's other
/// workers are), and the anchors of the live processes return everything the dead
/// held.
#[test]
fn sigkills_with_nobody_reaping_leave_nothing_held_by_the_dead() {
    torture(false);
}

fn torture(reap_calls: bool) {
    let seg = Seg::new("torture");
    let t = seg.create(&one_pool(CAP));
    let me = if reap_calls {
        None
    } else {
        Some(t.register().unwrap())
    };
    // [0] over-capacity sightings, [1] grants.
    let witness = common::shared_words(2);
    let mut pids = common::Children((0..WORKERS).map(|i| spawn(&seg.name, i, witness)).collect());
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut reaped = 0;
    for _ in 0..kills() {
        common::xorshift(&mut x);
        std::thread::sleep(Duration::from_micros(x % 1500));
        let i = (x >> 20) as usize % WORKERS;
        nix::sys::signal::kill(pids[i], nix::sys::signal::SIGKILL).unwrap();
        common::wait(pids[i]);
        if reap_calls {
            reaped += t.reap_dead().unwrap().len();
        }
        pids[i] = spawn(&seg.name, i, witness);
    }
    pids.kill_all();
    if reap_calls {
        reaped += t.reap_dead().unwrap().len();
    }
    // The anchors (ours, and those of workers still alive at each death) reap what the
    // calls did not; wait for the last ones.
    common::wait_until(
        None,
        "the dead to be reaped",
        Duration::from_millis(1),
        || t.snapshot().processes.iter().all(|p| Some(p.slot) == me),
    );
    let snap = t.snapshot();
    let pool = snap.pool("requests").unwrap();
    eprintln!(
        "{} kills, {reaped} slots reaped by calls, {} grants, {} over-capacity sightings",
        kills(),
        witness[1].load(SeqCst),
        witness[0].load(SeqCst)
    );
    assert_eq!(witness[0].load(SeqCst), 0, "in_use exceeded POOL");
    // A worker killed before its first acquire never registered, so there may be
    // fewer slots than kills.
    assert!(reaped <= kills() + WORKERS, "{reaped} slots reaped");
    assert_eq!(pool.in_use, 0);
    assert!(
        pool.tenants.iter().all(|t| t.held == 0),
        "{:?}",
        pool.tenants
    );
    assert!(snap.leases.is_empty(), "{:?}", snap.leases);
    assert!(witness[1].load(SeqCst) > 1000, "the workers barely ran");
    if !reap_calls {
        // Every death in the record was noticed by a watching anchor or its sweep, or
        // by a respawned worker's registration (none by a call).
        assert!(!snap.deaths.is_empty());
        assert!(
            snap.deaths
                .iter()
                .all(|d| matches!(d.how, "watcher" | "sweep" | "register")),
            "{:?}",
            snap.deaths
        );
    }
}
