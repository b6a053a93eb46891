//! Profiling aid: a tight uncontended acquire/release loop (`perf record`, callgrind),
//! through the engine's handles (`engine`, the default), the façade by name (`name`), or
//! on a guaranteed pool of two tenants, within the asker's guarantee (`guaranteed`).
//! Run: `cargo run --release --example hotloop -- [engine|name|guaranteed] [pairs]`
use fairshm::guaranteed::GOutcome;
use fairshm::{Config, FairnessUnit, GuaranteedConfig, Outcome, PoolConfig, Request, Table};
fn main() {
    let name = format!("fairshm-hotloop-{}", std::process::id());
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "engine".into());
    let n: u64 = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let mut config = Config::with_pools(vec![PoolConfig::new("requests", 64)]);
    if mode == "guaranteed" {
        // Only here: the other modes' segment stays as it always was.
        config = config.guaranteed(
            GuaranteedConfig::new("tokens", 100)
                .unit(FairnessUnit::Cost)
                .tenant("a", 1)
                .tenant("b", 1)
                .reclaim_horizon_ms(100)
                .idle_after_ms(150),
        );
    }
    let t = Table::create(&name, &config).unwrap();
    let start = std::time::Instant::now();
    match mode.as_str() {
        "name" => {
            let req = Request::new("requests", "acme");
            for _ in 0..n {
                let lease = t.try_acquire_at(&req, 1000).unwrap().unwrap();
                lease.release_at(1000).unwrap();
            }
        }
        "guaranteed" => {
            let e = t.engine();
            let pool = e.guaranteed_pool("tokens").unwrap();
            let a = e.guaranteed_tenant(pool, "a").unwrap();
            for _ in 0..n {
                let GOutcome::Granted(l) = e.guaranteed_acquire(pool, a, 10, 50, 1000).unwrap()
                else {
                    panic!("refused")
                };
                e.guaranteed_release(l.id, 1000).unwrap();
            }
        }
        _ => {
            let e = t.engine();
            let (p, acme) = (e.pool("requests").unwrap(), e.tenant("acme").unwrap());
            for _ in 0..n {
                let Outcome::Granted(id) = e.acquire(p, acme, 1, 0, 1000).unwrap() else {
                    panic!("refused")
                };
                e.release(id, 1000).unwrap();
            }
        }
    }
    println!(
        "{:.1} ns per pair ({mode})",
        start.elapsed().as_nanos() as f64 / n as f64,
    );
    drop(t);
    Table::unlink(&name).unwrap();
}
