//! A closed-loop HTTP load client for the end-to-end server tests (`e2e/run.py`).
//!
//! Each tenant has N connections (threads); each sends `GET /` with `X-Tenant`, one
//! request at a time on a new connection, until the duration ends. A request's latency
//! runs from its first attempt to its 200, including the waits between attempts (in
//! `fifo` mode from when the connection made it, its wait in the tenant's queue
//! included). A
//! refused (429) attempt is retried per the tenant's mode:
//! - `polite`: waits what the response asks (`Retry-After-Ms`, else `Retry-After`
//!   seconds), as a client that honours `Retry-After` does;
//! - `eager`: retries at once, as wrk or hey do;
//! - `fifo`: the whole tenant pauses for each hint, keeps its requests in one
//!   first-in-first-out queue and adapts how many it has in flight (see `fifo.rs`).
//!
//!   loadgen ADDR SECONDS TENANT:CONNECTIONS:MODE...
//!
//! Built with `cargo build --release --features internals --example loadgen`.
//!
//! Prints one JSON object per tenant on stdout: attempts, 200s, 429s, errors, the
//! latency percentiles in ms (of the requests served, and of those refused and not yet
//! served when the run ended, `unfinished`, at what they had waited by then), and the percentiles of the server queue: per attempt, from
//! its send to when the app says it reached it (`X-Entered-Ns`, CLOCK_MONOTONIC: the
//! servers run on this host), so what a request waited before any middleware ran.
//!
//! Every attempt carries `X-Request-Start: t=SECONDS.MICROS` (the wall clock when it was
//! sent), as a front proxy such as nginx stamps it, so that the middleware can tell the
//! library how long it waited in the server's queue; `LOADGEN_REQUEST_START=0` leaves
//! it out.
//!
//! With `LOADGEN_TRACE` set, also prints every answered attempt on stderr once the run
//! is over, one line each, `TENANT TRY STATUS SENT_US LATENCY_US HINT_MS QUEUE_US
//! ANSWERED_US` (kept in memory meanwhile: a write per attempt, under the lock of
//! stderr that 66 threads share, would be timed as part of the latencies it reports;
//! the attempt's number within its request, 1 for the first; when it was sent,
//! CLOCK_MONOTONIC; the request's latency so far; the 429's hint, else 0; the attempt's
//! wait in the server's queue, else -1; when its answer was read, CLOCK_MONOTONIC, so
//! that a 429's retry was due at ANSWERED_US + HINT_MS × 1000 however late the client's
//! thread woke to send it): what shows *when* the slow requests were (behind a burst of
//! another tenant's retries sent at one instant, say) where the percentiles only say
//! how slow.
//! `e2e/run.py` reads it for its burst guard.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

mod fifo;

/// How a tenant's connections retry a 429.
#[derive(Clone)]
enum Mode {
    /// Each connection waits its own hint.
    Polite,
    /// Retries at once.
    Eager,
    /// Through the tenant's gate (`fifo.rs`).
    Fifo(Arc<fifo::Fifo>),
}

#[derive(Default)]
struct Tally {
    attempts: u64,
    ok: u64,
    refused: u64,
    errors: u64,
    hint_ms_total: u64,
    latencies_us: Vec<u64>,
    /// Requests refused, or (`fifo`) held in the tenant's queue for a ms or more, and not
    /// yet served when the run ended (their latency so far is in `latencies_us` too: a
    /// lower bound).
    unfinished: u64,
    /// Attempts each served request took.
    tries: Vec<u32>,
    /// Each answered attempt's wait in the server's queue, µs.
    queued_us: Vec<u64>,
    /// With `LOADGEN_TRACE`: each answered attempt, printed after the run.
    trace: Vec<TraceLine>,
}

/// One answered attempt, as `LOADGEN_TRACE` prints it.
struct TraceLine {
    tries: u32,
    status: u16,
    sent_us: u64,
    latency_us: u64,
    hint_ms: u64,
    queued_us: Option<u64>,
    /// When the answer was read (CLOCK_MONOTONIC, µs).
    answered_us: u64,
}

/// One attempt's answer: the status, the hint (ms) of a 429, and when the app says the
/// request reached it (CLOCK_MONOTONIC ns).
struct Answer {
    status: u16,
    hint_ms: Option<u64>,
    entered_ns: Option<u64>,
}

