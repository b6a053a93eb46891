//! Profiling aid: a tight uncontended loop (`perf record`, callgrind), one MODE:
//! - `engine` (the default): the fair-share acquire/release pair through the engine's
//!   handles; `name`: the same through the façade, by name;
//! - `guaranteed`: a guaranteed pool of two tenants, a pair within the asker's guarantee;
//! - `guaranteed-refusal`: on that pool, a refusal (`guarantee_on_loan`, with its
//!   blocking lease and retry-after): the asker's whole guarantee is on loan;
//! - `guaranteed-busy`: the pair on a pool of four tenants with 751 other leases
//!   outstanding (250 of them on loan, due over 100 ms): what an op costs as the state
//!   grows; `guaranteed-busy-refusal`: there, a refusal whose retry-after waits for most
//!   of those leases;
//! - `guaranteed-wide`: a pair that borrows, on a pool of 64 tenants with 1,000 other
//!   leases outstanding (900 units of them on loan);
//! - `evict`: on a full residents pool of 2 (`evict`) whose idle residents are the
//!   asker's, a spawn that evicts the idlest and the release of that victim, with the
//!   default tables (256 process slots of 64 leases; this process in one of them).
//!
//! Only the loop is timed (not a mode's set-up).
//! Run: `cargo run --release --example hotloop -- [MODE] [iterations]`
use fairshm::guaranteed::{GOutcome, GPoolId};
use fairshm::{
    Config, Engine, FairnessUnit, GuaranteedConfig, Outcome, PoolConfig, Request, Table,
};

fn main() {
    let name = format!("fairshm-hotloop-{}", std::process::id());
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "engine".into());
    let n: u64 = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let mut config = Config::with_pools(vec![PoolConfig::new("requests", 64)]);
    // Only the guaranteed modes add a guaranteed pool: the others' segment stays as it
    // always was.
    let guaranteed = match mode.as_str() {
        "guaranteed" | "guaranteed-refusal" => Some(tenants(100, 2, 64)),
        // Four tenants of 500 units each, room for the 751 leases held and the pair's.
        "guaranteed-busy" | "guaranteed-busy-refusal" => Some(tenants(2000, 4, 1024)),
        // Sixty-four tenants of 100 units each.
        "guaranteed-wide" => Some(tenants(6400, 64, 1024)),
        _ => None,
    };
    if let Some(g) = guaranteed {
        config = config.guaranteed(g);
    }
    if mode == "evict" {
        config = Config::with_pools(vec![PoolConfig::new("residents", 2).evicting()]);
    }
    let t = Table::create(&name, &config).unwrap();
    let e = t.engine();
    let elapsed = match mode.as_str() {
        "name" => {
            let req = Request::new("requests", "acme");
            timed(n, || {
                let lease = t.try_acquire_at(&req, 1000).unwrap().unwrap();
                lease.release_at(1000).unwrap();
            })
        }
        "guaranteed"
        | "guaranteed-refusal"
        | "guaranteed-busy"
        | "guaranteed-busy-refusal"
        | "guaranteed-wide" => guaranteed_loop(e, &mode, n),
        "evict" => evict_loop(e, n),
        _ => {
            let (p, acme) = (e.pool("requests").unwrap(), e.tenant("acme").unwrap());
            timed(n, || {
                let Outcome::Granted(id) = e.acquire(p, acme, 1, 0, 1000).unwrap() else {
                    panic!("refused")
                };
                e.release(id, 1000).unwrap();
            })
        }
    };
    println!(
        "{:.1} ns per iteration ({mode})",
        elapsed.as_nanos() as f64 / n as f64,
    );
    drop(t);
    Table::unlink(&name).unwrap();
}

/// The `evict` mode: "acme" fills the residents pool at 1 and 2; each iteration's spawn
/// at `now` (one ms after the last) evicts the idlest, the oldest granted, which is then
/// released.
fn evict_loop(e: &Engine, n: u64) -> std::time::Duration {
    use fairshm::ResidentStatus as Status;
    let (p, acme) = (e.pool("residents").unwrap(), e.tenant("acme").unwrap());
    let spawn = |now: u64| {
        let Outcome::Granted(id) = e.acquire(p, acme, 1, 0, now).unwrap() else {
            panic!("refused")
        };
        id
    };
    let mut held = std::collections::VecDeque::from([spawn(1), spawn(2)]);
    let mut now = 2;
    timed(n, || {
        now += 1;
        held.push_back(spawn(now));
        let victim = held.pop_front().unwrap();
        debug_assert_eq!(e.resident_status(victim).unwrap(), Status::Revoked);
        e.release(victim, now).unwrap();
    })
}

