//! Faults and hostile writers: a broken word or record is an error for one call at
//! most, never a wedge. Each test breaks one thing the way a hostile writer (or a bug)
//! could, and checks that the library reports it, resolves or quarantines what it must,
//! and that the pool heals (`Table::repair` / the repair after an error).
mod common;

use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use common::{Seg, fork_child, one_pool, wait};
use fairshm::layout::{op_word, pair, proc_state as ps};
use fairshm::region::Region;
use fairshm::{Error, Request, Table};

fn in_use(t: &Table) -> u32 {
    op_word::count(t.region().pool(0).word.load(SeqCst))
}

#[test]
fn a_held_word_that_would_overflow_fails_one_call_then_heals() {
    let seg = Seg::new("overflow");
    let t = seg.create(&one_pool(4));
    let req = Request::new("requests", "acme");
    let tenant = t.engine().tenant("acme").unwrap().index();
    // Before: each such error left its lease ACQUIRING for good (six of them and every
    // acquire was `LeaseTableFull`), and the word failed every later call.
    for round in 0..100 {
        let held = &t.region().tenant_pool(0, tenant).held;
        held.store(op_word::make(op_word::MAX_COUNT, 0), SeqCst);
        let e = t.try_acquire(&req).unwrap_err();
        assert!(matches!(e, Error::Corrupt(_)), "round {round}: {e}");
        // Healed by the failed call itself: the next one is granted.
        let lease = t.try_acquire(&req).unwrap().unwrap();
        assert_eq!(t.snapshot().held("requests", "acme"), 1);
        drop(lease);
    }
    assert!(t.check().unwrap().is_empty(), "{:?}", t.check());
    assert_eq!(in_use(&t), 0);
    assert!(t.snapshot().leases.is_empty());
}

#[test]
fn a_release_that_finds_its_held_word_too_low_is_resolved_and_the_pool_heals() {
    let seg = Seg::new("underflow");
    let t = seg.create(&one_pool(4));
    let req = Request::new("requests", "acme").units(2);
    let lease = t.try_acquire(&req).unwrap().unwrap();
    let tenant = t.engine().tenant("acme").unwrap().index();
    // Hostile: the held word says 1 where 2 are held.
    t.region()
        .tenant_pool(0, tenant)
        .held
        .store(op_word::make(1, 0), SeqCst);
    let e = lease.release().unwrap_err();
    assert!(matches!(e, Error::Corrupt(_)), "{e}");
    // Before: the lease stayed RELEASING and the pool's count stayed raised.
    assert_eq!(in_use(&t), 0, "the pool's count came down");
    assert!(t.check().unwrap().is_empty(), "{:?}", t.check());
    assert!(t.snapshot().leases.is_empty(), "the lease is free again");
    let again = t
        .try_acquire(&Request::new("requests", "acme").units(4))
        .unwrap();
    assert!(again.is_ok(), "the whole pool is grantable again");
}

#[test]
fn a_pool_word_naming_a_lease_beyond_the_table_does_not_wedge_the_pool() {
    let seg = Seg::new("badtag");
    let t = seg.create(&one_pool(4));
    // A tag naming lease 65,000 (the table has far fewer).
    let bad = op_word::make(0, 65_000);
    t.region().pool(0).word.store(bad, SeqCst);
    let lease = t
        .try_acquire(&Request::new("requests", "acme"))
        .unwrap()
        .unwrap();
    drop(lease);
    assert_eq!(in_use(&t), 0);
    assert!(t.check().unwrap().is_empty());
}

#[test]
fn a_pool_count_raised_by_a_hostile_write_is_found_by_check_and_rebuilt_by_repair() {
    let seg = Seg::new("raised");
    let t = seg.create(&one_pool(4));
    let other = Table::open(&seg.name).unwrap();
    let held = t
        .try_acquire(&Request::new("requests", "acme"))
        .unwrap()
        .unwrap();
    // The count says full: every acquire is refused pool_full, with no error at all.
    t.region().pool(0).word.store(op_word::make(4, 0), SeqCst);
    let r = t
        .try_acquire(&Request::new("requests", "globex"))
        .unwrap()
        .unwrap_err();
    assert_eq!(r.reason, fairshm::Reason::PoolFull);
    let found = t.check().unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("in_use is 4"), "{found:?}");
    // Repaired while in use: the held lease stays counted, the rest comes back.
    let rep = other.repair().unwrap();
    assert_eq!(
        (rep.pools[0].in_use_before, rep.pools[0].in_use_after),
        (4, 1)
    );
    assert!(t.check().unwrap().is_empty());
    let granted = t.try_acquire(&Request::new("requests", "globex")).unwrap();
    assert!(granted.is_ok());
    drop(granted);
    drop(held);
    assert_eq!(in_use(&t), 0);
}

