//! Returning a dead process's permits, exactly.
//!
//! A reaper takes a dead process's slot (`LIVE` -> `REAPING`, naming itself), then
//! walks that process's lease range. By invariant (I1) of `ops`, once any op pending
//! on the lease's pool is settled, the lease state alone says what is counted:
//!
//! | state found     | meaning                                   | the reaper            |
//! |-----------------|-------------------------------------------|-----------------------|
//! | `FREE`          | nothing                                   | -                     |
//! | `CLAIMED`       | private, counted nowhere                   | frees it              |
//! | `PENDING_ACQ`   | installed: finish it; else counted nowhere | helps, or frees it    |
//! | `REFUSED`, `RELEASED` | counted nowhere                     | frees it              |
//! | `HELD`          | counted once its acquire op is cleared    | finishes it, releases |
//! | `PENDING_REL`   | counted until its op completes            | finishes the release  |
//!
//! Only one reaper works on a slot at a time (the `REAPING` CAS), which is what makes
//! "not installed yet, so install it" safe for `PENDING_REL`: the owner is dead and no
//! other reaper can install the same release.

use crate::error::{Error, Result};
use crate::layout::{lease_state as ls, pair, pool_word as pw, proc_state as ps};
use crate::ops;
use crate::region::Region;
use crate::sync::Ordering::*;

/// What reaping one process slot gave back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reaped {
    pub slot: usize,
    pub pid: u32,
    /// Leases that were held and are now released.
    pub leases_released: usize,
    /// Units returned, per pool index.
    pub units_returned: Vec<u64>,
    /// Acquires in flight that were finished or dropped.
    pub in_flight: usize,
}

/// Reaps slot `s` if its process is dead by `dead(pid, start)`. `reaper` is the
/// reaper's pid; a slot already `REAPING` by a dead reaper is taken over.
pub fn reap_slot<R: Region>(
    r: &R,
    s: usize,
    reaper: u32,
    dead: &dyn Fn(u32, u64) -> bool,
) -> Result<Option<Reaped>> {
    let rec = r.proc_slot(s);
    // Acquire: pairs with the Release store of LIVE, so pid and start time (Relaxed)
    // are the registrant's.
    let st = rec.state.load(Acquire);
    let pid = rec.pid.load(Relaxed);
    let start = rec.start_time.load(Relaxed);
    let take = match ps::status(st) {
        ps::LIVE => crate::liveness::live_slot_dead(r, s, ps::pid(st), start, dead),
        ps::CLAIMING => crate::liveness::proc_info(ps::pid(st)).is_none(),
        ps::REAPING => ps::pid(st) != reaper && crate::liveness::proc_info(ps::pid(st)).is_none(),
        _ => false,
    };
    // Acquire: the dead process's last writes are visible to our walk.
    if !take
        || rec
            .state
            .compare_exchange(st, ps::make(ps::REAPING, reaper), Acquire, Relaxed)
            .is_err()
    {
        return Ok(None);
    }
    empty_slot(r, s, pid).map(Some)
}

/// Gives back slot `s` of the live process `pid`, which is the caller's own: whatever
/// its leases still hold is released, and the slot is freed. `None` if the slot is not
/// `LIVE` for `pid`.
pub fn retire_slot<R: Region>(r: &R, s: usize, pid: u32) -> Result<Option<Reaped>> {
    let rec = r.proc_slot(s);
    let live = ps::make(ps::LIVE, pid);
    // Acquire: as for a reaper (the slot's leases are ours, but may have been helped).
    if rec
        .state
        .compare_exchange(live, ps::make(ps::REAPING, pid), Acquire, Relaxed)
        .is_err()
    {
        return Ok(None);
    }
    empty_slot(r, s, pid).map(Some)
}

/// Walks the lease range of slot `s`, taken (`REAPING`) by the caller, then frees it.
fn empty_slot<R: Region>(r: &R, s: usize, pid: u32) -> Result<Reaped> {
    let rec = r.proc_slot(s);
    let geo = *r.geometry();
    let mut out = Reaped {
        slot: s,
        pid,
        units_returned: vec![0; geo.pools],
        ..Reaped::default()
    };
    for l in s * geo.leases_per_proc..(s + 1) * geo.leases_per_proc {
        recover_lease(r, l, &mut out)?;
    }
    crate::tenants::clear_writer(r, s);
    // Relaxed: the slot is ours while REAPING; the Release store of FREE publishes it.
    rec.pid.store(0, Relaxed);
    rec.start_time.store(0, Relaxed);
    // Release: everything above happens before the slot is claimed again.
    rec.state.store(ps::make(ps::FREE, 0), Release);
    Ok(out)
}

/// Brings one lease of a dead owner to `FREE`, giving back what it held.
fn recover_lease<R: Region>(r: &R, l: usize, out: &mut Reaped) -> Result<()> {
    let lease = r.lease(l);
    loop {
        // Acquire: the state publishes the lease's fields (seqlock writer side in ops).
        let sw = lease.state.load(Acquire);
        let (generation, state) = (ls::generation(sw), ls::state(sw));
        if matches!(state, ls::FREE | ls::CLAIMED) {
            // FREE: nothing. CLAIMED: private, never published, counted nowhere.
            if state == ls::CLAIMED {
                ops::free_lease(lease, generation, state);
            }
            return Ok(());
        }
        // Published: first finish any op of this lease still pending in its pool (the
        // owner may have died anywhere between install and clear). By (I1) the state
        // alone then says what is counted, and the slot may be freed.
        let p = checked_pool(r, l)?;
        let w = r.pool(p).word.load(Acquire);
        if is_ours(w, l, generation) {
            ops::complete(r, p, w, None)?;
            continue;
        }
        match state {
            ls::REFUSED | ls::RELEASED => {
                ops::free_lease(lease, generation, state);
            }
            ls::HELD => {
                let d = ops::release(r, l, generation, None)?;
                out.leases_released += 1;
                out.units_returned[d.pool as usize] += d.units as u64;
            }
            ls::PENDING_ACQ => {
                // Not pending now and still undecided: never installed (I1). Re-read
                // first: a helper may have just finished an install we did not see.
                if lease.state.load(Acquire) == sw {
                    ops::free_lease(lease, generation, state);
                    out.in_flight += 1;
                }
            }
            ls::PENDING_REL => {
                let d = ops::finish_release(r, l, generation, None)?;
                out.leases_released += 1;
                out.units_returned[d.pool as usize] += d.units as u64;
            }
            _ => return Err(Error::Corrupt(format!("lease {l} has state word {sw:#x}"))),
        }
    }
}

fn checked_pool<R: Region>(r: &R, l: usize) -> Result<usize> {
    // Relaxed: read after the Acquire load of the lease's state in `recover_lease`.
    let p = pair::lo(r.lease(l).pool_tenant.load(Relaxed)) as usize;
    if p >= r.geometry().pools {
        return Err(Error::Corrupt(format!("lease {l} names pool {p}")));
    }
    Ok(p)
}

/// Whether pool word `w` has an op (of either kind) of lease `l`'s cycle `generation` pending.
fn is_ours(w: u64, l: usize, generation: u32) -> bool {
    pw::pending(w) == Some(l) && pw::generation(w) == generation & pw::GEN_MASK as u32
}
