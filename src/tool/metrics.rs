//! The Prometheus text exposition format (version 0.0.4) of a [`Report`]: gauges and
//! counters with `segment`, `pool` and `tenant` labels, for a node exporter's textfile
//! collector or a scrape of `shmtool metrics --listen`.

use std::fmt::Write;

use super::report::Report;

/// A label value, escaped as the format asks (backslash, double quote, newline).
fn esc(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

struct Family<'a> {
    out: &'a mut String,
}

impl Family<'_> {
    fn head(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }
    fn sample(&mut self, name: &str, labels: &[(&str, &str)], v: impl std::fmt::Display) {
        let labels: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", esc(v)))
            .collect();
        let _ = writeln!(self.out, "{name}{{{}}} {v}", labels.join(","));
    }
}

/// A family of samples, one per row of `T`: name, type, help, and the value of a row.
type Metric<T> = (&'static str, &'static str, &'static str, fn(&T) -> f64);

impl Family<'_> {
    /// Every metric of `metrics`, each with a sample per `(labels, row)`.
    fn all<'r, T: 'r>(
        &mut self,
        metrics: &[Metric<T>],
        rows: impl Iterator<Item = (Vec<(&'r str, &'r str)>, &'r T)> + Clone,
    ) {
        for (name, kind, help, get) in metrics {
            self.head(name, kind, help);
            for (labels, row) in rows.clone() {
                self.sample(name, &labels, get(row));
            }
        }
    }
}

/// The report as Prometheus text.
pub fn prometheus(r: &Report) -> String {
    let mut out = String::new();
    let mut f = Family { out: &mut out };
    let seg = r.segment.name.as_str();
    let pool_metrics: [Metric<super::PoolRow>; 8] = [
        (
            "fairshm_pool_capacity",
            "gauge",
            "Permits of the pool (POOL).",
            |p| p.capacity as f64,
        ),
        (
            "fairshm_pool_in_use",
            "gauge",
            "Permits of the pool held now.",
            |p| p.in_use as f64,
        ),
        (
            "fairshm_pool_floor",
            "gauge",
            "Permits kept for tenants under their share (FLOOR).",
            |p| p.floor as f64,
        ),
        (
            "fairshm_pool_active_tenants",
            "gauge",
            "Tenants that held or asked within the pool's window.",
            |p| p.active_tenants as f64,
        ),
        (
            "fairshm_pool_waiters",
            "gauge",
            "Blocked acquirers waiting on the pool.",
            |p| p.waiters as f64,
        ),
        (
            "fairshm_pool_workers",
            "gauge",
            "Per-worker pools: the live registered workers the capacity is sized from (0 for a fixed pool).",
            |p| p.per_worker.as_ref().map_or(0.0, |w| w.workers as f64),
        ),
        (
            "fairshm_pool_residents_revoked",
            "gauge",
            "Evict pools: residents revoked and not yet released by their owners.",
            |p| p.residents.as_ref().map_or(0.0, |x| x.revoked as f64),
        ),
        (
            "fairshm_pool_evictions_total",
            "counter",
            "Evict pools: residents revoked to make room, ever.",
            |p| p.residents.as_ref().map_or(0.0, |x| x.evictions as f64),
        ),
    ];
    f.all(
        &pool_metrics,
        r.pools
            .iter()
            .map(|p| (vec![("segment", seg), ("pool", p.name.as_str())], p)),
    );
    let tenant_metrics: [Metric<super::TenantRow>; 7] = [
        (
            "fairshm_tenant_held",
            "gauge",
            "Permits the tenant holds.",
            |t| t.held as f64,
        ),
        (
            "fairshm_tenant_share",
            "gauge",
            "The tenant's fair share if it asked now.",
            |t| t.share,
        ),
        (
            "fairshm_tenant_weight",
            "gauge",
            "The tenant's weight.",
            |t| t.weight as f64,
        ),
        (
            "fairshm_tenant_active",
            "gauge",
            "1 if the tenant is in the pool's active set.",
            |t| t.active as u8 as f64,
        ),
        (
            "fairshm_tenant_grants_total",
            "counter",
            "Grants to the tenant.",
            |t| t.grants as f64,
        ),
        (
            "fairshm_tenant_early_returns_total",
            "counter",
            "Refusals that came before an earlier retry-after had run out.",
            |t| t.early_returns as f64,
        ),
        (
            "fairshm_tenant_revoked_total",
            "counter",
            "Evict pools: the tenant's residents revoked to make room.",
            |t| t.revoked as f64,
        ),
    ];
    f.all(
        &tenant_metrics,
        r.pools.iter().flat_map(|p| {
            p.tenants.iter().map(move |t| {
                (
                    vec![
                        ("segment", seg),
                        ("pool", p.name.as_str()),
                        ("tenant", t.name.as_str()),
                    ],
                    t,
                )
            })
        }),
    );
    let name = "fairshm_tenant_refusals_total";
    f.head(name, "counter", "Refusals of the tenant, by reason.");
    for p in &r.pools {
        for t in &p.tenants {
            for reason in ["pool_full", "over_share", "timed_out", "cancelled"] {
                let n = t.refusals.get(reason).copied().unwrap_or(0);
                let labels = [
                    ("segment", seg),
                    ("pool", p.name.as_str()),
                    ("tenant", &t.name),
                    ("reason", reason),
                ];
                f.sample(name, &labels, n);
            }
        }
    }
    let rate_metrics: [Metric<super::RateRow>; 7] = [
        (
            "fairshm_tenant_requests_per_second",
            "gauge",
            "The tenant's request rate (0: unbounded).",
            |t| t.requests_per_s as f64,
        ),
        (
            "fairshm_tenant_work_units_per_second",
            "gauge",
            "The tenant's work rate (0: unbounded).",
            |t| t.work_units_per_s as f64,
        ),
        (
            "fairshm_tenant_request_tokens",
            "gauge",
            "Request tokens in the tenant's bucket.",
            |t| t.request_tokens as f64,
        ),
        (
            "fairshm_tenant_work_debt_ms",
            "gauge",
            "Ms until the tenant's work debt is paid.",
            |t| t.work_debt_ms as f64,
        ),
        (
            "fairshm_tenant_rate_limited_total",
            "counter",
            "Acquires refused over the request rate.",
            |t| t.rate_limited as f64,
        ),
        (
            "fairshm_tenant_work_debt_refusals_total",
            "counter",
            "Acquires refused in work debt.",
            |t| t.work_debt as f64,
        ),
        (
            "fairshm_tenant_work_charged_total",
            "counter",
            "Work units charged.",
            |t| t.work_charged as f64,
        ),
    ];
    f.all(
        &rate_metrics,
        r.tenants
            .iter()
            .map(|t| (vec![("segment", seg), ("tenant", t.name.as_str())], t)),
    );
    let name = "fairshm_processes";
    f.head(
        name,
        "gauge",
        "Registered processes, by liveness (each once, however many handles it registered).",
    );
    for state in ["alive", "dying", "dead"] {
        let n = r.processes_counted(&[state]);
        f.sample(name, &[("segment", seg), ("liveness", state)], n);
    }
    let t = &r.tables;
    let tables = [
        ("tenants", t.tenants),
        ("processes", t.processes),
        ("leases", t.leases),
        ("leases_in_one_process", t.leases_in_one_process),
    ];
    let name = "fairshm_table_used";
    f.head(
        name,
        "gauge",
        "Slots taken in a fixed table of the segment (tenants: names ever claimed; \
         leases_in_one_process: the most one process has taken); a full one refuses with \
         TenantTableFull, ProcessTableFull or LeaseTableFull.",
    );
    for (table, u) in tables {
        f.sample(name, &[("segment", seg), ("table", table)], u.used);
    }
    let name = "fairshm_table_size";
    f.head(
        name,
        "gauge",
        "Slots of a fixed table of the segment, set at creation (max_tenants, \
         max_processes, their product with leases_per_process, leases_per_process).",
    );
    for (table, u) in tables {
        f.sample(name, &[("segment", seg), ("table", table)], u.size);
    }
    let name = "fairshm_leases";
    f.head(name, "gauge", "Lease records in use (held or in flight).");
    f.sample(name, &[("segment", seg)], r.leases.len());
    let name = "fairshm_leases_overrun";
    f.head(name, "gauge", "Leases held past their declared hold.");
    let n = r.leases.iter().filter(|l| l.overrun_ms > 0).count();
    f.sample(name, &[("segment", seg)], n);
    guaranteed(&mut f, seg, &r.guaranteed);
    out
}

/// The guaranteed pools (seed 001): the pool's use and loans, each tenant's guarantee,
/// holdings, loans, demand and the seed's two statistics.
fn guaranteed(f: &mut Family<'_>, seg: &str, pools: &[crate::guaranteed::GStats]) {
    use crate::guaranteed::{GStats, TenantStats};
    let pool_metrics: [Metric<GStats>; 4] = [
        (
            "fairshm_guaranteed_ceiling",
            "gauge",
            "Units the guaranteed pool holds at most.",
            |p| p.ceiling as f64,
        ),
        (
            "fairshm_guaranteed_in_use",
            "gauge",
            "Units held now (overrunning leases included).",
            |p| p.in_use as f64,
        ),
        (
            "fairshm_guaranteed_on_loan",
            "gauge",
            "Units lent from idle tenants' guarantees.",
            |p| p.on_loan as f64,
        ),
        (
            "fairshm_guaranteed_overrun_leases",
            "gauge",
            "Leases past their declared deadline.",
            |p| p.overrun_leases.len() as f64,
        ),
    ];
    f.all(
        &pool_metrics,
        pools
            .iter()
            .map(|p| (vec![("segment", seg), ("pool", p.name.as_str())], p)),
    );
    let tenant_metrics: [Metric<TenantStats>; 9] = [
        (
            "fairshm_guaranteed_tenant_guarantee",
            "gauge",
            "The tenant's guarantee.",
            |t| t.guarantee as f64,
        ),
        (
            "fairshm_guaranteed_tenant_held",
            "gauge",
            "Units of the tenant's leases.",
            |t| t.held as f64,
        ),
        (
            "fairshm_guaranteed_tenant_lent",
            "gauge",
            "Units of its guarantee on loan.",
            |t| t.lent as f64,
        ),
        (
            "fairshm_guaranteed_tenant_borrowed",
            "gauge",
            "Units it borrows.",
            |t| t.borrowed as f64,
        ),
        (
            "fairshm_guaranteed_tenant_demand",
            "gauge",
            "Its largest refused request outstanding.",
            |t| t.demand as f64,
        ),
        (
            "fairshm_guaranteed_tenant_deficit_unit_ms_total",
            "counter",
            "Entitled minus held, integrated while short.",
            |t| t.deficit_unit_ms as f64,
        ),
        (
            "fairshm_guaranteed_tenant_worst_reclaim_ms",
            "gauge",
            "The longest wait that ended in being served.",
            |t| t.worst_reclaim_ms.unwrap_or(0) as f64,
        ),
        (
            "fairshm_guaranteed_tenant_grants_total",
            "counter",
            "Leases granted.",
            |t| t.grants as f64,
        ),
        (
            "fairshm_guaranteed_tenant_refusals_total",
            "counter",
            "Acquires refused.",
            |t| t.refusals as f64,
        ),
    ];
    f.all(
        &tenant_metrics,
        pools.iter().flat_map(|p| {
            p.tenants.iter().map(move |t| {
                (
                    vec![
                        ("segment", seg),
                        ("pool", p.name.as_str()),
                        ("tenant", t.name.as_str()),
                    ],
                    t,
                )
            })
        }),
    );
}
