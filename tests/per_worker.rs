//! Worker-sized pools: tickets follow the live registered workers, as in Semian's
//! `quota` / `min_tickets`, including after workers are killed.
mod common;

use std::time::Duration;

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd};

use common::Seg;
use fairshm::{Config, PoolConfig, Request, Table};

/// The tests fork children that would inherit each other's pipe ends if they ran at
/// once (delaying the end-of-file each waits for), so they run one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn capacity(t: &Table, pool: &str) -> u32 {
    t.snapshot().pool(pool).unwrap().capacity
}

/// Forks `n` workers that register and then wait to be killed. They sleep forever, so
/// they are held by a guard that kills and reaps them if the test fails first.
fn workers(name: &str, n: usize) -> common::Children {
    let mut out = common::Children(Vec::with_capacity(n));
    for _ in 0..n {
        let (rd, wr) = nix::unistd::pipe().unwrap();
        let (name, wr_fd) = (name.to_owned(), wr.as_raw_fd());
        let pid = common::fork_child(move || {
            // Kept open: dropping the table would deregister the worker.
            let t = Table::open(&name).unwrap();
            t.register().unwrap();
            // SAFETY: our copy of the pipe's write end; closing it tells the parent
            // we are registered.
            unsafe { libc::close(wr_fd) };
            loop {
                std::thread::sleep(std::time::Duration::from_secs(60));
                let _ = &t;
            }
        });
        drop(wr);
        // Listed before the read below can fail the test.
        out.push(pid);
        // SAFETY: `rd` is an open pipe end; the File takes it over.
        let mut f = unsafe { std::fs::File::from_raw_fd(rd.as_raw_fd()) };
        std::mem::forget(rd);
        let mut buf = [0u8; 1];
        assert_eq!(
            f.read(&mut buf).unwrap(),
            0,
            "worker registered and closed its pipe"
        );
    }
    out
}

/// A segment with the `per_worker` pool `flights` at quota 1.0 and two registered
/// workers (two tickets): what the tests of who counts as a worker start from.
fn flights_of_two_workers(tag: &str) -> (Seg, Table, common::Children) {
    let seg = Seg::new(tag);
    let cfg = Config::with_pools(vec![PoolConfig::per_worker("flights", 1.0, 0)]);
    let t = seg.create(&cfg);
    let two = workers(&seg.name, 2);
    assert_eq!(capacity(&t, "flights"), 2);
    (seg, t, two)
}

/// This process's registrations, as `t`'s snapshot lists them.
fn mine(t: &Table) -> Vec<fairshm::stats::ProcSnap> {
    let me = std::process::id();
    let snap = t.snapshot();
    snap.processes.into_iter().filter(|p| p.pid == me).collect()
}

/// SIGKILLs and reaps the first `n` of `pids`.
fn kill(pids: &mut common::Children, n: usize) {
    common::Children(pids.drain(..n).collect()).kill_all();
}

/// Kills every worker of `pids` and waits until `pool` has `tickets` left.
fn kill_down_to(t: &Table, pids: &mut common::Children, pool: &str, tickets: u32) {
    kill(pids, pids.len());
    // Our anchor may be reaping them already (as in the test below).
    t.reap_dead().unwrap();
    common::wait_until(
        None,
        "the dead workers' tickets to go",
        Duration::from_millis(1),
        || capacity(t, pool) == tickets,
    );
}

#[test]
fn five_workers_at_half_quota_get_three_tickets_and_follow_deaths() {
    let _g = serial();
    let seg = Seg::new("quota");
    let cfg = Config::with_pools(vec![PoolConfig::per_worker("mysql", 0.5, 0)]);
    let t = seg.create(&cfg); // the parent only observes: it never registers
    assert_eq!(capacity(&t, "mysql"), 0);
    let mut pids = workers(&seg.name, 5);
    assert_eq!(capacity(&t, "mysql"), 3, "ceil(0.5 * 5)");
    kill(&mut pids, 4);
    // The live worker's anchor reaps its dead siblings (this call may find some left).
    assert!(t.reap_dead().unwrap().len() <= 4);
    common::wait_until(
        None,
        "the four dead to be reaped",
        Duration::from_millis(1),
        || t.snapshot().processes.len() == 1,
    );
    assert_eq!(capacity(&t, "mysql"), 1, "ceil(0.5 * 1)");
    kill(&mut pids, 1);
    t.reap_dead().unwrap();
    assert_eq!(capacity(&t, "mysql"), 0);
}

