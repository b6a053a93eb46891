//! A guaranteed pool in shared memory: its whole [`State`] in a block, replaced by one
//! CAS of the pool's head word.
//!
//! Seed 001's decision reads every tenant (who is idle, who lends, whose guarantee is on
//! loan, who is waiting) and a loan changes several tenants at once (each lender's slice).
//! Instead of one tagged word per effect, the state is copy-on-write: an op reads the
//! current block into private memory, applies the sequential rules (`state`), writes the
//! new state into a block of its own, and publishes it by a CAS of the head word from the
//! value it read. The decision (grant or refusal, and which lenders fund which slice) is
//! thus recorded in full before anything is applied, and applied all at once: there is
//! nothing left for a helper to finish, and a process killed at any instant has either
//! changed nothing (before the CAS) or everything (after it). A lease records its owner's
//! process slot, so a reaper gives a dead process's leases back with one more op.
//!
//! **Head word**: `seq << 20 | block`. `seq` counts published states modulo 2^44 (the
//! state's own `seq` too, so that the two always compare), so a head value repeats only
//! after 2^44 publications and a CAS from a stale read fails.
//!
//! **Blocks**: process slot `s` owns blocks `2s` and `2s + 1` of every guaranteed pool.
//! It writes only the one that is not current, so a current block is never written. A
//! slot's blocks are written by one writer at a time: the engine of the process that
//! registered it (its ops on the pool take a process-local lock), or the reaper that holds
//! the slot `REAPING` after that process died.
//!
//! **Reading** is a seqlock on the head word: load it (Acquire, pairing with the
//! publisher's Release CAS, so the block's words are those it wrote), copy the block,
//! fence(Acquire), load it again. A block is rewritten only after it stopped being
//! current, i.e. after the head changed; its new writer loaded that newer head and then
//! fenced (Release) before writing, so a reader that saw any rewritten word sees the
//! newer head on its second load, and retries.
//!
//! Invariants:
//! - (S1) the head names a block holding the state with the head's `seq`;
//! - (S2) a block that the head names is not written until the head names another;
//! - (S3) every state published satisfies `State::check` (it was made by the rules from
//!   one that did).

use super::state::{Rules, State};
use super::words;
use crate::error::{Error, Result};
use crate::region::Region;
use crate::sync::{Ordering::*, fence};

/// The labelled steps of an op on a guaranteed pool (see `ops::crash_point`): after the
/// new state is written into the writer's block, and after it is published.
pub const CRASH_LABELS: &[&str] = &["guaranteed.written", "guaranteed.published"];

const BLOCK_BITS: u32 = 20;
const BLOCK_MASK: u64 = (1 << BLOCK_BITS) - 1;
/// The largest `seq` a head holds (44 bits); the next is 0.
pub(crate) const SEQ_MASK: u64 = u64::MAX >> BLOCK_BITS;

/// The seq after `seq`, modulo 2^44 as the head word counts: the one rule for the
/// state an op publishes and for the replay model's.
pub(crate) fn next_seq(seq: u64) -> u64 {
    (seq + 1) & SEQ_MASK
}

pub fn head_seq(h: u64) -> u64 {
    h >> BLOCK_BITS
}
pub fn head_block(h: u64) -> usize {
    (h & BLOCK_MASK) as usize
}
fn make_head(seq: u64, block: usize) -> u64 {
    debug_assert!((block as u64) <= BLOCK_MASK);
    debug_assert!(seq <= SEQ_MASK, "seq {seq} past the head's 44 bits");
    seq << BLOCK_BITS | block as u64
}

/// Writes the initial state of every guaranteed pool into block 0 and points the head
/// at it. At creation only, before the segment is marked ready.
pub fn init<R: Region>(r: &R) {
    for gp in 0..r.g_pools() {
        let st = State::new(r.g_rules(gp));
        store_block(r, gp, 0, &words::encode(&st));
        // Relaxed: the creator's Release store of READY publishes the segment.
        r.g_head(gp).store(make_head(0, 0), Relaxed);
    }
}

