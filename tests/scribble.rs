//! A hostile writer: workers (and an observer, as `shmtool` is) run while another
//! process writes random bytes and chosen values into the live segment's records. No
//! panic, no signal, no call past its bound; errors are counted by kind. Then the
//! scribbling stops, `repair` runs, and a fresh set of workers runs clean on the same
//! segment. Once with fair-share pools alone, once with a guaranteed pool, a residents
//! pool and a pool sized per worker besides.
//!
//! `FAIRSHM_SCRIBBLE_MS` sets the scribbling time (default 3,000 ms).
mod common;

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

use common::{Children, Seg, fork_child};
use fairshm::layout::op_word;
use fairshm::region::Region;
use fairshm::{Config, FairnessUnit, GuaranteedConfig, PoolConfig, Request, Table};

const WORKERS: usize = 3;
/// The bound on one call here: `try_acquire`'s own (a tenant slot stuck writing:
/// 20 ms; an inline repair: 5 ms) and a blocking acquire's timeout (20 ms), with room
/// for a loaded 2-core machine's scheduling.
const BOUND: Duration = Duration::from_millis(1000);
/// The bound on one round of the observer: `check` looks up to `REPAIR_BUDGET` (1 s)
/// per pool for a moment with no op of it in flight (a scribbled lease can keep one
/// in flight until a repair), so three pools' 3 s, with the same room.
const OBSERVER_BOUND: Duration = Duration::from_millis(4000);

fn cfg() -> Config {
    Config {
        pools: vec![
            PoolConfig::new("requests", 6),
            PoolConfig::new("flights", 3),
        ],
        // Room for the fresh workers' names after the scribbling: repair clears the
        // slots scribbled into WRITING (and empty ones stay free), but it cannot tell a
        // scribbled READY name from a real one, so a small directory can be left with
        // no slot for a name the scribbler overwrote (seen once in CI with 16:
        // `tenant_table_full` for "t2" after the repair).
        max_tenants: 64,
        max_processes: 8,
        leases_per_process: 8,
        ..Config::default()
    }
}

/// Shared counters: [0] calls, [1] calls past their bound, [2] slowest worker's call
/// (us), [3] grants, [4] scribbles, [5] slowest observer's round (us), [8 + code]
/// errors by code (`ERROR_CODES` of them).
const CALLS: usize = 0;
const PAST: usize = 1;
const SLOWEST: usize = 2;
const GRANTS: usize = 3;
const SCRIBBLES: usize = 4;
const SLOWEST_LOOK: usize = 5;
const ERRORS: usize = 8;
/// Error codes counted (`Error::code`; a higher one counts in the last).
const ERROR_CODES: usize = 32;

/// What the workers ask for: the fair-share pools alone, or also a guaranteed pool
/// (seed 001) and a residents pool that evicts (seed 000), whose regions the scribbler
/// then aims half its writes at (the per-worker pool, when there is one, is asked as
/// the fair-share ones are).
#[derive(Clone, Copy)]
enum Mix {
    FairShare,
    Policies,
}

/// Counts error `e` by its code (the first of each code is printed).
fn count_error(c: &[AtomicU64], e: &fairshm::Error) {
    let slot = ERRORS + (e.code() as usize).min(ERROR_CODES - 1);
    if c[slot].fetch_add(1, SeqCst) == 0 {
        eprintln!("first {}: {e}", e.kind());
    }
}

/// Runs one call (`call`) and counts it, its time (the slowest in `c[slowest]`), and
/// whether it passed `bound`.
fn timed(c: &[AtomicU64], (bound, slowest): (Duration, usize), call: impl FnOnce()) {
    let t0 = Instant::now();
    call();
    let took = t0.elapsed();
    c[CALLS].fetch_add(1, SeqCst);
    c[slowest].fetch_max(took.as_micros() as u64, SeqCst);
    if took > bound {
        c[PAST].fetch_add(1, SeqCst);
    }
}

