//! Lease records: claiming a slot, publishing an acquire's descriptor, freeing, reading
//! a descriptor under the seqlock, and the grant counts kept in the slot.

use super::Desc;
use crate::error::{Error, Result};
use crate::layout::{LeaseRec, lease_state as ls, pair};
use crate::region::Region;
use crate::sync::{Ordering::*, fence};

/// Claims a free lease in process slot `slot`'s range, bumping its generation.
/// Returns `(index, generation)`.
pub(crate) fn claim_lease<R: Region>(r: &R, slot: usize, hint: usize) -> Result<(usize, u32)> {
    let geo = r.geometry();
    debug_assert!(slot < geo.procs);
    let n = geo.leases_per_proc;
    for i in 0..n {
        let l = slot * n + (hint + i) % n;
        let lease = r.lease(l);
        // Relaxed: a probe; the CAS below re-checks the word with Acquire.
        let sw = lease.state.load(Relaxed);
        if ls::state(sw) != ls::FREE {
            continue;
        }
        let claimed = ls::make(ls::generation(sw).wrapping_add(1), ls::CLAIMED);
        // Acquire: the previous cycle's writes (by the owner or a reaper, published by
        // their Release store of FREE) happen before ours.
        if lease
            .state
            .compare_exchange(sw, claimed, Acquire, Relaxed)
            .is_ok()
        {
            // Release fence: the generation bump is ordered before the field writes
            // that follow, for the seqlock in `read_desc`.
            fence(Release);
            return Ok((l, ls::generation(claimed)));
        }
    }
    Err(Error::LeaseTableFull { max: n })
}

/// Takes spare lease `(index, generation)` of the calling thread if it is still
/// `CLAIMED` in that generation and in slot `slot`'s range, else claims one.
#[inline(always)]
pub(crate) fn spare_or_claim<R: Region>(
    r: &R,
    slot: usize,
    hint: usize,
    spare: Option<(usize, u32)>,
) -> Result<(usize, u32)> {
    match spare.filter(|&(l, g)| {
        // In our slot's range (no division: this runs on every acquire). Relaxed: our
        // own spare, which only we (and a reaper of our dead process, or our own
        // deregistration) could have changed.
        r.geometry().slot_leases(slot).contains(&l)
            && r.lease(l).state.load(Relaxed) == ls::make(g, ls::CLAIMED)
    }) {
        Some(spare) => Ok(spare),
        None => claim_lease(r, slot, hint),
    }
}

/// Writes the descriptor of a claimed lease and publishes it as `ACQUIRING`. Grants the
/// slot counted for another (pool, tenant) are added to that tenant's counter first.
// Always inlined into the acquire (its one hot caller): left to the heuristics, it
// stopped being inlined once the resident branch was added (callgrind: +170
// instructions a pair, with `apply_pool_acquire`).
#[inline(always)]
pub(crate) fn publish_acquire<R: Region>(
    r: &R,
    l: usize,
    d: &Desc,
    tid: u32,
    now: u64,
    hold_ms: u64,
    charges_extra: bool,
) {
    let lease = r.lease(l);
    // The caller claimed it (`CLAIMED` of `d.generation`); only a write from outside
    // says otherwise (input, not asserted), and the store of `ACQUIRING` below
    // overwrites that.
    // Relaxed, all the fields: the slot's own, written only by its owner while it is
    // CLAIMED (we own it now); the Release store of ACQUIRING below publishes them.
    lease.units.store(d.units, Relaxed);
    let pt = pair::make(d.pool, d.tenant);
    let old = lease.pool_tenant.load(Relaxed);
    if old != pt {
        flush_grants(r, lease, old);
        lease.pool_tenant.store(pt, Relaxed);
    }
    for (w, v) in lease.inputs.iter().zip(d.inputs) {
        w.store(v, Relaxed);
    }
    lease.granted_ms.store(now, Relaxed);
    lease.hold_ms.store(hold_ms, Relaxed);
    lease.tid.store(tid, Relaxed);
    if crate::layout::residency::is_resident(d.inputs[2]) {
        super::resident::init(r, l, d.generation, now);
    }
    // Release: a settler or reaper that Acquire-loads ACQUIRING sees the fields (and
    // the recorded decision to charge the extra word).
    let charges = if charges_extra { ls::CHARGES_EXTRA } else { 0 };
    lease
        .state
        .store(ls::make(d.generation, ls::ACQUIRING) | charges, Release);
}

