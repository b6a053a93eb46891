//! Test helpers: unique segment names removed on drop, and forked children.
#![allow(dead_code, unused_imports)] // each test binary and bench uses a part

use std::sync::atomic::{AtomicU32, Ordering};

use fairshm::{Config, PoolConfig, Table};

/// A segment name unique to this test process, unlinked when dropped.
pub struct Seg {
    pub name: String,
}

impl Seg {
    pub fn new(tag: &str) -> Seg {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        Seg {
            name: format!("fairshm-test-{tag}-{}-{n}", std::process::id()),
        }
    }
    pub fn create(&self, cfg: &Config) -> Table {
        Table::create(&self.name, cfg).expect("create segment")
    }
}

impl Drop for Seg {
    fn drop(&mut self) {
        let _ = Table::unlink(&self.name);
    }
}

/// Moves this (forked, single-threaded) process into a mount namespace of its own, with
/// `/` private so that what it mounts is seen by nobody else, and into the other
/// namespaces of `also` (`libc::CLONE_NEW*` flags; a new pid namespace holds this
/// process's children). `false` if it may not (not root): the caller skips, saying so.
pub fn own_namespaces(also: libc::c_int) -> bool {
    // SAFETY: unshare and mount read only their flags and NUL-terminated strings; they
    // change this process's own namespaces and its own mount of `/`.
    unsafe {
        libc::unshare(libc::CLONE_NEWNS | also) == 0
            && libc::mount(
                c"none".as_ptr(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) == 0
    }
}

/// Mounts a filesystem of `fstype` with `options` over `target`, in this process's own
/// mount namespace (see [`own_namespaces`]). `false` if it may not.
pub fn mount_here(
    fstype: &std::ffi::CStr,
    target: &std::ffi::CStr,
    options: &std::ffi::CStr,
) -> bool {
    // SAFETY: as in `own_namespaces`; every pointer is a NUL-terminated string.
    unsafe {
        libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            options.as_ptr().cast(),
        ) == 0
    }
}

