//! Wake latency across processes: release -> the blocked waiter (another process)
//! holding its grant. Two forked players hand one permit back and forth; each releases
//! only once the other is asleep in `acquire`, stamps the release, and the waiter
//! stamps its grant. Baseline in the same run: SysV `semop` with `SEM_UNDO` (Semian),
//! measured the same way (`GETNCNT` for "the other is asleep"); and two futex-based
//! floors: a process-shared POSIX `sem_t` (glibc's `sem_wait` / `sem_post`) and a bare
//! process-shared futex word. fairshm's waiter sleeps with a deadline (the caller's
//! timeout), so two timed twins are measured too: `semtimedop` with a 10 s timeout (the
//! call Semian's acquire makes) and the bare futex with an absolute 10 s deadline
//! (`FUTEX_WAIT_BITSET`, as fairshm's waiter).
//!
//! Then the death wake: a holder process is SIGKILLed while a waiter (another process)
//! is asleep behind it; kill -> waiter granted. fairshm's backup sweep is set to an
//! hour, so only the kernel's robust-futex wake can serve the waiter (it wakes an
//! anchor, which reaps the holder and wakes the waiter with its permit); the baseline is
//! `SEM_UNDO`, which the kernel applies at the holder's exit.
//!
//! Last, the death return with nobody waiting: a holder is SIGKILLed and the bench
//! polls until its permit is free again; fairshm's permit comes back through the anchor
//! of a live process (the bench's own); the baseline is again `SEM_UNDO`.
//!
//! Run: `cargo bench --bench wake` (FAIRSHM_WAKE_ROUNDS, default 2000, in
//! FAIRSHM_WAKE_BLOCKS interleaved blocks, default one per 200 handoffs, 10 to 100;
//! FAIRSHM_DEATH_ROUNDS, default 100; the two players of a handoff are pinned to two
//! CPUs unless FAIRSHM_WAKE_PIN=0).

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use fairshm::region::Region;

#[path = "../tests/common/mod.rs"]
mod common;
use common::{Seg, env_or, fork_child, one_pool, shared_words, wait};
use fairshm::{Request, Table};

const MAX_ROUNDS: usize = 100_000;

/// The two CPUs the players are pinned to (the first two this process may run on), or
/// none: fewer than two, or `FAIRSHM_WAKE_PIN=0`. Pinned, every round is a wake across
/// CPUs for all six mechanisms; unpinned, the scheduler places each block's players
/// anew, and a block whose players share a CPU wakes differently from one whose do not.
fn player_cpus() -> Option<[usize; 2]> {
    if env_or("FAIRSHM_WAKE_PIN", 1) == 0 {
        return None;
    }
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity writes at most
    // its size into it.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let rc = libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
        (rc == 0).then_some(set)?
    };
    // SAFETY: CPU_ISSET reads the set, for CPU numbers within CPU_SETSIZE.
    let mut cpus = (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) });
    Some([cpus.next()?, cpus.next()?])
}

/// Pins this process to CPU `cpu`.
fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t with one CPU (below CPU_SETSIZE) set; this process only.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    assert_eq!(rc, 0, "pinning a player to CPU {cpu}");
}

/// Runs `player(0)` and `player(1)` in two forked processes (on two CPUs of their own,
/// see `player_cpus`) and waits for both.
fn two_players(player: impl Fn(usize) + Copy) {
    let cpus = player_cpus();
    let kids: Vec<_> = (0..2)
        .map(|me| {
            fork_child(move || {
                if let Some(c) = cpus {
                    pin(c[me]);
                }
                player(me);
                0
            })
        })
        .collect();
    for k in kids {
        assert_eq!(wait(k), 0, "a player failed");
    }
}

