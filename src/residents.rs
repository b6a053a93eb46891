//! Residents (seed 000): the leases of an `evict` pool, which a full pool revokes
//! instead of refusing.
//!
//! A resident's record (`layout::ResidentRec`) says whether it is in a call and when it
//! was last called. When the rule refuses an acquire of an `evict` pool, the asker
//! revokes a victim and takes its permit (`ops::transfer`):
//! - an asker at or past its share (refused `over_share`) takes its own idlest resident;
//! - an asker under it (refused `pool_full`) takes the idlest resident of the tenant
//!   furthest past its share (`held - share`, exactly: `held * W - max(FLOOR * W,
//!   POOL * w)`), or of the next one if that tenant's are all in a call.
//!
//! "Idlest" is the oldest last call; a resident in a call is never a victim, and one
//! must hold as many units as asked. A revoked resident's owner learns it from its next
//! [`begin_call`] (`Error::Revoked`) or by waiting on the record's futex, puts the object
//! to sleep and releases the lease. Nothing here is on the path of a pool that does not
//! evict.

use crate::error::{Error, Result};
use crate::layout::{ResidentRec, lease_state as ls, pair, residency, resident_word as rw};
use crate::ops::read_desc;
use crate::policy::fair_share::{Frozen, under_share};
use crate::region::Region;
use crate::sync::Ordering::{self, *};

/// The record of lease `l` of generation `generation`, checked to be a resident of
/// this cycle, with its pool and tenant.
fn resident_of<'r, R: Region>(
    r: &'r R,
    l: usize,
    generation: u32,
    id: &str,
) -> Result<(&'r ResidentRec, u32, u32)> {
    let lease = r.lease(l);
    // Acquire: publishes the lease's fields (the seqlock of `ops`).
    let s = lease.state.load(Acquire);
    if ls::generation(s) != generation || ls::state(s) != ls::HELD {
        return Err(Error::AlreadyReleased { lease: id.into() });
    }
    let d = read_desc(lease, generation).ok_or_else(|| Error::AlreadyReleased { lease: id.into() })?;
    if !residency::is_resident(d.inputs[2]) {
        return Err(Error::NotResident {
            lease: id.into(),
            why: "its pool does not evict, so it has no calls to track",
        });
    }
    let rec = r.resident(l).ok_or_else(|| {
        Error::Corrupt(format!("lease {id} is a resident without a resident record"))
    })?;
    Ok((rec, d.pool, d.tenant))
}

/// Starts a call on resident lease `l` (generation `generation`) at `now`: while any
/// call is in progress it cannot be revoked. Fails `Revoked` if it already was.
pub fn begin_call<R: Region>(r: &R, l: usize, generation: u32, now: u64, id: &str) -> Result<()> {
    let (rec, ..) = resident_of(r, l, generation, id)?;
    loop {
        // Acquire: pairs with a revoker's CAS.
        let w = rec.word.load(Acquire);
        let next = match (rw::generation(w) == generation & rw::GEN_MASK as u32, rw::state(w)) {
            (true, rw::IDLE) => rw::make(generation, rw::IN_CALL, 1),
            (true, rw::IN_CALL) => {
                rw::make(generation, rw::IN_CALL, rw::arg(w).checked_add(1).ok_or_else(|| {
                    Error::InvalidRequest(format!("lease {id}: 2^32 calls in progress"))
                })?)
            }
            (true, rw::REVOKED) => return Err(Error::Revoked { lease: id.into() }),
            _ => return Err(Error::AlreadyReleased { lease: id.into() }),
        };
        // Relaxed: the owner's field, for the victim choice (a heuristic).
        rec.last_call_ms.store(now, Relaxed);
        // AcqRel: exactly one of this and a revoker's CAS (both name `w`) wins.
        if rec.word.compare_exchange(w, next, AcqRel, Acquire).is_ok() {
            // Relaxed: a statistic.
            rec.calls.fetch_add(1, Relaxed);
            return Ok(());
        }
    }
}

