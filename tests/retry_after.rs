//! The retry-after estimator through the engine, under explicit `now`: a tenant's
//! refused requests get turns one interval apart (its mean hold over the units that
//! turn over for it), the backlog is reported, the clock drains with time, the same
//! sequence replays to the same hints, and the statistics count hints and early
//! returns.
mod common;

use common::{Seg, one_pool};
use fairshm::{Engine, LeaseId, Outcome, PoolId, Reason, Refused, Table, TenantId};

fn handles(t: &Table) -> (PoolId, TenantId, TenantId) {
    let e = t.engine();
    (
        e.pool("requests").unwrap(),
        e.tenant("heavy").unwrap(),
        e.tenant("light").unwrap(),
    )
}

fn grant(e: &Engine, p: PoolId, t: TenantId, now: u64) -> LeaseId {
    match e.acquire(p, t, 1, 0, now).unwrap() {
        Outcome::Granted(id) => id,
        Outcome::Refused(r) => panic!("refused at {now}: {r:?}"),
    }
}

fn refused(e: &Engine, p: PoolId, t: TenantId, now: u64) -> Refused {
    match e.acquire(p, t, 1, 0, now).unwrap() {
        Outcome::Refused(r) => r,
        Outcome::Granted(id) => panic!("granted {id} at {now}"),
    }
}

/// Heavy has held and released one permit for 12 ms (its mean hold), then holds 6 of a
/// pool of 8 while light holds 1: heavy is past its share of 4, at capacity less the
/// floor.
fn setup(seg: &Seg) -> Table {
    let t = seg.create(&one_pool(8));
    let (p, heavy, light) = handles(&t);
    let e = t.engine();
    let id = grant(e, p, heavy, 1_000);
    e.release(id, 1_012).unwrap();
    grant(e, p, light, 1_010);
    for _ in 0..6 {
        grant(e, p, heavy, 1_010);
    }
    t
}

#[test]
fn over_share_refusals_get_turns_one_interval_apart() {
    let seg = Seg::new("retry-turns");
    let t = setup(&seg);
    let (p, heavy, _) = handles(&t);
    let e = t.engine();
    // Holds of 12 ms over 6 held units: one of heavy's permits frees every 2 ms.
    let mut hints = Vec::new();
    for k in 0..5 {
        let r = refused(e, p, heavy, 1_020);
        assert_eq!(r.reason, Reason::OverShare);
        assert_eq!((r.interval_us, r.queued), (2_000, k), "refusal {k}");
        hints.push(r.retry_after_ms);
    }
    for (k, h) in hints.iter().enumerate() {
        // Turn k is due (k + 1/2) x 2 ms from now, plus a jitter under half a ms.
        let base = 2 * k as u64 + 1;
        assert!(*h == base || *h == base + 1, "hint {k}: {h} ms");
    }
    // The explanation says what the estimate rests on.
    let r = refused(e, p, heavy, 1_020);
    let text = fairshm::Refusal::new("requests", "heavy", r).explanation();
    assert!(
        text.contains("5 refused requests of this tenant's are queued ahead"),
        "{text}"
    );
    assert!(text.contains("about every 2.0 ms"), "{text}");
}

#[test]
fn the_clock_drains_as_time_passes() {
    let seg = Seg::new("retry-drain");
    let t = setup(&seg);
    let (p, heavy, _) = handles(&t);
    let e = t.engine();
    for _ in 0..10 {
        refused(e, p, heavy, 1_020);
    }
    // 10 turns of 2 ms (all at one instant: no gap between refusals known yet), the
    // first 1 ms away: due by 1_039. At 1_030, 9 ms of turns are still ahead: four of
    // the interval that the
    // gap of 10 ms since the last refusal gives (one refusal per five turnovers:
    // 2 ms x 1.2, see `retry`).
    let r = refused(e, p, heavy, 1_030);
    assert_eq!((r.interval_us, r.queued), (2_400, 4));
    // Long after, the queue is empty again: the next turn is half an interval away.
    let r = refused(e, p, heavy, 2_000);
    assert_eq!(r.queued, 0);
    assert!((1..=2).contains(&r.retry_after_ms), "{r:?}");
}

