//! A lease is released by the table handle that acquired it, in a fair-share pool and
//! in a guaranteed one. Another handle of the same process, or another process, is
//! refused `NotOwner`, and the error says who holds the lease. Nothing is released by
//! the refusal.
mod common;

use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use common::{Seg, fork_child, one_pool};
use fairshm::guaranteed::GLeaseId;
use fairshm::{Config, Error, LeaseId, Request, Table};

/// The pool `requests` of 4 beside a guaranteed pool `tokens` of 100 (`a`, `b`).
fn both() -> Config {
    let mut cfg = common::guaranteed(
        "tokens",
        100,
        fairshm::FairnessUnit::Cost,
        &[("a", 1), ("b", 1)],
        (100, 150),
        8,
    );
    cfg.pools = one_pool(4).pools;
    cfg
}

fn in_use(t: &Table) -> u32 {
    t.snapshot().pool("requests").unwrap().in_use
}

fn assert_not_owner(e: Error, says: &str) {
    let text = e.to_string();
    assert!(matches!(e, Error::NotOwner { .. }), "{text}");
    assert!(text.contains(says), "{says:?} in {text}");
}

const OTHER_HANDLE: &str = "acquired through another table handle of this process (process slot";

#[test]
fn another_handle_of_this_process_is_told_to_release_through_the_first() {
    let seg = Seg::new("owner-handle");
    let t = seg.create(&both());
    let lease = t
        .try_acquire(&Request::new("requests", "acme"))
        .unwrap()
        .unwrap();
    let g = t.guaranteed("tokens").unwrap();
    let gl = g.acquire("a", 10, 100, 0).unwrap().unwrap();
    let other = Table::open(&seg.name).unwrap();
    other.register().unwrap();
    assert_not_owner(other.release_id(lease.id()).unwrap_err(), OTHER_HANDLE);
    let g2 = other.guaranteed("tokens").unwrap();
    assert_not_owner(g2.release(gl.id, 1).unwrap_err(), OTHER_HANDLE);
    assert_eq!(in_use(&t), 1, "nothing released");
    assert_eq!(g.stats(1).unwrap().in_use, 10, "nothing released");
    lease.release().unwrap();
    g.release(gl.id, 2).unwrap();
    assert_eq!(in_use(&t), 0);
    assert_eq!(g.stats(2).unwrap().in_use, 0);
}

#[test]
fn another_process_is_told_which_process_holds_the_lease() {
    let seg = Seg::new("owner-proc");
    let t = seg.create(&both());
    t.register().unwrap();
    // The child's lease ids + 1 once it holds them: [0] fair-share, [1] guaranteed.
    let w = common::shared_words(2);
    let name = seg.name.clone();
    let mut kids = common::Children(vec![fork_child(move || {
        let t = Table::open(&name).unwrap();
        let lease = t
            .try_acquire(&Request::new("requests", "acme"))
            .unwrap()
            .unwrap();
        let g = t.guaranteed("tokens").unwrap();
        let gl = g.acquire("b", 10, 100, 0).unwrap().unwrap();
        w[1].store(gl.id.to_u64() + 1, SeqCst);
        w[0].store(lease.id().to_u64() + 1, SeqCst);
        loop {
            std::thread::sleep(Duration::from_secs(60));
            let _ = &lease;
        }
    })]);
    common::wait_until(
        Some(kids[0]),
        "the child's grants",
        Duration::from_micros(100),
        || w[0].load(SeqCst) != 0,
    );
    let says = format!("is not held by this process: process {} holds it", kids[0]);
    let id = LeaseId::from_u64(w[0].load(SeqCst) - 1);
    assert_not_owner(t.release_id(id).unwrap_err(), &says);
    assert_eq!(in_use(&t), 1, "nothing released");
    let g = t.guaranteed("tokens").unwrap();
    let gid = GLeaseId::from_u64(w[1].load(SeqCst) - 1).expect("a guaranteed lease id");
    assert_not_owner(g.release(gid, 1).unwrap_err(), &says);
    assert_eq!(g.stats(1).unwrap().in_use, 10, "nothing released");
    kids.kill_all();
}
