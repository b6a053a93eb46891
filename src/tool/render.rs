//! Human-readable tables of a [`Report`] and of the decision log.

use std::borrow::Cow;
use std::fmt::Write;

use super::report::{LogView, Report};
use super::shown;

/// Left-aligned columns, two spaces apart, under a header row; every cell as
/// [`shown`] prints it.
fn table(head: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<Cow<str>>> = rows
        .iter()
        .map(|r| r.iter().map(|c| shown(c)).collect())
        .collect();
    let mut width: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &mut dyn Iterator<Item = &str>| {
        let cells: Vec<&str> = cells.collect();
        let last = cells.len().saturating_sub(1);
        for (i, (c, w)) in cells.iter().zip(&width).enumerate() {
            if i == last {
                out.push_str(c);
            } else {
                let _ = write!(out, "{c:<w$}  ");
            }
        }
        out.push('\n');
    };
    line(&mut out, &mut head.iter().copied());
    for r in &rows {
        line(&mut out, &mut r.iter().map(|c| c.as_ref()));
    }
    out
}

fn ms(v: u64) -> String {
    if v >= 10_000 {
        format!("{:.1}s", v as f64 / 1000.0)
    } else {
        format!("{v}ms")
    }
}

/// Wall-clock `HH:MM:SS.mmm` (UTC) of a Unix time in ms.
pub fn clock(unix_ms: u64) -> String {
    let s = unix_ms / 1000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        s / 3600 % 24,
        s / 60 % 60,
        s % 60,
        unix_ms % 1000
    )
}

/// How full the fixed tables are, in one line: each is sized at creation, and a full
/// one is an error (`TenantTableFull`, ...) that only a new segment mends.
fn tables_line(t: &crate::stats::TableUsage) -> String {
    format!(
        "tables: tenants {} of {} (max_tenants), processes {} of {} (max_processes), \
         leases {} of {}, at most {} of {} in one process (leases_per_process)\n",
        t.tenants.used,
        t.tenants.size,
        t.processes.used,
        t.processes.size,
        t.leases.used,
        t.leases.size,
        t.leases_in_one_process.used,
        t.leases_in_one_process.size
    )
}

