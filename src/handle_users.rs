//! Who is using a C ABI table handle: the calls in flight on it, counted so that
//! `fairshm_close` in one thread waits for the calls of other threads to return
//! instead of unmapping the table under them (a Python or Ruby thread blocked in an
//! acquire while another closes the table crashed the process).
//!
//! One word: `CLOSED` (bit 63), the fork epoch the count was made in (bits 32..63),
//! and the count (bits 0..32). The epoch is there because a forked child inherits the
//! word with the counts of its parent's calls in flight, whose threads the child does
//! not have: a count of another epoch is dropped, not waited for. The epoch grows
//! along every line of forks (`selfid::epoch`), so a word a process inherited never
//! carries that process's own epoch.

use crate::sync::{AtomicU64, Ordering::*};

const CLOSED: u64 = 1 << 63;
const EPOCH_SHIFT: u32 = 32;
const EPOCH_MASK: u64 = (1 << 31) - 1;
const COUNT_MASK: u64 = (1 << 32) - 1;

/// The calls in flight on a handle, and whether it is closing.
pub(crate) struct Users(AtomicU64);

impl Users {
    /// No call in flight, not closing, counted in fork epoch `epoch`.
    pub(crate) fn new(epoch: u64) -> Self {
        Users(AtomicU64::new((epoch & EPOCH_MASK) << EPOCH_SHIFT))
    }

    /// The count of `word` if it was made in epoch `e`, else 0 (a parent's calls).
    fn count_in(word: u64, e: u64) -> u64 {
        if (word >> EPOCH_SHIFT) & EPOCH_MASK == e {
            word & COUNT_MASK
        } else {
            0
        }
    }

    /// While the handle is not closing, replaces the word `cur` with `next(cur, e)`,
    /// `e` being `epoch`'s bits, and returns true; false, changing nothing, once
    /// closing has begun. The one CAS loop of `enter` and `close`.
    fn unless_closed(&self, epoch: u64, next: impl Fn(u64, u64) -> u64) -> bool {
        let e = epoch & EPOCH_MASK;
        // Relaxed: the count itself is all this orders. A call counted in is before
        // `close`'s `CLOSED` in this word's modification order (else the CAS would
        // have seen `CLOSED`), so `close` waits for its `leave`, whose Release orders
        // the call's use of the table before `close`'s Acquire in `drained`.
        let mut cur = self.0.load(Relaxed);
        while cur & CLOSED == 0 {
            match self
                .0
                .compare_exchange_weak(cur, next(cur, e), Relaxed, Relaxed)
            {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
        false
    }

    /// Counts a call in (this process being in fork epoch `epoch`); false, counting
    /// nothing, once closing has begun. A `true` must be matched by one `leave`.
    pub(crate) fn enter(&self, epoch: u64) -> bool {
        self.unless_closed(epoch, |cur, e| {
            let count = Self::count_in(cur, e);
            debug_assert!(count < COUNT_MASK, "2^32 calls in flight on one handle");
            (e << EPOCH_SHIFT) | (count + 1)
        })
    }

    /// Counts a call out (one `enter` that returned true).
    pub(crate) fn leave(&self) {
        // Release: the call's use of the table happens before `close` takes it (see
        // `unless_closed`).
        let prev = self.0.fetch_sub(1, Release);
        debug_assert!(prev & COUNT_MASK != 0, "a leave without its enter");
    }

    /// Begins closing (in fork epoch `epoch`): from now on `enter` refuses. Returns
    /// false if closing had begun already (a second close).
    pub(crate) fn close(&self, epoch: u64) -> bool {
        self.unless_closed(epoch, |cur, e| {
            CLOSED | (e << EPOCH_SHIFT) | Self::count_in(cur, e)
        })
    }

    /// Whether every call counted in before `close` has left.
    pub(crate) fn drained(&self) -> bool {
        // Acquire: pairs with `leave`'s Release (every RMW on the word continues its
        // release sequence), so the calls' uses of the table happen before this.
        self.0.load(Acquire) & COUNT_MASK == 0
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn counts_in_and_out_and_refuses_once_closing() {
        let u = Users::new(0);
        assert!(u.enter(0) && u.enter(0));
        assert!(u.close(0), "the first close begins closing");
        assert!(!u.close(0), "a second close is told so");
        assert!(!u.enter(0), "no call is counted in once closing");
        assert!(!u.drained());
        u.leave();
        assert!(!u.drained());
        u.leave();
        assert!(u.drained());
    }

    #[test]
    fn a_forked_child_drops_its_parents_counts() {
        // The parent (epoch 3) has two calls in flight when it forks; the child is in
        // epoch 4 and has neither thread.
        let u = Users::new(3);
        assert!(u.enter(3) && u.enter(3));
        assert!(u.enter(4), "the child's call is counted on its own");
        assert!(u.close(4));
        assert!(!u.drained(), "the child's own call is waited for");
        u.leave();
        assert!(u.drained(), "the parent's two are not");
        // A child that closes before any call of its own does not wait at all.
        let v = Users::new(3);
        assert!(v.enter(3));
        assert!(v.close(4) && v.drained());
    }
}

/// loom: calls and a close race on one handle. A call uses the table only when counted
/// in, the close takes it only once drained, and loom's `UnsafeCell` fails the model
/// on any access to the table that the protocol does not order before the take.
#[cfg(all(test, loom))]
mod loom_model {
    use super::Users;
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;

    fn model(close_waits: bool) {
        loom::model(move || {
            let h = Arc::new((Users::new(0), UnsafeCell::new(Some(7u64))));
            let callers: Vec<_> = (0..2)
                .map(|_| {
                    let h = h.clone();
                    loom::thread::spawn(move || {
                        if h.0.enter(0) {
                            // SAFETY: loom's cell checks this read against the take.
                            let v = h.1.with(|p| unsafe { *p });
                            assert_eq!(v, Some(7), "a call counted in finds the table");
                            h.0.leave();
                        }
                    })
                })
                .collect();
            assert!(h.0.close(0));
            while close_waits && !h.0.drained() {
                loom::thread::yield_now();
            }
            // SAFETY: loom's cell checks this write against the calls' reads.
            h.1.with_mut(|p| unsafe { *p = None });
            for c in callers {
                c.join().unwrap();
            }
        });
    }

    #[test]
    fn loom_close_waits_for_the_calls_in_flight() {
        model(true);
    }

    #[test]
    #[should_panic]
    fn loom_catches_a_close_that_does_not_wait() {
        model(false);
    }
}
