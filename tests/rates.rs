//! Per-tenant rates through the table, with explicit `now`: a burst of one second then
//! the steady rate; a refusal before any pool is touched; debt from a large charge,
//! refused until refilled with a retry-after right to the millisecond; zero is
//! unbounded; a change made by another process applies at once; a blocking acquire
//! waits out a rate limit.
mod common;

use std::time::{Duration, Instant};

use common::{Seg, fork_child, one_pool, wait};
use fairshm::{Reason, Request, Table};

fn granted(t: &Table, tenant: &str, now: u64) -> bool {
    match t
        .try_acquire_at(&Request::new("requests", tenant), now)
        .unwrap()
    {
        Ok(lease) => {
            lease.release_at(now).unwrap();
            true
        }
        Err(_) => false,
    }
}

fn refusal(t: &Table, tenant: &str, now: u64) -> fairshm::Refusal {
    t.try_acquire_at(&Request::new("requests", tenant), now)
        .unwrap()
        .expect_err("refused")
}

#[test]
fn a_burst_of_one_second_then_the_steady_rate() {
    let seg = Seg::new("rates-burst");
    let t = seg.create(&one_pool(100));
    t.set_rates("acme", 10, 0).unwrap();
    assert_eq!(t.rates("acme").unwrap(), (10, 0));
    let t0 = 50_000;
    for i in 0..10 {
        assert!(granted(&t, "acme", t0), "burst request {i}");
    }
    let r = refusal(&t, "acme", t0);
    assert_eq!(r.reason, Reason::RateLimited);
    assert_eq!(r.retry_after_ms, Some(100), "the next token in 100 ms");
    assert!(
        r.explanation().contains("request rate of 10 per second"),
        "{r}"
    );
    // Steady: one every 100 ms, not more, over five seconds.
    let mut got = 0;
    for ms in (t0 + 1..=t0 + 5_001).step_by(10) {
        if granted(&t, "acme", ms) {
            got += 1;
        }
    }
    assert_eq!(got, 50, "5 s at 10 per second");
    // Another tenant is not limited.
    for _ in 0..50 {
        assert!(granted(&t, "globex", t0));
    }
}

#[test]
fn a_rate_refusal_touches_no_pool() {
    let seg = Seg::new("rates-untouched");
    let t = seg.create(&one_pool(4));
    t.set_rates("acme", 1, 0).unwrap();
    assert!(granted(&t, "acme", 10_000));
    let before = t.snapshot_at(10_000);
    let r = refusal(&t, "acme", 10_000);
    assert_eq!(r.reason, Reason::RateLimited);
    assert_eq!(
        (r.facts.in_use, r.facts.capacity),
        (0, 0),
        "no pool was read"
    );
    let after = t.snapshot_at(10_000);
    let (b, a) = (
        before.pool("requests").unwrap(),
        after.pool("requests").unwrap(),
    );
    assert_eq!(
        (a.grants, a.refusals),
        (b.grants, b.refusals),
        "the pool's counters"
    );
    let tp = |s: &fairshm::Snapshot| {
        let p = s.pool("requests").unwrap();
        let x = p.tenants.iter().find(|x| x.name == "acme").unwrap();
        (x.last_active_ms, x.refusals.clone(), x.hints)
    };
    assert_eq!(tp(&after), tp(&before), "the tenant's record in the pool");
    // The grant, then the rate refusal, logged with its bucket instead of the pool's
    // inputs (none were read).
    let v = fairshm::tool::decisions(&t).unwrap();
    let got: Vec<_> = v
        .decisions
        .iter()
        .map(|d| {
            (
                d.outcome,
                d.in_use,
                d.capacity,
                d.rate.map(|r| r.per_second),
            )
        })
        .collect();
    assert_eq!(
        got,
        [("granted", 0, 4, None), ("rate_limited", 0, 0, Some(1))]
    );
    let me = after.tenants.iter().find(|x| x.name == "acme").unwrap();
    assert_eq!(me.rates.rate_limited, 1);
}

