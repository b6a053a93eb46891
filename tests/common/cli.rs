//! Helpers of the `shmtool` tests: running the binary, reading its output, a table and
//! a holder to look at.
#![allow(dead_code)] // each shmtool test binary uses a part

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use fairshm::{Config, PoolConfig, Request, Table};
use serde_json::Value;

use super::common::fork_child;

pub fn shmtool(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_shmtool"))
        .args(args)
        .output()
        .expect("run shmtool");
    eprintln!(
        "shmtool {args:?} -> {:?}\n{}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub fn code(o: &Output) -> i32 {
    o.status.code().expect("exited, not killed")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("utf-8")
}

pub fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).expect("JSON on stdout")
}

/// A pool `requests` of 4 permits (floor 1) with a window long enough that a slow
/// machine cannot let a tenant drop out of the active set mid-test.
pub fn config() -> Config {
    Config::with_pools(vec![PoolConfig::new("requests", 4).window_ms(60_000)])
}

/// [`config`]'s pool beside a guaranteed pool `tokens` of 100 (cost; `a` and `b` of
/// weight 1; horizon 100 ms, idle after 150 ms; 4 leases).
pub fn with_tokens() -> Config {
    let mut cfg = super::common::guaranteed(
        "tokens",
        100,
        fairshm::FairnessUnit::Cost,
        &[("a", 1), ("b", 1)],
        (100, 150),
        4,
    );
    cfg.pools = config().pools;
    cfg
}

pub fn inspect_schema() -> jsonschema::Validator {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/doc/inspect.schema.json"
    ))
    .expect("the schema");
    jsonschema::validator_for(&serde_json::from_str(&text).expect("schema JSON")).expect("schema")
}

pub fn assert_schema(v: &Value) {
    let schema = inspect_schema();
    let errors: Vec<String> = schema.iter_errors(v).map(|e| e.to_string()).collect();
    assert!(
        errors.is_empty(),
        "inspect --json against its schema: {errors:?}"
    );
}

/// Forks a [`holder`] of `units` of table `t`'s `requests` for `tenant` and waits for
/// its grant: the holder, in a guard that kills and reaps it when the test ends.
pub fn holding(t: &Table, tenant: &str, units: u32) -> super::common::Children {
    let kids = super::common::Children(vec![holder(t.name(), tenant, units)]);
    super::common::wait_until(
        Some(kids[0]),
        "the holder's grant",
        Duration::from_millis(2),
        || t.snapshot().held("requests", tenant) == units,
    );
    kids
}

/// Forks a worker that holds `units` of `requests` for `tenant` (declaring a hold of
/// 5 ms) until killed.
pub fn holder(name: &str, tenant: &str, units: u32) -> nix::unistd::Pid {
    let (name, tenant) = (name.to_owned(), tenant.to_owned());
    fork_child(move || {
        let t = Table::open(&name).expect("open");
        let req = Request::new("requests", &tenant).units(units).hold_ms(5);
        let lease = t.try_acquire(&req).expect("acquire").expect("granted");
        loop {
            std::thread::sleep(Duration::from_secs(1));
            let _ = &lease;
        }
    })
}

/// Checks one line of the text format: `name{label="value",...} value`.
pub fn valid_sample(line: &str) -> bool {
    let name_end = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(line.len());
    let (name, mut rest) = line.split_at(name_end);
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return false;
    }
    if let Some(r) = rest.strip_prefix('{') {
        let mut r = r;
        loop {
            let k_end = r.find('=').unwrap_or(0);
            let k = &r[..k_end];
            if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return false;
            }
            let Some(v) = r[k_end + 1..].strip_prefix('"') else {
                return false;
            };
            let mut chars = v.char_indices();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' if !matches!(chars.next(), Some((_, '\\' | '"' | 'n'))) => {
                        return false;
                    }
                    '"' => {
                        end = Some(i);
                        break;
                    }
                    '\n' => return false,
                    _ => {}
                }
            }
            let Some(end) = end else { return false };
            r = &v[end + 1..];
            if let Some(x) = r.strip_prefix(',') {
                r = x;
            } else if let Some(x) = r.strip_prefix('}') {
                rest = x;
                break;
            } else {
                return false;
            }
        }
    }
    rest.strip_prefix(' ')
        .is_some_and(|v| v.parse::<f64>().is_ok())
}

