//! The fair-share drill of seed 000.
//!
//! Two tenants on one node, the request pool cut to 8: "big" with 16 worker processes,
//! "small" with 2. Every worker is a forked process that acquires one permit, holds it
//! a few ms, releases, and when refused sleeps for the refusal's retry-after. Phases:
//! both tenants together, then small alone, then big alone. It prints per tenant the
//! grants, refusals by reason, p50/p99 request latency (first attempt to release) and
//! checks the three outcomes the seed promises; the exit code is non-zero if one fails.
//!
//! Run: `cargo run --release --example drill [-- --seconds 3 --hold-ms 5]`

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use fairshm::{Config, Reason, Request, Table};

const POOL: u32 = 8;
const BIG: (&str, usize) = ("big", 16);
const SMALL: (&str, usize) = ("small", 2);

struct Args {
    seconds: f64,
    hold_ms: u64,
}

fn args() -> Args {
    let mut a = Args {
        seconds: 3.0,
        hold_ms: 5,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    for pair in v.chunks(2) {
        match (
            pair[0].as_str(),
            pair.get(1).and_then(|s| s.parse::<f64>().ok()),
        ) {
            // Bounded, so that a typo (`inf`, `1e30`) is a usage error, not a panic in
            // every forked worker or a drill that never ends.
            ("--seconds", Some(s)) if s > 0.0 && s <= 3600.0 => a.seconds = s,
            ("--hold-ms", Some(h)) if (1.0..=60_000.0).contains(&h) => a.hold_ms = h as u64,
            _ => {
                eprintln!(
                    "usage: drill [--seconds S] [--hold-ms MS] (S in (0, 3600], MS in [1, 60000])"
                );
                std::process::exit(2);
            }
        }
    }
    a
}

/// What one worker reports: latencies in µs, and refusals by reason.
#[derive(Default)]
struct Report {
    lat_us: Vec<u32>,
    pool_full: u64,
    over_share: u64,
}

fn worker(seg: &str, tenant: &str, run_for: Duration, hold: Duration) -> Report {
    let t = Table::open(seg).expect("open segment");
    let mut rep = Report::default();
    let end = Instant::now() + run_for;
    let req = Request::new("requests", tenant).hold_ms(hold.as_millis() as u64);
    while Instant::now() < end {
        let first = Instant::now();
        loop {
            match t.try_acquire(&req).expect("acquire") {
                Ok(lease) => {
                    std::thread::sleep(hold);
                    lease.release().expect("release");
                    rep.lat_us
                        .push(first.elapsed().as_micros().min(u32::MAX as u128) as u32);
                    break;
                }
                Err(r) => {
                    match r.reason {
                        Reason::PoolFull => rep.pool_full += 1,
                        Reason::OverShare => rep.over_share += 1,
                        _ => {}
                    }
                    let ms = r.retry_after_ms.unwrap_or(1);
                    std::thread::sleep(Duration::from_millis(ms));
                }
            }
        }
    }
    rep
}

fn encode(r: &Report) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&r.pool_full.to_le_bytes());
    b.extend_from_slice(&r.over_share.to_le_bytes());
    for l in &r.lat_us {
        b.extend_from_slice(&l.to_le_bytes());
    }
    b
}

fn decode(b: &[u8]) -> Report {
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
    Report {
        pool_full: u64_at(0),
        over_share: u64_at(8),
        lat_us: b[16..]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect(),
    }
}

/// Forks `n` workers of `tenant`; returns (pid, read end of its pipe) for each.
fn spawn(seg: &str, tenant: &str, n: usize, a: &Args) -> Vec<(nix::unistd::Pid, OwnedFd)> {
    (0..n)
        .map(|_| {
            let (rd, wr) = nix::unistd::pipe().expect("pipe");
            // SAFETY: the drill's parent is single-threaded, so the child inherits no
            // lock held by another thread; the child only runs `worker` and `_exit`s.
            match unsafe { nix::unistd::fork() }.expect("fork") {
                nix::unistd::ForkResult::Child => {
                    drop(rd);
                    let rep = worker(
                        seg,
                        tenant,
                        Duration::from_secs_f64(a.seconds),
                        Duration::from_millis(a.hold_ms),
                    );
                    // SAFETY: `wr` is an open pipe end owned by this process.
                    let mut f = unsafe { std::fs::File::from_raw_fd(wr.as_raw_fd()) };
                    std::mem::forget(wr);
                    let ok = f.write_all(&encode(&rep)).is_ok();
                    drop(f);
                    // SAFETY: `_exit` skips the parent's atexit handlers and destructors.
                    unsafe { libc::_exit(if ok { 0 } else { 1 }) }
                }
                nix::unistd::ForkResult::Parent { child } => {
                    drop(wr);
                    (child, rd)
                }
            }
        })
        .collect()
}

