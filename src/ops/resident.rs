//! The resident record's part in the protocol (the leases of `evict` pools): written
//! `PENDING` when the acquire is published, `IDLE` once it is granted, closed by the
//! release (a revoked lease then gives back no pool unit: that unit is its revoker's),
//! and revoked by a transfer's pool step (`transfer`).
//!
//! The record word names the lease generation it describes, so a CAS that names a
//! word names one cycle of one lease: a revoker that read a word before its lease was
//! released and claimed again fails.
//!
//! Attribution (I1 of `ops`, for the transfer's pool step): a revoked word names its
//! revoker (lease and generation). While it does, "did the revoker's pool step happen?"
//! is answered by the word; the word is replaced only when the victim's slot is
//! published again, and whoever replaces it first records the step in the revoker's
//! lease ([`settle_revoker`]: `POOL_DONE`), if that acquire is still in progress.

use super::read_desc;
use crate::error::{Error, Result};
use crate::layout::{ResidentRec, lease_state as ls, residency, resident_word as rw};
use crate::region::Region;
use crate::sync::{Ordering::*, store_over_rmw64};

fn record<R: Region>(r: &R, l: usize) -> Result<&ResidentRec> {
    r.resident(l).ok_or_else(|| {
        Error::Corrupt(format!(
            "lease {l} is a resident, but the segment has no resident records"
        ))
    })
}

/// Writes lease `l`'s record for the acquire of generation `generation` being published
/// (the lease is `CLAIMED`: its owner's alone). The revoker a previous cycle's word
/// names is settled first.
#[cold]
#[inline(never)]
pub(crate) fn init<R: Region>(r: &R, l: usize, generation: u32, now: u64) {
    let Some(rec) = r.resident(l) else {
        debug_assert!(false, "a resident lease {l} without a record");
        return;
    };
    // Acquire: pairs with the revoker's AcqRel CAS, for the lease it names.
    let old = rec.word.load(Acquire);
    settle_revoker(r, l, old);
    // Relaxed: the owner's field, published by the word's Release store below.
    rec.last_call_ms.store(now, Relaxed);
    // Release: the record's fields happen before any reader that sees this word. A
    // plain store: the only RMWs that race it are CASes naming an older word (a
    // revoker's, a lagging close's), which fail.
    store_over_rmw64(&rec.word, rw::make(generation, rw::PENDING, 0), Release);
}

/// After lease `l` of `generation`, in pool `p`, is `HELD`: its resident becomes
/// evictable, and the pool's waiters are woken, as by a call ending
/// (`residents::end_call`): an acquire waiting for a resident to evict may have scanned
/// the residents while this one was still `PENDING` (which no scan takes), found
/// nothing and gone to sleep. One load of `waiters` when nobody waits. Unlike a call's
/// end, the wake does not ask whether the resident may be a victim: the grant may
/// have added its tenant to the active set, which lowers every share, and a spawn past
/// its share now may evict one of its own tenant's residents that was idle all along
/// (`tests/window_wakes.rs`, seed 14210, found a spawn left asleep so).
#[cold]
#[inline(never)]
pub(crate) fn granted<R: Region>(r: &R, p: usize, l: usize, generation: u32) {
    if let Some(rec) = r.resident(l) {
        // SeqCst, as `residents::end_call`'s CAS, the other write that makes a resident
        // idle: the victim scan reads these words with SeqCst, after its announcement
        // in `waiters`, which the wake below reads with SeqCst (the handshake of
        // `waiting`: either the scan sees this word or the wake sees the waiter). A
        // plain store: PENDING is revoked by nobody, so no RMW races it but failing
        // CASes.
        store_over_rmw64(&rec.word, rw::make(generation, rw::IDLE, 0), SeqCst);
        #[cfg(not(loom))]
        crate::waiting::released(r.pool(p), 1);
        #[cfg(loom)]
        let _ = p;
    }
}

