//! The operation protocol: how one acquire or release changes a pool's counters with as
//! few shared read-modify-writes as possible, so that a process killed between any two
//! of its steps leaves a state that others can finish exactly.
//!
//! Two words change per op: the pool's `word` (units in use) and the tenant's `held`
//! word in that pool. Both are [`op_word`]s: a count plus the *tag* of the last op that
//! changed it (lease index, kind, generation). An op changes each word with one CAS
//! that also writes its own tag, so a process that dies right after a CAS is known to
//! have made it while its tag is still there. Whoever replaces a tag first *settles* it
//! ([`settle`]): if the lease it names is still in that op and has not recorded the
//! change, the replacer sets the flag (`HELD_DONE` / `POOL_DONE`) in the lease's state
//! word. So at any instant, for an op in progress, "is this step done?" is answered by
//! the word's tag or the lease's flag.
//!
//! **Acquire** (owner only; nobody helps):
//! 1. read the pool word `w` (in use `x`) and the tenant's held word (`h`); decide. A
//!    refusal writes nothing at all;
//! 2. claim a lease of the process, write its descriptor, publish it `ACQUIRING`;
//! 3. CAS the held word `h -> h + u` with the acquire's tag (the held word only ever
//!    *overstates* what is granted: see below);
//! 4. CAS the pool word `w -> x + u` with the tag. If the word moved since step 1, the
//!    rule is decided again on the new word and the held word as it is now (less our own
//!    `u`); a refusal then backs out step 3 as a release would (step 7 of a release
//!    whose pool part is marked done);
//! 5. store `HELD`.
//!
//! **Release** (owner, or the reaper of a dead owner):
//! 1. CAS the lease `HELD -> RELEASING` (exactly one releaser wins);
//! 2. CAS the pool word `x -> x - u` with the release's tag, unless done;
//! 3. CAS the held word `h -> h - u` with the tag, unless done;
//! 4. store `FREE`.
//!
//! An uncontended pair is six locked instructions: the lease claim, two CASes per op,
//! and the release's `HELD -> RELEASING`.
//!
//! Invariants (cited as (I1)... below):
//! 1. **Attribution.** A tag in a word is replaced only after [`settle`] has recorded its
//!    op's change in the lease (or found that op finished). Hence for a lease in
//!    `ACQUIRING`/`RELEASING`, a step is done iff the word still carries its tag or the
//!    lease carries the step's flag; the word must be read *before* the flag (a settler
//!    sets the flag before its CAS replaces the tag).
//! 2. **Conservative held.** For every tenant, the held word is at least the units of
//!    its leases that are counted in the pool word: acquires add to it before the pool,
//!    releases take from it after. So a decision that uses the held word never judges a
//!    tenant further under its share than it is.
//! 3. **Validated snapshot.** An acquire's pool CAS succeeds only if the pool word is
//!    still the `w` its decision read, and the decision's held value was read after `w`.
//!    Every op counted in `w` applied its held change before its pool CAS, hence before
//!    our read of `w`, hence before our read of the held word; and no op was counted
//!    between our read and our CAS (the word would differ; an ABA needs 2^23 cycles of
//!    one lease slot with the same count). With (I2), the tenant held at most what the
//!    decision used at the instant of the CAS, so the capacity bound and the floor hold.
//! 4. A lease's descriptor fields change only while it is `CLAIMED`, and its state word
//!    carries the claim generation, so a CAS that names a state names one cycle.
//!
//! Memory orderings. The lease is published by a Release store of `ACQUIRING` before
//! its tag can appear in any word, and every settler loads the lease state with
//! Acquire, so it sees the descriptor. Word CASes are AcqRel (the pool word's SeqCst,
//! for the waiter handshake in `waiting`): a settler's flag (AcqRel CAS) happens before
//! its word CAS, which happens before any later Acquire read of the word, so a reader
//! that sees the tag gone also sees the flag (I1). Descriptor fields are read under a
//! seqlock on the state word's generation (Acquire load, Relaxed fields, Acquire fence,
//! Acquire re-load), matching the claimant's Release fence in [`claim_lease`].

