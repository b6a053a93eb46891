//! The operation protocol: how one acquire or release changes a pool's counters with as
//! few shared read-modify-writes as possible, so that a process killed between any two
//! of its steps leaves a state that others can finish exactly.
//!
//! Two words change per op: the pool's `word` (units in use) and the tenant's `held`
//! word in that pool. Both are [`op_word`](crate::layout::op_word)s: a count plus the *tag* of the last op that
//! changed it (lease index, kind, generation). An op changes each word with one CAS
//! that also writes its own tag, so a process that dies right after a CAS is known to
//! have made it while its tag is still there. Whoever replaces a tag first *settles* it
//! (`settle`): if the lease it names is still in that op and has not recorded the
//! change, the replacer sets the flag (`HELD_DONE` / `POOL_DONE`) in the lease's state
//! word. So at any instant, for an op in progress, "is this step done?" is answered by
//! the word's tag or the lease's flag.
//!
//! **Acquire** (owner only; nobody helps):
//! 1. read the pool word `w` (in use `x`) and the tenant's held word (`h`); decide. A
//!    refusal writes nothing at all;
//! 2. claim a lease of the process, write its descriptor, publish it `ACQUIRING`;
//! 3. CAS the held word `h -> h + u` with the acquire's tag (the held word only ever
//!    *overstates* what is granted: see below). If it lost, the rule is decided again
//!    on `w` and the held word the CAS returned (read after `w`, as (I3) needs);
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
//! 1. **Attribution.** A tag in a word is replaced only after `settle` has recorded its
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
//! Acquire re-load), matching the claimant's Release fence in `claim_lease`.

mod acquire;
mod lease;
mod release;
pub(crate) mod resident;
mod settle;
mod transfer;

#[cfg(test)]
pub(crate) use acquire::acquire;
pub(crate) use acquire::acquire_with_spare;
pub(crate) use lease::{
    check_desc, count_grant, free_lease, free_lease_from, publish_acquire, read_desc,
    spare_or_claim,
};
pub(crate) use transfer::{Transferred, transfer};
#[cfg(test)] // the unit tests and the loom models (which build with `test` too)
pub(crate) use release::release;
pub(crate) use release::{finish_release, release_keeping, release_reporting};
pub(crate) use settle::{Word, settle};

use crate::error::Result;
use crate::policy::{Inputs, Verdict};

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

/// The labelled steps of the `evict` pools' ops: a transfer (the acquire that revokes
/// a victim) and a resident's release.
pub const RESIDENT_CRASH_LABELS: &[&str] = &[
    "evict.held_applied",
    "evict.revoked",
    "release.closed",
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

/// What an acquire came to, with the numbers its refusal explains itself by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcqOutcome {
    /// Granted on a pool word with `in_use` units and a tenant holding `held` (the
    /// snapshot of the deciding look).
    Granted {
        in_use: u32,
        held: u32,
    },
    Refused {
        in_use: u32,
        held: u32,
        /// Never `Verdict::Admit`.
        verdict: Verdict,
    },
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::layout::{lease_state as ls, op_word};
    use crate::region::{HeapRegion, Region};
    use crate::sync::Ordering::*;

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
        assert!(matches!(o, AcqOutcome::Granted { .. }));
        let (la, da, o) = acquire(&r, &FairShare, 0, 0, desc(0), 0, 10, 0).unwrap();
        assert!(matches!(o, AcqOutcome::Granted { .. }));
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
