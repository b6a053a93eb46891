//! `shmtool check` names each violated invariant of a segment written wrong on
//! purpose (through the `internals` feature), and exits 1; a sound one exits 0.
mod common;

use std::process::Command;

use common::Seg;
use fairshm::layout::{lease_state as ls, op_word, pair};
use fairshm::region::Region;
use fairshm::{Config, PoolConfig, Table};

fn check(name: &str) -> (i32, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_shmtool"))
        .args(["check", name])
        .output()
        .expect("run shmtool");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    eprintln!("{text}{}", String::from_utf8_lossy(&o.stderr));
    (o.status.code().expect("exited"), text)
}

#[test]
fn check_names_every_violation() {
    let seg = Seg::new("tool-check");
    let cfg = Config {
        pools: vec![PoolConfig::new("requests", 4)],
        max_tenants: 8,
        max_processes: 4,
        leases_per_process: 4,
        ..Config::default()
    };
    let t: Table = seg.create(&cfg);
    // (Claiming the name registers this process: its slot is the one not to use.)
    let acme = t.engine().tenant("acme").unwrap().index() as u32;
    let mine = t.process_slot().unwrap();
    let (free1, free2) = ((mine + 1) % 4, (mine + 2) % 4);
    assert_eq!(
        check(&seg.name),
        (0, format!("{}: every invariant holds\n", seg.name))
    );

    let r = t.region();
    // In use past the capacity, with no lease holding it.
    r.pool(0)
        .word
        .store(op_word::make(7, 0), std::sync::atomic::Ordering::SeqCst);
    // A held lease in a free process slot: owned by nobody.
    let l = free1 * 4 + 1;
    let lease = r.lease(l);
    lease.units.store(1, std::sync::atomic::Ordering::SeqCst);
    lease
        .pool_tenant
        .store(pair::make(0, acme), std::sync::atomic::Ordering::SeqCst);
    lease
        .state
        .store(ls::make(1, ls::HELD), std::sync::atomic::Ordering::SeqCst);
    let (code, text) = check(&seg.name);
    assert_eq!(code, 1);
    for want in [
        "7 units in use, over its capacity 4",
        "in_use is 7, its held leases hold 1",
        &format!("tenant {acme}: held is 0, its held leases hold 1"),
        &format!("lease {l} (held) is a lease of process slot {free1}, which is free"),
    ] {
        assert!(text.contains(want), "{want:?} in:\n{text}");
    }
    assert_eq!(text.lines().count(), 4, "{text}");

    // An acquire in flight in another free slot: owned by nobody, and the pool's counters
    // cannot be summed while it stays in flight (the check says so, and goes on).
    r.lease(free2 * 4).state.store(
        ls::make(1, ls::ACQUIRING),
        std::sync::atomic::Ordering::SeqCst,
    );
    let (code, text) = check(&seg.name);
    assert_eq!(code, 1);
    for want in [
        "7 units in use, over its capacity 4",
        "pool 0: counters not compared with the leases",
        &format!("lease {l} (held) is a lease of process slot {free1}, which is free"),
        &format!(
            "lease {} (acquiring) is an op in flight of process slot {free2}, which is free",
            free2 * 4
        ),
    ] {
        assert!(text.contains(want), "{want:?} in:\n{text}");
    }
}

/// A `per_worker` pool may hold more than today's tickets (it shrinks when workers go,
/// and holders keep theirs), but never more than the tickets of a worker in each
/// process slot: every grant fitted the tickets of its moment.
#[test]
fn a_per_worker_pool_is_bound_by_the_most_tickets_it_can_have() {
    let seg = Seg::new("tool-check-pw");
    let cfg = Config {
        pools: vec![PoolConfig::per_worker("flights", 0.5, 0)],
        max_processes: 4,
        ..Config::default()
    };
    let t: Table = seg.create(&cfg);
    // The creator is not a worker: 0 tickets now, at most ceil(0.5 x 4) = 2.
    assert_eq!(t.snapshot().pool("flights").unwrap().capacity, 0);
    let word = &t.region().pool(0).word;
    // Two in use with no lease behind them: the counters disagree with the leases,
    // but the units themselves fit the most tickets.
    word.store(op_word::make(2, 0), std::sync::atomic::Ordering::SeqCst);
    let (code, text) = check(&seg.name);
    assert_eq!(code, 1);
    assert!(
        text.contains("in_use is 2, its held leases hold 0"),
        "{text}"
    );
    assert!(!text.contains("units in use, over"), "{text}");
    word.store(op_word::make(3, 0), std::sync::atomic::Ordering::SeqCst);
    let (code, text) = check(&seg.name);
    assert_eq!(code, 1);
    assert!(
        text.contains(
            "pool \"flights\": 3 units in use, over the most tickets it can have (2, \
             with a worker in each of its 4 process slots)"
        ),
        "{text}"
    );
}

