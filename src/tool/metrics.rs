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

/// The report as Prometheus text.
pub fn prometheus(r: &Report) -> String {
    let mut out = String::new();
    let mut f = Family { out: &mut out };
    let seg = r.segment.name.as_str();
    type PoolGauge = (&'static str, &'static str, fn(&super::PoolRow) -> u64);
    let pool_gauges: [PoolGauge; 5] = [
        (
            "fairshm_pool_capacity",
            "Permits of the pool (POOL).",
            |p| p.capacity as u64,
        ),
        (
            "fairshm_pool_in_use",
            "Permits of the pool held now.",
            |p| p.in_use as u64,
        ),
        (
            "fairshm_pool_floor",
            "Permits kept for tenants under their share (FLOOR).",
            |p| p.floor as u64,
        ),
        (
            "fairshm_pool_active_tenants",
            "Tenants that held or asked within the pool's window.",
            |p| p.active_tenants as u64,
        ),
        (
            "fairshm_pool_waiters",
            "Blocked acquirers waiting on the pool.",
            |p| p.waiters as u64,
        ),
    ];
    for (name, help, get) in pool_gauges {
        f.head(name, "gauge", help);
        for p in &r.pools {
            f.sample(name, &[("segment", seg), ("pool", &p.name)], get(p));
        }
    }
    type TenantFamily = (&'static str, &'static str, &'static str);
    let tenant_families: [TenantFamily; 6] = [
        ("fairshm_tenant_held", "gauge", "Permits the tenant holds."),
        (
            "fairshm_tenant_share",
            "gauge",
            "The tenant's fair share if it asked now.",
        ),
        ("fairshm_tenant_weight", "gauge", "The tenant's weight."),
        (
            "fairshm_tenant_active",
            "gauge",
            "1 if the tenant is in the pool's active set.",
        ),
        (
            "fairshm_tenant_grants_total",
            "counter",
            "Grants to the tenant.",
        ),
        (
            "fairshm_tenant_early_returns_total",
            "counter",
            "Refusals that came before an earlier retry-after had run out.",
        ),
    ];
    for (i, (name, kind, help)) in tenant_families.iter().enumerate() {
        f.head(name, kind, help);
        for p in &r.pools {
            for t in &p.tenants {
                let labels = [
                    ("segment", seg),
                    ("pool", p.name.as_str()),
                    ("tenant", &t.name),
                ];
                match i {
                    0 => f.sample(name, &labels, t.held),
                    1 => f.sample(name, &labels, t.share),
                    2 => f.sample(name, &labels, t.weight),
                    3 => f.sample(name, &labels, t.active as u8),
                    4 => f.sample(name, &labels, t.grants),
                    _ => f.sample(name, &labels, t.early_returns),
                }
            }
        }
    }
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
    type RateFamily = (
        &'static str,
        &'static str,
        &'static str,
        fn(&super::RateRow) -> u64,
    );
    let rate_families: [RateFamily; 7] = [
        (
            "fairshm_tenant_requests_per_second",
            "gauge",
            "The tenant's request rate (0: unbounded).",
            |t| t.requests_per_s as u64,
        ),
        (
            "fairshm_tenant_work_units_per_second",
            "gauge",
            "The tenant's work rate (0: unbounded).",
            |t| t.work_units_per_s as u64,
        ),
        (
            "fairshm_tenant_request_tokens",
            "gauge",
            "Request tokens in the tenant's bucket.",
            |t| t.request_tokens,
        ),
        (
            "fairshm_tenant_work_debt_ms",
            "gauge",
            "Ms until the tenant's work debt is paid.",
            |t| t.work_debt_ms,
        ),
        (
            "fairshm_tenant_rate_limited_total",
            "counter",
            "Acquires refused over the request rate.",
            |t| t.rate_limited,
        ),
        (
            "fairshm_tenant_work_debt_refusals_total",
            "counter",
            "Acquires refused in work debt.",
            |t| t.work_debt,
        ),
        (
            "fairshm_tenant_work_charged_total",
            "counter",
            "Work units charged.",
            |t| t.work_charged,
        ),
    ];
    for (name, kind, help, get) in rate_families {
        f.head(name, kind, help);
        for t in &r.tenants {
            f.sample(name, &[("segment", seg), ("tenant", &t.name)], get(t));
        }
    }
    let name = "fairshm_processes";
    f.head(name, "gauge", "Registered processes, by liveness.");
    for state in ["alive", "dying", "dead"] {
        let n = r.processes.iter().filter(|p| p.liveness == state).count();
        f.sample(name, &[("segment", seg), ("liveness", state)], n);
    }
    let name = "fairshm_leases";
    f.head(name, "gauge", "Lease records in use (held or in flight).");
    f.sample(name, &[("segment", seg)], r.leases.len());
    let name = "fairshm_leases_overrun";
    f.head(name, "gauge", "Leases held past their declared hold.");
    let n = r.leases.iter().filter(|l| l.overrun_ms > 0).count();
    f.sample(name, &[("segment", seg)], n);
    out
}