/// Ends a call on resident lease `l` at `now`. Returns the pool and the tenant (as the
/// lease's record names them: unchecked), and whether the resident came idle (its last
/// call ended: waiters may evict it now, [`idle_is_evictable`]).
pub fn end_call<R: Region>(r: &R, l: usize, generation: u32, now: u64, id: &str) -> Result<(u32, u32, bool)> {
    let (rec, pool, tenant) = resident_of(r, l, generation, id)?;
    loop {
        // Acquire: as in `begin_call`.
        let w = rec.word.load(Acquire);
        if rw::generation(w) != generation & rw::GEN_MASK as u32 || rw::state(w) != rw::IN_CALL {
            return Err(Error::NotResident {
                lease: id.into(),
                why: "no call is in progress on it (end_call without begin_call)",
            });
        }
        let n = rw::arg(w);
        let next = if n <= 1 {
            rw::make(generation, rw::IDLE, 0)
        } else {
            rw::make(generation, rw::IN_CALL, n - 1)
        };
        // Relaxed: as in `begin_call`.
        rec.last_call_ms.store(now, Relaxed);
        // SeqCst: the ender's half of the waiter handshake (a waiter announced in the
        // pool's `waiters` then sees this resident idle, or is woken by us).
        if rec.word.compare_exchange(w, next, SeqCst, Acquire).is_ok() {
            return Ok((pool, tenant, n <= 1));
        }
    }
}

/// Whether an idle resident of tenant `t` in pool `p` may be a waiting spawn's victim:
/// its tenant is at or past its share now ([`choose`]: a spawn past its share takes
/// only its own tenant's residents, and one under it only those of a tenant at or past
/// its share, so a resident of a tenant under its share is nobody's). `p` is checked;
/// a `t` beyond the directory (a record written from outside) answers yes, so that
/// the waiters look for themselves.
pub fn idle_is_evictable<R: Region>(r: &R, p: usize, t: usize) -> bool {
    debug_assert!(p < r.geometry().pools);
    t >= r.geometry().tenants || !crate::admission::under_share_now(r, p, t)
}

/// What a resident's record says of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Idle,
    InCall,
    Revoked,
}

/// The status of resident lease `l` of generation `generation`.
pub fn status<R: Region>(r: &R, l: usize, generation: u32, id: &str) -> Result<Status> {
    let (rec, ..) = resident_of(r, l, generation, id)?;
    // Acquire: as in `begin_call`.
    let w = rec.word.load(Acquire);
    Ok(match rw::state(w) {
        rw::IN_CALL => Status::InCall,
        rw::REVOKED => Status::Revoked,
        _ => Status::Idle,
    })
}

/// The record's futex word and its value now, for a wait on a revocation.
pub fn wake_word<R: Region>(r: &R, l: usize) -> Option<(&crate::sync::AtomicU32, u32)> {
    // Acquire: pairs with the revoker's Release bump, so a revocation before the bump
    // we read is seen by the status check that follows.
    r.resident(l).map(|rec| (&rec.wake, rec.wake.load(Acquire)))
}

/// The reason code of an `evict` pool's refusal with nothing evictable.
pub const TOO_MANY_RESIDENTS: u32 = 10;

/// A victim chosen for an asker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Victim {
    pub lease: usize,
    pub generation: u32,
    pub tenant: usize,
}

/// Chooses the victim of an acquire of `units` by tenant `t` of pool `p`, refused by
/// the rule (`over` when refused at or past its share), judged with its frozen inputs
/// `f` (capacity, floor, active weight). `None`: nothing is evictable.
pub fn choose<R: Region>(r: &R, p: usize, t: usize, units: u32, over: bool, f: &Frozen) -> Option<Victim> {
    let geo = r.geometry();
    // The idlest evictable resident of each tenant: (last call, lease, generation).
    let mut best: Vec<(usize, u64, usize, u32)> = Vec::new();
    for l in live_slots_leases(r) {
        // SeqCst: the waiter's half of the handshake with `end_call` (module `waiting`:
        // the announcement comes before this look).
        let Some((rec, rw::IDLE, g)) = held_resident(r, l, SeqCst) else {
            continue;
        };
        let Some(d) = read_desc(r.lease(l), g) else { continue };
        if d.pool as usize != p || d.units != units || (d.tenant as usize) >= geo.tenants {
            continue;
        }
        let vt = d.tenant as usize;
        if over && vt != t {
            continue;
        }
        // Relaxed: the owner's field, a heuristic (the revocation CAS is what counts).
        let last = rec.last_call_ms.load(Relaxed);
        match best.iter_mut().find(|b| b.0 == vt) {
            Some(b) if (last, l) < (b.1, b.2) => *b = (vt, last, l, g),
            Some(_) => {}
            None => best.push((vt, last, l, g)),
        }
    }
    if over {
        return best.first().map(|b| Victim {
            lease: b.2,
            generation: b.3,
            tenant: b.0,
        });
    }
    // Under its share: the tenant furthest past its share, among those at or past it.
    let total = (f.active_weight as i128).max(1);
    let mut pick: Option<(i128, u64, Victim)> = None;
    for &(vt, last, l, g) in &best {
        if vt == t {
            continue;
        }
        // Relaxed: a priority input, as the active weight (see `admission`).
        let held = crate::layout::held_word::held(r.tenant_pool(p, vt).held.load(Relaxed));
        let weight = r.tenant(vt).weight.load(Relaxed).max(1);
        let theirs = Frozen { weight, ..*f };
        if under_share(&theirs, held) {
            continue;
        }
        let excess = held as i128 * total
            - (f.floor as i128 * total).max(f.cap as i128 * weight as i128);
        let better = match pick {
            None => true,
            Some((e, pl, _)) => excess > e || (excess == e && last < pl),
        };
        if better {
            let v = Victim {
                lease: l,
                generation: g,
                tenant: vt,
            };
            pick = Some((excess, last, v));
        }
    }
    pick.map(|(_, _, v)| v)
}

