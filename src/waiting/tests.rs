use super::*;
use crate::refusal::{Reason, Refused};

/// A refusal of one unit by `reason` in a pool of 8 with a floor of 1, `in_use` in use.
fn refused(reason: Reason, in_use: u32) -> Refused {
    Refused {
        reason,
        retry_after_ms: 1,
        units: 1,
        in_use,
        held: 5,
        capacity: 8,
        floor: 1,
        weight: 1,
        active_weight: 2,
        short: 1,
        queued: 0,
        interval_us: 0,
        queue_stretch_pct: 100,
        server_queue_us: 0,
        rate_per_s: 0,
    }
}

/// A woken waiter refused again passes its wake on only where some ask may fit: to
/// nobody when the pool is full, to other tenants when its own is past its share with
/// no room past the floor, else to anyone.
#[test]
fn a_refused_waiter_passes_its_wake_only_where_an_ask_may_fit() {
    let t = 3;
    assert_eq!(pass_bits(&refused(Reason::PoolFull, 8), t), None);
    assert_eq!(pass_bits(&refused(Reason::OverShare, 8), t), None);
    assert_eq!(
        pass_bits(&refused(Reason::OverShare, 9), t),
        None,
        "a pool that shrank"
    );
    assert_eq!(
        pass_bits(&refused(Reason::OverShare, 7), t),
        Some(!tenant_bit(t))
    );
    // Room past the floor (it asked for more than fits): a smaller ask of its own may.
    assert_eq!(
        pass_bits(&refused(Reason::OverShare, 6), t),
        Some(EVERY_TENANT)
    );
    assert_eq!(
        pass_bits(&refused(Reason::PoolFull, 7), t),
        Some(EVERY_TENANT)
    );
    // A resident that came idle may be another tenant's spawn's to evict, or another
    // size's, full pool or not; not a spawn's of its tenant and size.
    let spawn = refused(Reason::TooManyResidents, 8);
    let own = sleep_bits(&spawn, t);
    assert_eq!(pass_bits(&spawn, t), Some(!own));
    assert_ne!(
        own,
        tenant_bit(t),
        "a spawn's bit is its tenant's and its size's"
    );
    let bigger = Refused { units: 2, ..spawn };
    assert_ne!(sleep_bits(&bigger, t), own, "another size, another bit");
    assert_ne!(
        sleep_bits(&spawn, t + 1),
        own,
        "another tenant, another bit"
    );
    assert_eq!(sleep_bits(&refused(Reason::OverShare, 7), t), tenant_bit(t));
    assert_eq!(
        pass_bits(&refused(Reason::RateLimited, 8), t),
        Some(EVERY_TENANT)
    );
    // Bits repeat every 32 tenants; none is empty, and none leaves every bit out.
    assert_eq!(tenant_bit(t + 32), tenant_bit(t));
    assert!((0..64).all(|t| tenant_bit(t) != 0 && !tenant_bit(t) != 0));
}

/// A spawn's two bits: a pass that leaves out one spawn's bits reaches a spawn of the
/// same size of any tenant less than 256 slots away, and one of the same tenant of any
/// other size (up to 16 units); of all pairs of tenants and sizes, few share both.
#[test]
fn a_spawns_pass_leaves_out_few_but_its_own_tenant_and_size() {
    let reaches = |from: u32, to: u32| to & !from != 0;
    for u in 1..=4 {
        for t in 0..256 {
            let own = spawn_bits(t, u);
            assert_eq!(own.count_ones(), 2, "two bits");
            assert!(!reaches(own, own), "its own tenant and size left out");
            for other in (0..256).filter(|&o| o != t) {
                assert!(
                    reaches(own, spawn_bits(other, u)),
                    "{t} and {other}, {u} units"
                );
            }
            for v in (1..=16).filter(|&v| v != u) {
                assert!(reaches(own, spawn_bits(t, v)), "{t}: {u} and {v} units");
            }
        }
    }
    // Tenants 0..1024, sizes 1..=3: the pairs left out together, under 1 in 200.
    let all: Vec<u32> = (0..1024)
        .flat_map(|t| (1..=3).map(move |u| spawn_bits(t, u)))
        .collect();
    let pairs = all.len() * (all.len() - 1) / 2;
    let shared = (0..all.len())
        .flat_map(|i| (i + 1..all.len()).map(move |j| (i, j)))
        .filter(|&(i, j)| all[i] == all[j])
        .count();
    assert!(
        shared * 200 < pairs,
        "{shared} of {pairs} pairs share both bits"
    );
    // The spawns that `window_wakes` found on one bit: now apart.
    assert_ne!(spawn_bits(969, 3), spawn_bits(99, 1));
}