use crate::error::{Error, Result};
use crate::policy::{Inputs, Policy, Verdict};
use crate::layout::{LeaseRec, lease_state as ls, op_word, pair};
use crate::region::Region;
use crate::sync::{AtomicU64, Backoff, Ordering::*, fence, store_over_rmw};

/// An acquire as its lease record describes it: what it asks, and the inputs the
/// pool's policy froze for the decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Desc {
    pub generation: u32,
    pub pool: u32,
    pub tenant: u32,
    pub units: u32,
    pub inputs: Inputs,
}

/// Every labelled step between two atomic steps of acquire, release and registration.
pub const CRASH_LABELS: &[&str] = &[
    "acquire.claimed",
    "acquire.published",
    "acquire.held_applied",
    "acquire.pool_applied",
    "release.published",
    "release.pool_applied",
    "release.held_applied",
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

/// Writes the descriptor of a claimed lease and publishes it as `ACQUIRING`. Grants the
/// slot counted for another (pool, tenant) are added to that tenant's counter first.
pub(crate) fn publish_acquire<R: Region>(
    r: &R,
    lease: &LeaseRec,
    d: &Desc,
    tid: u32,
    now: u64,
    hold_ms: u64,
    charges_extra: bool,
) {
    debug_assert_eq!(
        lease.state.load(Relaxed),
        ls::make(d.generation, ls::CLAIMED),
        "publish_acquire on a lease this cycle does not own"
    );
    lease.units.store(d.units, Relaxed);
    let pt = pair::make(d.pool, d.tenant);
    // Relaxed: the slot's own fields, written only by its owner (we own it now).
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

/// Which op word of a pool a tag was found in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Word {
    Pool,
    /// The held word of this tenant.
    Held(u32),
    /// The pool's extra word (a policy's loans).
    Extra,
}

impl Word {
    /// The lease flag that records this word's change.
    fn flag(self) -> u32 {
        match self {
            Word::Pool => ls::POOL_DONE,
            Word::Held(_) => ls::HELD_DONE,
            Word::Extra => ls::EXTRA_DONE,
        }
    }
}

/// Records, before a word's tag `raw` is replaced, the change its op made, if that op is
/// still in progress and has not recorded it (I1). `p` and `t` say which word it is,
/// to tell the op from a later cycle of the same lease after a generation wrap. `own`
/// is the replacer's own lease: a tag of it names an op of its own that is over (its
/// acquire, when it releases; its last cycle, when it reuses the slot as a spare).
#[inline]
pub(crate) fn settle<R: Region>(r: &R, raw: u64, p: usize, t: Word, own: usize) -> Result<()> {
    let named = raw & op_word::LEASE_MASK;
    if named == 0 || named == own as u64 + 1 {
        return Ok(()); // no op yet, or our own finished one: the common cases
    }
    settle_other(r, raw, p, t)
}

#[inline(never)]
fn settle_other<R: Region>(r: &R, raw: u64, p: usize, t: Word) -> Result<()> {
    let Some(tag) = op_word::tag(raw << op_word::COUNT_BITS) else {
        return Ok(()); // no op has changed this word yet
    };
    if tag.lease >= r.geometry().leases() {
        return Err(Error::Corrupt(format!(
            "pool {p} word names lease {}, beyond the table",
            tag.lease
        )));
    }
    let lease = r.lease(tag.lease);
    let phase = if tag.release {
        ls::RELEASING
    } else {
        ls::ACQUIRING
    };
    let flag = t.flag();
    loop {
        // Acquire: pairs with the publishing Release store, for the fields below.
        let s = lease.state.load(Acquire);
        if ls::generation(s) & op_word::GEN_MASK != tag.generation
            || ls::state(s) != phase
            || s & flag != 0
        {
            return Ok(()); // finished (or recorded) already: the common case
        }
        // The op is in progress. Make sure it is this word's (not a later cycle of the
        // lease, 2^23 generations on, working on another pool or tenant).
        let mine = match t {
            Word::Pool => true,
            Word::Held(t) => read_desc(lease, ls::generation(s)).is_some_and(|d| d.tenant == t),
            Word::Extra => s & ls::CHARGES_EXTRA != 0,
        };
        if !mine || read_desc(lease, ls::generation(s)).is_none_or(|d| d.pool as usize != p) {
            return Ok(());
        }
        // AcqRel: the flag happens before our CAS of the word (I1).
        if lease
            .state
            .compare_exchange(s, s | flag, AcqRel, Relaxed)
            .is_ok()
        {
            return Ok(());
        }
    }
}

/// What an acquire came to, with the numbers its refusal explains itself by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcqOutcome {
    Granted,
    Refused {
        in_use: u32,
        held: u32,
        /// Never `Verdict::Admit`.
        verdict: Verdict,
    },
}

