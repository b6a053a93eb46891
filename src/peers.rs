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

use crate::layout::owner_word::{self, Owner};
use crate::layout::{noticed, proc_state as ps};
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
/// Peers one anchor watches: `futex_waitv` takes 128 words, two are the stop word and
/// `registry`.
const WATCHED: usize = WAITV_MAX - 2;

/// Watches the peers of process slot `me` until `stop` is non-zero.
pub fn run(seg: &Segment, me: usize, stop: &AtomicU32, reaper: (u32, u64)) {
    let procs = seg.geometry().procs;
    let mut next_sweep = Instant::now() + SWEEP;
    let mut pause = DYING_PAUSE;
    let mut watch: Vec<Watch<'_>> = Vec::with_capacity(WATCHED + 2);
    let mut dying: Vec<(usize, u32, u64)> = Vec::new();
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
        dying.clear();
        watch.push(Watch {
            word: stop,
            val: 0,
        });
        watch.push(Watch {
            word: seg.registry(),
            val: epoch,
        });
        for i in 1..procs {
            let s = (me + i) % procs;
            let rec = seg.proc_slot(s);
            // Acquire, both: the slot's fields and its anchor's tid are published by
            // Release stores.
            let st = rec.state.load(Acquire);
            if ps::status(st) != ps::LIVE {
                continue;
            }
            let died = match owner_word::decode(rec.owner_futex.load(Acquire)) {
                Owner::Alive { .. } if watch.len() < WATCHED + 2 => {
                    match waiting::watch::arm(&rec.owner_futex) {
                        Some(val) => {
                            watch.push(Watch {
                                word: &rec.owner_futex,
                                val,
                            });
                            false
                        }
                        None => true,
                    }
                }
                Owner::Alive { .. } | Owner::Unanchored => false,
                Owner::Died => true,
            };
            if died {
                // Relaxed: read after the Acquire load of LIVE.
                dying.push((s, ps::pid(st), rec.start_time.load(Relaxed)));
            }
        }
        if !dying.is_empty() {
            let procs: Vec<(u32, u64)> = dying.iter().map(|&(_, p, t)| (p, t)).collect();
            liveness::wait_exit(&procs, pause);
            let mut reaped = Vec::new();
            for &(s, ..) in &dying {
                reap(seg, s, reaper, noticed::WATCHER, &mut reaped);
            }
            announce(seg, &reaped);
            // A process that lingers (a thread stuck in the kernel) is waited for
            // longer each time, so this loop never spins.
            pause = if reaped.is_empty() {
                (pause * 2).min(SWEEP)
            } else {
                DYING_PAUSE
            };
            continue;
        }
        waiting::sleep_on(&watch, next_sweep);
        // (Size checked again: the file may have been truncated while we slept.)
        if Instant::now() >= next_sweep && seg.check_size().is_ok() {
            let mut reaped = Vec::new();
            for s in (0..procs).filter(|&s| s != me) {
                reap(seg, s, reaper, noticed::SWEEP, &mut reaped);
            }
            announce(seg, &reaped);
            next_sweep = Instant::now() + SWEEP;
        }
    }
}

/// Reaps slot `s` if its process is dead, and wakes whoever else sleeps on its owner
/// word (the kernel woke one waiter only).
fn reap(seg: &Segment, s: usize, (pid, start_time): (u32, u64), how: u32, out: &mut Vec<Reaped>) {
    let reaper = Reaper {
        pid,
        start_time,
        how,
    };
    // An error leaves the slot to the next reaper and to `Table::repair`; the anchor
    // has nobody to report it to.
    if let Ok(Some(r)) = recovery::reap_slot(seg, s, reaper, &liveness::is_dead) {
        out.push(r);
        waiting::wake_word(seg.proc_slot(s).owner_futex.as_ptr(), u32::MAX);
    }
}

/// After slots were emptied: resizes `per_worker` pools and wakes waiters for the units
/// that came back.
pub fn announce(seg: &Segment, out: &[Reaped]) {
    if out.is_empty() {
        return;
    }
    crate::capacity::recompute(seg, seg.config());
    for (p, &units) in out.iter().flat_map(|r| r.units_returned.iter().enumerate()) {
        if units > 0 {
            waiting::released(seg.pool(p), units.min(u32::MAX as u64) as u32);
        }
    }
}
