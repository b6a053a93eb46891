//! Blocking acquire on process-shared futexes.
mod common;

use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use common::{Seg, fork_child, one_pool, wait};
use fairshm::region::Region;
use fairshm::{Reason, Request, Table};

fn waiters(t: &Table) -> u32 {
    t.region().pool(0).waiters.load(SeqCst)
}

/// Waits (polling every `every`, with the common deadline) until a waiter of pool 0 is
/// announced, failing at once if `child` (the waiter, when it is a process) ended.
fn wait_asleep(t: &Table, child: Option<nix::unistd::Pid>, every: Duration) {
    common::wait_until(child, "the waiter to sleep", every, || waiters(t) != 0);
}

/// Forks a process that opens table `name`, runs `first` on it, takes the only permit
/// of pool `requests` for tenant "a" and holds it for a minute (to be killed); returns
/// once it holds.
fn fork_holder(name: &str, first: fn(&Table)) -> nix::unistd::Pid {
    let w = common::shared_words(4);
    let name = name.to_owned();
    let holder = fork_child(move || {
        let t = Table::open(&name).unwrap();
        first(&t);
        let _lease = t
            .try_acquire(&Request::new("requests", "a"))
            .unwrap()
            .unwrap();
        w[2].store(1, SeqCst);
        std::thread::sleep(Duration::from_secs(60));
        0
    });
    common::wait_until(Some(holder), "the holder", Duration::from_millis(1), || {
        w[2].load(SeqCst) != 0
    });
    holder
}

/// Tenant "b"'s figures in pool `requests`, now.
fn tenant_b(t: &Table) -> fairshm::stats::TenantSnap {
    t.snapshot()
        .pool("requests")
        .unwrap()
        .tenants
        .iter()
        .find(|x| x.name == "b")
        .unwrap()
        .clone()
}

#[test]
fn a_release_wakes_a_waiter_in_another_process_without_losing_the_wake() {
    let seg = Seg::new("wake");
    let t = seg.create(&one_pool(1));
    let w = common::shared_words(4);
    let mut lat = Vec::new();
    for round in 0..20 {
        let lease = t
            .try_acquire(&Request::new("requests", "a"))
            .unwrap()
            .unwrap();
        let name = seg.name.clone();
        let child = fork_child(move || {
            let t = Table::open(&name).unwrap();
            let got = t
                .acquire(&Request::new("requests", "b"), Duration::from_secs(5))
                .unwrap();
            w[1].store(fairshm::clock::now_ns() / 1000, SeqCst);
            if got.is_ok() { 0 } else { 3 }
        });
        wait_asleep(&t, Some(child), Duration::from_micros(200));
        std::thread::sleep(Duration::from_millis(1));
        w[0].store(fairshm::clock::now_ns() / 1000, SeqCst);
        lease.release().unwrap();
        assert_eq!(wait(child), 0, "round {round}: the waiter was not granted");
        lat.push(w[1].load(SeqCst).saturating_sub(w[0].load(SeqCst)));
    }
    lat.sort_unstable();
    eprintln!(
        "release -> waiter granted, other process: p50 {} us, max {} us",
        lat[10], lat[19]
    );
    // A lost wake-up would show as the 250 ms backup sweep.
    assert!(
        lat[19] < 50_000,
        "a waiter waited {} us: a lost wake-up",
        lat[19]
    );
}

#[test]
fn a_timeout_is_a_timed_out_refusal_that_says_what_it_waited_for() {
    let seg = Seg::new("timeout");
    let t = seg.create(&one_pool(1));
    let _held = t
        .try_acquire(&Request::new("requests", "a"))
        .unwrap()
        .unwrap();
    let start = Instant::now();
    let r = t
        .acquire(&Request::new("requests", "b"), Duration::from_millis(60))
        .unwrap()
        .unwrap_err();
    assert!(start.elapsed() >= Duration::from_millis(60));
    assert_eq!(r.reason, Reason::TimedOut);
    assert!(
        r.explanation().contains("timed out") && r.explanation().contains("full"),
        "{}",
        r.explanation()
    );
    let b = tenant_b(&t);
    assert!(
        b.refusals.iter().any(|(k, n)| k == "timed_out" && *n == 1),
        "{:?}",
        b.refusals
    );
}

