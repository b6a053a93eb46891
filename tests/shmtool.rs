//! `shmtool`, run as a binary against segments built here: each subcommand, its
//! outputs parsed (JSON against `doc/inspect.schema.json`, metrics as Prometheus text)
//! and its exit codes. Workers are forked children (the harness runs single-threaded,
//! see `scripts/test-all`), so the test process itself never registers.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{Children, Seg, fork_child, wait, wait_until};
use fairshm::{Config, PoolConfig, Reason, Request, Table};
use serde_json::Value;

fn shmtool(args: &[&str]) -> Output {
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

fn code(o: &Output) -> i32 {
    o.status.code().expect("exited, not killed")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("utf-8")
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).expect("JSON on stdout")
}

/// A pool `requests` of 4 permits (floor 1) with a window long enough that a slow
/// machine cannot let a tenant drop out of the active set mid-test.
fn config() -> Config {
    Config::with_pools(vec![PoolConfig::new("requests", 4).window_ms(60_000)])
}

fn inspect_schema() -> jsonschema::Validator {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/doc/inspect.schema.json"
    ))
    .expect("the schema");
    jsonschema::validator_for(&serde_json::from_str(&text).expect("schema JSON")).expect("schema")
}

fn assert_schema(v: &Value) {
    let schema = inspect_schema();
    let errors: Vec<String> = schema.iter_errors(v).map(|e| e.to_string()).collect();
    assert!(
        errors.is_empty(),
        "inspect --json against its schema: {errors:?}"
    );
}

/// Forks a worker that holds `units` of `requests` for `tenant` (declaring a hold of
/// 5 ms) until killed.
fn holder(name: &str, tenant: &str, units: u32) -> nix::unistd::Pid {
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

#[test]
fn a_killed_holder_is_shown_dead_reaped_and_then_checks_clean() {
    let seg = Seg::new("tool-kill");
    let t = seg.create(&config());
    let mut kids = Children(vec![holder(&seg.name, "acme", 2)]);
    let pid = kids.0[0];
    wait_until(
        Some(pid),
        "the holder's grant",
        Duration::from_millis(2),
        || t.snapshot().held("requests", "acme") == 2,
    );
    // Alive: inspect shows it alive, check passes, reap frees nothing, clean refuses.
    let v = json(&shmtool(&["inspect", &seg.name, "--json"]));
    assert_schema(&v);
    assert_eq!(v["processes"][0]["liveness"], "alive");
    assert_eq!(v["processes"][0]["pid"], pid.as_raw());
    assert_eq!(code(&shmtool(&["check", &seg.name])), 0);
    let o = shmtool(&["clean", &seg.name]);
    assert_eq!(code(&o), 5, "a live segment is refused");
    assert!(String::from_utf8_lossy(&o.stderr).contains(&pid.as_raw().to_string()));
    assert!(std::path::Path::new(&format!("/dev/shm/{}", seg.name)).exists());

    std::thread::sleep(Duration::from_millis(20)); // past its declared 5 ms hold
    assert_eq!(kids.kill_all(), vec![128 + 9]);
    let v = json(&shmtool(&["inspect", &seg.name, "--json"]));
    assert_schema(&v);
    let procs = v["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 1);
    assert_eq!(procs[0]["liveness"], "dead");
    assert_eq!(procs[0]["units_held"], 2);
    let leases = v["leases"].as_array().unwrap();
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0]["pid"], pid.as_raw());
    assert_eq!(leases[0]["tenant"], "acme");
    assert_eq!(leases[0]["units"], 2);
    assert!(
        leases[0]["overrun_ms"].as_u64().unwrap() >= 10,
        "{leases:?}"
    );
    let human = stdout(&shmtool(&["inspect", &seg.name]));
    assert!(human.contains("dead") && human.contains("acme"), "{human}");

    let l = json(&shmtool(&["list", "--json"]));
    let me = l
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == seg.name.as_str())
        .expect("listed");
    assert_eq!(
        (me["live"].as_u64(), me["dead"].as_u64()),
        (Some(0), Some(1))
    );
    assert_eq!(me["header"]["layout_version"], 7);
    assert_eq!(me["header"]["creator_pid"], std::process::id());

    let c = shmtool(&["check", &seg.name]);
    assert_eq!(
        code(&c),
        1,
        "a dead process's lease is a violation until reaped"
    );
    assert!(stdout(&c).contains(&format!("whose process (pid {pid}) is dead")));

    let r = shmtool(&["reap", &seg.name]);
    assert_eq!(code(&r), 0);
    assert!(
        stdout(&r).contains(&format!("pid {pid}")),
        "reap names what it freed"
    );
    assert!(stdout(&r).contains("1 leases released"));
    let v = json(&shmtool(&["inspect", &seg.name, "--json"]));
    assert_schema(&v);
    assert_eq!(v["leases"].as_array().unwrap().len(), 0);
    assert_eq!(v["pools"][0]["in_use"], 0);
    assert_eq!(code(&shmtool(&["check", &seg.name])), 0);
    let again = shmtool(&["reap", &seg.name]);
    assert!(stdout(&again).contains("no dead process"));
    drop(t);
    // Nobody uses it now: clean removes it.
    assert_eq!(code(&shmtool(&["clean", &seg.name])), 0);
    assert!(!std::path::Path::new(&format!("/dev/shm/{}", seg.name)).exists());
}

