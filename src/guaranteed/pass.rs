//! One wake a release, passed on: no herd of a guaranteed pool's waiters for one lease.
//!
//! A release wakes one sleeper whose bits share one with its own
//! (`waiters::release_bits`); the kernel wakes the one that went to sleep first
//! (`FUTEX_WAKE_BITSET` takes a futex's sleepers in the order they queued, for tasks
//! of equal priority). That waiter asks again; then, granted or refused, it passes one
//! wake on, to the bits of the releases made since its ask before the sleep (the
//! epochs that moved since then: [`Snap`]), if the state after its ask has free units
//! that a waiter of those bits may take: a tenant of those bits with room in its own
//! guarantee, or a lendable tenant with room ([`may_serve`]). A waiter back from a
//! sleep on `futex_waitv` (a cancel token's, which every wake of the word ends) that
//! finds nothing for it passes the wake on at once, with the same bits, and sleeps on.
//!
//! Why no waiter a release can serve stays asleep: the waiters still asleep that asked
//! before a release `R` (so did not see its units) queued before every waiter that
//! asked after it (whose ask read `R`'s bump of `wake`, so its sleep's kernel check,
//! under the futex bucket's lock, came after the other's). A pass for `R` carries
//! `R`'s bits, since the passer asked before `R`. So each wake of the chain reaches the
//! oldest waiter of those bits: one that asked before `R` passes on in turn (its epochs
//! moved), and the chain stops only where no units are left for those bits, or at a
//! waiter that asked after every release of its bits (then every waiter before it was
//! woken). A waiter killed between its wake and its ask would cut the chain: the reap
//! of its process wakes every waiter of every guaranteed pool (`peers::announce`).
//!
//! What a thread passes is kept in a thread-local: the snapshot taken before its ask
//! ([`before_ask`]), and whether a wake of the pool's word has ended its sleep since
//! ([`woken`]). The C ABI's callers (the bindings) ask again through the engine after
//! every wake, so the pass is made there ([`after_ask`]); a wait that ends without
//! that ask (an exception between the calls of a binding's loop) makes it as it ends
//! (`Engine::guaranteed_wait_end`, `fairshm_guaranteed_wait_end`). A thread that asks
//! on another pool between its wake and its ask passes nothing (none of the bindings'
//! waits do); the others are then served at their own retry-after, or at most half
//! `idle_after_ms` later, when their sleep's announced part ends.

use std::cell::Cell;

use super::state::{Rules, State};
use super::waiters::{EVERY_BIT, tenant_bit};
use crate::layout::GHeadRec;
use crate::region::Region;
use crate::sync::Ordering::*;

/// The pool's wake word and epochs as a thread read them before its ask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Snap {
    wake: u32,
    epochs: [u64; 4],
}

std::thread_local! {
    /// The head record's address of the pool on which a wake ended this thread's
    /// sleep, and which it still owes a pass (0: none). Apart from the snapshot, so
    /// that an ask with nothing owed reads one word.
    static WOKEN: Cell<usize> = const { Cell::new(0) };
    /// The pool and the snapshot before this thread's last ask that may end in a sleep.
    static SNAP: Cell<Option<(usize, Snap)>> = const { Cell::new(None) };
}

fn key(rec: &GHeadRec) -> usize {
    rec as *const GHeadRec as usize
}

/// The wake word and epochs of pool `gp` now.
fn snap<R: Region>(r: &R, gp: usize) -> Snap {
    let rec = r.g_head_rec(gp);
    // Acquire: as `waiters::seen`; the epochs after the word, so that a release whose
    // bump was read has its epoch adds read too (they came before it).
    let wake = rec.wake.load(Acquire);
    Snap {
        wake,
        epochs: std::array::from_fn(|k| rec.epochs[k].load(Acquire)),
    }
}

