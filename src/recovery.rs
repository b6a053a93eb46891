//! Returning a dead process's permits, exactly.
//!
//! A reaper takes a dead process's slot (`LIVE` -> `REAPING`, naming itself), then
//! walks that process's lease range. By invariant (I1) of `ops`, what each lease still
//! counts is told by its state, and, for an op in progress, by the tags in its two
//! words and the flags in its state word:
//!
//! | state found   | meaning                                   | the reaper                     |
//! |---------------|-------------------------------------------|--------------------------------|
//! | `FREE`        | nothing                                   | -                              |
//! | `CLAIMED`     | private, counted nowhere                  | frees it                       |
//! | `ACQUIRING`   | held word, then pool word, maybe changed  | undoes what was done, as a release |
//! | `HELD`        | counted in both words                     | releases it                    |
//! | `RELEASING`   | pool word, then held word, maybe given back | finishes the release         |
//!
//! An interrupted acquire is turned into a release whose steps that the acquire never
//! made are marked done (`POOL_DONE`, `HELD_DONE`), then finished like any release; if
//! it made neither, the lease is simply freed. Only one reaper works on a slot at a
//! time (the `REAPING` CAS), and the owner is dead, so nothing else drives its leases.

use crate::error::{Error, Result};
use crate::layout::{lease_state as ls, op_word, pair, proc_state as ps};
use crate::ops;
use crate::region::Region;
use crate::sync::Ordering::*;

/// What reaping one process slot gave back.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Reaped {
    pub slot: usize,
    pub pid: u32,
    /// Leases that were held and are now released.
    pub leases_released: usize,
    /// Units returned to each pool, by index (a revoked resident's lease gives back its
    /// tenant's held unit only: the pool's is its revoker's, so it is not counted here).
    pub units_returned: Vec<u64>,
    /// Units taken off the tenants' holds in each pool, by index: those of
    /// `units_returned`, and a revoked resident's unit besides. A tenant that holds less
    /// can be admitted where it was past its share, so the pool's waiters are woken for
    /// these (see `peers::announce`).
    pub held_units_returned: Vec<u64>,
    /// Units returned, per guaranteed pool index.
    pub guaranteed_units_returned: Vec<u64>,
    /// Waiters the process had announced in each pool, by index, taken out of the
    /// pool's `waiters`. One killed as a wake ended its sleep took that wake with it,
    /// so the pool's waiters are woken for these too (see `peers::announce`).
    pub waiters_taken_out: Vec<u64>,
    /// Acquires in flight that were finished or dropped.
    pub in_flight: usize,
    /// Leases that could not be understood or finished, quarantined (see
    /// `layout::lease_state::QUARANTINED`) instead of stopping the walk.
    pub quarantined: usize,
}

/// Who is reaping, and how it noticed the death (recorded in the slot).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reaper {
    pub pid: u32,
    /// The reaper's start time (clock ticks), so that a reaper that dies mid-walk is
    /// told from a new process with its pid.
    pub start_time: u64,
    /// A `layout::noticed` code.
    pub how: u32,
}

impl Reaped {
    /// An empty report for slot `slot` of process `pid`, with a count for each of
    /// `pools` fair pools.
    pub fn new(slot: usize, pid: u32, pools: usize) -> Reaped {
        Reaped {
            slot,
            pid,
            units_returned: vec![0; pools],
            held_units_returned: vec![0; pools],
            waiters_taken_out: vec![0; pools],
            ..Reaped::default()
        }
    }
}

impl Reaper {
    /// A reaper known by its pid alone (models and unit tests, where it never dies).
    pub fn with_pid(pid: u32) -> Reaper {
        Reaper {
            pid,
            start_time: 0,
            how: crate::layout::noticed::CALL,
        }
    }

    /// The same, naming the reaper's start time too.
    pub fn started(self, start_time: u64) -> Reaper {
        Reaper { start_time, ..self }
    }

    /// The same, noticing a death by `how` (a `layout::noticed` code).
    pub fn noticing(self, how: u32) -> Reaper {
        Reaper { how, ..self }
    }

    /// This process, reaping because of `how`.
    pub fn me(how: u32) -> Reaper {
        let (pid, start_time) = crate::liveness::me();
        Reaper {
            pid,
            start_time,
            how,
        }
    }
}