/// Runs an acquire for `d` (its generation is filled in) by a thread of process slot
/// `slot`. Returns the lease (if one was claimed: a refusal on the first look claims
/// none), the descriptor and the outcome. A granted lease is `HELD`; any other claimed
/// lease is `FREE` again.
#[allow(clippy::too_many_arguments)]
pub(crate) fn acquire<R: Region, P: Policy>(
    r: &R,
    policy: &P,
    slot: usize,
    hint: usize,
    d: Desc,
    tid: u32,
    now: u64,
    hold_ms: u64,
) -> Result<(Option<usize>, Desc, AcqOutcome)> {
    acquire_with_spare(r, policy, slot, hint, d, tid, now, hold_ms, None)
}

/// `acquire`, which takes spare lease `(index, generation)` of the calling thread if it
/// is still `CLAIMED` in that generation, instead of claiming one with a CAS.
#[allow(clippy::too_many_arguments)]
pub(crate) fn acquire_with_spare<R: Region, P: Policy>(
    r: &R,
    policy: &P,
    slot: usize,
    hint: usize,
    mut d: Desc,
    tid: u32,
    now: u64,
    hold_ms: u64,
    spare: Option<(usize, u32)>,
) -> Result<(Option<usize>, Desc, AcqOutcome)> {
    let p = d.pool as usize;
    let t = d.tenant as usize;
    let pool = r.pool(p);
    let tp = r.tenant_pool(p, t);
    let backoff = Backoff::new();
    // The lease published for this acquire, if any, and the last one claimed (freed
    // again, or not): the caller learns from it whether its spare was used.
    let mut lease: Option<usize> = None;
    let mut claimed: Option<usize> = None;
    let mut spare = spare;
    // Whether the published lease charges the extra word (the recorded decision).
    let mut charging = false;
    loop {
        // SeqCst: the waiter's half of the handshake in `waiting` (a waiter announced
        // in `waiters` must then see every release that did not see it).
        let w = pool.word.load(SeqCst);
        let tw = tp.held.load(Acquire);
        // Read after the pool word, like the held word: it only overstates (I2).
        let ew = if P::USES_EXTRA {
            pool.extra.load(Acquire)
        } else {
            0
        };
        let (x, h) = (op_word::count(w), op_word::count(tw));
        let verdict = policy.decide(&d.inputs, x, h, op_word::count(ew), d.units);
        let charges = verdict == Verdict::AdmitCharging;
        if let Some(l) = lease.filter(|_| !verdict.admits() || charges != charging) {
            // Refused now, or the decision changed what it charges: the published lease
            // has changed no word yet, so it is simply freed (and claimed again below).
            let published = ls::make(d.generation, ls::ACQUIRING)
                | if charging { ls::CHARGES_EXTRA } else { 0 };
            let freed = free_lease_from(r.lease(l), published);
            debug_assert!(freed, "lease {l} changed under its owner");
            lease = None;
            spare = None;
        }
        if !verdict.admits() {
            let refused = AcqOutcome::Refused {
                in_use: x,
                held: h,
                verdict,
            };
            return Ok((claimed, d, refused));
        }
        let l = match lease {
            Some(l) => l,
            None => {
                let (l, generation) = match spare.take().filter(|&(l, g)| {
                    // Relaxed: our own spare, which only we (and a reaper of our dead
                    // process, or our own deregistration) could have changed.
                    l < r.geometry().leases()
                        && l / r.geometry().leases_per_proc == slot
                        && r.lease(l).state.load(Relaxed) == ls::make(g, ls::CLAIMED)
                }) {
                    Some(spare) => spare,
                    None => claim_lease(r, slot, hint)?,
                };
                claimed = Some(l);
                crash_point("acquire.claimed")?;
                d.generation = generation;
                charging = charges;
                publish_acquire(r, r.lease(l), &d, tid, now, hold_ms, charging);
                crash_point("acquire.published")?;
                lease = Some(l);
                l
            }
        };
        let tag = op_word::make_tag(l, false, d.generation);
        let Some(nh) = h.checked_add(d.units).filter(|&n| n <= op_word::MAX_COUNT) else {
            return Err(Error::Corrupt(format!(
                "pool {p} tenant {t}: held {h} + {} overflows",
                d.units
            )));
        };
        settle(r, op_word::raw_tag(tw), p, Word::Held(d.tenant), l)?;
        // AcqRel: Acquire to see what the previous op published; Release so that a
        // settler that sees our tag sees our published lease (already Released).
        if tp
            .held
            .compare_exchange(tw, op_word::make(nh, tag), AcqRel, Relaxed)
            .is_err()
        {
            backoff.snooze();
            continue;
        }
        crash_point("acquire.held_applied")?;
        if charging {
            add_to(r, l, &d, &pool.extra, tag, Word::Extra)?;
            crash_point("acquire.extra_applied")?;
        }
        match apply_pool_acquire(r, policy, l, &d, w, tag, charging)? {
            PoolStep::Applied => {}
            PoolStep::Refused(refused) => {
                back_out(r, l, &d, charging)?;
                return Ok((claimed, d, refused));
            }
            PoolStep::Changed => {
                // The decision now charges differently: undo, and decide afresh.
                back_out(r, l, &d, charging)?;
                lease = None;
                continue;
            }
        }
        crash_point("acquire.pool_applied")?;
        // Release: the grant's effects happen before any later release of the lease.
        // A plain store: a settler's concurrent flag CAS names ACQUIRING and so either
        // lands before this (and is overwritten by HELD, which implies every flag) or
        // fails (see `sync::store_over_rmw` for how loom is told so).
        let held = ls::make(d.generation, ls::HELD) | if charging { ls::CHARGES_EXTRA } else { 0 };
        store_over_rmw(&r.lease(l).state, held);
        return Ok((lease, d, AcqOutcome::Granted));
    }
}

