//! A dead worker's permits come back at once, with nobody waiting: four forked workers
//! that only ever `try_acquire` and release (as a web middleware does), no blocking
//! acquire, no `reap_dead`, no registered observer. The parent stops a worker while it
//! holds a permit, SIGKILLs it, and measures how long until its slot is reaped (its
//! permit back in the pool), 100 times, respawning a worker after each kill as a
//! pre-fork server does.
mod common;

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

use common::{Seg, fork_child, one_pool};
use fairshm::layout::{pool_word, proc_state as ps};
use fairshm::region::Region;
use fairshm::{Request, Table};
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

const WORKERS: usize = 4;

/// Both tests fork workers; one at a time, so that neither forks while the other's
/// children hold what it waits on.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn kills() -> usize {
    common::env_or("FAIRSHM_DEATH_KILLS", 100)
}

/// A worker: `try_acquire` one permit of the shared tenant, flag it held in
/// `holding[i]`, hold about 2 ms, unflag, release. Its slot goes in `slots[i]`.
fn spawn(name: &str, i: usize, holding: &'static [AtomicU64]) -> Pid {
    let name = name.to_owned();
    fork_child(move || {
        let t = Table::open(&name).unwrap();
        let slot = t.register().unwrap();
        holding[WORKERS + i].store(slot as u64 + 1, SeqCst);
        let req = Request::new("requests", "solo");
        loop {
            match t.try_acquire(&req).unwrap() {
                Ok(lease) => {
                    holding[i].store(1, SeqCst);
                    std::thread::sleep(Duration::from_millis(2));
                    holding[i].store(0, SeqCst);
                    lease.release().unwrap();
                }
                Err(_) => std::thread::sleep(Duration::from_micros(200)),
            }
        }
    })
}

/// Stops `pid` and reports whether it is stopped (not merely signalled).
fn stop(pid: Pid) -> bool {
    kill(pid, Signal::SIGSTOP).unwrap();
    let deadline = Instant::now() + common::DEADLINE;
    loop {
        match waitpid(pid, Some(WaitPidFlag::WUNTRACED | WaitPidFlag::WNOHANG)).unwrap() {
            WaitStatus::Stopped(..) => return true,
            WaitStatus::StillAlive => {}
            other => panic!("worker {pid}: {other:?} while stopping it"),
        }
        assert!(Instant::now() < deadline, "worker {pid} never stopped");
        std::thread::sleep(Duration::from_micros(50));
    }
}