#[test]
fn debt_refuses_until_refilled_to_the_millisecond() {
    let seg = Seg::new("rates-debt");
    let t = seg.create(&one_pool(4));
    t.set_rates("acme", 0, 1000).unwrap(); // 1 ms a unit
    assert!(granted(&t, "acme", 20_000));
    assert_eq!(
        t.charge_at("acme", 800, 20_000).unwrap(),
        0,
        "within the burst"
    );
    assert!(granted(&t, "acme", 20_000));
    // 3,200 more: 4,000 units' worth from 20,000 ms: 3,000 ms past the burst.
    assert_eq!(t.charge_at("acme", 3_200, 20_000).unwrap(), 3_000);
    let r = refusal(&t, "acme", 20_000);
    assert_eq!(r.reason, Reason::WorkDebt);
    assert_eq!(r.retry_after_ms, Some(3_000));
    assert!(r.explanation().contains("work debt"), "{r}");
    assert_eq!(refusal(&t, "acme", 22_999).retry_after_ms, Some(1));
    assert!(granted(&t, "acme", 23_000), "paid at 23,000 ms exactly");
    let s = t.snapshot_at(21_000);
    let me = s.tenants.iter().find(|x| x.name == "acme").unwrap();
    assert_eq!(
        (me.rates.work_debt_ms, me.rates.work_charged),
        (2_000, 4_000)
    );
    assert_eq!(me.rates.work_debt_refusals, 2);
}

/// A refusal by a rate states the rate as set, however its interval rounds: 1,500 a
/// second is one every 666,666 ns (666 us, which read back would say 1,502), and
/// 30,000 work units a second one every 33 us; the facts carry it (`rate_per_s`).
#[test]
fn a_rate_refusal_states_the_rate_as_set() {
    let seg = Seg::new("rates-exact");
    let t = seg.create(&one_pool(4));
    t.set_rates("acme", 1_500, 30_000).unwrap();
    let t0 = 40_000;
    for i in 0..1_500 {
        assert!(granted(&t, "acme", t0), "burst request {i}");
    }
    let r = refusal(&t, "acme", t0);
    assert_eq!(r.reason, Reason::RateLimited);
    assert_eq!((r.facts.rate_per_s, r.facts.interval_us), (1_500, 666));
    let text = r.explanation();
    assert!(text.contains("request rate of 1500 per second"), "{text}");
    assert!(text.contains("then one every 0.7 ms"), "{text}");
    // Work: 60,000 units charged at once, a second past the burst.
    t.set_rates("globex", 0, 30_000).unwrap();
    t.charge_at("globex", 60_000, t0).unwrap();
    let r = refusal(&t, "globex", t0);
    assert_eq!(r.reason, Reason::WorkDebt);
    assert_eq!((r.facts.rate_per_s, r.facts.interval_us), (30_000, 33));
    let text = r.explanation();
    assert!(text.contains("rate of 30000 units per second"), "{text}");
    // Past 10,000 a second the interval is told in us.
    t.set_rates("initech", 250_000, 0).unwrap();
    for _ in 0..250_000 {
        if !granted(&t, "initech", t0) {
            break;
        }
    }
    let r = refusal(&t, "initech", t0);
    assert_eq!(r.facts.rate_per_s, 250_000);
    let text = r.explanation();
    assert!(
        text.contains("rate of 250000 per second") && text.contains("then one every 4.0 us"),
        "{text}"
    );
    // Other refusals carry no rate.
    let mut held = Vec::new();
    let r = loop {
        match t
            .try_acquire_at(&Request::new("requests", "hooli"), t0)
            .unwrap()
        {
            Ok(lease) => held.push(lease),
            Err(r) => break r,
        }
    };
    assert_eq!(r.reason, Reason::OverShare);
    assert_eq!(r.facts.rate_per_s, 0);
}

#[test]
fn zero_is_unbounded() {
    let seg = Seg::new("rates-zero");
    let t = seg.create(&one_pool(4));
    assert_eq!(t.rates("acme").unwrap(), (0, 0));
    assert_eq!(t.charge_at("acme", u32::MAX as u64, 5_000).unwrap(), 0);
    for _ in 0..10_000 {
        assert!(granted(&t, "acme", 5_000));
    }
    t.set_rates("acme", 1, 1).unwrap();
    assert!(granted(&t, "acme", 5_000));
    assert!(!granted(&t, "acme", 5_000));
    t.set_rates("acme", 0, 0).unwrap();
    assert!(granted(&t, "acme", 5_000), "unbounded again at once");
}