/// The last worker dies with no live process to reap it: the next one to register
/// counts itself alone at once (it counted the dead one too, until its anchor's first
/// scan, so for that while the pool had a ticket for a worker that was gone).
#[test]
fn a_new_worker_does_not_count_a_dead_one_nobody_reaped() {
    let _g = serial();
    let seg = Seg::new("unreaped");
    let cfg = Config::with_pools(vec![PoolConfig::per_worker("flights", 1.0, 0)]);
    let t = seg.create(&cfg);
    let mut one = workers(&seg.name, 1);
    assert_eq!(capacity(&t, "flights"), 1);
    kill(&mut one, 1);
    assert_eq!(
        t.snapshot().processes.len(),
        1,
        "dead, and nobody reaped it"
    );
    t.register().unwrap();
    assert_eq!(capacity(&t, "flights"), 1, "one live worker: this process");
    assert_eq!(t.snapshot().processes.len(), 1);
}

/// A worker is a process: two handles of one process (each registered, each with a
/// process slot of its own) are one worker, and one more process is a second.
#[test]
fn a_worker_with_two_handles_is_one_worker() {
    let _g = serial();
    let seg = Seg::new("twohandles");
    let cfg = Config::with_pools(vec![PoolConfig::per_worker("flights", 1.0, 0)]);
    let t = seg.create(&cfg);
    t.register().unwrap();
    let again = Table::open(&seg.name).unwrap();
    again.register().unwrap();
    let snap = t.snapshot();
    assert_eq!(snap.processes.len(), 2, "two slots");
    assert_eq!(capacity(&t, "flights"), 1, "one worker");
    assert_eq!(
        snap.pool("flights")
            .unwrap()
            .per_worker
            .as_ref()
            .unwrap()
            .workers,
        1
    );
    let mut other = workers(&seg.name, 1);
    assert_eq!(capacity(&t, "flights"), 2, "a second process");
    drop(again);
    assert_eq!(capacity(&t, "flights"), 2);
    kill(&mut other, 1);
    // Our anchor may be reaping it already (this call then finds nothing left to reap,
    // and the tickets follow when the anchor's reap ends).
    t.reap_dead().unwrap();
    common::wait_until(
        None,
        "the dead worker's ticket to go",
        Duration::from_millis(1),
        || capacity(&t, "flights") == 1,
    );
}

/// A tool's handle (`Table::open_tool`, what `shmtool rates` sets rates through)
/// registers to claim an unseen tenant's name, as a tool: the pool's tickets do not
/// move, and its process slot says what it is.
#[test]
fn a_tool_that_claims_a_tenant_is_no_worker() {
    let _g = serial();
    let (seg, t, _two) = flights_of_two_workers("pwtool");
    let tool = Table::open_tool(&seg.name).unwrap();
    tool.set_rates("newcomer", 5, 0).unwrap(); // claims the name: registers
    match mine(&t).as_slice() {
        [p] => assert!(p.tool && p.status == "live", "{p:?}"),
        other => panic!("the tool registered once: {other:?}"),
    }
    assert_eq!(capacity(&t, "flights"), 2, "a tool is no worker");
    assert_eq!(t.rates("newcomer").unwrap(), (5, 0));
    // The same process's worker handle counts it, once.
    t.register().unwrap();
    assert_eq!(capacity(&t, "flights"), 3);
    drop(tool);
    assert_eq!(capacity(&t, "flights"), 3);
    let snap = t.snapshot();
    assert!(
        snap.processes.iter().all(|p| !p.tool),
        "the tool's slot is gone"
    );
}

/// A worker's own handle that only claims tenant names (a master setting its tenants'
/// rates at boot, before it forks; an admin script) is no worker either: it registers
/// as a tool. Its first acquire makes it a worker, counted from then on, in the same
/// slot, and its drop frees that slot.
#[test]
fn a_process_that_only_sets_rates_is_no_worker_until_it_acquires() {
    let _g = serial();
    let (seg, t, _two) = flights_of_two_workers("pwrates");
    t.set_rates("acme", 100, 0).unwrap(); // claims the name: registers
    t.charge("globex", 0).unwrap(); // claims another
    let me = std::process::id();
    let slot = match mine(&t).as_slice() {
        [p] if p.tool && p.status == "live" => p.slot,
        other => panic!("registered once, as a tool: {other:?}"),
    };
    assert_eq!(capacity(&t, "flights"), 2, "claiming names makes no worker");
    let lease = t.try_acquire(&Request::new("flights", "acme")).unwrap();
    assert!(lease.is_ok(), "granted: the pool grew for this worker");
    match mine(&t).as_slice() {
        [p] => assert!(!p.tool && p.slot == slot, "a worker now, same slot: {p:?}"),
        other => panic!("one registration: {other:?}"),
    }
    assert_eq!(capacity(&t, "flights"), 3);
    drop(lease);
    let observer = Table::open_observer(&seg.name).unwrap();
    drop(t);
    assert!(
        observer.snapshot().processes.iter().all(|p| p.pid != me),
        "its slot is freed on drop"
    );
    assert_eq!(observer.snapshot().pool("flights").unwrap().capacity, 2);
}