/// Closes lease `l`'s record at its release (generation `generation`): no revocation
/// can land after it. Returns whether the lease was revoked (its pool unit is then the
/// revoker's, and the release must not give it back). Idempotent: the release's driver
/// may close again after a crash.
#[cold]
#[inline(never)]
pub(crate) fn close<R: Region>(r: &R, l: usize, generation: u32) -> Result<bool> {
    let rec = record(r, l)?;
    loop {
        // Acquire: pairs with the revoker's AcqRel CAS.
        let w = rec.word.load(Acquire);
        if rw::generation(w) != generation & (rw::GEN_MASK as u32) {
            return Err(Error::Corrupt(format!(
                "lease {l}/{generation}: its resident record describes generation {}",
                rw::generation(w)
            )));
        }
        match rw::state(w) {
            rw::REVOKED => return Ok(true),
            rw::CLOSED => return Ok(false),
            rw::PENDING | rw::IDLE | rw::IN_CALL => {
                // AcqRel: decides against a racing revoker, whose CAS names `w` too.
                if rec
                    .word
                    .compare_exchange(w, rw::make(generation, rw::CLOSED, 0), AcqRel, Acquire)
                    .is_ok()
                {
                    return Ok(false);
                }
            }
            s => {
                return Err(Error::Corrupt(format!(
                    "lease {l}: resident record in state {s}"
                )));
            }
        }
    }
}

/// The revocation: lease `victim` of generation `vgen`, idle, becomes revoked by lease
/// `by` of generation `by_gen`. Exactly one of this and a racing `begin_call` (or
/// close) wins. Returns whether it did.
pub(crate) fn revoke<R: Region>(r: &R, victim: usize, vgen: u32, by: usize, by_gen: u32) -> bool {
    let Some(rec) = r.resident(victim) else {
        return false;
    };
    let idle = rw::make(vgen, rw::IDLE, 0);
    let revoked = rw::make(vgen, rw::REVOKED, rw::revoker(by, by_gen));
    // AcqRel: Release so that whoever sees the revocation sees our published lease (a
    // settler reads its descriptor); Acquire for the victim's fields of this cycle.
    rec.word
        .compare_exchange(idle, revoked, AcqRel, Relaxed)
        .is_ok()
}

/// Whether lease `victim`'s record (of generation `vgen`) says it was revoked by lease
/// `by` of generation `by_gen`: the transfer's pool step is done while it does (I1).
pub(crate) fn revoked_by<R: Region>(r: &R, victim: usize, vgen: u32, by: usize, by_gen: u32) -> bool {
    r.resident(victim).is_some_and(|rec| {
        // Acquire: pairs with the revoker's CAS (read before the revoker's flags).
        let w = rec.word.load(Acquire);
        rw::generation(w) == vgen & (rw::GEN_MASK as u32)
            && rw::state(w) == rw::REVOKED
            && rw::revoker_of(rw::arg(w)) == Some((by, by_gen & 0xFFFF))
    })
}

/// Before lease `l`'s record word `old` is replaced: if it names a revoker whose
/// acquire is still in progress without its pool step recorded, records it
/// (`POOL_DONE`), as `settle` does for a tag.
fn settle_revoker<R: Region>(r: &R, l: usize, old: u64) {
    if rw::state(old) != rw::REVOKED {
        return;
    }
    let Some((a, gen16)) = rw::revoker_of(rw::arg(old)) else {
        return;
    };
    if a >= r.geometry().leases() {
        return; // garbage: no lease is mid-op under it
    }
    let lease = r.lease(a);
    loop {
        // Acquire: pairs with the publishing Release store, for the descriptor.
        let s = lease.state.load(Acquire);
        if ls::state(s) != ls::ACQUIRING
            || ls::generation(s) & 0xFFFF != gen16
            || s & ls::POOL_DONE != 0
        {
            return; // finished, or recorded already: the common case
        }
        // In progress: make sure this cycle is the transfer whose victim we are.
        let ours = read_desc(lease, ls::generation(s)).is_some_and(|d| {
            residency::victim(d.inputs[2])
                == Some((l, rw::generation(old)))
        });
        if !ours {
            return;
        }
        // AcqRel: the flag happens before our store replaces the word (I1).
        if lease
            .state
            .compare_exchange(s, s | ls::POOL_DONE, AcqRel, Relaxed)
            .is_ok()
        {
            return;
        }
    }
}