/// A process killed while it waits leaves its announcement in the pool's `waiters`
/// and its slot's count: `check` names it until a reap takes it out. (Nothing here
/// registers but the waiter, so no anchor reaps it first.) A count in a free slot is
/// owned by nobody.
#[test]
fn a_dead_processs_waiters_are_named_until_a_reap_takes_them_out() {
    use std::sync::atomic::Ordering::SeqCst;
    let seg = Seg::new("tool-check-waiter");
    let t: Table = seg.create(&common::one_pool(1));
    let w = common::shared_words(1);
    let name = seg.name.clone();
    let mut kids = common::Children(vec![common::fork_child(move || {
        let t = Table::open(&name).unwrap();
        let slot = t.register().unwrap();
        // What a blocked acquire does before it sleeps (see `blocking`).
        t.region().pool(0).waiters.fetch_add(1, SeqCst);
        t.region().slot_waiters(slot, 0).fetch_add(1, SeqCst);
        w[0].store(slot as u64 + 1, SeqCst);
        std::thread::sleep(std::time::Duration::from_secs(60));
        0
    })]);
    let waiter = kids[0];
    common::wait_until(
        Some(waiter),
        "the waiter",
        std::time::Duration::from_millis(1),
        || w[0].load(SeqCst) != 0,
    );
    let slot = w[0].load(SeqCst) as usize - 1;
    assert_eq!(kids.kill_all(), vec![128 + 9]);
    let (code, text) = check(&seg.name);
    assert_eq!(code, 1);
    assert!(
        text.contains(&format!(
            "process slot {slot}, whose process (pid {waiter}) is dead, counts 1 waiter \
             announced in pool \"requests\": reap takes them out"
        )),
        "{text}"
    );
    let o = Command::new(env!("CARGO_BIN_EXE_shmtool"))
        .args(["reap", &seg.name])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(t.region().pool(0).waiters.load(SeqCst), 0, "taken out");
    assert_eq!(check(&seg.name).0, 0);

    t.region().slot_waiters(slot, 0).store(2, SeqCst);
    let (code, text) = check(&seg.name);
    assert_eq!(code, 1);
    assert!(
        text.contains(&format!(
            "process slot {slot}, which is free, counts 2 waiters announced in pool \
             \"requests\": owned by nobody"
        )),
        "{text}"
    );
}

/// `shmtool repair` mends a segment in use and says what it changed: a pool's units in
/// use and its waiters, written from outside, are rebuilt from the leases and the
/// process slots, after which `check` finds nothing; a second repair changes nothing.
#[test]
fn repair_rebuilds_what_check_names_and_says_what_it_changed() {
    use std::sync::atomic::Ordering::SeqCst;
    let seg = Seg::new("tool-repair");
    let t: Table = seg.create(&common::one_pool(4));
    let _lease = t
        .try_acquire(&fairshm::Request::new("requests", "acme"))
        .unwrap()
        .unwrap();
    let r = t.region();
    r.pool(0).word.store(op_word::make(3, 0), SeqCst);
    r.pool(0).waiters.store(2, SeqCst);
    let (code, text) = check(&seg.name);
    assert_eq!(code, 1);
    for want in [
        "pool 0: in_use is 3, its held leases hold 1",
        "pool 0: waiters is 2, its processes announce 0",
    ] {
        assert!(text.contains(want), "{want:?} in:\n{text}");
    }
    let repair = |json: bool| {
        let mut args = vec!["repair", seg.name.as_str()];
        if json {
            args.push("--json");
        }
        let o = Command::new(env!("CARGO_BIN_EXE_shmtool"))
            .args(&args)
            .output()
            .expect("run shmtool");
        eprintln!("{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(o.status.code(), Some(0), "repair exits 0");
        String::from_utf8(o.stdout).unwrap()
    };
    let text = repair(false);
    assert!(
        text.starts_with("pool \"requests\": in use 3 -> 1, waiters 2 -> 0\n"),
        "{text}"
    );
    assert!(
        text.ends_with("refilled (debts forgiven; rates kept)\n"),
        "{text}"
    );
    assert_eq!(text.lines().count(), 2, "{text}");
    assert_eq!(t.snapshot().pool("requests").unwrap().in_use, 1);
    assert_eq!(r.pool(0).waiters.load(SeqCst), 0);
    assert_eq!(check(&seg.name).0, 0);
    let again: serde_json::Value = serde_json::from_str(&repair(true)).unwrap();
    assert_eq!(again["pools"][0]["in_use_before"], 1);
    assert_eq!(again["pools"][0]["in_use_after"], 1);
    assert_eq!(again["pools"][0]["waiters"], serde_json::Value::Null);
    assert_eq!(again["reaped"], serde_json::json!([]));
}
