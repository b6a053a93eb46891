//! Tests of the config: validation, the canonical block, and Semian's tickets.

use super::encoding::HEAD_LEN;
use super::*;

#[test]
fn default_round_trips() {
    let c = Config::default().weight("acme", 3);
    c.validate().unwrap();
    assert_eq!(Config::decode(&c.encode()).unwrap(), c);
}

#[test]
fn per_worker_tickets_follow_the_semian_formula() {
    let half = PerWorker::new(0.5, 0);
    assert_eq!(half.tickets(5), 3);
    assert_eq!(half.tickets(1), 1);
    assert_eq!(half.tickets(0), 0);
    assert_eq!(PerWorker::new(0.51, 0).tickets(2), 2); // Shopify's 0.51 comment
    assert_eq!(PerWorker::new(0.1, 2).tickets(1), 1); // capped at workers
    assert_eq!(PerWorker::new(0.1, 2).tickets(3), 2); // min_tickets
    assert_eq!(PerWorker::new(0.1, 2).tickets(16), 2);
    assert_eq!(PerWorker::new(0.25, 2).tickets(16), 4);
    let c = Config::with_pools(vec![PoolConfig::per_worker("flights", 0.5, 2)]);
    c.validate().unwrap();
    assert_eq!(Config::decode(&c.encode()).unwrap(), c);
    // As Semian's float arithmetic: 0.14 of 50 is 8 (0.14 * 50 is 7.000000000000001
    // in f64), 0.07 of 100 is 8, while 0.29 of 100 is 29 (28.999999999999996).
    assert_eq!(PerWorker::new(0.14, 0).tickets(50), 8);
    assert_eq!(PerWorker::new(0.07, 0).tickets(100), 8);
    assert_eq!(PerWorker::new(0.29, 0).tickets(100), 29);
    assert_eq!(PerWorker::new(0.51, 0).tickets(16), 9); // ceil(8.16)
    // Semian's thread: one worker with a quota of 0.01 still gets a ticket.
    assert_eq!(PerWorker::new(0.01, 0).tickets(1), 1);
    // A positive quota below half a millionth is valid and gives one ticket, as
    // ceil(quota * workers) does; one just above 1 is refused, not rounded in.
    let tiny = Config::with_pools(vec![PoolConfig::per_worker("f", 1e-7, 0)]);
    tiny.validate().unwrap();
    assert_eq!(PerWorker::new(1e-7, 0).tickets(16), 1);
    for (bad, why) in [
        (0.0, "0 or less"),
        (-0.5, "0 or less"),
        (f64::NAN, "not a number"),
        (f64::NEG_INFINITY, "0 or less"),
        (1.5, "above 1"),
        (1.0000001, "above 1"),
        (f64::INFINITY, "above 1"),
    ] {
        let c = Config::with_pools(vec![PoolConfig::per_worker("f", bad, 0)]);
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("quota") && e.contains(why), "{bad}: {e}");
    }
}

/// A quota of at most six decimals, parsed from its text as a config file's is and
/// kept in the config block as millionths, gives the tickets Semian's
/// `(quota * workers).ceil` gives in `f64`, for every worker count.
#[test]
fn six_decimal_quotas_give_semians_float_tickets_after_the_block() {
    let quotas = (1..=100u32)
        .map(|i| format!("{}.{:02}", i / 100, i % 100))
        .chain((1..=1_000_000u32).step_by(997).map(|i| format!("0.{i:06}")));
    let mut checked = 0;
    for text in quotas {
        let pw = semians_tickets_after_the_block(text.parse().unwrap());
        // Millionths hold it: no exact-quota list, the block as it always was.
        assert_eq!(pw.exact_bits, 0, "quota {text}");
        checked += 1;
    }
    assert_eq!(checked, 100 + 1_004);
}

/// Puts `quota` through the config block and checks that its tickets are Semian's
/// `(quota * workers).ceil` in `f64` for 0 to 300 workers; returns what was read.
fn semians_tickets_after_the_block(quota: f64) -> PerWorker {
    let c = Config::with_pools(vec![PoolConfig::per_worker("f", quota, 0)]);
    let pw = Config::decode(&c.encode()).unwrap().pools[0]
        .per_worker
        .unwrap();
    for workers in 0..=300u32 {
        let semian = ((quota * workers as f64).ceil() as u32).min(workers);
        assert_eq!(
            pw.tickets(workers),
            semian,
            "quota {quota:e}, {workers} workers"
        );
    }
    pw
}

