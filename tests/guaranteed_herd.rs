//! No herd of a guaranteed pool's waiters for one lease: a release wakes one waiter it
//! may serve, which passes the wake on (granted or refused) while units are free for
//! the others (`guaranteed::pass`). Waiters here are threads of the test process (a
//! futex of the shared mapping wakes them as it would other processes); each asks
//! once, is refused and sleeps, and every later ask is counted in its tenant's
//! refusals, so a herd shows as asks that no release could serve.
mod common;

use std::time::{Duration, Instant};

use common::{Seg, mono_ms as now_ms, wait_until};
use fairshm::guaranteed::{GGrant, Guaranteed};
use fairshm::{Cancel, FairnessUnit, Table};

/// A pool of 90 shared evenly by a, b and c, idle after 20 s (a waiter asks again on
/// its own only every 10 s, and a tenant that acted is not lendable for 20 s); b and c
/// have acquired and released, so they lend nothing; a holds its whole guarantee in
/// leases of 10, which it returns.
fn busy_a(seg: &Seg) -> (Table, Vec<GGrant>) {
    let t: Table = seg.create(&common::three_even());
    let leases = {
        let g = t.guaranteed("ceiling").unwrap();
        for other in ["b", "c"] {
            let l = g.acquire(other, 10, 1_000, now_ms()).unwrap().unwrap();
            g.release(l.id, now_ms()).unwrap();
        }
        (0..3)
            .map(|_| g.acquire("a", 10, 60_000, now_ms()).unwrap().unwrap())
            .collect()
    };
    (t, leases)
}

fn refusals(g: &Guaranteed<'_>, tenant: &str) -> u64 {
    let s = g.stats(now_ms()).unwrap();
    s.tenants
        .iter()
        .find(|t| t.name == tenant)
        .unwrap()
        .refusals
}

/// Waits until `tenant` has been refused `n` times, then a while more, so that the
/// waiter that asked last is asleep (its sleep follows its refusal at once).
fn asleep(g: &Guaranteed<'_>, tenant: &str, n: u64) {
    wait_until(
        None,
        "the waiters' refusals",
        Duration::from_millis(1),
        || refusals(g, tenant) >= n,
    );
    assert_eq!(refusals(g, tenant), n, "a waiter of {tenant} asked twice");
    std::thread::sleep(Duration::from_millis(150));
}

/// Three waiters of a, each for 10, behind a's full guarantee: each release of one of
/// a's leases of 10 serves one of them and wakes no other (none asks again), where
/// every release woke all of them before (each asked again: 2 + 1 more refusals).
#[test]
fn a_release_wakes_one_waiter_of_its_tenant_not_every_one() {
    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
    let seg = Seg::new("gh-one");
    let (t, mut leases) = busy_a(&seg);
    let g = t.guaranteed("ceiling").unwrap();
    let served = AtomicU64::new(0);
    std::thread::scope(|s| {
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                s.spawn(|| {
                    let r = g.acquire_timeout("a", 10, 100, Duration::from_secs(30));
                    served.fetch_add(1, SeqCst);
                    r
                })
            })
            .collect();
        asleep(&g, "a", 3);
        for k in 1..=3 {
            g.release(leases.pop().unwrap().id, now_ms()).unwrap();
            wait_until(None, "a waiter's grant", Duration::from_millis(1), || {
                served.load(SeqCst) == k
            });
            std::thread::sleep(Duration::from_millis(150));
            assert_eq!(
                served.load(SeqCst),
                k,
                "one lease of 10 served two waiters of 10"
            );
            assert_eq!(
                refusals(&g, "a"),
                3,
                "release {k}: a waiter the release could not serve asked again"
            );
        }
        for w in waiters {
            let lease = w.join().unwrap().unwrap().expect("served");
            g.release(lease.id, now_ms()).unwrap();
        }
    });
}

/// The waiter a release wakes first (the one that slept first) needs more than came
/// back; refused, it passes the wake on to the next, whose ask fits: served at once,
/// not at its next ask of its own (10 s away).
#[test]
fn a_refused_waiter_passes_the_wake_to_one_that_fits() {
    passes_to_one_that_fits("gh-pass", None);
}