/// Whether process `pid` is asleep (state `S`) per `/proc/PID/stat`.
fn asleep(pid: u64) -> bool {
    fairshm::liveness::proc_info(pid as u32).is_some_and(|i| i.state == b'S')
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

/// The six handoffs the bench compares.
#[derive(Clone, Copy)]
enum Mech {
    Fairshm,
    Semop,
    Bare,
    PosixSem,
    SemTimed,
    BareTimed,
}

fn main() {
    let n = env_or("FAIRSHM_WAKE_ROUNDS", 2000).clamp(10, MAX_ROUNDS);
    // Interleaved blocks, in a rotating order: a host whose speed drifts during the run
    // (these are shared machines) then shifts all six alike instead of whichever ran
    // last. Blocks of about 200 handoffs by default (10 to 100 of them): the finer the
    // interleaving, the less a burst of the host's other load lands on one mechanism.
    let blocks = env_or("FAIRSHM_WAKE_BLOCKS", (n / 200).clamp(10, 100)).clamp(1, 100);
    let per = (n / blocks).max(10);
    let placed = match player_cpus() {
        Some([a, b]) => format!("players pinned to CPUs {a} and {b}"),
        None => "players unpinned".to_owned(),
    };
    println!(
        "wake latency: release -> blocked waiter in another process granted, \
         {} handoffs each, in {blocks} interleaved blocks, {placed}",
        per * blocks
    );

    let seg = Seg::new("bench-wake");
    let (name, t) = (seg.name.clone(), seg.create(&one_pool(1)));
    let sem = Sem::new(1);
    let token = &shared_words(1)[0];
    let lat = shared_words(per + 4);
    // A sem_t (32 bytes) in 64 bytes of a shared page, its value the one token.
    let psem = shared_words(8).as_ptr() as *mut libc::sem_t;
    // SAFETY: `psem` points into a fresh shared mapping large enough for a sem_t (the
    // atomics' UnsafeCell makes writing through it sound); pshared = 1, value 1.
    assert_eq!(unsafe { libc::sem_init(psem, 1, 1) }, 0, "sem_init");
    let mut got: [Vec<u64>; 6] = Default::default();
    let order = [
        Mech::Fairshm,
        Mech::Semop,
        Mech::Bare,
        Mech::PosixSem,
        Mech::SemTimed,
        Mech::BareTimed,
    ];
    for blk in 0..blocks {
        for i in 0..order.len() {
            let mech = order[(blk + i) % order.len()];
            for w in lat {
                w.store(0, SeqCst);
            }
            match mech {
                Mech::Fairshm => fairshm_handoffs(&name, lat, per),
                Mech::Semop => semop_handoffs(&sem, lat, per, false),
                Mech::Bare => bare_futex_handoffs(token, lat, per, false),
                Mech::PosixSem => posix_sem_handoffs(psem as usize, lat, per),
                Mech::SemTimed => semop_handoffs(&sem, lat, per, true),
                Mech::BareTimed => bare_futex_handoffs(token, lat, per, true),
            }
            got[mech as usize].extend(lat[2..=per].iter().map(|a| a.load(SeqCst)));
        }
    }
    let [f, s, b, ps, st, bt] = got;
    let (f50, f99) = report_ns("fairshm futex", f);
    let (s50, s99) = report_ns("SysV semop + SEM_UNDO", s);
    let (b50, b99) = report_ns("bare shared futex", b);
    let (p50, p99) = report_ns("POSIX sem_t (pshared)", ps);
    let (st50, st99) = report_ns("SysV semtimedop, 10 s", st);
    let (bt50, bt99) = report_ns("bare futex, 10 s deadline", bt);
    println!(
        "ratio fairshm / semop: p50 {:.2}, p99 {:.2}",
        f50 / s50,
        f99 / s99
    );
    println!(
        "ratio bare futex / semop: p50 {:.2}, p99 {:.2} (the mechanism's own cost)",
        b50 / s50,
        b99 / s99
    );
    println!(
        "ratio POSIX sem_t / semop: p50 {:.2}, p99 {:.2}; fairshm / sem_t: p50 {:.2}, p99 {:.2}",
        p50 / s50,
        p99 / s99,
        f50 / p50,
        f99 / p99
    );
    println!(
        "ratio fairshm / semtimedop (Semian's call): p50 {:.2}, p99 {:.2}",
        f50 / st50,
        f99 / st99
    );
    println!(
        "ratio timed / untimed (the deadline's own cost): semtimedop / semop p50 {:.2}, \
         p99 {:.2}; bare futex p50 {:.2}, p99 {:.2}",
        st50 / s50,
        st99 / s99,
        bt50 / b50,
        bt99 / b99
    );
    // SAFETY: every player has exited: no process waits on the semaphore; destroyed once.
    unsafe { libc::sem_destroy(psem) };
    drop((t, seg, sem));
    death_wake();
    death_return();
}

/// `per` handoffs of the only permit of pool `requests` of the table `name`.
fn fairshm_handoffs(name: &str, lat: &[AtomicU64], per: usize) {
    two_players(|me| {
        let t = Table::open(name).unwrap();
        let req = Request::new("requests", ["a", "b"][me]);
        let held = std::cell::RefCell::new(None);
        handoff_rounds(
            lat,
            per,
            me,
            || {
                let lease = t.acquire(&req, Duration::from_secs(10)).unwrap().unwrap();
                *held.borrow_mut() = Some(lease);
            },
            || t.region().pool(0).waiters.load(SeqCst) != 0,
            || held.borrow_mut().take().unwrap().release().unwrap(),
        );
    });
}

/// `per` handoffs of the semaphore `sem` (value 1), as Semian takes it: with
/// `semtimedop` and a 10 s timeout if `timed`, else `semop`.
fn semop_handoffs(sem: &Sem, lat: &[AtomicU64], per: usize, timed: bool) {
    two_players(|me| {
        handoff_rounds(
            lat,
            per,
            me,
            || {
                if timed {
                    sem.take_within(Duration::from_secs(10))
                } else {
                    sem.op(-1)
                }
            },
            || sem.get(libc::GETNCNT) > 0,
            || sem.op(1),
        );
    });
}

/// A private SysV set of one semaphore, used as Semian uses it (`SEM_UNDO`); removed
/// when dropped (by the process that made it: forked children `_exit`).
struct Sem(i32);

impl Sem {
    fn new(val: i32) -> Sem {
        // SAFETY: semget with IPC_PRIVATE makes a new set; no pointer is passed.
        let id = unsafe { libc::semget(libc::IPC_PRIVATE, 1, libc::IPC_CREAT | 0o600) };
        assert!(id >= 0, "semget");
        let sem = Sem(id);
        sem.set(val);
        sem
    }
    /// `semop` of `delta` with `SEM_UNDO` (a -1 blocks while the value is 0).
    fn op(&self, delta: i16) {
        let mut b = libc::sembuf {
            sem_num: 0,
            sem_op: delta,
            sem_flg: libc::SEM_UNDO as i16,
        };
        // SAFETY: one valid sembuf on our own set.
        assert_eq!(unsafe { libc::semop(self.0, &mut b, 1) }, 0);
    }
    /// `semtimedop` of -1 with `SEM_UNDO` and a relative `timeout` (which must not pass).
    fn take_within(&self, timeout: Duration) {
        let mut b = libc::sembuf {
            sem_num: 0,
            sem_op: -1,
            sem_flg: libc::SEM_UNDO as i16,
        };
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: one valid sembuf and a valid timespec, both outliving the call, on
        // our own set (glibc has no `semtimedop` in the `libc` crate: the raw call).
        let rc = unsafe {
            libc::syscall(
                libc::SYS_semtimedop,
                self.0,
                &mut b as *mut libc::sembuf,
                1usize,
                &ts as *const libc::timespec,
            )
        };
        assert_eq!(rc, 0, "semtimedop");
    }
    fn set(&self, val: i32) {
        // SAFETY: SETVAL on our own set takes an int argument.
        assert_eq!(unsafe { libc::semctl(self.0, 0, libc::SETVAL, val) }, 0);
    }
    /// `GETVAL`, `GETNCNT`: commands that take no argument.
    fn get(&self, cmd: i32) -> i32 {
        // SAFETY: a read-only command on our own set, no argument.
        unsafe { libc::semctl(self.0, 0, cmd) }
    }
}

impl Drop for Sem {
    fn drop(&mut self) {
        // SAFETY: removing our own set; no argument.
        unsafe { libc::semctl(self.0, 0, libc::IPC_RMID) };
    }
}

/// One return round with nobody waiting: `hold` (in a child) takes the only permit
/// and sets `w[1]`; it is SIGKILLed, and the parent polls `back` (every 20 us, the
/// same for both mechanisms) until the permit is free again. Returns kill -> back, ns.
/// A holder's body: takes its permit (kept until the process dies), says so in
/// `w[1]`, and waits to be killed.
fn hold_until_killed<T>(w: &[AtomicU64], take: impl FnOnce() -> T) {
    let _held = take();
    w[1].store(1, SeqCst);
    std::thread::sleep(Duration::from_secs(60));
}

/// One permit of pool `requests` for tenant `a` of the table `name`, opened here.
fn take_one(name: &str) -> fairshm::OwnedLease {
    let t = std::sync::Arc::new(Table::open(name).unwrap());
    t.try_acquire_owned(&Request::new("requests", "a"))
        .unwrap()
        .unwrap()
}

fn return_round(w: &[AtomicU64], hold: impl FnOnce(), back: impl Fn() -> bool) -> u64 {
    w[1].store(0, SeqCst);
    let holder = fork_child(|| {
        hold();
        0
    });
    while w[1].load(SeqCst) == 0 {
        std::thread::yield_now();
    }
    let t0 = fairshm::clock::now_ns();
    nix::sys::signal::kill(holder, nix::sys::signal::SIGKILL).unwrap();
    while !back() {
        assert!(fairshm::clock::now_ns() - t0 < 30_000_000_000, "never back");
        std::thread::sleep(Duration::from_micros(20));
    }
    let ns = fairshm::clock::now_ns() - t0;
    assert_eq!(wait(holder), 128 + 9);
    ns
}

/// A dead holder's permit back with nobody waiting and nobody calling `reap_dead`:
/// fairshm's returner is the anchor of a live registered process (here the bench's
/// own, which only watches); the baseline is `SEM_UNDO`, applied by the kernel at exit.
fn death_return() {
    let n = env_or("FAIRSHM_DEATH_ROUNDS", 100).clamp(3, 10_000);
    println!("death return: holder SIGKILLed -> permit free again, nobody waiting, {n} kills");
    let w = shared_words(2);
    let seg = Seg::new("bench-return");
    let (name, t) = (seg.name.clone(), seg.create(&one_pool(1)));
    t.register().unwrap();
    let fairshm_ns: Vec<u64> = (0..n)
        .map(|_| {
            return_round(
                w,
                || hold_until_killed(w, || take_one(&name)),
                || fairshm::layout::pool_word::in_use(t.region().pool(0).word.load(SeqCst)) == 0,
            )
        })
        .collect();
    let (f50, f99) = report_ns("fairshm, a live peer's anchor reaps", fairshm_ns);
    drop((t, seg));
    let sem = Sem::new(1);
    let sem_ns: Vec<u64> = (0..n)
        .map(|_| {
            return_round(
                w,
                || hold_until_killed(w, || sem.op(-1)),
                || sem.get(libc::GETVAL) == 1,
            )
        })
        .collect();
    let (s50, s99) = report_ns("SysV SEM_UNDO at exit", sem_ns);
    drop(sem);
    println!(
        "ratio fairshm / SEM_UNDO: p50 {:.2}, p99 {:.2}",
        f50 / s50,
        f99 / s99
    );
}

/// The floor under fairshm's wake: the same handoff with nothing but a process-shared
/// futex word in shared memory (no rule, no lease, no recovery). `word[0]` is the
/// token: 1 while free, 0 while held; a waiter sleeps while it is 0. `timed`: the
/// waiter sleeps with an absolute `CLOCK_MONOTONIC` deadline 10 s on
/// (`FUTEX_WAIT_BITSET`, as fairshm's waiter does), else with none (`FUTEX_WAIT`).
fn bare_futex_handoffs(word: &AtomicU64, lat: &[AtomicU64], n: usize, timed: bool) {
    word.store(1, SeqCst);
    let wait_word = |expect: u32| {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: the low half of an aligned u64 of a shared mapping that outlives the
        // call; FUTEX_WAIT(_BITSET) without FUTEX_PRIVATE_FLAG (shared between
        // processes); `ts` outlives the call (and clock_gettime writes only into it).
        unsafe {
            if timed {
                libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
                ts.tv_sec += 10;
                libc::syscall(
                    libc::SYS_futex,
                    word.as_ptr() as *mut u32,
                    libc::FUTEX_WAIT_BITSET,
                    expect,
                    &ts as *const libc::timespec,
                    std::ptr::null::<u32>(),
                    libc::FUTEX_BITSET_MATCH_ANY,
                )
            } else {
                libc::syscall(
                    libc::SYS_futex,
                    word.as_ptr() as *mut u32,
                    libc::FUTEX_WAIT,
                    expect,
                    std::ptr::null::<libc::timespec>(),
                )
            }
        };
    };
    let wake_word = || {
        // SAFETY: as above; FUTEX_WAKE of one waiter.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr() as *mut u32,
                libc::FUTEX_WAKE,
                1,
            )
        };
    };
    two_players(|me| {
        handoff_rounds(
            lat,
            n,
            me,
            // Take the token, sleeping while it is held.
            || {
                while word.compare_exchange(1, 0, SeqCst, SeqCst).is_err() {
                    wait_word(0);
                }
            },
            || true, // a sleeper is seen by `asleep` alone
            || {
                word.store(1, SeqCst);
                wake_word();
            },
        );
    });
}

