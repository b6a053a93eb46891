//! A transfer: the acquire of an `evict` pool that takes a victim resident's permit
//! instead of a free unit, so the pool word never moves and never exceeds capacity.
//!
//! 1. claim a lease; publish it `ACQUIRING` with the victim in its residency word;
//! 2. CAS the tenant's held word `h -> h + u` with the acquire's tag (I2: held
//!    overstates; the victim's tenant keeps counting its unit until it releases);
//! 3. the pool step: revoke the victim (its record `IDLE -> REVOKED` naming us), which
//!    a racing `begin_call` or release of the victim fails, or makes fail; a lost race
//!    backs out step 2 as a refused acquire does;
//! 4. count the eviction in the pool (`evictions`, which `repair` watches), store
//!    `HELD`, make our own resident idle, and wake the victim's owner.
//!
//! The victim's release then closes its record, finds it revoked, and gives back only
//! its tenant's held unit: the pool unit is ours, and our release gives it back.
//! A reaper of an interrupted transfer judges its pool step done by the victim's word
//! naming it, or by `POOL_DONE` once the word is gone (`resident::settle_revoker`).

use super::acquire::{add_to, back_out};
use super::{Desc, Word, crash_point, publish_acquire, spare_or_claim};
use crate::error::Result;
use crate::layout::{lease_state as ls, op_word, residency};
use crate::region::Region;
use crate::sync::{Ordering::*, store_over_rmw};

/// What a transfer came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transferred {
    /// Granted: the victim is revoked and its permit is ours.
    Granted,
    /// The victim was no longer evictable (a call began, it was released, or another
    /// asker revoked it first); nothing changed but our lease, freed again.
    Lost,
}

/// Runs a transfer for `d` (its generation is filled in; its residency word is set
/// here) from victim lease `victim` of generation `vgen`, by a thread of slot `slot`.
/// Returns the lease claimed (granted: `HELD`; lost: `FREE` again), the descriptor and
/// the outcome.
#[allow(clippy::too_many_arguments)]
pub(crate) fn transfer<R: Region>(
    r: &R,
    slot: usize,
    hint: usize,
    mut d: Desc,
    victim: (usize, u32),
    tid: u32,
    now: u64,
    hold_ms: u64,
    spare: Option<(usize, u32)>,
) -> Result<(usize, Desc, Transferred)> {
    debug_assert!(victim.0 < r.geometry().leases());
    let p = d.pool as usize;
    let (l, generation) = spare_or_claim(r, slot, hint, spare)?;
    crash_point("acquire.claimed")?;
    d.generation = generation;
    d.inputs[2] = residency::transfer(victim.0, victim.1);
    publish_acquire(r, l, &d, tid, now, hold_ms, false);
    crash_point("acquire.published")?;
    let tag = op_word::make_tag(l, false, generation);
    let held = &r.tenant_pool(p, d.tenant as usize).held;
    add_to(r, l, &d, held, tag, Word::Held(d.tenant))?;
    crash_point("evict.held_applied")?;
    if !super::resident::revoke(r, victim.0, victim.1, l, generation) {
        back_out(r, l, &d, false)?;
        return Ok((l, d, Transferred::Lost));
    }
    crash_point("evict.revoked")?;
    // SeqCst: `repair` reads it before and after its scan; a transfer it did not see
    // in flight has bumped it before becoming HELD.
    r.pool(p).evictions.fetch_add(1, SeqCst);
    // Release: the grant's effects happen before any later release of the lease. A
    // plain store, as in `acquire`: a settler's flag CAS names ACQUIRING.
    store_over_rmw(&r.lease(l).state, ls::make(generation, ls::HELD));
    super::resident::granted(r, p, l, generation);
    if let Some(rec) = r.resident(victim.0) {
        // Release: the owner that wakes sees the revocation (the CAS before it).
        rec.wake.fetch_add(1, Release);
        #[cfg(not(loom))]
        crate::waiting::wake_word(rec.wake.as_ptr(), u32::MAX);
    }
    Ok((l, d, Transferred::Granted))
}
