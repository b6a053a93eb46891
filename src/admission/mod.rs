//! The attempt around the op protocol: activity and the active set, the inputs the
//! fair-share policy freezes, retry-after estimates, statistics. The rule itself is
//! `policy::fair_share`; the protocol, `ops`.
//!
//! The active weight is a priority input, kept with Relaxed atomics: being a few ms
//! stale under concurrency moves a share, never the capacity bound, which depends only
//! on the protocol deciding on a validated snapshot (`ops`).

use crate::error::Result;
use crate::layout::TenantPoolRec;
use crate::decisions;
use crate::ops::{self, AcqOutcome, Desc};
use crate::policy::Verdict;
use crate::policy::fair_share::{self, FairShare, Frozen};
use crate::region::Region;
use crate::retry;
use crate::server_queue;
use crate::sync::Ordering::*;

mod active;
pub use active::{recent, scan_active, touch};

/// Folds one observed hold time into a tenant's moving average in a pool (its record
/// `tp`; weight 1/8). The line is the tenant's own, which its release just wrote.
pub fn observe_hold(tp: &TenantPoolRec, hold_us: u64) {
    let ewma = &tp.hold_ewma_us;
    let sample = hold_us.clamp(1, u32::MAX as u64) as u32;
    // Relaxed load/store: a lost update only skips one sample of an estimate.
    let old = ewma.load(Relaxed);
    let new = if old == 0 {
        sample
    } else {
        old - old / 8 + sample / 8
    };
    if new.max(1) != old {
        ewma.store(new.max(1), Relaxed);
    }
}

/// One acquire attempt, as the core sees it (indices already resolved and checked).
#[derive(Clone, Copy, Debug)]
pub struct Attempt {
    pub pool: usize,
    pub tenant: usize,
    pub units: u32,
    pub hold_ms: u64,
    pub now: u64,
    pub window_ms: u64,
    pub weight: u32,
    pub tid: u32,
    /// The calling process's pid (for the decision log).
    pub pid: u32,
    /// Whether to log the decision (see `decisions`).
    pub log: bool,
    /// The pool's `limits` word (capacity, floor) as the caller read it, once: it is
    /// frozen into the descriptor, and the caller checked `units` against it.
    pub limits: u64,
    /// The pool evicts residents instead of refusing (see `residents`).
    pub evict: bool,
    /// How long this request waited in the server's queue, µs, when the caller knows
    /// ([`server_queue::UNKNOWN`] if not): an over-share refusal of a tenant with a
    /// backlog has its hint stretched by it as by a window of its own (see
    /// `server_queue::for_request`).
    pub queued_us: u32,
    /// A later try of one waiting acquire (see `blocking`): decided by the rule and
    /// marking the tenant active as every ask does, but the request was refused and
    /// counted once already, so a refusal of this try is not counted again, takes no
    /// turn of the tenant's, counts no hint (nor an early return: the waiter was woken,
    /// it ignored no hint) and is not logged. Its facts carry the hint the tenant's
    /// next turn would give.
    pub quiet: bool,
}

/// The facts a refusal is explained by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RefusalFacts {
    /// Never `Verdict::Admit`.
    pub verdict: Verdict,
    pub in_use: u32,
    pub held: u32,
    pub cap: u32,
    pub floor: u32,
    pub weight: u32,
    pub active_weight: u64,
    pub retry_after_ms: u64,
    /// The tenant's refused requests with turns ahead of this one (see `retry`).
    pub queued: u32,
    /// The interval between the tenant's turns, µs.
    pub interval_us: u32,
    /// How far the server's queue stretched an over-share tenant's hint
    /// (sixteenths: 16 is not at all; see `server_queue`), and that queue, µs.
    pub queue_stretch: u32,
    pub server_queue_us: u32,
}

/// Takes the tenant's next turn on its clock (see `retry`).
fn take_turn(tp: &TenantPoolRec, now: u64, interval_us: u64) -> retry::Turn {
    // Relaxed: the clock is an estimate and publishes nothing; the CAS makes each
    // refusal take a turn of its own.
    let mut cur = tp.turn_at_us.load(Relaxed);
    loop {
        let t = retry::next_turn(cur, now, interval_us);
        match tp
            .turn_at_us
            .compare_exchange_weak(cur, t.turn_at_us, Relaxed, Relaxed)
        {
            Ok(_) => return t,
            Err(x) => cur = x,
        }
    }
}

