//! The first difference between a segment's config and the one an opener expected, for
//! `ConfigMismatch`, said in the config file's own keys: `pool "r": capacity: the
//! segment has 2, asked for 3`, not the two structs printed whole.

use super::{Config, PoolConfig};
use crate::guaranteed::GuaranteedConfig;

/// A pool's settings by their keys in a config file, as the file would give them
/// (`per_worker` as its `quota` and `min_tickets`; a pool that does not evict has no
/// `evict_wait_ms` of its own, as `PoolConfig::canonical` says).
fn pool_fields(p: &PoolConfig) -> Vec<(&'static str, String)> {
    let p = p.canonical();
    let mut out = Vec::with_capacity(8);
    match p.per_worker {
        None => out.push(("capacity", p.capacity.to_string())),
        Some(pw) => {
            out.push(("per_worker.quota", pw.quota().to_string()));
            out.push(("per_worker.min_tickets", pw.min_tickets.to_string()));
        }
    }
    out.push(("floor_percent", p.floor_percent.to_string()));
    out.push(("window_ms", p.window_ms.to_string()));
    out.push(("evict", p.evict.to_string()));
    if p.evict {
        out.push(("evict_wait_ms", p.evict_wait_ms.to_string()));
    }
    out.push(("rates", p.rates.to_string()));
    out
}

/// A guaranteed pool's settings by their keys in a config file.
fn guaranteed_fields(g: &GuaranteedConfig) -> Vec<(&'static str, String)> {
    let tenants = g
        .tenants
        .iter()
        .map(|(n, w)| format!("{n:?} = {w}"))
        .collect::<Vec<_>>()
        .join(", ");
    vec![
        ("ceiling", g.ceiling.to_string()),
        (
            "fairness_unit",
            g.fairness_unit
                .map_or("none".to_owned(), |u| u.as_str().to_owned()),
        ),
        ("tenants", format!("[{tenants}]")),
        ("reclaim_horizon_ms", g.reclaim_horizon_ms.to_string()),
        ("idle_after_ms", g.idle_after_ms.to_string()),
        ("started_at_ms", g.started_at_ms.to_string()),
        ("max_leases", g.max_leases.to_string()),
        ("demand_signal", g.demand_signal.to_string()),
    ]
}

/// The first key whose value differs between two field lists of one record: `what`
/// (`pool "r"`) names the record. Lists of different keys (a fixed pool against a
/// `per_worker` one) differ at the first key they do not share.
fn first_field(
    what: &str,
    have: &[(&'static str, String)],
    want: &[(&'static str, String)],
) -> Option<String> {
    for (i, (key, h)) in have.iter().enumerate() {
        match want.get(i) {
            Some((k, w)) if k == key && w == h => continue,
            Some((k, w)) if k == key => {
                return Some(format!("{what}: {key}: the segment has {h}, asked for {w}"));
            }
            Some((k, w)) => {
                return Some(format!(
                    "{what}: the segment has {key} = {h}, asked for {k} = {w}"
                ));
            }
            None => {
                return Some(format!(
                    "{what}: the segment has {key} = {h}, asked without"
                ));
            }
        }
    }
    want.get(have.len())
        .map(|(k, w)| format!("{what}: the segment has no {k}, asked for {k} = {w}"))
}

/// The first difference between two lists of named records (`kind`: `pool`): their
/// names, in order, then each record's fields (`fields`) by [`first_field`].
fn records<T>(
    kind: &str,
    have: &[T],
    want: &[T],
    name: impl Fn(&T) -> &String,
    fields: impl Fn(&T) -> Vec<(&'static str, String)>,
) -> Option<String> {
    let names = |xs: &[T]| xs.iter().map(&name).cloned().collect::<Vec<_>>();
    if names(have) != names(want) {
        return Some(format!(
            "{kind}s: the segment has {:?}, asked for {:?}",
            names(have),
            names(want)
        ));
    }
    have.iter()
        .zip(want)
        .find_map(|(h, w)| first_field(&format!("{kind} {:?}", name(h)), &fields(h), &fields(w)))
}

/// A weight as the config gives it: 1 for a tenant it does not name.
fn weight(ws: &[(String, u32)], name: &str) -> u32 {
    ws.iter().find(|(n, _)| n == name).map_or(1, |(_, w)| *w)
}

impl Config {
    /// The first difference between this (a segment's) config and `asked`, in the config
    /// file's keys; `None` when they configure the same segment. A tenant weighted 1
    /// is the same as one not named (unnamed tenants weigh 1), and the weights' order
    /// does not count.
    pub fn diff(&self, asked: &Config) -> Option<String> {
        let sizes = [
            ("max_tenants", self.max_tenants, asked.max_tenants),
            ("max_processes", self.max_processes, asked.max_processes),
            (
                "leases_per_process",
                self.leases_per_process,
                asked.leases_per_process,
            ),
        ];
        for (what, have, want) in sizes {
            if have != want {
                return Some(format!("{what}: the segment has {have}, asked for {want}"));
            }
        }
        let pools = records("pool", &self.pools, &asked.pools, |p| &p.name, pool_fields);
        if pools.is_some() {
            return pools;
        }
        let named = self.weights.iter().chain(&asked.weights).map(|(n, _)| n);
        for name in named {
            let (have, want) = (weight(&self.weights, name), weight(&asked.weights, name));
            if have != want {
                return Some(format!(
                    "weights: tenant {name:?}: the segment has {have}, asked for {want}"
                ));
            }
        }
        let (have, want) = (&self.guaranteed, &asked.guaranteed);
        let d = records(
            "guaranteed pool",
            have,
            want,
            |g| &g.name,
            guaranteed_fields,
        );
        debug_assert!(
            d.is_some() || have == want,
            "a difference the fields do not show"
        );
        d
    }
}