/// A waiting acquire is one request: however often it tries again (here its sweep,
/// every 2 ms, for 150 ms), it counts one refusal by the rule, one hint and no early
/// return, logs one decision, takes one turn, and its end one `timed_out`; one served
/// after a wait counts its first refusal and its grant.
#[test]
fn a_waiting_acquire_counts_and_logs_once_however_often_it_tries() {
    let seg = Seg::new("wait-once");
    let t = seg.create(&one_pool(1));
    t.set_sweep_interval(Duration::from_millis(2));
    let held = t
        .try_acquire(&Request::new("requests", "a"))
        .unwrap()
        .unwrap();
    let r = t
        .acquire(&Request::new("requests", "b"), Duration::from_millis(150))
        .unwrap()
        .unwrap_err();
    assert_eq!(r.reason, Reason::TimedOut);
    let first = tenant_b(&t);
    let count = |k: &str, x: &fairshm::stats::TenantSnap| {
        x.refusals
            .iter()
            .find(|(n, _)| n == k)
            .map_or(0, |(_, c)| *c)
    };
    assert_eq!(
        (count("pool_full", &first), count("timed_out", &first)),
        (1, 1),
        "{:?}",
        first.refusals
    );
    assert_eq!((first.hints, first.early_returns), (1, 0));
    let bi = t.engine().tenant("b").unwrap().index() as u32;
    let logged = |t: &Table| {
        fairshm::decisions::read_all(t.region())
            .0
            .iter()
            .filter(|l| l.entry.tenant == bi)
            .map(|l| fairshm::decisions::outcome_name(l.entry.outcome))
            .collect::<Vec<_>>()
    };
    assert_eq!(logged(&t), ["pool_full"]);
    // Served after a wait: its first refusal and its grant.
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            held.release().unwrap();
        });
        let got = t
            .acquire(&Request::new("requests", "b"), Duration::from_secs(10))
            .unwrap()
            .expect("served once a released");
        got.release().unwrap();
    });
    let then = tenant_b(&t);
    assert_eq!(
        (count("pool_full", &then), count("timed_out", &then)),
        (2, 1),
        "{:?}",
        then.refusals
    );
    assert_eq!(then.grants, 1);
    assert_eq!((then.hints, then.early_returns), (2, 0));
    assert_eq!(logged(&t), ["pool_full", "pool_full", "granted"]);
}

/// The robust-futex path alone: the backup sweep is set to an hour, so a waiter served
/// at all was woken by the kernel's OWNER_DIED wake.
#[test]
fn a_waiter_behind_a_killed_holder_is_woken_by_the_kernel() {
    let seg = Seg::new("killedholder");
    let t = seg.create(&one_pool(1));
    t.set_sweep_interval(Duration::from_secs(3600));
    let mut lat = Vec::new();
    for round in 0..10 {
        let holder = fork_holder(&seg.name, |_| {});
        let waited = std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let got = t
                    .acquire(&Request::new("requests", "b"), Duration::from_secs(30))
                    .unwrap();
                (got.is_ok(), Instant::now())
            });
            wait_asleep(&t, None, Duration::from_millis(1));
            std::thread::sleep(Duration::from_millis(2));
            let snap = t.snapshot();
            let h = snap
                .processes
                .iter()
                .find(|p| p.pid == holder.as_raw() as u32)
                .unwrap();
            assert_eq!((h.anchor, h.watched), ("alive", true), "round {round}");
            let killed = Instant::now();
            nix::sys::signal::kill(holder, nix::sys::signal::SIGKILL).unwrap();
            let (ok, at) = waiter.join().unwrap();
            assert!(ok, "round {round}: the waiter timed out: no death wake");
            at - killed
        });
        assert_eq!(wait(holder), 128 + 9);
        lat.push(waited);
    }
    lat.sort_unstable();
    eprintln!(
        "holder SIGKILLed -> waiter granted (kernel wake, no sweep): p50 {} us, max {} us",
        lat[5].as_micros(),
        lat[9].as_micros()
    );
}