/// The leases that may hold residents: those of every process slot not `FREE` (a
/// process registers before it acquires, and its slot is freed only once its leases
/// are), in order. A victim scan of these reads the lease records (64 by default) of
/// each process slot in use, not those of all `max_processes` slots.
///
/// Each slot's state is loaded with SeqCst, the waiter's half of the handshake with a
/// registration (whose claim CAS is SeqCst, `liveness::register`): a spawn announced in
/// the pool's `waiters` that reads a slot `FREE` was announced before the slot was
/// claimed, so the grant of that process's first resident (SeqCst, after its claim)
/// reads the announcement and wakes it (`ops::resident::granted`).
fn live_slots_leases<R: Region>(r: &R) -> impl Iterator<Item = usize> + '_ {
    let geo = r.geometry();
    (0..geo.procs)
        .filter(move |&s| {
            crate::layout::proc_state::status(r.proc_slot(s).state.load(SeqCst))
                != crate::layout::proc_state::FREE
        })
        .flat_map(move |s| geo.slot_leases(s))
        .take_while(move |&l| l < geo.residents)
}

/// Lease `l`'s resident record, the resident's state and the generation, when the
/// resident is idle, in a call or revoked and its lease is `HELD` in the cycle the
/// record describes (else `None`, and the lease state is not read). The word is loaded
/// with `ord` (the victim scan's SeqCst, for the waiter handshake), then the lease state
/// with Acquire (it publishes the descriptor: the seqlock of `ops`).
pub(crate) fn held_resident<R: Region>(r: &R, l: usize, ord: Ordering) -> Option<(&ResidentRec, u32, u32)> {
    let rec = r.resident(l)?;
    let w = rec.word.load(ord);
    let (st, g) = (rw::state(w), rw::generation(w));
    if !matches!(st, rw::IDLE | rw::IN_CALL | rw::REVOKED) {
        return None;
    }
    let s = r.lease(l).state.load(Acquire);
    (ls::state(s) == ls::HELD && ls::generation(s) == g).then_some((rec, st, g))
}

/// The revoked, not yet released, resident leases of process slot `slot`:
/// `(lease index, generation)`.
pub fn revoked_of_slot<R: Region>(r: &R, slot: usize) -> Vec<(usize, u32)> {
    let lpp = r.geometry().leases_per_proc;
    (slot * lpp..(slot + 1) * lpp)
        .filter_map(|l| match held_resident(r, l, Acquire) {
            Some((_, rw::REVOKED, g)) => Some((l, g)),
            _ => None,
        })
        .collect()
}

/// Counts of pool `p`'s residents for the snapshot: (idle, in a call, revoked and not
/// yet released).
pub fn counts<R: Region>(r: &R, p: usize) -> (u32, u32, u32) {
    let mut out = (0, 0, 0);
    for l in 0..r.geometry().residents {
        // Acquire / Relaxed: a report of words each true at some instant.
        let Some((_, st, _)) = held_resident(r, l, Acquire) else {
            continue;
        };
        if pair::lo(r.lease(l).pool_tenant.load(Relaxed)) as usize != p {
            continue;
        }
        match st {
            rw::IDLE => out.0 += 1,
            rw::IN_CALL => out.1 += 1,
            _ => out.2 += 1,
        }
    }
    out
}
