//! `shmtool`: inspect, watch, reap and clean fairshm segments, export their metrics,
//! and read and replay their decision logs. Parses, calls `fairshm::tool`, prints,
//! exits with one of the codes that `--help` lists.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use fairshm::tool::{self, Exit};
use fairshm::{Error, Table};

#[derive(Parser)]
#[command(name = "shmtool", version, about = "Inspect and clean fairshm segments", after_help = tool::EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Every file of /dev/shm: fairshm segments (recognised by their header) with size,
    /// layout version, creation time and process counts; other files as unreadable.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Pools, tenants per pool, leases and processes of a segment.
    Inspect {
        name: String,
        /// JSON, as doc/inspect.schema.json describes.
        #[arg(long)]
        json: bool,
    },
    /// A refreshing view sorted by what is held; q or Ctrl-C quits.
    Top {
        name: String,
        /// Show one view and exit.
        #[arg(long)]
        once: bool,
        /// Show this many views and exit.
        #[arg(long)]
        iterations: Option<u64>,
        /// Refresh every this many ms.
        #[arg(long, default_value_t = 1000)]
        interval_ms: u64,
    },
    /// Return the permits of dead processes now, and print what was freed.
    Reap {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Remove a segment that no live process uses (or, with --stale, every such one).
    /// Files that are not readable segments are never touched.
    Clean {
        #[arg(required_unless_present = "stale", conflicts_with = "stale")]
        name: Option<String>,
        #[arg(long)]
        stale: bool,
        /// With --stale: only segments whose names start with this.
        #[arg(long, requires = "stale", value_name = "PREFIX")]
        prefix: Option<String>,
        /// Remove it even though live processes use it.
        #[arg(long, requires = "name")]
        force: bool,
    },
    /// Prometheus text exposition of a segment.
    Metrics {
        name: String,
        /// Serve it at http://ADDR/metrics instead of printing it (prints the address
        /// it listens on first).
        #[arg(long, value_name = "ADDR")]
        listen: Option<String>,
    },
    /// Verify every invariant; exit 1 naming each violation.
    Check { name: String },
    /// The processes' recent decisions, merged by time, with the inputs that explain
    /// them.
    Log {
        name: String,
        #[arg(long)]
        tenant: Option<String>,
        #[arg(long)]
        pool: Option<String>,
        /// Keep printing new decisions as they are logged.
        #[arg(long)]
        follow: bool,
        #[arg(long)]
        json: bool,
    },
    /// Show a tenant's rates, or set them on the live segment (0: unbounded); every
    /// process's next acquire applies them.
    Rates {
        name: String,
        tenant: String,
        /// Requests per second.
        #[arg(long)]
        requests: Option<u32>,
        /// Work units per second.
        #[arg(long)]
        work: Option<u32>,
    },
    /// Re-decide every logged decision from its inputs with this library's rule;
    /// exit 1 if any comes out differently.
    Replay {
        name: String,
        #[arg(long)]
        json: bool,
    },
}

/// A failure with the exit code it maps to.
struct Fail(Exit, String);

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        Fail(Exit::of(&e), e.to_string())
    }
}
impl From<std::io::Error> for Fail {
    fn from(e: std::io::Error) -> Fail {
        Fail(Exit::Failed, e.to_string())
    }
}

fn json<T: serde::Serialize>(v: &T) -> Result<(), Fail> {
    let s = serde_json::to_string_pretty(v).map_err(|e| Fail(Exit::Failed, e.to_string()))?;
    println!("{s}");
    Ok(())
}

