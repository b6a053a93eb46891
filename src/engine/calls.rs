//! The engine's calls beside acquire and release: a tenant's rates, and the calls of a
//! resident lease (an `evict` pool's) while its object is in use.

use super::{Engine, LeaseId, Outcome, PoolId, TenantId};
use crate::clock::internal;
use crate::error::{Error, Result};
use crate::refusal::Refused;
use crate::region::Region;

impl Engine {
    /// Sets `tenant`'s rates: requests per second and work units per second, 0 for
    /// unbounded. Applies at once to every process's next acquire.
    pub fn set_rates(
        &self,
        tenant: TenantId,
        requests_per_s: u32,
        work_units_per_s: u32,
    ) -> Result<()> {
        self.writable("setting rates")?;
        self.check_tenant_handle(tenant)?;
        crate::rates::set(&self.seg, tenant.index(), requests_per_s, work_units_per_s);
        Ok(())
    }

    /// Notes that a request of `pool` waited `queued_us` in the server's own queue before
    /// it reached the application, at `now` (ms): what the front proxy's
    /// `X-Request-Start` says. While such waits show a queue, the hint of a
    /// tenant over its share is stretched (see `server_queue`), so that its retries stay
    /// out of that queue. Cheap: a load and an add (Relaxed) on the pool's queue words.
    pub fn note_queue(&self, pool: PoolId, queued_us: u64, now: u64) -> Result<()> {
        self.writable("noting the server's queue")?;
        self.check_pool_handle(pool)?;
        crate::server_queue::note(self.seg.pool(pool.index()), queued_us, internal(now));
        Ok(())
    }

    /// `tenant`'s rates: (requests per second, work units per second); 0 is unbounded.
    pub fn rates(&self, tenant: TenantId) -> Result<(u32, u32)> {
        self.check_tenant_handle(tenant)?;
        Ok(crate::rates::limits(&self.seg, tenant.index()))
    }

    /// Charges `units` of work done by `tenant` at `now` (ms) to its work rate. Returns
    /// the ms until it is out of the debt this leaves (0: none).
    pub fn charge(&self, tenant: TenantId, units: u64, now: u64) -> Result<u64> {
        self.writable("charging work")?;
        self.check_tenant_handle(tenant)?;
        Ok(crate::rates::charge(
            &self.seg,
            tenant.index(),
            units,
            internal(now),
        ))
    }

    pub(super) fn check_pool_handle(&self, pool: PoolId) -> Result<()> {
        check_handle("pool", pool.index(), self.seg.geometry().pools)
    }

    pub(super) fn check_tenant_handle(&self, tenant: TenantId) -> Result<()> {
        check_handle("tenant", tenant.index(), self.seg.geometry().tenants)
    }

    /// The refusal of an acquire of pool `p` at `now` (the segment's time) that
    /// `tenant`'s rates refused (`l`), logged in this process's decision log if it has
    /// registered already (a rate refusal registers nothing).
    #[cold]
    #[inline(never)]
    pub(super) fn rate_refusal(
        &self,
        p: usize,
        tenant: TenantId,
        units: u32,
        now: u64,
        l: &crate::rates::Limited,
    ) -> Outcome {
        let weight = tenant.weight.max(1);
        let pid = crate::selfid::pid();
        if let Some(slot) = self.registered(pid as u64).filter(|_| self.decision_log()) {
            let e = crate::decisions::Entry::rate_refusal(
                now,
                p as u32,
                tenant.index() as u32,
                units,
                weight,
                l,
                crate::selfid::tid(),
                pid,
            );
            crate::decisions::record(&self.seg, slot, &e);
        }
        Outcome::Refused(Refused::by_rate(units, weight, l))
    }

    /// Starts a call on resident lease `id` (a lease of an `evict` pool) at `now` (ms):
    /// while a call is in progress the resident is never revoked. Calls may nest; each
    /// needs its [`Engine::end_call`]. `Err(Revoked)` if the lease was revoked to make
    /// room: put the object to sleep and release the lease.
    pub fn begin_call(&self, id: LeaseId, now: u64) -> Result<()> {
        self.writable("beginning a call")?;
        let l = self.own_lease(id)?;
        let now = internal(now);
        crate::residents::begin_call(&self.seg, l, id.generation, now, &id.to_string())
    }

    /// Ends a call on resident lease `id` at `now` (ms). When its last call ends the
    /// resident is evictable again, and an acquire waiting for one is woken.
    pub fn end_call(&self, id: LeaseId, now: u64) -> Result<()> {
        self.writable("ending a call")?;
        let l = self.own_lease(id)?;
        let (p, t, idle) = crate::residents::end_call(
            &self.seg,
            l,
            id.generation,
            internal(now),
            &id.to_string(),
        )?;
        let (p, t) = (p as usize, t as usize);
        if idle && p < self.seg.geometry().pools {
            // A resident came idle: a waiter may now evict it, if its tenant is at or
            // past its share.
            crate::waiting::resident_idle(self.seg.pool(p), || {
                crate::residents::idle_is_evictable(&self.seg, p, t)
            });
        }
        Ok(())
    }

    /// Whether resident lease `id` is idle, in a call, or revoked.
    pub fn resident_status(&self, id: LeaseId) -> Result<crate::residents::Status> {
        let l = self.own_lease(id)?;
        crate::residents::status(&self.seg, l, id.generation, &id.to_string())
    }

    /// Waits up to `timeout` for resident lease `id` to be revoked; returns whether it
    /// is. Wakes at once on a revocation (a futex the revoker wakes).
    pub fn wait_revoked(&self, id: LeaseId, timeout: std::time::Duration) -> Result<bool> {
        let l = self.own_lease(id)?;
        let until = crate::clock::after(std::time::Instant::now(), timeout);
        loop {
            let Some((word, seq)) = crate::residents::wake_word(&self.seg, l) else {
                return Err(Error::NotResident {
                    lease: id.to_string(),
                    why: "the segment has no evict pool",
                });
            };
            let st = crate::residents::status(&self.seg, l, id.generation, &id.to_string())?;
            if st == crate::residents::Status::Revoked {
                return Ok(true);
            }
            if std::time::Instant::now() >= until {
                return Ok(false);
            }
            let w = [crate::waiting::Watch { word, val: seq }];
            crate::waiting::sleep_on(&w, until);
        }
    }

    /// This process's resident leases that were revoked and are not yet released.
    pub fn revoked_leases(&self) -> Vec<LeaseId> {
        let Some(slot) = self.registered(crate::selfid::pid() as u64) else {
            return Vec::new();
        };
        crate::residents::revoked_of_slot(&self.seg, slot)
            .into_iter()
            .map(|(l, g)| LeaseId {
                index: l as u32,
                generation: g,
            })
            .collect()
    }
}

/// A `what` handle of index `index` is of a table with `count` of them.
fn check_handle(what: &str, index: usize, count: usize) -> Result<()> {
    if index >= count {
        return Err(Error::InvalidRequest(format!(
            "{what} handle {index} is not of this table"
        )));
    }
    Ok(())
}
