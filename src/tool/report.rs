//! One segment's state as `inspect`, `top` and `metrics` show it, and its decision log
//! with names and wall-clock times. The JSON form of [`Report`] is the schema that
//! `doc/inspect.schema.json` describes (`"schema": "fairshm.inspect/1"`).

use serde::Serialize;

use crate::Table;
use crate::decisions::{self, Logged};
use crate::error::Result;
use crate::stats::{ProcSnap, Snapshot};

/// The schema name and version of [`Report`]'s JSON.
pub const SCHEMA: &str = "fairshm.inspect/1";

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub schema: &'static str,
    pub segment: SegmentInfo,
    /// The engine clock (`CLOCK_MONOTONIC` ms) at which the report was read.
    pub now_ms: u64,
    pub pools: Vec<PoolRow>,
    pub leases: Vec<LeaseRow>,
    pub processes: Vec<ProcRow>,
    /// Every claimed tenant with its rates (node-wide, not per pool).
    pub tenants: Vec<RateRow>,
    /// The last death reaped from each process slot, as the snapshot has them.
    pub deaths: Vec<crate::stats::DeathSnap>,
    /// Every guaranteed pool's `stats()` (seed 001), as of its own clock (the latest
    /// `now` any call gave it).
    pub guaranteed: Vec<crate::guaranteed::GStats>,
    /// How full the segment's fixed tables are (tenant directory, process slots, lease
    /// slots), as the snapshot counted them.
    pub tables: crate::stats::TableUsage,
}

impl Report {
    /// The processes whose `liveness` is one of `of`, each once however many slots it
    /// holds (a process takes one per registered handle).
    pub fn processes_counted(&self, of: &[&str]) -> usize {
        processes_counted(self.processes.iter().map(|p| (p.liveness, p.pid)), of)
    }
}

/// Of `procs` (each slot's liveness and pid), the processes whose liveness is one of
/// `of`, each once however many slots it holds.
pub fn processes_counted<'a>(procs: impl Iterator<Item = (&'a str, u32)>, of: &[&str]) -> usize {
    let pids = procs.filter(|(l, _)| of.contains(l)).map(|(_, pid)| pid);
    pids.collect::<std::collections::BTreeSet<_>>().len()
}

#[derive(Clone, Debug, Serialize)]
pub struct SegmentInfo {
    pub name: String,
    pub size: u64,
    pub layout_version: u32,
    pub created_unix_ms: u64,
    pub creator_pid: u32,
}

#[derive(Clone, Debug, Serialize)]
pub struct PoolRow {
    pub name: String,
    pub capacity: u32,
    pub in_use: u32,
    pub floor: u32,
    pub active_tenants: usize,
    pub active_weight: u64,
    pub waiters: u32,
    pub grants: u64,
    pub refusals: u64,
    /// An `evict` pool's residents (`null` for a pool that refuses).
    pub residents: Option<crate::stats::ResidentsSnap>,
    /// A `per_worker` pool's sizing (`null` for a pool of fixed capacity).
    pub per_worker: Option<crate::stats::PerWorkerSnap>,
    /// Whether the tenants' rates apply to the pool's acquires.
    pub rates: bool,
    /// Tenants that have used the pool, most held first.
    pub tenants: Vec<TenantRow>,
}