fn collect(children: Vec<(nix::unistd::Pid, OwnedFd)>) -> Report {
    let mut all = Report::default();
    for (pid, rd) in children {
        let mut buf = Vec::new();
        std::fs::File::from(rd)
            .read_to_end(&mut buf)
            .expect("read report");
        let status = nix::sys::wait::waitpid(pid, None).expect("waitpid");
        assert!(
            matches!(status, nix::sys::wait::WaitStatus::Exited(_, 0)),
            "worker {pid} failed: {status:?}"
        );
        let r = decode(&buf);
        all.lat_us.extend(r.lat_us);
        all.pool_full += r.pool_full;
        all.over_share += r.over_share;
    }
    all.lat_us.sort_unstable();
    all
}

fn pct(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

/// Runs one phase with the given tenants; samples the table every ms. Returns the
/// reports and the largest `held` seen per tenant (after the first 200 ms).
fn phase(t: &Table, tenants: &[(&str, usize)], a: &Args) -> Vec<(Report, u32)> {
    let kids: Vec<_> = tenants
        .iter()
        .map(|(name, n)| spawn(t.name(), name, *n, a))
        .collect();
    let start = Instant::now();
    let mut max_held = vec![0u32; tenants.len()];
    while start.elapsed() < Duration::from_secs_f64(a.seconds) {
        std::thread::sleep(Duration::from_millis(1));
        if start.elapsed() < Duration::from_millis(200) {
            continue; // let every tenant show up first
        }
        let snap = t.snapshot();
        for (i, (name, _)) in tenants.iter().enumerate() {
            max_held[i] = max_held[i].max(snap.held("requests", name));
        }
    }
    kids.into_iter().map(collect).zip(max_held).collect()
}

fn row(phase: &str, (name, n): (&str, usize), r: &Report, max_held: u32) {
    println!(
        "{phase:<7} {name:<6} {n:>7} {:>7} {:>10} {:>10} {:>8.2} {:>8.2} {:>8}",
        r.lat_us.len(),
        r.pool_full,
        r.over_share,
        pct(&r.lat_us, 0.50),
        pct(&r.lat_us, 0.99),
        max_held
    );
}

fn main() {
    let a = args();
    let name = format!("fairshm-drill-{}", std::process::id());
    let mut cfg = Config::default();
    cfg.pools[0].capacity = POOL;
    let t = Table::create(&name, &cfg).expect("create segment");
    // Unlink at once: the workers open it by name first, so keep it until the end.
    struct Cleanup(String);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = Table::unlink(&self.0);
        }
    }
    let _cleanup = Cleanup(name.clone());
    let floor = t.snapshot().pool("requests").unwrap().floor;
    println!(
        "fair-share drill: pool \"requests\" of {POOL} permits (floor {floor}), hold {} ms, {} s per phase",
        a.hold_ms, a.seconds
    );
    println!(
        "{:<7} {:<6} {:>7} {:>7} {:>10} {:>10} {:>8} {:>8} {:>8}",
        "phase",
        "tenant",
        "workers",
        "grants",
        "pool_full",
        "over_share",
        "p50 ms",
        "p99 ms",
        "max held"
    );
    let shared = phase(&t, &[BIG, SMALL], &a);
    row("shared", BIG, &shared[0].0, shared[0].1);
    row("shared", SMALL, &shared[1].0, shared[1].1);
    // Let the window pass, so each tenant is alone in its solo phase.
    std::thread::sleep(Duration::from_millis(cfg.pools[0].window_ms as u64 + 100));
    let solo_small = phase(&t, &[SMALL], &a);
    row("solo", SMALL, &solo_small[0].0, solo_small[0].1);
    std::thread::sleep(Duration::from_millis(cfg.pools[0].window_ms as u64 + 100));
    let solo_big = phase(&t, &[BIG], &a);
    row("solo", BIG, &solo_big[0].0, solo_big[0].1);

    let ratio = pct(&shared[1].0.lat_us, 0.99) / pct(&solo_small[0].0.lat_us, 0.99);
    let checks = [
        (
            format!("small tenant's p99 shared/solo = {ratio:.2} (must be <= 3.00)"),
            ratio <= 3.0,
        ),
        (
            format!(
                "big refused at the floor while small is present: {} over_share refusals, \
                 max held {} (must be <= {})",
                shared[0].0.over_share,
                shared[0].1,
                POOL - floor
            ),
            shared[0].0.over_share > 0 && shared[0].1 <= POOL - floor,
        ),
        (
            format!(
                "big alone holds the whole pool: max held {} (must be {POOL})",
                solo_big[0].1
            ),
            solo_big[0].1 == POOL,
        ),
    ];
    let snap = t.snapshot();
    let leftover = snap.pool("requests").unwrap().in_use;
    let mut ok = leftover == 0;
    println!();
    for (what, pass) in &checks {
        println!("{} {what}", if *pass { "PASS" } else { "FAIL" });
        ok &= pass;
    }
    println!(
        "{} pool back to 0 in use after the drill ({leftover})",
        if leftover == 0 { "PASS" } else { "FAIL" }
    );
    drop(_cleanup); // `exit` runs no destructors
    std::process::exit(if ok { 0 } else { 1 });
}