/// `inspect`'s tables: how full the fixed tables are, pools, tenants per pool, leases,
/// processes.
pub fn report_tables(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "segment {}  {} bytes  layout v{}  created {} UTC by pid {}",
        shown(&r.segment.name),
        r.segment.size,
        r.segment.layout_version,
        clock(r.segment.created_unix_ms),
        r.segment.creator_pid
    );
    out.push_str(&tables_line(&r.tables));
    out.push_str("\nPOOLS\n");
    let rows: Vec<Vec<String>> = r
        .pools
        .iter()
        .map(|p| {
            vec![
                p.name.clone(),
                p.capacity.to_string(),
                p.in_use.to_string(),
                p.floor.to_string(),
                p.active_tenants.to_string(),
                p.waiters.to_string(),
                p.grants.to_string(),
                p.refusals.to_string(),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "pool", "capacity", "in_use", "floor", "active", "waiters", "grants", "refusals",
        ],
        &rows,
    ));
    for p in &r.pools {
        if let Some(w) = &p.per_worker {
            let _ = writeln!(
                out,
                "{} is sized per worker: min({workers}, max(ceil({} x {workers}), {})) = {} \
                 tickets for the {workers} live workers",
                shown(&p.name),
                w.quota,
                w.min_tickets,
                w.tickets,
                workers = w.workers
            );
            if p.in_use > p.capacity {
                let _ = writeln!(
                    out,
                    "{} has {} in use, past its {} tickets: it shrank as workers went \
                     (holders keep what they hold), and grants again once less than {} \
                     is in use",
                    shown(&p.name),
                    p.in_use,
                    p.capacity,
                    p.capacity
                );
            }
        }
    }
    let unrated: Vec<Cow<str>> = r
        .pools
        .iter()
        .filter(|p| !p.rates)
        .map(|p| shown(&p.name))
        .collect();
    if !unrated.is_empty() {
        let _ = writeln!(
            out,
            "the tenants' rates do not apply to {} (rates = false)",
            unrated.join(", ")
        );
    }
    for p in r.pools.iter().filter(|p| p.residents.is_some()) {
        let x = p.residents.as_ref().expect("filtered");
        let _ = writeln!(
            out,
            "residents of {}: {} idle, {} in a call, {} revoked awaiting release, {} \
             evictions; a spawn waits {} for an evictable one",
            shown(&p.name),
            x.idle,
            x.in_call,
            x.revoked,
            x.evictions,
            ms(x.evict_wait_ms as u64)
        );
    }
    for p in &r.pools {
        let _ = writeln!(out, "\nTENANTS of {}", shown(&p.name));
        let rows: Vec<Vec<String>> = p
            .tenants
            .iter()
            .map(|t| {
                let refused = t
                    .refusals
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(" ");
                vec![
                    t.name.clone(),
                    t.held.to_string(),
                    format!("{:.2}", t.share),
                    t.weight.to_string(),
                    if t.active { "yes" } else { "no" }.into(),
                    t.idle_ms
                        .map_or("never".into(), |v| format!("{} ago", ms(v))),
                    t.grants.to_string(),
                    if refused.is_empty() {
                        "-".into()
                    } else {
                        refused
                    },
                ]
            })
            .collect();
        out.push_str(&table(
            &[
                "tenant",
                "held",
                "share",
                "weight",
                "active",
                "last_active",
                "grants",
                "refusals",
            ],
            &rows,
        ));
    }
    out.push_str("\nRATES (per tenant, node-wide; 0 is unbounded)\n");
    let rows: Vec<Vec<String>> = r
        .tenants
        .iter()
        .map(|t| {
            vec![
                t.name.clone(),
                t.weight.to_string(),
                t.requests_per_s.to_string(),
                t.request_tokens.to_string(),
                t.work_units_per_s.to_string(),
                if t.work_debt_ms > 0 {
                    ms(t.work_debt_ms)
                } else {
                    "-".into()
                },
                t.rate_limited.to_string(),
                t.work_debt.to_string(),
                t.work_charged.to_string(),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "tenant",
            "weight",
            "req/s",
            "tokens",
            "work/s",
            "debt",
            "rate_limited",
            "work_debt",
            "work_charged",
        ],
        &rows,
    ));
    out.push_str("\nLEASES\n");
    let rows: Vec<Vec<String>> = r
        .leases
        .iter()
        .map(|l| {
            vec![
                l.index.to_string(),
                l.state.into(),
                l.pool.clone(),
                l.tenant.clone(),
                l.units.to_string(),
                l.pid.to_string(),
                l.tid.to_string(),
                ms(l.age_ms),
                if l.hold_ms > 0 {
                    ms(l.hold_ms)
                } else {
                    "-".into()
                },
                if l.overrun_ms > 0 {
                    ms(l.overrun_ms)
                } else {
                    "-".into()
                },
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "lease", "state", "pool", "tenant", "units", "pid", "tid", "age", "hold", "overrun",
        ],
        &rows,
    ));
    out.push_str("\nPROCESSES\n");
    let rows: Vec<Vec<String>> = r
        .processes
        .iter()
        .map(|p| {
            vec![
                p.slot.to_string(),
                p.pid.to_string(),
                p.liveness.into(),
                if p.anchored { "yes" } else { "no" }.into(),
                p.kind.into(),
                p.leases.to_string(),
                p.units_held.to_string(),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "slot", "pid", "liveness", "anchored", "kind", "leases", "units",
        ],
        &rows,
    ));
    for g in &r.guaranteed {
        out.push_str(&format!(
            "\nGUARANTEED {} ({}, ceiling {}, {} in use, {} on loan, horizon {}, idle after {}, at {})\n",
            shown(&g.name),
            g.unit.as_str(),
            g.ceiling,
            g.in_use,
            g.on_loan,
            ms(g.reclaim_horizon_ms),
            ms(g.idle_after_ms),
            g.now_ms
        ));
        let opt = |v: Option<u64>| v.map_or("-".into(), ms);
        let rows: Vec<Vec<String>> = g
            .tenants
            .iter()
            .map(|t| {
                vec![
                    t.name.clone(),
                    t.weight.to_string(),
                    t.guarantee.to_string(),
                    t.held.to_string(),
                    t.lent.to_string(),
                    t.borrowed.to_string(),
                    opt(t.idle_ms),
                    if t.lendable { "yes" } else { "no" }.into(),
                    t.demand.to_string(),
                    t.deficit_unit_ms.to_string(),
                    opt(t.worst_reclaim_ms),
                    t.grants.to_string(),
                    t.refusals.to_string(),
                ]
            })
            .collect();
        out.push_str(&table(
            &[
                "tenant",
                "weight",
                "guarantee",
                "held",
                "lent",
                "borrowed",
                "idle",
                "lendable",
                "demand",
                "deficit",
                "worst reclaim",
                "grants",
                "refused",
            ],
            &rows,
        ));
        if !g.overrun_leases.is_empty() {
            out.push_str(&format!(
                "overrun leases: {}\n",
                g.overrun_leases
                    .iter()
                    .map(|l| shown(l))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    out
}

/// `top`'s view: every (pool, tenant) holding or active, most held first. A guaranteed
/// pool's tenants are there too, with their guarantee as their share, when they hold,
/// want (a refused request outstanding) or acted within `idle_after_ms`; such a pool
/// has no blocked waiters (`-`).
pub fn top_view(r: &Report) -> String {
    let mut rows: Vec<(u64, Vec<String>)> = Vec::new();
    for p in &r.pools {
        for t in p.tenants.iter().filter(|t| t.held > 0 || t.active) {
            // Saturating: the counters come from shared memory, which may hold garbage.
            let refused = t.refusals.values().fold(0u64, |a, &n| a.saturating_add(n));
            rows.push((
                t.held.into(),
                vec![
                    p.name.clone(),
                    t.name.clone(),
                    t.held.to_string(),
                    format!("{:.2}", t.share),
                    format!("{}/{}", p.in_use, p.capacity),
                    t.grants.to_string(),
                    refused.to_string(),
                    p.waiters.to_string(),
                ],
            ));
        }
    }
    for g in &r.guaranteed {
        let present = |t: &&crate::guaranteed::TenantStats| {
            t.held > 0 || t.demand > 0 || t.idle_ms.is_some_and(|i| i < g.idle_after_ms)
        };
        for t in g.tenants.iter().filter(present) {
            rows.push((
                t.held,
                vec![
                    g.name.clone(),
                    t.name.clone(),
                    t.held.to_string(),
                    t.guarantee.to_string(),
                    format!("{}/{}", g.in_use, g.ceiling),
                    t.grants.to_string(),
                    t.refusals.to_string(),
                    "-".into(),
                ],
            ));
        }
    }
    rows.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    // The guaranteed pools' leases are their own (`max_leases` each), apart from the
    // fair-share pools' lease table: counted apart.
    let guaranteed: usize = r.guaranteed.iter().map(|g| g.leases.len()).sum();
    let leases = if r.guaranteed.is_empty() {
        r.leases.len().to_string()
    } else {
        format!("{} (and {guaranteed} of guaranteed pools)", r.leases.len())
    };
    let mut out = format!(
        "fairshm {} (created {} UTC by pid {})  processes: {} alive, {} not  \
         leases: {leases}  tenants: {} of {}  (q or Ctrl-C quits)\n\n",
        shown(&r.segment.name),
        clock(r.segment.created_unix_ms),
        r.segment.creator_pid,
        r.processes_counted(&["alive"]),
        r.processes_counted(&["dying", "dead"]),
        r.tables.tenants.used,
        r.tables.tenants.size
    );
    let rows: Vec<Vec<String>> = rows.into_iter().map(|(_, r)| r).collect();
    out.push_str(&table(
        &[
            "pool", "tenant", "held", "share", "pool_use", "grants", "refusals", "waiters",
        ],
        &rows,
    ));
    out
}

/// `log`'s table: one line per decision, with the inputs that explain it.
pub fn log_table(v: &LogView) -> String {
    let rows: Vec<Vec<String>> = v
        .decisions
        .iter()
        .map(|d| {
            // A refusal by the tenant's rates touched no pool: its bucket instead.
            let pool_side = match d.rate {
                Some(r) => [
                    format!("rate {}/s", r.per_second),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    format!("{}/-", d.weight),
                ],
                None => [
                    format!("{}/{}", d.in_use, d.capacity),
                    d.held.to_string(),
                    format!("{:.2}", d.share),
                    d.floor.to_string(),
                    format!("{}/{}", d.weight, d.active_weight),
                ],
            };
            let head = [
                clock(d.unix_ms),
                d.pid.to_string(),
                d.pool.clone(),
                d.tenant.clone(),
                d.units.to_string(),
                d.outcome.into(),
            ];
            head.into_iter()
                .chain(pool_side)
                .chain(std::iter::once(if d.retry_after_ms > 0 {
                    ms(d.retry_after_ms as u64)
                } else {
                    "-".into()
                }))
                .collect()
        })
        .collect();
    table(
        &[
            "time(utc)",
            "pid",
            "pool",
            "tenant",
            "units",
            "outcome",
            "in_use/cap",
            "held",
            "share",
            "floor",
            "weight/active",
            "retry_after",
        ],
        &rows,
    )
}
