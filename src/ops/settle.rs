//! Settling: before a tag is replaced in an op word, the change of the op it names is
//! recorded in that op's lease (invariant I1 of `ops`).

use super::read_desc;
use crate::error::Result;
use crate::layout::{lease_state as ls, op_word};
use crate::region::Region;
use crate::sync::Ordering::*;

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
    pub(super) fn flag(self) -> u32 {
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
        // Garbage (no op ever writes such a tag): no lease can be mid-op under it, so
        // there is nothing to record. The word's count is checked by `repair`.
        return Ok(());
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