#[test]
fn a_killed_holder_s_permit_comes_back_within_milliseconds_with_nobody_waiting() {
    let _g = serial();
    let seg = Seg::new("deathreturn");
    // The parent creates the table and never registers: it has no anchor, never
    // blocks, never reaps. It only reads the mapping.
    let t = seg.create(&one_pool(WORKERS as u32));
    // [0..4] holding flags, [4..8] slot + 1 of each worker.
    let shared = common::shared_words(2 * WORKERS);
    let mut pids = common::Children((0..WORKERS).map(|i| spawn(&seg.name, i, shared)).collect());
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut back_us: Vec<u64> = Vec::new();
    let mut released = 0u64;
    let deadline = Instant::now() + common::DEADLINE;
    while back_us.len() < kills() {
        // Never hangs: workers that never hold a permit when stopped fail the test.
        assert!(
            Instant::now() < deadline,
            "only {} holders caught in {:?}",
            back_us.len(),
            common::DEADLINE
        );
        common::xorshift(&mut x);
        let i = x as usize % WORKERS;
        // Every worker registered, the one respawned last included: a registration
        // reaps the dead it finds (how "register"), and this test is about the anchors.
        for (j, &pid) in pids.iter().enumerate() {
            common::wait_until(
                Some(pid),
                "the worker to register",
                Duration::from_micros(100),
                || shared[WORKERS + j].load(SeqCst) != 0,
            );
        }
        std::thread::sleep(Duration::from_micros(x % 3000));
        assert!(stop(pids[i]));
        if shared[i].load(SeqCst) == 0 {
            // Not holding right now: let it go on, and pick again.
            kill(pids[i], Signal::SIGCONT).unwrap();
            continue;
        }
        let slot = shared[WORKERS + i].load(SeqCst) as usize - 1;
        let rec = t.region().proc_slot(slot);
        let dead_pid = pids[i].as_raw() as u32;
        assert_eq!(ps::pid(rec.state.load(SeqCst)), dead_pid);
        let t0 = Instant::now();
        kill(pids[i], Signal::SIGKILL).unwrap();
        // Back once the slot no longer names the dead process as LIVE or REAPING by it:
        // every lease is released before the slot is freed.
        loop {
            let st = rec.state.load(SeqCst);
            if ps::status(st) == ps::FREE
                || ps::pid(st) != dead_pid && ps::status(st) != ps::REAPING
            {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "kill {}: the permit of {dead_pid} never came back",
                back_us.len()
            );
            // A light poll: the parent must not take a core from the workers.
            std::thread::sleep(Duration::from_micros(20));
        }
        back_us.push(t0.elapsed().as_micros() as u64);
        let snap = t.snapshot();
        let d = snap
            .deaths
            .iter()
            .find(|d| d.slot == slot && d.pid == dead_pid)
            .expect("the death is recorded");
        assert_eq!(d.how, "watcher", "noticed by a live worker's anchor");
        assert!(pids.contains(&Pid::from_raw(d.noticed_by as i32)));
        released += d.leases_released as u64;
        assert_eq!(common::wait(pids[i]), 128 + 9);
        shared[WORKERS + i].store(0, SeqCst);
        shared[i].store(0, SeqCst);
        pids[i] = spawn(&seg.name, i, shared);
    }
    pids.kill_all();
    back_us.sort_unstable();
    let at =
        |q: f64| back_us[((back_us.len() as f64 * q).ceil() as usize).clamp(1, back_us.len()) - 1];
    eprintln!(
        "{} kills of a holder, no waiter, no reap call: permit back p50 {} us, p99 {} us, \
         max {} us; {released} leases released",
        back_us.len(),
        at(0.50),
        at(0.99),
        at(1.0)
    );
    // Each kill took a held (or releasing) lease with it.
    assert_eq!(released, back_us.len() as u64);
    // Not a speed target (those live in benches): a bound that only the kernel's wake
    // can meet. The 1 s sweep alone would put the median near 500 ms.
    assert!(at(0.5) < 100_000, "median {} us", at(0.5));
    // Nothing of the dead is left: only the last workers' own permits (killed above,
    // with nobody left to watch them) can remain.
    let in_use = pool_word::in_use(t.region().pool(0).word.load(SeqCst));
    assert!(in_use <= WORKERS as u32);
}

/// The last worker dies holding the whole pool, with no live process to notice: the
/// next worker's first `try_acquire` (which registers it) finds the permit back. It was
/// refused `pool_full` until that worker's anchor, started at the registration, had
/// scanned its peers.
#[test]
fn the_last_workers_permits_are_back_for_the_next_workers_first_acquire() {
    let _g = serial();
    let seg = Seg::new("lastdeath");
    let t = seg.create(&one_pool(1)); // the parent only reads the mapping
    let flag = common::shared_words(1);
    let name = seg.name.clone();
    let mut holder = common::Children(vec![fork_child(move || {
        let t = Table::open(&name).unwrap();
        let lease = t
            .try_acquire(&Request::new("requests", "a"))
            .unwrap()
            .unwrap();
        flag[0].store(1, SeqCst);
        loop {
            std::thread::sleep(Duration::from_secs(60));
            let _ = &lease;
        }
    })]);
    common::wait_until(
        Some(holder[0]),
        "the holder to take the permit",
        Duration::from_micros(100),
        || flag[0].load(SeqCst) == 1,
    );
    let dead = holder[0].as_raw() as u32;
    holder.kill_all();
    let snap = t.snapshot();
    assert_eq!(snap.pool("requests").unwrap().in_use, 1, "nobody reaped it");
    let name = seg.name.clone();
    let next = fork_child(move || {
        let t = Table::open(&name).unwrap();
        match t.try_acquire(&Request::new("requests", "b")).unwrap() {
            Ok(_) => 0,
            Err(r) => {
                eprintln!("refused: {r}");
                1
            }
        }
    });
    assert_eq!(
        common::wait(next),
        0,
        "the next worker's first acquire is granted"
    );
    let snap = t.snapshot();
    let d = snap
        .deaths
        .iter()
        .find(|d| d.pid == dead)
        .expect("recorded");
    // Reaped by the registration, or by its anchor if that was quicker.
    assert!(["register", "watcher"].contains(&d.how), "{}", d.how);
    assert_eq!(d.leases_released, 1);
}