/// A waiter in a process whose anchor could not start watches the processes ahead of
/// it itself: with no anchor alive anywhere and no sweep, only the kernel's wake of the
/// waiter (on the dead holder's owner word) can serve it, and the waiter reaps.
#[test]
fn an_unanchored_waiter_is_woken_by_the_kernel_for_a_dead_holder() {
    let seg = Seg::new("unanchoredwaiter");
    let t = seg.create(&one_pool(1)); // this process never registers: no anchor here
    let holder = fork_holder(&seg.name, |_| {});
    let name = seg.name.clone();
    let waiter = fork_child(move || {
        let t = Table::open(&name).unwrap();
        t.set_sweep_interval(Duration::from_secs(3600));
        t.register().unwrap();
        t.engine().detach_anchor();
        let got = t
            .acquire(&Request::new("requests", "b"), Duration::from_secs(20))
            .unwrap();
        if got.is_ok() { 0 } else { 1 }
    });
    wait_asleep(&t, Some(waiter), Duration::from_millis(1));
    std::thread::sleep(Duration::from_millis(20));
    nix::sys::signal::kill(holder, nix::sys::signal::SIGKILL).unwrap();
    assert_eq!(wait(holder), 128 + 9);
    assert_eq!(
        wait(waiter),
        0,
        "the unanchored waiter was not woken for the death"
    );
    let snap = t.snapshot();
    let death = snap
        .deaths
        .iter()
        .find(|d| d.pid == holder.as_raw() as u32)
        .expect("the holder's death is recorded");
    assert_eq!(death.how, "waiter");
    assert_eq!(death.noticed_by, waiter.as_raw() as u32);
}

/// The backup: an unanchored holder (its anchor word cleared, as if its anchor could
/// not start) is found by the waiter's periodic sweep.
#[test]
fn the_sweep_serves_a_waiter_behind_an_unanchored_dead_holder() {
    let seg = Seg::new("sweep");
    let t = seg.create(&one_pool(1));
    t.set_sweep_interval(Duration::from_millis(20));
    let holder = fork_holder(&seg.name, |t| {
        let slot = t.register().unwrap();
        t.region().proc_slot(slot).owner_futex.store(0, SeqCst);
    });
    nix::sys::signal::kill(holder, nix::sys::signal::SIGKILL).unwrap();
    assert_eq!(wait(holder), 128 + 9);
    let got = t
        .acquire(&Request::new("requests", "b"), Duration::from_secs(30))
        .unwrap();
    assert!(got.is_ok(), "the sweep did not reap the unanchored holder");
}

#[test]
fn under_share_waiters_are_woken_first() {
    let seg = Seg::new("prefer");
    let t = seg.create(&one_pool(2));
    t.set_sweep_interval(Duration::from_secs(3600));
    let big: Vec<_> = (0..2)
        .map(|_| {
            t.try_acquire(&Request::new("requests", "big"))
                .unwrap()
                .unwrap()
        })
        .collect();
    std::thread::scope(|s| {
        // small is under its share (pool_full): class UNDER.
        let small = s.spawn(|| {
            t.acquire(&Request::new("requests", "small"), Duration::from_secs(5))
                .unwrap()
                .is_ok()
        });
        common::wait_until(None, "the small waiter", Duration::from_millis(1), || {
            waiters(&t) >= 1
        });
        // big, now past its share of 1, waits as class OVER.
        let big2 = s.spawn(|| {
            t.acquire(&Request::new("requests", "big"), Duration::from_millis(400))
                .unwrap()
                .map_err(Box::new) // a thread's result: the refusal is large
        });
        common::wait_until(None, "the big waiter", Duration::from_millis(1), || {
            waiters(&t) >= 2
        });
        let mut big = big;
        let released = Instant::now();
        big.pop().unwrap().release().unwrap();
        assert!(
            small.join().unwrap(),
            "the under-share waiter was not served"
        );
        assert!(
            released.elapsed() < Duration::from_millis(90),
            "served by the sweep, not the wake"
        );
        let r = big2.join().unwrap().unwrap_err();
        assert_eq!(
            r.reason,
            Reason::TimedOut,
            "the over-share waiter must not get the permit"
        );
        drop(big);
    });
}