fn attempt(addr: &str, tenant: &str, stamp: bool) -> std::io::Result<Answer> {
    // As a front proxy does when it takes a request in (nginx: `proxy_set_header
    // X-Request-Start "t=${msec}"`), in µs: the wall clock, which the app reads too.
    let start = if stamp {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        format!(
            "X-Request-Start: t={}.{:06}\r\n",
            t.as_secs(),
            t.subsec_micros()
        )
    } else {
        String::new()
    };
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    s.set_nodelay(true)?;
    write!(
        s,
        "GET / HTTP/1.1\r\nHost: {addr}\r\nX-Tenant: {tenant}\r\n{start}Connection: close\r\n\r\n"
    )?;
    let mut buf = Vec::with_capacity(1024);
    s.read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf);
    let mut lines = text.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other("no status line"))?;
    let (mut ms, mut secs, mut entered_ns) = (None, None, None);
    for l in lines.take_while(|l| !l.is_empty()) {
        if let Some((k, v)) = l.split_once(':') {
            let v = v.trim().parse::<u64>().ok();
            if k.eq_ignore_ascii_case("retry-after-ms") {
                ms = v;
            } else if k.eq_ignore_ascii_case("retry-after") {
                secs = v;
            } else if k.eq_ignore_ascii_case("x-entered-ns") {
                entered_ns = v;
            }
        }
    }
    Ok(Answer {
        status,
        hint_ms: ms.or(secs.map(|s| s * 1000)),
        entered_ns,
    })
}