#[test]
fn a_corrupt_file_is_listed_unreadable_and_never_cleaned() {
    let seg = Seg::new("tool-corrupt");
    let path = format!("/dev/shm/{}", seg.name);
    let junk: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    std::fs::write(&path, &junk).unwrap();
    // And one with a fairshm header whose size lies.
    let half = Seg::new("tool-half");
    drop(half.create(&config()));
    let half_path = format!("/dev/shm/{}", half.name);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&half_path)
        .unwrap();
    f.set_len(8192).unwrap();
    drop(f);

    let l = json(&shmtool(&["list", "--json"]));
    for (name, why) in [
        (&seg.name, "no fairshm header"),
        (&half.name, "where its header says"),
    ] {
        let e = l
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name.as_str())
            .expect("listed");
        assert!(e["unreadable"].as_str().unwrap().contains(why), "{e}");
    }
    let human = stdout(&shmtool(&["list"]));
    assert!(
        human.contains(&format!("{}  4096 bytes  unreadable", seg.name)),
        "{human}"
    );
    for name in [&seg.name, &half.name] {
        assert_eq!(code(&shmtool(&["clean", name])), 4);
        assert_eq!(code(&shmtool(&["clean", name, "--force"])), 4);
        assert_eq!(code(&shmtool(&["inspect", name])), 4);
    }
    // --stale removes an unused segment and leaves the unreadable files alone.
    let idle = Seg::new("tool-idle");
    drop(idle.create(&config()));
    // (--prefix: a test must not remove other idle segments of this machine.)
    let o = shmtool(&["clean", "--stale", "--prefix", "fairshm-test-tool-"]);
    assert_eq!(code(&o), 0);
    assert!(stdout(&o).contains(&format!("removed {}", idle.name)));
    assert!(!std::path::Path::new(&format!("/dev/shm/{}", idle.name)).exists());
    assert_eq!(
        std::fs::read(&path).unwrap(),
        junk,
        "the corrupt file is untouched"
    );
    assert_eq!(std::fs::metadata(&half_path).unwrap().len(), 8192);
}

#[test]
fn a_segment_mapped_by_a_live_process_is_refused_unless_forced() {
    let seg = Seg::new("tool-mapped");
    // This process maps it without registering: still a user.
    let t = seg.create(&config());
    let o = shmtool(&["clean", &seg.name]);
    assert_eq!(code(&o), 5);
    assert!(String::from_utf8_lossy(&o.stderr).contains(&std::process::id().to_string()));
    let o = shmtool(&["clean", "--stale", "--prefix", &seg.name]);
    assert!(stdout(&o).contains(&format!("kept {}", seg.name)));
    assert_eq!(code(&shmtool(&["clean", &seg.name, "--force"])), 0);
    assert!(!std::path::Path::new(&format!("/dev/shm/{}", seg.name)).exists());
    drop(t);
}

