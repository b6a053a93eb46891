//! Per-tenant rates (seed 000): requests per second and work units per second, each a
//! token bucket per node with a burst of one second's worth, 0 meaning unbounded.
//!
//! Each bucket is one word, a GCRA "theoretical arrival time" (`tat`, ns of the engine
//! clock): a bucket whose `tat` is at or before `now` is full (one second's worth of
//! tokens), and each token moves `tat` one emission interval (`1 s / rate`, in whole
//! ns, rounded down so that a burst of exactly `rate` fits) later. So:
//!
//! - a request is admitted when `max(tat, now) + interval <= now + 1 s`, and takes its
//!   token by a CAS of the word to that value: two processes cannot both take the last
//!   token (one CAS fails and decides again on the word the other wrote). Refused, it is
//!   told to retry when the bucket will have the token: `max(tat, now) + interval -
//!   (now + 1 s)`, rounded up to whole ms;
//! - work is charged after it is done, unconditionally: `tat = max(tat, now) + units *
//!   interval`, which may run past `now + 1 s`: the tenant is then in debt, and every
//!   acquire is refused `work_debt` until `now + 1 s` reaches `tat` again (a load: the
//!   check takes nothing).
//!
//! The rates live in the segment (`RateRec.limits`), so a change made by any process
//! applies to every process's next acquire. Orderings: every word here is Relaxed. A
//! bucket word publishes nothing but itself, and its CAS makes each token taken once;
//! the limits word is a policy input read once per acquire.

use crate::layout::pair;
use crate::refusal::Reason;
use crate::region::Region;
use crate::sync::Ordering::*;

/// A bucket's depth: one second.
pub const BURST_NS: u64 = 1_000_000_000;

/// The emission interval of `rate` per second, ns (`None`: unbounded); at least 1 ns,
/// so rates above 10^9 per second (set, or written by a hostile writer) act as 10^9.
#[inline]
pub fn interval_ns(rate: u32) -> Option<u64> {
    (rate > 0).then(|| (BURST_NS / rate as u64).max(1))
}

/// How far (ns) a bucket whose theoretical arrival time is `tat` runs past its burst at
/// `now` once it takes `cost_ns` more: `None` while it stays within. The one rule of
/// both buckets: a request takes its token while this is `None` at one interval's
/// cost, and a tenant is in work debt while it is `Some` at no cost.
#[inline]
fn past_burst(tat: u64, now: u64, cost_ns: u64) -> Option<u64> {
    let past = tat
        .saturating_add(cost_ns)
        .saturating_sub(now.saturating_add(BURST_NS));
    (past > 0).then_some(past)
}

/// Ns past `now + 1 s` rounded up to whole ms (at least 1).
#[inline]
fn wait_ms(past_ns: u64) -> u64 {
    past_ns.div_ceil(1_000_000).max(1)
}

/// A tenant's rates: (requests per second, work units per second).
#[inline]
pub fn limits<R: Region>(r: &R, t: usize) -> (u32, u32) {
    // Relaxed: a policy input (module docs).
    let w = r.rate(t).limits.load(Relaxed);
    (pair::lo(w), pair::hi(w))
}

/// Sets a tenant's rates (0: unbounded); every process's next acquire sees them.
pub fn set<R: Region>(r: &R, t: usize, requests_per_s: u32, work_units_per_s: u32) {
    // Relaxed: a policy input, read once per acquire (module docs).
    r.rate(t)
        .limits
        .store(pair::make(requests_per_s, work_units_per_s), Relaxed);
}

/// Why the rates refuse an acquire and when to retry (ms), with the inputs the
/// decision read, which the decision log keeps: the refusing bucket's rate per second
/// and how far its theoretical arrival time was past `now` (ns, 0 when not past).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limited {
    pub reason: Reason,
    pub retry_after_ms: u64,
    pub rate: u32,
    pub lead_ns: u64,
}

impl Limited {
    /// The refusing bucket's emission interval, ns: how often a token comes (a
    /// refusing bucket's rate is never 0, which would refuse nothing).
    pub fn interval_ns(&self) -> u64 {
        interval_ns(self.rate).unwrap_or(BURST_NS)
    }
}

/// Whether a bucket of `rate` per second whose theoretical arrival time is `lead_ns`
/// past `now` refuses: the request bucket when taking one more token would run past
/// the burst, the work bucket when it already has (debt). The rule `admit` applies,
/// from the inputs the decision log keeps, so `replay` re-decides with it.
pub fn refuses(reason: Reason, rate: u32, lead_ns: u64) -> bool {
    // `now` 0: the lead is the theoretical arrival time.
    match (reason, interval_ns(rate)) {
        (Reason::RateLimited, Some(every)) => past_burst(lead_ns, 0, every).is_some(),
        (Reason::WorkDebt, Some(_)) => past_burst(lead_ns, 0, 0).is_some(),
        _ => false,
    }
}

