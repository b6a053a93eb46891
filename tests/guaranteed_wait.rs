//! A guaranteed pool's waiter in another process: `acquire_timeout` sleeps on the
//! pool's wake word, and a release or the reap of a killed holder wakes it as soon as
//! the units come back, long before the retry-after it was given (the loan's declared
//! end), which is when it would otherwise ask again.
mod common;

use std::sync::atomic::{
    AtomicU64,
    Ordering::{Relaxed, SeqCst},
};
use std::time::Duration;

use common::{
    Children, Seg, fork_child, mono_ms as now_ms, mono_ns as now_ns, shared_words, wait_until,
};
use fairshm::region::Region;
use fairshm::{Config, FairnessUnit, Table};

/// The loan's declared hold: the retry-after the waiter is given is about this.
const LOAN_MS: u64 = 4_000;

/// A guaranteed pool "ceiling" shared evenly by tenants a and b, with the given
/// reclaim horizon and idleness.
fn even_pool(ceiling: u32, (horizon, idle): (u32, u32)) -> Config {
    common::guaranteed(
        "ceiling",
        ceiling,
        FairnessUnit::Cost,
        &[("a", 1), ("b", 1)],
        (horizon, idle),
        4,
    )
}

/// b holds its own 50 and a's idle 50 (a loan of `LOAN_MS`) in one child; a waits for
/// its guarantee in another; `free` gives the loan back (a release, or a SIGKILL of the
/// holder). Returns how long after `free` began the waiter held its grant, in ms.
fn waiter_served_after(seg: &Seg, free: impl FnOnce(&AtomicU64, nix::unistd::Pid)) -> u64 {
    // idle_after 20 s: the waiter's own asks come every 10 s at most, and its
    // retry-after is the loan's end, so only a wake serves it sooner.
    let c = even_pool(100, (5_000, 20_000));
    let t: Table = seg.create(&c);
    let words = shared_words(4);
    let (step, served_ns, outcome) = (&words[0], &words[1], &words[2]);
    let mut kids = Children(Vec::new());
    let name = seg.name.clone();
    let holder = fork_child(move || {
        let t = Table::open(&name).unwrap();
        let g = t.guaranteed("ceiling").unwrap();
        let own = g.acquire("b", 50, 60_000, now_ms()).unwrap();
        let loan = g.acquire("b", 50, LOAN_MS, now_ms()).unwrap();
        assert!(own.is_ok() && loan.is_ok(), "{own:?} {loan:?}");
        step.store(1, SeqCst);
        wait_until(None, "the release's turn", Duration::from_millis(1), || {
            step.load(SeqCst) == 3
        });
        g.release(loan.unwrap().id, now_ms()).unwrap();
        wait_until(None, "the end", Duration::from_millis(1), || {
            step.load(SeqCst) == 4
        });
        0
    });
    kids.push(holder);
    wait_until(Some(holder), "the loan", Duration::from_millis(1), || {
        step.load(SeqCst) == 1
    });
    let name = seg.name.clone();
    kids.push(fork_child(move || {
        let t = Table::open(&name).unwrap();
        let g = t.guaranteed("ceiling").unwrap();
        step.store(2, SeqCst);
        let got = g
            .acquire_timeout("a", 50, 50, Duration::from_secs(30))
            .unwrap();
        served_ns.store(now_ns(), SeqCst);
        outcome.store(if got.is_ok() { 1 } else { 2 }, SeqCst);
        0
    }));
    // The waiter asked and was refused (the loan holds half its guarantee), with the
    // loan's end as its retry-after; then it is asleep.
    let g = t.guaranteed("ceiling").unwrap();
    wait_until(
        None,
        "the waiter's refusal",
        Duration::from_millis(1),
        || g.stats(0).unwrap().tenants[0].refusals >= 1,
    );
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        outcome.load(SeqCst),
        0,
        "the waiter ended before the loan came back"
    );
    let freed_ns = now_ns();
    free(step, holder);
    wait_until(None, "the waiter's grant", Duration::from_millis(1), || {
        outcome.load(SeqCst) != 0
    });
    assert_eq!(outcome.load(SeqCst), 1, "the waiter was refused");
    let st = g.stats(0).unwrap();
    // Asked once, and again only when woken: not once per poll.
    assert_eq!(st.tenants[0].refusals, 1, "{:?}", st.tenants[0]);
    step.store(4, SeqCst);
    for code in kids.wait_all() {
        // 137: the holder SIGKILLed.
        assert!(code == 0 || code == 137, "a child exited {code}");
    }
    drop(t);
    (served_ns.load(SeqCst) - freed_ns) / 1_000_000
}

#[test]
fn an_early_release_wakes_the_waiter_in_another_process() {
    let seg = Seg::new("gw-release");
    let ms = waiter_served_after(&seg, |step, _| step.store(3, SeqCst));
    // Asked again only at its retry-after, it would have waited about LOAN_MS - 200.
    assert!(ms < 1_000, "served {ms} ms after the release");
}

