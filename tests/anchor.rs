//! The robust-futex anchor: every registered process has one, the kernel marks its
//! owner word at the process's death, and `/proc` is asked only when the word says so.
mod common;

use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use common::{Seg, fork_child, one_pool, wait};
use fairshm::Table;
use fairshm::layout::owner_word;
use fairshm::liveness;
use fairshm::region::Region;

fn owner(t: &Table, slot: usize) -> u32 {
    t.region().proc_slot(slot).owner_futex.load(SeqCst)
}

fn comm_of_thread(tid: u32) -> Option<String> {
    let pid = std::process::id();
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
        .ok()
        .map(|s| s.trim().to_owned())
}

#[test]
fn a_registered_process_has_a_live_anchor_thread_of_its_own() {
    let seg = Seg::new("anchor");
    let t = seg.create(&one_pool(2));
    let slot = t.register().unwrap();
    let w = owner(&t, slot);
    let owner_word::Owner::Alive { tid, watched } = owner_word::decode(w) else {
        panic!("owner word {w:#x} after registration");
    };
    assert!(!watched);
    assert_eq!(comm_of_thread(tid).as_deref(), Some("fairshm-anchor"));
    let snap = t.snapshot();
    let me = snap.processes.iter().find(|p| p.slot == slot).unwrap();
    assert_eq!((me.anchor, me.anchor_tid), ("alive", tid));
    // Registering again (same process) starts no second anchor.
    assert_eq!(t.register().unwrap(), slot);
    assert_eq!(owner(&t, slot), w);
}

#[test]
fn the_kernel_marks_a_killed_process_owner_died_before_anyone_reaps_it() {
    let seg = Seg::new("ownerdied");
    let t = seg.create(&one_pool(2));
    let ready = common::shared_words(2);
    let name = seg.name.clone();
    let child = fork_child(move || {
        let t = Table::open(&name).unwrap();
        let slot = t.register().unwrap();
        ready[1].store(slot as u64, SeqCst);
        ready[0].store(1, SeqCst);
        std::thread::sleep(Duration::from_secs(60));
        0
    });
    common::wait_until(
        Some(child),
        "the child to register",
        Duration::from_millis(1),
        || ready[0].load(SeqCst) != 0,
    );
    let slot = ready[1].load(SeqCst) as usize;
    let before = owner_word::decode(owner(&t, slot));
    let owner_word::Owner::Alive { tid, .. } = before else {
        panic!("child's owner word: {before:?}");
    };
    assert_ne!(
        tid,
        child.as_raw() as u32,
        "the anchor is a thread of its own"
    );
    nix::sys::signal::kill(child, nix::sys::signal::SIGKILL).unwrap();
    assert_eq!(wait(child), 128 + 9);
    // The child is reaped by waitpid, not by fairshm: the word was marked by the kernel.
    assert_eq!(owner_word::decode(owner(&t, slot)), owner_word::Owner::Died);
    let snap = t.snapshot();
    let p = snap.processes.iter().find(|p| p.slot == slot).unwrap();
    assert_eq!((p.status, p.anchor), ("live", "died"));
    let reaped = t.reap_dead().unwrap();
    assert_eq!(
        reaped.iter().map(|r| r.slot).collect::<Vec<_>>(),
        vec![slot]
    );
}