#[derive(Clone, Debug, Serialize)]
pub struct TenantRow {
    pub name: String,
    pub held: u32,
    pub share: f64,
    pub weight: u32,
    pub active: bool,
    /// Ms since its last activity in the pool (`null`: never).
    pub idle_ms: Option<u64>,
    pub grants: u64,
    /// Refusals by reason: `pool_full`, `over_share`, `timed_out`, `cancelled`,
    /// `too_many_residents`.
    pub refusals: std::collections::BTreeMap<String, u64>,
    pub mean_hint_ms: f64,
    pub early_returns: u64,
    /// `evict` pools: its residents revoked, and the revocations it made.
    pub revoked: u64,
    pub evictions: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct LeaseRow {
    pub index: usize,
    pub state: &'static str,
    pub pool: String,
    pub tenant: String,
    pub units: u32,
    pub process_slot: usize,
    /// The pid of the slot's process (0: the slot is free).
    pub pid: u32,
    pub tid: u32,
    pub age_ms: u64,
    /// The declared hold (0: none).
    pub hold_ms: u64,
    /// How long it has been held past its declared hold (0: not past it, or none).
    pub overrun_ms: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct RateRow {
    pub name: String,
    pub weight: u32,
    /// 0: unbounded.
    pub requests_per_s: u32,
    pub work_units_per_s: u32,
    /// Request tokens in the bucket now (0 when unbounded).
    pub request_tokens: u64,
    /// Ms until its work debt is paid (0: not in debt).
    pub work_debt_ms: u64,
    /// Acquires refused `rate_limited` and `work_debt`, and work units charged.
    pub rate_limited: u64,
    pub work_debt: u64,
    pub work_charged: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ProcRow {
    pub slot: usize,
    pub pid: u32,
    /// The slot's state: `claiming`, `live`, `reaping`, `corrupt`.
    pub status: &'static str,
    /// `alive`, `dying` (exiting, or its anchor died and it is not reaped yet) or
    /// `dead` (gone; `reap` returns its permits).
    pub liveness: &'static str,
    /// Whether its robust-futex anchor is in place (the kernel wakes a watcher at its
    /// death).
    pub anchored: bool,
    /// `worker`, or `tool` for a tool's registration (`Table::open_tool`, such as
    /// `shmtool rates`), which `per_worker` pools do not count.
    pub kind: &'static str,
    pub leases: usize,
    pub units_held: u64,
    pub registered_ms: u64,
}

/// A process's liveness, from `/proc` and its owner word: `alive`, `dying` or `dead`.
pub fn liveness(p: &ProcSnap) -> &'static str {
    let info = crate::liveness::proc_info(p.pid);
    if crate::liveness::dead_by(info.as_ref(), p.start_time) {
        "dead"
    } else if info.is_some_and(|i| matches!(i.state, b'Z' | b'X'))
        || p.anchor == "died"
        || p.status == "reaping"
    {
        // Exiting (a zombie with threads left), or its anchor died: not reaped yet.
        "dying"
    } else {
        "alive"
    }
}

/// Builds the report from one snapshot of `t`.
pub fn report(t: &Table) -> Result<Report> {
    let snap = t.try_snapshot()?;
    let (created_unix_ms, creator_pid) = t.engine().seg().created();
    Ok(from_snapshot(
        SegmentInfo {
            name: t.name().to_owned(),
            size: t.size() as u64,
            layout_version: crate::layout::LAYOUT_VERSION,
            created_unix_ms,
            creator_pid,
        },
        snap,
    ))
}

fn from_snapshot(segment: SegmentInfo, s: Snapshot) -> Report {
    let now = s.now_ms;
    let pid_of = |slot: usize| {
        s.processes
            .iter()
            .find(|p| p.slot == slot)
            .map_or(0, |p| p.pid)
    };
    let leases: Vec<LeaseRow> = s
        .leases
        .iter()
        .map(|l| {
            let age_ms = now.saturating_sub(l.granted_ms);
            LeaseRow {
                index: l.index,
                state: l.state,
                pool: l.pool.clone(),
                tenant: l.tenant.clone(),
                units: l.units,
                process_slot: l.process_slot,
                pid: pid_of(l.process_slot),
                tid: l.tid,
                age_ms,
                hold_ms: l.hold_ms,
                overrun_ms: if l.hold_ms > 0 {
                    age_ms.saturating_sub(l.hold_ms)
                } else {
                    0
                },
            }
        })
        .collect();
    let processes = s
        .processes
        .iter()
        .map(|p| {
            let mine = leases.iter().filter(|l| l.process_slot == p.slot);
            ProcRow {
                slot: p.slot,
                pid: p.pid,
                status: p.status,
                liveness: liveness(p),
                anchored: p.anchor == "alive",
                kind: if p.tool { "tool" } else { "worker" },
                leases: mine.clone().count(),
                units_held: mine.map(|l| l.units as u64).sum(),
                registered_ms: p.registered_ms,
            }
        })
        .collect();
    let pools = s
        .pools
        .into_iter()
        .map(|p| {
            let mut tenants: Vec<TenantRow> = p
                .tenants
                .into_iter()
                .map(|t| TenantRow {
                    name: t.name,
                    held: t.held,
                    share: t.share,
                    weight: t.weight,
                    active: t.active,
                    idle_ms: t.last_active_ms.map(|last| now.saturating_sub(last)),
                    grants: t.grants,
                    refusals: t.refusals.into_iter().collect(),
                    mean_hint_ms: t.mean_hint_ms,
                    early_returns: t.early_returns,
                    revoked: t.revoked,
                    evictions: t.evictions,
                })
                .collect();
            tenants.sort_by(|a, b| b.held.cmp(&a.held).then_with(|| a.name.cmp(&b.name)));
            PoolRow {
                per_worker: p.per_worker,
                rates: p.rates,
                name: p.name,
                capacity: p.capacity,
                in_use: p.in_use,
                floor: p.floor,
                active_tenants: p.active_tenants,
                active_weight: p.active_weight,
                waiters: p.waiters,
                grants: p.grants,
                refusals: p.refusals,
                residents: p.residents,
                tenants,
            }
        })
        .collect();
    let tenants = s
        .tenants
        .iter()
        .map(|t| RateRow {
            name: t.name.clone(),
            weight: t.weight,
            requests_per_s: t.rates.requests_per_s,
            work_units_per_s: t.rates.work_units_per_s,
            request_tokens: t.rates.request_tokens,
            work_debt_ms: t.rates.work_debt_ms,
            rate_limited: t.rates.rate_limited,
            work_debt: t.rates.work_debt_refusals,
            work_charged: t.rates.work_charged,
        })
        .collect();
    Report {
        schema: SCHEMA,
        segment,
        now_ms: now,
        pools,
        leases,
        processes,
        tenants,
        deaths: s.deaths,
        guaranteed: s.guaranteed,
        tables: s.tables,
    }
}

/// One logged decision, with names and times.
#[derive(Clone, Debug, Serialize)]
pub struct Decision {
    /// Wall-clock time of the decision, ms since the Unix epoch (its engine time
    /// shifted by `CLOCK_REALTIME - CLOCK_MONOTONIC` now: exact for the implicit-now
    /// calls, meaningless for explicit `now`s on another base).
    pub unix_ms: u64,
    /// The engine time it was decided at (`now`, ms).
    pub at_ms: u64,
    pub slot: usize,
    /// Its position in the slot's log.
    pub seq: u64,
    pub pid: u32,
    pub tid: u32,
    pub pool: String,
    pub tenant: String,
    pub units: u32,
    /// `granted`, `pool_full`, `over_share`, `too_many_residents`, or a refusal by the
    /// tenant's rates: `rate_limited` or `work_debt`.
    pub outcome: &'static str,
    /// For a refusal by the tenant's rates, the bucket it was decided on (`None` for a
    /// decision of the pool's rule, whose inputs follow; for a rate refusal they are 0:
    /// no pool was touched).
    pub rate: Option<RateInputs>,
    /// The inputs the rule decided on.
    pub in_use: u32,
    pub held: u32,
    pub capacity: u32,
    pub floor: u32,
    pub weight: u32,
    pub active_weight: u32,
    /// The tenant's share under those inputs.
    pub share: f64,
    /// The retry-after given (0 for a grant).
    pub retry_after_ms: u32,
    /// What the library's rule decides on the same inputs now.
    pub replayed: Option<&'static str>,
}

/// The inputs of a refusal by a tenant's rates: the refusing bucket's rate and how far
/// its theoretical arrival time was past the decision's `now`.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct RateInputs {
    /// Requests per second (`rate_limited`) or work units per second (`work_debt`).
    pub per_second: u32,
    /// The bucket's lead over `now`, ns: a request bucket refuses when one more token
    /// takes it past one second (the burst), a work bucket when it is past already.
    pub lead_ns: u64,
}

/// The decision log of a segment, merged by time.
#[derive(Clone, Debug, Serialize)]
pub struct LogView {
    pub decisions: Vec<Decision>,
    /// Entries skipped as being written or torn (two threads of one process at once).
    pub skipped: usize,
}

/// `CLOCK_REALTIME - CLOCK_MONOTONIC` now, in ms.
fn realtime_offset_ms() -> i64 {
    crate::clock::unix_ms() as i64 - crate::clock::monotonic().as_millis() as i64
}

/// Every decision logged in `t`, oldest first, with pool and tenant names.
pub fn decisions(t: &Table) -> Result<LogView> {
    t.engine().seg().check_size()?;
    let (log, skipped) = decisions::read_all(t.engine().seg());
    Ok(LogView {
        decisions: log.iter().map(|l| named(t, l)).collect(),
        skipped,
    })
}

fn named(t: &Table, l: &Logged) -> Decision {
    let e = &l.entry;
    let cfg = t.config();
    let tenant = t
        .engine()
        .tenant_by_index(e.tenant)
        .ok()
        .and_then(|id| t.engine().tenant_name(id))
        .unwrap_or_else(|| format!("#{}", e.tenant));
    // The caller's time of the decision (the log keeps the segment's: `clock::internal`).
    let at_ms = crate::clock::external_or_0(e.at_ms);
    let rate = (e.policy == decisions::POLICY_RATES).then(|| RateInputs {
        per_second: e.cap,
        lead_ns: e.lead_ns(),
    });
    // A rate refusal's words keep its bucket, not a pool's inputs.
    let pool_input = |x: u32| if rate.is_some() { 0 } else { x };
    Decision {
        unix_ms: (at_ms as i64).saturating_add(realtime_offset_ms()).max(0) as u64,
        at_ms,
        slot: l.slot,
        seq: l.seq,
        pid: e.pid,
        tid: e.tid,
        pool: cfg
            .pools
            .get(e.pool as usize)
            .map_or_else(|| format!("#{}", e.pool), |p| p.name.clone()),
        tenant,
        units: e.units,
        outcome: e.outcome_text(e.outcome),
        rate,
        in_use: pool_input(e.in_use),
        held: pool_input(e.held),
        capacity: pool_input(e.cap),
        floor: e.floor,
        weight: e.weight,
        active_weight: e.active_weight,
        share: if rate.is_some() {
            0.0
        } else {
            crate::policy::fair_share::share(e.cap, e.floor, e.weight, e.active_weight as u64)
        },
        retry_after_ms: e.hint_ms,
        replayed: decisions::redecide(e).map(|c| e.outcome_text(c)),
    }
}

/// Re-decides every decision logged in `t` with the library's rule: how many were
/// replayed, and those that came out differently.
pub fn replay(t: &Table) -> Result<(usize, Vec<decisions::Mismatch>)> {
    t.engine().seg().check_size()?;
    let (log, _) = decisions::read_all(t.engine().seg());
    Ok((log.len(), decisions::replay(&log)))
}
