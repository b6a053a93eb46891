//! The engine's upkeep: checking and repairing a table in place, snapshots, and
//! reaping dead processes.

use super::{Engine, Repaired};
use crate::clock;
use crate::error::{Error, Result};
use crate::liveness;
use crate::recovery::{self, Reaped, Reaper};
use crate::region::Region;
use crate::stats::{self, Snapshot};
use crate::sync::Ordering::*;
use crate::tenants;

impl Engine {
    /// Checks every invariant that the lease records let one check: each pool's and
    /// each tenant's counts against the sums of their held leases, each pool's
    /// `waiters` against what the process slots announce (when both hold still for a
    /// few ms), and every record in a state some version writes. One line per
    /// violation; empty when sound.
    pub fn check(&self) -> Result<Vec<String>> {
        self.seg.check_size()?;
        let mut out = Vec::new();
        for p in 0..self.seg.geometry().pools {
            // A pool whose ops never all settle within the budget (one of a dead
            // process, or garbage in its words) cannot be summed: that is a finding too.
            match crate::repair::check_pool(&self.seg, p) {
                Ok(v) => out.extend(v),
                Err(e) => out.push(format!(
                    "pool {p}: counters not compared with the leases: {e}"
                )),
            }
        }
        for (s, st) in crate::repair::odd_slots(&self.seg) {
            out.push(format!("process slot {s} has state word {st:#x}"));
        }
        let (odd, quarantined) = crate::repair::odd_leases(&self.seg);
        if odd > 0 {
            out.push(format!(
                "leases in a state no version writes: {odd} (repair quarantines them)"
            ));
        }
        if quarantined > 0 {
            out.push(format!(
                "leases quarantined: {quarantined} (repair frees them)"
            ));
        }
        for p in 0..self.seg.geometry().pools {
            if let Some((counted, announced)) = crate::repair::steady_waiters(&self.seg, p)
                && counted as u64 != announced
            {
                out.push(format!(
                    "pool {p}: waiters is {counted}, its processes announce {announced} \
                     (a waiter or its reaper killed between its two counts, or a write \
                     from outside; repair recounts it)"
                ));
            }
        }
        out.extend(crate::guaranteed::shared::check(&self.seg));
        Ok(out)
    }

    /// Repairs the table in place, while it is in use: takes process slots in a state
    /// no version writes and reaps dead processes, clears tenant slots left `WRITING`
    /// by no live process, quarantines lease records in a state no version writes,
    /// rebuilds every pool's counters from its lease records and its `waiters` from
    /// the process slots' counts, then frees the quarantined leases, and refills every
    /// tenant's rate buckets (forgiving debts; the rates are kept). A guaranteed pool's
    /// waiters are woken and announce themselves anew (their stamp cleared). Returns
    /// what it did.
    pub fn repair(&self) -> Result<Repaired> {
        self.writable("repairing")?;
        self.seg.check_size()?;
        let reaper = self.reaper(crate::layout::noticed::CALL);
        let mut out = Repaired::default();
        for (s, st) in crate::repair::odd_slots(&self.seg) {
            if let Some(r) = recovery::take_slot(&self.seg, s, st, reaper) {
                out.slots_taken += 1;
                out.reaped.push(r);
            }
        }
        out.reaped.extend(self.reap_dead()?);
        out.tenant_slots_cleared = tenants::clear_stale(&self.seg, &|s| {
            liveness::slot_dead(&self.seg, s, &liveness::is_dead)
        });
        out.leases_quarantined = crate::repair::quarantine_unknown(&self.seg);
        let orphans = crate::repair::resolve_orphans(&self.seg, reaper);
        out.leases_quarantined += orphans.iter().map(|r| r.quarantined).sum::<usize>();
        out.orphans_resolved = orphans
            .iter()
            .map(|r| r.leases_released + r.in_flight)
            .sum();
        out.reaped.extend(orphans);
        // The pools' inputs, from the config (the creator's values; `per_worker`
        // capacities from the live workers), and a recount of the active set.
        crate::capacity::reset(&self.seg, self.config());
        let now = clock::segment_now();
        for p in 0..self.seg.geometry().pools {
            // Relaxed: a priority input (see `admission::touch`). A last scan's time in
            // the future is garbage that would send every decision to a scan of its own.
            let pool = self.seg.pool(p);
            pool.rescan_at_ms.store(0, Relaxed);
            if pool.scanned_at_ms.load(Relaxed) > now {
                pool.scanned_at_ms.store(0, Relaxed);
            }
            for t in 0..self.seg.geometry().tenants {
                let tp = self.seg.tenant_pool(p, t);
                // Relaxed: activity stamps are soft; one in the future is garbage.
                if tp.last_active_ms.load(Relaxed) > now {
                    tp.last_active_ms.store(now, Relaxed);
                }
            }
        }
        for p in 0..self.seg.geometry().pools {
            let budget = crate::repair::REPAIR_BUDGET;
            let mut pool = crate::repair::repair_pool(&self.seg, p, budget)?;
            pool.waiters = crate::repair::recount_waiters(&self.seg, p, budget);
            if let Some((before, after)) = pool.waiters
                && after > before
            {
                // Releases that read the count low may have skipped a wake: every
                // sleeper asks again.
                crate::waiting::reaped(self.seg.pool(p), u32::MAX);
            }
            out.pools.push(pool);
        }
        out.leases_freed = crate::repair::free_quarantined(&self.seg);
        self.repair_guaranteed(&mut out)?;
        out.rate_buckets_refilled = (0..self.seg.geometry().tenants)
            .map(|t| crate::rates::refill(&self.seg, t))
            .sum();
        crate::peers::announce(&self.seg, &out.reaped);
        for p in &out.pools {
            if p.in_use_after < p.in_use_before {
                crate::waiting::reaped(self.seg.pool(p.pool), p.in_use_before - p.in_use_after);
            }
        }
        Ok(out)
    }

