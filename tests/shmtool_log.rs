//! `shmtool log`, `log --follow` and `replay` against segments built here: each decision
//! shown with its inputs, and the replay agreeing with it.
#[path = "common/cli.rs"]
mod cli;
mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cli::{Running, code, config, json, read_lines, shmtool, stdout, with_tokens};
use common::{Children, Seg, fork_child, wait, wait_until};
use fairshm::{Reason, Request, Table};
use serde_json::Value;

/// `shmtool log NAME --json` with `filter` (`--tenant T`): one decision a line.
fn log_json(name: &str, filter: &[&str]) -> Vec<Value> {
    let o = shmtool(&[&["log", name, "--json"], filter].concat());
    assert_eq!(code(&o), 0);
    stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// The last line of `shmtool log NAME` with `filter` holds each of `parts`.
fn last_logged_has(name: &str, filter: &[&str], parts: &[&str]) {
    let text = stdout(&shmtool(&[&["log", name], filter].concat()));
    let last = text.lines().last().unwrap();
    for part in parts {
        assert!(last.contains(part), "{part:?} in {last}");
    }
}

/// `shmtool replay NAME` re-decides `n` decisions, all as logged.
fn replays_alike(name: &str, n: usize) {
    let r = shmtool(&["replay", name]);
    assert_eq!(code(&r), 0, "{}", stdout(&r));
    let want = format!("{n} decisions replayed, 0 differ");
    assert!(stdout(&r).contains(&want), "{}", stdout(&r));
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

    let got = log_json(&seg.name, &[]);
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

    replays_alike(&seg.name, 6);
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

/// `log --follow` follows the name: after a deploy (the segment removed, another
/// created under the name) it writes the new segment's decisions, whose sequence
/// numbers start again, instead of reading the old mapping for ever. The table says
/// while no segment has the name and when a new one has it, and writes its header
/// again; the JSON lines stay decisions only.
#[test]
fn follow_follows_the_name_across_a_deploy() {
    let seg = Seg::new("tool-follow-deploy");
    let t = seg.create(&config());
    let (json_log, json_lines) = Running::shmtool(&["log", &seg.name, "--follow", "--json"]);
    let (text_log, text_lines) = Running::shmtool(&["log", &seg.name, "--follow"]);
    // In this process: no fork while the followers' readers run (a second thread).
    let acquires = |t: &Table, tenant: &str, n: usize| {
        for _ in 0..n {
            drop(
                t.try_acquire(&Request::new("requests", tenant))
                    .expect("acquire"),
            );
        }
    };
    acquires(&t, "acme", 3);
    let old = json_lines.take(3);
    let old_text = text_lines.until(|l| l.contains("acme") && l.contains("granted"));
    drop(t);
    Table::unlink(&seg.name).expect("unlink");
    let absent = text_lines.until(|l| l.contains("no readable segment has the name"));
    let mut cfg = config();
    cfg.pools[0].capacity = 6;
    let t2 = seg.create(&cfg);
    acquires(&t2, "globex", 2);
    let new = json_lines.take(2);
    let new_text = text_lines.until(|l| l.contains("globex"));
    drop((json_log, text_log, t2));
    assert_eq!(old.len(), 3, "{old:?}");
    assert!(
        old_text.last().is_some_and(|l| l.contains("acme")),
        "{old_text:?}"
    );
    assert!(
        absent.last().is_some_and(|l| l.contains("does not exist")),
        "{absent:?}"
    );
    assert_eq!(new.len(), 2, "the new segment's decisions: {new:?}");
    for l in &new {
        let v: Value = serde_json::from_str(l).expect("a decision, one JSON object a line");
        assert_eq!(
            (v["tenant"].as_str(), v["capacity"].as_u64()),
            (Some("globex"), Some(6)),
            "{v}"
        );
    }
    let anew = new_text.iter().position(|l| l.contains("was made anew"));
    let header = new_text.iter().rposition(|l| l.contains("outcome"));
    assert!(
        anew.is_some() && header > anew,
        "the table says the segment is new, then writes its header again: {new_text:?}"
    );
    assert!(
        new_text.last().is_some_and(|l| l.contains("0/6")),
        "the new segment's first decision, at 0 of its 6 in use: {new_text:?}"
    );
}

/// A `--pool` the segment has no log of is a usage error naming the pools it has (a
/// typo printed an empty log with exit 0, and `--follow` waited on it for ever); a
/// guaranteed pool's is told apart, with where its state is shown. A tenant name the
/// segment cannot take is a usage error too.
#[test]
fn a_pool_or_tenant_the_segment_cannot_have_is_a_usage_error() {
    let seg = Seg::new("tool-logpool");
    let t = seg.create(&with_tokens());
    let err = |o: &std::process::Output| String::from_utf8_lossy(&o.stderr).into_owned();
    let o = shmtool(&["log", &seg.name, "--pool", "request"]);
    assert_eq!(code(&o), 2);
    assert!(
        err(&o).contains("unknown pool \"request\"") && err(&o).contains("[\"requests\"]"),
        "{}",
        err(&o)
    );
    assert!(!err(&o).contains("guaranteed pool"), "{}", err(&o));
    let o = shmtool(&["log", &seg.name, "--pool", "tokens", "--follow"]);
    assert_eq!(code(&o), 2, "refused before following");
    assert!(
        err(&o).contains("\"tokens\" is a guaranteed pool") && err(&o).contains("inspect"),
        "{}",
        err(&o)
    );
    assert_eq!(code(&shmtool(&["log", &seg.name, "--pool", "requests"])), 0);
    for args in [
        &["rates", &seg.name, ""][..],
        &["log", &seg.name, "--tenant", ""],
    ] {
        let o = shmtool(args);
        assert_eq!(code(&o), 2);
        assert!(err(&o).contains("invalid tenant name"), "{}", err(&o));
    }
    drop(t);
}

/// A refusal by the tenant's rates is a decision too: logged with its bucket (rate and
/// lead) by a process that has registered, shown as such, and replayed by the rates'
/// rule. One that comes before the process registered is not logged (it registers
/// nothing).
#[test]
fn rate_refusals_are_logged_with_their_bucket_and_replayed() {
    let seg = Seg::new("tool-log-rates");
    let t = seg.create(&config());
    let name = seg.name.clone();
    // `early` may make one request a second: a first process takes it.
    let first = fork_child(move || {
        let t = Table::open(&name).expect("open");
        t.set_rates("early", 1, 0).expect("rates");
        let early = Request::new("requests", "early");
        drop(
            t.try_acquire_at(&early, 1_000)
                .expect("acquire")
                .expect("granted"),
        );
        0
    });
    assert_eq!(wait(first), 0, "early's one token");
    let name = seg.name.clone();
    let child = fork_child(move || {
        let t = Table::open(&name).expect("open");
        // Before any grant: a rate refusal of an unregistered process, not logged.
        let early = Request::new("requests", "early");
        let r0 = t
            .try_acquire_at(&early, 1_000)
            .expect("acquire")
            .expect_err("refused");
        if r0.reason != Reason::RateLimited {
            return 5;
        }
        t.set_rates("acme", 2, 100).expect("rates");
        let req = Request::new("requests", "acme");
        // A grant is released at once; a refusal gives its reason and retry-after.
        let at = |ms| match t.try_acquire_at(&req, ms).expect("acquire") {
            Ok(lease) => {
                drop(lease);
                Ok(())
            }
            Err(r) => Err((r.reason, r.retry_after_ms)),
        };
        // Two tokens at t = 1,000 ms, then refused: the bucket 1 s ahead, 500 ms to go.
        at(1_000).expect("granted");
        at(1_000).expect("granted");
        let r1 = at(1_000).expect_err("refused");
        // 300 units at 100 a second: 3 s ahead, 2 s past the burst.
        assert_eq!(t.charge_at("acme", 300, 1_600).expect("charge"), 2_000);
        let r2 = at(1_600).expect_err("refused");
        let ok = (r1, r2)
            == (
                (Reason::RateLimited, Some(500)),
                (Reason::WorkDebt, Some(2_000)),
            );
        if ok { 0 } else { 6 }
    });
    assert_eq!(wait(child), 0, "two grants, rate_limited, then work_debt");
    let got = log_json(&seg.name, &["--tenant", "acme"]);
    let outcomes: Vec<&str> = got.iter().map(|g| g["outcome"].as_str().unwrap()).collect();
    assert_eq!(
        outcomes,
        ["granted", "granted", "rate_limited", "work_debt"],
        "{got:#?}"
    );
    let (limited, debt) = (&got[2], &got[3]);
    assert_eq!(limited["rate"]["per_second"], 2, "{limited}");
    assert_eq!(limited["rate"]["lead_ns"], 1_000_000_000u64, "{limited}");
    assert_eq!(limited["retry_after_ms"], 500);
    assert_eq!(debt["rate"]["per_second"], 100, "{debt}");
    assert_eq!(debt["rate"]["lead_ns"], 3_000_000_000u64, "{debt}");
    assert_eq!(debt["retry_after_ms"], 2_000);
    for g in [limited, debt] {
        assert_eq!(
            (g["in_use"].as_u64(), g["capacity"].as_u64()),
            (Some(0), Some(0)),
            "{g}"
        );
        assert_eq!(g["replayed"], g["outcome"], "{g}");
    }
    assert!(got[0]["rate"].is_null(), "a pool's decision has no bucket");
    let early = stdout(&shmtool(&["log", &seg.name, "--tenant", "early"]));
    assert_eq!(
        early.lines().count(),
        2,
        "early's grant only, not the refusal: {early}"
    );
    last_logged_has(
        &seg.name,
        &["--tenant", "acme"],
        &["work_debt", "rate 100/s", "2000ms"],
    );
    replays_alike(&seg.name, 5);
    drop(t);
}

/// A grant of an `evict` pool that the rule refused on its inputs took a resident's
/// permit: the log says `evicted` (a grant at `2/2` would not explain itself), and the
/// replay, which re-decides it the same way, agrees.
#[test]
fn an_eviction_is_logged_as_evicted_and_replays() {
    use fairshm::{Config, PoolConfig};
    let seg = Seg::new("tool-log-evict");
    let t = seg.create(&Config::with_pools(vec![
        PoolConfig::new("residents", 2).evicting(),
    ]));
    let big = Request::new("residents", "big");
    let held: Vec<_> = (0..2)
        .map(|_| t.try_acquire(&big).expect("acquire").expect("granted"))
        .collect();
    let small = t
        .try_acquire(&Request::new("residents", "small"))
        .expect("acquire")
        .expect("granted by an eviction");
    assert_eq!(
        held.iter()
            .map(|l| l.is_revoked().unwrap())
            .collect::<Vec<_>>(),
        [true, false],
        "big's idlest revoked"
    );
    let got = log_json(&seg.name, &[]);
    let seen: Vec<(&str, &str, &str)> = got
        .iter()
        .map(|g| {
            (
                g["tenant"].as_str().unwrap(),
                g["outcome"].as_str().unwrap(),
                g["replayed"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("big", "granted", "granted"),
            ("big", "granted", "granted"),
            ("small", "evicted", "evicted"),
        ],
        "{got:#?}"
    );
    last_logged_has(&seg.name, &[], &["small", "evicted", "2/2"]);
    replays_alike(&seg.name, 3);
    drop((small, held));
    drop(t);
}
