//! Uncontended acquire + release pairs, fairshm next to its baselines, in one run:
//! - `bare_atomic`: `fetch_add` / `fetch_sub` on a word of a `MAP_SHARED` mapping (the limit);
//! - `fairshm_engine`: the engine's `acquire` + `release` on handles (explicit `now`);
//! - `fairshm_engine_1024_active`: the same with 1,024 other tenants active in the pool;
//! - `fairshm_engine_directory_65535`: the same in a segment whose tenant directory
//!   has the largest size, 65,535 slots (a few thousand of them claimed);
//! - `fairshm_engine_refusal`: one refused `acquire` (a full pool), to set against a pair;
//! - `fairshm`: `try_acquire_at` + `release_at` on a real segment (explicit `now`, so the
//!   clock is not measured) and `try_acquire` + drop (with the clock);
//! - `sysv_semop_undo`: SysV `semop` -1 / +1 with `SEM_UNDO` (Semian's mechanism);
//! - `posix_sem`: `sem_trywait` / `sem_post` on a process-shared `sem_t` in shared memory.
//!
//! Run: `cargo bench --bench acquire`. Report ratios; absolute times here are noise.

use std::sync::atomic::Ordering::SeqCst;

use criterion::{Criterion, black_box, criterion_group, criterion_main};
use fairshm::Request;

#[path = "../tests/common/mod.rs"]
mod common;
mod setups;

/// A guaranteed pair of tenant `a`: 10 units held 50 ms, within its guarantee, released.
fn guaranteed_pair(e: &fairshm::Engine, pool: fairshm::guaranteed::GPoolId, a: u16) {
    let fairshm::guaranteed::GOutcome::Granted(l) =
        e.guaranteed_acquire(pool, a, 10, 50, 1000).unwrap()
    else {
        panic!("refused")
    };
    e.guaranteed_release(l.id, 1000).unwrap();
}