#[test]
fn the_reap_of_a_killed_holder_wakes_the_waiter() {
    let seg = Seg::new("gw-kill");
    let ms = waiter_served_after(&seg, |_, holder| {
        nix::sys::signal::kill(holder, nix::sys::signal::Signal::SIGKILL).unwrap();
    });
    assert!(ms < 1_000, "served {ms} ms after the holder's SIGKILL");
}

/// An observer maps the segment read-only: it may read the wake word, but a wait, which
/// announces itself in the segment, is `ReadOnly` (it was a SIGSEGV through the C ABI).
#[test]
fn an_observer_cannot_wait_and_says_so() {
    let seg = Seg::new("gw-observer");
    let c = even_pool(10, (100, 150));
    let t: Table = seg.create(&c);
    let o = Table::open_observer(&seg.name).unwrap();
    let e = o.engine();
    let pool = e.guaranteed_pool("ceiling").unwrap();
    let seen = e.guaranteed_wake_seen(pool).unwrap();
    let until = std::time::Instant::now() + Duration::from_millis(10);
    let err = e.guaranteed_sleep(pool, seen, until, None).unwrap_err();
    assert!(matches!(err, fairshm::Error::ReadOnly { .. }), "{err}");
    drop(o);
    drop(t);
}

/// A long sleep is announced half `idle_after_ms` at a time: a waiter that asks to
/// sleep for seconds leaves `sleep_until_ms` at most that far ahead (so a waiter that
/// dies asleep makes releases wake nobody for no longer), and is still woken by a
/// release after several such parts.
#[test]
fn a_long_sleep_is_announced_in_parts_and_still_woken() {
    let seg = Seg::new("gw-parts");
    // idle_after 150 ms: parts of 75 ms.
    let c = even_pool(10, (100, 150));
    let t: Table = seg.create(&c);
    let e = t.engine();
    let pool = e.guaranteed_pool("ceiling").unwrap();
    let seen = e.guaranteed_wake_seen(pool).unwrap();
    let head = t.region().g_head_rec(0);
    std::thread::scope(|s| {
        let sleeper = s.spawn(|| {
            let until = std::time::Instant::now() + Duration::from_secs(10);
            let woken = e.guaranteed_sleep(pool, seen, until, None).unwrap();
            (woken, now_ns())
        });
        std::thread::sleep(Duration::from_millis(400));
        let ahead = head.sleep_until_ms.load(Relaxed) as i64 - now_ms() as i64;
        assert!(
            ahead <= 100,
            "announced {ahead} ms ahead, for a part of 75 ms"
        );
        assert!(!sleeper.is_finished(), "the sleep ended before any release");
        let g = t.guaranteed("ceiling").unwrap();
        let l = g.acquire("b", 1, 10, now_ms()).unwrap().unwrap();
        let released_ns = now_ns();
        g.release(l.id, now_ms()).unwrap();
        let (woken, back_ns) = sleeper.join().unwrap();
        assert!(woken);
        assert!(back_ns >= released_ns);
        let ms = (back_ns - released_ns) / 1_000_000;
        assert!(ms < 1_000, "woken {ms} ms after the release");
    });
}

/// A waiters' stamp written far ahead (a hostile writer) would make every release wake
/// nobody with a system call until then: `check` names it and `repair` clears it.
#[test]
fn a_hostile_sleep_stamp_is_named_by_check_and_cleared_by_repair() {
    let seg = Seg::new("gw-hostile");
    let c = even_pool(10, (100, 150));
    let t: Table = seg.create(&c);
    assert_eq!(t.check().unwrap(), Vec::<String>::new());
    let stamp = &t.region().g_head_rec(0).sleep_until_ms;
    // What a waiter announces is within half idle_after (75 ms): not a finding.
    stamp.store(now_ms() + 70, Relaxed);
    assert_eq!(t.check().unwrap(), Vec::<String>::new());
    stamp.store(now_ms() + 3_600_000, Relaxed);
    let found = t.check().unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("\"ceiling\"") && found[0].contains("sleep_until_ms"),
        "{found:?}"
    );
    t.repair().unwrap();
    assert_eq!(stamp.load(Relaxed), 0);
    assert_eq!(t.check().unwrap(), Vec::<String>::new());
}

/// With the shortest idleness a config allows (a horizon of 0, `idle_after_ms` 1), a
/// waiter announces sleeps of 1 ms, the ms rounded up: such a stamp is no finding.
#[test]
fn the_shortest_announcement_is_no_finding() {
    let seg = Seg::new("gw-shortest");
    let c = even_pool(10, (0, 1));
    let t: Table = seg.create(&c);
    let stamp = &t.region().g_head_rec(0).sleep_until_ms;
    // The most a waiter announces: the ms it read, a part of 1 ms, and 1 for rounding.
    stamp.store(now_ms() + 2, Relaxed);
    assert_eq!(t.check().unwrap(), Vec::<String>::new());
    stamp.store(now_ms() + 1_000, Relaxed);
    assert_eq!(t.check().unwrap().len(), 1);
}