/// Adds `d.units` to op word `word` with the acquire's `tag` (an effect that needs no
/// decision of its own: the pool CAS validates the decision that made it).
fn add_to<R: Region>(r: &R, l: usize, d: &Desc, word: &AtomicU64, tag: u64, which: Word) -> Result<()> {
    let backoff = Backoff::new();
    loop {
        let v = word.load(Acquire);
        let Some(n) = op_word::count(v)
            .checked_add(d.units)
            .filter(|&n| n <= op_word::MAX_COUNT)
        else {
            return Err(Error::Corrupt(format!(
                "pool {} {which:?} word: {} + {} overflows",
                d.pool,
                op_word::count(v),
                d.units
            )));
        };
        settle(r, op_word::raw_tag(v), d.pool as usize, which, l)?;
        // AcqRel: as the held word's CAS.
        if word
            .compare_exchange(v, op_word::make(n, tag), AcqRel, Relaxed)
            .is_ok()
        {
            return Ok(());
        }
        backoff.snooze();
    }
}

/// What the pool step of an acquire came to.
enum PoolStep {
    Applied,
    /// The rule refuses on the moved word (nothing was added to the pool).
    Refused(AcqOutcome),
    /// The rule admits on the moved word, but charging differently than recorded.
    Changed,
}

/// Step 4 of an acquire: adds `d.units` to the pool word, starting from `w` (the word
/// the first decision read). If the word moved, decides again.
fn apply_pool_acquire<R: Region, P: Policy>(
    r: &R,
    policy: &P,
    l: usize,
    d: &Desc,
    mut w: u64,
    tag: u64,
    charging: bool,
) -> Result<PoolStep> {
    let p = d.pool as usize;
    let pool = r.pool(p);
    let tp = r.tenant_pool(p, d.tenant as usize);
    let backoff = Backoff::new();
    let mut first = true;
    loop {
        let x = op_word::count(w);
        if !first {
            // The word moved: decide again on it, with the held (and extra) word as it
            // is now less our own units (I3: read after `w`; I2: they overstate, never
            // understate).
            let h = op_word::count(tp.held.load(Acquire)).saturating_sub(d.units);
            let e = if P::USES_EXTRA {
                let e = op_word::count(pool.extra.load(Acquire));
                if charging { e.saturating_sub(d.units) } else { e }
            } else {
                0
            };
            let verdict = policy.decide(&d.inputs, x, h, e, d.units);
            if !verdict.admits() {
                return Ok(PoolStep::Refused(AcqOutcome::Refused {
                    in_use: x,
                    held: h,
                    verdict,
                }));
            }
            if (verdict == Verdict::AdmitCharging) != charging {
                return Ok(PoolStep::Changed);
            }
        }
        first = false;
        debug_assert!(
            x + d.units <= policy.capacity(&d.inputs),
            "the policy admitted past the capacity"
        );
        settle(r, op_word::raw_tag(w), p, Word::Pool, l)?;
        // SeqCst: the pool word is the releaser's side of the waiter handshake too;
        // Release so that a settler that sees our tag sees our lease.
        match pool
            .word
            .compare_exchange(w, op_word::make(x + d.units, tag), SeqCst, SeqCst)
        {
            Ok(_) => {
                debug_assert!(r.lease(l).units.load(Relaxed) == d.units);
                return Ok(PoolStep::Applied);
            }
            Err(now) => {
                w = now;
                backoff.snooze();
            }
        }
    }
}