#[test]
fn pool_full_turns_follow_the_pools_releases() {
    let seg = Seg::new("retry-full");
    let t = seg.create(&one_pool(8));
    let (p, heavy, light) = handles(&t);
    let e = t.engine();
    // Light's mean hold: 16 ms.
    let id = grant(e, p, light, 1_000);
    e.release(id, 1_016).unwrap();
    for _ in 0..7 {
        grant(e, p, heavy, 1_020);
    }
    grant(e, p, light, 1_020);
    // Light holds 1 < its share: refused pool_full, and any of the 8 in use can free
    // room: one turn every 16 / 8 = 2 ms, the first half of one away.
    let r = refused(e, p, light, 1_021);
    assert_eq!(
        (r.reason, r.interval_us, r.queued),
        (Reason::PoolFull, 2_000, 0)
    );
    assert!((1..=2).contains(&r.retry_after_ms), "{r:?}");
}

/// Pool-full turns come as often as the holders' permits free, whoever asks: heavy's
/// mean hold is 200 ms and light's 10 ms, and with heavy holding 7 of the 8 in use a
/// release is due every 1 / (7 / 200 + 1 / 10) = 7.4 ms, not every 10 / 8 ms as
/// light's own holds would say (nor every (7 x 200 + 10) / 8 / 8 = 22 ms, as an
/// average of the holds weighted by units would).
#[test]
fn pool_full_turns_follow_the_holders_holds_not_the_askers() {
    let seg = Seg::new("retry-holders");
    let t = seg.create(&one_pool(8));
    let (p, heavy, light) = handles(&t);
    let e = t.engine();
    let id = grant(e, p, heavy, 1_000);
    e.release(id, 1_200).unwrap();
    let id = grant(e, p, light, 1_000);
    e.release(id, 1_010).unwrap();
    for _ in 0..7 {
        grant(e, p, heavy, 2_300);
    }
    grant(e, p, light, 2_300);
    // A window after the last decisions: the scan of the active set that this refusal
    // runs first sees the holders as they are.
    let r = refused(e, p, light, 3_400);
    assert_eq!(r.reason, Reason::PoolFull);
    assert_eq!(r.queued, 0);
    assert!((7_400..=7_410).contains(&r.interval_us), "{r:?}");
    // The first turn half an interval away (3.7 ms), plus a jitter under a quarter.
    assert!((4..=6).contains(&r.retry_after_ms), "{r:?}");
    let text = fairshm::Refusal::new("requests", "light", r).explanation();
    assert!(text.contains("about every 7.4 ms"), "{text}");
}

#[test]
fn the_same_sequence_replays_to_the_same_hints() {
    let run = |tag: &str| {
        let seg = Seg::new(tag);
        let t = setup(&seg);
        let (p, heavy, _) = handles(&t);
        let e = t.engine();
        (0..50u64)
            .map(|k| refused(e, p, heavy, 1_020 + k / 7).retry_after_ms)
            .collect::<Vec<_>>()
    };
    let (a, b) = (run("retry-replay-a"), run("retry-replay-b"));
    assert_eq!(a, b);
    // Jittered: not all hints are whole multiples of the interval.
    assert!(a.windows(2).any(|w| w[1] != w[0] + 2));
}

#[test]
fn statistics_count_hints_and_early_returns() {
    let seg = Seg::new("retry-stats");
    let t = setup(&seg);
    let (p, heavy, _) = handles(&t);
    let e = t.engine();
    let first = refused(e, p, heavy, 1_020); // due at 1_022 or 1_023
    let second = refused(e, p, heavy, 1_021); // before the first ran out: early
    let third = refused(e, p, heavy, 1_040); // after both: not early
    let tenant = |now| {
        let snap = t.snapshot_at(now);
        snap.pools[0]
            .tenants
            .iter()
            .find(|x| x.name == "heavy")
            .cloned()
            .unwrap()
    };
    let s = tenant(1_040);
    assert_eq!((s.hints, s.early_returns), (3, 1));
    let mean = (first.retry_after_ms + second.retry_after_ms + third.retry_after_ms) as f64 / 3.0;
    assert!((s.mean_hint_ms - mean).abs() < 1e-9);
    // A grant clears the marker: a refusal right after it is not early.
    let lease = t
        .snapshot_at(1_040)
        .leases
        .iter()
        .find(|l| l.tenant == "heavy")
        .map(|l| LeaseId {
            index: l.index as u32,
            generation: l.generation,
        })
        .expect("heavy holds leases");
    refused(e, p, heavy, 1_041); // a hint not run out yet (early: 2 now)
    e.release(lease, 1_041).unwrap();
    grant(e, p, heavy, 1_041); // a grant
    refused(e, p, heavy, 1_041);
    assert_eq!(tenant(1_041).early_returns, 2, "not early after a grant");
}