/// Reaps slot `s` if its process is dead by `dead(pid, start)`. A slot already
/// `REAPING` by a dead reaper is taken over.
pub fn reap_slot<R: Region>(
    r: &R,
    s: usize,
    reaper: Reaper,
    dead: &dyn Fn(u32, u64) -> bool,
) -> Result<Option<Reaped>> {
    let rec = r.proc_slot(s);
    // Acquire: pairs with the Release store of LIVE, so the start time (Relaxed) is the
    // registrant's.
    let st = rec.state.load(Acquire);
    let start = rec.start_time.load(Relaxed);
    let me = ps::make(ps::REAPING, reaper.pid, reaper.start_time);
    let take = match ps::status(st) {
        ps::LIVE => crate::liveness::live_slot_dead(r, s, ps::pid(st), start, dead),
        ps::CLAIMING => crate::liveness::named_dead(st),
        ps::REAPING => st != me && crate::liveness::named_dead(st),
        _ => false,
    };
    // Acquire: the dead process's last writes are visible to our walk.
    if !take
        || rec
            .state
            .compare_exchange(st, me, Acquire, Relaxed)
            .is_err()
    {
        return Ok(None);
    }
    let pid = ps::pid(st);
    if ps::status(st) != ps::REAPING {
        // The first reaper of this death records it (a reaper taking over a dead
        // reaper's walk finds it recorded).
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        // Relaxed, these three: the slot is ours while REAPING; the Release store of
        // FREE publishes them.
        rec.death_pids.store(pair::make(pid, reaper.pid), Relaxed);
        rec.death_unix_ms.store(unix_ms, Relaxed);
        rec.death_info.store(pair::make(reaper.how, 0), Relaxed);
    }
    let out = empty_slot(r, s, pid);
    // Relaxed: as above.
    let info = rec.death_info.load(Relaxed);
    rec.death_info.store(
        pair::make(
            pair::lo(info),
            pair::hi(info).saturating_add(out.leases_released as u32),
        ),
        Relaxed,
    );
    free_slot(r, s);
    Ok(Some(out))
}

/// Takes slot `s`, found in state word `st`, as `reaper` (CAS to `REAPING`), empties it
/// and frees it. For a slot no reaper judges by liveness: the caller's own (LIVE, when
/// it deregisters), one in a state no version writes, or a free one whose leases were
/// left busy (both found by `repair`). `None` if the word changed.
pub fn take_slot<R: Region>(r: &R, s: usize, st: u64, reaper: Reaper) -> Option<Reaped> {
    let me = ps::make(ps::REAPING, reaper.pid, reaper.start_time);
    // Acquire: as a reaper's CAS (the leases' last changes are visible to the walk).
    r.proc_slot(s)
        .state
        .compare_exchange(st, me, Acquire, Relaxed)
        .ok()?;
    let out = empty_slot(r, s, ps::pid(st));
    free_slot(r, s);
    Some(out)
}

/// Gives back slot `s` of the live process `pid` (started at `start_time`; registered
/// as a tool if `tool`), which is the caller's own: whatever its leases still hold is
/// released, and the slot is freed. `None` if the slot is not `LIVE` for that process.
pub fn retire_slot<R: Region>(
    r: &R,
    s: usize,
    pid: u32,
    start_time: u64,
    tool: bool,
) -> Option<Reaped> {
    let live = ps::make(ps::LIVE | ps::kind(tool), pid, start_time);
    take_slot(r, s, live, Reaper::with_pid(pid).started(start_time))
}

/// Walks the lease range of slot `s`, taken (`REAPING`) by the caller.
fn empty_slot<R: Region>(r: &R, s: usize, pid: u32) -> Reaped {
    let geo = *r.geometry();
    let mut out = Reaped::new(s, pid, geo.pools);
    for l in s * geo.leases_per_proc..(s + 1) * geo.leases_per_proc {
        resolve_lease(r, l, &mut out);
    }
    // Guaranteed pools: one op per pool that holds a lease of the slot, written through
    // the slot's own blocks (ours while REAPING). A pool that cannot be read is left to
    // `check` to report; the slot is freed all the same.
    if let Ok(g) = crate::guaranteed::shared::reap_slot(r, s) {
        for (leases, units) in g {
            out.leases_released += leases as usize;
            out.guaranteed_units_returned.push(units);
        }
    }
    crate::tenants::clear_writer(r, s);
    take_out_waiters(r, s, &mut out);
    out
}