/// The bits of the releases made between two snapshots: those whose epoch byte moved
/// (a carry only adds bits), or every bit if `wake` moved 256 times or more (a byte may
/// have come round), and none if `wake` did not move.
pub fn moved(was: &Snap, now: &Snap) -> u32 {
    let bumps = now.wake.wrapping_sub(was.wake);
    if bumps == 0 {
        return 0;
    }
    if bumps >= 256 {
        return EVERY_BIT;
    }
    let mut bits = 0u32;
    for (k, (a, b)) in was.epochs.iter().zip(&now.epochs).enumerate() {
        let diff = a ^ b;
        for byte in 0..8 {
            if (diff >> (8 * byte)) & 0xff != 0 {
                bits |= 1 << (8 * k + byte);
            }
        }
    }
    // A release adds epochs before it bumps: a bump with no epoch moved is a reap's or
    // a reset's of an older library (every sleeper).
    if bits == 0 { EVERY_BIT } else { bits }
}

/// The bits of the releases since this thread's snapshot of pool `k` (every bit if it
/// took none there), with `now` its snapshot from here on.
fn moved_since(k: usize, now: Snap) -> u32 {
    let was = SNAP.try_with(|s| s.replace(Some((k, now)))).ok().flatten();
    match was {
        Some((at, was)) if at == k => moved(&was, &now),
        _ => EVERY_BIT,
    }
}

/// Whether this thread owes a pass on some pool: one thread-local word, all that an
/// ask pays when it owes none (the caller then skips [`after_ask`]).
#[inline]
pub fn owes_any() -> bool {
    WOKEN.try_with(Cell::get).unwrap_or(0) != 0
}

/// Before an ask on pool `gp` that may end in a sleep: this thread's snapshot, unless
/// a wake ended its sleep on this pool since the last one (then the ask is the one
/// after that wake, and the pass is measured from before the sleep).
pub fn before_ask<R: Region>(r: &R, gp: usize) {
    let k = key(r.g_head_rec(gp));
    if WOKEN.try_with(Cell::get).ok() == Some(k) {
        return;
    }
    let _ = WOKEN.try_with(|w| w.set(0));
    let _ = SNAP.try_with(|s| s.set(Some((k, snap(r, gp)))));
}

/// A wake of pool `gp`'s word ended this thread's sleep, and it will ask again.
pub fn woken<R: Region>(r: &R, gp: usize) {
    let _ = WOKEN.try_with(|w| w.set(key(r.g_head_rec(gp))));
    // A waiter killed here takes the wake with it: its reap wakes every waiter.
    let _ = crate::ops::crash_point("guaranteed.woken");
}

/// A wake of pool `gp`'s word ended this thread's sleep but nothing moved for it (a
/// sleep on `futex_waitv`, which every wake ends): passes the wake on at once to the
/// bits of the releases since its snapshot, which becomes now, and it sleeps on.
pub fn not_for_me<R: Region>(r: &R, gp: usize) {
    let bits = moved_since(key(r.g_head_rec(gp)), snap(r, gp));
    if bits != 0 {
        crate::waiting::guaranteed_wake(r, gp, bits, 1);
    }
}

/// After this thread's ask on pool `gp` (granted or refused): if a wake ended its
/// sleep before it, passes one wake on to the bits of the releases since its snapshot,
/// when `serves(bits)` (the state after the ask, [`may_serve`]) says units are free for
/// them. Called only when [`owes_any`].
#[cold]
pub fn after_ask<R: Region>(r: &R, gp: usize, serves: impl FnOnce(u32) -> bool) {
    let k = key(r.g_head_rec(gp));
    if WOKEN.try_with(Cell::get).ok() != Some(k) {
        return;
    }
    let _ = WOKEN.try_with(|w| w.set(0));
    let bits = moved_since(k, snap(r, gp));
    if bits != 0 && serves(bits) {
        crate::waiting::guaranteed_wake(r, gp, bits, 1);
    }
}