/// The backlog in the explanation agrees in number: none, one, several.
#[test]
fn the_backlog_is_told_in_the_right_number() {
    let base = Refused {
        reason: Reason::OverShare,
        retry_after_ms: 5,
        units: 1,
        in_use: 4,
        held: 2,
        capacity: 4,
        floor: 1,
        weight: 1,
        active_weight: 2,
        short: 1,
        queued: 0,
        interval_us: 2_500,
        queue_stretch_pct: 100,
        server_queue_us: 0,
        rate_per_s: 0,
    };
    let text = |queued| {
        fairshm::Refusal::new("requests", "heavy", Refused { queued, ..base }).explanation()
    };
    assert!(
        text(0).contains("No request of this tenant's is queued ahead"),
        "{}",
        text(0)
    );
    let one = text(1);
    assert!(
        one.contains("1 refused request of this tenant's is queued ahead"),
        "{one}"
    );
    let two = text(2);
    assert!(
        two.contains("2 refused requests of this tenant's are queued ahead"),
        "{two}"
    );
}

/// An interval under 0.1 ms (a burst of releases a few us apart) is said as such, not
/// as "about every 0.0 ms"; 0.1 ms and over keeps its figure.
#[test]
fn a_sub_tenth_of_a_ms_interval_is_not_told_as_zero() {
    let base = Refused {
        reason: Reason::OverShare,
        retry_after_ms: 1,
        units: 1,
        in_use: 9,
        held: 9,
        capacity: 10,
        floor: 1,
        weight: 1,
        active_weight: 2,
        short: 1,
        queued: 0,
        interval_us: 3,
        queue_stretch_pct: 100,
        server_queue_us: 0,
        rate_per_s: 0,
    };
    let text = |interval_us| {
        fairshm::Refusal::new(
            "requests",
            "heavy",
            Refused {
                interval_us,
                ..base
            },
        )
        .explanation()
    };
    for us in [0, 3, 49] {
        let t = text(us);
        assert!(t.contains("more often than every 0.1 ms"), "{us} us: {t}");
        assert!(!t.contains("0.0 ms"), "{us} us: {t}");
    }
    let t = text(100);
    assert!(t.contains("about every 0.1 ms"), "{t}");
}

/// Alone in the active set, a tenant past its share is told its whole backlog: no
/// departure can raise its share, so its hint is not shortened to the next change of
/// the set (the window, 1 s), however deep the backlog.
#[test]
fn a_lone_tenant_is_told_its_whole_backlog() {
    let seg = Seg::new("retry-alone");
    let t = seg.create(&one_pool(4));
    let (p, heavy, _) = handles(&t);
    let e = t.engine();
    for _ in 0..4 {
        grant(e, p, heavy, 1_000);
    }
    // No release observed and no hold declared: the default 10 ms over 4 held units,
    // one permit every 2.5 ms; refusal k is told (k + 1/2) x 2.5 ms and a jitter.
    let mut last = None;
    for k in 0..600u64 {
        let r = refused(e, p, heavy, 1_010);
        assert_eq!(
            (r.reason, r.queued, r.interval_us),
            (Reason::OverShare, k as u32, 2_500)
        );
        let turn = (k * 2_500 + 1_250).div_ceil(1000);
        assert!(
            (turn..=turn + 1).contains(&r.retry_after_ms),
            "refusal {k}: hint {} ms, turn {turn} ms",
            r.retry_after_ms
        );
        last = Some(r);
    }
    let r = last.unwrap();
    assert!(
        r.retry_after_ms > 1_000,
        "past the window: {}",
        r.retry_after_ms
    );
    let text = fairshm::Refusal::new("requests", "heavy", r).explanation();
    assert!(
        text.contains(&format!("its turn is expected in {} ms", r.retry_after_ms)),
        "{text}"
    );
}

