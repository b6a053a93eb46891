//! The text of `shmtool`'s commands that are not reports of one segment (those are in
//! `render`): the listing, what a reap freed, a stale clean, a tenant's rates, a
//! replay's differences, the decision log followed, and `/metrics` served. The binary
//! only parses its arguments, calls these and maps an error to its exit code.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write;
use std::time::Duration;

use super::follow::{Followed, Now};
use super::list::{Clean, Listed, clean, list};
use super::render::{clock, log_table};
use super::report::{Decision, decisions};
use super::shown;
use crate::config::Config;
use crate::decisions::Mismatch;
use crate::error::{Error, Result};
use crate::recovery::Reaped;
use crate::refusal::plural;
use crate::table::Table;

/// `list`'s lines: a segment with its header facts and process counts, any other file
/// with why it is unreadable.
pub fn list_text(listed: &[Listed]) -> String {
    let mut out = String::new();
    for l in listed {
        let _ = match (&l.header, &l.unreadable) {
            (Some(h), None) => writeln!(
                out,
                "{}  {} bytes  v{}  created {} UTC by pid {}  processes: {} live, {} dying, {} dead",
                shown(&l.name),
                l.size,
                h.layout_version,
                clock(h.created_unix_ms),
                h.creator_pid,
                l.live,
                l.dying,
                l.dead
            ),
            (_, why) => writeln!(
                out,
                "{}  {} bytes  unreadable: {}",
                shown(&l.name),
                l.size,
                why.as_deref().unwrap_or("?")
            ),
        };
    }
    out
}

/// `reap`'s lines: per dead process, what was released and returned, each pool by its
/// name in `cfg` (the segment's config).
pub fn reaped_text(freed: &[Reaped], cfg: &Config) -> String {
    if freed.is_empty() {
        return "no dead process held anything\n".to_owned();
    }
    let mut out = String::new();
    let fair: Vec<_> = cfg.pools.iter().map(|p| &p.name).collect();
    let guaranteed: Vec<_> = cfg.guaranteed.iter().map(|g| &g.name).collect();
    let name = |names: &[&String], i: usize| {
        names
            .get(i)
            .map_or(format!("pool #{i}"), |n| format!("{n:?}"))
    };
    for r in freed {
        let mut returned = Vec::new();
        for (names, units) in [
            (&fair, &r.units_returned),
            (&guaranteed, &r.guaranteed_units_returned),
        ] {
            for (i, &u) in units.iter().enumerate().filter(|(_, u)| **u > 0) {
                returned.push(format!("{} of {}", plural(u, "unit"), name(names, i)));
            }
        }
        let _ = write!(
            out,
            "pid {} (slot {}): {} released, {} in flight finished",
            r.pid,
            r.slot,
            plural(r.leases_released as u64, "lease"),
            r.in_flight
        );
        if !returned.is_empty() {
            let _ = write!(out, "; returned {}", returned.join(", "));
        }
        // A revoked resident's unit went back to its tenant's count only.
        let revoked = r
            .held_units_returned
            .iter()
            .zip(&r.units_returned)
            .enumerate()
            .filter(|(_, (held, pool))| held > pool);
        for (i, (held, pool)) in revoked {
            let _ = write!(
                out,
                "; {} of {} held by revoked residents, not returned (their revokers' now)",
                plural(held - pool, "unit"),
                name(&fair, i)
            );
        }
        for (i, &n) in r
            .waiters_taken_out
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
        {
            let _ = write!(
                out,
                "; {} of {} taken out (it died waiting)",
                plural(n, "waiter"),
                name(&fair, i)
            );
        }
        if r.quarantined > 0 {
            let _ = write!(
                out,
                "; {} quarantined, unreadable (`shmtool check` names them)",
                plural(r.quarantined as u64, "lease")
            );
        }
        out.push('\n');
    }
    out
}