#[test]
fn reaping_goes_on_past_leases_it_cannot_understand() {
    let seg = Seg::new("badlease");
    let t = seg.create(&one_pool(8));
    let name = seg.name.clone();
    let ready = common::shared_words(2);
    // A child holds four leases and dies; nobody else is registered, so nobody reaps
    // until we do.
    let child = fork_child(move || {
        let t = Table::open(&name).unwrap();
        let leases: Vec<_> = (0..4)
            .map(|_| {
                t.try_acquire(&Request::new("requests", "victim"))
                    .unwrap()
                    .unwrap()
                    .into_id()
            })
            .collect();
        ready[1].store(leases[0].index as u64, SeqCst);
        ready[0].store(1, SeqCst);
        std::thread::sleep(Duration::from_secs(60));
        0
    });
    common::wait_until(
        Some(child),
        "the child's leases",
        Duration::from_millis(1),
        || ready[0].load(SeqCst) != 0,
    );
    nix::sys::signal::kill(child, nix::sys::signal::SIGKILL).unwrap();
    assert_eq!(wait(child), 128 + 9);
    let first = ready[1].load(SeqCst) as usize;
    let r = t.region();
    // Three of its four leases broken three ways: pool 99, a state no version writes,
    // u32::MAX units.
    r.lease(first).pool_tenant.store(pair::make(99, 0), SeqCst);
    let s = r.lease(first + 1).state.load(SeqCst);
    r.lease(first + 1).state.store((s & !0x0F) | 9, SeqCst);
    r.lease(first + 2).units.store(u32::MAX, SeqCst);
    let reaped = t.reap_dead().unwrap();
    assert_eq!(reaped.len(), 1, "{reaped:?}");
    // Before: an error, the slot left REAPING, and every later reap returned nothing.
    assert_eq!(reaped[0].leases_released, 1, "{reaped:?}");
    assert_eq!(reaped[0].quarantined, 3, "{reaped:?}");
    assert!(t.snapshot().processes.is_empty(), "the slot is free");
    let found = t.check().unwrap();
    assert!(
        !found.is_empty(),
        "the counts still include the broken leases"
    );
    let rep = t.repair().unwrap();
    assert_eq!(rep.leases_freed, 3, "{rep:?}");
    assert!(t.check().unwrap().is_empty(), "{:?}", t.check());
    assert_eq!(in_use(&t), 0);
}

#[test]
fn a_tenant_slot_stuck_writing_by_a_live_process_is_a_retryable_error_in_bounded_time() {
    let seg = Seg::new("stuckwriting");
    let t = seg.create(&one_pool(4));
    let me = t.register().unwrap();
    let dir = t.region().geometry().tenants;
    // Find a name whose probe starts at slot 0, and leave slot 0 WRITING by us (alive).
    let name = (0..)
        .map(|i| format!("n{i}"))
        .find(|n| fairshm::config::fnv1a(n.as_bytes()) % dir as u64 == 0)
        .unwrap();
    let stuck =
        fairshm::layout::tenant_state::make(fairshm::layout::tenant_state::WRITING, 3, Some(me));
    t.region().tenant(0).state.store(stuck, SeqCst);
    let t0 = Instant::now();
    let e = t.try_acquire(&Request::new("requests", &name)).unwrap_err();
    let took = t0.elapsed();
    assert!(matches!(e, Error::TenantBusy { slot: 0, .. }), "{e}");
    assert!(took < Duration::from_millis(500), "took {took:?}");
    // A name that does not probe through the slot is not affected.
    assert!(
        t.try_acquire(&Request::new("requests", "x"))
            .unwrap()
            .is_ok()
    );
    // Once the "writer" is a slot no live process holds, the next lookup clears it. (Not
    // our own slot: registration starts at pid % procs, so the last slot may be ours.)
    let dead = (0..dir.min(t.region().geometry().procs))
        .rev()
        .find(|&s| s != me)
        .unwrap();
    t.region().tenant(0).state.store(
        fairshm::layout::tenant_state::make(fairshm::layout::tenant_state::WRITING, 3, Some(dead)),
        SeqCst,
    );
    let lease = t.try_acquire(&Request::new("requests", &name)).unwrap();
    assert!(lease.is_ok());
}

