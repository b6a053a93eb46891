//! A thread's spare lease: the slot its last release left `CLAIMED`, so that its next
//! acquire on the same engine needs no claim CAS; freed when the thread exits, through
//! the list of engines alive in this process.

use std::cell::Cell;
use std::sync::Mutex;

use crate::layout::{LeaseRec, RECORD};
use crate::sync::AtomicU64;

/// A thread's spare lease: released by it, kept `CLAIMED` under the next generation so
/// that its next acquire on the same engine needs no claim CAS.
#[derive(Clone, Copy)]
pub(super) struct Spare {
    pub(super) engine: u64,
    pub(super) lease: u32,
    pub(super) generation: u32,
}

/// The calling thread's spare. It has no destructor, so that its accesses on the hot
/// path compile to a plain thread-local load or store (a thread-local with one is
/// reached through a registration check that the inliner may leave out of line: it
/// did, once the release grew the residents' branch, at +40 instructions a pair). The
/// spare is freed when the thread exits by [`SpareGuard`], armed at the thread's first
/// spare.
pub(super) struct SpareCell(pub(super) Cell<Option<Spare>>);

/// Frees the thread's spare at its exit, if its engine still lives.
struct SpareGuard;

impl Drop for SpareGuard {
    fn drop(&mut self) {
        if let Ok(Some(s)) = SPARE.try_with(|c| c.0.take()) {
            free_spare(s);
        }
    }
}

std::thread_local! {
    pub(super) static SPARE: SpareCell = const { SpareCell(Cell::new(None)) };
    static SPARE_GUARD: SpareGuard = const { SpareGuard };
    static GUARDED: Cell<bool> = const { Cell::new(false) };
}

/// Keeps `s` as the calling thread's spare (arming the exit guard the first time).
#[inline(always)]
pub(super) fn keep_spare(s: Spare) {
    if !GUARDED.with(Cell::get) {
        arm_spare_guard();
    }
    SPARE.with(|c| c.0.set(Some(s)));
}

#[cold]
fn arm_spare_guard() {
    // Touching it registers its destructor for this thread.
    let _ = SPARE_GUARD.try_with(|_| ());
    GUARDED.with(|g| g.set(true));
}

/// Engines alive in this process: (id, address of its first lease record, leases). A
/// thread that exits frees its spare through this, under the lock, so the engine cannot
/// unmap meanwhile (its drop takes the lock to leave the list first).
pub(super) static LIVE: Mutex<Vec<(u64, usize, usize)>> = Mutex::new(Vec::new());
pub(super) static NEXT_ENGINE: AtomicU64 = AtomicU64::new(1);

pub(super) fn free_spare(s: Spare) {
    let live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&(_, first, n)) = live.iter().find(|(id, ..)| *id == s.engine)
        && (s.lease as usize) < n
    {
        // SAFETY:
        //   * `first` is the address of lease record 0 of a mapping that stays mapped
        //     while its engine is in `LIVE` (we hold the lock it needs to leave it);
        //   * `s.lease < n`, the number of lease records, so the record is inside it;
        //   * records are `#[repr(C)]` atomics, valid for any bits, shared by design.
        let rec = unsafe { &*((first + s.lease as usize * RECORD) as *const LeaseRec) };
        crate::ops::free_lease(rec, s.generation, crate::layout::lease_state::CLAIMED);
    }
}