fn store_block<R: Region>(r: &R, gp: usize, b: usize, w: &[u64]) {
    let block = r.g_block(gp, b);
    debug_assert!(
        w.len() <= block.len(),
        "state of {} words for a block of {}",
        w.len(),
        block.len()
    );
    for (dst, &v) in block.iter().zip(w) {
        // Relaxed: published by the head CAS (Release); readers validate (see above).
        dst.store(v, Relaxed);
    }
}

/// The buffers of an op: the block's copy, the state decoded from it (which the op
/// changes) and the words of the state it publishes. Each op of the engine reuses its
/// thread's, so that a pair allocates nothing for them once they have grown to the
/// pool's size. Every op fills them anew (a decode clears the state's vectors, an
/// encode its buffer): nothing an op leaves in them is read by the next.
pub struct Scratch {
    copy: Vec<u64>,
    state: State,
    words: Vec<u64>,
}

impl Scratch {
    pub fn new() -> Scratch {
        Scratch {
            copy: Vec::new(),
            state: State::empty(),
            words: Vec::new(),
        }
    }
}

impl Default for Scratch {
    fn default() -> Self {
        Scratch::new()
    }
}

/// The current state of pool `gp`, with the head value it was read under.
pub fn read<R: Region>(r: &R, gp: usize) -> Result<(u64, State)> {
    let mut st = State::empty();
    let h = read_into(r, gp, &mut Vec::new(), &mut st)?;
    Ok((h, st))
}

/// [`read`] into `st`, through the copy buffer `copy`; returns the head value it was
/// read under. On `Err`, `st` holds no valid state.
fn read_into<R: Region>(r: &R, gp: usize, copy: &mut Vec<u64>, st: &mut State) -> Result<u64> {
    let rules = r.g_rules(gp);
    let blocks = 2 * r.geometry().procs;
    let backoff = crate::sync::Backoff::new();
    loop {
        // Acquire: pairs with the publisher's Release CAS (the block's words are its).
        let h = r.g_head(gp).load(Acquire);
        let b = head_block(h);
        if b >= blocks {
            if r.g_head(gp).load(Acquire) == h {
                return Err(Error::Corrupt(format!(
                    "guaranteed pool {:?}: head names block {b} of {blocks}",
                    rules.name
                )));
            }
            continue;
        }
        copy.clear();
        let block = r.g_block(gp, b);
        // Relaxed, these loads: validated by the second head load below. Only the words
        // the header says are used are copied (a block is sized for `max_leases`).
        let used = words::used_words(block[2].load(Relaxed), block[3].load(Relaxed));
        copy.extend(
            block[..used.min(block.len())]
                .iter()
                .map(|w| w.load(Relaxed)),
        );
        // Acquire fence: the copy's loads are ordered before the second head load, so a
        // rewritten word implies a changed head (the writer fenced Release before it).
        fence(Acquire);
        if r.g_head(gp).load(Relaxed) != h {
            backoff.snooze();
            continue;
        }
        return match words::decode_into(copy, rules, st) {
            Ok(()) if st.seq == head_seq(h) => Ok(h),
            Ok(()) => Err(Error::Corrupt(format!(
                "guaranteed pool {:?}: head seq {} names a block of seq {}",
                rules.name,
                head_seq(h),
                st.seq
            ))),
            Err(why) => Err(Error::Corrupt(format!(
                "guaranteed pool {:?}: {why}",
                rules.name
            ))),
        };
    }
}

/// Applies `f` to the current state of pool `gp` and publishes the result, writing
/// through process slot `slot`'s blocks; retried from a fresh read until its CAS wins.
/// `f` must be pure (it may run several times); its `Err` publishes nothing. Returns
/// `f`'s value and the seq of the state published.
///
/// The caller must be the one writer of `slot`'s blocks (module docs): the engine that
/// registered the slot, under its lock, or the reaper holding it `REAPING`.
pub fn update<R: Region, T>(
    r: &R,
    gp: usize,
    slot: usize,
    f: impl FnMut(&mut State) -> Result<T>,
) -> Result<(T, u64)> {
    update_with(r, gp, slot, &mut Scratch::new(), f)
}