#[test]
fn exit_codes_are_the_documented_ones() {
    let help = stdout(&shmtool(&["--help"]));
    for line in [
        "0  done",
        "1  found",
        "2  usage",
        "3  no segment",
        "4  not a readable",
        "5  refused",
        "6  permission",
        "7  any other",
    ] {
        assert!(help.contains(line), "--help lists {line:?}");
    }
    assert_eq!(
        code(&shmtool(&["inspect", "fairshm-test-no-such-segment"])),
        3
    );
    assert_eq!(code(&shmtool(&["inspect"])), 2);
    assert_eq!(code(&shmtool(&["frobnicate"])), 2);
    assert_eq!(code(&shmtool(&["inspect", "a/b"])), 2, "an invalid name");
    assert_eq!(
        code(&shmtool(&["clean"])),
        2,
        "clean needs a name or --stale"
    );
    // 6 (permission denied): see `reading_commands_change_no_byte_and_read_another_users_segment`.
}

/// Holds `acme`'s lease count at 3 in a child, then lets `globex` in from another,
/// then refuses `acme` over its share: the script of the log test.
#[test]
fn the_log_shows_each_decision_with_its_inputs_and_replay_agrees() {
    let seg = Seg::new("tool-log");
    let t = seg.create(&config());
    let name = seg.name.clone();
    let a = fork_child(move || {
        let t = Table::open(&name).expect("open");
        let req = Request::new("requests", "acme");
        let held: Vec<_> = (0..3)
            .map(|_| t.try_acquire(&req).expect("acquire").expect("granted"))
            .collect();
        // Wait for globex's refusal and exit (its lease released), then ask again.
        let deadline = Instant::now() + common::DEADLINE;
        loop {
            let s = t.snapshot();
            let g = s
                .pool("requests")
                .unwrap()
                .tenants
                .iter()
                .find(|x| x.name == "globex")
                .cloned();
            if g.is_some_and(|g| g.held == 0 && !g.refusals.is_empty()) {
                break;
            }
            if Instant::now() > deadline {
                return 3;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_millis(3));
        let refused = t.try_acquire(&req).expect("acquire").expect_err("refused");
        drop(held);
        if refused.reason == Reason::OverShare {
            0
        } else {
            4
        }
    });
    let mut kids = Children(vec![a]);
    wait_until(
        Some(a),
        "acme's three grants",
        Duration::from_millis(2),
        || t.snapshot().held("requests", "acme") == 3,
    );
    // Decisions are logged in ms: 3 ms apart, no two processes' share one.
    std::thread::sleep(Duration::from_millis(3));
    let name = seg.name.clone();
    let b = fork_child(move || {
        let t = Table::open(&name).expect("open");
        let req = Request::new("requests", "globex");
        let lease = t.try_acquire(&req).expect("acquire").expect("granted");
        let refused = t.try_acquire(&req).expect("acquire").expect_err("refused");
        drop(lease);
        if refused.reason == Reason::PoolFull {
            0
        } else {
            5
        }
    });
    assert_eq!(wait(b), 0, "globex: a grant, then pool_full");
    assert_eq!(wait(a), 0, "acme: three grants, then over_share");
    kids.0.clear();

    let o = shmtool(&["log", &seg.name, "--json"]);
    assert_eq!(code(&o), 0);
    let got: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    // (tenant, outcome, in_use, held, active weight, pid) of each decision, in order.
    let want = [
        ("acme", "granted", 0, 0, 1, a),
        ("acme", "granted", 1, 1, 1, a),
        ("acme", "granted", 2, 2, 1, a),
        ("globex", "granted", 3, 0, 2, b),
        ("globex", "pool_full", 4, 1, 2, b),
        ("acme", "over_share", 3, 3, 2, a),
    ];
    assert_eq!(got.len(), want.len(), "{got:#?}");
    for (g, (tenant, outcome, in_use, held, active, pid)) in got.iter().zip(want) {
        assert_eq!(g["tenant"], tenant, "{g}");
        assert_eq!(g["outcome"], outcome, "{g}");
        assert_eq!(g["in_use"], in_use, "{g}");
        assert_eq!(g["held"], held, "{g}");
        assert_eq!(g["active_weight"], active, "{g}");
        assert_eq!(g["pid"], pid.as_raw(), "{g}");
        assert_eq!(
            (g["capacity"].as_u64(), g["floor"].as_u64()),
            (Some(4), Some(1))
        );
        assert_eq!(
            g["replayed"], outcome,
            "the rule re-decides it the same: {g}"
        );
        let refused = outcome != "granted";
        assert_eq!(g["retry_after_ms"].as_u64().unwrap() > 0, refused, "{g}");
    }
    // Wall-clock times, within this test's run.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    for g in &got {
        let at = g["unix_ms"].as_u64().unwrap();
        assert!(at <= now + 5 && at + 60_000 > now, "{g}");
    }
    let all = stdout(&shmtool(&["log", &seg.name]));
    assert_eq!(all.lines().count(), 7, "a header and six decisions: {all}");
    assert!(all.starts_with("time(utc)"), "{all}");
    let human = stdout(&shmtool(&["log", &seg.name, "--tenant", "globex"]));
    let lines: Vec<&str> = human.lines().collect();
    assert_eq!(
        lines.len(),
        3,
        "a header and globex's two decisions: {human}"
    );
    assert!(
        lines[2].contains("pool_full") && lines[2].contains("4/4"),
        "{human}"
    );
    let over = stdout(&shmtool(&["log", &seg.name, "--tenant", "acme"]));
    let last = over.lines().last().unwrap();
    // acme's last: over its share of 2.00, 3 of 4 in use, floor 1, weight 1 of 2.
    for part in ["over_share", "3/4", "2.00", "1/2"] {
        assert!(last.contains(part), "{part:?} in {last}");
    }

    let r = shmtool(&["replay", &seg.name]);
    assert_eq!(code(&r), 0);
    assert!(stdout(&r).contains("6 decisions replayed, 0 differ"));
    let r = json(&shmtool(&["replay", &seg.name, "--json"]));
    assert_eq!(r["decisions"], 6);
    assert_eq!(r["differences"].as_array().unwrap().len(), 0);
    drop(t);
}

