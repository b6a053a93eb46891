//! Wake latency across processes: release -> the blocked waiter (another process)
//! holding its grant. Two forked players hand one permit back and forth; each releases
//! only once the other is asleep in `acquire`, stamps the release, and the waiter
//! stamps its grant. Baseline in the same run: SysV `semop` with `SEM_UNDO` (Semian),
//! measured the same way (`GETNCNT` for "the other is asleep").
//!
//! Then the death wake: a holder process is SIGKILLed while a waiter (another process)
//! is asleep behind it; kill -> waiter granted. fairshm's backup sweep is set to an
//! hour, so only the kernel's robust-futex wake can serve the waiter; the baseline is
//! `SEM_UNDO`, which the kernel applies at the holder's exit.
//!
//! Run: `cargo bench --bench wake` (FAIRSHM_WAKE_ROUNDS, default 2000;
//! FAIRSHM_DEATH_ROUNDS, default 100).

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use fairshm::region::Region;

#[path = "../tests/common/shm.rs"]
mod shm;
use fairshm::{Config, PoolConfig, Request, Table};

const MAX_ROUNDS: usize = 100_000;

fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Runs `player(0)` and `player(1)` in two forked processes and waits for both.
fn two_players(player: impl Fn(usize) + Copy) {
    let kids: Vec<_> = (0..2).map(|me| spawn(move || player(me))).collect();
    for k in kids {
        let st = nix::sys::wait::waitpid(k, None).unwrap();
        assert!(
            matches!(st, nix::sys::wait::WaitStatus::Exited(_, 0)),
            "{st:?}"
        );
    }
}

/// Whether process `pid` is asleep (state `S`) per `/proc/PID/stat`.
fn asleep(pid: u64) -> bool {
    fairshm::liveness::proc_info(pid as u32).is_some_and(|i| i.state == b'S')
}

fn report(what: &str, lat: &[AtomicU64], n: usize) -> (f64, f64) {
    report_ns(what, lat[2..=n].iter().map(|a| a.load(SeqCst)).collect())
}

fn report_ns(what: &str, mut v: Vec<u64>) -> (f64, f64) {
    v.sort_unstable();
    let p = |q: f64| v[((v.len() - 1) as f64 * q) as usize] as f64 / 1000.0;
    println!(
        "{what:<28} p50 {:>8.1} us   p99 {:>8.1} us   max {:>8.1} us",
        p(0.5),
        p(0.99),
        p(1.0)
    );
    (p(0.5), p(0.99))
}