/// `repair`'s lines: the dead processes it reaped (as `reap` says them), then each thing
/// it changed, each pool by its name in `cfg`; what it found sound is not listed.
pub fn repaired_text(r: &crate::Repaired, cfg: &Config) -> String {
    let mut out = String::new();
    if !r.reaped.is_empty() {
        out.push_str(&reaped_text(&r.reaped, cfg));
    }
    let pool = |i: usize| {
        cfg.pools
            .get(i)
            .map_or(format!("pool #{i}"), |p| format!("pool {:?}", p.name))
    };
    for p in &r.pools {
        let mut fixed = Vec::new();
        if p.in_use_before != p.in_use_after {
            fixed.push(format!("in use {} -> {}", p.in_use_before, p.in_use_after));
        }
        if p.tenants_fixed > 0 {
            fixed.push(format!(
                "held rebuilt for {}",
                plural(p.tenants_fixed as u64, "tenant")
            ));
        }
        if let Some((before, after)) = p.waiters {
            fixed.push(format!("waiters {before} -> {after}"));
        }
        if !fixed.is_empty() {
            let _ = writeln!(out, "{}: {}", pool(p.pool), fixed.join(", "));
        }
    }
    for (n, what) in [
        (
            r.slots_taken,
            "process slot in a state no version writes taken and emptied",
        ),
        (
            r.tenant_slots_cleared,
            "tenant slot left mid-write by no live process cleared",
        ),
        (r.orphans_resolved, "lease of a free process slot resolved"),
        (r.leases_quarantined, "lease quarantined (unreadable)"),
        (r.leases_freed, "quarantined lease freed"),
        (
            r.guaranteed_orphans_released,
            "guaranteed lease of no live process released",
        ),
    ] {
        if n > 0 {
            let _ = writeln!(out, "{n} x {what}");
        }
    }
    for g in &r.guaranteed_reset {
        let _ = writeln!(
            out,
            "guaranteed pool {g:?} unreadable: reset to its state at creation"
        );
    }
    let _ = writeln!(
        out,
        "rate buckets of {} refilled (debts forgiven; rates kept)",
        plural(r.rate_buckets_refilled as u64, "tenant")
    );
    out
}

/// `clean --stale`: removes every segment under /dev/shm (whose name starts with
/// `prefix`, if given) that no live process uses, and says for each what it did:
/// readable ones, ones of another layout version and ones their creator never made
/// ready (see [`clean`]). Files without a fairshm header are never touched.
pub fn clean_stale(prefix: Option<&str>) -> Result<String> {
    let mut out = String::new();
    for l in list()? {
        let leftover = l
            .header
            .as_ref()
            .is_some_and(|h| h.layout_version != crate::layout::LAYOUT_VERSION || !h.ready);
        if (l.unreadable.is_some() && !leftover) || prefix.is_some_and(|p| !l.name.starts_with(p)) {
            continue;
        }
        let _ = match clean(&l.name, false) {
            Ok(Clean::Removed) => writeln!(out, "removed {}", shown(&l.name)),
            Ok(Clean::InUse { pids }) => writeln!(out, "kept {}: used by {pids:?}", shown(&l.name)),
            Err(e) => writeln!(out, "kept {}: {e}", shown(&l.name)),
        };
    }
    Ok(out)
}