/// Counts a hint given at `now`, and an early return if an earlier hint of this
/// tenant's (given since its last grant here) has not run out yet.
fn count_hint(tp: &TenantPoolRec, now: u64, hint_ms: u64) {
    // Relaxed, all: statistics. (The hints' count is the rule's refusal counters.)
    tp.hint_ms_total.fetch_add(hint_ms, Relaxed);
    let first = tp.first_due_lo.load(Relaxed);
    let due = retry::due_lo(now + hint_ms);
    if retry::before_due(first, now) {
        tp.early_returns.fetch_add(1, Relaxed);
        if (due.wrapping_sub(first) as i32) < 0 {
            tp.first_due_lo.store(due, Relaxed);
        }
    } else {
        tp.first_due_lo.store(due, Relaxed);
    }
}

/// What [`try_acquire`] came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admitted {
    Granted {
        lease: usize,
        desc: Desc,
    },
    /// `claimed`: the lease that was claimed (and freed again) before the refusal.
    Refused {
        facts: RefusalFacts,
        claimed: Option<usize>,
    },
}

/// Marks activity, freezes the decision inputs, runs the protocol (`ops`) with the
/// fair-share policy, and keeps statistics.
// Always inlined into its one caller, `Engine::acquire` (as `release` into
// `Engine::release`): a call here passes the attempt through memory, and left to its
// heuristics the compiler stopped inlining it once `Engine::acquire` grew the rate
// check, which cost the uncontended pair about 15% (callgrind: ~100 instructions).
#[inline(always)]
pub fn try_acquire<R: Region>(
    r: &R,
    slot: usize,
    hint: usize,
    a: &Attempt,
    spare: Option<(usize, u32)>,
) -> Result<Admitted> {
    debug_assert!(a.units > 0 && a.pool < r.geometry().pools && a.tenant < r.geometry().tenants);
    // The tenant's record in the pool, fetched once (its index checked) for the whole
    // decision: the active set's stamp, the statistics and the retry-after clock.
    let tp = r.tenant_pool(a.pool, a.tenant);
    let (active_weight, set_changes_at) =
        touch(r, a.pool, tp, a.weight, a.now, a.window_ms, a.evict);
    let (cap, floor) = (
        crate::layout::pair::lo(a.limits),
        crate::layout::pair::hi(a.limits),
    );
    let frozen = Frozen {
        cap,
        floor,
        weight: a.weight,
        active_weight: active_weight.min(u32::MAX as u64) as u32,
    };
    let mut d = Desc {
        generation: 0,
        pool: a.pool as u32,
        tenant: a.tenant as u32,
        units: a.units,
        inputs: frozen.inputs(),
    };
    if a.evict {
        d.inputs[2] = crate::layout::residency::RESIDENT;
    }
    let (l, d, outcome) = ops::acquire_with_spare(
        r, &FairShare, tp, slot, hint, d, a.tid, a.now, a.hold_ms, spare,
    )?;
    // Statistics: grants are counted in the lease slot by its owner (no RMW) and reach
    // the tenant's counter when the slot serves another tenant; refusals are counted
    // on the tenant's own line (Relaxed). The pool's totals are sums (see `stats`).
    let mut logged = decisions::Entry {
        at_ms: a.now,
        pool: a.pool as u32,
        tenant: a.tenant as u32,
        outcome: 0,
        policy: if a.evict {
            decisions::POLICY_FAIR_SHARE_EVICT
        } else {
            decisions::POLICY_FAIR_SHARE
        },
        units: a.units,
        in_use: 0,
        held: 0,
        cap,
        floor,
        weight: a.weight,
        active_weight: frozen.active_weight,
        hint_ms: 0,
        tid: a.tid,
        pid: a.pid,
    };
    match (outcome, l) {
        (AcqOutcome::Granted { in_use, held }, Some(l)) => {
            (logged.in_use, logged.held) = (in_use, held);
            if a.log {
                decisions::record(r, slot, &logged);
            }
            ops::count_grant(r, r.lease(l));
            // Relaxed: a statistic's marker; the line is ours already (we CAS `held`).
            if tp.first_due_lo.load(Relaxed) != 0 {
                tp.first_due_lo.store(0, Relaxed);
            }
            Ok(Admitted::Granted { lease: l, desc: d })
        }
        (AcqOutcome::Granted { .. }, None) => unreachable!("a grant has a lease"),
        (
            AcqOutcome::Refused {
                in_use,
                held,
                verdict,
            },
            mut claimed,
        ) => {
            let mut verdict = verdict;
            let (mut code, short) = match verdict {
                Verdict::Refuse { reason, short } => (reason, short),
                Verdict::Admit | Verdict::AdmitCharging => {
                    unreachable!("a refusal carries a refusing verdict")
                }
            };
            if a.evict {
                // An `evict` pool does not refuse while a resident can be put to sleep.
                let spare = spare.filter(|_| claimed.is_none());
                let over = code == fair_share::OVER_SHARE;
                let tried = match evict_for(r, slot, hint, a, d, &frozen, over, spare)? {
                    Err(tried) => tried,
                    Ok((l, d)) => {
                        (logged.in_use, logged.held) = (in_use, held);
                        if a.log {
                            decisions::record(r, slot, &logged);
                        }
                        ops::count_grant(r, r.lease(l));
                        return Ok(Admitted::Granted { lease: l, desc: d });
                    }
                };
                // A lease claimed (and freed) by a lost transfer spent the spare too.
                claimed = claimed.or(tried);
                code = crate::residents::TOO_MANY_RESIDENTS;
                if let Verdict::Refuse { reason, .. } = &mut verdict {
                    *reason = code;
                }
                if !a.quiet {
                    // Relaxed: a statistic.
                    tp.too_many_residents.fetch_add(1, Relaxed);
                }
            } else if let Some(c) = tp.refusals.get((code as usize).wrapping_sub(1))
                && !a.quiet
            {
                c.fetch_add(1, Relaxed);
            }
            let hold = retry::hold_us(tp.hold_ewma_us.load(Relaxed) as u64, a.hold_ms);
            // Relaxed load/store: an estimate on the tenant's retry-after line, which
            // only refusals touch; a lost update skips one sample. (A quiet try is no
            // new refusal: the gap between refusals stays as it was.)
            let gap = tp.refusal_gap.load(Relaxed);
            let gap = if a.quiet {
                gap
            } else {
                let gap = retry::next_gap(gap, a.now);
                tp.refusal_gap.store(gap, Relaxed);
                gap
            };
            // Over its share, only its own releases make room for it, and its own new
            // requests contend for them (see `retry`); under it, any release does.
            let interval = if code == fair_share::OVER_SHARE {
                retry::contended_interval_us(
                    retry::interval_us(hold, a.units, held),
                    retry::gap_us(gap),
                )
            } else {
                // Any release makes room: the holders' mean hold says how often one
                // comes (as of the last scan; the asker's own when none is known).
                // Its first turn needs what it is short of: its units, or more in a
                // pool holding past its capacity (a `per_worker` pool that shrank).
                // (Not for `too_many_residents`: there a resident's call ending makes
                // room, which a residency's length does not tell.)
                // Relaxed: an estimate's input.
                let holders = if code == fair_share::POOL_FULL {
                    r.pool(a.pool).hold_mean_us.load(Relaxed)
                } else {
                    0
                };
                let hold = if holders > 0 { holders } else { hold };
                retry::interval_us(hold, a.units.max(short), in_use)
            };
            let turn = if a.quiet {
                // Relaxed: an estimate (see `take_turn`); read, not taken.
                retry::next_turn(tp.turn_at_us.load(Relaxed), a.now, interval)
            } else {
                // The server's queue may hold retries for a while now (see
                // `server_queue`): a refused request's, not a waiter's, which retries
                // in the library.
                server_queue::refused(r.pool(a.pool), a.now);
                take_turn(tp, a.now, interval)
            };
            let mut hint = turn.hint_ms;
            // Over its share, a queue in the server stretches the hint (see
            // `server_queue`): a retry back sooner would wait there ahead of others.
            let (stretch, queue_us) = if code == fair_share::OVER_SHARE {
                // Relaxed: an estimate, as the gap's.
                let out = server_queue::others_out(
                    turn.queued,
                    tp.hint_avg_us.load(Relaxed),
                    retry::gap_us(gap),
                );
                server_queue::for_request(r.pool(a.pool), a.now, a.queued_us, turn.queued, out)
            } else {
                (server_queue::ONE, 0)
            };
            if stretch > server_queue::ONE {
                hint = server_queue::stretched_hint(hint, stretch, turn.turn_at_us);
            }
            // Over its share, the tenant's share grows when another leaves the active
            // set: not before `set_changes_at`, and then only if the tenant whose
            // window ends there stays quiet until then. (Alone in the set, no
            // departure can raise its share: only its releases make room.)
            if code == fair_share::OVER_SHARE
                && set_changes_at > a.now
                && active_weight > a.weight as u64
                && active::leaves_at(r, a.pool, a.tenant, set_changes_at, a.window_ms)
            {
                hint = hint.min(set_changes_at - a.now);
            }
            if !a.quiet {
                count_hint(tp, a.now, hint);
                // Relaxed load/store: an estimate, as the gap's (a lost update skips
                // one).
                let avg = retry::next_hint_avg(tp.hint_avg_us.load(Relaxed), hint);
                tp.hint_avg_us.store(avg, Relaxed);
                (logged.in_use, logged.held, logged.outcome) = (in_use, held, code);
                logged.hint_ms = hint.min(u32::MAX as u64) as u32;
                if a.log {
                    decisions::record(r, slot, &logged);
                }
            }
            let facts = RefusalFacts {
                verdict,
                in_use,
                held,
                cap,
                floor,
                weight: a.weight,
                active_weight,
                retry_after_ms: hint,
                queued: turn.queued,
                interval_us: turn.interval_us.min(u32::MAX as u64) as u32,
                queue_stretch: stretch,
                server_queue_us: queue_us,
            };
            Ok(Admitted::Refused { facts, claimed })
        }
    }
}

