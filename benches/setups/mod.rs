//! The prepared tables that the uncontended benches share (`acquire`, `ratios`): each
//! a segment (removed when its `Seg` drops) with the handles its case uses.

// Each bench uses some of the cases.
#![allow(dead_code)]

use fairshm::{Config, Engine, LeaseId, Outcome, PoolConfig, PoolId, Table, TenantId};

use crate::common::{self, Seg};

pub mod skeleton;

/// A table, the segment it lives in, and the pool and tenant a case acquires with.
pub struct Case {
    pub table: Table,
    pub pool: PoolId,
    pub tenant: TenantId,
    /// Leases the preparation took, released when the case drops.
    held: Vec<LeaseId>,
    // Dropped after `table`: the segment is removed once the table is closed.
    _seg: Seg,
}

impl Case {
    fn new(tag: &str, cfg: &Config, pool: &str) -> Case {
        let seg = Seg::new(tag);
        let table = seg.create(cfg);
        let e = table.engine();
        let (pool, tenant) = (e.pool(pool).unwrap(), e.tenant("acme").unwrap());
        Case {
            table,
            pool,
            tenant,
            held: Vec::new(),
            _seg: seg,
        }
    }
    pub fn engine(&self) -> &Engine {
        self.table.engine()
    }
    /// One uncontended acquire + release pair of `acme` at a fixed `now`.
    #[inline]
    pub fn pair(&self) {
        let e = self.engine();
        let Outcome::Granted(id) = e.acquire(self.pool, self.tenant, 1, 0, 1000).unwrap() else {
            panic!("refused")
        };
        e.release(id, 1000).unwrap();
    }
    /// One refused acquire of `acme` (see [`full`]).
    #[inline]
    pub fn refusal(&self) {
        let Outcome::Refused(r) = self
            .engine()
            .acquire(self.pool, self.tenant, 1, 0, 1000)
            .unwrap()
        else {
            panic!("granted in a full pool")
        };
        std::hint::black_box(r);
    }
}

/// Pool `requests` of 64 permits, `acme` alone.
pub fn plain() -> Case {
    Case::new("bench-acquire", &common::one_pool(64), "requests")
}

/// An `evict` pool (`residents`) with room: a resident's pair, no eviction.
pub fn residents() -> Case {
    let cfg = Config::with_pools(vec![PoolConfig::new("residents", 64).evicting()]);
    Case::new("bench-residents", &cfg, "residents")
}

/// 1,024 other tenants active in a pool with room for them all (each holds one permit
/// until the case drops): the decision's cost must not grow with them.
pub fn busy() -> Case {
    let mut cfg = Config::with_pools(vec![PoolConfig::new("requests", 4096)]);
    cfg.max_tenants = 2048;
    cfg.leases_per_process = 2048;
    cfg.max_processes = 4;
    let mut c = Case::new("bench-busy", &cfg, "requests");
    for i in 0..1024 {
        let e = c.engine();
        let t = e.tenant(&format!("t{i}")).unwrap();
        match e.acquire(c.pool, t, 1, 0, 1000).unwrap() {
            Outcome::Granted(id) => c.held.push(id),
            Outcome::Refused(r) => panic!("{r:?}"),
        }
    }
    assert_eq!(c.table.snapshot_at(1000).pools[0].active_tenants, 1024);
    c
}

/// The largest tenant directory, 65,535 slots, 4,096 names claimed and active: the
/// active set's recount scans it, but at most once per window, so a pair does not
/// grow with it.
pub fn directory() -> Case {
    let mut cfg = Config::with_pools(vec![PoolConfig::new("requests", 8192)]);
    cfg.max_tenants = 65_535;
    cfg.max_processes = 2;
    cfg.leases_per_process = 4096;
    let c = Case::new("bench-directory", &cfg, "requests");
    let e = c.engine();
    for i in 0..4096 {
        let t = e.tenant(&format!("t{i}")).unwrap();
        match e.acquire(c.pool, t, 1, 0, 1000).unwrap() {
            Outcome::Granted(id) => e.release(id, 1000).unwrap(),
            Outcome::Refused(r) => panic!("{r:?}"),
        };
    }
    c
}

/// A full pool of 2 that `acme` holds whole (until the case drops): its next acquire
/// is refused.
pub fn full() -> Case {
    let mut c = Case::new("bench-full", &common::one_pool(2), "requests");
    let Outcome::Granted(id) = c.engine().acquire(c.pool, c.tenant, 2, 0, 1000).unwrap() else {
        panic!("refused")
    };
    c.held.push(id);
    c
}

impl Drop for Case {
    fn drop(&mut self) {
        for id in self.held.drain(..) {
            self.table.engine().release(id, 1000).unwrap();
        }
    }
}