/// A try of `req`, or, one in seven (by `x`), a 20 ms blocking acquire; a refusal is
/// `None`.
fn ask<'t>(t: &'t Table, req: &Request, x: u64) -> fairshm::Result<Option<fairshm::Lease<'t>>> {
    if x % 7 == 0 {
        t.acquire(req, Duration::from_millis(20)).map(|r| r.ok())
    } else {
        t.try_acquire(req).map(|r| r.ok())
    }
}

/// One fair-share call: a try (or, one in seven, a 20 ms blocking acquire) of 1 or 2
/// units of `requests`, or 1 of `flights`, for one of six tenants, released at once.
/// (One unit of `flights`: where it is sized per worker (the second test), it holds 1
/// while one worker has registered, and an ask of 2 is then an error, not a refusal.)
fn fair_share_call(t: &Table, x: u64, c: &[AtomicU64]) {
    let (pool, units) = match (x >> 3) % 2 {
        0 => ("requests", 1 + ((x >> 16) % 2) as u32),
        _ => ("flights", 1),
    };
    let tenant = format!("t{}", (x >> 8) % 6);
    let req = Request::new(pool, &tenant).units(units);
    match ask(t, &req, x) {
        Ok(Some(lease)) => {
            c[GRANTS].fetch_add(1, SeqCst);
            if let Err(e) = lease.release() {
                count_error(c, &e);
            }
        }
        Ok(None) => {}
        Err(e) => count_error(c, &e),
    }
}

/// One call on the guaranteed pool: an ask of 1 to 25 units for one of its three
/// tenants, holding 10 to 79 ms (so some may not borrow), on the library's clock (or,
/// one in five, a 20 ms wait), released at once when granted.
fn guaranteed_call(t: &Table, x: u64, c: &[AtomicU64]) {
    let g = match t.guaranteed("tokens") {
        Ok(g) => g,
        Err(e) => return count_error(c, &e),
    };
    let tenant = ["g0", "g1", "g2"][((x >> 8) % 3) as usize];
    let (cost, hold) = (1 + (x >> 16) % 25, 10 + (x >> 24) % 70);
    let res = if x % 5 == 0 {
        g.acquire_timeout(tenant, cost, hold, Duration::from_millis(20))
    } else {
        g.acquire(tenant, cost, hold, fairshm::clock::now_ms())
    };
    match res {
        Ok(Ok(grant)) => {
            c[GRANTS].fetch_add(1, SeqCst);
            if let Err(e) = g.release(grant.id, fairshm::clock::now_ms()) {
                count_error(c, &e);
            }
        }
        Ok(Err(_refused)) => {}
        Err(e) => count_error(c, &e),
    }
}

/// One step on the residents pool, keeping up to two residents between steps: spawn
/// one (a try, or one in seven a 20 ms blocking acquire, which may evict), run a call
/// on one (a revoked one, or one whose call errs, is released), or release one.
fn resident_step<'t>(t: &'t Table, x: u64, held: &mut Vec<fairshm::Lease<'t>>, c: &[AtomicU64]) {
    let release = |lease: fairshm::Lease<'t>| {
        if let Err(e) = lease.release() {
            count_error(c, &e);
        }
    };
    if held.len() < 2 && (held.is_empty() || x % 3 == 0) {
        let tenant = format!("r{}", (x >> 8) % 3);
        let req = Request::new("residents", &tenant);
        match ask(t, &req, x) {
            Ok(Some(lease)) => {
                c[GRANTS].fetch_add(1, SeqCst);
                held.push(lease);
            }
            Ok(None) => {}
            Err(e) => count_error(c, &e),
        }
        return;
    }
    let k = (x >> 16) as usize % held.len();
    if x % 5 == 0 {
        return release(held.swap_remove(k));
    }
    match held[k].begin_call() {
        Ok(()) => {
            if let Err(e) = held[k].end_call() {
                count_error(c, &e);
                release(held.swap_remove(k));
            }
        }
        // Evicted to make room: the object goes to sleep and its lease is released.
        Err(fairshm::Error::Revoked { .. }) => release(held.swap_remove(k)),
        Err(e) => {
            count_error(c, &e);
            release(held.swap_remove(k));
        }
    }
}