/// Heavy holds 7 of a pool of 8 (past its share of 4, at capacity less the floor) with
/// a mean hold of 12 ms (one of its permits frees about every 1.7 ms); light asked at
/// 1_501 and holds nothing. The refusal at 2_000 rescans the set: light's window is the
/// first to end, at 2_501.
fn setup_light_quiet(seg: &Seg) -> Table {
    let t = seg.create(&one_pool(8));
    let (p, heavy, light) = handles(&t);
    let e = t.engine();
    let id = grant(e, p, heavy, 1_000);
    e.release(id, 1_012).unwrap();
    let id = grant(e, p, light, 1_500);
    e.release(id, 1_501).unwrap();
    for _ in 0..7 {
        grant(e, p, heavy, 1_600);
    }
    t
}

/// When a refusal's turn is due, ms rounded up: one interval per turn ahead and half of
/// one for the first (a hint is never shorter unless it was cut).
fn turn_ms(r: &Refused) -> u64 {
    ((2 * r.queued as u64 + 1) * r.interval_us as u64).div_ceil(2000)
}

/// A deep backlog of refusals at `now`: the last one.
fn backlog(e: &Engine, p: PoolId, t: TenantId, now: u64) -> Refused {
    let mut last = None;
    for _ in 0..600 {
        last = Some(refused(e, p, t, now));
    }
    let r = last.unwrap();
    assert_eq!(r.reason, Reason::OverShare);
    assert!(r.queued >= 599, "a backlog of {}", r.queued);
    r
}

/// With another tenant in the set that has been quiet since the last scan, a deep
/// backlog's hint is shortened to when that tenant leaves (the heavy tenant's share
/// grows then), and the explanation says so beside the turn it expected.
#[test]
fn a_hint_shortened_by_a_quiet_tenant_leaving_says_why() {
    let seg = Seg::new("retry-set");
    let t = setup_light_quiet(&seg);
    let (p, heavy, _) = handles(&t);
    let e = t.engine();
    let r = backlog(e, p, heavy, 2_000);
    assert_eq!(r.queued, 599);
    assert_eq!(
        r.retry_after_ms, 501,
        "light leaves at 2_501 unless it asks again"
    );
    let turn = turn_ms(&r);
    assert!(turn > 1_000, "the turn the hint was cut from: {turn} ms");
    let text = fairshm::Refusal::new("requests", "heavy", r).explanation();
    assert!(
        text.contains(&format!(
            "its turn is expected in {turn} ms, but another tenant, quiet since, leaves the \
             active set in 501 ms unless it asks again"
        )),
        "{text}"
    );
}

/// A tenant that keeps asking never leaves: once light has asked again, the heavy
/// tenant's hints are its backlog's, not all cut to the instant light could have left
/// (which, through real servers, sent ~50 waiting clients back at one instant, once a
/// window, into a set that had not changed).
#[test]
fn a_tenant_that_asks_again_does_not_shorten_hints() {
    let seg = Seg::new("retry-asks");
    let t = setup_light_quiet(&seg);
    let (p, heavy, light) = handles(&t);
    let e = t.engine();
    assert_eq!(
        backlog(e, p, heavy, 2_000).retry_after_ms,
        501,
        "cut while light is quiet"
    );
    let id = grant(e, p, light, 2_100);
    e.release(id, 2_101).unwrap();
    let r = backlog(e, p, heavy, 2_200);
    let turn = turn_ms(&r);
    assert!(
        r.retry_after_ms >= turn && r.retry_after_ms > 301,
        "light asked at 2_101: hint {} ms, turn {turn} ms",
        r.retry_after_ms
    );
    // The hints of the backlog are spread over its turns, not piled on one instant.
    let hints: std::collections::BTreeSet<u64> = (0..50)
        .map(|_| refused(e, p, heavy, 2_200).retry_after_ms)
        .collect();
    assert!(
        hints.len() > 40,
        "50 refusals, {} distinct hints",
        hints.len()
    );
}

/// A holder does not leave the active set (it counts a window from its release): with
/// light holding a permit, nothing shortens the heavy tenant's hints.
#[test]
fn a_holder_does_not_shorten_hints() {
    let seg = Seg::new("retry-holder");
    let t = setup(&seg);
    let (p, heavy, _) = handles(&t);
    let e = t.engine();
    // Light holds one since 1_010 (see `setup`); the refusals at 2_000 rescan the set.
    let r = backlog(e, p, heavy, 2_000);
    let turn = turn_ms(&r);
    assert!(
        r.retry_after_ms >= turn,
        "hint {} ms, turn {turn} ms",
        r.retry_after_ms
    );
}