/// `acquire_timeout_cancellable`: a waiter given a retry-after of seconds (the loan's
/// declared end) and a timeout of 10 s returns the last refusal as soon as another
/// thread cancels its token; a token already cancelled still lets the first ask
/// through, and ends the wait at its first refusal.
#[test]
fn a_cancel_ends_a_guaranteed_wait_at_once() {
    let seg = Seg::new("gw-cancel");
    let c = even_pool(100, (5_000, 20_000));
    let t: Table = seg.create(&c);
    let g = t.guaranteed("ceiling").unwrap();
    let own = g.acquire("b", 50, 60_000, now_ms()).unwrap().unwrap();
    let loan = g.acquire("b", 50, LOAN_MS, now_ms()).unwrap().unwrap();
    let cancel = fairshm::Cancel::new();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let start = now_ns();
            let r =
                g.acquire_timeout_cancellable("a", 50, 100, Duration::from_secs(10), Some(&cancel));
            (r, start, now_ns())
        });
        std::thread::sleep(Duration::from_millis(200));
        assert!(!waiter.is_finished(), "the wait ended before the cancel");
        let cancelled_ns = now_ns();
        cancel.cancel();
        let (r, start, back) = waiter.join().unwrap();
        let refusal = r.unwrap().unwrap_err();
        assert_eq!(refusal.reason, fairshm::Reason::GuaranteeOnLoan);
        assert_eq!(refusal.blocking_leases, vec![loan.name.clone()]);
        assert!(back >= cancelled_ns && start < cancelled_ns);
        let ms = (back - cancelled_ns) / 1_000_000;
        assert!(ms < 1_000, "the wait ended {ms} ms after the cancel");
    });
    // Cancelled already: refused, it returns at once; granted, it holds the grant.
    let start = now_ns();
    let r = g
        .acquire_timeout_cancellable("a", 50, 100, Duration::from_secs(10), Some(&cancel))
        .unwrap();
    assert_eq!(r.unwrap_err().reason, fairshm::Reason::GuaranteeOnLoan);
    assert!((now_ns() - start) / 1_000_000 < 1_000);
    g.release(loan.id, now_ms()).unwrap();
    let served = g
        .acquire_timeout_cancellable("a", 50, 100, Duration::from_secs(10), Some(&cancel))
        .unwrap()
        .unwrap();
    g.release(served.id, now_ms()).unwrap();
    g.release(own.id, now_ms()).unwrap();
}

/// A release wakes only the waiters it may serve: a waiter of c, which needs to borrow,
/// sleeps through twenty releases of b's own leases (units back to b's guarantee, which
/// b, active, does not lend), and asks no more often for them (its refusals stay at
/// one); the release of c's own lease wakes it and serves it at once.
#[test]
fn a_release_wakes_only_the_waiters_it_may_serve() {
    sleeps_through_others_releases("gw-targeted", None);
}

/// The same with a cancel token, whose sleep (`futex_waitv`) every release wakes in the
/// kernel: the epochs tell it that b's releases were not for it, and it sleeps on.
#[test]
fn a_cancellable_waiter_sleeps_on_past_others_releases() {
    let cancel = fairshm::Cancel::new();
    sleeps_through_others_releases("gw-targeted-c", Some(&cancel));
}

fn sleeps_through_others_releases(name: &str, cancel: Option<&fairshm::Cancel>) {
    let seg = Seg::new(name);
    // idle_after 20 s: the waiter asks again on its own only every 10 s.
    let t: Table = seg.create(&common::three_even());
    let g = t.guaranteed("ceiling").unwrap();
    let a = g.acquire("a", 30, 60_000, now_ms()).unwrap().unwrap();
    let c_own = g.acquire("c", 30, 60_000, now_ms()).unwrap().unwrap();
    // b is active (a release is activity), so not lendable for 20 s.
    let first = g.acquire("b", 10, 1_000, now_ms()).unwrap().unwrap();
    g.release(first.id, now_ms()).unwrap();
    let refusals = |g: &fairshm::guaranteed::Guaranteed<'_>| {
        let s = g.stats(now_ms()).unwrap();
        s.tenants.iter().find(|t| t.name == "c").unwrap().refusals
    };
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let r = g.acquire_timeout_cancellable("c", 10, 100, Duration::from_secs(30), cancel);
            (r, now_ns())
        });
        wait_until(
            None,
            "the waiter's first refusal",
            Duration::from_millis(1),
            || refusals(&g) == 1,
        );
        for _ in 0..20 {
            let own = g.acquire("b", 10, 1_000, now_ms()).unwrap().unwrap();
            g.release(own.id, now_ms()).unwrap();
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(
            refusals(&g),
            1,
            "the waiter of c asked again after releases that could not serve it"
        );
        assert!(!waiter.is_finished());
        let released = now_ns();
        g.release(c_own.id, now_ms()).unwrap();
        let (r, back) = waiter.join().unwrap();
        let lease = r.unwrap().expect("served once its own units came back");
        let ms = (back - released) / 1_000_000;
        assert!(ms < 1_000, "served {ms} ms after the release");
        g.release(lease.id, now_ms()).unwrap();
    });
    g.release(a.id, now_ms()).unwrap();
}