#[test]
fn min_tickets_is_capped_at_the_worker_count() {
    let _g = serial();
    let seg = Seg::new("mintickets");
    let cfg = Config::with_pools(vec![PoolConfig::per_worker("redis", 0.1, 2)]);
    let t = seg.create(&cfg);
    let mut one = workers(&seg.name, 1);
    assert_eq!(capacity(&t, "redis"), 1, "min(1 worker, max(ceil(0.1), 2))");
    let mut two = workers(&seg.name, 2);
    assert_eq!(capacity(&t, "redis"), 2, "min(3, max(ceil(0.3), 2))");
    kill(&mut one, 1);
    kill(&mut two, 2);
    t.reap_dead().unwrap();
}

#[test]
fn a_shrunk_pool_revokes_nothing_and_admits_again_below_the_new_capacity() {
    let _g = serial();
    let seg = Seg::new("shrink");
    let cfg = Config::with_pools(vec![PoolConfig::per_worker("flights", 1.0, 0)]);
    let t = seg.create(&cfg);
    let mut pids = workers(&seg.name, 2);
    t.register().unwrap(); // three workers now: capacity 3
    assert_eq!(capacity(&t, "flights"), 3);
    let held: Vec<_> = (0..3)
        .map(|i| {
            t.try_acquire_at(&Request::new("flights", "a"), 10 + i)
                .unwrap()
                .unwrap()
        })
        .collect();
    kill_down_to(&t, &mut pids, "flights", 1);
    assert_eq!(
        t.snapshot().pool("flights").unwrap().in_use,
        3,
        "nothing revoked"
    );
    // Held past today's tickets is how a shrunk pool drains, not a broken invariant:
    // `shmtool check` passes it, and `inspect` says why the pool refuses.
    let tool = |cmd: &str| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_shmtool"))
            .args([cmd, &seg.name])
            .output()
            .expect("run shmtool");
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        eprintln!(
            "shmtool {cmd}: {text}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        (o.status.code().expect("exited"), text)
    };
    let (code, text) = tool("check");
    assert_eq!(code, 0, "{text}");
    let (code, text) = tool("inspect");
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains(
            "flights has 3 in use, past its 1 tickets: it shrank as workers went \
             (holders keep what they hold), and grants again once less than 1 is in use"
        ),
        "{text}"
    );
    // Under its share, b needs all three units to come free, not one: the explanation
    // says so, and its first turn is three units' turnover away (10 ms holds assumed
    // until one is seen: 10 ms x 3 / 3 in use, half of it, plus at most a quarter of
    // jitter), not one unit's (3.3 ms, 2 to 3 ms).
    let r = t
        .try_acquire_at(&Request::new("flights", "b"), 13)
        .unwrap()
        .unwrap_err();
    assert_eq!(r.reason, fairshm::Reason::PoolFull, "{r}");
    assert!(
        r.explanation()
            .contains("it is admitted as soon as 3 units free."),
        "{r}"
    );
    assert!(
        r.explanation().contains(
            "which holds more than its capacity (3 of 1 in use: it shrank as workers \
             went, and its holders keep what they hold)"
        ),
        "{r}"
    );
    let hint = r.retry_after_ms.unwrap();
    assert!((5..=8).contains(&hint), "{hint} ms: {r}");
    drop(held);
    let again = t.try_acquire_at(&Request::new("flights", "a"), 20).unwrap();
    assert!(
        again.is_ok(),
        "admitted once in_use fell under the new capacity"
    );
    let r = t
        .try_acquire_at(&Request::new("flights", "b"), 20)
        .unwrap()
        .unwrap_err();
    assert_eq!(r.facts.capacity, 1);
}

/// A waiter of a per_worker pool is woken when a new worker grows the pool, not only by
/// a release: at quota 0.5 a third worker brings a second ticket, and the worker
/// blocked behind the first holder gets it at once. Its backup sweep is an hour away,
/// and nobody releases.
#[test]
fn a_worker_that_grows_the_pool_wakes_its_waiters() {
    let _g = serial();
    let seg = Seg::new("growwake");
    let cfg = Config::with_pools(vec![PoolConfig::per_worker("flights", 0.5, 0)]);
    let t = seg.create(&cfg); // the parent only observes
    let flag = common::shared_words(1);
    let name = seg.name.clone();
    let mut kids = common::Children(vec![fork_child_holding(&name, flag)]);
    common::wait_until(
        Some(kids[0]),
        "the holder",
        Duration::from_micros(100),
        || flag[0].load(std::sync::atomic::Ordering::SeqCst) == 1,
    );
    assert_eq!(capacity(&t, "flights"), 1);
    let name = seg.name.clone();
    kids.push(common::fork_child(move || {
        let t = Table::open(&name).unwrap();
        t.set_sweep_interval(Duration::from_secs(3600));
        let start = std::time::Instant::now();
        let got = t.acquire(&Request::new("flights", "b"), Duration::from_secs(20));
        // Granted well before the timeout: by the wake, not by a sweep or a deadline.
        if got.unwrap().is_ok() && start.elapsed() < Duration::from_secs(10) {
            0
        } else {
            1
        }
    }));
    common::wait_until(
        Some(kids[1]),
        "the waiter to sleep",
        Duration::from_millis(1),
        || t.snapshot().pool("flights").unwrap().waiters != 0,
    );
    assert_eq!(capacity(&t, "flights"), 1, "two workers, ceil(0.5 * 2)");
    // Three workers, ceil(0.5 * 3): a second ticket, which only the growth can give
    // the waiter (the holder keeps the first).
    let mut third = workers(&seg.name, 1);
    let waiter = kids.0.remove(1);
    assert_eq!(
        common::wait(waiter),
        0,
        "the waiter was granted the new ticket"
    );
    assert_eq!(
        capacity(&t, "flights"),
        1,
        "the waiter gone: two workers again"
    );
    kill(&mut third, 1);
    kids.kill_all();
}