#[test]
fn a_forked_child_of_a_registered_process_anchors_itself() {
    let seg = Seg::new("forkanchor");
    let t = seg.create(&one_pool(2));
    let parent_slot = t.register().unwrap();
    let parent_word = owner(&t, parent_slot);
    let out = common::shared_words(3);
    let child = fork_child(|| {
        // The inherited handle registers the child as itself, with its own anchor.
        let slot = t.register().unwrap();
        out[0].store(slot as u64, SeqCst);
        out[1].store(owner(&t, slot) as u64, SeqCst);
        let tid = owner_word::decode(owner(&t, slot));
        let ok = matches!(tid, owner_word::Owner::Alive { tid, .. }
            if comm_of_thread(tid).as_deref() == Some("fairshm-anchor"));
        if ok { 0 } else { 1 }
    });
    assert_eq!(wait(child), 0, "the child has no anchor of its own");
    let child_slot = out[0].load(SeqCst) as usize;
    assert_ne!(child_slot, parent_slot);
    assert_ne!(out[1].load(SeqCst) as u32, parent_word);
    // The parent's anchor is untouched by the child's exit (the child's anchor watched
    // it, so it may carry WAITERS now).
    let tid_of = |w: u32| match owner_word::decode(w) {
        owner_word::Owner::Alive { tid, .. } => tid,
        other => panic!("parent's owner word: {other:?}"),
    };
    assert_eq!(tid_of(owner(&t, parent_slot)), tid_of(parent_word));
    // The parent's anchor watched the child, and returned its slot when it exited:
    // nobody called `reap_dead`.
    common::wait_until(
        None,
        "the child's slot to be reaped",
        Duration::from_millis(1),
        || t.snapshot().processes.iter().all(|p| p.slot != child_slot),
    );
    let snap = t.snapshot();
    let death = snap.deaths.iter().find(|d| d.slot == child_slot).unwrap();
    assert_eq!(
        (death.pid, death.noticed_by, death.how),
        (child.as_raw() as u32, std::process::id(), "watcher")
    );
    assert!(t.reap_dead().unwrap().is_empty(), "nothing left to reap");
}

#[test]
fn a_zombie_main_thread_with_live_threads_is_not_dead() {
    let flag = common::shared_words(1);
    let child = fork_child(move || {
        std::thread::spawn(|| {
            std::thread::sleep(Duration::from_millis(600));
            // SAFETY: ends the whole process from its last live thread.
            unsafe { libc::_exit(0) }
        });
        flag[0].store(1, SeqCst); // the thread is running
        // SAFETY: the raw exit system call ends only the calling (main) thread, with no
        // unwinding; the spawned thread keeps the process alive.
        unsafe { libc::syscall(libc::SYS_exit, 0) };
        unreachable!("SYS_exit returned")
    });
    common::wait_until(
        Some(child),
        "the child's main thread",
        Duration::from_millis(1),
        || flag[0].load(SeqCst) != 0,
    );
    let pid = child.as_raw() as u32;
    let start = liveness::proc_info(pid).unwrap().start_time;
    let deadline = Instant::now() + Duration::from_millis(400);
    let mut saw_zombie_main = false;
    while Instant::now() < deadline {
        if let Some(i) = liveness::proc_info(pid)
            && i.state == b'Z'
            && i.num_threads > 1
        {
            saw_zombie_main = true;
            assert!(
                !liveness::is_dead(pid, start),
                "a process whose main thread exited is still running a thread"
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(saw_zombie_main, "the main thread never showed as a zombie");
    assert_eq!(wait(child), 0);
}

#[test]
fn dropping_a_table_deregisters_frees_the_slot_and_ends_the_anchor() {
    let seg = Seg::new("dropreg");
    let observer = seg.create(&one_pool(4));
    let t = Table::open(&seg.name).unwrap();
    let slot = t.register().unwrap();
    let owner_word::Owner::Alive { tid, .. } = owner_word::decode(owner(&t, slot)) else {
        panic!("no anchor");
    };
    // A lease detached from its guard is still held when the table goes.
    let id = t
        .try_acquire(&fairshm::Request::new("requests", "a").units(3))
        .unwrap()
        .unwrap()
        .into_id();
    assert_eq!(observer.snapshot().pool("requests").unwrap().in_use, 3);
    drop(t);
    let snap = observer.snapshot();
    assert!(snap.processes.is_empty(), "{:?}", snap.processes);
    assert_eq!(snap.pool("requests").unwrap().in_use, 0);
    assert_eq!(snap.held("requests", "a"), 0);
    assert!(snap.leases.is_empty(), "lease {id} left behind");
    assert_eq!(owner(&observer, slot), 0, "owner word cleared");
    assert_eq!(comm_of_thread(tid), None, "the anchor thread ended");
    // Opening and dropping again and again leaks neither slots nor threads.
    for _ in 0..300 {
        let t = Table::open(&seg.name).unwrap();
        t.register().unwrap();
    }
    assert!(observer.snapshot().processes.is_empty());
    let threads = std::fs::read_dir("/proc/self/task").unwrap().count();
    assert!(threads < 50, "{threads} threads: anchors leaked");
}
