//! A read-only snapshot of the whole table.
//!
//! Taken with plain loads, from any process, registered or not: nothing is locked, so
//! a snapshot of a busy table is a set of values each true at some instant during the
//! read, not one instant. Tests read it when the table is quiet. State words are read
//! with Acquire (so the fields they publish are current); counters with Relaxed.

use crate::admission::{recent, scan_active};
use crate::clock;
use crate::config::Config;
use crate::layout::{
    held_word, lease_state as ls, op_word, owner_word as ow, pair, pool_word as pw,
    proc_state as ps, tenant_state,
};
use crate::policy::fair_share::share;
use crate::refusal::Reason;
use crate::region::Region;
use crate::sync::Ordering::*;
use serde::Serialize;

/// Every time in a snapshot is the callers' (ms, the `now` the calls were given or the
/// library's clock), not the segment's own stamp (`clock::internal`).
#[derive(Clone, Debug, Serialize)]
pub struct Snapshot {
    /// The `now` the snapshot was read at.
    pub now_ms: u64,
    pub pools: Vec<PoolSnap>,
    pub leases: Vec<LeaseSnap>,
    pub processes: Vec<ProcSnap>,
    /// The last death reaped from each process slot (kept until the slot's next one),
    /// oldest notice first.
    pub deaths: Vec<DeathSnap>,
    /// The tenants the directory holds (claimed names only), in directory order.
    pub tenants: Vec<TenantEntry>,
    /// Every guaranteed pool (seed 001), as its `stats()` at its own clock (the latest
    /// `now` it was given): guarantees, loans by lender and borrower, demand, idle
    /// times, deficits, reclaims, outstanding and overrunning leases. A pool whose
    /// state cannot be read (corrupt) is left out; `check` names it.
    pub guaranteed: Vec<crate::guaranteed::GStats>,
    /// How full the segment's fixed tables are.
    pub tables: TableUsage,
}

/// How full the segment's fixed tables are. Each is sized at creation, and a full one
/// refuses with an error that names the config key to raise (`TenantTableFull`,
/// `ProcessTableFull`, `LeaseTableFull`), which only a new segment can: these say how
/// close each is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct TableUsage {
    /// Tenant directory slots taken (a name keeps its slot for the segment's life), of
    /// `max_tenants`.
    pub tenants: Usage,
    /// Process slots taken (registered, or being claimed or reaped), of
    /// `max_processes`.
    pub processes: Usage,
    /// Lease slots taken (held, in flight, or a thread's spare), of `max_processes *
    /// leases_per_process`.
    pub leases: Usage,
    /// The most lease slots one process slot has taken, of `leases_per_process`: that
    /// process's next acquire is `LeaseTableFull` when they are all taken.
    pub leases_in_one_process: Usage,
}

/// Slots taken of a table's `size`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub used: usize,
    pub size: usize,
}

/// Counts the slots taken in each fixed table (plain loads: each count true at some
/// instant of the read).
pub fn table_usage<R: Region>(r: &R) -> TableUsage {
    let geo = r.geometry();
    // Relaxed, all: a report.
    let tenants = (0..geo.tenants)
        .filter(|&t| tenant_state::status(r.tenant(t).state.load(Relaxed)) != tenant_state::EMPTY)
        .count();
    let processes = (0..geo.procs)
        .filter(|&s| ps::status(r.proc_slot(s).state.load(Relaxed)) != ps::FREE)
        .count();
    let per_proc = geo.leases_per_proc;
    let taken = |l: usize| ls::state(r.lease(l).state.load(Relaxed)) != ls::FREE;
    let by_proc: Vec<usize> = (0..geo.procs)
        .map(|s| {
            (s * per_proc..(s + 1) * per_proc)
                .filter(|&l| taken(l))
                .count()
        })
        .collect();
    TableUsage {
        tenants: Usage {
            used: tenants,
            size: geo.tenants,
        },
        processes: Usage {
            used: processes,
            size: geo.procs,
        },
        leases: Usage {
            used: by_proc.iter().sum(),
            size: geo.leases(),
        },
        leases_in_one_process: Usage {
            used: by_proc.iter().copied().max().unwrap_or(0),
            size: per_proc,
        },
    }
}