/// The hint of heavy's first over-share refusal at `now` on a fresh `setup` table, with
/// `queued` its own wait in the server's queue (`None`: not known), after `notes`.
fn first_hint(name: &str, notes: &[(u64, u64)], queued: Option<u64>, now: u64) -> Refused {
    nth_hint(name, notes, 0, queued, now)
}

/// As [`first_hint`], after `earlier` refusals of heavy at `now` whose waits are not
/// known (a backlog of that many turns).
fn nth_hint(
    name: &str,
    notes: &[(u64, u64)],
    earlier: usize,
    queued: Option<u64>,
    now: u64,
) -> Refused {
    nth_hint_after(
        name,
        notes,
        earlier,
        queued,
        now,
        notes.first().map(|n| n.1),
    )
}

/// On a `setup` table (7 of 8 in use), light takes the last permit, is refused one more
/// by the full pool, and gives the permit back, all at `at`: a refusal of the pool
/// that leaves heavy's refusals and turns as they were.
fn light_refused(e: &Engine, p: PoolId, light: TenantId, at: u64) {
    let id = grant(e, p, light, at);
    assert_eq!(refused(e, p, light, at).reason, Reason::PoolFull);
    e.release(id, at).unwrap();
}

/// As [`nth_hint`]; with `refused_at`, the pool refuses light once at that instant
/// (see [`light_refused`]), before the first wait noted at or after it: a pool's queue
/// stretches hints only while its refusals are recent (their retries may be what the
/// queue holds). Heavy's own refusals, turns and hints are left as they were.
fn nth_hint_after(
    name: &str,
    notes: &[(u64, u64)],
    earlier: usize,
    queued: Option<u64>,
    now: u64,
    refused_at: Option<u64>,
) -> Refused {
    let seg = Seg::new(name);
    let t = setup(&seg);
    let (p, heavy, light) = handles(&t);
    let e = t.engine();
    let mut first = refused_at;
    for &(q, at) in notes {
        if let Some(f) = first.filter(|&f| f <= at) {
            light_refused(e, p, light, f);
            first = None;
        }
        e.note_queue(p, q, at).unwrap();
    }
    if let Some(f) = first {
        light_refused(e, p, light, f);
    }
    for _ in 0..earlier {
        refused(e, p, heavy, now);
    }
    match e.acquire_queued(p, heavy, 1, 0, now, queued).unwrap() {
        Outcome::Refused(r) => r,
        Outcome::Granted(id) => panic!("granted {id}"),
    }
}

