//! The operation protocol: how one acquire or release changes a pool's counters so that
//! a process killed between any two of its steps leaves a state that others can finish.
//!
//! Each pool's `word` ([`pool_word`]) holds `in_use` and at most one *pending op*: the
//! index, kind and generation of the lease whose acquire or release is under way. An op
//! takes effect in four steps, each of which any process may perform (helping), so none
//! of them is a lock:
//!
//! 1. **install**: CAS the word from `(x, idle)` to `(x, pending op)`. From here until
//!    step 4 no other op on this pool can start, so the tenant's held word can change
//!    only through this op.
//! 2. **decide** (acquires): the fair-share rule on `x`, the tenant's held units and the
//!    inputs the initiator froze in the lease; the outcome is CASed into the lease state
//!    (`PENDING_ACQ` -> `HELD` | `REFUSED`). Every helper computes the same outcome.
//! 3. **apply**: CAS the tenant's held word by `±units`, tagged with `(lease, kind)`; a
//!    helper that finds the tag knows the op was applied (idempotence). Releases then
//!    CAS the lease `PENDING_REL` -> `RELEASED`.
//! 4. **clear**: CAS the word from `(x, pending op)` to `(x ± units, idle)`.
//!
//! Invariants (cited as (I1)... below):
//! 1. A lease's units are counted in `in_use` and its tenant's `held` exactly when its
//!    state is `HELD` or `PENDING_REL`, or it is `RELEASED` while its release op is still
//!    pending, or it is `HELD` while its acquire op is still pending *and applied*.
//!    Outside a pending op, the state alone tells whether it is counted.
//! 2. A lease's descriptor fields change only while it is `CLAIMED`, and its state word
//!    carries the claim generation, so a CAS that names a state names one cycle.
//! 3. A tenant's held word in pool `p` changes only in step 3 of an op pending in `p`.
//!    Hence no stale tag can match: the last op applied to that word before an acquire
//!    of lease `L` is never `(L, acquire)` (that acquire was followed by its release),
//!    and before a release of `L` it is never `(L, release)`.
//!
//! Memory orderings. The one synchronizing pair per op is the install CAS (Release,
//! publishing the descriptor written while `CLAIMED`) with every helper's Acquire load
//! of the word. The lease state and held words use Acquire/Release so that a reaper that
//! reads a lease without the pool word still sees the fields behind it. Descriptor
//! fields are read under a seqlock on the state word's generation (Acquire load, Relaxed
//! fields, Acquire fence, Relaxed re-load), matching the claimant's Release fence.

use crate::admission::{Decision, decide};
use crate::error::{Error, Result};
use crate::layout::{LeaseRec, held_word, lease_state as ls, pair, pool_word as pw};
use crate::region::Region;
use crate::sync::{Backoff, Ordering::*, fence};

/// The decision inputs of an acquire, frozen by its initiator in the lease record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Desc {
    pub generation: u32,
    pub pool: u32,
    pub tenant: u32,
    pub units: u32,
    pub cap: u32,
    pub floor: u32,
    pub weight: u32,
    pub active_weight: u64,
}

/// Every labelled step between two atomic steps of acquire, release and registration.
pub const CRASH_LABELS: &[&str] = &[
    "acquire.claimed",
    "acquire.before_install",
    "acquire.installed",
    "complete.decided",
    "apply.before_cas",
    "complete.before_clear",
    "release.published",
    "release.installed",
    "register.claimed",
    "register.live",
];

/// Labels a point between two atomic steps. The `crash-points` feature lets a test kill
/// the process there (see `crash.rs`); under loom a model thread can stop there, which
/// is an `Err` that every caller passes straight up, taking no further step (see
/// `loom_crash.rs`). Otherwise it compiles to nothing.
#[inline(always)]
pub(crate) fn crash_point(_label: &'static str) -> Result<()> {
    #[cfg(feature = "crash-points")]
    crate::crash::hit(_label);
    #[cfg(loom)]
    crate::loom_crash::hit(_label)?;
    Ok(())
}