/// An acquire that added to the held (and extra) word and was then refused on the pool:
/// it turns into a release whose pool part is already done, and runs that to `FREE`.
fn back_out<R: Region>(r: &R, l: usize, d: &Desc, charging: bool) -> Result<()> {
    let lease = r.lease(l);
    let charges = if charging { ls::CHARGES_EXTRA } else { 0 };
    let releasing = ls::make(d.generation, ls::RELEASING | ls::POOL_DONE) | charges;
    loop {
        let s = lease.state.load(Acquire);
        debug_assert_eq!(ls::state(s), ls::ACQUIRING);
        // AcqRel: as any state change a settler may race with.
        if lease
            .state
            .compare_exchange(s, releasing, AcqRel, Relaxed)
            .is_ok()
        {
            break;
        }
    }
    finish_release_keeping(r, l, d.generation, Some(d), None, true).map(|_| ())
}

/// Releases lease `l` of generation `generation`: `HELD` -> `RELEASING` -> `FREE`.
/// Exactly one caller can win the first step; any other gets `AlreadyReleased`.
///
/// `known` is the caller's copy of the descriptor (the owner has it); without it the
/// descriptor is read from the lease.
pub(crate) fn release<R: Region>(
    r: &R,
    l: usize,
    generation: u32,
    known: Option<&Desc>,
) -> Result<Desc> {
    let lease = r.lease(l);
    start_release(lease, l, generation)?;
    crash_point("release.published")?;
    finish_release_keeping(r, l, generation, known, None, true)
}