/// A quota of more than six decimals is kept as its `f64` too, so its tickets are
/// Semian's as well: 2/3 of 3 workers is 2 (`2.0 / 3.0 * 3.0` is 2.0 in `f64`),
/// where its millionths, 666,667, would give 3.
#[test]
fn a_quota_of_more_than_six_decimals_keeps_semians_tickets() {
    let two_thirds = PerWorker::new(2.0 / 3.0, 0);
    assert_eq!((two_thirds.quota_ppm, two_thirds.tickets(3)), (666_667, 2));
    assert_eq!(two_thirds.quota(), 2.0 / 3.0);
    assert_eq!(
        PerWorker::new(0.14, 0).exact_bits,
        0,
        "six decimals: millionths"
    );
    // A config without such a quota encodes as before: no list, head words 6 and 7
    // zero; one with it lists it at the end and decodes to the same tickets.
    let plain = Config::with_pools(vec![PoolConfig::per_worker("f", 0.25, 1)]);
    let b = plain.encode();
    assert_eq!(b.len(), HEAD_LEN + encoding::POOL_LEN);
    assert_eq!(&b[24..32], &[0; 8]);
    let c = Config::with_pools(vec![
        PoolConfig::new("requests", 8),
        PoolConfig::per_worker("thirds", 2.0 / 3.0, 0),
        PoolConfig::per_worker("sevenths", 1.0 / 7.0, 2),
    ]);
    c.validate().unwrap();
    let b = c.encode();
    assert_eq!(
        b.len(),
        HEAD_LEN + 3 * encoding::POOL_LEN + 2 * encoding::EXACT_LEN
    );
    let back = Config::decode(&b).unwrap();
    assert_eq!(back, c);
    assert_eq!(back.pools[1].per_worker.unwrap().tickets(3), 2);
    assert_eq!(back.diff(&c), None);
    // Quotas of any precision, against Semian's formula after the block.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..2_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let quota = ((x >> 11) as f64 / (1u64 << 53) as f64).max(f64::MIN_POSITIVE);
        semians_tickets_after_the_block(quota);
    }
}

/// The list of exact quotas is input like the rest of the block: every entry is
/// checked, and one that does not fit is refused by name, never trusted.
#[test]
fn a_bad_exact_quota_list_is_refused() {
    let c = Config::with_pools(vec![
        PoolConfig::new("requests", 8),
        PoolConfig::per_worker("thirds", 2.0 / 3.0, 0),
    ]);
    let good = c.encode();
    let entry = HEAD_LEN + 2 * encoding::POOL_LEN;
    let set = |at: usize, v: &[u8]| {
        let mut b = good.clone();
        b[at..at + v.len()].copy_from_slice(v);
        b
    };
    let cases = [
        (
            "pool index of the fixed pool",
            set(entry, &0u32.to_le_bytes()),
        ),
        ("pool index out of range", set(entry, &9u32.to_le_bytes())),
        ("padding not zero", set(entry + 4, &1u32.to_le_bytes())),
        ("bits zero", set(entry + 8, &0u64.to_le_bytes())),
        ("a NaN", set(entry + 8, &f64::NAN.to_bits().to_le_bytes())),
        (
            "another millionth",
            set(entry + 8, &0.7f64.to_bits().to_le_bytes()),
        ),
        (
            "exactly the millionths",
            set(entry + 8, &0.666667f64.to_bits().to_le_bytes()),
        ),
        ("above 1", set(entry + 8, &1.5f64.to_bits().to_le_bytes())),
        ("more entries than pools", set(24, &3u32.to_le_bytes())),
        ("an entry missing", good[..good.len() - 1].to_vec()),
        ("head word 7", set(28, &1u32.to_le_bytes())),
        ("no list for a listed count", set(24, &0u32.to_le_bytes())),
    ];
    for (what, b) in cases {
        match Config::decode(&b) {
            Err(Error::Corrupt(m)) => assert!(m.contains("config block"), "{what}: {m}"),
            other => panic!("{what}: {other:?}"),
        }
    }
    // Two entries for one pool, or out of order.
    let c = Config::with_pools(vec![
        PoolConfig::per_worker("a", 1.0 / 3.0, 0),
        PoolConfig::per_worker("b", 2.0 / 3.0, 0),
    ]);
    let good = c.encode();
    let entry = HEAD_LEN + 2 * encoding::POOL_LEN;
    let mut b = good.clone();
    b[entry + encoding::EXACT_LEN..entry + encoding::EXACT_LEN + 4]
        .copy_from_slice(&0u32.to_le_bytes());
    assert!(Config::decode(&b).is_err(), "two entries for pool 0");
    assert!(Config::decode(&good).is_ok());
}

/// The pools without rates are listed after everything else, counted by the head's last
/// word: a config whose pools are all rated encodes as before the list; every entry is
/// checked and one that does not fit is refused by name.
#[test]
fn the_list_of_pools_without_rates_round_trips_and_is_checked() {
    let rated = Config::with_pools(vec![PoolConfig::new("a", 8), PoolConfig::new("b", 8)]);
    let before = rated.encode();
    assert_eq!(
        &before[28..32],
        &[0; 4],
        "no list, the head word zero as before"
    );
    let c = Config::with_pools(vec![
        PoolConfig::new("a", 8).without_rates(),
        PoolConfig::new("b", 8),
        PoolConfig::new("c", 8).without_rates(),
    ]);
    let good = c.encode();
    assert_eq!(
        good.len(),
        HEAD_LEN + 3 * encoding::POOL_LEN + 2 * encoding::UNRATED_LEN
    );
    assert_eq!(Config::decode(&good).unwrap(), c);
    assert!(c.diff(&rated).is_some() && Config::default().diff(&c).is_some());
    let entry = HEAD_LEN + 3 * encoding::POOL_LEN;
    let set = |at: usize, v: &[u8]| {
        let mut b = good.clone();
        b[at..at + v.len()].copy_from_slice(v);
        b
    };
    let cases = [
        ("pool index out of range", set(entry, &3u32.to_le_bytes())),
        ("padding not zero", set(entry + 4, &1u32.to_le_bytes())),
        ("out of order", set(entry + 8, &0u32.to_le_bytes())),
        ("more entries than pools", set(28, &4u32.to_le_bytes())),
        ("an entry missing", good[..good.len() - 1].to_vec()),
        ("a count short of the list", set(28, &1u32.to_le_bytes())),
    ];
    for (what, b) in cases {
        match Config::decode(&b) {
            Err(Error::Corrupt(m)) => assert!(m.contains("config block"), "{what}: {m}"),
            other => panic!("{what}: {other:?}"),
        }
    }
}

