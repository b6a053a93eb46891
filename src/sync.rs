//! The one door to atomics.
//!
//! Every atomic in fairshm, in shared memory or not, is named through this module, so
//! that `--cfg loom` swaps all of them for loom's model-checked versions at once. Under
//! loom the records live on the heap (see [`crate::region::HeapRegion`]); otherwise they
//! are `#[repr(C)]` overlays on the mapping, and std's atomics have the exact size and
//! alignment of the integers they wrap, which the layout relies on.
//!
//! `tests/shim_only.rs` fails if any other file under `src/` names `std::sync::atomic`
//! or `core::sync::atomic`.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};

#[cfg(all(not(loom), not(feature = "count-locked")))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};

#[cfg(all(not(loom), feature = "count-locked"))]
pub(crate) use counting::{AtomicU32, AtomicU64};
#[cfg(all(not(loom), feature = "count-locked"))]
pub use counting::{locked_instructions, plain_stores};
#[cfg(all(not(loom), feature = "count-locked"))]
pub(crate) use std::sync::atomic::{Ordering, fence};

/// The feature `count-locked` (tests only) wraps std's atomics to count, per thread,
/// the operations that x86-64 compiles to a locked instruction: every read-modify-write
/// (`lock cmpxchg`, `lock xadd`, `xchg`) and every SeqCst store (`xchg`). Same size and
/// alignment (`repr(transparent)`), so the layout is unchanged. `tests/locked.rs` uses
/// it to count the locked instructions of an uncontended pair, a figure no host changes,
/// and (with the plain stores, also counted) to keep the ratios bench's skeleton of the
/// pair making the pair's traffic.
#[cfg(all(not(loom), feature = "count-locked"))]
mod counting {
    use std::cell::Cell;
    use std::sync::atomic::Ordering;

    std::thread_local! {
        static LOCKED: Cell<u64> = const { Cell::new(0) };
        static PLAIN_STORES: Cell<u64> = const { Cell::new(0) };
    }

    #[inline]
    fn locked() {
        LOCKED.with(|c| c.set(c.get() + 1));
    }

    /// Locked instructions this thread has executed on fairshm's atomics so far.
    pub fn locked_instructions() -> u64 {
        LOCKED.with(|c| c.get())
    }

    /// Stores that are not locked (every ordering but SeqCst) this thread has made to
    /// fairshm's atomics so far.
    pub fn plain_stores() -> u64 {
        PLAIN_STORES.with(|c| c.get())
    }

    macro_rules! counted {
        ($name:ident, $inner:ty, $int:ty) => {
            #[repr(transparent)]
            #[derive(Debug, Default)]
            pub struct $name($inner);

            impl $name {
                pub const fn new(v: $int) -> Self {
                    Self(<$inner>::new(v))
                }
                #[inline]
                pub fn load(&self, o: Ordering) -> $int {
                    self.0.load(o)
                }
                #[inline]
                pub fn store(&self, v: $int, o: Ordering) {
                    if o == Ordering::SeqCst {
                        locked();
                    } else {
                        PLAIN_STORES.with(|c| c.set(c.get() + 1));
                    }
                    self.0.store(v, o)
                }
                #[inline]
                pub fn swap(&self, v: $int, o: Ordering) -> $int {
                    locked();
                    self.0.swap(v, o)
                }
                #[inline]
                pub fn compare_exchange(
                    &self,
                    a: $int,
                    b: $int,
                    s: Ordering,
                    f: Ordering,
                ) -> Result<$int, $int> {
                    locked();
                    self.0.compare_exchange(a, b, s, f)
                }
                #[inline]
                pub fn compare_exchange_weak(
                    &self,
                    a: $int,
                    b: $int,
                    s: Ordering,
                    f: Ordering,
                ) -> Result<$int, $int> {
                    locked();
                    self.0.compare_exchange_weak(a, b, s, f)
                }
                #[inline]
                pub fn fetch_add(&self, v: $int, o: Ordering) -> $int {
                    locked();
                    self.0.fetch_add(v, o)
                }
                #[inline]
                pub fn fetch_sub(&self, v: $int, o: Ordering) -> $int {
                    locked();
                    self.0.fetch_sub(v, o)
                }
                #[inline]
                pub fn fetch_max(&self, v: $int, o: Ordering) -> $int {
                    locked();
                    self.0.fetch_max(v, o)
                }
                #[inline]
                pub fn fetch_xor(&self, v: $int, o: Ordering) -> $int {
                    locked();
                    self.0.fetch_xor(v, o)
                }
                #[inline]
                pub fn as_ptr(&self) -> *mut $int {
                    self.0.as_ptr()
                }
                /// # Safety
                /// As `std`'s `from_ptr`: `ptr` is aligned, valid for the lifetime
                /// `'a`, and only accessed atomically meanwhile.
                pub unsafe fn from_ptr<'a>(ptr: *mut $int) -> &'a Self {
                    // SAFETY: `repr(transparent)` over the std atomic, which is itself
                    // `repr(C, align)` over the integer; the caller's contract.
                    unsafe { &*(ptr as *const Self) }
                }
            }
        };
    }
    counted!(AtomicU32, std::sync::atomic::AtomicU32, u32);
    counted!(AtomicU64, std::sync::atomic::AtomicU64, u64);
}