/// The same, where the waiter woken first sleeps with a cancel token (`futex_waitv`,
/// which every wake of the word ends).
#[test]
fn a_cancellable_refused_waiter_passes_the_wake_on_too() {
    let cancel = Cancel::new();
    passes_to_one_that_fits("gh-pass-c", Some(&cancel));
}

fn passes_to_one_that_fits(name: &str, cancel: Option<&Cancel>) {
    let seg = Seg::new(name);
    let (t, mut leases) = busy_a(&seg);
    let g = t.guaranteed("ceiling").unwrap();
    std::thread::scope(|s| {
        let big = s.spawn(|| {
            g.acquire_timeout_cancellable("a", 20, 100, Duration::from_secs(30), cancel)
                .unwrap()
                .ok()
                .map(|l| l.id)
        });
        asleep(&g, "a", 1);
        let small = s.spawn(|| {
            let r = g.acquire_timeout("a", 10, 100, Duration::from_secs(30));
            (r, Instant::now())
        });
        asleep(&g, "a", 2);
        let released = Instant::now();
        g.release(leases.pop().unwrap().id, now_ms()).unwrap();
        let (r, back) = small.join().unwrap();
        let lease = r.unwrap().expect("served");
        let ms = back.duration_since(released).as_millis();
        assert!(
            ms < 1_000,
            "the waiter that fits was served {ms} ms after the release"
        );
        // The big waiter asked once more, for the wake it passed on.
        assert_eq!(refusals(&g, "a"), 3);
        assert!(!big.is_finished(), "the big waiter left");
        // 20 free for a: the big waiter is served in turn.
        g.release(lease.id, now_ms()).unwrap();
        g.release(leases.pop().unwrap().id, now_ms()).unwrap();
        let got = big
            .join()
            .unwrap()
            .expect("the big waiter was served at last");
        g.release(got, now_ms()).unwrap();
    });
    for l in leases {
        g.release(l.id, now_ms()).unwrap();
    }
}

/// A waiter of another tenant that slept first, with a cancel token (`futex_waitv`
/// matches every wake), takes the release's one wake; the release was not for it, so it
/// passes the wake on without asking and sleeps on; a's waiter is served at once.
#[test]
fn a_waiter_woken_for_others_passes_the_wake_on_without_asking() {
    let seg = Seg::new("gh-other");
    let (t, mut leases) = busy_a(&seg);
    let g = t.guaranteed("ceiling").unwrap();
    // c holds its own guarantee, so its waiter, which may borrow from nobody (a and b
    // are active), is refused.
    let c_own = g.acquire("c", 30, 60_000, now_ms()).unwrap().unwrap();
    let cancel = Cancel::new();
    std::thread::scope(|s| {
        let other = s.spawn(|| {
            g.acquire_timeout_cancellable("c", 10, 100, Duration::from_secs(30), Some(&cancel))
                .unwrap()
                .is_ok()
        });
        asleep(&g, "c", 1);
        let mine = s.spawn(|| {
            let r = g.acquire_timeout("a", 10, 100, Duration::from_secs(30));
            (r, Instant::now())
        });
        asleep(&g, "a", 1);
        let released = Instant::now();
        g.release(leases.pop().unwrap().id, now_ms()).unwrap();
        let (r, back) = mine.join().unwrap();
        let lease = r.unwrap().expect("served");
        let ms = back.duration_since(released).as_millis();
        assert!(
            ms < 1_000,
            "a's waiter was served {ms} ms after the release"
        );
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(
            refusals(&g, "c"),
            1,
            "c's waiter asked for a release of a's"
        );
        assert!(!other.is_finished());
        cancel.cancel();
        assert!(!other.join().unwrap(), "c's waiter was refused at its end");
        g.release(lease.id, now_ms()).unwrap();
    });
    g.release(c_own.id, now_ms()).unwrap();
    for l in leases {
        g.release(l.id, now_ms()).unwrap();
    }
}

