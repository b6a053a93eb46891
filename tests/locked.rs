//! The locked instructions of an uncontended acquire + release pair, counted by the
//! `count-locked` shim (every RMW and SeqCst store on fairshm's atomics): a figure that
//! no host changes. Run: `cargo test --release --features count-locked --test locked`.
mod common;
#[path = "../benches/setups/skeleton.rs"]
mod skeleton;

use common::{Seg, one_pool};
use fairshm::region::Region;
use fairshm::{Request, locked_instructions, plain_stores};

/// Counts one pair after a warm-up pair (registration, the tenant's claim, the
/// activity stamp of this `now`), so only the steady state is counted.
fn pair_cost(now_of_pair: u64) -> (u64, u64) {
    pair_cost_with_rates(now_of_pair, None)
}

/// [`pair_cost`], with the tenant's rates set first (requests/s, work units/s).
fn pair_cost_with_rates(now_of_pair: u64, rates: Option<(u32, u32)>) -> (u64, u64) {
    let seg = Seg::new("locked");
    let t = seg.create(&one_pool(64));
    if let Some((r, w)) = rates {
        t.set_rates("acme", r, w).unwrap();
    }
    let req = Request::new("requests", "acme").hold_ms(5);
    t.try_acquire_at(&req, 1000)
        .unwrap()
        .unwrap()
        .release_at(1000)
        .unwrap();
    let before = locked_instructions();
    let lease = t.try_acquire_at(&req, now_of_pair).unwrap().unwrap();
    let acquired = locked_instructions();
    lease.release_at(now_of_pair).unwrap();
    (acquired - before, locked_instructions() - acquired)
}

#[test]
fn an_uncontended_pair_is_at_most_eight_locked_instructions() {
    let (acq, rel) = pair_cost(1000);
    eprintln!(
        "uncontended pair, same ms: acquire {acq} + release {rel} = {} locked",
        acq + rel
    );
    assert!(
        acq + rel <= 8,
        "acquire {acq} + release {rel} locked instructions"
    );
    // The first pair of a new millisecond also moves the tenant's activity stamp.
    let (acq, rel) = pair_cost(1001);
    eprintln!(
        "uncontended pair, new ms: acquire {acq} + release {rel} = {} locked",
        acq + rel
    );
    assert!(
        acq + rel <= 9,
        "acquire {acq} + release {rel} locked instructions, new ms"
    );
}

/// The ratios bench's skeleton (the pair's traffic without its logic) makes the
/// engine's steady-state pair's locked instructions and plain stores, one for one, so
/// that the two stay the same traffic when the protocol changes.
#[test]
fn the_skeleton_makes_the_pairs_locked_instructions_and_stores() {
    let (seg, traffic) = (Seg::new("locked-engine"), Seg::new("locked-skeleton"));
    let (t, ts) = (seg.create(&one_pool(64)), traffic.create(&one_pool(64)));
    let e = t.engine();
    let (p, acme) = (e.pool("requests").unwrap(), e.tenant("acme").unwrap());
    let counts = |f: &dyn Fn()| {
        let (locked, stores) = (locked_instructions(), plain_stores());
        f();
        (locked_instructions() - locked, plain_stores() - stores)
    };
    let engine_pair = || {
        let fairshm::Outcome::Granted(id) = e.acquire(p, acme, 1, 0, 1000).unwrap() else {
            panic!("refused in an empty pool")
        };
        e.release(id, 1000).unwrap();
    };
    engine_pair(); // the warm-up: registration, the claim, the activity stamp
    let pair = counts(&engine_pair);
    let skeleton = skeleton::Skeleton::new(&ts);
    let traffic_made = counts(&|| skeleton.pair());
    eprintln!("(locked, plain stores): engine pair {pair:?}, its skeleton {traffic_made:?}");
    assert_eq!(traffic_made, pair, "the skeleton's (locked, plain stores)");
    let word = ts
        .region()
        .pool(p.index())
        .word
        .load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(
        fairshm::layout::op_word::count(word),
        0,
        "the skeleton left the pool word's count at 0"
    );
}

/// A refusal counts itself (1), takes a turn on its tenant's clock (a CAS) and adds its
/// hint to the sum (1); a refusal that comes before an earlier hint ran out also counts
/// an early return (1), as the second one here does.
#[test]
fn a_refusal_is_at_most_four_locked_instructions() {
    let seg = Seg::new("locked-refusal");
    let t = seg.create(&one_pool(2));
    let full = Request::new("requests", "acme").units(2);
    let lease = t.try_acquire_at(&full, 1000).unwrap().unwrap();
    let req = Request::new("requests", "acme");
    assert!(t.try_acquire_at(&req, 1000).unwrap().is_err());
    let before = locked_instructions();
    assert!(t.try_acquire_at(&req, 1000).unwrap().is_err());
    let n = locked_instructions() - before;
    eprintln!("refusal: {n} locked");
    assert!(
        n <= 4,
        "a refusal took {n} locked instructions (counter, turn, hint sum, early return)"
    );
    drop(lease);
}