fn worker(name: &str, seed: u64, until: Instant, c: &'static [AtomicU64], mix: Mix) -> i32 {
    let t = match Table::open(name) {
        Ok(t) => t,
        Err(_) => return 0, // opening a scribbled segment may fail: not a fault
    };
    let mut residents = Vec::new();
    let mut x = seed | 1;
    while Instant::now() < until {
        common::xorshift(&mut x);
        match (mix, x % 4) {
            (Mix::FairShare, _) | (Mix::Policies, 0) => {
                timed(c, (BOUND, SLOWEST), || fair_share_call(&t, x, c))
            }
            (Mix::Policies, 1) => timed(c, (BOUND, SLOWEST), || guaranteed_call(&t, x, c)),
            (Mix::Policies, _) => timed(c, (BOUND, SLOWEST), || {
                resident_step(&t, x, &mut residents, c)
            }),
        }
    }
    for lease in residents {
        timed(c, (BOUND, SLOWEST), || {
            if let Err(e) = lease.release() {
                count_error(c, &e);
            }
        });
    }
    0
}

/// An observer, as `shmtool` is (opened read-only, never registered): the report and
/// its renderings (`inspect`'s tables and JSON, `top`, Prometheus) and `check`, over
/// and over while the others run, each round within the bound. Its errors count with
/// the workers'; a report that does not serialize is a panic.
fn observer(name: &str, until: Instant, c: &'static [AtomicU64]) -> i32 {
    let t = match Table::open_observer(name) {
        Ok(t) => t,
        Err(_) => return 0, // opening a scribbled segment may fail: not a fault
    };
    while Instant::now() < until {
        timed(c, (OBSERVER_BOUND, SLOWEST_LOOK), || {
            match fairshm::tool::report(&t) {
                Ok(r) => {
                    let _ = fairshm::tool::report_tables(&r);
                    let _ = fairshm::tool::top_view(&r);
                    let _ = fairshm::tool::prometheus(&r);
                    serde_json::to_string(&r).expect("the report serializes");
                }
                Err(e) => count_error(c, &e),
            }
            if let Err(e) = t.check() {
                count_error(c, &e);
            }
        });
        std::thread::sleep(Duration::from_millis(1));
    }
    0
}