/// [`update`] through the buffers `scratch` (the engine passes its thread's).
pub fn update_with<R: Region, T>(
    r: &R,
    gp: usize,
    slot: usize,
    scratch: &mut Scratch,
    mut f: impl FnMut(&mut State) -> Result<T>,
) -> Result<(T, u64)> {
    debug_assert!(slot < r.geometry().procs, "slot {slot} out of range");
    let Scratch {
        copy,
        state,
        words: buf,
    } = scratch;
    loop {
        let h = read_into(r, gp, copy, state)?;
        let out = f(state)?;
        if publish(r, gp, slot, h, state, buf)? {
            crate::ops::crash_point("guaranteed.published")?;
            return Ok((out, state.seq));
        }
    }
}

/// Publishes `st` as the successor of head value `h`: gives it seq `head_seq(h) + 1`
/// (modulo 2^44: past the head's bits the seq the block keeps and the head's would
/// differ, and every later read would call the pool corrupt),
/// writes it into the one of `slot`'s blocks that `h` does not name, and CASes the head
/// from `h`. `false` if another op was published first (nothing of this one is kept).
/// The caller is the one writer of `slot`'s blocks.
/// The state's words are encoded through the buffer `buf`.
fn publish<R: Region>(
    r: &R,
    gp: usize,
    slot: usize,
    h: u64,
    st: &mut State,
    buf: &mut Vec<u64>,
) -> Result<bool> {
    st.seq = next_seq(head_seq(h));
    let mine = if head_block(h) == 2 * slot {
        2 * slot + 1
    } else {
        2 * slot
    };
    // Release fence: our head loads (in `read`) come before the block's words, so a
    // reader that sees one of them sees a head past the one that named it (S2).
    fence(Release);
    words::encode_into(st, buf);
    store_block(r, gp, mine, buf);
    crate::ops::crash_point("guaranteed.written")?;
    // Release: publishes the block's words to readers that load the new head (S1).
    // Relaxed on failure: nothing of a failed attempt is kept; the next read's Acquire
    // load orders what follows.
    Ok(r.g_head(gp)
        .compare_exchange(h, make_head(st.seq, mine), Release, Relaxed)
        .is_ok())
}

/// Gives back every lease of the dead process in slot `s` (taken `REAPING` by the
/// caller) in every guaranteed pool, writing through `s`'s own blocks. Returns
/// `(leases, units)` per pool.
pub fn reap_slot<R: Region>(r: &R, s: usize) -> Result<Vec<(u32, u64)>> {
    let mut out = Vec::with_capacity(r.g_pools());
    for gp in 0..r.g_pools() {
        let (_, st) = read(r, gp)?;
        if !st.owns_any(s as u16) {
            out.push((0, 0));
            continue;
        }
        let rules: &Rules = r.g_rules(gp);
        let (e, _) = update(r, gp, s, |st| {
            st.apply(rules, super::state::Call::ReapOwner { owner: s as u16 })
        })?;
        out.push(match e {
            super::state::Effect::Reaped { leases, units } => (leases, units),
            _ => (0, 0),
        });
    }
    Ok(out)
}

/// Replaces pool `gp`'s state, which cannot be read (`Corrupt`), with the state at
/// creation, written through slot `slot`'s blocks (the caller is their one writer). For
/// `repair`: a pool whose state fails its checksum or its invariants would refuse every
/// call forever; its leases are lost with it (their holders' releases then answer
/// `AlreadyReleased`). Does nothing if the state can be read.
pub fn reset<R: Region>(r: &R, gp: usize, slot: usize) -> Result<bool> {
    loop {
        if read(r, gp).is_ok() {
            return Ok(false);
        }
        // Acquire: as in `read`.
        let h = r.g_head(gp).load(Acquire);
        if publish(
            r,
            gp,
            slot,
            h,
            &mut State::new(r.g_rules(gp)),
            &mut Vec::new(),
        )? {
            return Ok(true);
        }
    }
}

