//! The uncontended ratios that issue targets name, measured interleaved: every round
//! times one block of each case, in a rotating order, so that a host whose speed drifts
//! (these are shared machines: a criterion run of one case after another moved by a
//! quarter between runs) shifts all cases alike. Each ratio is the median over the
//! rounds of that round's ratio. The cases (see `setups`):
//! - `bare`: `fetch_add` / `fetch_sub` on a word of a `MAP_SHARED` mapping (the limit);
//! - `pair`: the engine's `acquire` + `release`, `acme` alone in its pool;
//! - `active_1024`: the same pair with 1,024 other tenants active in the pool;
//! - `directory_65535`: the same pair in a segment whose tenant directory has 65,535
//!   slots (4,096 claimed);
//! - `refusal`: one refused `acquire` (a full pool);
//! - `skeleton`: the pair's shared-memory traffic alone, on the lines of a segment of
//!   its own (`setups::skeleton`): the same loads, stores and locked instructions,
//!   without the logic. Not a target: `skeleton / bare` is the part of the pair's 6x
//!   that the traffic takes on the host at hand, `pair / skeleton` what the logic adds.
//!
//! Targets: `pair / bare` at most 6, `active_1024 / pair` and `directory_65535 / pair`
//! at most 1.2, `refusal / pair` at most 2 (reported, not enforced: a bench).
//!
//! Run: `cargo bench --features internals --bench ratios` (FAIRSHM_RATIO_ROUNDS, default
//! 200; FAIRSHM_RATIO_BLOCK pairs a block, default 20,000). Pin it for steadier figures:
//! `taskset -c 1 cargo bench ...`.

use std::hint::black_box;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Instant;

#[path = "../tests/common/mod.rs"]
mod common;
mod setups;

/// Nanoseconds per call of `f`, over a block of `n` calls.
fn block(n: u64, f: &dyn Fn()) -> f64 {
    let start = Instant::now();
    for _ in 0..n {
        f();
    }
    start.elapsed().as_nanos() as f64 / n as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; any filter argument is ignored.
    let rounds = common::env_or("FAIRSHM_RATIO_ROUNDS", 200usize).max(1);
    let n = common::env_or("FAIRSHM_RATIO_BLOCK", 20_000u64).max(1);
    let word = &common::shared_words(1)[0];
    let (plain, busy, directory, full) = (
        setups::plain(),
        setups::busy(),
        setups::directory(),
        setups::full(),
    );
    let traffic = setups::plain();
    let skeleton = setups::skeleton::Skeleton::new(&traffic.table);
    let bare = || {
        black_box(word.fetch_add(1, SeqCst));
        black_box(word.fetch_sub(1, SeqCst));
    };
    let pair = || plain.pair();
    let active = || busy.pair();
    let dir = || directory.pair();
    let refusal = || full.refusal();
    let skel = || skeleton.pair();
    let cases: [(&str, &dyn Fn()); 6] = [
        ("bare", &bare),
        ("pair", &pair),
        ("active_1024", &active),
        ("directory_65535", &dir),
        ("refusal", &refusal),
        ("skeleton", &skel),
    ];
    // Warm up every case once (first touches of its lines and code).
    for (_, f) in &cases {
        block(n, *f);
    }
    let mut ns: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); cases.len()];
    for r in 0..rounds {
        for i in 0..cases.len() {
            let k = (r + i) % cases.len();
            ns[k].push(block(n, cases[k].1));
        }
    }
    println!(
        "uncontended costs, {rounds} interleaved rounds of {n} calls a case: median ns per call"
    );
    for ((name, _), v) in cases.iter().zip(&ns) {
        println!("{name:<16} {:>8.1} ns", median(v.clone()));
    }
    // The median over rounds of each round's ratio of case `a` to case `b`.
    let ratio = |a: usize, b: usize| median(ns[a].iter().zip(&ns[b]).map(|(x, y)| x / y).collect());
    println!(
        "pair / bare                {:>6.2}   (target <= 6)",
        ratio(1, 0)
    );
    println!(
        "active_1024 / pair         {:>6.2}   (target <= 1.2)",
        ratio(2, 1)
    );
    println!(
        "directory_65535 / pair     {:>6.2}   (target <= 1.2)",
        ratio(3, 1)
    );
    println!(
        "refusal / pair             {:>6.2}   (target <= 2)",
        ratio(4, 1)
    );
    println!(
        "skeleton / bare            {:>6.2}   (the traffic alone; not a target)",
        ratio(5, 0)
    );
    println!(
        "pair / skeleton            {:>6.2}   (what the logic adds; not a target)",
        ratio(1, 5)
    );
    drop(skeleton);
    drop((plain, busy, directory, full, traffic));
}