/// A tenant not seen yet reads as unbounded, and claims nothing; a name no tenant can
/// have is refused as by every other call, not read as an unbounded tenant.
#[test]
fn rates_of_an_unseen_tenant_are_unbounded_and_of_an_impossible_name_refused() {
    let seg = Seg::new("rates-names");
    let t = seg.create(&one_pool(4));
    assert_eq!(t.rates("newcomer").unwrap(), (0, 0));
    assert!(t.snapshot().tenants.is_empty(), "nothing claimed");
    for bad in ["", "acme\0x", &"t".repeat(49)] {
        match t.rates(bad) {
            Err(fairshm::Error::InvalidTenant { name, .. }) => assert_eq!(name, bad),
            other => panic!("rates({bad:?}): {other:?}"),
        }
        assert!(matches!(
            t.set_rates(bad, 1, 1),
            Err(fairshm::Error::InvalidTenant { .. })
        ));
    }
}

#[test]
fn a_change_by_another_process_applies_at_once() {
    let seg = Seg::new("rates-live");
    let t = seg.create(&one_pool(4));
    for _ in 0..100 {
        assert!(granted(&t, "acme", 7_000));
    }
    let name = seg.name.clone();
    let child = fork_child(move || {
        let t = Table::open(&name).expect("open");
        t.set_rates("acme", 2, 0).expect("set");
        0
    });
    assert_eq!(wait(child), 0);
    assert!(granted(&t, "acme", 7_000));
    assert!(granted(&t, "acme", 7_000));
    assert_eq!(refusal(&t, "acme", 7_000).reason, Reason::RateLimited);
}

#[test]
fn a_blocking_acquire_waits_for_its_token() {
    let seg = Seg::new("rates-block");
    let t = seg.create(&one_pool(4));
    t.set_rates("acme", 20, 0).unwrap(); // one every 50 ms
    let req = Request::new("requests", "acme");
    // Empty the bucket (the burst, and any token that came meanwhile on a slow
    // machine), then time from the refusal: its retry-after, less its rounding up,
    // bounds the wait from below, whatever the machine's speed.
    let start = Instant::now();
    let next = loop {
        match t.try_acquire(&req).unwrap() {
            Ok(lease) => drop(lease),
            Err(r) => break r.retry_after_ms.expect("a rate refusal has a retry-after"),
        }
        assert!(
            start.elapsed() < common::DEADLINE,
            "the bucket never emptied"
        );
    };
    let start = Instant::now();
    let lease = t.acquire(&req, Duration::from_secs(5)).unwrap();
    let waited = start.elapsed();
    assert!(lease.is_ok(), "granted once its token came");
    assert!(
        waited >= Duration::from_millis(next.saturating_sub(1)),
        "waited {waited:?}, the token was {next} ms away"
    );
    drop(lease);
    // Over the rate with too short a timeout: the rate's refusal at once, not a
    // timeout after waiting for a token that cannot come in time.
    t.set_rates("acme", 1, 0).unwrap();
    let _ = t.try_acquire(&req).unwrap();
    let r = t
        .acquire(&req, Duration::from_millis(30))
        .unwrap()
        .expect_err("refused");
    assert_eq!(r.reason, Reason::RateLimited, "{r}");
    assert_eq!(r.facts.reason, Reason::RateLimited);
    assert!(r.retry_after_ms.unwrap() > 30, "{r}");
    // With no time to wait at all, the same: the rate's refusal, not a timeout.
    let r = t
        .acquire(&req, Duration::ZERO)
        .unwrap()
        .expect_err("refused");
    assert_eq!(r.reason, Reason::RateLimited, "{r}");
}

/// A rate set while a blocking acquire sleeps for its token applies to it within its
/// sweep interval, without asking again meanwhile: lifted, the request is granted then,
/// not when the old debt would have been paid.
#[test]
fn a_rate_lifted_while_a_request_waits_applies_to_it() {
    let seg = Seg::new("rates-lift");
    let t = seg.create(&one_pool(4));
    t.set_rates("acme", 0, 1_000).unwrap(); // 1 ms a unit
    assert!(t.charge("acme", 9_000).unwrap() > 7_000, "8 s of debt");
    let req = Request::new("requests", "acme");
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let start = Instant::now();
            let got = t.acquire(&req, Duration::from_secs(20)).unwrap();
            (got.is_ok(), start.elapsed())
        });
        std::thread::sleep(Duration::from_millis(100));
        t.set_rates("acme", 0, 0).unwrap();
        let (granted, waited) = waiter.join().unwrap();
        assert!(granted, "granted once the rate was lifted");
        assert!(
            waited < Duration::from_secs(4),
            "waited {waited:?}: for the old debt, not for the rate as set"
        );
    });
    // Its one refusal is counted, not one for each look at the rates.
    let s = t.snapshot();
    let me = s.tenants.iter().find(|x| x.name == "acme").unwrap();
    assert_eq!(me.rates.work_debt_refusals, 1);
}