/// A waiter refused past its share only because a tenant that left still counts is
/// admitted when that tenant's window ends, though nothing is released to wake it: it
/// sleeps no longer than the pool's next recount of the active set.
#[test]
fn an_over_share_waiter_is_admitted_when_a_tenant_leaves_the_active_set() {
    let seg = Seg::new("depart");
    let t = seg.create(&one_pool(8));
    t.set_sweep_interval(Duration::from_secs(3600));
    let held = common::admitted_when_b_leaves(&t, "requests", |_| {}, Reason::OverShare);
    assert_eq!(t.snapshot().held("requests", "a"), 4);
    drop(held);
}

/// `Duration::MAX` is "wait for ever": granted at once when there is room, and after a
/// release when there is not (`Instant + Duration::MAX` panicked before any try).
#[test]
fn a_timeout_of_duration_max_waits_for_ever_and_never_overflows() {
    let seg = Seg::new("forever");
    let t = seg.create(&one_pool(1));
    t.set_sweep_interval(Duration::MAX);
    let req = Request::new("requests", "a");
    let lease = t
        .acquire(&req, Duration::MAX)
        .unwrap()
        .expect("room: granted at once");
    let t = &t;
    // The test's own deadline: a waiter not granted by then is cancelled (and the
    // assertion below fails) rather than waiting for ever.
    let cancel = fairshm::Cancel::new();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let deadline = Instant::now() + common::DEADLINE;
            while waiters(t) == 0 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            drop(lease);
            while !done.load(SeqCst) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            cancel.cancel();
        });
        let got = t
            .acquire_cancellable(&Request::new("requests", "b"), Duration::MAX, Some(&cancel))
            .unwrap();
        done.store(true, SeqCst);
        assert!(
            got.is_ok(),
            "granted after the release, not cancelled at the deadline"
        );
    });
    let g = fairshm::Config::with_pools(vec![]).guaranteed(
        fairshm::GuaranteedConfig::new("tokens", 10)
            .unit(fairshm::FairnessUnit::Requests)
            .tenant("a", 1)
            .reclaim_horizon_ms(100)
            .idle_after_ms(150),
    );
    let gseg = Seg::new("forever-g");
    let gt = gseg.create(&g);
    let pool = gt.guaranteed("tokens").unwrap();
    let grant = pool.acquire_timeout("a", 1, 10, Duration::MAX).unwrap();
    assert!(grant.is_ok(), "a guaranteed pool with room grants at once");
}

/// A waiter SIGKILLed while it waits never takes itself out of the pool's `waiters`:
/// its reaper does (from its slot's count), or every later release of the pool would
/// bump `wake` and call `FUTEX_WAKE` for nobody, and `inspect` would show a waiter for
/// ever. A live waiter's announcement stays: it is still woken.
#[test]
fn a_waiter_killed_while_it_waits_is_taken_out_of_the_pools_waiters() {
    let seg = Seg::new("killedwaiter");
    let t = seg.create(&one_pool(1));
    t.set_sweep_interval(Duration::from_secs(3600));
    // Killed and reaped when the test ends, even by a failed assertion.
    let mut kids = common::Children(vec![fork_holder(&seg.name, |_| {})]);
    let holder = kids[0];
    let forked_waiter = |tenant: &'static str| {
        let name = seg.name.clone();
        fork_child(move || {
            let t = Table::open(&name).unwrap();
            let got = t.acquire(&Request::new("requests", tenant), Duration::from_secs(60));
            i32::from(!matches!(got, Ok(Ok(_))))
        })
    };
    // SIGKILLs child `pid` of `kids` and reaps it: its wait code.
    let kill = |kids: &mut common::Children, pid| {
        nix::sys::signal::kill(pid, nix::sys::signal::SIGKILL).unwrap();
        let code = wait(pid);
        kids.retain(|&k| k != pid);
        code
    };
    let doomed = forked_waiter("b");
    kids.push(doomed);
    wait_asleep(&t, Some(doomed), Duration::from_millis(1));
    assert_eq!(waiters(&t), 1);
    assert_eq!(kill(&mut kids, doomed), 128 + 9);
    // The holder's anchor reaps the dead waiter, and takes it out.
    common::wait_until(
        Some(holder),
        "the dead waiter taken out of `waiters`",
        Duration::from_millis(1),
        || waiters(&t) == 0,
    );
    // A live waiter behind the holder is announced, and served when the holder dies.
    let live = forked_waiter("c");
    kids.push(live);
    wait_asleep(&t, Some(live), Duration::from_millis(1));
    assert_eq!(waiters(&t), 1);
    assert_eq!(kill(&mut kids, holder), 128 + 9);
    assert_eq!(kids.wait_all(), vec![0], "the live waiter was served");
    assert_eq!(waiters(&t), 0);
    assert_eq!(t.snapshot().pool("requests").unwrap().waiters, 0);
}

