//! The uncontended pair's shared-memory traffic without its logic: what the pair would
//! cost if deciding, packing words, checking indices and handles took no time at all.
//! It makes, on the very lines of a real segment that the engine's steady-state pair
//! (`setups::Case::pair`, one tenant, the same `now`) touches, the same loads, plain
//! stores and locked instructions in the same order and with the same orderings: the
//! tenant's rates, the pool's limits and active weight, the pool and held words, the
//! spare lease's record, the held and pool CASes, the grant count, the decision log's
//! entry; then the release's state CAS, the record's read back, the pool and held
//! CASes, the spare kept, the tenant's stamp and hold estimate (read: unchanged in the
//! steady state), the waiters word. The
//! values are not the rule's (each CAS succeeds on the word it just read, and the pool
//! and held words come back to where they were), so the table it runs on is its own:
//! its log entries are junk, and nothing else may use it.
//!
//! `tests/locked.rs` checks that it makes as many locked instructions and plain stores
//! as the pair (the counting shim's figures), so that the two stay the same traffic. The ratios bench reports `skeleton / bare` (the
//! part of a pair-over-bare target that the traffic alone takes on the host at hand)
//! and `pair / skeleton` (what the logic adds on top).

use std::hint::black_box;

use fairshm::Table;
use fairshm::layout::{LeaseRec, LogRec, PoolRec, ProcRec, RateRec, TenantPoolRec};
use fairshm::region::Region;
use std::sync::atomic::{Ordering::*, fence};

/// The records a pair of tenant `acme` in pool `requests` touches, found once.
pub struct Skeleton<'t> {
    pool: &'t PoolRec,
    tp: &'t TenantPoolRec,
    rate: &'t RateRec,
    lease: &'t LeaseRec,
    proc_rec: &'t ProcRec,
    log: Vec<&'t LogRec>,
}

impl<'t> Skeleton<'t> {
    /// The records of `table`'s pool `requests` and tenant `acme`, after one real pair
    /// (which registers the process, claims the tenant and leaves this thread a spare
    /// lease: the one a steady-state pair reuses).
    pub fn new(table: &'t Table) -> Skeleton<'t> {
        let e = table.engine();
        let (p, t) = (e.pool("requests").unwrap(), e.tenant("acme").unwrap());
        let fairshm::Outcome::Granted(id) = e.acquire(p, t, 1, 0, 1000).unwrap() else {
            panic!("refused in an empty pool")
        };
        e.release(id, 1000).unwrap();
        let slot = e.process_slot().unwrap();
        let r = table.region();
        let n = r.geometry().log_per_proc;
        assert!(
            n.is_power_of_two(),
            "the segment's log ring is a power of two"
        );
        Skeleton {
            pool: r.pool(p.index()),
            tp: r.tenant_pool(p.index(), t.index()),
            rate: r.rate(t.index()),
            lease: r.lease(id.index as usize),
            proc_rec: r.proc_slot(slot),
            log: (0..n).map(|i| r.log(slot, i)).collect(),
        }
    }

    /// One pair's traffic (see the module docs).
    #[inline]
    pub fn pair(&self) {
        let (pool, tp, lease) = (self.pool, self.tp, self.lease);
        // The acquire: the rates, the pool's inputs, the active set's stamp.
        black_box(self.rate.limits.load(Relaxed));
        black_box(pool.limits.load(Relaxed));
        black_box(tp.last_active_ms.load(Relaxed));
        black_box(pool.active_weight.load(Relaxed));
        // The look: the pool word, then the held word.
        let w = pool.word.load(SeqCst);
        let h = tp.held.load(Acquire);
        // The spare lease, and its record published as ACQUIRING.
        let s = lease.state.load(Relaxed);
        lease.units.store(black_box(1), Relaxed);
        black_box(lease.pool_tenant.load(Relaxed));
        for x in &lease.inputs {
            x.store(black_box(0), Relaxed);
        }
        lease.granted_ms.store(black_box(1000), Relaxed);
        lease.hold_ms.store(black_box(0), Relaxed);
        lease.tid.store(black_box(1), Relaxed);
        lease.state.store(black_box(s), Release);
        // The held and pool words, then HELD.
        let _ = tp.held.compare_exchange(h, h + 1, AcqRel, Acquire);
        let _ = pool.word.compare_exchange(w, w + 1, SeqCst, SeqCst);
        lease.state.store(black_box(s), Release);
        // The grant counted, the retry-after clock looked at, the decision logged.
        let g = lease.pending_grants.load(Relaxed);
        lease.pending_grants.store(g.wrapping_add(1), Relaxed);
        black_box(tp.first_due_lo.load(Relaxed));
        let head = &self.proc_rec.log_head;
        let pos = head.load(Relaxed);
        head.store(pos.wrapping_add(1), Relaxed);
        let rec = self.log[pos as usize & (self.log.len() - 1)];
        rec.stamp.store(0, Relaxed);
        fence(Release);
        for f in fairshm::decisions::fields(rec) {
            f.store(black_box(pos), Relaxed);
        }
        rec.stamp.store(black_box(pos | 1), Release);

        // The release: the record's state, HELD -> RELEASING, and the record read back.
        black_box(lease.granted_ms.load(Relaxed));
        let s = lease.state.load(Acquire);
        let _ = lease.state.compare_exchange(s, s, AcqRel, Relaxed);
        black_box(lease.units.load(Relaxed));
        black_box(lease.pool_tenant.load(Relaxed));
        for x in &lease.inputs {
            black_box(x.load(Relaxed));
        }
        // The pool word, then the held word.
        let w = pool.word.load(Acquire);
        let _ = pool.word.compare_exchange(w, w - 1, SeqCst, SeqCst);
        let h = tp.held.load(Acquire);
        let _ = tp.held.compare_exchange(h, h - 1, AcqRel, Acquire);
        // The slot kept as the thread's spare.
        lease.tid.store(black_box(1), Relaxed);
        lease.state.store(black_box(s), Release);
        fence(Release);
        // The tenant's stamp and hold estimate, and whether anyone waits.
        black_box(tp.last_active_ms.load(Relaxed));
        black_box(tp.hold_ewma_us.load(Relaxed));
        black_box(pool.waiters.load(SeqCst));
    }
}
