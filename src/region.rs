//! Where the records live.
//!
//! The algorithms (`ops`, `admission`, `tenants`, `liveness`, `recovery`, `stats`) are
//! written once, over [`Region`]. Two implementations exist: the mmap overlay in
//! `segment` (the product) and [`HeapRegion`] (loom models, unit tests), so loom checks
//! the very code that runs on the mapping.
//!
//! Accessors take indices that the caller has already checked against the trusted
//! [`Geometry`] (which comes from the validated config, never from a live record); the
//! accessors check again and panic, like slice indexing, as a memory-safety backstop.

use crate::layout::{
    GHeadRec, Geometry, LeaseRec, LogRec, PoolRec, ProcRec, RateRec, ResidentRec, TenantPoolRec,
    TenantRec, WAITING_PER_RECORD, WaitingRec,
};
use crate::guaranteed::{GuaranteedConfig, Rules};
use crate::sync::{AtomicU32, AtomicU64};

pub trait Region {
    fn geometry(&self) -> &Geometry;
    fn pool(&self, p: usize) -> &PoolRec;
    fn tenant(&self, t: usize) -> &TenantRec;
    fn tenant_pool(&self, p: usize, t: usize) -> &TenantPoolRec;
    fn proc_slot(&self, s: usize) -> &ProcRec;
    fn lease(&self, l: usize) -> &LeaseRec;
    /// Entry `i` of process slot `s`'s decision log (`i < geometry().log_per_proc`).
    fn log(&self, s: usize, i: usize) -> &LogRec;
    /// Tenant `t`'s rates and buckets.
    fn rate(&self, t: usize) -> &RateRec;
    /// Guaranteed pools (seed 001), and the rules of pool `gp < g_pools()`.
    fn g_pools(&self) -> usize;
    fn g_rules(&self, gp: usize) -> &Rules;
    /// Guaranteed pool `gp`'s head record (see `guaranteed::shared`).
    fn g_head_rec(&self, gp: usize) -> &GHeadRec;
    /// Guaranteed pool `gp`'s head word.
    fn g_head(&self, gp: usize) -> &AtomicU64 {
        &self.g_head_rec(gp).head
    }
    /// Block `b < 2 * geometry().procs` of guaranteed pool `gp`: its words.
    fn g_block(&self, gp: usize, b: usize) -> &[AtomicU64];
    /// Lease `l`'s resident record, if the region has residents (some pool evicts).
    fn resident(&self, l: usize) -> Option<&ResidentRec>;
    /// Record `i < geometry().waiting_records()` of process slot `s`'s waiter counts.
    fn waiting_rec(&self, s: usize, i: usize) -> &WaitingRec;
    /// How many of process slot `s`'s threads are announced in pool `p`'s `waiters`.
    fn slot_waiters(&self, s: usize, p: usize) -> &AtomicU32 {
        assert!(p < self.geometry().pools);
        &self.waiting_rec(s, p / WAITING_PER_RECORD).counts[p % WAITING_PER_RECORD]
    }
}

/// A guaranteed pool on the heap.
struct HeapGPool {
    rules: Rules,
    head: GHeadRec,
    blocks: Vec<Vec<AtomicU64>>,
}

/// The records on the heap, built from atomics of the `sync` shim.
pub struct HeapRegion {
    geo: Geometry,
    pools: Vec<PoolRec>,
    tenants: Vec<TenantRec>,
    tenant_pools: Vec<TenantPoolRec>,
    procs: Vec<ProcRec>,
    leases: Vec<LeaseRec>,
    logs: Vec<LogRec>,
    rates: Vec<RateRec>,
    guaranteed: Vec<HeapGPool>,
    waiting: Vec<WaitingRec>,
    residents: Vec<ResidentRec>,
}

fn a32() -> AtomicU32 {
    AtomicU32::new(0)
}
fn a64() -> AtomicU64 {
    AtomicU64::new(0)
}

impl HeapRegion {
    /// All records zeroed, exactly like a freshly truncated segment; without a decision
    /// log (loom would track thousands of atomics per model run).
    pub fn new(pools: usize, tenants: usize, procs: usize, leases_per_proc: usize) -> Self {
        Self::with_log(pools, tenants, procs, leases_per_proc, 0)
    }