/// A guaranteed pool `tokens` in cost of `ceiling`, tenants `t0`, `t1`, ... of weight 1,
/// a reclaim horizon of 100 ms, idle after 150.
fn tenants(ceiling: u32, count: usize, max_leases: u32) -> GuaranteedConfig {
    let mut g = GuaranteedConfig::new("tokens", ceiling)
        .unit(FairnessUnit::Cost)
        .reclaim_horizon_ms(100)
        .idle_after_ms(150)
        .max_leases(max_leases);
    for k in 0..count {
        g = g.tenant(&format!("t{k}"), 1);
    }
    g
}

/// `n` runs of `f`, timed.
fn timed(n: u64, mut f: impl FnMut()) -> std::time::Duration {
    let start = std::time::Instant::now();
    for _ in 0..n {
        f();
    }
    start.elapsed()
}

/// Grants `count` leases of `cost` to `tenant` at 1000, held 1 to 100 ms in turn.
fn hold(e: &Engine, pool: GPoolId, tenant: &str, count: u64, cost: u64) {
    let tenant = e.guaranteed_tenant(pool, tenant).unwrap();
    for i in 0..count {
        let granted = e.guaranteed_acquire(pool, tenant, cost, 1 + i % 100, 1000);
        assert!(matches!(granted, Ok(GOutcome::Granted(_))), "{granted:?}");
    }
}

/// The guaranteed modes: the set-up, then `n` timed iterations.
fn guaranteed_loop(e: &Engine, mode: &str, n: u64) -> std::time::Duration {
    let pool = e.guaranteed_pool("tokens").unwrap();
    let asker = |name: &str| e.guaranteed_tenant(pool, name).unwrap();
    // A pair of `cost` held 50 ms, by `t`.
    let pair = |t: u16, cost: u64, borrows: bool| {
        let GOutcome::Granted(l) = e.guaranteed_acquire(pool, t, cost, 50, 1000).unwrap() else {
            panic!("refused")
        };
        assert_eq!(!l.grant.borrowed.is_empty(), borrows);
        e.guaranteed_release(l.id, 1000).unwrap();
    };
    // A refusal of `cost` held 50 ms, by `t`, with its retry-after.
    let refusal = |t: u16, cost: u64, retry_after: u64| {
        let GOutcome::Refused(r) = e.guaranteed_acquire(pool, t, cost, 50, 1000).unwrap() else {
            panic!("granted")
        };
        assert_eq!(r.retry_after_ms, Some(retry_after));
    };
    match mode {
        "guaranteed" => timed(n, || pair(asker("t0"), 10, false)),
        "guaranteed-refusal" => {
            // t1 holds its own 50 and borrows t0's idle 50 until 1100.
            let loan = e.guaranteed_acquire(pool, asker("t1"), 100, 100, 1000);
            assert!(matches!(loan, Ok(GOutcome::Granted(_))), "{loan:?}");
            timed(n, || refusal(asker("t0"), 10, 100))
        }
        "guaranteed-busy" | "guaranteed-busy-refusal" => {
            // t1's 500 leases of 1 unit within its guarantee, then 250 more borrowed
            // from the idle others, and one of t2's own: 751 leases, 250 slices, due at
            // 1001 to 1100.
            hold(e, pool, "t1", 750, 1);
            hold(e, pool, "t2", 1, 1);
            if mode == "guaranteed-busy" {
                timed(n, || pair(asker("t0"), 10, false))
            } else {
                // Room for 1,500 (t0's 500, t2's and t3's) once t2's lease, due at 1001,
                // and the loans from t2 and t3 are back and t2 is idle: 150 ms later.
                timed(n, || refusal(asker("t0"), 1500, 151))
            }
        }
        _ => {
            // t0's 1,000 leases of 1 unit: its own 100, then 900 borrowed.
            hold(e, pool, "t0", 1000, 1);
            timed(n, || pair(asker("t1"), 200, true))
        }
    }
}