/// Whether a waiter sleeping with a bit of `bits` may be served from the units free in
/// `st` at `now`: some tenant has room in its guarantee and either its bit is one of
/// `bits` (its waiters may take it) or it may lend (a borrower may). A waiter whose
/// bits it names and whose request fits nothing free is refused again: this only says
/// that a pass may not be wasted.
pub fn may_serve(st: &State, rules: &Rules, bits: u32, now: u64) -> bool {
    let n = rules.tenants();
    let mut used = vec![0u64; n];
    for l in &st.leases {
        if let Some(u) = used.get_mut(l.tenant as usize) {
            *u = u.saturating_add(l.own);
        }
    }
    for s in &st.slices {
        if let Some(u) = used.get_mut(s.lender as usize) {
            *u = u.saturating_add(s.units);
        }
    }
    let now = now.max(st.clock).max(rules.started_at);
    (0..n).any(|t| {
        rules.guarantees[t] > used[t]
            && (bits & tenant_bit(t as u16) != 0 || st.lendable(rules, t, now))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guaranteed::state::Call;
    use crate::guaranteed::state::tests::even_pair;
    use crate::guaranteed::waiters::BORROW_BIT;

    fn snap_of(wake: u32, bytes: [(usize, u8); 2]) -> Snap {
        let mut epochs = [0u64; 4];
        for (bit, v) in bytes {
            epochs[bit / 8] |= (v as u64) << (8 * (bit % 8));
        }
        Snap { wake, epochs }
    }

    #[test]
    fn moved_names_the_bits_whose_epochs_moved() {
        let was = snap_of(7, [(3, 1), (31, 9)]);
        // No bump: nothing moved (a release's adds without its bump yet wake later).
        assert_eq!(moved(&was, &snap_of(7, [(3, 2), (31, 9)])), 0);
        assert_eq!(moved(&was, &snap_of(8, [(3, 2), (31, 9)])), 1 << 3);
        assert_eq!(
            moved(&was, &snap_of(9, [(3, 2), (31, 10)])),
            1 << 3 | BORROW_BIT
        );
        assert_eq!(
            moved(&was, &snap_of(8, [(12, 1), (31, 9)])),
            1 << 3 | 1 << 12
        );
        // A bump with no epoch moved: an older library's reap or reset, every bit.
        assert_eq!(moved(&was, &snap_of(8, [(3, 1), (31, 9)])), EVERY_BIT);
        // 256 bumps or more: a byte may have come round.
        assert_eq!(moved(&was, &snap_of(7 + 256, [(3, 1), (31, 9)])), EVERY_BIT);
        assert_eq!(moved(&was, &snap_of(6, [(3, 2), (31, 9)])), EVERY_BIT);
    }

    #[test]
    fn may_serve_says_whether_units_are_free_for_the_bits() {
        let cfg = even_pair("a");
        let rules = Rules::new(&cfg);
        let mut st = State::new(&rules);
        let (a, b) = (tenant_bit(0), tenant_bit(1));
        let ask = |st: &mut State, tenant, cost, now| {
            st.apply(
                &rules,
                Call::Acquire {
                    tenant,
                    cost,
                    hold_ms: 1,
                    owner: 0,
                    now,
                },
            )
            .unwrap()
        };
        // a holds its whole guarantee; b, which has never acted, may lend.
        ask(&mut st, 0, 50, 0);
        assert!(
            may_serve(&st, &rules, a, 0),
            "b's idle room, for a borrower"
        );
        // b active: nothing free for a's waiters, b's room for b's.
        ask(&mut st, 1, 10, 0);
        assert!(!may_serve(&st, &rules, a, 0));
        assert!(!may_serve(&st, &rules, BORROW_BIT, 0));
        assert!(may_serve(&st, &rules, b, 0));
        assert!(may_serve(&st, &rules, a | b, 0));
        // b full too: nothing for anyone.
        ask(&mut st, 1, 40, 0);
        assert!(!may_serve(&st, &rules, EVERY_BIT, 0));
    }
}