    /// [`HeapRegion::new`] with a decision log of `log_per_proc` entries per process.
    pub fn with_log(
        pools: usize,
        tenants: usize,
        procs: usize,
        leases_per_proc: usize,
        log_per_proc: usize,
    ) -> Self {
        let mut geo = Geometry::new(pools, tenants, procs, leases_per_proc, 0);
        geo.log_per_proc = log_per_proc;
        let waiting_per = geo.waiting_records();
        HeapRegion {
            geo,
            pools: (0..pools)
                .map(|_| PoolRec {
                    word: a64(),
                    pad: std::array::from_fn(|_| a64()),
                    limits: a64(),
                    active_weight: a64(),
                    rescan_at_ms: a64(),
                    waiters: a32(),
                    rescan_for: a32(),
                    wake: a64(),
                    extra: a64(),
                    evictions: a64(),
                    queue_window: a64(),
                    queue_base: a64(),
                    queue_stretch: a64(),
                    queue_sum: a64(),
                    queue_refused_ms: a64(),
                    hold_mean_us: a64(),
                    scanned_at_ms: a64(),
                    reserved: std::array::from_fn(|_| a64()),
                })
                .collect(),
            tenants: (0..tenants)
                .map(|_| TenantRec {
                    state: a32(),
                    weight: a32(),
                    hash: a64(),
                    name: [a64(), a64(), a64(), a64(), a64(), a64()],
                })
                .collect(),
            tenant_pools: (0..pools * tenants)
                .map(|_| TenantPoolRec {
                    held: a64(),
                    last_active_ms: a64(),
                    grants: a64(),
                    refusals: [a64(), a64(), a64(), a64()],
                    hold_ewma_us: a32(),
                    first_due_lo: a32(),
                    turn_at_us: a64(),
                    hint_ms_total: a64(),
                    early_returns: a64(),
                    too_many_residents: a64(),
                    revoked: a64(),
                    evictions: a64(),
                    refusal_gap: a64(),
                    hint_avg_us: a64(),
                })
                .collect(),
            procs: (0..procs)
                .map(|_| ProcRec {
                    state: a64(),
                    start_time: a64(),
                    owner_futex: a32(),
                    generation: a32(),
                    registered_ms: a64(),
                    death_pids: a64(),
                    death_unix_ms: a64(),
                    death_info: a64(),
                    log_head: a64(),
                })
                .collect(),
            leases: (0..procs * leases_per_proc)
                .map(|_| LeaseRec {
                    state: a32(),
                    units: a32(),
                    pool_tenant: a64(),
                    inputs: [a64(), a64(), a64()],
                    granted_ms: a64(),
                    hold_ms: a64(),
                    tid: a32(),
                    pending_grants: a32(),
                })
                .collect(),
            logs: (0..procs * log_per_proc)
                .map(|_| LogRec {
                    stamp: a64(),
                    at_ms: a64(),
                    what: a64(),
                    units_in_use: a64(),
                    held_cap: a64(),
                    floor_weight: a64(),
                    active_hint: a64(),
                    tid_pid: a64(),
                })
                .collect(),
            rates: (0..tenants)
                .map(|_| RateRec {
                    limits: a64(),
                    req_tat_ns: a64(),
                    work_tat_ns: a64(),
                    rate_limited: a64(),
                    work_debt: a64(),
                    work_charged: a64(),
                    reserved: [a64(), a64()],
                })
                .collect(),
            guaranteed: Vec::new(),
            residents: Vec::new(),
            waiting: (0..procs * waiting_per)
                .map(|_| WaitingRec {
                    counts: std::array::from_fn(|_| a32()),
                })
                .collect(),
        }
    }

    /// The same region with a resident record per lease (as a segment with an `evict`
    /// pool has).
    pub fn with_residents(mut self) -> Self {
        self.geo = self.geo.with_residents(true);
        self.residents = (0..self.geo.leases())
            .map(|_| ResidentRec {
                word: a64(),
                last_call_ms: a64(),
                wake: a32(),
                calls: a32(),
                reserved: std::array::from_fn(|_| a64()),
            })
            .collect();
        self
    }

    /// The same region with these guaranteed pools (validated configs), initialised as
    /// a creator would.
    pub fn with_guaranteed(mut self, cfgs: &[GuaranteedConfig]) -> Self {
        let procs = self.geo.procs;
        self.guaranteed = cfgs
            .iter()
            .map(|c| HeapGPool {
                rules: Rules::new(c),
                head: GHeadRec {
                    head: a64(),
                    sleep_until_ms: a64(),
                    wake: a32(),
                    reserved32: a32(),
                    epochs: std::array::from_fn(|_| a64()),
                    reserved: std::array::from_fn(|_| a64()),
                },
                blocks: (0..2 * procs)
                    .map(|_| {
                        let n = crate::guaranteed::words::block_words(
                            c.tenants.len(),
                            c.max_leases as usize,
                            c.max_slices(),
                        );
                        (0..n).map(|_| a64()).collect()
                    })
                    .collect(),
            })
            .collect();
        crate::guaranteed::shared::init(&self);
        self
    }
}

impl Region for HeapRegion {
    fn geometry(&self) -> &Geometry {
        &self.geo
    }
    fn pool(&self, p: usize) -> &PoolRec {
        &self.pools[p]
    }
    fn tenant(&self, t: usize) -> &TenantRec {
        &self.tenants[t]
    }
    fn tenant_pool(&self, p: usize, t: usize) -> &TenantPoolRec {
        assert!(t < self.geo.tenants);
        &self.tenant_pools[p * self.geo.tenants + t]
    }
    fn proc_slot(&self, s: usize) -> &ProcRec {
        &self.procs[s]
    }
    fn lease(&self, l: usize) -> &LeaseRec {
        &self.leases[l]
    }
    fn log(&self, s: usize, i: usize) -> &LogRec {
        assert!(i < self.geo.log_per_proc);
        &self.logs[s * self.geo.log_per_proc + i]
    }
    fn rate(&self, t: usize) -> &RateRec {
        &self.rates[t]
    }
    fn g_pools(&self) -> usize {
        self.guaranteed.len()
    }
    fn g_rules(&self, gp: usize) -> &Rules {
        &self.guaranteed[gp].rules
    }
    fn g_head_rec(&self, gp: usize) -> &GHeadRec {
        &self.guaranteed[gp].head
    }
    fn g_block(&self, gp: usize, b: usize) -> &[AtomicU64] {
        &self.guaranteed[gp].blocks[b]
    }
    fn resident(&self, l: usize) -> Option<&ResidentRec> {
        self.residents.get(l)
    }
    fn waiting_rec(&self, s: usize, i: usize) -> &WaitingRec {
        let per = self.geo.waiting_records();
        assert!(s < self.geo.procs && i < per);
        &self.waiting[s * per + i]
    }
}