/// A turn of [`herd_wakes`], given "t"'s and "u"'s leases.
type Turn = dyn for<'a> Fn(&'a Table, &mut Vec<fairshm::Lease<'a>>, &mut Vec<fairshm::Lease<'a>>);

/// In a pool of `cap` (floor 5%, a window of 20 s: no recount of the active set
/// during the test), tenant "t" holds `holds.0`, past its share of half, "u" holds
/// `holds.1`, and 8 acquires of one unit of "t"'s wait; then `turn` runs
/// `turns` times, 10 ms apart. Returns how often the waiters slept again meanwhile
/// (each, once per wake that did not serve it), and whether every waiter was served
/// once "t" and "u" let go.
fn herd_wakes(
    name: &str,
    cap: u32,
    holds: (usize, usize),
    turns: usize,
    turn: &Turn,
) -> (u64, bool) {
    const WAITERS: usize = 8;
    let seg = Seg::new(name);
    // A window of 20 s: no recount of the active set wakes the waiters meanwhile.
    let pool = fairshm::PoolConfig::new("requests", cap).window_ms(20_000);
    let t = seg.create(&fairshm::Config::with_pools(vec![pool]));
    t.set_sweep_interval(Duration::from_secs(3600));
    let take = |tenant| {
        t.try_acquire(&Request::new("requests", tenant))
            .unwrap()
            .unwrap()
    };
    let mut t_held: Vec<_> = (0..holds.0).map(|_| take("t")).collect();
    let mut u_held: Vec<_> = (0..holds.1).map(|_| take("u")).collect();
    let req = Request::new("requests", "t");
    let body = || {
        for _ in 0..turns {
            turn(&t, &mut t_held, &mut u_held);
            std::thread::sleep(Duration::from_millis(10));
        }
        (t_held, u_held)
    };
    let (woke, served) = common::herd(&t, &req, "requests", WAITERS, body, drop);
    eprintln!("{name}: the waiters slept again {woke} times in {turns} turns");
    assert_eq!(waiters(&t), 0);
    (woke, served)
}

/// "t" holds 7 of 8, past its share of 4, and waits for more; "u" turns its one unit
/// over again and again. None of those releases can admit "t" (the pool stays at its
/// floor), so its waiters sleep through them: the release wakes, past their share,
/// only its own tenant's sleepers (`waiting::released_by`). Before, each of "u"'s
/// releases woke one of "t"'s waiters, which, refused, woke the next: all 8 woke for
/// every unit (360 wakes in 40 turns; 40 with the pass rule alone; now none).
#[test]
fn a_busy_tenants_waiters_do_not_all_wake_for_another_tenants_unit() {
    let (woke, served) = herd_wakes("herd-turnover", 8, (7, 1), 40, &|t, _, u| {
        u.clear();
        u.push(
            t.try_acquire(&Request::new("requests", "u"))
                .unwrap()
                .unwrap(),
        );
    });
    // None is woken (the window is 20 s: no recount either); 40 if each unit woke one.
    assert!(
        woke < 8,
        "the waiters woke {woke} times in 40 turns of another tenant's unit"
    );
    assert!(served, "a waiter was not served once the pool emptied");
}

