//! The engine's errors that take more than a line to say: bad handles, a lease of
//! another owner, units over a capacity, a garbage capacity, and the clean-up after an
//! op's error. All out of line and cold, so the fast paths stay as they are.

use super::{Engine, PoolId};
use crate::error::Error;
use crate::recovery::{self, Reaped};
use crate::region::Region;
use crate::sync::Ordering::*;

impl Engine {
    /// `InvalidRequest` naming the handle of an acquire that is beyond this table: the
    /// pool handle `p`, else the tenant handle `t`.
    #[cold]
    #[inline(never)]
    pub(crate) fn bad_handles(&self, p: usize, t: usize) -> Error {
        let geo = self.seg.geometry();
        Error::InvalidRequest(if p >= geo.pools && geo.pools == 0 {
            format!("pool handle {p} is not of this table: it has no fair-share pools")
        } else if p >= geo.pools {
            format!(
                "pool handle {p} is not of this table: its fair-share pools are handles 0 \
                 to {}",
                geo.pools - 1
            )
        } else {
            format!(
                "tenant handle {t} is beyond this table's {} tenant slots",
                geo.tenants
            )
        })
    }

    /// `NotOwner` for `lease` (its label), owned by process slot `slot` (as recorded in
    /// shared memory: checked here), saying who holds it: a process (its slot `LIVE`)
    /// or another table handle of this one, which has a slot of its own and must
    /// release its own leases.
    #[cold]
    #[inline(never)]
    pub(crate) fn not_owner(&self, lease: String, slot: usize) -> Error {
        use crate::layout::proc_state as ps;
        // Acquire: as every reader of a process slot's state (a wrong answer here only
        // words the error). A slot beyond the table reads as free.
        let st = if slot < self.seg.geometry().procs {
            self.seg.proc_slot(slot).state.load(Acquire)
        } else {
            0
        };
        let why = if ps::status(st) != ps::LIVE {
            "is not held by this process".to_owned()
        } else if ps::pid(st) == crate::selfid::pid() {
            format!(
                "was acquired through another table handle of this process (process slot \
                 {slot}): release it through that handle"
            )
        } else {
            format!(
                "is not held by this process: process {} holds it (process slot {slot})",
                ps::pid(st)
            )
        };
        Error::NotOwner { lease, why }
    }

    /// `Err` for a request of `units` of `pool` that its config says can never be
    /// granted: none (`InvalidRequest`), more than a fixed capacity, or more than a
    /// `per_worker` pool holds with a worker in every process slot
    /// (`UnitsExceedCapacity`, as the acquire's). What a new tenant name is checked
    /// against before it claims a directory slot; the acquire itself checks against the
    /// segment's limits. A pool handle not of this table is `InvalidRequest`.
    pub(crate) fn never_granted(&self, pool: PoolId, units: u32) -> crate::error::Result<()> {
        if units == 0 {
            return Err(zero_units());
        }
        let Some(pc) = self.config().pools.get(pool.index()) else {
            return Err(self.bad_handles(pool.index(), 0));
        };
        match pc.per_worker {
            None if units > pc.capacity => Err(self.units_exceed(pool, units, pc.capacity)),
            Some(pw) if units > pw.most_tickets(self.seg.geometry().procs) => {
                // Reported with the capacity an acquire would see now, as its error.
                // Relaxed: a figure for the message, not an input to a decision.
                let live =
                    crate::layout::pair::lo(self.seg.pool(pool.index()).limits.load(Relaxed));
                Err(self.units_exceed(pool, units, live))
            }
            _ => Ok(()),
        }
    }

    /// `UnitsExceedCapacity` for `units` over capacity `cap`, saying whether it ever can
    /// be granted: never for a fixed capacity; for a `per_worker` pool, once more
    /// workers have registered, unless even a worker in every process slot is too few.
    #[cold]
    #[inline(never)]
    pub(crate) fn units_exceed(&self, pool: PoolId, units: u32, cap: u32) -> Error {
        let per_worker = self
            .config()
            .pools
            .get(pool.index())
            .and_then(|c| c.per_worker);
        let when = match per_worker {
            None => crate::error::NEVER.to_owned(),
            Some(pw) => {
                let most = pw.most_tickets(self.seg.geometry().procs);
                if units > most {
                    format!(
                        " for its live workers now, and at most {most} with every process \
                         slot a worker{}",
                        crate::error::NEVER
                    )
                } else {
                    " for its live workers now (a per_worker pool): it can be granted once \
                     more workers have registered"
                        .to_owned()
                }
            }
        };
        Error::UnitsExceedCapacity {
            pool: self.pool_name(pool).to_owned(),
            units: units as u64,
            capacity: cap as u64,
            when,
        }
    }

    /// A capacity no op word can count is garbage: the config's values go back (a
    /// `per_worker` pool's recomputed), so that the next call works; this one reports it.
    #[cold]
    #[inline(never)]
    pub(super) fn garbage_capacity(&self, p: usize, cap: u32) -> Error {
        crate::capacity::reset(&self.seg, self.config());
        Error::Corrupt(format!(
            "pool {p} has capacity {cap}, beyond the {} an op word counts",
            crate::layout::op_word::MAX_COUNT
        ))
    }

    /// After an error in an op of this thread: resolves the lease it left mid-op (`l`,
    /// or, for an acquire, every `ACQUIRING` lease of this thread in slot `slot`) as a
    /// reaper would, quarantining what cannot be finished, so that errors never use up
    /// this process's leases or leave a count raised; then, if the error was a broken
    /// invariant or a lease was quarantined, rebuilds pool `p`'s counters (`repair`),
    /// so that the pool heals at once instead of failing every later call.
    /// Returns `e`, for the caller to return. (Out of line: the fast paths stay as
    /// they were.) `p` is `usize::MAX` for a release: read from the lease.
    #[cold]
    #[inline(never)]
    pub(super) fn after_error(&self, slot: usize, p: usize, l: Option<usize>, e: Error) -> Error {
        let corrupt = matches!(e, Error::Corrupt(_));
        let geo = self.seg.geometry();
        let p = match l {
            Some(l) if p == usize::MAX => {
                // Acquire: the lease's fields were published by its state's stores.
                let s = self.seg.lease(l).state.load(Acquire);
                crate::ops::read_desc(self.seg.lease(l), crate::layout::lease_state::generation(s))
                    .map_or(usize::MAX, |d| d.pool as usize)
            }
            _ => p,
        };
        let tid = crate::selfid::tid();
        let mut out = Reaped::new(slot, crate::selfid::pid(), geo.pools);
        for k in geo.slot_leases(slot) {
            let lease = self.seg.lease(k);
            // Relaxed: our own leases; `resolve_lease` re-reads with Acquire.
            let st = crate::layout::lease_state::state(lease.state.load(Relaxed));
            let ours = match l {
                Some(l) => k == l,
                None => {
                    st == crate::layout::lease_state::ACQUIRING && lease.tid.load(Relaxed) == tid
                }
            };
            if ours {
                recovery::resolve_lease(&self.seg, k, &mut out);
            }
        }
        if (corrupt || out.quarantined > 0)
            && p < geo.pools
            && crate::repair::repair_pool(&self.seg, p, crate::repair::INLINE_BUDGET).is_ok()
        {
            crate::repair::free_quarantined_of(&self.seg, p);
        }
        crate::peers::announce(&self.seg, &[out]);
        e
    }
}

/// A request for no units (`InvalidRequest`).
#[cold]
pub(crate) fn zero_units() -> Error {
    Error::InvalidRequest("asked for 0 units".into())
}
