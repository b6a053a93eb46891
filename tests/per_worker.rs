//! Worker-sized pools: tickets follow the live registered workers, as in Semian's
//! `quota` / `min_tickets`, including after workers are killed.
mod common;

use std::time::Duration;

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd};

use common::Seg;
use fairshm::{Config, PoolConfig, Request, Table};

/// The tests fork children that would inherit each other's pipe ends if they ran at
/// once (delaying the end-of-file each waits for), so they run one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn capacity(t: &Table, pool: &str) -> u32 {
    t.snapshot().pool(pool).unwrap().capacity
}

/// Forks `n` workers that register and then wait to be killed. They sleep forever, so
/// they are held by a guard that kills and reaps them if the test fails first.
fn workers(name: &str, n: usize) -> common::Children {
    let mut out = common::Children(Vec::with_capacity(n));
    for _ in 0..n {
        let (rd, wr) = nix::unistd::pipe().unwrap();
        let (name, wr_fd) = (name.to_owned(), wr.as_raw_fd());
        let pid = common::fork_child(move || {
            // Kept open: dropping the table would deregister the worker.
            let t = Table::open(&name).unwrap();
            t.register().unwrap();
            // SAFETY: our copy of the pipe's write end; closing it tells the parent
            // we are registered.
            unsafe { libc::close(wr_fd) };
            loop {
                std::thread::sleep(std::time::Duration::from_secs(60));
                let _ = &t;
            }
        });
        drop(wr);
        // Listed before the read below can fail the test.
        out.push(pid);
        // SAFETY: `rd` is an open pipe end; the File takes it over.
        let mut f = unsafe { std::fs::File::from_raw_fd(rd.as_raw_fd()) };
        std::mem::forget(rd);
        let mut buf = [0u8; 1];
        assert_eq!(
            f.read(&mut buf).unwrap(),
            0,
            "worker registered and closed its pipe"
        );
    }
    out
}

/// SIGKILLs and reaps the first `n` of `pids`.
fn kill(pids: &mut common::Children, n: usize) {
    common::Children(pids.drain(..n).collect()).kill_all();
}

#[test]
fn five_workers_at_half_quota_get_three_tickets_and_follow_deaths() {
    let _g = serial();
    let seg = Seg::new("quota");
    let cfg = Config::with_pools(vec![PoolConfig::per_worker("mysql", 0.5, 0)]);
    let t = seg.create(&cfg); // the parent only observes: it never registers
    assert_eq!(capacity(&t, "mysql"), 0);
    let mut pids = workers(&seg.name, 5);
    assert_eq!(capacity(&t, "mysql"), 3, "ceil(0.5 * 5)");
    kill(&mut pids, 4);
    // The live worker's anchor reaps its dead siblings (this call may find some left).
    assert!(t.reap_dead().unwrap().len() <= 4);
    common::wait_until(
        None,
        "the four dead to be reaped",
        Duration::from_millis(1),
        || t.snapshot().processes.len() == 1,
    );
    assert_eq!(capacity(&t, "mysql"), 1, "ceil(0.5 * 1)");
    kill(&mut pids, 1);
    t.reap_dead().unwrap();
    assert_eq!(capacity(&t, "mysql"), 0);
}

/// The last worker dies with no live process to reap it: the next one to register
/// counts itself alone at once (it counted the dead one too, until its anchor's first
/// scan, so for that while the pool had a ticket for a worker that was gone).
#[test]
fn a_new_worker_does_not_count_a_dead_one_nobody_reaped() {
    let _g = serial();
    let seg = Seg::new("unreaped");
    let cfg = Config::with_pools(vec![PoolConfig::per_worker("flights", 1.0, 0)]);
    let t = seg.create(&cfg);
    let mut one = workers(&seg.name, 1);
    assert_eq!(capacity(&t, "flights"), 1);
    kill(&mut one, 1);
    assert_eq!(
        t.snapshot().processes.len(),
        1,
        "dead, and nobody reaped it"
    );
    t.register().unwrap();
    assert_eq!(capacity(&t, "flights"), 1, "one live worker: this process");
    assert_eq!(t.snapshot().processes.len(), 1);
}

/// A worker is a process: two handles of one process (each registered, each with a
/// process slot of its own) are one worker, and one more process is a second.
#[test]
fn a_worker_with_two_handles_is_one_worker() {
    let _g = serial();
    let seg = Seg::new("twohandles");
    let cfg = Config::with_pools(vec![PoolConfig::per_worker("flights", 1.0, 0)]);
    let t = seg.create(&cfg);
    t.register().unwrap();
    let again = Table::open(&seg.name).unwrap();
    again.register().unwrap();
    let snap = t.snapshot();
    assert_eq!(snap.processes.len(), 2, "two slots");
    assert_eq!(capacity(&t, "flights"), 1, "one worker");
    assert_eq!(
        snap.pool("flights")
            .unwrap()
            .per_worker
            .as_ref()
            .unwrap()
            .workers,
        1
    );
    let mut other = workers(&seg.name, 1);
    assert_eq!(capacity(&t, "flights"), 2, "a second process");
    drop(again);
    assert_eq!(capacity(&t, "flights"), 2);
    kill(&mut other, 1);
    t.reap_dead().unwrap();
    assert_eq!(capacity(&t, "flights"), 1);
}

#[test]
fn min_tickets_is_capped_at_the_worker_count() {
    let _g = serial();
    let seg = Seg::new("mintickets");
    let cfg = Config::with_pools(vec![PoolConfig::per_worker("redis", 0.1, 2)]);
    let t = seg.create(&cfg);
    let mut one = workers(&seg.name, 1);
    assert_eq!(capacity(&t, "redis"), 1, "min(1 worker, max(ceil(0.1), 2))");
    let mut two = workers(&seg.name, 2);
    assert_eq!(capacity(&t, "redis"), 2, "min(3, max(ceil(0.3), 2))");
    kill(&mut one, 1);
    kill(&mut two, 2);
    t.reap_dead().unwrap();
}

#[test]
fn a_shrunk_pool_revokes_nothing_and_admits_again_below_the_new_capacity() {
    let _g = serial();
    let seg = Seg::new("shrink");
    let cfg = Config::with_pools(vec![PoolConfig::per_worker("flights", 1.0, 0)]);
    let t = seg.create(&cfg);
    let mut pids = workers(&seg.name, 2);
    t.register().unwrap(); // three workers now: capacity 3
    assert_eq!(capacity(&t, "flights"), 3);
    let held: Vec<_> = (0..3)
        .map(|i| {
            t.try_acquire_at(&Request::new("flights", "a"), 10 + i)
                .unwrap()
                .unwrap()
        })
        .collect();
    kill(&mut pids, 2);
    t.reap_dead().unwrap();
    assert_eq!(capacity(&t, "flights"), 1);
    assert_eq!(
        t.snapshot().pool("flights").unwrap().in_use,
        3,
        "nothing revoked"
    );
    drop(held);
    let again = t.try_acquire_at(&Request::new("flights", "a"), 20).unwrap();
    assert!(
        again.is_ok(),
        "admitted once in_use fell under the new capacity"
    );
    let r = t
        .try_acquire_at(&Request::new("flights", "b"), 20)
        .unwrap()
        .unwrap_err();
    assert_eq!(r.facts.capacity, 1);
}