/// `n` handoffs of a process-shared POSIX semaphore of value 1 at address `sem`
/// (glibc's: an atomic count and a futex, no undo).
fn posix_sem_handoffs(sem: usize, lat: &[AtomicU64], n: usize) {
    let sem = sem as *mut libc::sem_t;
    two_players(|me| {
        handoff_rounds(
            lat,
            n,
            me,
            || {
                // SAFETY: the semaphore `main` initialised in a shared mapping that this
                // forked player inherited; destroyed only after both players exited.
                while unsafe { libc::sem_wait(sem) } != 0 {
                    assert_eq!(
                        std::io::Error::last_os_error().raw_os_error(),
                        Some(libc::EINTR)
                    );
                }
            },
            || true, // a sleeper is seen by `asleep` alone
            // SAFETY: as above.
            || assert_eq!(unsafe { libc::sem_post(sem) }, 0),
        );
    });
}

/// One player's half of the handoff rounds. `lat` is [release stamp, latency of round
/// k at k + 1 ..., rounds granted so far at n + 1, each player's pid at n + 2 + me]. A
/// player asks for round k only once round k - 1 was granted (to the other player), so
/// the rounds alternate even though a releaser might otherwise barge back in first;
/// and a holder gives the token back only once the other player is queued for it
/// (`waiting`) and asleep in the kernel, so every round measures a real wake.
fn handoff_rounds(
    lat: &[AtomicU64],
    n: usize,
    me: usize,
    take: impl Fn(),
    waiting: impl Fn() -> bool,
    give: impl Fn(),
) {
    lat[n + 2 + me].store(std::process::id() as u64, SeqCst);
    for k in (me..n).step_by(2) {
        while lat[n + 1].load(SeqCst) != k as u64 {
            std::hint::spin_loop();
        }
        take();
        lat[k + 1].store(
            fairshm::clock::now_ns().saturating_sub(lat[0].load(SeqCst)),
            SeqCst,
        );
        lat[n + 1].store(k as u64 + 1, SeqCst);
        if k + 1 < n {
            let other = n + 2 + (1 - me);
            while !waiting() || !asleep(lat[other].load(SeqCst)) {
                std::hint::spin_loop();
            }
        }
        lat[0].store(fairshm::clock::now_ns(), SeqCst);
        give();
    }
}

