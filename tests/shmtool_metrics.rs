//! `shmtool metrics` (Prometheus text, printed and served) and `shmtool top` (once, for
//! some iterations, and on a terminal) against segments built here.
#[path = "common/cli.rs"]
mod cli;
mod common;

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cli::{Running, check_prometheus, code, config, holder, holding, sample, shmtool, stdout};
use common::{Children, Seg, fork_child, wait, wait_until};
use fairshm::{Request, Table};

#[test]
fn metrics_are_prometheus_text_printed_and_served() {
    let seg = Seg::new("tool-metrics");
    let t = seg.create(&config());
    let mut kids = holding(&t, "acme \"quoted\"", 3);
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

    let (server, addr) = serve(&seg.name);
    let scrape = addr.as_ref().map(|a| get(a, "/metrics"));
    let missing = addr.as_ref().map(|a| get(a, "/nothing"));
    let query = addr.as_ref().map(|a| get(a, "/metrics?scrape=1"));
    let post = addr.as_ref().map(|a| request(a, "POST", "/metrics"));
    drop(server);
    let (status, body) = scrape.expect("the server printed its address");
    assert!(status.contains("200"), "{status}");
    let s = check_prometheus(&body);
    assert_eq!(sample(&s, "fairshm_pool_in_use", &pool), 3.0);
    assert!(missing.unwrap().0.contains("404"));
    let (status, body) = query.unwrap();
    assert!(
        status.contains("200"),
        "a query string is ignored: {status}"
    );
    assert_eq!(
        sample(&check_prometheus(&body), "fairshm_pool_in_use", &pool),
        3.0
    );
    assert!(post.unwrap().0.contains("405"), "only GET and HEAD read");
    kids.kill_all();
    drop(t);
}

/// A long-running `metrics --listen` reads the segment that has the name at each
/// scrape: after a deploy gives the name to a new segment (`clean`, then a new
/// master's create), the new one, not the old mapping for ever; while no segment has
/// the name, a 500 that says so.
#[test]
fn a_served_scrape_reads_the_segment_that_has_the_name_now() {
    let seg = Seg::new("tool-metrics-follow");
    let t = seg.create(&config());
    let (server, addr) = serve(&seg.name);
    let scrapes = addr.as_ref().map(|a| {
        let old = get(a, "/metrics");
        drop(t);
        Table::unlink(&seg.name).expect("unlink");
        let none = get(a, "/metrics");
        let mut cfg = config();
        cfg.pools[0].capacity = 6;
        let t2 = seg.create(&cfg);
        let new = get(a, "/metrics");
        drop(t2);
        (old, none, new)
    });
    drop(server);
    let (old, none, new) = scrapes.expect("the server printed its address");
    let pool = [("pool", "requests"), ("segment", seg.name.as_str())];
    let capacity = |(status, body): &(String, String)| {
        assert!(status.contains("200"), "{status}: {body}");
        sample(&check_prometheus(body), "fairshm_pool_capacity", &pool)
    };
    assert_eq!(capacity(&old), 4.0);
    assert!(none.0.contains("500"), "{none:?}");
    assert!(none.1.contains("does not exist"), "{none:?}");
    assert_eq!(capacity(&new), 6.0, "the segment that has the name now");
}

/// `shmtool metrics NAME --listen` on a port of its own: the server (killed and reaped
/// when dropped, as the thread that reads its output is joined), and the address it
/// printed (`None` if it printed none).
fn serve(name: &str) -> (Running, Option<String>) {
    let (server, lines) = Running::shmtool(&["metrics", name, "--listen", "127.0.0.1:0"]);
    let addr = lines
        .take(1)
        .first()
        .and_then(|l| l.strip_prefix("listening on http://"))
        .and_then(|l| l.strip_suffix("/metrics"))
        .map(str::to_owned);
    (server, addr)
}

/// An HTTP/1.0 GET: (status line, body).
fn get(addr: &str, path: &str) -> (String, String) {
    request(addr, "GET", path)
}

/// An HTTP/1.0 request with no body: (status line, body).
fn request(addr: &str, method: &str, path: &str) -> (String, String) {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(common::DEADLINE)).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: 0\r\n\r\n"
    )
    .unwrap();
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

/// `top` follows the name as the exporter does: after a deploy removes the segment, a
/// view that says no segment has the name; once the new master creates another, views
/// of the new one (its pool of 6), not of the old mapping for ever.
#[test]
fn top_shows_the_segment_that_has_the_name_now() {
    let seg = Seg::new("tool-top-follow");
    let t = seg.create(&config());
    let lease = t
        .try_acquire(&Request::new("requests", "acme"))
        .unwrap()
        .unwrap();
    let (top, views) = Running::shmtool(&["top", &seg.name, "--interval-ms", "20"]);
    let old = views.until(|l| l.contains("acme") && l.contains("1/4"));
    drop(lease);
    drop(t);
    Table::unlink(&seg.name).expect("unlink");
    let absent = views.until(|l| l.contains("no readable segment has this name now"));
    let mut cfg = config();
    cfg.pools[0].capacity = 6;
    let t2 = seg.create(&cfg);
    let lease2 = t2
        .try_acquire(&Request::new("requests", "globex"))
        .unwrap()
        .unwrap();
    let new = views.until(|l| l.contains("globex") && l.contains("1/6"));
    drop(top);
    drop(lease2);
    drop(t2);
    let last = |v: &[String]| v.last().cloned().unwrap_or_default();
    assert!(
        last(&old).contains("1/4"),
        "the first segment's view: {old:?}"
    );
    assert!(
        last(&absent).contains("does not exist"),
        "a view while the name names nothing: {absent:?}"
    );
    assert!(
        last(&new).contains("1/6"),
        "the new segment's view: {new:?}"
    );
    assert!(
        !new.iter().any(|l| l.contains("acme")),
        "nothing of the old segment after the new one's view: {new:?}"
    );
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