#[test]
fn follow_prints_decisions_as_they_come() {
    let seg = Seg::new("tool-follow");
    let t = seg.create(&config());
    let mut child = Command::new(env!("CARGO_BIN_EXE_shmtool"))
        .args(["log", &seg.name, "--follow", "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let name = seg.name.clone();
    let w = fork_child(move || {
        let t = Table::open(&name).expect("open");
        for _ in 0..3 {
            drop(
                t.try_acquire(&Request::new("requests", "acme"))
                    .expect("acquire"),
            );
        }
        0
    });
    assert_eq!(wait(w), 0);
    let lines = read_lines(out, 3);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(lines.len(), 3, "{lines:?}");
    for l in &lines {
        let v: Value = serde_json::from_str(l).unwrap();
        assert_eq!(v["outcome"], "granted");
    }
    drop(t);
}

/// Reads `n` lines from `r` on a thread, with a deadline (the thread ends when the
/// reader's process is killed).
fn read_lines(r: impl Read + Send + 'static, n: usize) -> Vec<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        for l in BufReader::new(r).lines().take(n) {
            if tx.send(l.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + common::DEADLINE;
    let mut out = Vec::new();
    while out.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => out.push(l),
            Err(_) => break,
        }
    }
    if out.len() == n {
        h.join().unwrap();
    }
    out
}

/// Checks one line of the text format: `name{label="value",...} value`.
fn valid_sample(line: &str) -> bool {
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

fn check_prometheus(text: &str) -> prometheus_parse::Scrape {
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

fn sample(s: &prometheus_parse::Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
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

#[test]
fn metrics_are_prometheus_text_printed_and_served() {
    let seg = Seg::new("tool-metrics");
    let t = seg.create(&config());
    let mut kids = Children(vec![holder(&seg.name, "acme \"quoted\"", 3)]);
    wait_until(
        Some(kids.0[0]),
        "the grant",
        Duration::from_millis(2),
        || t.snapshot().held("requests", "acme \"quoted\"") == 3,
    );
    let name = seg.name.clone();
    let w = fork_child(move || {
        let t = Table::open(&name).expect("open");
        let r = t
            .try_acquire(&Request::new("requests", "globex").units(2))
            .expect("acquire");
        if r.is_err() { 0 } else { 1 }
    });
    assert_eq!(wait(w), 0, "globex is refused: 3 of 4 in use");
    let o = shmtool(&["metrics", &seg.name]);
    assert_eq!(code(&o), 0);
    let s = check_prometheus(&stdout(&o));
    let pool = [("pool", "requests"), ("segment", seg.name.as_str())];
    assert_eq!(sample(&s, "fairshm_pool_capacity", &pool), 4.0);
    assert_eq!(sample(&s, "fairshm_pool_in_use", &pool), 3.0);
    // (prometheus-parse does not unescape label values: the escaped line is checked
    // as text, and by `valid_sample`.)
    assert!(
        stdout(&o).contains(r#",tenant="acme \"quoted\""} 3"#),
        "escaped label"
    );
    assert_eq!(
        sample(
            &s,
            "fairshm_tenant_refusals_total",
            &[("tenant", "globex"), ("reason", "pool_full")]
        ),
        1.0
    );
    assert_eq!(
        sample(&s, "fairshm_processes", &[("liveness", "alive")]),
        1.0
    );

    let mut server = Command::new(env!("CARGO_BIN_EXE_shmtool"))
        .args(["metrics", &seg.name, "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let first = read_lines(server.stdout.take().unwrap(), 1);
    let addr = first
        .first()
        .and_then(|l| l.strip_prefix("listening on http://"))
        .and_then(|l| l.strip_suffix("/metrics"))
        .map(str::to_owned);
    let scrape = addr.as_ref().map(|a| get(a, "/metrics"));
    let missing = addr.as_ref().map(|a| get(a, "/nothing"));
    let _ = server.kill();
    let _ = server.wait();
    let (status, body) = scrape.expect("the server printed its address");
    assert!(status.contains("200"), "{status}");
    let s = check_prometheus(&body);
    assert_eq!(sample(&s, "fairshm_pool_in_use", &pool), 3.0);
    assert!(missing.unwrap().0.contains("404"));
    kids.kill_all();
    drop(t);
}

/// An HTTP/1.0 GET: (status line, body).
fn get(addr: &str, path: &str) -> (String, String) {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(common::DEADLINE)).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").expect("a response");
    (
        head.lines().next().unwrap_or("").to_owned(),
        body.to_owned(),
    )
}

#[test]
fn top_shows_what_is_held_and_quits_after_its_iterations() {
    let seg = Seg::new("tool-top");
    let t = seg.create(&config());
    let mut kids = Children(vec![
        holder(&seg.name, "acme", 1),
        holder(&seg.name, "globex", 2),
    ]);
    wait_until(None, "the grants", Duration::from_millis(2), || {
        let s = t.snapshot();
        s.held("requests", "acme") == 1 && s.held("requests", "globex") == 2
    });
    let o = shmtool(&["top", &seg.name, "--once"]);
    assert_eq!(code(&o), 0);
    let text = stdout(&o);
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("requests")).collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert!(
        rows[0].contains("globex") && rows[1].contains("acme"),
        "most held first: {text}"
    );
    assert!(text.contains("2 alive"), "{text}");
    let o = shmtool(&["top", &seg.name, "--iterations", "3", "--interval-ms", "10"]);
    assert_eq!(code(&o), 0);
    assert_eq!(stdout(&o).matches("(q or Ctrl-C quits)").count(), 3);
    kids.kill_all();
    drop(t);
}

/// A pseudo-terminal: (master, slave) descriptors.
fn pty() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
    use std::os::fd::FromRawFd;
    // SAFETY: plain libc calls on descriptors this function owns; `ptsname` returns a
    // pointer to a static buffer, copied out at once (the test harness is
    // single-threaded).
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(m >= 0, "posix_openpt");
        assert_eq!(libc::grantpt(m), 0);
        assert_eq!(libc::unlockpt(m), 0);
        let name = std::ffi::CStr::from_ptr(libc::ptsname(m)).to_owned();
        let s = libc::open(name.as_ptr(), libc::O_RDWR | libc::O_NOCTTY);
        assert!(s >= 0, "open the pty's slave");
        (
            std::os::fd::OwnedFd::from_raw_fd(m),
            std::os::fd::OwnedFd::from_raw_fd(s),
        )
    }
}

#[test]
fn top_on_a_terminal_quits_on_q_and_on_ctrl_c() {
    let seg = Seg::new("tool-tty");
    let t = seg.create(&config());
    for key in [b'q', 3u8] {
        let (master, slave) = pty();
        let mut child = Command::new(env!("CARGO_BIN_EXE_shmtool"))
            .args(["top", &seg.name, "--interval-ms", "50"])
            .stdin(Stdio::from(slave))
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            child.try_wait().unwrap().is_none(),
            "top runs until told to quit"
        );
        let mut m = std::fs::File::from(master);
        m.write_all(&[key]).unwrap();
        let deadline = Instant::now() + common::DEADLINE;
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break Some(s);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let status = status.unwrap_or_else(|| panic!("top did not quit on key {key}"));
        assert_eq!(status.code(), Some(0), "key {key}");
    }
    drop(t);
}

#[test]
fn reading_commands_change_no_byte_and_read_another_users_segment() {
    let seg = Seg::new("tool-ro");
    let t = seg.create(&config());
    let mut kids = Children(vec![holder(&seg.name, "acme", 1)]);
    wait_until(
        Some(kids.0[0]),
        "the grant",
        Duration::from_millis(2),
        || t.snapshot().held("requests", "acme") == 1,
    );
    kids.kill_all(); // no live process is left to write anything
    let path = format!("/dev/shm/{}", seg.name);
    // Owned by another user, readable by its owner only: root reads it anyway.
    nix::unistd::chown(
        path.as_str(),
        Some(nix::unistd::Uid::from_raw(65534)),
        Some(nix::unistd::Gid::from_raw(65534)),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let before = std::fs::read(&path).unwrap();
    let name = seg.name.as_str();
    for args in [
        &["list"][..],
        &["list", "--json"],
        &["inspect", name],
        &["inspect", name, "--json"],
        &["top", name, "--once"],
        &["metrics", name],
        &["log", name],
        &["log", name, "--json"],
        &["replay", name],
    ] {
        assert_eq!(code(&shmtool(args)), 0, "{args:?}");
    }
    assert_eq!(
        code(&shmtool(&["check", name])),
        1,
        "the dead holder's lease"
    );
    assert!(std::fs::read(&path).unwrap() == before, "no byte changed");
    let v = json(&shmtool(&["inspect", name, "--json"]));
    assert_eq!(
        v["processes"].as_array().unwrap().len(),
        1,
        "nobody registered"
    );
    // Writing needs the owner's rights: reap is refused with exit 6.
    let o = shmtool(&["reap", name]);
    assert_eq!(code(&o), 6, "permission denied");
    assert!(String::from_utf8_lossy(&o.stderr).contains("65534"));
    drop(t);
}

#[test]
fn rates_are_shown_and_set_on_a_live_segment_and_paths_name_segments() {
    let seg = Seg::new("tool-rates");
    let t = seg.create(&config());
    let path = format!("/dev/shm/{}", seg.name);
    let o = shmtool(&["rates", &path, "acme"]);
    assert_eq!(code(&o), 0);
    assert_eq!(
        stdout(&o),
        "acme: requests unbounded, work units unbounded\n"
    );
    let o = shmtool(&["rates", &seg.name, "acme", "--requests", "5"]);
    assert_eq!(stdout(&o), "acme: requests 5/s, work units unbounded\n");
    let o = shmtool(&["rates", &seg.name, "acme", "--work", "100"]);
    assert_eq!(stdout(&o), "acme: requests 5/s, work units 100/s\n");
    assert_eq!(t.rates("acme").unwrap(), (5, 100), "set in the segment");
    let v = json(&shmtool(&["inspect", &path, "--json"]));
    assert_schema(&v);
    let acme = v["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "acme")
        .unwrap();
    assert_eq!(
        (
            acme["requests_per_s"].as_u64(),
            acme["work_units_per_s"].as_u64()
        ),
        (Some(5), Some(100))
    );
    let m = stdout(&shmtool(&["metrics", &seg.name]));
    check_prometheus(&m);
    assert!(m.contains(&format!(
        "fairshm_tenant_requests_per_second{{segment=\"{}\",tenant=\"acme\"}} 5",
        seg.name
    )));
    drop(t);
}

#[test]
fn inspect_shows_a_guaranteed_pools_loans_demand_and_overruns() {
    let seg = Seg::new("tool-guaranteed");
    let mut cfg = common::guaranteed(
        "tokens",
        100,
        fairshm::FairnessUnit::Cost,
        &[("a", 1), ("b", 1)],
        (100, 150),
        4,
    );
    cfg.pools = config().pools;
    let t = seg.create(&cfg);
    let g = t.guaranteed("tokens").unwrap();
    g.acquire("b", 50, 10_000, 0).unwrap().unwrap();
    let loan = g.acquire("b", 50, 100, 0).unwrap().unwrap();
    assert!(g.acquire("a", 50, 50, 120).unwrap().is_err());
    let v = json(&shmtool(&["inspect", "--json", &seg.name]));
    assert_schema(&v);
    let p = &v["guaranteed"][0];
    assert_eq!(p["name"], "tokens");
    assert_eq!(
        (p["in_use"].as_u64(), p["on_loan"].as_u64()),
        (Some(100), Some(50))
    );
    assert_eq!(p["overrun_leases"][0], loan.name.as_str());
    let a = &p["tenants"][0];
    assert_eq!(
        (a["name"].as_str(), a["lent"].as_u64(), a["demand"].as_u64()),
        (Some("a"), Some(50), Some(50))
    );
    assert_eq!(
        a["deficit_unit_ms"].as_u64(),
        Some(0),
        "as of the pool's clock: the want just began"
    );
    assert_eq!(p["tenants"][1]["borrowed_from"][0][0], "a");
    let human = stdout(&shmtool(&["inspect", &seg.name]));
    assert!(
        human.contains("GUARANTEED tokens")
            && human.contains(&format!("overrun leases: {}", loan.name)),
        "{human}"
    );
}

#[test]
fn inspect_and_metrics_show_an_evict_pools_residents() {
    let seg = Seg::new("tool-residents");
    let t = seg.create(&Config::with_pools(vec![
        PoolConfig::new("residents", 1).window_ms(60_000).evicting(),
    ]));
    let a = t
        .try_acquire_at(&Request::new("residents", "a"), 10)
        .unwrap()
        .unwrap();
    let b = t
        .try_acquire_at(&Request::new("residents", "b"), 20)
        .unwrap()
        .unwrap();
    assert!(a.is_revoked().unwrap());
    let v = json(&shmtool(&["inspect", "--json", &seg.name]));
    assert_schema(&v);
    let r = &v["pools"][0]["residents"];
    assert_eq!(
        (
            r["idle"].as_u64(),
            r["revoked"].as_u64(),
            r["evictions"].as_u64()
        ),
        (Some(1), Some(1), Some(1))
    );
    assert_eq!(r["evict_wait_ms"].as_u64(), Some(1000));
    let tenant = |n: &str| {
        v["pools"][0]["tenants"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == n)
            .unwrap()
            .clone()
    };
    assert_eq!(
        (
            tenant("a")["revoked"].as_u64(),
            tenant("b")["evictions"].as_u64()
        ),
        (Some(1), Some(1))
    );
    let human = stdout(&shmtool(&["inspect", &seg.name]));
    assert!(
        human.contains("residents of residents: 1 idle, 0 in a call, 1 revoked"),
        "{human}"
    );
    let m = check_prometheus(&stdout(&shmtool(&["metrics", &seg.name])));
    let pool = [("segment", seg.name.as_str()), ("pool", "residents")];
    assert_eq!(sample(&m, "fairshm_pool_evictions_total", &pool), 1.0);
    assert_eq!(sample(&m, "fairshm_pool_residents_revoked", &pool), 1.0);
    let a_labels = [
        ("segment", seg.name.as_str()),
        ("pool", "residents"),
        ("tenant", "a"),
    ];
    assert_eq!(sample(&m, "fairshm_tenant_revoked_total", &a_labels), 1.0);
    a.release().unwrap();
    drop(b);
}
