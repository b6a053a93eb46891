//! The anchor's second job: watching its peers, so that a dead process's permits come
//! back at once even when nobody is blocked and nobody calls `reap_dead`.
//!
//! Every registered process has an anchor thread (see `anchor`), idle in the kernel.
//! While it lives it also sleeps, with one `futex_waitv`, on:
//! - its stop word (set when its `Table` is dropped);
//! - the header's `registry` word, bumped by every registration once its anchor holds
//!   its tid, so that a new process is watched from then on;
//! - the owner words of up to 126 other LIVE, anchored processes, armed with `WAITERS`
//!   (`waiting::watch::arm`), so that the kernel wakes one waiter of the word when that
//!   process's anchor dies.
//!
//! Woken, it looks again: a LIVE slot whose owner word says `OWNER_DIED` is dying. It
//! waits for the process to be wholly gone (a pidfd, which the kernel signals when the
//! last thread exits; a few ms at most), reaps the slot (`recovery::reap_slot`, noticed
//! by `WATCHER`), wakes the waiters of the pools that got units back, and wakes the
//! other sleepers on the dead word (the kernel woke only one). With more than 126
//! peers, each anchor watches the 126 that follow its own slot, so every slot is
//! watched by the anchors of the slots just before it.
//!
//! Every second it also sweeps (`SWEEP`): every slot is judged as `reap_dead` judges
//! it, which catches unanchored processes (judged by `/proc`), a slot killed while
//! claiming, and a death whose single kernel wake went to a process that died too.

use std::time::{Duration, Instant};

use crate::layout::noticed;
use crate::liveness;
use crate::recovery::{self, Reaped, Reaper};
use crate::region::Region;
use crate::segment::Segment;
use crate::sync::{AtomicU32, Ordering::*};
use crate::waiting::{self, WAITV_MAX, Watch};

/// How often an anchor sweeps every slot.
pub const SWEEP: Duration = Duration::from_secs(1);
/// First bound on the wait for a dying process to exit; it doubles up to `SWEEP` while
/// the process lingers (the wait ends as soon as it is gone).
const DYING_PAUSE: Duration = Duration::from_millis(1);

/// Watches the peers of process slot `me` until `stop` is non-zero, reaping as
/// `(pid, start time)`.
pub fn run(seg: &Segment, me: usize, stop: &AtomicU32, (pid, start_time): (u32, u64)) {
    let reaper = |how| Reaper {
        pid,
        start_time,
        how,
    };
    let mut next_sweep = Instant::now() + SWEEP;
    let mut pause = DYING_PAUSE;
    let mut watch: Vec<Watch<'_>> = Vec::with_capacity(WAITV_MAX);
    // Acquire: pairs with `detach`'s Release store.
    while stop.load(Acquire) == 0 {
        if seg.check_size().is_err() {
            // Truncated under us: reading the mapping would raise SIGBUS in this
            // process. Watch nothing; look again at the next sweep.
            let only_stop = [Watch {
                word: stop,
                val: 0,
            }];
            waiting::sleep_on(&only_stop, Instant::now() + SWEEP);
            continue;
        }
        // Read before the scan (Acquire: pairs with the registrant's Release bump, so
        // its slot is seen LIVE with its tid): a registration after the scan changes
        // the word and ends the sleep below at once.
        let epoch = seg.registry().load(Acquire);
        watch.clear();
        watch.push(Watch {
            word: stop,
            val: 0,
        });
        watch.push(Watch {
            word: seg.registry(),
            val: epoch,
        });
        let room = WAITV_MAX - watch.len();
        let behind = waiting::watch::watch(seg, me, None, room, &mut watch);
        if behind.dying > 0 {
            liveness::wait_exit(behind.dying_procs(), pause);
            // A process that lingers (a thread stuck in the kernel) is waited for
            // longer each time, so this loop never spins.
            pause = if sweep(seg, me, reaper(noticed::WATCHER)) == 0 {
                (pause * 2).min(SWEEP)
            } else {
                DYING_PAUSE
            };
            continue;
        }
        waiting::sleep_on(&watch, next_sweep);
        // (Size checked again: the file may have been truncated while we slept.)
        if Instant::now() >= next_sweep && seg.check_size().is_ok() {
            sweep(seg, me, reaper(noticed::SWEEP));
            next_sweep = Instant::now() + SWEEP;
        }
    }
}

/// Reaps every dead process but slot `me`'s, as `reaper`; wakes whoever else sleeps on
/// a reaped slot's owner word (the kernel woke one waiter only) and the waiters of the
/// pools that got units back. Returns how many slots it reaped.
fn sweep(seg: &Segment, me: usize, reaper: Reaper) -> usize {
    let mut reaped = Vec::new();
    for s in (0..seg.geometry().procs).filter(|&s| s != me) {
        // An error leaves the slot to the next reaper and to `Table::repair`; the
        // anchor has nobody to report it to.
        if let Ok(Some(r)) = recovery::reap_slot(seg, s, reaper, &liveness::is_dead) {
            reaped.push(r);
            waiting::wake_word(seg.proc_slot(s).owner_futex.as_ptr(), u32::MAX);
        }
    }
    announce(seg, &reaped);
    reaped.len()
}

/// After slots were emptied: resizes `per_worker` pools and wakes waiters for the units
/// that came back (the guaranteed pools' too). A fair pool's waiters are woken for the
/// units taken off its tenants' holds, a revoked resident's among them: its pool unit
/// is its revoker's, but its tenant, holding less, may now be under its share. And for
/// the dead process's waiters taken out of the pool's count: one killed as a wake
/// ended its sleep took it along (the test
/// `a_waiter_killed_as_a_wake_ends_its_sleep_leaves_no_one_asleep_for_it`).
pub fn announce(seg: &Segment, out: &[Reaped]) {
    if out.is_empty() {
        return;
    }
    crate::capacity::recompute(seg, seg.config());
    for r in out {
        for (p, &units) in r.held_units_returned.iter().enumerate() {
            // A waiter killed as a wake ended its sleep took the wake with it, and
            // passed none on: one more for each waiter taken out.
            let gone = r.waiters_taken_out.get(p).copied().unwrap_or(0);
            let n = units.saturating_add(gone);
            if n > 0 {
                waiting::reaped(seg.pool(p), n.min(u32::MAX as u64) as u32);
            }
        }
    }
    // Every waiter of every guaranteed pool, whatever the dead held: a reap may give
    // back several leases, and a dead waiter woken before its death took a wake that
    // it had to pass on (`guaranteed::pass`). Rare: a death.
    for gp in 0..seg.g_pools() {
        waiting::guaranteed_freed(seg, gp, crate::guaranteed::waiters::EVERY_BIT, u32::MAX);
    }
}
