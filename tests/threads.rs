//! Threads of one process each hold their own leases (SEM_UNDO cannot: it is per
//! process), and a killed process gives back every thread's leases.
mod common;

use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use common::{Seg, fork_child, one_pool, wait};
use fairshm::{Request, Table};

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

#[test]
fn each_thread_holds_and_releases_its_own_lease() {
    let seg = Seg::new("threads");
    let t = seg.create(&one_pool(4));
    // Four steps, all three threads: both hold / main checked / a released / main checked.
    let step = Barrier::new(3);
    std::thread::scope(|s| {
        let spawn = |name: &'static str, release_at_step: usize| {
            let (t, step) = (&t, &step);
            s.spawn(move || {
                let lease = t
                    .try_acquire(&Request::new("requests", name))
                    .unwrap()
                    .unwrap();
                let mut lease = Some(lease);
                for i in 1..=4 {
                    step.wait();
                    if i == release_at_step {
                        lease.take().unwrap().release().unwrap();
                    }
                }
                drop(lease);
                gettid()
            })
        };
        let a = spawn("a", 2);
        let b = spawn("b", 4);
        step.wait(); // 1: both hold
        let snap = t.snapshot();
        assert_eq!(snap.leases.len(), 2, "{:?}", snap.leases);
        let mut tids: Vec<u32> = snap.leases.iter().map(|l| l.tid).collect();
        tids.sort_unstable();
        tids.dedup();
        assert_eq!(tids.len(), 2, "each lease names its own thread");
        step.wait(); // 2: checked; a releases
        step.wait(); // 3: a released
        let snap = t.snapshot();
        assert_eq!(snap.pool("requests").unwrap().in_use, 1);
        assert_eq!(snap.leases.len(), 1, "b's lease is untouched");
        assert_eq!(snap.leases[0].tenant, "b");
        let b_tid = snap.leases[0].tid;
        step.wait(); // 4: b releases
        let (ta, tb) = (a.join().unwrap(), b.join().unwrap());
        assert_eq!(tb, b_tid);
        assert!(tids.contains(&ta) && ta != tb);
    });
    assert_eq!(t.snapshot().pool("requests").unwrap().in_use, 0);
}

#[test]
fn a_killed_process_gives_back_every_threads_leases() {
    let seg = Seg::new("threadkill");
    let t = seg.create(&one_pool(8));
    let w = common::shared_words(2);
    let name = seg.name.clone();
    let child = fork_child(move || {
        let t = Arc::new(Table::open(&name).unwrap());
        for i in 0..3 {
            let t = t.clone();
            std::thread::spawn(move || {
                let tenant = ["x", "y", "z"][i];
                let _lease = t
                    .try_acquire(&Request::new("requests", tenant).units(2))
                    .unwrap()
                    .unwrap();
                w[0].fetch_add(1, SeqCst);
                std::thread::sleep(Duration::from_secs(60));
            });
        }
        std::thread::sleep(Duration::from_secs(60));
        0
    });
    common::wait_until(
        Some(child),
        "the child's threads",
        Duration::from_millis(1),
        || w[0].load(SeqCst) >= 3,
    );
    let snap = t.snapshot();
    assert_eq!(snap.pool("requests").unwrap().in_use, 6);
    let mut tids: Vec<u32> = snap.leases.iter().map(|l| l.tid).collect();
    tids.sort_unstable();
    tids.dedup();
    assert_eq!(
        tids.len(),
        3,
        "three threads, three owners: {:?}",
        snap.leases
    );
    nix::sys::signal::kill(child, nix::sys::signal::SIGKILL).unwrap();
    assert_eq!(wait(child), 128 + 9);
    let reaped = t.reap_dead().unwrap();
    assert_eq!(reaped.len(), 1);
    assert_eq!(reaped[0].leases_released, 3);
    let snap = t.snapshot();
    assert_eq!(snap.pool("requests").unwrap().in_use, 0);
    for tenant in ["x", "y", "z"] {
        assert_eq!(snap.held("requests", tenant), 0, "{tenant}");
    }
    assert!(snap.leases.is_empty());
}

/// A thread keeps the lease slot it released as its spare (its next acquire needs no
/// claim), and gives it back when it exits: threads that come and go use up nothing.
#[test]
fn a_thread_that_exits_gives_back_its_spare_lease() {
    let seg = Seg::new("threads-spare");
    let mut cfg = one_pool(4);
    cfg.leases_per_process = 2;
    let t = Arc::new(seg.create(&cfg));
    t.register().unwrap();
    for i in 0..5 {
        let t2 = Arc::clone(&t);
        // `join` (pthread_join) returns once the thread is gone, its thread-locals'
        // destructors included (a scope's end does not wait for those).
        std::thread::spawn(move || {
            for _ in 0..3 {
                let lease = t2
                    .try_acquire(&Request::new("requests", "a"))
                    .unwrap()
                    .unwrap();
                lease.release().unwrap();
            }
        })
        .join()
        .unwrap();
        // Both slots are free again: the process can hold two leases at once.
        let a = t.try_acquire(&Request::new("requests", "a")).unwrap();
        let b = t.try_acquire(&Request::new("requests", "b")).unwrap();
        assert!(
            a.is_ok() && b.is_ok(),
            "round {i}: a thread's spare was not given back: {:?} {:?}",
            a.as_ref().err(),
            b.as_ref().err()
        );
        drop((a, b));
        // This thread's own spare is back too: it does not block a second lease.
    }
    assert_eq!(t.snapshot().pool("requests").unwrap().grants, 5 * 3 + 5 * 2);
}

/// A forked child inherits its parent's thread-locals, spare included: it must neither
/// use nor free the parent's spare (a lease of the parent's slot).
#[test]
fn a_forked_child_leaves_the_parents_spare_alone() {
    let seg = Seg::new("threads-fork-spare");
    let mut cfg = one_pool(4);
    cfg.leases_per_process = 2;
    let t = seg.create(&cfg);
    // The parent's thread keeps a spare.
    t.try_acquire(&Request::new("requests", "a"))
        .unwrap()
        .unwrap()
        .release()
        .unwrap();
    let name = seg.name.clone();
    let child = fork_child(move || {
        let t = Table::open(&name).unwrap();
        let slot = t.register().unwrap();
        for _ in 0..3 {
            let lease = t
                .try_acquire(&Request::new("requests", "b"))
                .unwrap()
                .unwrap();
            let leases_per = 2;
            if lease.id().index as usize / leases_per != slot {
                return 3; // it took a lease of another process's slot
            }
            lease.release().unwrap();
        }
        0
    });
    assert_eq!(
        wait(child),
        0,
        "the child used a lease outside its own slot"
    );
    // The parent's spare is still its own: it can hold both its leases at once.
    let a = t
        .try_acquire(&Request::new("requests", "a"))
        .unwrap()
        .unwrap();
    let b = t
        .try_acquire(&Request::new("requests", "a"))
        .unwrap()
        .unwrap();
    assert_ne!(a.id().index, b.id().index);
    drop((a, b));
    assert_eq!(t.snapshot().processes.len(), 1, "the child deregistered");
}
