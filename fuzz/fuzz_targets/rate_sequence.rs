//! Arbitrary sequences of rate calls (seed 000's "Rates, by policy"), applied through
//! the very functions that run on the mapping (`rates` over a heap region) and checked
//! against a token bucket written here from the seed, not from the library.
//!
//! The library keeps each bucket as one word, a theoretical arrival time. The oracle
//! keeps what the seed says a bucket is: its content, here measured in the time it
//! took to fill (ns, so that no rounding differs: a token of a bucket of `rate` per
//! second costs `1 s / rate` ns of it, rounded down as the library documents), refilled
//! by the time that passes and never holding more than one second's worth (the burst).
//! So, at every step:
//! - a request is admitted while its request bucket holds a token, and takes it; a
//!   refusal says when the bucket will hold one (`rate_limited`, to the ms, rounded up);
//! - work is charged after it is done, unconditionally, and may leave the work bucket
//!   below empty (debt): the charge says when it is paid (ms, rounded up), and while in
//!   debt every request is refused `work_debt` first, taking no request token;
//! - 0 is unbounded: nothing taken, nothing refused, no work charged to a bucket;
//! - a rate changed on a live segment applies at once to the bucket's content;
//! - a token given back (the request then erred) is as if never taken;
//! - `refill` (repair) fills both buckets;
//! - the report (`rates::state`) shows the tokens and debt of the same buckets, and
//!   counts every refusal and every unit of work charged.
//!
//! Input: chunks of 3 bytes `[op, a, b]`, for tenant `a % 3`:
//! - `op % 6` 0 or 1: a request, whose token (if it took one) is given back when `b`
//!   is odd;
//! - 2: `b << (3 * ((a >> 2) % 4))` units of work are charged;
//! - 3: time moves on by `b << (2 * ((a >> 2) % 4))` ms;
//! - 4: the rates are set to `RATES[b % 8]` requests and `RATES[(b >> 3) % 8]` work
//!   units per second;
//! - 5: the buckets are refilled.
//!
//! Run: `cd fuzz && cargo fuzz run -s none rate_sequence`.
#![no_main]

use fairshm::rates::{self, Limited, Token};
use fairshm::refusal::Reason;
use fairshm::region::HeapRegion;
use libfuzzer_sys::fuzz_target;

const TENANTS: usize = 3;
/// One second's worth: the burst, ns.
const SECOND: i128 = 1_000_000_000;
const RATES: [u32; 8] = [0, 1, 2, 3, 7, 100, 1_000, 3_000_000];

/// The ns of a bucket's content one token costs at `rate` per second (the library's
/// documented rounding: down, at least 1 ns).
fn cost(rate: u32) -> i128 {
    (SECOND / rate as i128).max(1)
}

/// Ms until `ns` of a bucket's content have refilled, rounded up.
fn ms_for(ns: i128) -> u64 {
    assert!(ns > 0);
    ((ns + 999_999) / 1_000_000) as u64
}

#[derive(Clone, Copy, Default)]
struct Bucket {
    /// Content, ns of filling; at most `SECOND`; below 0 only for work (debt).
    content: i128,
}

impl Bucket {
    fn full() -> Bucket {
        Bucket { content: SECOND }
    }
    fn refill(&mut self, elapsed_ms: u64) {
        self.content = (self.content + elapsed_ms as i128 * 1_000_000).min(SECOND);
    }
}

#[derive(Clone, Copy)]
struct Tenant {
    req_rate: u32,
    work_rate: u32,
    req: Bucket,
    work: Bucket,
    rate_limited: u64,
    work_debt: u64,
    work_charged: u64,
}

impl Tenant {
    fn new() -> Tenant {
        Tenant {
            req_rate: 0,
            work_rate: 0,
            req: Bucket::full(),
            work: Bucket::full(),
            rate_limited: 0,
            work_debt: 0,
            work_charged: 0,
        }
    }