/// No waiter that a release can serve stays asleep, whatever the order the waiters
/// slept in: random waiters (tenants a, b and c, 1 to 12 units, a hold that may
/// borrow or not, some with a cancel token) wait behind a full pool, d's idle
/// guarantee on loan among it; the pool's leases come back one at a time in random
/// order, and 150 ms after each, every waiter still waiting must be one that the
/// rules refuse at that state (an ask of its request, applied to a copy of the state,
/// is refused). Each waiter asks again on its own only every 10 s, so a waiter the
/// chain of passed wakes missed is seen asleep with units for it.
#[test]
fn no_waiter_a_release_can_serve_stays_asleep() {
    use fairshm::guaranteed::{Call, Effect};
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    let seg = Seg::new("gh-chain");
    let c = common::guaranteed(
        "ceiling",
        120,
        FairnessUnit::Cost,
        &[("a", 1), ("b", 1), ("c", 1), ("d", 1)],
        (5_000, 20_000),
        8,
    );
    let t: Table = seg.create(&c);
    let g = t.guaranteed("ceiling").unwrap();
    let names = ["a", "b", "c"];
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rand = move |n: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n
    };
    for round in 0..6 {
        // Fill the pool: a, b and c their own 30 each in leases of 1 to 10, then d's
        // idle 30 on loan to them (holds within the horizon).
        let mut held = Vec::new();
        for tenant in names {
            let mut left = 30;
            while left > 0 {
                let u = (1 + rand(10)).min(left);
                held.push(g.acquire(tenant, u, 60_000, now_ms()).unwrap().unwrap());
                left -= u;
            }
        }
        let mut left = 30;
        while left > 0 {
            let u = (1 + rand(10)).min(left);
            let tenant = names[rand(3) as usize];
            held.push(g.acquire(tenant, u, 1_000, now_ms()).unwrap().unwrap());
            left -= u;
        }
        let before: u64 = names.iter().map(|n| refusals(&g, n)).sum();
        let waiters: Vec<(usize, u64, u64, bool)> = (0..6)
            .map(|_| {
                let hold = if rand(3) == 0 { 10_000 } else { 100 };
                (rand(3) as usize, 1 + rand(12), hold, rand(2) == 0)
            })
            .collect();
        let done: Vec<AtomicBool> = waiters.iter().map(|_| AtomicBool::new(false)).collect();
        let cancels: Vec<Cancel> = waiters.iter().map(|_| Cancel::new()).collect();
        let finish = AtomicBool::new(false);
        std::thread::scope(|s| {
            let mut joins = Vec::new();
            for (k, &(tenant, cost, hold, cancellable)) in waiters.iter().enumerate() {
                let (g, done, cancel, finish) = (&g, &done[k], &cancels[k], &finish);
                joins.push(s.spawn(move || {
                    let r = g
                        .acquire_timeout_cancellable(
                            names[tenant],
                            cost,
                            hold,
                            Duration::from_secs(60),
                            cancellable.then_some(cancel),
                        )
                        .unwrap();
                    done.store(true, SeqCst);
                    // Served waiters hold their units until the round ends; their
                    // releases then serve the others (the pool empties).
                    wait_until(None, "the round's end", Duration::from_millis(1), || {
                        finish.load(SeqCst)
                    });
                    if let Ok(l) = &r {
                        g.release(l.id, now_ms()).unwrap();
                    }
                    r.is_ok()
                }));
                // One at a time, so that they sleep in this order.
                let asked = before + k as u64 + 1;
                wait_until(
                    None,
                    "the waiter's refusal",
                    Duration::from_millis(1),
                    || names.iter().map(|n| refusals(g, n)).sum::<u64>() >= asked,
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            while !held.is_empty() {
                let l = held.swap_remove(rand(held.len() as u64) as usize);
                g.release(l.id, now_ms()).unwrap();
                std::thread::sleep(Duration::from_millis(150));
                let st = g.state().unwrap();
                for (k, &(tenant, cost, hold, _)) in waiters.iter().enumerate() {
                    if done[k].load(SeqCst) {
                        continue;
                    }
                    let mut copy = st.clone();
                    let ask = Call::Acquire {
                        tenant: tenant as u16,
                        cost,
                        hold_ms: hold,
                        owner: 0,
                        now: now_ms(),
                    };
                    let e = copy.apply(g.rules(), ask).unwrap();
                    assert!(
                        !matches!(e, Effect::Granted(_)) || done[k].load(SeqCst),
                        "round {round}: waiter {k} ({} for {cost}, hold {hold}) asleep with \
                         units for it: {:?}",
                        names[tenant],
                        waiters
                    );
                }
            }
            finish.store(true, SeqCst);
            for (k, j) in joins.into_iter().enumerate() {
                assert!(j.join().unwrap(), "round {round}: waiter {k} never served");
            }
        });
    }
}