/// "t" holds 38 of 40 (floor 2), past its share of 20, "u" holds 2 as one lease, and 8
/// acquires of one unit of "t"'s wait. Each turn "t" lets go of one unit (no room past
/// the floor: it wakes none of its waiters) and "u" of its two at once, which makes
/// room past the floor for one and wakes two (a release wakes as many as it gives
/// back): one is admitted, the other is refused past its share with the floor
/// reached, and passes its wake to no waiter of its own tenant, all of whose asks are
/// refused alike (`waiting::pass_bits`); then "u" takes its two back. Without that,
/// each refused waiter woke the next: all the waiters left, every turn (38 or 39
/// sleeps in 6 turns, against 12: the one served, which then waits for the end, and
/// the one refused, each turn).
#[test]
fn a_waiter_refused_at_the_floor_passes_no_wake_to_its_own_tenant() {
    const TURNS: usize = 6;
    let seg = Seg::new("herd-floor");
    let pool = fairshm::PoolConfig::new("requests", 40).window_ms(20_000);
    let t = seg.create(&fairshm::Config::with_pools(vec![pool]));
    t.set_sweep_interval(Duration::from_secs(3600));
    let mut mine: Vec<_> = (0..38)
        .map(|_| {
            t.try_acquire(&Request::new("requests", "t"))
                .unwrap()
                .unwrap()
        })
        .collect();
    let two = Request::new("requests", "u").units(2);
    let mut theirs = t.try_acquire(&two).unwrap().unwrap();
    let req = Request::new("requests", "t");
    let body = || {
        for turn in 0..TURNS {
            drop(mine.pop());
            drop(theirs);
            std::thread::sleep(Duration::from_millis(10));
            theirs = t
                .try_acquire(&two)
                .unwrap()
                .unwrap_or_else(|r| panic!("turn {turn}: u's two: {r}"));
        }
        (mine, theirs)
    };
    let (woke, served) = common::herd(&t, &req, "requests", 8, body, drop);
    eprintln!("herd-floor: the waiters slept again {woke} times in {TURNS} turns");
    // Two a turn: the one served (which then waits for the end) and the one refused.
    assert!(
        woke <= 2 * TURNS as u64 + 2,
        "the waiters slept again {woke} times in {TURNS} turns"
    );
    assert!(served, "a waiter was not served once the pool emptied");
}

/// "t" holds 38 of 40 (floor 2), past its share of 20, "u" holds 2; each turn "t"
/// releases one of its units, and "u" takes it. "t" stays past its share, and no ask
/// fits past the floor: its release wakes none of its waiters
/// (`admission::under_share_now` says it is not under its share). Before, it woke one,
/// which, refused, woke the next: all 8 each turn (162 wakes in 18 turns); with the
/// pass rule (`a_waiter_refused_at_the_floor_passes_no_wake_to_its_own_tenant`) and
/// without that check, the one woken each turn (18); now none.
#[test]
fn a_waiter_refused_past_its_share_passes_no_wake_to_its_own_tenant() {
    let (woke, served) = herd_wakes("herd-pass", 40, (38, 2), 18, &|t, mine, u| {
        drop(mine.pop());
        std::thread::sleep(Duration::from_millis(10));
        u.push(
            t.try_acquire(&Request::new("requests", "u"))
                .unwrap()
                .unwrap(),
        );
    });
    // None (no recount in a window of 20 s); 18 if each release woke one.
    assert!(woke < 9, "the waiters woke {woke} times in 18 turns");
    assert!(served, "a waiter was not served once the pool emptied");
}