/// Writes into the records (never the header or the config block, which `open`
/// validates and which nothing rewrites): random bytes, and values chosen to break
/// things (zero, all ones, counts at their limit, states no version writes, tags naming
/// leases beyond the table). With `aim`, every other write lands in the words from
/// byte `aim` to the end (the regions of the newer policies, which are last).
fn scribbler(name: &str, until: Instant, c: &'static [AtomicU64], aim: Option<usize>) -> i32 {
    let t = Table::open(name).unwrap();
    let geo = *t.region().geometry();
    let base = t.region().pool(0) as *const _ as usize - geo.pools_off;
    let hi = geo.total_size / 8;
    let chosen = [
        0,
        u64::MAX,
        op_word::make(op_word::MAX_COUNT, 0),
        op_word::make(1, 65_000),
        0x0000_0000_0001_0109,
        0xFFFF_FFFF_0000_0007,
        3,
        1,
    ];
    let mut x: u64 = 0x5DEE_CE66_D1CE_4E5B;
    while Instant::now() < until {
        common::xorshift(&mut x);
        let lo = match aim {
            Some(from) if x & 0x10 != 0 => from / 8,
            _ => geo.pools_off / 8,
        };
        let at = lo + (x as usize >> 5) % (hi - lo);
        let v = if x % 3 == 0 {
            chosen[(x >> 40) as usize % chosen.len()]
        } else {
            common::xorshift(&mut x)
        };
        // SAFETY: `at * 8` is an 8-aligned offset inside the mapping (`total_size` is
        // its length), which `t` keeps mapped; every access to the records is atomic.
        let word = unsafe { &*((base + at * 8) as *const AtomicU64) };
        word.store(v, SeqCst);
        c[SCRIBBLES].fetch_add(1, SeqCst);
        if x % 64 == 0 {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    0
}

/// Runs the workers and an observer (and, with `scribble`, the scribbler, aimed as it
/// says) for `ms`.
fn run_workers(
    name: &str,
    ms: u64,
    c: &'static [AtomicU64],
    mix: Mix,
    scribble: Option<Option<usize>>,
) {
    let until = Instant::now() + Duration::from_millis(ms);
    // A guard: if a wait below fails the test, the other children are killed and
    // reaped, not left running.
    let mut pids = Children(Vec::with_capacity(WORKERS + 2));
    for i in 0..WORKERS {
        let name = name.to_owned();
        pids.push(fork_child(move || {
            worker(&name, 0x9E37_79B9 * (i as u64 + 1), until, c, mix)
        }));
    }
    {
        let name = name.to_owned();
        pids.push(fork_child(move || observer(&name, until, c)));
    }
    if let Some(aim) = scribble {
        let name = name.to_owned();
        pids.push(fork_child(move || scribbler(&name, until, c, aim)));
    }
    // The children run until `until`; the waits below have their own deadline after it.
    std::thread::sleep(until.saturating_duration_since(Instant::now()));
    // 0: finished; anything else is a panic (101) or a signal (128 + n).
    let codes = pids.wait_all();
    assert!(
        codes.iter().all(|&c| c == 0),
        "a worker, the observer or the scribbler ended abnormally: wait codes {codes:?}"
    );
}

fn errors(c: &[AtomicU64]) -> Vec<(&'static str, u64)> {
    // By `Error::code`.
    let kinds = [
        "",
        "invalid_name",
        "invalid_config",
        "not_found",
        "already_exists",
        "truncated",
        "bad_magic",
        "version_mismatch",
        "not_ready",
        "wrong_owner",
        "config_mismatch",
        "corrupt",
        "unknown_pool",
        "invalid_tenant",
        "tenant_table_full",
        "lease_table_full",
        "process_table_full",
        "invalid_request",
        "units_exceed_capacity",
        "already_released",
        "not_owner",
        "io",
        "read_only",
        "tenant_busy",
        "bad_file",
        "pool_leases_full",
        "revoked",
        "not_resident",
        "foreign_pid_namespace",
    ];
    // Every code counted, named or not: an error of a kind newer than this list is
    // still seen.
    (1..ERROR_CODES)
        .filter_map(|k| {
            let n = c[ERRORS + k].load(SeqCst);
            (n > 0).then_some((kinds.get(k).copied().unwrap_or("(a newer kind)"), n))
        })
        .collect()
}

/// Workers of `mix` run on table `t` (the segment `name`) for `FAIRSHM_SCRIBBLE_MS`
/// while the scribbler writes (aimed at `aim`, if any): no call past its bound, none
/// ending in a panic or a signal. Then `repair`, and `check` finds nothing; fresh
/// workers run 500 ms with no error; and after a last repair every pool is empty.
fn survive_then_run_clean(name: &str, t: &Table, mix: Mix, aim: Option<usize>) {
    let c = common::shared_words(ERRORS + ERROR_CODES);
    let ms = common::env_or("FAIRSHM_SCRIBBLE_MS", 3000);
    run_workers(name, ms, c, mix, Some(aim));
    eprintln!(
        "scribbling {ms} ms: {} scribbles, {} calls, {} grants, {} past their bounds \
         (slowest call {} us, slowest look {} us), errors {:?}",
        c[SCRIBBLES].load(SeqCst),
        c[CALLS].load(SeqCst),
        c[GRANTS].load(SeqCst),
        c[PAST].load(SeqCst),
        c[SLOWEST].load(SeqCst),
        c[SLOWEST_LOOK].load(SeqCst),
        errors(c)
    );
    assert_eq!(c[PAST].load(SeqCst), 0, "calls past their bounds");
    assert!(c[SCRIBBLES].load(SeqCst) > 1000, "the scribbler barely ran");
    // The scribbling is over. Repair, then a fresh set of workers must run clean.
    let rep = t.repair().unwrap();
    eprintln!("repair: {rep:?}");
    // Repair refills the rate buckets but cannot tell a scribbled rate from a set one:
    // an operator sets the rates again, as here: every tenant the directory holds
    // (scribbled names too) back to unbounded, as they were.
    let e = t.engine();
    for entry in t.snapshot().tenants {
        let id = e.tenant_by_index(entry.index as u32).unwrap();
        e.set_rates(id, 0, 0).unwrap();
    }
    assert!(t.check().unwrap().is_empty(), "{:?}", t.check());
    let fresh = common::shared_words(ERRORS + ERROR_CODES);
    run_workers(name, 500, fresh, mix, None);
    assert_eq!(errors(fresh), vec![], "errors after the repair");
    assert!(
        fresh[GRANTS].load(SeqCst) > 100,
        "the fresh workers barely ran"
    );
    assert_eq!(fresh[PAST].load(SeqCst), 0);
    t.repair().unwrap(); // the last workers exited (their tables deregistered them)
    assert!(t.check().unwrap().is_empty(), "{:?}", t.check());
    let snap = t.snapshot();
    assert!(snap.pools.iter().all(|p| p.in_use == 0), "{:?}", snap.pools);
}

#[test]
fn workers_survive_a_hostile_writer_and_a_repaired_segment_runs_clean() {
    let seg = Seg::new("scribble");
    let t = seg.create(&cfg());
    survive_then_run_clean(&seg.name, &t, Mix::FairShare, None);
}

/// The same with a guaranteed pool (seed 001), a residents pool that evicts and a pool
/// sized per worker (seed 002), half the scribbles aimed at the first two's regions (the
/// head records, the state blocks, the residents' records): the workers ask the
/// guaranteed pool (some waiting 20 ms) and keep residents, run calls on them and evict
/// them, besides the fair-share asks.
#[test]
fn guaranteed_and_resident_pools_survive_a_hostile_writer_and_run_clean_repaired() {
    let seg = Seg::new("scribble-policies");
    let cfg = Config {
        pools: vec![
            PoolConfig::new("requests", 6),
            // Sized from the live workers (seed 002), whose process slots are scribbled.
            PoolConfig::per_worker("flights", 0.5, 1),
            PoolConfig::new("residents", 4).evicting().evict_wait_ms(20),
        ],
        ..cfg()
    }
    .guaranteed(
        GuaranteedConfig::new("tokens", 60)
            .unit(FairnessUnit::Cost)
            .tenant("g0", 1)
            .tenant("g1", 1)
            .tenant("g2", 1)
            .reclaim_horizon_ms(50)
            .idle_after_ms(100)
            .max_leases(16),
    );
    let t = seg.create(&cfg);
    let aim = t.region().geometry().guaranteed_off;
    survive_then_run_clean(&seg.name, &t, Mix::Policies, Some(aim));
    let g = t.guaranteed("tokens").unwrap();
    assert_eq!(g.state().unwrap().leases, vec![], "guaranteed leases left");
}

/// Counters are read from shared memory too: a tenant whose refusal counters hold
/// garbage (each `u64::MAX`) is reported and rendered with their sum saturated, not a
/// panic on overflow (found by the `open_segment` fuzz target in `tool::top_view`).
#[test]
fn garbage_counters_are_rendered_saturated() {
    let seg = Seg::new("scribble-counters");
    let t = seg.create(&common::one_pool(2));
    let lease = t
        .try_acquire_at(&Request::new("requests", "a"), 10)
        .unwrap()
        .unwrap();
    let a = t.engine().tenant("a").unwrap().index();
    for c in &t.region().tenant_pool(0, a).refusals {
        c.store(u64::MAX, SeqCst);
    }
    let r = fairshm::tool::report(&t).unwrap();
    let view = fairshm::tool::top_view(&r);
    assert!(view.contains(&u64::MAX.to_string()), "{view}");
    let _ = fairshm::tool::report_tables(&r);
    let _ = fairshm::tool::prometheus(&r);
    lease.release_at(11).unwrap();
}