/// Claims a free lease in process slot `slot`'s range, bumping its generation.
/// Returns `(index, generation)`.
pub(crate) fn claim_lease<R: Region>(r: &R, slot: usize, hint: usize) -> Result<(usize, u32)> {
    let geo = r.geometry();
    debug_assert!(slot < geo.procs);
    let n = geo.leases_per_proc;
    for i in 0..n {
        let l = slot * n + (hint + i) % n;
        let lease = r.lease(l);
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

/// Writes the descriptor of a claimed lease and publishes it as `PENDING_ACQ`.
pub(crate) fn publish_acquire(lease: &LeaseRec, d: &Desc, tid: u32, now: u64, hold_ms: u64) {
    debug_assert_eq!(
        lease.state.load(Relaxed),
        ls::make(d.generation, ls::CLAIMED),
        "publish_acquire on a lease this cycle does not own"
    );
    lease.units.store(d.units, Relaxed);
    lease
        .pool_tenant
        .store(pair::make(d.pool, d.tenant), Relaxed);
    lease.limits.store(pair::make(d.cap, d.floor), Relaxed);
    let active = d.active_weight.min(u32::MAX as u64) as u32;
    lease.weights.store(pair::make(d.weight, active), Relaxed);
    lease.granted_ms.store(now, Relaxed);
    lease.hold_ms.store(hold_ms, Relaxed);
    lease.tid.store(tid, Relaxed);
    // Release: a reaper that Acquire-loads PENDING_ACQ sees the fields.
    lease
        .state
        .store(ls::make(d.generation, ls::PENDING_ACQ), Release);
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

/// Reads a lease's descriptor if its generation's low bits are `gen15` (a pool word's)
/// or, with `full`, if its generation is exactly `full`. `None` if the slot moved on.
pub(crate) fn read_desc(lease: &LeaseRec, gen15: u32, full: Option<u32>) -> Option<Desc> {
    let s1 = lease.state.load(Acquire);
    let g = ls::generation(s1);
    if g & pw::GEN_MASK as u32 != gen15 || full.is_some_and(|f| f != g) {
        return None;
    }
    let (pt, limits, weights) = (
        lease.pool_tenant.load(Relaxed),
        lease.limits.load(Relaxed),
        lease.weights.load(Relaxed),
    );
    let d = Desc {
        generation: g,
        pool: pair::lo(pt),
        tenant: pair::hi(pt),
        units: lease.units.load(Relaxed),
        cap: pair::lo(limits),
        floor: pair::hi(limits),
        weight: pair::lo(weights),
        active_weight: pair::hi(weights) as u64,
    };
    // Acquire fence: if any field above came from a later cycle, the claim CAS of that
    // cycle is visible to the re-load below (pairs with the fence in `claim_lease`).
    // The re-load itself is Acquire too: a caller that finds the slot moved on then
    // judges the pool word (`still()`) after the owner's step that moved it, so it
    // cannot read the old word and report a live lease as corrupt (found by loom).
    fence(Acquire);
    let s2 = lease.state.load(Acquire);
    (ls::generation(s2) == g && ls::state(s2) != ls::CLAIMED).then_some(d)
}

/// What an acquire came to, with the numbers its refusal explains itself by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcqOutcome {
    Granted,
    Refused {
        in_use: u32,
        held: u32,
        decision: Decision,
    },
}

/// Runs a published acquire (`PENDING_ACQ`) to its outcome. On refusal the lease is
/// left `PENDING_ACQ` and never installed; the caller frees it. A retry inside bumps
/// `d.generation`.
pub(crate) fn acquire<R: Region>(r: &R, l: usize, d: &mut Desc) -> Result<AcqOutcome> {
    let p = d.pool as usize;
    let pool = r.pool(p);
    let tp = r.tenant_pool(p, d.tenant as usize);
    let lease = r.lease(l);
    let backoff = Backoff::new();
    loop {
        let w = pool.word.load(Acquire);
        if !pw::is_idle(w) {
            complete(r, p, w, None)?;
            continue;
        }
        let x = pw::in_use(w);
        let tw = tp.held.load(Acquire);
        // Re-load: `tw` was read while no op was pending, so the pair is a snapshot
        // (modulo ABA, which the decision under serialization in `complete` corrects).
        if pool.word.load(Acquire) != w {
            backoff.snooze();
            continue;
        }
        let decision = decide(x, held_word::held(tw), &*d);
        if decision != Decision::Admit {
            return Ok(AcqOutcome::Refused {
                in_use: x,
                held: held_word::held(tw),
                decision,
            });
        }
        let nw = pw::with_pending(x, l, false, d.generation);
        crash_point("acquire.before_install")?;
        // AcqRel: Release publishes the descriptor to helpers (see module docs);
        // Acquire orders our later reads after the previous op's clear.
        if pool.word.compare_exchange(w, nw, AcqRel, Acquire).is_err() {
            backoff.snooze();
            continue;
        }
        crash_point("acquire.installed")?;
        complete(r, p, nw, Some(&*d))?;
        let sw = lease.state.load(Acquire);
        match ls::state(sw) {
            ls::HELD if ls::generation(sw) == d.generation => return Ok(AcqOutcome::Granted),
            ls::REFUSED if ls::generation(sw) == d.generation => {
                // Refused under serialization although the snapshot admitted (an ABA
                // on the snapshot). Retry under a new generation: a helper of the first
                // attempt that still holds REFUSED for this generation must never match
                // the retry's pool word, or its clear would erase the retry's grant.
                let next = ls::make(d.generation.wrapping_add(1), ls::CLAIMED);
                // AcqRel: Release so that a helper that sees the new generation also sees
                // the clear we observed (its `still()` check must not read the old word);
                // the fence below is the seqlock's writer side, as in `claim_lease`.
                let moved = lease.state.compare_exchange(sw, next, AcqRel, Relaxed);
                debug_assert!(moved.is_ok(), "only the owner moves a REFUSED lease");
                fence(Release);
                d.generation = ls::generation(next);
                lease
                    .state
                    .store(ls::make(d.generation, ls::PENDING_ACQ), Release);
            }
            _ => {
                return Err(Error::Corrupt(format!(
                    "lease {l} left acquire in state {sw:#x}"
                )));
            }
        }
    }
}

/// Releases lease `l` of generation `generation`: `HELD` -> `PENDING_REL` -> counted out ->
/// `FREE`. Exactly one caller can win the first step; any other gets `AlreadyReleased`.
/// Returns the released descriptor and the lease's grant time.
///
/// `known` is the caller's copy of the descriptor (the owner has it); without it the
/// descriptor is read from the lease under the seqlock.
pub(crate) fn release<R: Region>(
    r: &R,
    l: usize,
    generation: u32,
    known: Option<&Desc>,
) -> Result<Desc> {
    let lease = r.lease(l);
    let id = || format!("#{l}/{generation}");
    // AcqRel: Acquire to read the fields of this cycle; Release publishes the change.
    let won = lease.state.compare_exchange(
        ls::make(generation, ls::HELD),
        ls::make(generation, ls::PENDING_REL),
        AcqRel,
        Acquire,
    );
    if won.is_err() {
        return Err(Error::AlreadyReleased { lease: id() });
    }
    crash_point("release.published")?;
    finish_release(r, l, generation, known)
}

/// Drives a lease in `PENDING_REL` (of generation `generation`) to `FREE`, installing its
/// release op if nobody has yet. The caller must be its only driver: the owner, or the
/// reaper of a dead owner.
pub(crate) fn finish_release<R: Region>(
    r: &R,
    l: usize,
    generation: u32,
    known: Option<&Desc>,
) -> Result<Desc> {
    let lease = r.lease(l);
    let d = match known {
        Some(d) => *d,
        None => read_desc(lease, generation & pw::GEN_MASK as u32, Some(generation))
            .ok_or_else(|| Error::Corrupt(format!("lease {l} changed generation mid-release")))?,
    };
    debug_assert_eq!(d.generation, generation);
    let p = d.pool as usize;
    check_desc(r, l, &d)?;
    let pool = r.pool(p);
    let backoff = Backoff::new();
    loop {
        let sw = lease.state.load(Acquire);
        if sw != ls::make(generation, ls::PENDING_REL) {
            break; // RELEASED: our op was installed and completed (by us or a helper)
        }
        let w = pool.word.load(Acquire);
        if !pw::is_idle(w) {
            complete(r, p, w, None)?;
            continue;
        }
        // The state was re-read before the word, and no op of ours is pending in it,
        // so the release was not installed yet (I1: it completes only via RELEASED).
        let x = pw::in_use(w);
        if x < d.units {
            return Err(Error::Corrupt(format!(
                "pool {p} has {x} in use but lease {l} holds {}",
                d.units
            )));
        }
        let nw = pw::with_pending(x, l, true, generation);
        // AcqRel: as in `acquire`.
        if pool.word.compare_exchange(w, nw, AcqRel, Acquire).is_err() {
            backoff.snooze();
            continue;
        }
        crash_point("release.installed")?;
        complete(r, p, nw, Some(&d))?;
    }
    let freed = free_lease(lease, generation, ls::RELEASED);
    debug_assert!(freed, "lease {l} not RELEASED after its release op");
    Ok(d)
}

fn check_desc<R: Region>(r: &R, l: usize, d: &Desc) -> Result<()> {
    let geo = r.geometry();
    if d.pool as usize >= geo.pools || d.tenant as usize >= geo.tenants {
        return Err(Error::Corrupt(format!(
            "lease {l} names pool {} / tenant {}, beyond {} pools / {} tenants",
            d.pool, d.tenant, geo.pools, geo.tenants
        )));
    }
    Ok(())
}

/// Finishes the op pending in word `w` of pool `p` (steps 2 to 4 of the module docs).
/// Returns once the word is no longer `w`. `known` is the initiator's own descriptor.
pub(crate) fn complete<R: Region>(r: &R, p: usize, w: u64, known: Option<&Desc>) -> Result<()> {
    let pool = r.pool(p);
    let still = || pool.word.load(Acquire) == w;
    let corrupt = |what: String| {
        if still() {
            Err(Error::Corrupt(what))
        } else {
            Ok(())
        }
    };
    let Some(l) = pw::pending(w) else {
        return Ok(());
    };
    if l >= r.geometry().leases() {
        return corrupt(format!(
            "pool {p} word {w:#x} names lease {l}, beyond the table"
        ));
    }
    let lease = r.lease(l);
    // The initiator's own slot cannot be reused while it runs this call.
    let owned = known.is_some();
    let d = match known {
        Some(d) => *d,
        None => match read_desc(lease, pw::generation(w), None) {
            Some(d) => d,
            // The slot moved on, so this op completed; else the word is garbage.
            None => {
                return corrupt(format!(
                    "pool {p} word {w:#x} names lease {l}, whose state is {:#x}",
                    lease.state.load(Acquire)
                ));
            }
        },
    };
    if d.pool as usize != p || check_desc(r, l, &d).is_err() {
        return corrupt(format!("pool {p} word {w:#x}: lease {l} descriptor {d:?}"));
    }
    let tp = r.tenant_pool(p, d.tenant as usize);
    let release = pw::is_release(w);
    let tag = held_word::make_tag(l, release);
    let x = pw::in_use(w);
    let new_in_use = if !release {
        // Step 2: decide, once (the first CAS wins; all helpers compute the same).
        let mut sw = lease.state.load(Acquire);
        while sw == ls::make(d.generation, ls::PENDING_ACQ) {
            let tw = tp.held.load(Acquire);
            if !still() {
                return Ok(());
            }
            // (I3): the held word cannot carry our tag unless we applied.
            let admit =
                held_word::tag(tw) == tag || decide(x, held_word::held(tw), &d) == Decision::Admit;
            let to = ls::make(d.generation, if admit { ls::HELD } else { ls::REFUSED });
            // AcqRel: the outcome is published before we apply it.
            sw = match lease.state.compare_exchange(sw, to, AcqRel, Acquire) {
                Ok(_) => to,
                Err(seen) => seen,
            };
            crash_point("complete.decided")?;
        }
        if sw == ls::make(d.generation, ls::HELD) {
            if !apply(r, p, w, l, &d, tag, false, owned)? {
                return Ok(());
            }
            x.checked_add(d.units)
        } else if sw == ls::make(d.generation, ls::REFUSED) {
            Some(x)
        } else {
            return corrupt(format!("lease {l} state {sw:#x} under a pending acquire"));
        }
    } else {
        if !apply(r, p, w, l, &d, tag, true, owned)? {
            return Ok(());
        }
        // AcqRel: RELEASED is published after the held word changed (I1).
        let _ = lease.state.compare_exchange(
            ls::make(d.generation, ls::PENDING_REL),
            ls::make(d.generation, ls::RELEASED),
            AcqRel,
            Acquire,
        );
        x.checked_sub(d.units)
    };
    let Some(new_in_use) = new_in_use else {
        return corrupt(format!(
            "pool {p}: in_use {x} {} {} overflows",
            tag & 1,
            d.units
        ));
    };
    crash_point("complete.before_clear")?;
    // AcqRel: Release publishes this op's effects to the next installer.
    let _ = pool
        .word
        .compare_exchange(w, pw::idle(new_in_use), AcqRel, Acquire);
    Ok(())
}

/// Step 3: applies `±units` to the tenant's held word, tagged, at most once.
/// Returns `false` if the op is no longer pending (someone finished it).
#[allow(clippy::too_many_arguments)]
fn apply<R: Region>(
    r: &R,
    p: usize,
    w: u64,
    l: usize,
    d: &Desc,
    tag: u32,
    release: bool,
    owned: bool,
) -> Result<bool> {
    let pool = r.pool(p);
    let tp = r.tenant_pool(p, d.tenant as usize);
    let lease = r.lease(l);
    loop {
        let tw = tp.held.load(Acquire);
        // Checked after reading `tw`: the op was pending when `tw` was read, so `tw`
        // is this tenant's value just before or just after our apply (I3). The full
        // generation check narrows a word ABA to 2^24 cycles of one slot.
        if pool.word.load(Acquire) != w
            || (!owned && ls::generation(lease.state.load(Acquire)) != d.generation)
        {
            return Ok(false);
        }
        if held_word::tag(tw) == tag {
            return Ok(true);
        }
        let h = held_word::held(tw);
        let nh = if release {
            h.checked_sub(d.units)
        } else {
            h.checked_add(d.units)
        };
        let Some(nh) = nh else {
            return Err(Error::Corrupt(format!(
                "pool {p} tenant {}: held {h}, {} {}",
                d.tenant,
                if release { "releasing" } else { "adding" },
                d.units
            )));
        };
        crash_point("apply.before_cas")?;
        // AcqRel: ordered between the decision (before) and the clear (after).
        if tp
            .held
            .compare_exchange(tw, held_word::make(nh, tag), AcqRel, Acquire)
            .is_ok()
        {
            return Ok(true);
        }
    }
}