/// A request that passes its rate and is refused by the pool has used its token (the
/// rate counts the requests that arrive): the next one, at the same instant, with room
/// in the pool, is refused by the rate.
#[test]
fn a_pool_refusal_uses_the_requests_token() {
    let seg = Seg::new("rates-pool-refusal");
    let t = seg.create(&one_pool(1));
    t.set_rates("light", 1, 0).unwrap();
    let held = t
        .try_acquire_at(&Request::new("requests", "heavy"), 10_000)
        .unwrap()
        .expect("room");
    assert_eq!(refusal(&t, "light", 10_000).reason, Reason::PoolFull);
    held.release_at(10_000).unwrap();
    let r = refusal(&t, "light", 10_000);
    assert_eq!(r.reason, Reason::RateLimited, "{r}");
    assert_eq!(r.retry_after_ms, Some(1000), "{r}");
    assert!(
        granted(&t, "light", 11_000),
        "the next token, a second later"
    );
}

/// An acquire that errs (bad input, a full table) was never decided: it gives back the
/// token it took, so bad input loses nothing and the tenant's next request, at the
/// same instant, is admitted.
#[test]
fn an_error_gives_the_requests_token_back() {
    let seg = Seg::new("rates-error-back");
    let mut cfg = one_pool(4);
    cfg.leases_per_process = 1;
    let t = seg.create(&cfg);
    t.set_rates("light", 1, 0).unwrap();
    let err = t
        .try_acquire_at(&Request::new("requests", "light").units(5), 10_000)
        .unwrap_err();
    assert!(
        matches!(err, fairshm::Error::UnitsExceedCapacity { .. }),
        "{err}"
    );
    let held = t
        .try_acquire_at(&Request::new("requests", "light"), 10_000)
        .unwrap()
        .expect("its token is still there");
    // Its next token comes at 11,000; there its one lease slot is full.
    let err = t
        .try_acquire_at(&Request::new("requests", "light"), 11_000)
        .unwrap_err();
    assert!(
        matches!(err, fairshm::Error::LeaseTableFull { .. }),
        "{err}"
    );
    held.release_at(11_000).unwrap();
    assert!(
        granted(&t, "light", 11_000),
        "the token the error took came back"
    );
    assert_eq!(refusal(&t, "light", 11_000).reason, Reason::RateLimited);
    let s = t.snapshot_at(11_000);
    let light = s.tenants.iter().find(|x| x.name == "light").unwrap();
    assert_eq!(light.rates.rate_limited, 1, "only the last");
}

/// A wait for room is one request: it takes one token of its tenant's request rate,
/// however often it tries (its announcement's second try, each wake and sweep), so a
/// tenant of one request a second waiting on a full pool is served at the release, not
/// refused by its own rate at its second try and served only when a second token comes.
#[test]
fn a_wait_for_room_takes_one_token() {
    let seg = Seg::new("rates-one-wait");
    let t = seg.create(&one_pool(1));
    t.set_rates("light", 1, 0).unwrap();
    let held = t
        .try_acquire(&Request::new("requests", "heavy"))
        .unwrap()
        .expect("room");
    std::thread::scope(|s| {
        s.spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(held);
        });
        let lease = t
            .acquire(&Request::new("requests", "light"), Duration::from_secs(20))
            .unwrap();
        assert!(lease.is_ok(), "granted at the release: {:?}", lease.err());
    });
    let s = t.snapshot();
    let light = s.tenants.iter().find(|x| x.name == "light").unwrap();
    assert_eq!(
        light.rates.rate_limited, 0,
        "the wait's own tries were refused by its rate"
    );
    assert_eq!(light.rates.request_tokens, 0, "the wait took its one token");
    let mine = s.pools[0]
        .tenants
        .iter()
        .find(|x| x.name == "light")
        .unwrap();
    assert_eq!(
        mine.refusals,
        vec![("pool_full".to_string(), 1)],
        "one request"
    );
}