/// Takes the waiters that slot `s`'s process had announced (its `WaitingRec` counts) out
/// of the pools' `waiters`: a process killed while waiting never takes its own out.
/// (A slot given back by its live process counts none: its waiters are gone.) Each
/// count is emptied first (`swap`), so a reaper that takes the walk over after our
/// death takes out nothing twice; one that dies between the two steps leaves the
/// announcements in `waiters`, which costs spurious wakes, never a lost one, until
/// `Table::repair` recounts `waiters` from the slots (`repair::recount_waiters`). A count
/// larger than `waiters` (a hostile write) takes it to 0, not round. Each pool's count
/// is added to `out.waiters_taken_out`.
fn take_out_waiters<R: Region>(r: &R, s: usize, out: &mut Reaped) {
    for p in 0..r.geometry().pools {
        // Acquire: pairs with the waiter's Release raise, which follows its
        // announcement in `waiters` (so our subtraction comes after it).
        let k = r.slot_waiters(s, p).swap(0, Acquire);
        if k > 0 {
            // What was taken out (a hostile count past `waiters` took it to 0).
            let taken = take_out(r.pool(p), k);
            if let Some(n) = out.waiters_taken_out.get_mut(p) {
                *n += taken as u64;
            }
        }
    }
}

/// Takes `n` waiters out of `pool.waiters`, never below 0, and returns how many it took
/// out (fewer than `n` only when the count was lower: a write from outside, or a count
/// that `repair` recounted without a waiter stalled between its two counts). A wrap
/// round to `u32::MAX` would make every release of the pool wake for nobody. Used by a
/// waiter that leaves (`blocking`) and by the reaper of a dead one's slot (here, where
/// loom models it too).
pub fn take_out(pool: &crate::layout::PoolRec, n: u32) -> u32 {
    // SeqCst, the load and the CAS: as every access to `waiters` (the handshake in
    // `waiting`).
    let waiters = &pool.waiters;
    let mut seen = waiters.load(SeqCst);
    while let Err(now) = waiters.compare_exchange(seen, seen.saturating_sub(n), SeqCst, SeqCst) {
        seen = now;
    }
    n.min(seen)
}

/// Frees slot `s`, taken (`REAPING`) by the caller and emptied.
fn free_slot<R: Region>(r: &R, s: usize) {
    let rec = r.proc_slot(s);
    // Relaxed: the slot is ours while REAPING; the Release store of FREE publishes it.
    rec.start_time.store(0, Relaxed);
    // Release: everything above happens before the slot is claimed again.
    rec.state.store(ps::make(ps::FREE, 0, 0), Release);
}

/// Brings lease `l`, whose owner is dead or is the caller (which stopped driving it
/// after an error), to `FREE`, giving back what it held; a lease that cannot be
/// understood or finished is quarantined instead, and the walk goes on.
pub fn resolve_lease<R: Region>(r: &R, l: usize, out: &mut Reaped) {
    if recover_lease(r, l, out).is_err() {
        quarantine(r, l);
        out.quarantined += 1;
    }
}

/// Marks lease `l` `QUARANTINED` (keeping its generation), whatever its state.
pub fn quarantine<R: Region>(r: &R, l: usize) {
    let lease = r.lease(l);
    loop {
        // Acquire: as any reader of a state word.
        let s = lease.state.load(Acquire);
        if ls::state(s) == ls::QUARANTINED {
            return;
        }
        // AcqRel: as every state change a settler may race with.
        if lease
            .state
            .compare_exchange(
                s,
                ls::make(ls::generation(s), ls::QUARANTINED),
                AcqRel,
                Relaxed,
            )
            .is_ok()
        {
            return;
        }
    }
}

/// Brings one lease of a dead owner to `FREE`, giving back what it held.
fn recover_lease<R: Region>(r: &R, l: usize, out: &mut Reaped) -> Result<()> {
    let lease = r.lease(l);
    loop {
        // Acquire: the state publishes the lease's fields (seqlock writer side in ops).
        let sw = lease.state.load(Acquire);
        let (generation, state) = (ls::generation(sw), ls::state(sw));
        match state {
            ls::FREE | ls::QUARANTINED => return Ok(()),
            ls::CLAIMED => {
                // Private, never published, counted nowhere.
                ops::free_lease(lease, generation, state);
                return Ok(());
            }
            ls::HELD | ls::RELEASING => {
                let (d, to_pool) = ops::release_reporting(r, l, generation, state == ls::HELD)?;
                out.leases_released += 1;
                // A revoked resident's unit is its revoker's: only its tenant's held
                // unit came back, not the pool's.
                gave_back(r, out, d.pool as usize, d.units, to_pool);
                return Ok(());
            }
            ls::ACQUIRING => {
                if let Some(returned) = undo_acquire(r, l, generation)? {
                    out.in_flight += 1;
                    if let Some((p, units)) = returned {
                        gave_back(r, out, p, units, true);
                    }
                    return Ok(());
                }
                // A settler set a flag meanwhile: look again.
            }
            _ => return Err(Error::Corrupt(format!("lease {l} has state word {sw:#x}"))),
        }
    }
}