/// `HELD -> RELEASING`, keeping the record of what the grant charged. Exactly one
/// caller wins; any other gets `AlreadyReleased`.
fn start_release(lease: &LeaseRec, l: usize, generation: u32) -> Result<()> {
    let already = || Error::AlreadyReleased {
        lease: format!("#{l}/{generation}"),
    };
    // Relaxed: the CAS below re-checks the whole word.
    let s = lease.state.load(Relaxed);
    if s & !ls::CHARGES_EXTRA != ls::make(generation, ls::HELD) {
        return Err(already());
    }
    let releasing = ls::make(generation, ls::RELEASING) | (s & ls::CHARGES_EXTRA);
    // AcqRel: Acquire to read the fields of this cycle; Release publishes the change.
    lease
        .state
        .compare_exchange(s, releasing, AcqRel, Relaxed)
        .map(|_| ())
        .map_err(|_| already())
}

/// `release` by its owner thread `tid`, which keeps the slot as its spare (see
/// `finish_release_keeping`). Returns the descriptor; the spare's generation is
/// `generation + 1`.
pub(crate) fn release_keeping<R: Region>(
    r: &R,
    l: usize,
    generation: u32,
    known: Option<&Desc>,
    tid: u32,
) -> Result<Desc> {
    let lease = r.lease(l);
    start_release(lease, l, generation)?;
    crash_point("release.published")?;
    finish_release_keeping(r, l, generation, known, Some(tid), true)
}

/// Drives a lease in `RELEASING` (of generation `generation`) to `FREE`: its pool step,
/// then its held step, each unless done (I1). The caller must be its only driver: the
/// owner, or the reaper of a dead owner.
pub(crate) fn finish_release<R: Region>(
    r: &R,
    l: usize,
    generation: u32,
    known: Option<&Desc>,
) -> Result<Desc> {
    finish_release_keeping(r, l, generation, known, None, false)
}

/// `finish_release`, which with `keep: Some(tid)` leaves the slot `CLAIMED` under the
/// next generation for thread `tid` (a *spare*: its next acquire needs no claim CAS)
/// instead of `FREE`. A spare is counted nowhere, like any claimed lease.
///
/// `fresh`: the caller has just moved the lease to `RELEASING` and made no step of it,
/// so neither step can be done yet and neither is checked.
fn finish_release_keeping<R: Region>(
    r: &R,
    l: usize,
    generation: u32,
    known: Option<&Desc>,
    keep: Option<u32>,
    fresh: bool,
) -> Result<Desc> {
    let lease = r.lease(l);
    let d = match known {
        Some(d) => *d,
        // The only driver of a RELEASING lease reads its fields: they are stable (written
        // while CLAIMED, published by the Release store of ACQUIRING, which the driver's
        // state CAS or load acquired), so no seqlock is needed.
        None => {
            let pt = lease.pool_tenant.load(Relaxed);
            Desc {
                generation,
                pool: pair::lo(pt),
                tenant: pair::hi(pt),
                units: lease.units.load(Relaxed),
                inputs: [0; 3], // not needed to give units back
            }
        }
    };
    debug_assert_eq!(d.generation, generation);
    check_desc(r, l, &d)?;
    let (p, t) = (d.pool as usize, d.tenant as usize);
    let tag = op_word::make_tag(l, true, generation);
    // Relaxed: our own lease's state, which we (its only driver) moved to RELEASING.
    let s0 = lease.state.load(Relaxed);
    // A fresh release whose pool part is marked done (an acquire backing out) skips it.
    if !(fresh && s0 & ls::POOL_DONE != 0) {
        take_back(r, l, &d, &r.pool(p).word, tag, Word::Pool, fresh)?;
    }
    crash_point("release.pool_applied")?;
    if s0 & ls::CHARGES_EXTRA != 0 {
        take_back(r, l, &d, &r.pool(p).extra, tag, Word::Extra, fresh)?;
        crash_point("release.extra_applied")?;
    }
    let held = &r.tenant_pool(p, t).held;
    take_back(r, l, &d, held, tag, Word::Held(d.tenant), fresh)?;
    crash_point("release.held_applied")?;
    match keep {
        // Release: every change of this cycle happens before the slot is claimed again.
        // A plain store: a settler's flag CAS names RELEASING and fails or is
        // overwritten.
        None => store_over_rmw(&lease.state, ls::make(generation, ls::FREE)),
        Some(tid) => {
            // Relaxed: the slot's own field; the state store below publishes it.
            lease.tid.store(tid, Relaxed);
            // As a claim: the generation moves on, then a Release fence orders it before
            // the next cycle's field writes (the seqlock in `read_desc`).
            store_over_rmw(&lease.state, ls::make(generation.wrapping_add(1), ls::CLAIMED));
            fence(Release);
        }
    }
    Ok(d)
}