/// A queue in the server (a window whose mean wait is over 1 ms past the base)
/// stretches an over-share tenant's hint by 1 + that queue in whole ms (at most 8 a window),
/// when other refused requests of the tenant are out (here one, refused just before:
/// a turn ahead), never a tenant under its share; clear windows ease it.
#[test]
fn a_standing_server_queue_stretches_over_share_hints() {
    let plain = nth_hint("queue-plain", &[], 1, None, 1_045);
    assert_eq!(
        (plain.reason, plain.queue_stretch_pct),
        (Reason::OverShare, 100)
    );
    // A window of 25 ms whose every request waited 30 ms: the base starts at 0 and
    // takes in 1/64 of its least (469 µs); the queue is the window's mean (each wait
    // counted at most 8 ms) over the base, the stretch 8.
    let notes = [(30_000, 1_020), (31_000, 1_030), (30_000, 1_045)];
    let r = nth_hint("queue-standing", &notes, 1, None, 1_045);
    assert_eq!(r.queue_stretch_pct, 800, "{r:?}");
    assert_eq!(r.server_queue_us, 8_000 - 469);
    // The same turn, 8x the hint, and a jitter of up to half of that.
    let h = plain.retry_after_ms;
    assert!(
        (8 * h..=12 * h).contains(&r.retry_after_ms),
        "{h} ms stretched: {r:?}"
    );
    assert_eq!((r.interval_us, r.queued), (plain.interval_us, plain.queued));
    let text = fairshm::Refusal::new("requests", "heavy", r).explanation();
    assert!(
        text.contains("in the server's queue") && text.contains("8.00x"),
        "{text}"
    );
    // A queue under the target stretches nothing.
    let low = [(900, 1_020), (900, 1_045)];
    assert_eq!(
        nth_hint("queue-low", &low, 1, None, 1_045).queue_stretch_pct,
        100
    );
    // Windows without a request ease it, 1/128 each (at least a sixteenth): 8x, then
    // 22 windows later 6.62x, 200 windows later none...
    let later = nth_hint("queue-eased", &notes, 1, None, 1_045 + 23 * 25);
    assert_eq!(later.queue_stretch_pct, 662, "{later:?}");
    let gone = nth_hint("queue-gone", &notes, 1, None, 1_045 + 200 * 25);
    assert_eq!(gone.queue_stretch_pct, 100, "{gone:?}");
    // ...and a request whose own wait asks for more gets that at once, when its tenant
    // has a backlog (turns promised ahead of it: its refused requests, whose retries
    // may be what the queue holds)...
    let second = nth_hint("queue-second", &[], 1, None, 1_045);
    assert_eq!((second.queued, second.queue_stretch_pct), (1, 100));
    assert_eq!(second.retry_after_ms, h);
    let own = nth_hint("queue-own", &[], 1, Some(5_000), 1_045);
    assert_eq!(own.queue_stretch_pct, 600, "1 + 5 ms over a base of 0");
    let h2 = second.retry_after_ms;
    assert!((6 * h2..=9 * h2).contains(&own.retry_after_ms), "{own:?}");
    assert_eq!(
        nth_hint("queue-own-low", &[], 1, Some(1_000), 1_045).queue_stretch_pct,
        100
    );
    // ...but not with none: no refused request of its tenant is waiting, so the queue
    // it waited in is not of its tenant's retries (a worker was busy), and a client that
    // pauses its whole tenant for the hint would idle the tenant's permits for it.
    let alone = first_hint("queue-own-first", &[], Some(5_000), 1_045);
    assert_eq!(
        (alone.queued, alone.queue_stretch_pct),
        (0, 100),
        "{alone:?}"
    );
    // Nor does the pool's queue stretch a tenant's first refusal: nothing else of its
    // is out.
    let first = first_hint("queue-first", &notes, Some(5_000), 1_045);
    assert_eq!(
        (first.queued, first.queue_stretch_pct, first.server_queue_us),
        (0, 100, 8_000 - 469),
        "{first:?}"
    );
    assert_eq!(first.retry_after_ms, alone.retry_after_ms);
}

/// The pool's stretch is for a tenant with other refused requests out: one whose
/// refusals come farther apart than the hints it is given (a client that honours a
/// hint as a pause of the whole tenant) has about one out at a time, and its hints
/// are not stretched, however long the queue stands; the same tenant coming back
/// before its hints ran out is.
#[test]
fn a_tenant_that_pauses_for_its_hints_is_not_stretched() {
    let seg = Seg::new("queue-paused");
    let t = setup(&seg);
    let (p, heavy, _) = handles(&t);
    let e = t.engine();
    let pool_stretch = |now| t.snapshot_at(now).pools[0].queue_stretch_pct;
    // A queue stands in every window (a request that got in at once and one that
    // waited 30 ms, counted 8: a mean 4 ms over the least); heavy is refused once every
    // 50 ms.
    let mut now = 1_020;
    let window = |now| {
        e.note_queue(p, 100, now).unwrap();
        e.note_queue(p, 30_000, now).unwrap();
    };
    window(now);
    let mut hints = Vec::new();
    for _ in 0..20 {
        now += 25;
        window(now);
        now += 25;
        window(now);
        let r = refused(e, p, heavy, now);
        assert_eq!((r.reason, r.queued), (Reason::OverShare, 0), "{r:?}");
        assert_eq!(r.queue_stretch_pct, 100, "at {now}: {r:?}");
        hints.push(r.retry_after_ms);
    }
    assert_eq!(pool_stretch(now), 25_600, "the pool's queue stands");
    assert!(hints.iter().all(|&h| h < 50), "{hints:?}");
    // Now ten of its requests come at once (clients that do not wait for each other):
    // the first has nothing of its tenant's out before it; from the third on each has
    // turns ahead, and is stretched, to the most. (The second's turn ahead, the
    // first's, is due within half an interval, which counts as come.)
    now += 25;
    window(now);
    let burst: Vec<_> = (0..10).map(|_| refused(e, p, heavy, now)).collect();
    assert_eq!((burst[0].queued, burst[0].queue_stretch_pct), (0, 100));
    for r in &burst[2..] {
        assert!(r.queued > 0, "{r:?}");
        assert_eq!(r.queue_stretch_pct, 25_600, "{r:?}");
    }
}