fn main() {
    let n: usize = std::env::var("FAIRSHM_WAKE_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let n = n.clamp(10, MAX_ROUNDS);
    println!("wake latency: release -> blocked waiter in another process granted, {n} handoffs");

    let name = format!("fairshm-bench-wake-{}", std::process::id());
    let _ = Table::unlink(&name);
    let t = Table::create(
        &name,
        &Config::with_pools(vec![PoolConfig::new("requests", 1)]),
    )
    .unwrap();
    // [release stamp, latency of round k at k + 1 ..., rounds granted so far]. A player
    // asks for round k only once round k - 1 was granted (to the other player), so the
    // rounds alternate even though a releaser may otherwise barge back in first.
    // ... then each player's pid at n + 2 + me: a holder releases only once the other
    // player is asleep in the kernel, so every round measures a real wake.
    let lat = shm::shared_words(n + 4);
    two_players(|me| {
        lat[n + 2 + me].store(std::process::id() as u64, SeqCst);
        let t = Table::open(&name).unwrap();
        let tenant = ["a", "b"][me];
        for k in (me..n).step_by(2) {
            while lat[n + 1].load(SeqCst) != k as u64 {
                std::hint::spin_loop();
            }
            let lease = t
                .acquire(&Request::new("requests", tenant), Duration::from_secs(10))
                .unwrap()
                .unwrap();
            lat[k + 1].store(now_ns().saturating_sub(lat[0].load(SeqCst)), SeqCst);
            lat[n + 1].store(k as u64 + 1, SeqCst);
            if k + 1 < n {
                let other = n + 2 + (1 - me);
                while t.region().pool(0).waiters.load(SeqCst) == 0
                    || !asleep(lat[other].load(SeqCst))
                {
                    std::hint::spin_loop();
                }
            }
            lat[0].store(now_ns(), SeqCst);
            lease.release().unwrap();
        }
    });
    let (f50, f99) = report("fairshm futex", lat, n);
    drop(t);
    Table::unlink(&name).unwrap();

    // SAFETY: a private SysV set of one semaphore, value 1; removed below.
    let semid = unsafe { libc::semget(libc::IPC_PRIVATE, 1, libc::IPC_CREAT | 0o600) };
    assert!(semid >= 0);
    // SAFETY: SETVAL on our own set.
    assert_eq!(unsafe { libc::semctl(semid, 0, libc::SETVAL, 1) }, 0);
    let lat = shm::shared_words(n + 4);
    two_players(|me| {
        lat[n + 2 + me].store(std::process::id() as u64, SeqCst);
        for k in (me..n).step_by(2) {
            while lat[n + 1].load(SeqCst) != k as u64 {
                std::hint::spin_loop();
            }
            let mut down = libc::sembuf {
                sem_num: 0,
                sem_op: -1,
                sem_flg: libc::SEM_UNDO as i16,
            };
            // SAFETY: valid sembuf on our set; blocks until the other releases.
            assert_eq!(unsafe { libc::semop(semid, &mut down, 1) }, 0);
            lat[k + 1].store(now_ns().saturating_sub(lat[0].load(SeqCst)), SeqCst);
            lat[n + 1].store(k as u64 + 1, SeqCst);
            if k + 1 < n {
                let other = n + 2 + (1 - me);
                // SAFETY: GETNCNT on our own set: processes waiting to decrement.
                let waiting = || unsafe { libc::semctl(semid, 0, libc::GETNCNT) };
                while waiting() == 0 || !asleep(lat[other].load(SeqCst)) {
                    std::hint::spin_loop();
                }
            }
            lat[0].store(now_ns(), SeqCst);
            let mut up = libc::sembuf {
                sem_num: 0,
                sem_op: 1,
                sem_flg: libc::SEM_UNDO as i16,
            };
            // SAFETY: as above.
            assert_eq!(unsafe { libc::semop(semid, &mut up, 1) }, 0);
        }
    });
    let (s50, s99) = report("SysV semop + SEM_UNDO", lat, n);
    // SAFETY: removing our own set.
    unsafe { libc::semctl(semid, 0, libc::IPC_RMID) };
    println!(
        "ratio fairshm / semop: p50 {:.2}, p99 {:.2}",
        f50 / s50,
        f99 / s99
    );
    death_wake();
}

/// Forks `f` as a child that `_exit`s with 0 when `f` returns.
fn spawn(f: impl FnOnce()) -> nix::unistd::Pid {
    // SAFETY: the bench is single-threaded when it forks; the child runs `f` and exits.
    match unsafe { nix::unistd::fork() }.unwrap() {
        nix::unistd::ForkResult::Child => {
            f();
            // SAFETY: leave without the parent's destructors.
            unsafe { libc::_exit(0) }
        }
        nix::unistd::ForkResult::Parent { child } => child,
    }
}

/// One death round: `hold` (in a child) takes the only permit and sets `w[1]`; `wait`
/// (in another child) blocks for it and stamps `w[2]` when granted. Once the waiter is
/// asleep (`asleep_too` also agrees), the holder is SIGKILLed at stamp `w[0]`.
fn death_round(
    w: &[AtomicU64],
    hold: impl FnOnce(),
    wait: impl FnOnce(),
    asleep_too: impl Fn() -> bool,
) -> u64 {
    for x in w {
        x.store(0, SeqCst);
    }
    let holder = spawn(hold);
    while w[1].load(SeqCst) == 0 {
        std::hint::spin_loop();
    }
    let waiter = spawn(wait);
    while !asleep_too() || !asleep(waiter.as_raw() as u64) {
        std::thread::yield_now();
    }
    w[0].store(now_ns(), SeqCst);
    nix::sys::signal::kill(holder, nix::sys::signal::SIGKILL).unwrap();
    for (pid, code) in [(holder, None), (waiter, Some(0))] {
        let st = nix::sys::wait::waitpid(pid, None).unwrap();
        if let Some(c) = code {
            assert!(
                matches!(st, nix::sys::wait::WaitStatus::Exited(_, x) if x == c),
                "{st:?}"
            );
        }
    }
    w[2].load(SeqCst).saturating_sub(w[0].load(SeqCst))
}

fn death_wake() {
    let n: usize = std::env::var("FAIRSHM_DEATH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100)
        .clamp(3, 10_000);
    println!("death wake: holder SIGKILLed -> waiter in another process granted, {n} kills");
    let w = shm::shared_words(3);

    let name = format!("fairshm-bench-death-{}", std::process::id());
    let _ = Table::unlink(&name);
    let t = Table::create(
        &name,
        &Config::with_pools(vec![PoolConfig::new("requests", 1)]),
    )
    .unwrap();
    let fairshm_ns: Vec<u64> = (0..n)
        .map(|_| {
            death_round(
                w,
                || {
                    let t = Table::open(&name).unwrap();
                    let _lease = t
                        .try_acquire(&Request::new("requests", "a"))
                        .unwrap()
                        .unwrap();
                    w[1].store(1, SeqCst);
                    std::thread::sleep(Duration::from_secs(60));
                },
                || {
                    let t = Table::open(&name).unwrap();
                    t.set_sweep_interval(Duration::from_secs(3600));
                    let got = t
                        .acquire(&Request::new("requests", "b"), Duration::from_secs(30))
                        .unwrap();
                    w[2].store(now_ns(), SeqCst);
                    assert!(got.is_ok(), "no death wake within 30 s");
                },
                || t.region().pool(0).waiters.load(SeqCst) > 0,
            )
        })
        .collect();
    let (f50, f99) = report_ns("fairshm robust futex", fairshm_ns);
    drop(t);
    Table::unlink(&name).unwrap();

    // SAFETY: a private SysV set of one semaphore; removed below.
    let semid = unsafe { libc::semget(libc::IPC_PRIVATE, 1, libc::IPC_CREAT | 0o600) };
    assert!(semid >= 0);
    let op = |delta: i16| {
        let mut b = libc::sembuf {
            sem_num: 0,
            sem_op: delta,
            sem_flg: libc::SEM_UNDO as i16,
        };
        // SAFETY: a valid sembuf on our own set.
        assert_eq!(unsafe { libc::semop(semid, &mut b, 1) }, 0);
    };
    let sem_ns: Vec<u64> = (0..n)
        .map(|_| {
            // SAFETY: SETVAL on our own set.
            assert_eq!(unsafe { libc::semctl(semid, 0, libc::SETVAL, 1) }, 0);
            death_round(
                w,
                || {
                    op(-1);
                    w[1].store(1, SeqCst);
                    std::thread::sleep(Duration::from_secs(60));
                },
                || {
                    op(-1);
                    w[2].store(now_ns(), SeqCst);
                },
                // SAFETY: GETNCNT on our own set.
                || unsafe { libc::semctl(semid, 0, libc::GETNCNT) } > 0,
            )
        })
        .collect();
    let (s50, s99) = report_ns("SysV SEM_UNDO at exit", sem_ns);
    // SAFETY: removing our own set.
    unsafe { libc::semctl(semid, 0, libc::IPC_RMID) };
    println!(
        "ratio fairshm / SEM_UNDO: p50 {:.2}, p99 {:.2}",
        f50 / s50,
        f99 / s99
    );
}