    /// The seed's verdict on a request: `Ok(token cost)` (0: no token), or the refusal
    /// with its retry-after.
    fn admit(&mut self) -> Result<i128, (Reason, u64, u32)> {
        if self.work_rate > 0 && self.work.content < 0 {
            self.work_debt += 1;
            return Err((Reason::WorkDebt, ms_for(-self.work.content), self.work_rate));
        }
        if self.req_rate == 0 {
            return Ok(0);
        }
        let c = cost(self.req_rate);
        if self.req.content < c {
            self.rate_limited += 1;
            return Err((
                Reason::RateLimited,
                ms_for(c - self.req.content),
                self.req_rate,
            ));
        }
        self.req.content -= c;
        Ok(c)
    }

    /// Work of `units` charged: the ms until its debt is paid (0: none).
    fn charge(&mut self, units: u64) -> u64 {
        self.work_charged = self.work_charged.saturating_add(units);
        if self.work_rate == 0 {
            return 0;
        }
        self.work.content -= units as i128 * cost(self.work_rate);
        if self.work.content < 0 {
            ms_for(-self.work.content)
        } else {
            0
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let r = HeapRegion::new(1, TENANTS, 1, 1);
    let mut oracle = [Tenant::new(); TENANTS];
    let mut now = 1_000u64;
    for c in data.chunks_exact(3) {
        let (op, a, b) = (c[0] % 6, c[1], c[2]);
        let t = (a % 3) as usize;
        let o = &mut oracle[t];
        match op {
            0 | 1 => {
                let got = rates::admit(&r, t, now);
                match (got, o.admit()) {
                    (Ok(token), Ok(c)) => {
                        assert_eq!(token.map_or(0, |Token(ns)| ns as i128), c, "token");
                        if let (Some(token), true) = (token, b & 1 == 1) {
                            rates::give_back(&r, t, token);
                            o.req.content = (o.req.content + c).min(SECOND);
                        }
                    }
                    (Err(l), Err((reason, retry, rate))) => {
                        let Limited {
                            reason: got_reason,
                            retry_after_ms,
                            rate: got_rate,
                            lead_ns,
                        } = l;
                        assert_eq!(
                            (got_reason, retry_after_ms, got_rate),
                            (reason, retry, rate)
                        );
                        // The decision log's replay re-decides from what it keeps.
                        assert!(rates::refuses(reason, rate, lead_ns), "{l:?}");
                        let content = match reason {
                            Reason::WorkDebt => o.work.content,
                            _ => o.req.content,
                        };
                        assert_eq!(lead_ns as i128, SECOND - content, "how far ahead: {l:?}");
                    }
                    (got, want) => panic!("tenant {t} at {now}: got {got:?}, want {want:?}"),
                }
            }
            2 => {
                let units = (b as u64) << (3 * ((a >> 2) % 4));
                assert_eq!(
                    rates::charge(&r, t, units, now),
                    o.charge(units),
                    "debt of {units}"
                );
            }
            3 => {
                let ms = (b as u64) << (2 * ((a >> 2) % 4));
                now += ms;
                for o in oracle.iter_mut() {
                    o.req.refill(ms);
                    o.work.refill(ms);
                }
            }
            4 => {
                (o.req_rate, o.work_rate) =
                    (RATES[(b % 8) as usize], RATES[((b >> 3) % 8) as usize]);
                rates::set(&r, t, o.req_rate, o.work_rate);
            }
            _ => {
                rates::refill(&r, t);
                (o.req, o.work) = (Bucket::full(), Bucket::full());
            }
        }
        for (t, o) in oracle.iter().enumerate() {
            let s = rates::state(&r, t, now);
            let tokens = if o.req_rate == 0 {
                0
            } else {
                (o.req.content / cost(o.req_rate)) as u64
            };
            let debt = if o.work_rate > 0 && o.work.content < 0 {
                ms_for(-o.work.content)
            } else {
                0
            };
            assert_eq!(
                (
                    s.requests_per_s,
                    s.work_units_per_s,
                    s.request_tokens,
                    s.work_debt_ms
                ),
                (o.req_rate, o.work_rate, tokens, debt),
                "tenant {t} at {now}"
            );
            assert_eq!(
                (s.rate_limited, s.work_debt_refusals, s.work_charged),
                (o.rate_limited, o.work_debt, o.work_charged),
                "tenant {t}'s counts"
            );
        }
    }
});