/// One claimed tenant of the directory.
#[derive(Clone, Debug, Serialize)]
pub struct TenantEntry {
    /// Its slot (the index of its `TenantId`).
    pub index: usize,
    pub name: String,
    pub weight: u32,
    /// Its rates and token buckets (node-wide, not per pool).
    pub rates: crate::rates::RateState,
}

#[derive(Clone, Debug, Serialize)]
pub struct PoolSnap {
    pub name: String,
    pub capacity: u32,
    pub in_use: u32,
    pub floor: u32,
    /// The last op applied to the pool word: `"#lease/generation acquire|release"`.
    pub last_op: Option<String>,
    pub active_tenants: usize,
    pub active_weight: u64,
    /// Blocked acquirers about to sleep or asleep on the pool.
    pub waiters: u32,
    /// Sums of the tenants' counters.
    pub grants: u64,
    pub refusals: u64,
    /// The server's queue, from the waits the middlewares noted (`Table::note_queue`):
    /// the last closed window's queue, its mean wait over the base (µs), and how far it
    /// stretches an over-share tenant's hint now, in percent (100: not at all).
    pub server_queue_us: u32,
    pub queue_stretch_pct: u32,
    /// The residents of an `evict` pool (`None` for a pool that refuses).
    pub residents: Option<ResidentsSnap>,
    /// How a `per_worker` pool is sized (`None` for a pool of fixed capacity).
    pub per_worker: Option<PerWorkerSnap>,
    /// Whether the tenants' rates apply to the pool's acquires (`PoolConfig::rates`).
    pub rates: bool,
    pub tenants: Vec<TenantSnap>,
}

/// How a `per_worker` pool's capacity comes about: `min(workers, max(ceil(quota *
/// workers), min_tickets))` (seed 002, as Semian computes it).
#[derive(Clone, Debug, Serialize)]
pub struct PerWorkerSnap {
    pub quota: f64,
    pub min_tickets: u32,
    /// The live registered workers counted, each process once (`capacity::live_workers`).
    pub workers: u32,
    /// The tickets those workers give, by the formula.
    pub tickets: u32,
}

/// An `evict` pool's residents.
#[derive(Clone, Debug, Serialize)]
pub struct ResidentsSnap {
    /// Held, no call in progress: evictable.
    pub idle: u32,
    /// Held with a call in progress: never evicted.
    pub in_call: u32,
    /// Revoked, not yet released by their owners (their permits are already the
    /// revokers'; each still counts in its tenant's `held` until released).
    pub revoked: u32,
    /// Revocations made in this pool, ever.
    pub evictions: u64,
    /// How long a blocking acquire waits for an evictable resident, ms.
    pub evict_wait_ms: u32,
}