/// `rates`' line: a tenant's two rates (0 shown as unbounded), and a second one naming
/// the pools they do not apply to (`unrated`: `rates = false`), when there are any.
pub fn rates_text(tenant: &str, requests: u32, work: u32, unrated: &[&str]) -> String {
    let show = |v: u32| {
        if v == 0 {
            "unbounded".to_owned()
        } else {
            format!("{v}/s")
        }
    };
    let mut out = format!(
        "{}: requests {}, work units {}\n",
        shown(tenant),
        show(requests),
        show(work)
    );
    if !unrated.is_empty() {
        let _ = writeln!(
            out,
            "  (not applied to {}: rates = false; a request is rated where it is admitted)",
            unrated
                .iter()
                .map(|p| shown(p))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    out
}

/// `replay`'s lines: each decision that re-decides differently, then the count.
pub fn replay_text(decided: usize, diff: &[Mismatch]) -> String {
    let mut out = String::new();
    for d in diff {
        let _ = writeln!(
            out,
            "slot {} decision {}: logged {}, the rule now gives {}",
            d.slot,
            d.seq,
            d.logged,
            d.replayed
                .unwrap_or("nothing (a policy this version does not know)")
        );
    }
    let _ = writeln!(out, "{decided} decisions replayed, {} differ", diff.len());
    out
}

/// Which decisions `log` shows: those of this tenant and this pool, where given.
#[derive(Clone, Debug, Default)]
pub struct LogFilter {
    pub tenant: Option<String>,
    pub pool: Option<String>,
}

impl LogFilter {
    fn keeps(&self, d: &Decision) -> bool {
        self.tenant.as_ref().is_none_or(|x| *x == d.tenant)
            && self.pool.as_ref().is_none_or(|x| *x == d.pool)
    }
}

/// `Ok` when `pool` is a fair-share pool of `t`, whose decisions the log holds; else
/// the `UnknownPool` that says which pools it has (a typo would otherwise print an
/// empty log, and `--follow` wait on it for ever). A guaranteed pool's decisions are not
/// in this log: each is a state published whole, which `inspect` shows.
fn logged_pool(t: &Table, pool: &str) -> Result<()> {
    let cfg = t.config();
    if cfg.pools.iter().any(|p| p.name == pool) {
        return Ok(());
    }
    let fair: Vec<&str> = cfg.pools.iter().map(|p| p.name.as_str()).collect();
    let mut known = format!("fair-share pools {fair:?}, whose decisions the log holds");
    if cfg.guaranteed.iter().any(|g| g.name == pool) {
        let _ = write!(
            known,
            "; {pool:?} is a guaranteed pool, whose decisions are not logged here: \
             `shmtool inspect` shows its tenants, loans and leases"
        );
    }
    Err(Error::UnknownPool {
        pool: pool.to_owned(),
        known,
    })
}

/// How often `log --follow` looks for new decisions.
pub const FOLLOW_EVERY: Duration = Duration::from_millis(200);

/// `log`: writes the decisions of segment `name` that `filter` keeps to `out` (a table
/// with its header, or one JSON object per line), and with `follow` keeps writing those
/// logged since, every [`FOLLOW_EVERY`], until writing fails (a closed pipe ends it as
/// an `Error::Io` whose source is `BrokenPipe`).
///
/// Followed, the log follows the name ([`Followed`]): after a deploy it writes the new
/// segment's decisions (the table says so in a line of its own, then writes its header
/// again; JSON lines are decisions only, and their sequence numbers start again), and
/// while no readable segment has the name it waits for one (the table says so once).
pub fn write_log(
    name: &str,
    filter: &LogFilter,
    follow: bool,
    json: bool,
    out: &mut dyn Write,
) -> Result<()> {
    let io = |source: std::io::Error| Error::Io {
        name: name.to_owned(),
        op: "writing its decision log",
        source,
    };
    let mut seg = Followed::open(name)?;
    {
        let t = seg.current()?;
        if let Some(pool) = &filter.pool {
            logged_pool(t.table(), pool)?;
        }
        if let Some(tenant) = &filter.tenant {
            // A name no tenant can have is an error; one not seen yet has no decisions.
            t.table().engine().lookup_tenant(tenant)?;
        }
    }
    // The last sequence number shown per process slot, of the segment read last.
    let mut seen = HashMap::<usize, u64>::new();
    let mut first = true;
    // Whether the table said that no segment has the name, since one last had it.
    let mut said_absent = false;
    loop {
        let v = match seg.current() {
            Ok(now) => {
                if let Now::Anew(t) = now {
                    seen.clear();
                    if !json {
                        let (at, pid) = t.engine().seg().created();
                        writeln!(
                            out,
                            "\n{} was made anew (created {} UTC by pid {pid}): its decisions \
                             follow",
                            shown(name),
                            clock(at)
                        )
                        .map_err(io)?;
                        first = true;
                    }
                }
                said_absent = false;
                Some(decisions(now.table())?)
            }
            Err(e) if follow => {
                if !json && !said_absent {
                    writeln!(
                        out,
                        "\nno readable segment has the name {} now ({}): waiting for one",
                        shown(name),
                        shown(&e.to_string())
                    )
                    .map_err(io)?;
                    said_absent = true;
                }
                None
            }
            Err(e) => return Err(e),
        };
        if let Some(mut v) = v {
            v.decisions.retain(|d| {
                let new = seen.get(&d.slot).is_none_or(|&s| d.seq > s);
                new && filter.keeps(d)
            });
            for d in &v.decisions {
                let s = seen.entry(d.slot).or_insert(d.seq);
                *s = (*s).max(d.seq);
            }
            if json {
                for d in &v.decisions {
                    let line = serde_json::to_string(d).map_err(|e| io(e.into()))?;
                    writeln!(out, "{line}").map_err(io)?;
                }
            } else {
                let table = log_table(&v);
                // The header once (again after a new segment); then only new rows.
                let body = if first {
                    &table[..]
                } else {
                    table.split_once('\n').map_or("", |x| x.1)
                };
                out.write_all(body.as_bytes()).map_err(io)?;
                first = false;
            }
        }
        out.flush().map_err(io)?;
        if !follow {
            return Ok(());
        }
        std::thread::sleep(FOLLOW_EVERY);
    }
}

/// `metrics --listen`: serves the Prometheus text of segment `name` at
/// `http://ADDR/metrics` until the process is killed, reading the segment that has the
/// name at each scrape (a 500 naming the error while none has); `listening` is told the
/// address bound (port 0 picks one) before the first request is taken. The segment
/// must exist when it starts.
#[cfg(feature = "cli")]
pub fn serve_metrics(name: &str, addr: &str, listening: impl FnOnce(&str)) -> Result<()> {
    let mut seg = Followed::open(name)?;
    let server = tiny_http::Server::http(addr).map_err(|e| Error::Io {
        name: name.to_owned(),
        op: "listening for /metrics",
        source: std::io::Error::other(format!("{addr}: {e}")),
    })?;
    let bound = server
        .server_addr()
        .to_ip()
        .map_or_else(|| addr.to_owned(), |a| a.to_string());
    listening(&bound);
    for req in server.incoming_requests() {
        // The path alone: a scraper may add a query string, which asks for nothing here.
        let path = req.url().split('?').next().unwrap_or("");
        let read = matches!(
            req.method(),
            tiny_http::Method::Get | tiny_http::Method::Head
        );
        let resp = if path == "/metrics" && !read {
            tiny_http::Response::from_string("method not allowed: GET /metrics\n")
                .with_status_code(405)
                .with_header(
                    "Allow: GET, HEAD"
                        .parse::<tiny_http::Header>()
                        .expect("a valid header"),
                )
        } else if path == "/metrics" {
            match seg.current().and_then(|t| super::report(t.table())) {
                Ok(r) => tiny_http::Response::from_string(super::prometheus(&r)).with_header(
                    "Content-Type: text/plain; version=0.0.4"
                        .parse::<tiny_http::Header>()
                        .expect("a valid header"),
                ),
                Err(e) => tiny_http::Response::from_string(e.to_string()).with_status_code(500),
            }
        } else {
            tiny_http::Response::from_string("not found: try /metrics\n").with_status_code(404)
        };
        // A client that went away before its answer is its own loss, not the server's.
        let _ = req.respond(resp);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_show_zero_as_unbounded() {
        assert_eq!(
            rates_text("acme", 0, 25, &[]),
            "acme: requests unbounded, work units 25/s\n"
        );
    }

    #[test]
    fn a_reap_that_freed_nothing_says_so() {
        assert_eq!(
            reaped_text(&[], &Config::default()),
            "no dead process held anything\n"
        );
    }

    #[test]
    fn a_reap_names_the_pools_it_returned_units_to() {
        let mut cfg = Config::default();
        cfg.guaranteed
            .push(crate::guaranteed::GuaranteedConfig::new("llm", 100));
        let r = |leases, units: Vec<u64>, guaranteed: Vec<u64>, quarantined| Reaped {
            slot: 3,
            pid: 42,
            leases_released: leases,
            held_units_returned: units.clone(),
            units_returned: units,
            guaranteed_units_returned: guaranteed,
            waiters_taken_out: vec![0; 4],
            in_flight: 0,
            quarantined,
        };
        let text = reaped_text(
            &[
                r(1, vec![1, 0, 0, 0], vec![0], 0),
                r(3, vec![2, 0, 0, 1], vec![40], 1),
                // Two units of revoked residents besides 7 of its own.
                Reaped {
                    held_units_returned: vec![0, 0, 9, 0],
                    ..r(11, vec![0, 0, 7, 0], vec![0], 0)
                },
                // Killed while two of its threads waited, holding nothing.
                Reaped {
                    waiters_taken_out: vec![2, 0, 0, 0],
                    ..r(0, vec![0, 0, 0, 0], vec![0], 0)
                },
            ],
            &cfg,
        );
        assert_eq!(
            text,
            "pid 42 (slot 3): 1 lease released, 0 in flight finished; returned 1 unit of \
             \"requests\"\n\
             pid 42 (slot 3): 3 leases released, 0 in flight finished; returned 2 units of \
             \"requests\", 1 unit of \"flights\", 40 units of \"llm\"; 1 lease quarantined, \
             unreadable (`shmtool check` names them)\n\
             pid 42 (slot 3): 11 leases released, 0 in flight finished; returned 7 units of \
             \"residents\"; 2 units of \"residents\" held by revoked residents, not \
             returned (their revokers' now)\n\
             pid 42 (slot 3): 0 leases released, 0 in flight finished; 2 waiters of \
             \"requests\" taken out (it died waiting)\n"
        );
    }

    #[test]
    fn a_clean_replay_counts_its_decisions() {
        assert_eq!(replay_text(7, &[]), "7 decisions replayed, 0 differ\n");
    }
}