/// A reap (a death) wakes up to as many under-share sleepers as it gave back units, and
/// every sleeper past its share: the dead process's tenants hold less now, and their
/// sleepers past their share, in other processes, may be under it, which a wake of
/// `units` sleepers could leave out (it may go to the under-share ones first).
/// `waiting::reaped`, which `peers::announce` and `repair` call; before, a reap woke
/// as a release does, up to `units` in all.
#[test]
fn a_reap_wakes_every_sleeper_past_its_share() {
    use fairshm::waiting::{self, Class};
    const N: u32 = 3;
    let seg = Seg::new("reap-wakes");
    let t = seg.create(&one_pool(4));
    let pool = t.region().pool(0);
    // As `blocking` does before it sleeps.
    pool.waiters.fetch_add(N, SeqCst);
    let seq = waiting::half(pool.wake.load(SeqCst), Class::Over);
    let woke: Vec<bool> = std::thread::scope(|s| {
        let sleepers: Vec<_> = (0..N)
            .map(|i| {
                s.spawn(move || {
                    let start = Instant::now();
                    let until = start + Duration::from_secs(5);
                    let woken = waiting::sleep(pool, Class::Over, seq, 1 << i, &[], until);
                    woken && start.elapsed() < Duration::from_secs(4)
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(100)); // asleep
        waiting::reaped(pool, 1);
        sleepers.into_iter().map(|h| h.join().unwrap()).collect()
    });
    pool.waiters.fetch_sub(N, SeqCst);
    assert!(woke.iter().all(|&w| w), "woken by the reap: {woke:?}");
}

/// `waiters` written low from outside (0, with a waiter asleep) lets a release skip its
/// wake: the sleeper waits, its unit free, for its sweep (an hour here) or its
/// deadline. `check` names the difference; `repair` recounts `waiters` from the process
/// slots and wakes the sleepers, since releases may have skipped them: the waiter is
/// served at once.
#[test]
fn a_waiters_count_written_low_is_recounted_by_repair_and_the_sleeper_served() {
    use std::sync::Arc;
    const PATIENCE: Duration = Duration::from_secs(10);
    let seg = Seg::new("waiters-low");
    let t = Arc::new(seg.create(&one_pool(1)));
    t.set_sweep_interval(Duration::from_secs(3600));
    let mine = t
        .try_acquire(&Request::new("requests", "a"))
        .unwrap()
        .unwrap()
        .into_id();
    let t2 = t.clone();
    let waiter = std::thread::spawn(move || {
        let start = Instant::now();
        let got = t2
            .acquire(&Request::new("requests", "b"), PATIENCE)
            .unwrap();
        (start.elapsed(), got.ok().map(|l| l.into_id()))
    });
    wait_asleep(&t, None, Duration::from_millis(1));
    // Past its try: asleep.
    std::thread::sleep(Duration::from_millis(100));
    t.region().pool(0).waiters.store(0, SeqCst);
    assert_eq!(
        t.check().unwrap(),
        vec![
            "pool 0: waiters is 0, its processes announce 1 (a waiter or its reaper killed \
             between its two counts, or a write from outside; repair recounts it)"
                .to_owned()
        ]
    );
    // The release reads no waiter: no wake.
    t.release_id(mine).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert!(!waiter.is_finished(), "served without a wake");
    assert_eq!(t.repair().unwrap().pools[0].waiters, Some((0, 1)));
    let (took, lease) = waiter.join().unwrap();
    assert!(
        lease.is_some() && took < PATIENCE / 2,
        "the waiter was {} after {took:?}",
        if lease.is_some() {
            "granted"
        } else {
            "refused"
        }
    );
    t.release_id(lease.unwrap()).unwrap();
    assert_eq!(waiters(&t), 0);
    assert_eq!(t.check().unwrap(), Vec::<String>::new());
}

/// A waiter leaves `waiters` without taking it below 0: a count written low from
/// outside (or recounted by `repair` without a waiter stalled between its two counts)
/// would otherwise wrap round to `u32::MAX`, and every release of the pool would make a
/// wake for nobody from then on.
#[test]
fn a_waiter_leaving_a_count_written_low_takes_it_to_0_not_round() {
    let seg = Seg::new("waiters-wrap");
    let t = seg.create(&one_pool(1));
    let _mine = t
        .try_acquire(&Request::new("requests", "a"))
        .unwrap()
        .unwrap();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            t.acquire(&Request::new("requests", "b"), Duration::from_millis(500))
                .unwrap()
                .unwrap_err()
                .reason
        });
        wait_asleep(&t, None, Duration::from_millis(1));
        t.region().pool(0).waiters.store(0, SeqCst);
        assert_eq!(waiter.join().unwrap(), Reason::TimedOut);
    });
    assert_eq!(waiters(&t), 0);
}