#[derive(Clone, Debug, Serialize)]
pub struct TenantSnap {
    pub name: String,
    pub held: u32,
    pub weight: u32,
    /// `share(t)` if the tenant asked now.
    pub share: f64,
    pub active: bool,
    /// Its last acquire attempt or release here; `None` if it has had none.
    pub last_active_ms: Option<u64>,
    pub grants: u64,
    /// `(reason, count)` for each reason with a count.
    pub refusals: Vec<(String, u64)>,
    /// Moving average of this tenant's holds in this pool, in µs (0: none seen yet).
    pub hold_ewma_us: u64,
    /// Retry-after hints given to this tenant here, and their mean in ms.
    pub hints: u64,
    pub mean_hint_ms: f64,
    /// Refusals that came before an earlier hint of this tenant's (given since its last
    /// grant here) had run out: clients back before their hint, or new ones arriving
    /// during a run of refusals (an upper bound on the first).
    pub early_returns: u64,
    /// `evict` pools: this tenant's residents revoked, and the revocations its
    /// acquires made.
    pub revoked: u64,
    pub evictions: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct LeaseSnap {
    pub index: usize,
    pub generation: u32,
    pub state: &'static str,
    pub pool: String,
    pub tenant: String,
    pub units: u32,
    pub process_slot: usize,
    pub tid: u32,
    pub granted_ms: u64,
    pub hold_ms: u64,
    /// A resident's state (`"idle"`, `"in_call"`, `"revoked"`, ...) and its last call
    /// (ms); `None` for a lease of a pool that does not evict.
    pub resident: Option<&'static str>,
    pub last_call_ms: Option<u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ProcSnap {
    pub slot: usize,
    pub status: &'static str,
    pub pid: u32,
    pub start_time: u64,
    pub registered_ms: u64,
    /// Registered as a tool (`Table::open_tool`, such as `shmtool rates`), or only to
    /// claim tenant names so far (it has not acquired): no worker of `per_worker` pools.
    pub tool: bool,
    /// What the robust-futex owner word says: `"alive"` (anchored, its anchor thread
    /// lives), `"died"` (the kernel marked it: dying or dead, not reaped yet) or
    /// `"unanchored"` (judged by `/proc` alone).
    pub anchor: &'static str,
    /// The anchor thread's tid, when alive.
    pub anchor_tid: u32,
    /// Whether some waiter has asked the kernel to wake it when this process dies.
    pub watched: bool,
}

/// A dead process found and reaped: when, by whom and how its death was noticed.
#[derive(Clone, Debug, Serialize)]
pub struct DeathSnap {
    /// The process slot it had.
    pub slot: usize,
    /// The dead process's pid.
    pub pid: u32,
    /// When the death was noticed (the reaper took the slot), `CLOCK_REALTIME` ms since
    /// the Unix epoch.
    pub noticed_unix_ms: u64,
    /// The pid of the process that noticed it and returned its permits.
    pub noticed_by: u32,
    /// How: `"watcher"` (a live process's anchor, woken by the kernel at the death),
    /// `"sweep"` (an anchor's periodic check), `"waiter"` (a blocked acquire),
    /// `"call"` (`reap_dead`, or a registration that found the table full) or
    /// `"register"` (a registration, which reaps the dead that nobody noticed).
    pub how: &'static str,
    /// Leases it still held (or had in flight) that were released.
    pub leases_released: u32,
}

impl Snapshot {
    pub fn pool(&self, name: &str) -> Option<&PoolSnap> {
        self.pools.iter().find(|p| p.name == name)
    }
    /// Units held by `tenant` in pool `pool` (0 if unknown).
    pub fn held(&self, pool: &str, tenant: &str) -> u32 {
        self.pool(pool)
            .and_then(|p| p.tenants.iter().find(|t| t.name == tenant))
            .map_or(0, |t| t.held)
    }
}

/// A resident lease's record state and last call, if lease `l` (state word `sw`) is a
/// resident of the cycle its record describes.
fn resident_of<R: Region>(r: &R, l: usize, sw: u32) -> Option<(&'static str, u64)> {
    use crate::layout::{residency, resident_word as rw};
    // Relaxed: a report (the state word, read with Acquire, published the field).
    if !residency::is_resident(r.lease(l).inputs[2].load(Relaxed)) {
        return None;
    }
    let rec = r.resident(l)?;
    let w = rec.word.load(Acquire);
    (rw::generation(w) == ls::generation(sw))
        .then(|| (rw::name(rw::state(w)), rec.last_call_ms.load(Relaxed)))
}

/// The snapshot at segment time `now` (`clock::internal` of the caller's).
pub fn snapshot<R: Region>(r: &R, cfg: &Config, now: u64) -> Snapshot {
    let geo = *r.geometry();
    let names: Vec<Option<String>> = (0..geo.tenants)
        .map(|t| {
            let rec = r.tenant(t);
            let s = rec.state.load(Acquire);
            (tenant_state::status(s) == tenant_state::READY)
                .then(|| String::from_utf8_lossy(&crate::tenants::read_name(rec, s)).into_owned())
        })
        .collect();
    let name_of = |t: usize| {
        names
            .get(t)
            .cloned()
            .flatten()
            .unwrap_or_else(|| format!("#{t}"))
    };
    // Grants counted in lease slots and not yet flushed to their tenant's counter.
    let mut pending: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
    for l in 0..geo.leases() {
        let rec = r.lease(l);
        // Relaxed: statistics.
        let n = rec.pending_grants.load(Relaxed);
        if n > 0 {
            let e = pending.entry(rec.pool_tenant.load(Relaxed)).or_default();
            *e = e.saturating_add(n as u64);
        }
    }
    let workers = crate::capacity::live_workers(r);
    let pools = cfg
        .pools
        .iter()
        .enumerate()
        .map(|(p, pc)| {
            let rec = r.pool(p);
            // Acquire, the pool word and each `held`: as a helper's reads of them (the
            // op protocol), so that an op in flight is settled on what it published.
            // Relaxed, the limits, activity and counters: a report, which publishes
            // nothing and decides nothing.
            let w = rec.word.load(Acquire);
            let window = pc.window_ms as u64;
            let (active_tenants, active_weight) = scan_active(r, p, now, window);
            let queue = crate::server_queue::current(rec, now);
            let limits = rec.limits.load(Relaxed);
            let (cap, floor) = (pair::lo(limits), pair::hi(limits));
            let tenants = names
                .iter()
                .enumerate()
                .filter_map(|(t, n)| n.as_ref().map(|n| (t, n)))
                .filter_map(|(t, n)| {
                    let tp = r.tenant_pool(p, t);
                    let last = tp.last_active_ms.load(Relaxed);
                    // Saturating, here and below: counters read from shared memory may
                    // hold anything.
                    let grants = tp.grants.load(Relaxed).saturating_add(
                        pending
                            .get(&pair::make(p as u32, t as u32))
                            .copied()
                            .unwrap_or(0),
                    );
                    let held = held_word::held(tp.held.load(Acquire));
                    if last == 0 && held == 0 && grants == 0 {
                        return None; // never used this pool
                    }
                    let weight = r.tenant(t).weight.load(Relaxed);
                    let active = held > 0 || recent(last, now, window);
                    let total = if active {
                        active_weight
                    } else {
                        active_weight + weight as u64
                    };
                    // Every refusal by the rule (pool_full, over_share) gives a hint.
                    let hints = tp.refusals[0]
                        .load(Relaxed)
                        .saturating_add(tp.refusals[1].load(Relaxed));
                    let refusals = Reason::ALL_COUNTED
                        .iter()
                        .map(|&reason| {
                            let c = tp.refusals[reason as usize - 1].load(Relaxed);
                            (reason.as_str().to_owned(), c)
                        })
                        .chain(std::iter::once((
                            Reason::TooManyResidents.as_str().to_owned(),
                            tp.too_many_residents.load(Relaxed),
                        )))
                        .filter(|(_, c)| *c > 0)
                        .collect();
                    Some(TenantSnap {
                        name: n.clone(),
                        held,
                        weight,
                        share: share(cap, floor, weight, total),
                        active,
                        last_active_ms: clock::external(last),
                        grants,
                        refusals,
                        hold_ewma_us: tp.hold_ewma_us.load(Relaxed) as u64,
                        hints,
                        mean_hint_ms: if hints == 0 {
                            0.0
                        } else {
                            tp.hint_ms_total.load(Relaxed) as f64 / hints as f64
                        },
                        early_returns: tp.early_returns.load(Relaxed),
                        revoked: tp.revoked.load(Relaxed),
                        evictions: tp.evictions.load(Relaxed),
                    })
                })
                .collect();
            let tenants: Vec<TenantSnap> = tenants;
            PoolSnap {
                name: pc.name.clone(),
                capacity: cap,
                in_use: pw::in_use(w),
                floor,
                last_op: op_word::tag(w).map(|t| {
                    let kind = if t.release { "release" } else { "acquire" };
                    format!("#{}/{} {kind}", t.lease, t.generation)
                }),
                active_tenants,
                active_weight,
                // Relaxed: a report.
                waiters: rec.waiters.load(Relaxed),
                server_queue_us: queue.1,
                queue_stretch_pct: crate::refusal::stretch_pct(queue.0),
                grants: tenants.iter().fold(0, |a, t| a.saturating_add(t.grants)),
                refusals: tenants
                    .iter()
                    .flat_map(|t| t.refusals.iter().map(|(_, c)| *c))
                    .fold(0, u64::saturating_add),
                rates: pc.rates,
                per_worker: pc.per_worker.map(|w| PerWorkerSnap {
                    quota: w.quota(),
                    min_tickets: w.min_tickets,
                    workers,
                    tickets: w.tickets(workers),
                }),
                residents: pc.evict.then(|| {
                    let (idle, in_call, revoked) = crate::residents::counts(r, p);
                    ResidentsSnap {
                        idle,
                        in_call,
                        revoked,
                        // Relaxed: a report.
                        evictions: rec.evictions.load(Relaxed),
                        evict_wait_ms: pc.evict_wait_ms,
                    }
                }),
                tenants,
            }
        })
        .collect();
    let leases = (0..geo.leases())
        .filter_map(|l| {
            let rec = r.lease(l);
            // Acquire: pairs with the owner's Release store of the state, which
            // publishes the lease's fields (read Relaxed below: the seqlock of `ops`).
            let sw = rec.state.load(Acquire);
            // FREE, or CLAIMED (private to its owner: being filled in, or a thread's
            // spare), counts nowhere.
            if matches!(ls::state(sw), ls::FREE | ls::CLAIMED) {
                return None;
            }
            let pt = rec.pool_tenant.load(Relaxed);
            let p = pair::lo(pt) as usize;
            Some(LeaseSnap {
                index: l,
                generation: ls::generation(sw),
                state: ls::name(ls::state(sw)),
                pool: cfg
                    .pools
                    .get(p)
                    .map_or_else(|| format!("#{p}"), |pc| pc.name.clone()),
                tenant: name_of(pair::hi(pt) as usize),
                units: rec.units.load(Relaxed),
                process_slot: l / geo.leases_per_proc,
                tid: rec.tid.load(Relaxed),
                granted_ms: clock::external_or_0(rec.granted_ms.load(Relaxed)),
                hold_ms: rec.hold_ms.load(Relaxed),
                resident: resident_of(r, l, sw).map(|(st, _)| st),
                last_call_ms: resident_of(r, l, sw).map(|(_, at)| clock::external_or_0(at)),
            })
        })
        .collect();
    let processes = (0..geo.procs)
        .filter_map(|s| {
            let rec = r.proc_slot(s);
            // Acquire: pairs with the registration's Release store of LIVE, which
            // publishes the slot's start and registration times (read Relaxed).
            let st = rec.state.load(Acquire);
            let status = match ps::status(st) {
                ps::FREE => return None,
                ps::CLAIMING => "claiming",
                ps::LIVE => "live",
                ps::REAPING => "reaping",
                _ => "corrupt",
            };
            // Acquire: pairs with the anchor's Release store of its tid.
            let owner = ow::decode(rec.owner_futex.load(Acquire));
            Some(ProcSnap {
                slot: s,
                status,
                pid: ps::pid(st),
                start_time: rec.start_time.load(Relaxed),
                registered_ms: clock::external_or_0(rec.registered_ms.load(Relaxed)),
                tool: ps::is_tool(st),
                anchor: match owner {
                    ow::Owner::Alive { .. } => "alive",
                    ow::Owner::Died => "died",
                    ow::Owner::Unanchored => "unanchored",
                },
                anchor_tid: match owner {
                    ow::Owner::Alive { tid, .. } => tid,
                    _ => 0,
                },
                watched: matches!(owner, ow::Owner::Alive { watched: true, .. }),
            })
        })
        .collect();
    let mut deaths: Vec<DeathSnap> = (0..geo.procs)
        .filter_map(|s| {
            let rec = r.proc_slot(s);
            // Relaxed, these three: a report; a reaper writing them meanwhile may show
            // a mix of two deaths' fields, never an out-of-range value.
            let when = rec.death_unix_ms.load(Relaxed);
            let pids = rec.death_pids.load(Relaxed);
            let info = rec.death_info.load(Relaxed);
            (when != 0).then(|| DeathSnap {
                slot: s,
                pid: pair::lo(pids),
                noticed_unix_ms: when,
                noticed_by: pair::hi(pids),
                how: crate::layout::noticed::name(pair::lo(info)),
                leases_released: pair::hi(info),
            })
        })
        .collect();
    deaths.sort_by_key(|d| d.noticed_unix_ms);
    let guaranteed = (0..r.g_pools())
        .filter_map(|gp| {
            let (_, st) = crate::guaranteed::shared::read(r, gp).ok()?;
            Some(st.stats(r.g_rules(gp), st.clock))
        })
        .collect();
    Snapshot {
        now_ms: clock::external_or_0(now),
        tables: table_usage(r),
        pools,
        leases,
        processes,
        deaths,
        guaranteed,
        tenants: names
            .iter()
            .enumerate()
            .filter_map(|(t, n)| {
                n.as_ref().map(|name| TenantEntry {
                    index: t,
                    name: name.clone(),
                    // Relaxed: written before READY, which the name's read acquired.
                    weight: r.tenant(t).weight.load(Relaxed),
                    rates: crate::rates::state(r, t, now),
                })
            })
            .collect(),
    }
}