/// A wait that no token can end in time ends at once with the rate's refusal: a tenant
/// 100 s in work debt, asking with a 20 s timeout, is told so now, with the debt's
/// retry-after, and the refusal is counted once, as `work_debt`, not as a timeout.
#[test]
fn a_blocking_acquire_past_its_token_is_refused_at_once() {
    let seg = Seg::new("rates-hopeless");
    let t = seg.create(&one_pool(4));
    t.set_rates("acme", 0, 1000).unwrap(); // 1 ms a unit
    let req = Request::new("requests", "acme");
    let _ = t.try_acquire(&req).unwrap();
    assert!(t.charge("acme", 101_000).unwrap() > 99_000, "in debt");
    let start = Instant::now();
    let r = t
        .acquire(&req, Duration::from_secs(20))
        .unwrap()
        .expect_err("in debt");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "waited {:?} for a token 100 s away",
        start.elapsed()
    );
    assert_eq!(r.reason, Reason::WorkDebt, "{r}");
    assert!(r.retry_after_ms.unwrap() > 20_000, "{r}");
    assert!(
        r.explanation().contains("work debt") && !r.explanation().contains("timed out"),
        "{r}"
    );
    let s = t.snapshot();
    let me = s.tenants.iter().find(|x| x.name == "acme").unwrap();
    assert_eq!(me.rates.work_debt_refusals, 1);
    let p = &s.pools[0];
    let mine = p.tenants.iter().find(|x| x.name == "acme").unwrap();
    assert_eq!(
        mine.refusals,
        vec![],
        "the pool counts no timeout (a rate's refusals are the tenant's)"
    );
}

/// A request takes a permit of `requests` and then, while it runs, of other pools: the
/// rates apply to the pool that admits it, so it is counted once, and a request already
/// admitted is not refused halfway for a debt its own work ran up.
#[test]
fn a_pool_without_rates_takes_no_token_and_refuses_no_debt() {
    let seg = Seg::new("rates-unrated");
    let cfg = fairshm::Config::with_pools(vec![
        fairshm::PoolConfig::new("requests", 100),
        fairshm::PoolConfig::new("flights", 100).without_rates(),
    ]);
    let t = seg.create(&cfg);
    t.set_rates("acme", 2, 100).unwrap();
    let t0 = 50_000;
    let flight = |now| {
        t.try_acquire_at(&Request::new("flights", "acme"), now)
            .unwrap()
            .map(|l| l.release_at(now).unwrap())
            .map_err(|r| r.reason)
    };
    // Each request makes three store calls: they take no request token.
    for i in 0..2 {
        assert!(granted(&t, "acme", t0), "request {i}");
        for k in 0..3 {
            assert!(flight(t0).is_ok(), "request {i}'s flight {k}");
        }
    }
    assert_eq!(refusal(&t, "acme", t0).reason, Reason::RateLimited);
    assert!(flight(t0).is_ok(), "flights are not rated");
    // In debt: a new request is refused; a store call of one in flight is not.
    assert_eq!(t.charge_at("acme", 300, t0).unwrap(), 2_000);
    assert_eq!(refusal(&t, "acme", t0 + 1_000).reason, Reason::WorkDebt);
    assert!(
        flight(t0 + 1_000).is_ok(),
        "no debt refusal in a pool without rates"
    );
    let snap = t.snapshot();
    let rated: Vec<bool> = snap.pools.iter().map(|p| p.rates).collect();
    assert_eq!(rated, [true, false]);
}

/// The built-in node config rates `requests`, where a request is admitted, and no other
/// pool; a config file says `rates = false`, and a segment keeps it.
#[test]
fn the_built_in_config_rates_requests_only_and_a_file_can_say_so() {
    let d = fairshm::Config::default();
    let rated: Vec<(&str, bool)> = d.pools.iter().map(|p| (p.name.as_str(), p.rates)).collect();
    assert_eq!(
        rated,
        [
            ("requests", true),
            ("connections", false),
            ("residents", false),
            ("flights", false)
        ]
    );
    let f = fairshm::Config::from_toml(
        "[[pools]]\nname = \"requests\"\ncapacity = 8\n\
         [[pools]]\nname = \"flights\"\ncapacity = 4\nrates = false\n",
    )
    .unwrap();
    assert_eq!(
        f.pools.iter().map(|p| p.rates).collect::<Vec<_>>(),
        [true, false]
    );
    let seg = Seg::new("rates-file");
    drop(seg.create(&f));
    // Opened with the same config: it matches; with flights rated: a mismatch naming it.
    drop(Table::open_or_create(&seg.name, &f).unwrap());
    let mut rated_flights = f.clone();
    rated_flights.pools[1].rates = true;
    let e = Table::open_or_create(&seg.name, &rated_flights)
        .err()
        .unwrap();
    assert!(
        matches!(e, fairshm::Error::ConfigMismatch { .. }) && e.to_string().contains("flights"),
        "{e}"
    );
}
