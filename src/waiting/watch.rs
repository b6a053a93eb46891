//! The watcher's side of the death wake (see `anchor` for the owner's): an anchor, or a
//! blocked acquirer in a process without one, arms the owner words of the live
//! processes it may be waiting behind, so that the kernel wakes it when one of them
//! dies, and notes the ones already dying (an anchored acquirer only notes them).

use crate::layout::owner_word::{self, Owner};
use crate::layout::{lease_state as ls, pair, proc_state as ps};
use crate::region::Region;
use crate::sync::{AtomicU32, Ordering::*};

use super::Watch;

/// Marks an owner word as watched, so that the kernel wakes a waiter of it when the
/// owner dies. Returns the value to sleep on, or `None` if the word has no live owner.
pub fn arm(word: &AtomicU32) -> Option<u32> {
    // Acquire: pairs with the anchor's Release store of its tid.
    let mut w = word.load(Acquire);
    loop {
        match owner_word::decode(w) {
            Owner::Alive { watched: true, .. } => return Some(w),
            Owner::Alive { .. } => {
                let armed = w | owner_word::WAITERS;
                // Relaxed on both sides: only the kernel reads WAITERS, and it reads the
                // word atomically under its own locks.
                match word.compare_exchange_weak(w, armed, Relaxed, Acquire) {
                    Ok(_) => return Some(armed),
                    Err(seen) => w = seen,
                }
            }
            Owner::Unanchored | Owner::Died => return None,
        }
    }
}

/// What a waiter found when it looked for the processes it is blocked behind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Behind {
    /// LIVE slots whose anchor has died: reap them before sleeping.
    pub dying: usize,
    /// The first few of those, as (pid, start time), to wait for their exit.
    pub dying_procs: [(u32, u64); 4],
}

impl Behind {
    fn note_dying(&mut self, rec: &crate::layout::ProcRec) {
        if let Some(p) = self.dying_procs.get_mut(self.dying) {
            // Relaxed: read after the Acquire load of LIVE in `watch`.
            *p = (
                ps::pid(rec.state.load(Relaxed)),
                rec.start_time.load(Relaxed),
            );
        }
        self.dying += 1;
    }

    /// The dying processes noted, as (pid, start time).
    pub fn dying_procs(&self) -> &[(u32, u64)] {
        &self.dying_procs[..self.dying.min(self.dying_procs.len())]
    }
}

/// Arms the owner words of the live processes other than slot `me` and adds at most
/// `room` of them to `out`, in slot order from `me` on (so that with many processes the
/// anchors, each starting after its own slot, between them watch every slot). With
/// more than fit and a pool `p`, only processes holding or acquiring permits of `p`
/// are kept; the sweeps cover the rest.
pub fn watch<'a, R: Region>(
    r: &'a R,
    me: usize,
    p: Option<usize>,
    room: usize,
    out: &mut Vec<Watch<'a>>,
) -> Behind {
    let mut behind = Behind::default();
    let mut alive = Vec::new();
    let n = r.geometry().procs;
    for s in (1..n).map(|i| (me + i) % n) {
        let rec = r.proc_slot(s);
        // Acquire, both: the slot's fields (read by `note_dying`) and its owner's tid
        // are published by Release stores.
        if ps::status(rec.state.load(Acquire)) != ps::LIVE {
            continue;
        }
        match owner_word::decode(rec.owner_futex.load(Acquire)) {
            Owner::Alive { .. } if room > 0 => alive.push(s),
            Owner::Alive { .. } => {} // nothing to arm: only the dying are noted
            Owner::Died => behind.note_dying(rec),
            Owner::Unanchored => {} // only a sweep can judge it
        }
    }
    if let Some(p) = p.filter(|_| alive.len() > room) {
        alive.retain(|&s| uses_pool(r, s, p));
    }
    for s in alive.into_iter().take(room) {
        let word = &r.proc_slot(s).owner_futex;
        match arm(word) {
            Some(val) => out.push(Watch { word, val }),
            None => behind.note_dying(r.proc_slot(s)),
        }
    }
    behind
}

/// Whether process slot `s` has a lease of pool `p` that holds or may come to hold units.
fn uses_pool<R: Region>(r: &R, s: usize, p: usize) -> bool {
    r.geometry().slot_leases(s).any(|l| {
        let lease = r.lease(l);
        // Relaxed: a heuristic for which processes to watch; a wrong guess costs only
        // a later wake-up (by the sweep).
        let st = ls::state(lease.state.load(Relaxed));
        matches!(st, ls::ACQUIRING | ls::HELD | ls::RELEASING)
            && pair::lo(lease.pool_tenant.load(Relaxed)) as usize == p
    })
}
