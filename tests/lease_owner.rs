//! A lease is released by the table handle that acquired it. Another handle of the same
//! process, or another process, is refused `NotOwner`, and the error says who holds the
//! lease. Nothing is released by the refusal.
mod common;

use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use common::{Seg, fork_child, one_pool};
use fairshm::{Error, LeaseId, Request, Table};

fn in_use(t: &Table) -> u32 {
    t.snapshot().pool("requests").unwrap().in_use
}

#[test]
fn another_handle_of_this_process_is_told_to_release_through_the_first() {
    let seg = Seg::new("owner-handle");
    let t = seg.create(&one_pool(4));
    let lease = t
        .try_acquire(&Request::new("requests", "acme"))
        .unwrap()
        .unwrap();
    let other = Table::open(&seg.name).unwrap();
    other.register().unwrap();
    let e = other.release_id(lease.id()).unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, Error::NotOwner { .. }), "{e}");
    assert!(
        text.contains("acquired through another table handle of this process")
            && text.contains("release it through that handle"),
        "{text}"
    );
    assert_eq!(in_use(&t), 1, "nothing released");
    lease.release().unwrap();
    assert_eq!(in_use(&t), 0);
}

#[test]
fn another_process_is_told_which_process_holds_the_lease() {
    let seg = Seg::new("owner-proc");
    let t = seg.create(&one_pool(4));
    t.register().unwrap();
    // [0]: the child's lease id + 1 once it holds it.
    let w = common::shared_words(1);
    let name = seg.name.clone();
    let mut kids = common::Children(vec![fork_child(move || {
        let t = Table::open(&name).unwrap();
        let lease = t
            .try_acquire(&Request::new("requests", "acme"))
            .unwrap()
            .unwrap();
        w[0].store(lease.id().to_u64() + 1, SeqCst);
        loop {
            std::thread::sleep(Duration::from_secs(60));
            let _ = &lease;
        }
    })]);
    common::wait_until(
        Some(kids[0]),
        "the child's grant",
        Duration::from_micros(100),
        || w[0].load(SeqCst) != 0,
    );
    let id = LeaseId::from_u64(w[0].load(SeqCst) - 1);
    let e = t.release_id(id).unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, Error::NotOwner { .. }), "{e}");
    assert!(
        text.contains(&format!(
            "is not held by this process: process {} holds it",
            kids[0]
        )),
        "{text}"
    );
    assert_eq!(in_use(&t), 1, "nothing released");
    kids.kill_all();
}