/// Notes that a reaper gave back `units` of a tenant's holds in pool `p`, and to the
/// pool itself unless `!to_pool` (a revoked resident's unit is its revoker's). That
/// tenant may have left the active set at once (its last own activity can be long
/// past), so the pool's next decision counts the set again. A pool out of the
/// report's range (a lease naming garbage) is skipped.
fn gave_back<R: Region>(r: &R, out: &mut Reaped, p: usize, units: u32, to_pool: bool) {
    let (Some(pool), Some(held)) = (
        out.units_returned.get_mut(p),
        out.held_units_returned.get_mut(p),
    ) else {
        return;
    };
    if to_pool {
        *pool += units as u64;
    }
    *held += units as u64;
    // Relaxed: a priority input (see `admission::touch`).
    r.pool(p).rescan_at_ms.store(0, Relaxed);
}

/// Undoes what an interrupted acquire of lease `l` made. `None` if its state word
/// changed under us (a settler's flag): the caller looks again. Otherwise
/// `Some(Some((pool, units)))` if units went back to a pool, `Some(None)` if not.
#[allow(clippy::type_complexity)]
fn undo_acquire<R: Region>(
    r: &R,
    l: usize,
    generation: u32,
) -> Result<Option<Option<(usize, u32)>>> {
    let lease = r.lease(l);
    let d = ops::read_desc(lease, generation)
        .ok_or_else(|| Error::Corrupt(format!("lease {l} changed generation mid-acquire")))?;
    ops::check_desc(r, l, &d)?;
    let (p, t) = (d.pool as usize, d.tenant as usize);
    let tag = op_word::make_tag(l, false, generation);
    // The words first, then the flags (I1 of `ops`): a settler flags, then replaces.
    let pool_w = r.pool(p).word.load(Acquire);
    let held_w = r.tenant_pool(p, t).held.load(Acquire);
    let extra_w = r.pool(p).extra.load(Acquire);
    // A transfer's pool step is the victim's revocation: its word names us while the
    // victim's slot is not published again (then `POOL_DONE` records it). Word first.
    let victim = crate::layout::residency::victim(d.inputs[2]);
    let revoked = victim.is_some_and(|(v, vg)| {
        v < r.geometry().leases() && ops::resident::revoked_by(r, v, vg, l, generation)
    });
    let s = lease.state.load(Acquire);
    if ls::generation(s) != generation || ls::state(s) != ls::ACQUIRING {
        return Ok(None);
    }
    let charges = s & ls::CHARGES_EXTRA != 0;
    let pool_done = if victim.is_some() {
        revoked || s & ls::POOL_DONE != 0
    } else {
        op_word::raw_tag(pool_w) == tag || s & ls::POOL_DONE != 0
    };
    let held_done = op_word::raw_tag(held_w) == tag || s & ls::HELD_DONE != 0;
    let extra_done = charges && (op_word::raw_tag(extra_w) == tag || s & ls::EXTRA_DONE != 0);
    if !pool_done && !held_done && !extra_done {
        return Ok(ops::free_lease_from(lease, s).then_some(None));
    }
    // As a release: the steps the acquire never made are marked done.
    let mut flags = s & ls::CHARGES_EXTRA;
    if !pool_done {
        flags |= ls::POOL_DONE;
    }
    if !held_done {
        flags |= ls::HELD_DONE;
    }
    if !extra_done {
        flags |= ls::EXTRA_DONE;
    }
    let releasing = ls::make(generation, ls::RELEASING) | flags;
    // AcqRel: as every state change a settler may race with.
    if lease
        .state
        .compare_exchange(s, releasing, AcqRel, Relaxed)
        .is_err()
    {
        return Ok(None);
    }
    ops::finish_release(r, l, generation, Some(&d))?;
    Ok(Some(pool_done.then_some((p, d.units))))
}

#[cfg(all(test, not(loom)))]
mod tests;