fn run(cmd: Cmd) -> Result<Exit, Fail> {
    let mut out = std::io::stdout().lock();
    match cmd {
        Cmd::List { json: true } => json(&tool::list()?)?,
        Cmd::List { json: false } => {
            for l in tool::list()? {
                match (&l.header, &l.unreadable) {
                    (Some(h), None) => writeln!(
                        out,
                        "{}  {} bytes  v{}  created {} UTC by pid {}  processes: {} live, {} dying, {} dead",
                        l.name,
                        l.size,
                        h.layout_version,
                        tool::clock(h.created_unix_ms),
                        h.creator_pid,
                        l.live,
                        l.dying,
                        l.dead
                    )?,
                    (_, why) => writeln!(
                        out,
                        "{}  {} bytes  unreadable: {}",
                        l.name,
                        l.size,
                        why.as_deref().unwrap_or("?")
                    )?,
                }
            }
        }
        Cmd::Inspect { name, json: j } => {
            let r = tool::report(&Table::open_observer(&name)?)?;
            if j {
                json(&r)?
            } else {
                write!(out, "{}", tool::report_tables(&r))?
            }
        }
        Cmd::Top {
            name,
            once,
            iterations,
            interval_ms,
        } => {
            let n = if once { Some(1) } else { iterations };
            tool::top(
                &Table::open_observer(&name)?,
                n,
                Duration::from_millis(interval_ms),
                &mut out,
            )?
        }
        Cmd::Reap { name, json: j } => {
            let freed = Table::open(&name)?.reap_dead()?;
            if j {
                json(&freed)?
            } else if freed.is_empty() {
                writeln!(out, "no dead process held anything")?
            } else {
                for r in &freed {
                    writeln!(
                        out,
                        "pid {} (slot {}): {} leases released, {} in flight finished, units returned per pool {:?}",
                        r.pid, r.slot, r.leases_released, r.in_flight, r.units_returned
                    )?
                }
            }
        }
        Cmd::Clean {
            name: Some(name),
            force,
            ..
        } => match tool::clean(&name, force)? {
            tool::Clean::Removed => writeln!(out, "removed {name}")?,
            tool::Clean::InUse { pids } => {
                return Err(Fail(
                    Exit::InUse,
                    format!(
                        "{name} is used by live processes {pids:?}: not removed (--force removes it)"
                    ),
                ));
            }
        },
        Cmd::Clean {
            name: None, prefix, ..
        } => {
            for l in tool::list()? {
                if l.unreadable.is_some()
                    || prefix
                        .as_ref()
                        .is_some_and(|p| !l.name.starts_with(p.as_str()))
                {
                    continue;
                }
                match tool::clean(&l.name, false) {
                    Ok(tool::Clean::Removed) => writeln!(out, "removed {}", l.name)?,
                    Ok(tool::Clean::InUse { pids }) => {
                        writeln!(out, "kept {}: used by {pids:?}", l.name)?
                    }
                    Err(e) => writeln!(out, "kept {}: {e}", l.name)?,
                }
            }
        }
        Cmd::Metrics { name, listen: None } => {
            let t = Table::open_observer(&name)?;
            write!(out, "{}", tool::prometheus(&tool::report(&t)?))?
        }
        Cmd::Metrics {
            name,
            listen: Some(addr),
        } => serve(&name, &addr)?,
        Cmd::Check { name } => {
            let bad = tool::check(&Table::open_observer(&name)?)?;
            if bad.is_empty() {
                writeln!(out, "{name}: every invariant holds")?;
            } else {
                for b in &bad {
                    writeln!(out, "{b}")?;
                }
                return Ok(Exit::Found);
            }
        }
        Cmd::Log {
            name,
            tenant,
            pool,
            follow,
            json: j,
        } => {
            let t = Table::open_observer(&name)?;
            let keep = |d: &tool::Decision| {
                tenant.as_ref().is_none_or(|x| *x == d.tenant)
                    && pool.as_ref().is_none_or(|x| *x == d.pool)
            };
            let mut seen = std::collections::HashMap::<usize, u64>::new();
            let mut first = true;
            loop {
                let mut v = tool::decisions(&t)?;
                v.decisions.retain(|d| {
                    let new = seen.get(&d.slot).is_none_or(|&s| d.seq > s);
                    new && keep(d)
                });
                for d in &v.decisions {
                    let s = seen.entry(d.slot).or_insert(d.seq);
                    *s = (*s).max(d.seq);
                }
                if j {
                    for d in &v.decisions {
                        writeln!(
                            out,
                            "{}",
                            serde_json::to_string(d)
                                .map_err(|e| Fail(Exit::Failed, e.to_string()))?
                        )?;
                    }
                } else {
                    let table = tool::log_table(&v);
                    // The header once; then only new rows.
                    let body = if first {
                        &table[..]
                    } else {
                        table.split_once('\n').map_or("", |x| x.1)
                    };
                    write!(out, "{body}")?;
                }
                out.flush()?;
                first = false;
                if !follow {
                    break;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        Cmd::Rates {
            name,
            tenant,
            requests,
            work,
        } => {
            let (r, w) = if requests.is_none() && work.is_none() {
                Table::open_observer(&name)?.rates(&tenant)?
            } else {
                let t = Table::open(&name)?;
                let (r0, w0) = t.rates(&tenant)?;
                let (r, w) = (requests.unwrap_or(r0), work.unwrap_or(w0));
                t.set_rates(&tenant, r, w)?;
                (r, w)
            };
            let show = |v: u32| {
                if v == 0 {
                    "unbounded".to_owned()
                } else {
                    format!("{v}/s")
                }
            };
            writeln!(
                out,
                "{tenant}: requests {}, work units {}",
                show(r),
                show(w)
            )?;
        }
        Cmd::Replay { name, json: j } => {
            let t = Table::open_observer(&name)?;
            let (n, diff) = tool::replay(&t)?;
            if j {
                json(&serde_json::json!({ "decisions": n, "differences": diff }))?;
            } else {
                for d in &diff {
                    writeln!(
                        out,
                        "slot {} decision {}: logged {}, the rule now gives {}",
                        d.slot,
                        d.seq,
                        d.logged,
                        d.replayed
                            .unwrap_or("nothing (a policy this version does not know)")
                    )?;
                }
                writeln!(out, "{n} decisions replayed, {} differ", diff.len())?;
            }
            if !diff.is_empty() {
                return Ok(Exit::Found);
            }
        }
    }
    Ok(Exit::Ok)
}

/// Serves `/metrics` of segment `name` at `addr` until killed.
fn serve(name: &str, addr: &str) -> Result<(), Fail> {
    let t = Table::open_observer(name)?;
    let server = tiny_http::Server::http(addr)
        .map_err(|e| Fail(Exit::Failed, format!("listening on {addr}: {e}")))?;
    let bound = server
        .server_addr()
        .to_ip()
        .map_or_else(|| addr.to_owned(), |a| a.to_string());
    println!("listening on http://{bound}/metrics");
    std::io::stdout().flush()?;
    for req in server.incoming_requests() {
        let resp = if req.url() == "/metrics" {
            match tool::report(&t) {
                Ok(r) => tiny_http::Response::from_string(tool::prometheus(&r)).with_header(
                    "Content-Type: text/plain; version=0.0.4"
                        .parse::<tiny_http::Header>()
                        .expect("a valid header"),
                ),
                Err(e) => tiny_http::Response::from_string(e.to_string()).with_status_code(500),
            }
        } else {
            tiny_http::Response::from_string("not found: try /metrics\n").with_status_code(404)
        };
        let _ = req.respond(resp);
    }
    Ok(())
}

/// A segment named by its path under /dev/shm is named by its file name.
fn name_of(arg: String) -> String {
    match arg.strip_prefix("/dev/shm/") {
        Some(n) if !n.is_empty() => n.to_owned(),
        _ => arg,
    }
}

fn main() -> ExitCode {
    let mut cli = Cli::parse();
    match &mut cli.cmd {
        Cmd::Inspect { name, .. }
        | Cmd::Top { name, .. }
        | Cmd::Reap { name, .. }
        | Cmd::Metrics { name, .. }
        | Cmd::Check { name }
        | Cmd::Log { name, .. }
        | Cmd::Rates { name, .. }
        | Cmd::Replay { name, .. } => *name = name_of(std::mem::take(name)),
        Cmd::Clean {
            name: Some(name), ..
        } => *name = name_of(std::mem::take(name)),
        Cmd::List { .. } | Cmd::Clean { name: None, .. } => {}
    }
    match run(cli.cmd) {
        Ok(code) => ExitCode::from(code as u8),
        // A closed pipe (`shmtool log | head`) is not a failure.
        Err(Fail(_, msg)) if msg.contains("Broken pipe") => ExitCode::SUCCESS,
        Err(Fail(code, msg)) => {
            eprintln!("shmtool: {msg}");
            ExitCode::from(code as u8)
        }
    }
}