/// A request token taken by [`admit`]: the emission interval (ns) it moved the
/// tenant's request bucket by, which [`give_back`] moves back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a token taken for a request that errs is given back"]
pub struct Token(pub u64);

/// Admits one request of tenant `t` at `now_ms` against its rates: `Ok` passed them,
/// with the request token it took (`None` when the request rate is unbounded); `Err`
/// took nothing. Costs no RMW when both rates are unbounded, one CAS (uncontended) when
/// the request rate is bounded.
#[inline]
pub fn admit<R: Region>(r: &R, t: usize, now_ms: u64) -> Result<Option<Token>, Limited> {
    let rec = r.rate(t);
    // Relaxed: module docs.
    let w = rec.limits.load(Relaxed);
    if w == 0 {
        return Ok(None);
    }
    admit_slow(r, t, pair::lo(w), pair::hi(w), now_ms)
}

/// Gives back a token [`admit`] took for a request that was then never decided (an
/// error: bad input, a full table), so that bad input loses nothing: the bucket's
/// theoretical arrival time moves back the interval the token moved it, as if it had
/// not been taken (tokens others took meanwhile stay taken; a bucket that has refilled
/// since is full either way).
#[cold]
pub fn give_back<R: Region>(r: &R, t: usize, token: Token) {
    let word = &r.rate(t).req_tat_ns;
    // Relaxed: the word publishes nothing but itself (module docs).
    let mut cur = word.load(Relaxed);
    loop {
        let back = cur.saturating_sub(token.0);
        // Relaxed: as above; the CAS moves back exactly what this token moved.
        match word.compare_exchange_weak(cur, back, Relaxed, Relaxed) {
            Ok(_) => return,
            Err(x) => cur = x,
        }
    }
}

#[cold]
fn admit_slow<R: Region>(
    r: &R,
    t: usize,
    req: u32,
    work: u32,
    now_ms: u64,
) -> Result<Option<Token>, Limited> {
    let rec = r.rate(t);
    let now = now_ms.saturating_mul(1_000_000);
    if interval_ns(work).is_some() {
        // Relaxed: module docs (a bucket word publishes nothing but itself).
        let tat = rec.work_tat_ns.load(Relaxed);
        if let Some(past) = past_burst(tat, now, 0) {
            // Relaxed: a statistic.
            rec.work_debt.fetch_add(1, Relaxed);
            return Err(Limited {
                reason: Reason::WorkDebt,
                retry_after_ms: wait_ms(past),
                rate: work,
                lead_ns: tat - now,
            });
        }
    }
    let Some(every) = interval_ns(req) else {
        return Ok(None);
    };
    // Relaxed: module docs; the CAS below makes each token taken once.
    let mut cur = rec.req_tat_ns.load(Relaxed);
    loop {
        let base = cur.max(now);
        if let Some(past) = past_burst(base, now, every) {
            // Relaxed: a statistic.
            rec.rate_limited.fetch_add(1, Relaxed);
            return Err(Limited {
                reason: Reason::RateLimited,
                retry_after_ms: wait_ms(past),
                rate: req,
                lead_ns: base - now,
            });
        }
        let next = base.saturating_add(every);
        // Relaxed: the word publishes nothing but itself (module docs).
        match rec
            .req_tat_ns
            .compare_exchange_weak(cur, next, Relaxed, Relaxed)
        {
            Ok(_) => return Ok(Some(Token(every))),
            Err(x) => cur = x,
        }
    }
}

/// Charges `units` of work done by tenant `t` at `now_ms` to its work bucket. Returns
/// the debt it leaves, in ms until the tenant is admitted again (0: none, or the work
/// rate is unbounded: then nothing is charged).
pub fn charge<R: Region>(r: &R, t: usize, units: u64, now_ms: u64) -> u64 {
    let rec = r.rate(t);
    // Relaxed: a statistic. Saturating: a C caller's `(uint64_t)-1` must not wrap the
    // total round to a small number.
    let mut total = rec.work_charged.load(Relaxed);
    while let Err(x) = rec.work_charged.compare_exchange_weak(
        total,
        total.saturating_add(units),
        Relaxed,
        Relaxed,
    ) {
        total = x;
    }
    // Relaxed: a policy input (module docs).
    let Some(every) = interval_ns(pair::hi(rec.limits.load(Relaxed))) else {
        return 0;
    };
    let now = now_ms.saturating_mul(1_000_000);
    let cost = units.saturating_mul(every);
    // Relaxed: module docs; the CAS makes racing charges both count.
    let mut cur = rec.work_tat_ns.load(Relaxed);
    loop {
        let next = cur.max(now).saturating_add(cost);
        // Relaxed: as the load above.
        match rec
            .work_tat_ns
            .compare_exchange_weak(cur, next, Relaxed, Relaxed)
        {
            Ok(_) => return past_burst(next, now, 0).map_or(0, wait_ms),
            Err(x) => cur = x,
        }
    }
}

