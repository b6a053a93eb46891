//! Forked processes hammer one pool: `in_use` never exceeds `POOL`, and every counter
//! ends at zero.

mod common;

use std::sync::atomic::Ordering::SeqCst;

use common::{Seg, fork_child, one_pool};
use fairshm::layout::pool_word;
use fairshm::region::Region;
use fairshm::{Request, Table};

const PROCS: usize = 8;
const CAP: u32 = 4;

fn ops() -> u64 {
    common::env_or("FAIRSHM_MP_OPS", 100_000)
}

#[test]
fn eight_processes_never_exceed_the_pool_and_end_at_zero() {
    let seg = Seg::new("mp");
    let table = seg.create(&one_pool(CAP));
    // [0] units held (independent count), [1] its maximum, [2] max in_use seen while
    // holding, [3] grants.
    let witness = common::shared_words(4);
    let n = ops();
    // A guard: a failed wait kills and reaps the other workers.
    let mut children = common::Children(Vec::with_capacity(PROCS));
    for i in 0..PROCS {
        children.push({
            let (name, w) = (seg.name.clone(), witness);
            fork_child(move || {
                let t = Table::open(&name).unwrap();
                let tenant = ["a", "b", "c"][i % 3];
                let mut x = i as u64 + 1;
                for _ in 0..n {
                    common::xorshift(&mut x);
                    let units = 1 + (x % 2) as u32;
                    let req = Request::new("requests", tenant).units(units);
                    let Ok(lease) = t.try_acquire(&req).unwrap() else {
                        continue;
                    };
                    let held = w[0].fetch_add(units as u64, SeqCst) + units as u64;
                    w[1].fetch_max(held, SeqCst);
                    let in_use = pool_word::in_use(t.region().pool(0).word.load(SeqCst));
                    w[2].fetch_max(in_use as u64, SeqCst);
                    w[3].fetch_add(1, SeqCst);
                    w[0].fetch_sub(units as u64, SeqCst);
                    lease.release().unwrap();
                }
                0
            })
        });
    }
    let codes = children.wait_all();
    assert!(
        codes.iter().all(|&c| c == 0),
        "a worker failed: wait codes {codes:?}"
    );
    let grants = witness[3].load(SeqCst);
    eprintln!(
        "{PROCS} processes x {n} attempts: {grants} grants, max held {} (witness), max in_use {}",
        witness[1].load(SeqCst),
        witness[2].load(SeqCst)
    );
    assert!(
        witness[1].load(SeqCst) <= CAP as u64,
        "witness saw more than POOL held"
    );
    assert!(
        witness[2].load(SeqCst) <= CAP as u64,
        "in_use exceeded POOL"
    );
    assert!(grants > n, "the pool was barely used: {grants} grants");
    let snap = table.snapshot();
    let pool = snap.pool("requests").unwrap();
    assert_eq!(pool.in_use, 0);
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
