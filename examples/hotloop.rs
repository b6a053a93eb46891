//! Profiling aid: a tight uncontended acquire/release loop (`perf record`, callgrind).
use fairshm::{Config, PoolConfig, Request, Table};
fn main() {
    let name = format!("fairshm-hotloop-{}", std::process::id());
    let t = Table::create(
        &name,
        &Config::with_pools(vec![PoolConfig::new("requests", 64)]),
    )
    .unwrap();
    let req = Request::new("requests", "acme");
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let start = std::time::Instant::now();
    for _ in 0..n {
        let lease = t.try_acquire_at(&req, 1000).unwrap().unwrap();
        lease.release_at(1000).unwrap();
    }
    println!(
        "{:.1} ns per pair",
        start.elapsed().as_nanos() as f64 / n as f64
    );
    drop(t);
    Table::unlink(&name).unwrap();
}
