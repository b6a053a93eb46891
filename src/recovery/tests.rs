//! A reap's report of what went back.

use super::{Reaped, Reaper, reap_slot, take_out_waiters};
use crate::admission::tests::attempt;
use crate::admission::{self, Admitted, Attempt};
use crate::layout::{held_word, pair, pool_word};
use crate::region::{HeapRegion, Region};
use crate::sync::Ordering::SeqCst;

/// One resident of pool 0 (an `evict` pool of 1) for tenant `tenant` by slot `slot`.
fn spawn(r: &HeapRegion, slot: usize, tenant: usize, now: u64) -> usize {
    let a = Attempt {
        limits: pair::make(1, 1),
        evict: true,
        log: false,
        ..attempt(tenant, 1, now)
    };
    match admission::try_acquire(r, slot, 0, &a, None).unwrap() {
        Admitted::Granted { lease, .. } => lease,
        refused => panic!("{refused:?}"),
    }
}

fn counts(r: &HeapRegion) -> (u32, u32, u32) {
    let held = |t| held_word::held(r.tenant_pool(0, t).held.load(SeqCst));
    (
        pool_word::in_use(r.pool(0).word.load(SeqCst)),
        held(0),
        held(1),
    )
}

#[test]
fn a_reaped_revoked_resident_reports_no_pool_unit_returned() {
    let r = HeapRegion::new(1, 2, 2, 1).with_residents();
    r.pool(0).limits.store(pair::make(1, 1), SeqCst);
    let s0 = crate::liveness::register(&r, 100, 1, 1, false).unwrap();
    let s1 = crate::liveness::register(&r, 101, 1, 1, false).unwrap();
    spawn(&r, s0, 0, 1);
    // Tenant 1, under its share of a full pool, puts tenant 0's resident to sleep and
    // takes its unit; tenant 0 counts its unit until its lease is released.
    spawn(&r, s1, 1, 2);
    assert_eq!(counts(&r), (1, 1, 1));
    r.pool(0).rescan_at_ms.store(u64::MAX, SeqCst);
    let dead = reap_slot(&r, s0, Reaper::with_pid(1), &|_, _| true)
        .unwrap()
        .expect("a live slot");
    assert_eq!(dead.leases_released, 1);
    // Its release gave back the tenant's unit only: the pool's is the revoker's.
    assert_eq!(counts(&r), (1, 0, 1));
    assert_eq!(dead.units_returned, vec![0], "no pool unit came back");
    assert_eq!(dead.held_units_returned, vec![1], "its tenant's unit did");
    // Its tenant may have left the active set with its unit: the next decision counts.
    assert_eq!(r.pool(0).rescan_at_ms.load(SeqCst), 0, "a recount is due");
    // The revoker's own resident, reaped, does give its unit back.
    let dead = reap_slot(&r, s1, Reaper::with_pid(1), &|_, _| true)
        .unwrap()
        .expect("a live slot");
    assert_eq!(counts(&r), (0, 0, 0));
    assert_eq!(dead.units_returned, vec![1]);
    assert_eq!(dead.held_units_returned, vec![1]);
}

#[test]
fn a_dead_slots_waiters_are_taken_out_of_each_pool_and_no_one_else_s() {
    // 18 pools: a slot's counts span two records.
    let r = HeapRegion::new(18, 1, 2, 1);
    for (p, pool_waiters, dead_slots, other_slots) in
        [(0, 3, 2, 1), (9, 1, 1, 0), (17, 4, 1, 2), (5, 1, 7, 0)]
    {
        r.pool(p).waiters.store(pool_waiters, SeqCst);
        r.slot_waiters(0, p).store(dead_slots, SeqCst);
        r.slot_waiters(1, p).store(other_slots, SeqCst);
    }
    let mut out = Reaped::new(0, 1, 18);
    take_out_waiters(&r, 0, &mut out);
    // Pool 5's count of 7 (a hostile write) over its 1 waiter takes it to 0.
    for (p, left, other) in [(0, 1, 1), (9, 0, 0), (17, 3, 2), (5, 0, 0), (1, 0, 0)] {
        assert_eq!(r.pool(p).waiters.load(SeqCst), left, "pool {p}");
        assert_eq!(r.slot_waiters(0, p).load(SeqCst), 0, "pool {p}");
        assert_eq!(r.slot_waiters(1, p).load(SeqCst), other, "pool {p}");
    }
    // Reported as taken out (for `peers::announce`'s wake): what left `waiters`.
    let mut taken = vec![0; 18];
    (taken[0], taken[9], taken[17], taken[5]) = (2, 1, 1, 1);
    assert_eq!(out.waiters_taken_out, taken);
    // Taken over by a second reaper: nothing is taken out twice.
    let mut again = Reaped::new(0, 1, 18);
    take_out_waiters(&r, 0, &mut again);
    assert_eq!(r.pool(0).waiters.load(SeqCst), 1);
    assert_eq!(r.pool(17).waiters.load(SeqCst), 3);
    assert_eq!(again.waiters_taken_out, vec![0; 18]);
}