#[test]
fn floor_is_five_percent_at_least_one() {
    assert_eq!(floor_of(8, 5), 1);
    assert_eq!(floor_of(1000, 5), 50);
    assert_eq!(floor_of(1, 0), 1);
    assert_eq!(floor_of(39, 5), 1);
    assert_eq!(floor_of(40, 5), 2);
}

#[test]
fn validation_names_the_field() {
    let mut c = Config::with_pools(vec![PoolConfig::new("a", 0)]);
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("capacity 0"), "{e}");
    c.pools[0].capacity = 4;
    c.pools.push(PoolConfig::new("a", 3));
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("named twice"), "{e}");
    let c = Config::default().weight("x", 0);
    assert!(c.validate().unwrap_err().to_string().contains("weight"));
    let c = Config::with_pools(vec![PoolConfig::new("a", 4).window_ms(0)]);
    assert!(c.validate().unwrap_err().to_string().contains("window_ms"));
    let c = Config {
        leases_per_process: 1000,
        ..Config::default()
    };
    assert!(
        c.validate()
            .unwrap_err()
            .to_string()
            .contains("leases_per_process")
    );
}

#[test]
fn diff_names_first_difference() {
    let a = Config::default();
    let mut b = a.clone();
    b.pools[1].capacity = 7;
    let d = a.diff(&b).unwrap();
    assert_eq!(
        d,
        "pool \"connections\": capacity: the segment has 200, asked for 7"
    );
    assert_eq!(a.diff(&a), None);
}

#[test]
fn diff_says_it_in_the_config_files_keys() {
    let a = Config::with_pools(vec![PoolConfig::new("r", 4)]);
    let said = |b: &Config| a.diff(b).expect("a difference");
    let mut b = a.clone();
    b.pools[0].window_ms = 250;
    assert_eq!(
        said(&b),
        "pool \"r\": window_ms: the segment has 1000, asked for 250"
    );
    let b = Config::with_pools(vec![PoolConfig::per_worker("r", 0.5, 2)]);
    assert_eq!(
        said(&b),
        "pool \"r\": the segment has capacity = 4, asked for per_worker.quota = 0.5"
    );
    let pw = Config::with_pools(vec![PoolConfig::per_worker("r", 0.25, 2)]);
    assert_eq!(
        pw.diff(&b).unwrap(),
        "pool \"r\": per_worker.quota: the segment has 0.25, asked for 0.5"
    );
    let b = Config::with_pools(vec![PoolConfig::new("r", 4).evicting().evict_wait_ms(5)]);
    assert_eq!(
        said(&b),
        "pool \"r\": evict: the segment has false, asked for true"
    );
    let b = Config::with_pools(vec![PoolConfig::new("r", 4).without_rates()]);
    assert_eq!(
        said(&b),
        "pool \"r\": rates: the segment has true, asked for false"
    );
    // Weights: in any order, and a tenant weighted 1 is one the config does not name.
    let w = a.clone().weight("acme", 3).weight("globex", 2);
    let same = a
        .clone()
        .weight("globex", 2)
        .weight("acme", 3)
        .weight("initech", 1);
    assert_eq!(w.diff(&same), None);
    let same = same.weight("hooli", 4);
    assert_eq!(
        w.diff(&same).unwrap(),
        "weights: tenant \"hooli\": the segment has 1, asked for 4"
    );
    let mut g = a.clone();
    g.guaranteed
        .push(crate::guaranteed::GuaranteedConfig::new("llm", 100));
    let mut h = g.clone();
    h.guaranteed[0].reclaim_horizon_ms = 100;
    assert_eq!(
        g.diff(&h).unwrap(),
        "guaranteed pool \"llm\": reclaim_horizon_ms: the segment has 250, asked for 100"
    );
}

#[test]
fn decode_rejects_garbage_without_panicking() {
    let good = Config::default().encode();
    for cut in 0..good.len() {
        assert!(Config::decode(&good[..cut]).is_err());
    }
    let mut bad = good.clone();
    bad[HEAD_LEN + MAX_NAME] = 0; // capacity of pool 0 -> 0 (low byte)
    bad[HEAD_LEN + MAX_NAME + 1] = 0;
    assert!(Config::decode(&bad).is_err());
}