/// Under its share a tenant refused by a full pool gets in as soon as anything is
/// released (seed 000): its hint is never stretched.
#[test]
fn a_tenant_under_its_share_is_never_stretched() {
    let seg = Seg::new("queue-under");
    let t = setup(&seg);
    let (p, heavy, light) = handles(&t);
    let e = t.engine();
    // A refusal first: the queue below is then one that may hold retries.
    light_refused(e, p, light, 1_011);
    e.note_queue(p, 30_000, 1_020).unwrap();
    e.note_queue(p, 30_000, 1_045).unwrap();
    // Light holds 1 of its share of 4; one more fills the pool.
    grant(e, p, light, 1_045);
    match e
        .acquire_queued(p, light, 1, 0, 1_046, Some(30_000))
        .unwrap()
    {
        Outcome::Refused(r) => {
            assert_eq!(
                (r.reason, r.queue_stretch_pct),
                (Reason::PoolFull, 100),
                "{r:?}"
            );
        }
        Outcome::Granted(id) => panic!("granted {id}"),
    }
    // Heavy, over its share, is, once another of its refused requests is out.
    refused(e, p, heavy, 1_046);
    let r = refused(e, p, heavy, 1_046);
    assert_eq!((r.queued, r.queue_stretch_pct), (1, 800));
    // An unknown pool is an error.
    assert!(matches!(
        t.note_queue("nope", 1),
        Err(fairshm::Error::UnknownPool { .. })
    ));
}

/// A queue that stands while the pool refuses nothing is not retries: it stretches
/// nothing, however long it stands (a host that takes its CPUs away for a while makes
/// the server's own waits jump). A refusal opens the span in which it does, a second
/// (`server_queue::RETRY_SPAN_MS`, the longest stretched hint); after that span
/// without one, the windows count as clear and ease the stretch.
#[test]
fn a_queue_without_refusals_stretches_nothing() {
    let seg = Seg::new("queue-no-refusals");
    let t = setup(&seg);
    let (p, heavy, _) = handles(&t);
    let e = t.engine();
    let pool_stretch = |now| t.snapshot_at(now).pools[0].queue_stretch_pct;
    let span = 1_000; // server_queue::RETRY_SPAN_MS
    // Forty windows whose waits stand 30 ms over their least, no refusal: no stretch.
    let window = |now| {
        e.note_queue(p, 100, now).unwrap();
        e.note_queue(p, 30_000, now).unwrap();
    };
    let mut now = 1_020;
    for _ in 0..40 {
        window(now);
        now += 25;
    }
    window(now);
    assert_eq!(
        pool_stretch(now),
        100,
        "no refusal, no retries in the queue"
    );
    let r = refused(e, p, heavy, now);
    assert_eq!(r.queue_stretch_pct, 100, "{r:?}");
    // Refused now: the same windows stretch (5x a window here: 1 + a queue of 4 ms;
    // at most 256x).
    for _ in 0..4 {
        now += 25;
        window(now);
    }
    assert_eq!(pool_stretch(now), 25_600);
    // A span with no refusal: its windows ease the stretch, as clear ones do.
    let last_refusal = now - 100;
    while now <= last_refusal + span {
        now += 25;
        window(now);
    }
    let eased = pool_stretch(now);
    now += 25;
    window(now);
    assert!(
        pool_stretch(now) < eased && eased <= 25_600,
        "{eased} then {}",
        pool_stretch(now)
    );
    // 1/128 a window: 256x is gone within some 710 windows (18 s).
    for _ in 0..800 {
        now += 25;
        window(now);
    }
    assert_eq!(
        pool_stretch(now),
        100,
        "eased away while nothing is refused"
    );
}

/// A tenant under its share whose request does not fit a pool with room left needs
/// only what it is short of to come free: light asks for 2 with 1 free (7 of 8 in use),
/// and is admitted as soon as 1 unit frees, which the explanation says (it said 2).
#[test]
fn a_pool_full_refusal_names_what_must_come_free() {
    let seg = Seg::new("retry-short");
    let t = setup(&seg);
    let r = t
        .try_acquire_at(&fairshm::Request::new("requests", "light").units(2), 1_020)
        .unwrap()
        .unwrap_err();
    assert_eq!(
        (r.reason, r.facts.in_use, r.facts.short),
        (Reason::PoolFull, 7, 1)
    );
    assert!(
        r.explanation()
            .contains("it is admitted as soon as 1 unit frees."),
        "{r}"
    );
}