/// The rates cost the pair nothing when unbounded (the count above), one RMW with a
/// request rate (its token's CAS), none with a work rate alone (a load of the debt).
#[test]
fn a_rate_check_adds_at_most_one_rmw() {
    let (a0, r0) = pair_cost(1000);
    let (a1, r1) = pair_cost_with_rates(1000, Some((1_000_000, 0)));
    let (a2, r2) = pair_cost_with_rates(1000, Some((0, 1_000_000)));
    eprintln!(
        "pair: unbounded {}, request rate {}, work rate {} locked",
        a0 + r0,
        a1 + r1,
        a2 + r2
    );
    assert_eq!(a1 + r1, a0 + r0 + 1, "a request rate: its token's CAS");
    assert_eq!(a2 + r2, a0 + r0, "a work rate alone: a load");
}

/// A guaranteed pool's pair (seed 001): each op is one CAS of the process-local block
/// lock and one CAS of the pool's head word (the lock's release is a plain store); the
/// release also counts itself in the epoch of its waiters' bits (one add here: the
/// tenant's bit; it borrowed nothing) and bumps the pool's wake word, for its waiters
/// (`guaranteed::waiters`), both on the line its head CAS just took.
#[test]
fn a_guaranteed_pair_is_six_locked_instructions() {
    let seg = Seg::new("locked-g");
    let t = seg.create(&common::guaranteed(
        "tokens",
        100,
        fairshm::FairnessUnit::Cost,
        &[("a", 1), ("b", 1)],
        (100, 150),
        4,
    ));
    let g = t.guaranteed("tokens").unwrap();
    let warm = g.acquire("a", 10, 50, 1000).unwrap().unwrap();
    g.release(warm.id, 1000).unwrap();
    let before = locked_instructions();
    let l = g.acquire("a", 10, 50, 1000).unwrap().unwrap();
    let acquired = locked_instructions();
    g.release(l.id, 1000).unwrap();
    let (acq, rel) = (acquired - before, locked_instructions() - acquired);
    eprintln!(
        "guaranteed pair: acquire {acq} + release {rel} = {} locked",
        acq + rel
    );
    assert_eq!((acq, rel), (2, 4));
}

/// A resident's pair adds its record's stores and the release's close (one CAS); an
/// eviction (the rule's refusal look, then a transfer from an idle resident) adds the
/// held CAS, the revocation CAS, the pool's eviction count, the victim's wake bump and
/// the statistics. Counted here, and bounded.
#[test]
fn a_resident_pair_and_an_eviction_are_a_few_locked_instructions() {
    use fairshm::{Config, PoolConfig};
    let seg = Seg::new("locked-resident");
    let t = seg.create(&Config::with_pools(vec![
        PoolConfig::new("residents", 1).evicting(),
    ]));
    let (acme, other) = (
        Request::new("residents", "acme"),
        Request::new("residents", "other"),
    );
    for req in [&acme, &other] {
        let l = t.try_acquire_at(req, 1000).unwrap().unwrap();
        l.release_at(1000).unwrap();
    }
    let count = |f: &mut dyn FnMut()| {
        let before = locked_instructions();
        f();
        locked_instructions() - before
    };
    let mut lease = None;
    let acq = count(&mut || lease = Some(t.try_acquire_at(&acme, 1000).unwrap().unwrap()));
    let lease = lease.unwrap();
    let mut evicting = None;
    let evict = count(&mut || evicting = Some(t.try_acquire_at(&other, 1000).unwrap().unwrap()));
    assert!(
        lease.is_revoked().unwrap(),
        "the full pool evicted acme's resident"
    );
    let mut lease = Some(lease);
    let rel = count(&mut || lease.take().unwrap().release_at(1000).unwrap());
    let mut evicting = evicting;
    let rel2 = count(&mut || evicting.take().unwrap().release_at(1000).unwrap());
    eprintln!(
        "resident: acquire {acq}, eviction {evict}, revoked release {rel}, release {rel2} locked"
    );
    // Measured 4 + 4 (a plain pair: 2 + 3), 8 and 2.
    assert!(acq <= 4 && rel2 <= 4, "resident pair: {acq} + {rel2}");
    assert!(evict <= 10, "an eviction took {evict} locked instructions");
    assert!(rel <= 3, "a revoked resident's release took {rel}");
}