/// Refills tenant `t`'s buckets and forgives its debt (`repair`: a hostile writer may
/// have left a bucket word centuries ahead, which no check can tell from a large
/// charge). Keeps its rates. Returns how many bucket words were not already empty.
pub fn refill<R: Region>(r: &R, t: usize) -> usize {
    let rec = r.rate(t);
    // Relaxed: module docs; a racing acquire's CAS either lands before (and is reset)
    // or after (and takes a token from the refilled bucket).
    [&rec.req_tat_ns, &rec.work_tat_ns]
        .into_iter()
        .filter(|w| w.swap(0, Relaxed) != 0)
        .count()
}

/// A tenant's buckets as of `now_ms`, for reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RateState {
    pub requests_per_s: u32,
    pub work_units_per_s: u32,
    /// Request tokens available now (0 when unbounded: see `requests_per_s`).
    pub request_tokens: u64,
    /// Ms until the tenant's work debt is paid (0: not in debt).
    pub work_debt_ms: u64,
    pub rate_limited: u64,
    pub work_debt_refusals: u64,
    pub work_charged: u64,
}

/// Reads tenant `t`'s rates and buckets at `now_ms` (plain loads).
pub fn state<R: Region>(r: &R, t: usize, now_ms: u64) -> RateState {
    let rec = r.rate(t);
    let (req, work) = limits(r, t);
    let now = now_ms.saturating_mul(1_000_000);
    let horizon = now.saturating_add(BURST_NS);
    // Relaxed, all: a report.
    let req_tat = rec.req_tat_ns.load(Relaxed).max(now);
    let work_tat = rec.work_tat_ns.load(Relaxed);
    let debt = past_burst(work_tat, now, 0).filter(|_| work > 0);
    RateState {
        requests_per_s: req,
        work_units_per_s: work,
        request_tokens: interval_ns(req).map_or(0, |every| horizon.saturating_sub(req_tat) / every),
        work_debt_ms: debt.map_or(0, wait_ms),
        rate_limited: rec.rate_limited.load(Relaxed),
        work_debt_refusals: rec.work_debt.load(Relaxed),
        work_charged: rec.work_charged.load(Relaxed),
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::region::HeapRegion;

    fn region() -> HeapRegion {
        HeapRegion::new(1, 2, 1, 1)
    }

    #[test]
    fn a_burst_of_one_second_then_the_steady_rate() {
        let r = region();
        set(&r, 0, 4, 0);
        for i in 0..4 {
            assert!(admit(&r, 0, 10_000).is_ok(), "burst token {i}");
        }
        // The fifth, in the same instant: the next token comes 250 ms later.
        let e = admit(&r, 0, 10_000).unwrap_err();
        assert_eq!(
            e,
            Limited {
                reason: Reason::RateLimited,
                retry_after_ms: 250,
                rate: 4,
                lead_ns: 1_000_000_000, // four tokens of 250 ms taken
            }
        );
        assert_eq!(e.interval_ns(), 250_000_000);
        // The rule the decision log's replay applies, on the same inputs: refused; a
        // bucket one token less ahead admits, and a nanosecond more refuses again.
        assert!(refuses(e.reason, e.rate, e.lead_ns));
        assert!(!refuses(e.reason, e.rate, e.lead_ns - 250_000_000));
        assert!(refuses(e.reason, e.rate, e.lead_ns - 250_000_000 + 1));
        assert!(!refuses(e.reason, 0, e.lead_ns), "an unbounded rate refuses nothing");
        assert_eq!(admit(&r, 0, 10_249).unwrap_err().retry_after_ms, 1);
        assert!(admit(&r, 0, 10_250).is_ok());
        assert!(admit(&r, 0, 10_250).is_err());
        // Steady: one every 250 ms.
        for k in 2..10 {
            assert!(admit(&r, 0, 10_000 + 250 * k).is_ok(), "steady {k}");
            assert!(admit(&r, 0, 10_000 + 250 * k).is_err());
        }
        assert_eq!(state(&r, 0, 20_000).rate_limited, 11);
        // Idle long enough, the burst is back, and not more.
        assert_eq!(state(&r, 0, 60_000).request_tokens, 4);
        // Tenant 1 is unbounded.
        for _ in 0..1000 {
            assert!(admit(&r, 1, 10_000).is_ok());
        }
    }

    #[test]
    fn work_debt_refuses_until_paid_to_the_millisecond() {
        let r = region();
        set(&r, 0, 0, 100); // 10 ms a unit
        assert_eq!(charge(&r, 0, 50, 1_000), 0, "half a second's worth: no debt");
        assert!(admit(&r, 0, 1_000).is_ok());
        // 250 more: tat = 1,000 + 3,000 ms, 2,000 ms past the burst's horizon.
        assert_eq!(charge(&r, 0, 250, 1_000), 2_000);
        let e = admit(&r, 0, 1_000).unwrap_err();
        assert_eq!(
            e,
            Limited {
                reason: Reason::WorkDebt,
                retry_after_ms: 2_000,
                rate: 100,
                lead_ns: 3_000_000_000,
            }
        );
        assert_eq!(e.interval_ns(), 10_000_000);
        assert!(refuses(e.reason, e.rate, e.lead_ns));
        assert!(refuses(Reason::WorkDebt, 100, 1_000_000_001));
        assert!(!refuses(Reason::WorkDebt, 100, 1_000_000_000), "a full burst is no debt");
        assert_eq!(admit(&r, 0, 2_999).unwrap_err().retry_after_ms, 1);
        assert!(admit(&r, 0, 3_000).is_ok());
        let s = state(&r, 0, 2_500);
        assert_eq!((s.work_debt_ms, s.work_debt_refusals, s.work_charged), (500, 2, 300));
    }

    #[test]
    fn the_work_charged_saturates() {
        let r = region();
        set(&r, 0, 0, 1);
        charge(&r, 0, u64::MAX - 1, 1_000);
        charge(&r, 0, 5, 1_000);
        assert_eq!(state(&r, 0, 1_000).work_charged, u64::MAX, "not wrapped to 3");
        // Unbounded work is counted too, and saturates the same way.
        set(&r, 1, 0, 0);
        charge(&r, 1, u64::MAX, 1_000);
        charge(&r, 1, 1, 1_000);
        assert_eq!(state(&r, 1, 1_000).work_charged, u64::MAX);
    }

    #[test]
    fn any_rate_word_is_safe_to_read_and_use() {
        let r = region();
        for w in [u32::MAX, 1_000_000_001, 1] {
            set(&r, 0, w, w);
            let _ = admit(&r, 0, 1);
            let _ = charge(&r, 0, u64::MAX, u64::MAX);
            let _ = admit(&r, 0, u64::MAX);
            let s = state(&r, 0, u64::MAX);
            assert_eq!(s.requests_per_s, w);
            let _ = state(&r, 0, 0);
        }
        assert_eq!(interval_ns(u32::MAX), Some(1));
    }

    #[test]
    fn zero_is_unbounded_and_a_change_applies_at_once() {
        let r = region();
        assert_eq!(charge(&r, 0, 1_000_000, 5), 0);
        assert!(admit(&r, 0, 5).is_ok());
        set(&r, 0, 1, 0);
        assert!(admit(&r, 0, 5).is_ok());
        assert_eq!(admit(&r, 0, 5).unwrap_err().retry_after_ms, 1_000);
        set(&r, 0, 0, 0);
        assert_eq!(admit(&r, 0, 5), Ok(None), "unbounded: no token taken");
    }

    #[test]
    fn a_token_given_back_is_as_if_never_taken() {
        let r = region();
        set(&r, 0, 2, 0); // a burst of 2, one every 500 ms
        let first = admit(&r, 0, 1_000).unwrap();
        assert_eq!(first, Some(Token(500_000_000)));
        let second = admit(&r, 0, 1_000).unwrap().unwrap();
        assert!(admit(&r, 0, 1_000).is_err(), "the burst is spent");
        give_back(&r, 0, second);
        assert!(admit(&r, 0, 1_000).is_ok(), "the token given back");
        assert_eq!(admit(&r, 0, 1_000).unwrap_err().retry_after_ms, 500);
        // Given back after the bucket refilled: still a burst of 2, not 3.
        give_back(&r, 0, second);
        give_back(&r, 0, second);
        give_back(&r, 0, second);
        assert!(admit(&r, 0, 5_000).is_ok());
        assert!(admit(&r, 0, 5_000).is_ok());
        assert!(admit(&r, 0, 5_000).is_err(), "a burst of 2");
    }
}