/// How many victims an acquire tries before it refuses: each lost race means a
/// resident began a call (or was taken) between the choice and the revocation.
const EVICT_TRIES: usize = 8;

/// An `evict` pool's acquire that the rule refused: revokes a victim and takes its
/// permit (see `residents`). Returns the grant, or else the last lease claimed on the
/// way (the thread's spare is then spent).
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn evict_for<R: Region>(
    r: &R,
    slot: usize,
    hint: usize,
    a: &Attempt,
    d: Desc,
    f: &Frozen,
    over: bool,
    mut spare: Option<(usize, u32)>,
) -> Result<std::result::Result<(usize, Desc), Option<usize>>> {
    let mut tried = None;
    for _ in 0..EVICT_TRIES {
        let Some(v) = crate::residents::choose(r, a.pool, a.tenant, a.units, over, f) else {
            break;
        };
        let (l, d, out) = ops::transfer(
            r,
            slot,
            hint,
            d,
            (v.lease, v.generation),
            a.tid,
            a.now,
            a.hold_ms,
            spare.take(),
        )?;
        tried = Some(l);
        if out == ops::Transferred::Granted {
            // Relaxed: statistics.
            r.tenant_pool(a.pool, a.tenant).evictions.fetch_add(1, Relaxed);
            r.tenant_pool(a.pool, v.tenant).revoked.fetch_add(1, Relaxed);
            return Ok(Ok((l, d)));
        }
    }
    Ok(Err(tried))
}

