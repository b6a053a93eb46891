//! The multi-process harness: acquire + release pairs in plain loops, run by 1, 2 and 4
//! forked single-threaded processes on one pool, fairshm side by side with its
//! baselines in the same run:
//! - `bare_atomic`: `fetch_add` / `fetch_sub` on one word of a `MAP_SHARED` page (the
//!   limit: no bound, no fairness, no recovery);
//! - `semop_undo`: SysV `semop` -1 / +1 with `SEM_UNDO` on a semaphore of the pool's
//!   size, blocking when it is empty (Semian's bulkhead mechanism);
//! - `posix_sem`: `sem_wait` / `sem_post` on a process-shared POSIX `sem_t` of the
//!   pool's size in a `MAP_SHARED` page (glibc's futex-based semaphore: no undo, so a
//!   killed holder's permit is lost for good);
//! - `fairshm`: the engine's `acquire` + `release` on handles resolved once (explicit
//!   `now`, so the clock is not measured), falling back to the blocking `acquire` when
//!   refused;
//! - `fairshm_by_name`: the façade's `try_acquire_at` + `release_at` with a `Request`
//!   of names (pool and tenant looked up on every call);
//! - `fairshm_spread`: as `fairshm`, but each process serves a tenant of its own, as
//!   workers serving different tenants do. The processes then share the pool's word
//!   only, not the tenant's held word as well: the difference between the two columns
//!   is what one tenant served by every process at once costs. The target is judged
//!   on `fairshm` (one tenant), the harder case.
//!
//! Pools of 2 (every process contends for the permits) and 1,000 (every process
//! contends only for the pool's word). Each cell is the median of 5 runs of the
//! aggregate wall time per pair: (last process done - start) / pairs of all processes.
//!
//! Run: `cargo bench --features internals --bench contended` (FAIRSHM_PAIRS per process, default 100000;
//! FAIRSHM_RUNS, default 5).

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use fairshm::{Config, Outcome, PoolConfig, Request, Table};

#[path = "../tests/common/mod.rs"]
mod common;
use common::{Seg, env_or, fork_child, shared_words, wait};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mech {
    Bare,
    Semop,
    PosixSem,
    Fairshm,
    ByName,
    Spread,
}

impl Mech {
    fn name(self) -> &'static str {
        match self {
            Mech::Bare => "bare_atomic",
            Mech::Semop => "semop_undo",
            Mech::PosixSem => "posix_sem",
            Mech::Fairshm => "fairshm",
            Mech::ByName => "fairshm_by_name",
            Mech::Spread => "fairshm_spread",
        }
    }
}

/// Shared words: [0] start flag, [1] ready count, [2 + i] process i's end stamp (ns).
fn run_once(mech: Mech, cap: u32, procs: usize, pairs: u64) -> f64 {
    let w = shared_words(2 + procs);
    let word = &shared_words(1)[0];
    let seg = Seg::new("bench-contended");
    let fs = matches!(mech, Mech::Fairshm | Mech::ByName | Mech::Spread);
    let table = fs.then(|| {
        let cfg = Config::with_pools(vec![PoolConfig::new("requests", cap)]);
        seg.create(&cfg)
    });
    let semid = if mech == Mech::Semop {
        // SAFETY: a private SysV set of one semaphore; the result is checked.
        let id = unsafe { libc::semget(libc::IPC_PRIVATE, 1, libc::IPC_CREAT | 0o600) };
        assert!(id >= 0, "semget failed");
        // SAFETY: SETVAL on semaphore 0 of the set we own.
        let rc = unsafe { libc::semctl(id, 0, libc::SETVAL, cap as libc::c_int) };
        assert_eq!(rc, 0, "semctl SETVAL");
        id
    } else {
        -1
    };
    // A sem_t (32 bytes) in 64 bytes of a shared page, inherited across fork; passed to
    // the children as an address (a raw pointer is not `Send`).
    let psem = (mech == Mech::PosixSem).then(|| {
        let sem = shared_words(8).as_ptr() as *mut libc::sem_t;
        // SAFETY: `sem` points into a fresh shared mapping large enough for a sem_t
        // (the atomics' UnsafeCell makes writing through it sound); pshared = 1.
        assert_eq!(unsafe { libc::sem_init(sem, 1, cap) }, 0, "sem_init");
        sem as usize
    });
    let kids: Vec<_> = (0..procs)
        .map(|i| {
            let name = seg.name.clone();
            fork_child(move || {
                let t = fs.then(|| {
                    let t = Table::open(&name).expect("open");
                    t.register().expect("register");
                    t
                });
                w[1].fetch_add(1, SeqCst);
                while w[0].load(SeqCst) == 0 {
                    std::hint::spin_loop();
                }
                match mech {
                    Mech::Bare => bare(word, pairs),
                    Mech::Semop => semop(semid, pairs),
                    Mech::PosixSem => posix_sem(psem.unwrap() as *mut libc::sem_t, pairs),
                    Mech::Fairshm => fairshm(t.as_ref().unwrap(), "acme", pairs),
                    Mech::Spread => fairshm(t.as_ref().unwrap(), &format!("tenant-{i}"), pairs),
                    Mech::ByName => by_name(t.as_ref().unwrap(), pairs),
                }
                w[2 + i].store(fairshm::clock::now_ns(), SeqCst);
                0
            })
        })
        .collect();
    while w[1].load(SeqCst) < procs as u64 {
        std::thread::sleep(Duration::from_micros(100));
    }
    let start = fairshm::clock::now_ns();
    w[0].store(1, SeqCst);
    for k in kids {
        assert_eq!(wait(k), 0, "a {} worker failed", mech.name());
    }
    let end = (0..procs).map(|i| w[2 + i].load(SeqCst)).max().unwrap();
    if semid >= 0 {
        // SAFETY: removing the set we created; no process uses it any more.
        unsafe { libc::semctl(semid, 0, libc::IPC_RMID) };
    }
    if let Some(sem) = psem {
        let sem = sem as *mut libc::sem_t;
        let mut val = 0;
        // SAFETY: the semaphore initialised above; every child has exited, so no
        // process waits on it when it is read and destroyed (once).
        unsafe {
            assert_eq!(libc::sem_getvalue(sem, &mut val), 0);
            libc::sem_destroy(sem);
        }
        assert_eq!(val, cap as i32, "posix_sem not back to its size");
    }
    if let Some(t) = &table {
        let snap = t.snapshot();
        assert_eq!(snap.pools[0].in_use, 0, "fairshm pool not back to 0");
    }
    drop(table);
    (end - start) as f64 / (procs as u64 * pairs) as f64
}

