//! Opening a segment from arbitrary bytes: any error is fine, a panic or UB is not.
//!
//! Input byte 0 picks the mode: even, the rest of the input is the whole file; odd, the
//! rest is a list of `(offset u16 LE, byte)` patches applied to a valid segment, which
//! gets past the magic and the checksum into the records (the decision logs and the
//! rate buckets included). Whatever opens is then used: a snapshot, what `shmtool`
//! reads (its report, tables, metrics, the decision log and its replay, the
//! invariant check), rates, an acquire and release, a charge, a reap.
#![no_main]

use std::sync::OnceLock;

use fairshm::{Config, PoolConfig, Request, Table};
use libfuzzer_sys::fuzz_target;

fn small_config() -> Config {
    let mut c = Config::with_pools(vec![
        PoolConfig::new("requests", 8),
        PoolConfig::new("flights", 2),
    ]);
    c.max_tenants = 4;
    c.max_processes = 2;
    c.leases_per_process = 2;
    c.weight("a", 2)
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
        for p in rest.chunks_exact(3) {
            let off = u16::from_le_bytes([p[0], p[1]]) as usize % img.len();
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
        let _ = t.reap_dead();
    }
    let _ = Table::unlink(&name);
});