pub fn check_prometheus(text: &str) -> prometheus_parse::Scrape {
    let mut typed = std::collections::HashMap::new();
    let mut samples = 0;
    for line in text.lines() {
        if let Some(t) = line.strip_prefix("# TYPE ") {
            let (name, kind) = t.split_once(' ').expect("# TYPE name kind");
            assert!(["counter", "gauge"].contains(&kind), "{line}");
            assert!(
                typed.insert(name.to_owned(), kind.to_owned()).is_none(),
                "one TYPE per family: {line}"
            );
            if kind == "counter" {
                assert!(name.ends_with("_total"), "{line}");
            }
        } else if line.starts_with("# HELP ") {
        } else {
            assert!(valid_sample(line), "not a valid sample line: {line:?}");
            let name = &line[..line.find(['{', ' ']).unwrap()];
            assert!(typed.contains_key(name), "a sample before its TYPE: {line}");
            samples += 1;
        }
    }
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap();
    assert_eq!(
        scrape.samples.len(),
        samples,
        "the parser read every sample"
    );
    scrape
}

pub fn sample(s: &prometheus_parse::Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    let x = s
        .samples
        .iter()
        .find(|x| x.metric == metric && labels.iter().all(|(k, v)| x.labels.get(k) == Some(v)))
        .unwrap_or_else(|| panic!("{metric} {labels:?}"));
    match x.value {
        prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Gauge(v) => v,
        ref v => panic!("{v:?}"),
    }
}

/// Reads `n` lines from `r` on a thread, with a deadline (the thread ends when the
/// reader's process is killed, or at once once it has the lines, so that a test may
/// fork after this without a second thread).
pub fn read_lines(r: impl Read + Send + 'static, n: usize) -> Vec<String> {
    let (h, lines) = reader(r, n);
    let out = lines.take(n);
    if out.len() == n {
        h.join().unwrap();
    }
    out
}

/// A thread sending the first `most` lines of `r` as they come (it ends at the end of
/// `r`, after `most` lines, or once the receiver is gone), and their receiving end.
fn reader(r: impl Read + Send + 'static, most: usize) -> (std::thread::JoinHandle<()>, Lines) {
    let (tx, rx) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        for l in BufReader::new(r).lines().take(most) {
            if tx.send(l.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    (h, Lines(rx))
}

/// The lines of a running command's output, read on a thread of [`Running`] as they
/// come, taken with a deadline.
pub struct Lines(std::sync::mpsc::Receiver<String>);

impl Lines {
    /// The next `n` lines, or fewer if the deadline passed first.
    pub fn take(&self, n: usize) -> Vec<String> {
        if n == 0 {
            return Vec::new();
        }
        let mut seen = 0;
        self.until(|_| {
            seen += 1;
            seen == n
        })
    }

    /// The lines up to the first that `last` holds for, that one included; or those read
    /// when the deadline passed (the caller's assertion names them).
    pub fn until(&self, mut last: impl FnMut(&str) -> bool) -> Vec<String> {
        let deadline = Instant::now() + super::common::DEADLINE;
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.0.recv_timeout(left) {
                Ok(l) => {
                    let done = last(&l);
                    out.push(l);
                    if done {
                        return out;
                    }
                }
                Err(_) => return out,
            }
        }
    }
}

/// A `shmtool` command left running with a thread reading its output, both ended when
/// dropped (the command killed and reaped, then the thread joined): also when a step
/// of the test between its start and its end panics. A test must not fork while one
/// lives (the reader is a second thread).
pub struct Running {
    child: std::process::Child,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Running {
    /// Starts `shmtool ARGS`: the command, and its output's lines as they come.
    pub fn shmtool(args: &[&str]) -> (Running, Lines) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_shmtool"))
            .args(args)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("run shmtool");
        let (h, lines) = reader(child.stdout.take().expect("piped"), usize::MAX);
        let running = Running {
            child,
            reader: Some(h),
        };
        (running, lines)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The command is gone, so its output is at its end: the reader returns.
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}
