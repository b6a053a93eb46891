//! Forked processes hammer one pool: `in_use` never exceeds `POOL`, and every counter
//! ends at zero.

mod common;

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

use common::{Seg, fork_child, one_pool, wait};
use fairshm::layout::pool_word;
use fairshm::region::Region;
use fairshm::{Request, Table};

const PROCS: usize = 8;
const CAP: u32 = 4;

fn ops() -> u64 {
    std::env::var("FAIRSHM_MP_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000)
}

/// Shared (MAP_SHARED | MAP_ANONYMOUS) words that survive fork: an independent count
/// of units held, the highest it reached, and the highest `in_use` seen while holding.
struct Witness {
    base: *mut libc::c_void,
}
impl Witness {
    fn new() -> Self {
        // SAFETY: a fresh anonymous shared mapping; no existing memory is affected.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        Witness { base }
    }
    fn word(&self, i: usize) -> &AtomicU64 {
        assert!(i < 8);
        // SAFETY: the mapping is 4096 bytes, page-aligned, zero-filled, lives until
        // `drop`, and is only accessed through atomics.
        unsafe { &*(self.base.cast::<u8>().add(i * 8) as *const AtomicU64) }
    }
}
impl Drop for Witness {
    fn drop(&mut self) {
        // SAFETY: `base` came from mmap of 4096 bytes and no reference outlives `self`.
        unsafe { libc::munmap(self.base, 4096) };
    }
}

#[test]
fn eight_processes_never_exceed_the_pool_and_end_at_zero() {
    let seg = Seg::new("mp");
    let table = seg.create(&one_pool(CAP));
    let witness = Witness::new();
    let n = ops();
    let children: Vec<_> = (0..PROCS)
        .map(|i| {
            let (name, w) = (seg.name.clone(), &witness);
            fork_child(move || {
                let t = Table::open(&name).unwrap();
                let tenant = ["a", "b", "c"][i % 3];
                let mut x = i as u64 + 1;
                for _ in 0..n {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let units = 1 + (x % 2) as u32;
                    let req = Request::new("requests", tenant).units(units);
                    let Ok(lease) = t.try_acquire(&req).unwrap() else {
                        continue;
                    };
                    let held = w.word(0).fetch_add(units as u64, SeqCst) + units as u64;
                    w.word(1).fetch_max(held, SeqCst);
                    let in_use = pool_word::in_use(t.region().pool(0).word.load(SeqCst));
                    w.word(2).fetch_max(in_use as u64, SeqCst);
                    w.word(3).fetch_add(1, SeqCst);
                    w.word(0).fetch_sub(units as u64, SeqCst);
                    lease.release().unwrap();
                }
                0
            })
        })
        .collect();
    for c in children {
        assert_eq!(wait(c), 0, "a worker failed");
    }
    let grants = witness.word(3).load(SeqCst);
    eprintln!(
        "{PROCS} processes x {n} attempts: {grants} grants, max held {} (witness), max in_use {}",
        witness.word(1).load(SeqCst),
        witness.word(2).load(SeqCst)
    );
    assert!(
        witness.word(1).load(SeqCst) <= CAP as u64,
        "witness saw more than POOL held"
    );
    assert!(
        witness.word(2).load(SeqCst) <= CAP as u64,
        "in_use exceeded POOL"
    );
    assert!(grants > n, "the pool was barely used: {grants} grants");
    let snap = table.snapshot();
    let pool = snap.pool("requests").unwrap();
    assert_eq!(pool.in_use, 0);
    assert!(!pool.op_pending);
    assert!(
        pool.tenants.iter().all(|t| t.held == 0),
        "{:?}",
        pool.tenants
    );
    assert_eq!(pool.grants, grants);
    assert_eq!(
        snap.leases.len(),
        0,
        "lease records left: {:?}",
        snap.leases
    );
}