fn pairs(c: &mut Criterion) {
    let mut g = c.benchmark_group("acquire_release_pair");

    let word = &common::shared_words(1)[0];
    g.bench_function("bare_atomic", |b| {
        b.iter(|| {
            black_box(word.fetch_add(1, SeqCst));
            black_box(word.fetch_sub(1, SeqCst));
        })
    });

    let plain = setups::plain();
    {
        let e = plain.engine();
        g.bench_function("fairshm_engine", |b| b.iter(|| plain.pair()));
        // The same pair with this handle's decision log switched off: the log's cost
        // is the ratio of the two (target: at most 1.10).
        e.set_decision_log(false);
        g.bench_function("fairshm_engine_no_log", |b| b.iter(|| plain.pair()));
        e.set_decision_log(true);
        // A request rate too high to refuse (a burst of 10^9 tokens at this fixed
        // `now`, far more than a run takes): the rate check's cost (one CAS).
        e.set_rates(plain.tenant, 1_000_000_000, 0).unwrap();
        g.bench_function("fairshm_engine_request_rate", |b| b.iter(|| plain.pair()));
        e.set_rates(plain.tenant, 0, 0).unwrap();
    }
    // A resident's pair, in an `evict` pool with room (no eviction): its record's two
    // stores (pending at publish, idle at grant) and the release's close (one CAS).
    let residents = setups::residents();
    g.bench_function("fairshm_engine_resident", |b| b.iter(|| residents.pair()));
    drop(residents);
    let busy = setups::busy();
    g.bench_function("fairshm_engine_1024_active", |b| b.iter(|| busy.pair()));
    drop(busy);
    let directory = setups::directory();
    g.bench_function("fairshm_engine_directory_65535", |b| {
        b.iter(|| directory.pair())
    });
    drop(directory);
    let full = setups::full();
    g.bench_function("fairshm_engine_refusal", |b| b.iter(|| full.refusal()));
    drop(full);
    // A guaranteed pool (seed 001) of two tenants: one acquire and one release, each a
    // copy of the state, the rules, and one head CAS. Next to the fair-share pair above
    // and the semop pair below.
    let g_seg = common::Seg::new("bench-guaranteed");
    let g_cfg = common::guaranteed(
        "tokens",
        100,
        fairshm::FairnessUnit::Cost,
        &[("a", 1), ("b", 1)],
        (100, 150),
        8,
    );
    let g_table = g_seg.create(&g_cfg);
    {
        let e = g_table.engine();
        let pool = e.guaranteed_pool("tokens").unwrap();
        let a = e.guaranteed_tenant(pool, "a").unwrap();
        g.bench_function("fairshm_guaranteed", |b| {
            b.iter(|| guaranteed_pair(e, pool, a))
        });
    }
    drop(g_table);
    // The same pair on a pool whose state has grown: 751 leases outstanding (250 of them
    // on loan), which every op reads, checks and writes back (`examples/hotloop
    // guaranteed-busy` is this loop, for callgrind).
    let busy_seg = common::Seg::new("bench-guaranteed-busy");
    let mut tenants = fairshm::GuaranteedConfig::new("tokens", 2000)
        .unit(fairshm::FairnessUnit::Cost)
        .reclaim_horizon_ms(100)
        .idle_after_ms(150)
        .max_leases(1024);
    for t in ["a", "b", "c", "d"] {
        tenants = tenants.tenant(t, 1);
    }
    let busy_table = busy_seg.create(&fairshm::Config::with_pools(vec![]).guaranteed(tenants));
    {
        let e = busy_table.engine();
        let pool = e.guaranteed_pool("tokens").unwrap();
        let [a, b, c] = ["a", "b", "c"].map(|t| e.guaranteed_tenant(pool, t).unwrap());
        // b's 500 units of its own and 250 borrowed, one unit a lease, due at 1001 to
        // 1100; one lease of c's.
        for (tenant, count) in [(b, 750), (c, 1)] {
            for i in 0..count {
                let granted = e.guaranteed_acquire(pool, tenant, 1, 1 + i % 100, 1000);
                assert!(matches!(
                    granted,
                    Ok(fairshm::guaranteed::GOutcome::Granted(_))
                ));
            }
        }
        g.bench_function("fairshm_guaranteed_751_leases", |bench| {
            bench.iter(|| guaranteed_pair(e, pool, a))
        });
    }
    drop(busy_table);
    let req = Request::new("requests", "acme");
    g.bench_function("fairshm_explicit_now", |b| {
        b.iter(|| {
            let lease = plain.table.try_acquire_at(&req, 1000).unwrap().unwrap();
            lease.release_at(1000).unwrap();
        })
    });
    g.bench_function("fairshm_clock", |b| {
        b.iter(|| drop(plain.table.try_acquire(&req).unwrap().unwrap()))
    });

    // SAFETY: creating a private SysV semaphore set of one semaphore; checked below.
    let semid = unsafe { libc::semget(libc::IPC_PRIVATE, 1, libc::IPC_CREAT | 0o600) };
    assert!(semid >= 0, "semget failed");
    // SAFETY: SETVAL on semaphore 0 of the set we own.
    assert_eq!(unsafe { libc::semctl(semid, 0, libc::SETVAL, 64) }, 0);
    g.bench_function("sysv_semop_undo", |b| {
        let mut down = libc::sembuf {
            sem_num: 0,
            sem_op: -1,
            sem_flg: (libc::SEM_UNDO | libc::IPC_NOWAIT) as i16,
        };
        let mut up = libc::sembuf {
            sem_num: 0,
            sem_op: 1,
            sem_flg: libc::SEM_UNDO as i16,
        };
        b.iter(|| {
            // SAFETY: valid sembuf pointers, count 1, on our own set.
            unsafe {
                assert_eq!(libc::semop(semid, &mut down, 1), 0);
                assert_eq!(libc::semop(semid, &mut up, 1), 0);
            }
        })
    });
    // SAFETY: removing the set we created.
    unsafe { libc::semctl(semid, 0, libc::IPC_RMID) };

    // A sem_t (32 bytes) in 64 bytes of shared memory; the atomics' UnsafeCell makes
    // writing through this pointer sound.
    let sem = common::shared_words(8).as_ptr() as *mut libc::sem_t;
    // SAFETY: `sem` points into a shared page large enough for a sem_t; pshared = 1.
    assert_eq!(unsafe { libc::sem_init(sem, 1, 64) }, 0);
    g.bench_function("posix_sem", |b| {
        b.iter(|| {
            // SAFETY: `sem` was initialised above and is not destroyed until after.
            unsafe {
                assert_eq!(libc::sem_trywait(sem), 0);
                assert_eq!(libc::sem_post(sem), 0);
            }
        })
    });
    // SAFETY: no waiter exists; destroyed once.
    unsafe { libc::sem_destroy(sem) };
    g.finish();
    drop(plain);
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(std::time::Duration::from_millis(500)).measurement_time(std::time::Duration::from_secs(2));
    targets = pairs
}
criterion_main!(benches);
