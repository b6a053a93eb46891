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

/// One pool `requests` of `cap` permits, default floor (5%, at least 1) and window.
pub fn one_pool(cap: u32) -> Config {
    Config::with_pools(vec![PoolConfig::new("requests", cap)])
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

/// Waits for a child; returns its exit code, or `128 + signal`.
pub fn wait(pid: nix::unistd::Pid) -> i32 {
    use nix::sys::wait::{WaitStatus, waitpid};
    match waitpid(pid, None).expect("waitpid") {
        WaitStatus::Exited(_, code) => code,
        WaitStatus::Signaled(_, sig, _) => 128 + sig as i32,
        other => panic!("unexpected wait status {other:?}"),
    }
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