/// One death round: `hold` (in a child) takes the only permit and sets `w[1]`;
/// `wait_for_it`
/// (in another child) blocks for it and stamps `w[2]` when granted. Once the waiter is
/// asleep (`asleep_too` also agrees), the holder is SIGKILLed at stamp `w[0]`.
fn death_round(
    w: &[AtomicU64],
    hold: impl FnOnce(),
    wait_for_it: impl FnOnce(),
    asleep_too: impl Fn() -> bool,
) -> u64 {
    for x in w {
        x.store(0, SeqCst);
    }
    let holder = fork_child(|| {
        hold();
        0
    });
    while w[1].load(SeqCst) == 0 {
        std::hint::spin_loop();
    }
    let waiter = fork_child(|| {
        wait_for_it();
        0
    });
    while !asleep_too() || !asleep(waiter.as_raw() as u64) {
        std::thread::yield_now();
    }
    w[0].store(fairshm::clock::now_ns(), SeqCst);
    nix::sys::signal::kill(holder, nix::sys::signal::SIGKILL).unwrap();
    assert_eq!(wait(holder), 128 + 9);
    assert_eq!(wait(waiter), 0, "the waiter failed");
    w[2].load(SeqCst).saturating_sub(w[0].load(SeqCst))
}

fn death_wake() {
    let n = env_or("FAIRSHM_DEATH_ROUNDS", 100).clamp(3, 10_000);
    println!("death wake: holder SIGKILLed -> waiter in another process granted, {n} kills");
    let w = shared_words(3);

    let seg = Seg::new("bench-death");
    let (name, t) = (seg.name.clone(), seg.create(&one_pool(1)));
    let fairshm_ns: Vec<u64> = (0..n)
        .map(|_| {
            death_round(
                w,
                || hold_until_killed(w, || take_one(&name)),
                || {
                    let t = Table::open(&name).unwrap();
                    t.set_sweep_interval(Duration::from_secs(3600));
                    let got = t
                        .acquire(&Request::new("requests", "b"), Duration::from_secs(30))
                        .unwrap();
                    w[2].store(fairshm::clock::now_ns(), SeqCst);
                    assert!(got.is_ok(), "no death wake within 30 s");
                },
                || t.region().pool(0).waiters.load(SeqCst) > 0,
            )
        })
        .collect();
    let (f50, f99) = report_ns("fairshm robust futex", fairshm_ns);
    drop((t, seg));

    let sem = Sem::new(1);
    let sem_ns: Vec<u64> = (0..n)
        .map(|_| {
            sem.set(1);
            death_round(
                w,
                || hold_until_killed(w, || sem.op(-1)),
                || {
                    sem.op(-1);
                    w[2].store(fairshm::clock::now_ns(), SeqCst);
                },
                || sem.get(libc::GETNCNT) > 0,
            )
        })
        .collect();
    let (s50, s99) = report_ns("SysV SEM_UNDO at exit", sem_ns);
    drop(sem);
    println!(
        "ratio fairshm / SEM_UNDO: p50 {:.2}, p99 {:.2}",
        f50 / s50,
        f99 / s99
    );
}
