//! Properties of seed 001's rules over random call sequences (the sequential model the
//! segment runs): every state satisfies the invariants; a retry-after is honest (if
//! every holder releases at its declared deadline and nobody else acts, the same
//! request is admitted exactly then, and not one ms earlier; and no retry-after means
//! it would not fit at any later instant either, unless a blocking lease overran); the
//! reclaim bound holds
//! (once a tenant asks, no lease holding its units outlives the horizon from then, as
//! long as holders keep their word); and no grant ever takes the ceiling over.

use fairshm::guaranteed::{Call, Effect, Model};
use fairshm::{FairnessUnit, GuaranteedConfig};

fn rng(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn config(x: &mut u64) -> GuaranteedConfig {
    let horizon = (rng(x) % 100 + 1) as u32;
    let mut c = GuaranteedConfig::new("g", (rng(x) % 60 + 4) as u32)
        .unit(if rng(x) % 4 == 0 {
            FairnessUnit::Requests
        } else {
            FairnessUnit::Cost
        })
        .reclaim_horizon_ms(horizon)
        .idle_after_ms(horizon + (rng(x) % 100 + 1) as u32)
        .max_leases(32);
    for i in 0..(rng(x) % 4 + 2) {
        c = c.tenant(&format!("t{i}"), (rng(x) % 4 + 1) as u32);
    }
    c
}

/// Releases, in deadline order, every lease not overrun at `now` and due by `at`, each
/// at its deadline; then asks again at `at`.
fn replay_to(m: &Model, now: u64, at: u64, ask: Call) -> Effect {
    let mut m = m.clone();
    let mut due: Vec<(u64, u32)> = m
        .state
        .leases
        .iter()
        .filter(|l| !l.overrun(now) && l.deadline() <= at)
        .map(|l| (l.deadline(), l.no))
        .collect();
    due.sort();
    for (d, no) in due {
        m.release(no, d).unwrap();
    }
    let Call::Acquire {
        tenant,
        cost,
        hold_ms,
        ..
    } = ask
    else {
        unreachable!()
    };
    m.acquire(tenant, cost, hold_ms, at).unwrap()
}

#[test]
fn random_sequences_keep_the_invariants_and_every_retry_after_is_honest() {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let (mut refusals, mut honest, mut none) = (0, 0, 0);
    for _case in 0..3000 {
        let cfg = config(&mut x);
        let mut m = Model::new(&cfg).unwrap();
        let n = cfg.tenants.len() as u64;
        let mut now = 0u64;
        for _ in 0..120 {
            now += rng(&mut x) % 20;
            let live: Vec<u32> = m.state.leases.iter().map(|l| l.no).collect();
            if !live.is_empty() && rng(&mut x) % 3 == 0 {
                // Holders keep their word: release at or before the deadline.
                let no = live[(rng(&mut x) as usize) % live.len()];
                let l = *m.state.leases.iter().find(|l| l.no == no).unwrap();
                let at = now.min(l.deadline()).max(m.state.clock);
                m.release(no, at).unwrap();
                now = now.max(at);
            } else {
                let t = (rng(&mut x) % n) as u16;
                let cost = rng(&mut x) % (cfg.ceiling as u64 / 2) + 1;
                let hold = rng(&mut x) % (2 * cfg.reclaim_horizon_ms as u64);
                let call = Call::Acquire {
                    tenant: t,
                    cost,
                    hold_ms: hold,
                    owner: 0,
                    now,
                };
                let before = m.clone();
                let e = match m.apply(call) {
                    Ok(e) => e,
                    Err(fairshm::Error::PoolLeasesFull { .. }) => continue,
                    Err(e) => panic!("{e}"),
                };
                match e {
                    Effect::Granted(_) => {}
                    Effect::Refused(r) => {
                        refusals += 1;
                        match r.retry_after_ms {
                            Some(ms) => {
                                honest += 1;
                                let at = r.at + ms;
                                assert!(
                                    matches!(
                                        replay_to(&before, r.at, at, call),
                                        Effect::Granted(_)
                                    ),
                                    "{cfg:?}: retry after {ms} at {} is refused again",
                                    r.at
                                );
                                if ms > 1 {
                                    assert!(
                                        matches!(
                                            replay_to(&before, r.at, at - 1, call),
                                            Effect::Refused(_)
                                        ),
                                        "{cfg:?}: a retry 1 ms sooner than {ms} is admitted"
                                    );
                                }
                            }
                            None => {
                                none += 1;
                                // Honest too: with every lease not overrun released
                                // and every idleness run out, it still does not fit
                                // (or a blocking lease is overrun, which is the one
                                // thing that breaks the bound).
                                let far = r.at + 100_000;
                                let overrun = r.blocking.iter().any(|b| b.overrun_ms > 0);
                                assert!(
                                    overrun
                                        || matches!(
                                            replay_to(&before, r.at, far, call),
                                            Effect::Refused(_)
                                        ),
                                    "{cfg:?}: no retry-after at {}, but the request fits later",
                                    r.at
                                );
                            }
                        }
                    }
                    _ => unreachable!(),
                }
            }
            m.state.check(&m.rules).unwrap();
            assert!(m.state.in_use() <= cfg.ceiling as u64);
            // The reclaim bound: while t waits (its want outstanding since it first
            // asked), every loan of its units ends within a horizon of that moment, and
            // none is written in between.
            for t in 0..n as usize {
                let ts = &m.state.tenants[t];
                if ts.want == 0 {
                    continue; // not waiting (served, or its want lapsed)
                }
                let since = &ts.want_since;
                for s in m.state.slices.iter().filter(|s| s.lender as usize == t) {
                    let l = m.state.leases.iter().find(|l| l.no == s.lease).unwrap();
                    if l.granted_at > *since {
                        panic!(
                            "{cfg:?}: a loan of t{t}'s units was written at {} while it waited since {since}",
                            l.granted_at
                        );
                    }
                    assert!(l.deadline() <= since + cfg.reclaim_horizon_ms as u64);
                }
            }
        }
    }
    eprintln!(
        "{refusals} refusals: {honest} with a retry-after checked honest, {none} without one"
    );
    assert!(
        refusals > 10_000 && honest > 5_000,
        "{refusals} refusals, {honest} with a retry-after, {none} without"
    );
}

/// A release wakes every waiter it can serve (`guaranteed::waiters`): over random
/// states, whenever a request refused now would be granted right after the release of
/// a lease at the same instant, the bits that release wakes include the bits that
/// request's waiter sleeps with. And the wake is targeted: many waiters a release
/// cannot serve are not woken by it.
#[test]
fn a_release_wakes_every_waiter_it_can_serve() {
    use fairshm::guaranteed::waiters::{release_bits, waiter_bits};
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let (mut served, mut spared) = (0u64, 0u64);
    for _case in 0..1500 {
        let cfg = config(&mut x);
        let mut m = Model::new(&cfg).unwrap();
        let n = cfg.tenants.len() as u64;
        let mut now = 0u64;
        for _ in 0..80 {
            now += rng(&mut x) % 20;
            let live: Vec<u32> = m.state.leases.iter().map(|l| l.no).collect();
            let ask = |x: &mut u64, now: u64| {
                let t = (rng(x) % n) as u16;
                let cost = rng(x) % (cfg.ceiling as u64 / 2) + 1;
                let hold = rng(x) % (2 * cfg.reclaim_horizon_ms as u64);
                (t, cost, hold, now)
            };
            if !live.is_empty() && rng(&mut x) % 3 == 0 {
                let no = live[(rng(&mut x) as usize) % live.len()];
                let at = now.max(m.state.clock);
                let lease = m.state.leases.iter().find(|l| l.no == no).unwrap();
                let bits = release_bits(&m.state, &m.rules, lease, at);
                let mut after = m.clone();
                after.release(no, at).unwrap();
                for _ in 0..8 {
                    let (t, cost, hold, _) = ask(&mut x, at);
                    if !matches!(m.clone().acquire(t, cost, hold, at), Ok(Effect::Refused(_))) {
                        continue;
                    }
                    let theirs = waiter_bits(t, hold, cfg.reclaim_horizon_ms as u64);
                    let woken = theirs & bits != 0;
                    match after.clone().acquire(t, cost, hold, at) {
                        Ok(Effect::Granted(_)) => {
                            served += 1;
                            assert!(
                                woken,
                                "{cfg:?}: t{t} asking {cost} for {hold} at {at} is served by \
                                 the release of #{no}, which does not wake it (bits \
                                 {bits:#x}, the waiter's {theirs:#x}); state before: {:?}",
                                m.state
                            );
                        }
                        _ if !woken => spared += 1,
                        _ => {}
                    }
                }
                m = after;
                now = at;
            } else {
                let (t, cost, hold, now) = ask(&mut x, now);
                match m.acquire(t, cost, hold, now) {
                    Ok(_) | Err(fairshm::Error::PoolLeasesFull { .. }) => {}
                    Err(e) => panic!("{e}"),
                }
            }
        }
    }
    eprintln!("{served} waiters served by a release, all woken; {spared} not woken, not served");
    assert!(
        served > 2_000 && spared > 2_000,
        "{served} served, {spared} spared"
    );
}