/// The longest spin of [`SpinBackoff`]: 2^8 = 256 `PAUSE`s.
#[cfg(not(loom))]
const SPIN_CAP: u32 = 8;

/// Back-off for the op protocol's CAS loops (an acquire's held and pool steps, a
/// release's take-backs): after the (k+1)-th CAS lost in a row it spins 2^k `PAUSE`s (k
/// at most [`SPIN_CAP`]), and it never yields.
///
/// Such a loop waits for nobody (a lost CAS means another op made progress), so giving
/// up the CPU helps nobody; and at 2 and 4 processes on one pool, letting the winner
/// finish its op's remaining steps on lines it holds, before taking them back, is what
/// the contended pair's throughput depends on. Measured side by side
/// (`docs/performance.md`, the pool of 1,000 at 2 and 4 processes): crossbeam's
/// `snooze`, which yields (a system call) from the eighth loss on, was slower than
/// this, and a cap of 2^3, or no back-off at all, slower still. Under loom: a no-op,
/// as [`Backoff::snooze`].
pub(crate) struct SpinBackoff {
    /// The exponent of the next spin: the losses so far, at most [`SPIN_CAP`].
    #[cfg(not(loom))]
    step: std::cell::Cell<u32>,
}

impl SpinBackoff {
    #[inline]
    pub(crate) fn new() -> Self {
        SpinBackoff {
            #[cfg(not(loom))]
            step: std::cell::Cell::new(0),
        }
    }

    /// Called after a CAS lost to another process's step, before retrying.
    #[inline]
    pub(crate) fn spin(&self) {
        #[cfg(not(loom))]
        {
            let k = self.step.get();
            for _ in 0..1u32 << k {
                std::hint::spin_loop();
            }
            if k < SPIN_CAP {
                self.step.set(k + 1);
            }
        }
    }
}

/// Back-off for the other retry loops: crossbeam's exponential spin-then-yield.
///
/// Under loom, a thread that waits for another must yield so that the model lets the
/// other threads run (`wait`).
pub(crate) struct Backoff {
    #[cfg(not(loom))]
    inner: crossbeam_utils::Backoff,
}

impl Backoff {
    #[inline]
    pub(crate) fn new() -> Self {
        Backoff {
            #[cfg(not(loom))]
            inner: crossbeam_utils::Backoff::new(),
        }
    }

    /// Called by the other retry loops (the guaranteed policy's block lock and
    /// snapshot, `repair`'s quiet look) before trying again: spins, then yields the CPU,
    /// since what they retry on may be another thread's unfinished step.
    ///
    /// Under loom it is a no-op, as [`SpinBackoff::spin`]: a yield there would add a
    /// free scheduling branch per contention point, which is what made the 3-thread
    /// model explode.
    #[inline]
    pub(crate) fn snooze(&self) {
        #[cfg(not(loom))]
        self.inner.snooze();
    }

    /// Called while waiting for another process to finish a step (a tenant name being
    /// written): under loom this must yield, or the waiting thread would spin forever.
    #[inline]
    pub(crate) fn wait(&self) {
        #[cfg(loom)]
        loom::thread::yield_now();
        #[cfg(not(loom))]
        self.inner.snooze();
    }
}

/// A Release store to a word that other processes may CAS at the same time (a lease's
/// state word, which settlers flag).
///
/// On the hardware a store is ordered in the word's modification order like any write,
/// so a concurrent CAS either lands before it (and is overwritten) or fails. loom 0.7
/// does not apply RMW atomicity to plain stores (tokio-rs/loom#254: a CAS can read the
/// value before the store and still be ordered after it), so under loom this is a
/// `swap`, which it models correctly and which has the same meaning here.
#[inline]
pub(crate) fn store_over_rmw(word: &AtomicU32, val: u32) {
    #[cfg(loom)]
    word.swap(val, Ordering::Release);
    #[cfg(not(loom))]
    word.store(val, Ordering::Release);
}

/// [`store_over_rmw`] for a 64-bit word, with the ordering `ord` (Release or SeqCst).
#[inline]
pub(crate) fn store_over_rmw64(word: &AtomicU64, val: u64, ord: Ordering) {
    #[cfg(loom)]
    word.swap(val, ord);
    #[cfg(not(loom))]
    word.store(val, ord);
}
