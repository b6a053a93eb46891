//! `shmtool`: inspect, watch, reap and clean fairshm segments, export their metrics,
//! and read and replay their decision logs. Parses, calls `fairshm::tool`, prints,
//! exits with one of the codes that `--help` lists.

use std::io::{ErrorKind, Write};
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
    /// Repair a segment in place, while it is in use: reap dead processes, rebuild
    /// every pool's counters from its leases and its waiters from its processes,
    /// quarantine or free what no version writes, refill the rate buckets; print what
    /// changed.
    Repair {
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

/// A failure with the exit code it maps to, or `Gone`: stdout's reader went away
/// (`shmtool log | head`), which is not a failure.
enum Fail {
    Code(Exit, String),
    Gone,
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        match e {
            Error::Io { source, .. } if source.kind() == ErrorKind::BrokenPipe => Fail::Gone,
            e => Fail::Code(Exit::of(&e), e.to_string()),
        }
    }
}
impl From<std::io::Error> for Fail {
    fn from(e: std::io::Error) -> Fail {
        match e.kind() {
            ErrorKind::BrokenPipe => Fail::Gone,
            _ => Fail::Code(Exit::Failed, e.to_string()),
        }
    }
}

/// Writes a command's findings: a reader that went away before the end leaves the
/// command's exit code as its findings make it (`shmtool check NAME | head -1` still
/// exits 1 when an invariant is violated).
fn findings(out: &mut impl Write, text: &str) -> Result<(), Fail> {
    match out.write_all(text.as_bytes()) {
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

/// `v` as pretty JSON, with its line break.
fn pretty<T: serde::Serialize>(v: &T) -> Result<String, Fail> {
    serde_json::to_string_pretty(v)
        .map(|s| s + "\n")
        .map_err(|e| Fail::Code(Exit::Failed, e.to_string()))
}

fn json<T: serde::Serialize>(out: &mut impl Write, v: &T) -> Result<(), Fail> {
    Ok(out.write_all(pretty(v)?.as_bytes())?)
}

fn run(cmd: Cmd) -> Result<Exit, Fail> {
    let mut out = std::io::stdout().lock();
    match cmd {
        Cmd::List { json: true } => json(&mut out, &tool::list()?)?,
        Cmd::List { json: false } => write!(out, "{}", tool::list_text(&tool::list()?))?,
        Cmd::Inspect { name, json: j } => {
            let r = tool::report(&Table::open_observer(&name)?)?;
            if j {
                json(&mut out, &r)?
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
            let every = Duration::from_millis(interval_ms);
            tool::top(&name, n, every, &mut out)?
        }
        Cmd::Reap { name, json: j } => {
            let t = Table::open(&name)?;
            let freed = t.reap_dead()?;
            if j {
                json(&mut out, &freed)?
            } else {
                write!(out, "{}", tool::reaped_text(&freed, t.config()))?
            }
        }
        Cmd::Repair { name, json: j } => {
            // As a tool: a worker's registration would grow per_worker pools.
            let t = Table::open_tool(&name)?;
            let done = t.repair()?;
            if j {
                json(&mut out, &done)?
            } else {
                write!(out, "{}", tool::repaired_text(&done, t.config()))?
            }
        }
        Cmd::Clean {
            name: Some(name),
            force,
            ..
        } => match tool::clean(&name, force)? {
            tool::Clean::Removed => writeln!(out, "removed {name}")?,
            tool::Clean::InUse { pids } => {
                return Err(Fail::Code(
                    Exit::InUse,
                    format!(
                        "{name} is used by live processes {pids:?}: not removed (--force removes it)"
                    ),
                ));
            }
        },
        Cmd::Clean {
            name: None, prefix, ..
        } => write!(out, "{}", tool::clean_stale(prefix.as_deref())?)?,
        Cmd::Metrics { name, listen: None } => {
            let t = Table::open_observer(&name)?;
            write!(out, "{}", tool::prometheus(&tool::report(&t)?))?
        }
        Cmd::Metrics {
            name,
            listen: Some(addr),
        } => tool::serve_metrics(&name, &addr, |bound| {
            // Said only to whoever reads it: the server serves without a reader.
            let mut out = std::io::stdout();
            let _ = writeln!(out, "listening on http://{bound}/metrics").and_then(|()| out.flush());
        })?,
        Cmd::Check { name } => {
            let bad = tool::check(&Table::open_observer(&name)?)?;
            if bad.is_empty() {
                writeln!(out, "{name}: every invariant holds")?;
            } else {
                findings(&mut out, &(bad.join("\n") + "\n"))?;
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
            let filter = tool::LogFilter { tenant, pool };
            tool::write_log(&name, &filter, follow, j, &mut out)?
        }
        Cmd::Rates {
            name,
            tenant,
            requests,
            work,
        } => {
            let setting = requests.is_some() || work.is_some();
            // Setting, as a tool: claiming an unseen tenant's name registers it, and a
            // worker's registration would grow per_worker pools while it runs.
            let t = if setting {
                Table::open_tool(&name)?
            } else {
                Table::open_observer(&name)?
            };
            let (r0, w0) = t.rates(&tenant)?;
            let (r, w) = (requests.unwrap_or(r0), work.unwrap_or(w0));
            if setting {
                t.set_rates(&tenant, r, w)?;
            }
            let unrated: Vec<&str> = t.config().unrated().map(|(_, p)| p.name.as_str()).collect();
            write!(out, "{}", tool::rates_text(&tenant, r, w, &unrated))?
        }
        Cmd::Replay { name, json: j } => {
            let (n, diff) = tool::replay(&Table::open_observer(&name)?)?;
            let text = if j {
                pretty(&serde_json::json!({ "decisions": n, "differences": diff }))?
            } else {
                tool::replay_text(n, &diff)
            };
            findings(&mut out, &text)?;
            if !diff.is_empty() {
                return Ok(Exit::Found);
            }
        }
    }
    Ok(Exit::Ok)
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
        | Cmd::Repair { name, .. }
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
        Err(Fail::Gone) => ExitCode::SUCCESS,
        Err(Fail::Code(code, msg)) => {
            eprintln!("shmtool: {msg}");
            ExitCode::from(code as u8)
        }
    }
}
