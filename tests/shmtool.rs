//! `shmtool`, run as a binary against segments built here: each subcommand, its
//! outputs parsed (JSON against `doc/inspect.schema.json`, metrics as Prometheus text)
//! and its exit codes. Workers are forked children (the harness runs single-threaded,
//! see `scripts/test-all`), so the test process itself never registers.
#[path = "common/cli.rs"]
mod cli;
mod common;

use std::time::Duration;

use cli::{
    assert_schema, check_prometheus, code, config, holder, holding, json, sample, shmtool, stdout,
    with_tokens,
};
use common::{Children, Seg, rewrite, wait_until};
use fairshm::{Config, PoolConfig, Request, Table};

#[test]
fn a_killed_holder_is_shown_dead_reaped_and_then_checks_clean() {
    let seg = Seg::new("tool-kill");
    let t = seg.create(&config());
    let mut kids = holding(&t, "acme", 2);
    let pid = kids.0[0];
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

    let me = listed(&seg.name);
    assert_eq!(
        (me["live"].as_u64(), me["dead"].as_u64()),
        (Some(0), Some(1))
    );
    assert_eq!(
        me["header"]["layout_version"],
        fairshm::layout::LAYOUT_VERSION
    );
    assert_eq!(me["header"]["creator_pid"], std::process::id());
    let created = fairshm::tool::clock(me["header"]["created_unix_ms"].as_u64().unwrap());
    let head = human.lines().next().unwrap_or_default();
    assert!(
        head.contains(&format!(
            "created {created} UTC by pid {}",
            std::process::id()
        )),
        "inspect's head says when and by whom the segment was made: {head}"
    );

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
    assert!(
        stdout(&r).contains("1 lease released") && stdout(&r).contains("2 units of \"requests\""),
        "{}",
        stdout(&r)
    );
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

/// A process that registered two handles of one segment holds two process slots
/// (`inspect` lists both) and is one process to `list` and `top`.
#[test]
fn list_and_top_count_a_process_with_two_handles_once() {
    let seg = Seg::new("tool-twohandles");
    let t = seg.create(&config());
    t.register().unwrap();
    let again = Table::open(&seg.name).unwrap();
    again.register().unwrap();
    let v = json(&shmtool(&["inspect", &seg.name, "--json"]));
    assert_eq!(v["processes"].as_array().unwrap().len(), 2, "two slots");
    let me = listed(&seg.name);
    assert_eq!(
        (
            me["live"].as_u64(),
            me["dying"].as_u64(),
            me["dead"].as_u64()
        ),
        (Some(1), Some(0), Some(0))
    );
    let top = stdout(&shmtool(&["top", &seg.name, "--once"]));
    assert!(top.contains("processes: 1 alive, 0 not"), "{top}");
    let m = stdout(&shmtool(&["metrics", &seg.name]));
    let alive = format!(
        "fairshm_processes{{segment=\"{}\",liveness=\"alive\"}} 1\n",
        seg.name
    );
    assert!(m.contains(&alive), "{m}");
    drop(again);
    drop(t);
}

/// `list --json`'s entry of segment `name`.
fn listed(name: &str) -> serde_json::Value {
    let l = json(&shmtool(&["list", "--json"]));
    let all = l.as_array().expect("a list");
    all.iter()
        .find(|e| e["name"] == name)
        .expect("listed")
        .clone()
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
fn leftovers_of_another_version_or_a_dead_creator_are_cleaned_when_unheld() {
    // Another layout version (an upgrade left it): unreadable, yet fairshm's.
    let old = Seg::new("tool-oldversion");
    drop(old.create(&config()));
    rewrite(&old.name, 8, &99u32.to_le_bytes());
    let path = format!("/dev/shm/{}", old.name);
    assert_eq!(code(&shmtool(&["inspect", &old.name])), 4);
    // While a live process has it open, clean refuses (exit 5) and names it.
    let f = std::fs::File::open(&path).unwrap();
    let o = shmtool(&["clean", &old.name]);
    assert_eq!(code(&o), 5);
    assert!(String::from_utf8_lossy(&o.stderr).contains(&std::process::id().to_string()));
    drop(f);
    let o = shmtool(&["clean", &old.name]);
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout(&o).contains(&format!("removed {}", old.name)));
    assert!(!std::path::Path::new(&path).exists());

    // A creator that died before `ready`: removed by name, and by --stale.
    let never = Seg::new("tool-neverready");
    drop(never.create(&config()));
    rewrite(&never.name, 12, &0u32.to_le_bytes());
    assert_eq!(code(&shmtool(&["clean", &never.name])), 0);
    assert!(!std::path::Path::new(&format!("/dev/shm/{}", never.name)).exists());
    let stale = Seg::new("tool-stalever");
    drop(stale.create(&config()));
    rewrite(&stale.name, 8, &1u32.to_le_bytes());
    let o = shmtool(&["clean", "--stale", "--prefix", &stale.name]);
    assert!(
        stdout(&o).contains(&format!("removed {}", stale.name)),
        "{}",
        stdout(&o)
    );
    assert!(!std::path::Path::new(&format!("/dev/shm/{}", stale.name)).exists());
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

#[test]
fn reading_commands_change_no_byte_and_read_another_users_segment() {
    let seg = Seg::new("tool-ro");
    let t = seg.create(&config());
    let mut kids = holding(&t, "acme", 1);
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
    let t = seg.create(&with_tokens());
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
    let top = stdout(&shmtool(&["top", &seg.name, "--once"]));
    let rows: Vec<Vec<&str>> = top
        .lines()
        .filter(|l| l.starts_with("tokens"))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            ["tokens", "b", "100", "50", "100/100", "2", "0", "-"],
            ["tokens", "a", "0", "50", "100/100", "0", "1", "-"],
        ],
        "b holds the whole ceiling, a holds nothing and wants (refused at the pool's \
         clock), each with its guarantee as its share: {top}"
    );
    assert!(
        top.contains("leases: 0 (and 2 of guaranteed pools)"),
        "b's two leases are counted: {top}"
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

/// A `per_worker` pool says how its capacity comes about (seed 002): the quota, the
/// minimum, the live workers and the tickets they give, as Semian computes them (2/3
/// of 3 workers is 2 tickets).
#[test]
fn inspect_shows_how_a_per_worker_pool_is_sized() {
    let seg = Seg::new("tool-perworker");
    let t = seg.create(&Config::with_pools(vec![
        PoolConfig::new("requests", 4).window_ms(60_000),
        PoolConfig::per_worker("flights", 2.0 / 3.0, 1),
    ]));
    let mut kids = Children(vec![
        holder(&seg.name, "a", 1),
        holder(&seg.name, "b", 1),
        holder(&seg.name, "c", 1),
    ]);
    wait_until(
        None,
        "three registered holders",
        Duration::from_millis(2),
        || t.snapshot().pools[0].in_use == 3,
    );
    let v = json(&shmtool(&["inspect", "--json", &seg.name]));
    assert_schema(&v);
    assert!(v["pools"][0]["per_worker"].is_null(), "a fixed pool");
    let w = &v["pools"][1]["per_worker"];
    assert_eq!(w["quota"].as_f64(), Some(2.0 / 3.0));
    assert_eq!(
        (
            w["min_tickets"].as_u64(),
            w["workers"].as_u64(),
            w["tickets"].as_u64()
        ),
        (Some(1), Some(3), Some(2))
    );
    assert_eq!(
        v["pools"][1]["capacity"].as_u64(),
        Some(2),
        "the pool as sized"
    );
    let human = stdout(&shmtool(&["inspect", &seg.name]));
    assert!(
        human.contains(
            "flights is sized per worker: min(3, max(ceil(0.6666666666666666 x 3), 1)) = 2 \
             tickets for the 3 live workers"
        ),
        "{human}"
    );
    let m = check_prometheus(&stdout(&shmtool(&["metrics", &seg.name])));
    let pool = |p| [("segment", seg.name.as_str()), ("pool", p)];
    assert_eq!(sample(&m, "fairshm_pool_workers", &pool("flights")), 3.0);
    assert_eq!(sample(&m, "fairshm_pool_capacity", &pool("flights")), 2.0);
    assert_eq!(sample(&m, "fairshm_pool_workers", &pool("requests")), 0.0);
    assert_eq!(kids.kill_all().len(), 3);
}

/// `rates` names the pools the rates do not apply to (`rates = false`), and `inspect`
/// says so beside the pools.
#[test]
fn rates_name_the_pools_they_do_not_apply_to() {
    let seg = Seg::new("tool-unrated");
    let t = seg.create(&Config::with_pools(vec![
        PoolConfig::new("requests", 4),
        PoolConfig::new("flights", 4).without_rates(),
    ]));
    let o = shmtool(&["rates", &seg.name, "acme", "--requests", "5"]);
    assert_eq!(code(&o), 0);
    assert_eq!(
        stdout(&o),
        "acme: requests 5/s, work units unbounded\n  (not applied to flights: rates = \
         false; a request is rated where it is admitted)\n"
    );
    let text = stdout(&shmtool(&["inspect", &seg.name]));
    assert!(
        text.contains("the tenants' rates do not apply to flights (rates = false)"),
        "{text}"
    );
    let v = json(&shmtool(&["inspect", &seg.name, "--json"]));
    assert_schema(&v);
    let rated: Vec<bool> = v["pools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["rates"].as_bool().unwrap())
        .collect();
    assert_eq!(rated, [true, false]);
    drop(t);
}

/// `inspect` (text and JSON), `metrics` and `top` (the directory) say how full each
/// fixed table is: the tenant directory, the process slots, the lease slots and the
/// fullest process's share of them, each against its size from the config.
#[test]
fn inspect_and_metrics_say_how_full_each_table_is() {
    let seg = Seg::new("tool-tables");
    let mut cfg = config();
    cfg.max_tenants = 4;
    cfg.max_processes = 3;
    cfg.leases_per_process = 2;
    let t = seg.create(&cfg);
    let mut kids = Children(vec![holder(&seg.name, "a", 1), holder(&seg.name, "b", 2)]);
    wait_until(
        None,
        "two registered holders",
        Duration::from_millis(2),
        || t.snapshot().pools[0].in_use == 3,
    );
    let v = json(&shmtool(&["inspect", "--json", &seg.name]));
    assert_schema(&v);
    let usage = |k: &str| {
        (
            v["tables"][k]["used"].as_u64(),
            v["tables"][k]["size"].as_u64(),
        )
    };
    assert_eq!(usage("tenants"), (Some(2), Some(4)));
    assert_eq!(usage("processes"), (Some(2), Some(3)));
    assert_eq!(usage("leases"), (Some(2), Some(6)));
    assert_eq!(usage("leases_in_one_process"), (Some(1), Some(2)));
    let human = stdout(&shmtool(&["inspect", &seg.name]));
    assert!(
        human.contains(
            "tables: tenants 2 of 4 (max_tenants), processes 2 of 3 (max_processes), \
             leases 2 of 6, at most 1 of 2 in one process (leases_per_process)"
        ),
        "{human}"
    );
    let top = stdout(&shmtool(&["top", &seg.name, "--once"]));
    assert!(top.contains("tenants: 2 of 4"), "{top}");
    let m = check_prometheus(&stdout(&shmtool(&["metrics", &seg.name])));
    let table = |k| [("segment", seg.name.as_str()), ("table", k)];
    assert_eq!(sample(&m, "fairshm_table_used", &table("tenants")), 2.0);
    assert_eq!(sample(&m, "fairshm_table_size", &table("tenants")), 4.0);
    assert_eq!(sample(&m, "fairshm_table_used", &table("processes")), 2.0);
    assert_eq!(sample(&m, "fairshm_table_size", &table("leases")), 6.0);
    assert_eq!(
        sample(&m, "fairshm_table_size", &table("leases_in_one_process")),
        2.0
    );
    assert_eq!(kids.kill_all().len(), 2);
}

#[test]
fn control_characters_in_a_name_are_shown_escaped_not_printed() {
    // Tenant names come from requests: one with a newline and an escape sequence must
    // neither forge a line of a table nor reach the operator's terminal.
    let seg = Seg::new("tool-escape");
    let t = seg.create(&config());
    let (forged, slashed) = ("e\nFORGED\u{1b}[2J", "c\\d");
    let a = t
        .try_acquire(&Request::new("requests", forged))
        .unwrap()
        .unwrap();
    let b = t
        .try_acquire(&Request::new("requests", slashed))
        .unwrap()
        .unwrap();
    let c = t
        .try_acquire(&Request::new("requests", "acme").units(2))
        .unwrap();
    assert!(c.is_ok());
    assert!(
        t.try_acquire(&Request::new("requests", "ünï"))
            .unwrap()
            .is_err()
    );
    for cmd in [
        vec!["inspect", &seg.name],
        vec!["top", &seg.name, "--once"],
        vec!["log", &seg.name],
    ] {
        let o = shmtool(&cmd);
        assert_eq!(code(&o), 0, "{cmd:?}");
        let text = stdout(&o);
        assert!(
            !text.contains('\u{1b}'),
            "{cmd:?} printed an escape sequence: {text}"
        );
        assert!(
            !text.lines().any(|l| l.starts_with("FORGED")),
            "{cmd:?} let a name forge a line: {text}"
        );
        assert!(text.contains(r"e\nFORGED\u{1b}[2J"), "{cmd:?}: {text}");
        assert!(
            text.contains(r"c\\d") && text.contains("ünï"),
            "{cmd:?}: {text}"
        );
    }
    let o = shmtool(&["rates", &seg.name, forged]);
    assert_eq!(code(&o), 0);
    assert!(stdout(&o).starts_with(r"e\nFORGED\u{1b}[2J: requests unbounded"));
    // JSON keeps the name as it is (its own escaping).
    let v = json(&shmtool(&["inspect", &seg.name, "--json"]));
    let names: Vec<&str> = v["pools"][0]["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&forged) && names.contains(&slashed),
        "{names:?}"
    );
    drop((a, b, c));
}

/// Runs shmtool with its stdout a pipe whose reader has gone (as `shmtool ... | head`
/// leaves it once `head` has its lines): its exit code, and what it said on stderr.
fn into_closed_pipe(args: &[&str]) -> (i32, String) {
    let (rd, wr) = nix::unistd::pipe().unwrap();
    drop(rd);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_shmtool"))
        .args(args)
        .stdout(std::process::Stdio::from(wr))
        .output()
        .expect("run shmtool");
    (
        code(&out),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_reader_that_goes_away_is_no_failure_and_hides_no_finding() {
    let seg = Seg::new("tool-pipe");
    let t = seg.create(&config());
    let mut kids = holding(&t, "acme", 2);
    // Every reading command, its output unread: no panic, no error, exit 0.
    for args in [
        vec!["inspect", &seg.name],
        vec!["inspect", &seg.name, "--json"],
        vec!["list"],
        vec!["list", "--json"],
        vec!["top", &seg.name, "--once"],
        vec!["metrics", &seg.name],
        vec!["log", &seg.name],
        vec!["log", &seg.name, "--json"],
        vec!["replay", &seg.name],
        vec!["replay", &seg.name, "--json"],
        vec!["check", &seg.name],
    ] {
        assert_eq!(into_closed_pipe(&args), (0, String::new()), "{args:?}");
    }
    // A finding's exit code stands when its report is not read.
    assert_eq!(kids.kill_all(), vec![128 + 9]);
    assert_eq!(
        code(&shmtool(&["check", &seg.name])),
        1,
        "a dead holder's lease"
    );
    assert_eq!(into_closed_pipe(&["check", &seg.name]), (1, String::new()));
    drop(t);
}
