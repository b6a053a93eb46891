//! Profiling aid: a tight uncontended acquire/release loop (`perf record`, callgrind),
//! through the engine's handles (`engine`, the default), the façade by name (`name`), or
//! on a guaranteed pool of two tenants, within the asker's guarantee (`guaranteed`); or a
//! loop of refusals on that pool, a tenant asking while its whole guarantee is on loan
//! (`guaranteed-refusal`: `guarantee_on_loan` with its blocking lease and retry-after);
//! or, with 751 other leases outstanding (250 of them on loan, due over 100 ms), the
//! guaranteed pair (`guaranteed-busy`: what an op costs as the pool's state grows) or a
//! refusal whose retry-after waits for most of them (`guaranteed-busy-refusal`).
//! Run: `cargo run --release --example hotloop -- [MODE] [pairs]`, MODE one of `engine`,
//! `name`, `guaranteed`, `guaranteed-refusal`, `guaranteed-busy`,
//! `guaranteed-busy-refusal`
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
    let busy = mode.starts_with("guaranteed-busy");
    if busy {
        // Four tenants of 500 units each, room for the 751 leases held and the pair's.
        config = config.guaranteed(
            GuaranteedConfig::new("tokens", 2000)
                .unit(FairnessUnit::Cost)
                .tenant("a", 1)
                .tenant("b", 1)
                .tenant("c", 1)
                .tenant("d", 1)
                .reclaim_horizon_ms(100)
                .idle_after_ms(150)
                .max_leases(1024),
        );
    } else if mode.starts_with("guaranteed") {
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
    let mut start = std::time::Instant::now();
    match mode.as_str() {
        "name" => {
            let req = Request::new("requests", "acme");
            for _ in 0..n {
                let lease = t.try_acquire_at(&req, 1000).unwrap().unwrap();
                lease.release_at(1000).unwrap();
            }
        }
        "guaranteed" | "guaranteed-busy" | "guaranteed-busy-refusal" => {
            let e = t.engine();
            let pool = e.guaranteed_pool("tokens").unwrap();
            let a = e.guaranteed_tenant(pool, "a").unwrap();
            let mut held = Vec::new();
            if busy {
                // b's 500 leases of 1 unit within its guarantee, then 250 more borrowed
                // from the idle others, and one of c's own: 751 leases, 250 slices, due
                // at 1001 to 1100.
                let (b, c) = (
                    e.guaranteed_tenant(pool, "b").unwrap(),
                    e.guaranteed_tenant(pool, "c").unwrap(),
                );
                for (tenant, count) in [(b, 750), (c, 1)] {
                    for i in 0..count {
                        let hold = 1 + i % 100;
                        let GOutcome::Granted(l) =
                            e.guaranteed_acquire(pool, tenant, 1, hold, 1000).unwrap()
                        else {
                            panic!("the setup's lease was refused")
                        };
                        held.push(l);
                    }
                }
                // The loop's time alone.
                start = std::time::Instant::now();
            }
            for _ in 0..n {
                if mode == "guaranteed-busy-refusal" {
                    // Room for it (a's 500, c's and d's) once c's lease, due at 1001,
                    // and the loans from c and d are back and c is idle: 150 ms later.
                    let GOutcome::Refused(r) =
                        e.guaranteed_acquire(pool, a, 1500, 50, 1000).unwrap()
                    else {
                        panic!("granted")
                    };
                    assert_eq!(r.retry_after_ms, Some(151));
                    continue;
                }
                let GOutcome::Granted(l) = e.guaranteed_acquire(pool, a, 10, 50, 1000).unwrap()
                else {
                    panic!("refused")
                };
                e.guaranteed_release(l.id, 1000).unwrap();
            }
        }
        "guaranteed-refusal" => {
            let e = t.engine();
            let pool = e.guaranteed_pool("tokens").unwrap();
            let (a, b) = (
                e.guaranteed_tenant(pool, "a").unwrap(),
                e.guaranteed_tenant(pool, "b").unwrap(),
            );
            // b holds its own 50 and borrows a's idle 50 until 1100.
            let GOutcome::Granted(_loan) = e.guaranteed_acquire(pool, b, 100, 100, 1000).unwrap()
            else {
                panic!("the loan was refused")
            };
            for _ in 0..n {
                let GOutcome::Refused(r) = e.guaranteed_acquire(pool, a, 10, 50, 1000).unwrap()
                else {
                    panic!("granted")
                };
                assert_eq!(r.retry_after_ms, Some(100));
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
