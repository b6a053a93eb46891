//! Profiling aid: a tight uncontended acquire/release loop (`perf record`, callgrind),
//! through the engine's handles (`engine`, the default) or the façade by name (`name`).
//! Run: `cargo run --release --example hotloop -- [engine|name] [pairs]`
use fairshm::{Config, Outcome, PoolConfig, Request, Table};
fn main() {
    let name = format!("fairshm-hotloop-{}", std::process::id());
    let t = Table::create(
        &name,
        &Config::with_pools(vec![PoolConfig::new("requests", 64)]),
    )
    .unwrap();
    let mut args = std::env::args().skip(1);
    let by_name = args.next().is_some_and(|m| m == "name");
    let n: u64 = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let start = std::time::Instant::now();
    if by_name {
        let req = Request::new("requests", "acme");
        for _ in 0..n {
            let lease = t.try_acquire_at(&req, 1000).unwrap().unwrap();
            lease.release_at(1000).unwrap();
        }
    } else {
        let e = t.engine();
        let (p, acme) = (e.pool("requests").unwrap(), e.tenant("acme").unwrap());
        for _ in 0..n {
            let Outcome::Granted(id) = e.acquire(p, acme, 1, 0, 1000).unwrap() else {
                panic!("refused")
            };
            e.release(id, 1000).unwrap();
        }
    }
    println!(
        "{:.1} ns per pair ({})",
        start.elapsed().as_nanos() as f64 / n as f64,
        if by_name { "by name" } else { "engine" }
    );
    drop(t);
    Table::unlink(&name).unwrap();
}