/// Takes `d.units` back from `word` with the release's `tag`, unless that step is done:
/// the word carries the tag, or the lease the step's `flag` (read in that order: I1).
///
/// `fresh`: the caller knows the step is not done (see `finish_release_keeping`).
#[allow(clippy::too_many_arguments)]
fn take_back<R: Region>(
    r: &R,
    l: usize,
    d: &Desc,
    word: &AtomicU64,
    tag: u64,
    t: Word,
    fresh: bool,
) -> Result<()> {
    let flag = t.flag();
    let lease = r.lease(l);
    let backoff = Backoff::new();
    loop {
        // SeqCst (the pool word): the releaser's half of the waiter handshake.
        let w = word.load(SeqCst);
        if !fresh && (op_word::raw_tag(w) == tag || lease.state.load(Acquire) & flag != 0) {
            return Ok(());
        }
        let n = op_word::count(w);
        let Some(left) = n.checked_sub(d.units) else {
            return Err(Error::Corrupt(format!(
                "pool {} {t:?} word: {n} counted but lease {l} gives back {}",
                d.pool, d.units
            )));
        };
        settle(r, op_word::raw_tag(w), d.pool as usize, t, l)?;
        // SeqCst: see the load above; Release publishes the settle before it.
        if word
            .compare_exchange(w, op_word::make(left, tag), SeqCst, Relaxed)
            .is_ok()
        {
            return Ok(());
        }
        backoff.snooze();
    }
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::region::HeapRegion;

    use crate::policy::fair_share::{FairShare, Frozen};

    fn desc(tenant: u32) -> Desc {
        let f = Frozen {
            cap: 2,
            floor: 1,
            weight: 1,
            active_weight: 2,
        };
        Desc {
            generation: 0,
            pool: 0,
            tenant,
            units: 1,
            inputs: f.inputs(),
        }
    }

    #[test]
    fn a_pair_leaves_everything_free_and_counts_exact() {
        let r = HeapRegion::new(1, 2, 3, 1);
        let (lb, db, o) = acquire(&r, &FairShare, 2, 0, desc(1), 0, 10, 0).unwrap();
        assert_eq!(o, AcqOutcome::Granted);
        let (la, da, o) = acquire(&r, &FairShare, 0, 0, desc(0), 0, 10, 0).unwrap();
        assert_eq!(o, AcqOutcome::Granted);
        assert_eq!(op_word::count(r.pool(0).word.load(Relaxed)), 2);
        release(&r, la.unwrap(), da.generation, Some(&da)).unwrap();
        release(&r, lb.unwrap(), db.generation, None).unwrap();
        assert_eq!(op_word::count(r.pool(0).word.load(Relaxed)), 0);
        for l in 0..3 {
            assert_eq!(
                ls::state(r.lease(l).state.load(Relaxed)),
                ls::FREE,
                "lease {l}"
            );
        }
        for t in 0..2 {
            assert_eq!(op_word::count(r.tenant_pool(0, t).held.load(Relaxed)), 0);
        }
    }
}
