//! An explicit `now` may start at 0, as seed 001's traces do: the same calls decide
//! the same whatever the origin of their times. (The segment reads a stamp of 0 as
//! "never"; until its times became the callers' + 1, a call at t = 0 was taken as
//! t = 1, so a tenant that asked at 0 counted until 1000 and not 999, and a rate's
//! tokens of t = 0 came back a millisecond late.)
mod common;

use common::{Seg, one_pool};
use fairshm::{Outcome, Reason, Table};

const WINDOW: u64 = 1000;

/// One step of the trace's result: what an acquire got, or what a snapshot saw.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Granted,
    Refused {
        reason: Reason,
        retry_after_ms: u64,
        active_weight: u64,
    },
    Active {
        tenants: usize,
        weight: u64,
    },
}

/// The trace at times `origin + t`: `a` asks once at t = 0; `b` takes 7 of 8 at
/// t = 500..507 and asks for an 8th at 999 (a still counts: over its share) and at 1000
/// (a has left: granted); `r`, limited to 10 requests a second, asks 11 times at t = 0
/// and again at 99 and 100. Returns every result, and `a`'s last activity as the
/// snapshot gives it, less the origin.
fn trace(origin: u64) -> (Vec<Seen>, Option<u64>) {
    let seg = Seg::new("origin");
    let t: Table = seg.create(&one_pool(8));
    t.set_rates("r", 10, 0).unwrap();
    let e = t.engine();
    let p = e.pool("requests").unwrap();
    let [a, b, r] = ["a", "b", "r"].map(|n| e.tenant(n).unwrap());
    let mut seen = Vec::new();
    let mut ask = |tenant, at: u64, keep: bool| {
        let got = match e.acquire(p, tenant, 1, 0, origin + at).unwrap() {
            Outcome::Granted(id) => {
                if !keep {
                    e.release(id, origin + at).unwrap();
                }
                Seen::Granted
            }
            Outcome::Refused(x) => Seen::Refused {
                reason: x.reason,
                retry_after_ms: x.retry_after_ms,
                active_weight: x.active_weight,
            },
        };
        seen.push(got);
    };
    ask(a, 0, false);
    for at in 500..507 {
        ask(b, at, true);
    }
    ask(b, WINDOW - 1, false);
    ask(b, WINDOW, false);
    for _ in 0..11 {
        ask(r, 0, false);
    }
    ask(r, 99, false);
    ask(r, 100, false);
    for at in [0, WINDOW - 1, WINDOW] {
        let snap = t.snapshot_at(origin + at);
        let pool = snap.pool("requests").unwrap();
        seen.push(Seen::Active {
            tenants: pool.active_tenants,
            weight: pool.active_weight,
        });
    }
    let snap = t.snapshot_at(origin + WINDOW);
    let last = snap.pools[0]
        .tenants
        .iter()
        .find(|x| x.name == "a")
        .and_then(|x| x.last_active_ms);
    (seen, last.map(|l| l - origin))
}

#[test]
fn a_tenant_that_asked_at_t0_leaves_the_active_set_at_the_window() {
    let (seen, last) = trace(0);
    // b's 8th at 999: a, who asked at 0, still counts, so b is at its share of 4.
    assert!(
        matches!(
            seen[8],
            Seen::Refused {
                reason: Reason::OverShare,
                active_weight: 2,
                ..
            }
        ),
        "{:?}",
        seen[8]
    );
    // At 1000 a's window has ended: b alone gets the pool.
    assert_eq!(seen[9], Seen::Granted, "a no longer counts at t = WINDOW");
    assert_eq!(last, Some(0), "a's last activity is reported at t = 0");
}

#[test]
fn a_rate_at_t0_gives_its_burst_and_its_next_token_on_time() {
    let (seen, _) = trace(0);
    let r = &seen[10..21];
    assert!(r[..10].iter().all(|s| *s == Seen::Granted), "{r:?}");
    assert!(
        matches!(
            r[10],
            Seen::Refused {
                reason: Reason::RateLimited,
                retry_after_ms: 100,
                ..
            }
        ),
        "the 11th waits one interval: {:?}",
        r[10]
    );
    assert!(matches!(seen[21], Seen::Refused { .. }), "{:?}", seen[21]);
    assert_eq!(seen[22], Seen::Granted, "the next token comes at t = 100");
}

#[test]
fn the_same_trace_decides_the_same_at_any_origin() {
    let at0 = trace(0);
    for origin in [1, 7, 123_456] {
        assert_eq!(trace(origin), at0, "origin {origin}");
    }
}
