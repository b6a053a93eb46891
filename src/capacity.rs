//! Worker-sized capacity (`per_worker` pools), recomputed as workers come and go.
//!
//! `tickets = min(workers, max(ceil(quota * workers), min_tickets))` over the `LIVE`
//! process slots: a process registers as a worker on its first acquire, so observers
//! (`shmtool`, a snapshot reader) never count, nor do tools' registrations, nor those
//! of processes that have only claimed tenant names (`proc_state::TOOL`).
//! Registration and reaping call [`recompute`]. When the capacity shrinks below what
//! is held nothing is revoked: `decide` simply refuses until `in_use` falls under the
//! new capacity. When it grows, the new tickets wake waiters as released permits do.

use crate::config::{Config, floor_of};
use crate::layout::{pair, proc_state as ps};
use crate::region::Region;
use crate::sync::Ordering::*;

/// Processes with a `LIVE` slot now: the workers. A process counts once however many
/// slots it holds (each handle that registers takes a slot of its own: two `Table`s
/// opened on one segment in one worker are still one worker).
pub fn live_workers<R: Region>(r: &R) -> u32 {
    let mut pids: Vec<u32> = (0..r.geometry().procs)
        .filter_map(|s| {
            let st = r.proc_slot(s).state.load(Acquire);
            (ps::status(st) == ps::LIVE && !ps::is_tool(st)).then(|| ps::pid(st))
        })
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids.len() as u32
}

/// Stores every pool's capacity and floor as the config sets them (at creation, and
/// when a repair or a call finds them garbage), `per_worker` pools' for the live
/// workers.
pub fn reset<R: Region>(r: &R, cfg: &Config) {
    for (p, pc) in cfg.pools.iter().enumerate() {
        let floor = floor_of(pc.capacity, pc.floor_percent);
        // Relaxed: an input frozen into each descriptor (see `admission`).
        r.pool(p).limits.store(pair::make(pc.capacity, floor), Relaxed);
    }
    recompute(r, cfg);
}

/// Stores every `per_worker` pool's capacity (and floor) for the live workers; returns
/// the worker count used. Two processes recomputing at once may interleave; each
/// re-counts after storing and goes again if the count moved, so the last writer
/// stores the count it saw last.
pub fn recompute<R: Region>(r: &R, cfg: &Config) -> u32 {
    loop {
        let workers = live_workers(r);
        for (p, pc) in cfg.pools.iter().enumerate() {
            if let Some(pw) = pc.per_worker {
                let tickets = pw.tickets(workers);
                let floor = floor_of(tickets, pc.floor_percent);
                // SeqCst: an input frozen into each descriptor (see `admission`), and
                // the grower's half of the handshake with a blocked acquire (see the
                // engine's load of it): the store, then `released`'s load of `waiters`.
                let old = r.pool(p).limits.swap(pair::make(tickets, floor), SeqCst);
                // New tickets are permits come free: they wake waiters as a release
                // does, under-share ones first.
                #[cfg(not(loom))]
                if tickets > pair::lo(old) {
                    crate::waiting::released(r.pool(p), tickets - pair::lo(old));
                } else if tickets < pair::lo(old) && pc.evict {
                    // Fewer tickets lower every share: a spawn may evict now.
                    crate::waiting::shares_fell(r.pool(p));
                }
                #[cfg(loom)]
                let _ = old;
            }
        }
        if live_workers(r) == workers {
            return workers;
        }
    }
}
