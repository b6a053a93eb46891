//! `shmtool check`: every invariant the segment lets one verify from outside.

use crate::Table;
use crate::error::Result;
use crate::layout::{lease_state as ls, op_word, pair, proc_state as ps};
use crate::region::Region;
use crate::sync::Ordering::*;

/// Each violated invariant, one line each (empty: sound). Besides [`Table::check`]
/// (each pool's and tenant's counters equal the sums of their leases; each pool's
/// `waiters` equals what its processes announce; every record in a state some version
/// writes): each pool's units in use are within its capacity (a
/// `per_worker` pool's within the tickets of a worker in every process slot: it
/// shrinks below what is held when workers go); no
/// lease belongs to a free process slot, nor to a process that is dead (its permits
/// wait for a reap); no acquire or release is pending whose process is gone; no
/// waiters are counted in the slot of a process that is gone (a dead one's wait for a
/// reap to take them out of the pool's `waiters`). Reads only, so it runs on an
/// observer.
pub fn check(t: &Table) -> Result<Vec<String>> {
    let mut out = t.check()?;
    let seg = t.engine().seg();
    let geo = *seg.geometry();
    for p in 0..geo.pools {
        let rec = seg.pool(p);
        // Acquire / Relaxed: a report of words each true at some instant.
        let in_use = op_word::count(rec.word.load(Acquire));
        // Relaxed: a report (see above).
        let cap = pair::lo(rec.limits.load(Relaxed));
        let pc = &t.config().pools[p];
        match pc.per_worker {
            // A per_worker pool shrinks when a worker goes, and its holders keep what
            // they hold: in use past today's tickets is how it drains (no grant until
            // under them). Every grant fitted the tickets of its day, at most those of
            // a worker in every process slot.
            Some(pw) => {
                let most = pw.most_tickets(geo.procs);
                if in_use > most {
                    out.push(format!(
                        "pool {:?}: {in_use} units in use, over the most tickets it can have \
                         ({most}, with a worker in each of its {} process slots)",
                        pc.name, geo.procs
                    ));
                }
            }
            None if in_use > cap => out.push(format!(
                "pool {:?}: {in_use} units in use, over its capacity {cap}",
                pc.name
            )),
            None => {}
        }
    }
    let mut dead_slots = Vec::new();
    for s in 0..geo.procs {
        let v = crate::liveness::view(seg, s);
        dead_slots.push(match v.status {
            ps::FREE => Some("free"),
            ps::LIVE if crate::liveness::is_dead(v.pid, v.start_time) => Some("dead"),
            _ => None,
        });
    }
    for l in 0..geo.leases() {
        // Acquire: the state word publishes the lease's fields.
        let st = seg.lease(l).state.load(Acquire);
        let state = ls::state(st);
        if matches!(state, ls::FREE | ls::CLAIMED) {
            continue;
        }
        let slot = l / geo.leases_per_proc;
        let Some(owner) = dead_slots[slot] else {
            continue;
        };
        let kind = if matches!(state, ls::ACQUIRING | ls::RELEASING) {
            "an op in flight"
        } else {
            "a lease"
        };
        out.push(match owner {
            "dead" => format!(
                "lease {l} ({}) is {kind} of process slot {slot}, whose process (pid {}) is \
                 dead: reap returns its permits",
                ls::name(state),
                crate::liveness::view(seg, slot).pid
            ),
            _ => format!(
                "lease {l} ({}) is {kind} of process slot {slot}, which is free: owned by nobody",
                ls::name(state)
            ),
        });
    }
    // Waiters counted in a slot whose process is gone: a dead one's wait for a reap to
    // take them out of `waiters`; a free slot counts none (its reaper emptied it).
    for (s, owner) in dead_slots.iter().enumerate() {
        let Some(owner) = owner else { continue };
        for p in 0..geo.pools {
            // Relaxed: a report; a gone process's counts no longer change.
            let n = seg.slot_waiters(s, p).load(Relaxed);
            if n == 0 {
                continue;
            }
            let pool = &t.config().pools[p].name;
            out.push(match *owner {
                "dead" => format!(
                    "process slot {s}, whose process (pid {}) is dead, counts {} \
                     announced in pool {pool:?}: reap takes them out",
                    crate::liveness::view(seg, s).pid,
                    crate::refusal::plural(n, "waiter")
                ),
                _ => format!(
                    "process slot {s}, which is free, counts {} announced in pool \
                     {pool:?}: owned by nobody",
                    crate::refusal::plural(n, "waiter")
                ),
            });
        }
    }
    Ok(out)
}