/// Fewer workers lower every share of an `evict` pool as an arrival does: a spawn asleep
/// with nothing to evict may now evict its own tenant's idle residents, with nothing
/// released, so the shrink wakes the spawns. A pool that does not evict is not woken
/// by a shrink: lower shares admit nobody there. (A waiter is counted by hand: the
/// wake's counter is the fact; the segment's words are read through `internals`.)
#[cfg(feature = "internals")]
#[test]
fn a_shrunk_evict_pool_wakes_its_spawns() {
    use fairshm::region::Region;
    use std::sync::atomic::Ordering::SeqCst;
    let _g = serial();
    let seg = Seg::new("shrinkwake");
    let cfg = Config::with_pools(vec![
        PoolConfig::per_worker("flights", 1.0, 0),
        PoolConfig::per_worker("objects", 1.0, 0).evicting(),
    ]);
    let t = seg.create(&cfg);
    let mut pids = workers(&seg.name, 2);
    t.register().unwrap(); // three workers now: capacity 3
    assert_eq!(capacity(&t, "objects"), 3);
    let (flights, objects) = (t.region().pool(0), t.region().pool(1));
    flights.waiters.fetch_add(1, SeqCst);
    objects.waiters.fetch_add(1, SeqCst);
    let before = (flights.wake.load(SeqCst), objects.wake.load(SeqCst));
    kill_down_to(&t, &mut pids, "objects", 1);
    assert_ne!(
        objects.wake.load(SeqCst),
        before.1,
        "the evict pool shrank and woke no spawn"
    );
    assert_eq!(
        flights.wake.load(SeqCst),
        before.0,
        "a pool that does not evict was woken by its shrink"
    );
    flights.waiters.fetch_sub(1, SeqCst);
    objects.waiters.fetch_sub(1, SeqCst);
}

/// Forks a worker that takes a ticket of `flights` for "a", sets `flag[0]` and holds it
/// until killed.
fn fork_child_holding(
    name: &str,
    flag: &'static [std::sync::atomic::AtomicU64],
) -> nix::unistd::Pid {
    let name = name.to_owned();
    common::fork_child(move || {
        let t = Table::open(&name).unwrap();
        let lease = t
            .try_acquire(&Request::new("flights", "a"))
            .unwrap()
            .unwrap();
        flag[0].store(1, std::sync::atomic::Ordering::SeqCst);
        loop {
            std::thread::sleep(Duration::from_secs(60));
            let _ = &lease;
        }
    })
}

/// More units than a per_worker pool's tickets now is an error that says whether more
/// workers would make room: they would up to the tickets of a worker in every process
/// slot; past those it can never be granted, as for a fixed pool.
#[test]
fn units_over_the_tickets_say_whether_more_workers_would_make_room() {
    let _g = serial();
    let seg = Seg::new("unitsover");
    let mut cfg = Config::with_pools(vec![PoolConfig::per_worker("flights", 0.5, 0)]);
    cfg.max_processes = 8;
    let t = seg.create(&cfg);
    t.register().unwrap();
    assert_eq!(capacity(&t, "flights"), 1);
    let ask = |units| {
        let req = Request::new("flights", "a").units(units);
        match t.try_acquire(&req) {
            Err(e @ fairshm::Error::UnitsExceedCapacity { capacity: 1, .. }) => e.to_string(),
            other => panic!("{units} units: {other:?}"),
        }
    };
    let later = ask(4);
    assert!(
        later.contains("once more workers have registered"),
        "{later}"
    );
    assert!(!later.contains("never"), "{later}");
    let never = ask(5);
    assert!(
        never.contains("at most 4 with every process slot a worker: this can never be granted"),
        "{never}"
    );
}