#[test]
fn a_process_slot_in_a_state_no_version_writes_is_taken_by_repair() {
    let seg = Seg::new("oddslot");
    let t = seg.create(&one_pool(4));
    t.region().proc_slot(3).state.store(0x4242_0007, SeqCst);
    assert_eq!(t.check().unwrap().len(), 1);
    let rep = t.repair().unwrap();
    assert_eq!(rep.slots_taken, 1);
    assert_eq!(
        ps::status(t.region().proc_slot(3).state.load(SeqCst)),
        ps::FREE
    );
    assert!(t.check().unwrap().is_empty());
}

/// A last-scan time of the active set written into the future (a hostile write, or a
/// caller's explicit times far ahead of the clock): every decision is then behind it
/// and counts its set with a scan of its own, right but slow, and no rescan moves it
/// back. Repair clears it, as it does activity stamps in the future.
#[test]
fn a_last_scan_time_in_the_future_decides_right_and_is_cleared_by_repair() {
    let seg = Seg::new("scanned-future");
    let t = seg.create(&one_pool(4));
    let pool = t.region().pool(0);
    pool.scanned_at_ms.store(u64::MAX, SeqCst);
    let a = t
        .try_acquire(&Request::new("requests", "acme"))
        .unwrap()
        .unwrap();
    let r = t
        .try_acquire(&Request::new("requests", "globex").units(4))
        .unwrap()
        .unwrap_err();
    assert_eq!(
        (r.reason, r.facts.active_weight),
        (fairshm::Reason::PoolFull, 2)
    );
    assert_eq!(
        pool.scanned_at_ms.load(SeqCst),
        u64::MAX,
        "no rescan moved it"
    );
    t.repair().unwrap();
    let cleared = pool.scanned_at_ms.load(SeqCst);
    assert!(cleared < u64::MAX, "repair cleared it");
    drop(
        t.try_acquire(&Request::new("requests", "acme"))
            .unwrap()
            .unwrap(),
    );
    let scanned = pool.scanned_at_ms.load(SeqCst);
    assert!(
        scanned > 0 && scanned < u64::MAX,
        "rescanned at a real time: {scanned}"
    );
    drop(a);
}

/// A resident in a call whose lease record is made to name a pool beyond the table (a
/// write from outside): ending the call neither panics nor wakes a pool that is not
/// there, its release is an error that names the record, and `repair` frees the
/// lease. (The scribble tests reach this rarely: it needs a write on a held
/// resident's record between its call's two ends.)
#[test]
fn a_resident_whose_record_names_a_pool_beyond_the_table_ends_its_call_safely() {
    let seg = Seg::new("badresident");
    let t = seg.create(&fairshm::Config::with_pools(vec![
        fairshm::PoolConfig::new("residents", 2).evicting(),
    ]));
    let lease = t
        .try_acquire(&Request::new("residents", "a"))
        .unwrap()
        .unwrap();
    lease.begin_call().unwrap();
    let l = lease.id().index as usize;
    t.region()
        .lease(l)
        .pool_tenant
        .store(pair::make(99, 0), SeqCst);
    // The resident's own record is intact, so the call ends; the pool it names does
    // not exist, so nobody is woken for it.
    lease.end_call().unwrap();
    let e = lease.release().unwrap_err();
    assert!(matches!(e, Error::Corrupt(_)), "{e}");
    assert!(e.to_string().contains("99"), "{e}");
    let rep = t.repair().unwrap();
    assert_eq!(rep.leases_freed, 1, "{rep:?}");
    assert!(t.check().unwrap().is_empty(), "{:?}", t.check());
    assert_eq!(in_use(&t), 0);
}