/// Adds the grants a lease slot counted for (pool, tenant) `pt` to that tenant's
/// counter. A `pt` beyond the table (garbage) is dropped.
#[cold]
fn flush_grants<R: Region>(r: &R, lease: &LeaseRec, pt: u64) {
    // Relaxed: a statistic, and the slot's own field.
    let n = lease.pending_grants.load(Relaxed);
    if n == 0 {
        return;
    }
    lease.pending_grants.store(0, Relaxed);
    let (p, t) = (pair::lo(pt) as usize, pair::hi(pt) as usize);
    let geo = r.geometry();
    if p < geo.pools && t < geo.tenants {
        r.tenant_pool(p, t).grants.fetch_add(n as u64, Relaxed);
    }
}

/// Counts a grant of lease `lease` (just granted, so its `pool_tenant` is current).
#[inline]
pub(crate) fn count_grant<R: Region>(r: &R, lease: &LeaseRec) {
    // Relaxed: a statistic, written by the owner only.
    let n = lease.pending_grants.load(Relaxed);
    if n == u32::MAX {
        flush_grants(r, lease, lease.pool_tenant.load(Relaxed));
        lease.pending_grants.store(1, Relaxed);
    } else {
        lease.pending_grants.store(n + 1, Relaxed);
    }
}

/// Returns a lease to `FREE` if it is still in `state` of generation `generation`.
pub(crate) fn free_lease(lease: &LeaseRec, generation: u32, state: u32) -> bool {
    // Release: our last reads and writes of this cycle happen before the next claim.
    lease
        .state
        .compare_exchange(
            ls::make(generation, state),
            ls::make(generation, ls::FREE),
            Release,
            Relaxed,
        )
        .is_ok()
}

/// Returns a lease to `FREE` if its state word is still exactly `s`.
pub(crate) fn free_lease_from(lease: &LeaseRec, s: u32) -> bool {
    // Release: as in `free_lease`.
    lease
        .state
        .compare_exchange(s, ls::make(ls::generation(s), ls::FREE), Release, Relaxed)
        .is_ok()
}

/// Reads a lease's descriptor if its generation is exactly `generation`, under the
/// seqlock (I4). `None` if the slot is not published in that cycle.
pub(crate) fn read_desc(lease: &LeaseRec, generation: u32) -> Option<Desc> {
    let s1 = lease.state.load(Acquire);
    if ls::generation(s1) != generation || ls::state(s1) == ls::CLAIMED {
        return None;
    }
    let pt = lease.pool_tenant.load(Relaxed);
    let d = Desc {
        generation,
        pool: pair::lo(pt),
        tenant: pair::hi(pt),
        units: lease.units.load(Relaxed),
        inputs: [
            lease.inputs[0].load(Relaxed),
            lease.inputs[1].load(Relaxed),
            lease.inputs[2].load(Relaxed),
        ],
    };
    // Acquire fence: if any field above came from a later cycle, the claim CAS of that
    // cycle is visible to the re-load below (pairs with the fence in `claim_lease`).
    fence(Acquire);
    let s2 = lease.state.load(Acquire);
    (ls::generation(s2) == generation && ls::state(s2) != ls::CLAIMED).then_some(d)
}

/// Checks that a descriptor read from shared memory names a real pool and tenant.
pub(crate) fn check_desc<R: Region>(r: &R, l: usize, d: &Desc) -> Result<()> {
    let geo = r.geometry();
    if d.pool as usize >= geo.pools || d.tenant as usize >= geo.tenants {
        return Err(Error::Corrupt(format!(
            "lease {l} names pool {} / tenant {}, beyond {} pools / {} tenants",
            d.pool, d.tenant, geo.pools, geo.tenants
        )));
    }
    Ok(())
}