fn connection(
    addr: String,
    tenant: String,
    mode: Mode,
    conn: usize,
    stop: Arc<AtomicBool>,
) -> Tally {
    let mut t = Tally::default();
    while !stop.load(Ordering::Relaxed) {
        let start = Instant::now();
        let mut tries = 0;
        loop {
            tries += 1;
            let gated = match &mode {
                Mode::Fifo(g) => !g.enter(start, conn, &stop),
                _ => false,
            };
            if stop.load(Ordering::Relaxed) || gated {
                if let (Mode::Fifo(g), false) = (&mode, gated) {
                    // Let go just as the run ended: not sent, so give the slot back.
                    g.done(None, None);
                }
                // In the tenant's queue, a request waits from when it was made.
                let waited =
                    matches!(mode, Mode::Fifo(_)) && start.elapsed() >= Duration::from_millis(1);
                if tries > 1 || waited {
                    // Refused and not served by the end: what it has waited so far is
                    // a lower bound of its latency, which leaving it out would hide
                    // (the longer its hints, the likelier a request is cut off).
                    t.unfinished += 1;
                    t.latencies_us.push(start.elapsed().as_micros() as u64);
                }
                return t;
            }
            t.attempts += 1;
            // The library's clock: CLOCK_MONOTONIC, the one the apps stamp with.
            let sent = fairshm::clock::now_ns();
            let answer = attempt(&addr, &tenant, stamped());
            let queued = match answer {
                Ok(Answer {
                    entered_ns: Some(e),
                    ..
                }) => Some(e.saturating_sub(sent) / 1000),
                _ => None,
            };
            t.queued_us.extend(queued);
            // The request's latency so far, read once: what the tally and the trace say.
            let latency_us = start.elapsed().as_micros() as u64;
            if let (Ok(a), true) = (&answer, tracing()) {
                let answered_us = fairshm::clock::now_ns() / 1000;
                t.trace.push(TraceLine {
                    tries,
                    status: a.status,
                    sent_us: sent / 1000,
                    latency_us,
                    hint_ms: a.hint_ms.unwrap_or(0),
                    queued_us: queued,
                    answered_us,
                });
            }
            if let Mode::Fifo(g) = &mode {
                let a = answer.as_ref().ok();
                g.done(a.map(|a| a.status), a.and_then(|a| a.hint_ms));
            }
            match answer.map(|a| (a.status, a.hint_ms)) {
                Ok((200, _)) => {
                    t.ok += 1;
                    t.latencies_us.push(latency_us);
                    t.tries.push(tries);
                    break;
                }
                Ok((429, hint)) => {
                    t.refused += 1;
                    let ms = hint.unwrap_or(1000);
                    match mode {
                        Mode::Polite => {
                            t.hint_ms_total += ms;
                            std::thread::sleep(Duration::from_millis(ms));
                        }
                        // The gate holds the whole tenant back (`Fifo::done`).
                        Mode::Fifo(_) => t.hint_ms_total += ms,
                        Mode::Eager => {}
                    }
                }
                _ => {
                    t.errors += 1;
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
    }
    t
}

/// Whether attempts carry `X-Request-Start`, as behind a front proxy: unless
/// `LOADGEN_REQUEST_START=0` (read once).
fn stamped() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("LOADGEN_REQUEST_START").is_none_or(|v| v != "0"))
}

/// Whether `LOADGEN_TRACE` asks for a line per answered attempt (read once).
fn tracing() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("LOADGEN_TRACE").is_some())
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64 / 1000.0
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        eprintln!("usage: loadgen ADDR SECONDS TENANT:CONNECTIONS:polite|eager|fifo...");
        std::process::exit(2);
    }
    let addr = args[0].clone();
    let secs: f64 = args[1].parse().expect("SECONDS is a number");
    let stop = Arc::new(AtomicBool::new(false));
    let mut tenants = Vec::new();
    for spec in &args[2..] {
        let parts: Vec<&str> = spec.split(':').collect();
        let [name, n, mode] = parts[..] else {
            panic!("tenant spec {spec:?} is not NAME:CONNECTIONS:MODE");
        };
        let n: usize = n.parse().expect("CONNECTIONS is a number");
        let how = match mode {
            "polite" => Mode::Polite,
            "eager" => Mode::Eager,
            "fifo" => Mode::Fifo(Arc::default()),
            m => panic!("mode {m:?} is not polite, eager or fifo"),
        };
        let threads: Vec<_> = (0..n)
            .map(|conn| {
                let (a, t, s, m) = (
                    addr.clone(),
                    name.to_owned(),
                    Arc::clone(&stop),
                    how.clone(),
                );
                std::thread::spawn(move || connection(a, t, m, conn, s))
            })
            .collect();
        tenants.push((name.to_owned(), n, mode.to_owned(), threads));
    }
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    for (name, n, mode, threads) in tenants {
        let mut all = Tally::default();
        for th in threads {
            let t = th.join().expect("a connection thread");
            for l in &t.trace {
                eprintln!(
                    "{name} {} {} {} {} {} {} {}",
                    l.tries,
                    l.status,
                    l.sent_us,
                    l.latency_us,
                    l.hint_ms,
                    l.queued_us.map_or(-1, |q| q as i64),
                    l.answered_us
                );
            }
            all.attempts += t.attempts;
            all.ok += t.ok;
            all.refused += t.refused;
            all.errors += t.errors;
            all.hint_ms_total += t.hint_ms_total;
            all.latencies_us.extend(t.latencies_us);
            all.unfinished += t.unfinished;
            all.tries.extend(t.tries);
            all.queued_us.extend(t.queued_us);
        }
        all.queued_us.sort_unstable();
        all.latencies_us.sort_unstable();
        all.tries.sort_unstable();
        let first_try = all.tries.iter().filter(|&&n| n == 1).count();
        let tries_p99 = all
            .tries
            .get((all.tries.len() * 99 / 100).min(all.tries.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0);
        let l = &all.latencies_us;
        println!(
            "{{\"tenant\":\"{name}\",\"connections\":{n},\"mode\":\"{mode}\",\"seconds\":{secs},\
             \"attempts\":{},\"ok\":{},\"refused\":{},\"errors\":{},\"mean_hint_ms\":{:.1},\
             \"p50_ms\":{:.2},\"p90_ms\":{:.2},\"p99_ms\":{:.2},\"max_ms\":{:.2},\
             \"unfinished\":{},\"served_first_try\":{first_try},\"tries_p99\":{tries_p99},\
             \"stamped\":{},\"queue_p50_ms\":{:.2},\"queue_p99_ms\":{:.2}}}",
            all.attempts,
            all.ok,
            all.refused,
            all.errors,
            all.hint_ms_total as f64 / all.refused.max(1) as f64,
            pct(l, 0.50),
            pct(l, 0.90),
            pct(l, 0.99),
            pct(l, 1.0),
            all.unfinished,
            all.queued_us.len(),
            pct(&all.queued_us, 0.50),
            pct(&all.queued_us, 0.99),
        );
    }
}