/// Writes `bytes` at `offset` of segment `name`'s file (a test's scribble).
pub fn rewrite(name: &str, offset: u64, bytes: &[u8]) {
    use std::io::{Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/dev/shm/{name}"))
        .unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    f.write_all(bytes).unwrap();
}

/// One pool `requests` of `cap` permits, default floor (5%, at least 1) and window.
pub fn one_pool(cap: u32) -> Config {
    Config::with_pools(vec![PoolConfig::new("requests", cap)])
}

/// A config of one guaranteed pool (seed 001) `name` of `ceiling` in `unit`, with
/// `tenants` and their weights, a reclaim horizon and idleness (ms), and `procs` process
/// slots (each takes two state blocks of the pool), and no fair-share pool.
pub fn guaranteed(
    name: &str,
    ceiling: u32,
    unit: fairshm::FairnessUnit,
    tenants: &[(&str, u32)],
    (horizon, idle): (u32, u32),
    procs: u32,
) -> Config {
    let mut g = fairshm::GuaranteedConfig::new(name, ceiling)
        .unit(unit)
        .reclaim_horizon_ms(horizon)
        .idle_after_ms(idle);
    for (t, w) in tenants {
        g = g.tenant(t, *w);
    }
    Config {
        max_processes: procs,
        ..Config::with_pools(vec![])
    }
    .guaranteed(g)
}

/// Forks; the child runs `f` and exits with its code (101 on panic), never returning.
pub fn fork_child(f: impl FnOnce() -> i32) -> nix::unistd::Pid {
    // SAFETY: the child only runs `f` and then `_exit`s; the tests that fork keep the
    // child's work to async-signal-tolerant code paths of this crate and std (no locks
    // are held by other threads of the harness in the code the child runs).
    match unsafe { nix::unistd::fork() }.expect("fork") {
        nix::unistd::ForkResult::Child => {
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(101);
            // SAFETY: `_exit` skips atexit handlers and the harness's destructors, which
            // belong to the parent.
            unsafe { libc::_exit(code) }
        }
        nix::unistd::ForkResult::Parent { child } => child,
    }
}

/// Waits for a child; returns its exit code, or `128 + signal`. A child still running
/// after [`DEADLINE`] is killed (and reaped), and the test fails: it never hangs.
pub fn wait(pid: nix::unistd::Pid) -> i32 {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        match waitpid(pid, Some(WaitPidFlag::WNOHANG)).expect("waitpid") {
            WaitStatus::StillAlive => {}
            WaitStatus::Exited(_, code) => return code,
            WaitStatus::Signaled(_, sig, _) => return 128 + sig as i32,
            other => panic!("unexpected wait status {other:?}"),
        }
        if std::time::Instant::now() >= deadline {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::SIGKILL);
            let _ = waitpid(pid, None);
            panic!("child {pid} still ran after {DEADLINE:?}: killed");
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
}

/// The pool "ceiling" of 90 shared evenly by tenants a, b and c (cost units), with a
/// reclaim horizon of 5 s and an idleness of 20 s (a waiter asks again on its own only
/// every 10 s, and a tenant that acted is not lendable for 20 s), and 8 process slots.
pub fn three_even() -> Config {
    guaranteed(
        "ceiling",
        90,
        fairshm::FairnessUnit::Cost,
        &[("a", 1), ("b", 1), ("c", 1)],
        (5_000, 20_000),
        8,
    )
}

/// The library's clock (`CLOCK_MONOTONIC`), in ns.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer for clock_gettime.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The library's clock (`CLOCK_MONOTONIC`), in ms: the `now` of its explicit-time calls.
pub fn mono_ms() -> u64 {
    mono_ns() / 1_000_000
}

mod shm;
pub use shm::{env_or, shared_words};

/// One xorshift64 step: cheap, deterministic randomness for workers.
pub fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// How long a test waits for another process before it fails instead of hanging.
pub const DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// Polls `ready` every `every` until it holds. Fails the test (never hangs) if `child`
/// exits first (its exit code is in the message; the child is reaped) or if
/// [`DEADLINE`] passes.
pub fn wait_until(
    child: Option<nix::unistd::Pid>,
    what: &str,
    every: std::time::Duration,
    ready: impl Fn() -> bool,
) {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    let deadline = std::time::Instant::now() + DEADLINE;
    while !ready() {
        if let Some(pid) = child {
            match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => {}
                status => panic!("waiting for {what}: the child ended first ({status:?})"),
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "waiting for {what}: not after {DEADLINE:?}"
        );
        std::thread::sleep(every);
    }
}

/// Forked children that a test kills and reaps when it ends, even by a panic, so that
/// a failing test leaves no worker running.
pub struct Children(pub Vec<nix::unistd::Pid>);

impl Children {
    /// Waits for each child in turn ([`wait`]: a deadline, then killed) and returns
    /// their wait codes. A child leaves the list only once reaped, so if a wait fails
    /// the test, the guard's drop kills and reaps those still listed.
    pub fn wait_all(&mut self) -> Vec<i32> {
        let mut codes = Vec::with_capacity(self.0.len());
        while let Some(&pid) = self.0.first() {
            codes.push(wait(pid));
            self.0.remove(0);
        }
        codes
    }

    /// SIGKILLs and reaps every child still listed; returns their wait codes.
    pub fn kill_all(&mut self) -> Vec<i32> {
        self.0
            .drain(..)
            .map(|pid| {
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::SIGKILL);
                wait(pid)
            })
            .collect()
    }
}

impl std::ops::Deref for Children {
    type Target = Vec<nix::unistd::Pid>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Children {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // No second panic from `wait`'s deadline while unwinding.
            for pid in self.0.drain(..) {
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::SIGKILL);
                let _ = nix::sys::wait::waitpid(pid, None);
            }
        } else {
            self.kill_all();
        }
    }
}

