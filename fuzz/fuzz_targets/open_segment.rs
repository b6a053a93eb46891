//! Opening a segment from arbitrary bytes: any error is fine, a panic or UB is not.
//!
//! Input byte 0 picks the mode: even, the rest of the input is the whole file; odd, the
//! rest is a list of `(offset u16 LE, byte)` patches applied to a valid segment, which
//! gets past the magic and the checksum into the records (the decision logs and the
//! rate buckets included); with `mode % 4 == 3` the offsets count from 64 KiB before
//! the image's end, where the guaranteed pool's head and state blocks are. Whatever
//! opens is then used: a snapshot, what `shmtool` reads (its report, tables, metrics,
//! the decision log and its replay, the invariant check), rates, an acquire and
//! release of both policies, a charge, a resident's spawn (which may evict), call and
//! release, a reap. The image holds residents in a call, idle and revoked.
#![no_main]

use std::sync::OnceLock;

use fairshm::{Config, PoolConfig, Request, Table};
use libfuzzer_sys::fuzz_target;

fn small_config() -> Config {
    let mut c = Config::with_pools(vec![
        PoolConfig::new("requests", 8),
        PoolConfig::new("flights", 2),
        PoolConfig::new("residents", 2).evicting(),
    ]);
    c.max_tenants = 4;
    c.max_processes = 2;
    c.leases_per_process = 6;
    c.weight("a", 2).guaranteed(
        fairshm::GuaranteedConfig::new("tokens", 10)
            .unit(fairshm::FairnessUnit::Cost)
            .tenant("a", 1)
            .tenant("b", 1)
            .reclaim_horizon_ms(100)
            .idle_after_ms(150)
            .max_leases(4),
    )
}

/// The bytes of a valid, used segment (made once).
fn image() -> &'static [u8] {
    static IMAGE: OnceLock<Vec<u8>> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let name = format!("fairshm-fuzz-image-{}", std::process::id());
        let _ = Table::unlink(&name);
        let t = Table::create(&name, &small_config()).unwrap();
        t.set_rates("a", 50, 1000).unwrap();
        let lease = t
            .try_acquire_at(&Request::new("requests", "a").units(2), 5)
            .unwrap()
            .unwrap();
        let _ = lease.into_id(); // left held, so the image has a live lease
        // Residents, left held: one in a call, one revoked by a third (its record names
        // its revoker).
        let spawn = |tenant, now| {
            t.try_acquire_at(&Request::new("residents", tenant), now)
                .unwrap()
                .unwrap()
        };
        let busy = spawn("a", 5);
        busy.begin_call_at(6).unwrap();
        let _ = busy.into_id();
        let _ = spawn("a", 6).into_id();
        let _ = spawn("b", 7).into_id(); // evicts a's idle one
        // A guaranteed lease and a loan, also left held, and a refusal (a want).
        let g = t.guaranteed("tokens").unwrap();
        g.acquire("b", 5, 1000, 5).unwrap().unwrap();
        g.acquire("b", 3, 50, 5).unwrap().unwrap();
        assert!(g.acquire("a", 5, 50, 6).unwrap().is_err());
        let bytes = std::fs::read(fairshm::segment::path_of(&name)).unwrap();
        Table::unlink(&name).unwrap();
        // Kept registered (dropping it would deregister and release the lease), so the
        // image has a live process slot with an anchor, as a worker's segment has.
        std::mem::forget(t);
        bytes
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let bytes = if mode % 2 == 0 {
        rest.to_vec()
    } else {
        let mut img = image().to_vec();
        let base = if mode % 4 == 3 {
            img.len().saturating_sub(1 << 16)
        } else {
            0
        };
        for p in rest.chunks_exact(3) {
            let off = (base + u16::from_le_bytes([p[0], p[1]]) as usize) % img.len();
            img[off] = p[2];
        }
        img
    };
    let name = format!("fairshm-fuzz-{}", std::process::id());
    let _ = Table::unlink(&name);
    // Mode 0600, as fairshm creates segments: a world-readable file is refused on open
    // (`BadFile`) before any record is read.
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(fairshm::segment::path_of(&name))
            .unwrap();
        f.write_all(&bytes).unwrap();
    }
    if let Ok(t) = Table::open_with(&name, None, std::time::Duration::ZERO) {
        let _ = t.snapshot_at(10);
        if let Ok(r) = fairshm::tool::report(&t) {
            let _ = fairshm::tool::report_tables(&r);
            let _ = fairshm::tool::top_view(&r);
            let _ = fairshm::tool::prometheus(&r);
            let _ = serde_json::to_string(&r);
        }
        if let Ok(v) = fairshm::tool::decisions(&t) {
            let _ = fairshm::tool::log_table(&v);
        }
        let _ = fairshm::tool::replay(&t);
        let _ = fairshm::tool::check(&t);
        let _ = t.rates("a");
        let _ = t.charge_at("a", 7, 10);
        if let Ok(Ok(lease)) = t.try_acquire_at(&Request::new("requests", "b"), 10) {
            let _ = lease.release_at(11);
        }
        let _ = t.revoked_leases();
        if let Ok(Ok(r)) = t.try_acquire_at(&Request::new("residents", "b"), 10) {
            let _ = r.is_revoked();
            if r.begin_call_at(11).is_ok() {
                let _ = r.end_call_at(12);
            }
            let _ = r.release_at(13);
        }
        if let Ok(g) = t.guaranteed("tokens") {
            let _ = g.stats(20);
            let _ = g.fairness_report();
            let _ = g.plan(20);
            if let Ok(Ok(l)) = g.acquire("a", 2, 10, 20) {
                let _ = g.release(l.id, 21);
            }
            let _ = g.acquire("b", 9, 500, 21);
        }
        let _ = t.reap_dead();
    }
    let _ = Table::unlink(&name);
});