    /// `repair`'s part for the guaranteed pools: a state that cannot be read is reset,
    /// and leases of slots that no live process holds are released.
    fn repair_guaranteed(&self, out: &mut Repaired) -> Result<()> {
        use crate::guaranteed::{GLeaseId, shared};
        use crate::layout::proc_state as ps;
        let slot = self.claimer_slot()?;
        for gp in 0..self.seg.g_pools() {
            {
                let _lock = crate::guaranteed::BlockLock::take(&self.g_lock);
                if shared::reset(&self.seg, gp, slot)? {
                    out.guaranteed_reset.push(self.seg.g_rules(gp).name.clone());
                }
            }
            // The waiters' stamp, which a hostile write may have pushed far ahead, is
            // forgotten and every waiter woken: each asks again (a reset state holds
            // nothing, so it may be served now) and announces itself anew.
            crate::guaranteed::waiters::forget(&self.seg, gp);
            crate::waiting::guaranteed_wake(
                &self.seg,
                gp,
                crate::guaranteed::waiters::EVERY_BIT,
                u32::MAX,
            );
            let (_, st) = shared::read(&self.seg, gp)?;
            let procs = self.seg.geometry().procs;
            for l in &st.leases {
                let s = l.owner as usize;
                // Acquire: pairs with the registrant's Release store of LIVE.
                let live =
                    s < procs && ps::status(self.seg.proc_slot(s).state.load(Acquire)) != ps::FREE;
                if !live {
                    let id = GLeaseId {
                        pool: gp as u32,
                        no: l.no,
                    };
                    match self.guaranteed_release_as(id, st.clock, false) {
                        Ok(_) => out.guaranteed_orphans_released += 1,
                        Err(Error::AlreadyReleased { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        Ok(())
    }

    /// A snapshot, after checking that the segment's file was not truncated under
    /// the mapping (`Err(Truncated)`: reading it would raise SIGBUS).
    pub fn try_snapshot(&self) -> Result<Snapshot> {
        self.try_snapshot_at(clock::now_ms())
    }

    /// [`Engine::try_snapshot`] with activity judged at `now`.
    pub fn try_snapshot_at(&self, now: u64) -> Result<Snapshot> {
        self.seg.check_size()?;
        Ok(self.snapshot_at(now))
    }

    /// A snapshot of the whole table, read now. (It reads the mapping without checking
    /// the file's size: see [`Engine::try_snapshot`].)
    pub fn snapshot(&self) -> Snapshot {
        self.snapshot_at(clock::now_ms())
    }

    /// A snapshot with activity judged at `now`.
    pub fn snapshot_at(&self, now: u64) -> Snapshot {
        stats::snapshot(&self.seg, self.config(), clock::internal(now))
    }

    /// This process as a reaper: the identity it registered with, or (not registered)
    /// read from `/proc`.
    fn reaper(&self, how: u32) -> Reaper {
        let pid = crate::selfid::pid();
        match self.registered(pid as u64) {
            // Relaxed: written before the Release store of `reg` that `registered` read.
            Some(_) => Reaper::with_pid(pid).started(self.start.load(Relaxed)),
            None => Reaper::me(crate::layout::noticed::CALL),
        }
        .noticing(how)
    }

    /// Returns the permits of every registered process that has died.
    pub fn reap_dead(&self) -> Result<Vec<Reaped>> {
        self.reap_dead_as(crate::layout::noticed::CALL)
    }

    /// [`Engine::reap_dead`], recording `how` (a `layout::noticed` code) in each slot.
    pub(crate) fn reap_dead_as(&self, how: u32) -> Result<Vec<Reaped>> {
        self.writable("reaping")?;
        // A registered process passed this when it registered (a waiter's sweeps come
        // here again and again); a caller that never registered is judged now.
        if self.registered(crate::selfid::pid() as u64).is_none() {
            self.seg.check_pid_ns("reaping dead processes")?;
        }
        self.seg.check_size()?;
        let reaper = self.reaper(how);
        let mut out = Vec::new();
        for s in 0..self.seg.geometry().procs {
            if let Some(r) = recovery::reap_slot(&self.seg, s, reaper, &liveness::is_dead)? {
                out.push(r);
            }
        }
        crate::peers::announce(&self.seg, &out);
        Ok(out)
    }
}