/// What is wrong with the guaranteed pools, for `check`: a state that cannot be read
/// (decoding checks every invariant), a lease whose owner slot is not a live
/// process's (a death not reaped yet: `reap` returns it), or a waiters' stamp further
/// ahead than any waiter announces.
pub fn check<R: Region>(r: &R) -> Vec<String> {
    use crate::layout::proc_state as ps;
    let mut out = Vec::new();
    let now_ms = crate::clock::now_ms();
    for gp in 0..r.g_pools() {
        let rules = r.g_rules(gp);
        if let Some(ahead) = super::waiters::announced_too_far(r, gp, now_ms) {
            out.push(format!(
                "guaranteed pool {:?}: its waiters' sleep_until_ms is {ahead} ms ahead, more \
                 than a waiter announces (half idle_after_ms, {} ms): until then every \
                 release wakes nobody with a system call (repair clears it)",
                rules.name,
                super::waiters::announce_step_ms(r, gp)
            ));
        }
        match read(r, gp) {
            Err(e) => out.push(format!("guaranteed pool {:?}: {e}", rules.name)),
            Ok((_, st)) => {
                for l in &st.leases {
                    let s = l.owner as usize;
                    // Acquire: pairs with the registrant's Release store of LIVE.
                    let live = s < r.geometry().procs
                        && ps::status(r.proc_slot(s).state.load(Acquire)) == ps::LIVE;
                    if !live {
                        out.push(format!(
                            "guaranteed pool {:?}: lease {} belongs to process slot {s}, which no live process holds",
                            rules.name,
                            rules.lease_name(l.tenant, l.no)
                        ));
                    }
                }
            }
        }
    }
    out
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::guaranteed::state::Call;
    use crate::guaranteed::state::tests::even_pair;
    use crate::region::HeapRegion;

    /// The seq comes round at 2^44 with the head's: a pool whose head reached the top
    /// (2^44 publications, or a head written from outside that `repair` reset from)
    /// goes on. Before, the next op gave its state seq 2^44, which the head's 44 bits
    /// kept as 0, and every later read called the pool corrupt.
    #[test]
    fn the_seq_comes_round_with_the_head() {
        let cfg = even_pair("a");
        let r = HeapRegion::new(0, 1, 2, 1).with_guaranteed(std::slice::from_ref(&cfg));
        // The head as if 2^44 - 1 states were published: block 0 holds the state
        // with that seq.
        let mut st = State::new(r.g_rules(0));
        st.seq = SEQ_MASK;
        store_block(&r, 0, 0, &words::encode(&st));
        // Relaxed: one thread here; the reads below are its own.
        r.g_head(0).store(make_head(SEQ_MASK, 0), Relaxed);
        assert_eq!(read(&r, 0).unwrap().1.seq, SEQ_MASK);
        let ask = |now| Call::Acquire {
            tenant: 0,
            cost: 10,
            hold_ms: 50,
            owner: 1,
            now,
        };
        let rules = r.g_rules(0);
        let (_, seq) = update(&r, 0, 1, |st| st.apply_in_place(rules, ask(0))).unwrap();
        assert_eq!(seq, 0);
        let (h, now) = read(&r, 0).expect("the pool reads after the seq came round");
        assert_eq!((head_seq(h), now.seq, now.leases.len()), (0, 0, 1));
        let (_, seq) = update(&r, 0, 1, |st| st.apply_in_place(rules, ask(1))).unwrap();
        assert_eq!(seq, 1);
        assert_eq!(read(&r, 0).unwrap().1.leases.len(), 2);
    }
}