fn bare(word: &AtomicU64, pairs: u64) {
    for _ in 0..pairs {
        std::hint::black_box(word.fetch_add(1, SeqCst));
        std::hint::black_box(word.fetch_sub(1, SeqCst));
    }
}

fn semop(semid: i32, pairs: u64) {
    let mut down = libc::sembuf {
        sem_num: 0,
        sem_op: -1,
        sem_flg: libc::SEM_UNDO as i16,
    };
    let mut up = libc::sembuf {
        sem_num: 0,
        sem_op: 1,
        sem_flg: libc::SEM_UNDO as i16,
    };
    for _ in 0..pairs {
        // SAFETY: valid sembuf pointers, count 1, on a set that outlives the loop.
        unsafe {
            while libc::semop(semid, &mut down, 1) != 0 {
                assert_eq!(*libc::__errno_location(), libc::EINTR, "semop down");
            }
            assert_eq!(libc::semop(semid, &mut up, 1), 0, "semop up");
        }
    }
}

fn posix_sem(sem: *mut libc::sem_t, pairs: u64) {
    for _ in 0..pairs {
        // SAFETY: `sem` is the process-shared semaphore `run_once` initialised in a
        // shared mapping this child inherited; it is destroyed only after every child
        // has exited.
        unsafe {
            while libc::sem_wait(sem) != 0 {
                assert_eq!(*libc::__errno_location(), libc::EINTR, "sem_wait");
            }
            assert_eq!(libc::sem_post(sem), 0, "sem_post");
        }
    }
}

fn fairshm(t: &Table, tenant: &str, pairs: u64) {
    let e = t.engine();
    let (pool, tenant_id) = (e.pool("requests").unwrap(), e.tenant(tenant).unwrap());
    let req = Request::new("requests", tenant);
    for k in 0..pairs {
        let now = 1000 + k / 1000;
        let id = match e.acquire(pool, tenant_id, 1, 0, now).expect("acquire") {
            Outcome::Granted(id) => id,
            Outcome::Refused(_) => t
                .acquire(&req, Duration::from_secs(30))
                .expect("acquire")
                .expect("granted within 30 s")
                .into_id(),
        };
        e.release(id, now).expect("release");
    }
}

fn by_name(t: &Table, pairs: u64) {
    let req = Request::new("requests", "acme");
    for k in 0..pairs {
        let now = 1000 + k / 1000;
        let lease = match t.try_acquire_at(&req, now).expect("try_acquire") {
            Ok(lease) => lease,
            Err(_) => t
                .acquire(&req, Duration::from_secs(30))
                .expect("acquire")
                .expect("granted within 30 s"),
        };
        lease.release_at(now).expect("release");
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; any filter argument is ignored.
    let pairs: u64 = env_or("FAIRSHM_PAIRS", 100_000);
    let runs: usize = env_or("FAIRSHM_RUNS", 5).max(1);
    println!(
        "contended acquire+release pairs: aggregate ns per pair, median of {runs} runs, \
         {pairs} pairs per process"
    );
    println!(
        "{:>5} {:>6} {:>12} {:>12} {:>12} {:>12} {:>16} {:>15} {:>9} {:>9} {:>9} {:>13}",
        "pool",
        "procs",
        "bare_atomic",
        "semop_undo",
        "posix_sem",
        "fairshm",
        "fairshm_by_name",
        "fairshm_spread",
        "fs/bare",
        "fs/psem",
        "semop/fs",
        "semop/spread"
    );
    for cap in [2u32, 1000] {
        for procs in [1usize, 2, 4] {
            let cell =
                |m: Mech| median((0..runs).map(|_| run_once(m, cap, procs, pairs)).collect());
            let (b, s, ps) = (cell(Mech::Bare), cell(Mech::Semop), cell(Mech::PosixSem));
            let (f, n, sp) = (cell(Mech::Fairshm), cell(Mech::ByName), cell(Mech::Spread));
            println!(
                "{cap:>5} {procs:>6} {b:>12.1} {s:>12.1} {ps:>12.1} {f:>12.1} {n:>16.1} \
                 {sp:>15.1} {:>8.1}x {:>8.1}x {:>8.2}x {:>12.2}x",
                f / b,
                f / ps,
                s / f,
                s / sp
            );
        }
    }
}