/// Whether tenant `t` holds less than its share of pool `p` by the words as they are
/// now (its held word, the pool's limits and active weight, its weight): what the wake
/// of a release of its own asks (`waiting::released_by`: its sleepers past their
/// share may be admitted once it is under). `t` and `p` come from a checked
/// descriptor.
pub fn under_share_now<R: Region>(r: &R, p: usize, t: usize) -> bool {
    use crate::layout::{held_word, pair};
    let pool = r.pool(p);
    // SeqCst: the limits as every acquire loads them. Relaxed: the weights are
    // priority inputs (`active`), as in every decision. Acquire: the held word as the
    // rule reads it; the caller's release (its held CAS) is before this in our thread.
    let limits = pool.limits.load(SeqCst);
    let weight = r.tenant(t).weight.load(Relaxed);
    let active = pool.active_weight.load(Relaxed).max(weight as u64);
    let f = Frozen {
        cap: pair::lo(limits),
        floor: pair::hi(limits),
        weight,
        active_weight: active.min(u32::MAX as u64) as u32,
    };
    fair_share::under_share(&f, held_word::held(r.tenant_pool(p, t).held.load(Acquire)))
}

/// Releases lease `l` of generation `generation` at `now`, with the owner's copy of
/// its descriptor if it has one; marks activity and feeds the hold estimate.
/// With `keep: Some(tid)` the slot stays `CLAIMED` as thread `tid`'s spare.
#[inline(always)]
pub fn release<R: Region>(
    r: &R,
    l: usize,
    generation: u32,
    known: Option<&Desc>,
    now: u64,
    keep: Option<u32>,
) -> Result<Desc> {
    // Relaxed: our own lease, stable until we free it.
    let granted = r.lease(l).granted_ms.load(Relaxed);
    let d = ops::release_keeping(r, l, generation, known, keep)?;
    let (p, t) = (d.pool as usize, d.tenant as usize);
    // Relaxed: activity and the hold estimate are soft (module docs).
    let tp = r.tenant_pool(p, t);
    if tp.last_active_ms.load(Relaxed) < now {
        tp.last_active_ms.fetch_max(now, Relaxed);
    }
    active::released(r, p, now);
    observe_hold(tp, now.saturating_sub(granted).saturating_mul(1000));
    Ok(d)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::layout::pair;
    use crate::region::HeapRegion;

    /// An attempt of 1 unit of pool 0 (2 permits, floor 1) by `tenant` at `now`.
    pub(crate) fn attempt(tenant: usize, weight: u32, now: u64) -> Attempt {
        Attempt {
            pool: 0,
            tenant,
            units: 1,
            hold_ms: 0,
            now,
            window_ms: 1000,
            weight,
            tid: 1,
            pid: 1,
            log: true,
            limits: pair::make(2, 1),
            evict: false,
            queued_us: server_queue::UNKNOWN,
            quiet: false,
        }
    }

    /// Found by the op-sequence fuzz target: a tenant whose last permit a reaper gives
    /// back, long after its last own activity, leaves the active set at once (it was
    /// counted as a holder, and no window end was scheduled for it).
    #[test]
    fn a_reaped_holder_leaves_the_active_set_at_once() {
        let r = HeapRegion::new(1, 2, 2, 2);
        r.pool(0).limits.store(pair::make(2, 1), Relaxed);
        let (a, b) = (0, 1);
        for (t, name) in [(a, b"a"), (b, b"b")] {
            let got = crate::tenants::find_or_claim(&r, name, &|| 1, 0, &|_| false).unwrap();
            assert_eq!(got, t);
        }
        let dead = crate::liveness::register(&r, 1_000_001, 1, 1, false).unwrap();
        let live = crate::liveness::register(&r, 1_000_002, 1, 1, false).unwrap();
        assert!(matches!(
            try_acquire(&r, dead, 0, &attempt(a, 1, 1), None).unwrap(),
            Admitted::Granted { .. }
        ));
        // Long after a's window, a still holds: b is judged among both.
        let Admitted::Granted { lease, desc } = try_acquire(&r, live, 0, &attempt(b, 1, 5000), None)
            .unwrap()
        else {
            panic!("b under its share of 1 is granted")
        };
        assert_eq!(Frozen::from_inputs(&desc.inputs).active_weight, 2);
        release(&r, lease, desc.generation, None, 5000, None).unwrap();
        // a's process dies; its permit comes back through the reaper, not through a.
        crate::recovery::reap_slot(&r, dead, crate::recovery::Reaper::with_pid(9), &|_, _| true).unwrap().unwrap();
        let Admitted::Granted { desc, .. } =
            try_acquire(&r, live, 0, &attempt(b, 1, 5001), None).unwrap()
        else {
            panic!("b alone is granted")
        };
        assert_eq!(
            Frozen::from_inputs(&desc.inputs).active_weight,
            1,
            "a left the set when its last permit was reaped"
        );
    }
}