/// Seed 000's departure, in pool `pool` of `t` (8 units, floor 1, a window of 1 s): "b"
/// asks once and goes; "a" takes 3 and "x" 4 (7 in use: 8 less the floor), and `busy`
/// runs on each of their leases; a's next ask is refused `refused` (a has 3 of a share
/// of 8/3). A blocking ask of a's is then admitted when b's window ends (a's share is 4),
/// though nothing is released to wake it: not before, and not seconds later. Returns
/// a's and x's leases, a's new one last.
pub fn admitted_when_b_leaves<'t>(
    t: &'t Table,
    pool: &str,
    busy: impl Fn(&fairshm::Lease<'t>),
    refused: fairshm::Reason,
) -> Vec<fairshm::Lease<'t>> {
    use std::time::{Duration, Instant};
    let ask = fairshm::Request::new(pool, "a");
    let get = |tenant: &str| {
        t.try_acquire(&fairshm::Request::new(pool, tenant))
            .unwrap()
            .unwrap_or_else(|r| panic!("{tenant}: {r}"))
    };
    get("b").release().unwrap();
    let b_went = Instant::now();
    let mut held: Vec<_> = ["a", "a", "a", "x", "x", "x", "x"].map(get).into();
    held.iter().for_each(&busy);
    let r = t.try_acquire(&ask).unwrap().unwrap_err();
    assert_eq!(r.reason, refused, "{r}");
    let got = t.acquire(&ask, Duration::from_secs(10)).unwrap();
    let after = b_went.elapsed();
    held.push(got.unwrap_or_else(|r| panic!("{r}")));
    assert!(
        after >= Duration::from_millis(990) && after < Duration::from_secs(4),
        "admitted {after:?} after b went, not when its window ended"
    );
    held
}

/// The sleeps the threads `tids` of this process have made (their voluntary context
/// switches, from `/proc`): a blocked waiter's wakes, each followed by a sleep.
pub fn sleeps(tids: &[i32]) -> u64 {
    tids.iter()
        .map(|tid| {
            let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
            status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .unwrap()
                .trim()
                .parse::<u64>()
                .unwrap()
        })
        .sum()
}

/// `n` threads that each wait up to 20 s for `req` on `t`, of pool `pool`: once all
/// are announced among the pool's waiters, and asleep, `body` runs, then `let_go`
/// with what it returned, which must let go of what keeps them waiting. Returns how
/// often the waiters slept again while `body` ran (each, once per wake that did not
/// serve it: [`sleeps`]; read before `let_go`, whose wakes serve them, and whose
/// served waiters then block until the end), and whether every waiter was served. A
/// served waiter's thread stays until `let_go` returns (or 20 s more, if it
/// panicked), so that its sleeps can be read, and holds what it was granted till then.
pub fn herd<R>(
    t: &Table,
    req: &fairshm::Request,
    pool: &str,
    n: usize,
    body: impl FnOnce() -> R,
    let_go: impl FnOnce(R),
) -> (u64, bool) {
    use std::time::Duration;
    let tids = std::sync::Mutex::new(Vec::new());
    let end = (std::sync::Mutex::new(false), std::sync::Condvar::new());
    std::thread::scope(|s| {
        let waiting: Vec<_> = (0..n)
            .map(|_| {
                s.spawn(|| {
                    tids.lock().unwrap().push(nix::unistd::gettid().as_raw());
                    // Held until the end: a served waiter's units stay taken.
                    let got = t.acquire(req, Duration::from_secs(20)).unwrap();
                    let ended = end.0.lock().unwrap();
                    let _ = end
                        .1
                        .wait_timeout_while(ended, Duration::from_secs(20), |e| !*e);
                    got.is_ok()
                })
            })
            .collect();
        wait_until(None, "the waiters", Duration::from_millis(1), || {
            t.snapshot().pool(pool).unwrap().waiters == n as u32
        });
        std::thread::sleep(Duration::from_millis(100)); // each asleep
        let tids = tids.lock().unwrap().clone();
        let before = sleeps(&tids);
        let got = body();
        let woke = sleeps(&tids) - before;
        let_go(got);
        *end.0.lock().unwrap() = true;
        end.1.notify_all();
        (woke, waiting.into_iter().all(|w| w.join().unwrap()))
    })
}
