//! The server's own queue, as the front proxy shows it, and how far apart it spreads an
//! over-share tenant's turns.
//!
//! A refused request that its client retries joins the server's accept queue again, in
//! front of whatever arrives after it, and costs the server about as much as a request
//! it serves (a connection, a parse, a response). While the permits of the tenant over
//! its share turn over faster than the server can answer its retries, the turn clock of
//! `retry` hands out short turns, the retries pile up in the server's queue, and a
//! light tenant's request waits behind them before any middleware sees it: the pool
//! cannot reach that wait. The front proxy can: it stamps when it took each request in
//! (`X-Request-Start`), and the middleware passes how long the request waited since
//! ([`note`]).
//!
//! Per pool, in the spirit of CoDel: waits are taken in windows of [`WINDOW_MS`]. Each
//! window keeps the least wait seen in it, which sets the base: the least wait seen,
//! rising by 1/64 of the difference a window, so that a constant offset between the
//! proxy's clock and ours, or a proxy on another host, is not read as a queue. The
//! window's *queue* is its mean wait over that base (each wait counted at most
//! [`MAX_SAMPLE_US`], so that one request a proxy held for seconds does not make a
//! window alone). Not its least wait, as CoDel's standing queue: on a busy server a
//! few requests of every window get in at once (a worker free at the right instant)
//! while the rest wait behind a tenant's retries in bursts of a few ms, so the least
//! wait stayed under the target while a light tenant's requests waited 3 to 6 ms
//! every 60 ms (Puma 4x4, traced: a quarter of the windows had a mean over 1 ms, and
//! none a least). A window whose queue is over [`TARGET_US`] multiplies the stretch
//! by 1 + its queue in whole targets, at most 8 (a queue that keeps standing while
//! the hints already given run out multiplies it again); one under a quarter of the
//! target takes 1/128 off, and so does each window that saw no request at all; in
//! between, it stays. The stretch multiplies the hint of an over-share refusal (at
//! most [`MAX_STRETCH`] times), which then gets a jitter of up to half of it, and
//! never past [`MAX_STRETCHED_MS`] ([`stretched_hint`]): its waiting clients then
//! come back that much less often, and not together, and the retries the server
//! answers with a 429 fall by as much. It eases slowly: a stretch that eased too far
//! lets a queue stand again, which the light tenant waits in. A tenant under its
//! share is never stretched: it gets in as soon as anything is released (seed 000).
//! Nor is one with no other refused request out ([`others_out`]): its retries come
//! one at a time, and are not what the queue holds.
//!
//! A window closed while the pool has refused nothing for [`RETRY_SPAN_MS`] counts as
//! clear, whatever its queue: no refused request can be out then, so what the queue
//! holds is not retries, and stretching the next refusals would keep nothing out of
//! it. A server whose own waits jump now and then (a host that takes its CPUs away
//! for a while: Puma under a light tenant alone, on a host whose hypervisor stole part
//! of its CPU time, waited 7 to 21 ms at p99 and raised the stretch to 46x to 256x
//! before any tenant had been refused) would otherwise carry a stretch into the first
//! refusals that come after, and a tenant that pauses for its hints would pause for
//! hundreds of ms (262 ms once, 2026-12-03).
//!
//! The words are estimates, kept with Relaxed atomics: a lost update skips a sample.
//! Everything is integer arithmetic under the caller's `now`.

use crate::layout::PoolRec;
use crate::retry::due_lo;
use crate::sync::Ordering::*;

/// The length of a window, ms.
pub const WINDOW_MS: u64 = 25;
/// The queue (a window's mean wait over the base) a window may show without
/// stretching, µs.
pub const TARGET_US: u32 = 1_000;
/// The most one wait counts for in a window's mean, µs.
pub const MAX_SAMPLE_US: u32 = 8 * TARGET_US;
/// The bits of `PoolRec::queue_sum` that hold the sum (the count is above them).
const SUM_BITS: u32 = 40;
/// A request whose wait in the server's queue is not known.
pub const UNKNOWN: u32 = u32::MAX;
/// A stretch of 1 (the unit of the stretch word: sixteenths).
pub const ONE: u32 = 16;
/// The most the stretch multiplies a hint by (in sixteenths).
pub const MAX_STRETCH: u32 = 256 * ONE;
/// The longest hint a stretch gives, ms. A standing queue drains in well under a
/// second once the retries stay away; a client told to stay away longer gains the
/// others nothing and waits for nothing (the turn clock's own hints, which count the
/// tenant's backlog, may be longer, and are left so).
pub const MAX_STRETCHED_MS: u64 = 1_000;
/// The most one window multiplies the stretch by.
const MAX_STEP: u32 = 8;
/// How long after a refusal of the pool a window's queue may still be its retries,
/// ms: the longest hint a stretch gives. (The turn clock's own hints may be longer;
/// a tenant given them is refused again as it comes back, long before they run out.)
pub const RETRY_SPAN_MS: u64 = MAX_STRETCHED_MS;
/// At most this many windows without a request are decayed at once (more change
/// nothing: the stretch is back to 1 long before).
const MAX_IDLE: u64 = 1_024;

/// What a sample does to the window word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// The window word to store (`None`: unchanged).
    pub word: Option<u64>,
    /// The window this sample closed: its least wait (µs) and how many windows have
    /// passed since it started (1: the next window; more: some saw no request).
    pub closed: Option<(u32, u64)>,
}

/// A sample of `queued_us` at `now_ms` against the window word (start, low 32 bits of
/// ms, never 0, in the high half; the least wait in it, µs, in the low half; 0: no
/// window yet).
pub fn sample(word: u64, queued_us: u32, now_ms: u64) -> Step {
    let (start, least) = ((word >> 32) as u32, word as u32);
    let fresh = (due_lo(now_ms) as u64) << 32 | queued_us as u64;
    if start == 0 {
        return Step {
            word: Some(fresh),
            closed: None,
        };
    }
    // Wrapping: `start` is the low 32 bits of an earlier `now`. A sample from a process
    // whose clock read a little earlier than the window's start counts in the window.
    let elapsed = (now_ms as u32).wrapping_sub(start);
    if (elapsed as i32) >= WINDOW_MS as i32 {
        return Step {
            word: Some(fresh),
            closed: Some((least, elapsed as u64 / WINDOW_MS)),
        };
    }
    Step {
        word: (queued_us < least).then_some((start as u64) << 32 | queued_us as u64),
        closed: None,
    }
}

/// The base after a closed window whose least wait was `least` (µs): the least wait
/// seen, rising by 1/64 of the difference (rounded up) when a window's least is above
/// it. It starts at 0, so that a server whose first window is already queued (its
/// clients all arriving at once) sees that queue; a constant offset (a proxy's clock
/// ahead of ours, a proxy across a network) is taken in within some 64 windows.
pub fn next_base(base: u64, least: u32) -> u64 {
    let base = base.min(u32::MAX as u64) as u32;
    let next = if least <= base {
        least
    } else {
        base + (least - base).div_ceil(64)
    };
    next as u64
}

/// The stretch after a window whose queue (mean wait over the base) was `queue_us`,
/// with `windows` passed since it started (those after the first saw no request: each
/// takes 1/128 off too). `s` in sixteenths; 0 reads as 1.
pub fn next_stretch(s: u32, queue_us: u32, windows: u64) -> u32 {
    let s = s.max(ONE);
    let s = if queue_us > TARGET_US {
        (s.saturating_mul(step(queue_us)) / ONE).min(MAX_STRETCH)
    } else if queue_us < TARGET_US / 4 {
        decay(s)
    } else {
        s
    };
    decayed(s, windows.saturating_sub(1))
}

fn decay(s: u32) -> u32 {
    // 1/128 (halved in about 2.2 s of clear windows; 1/32 let the queue stand again
    // every second or so, and a light tenant's tail waited in it), and at least one
    // sixteenth, so that a stretch under 8 eases too.
    s.saturating_sub((s / 128).max(1)).max(ONE)
}

fn decayed(mut s: u32, windows: u64) -> u32 {
    for _ in 0..windows.min(MAX_IDLE) {
        if s == ONE {
            break;
        }
        s = decay(s);
    }
    s
}

/// The stretch one window's queue asks for by itself (sixteenths): 1 + the
/// queue in whole targets, at most 8, when it is over the target; else 1.
pub fn step(queue_us: u32) -> u32 {
    if queue_us > TARGET_US {
        (1 + queue_us / TARGET_US).min(MAX_STEP) * ONE
    } else {
        ONE
    }
}

/// A hint (or any duration) stretched by `s` (sixteenths), saturating.
pub fn stretched(hint: u64, s: u32) -> u64 {
    hint.saturating_mul(s.max(ONE) as u64) / ONE as u64
}

/// An over-share hint of `hint_ms` stretched by `s` (sixteenths), with a jitter of up
/// to half of it (a hash of the turn `turn_at_us`), and at most [`MAX_STRETCHED_MS`]
/// (a hint already longer is left as it is). Refusals given at about one instant with
/// about one turn (a tenant's clients that arrived together, before its turn clock
/// built a backlog) would otherwise come back together, the stretch later, into the
/// queue the stretch was to keep clear.
pub fn stretched_hint(hint_ms: u64, s: u32, turn_at_us: u64) -> u64 {
    let h = stretched(hint_ms, s).min(MAX_STRETCHED_MS * 2 / 3);
    let jitter = crate::retry::spread(turn_at_us ^ 0x5EED) % (h / 2 + 1);
    (h + jitter).min(MAX_STRETCHED_MS).max(hint_ms)
}

/// The `queue_sum` addend of one wait, µs: a count of 1 and the wait, at most
/// [`MAX_SAMPLE_US`].
pub fn sum_addend(queued_us: u32) -> u64 {
    1 << SUM_BITS | queued_us.min(MAX_SAMPLE_US) as u64
}

/// The mean wait of a window from its `queue_sum` word, µs (`None`: no wait in it).
pub fn mean_of(sum: u64) -> Option<u32> {
    let (count, total) = (sum >> SUM_BITS, sum & ((1 << SUM_BITS) - 1));
    (count > 0).then(|| (total / count) as u32)
}

/// Notes that a request of pool `p` waited `queued_us` in the server's queue before it
/// reached the application, at `now_ms`.
pub fn note(p: &PoolRec, queued_us: u64, now_ms: u64) {
    let q = queued_us.min(u32::MAX as u64) as u32;
    // Relaxed, all: an estimate that publishes nothing. The CAS makes one sample close
    // a window, so one caller folds it into the base and the stretch.
    let mut cur = p.queue_window.load(Relaxed);
    let closed = loop {
        let step = sample(cur, q, now_ms);
        let Some(word) = step.word else { break None };
        match p
            .queue_window
            .compare_exchange_weak(cur, word, Relaxed, Relaxed)
        {
            Ok(_) => break step.closed,
            Err(x) => cur = x,
        }
    };
    let Some((least, windows)) = closed else {
        // A lost race with the closer may count this wait in the window before: an
        // estimate's error of one sample.
        p.queue_sum.fetch_add(sum_addend(q), Relaxed);
        return;
    };
    // This wait is the first of the new window; the old window's waits are its mean
    // (its least, for a segment whose word was not kept).
    let mean = mean_of(p.queue_sum.swap(sum_addend(q), Relaxed)).unwrap_or(least);
    let base = next_base(p.queue_base.load(Relaxed), least);
    p.queue_base.store(base, Relaxed);
    let queue = mean.saturating_sub(base as u32);
    let old = p.queue_stretch.load(Relaxed);
    let retries = retries_possible(p.queue_refused_ms.load(Relaxed), now_ms);
    let s = next_stretch(old as u32, if retries { queue } else { 0 }, windows);
    p.queue_stretch.store((queue as u64) << 32 | s as u64, Relaxed);
}

/// Notes that pool `p` refused a request at `now_ms` (see [`retries_possible`]).
pub fn refused(p: &PoolRec, now_ms: u64) {
    // Relaxed: an estimate. Stored once a ms at most: the line is the one every noted
    // wait already writes (`queue_sum`), not the pool word's or the read-mostly one.
    if p.queue_refused_ms.load(Relaxed) < now_ms {
        p.queue_refused_ms.store(now_ms, Relaxed);
    }
}

/// Whether a window closed at `now_ms` may hold retries, the pool having last refused
/// at `refused_ms` (0: never): within [`RETRY_SPAN_MS`] of it. A clock a little behind
/// the refuser's counts as within.
pub fn retries_possible(refused_ms: u64, now_ms: u64) -> bool {
    refused_ms != 0 && now_ms.saturating_sub(refused_ms) <= RETRY_SPAN_MS
}

/// Whether the tenant of an over-share refusal has other refused requests out, waiting
/// their hints: turns promised ahead of this one (`backlog`), or, by Little's law,
/// more than one out on average: its mean hint (`hint_avg_us`, see
/// `retry::next_hint_avg`) longer than the mean gap between its refusals (`gap_us`,
/// `retry::gap_us`; 0, not known yet, counts as no evidence).
///
/// Only such a tenant's retries can stand a queue in the server: the stretch exists to
/// spread them. A tenant whose refusals come farther apart than the hints it is given
/// has at most about one refused request out at a time: its clients honour a hint as a
/// pause of the whole tenant (`loadgen`'s `fifo`), and what waited in the server's
/// queue was not its retries. Stretching its hints keeps nothing out of the queue and
/// leaves its permits free while it waits. Under Puma 4x1 such a tenant's extra
/// request waits 0.2 to 0.9 ms for a worker, inside the band where the stretch neither
/// grows nor eases, so a few windows just over the target (1.1 to 1.5 ms) raised the
/// stretch and nothing took it back: its hints went from 2.3 ms to 9 to 80 ms on
/// average, and its throughput to 26% to 80% of its share's, in 6 of 19 runs
/// (2026-12-03, e2e and the phase alone; a CI run failed on it). A tenant of
/// per-connection clients (`polite`) has some sixty out under the same server: hints
/// of 750 ms, refusals 12 ms apart; of its 1,940 refusals in a run under Puma 4x4,
/// only its first 7 had none out.
pub fn others_out(backlog: u32, hint_avg_us: u64, gap_us: u64) -> bool {
    backlog > 0 || (gap_us > 0 && hint_avg_us > gap_us)
}

/// The stretch of an over-share refusal of a request that waited `queued_us` in the
/// server's queue ([`UNKNOWN`]: not known), with `backlog` turns of its tenant
/// promised ahead of it (`retry::Turn::queued`, which counts a turn due within half an
/// interval as come), `others_out` as [`others_out`] says (without, none: 1), and the
/// queue it answers: the pool's
/// ([`current`]), or, with a backlog, the request's own wait taken as a window of its
/// own when that asks for more. The pool's stretch needs a window to close before it
/// sees a queue; the requests that a queue held longest see it at once (a tenant whose
/// clients all arrive at one instant fills the server's queue before any window can,
/// and builds a backlog as it does).
///
/// Without a backlog no refused request of the tenant is waiting for its turn, so
/// what the request waited behind was not its tenant's retries: a worker was busy,
/// as on a server whose workers are as many as the pool's permits. Stretching that
/// refusal keeps nothing out of the queue, and a client that pauses its whole tenant
/// for a hint (`loadgen`'s `fifo`) then leaves the tenant's permits free for the
/// stretch: under Puma 4x1 it held its 2 permits 83% of the time with a mean hint of
/// 4.1 ms, and 87% with 2.2 ms once only a backlog was stretched (2026-12-03).
pub fn for_request(
    p: &PoolRec,
    now_ms: u64,
    queued_us: u32,
    backlog: u32,
    others_out: bool,
) -> (u32, u32) {
    let (s, pool_queue) = current(p, now_ms);
    if !others_out {
        return (ONE, pool_queue);
    }
    if queued_us == UNKNOWN || backlog == 0 {
        return (s, pool_queue);
    }
    // Relaxed: an estimate (see `note`).
    let own = queued_us.saturating_sub(p.queue_base.load(Relaxed) as u32);
    let own_step = step(own);
    if own_step > s {
        (own_step, own)
    } else {
        (s, pool_queue)
    }
}

/// The stretch of pool `p` at `now_ms` (sixteenths, at least [`ONE`]) and the
/// queue of the last closed window, µs. Windows that passed since the last sample
/// with no request decay it, as the next sample will.
pub fn current(p: &PoolRec, now_ms: u64) -> (u32, u32) {
    // Relaxed: estimates (see `note`).
    let word = p.queue_stretch.load(Relaxed);
    let (s, queue_us) = ((word as u32).max(ONE), (word >> 32) as u32);
    if s == ONE {
        return (s, queue_us);
    }
    let start = (p.queue_window.load(Relaxed) >> 32) as u32;
    let elapsed = (now_ms as u32).wrapping_sub(start);
    if start == 0 || (elapsed as i32) < 2 * WINDOW_MS as i32 {
        return (s, queue_us);
    }
    (decayed(s, elapsed as u64 / WINDOW_MS - 1), queue_us)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start_of(word: u64) -> u32 {
        (word >> 32) as u32
    }

    #[test]
    fn a_window_keeps_its_least_wait() {
        assert_eq!(WINDOW_MS, 25, "the times below are in windows of 25 ms");
        let s = sample(0, 900, 1_000);
        let w = s.word.unwrap();
        assert_eq!((start_of(w), w as u32, s.closed), (1_000, 900, None));
        // Longer waits in the window change nothing; a shorter one is kept.
        assert_eq!(sample(w, 5_000, 1_010).word, None);
        let w = sample(w, 300, 1_024).word.unwrap();
        assert_eq!((start_of(w), w as u32), (1_000, 300));
        // The first sample at or past the window's end closes it and opens the next.
        let s = sample(w, 7_000, 1_025);
        assert_eq!(s.closed, Some((300, 1)));
        let w = s.word.unwrap();
        assert_eq!((start_of(w), w as u32), (1_025, 7_000));
        // Windows that saw no request are counted.
        assert_eq!(sample(w, 1, 1_110).closed, Some((7_000, 3)));
        // A sample stamped a little before the window's start (another process's
        // clock read) counts in it.
        assert_eq!(sample(w, 5, 1_099).word.map(|w| w as u32), Some(5));
    }

    #[test]
    fn windows_close_across_the_wrap_of_the_low_32_bits() {
        let before = (1u64 << 32) - 40;
        let w = sample(0, 50, before).word.unwrap();
        assert_eq!(sample(w, 10, before + 24).word.map(|w| w as u32), Some(10));
        assert_eq!(sample(w, 10, before + 25).closed, Some((50, 1)));
    }

    #[test]
    fn the_base_is_the_least_wait_and_rises_slowly() {
        // From 0: a first window already queued is read as a queue.
        assert_eq!(next_base(0, 5_000), 79);
        let b = 800;
        assert_eq!(next_base(b, 400), 400);
        // 1/64 of the difference, rounded up: a constant offset is taken in within a
        // few hundred windows, a queue the stretch drains within a few is not.
        assert_eq!(next_base(b, 800 + 6_400), 900);
        assert_eq!(next_base(b, 801), 801);
        let mut b = 0;
        for _ in 0..400 {
            b = next_base(b, 3_000);
        }
        assert!((2_900..=3_000).contains(&b), "{b}");
    }

    #[test]
    fn a_request_that_waited_long_is_stretched_at_once() {
        assert_eq!(step(TARGET_US), ONE);
        assert_eq!(step(TARGET_US + 1), 2 * ONE);
        assert_eq!(step(20 * TARGET_US), MAX_STEP * ONE);
        let r = crate::region::HeapRegion::new(1, 1, 1, 1);
        let p = crate::region::Region::pool(&r, 0);
        // Nothing noted: the pool's stretch is 1, and so is that of a request that
        // waited under the target; one that waited 5 ms asks for 6 by itself, when its
        // tenant has a backlog, and for nothing without one.
        assert_eq!(for_request(p, 1_000, UNKNOWN, 3, true), (ONE, 0));
        assert_eq!(for_request(p, 1_000, TARGET_US, 3, true), (ONE, 0));
        assert_eq!(for_request(p, 1_000, 5_000, 1, true), (6 * ONE, 5_000));
        assert_eq!(for_request(p, 1_000, 5_000, 0, true), (ONE, 0));
        // A pool stretched further than that wins, backlog or not, while others of the
        // tenant's refused requests are out (the pool refused just before: its queue
        // may hold retries).
        refused(p, 1_000);
        note(p, 30_000, 1_000);
        note(p, 30_000, 1_000 + WINDOW_MS);
        assert_eq!(current(p, 1_000 + WINDOW_MS).0, 8 * ONE);
        assert_eq!(for_request(p, 1_000 + WINDOW_MS, 5_000, 1, true).0, 8 * ONE);
        assert_eq!(for_request(p, 1_000 + WINDOW_MS, 5_000, 0, true).0, 8 * ONE);
    }

    #[test]
    fn a_tenant_with_no_other_refused_request_out_is_not_stretched() {
        // Turns ahead are others out; so is a mean hint longer than the mean gap
        // between refusals (Little's law: hint / gap of them out on average).
        assert!(others_out(1, 0, 0));
        assert!(others_out(0, 750_000, 12_000));
        // Refusals farther apart than the hints: about one out at a time, as a client
        // that pauses its whole tenant for a hint has. An unknown gap is no evidence.
        assert!(!others_out(0, 2_300, 28_000));
        assert!(!others_out(0, 40_000, 40_000));
        assert!(!others_out(0, 2_300, 0));
        let r = crate::region::HeapRegion::new(1, 1, 1, 1);
        let p = crate::region::Region::pool(&r, 0);
        refused(p, 1_000);
        note(p, 30_000, 1_000);
        note(p, 30_000, 1_000 + WINDOW_MS);
        let now = 1_000 + WINDOW_MS;
        let (s, queue) = current(p, now);
        assert_eq!(s, 8 * ONE);
        assert!(queue > TARGET_US, "{queue}");
        // The pool's stretch is 8, and the request itself waited 5 ms: neither
        // stretches a tenant with nothing else out. The queue is still reported.
        assert_eq!(for_request(p, now, 5_000, 0, false), (ONE, queue));
        assert_eq!(for_request(p, now, UNKNOWN, 0, false), (ONE, queue));
    }

    #[test]
    fn a_window_is_judged_by_its_mean_wait_not_its_least() {
        let r = crate::region::HeapRegion::new(1, 1, 1, 1);
        let p = crate::region::Region::pool(&r, 0);
        // A window in bursts: one request got in at once, three waited 3 ms behind
        // retries (the pool refused just before). Its least (100 µs) is no queue; its
        // mean (2,275 µs) is.
        refused(p, 990);
        for (q, at) in [(100, 1_000), (3_000, 1_005), (3_000, 1_010), (3_000, 1_020)] {
            note(p, q, at);
        }
        // The first wait of the next window closes it: the base takes in 1/64 of the
        // least (2 µs), the queue is the mean over it, 2,273 µs: 1 + 2 whole targets.
        note(p, 100, 1_025);
        assert_eq!(current(p, 1_025), (3 * ONE, 2_273));
        // A wait of a minute (a stale stamp) counts as 8 ms: with the closing wait of
        // 100 µs, a mean of 4,050 µs, a queue of 4,046 over a base of 4: x5 more.
        note(p, 60_000_000, 1_030);
        note(p, 100, 1_050);
        assert_eq!(current(p, 1_050), (15 * ONE, 4_046));
        // A window whose waits are all short eases it, however few they are.
        note(p, 150, 1_075);
        assert_eq!(current(p, 1_075).0, 15 * ONE - 1);
    }

    #[test]
    fn the_sum_word_counts_waits_and_caps_each() {
        assert_eq!(mean_of(0), None);
        assert_eq!(mean_of(sum_addend(700)), Some(700));
        assert_eq!(sum_addend(u32::MAX), 1 << SUM_BITS | MAX_SAMPLE_US as u64);
        let w = (0..1_000u32).map(sum_addend).sum::<u64>();
        assert_eq!(mean_of(w), Some(499));
    }

    #[test]
    fn a_standing_queue_multiplies_the_stretch_and_a_clear_one_eases_it() {
        // Over the target: times 1 + the queue in whole targets, at most 8.
        assert_eq!(next_stretch(0, TARGET_US + 1, 1), 2 * ONE);
        assert_eq!(next_stretch(2 * ONE, 3 * TARGET_US, 1), 8 * ONE);
        assert_eq!(next_stretch(2 * ONE, 50_000, 1), 16 * ONE);
        assert_eq!(next_stretch(MAX_STRETCH / 2, 50_000, 1), MAX_STRETCH);
        // At the target, down to a quarter of it: as it was.
        assert_eq!(next_stretch(64 * ONE, TARGET_US, 1), 64 * ONE);
        assert_eq!(next_stretch(64 * ONE, TARGET_US / 4, 1), 64 * ONE);
        // Under a quarter: 1/128 off, never under 1.
        assert_eq!(next_stretch(64 * ONE, TARGET_US / 4 - 1, 1), 1_016);
        assert_eq!(next_stretch(ONE, 0, 1), ONE);
        assert_eq!(next_stretch(ONE + 1, 0, 1), ONE);
        // Windows with no request: 1/128 each, after the closed window's verdict.
        assert_eq!(next_stretch(64 * ONE, 0, 3), 1024 - 8 - 7 - 7);
        assert_eq!(next_stretch(8 * ONE, 50_000, 2), 64 * ONE - 8);
        assert_eq!(next_stretch(MAX_STRETCH, 50_000, 1_000_000), ONE);
    }

    #[test]
    fn a_stretch_grows_fast_and_eases_slowly() {
        // A queue of 10 ms: from 1 to the most in three windows (75 ms).
        let mut s = ONE;
        for _ in 0..3 {
            s = next_stretch(s, 10_000, 1);
        }
        assert_eq!(s, MAX_STRETCH);
        // Cleared: halved in about 89 windows (2.2 s), back to 1 in about 625 (16 s).
        let mut n = 0;
        while s > MAX_STRETCH / 2 && n < 5_000 {
            s = next_stretch(s, 0, 1);
            n += 1;
        }
        assert!((85..=92).contains(&n), "{n}");
        while s > ONE && n < 5_000 {
            s = next_stretch(s, 0, 1);
            n += 1;
        }
        assert!((600..=650).contains(&n), "{n}");
    }

    #[test]
    fn a_stretched_hint_is_spread_over_half_of_it() {
        let hints: Vec<u64> = (0..1_000u64)
            .map(|turn| stretched_hint(3, 32 * ONE, 1_000_000 + turn))
            .collect();
        // 3 ms x 32 = 96 ms, plus up to 48.
        assert!(hints.iter().all(|h| (96..=144).contains(h)), "{hints:?}");
        let spread = hints.iter().max().unwrap() - hints.iter().min().unwrap();
        assert!(spread >= 40, "turns given together come back spread: {spread} ms");
        assert_eq!(stretched_hint(3, ONE, 7), 3 + crate::retry::spread(7 ^ 0x5EED) % 2);
        // At most a second, spread below it; a longer hint is left as it was.
        let long: Vec<u64> = (0..1_000u64)
            .map(|turn| stretched_hint(40, MAX_STRETCH, turn))
            .collect();
        assert!(long.iter().all(|h| (666..=MAX_STRETCHED_MS).contains(h)));
        assert!(long.iter().max().unwrap() - long.iter().min().unwrap() >= 200);
        assert_eq!(stretched_hint(5_000, MAX_STRETCH, 1), 5_000);
    }

    #[test]
    fn a_window_long_after_the_last_refusal_is_clear() {
        let r = crate::region::HeapRegion::new(1, 1, 1, 1);
        let p = crate::region::Region::pool(&r, 0);
        // Never refused: a queue of 29 ms stretches nothing.
        note(p, 30_000, 1_000);
        note(p, 30_000, 1_000 + WINDOW_MS);
        assert_eq!(current(p, 1_000 + WINDOW_MS).0, ONE);
        // Refused: the next window's queue stretches (8x at most a window)...
        refused(p, 1_030);
        note(p, 30_000, 1_000 + 2 * WINDOW_MS);
        assert_eq!(current(p, 1_000 + 2 * WINDOW_MS).0, 8 * ONE);
        // ...and so does one that closes a whole span after it (the window since, with
        // idle windows eased)...
        let late = 1_030 + RETRY_SPAN_MS + 1;
        note(p, 30_000, late - WINDOW_MS);
        let before = current(p, late - WINDOW_MS).0;
        assert!(before > 8 * ONE, "{before}");
        // ...but one that closes more than RETRY_SPAN_MS after that refusal: the same
        // queue eases it, as a clear window does.
        note(p, 30_000, late);
        assert_eq!(current(p, late).0, before - before / 128);
        // The queue itself is still reported.
        assert!(current(p, late).1 > TARGET_US);
        // A refusal stored once a ms at most, and never moved back.
        refused(p, late);
        refused(p, late - 5);
        assert_eq!(p.queue_refused_ms.load(Relaxed), late);
    }

    #[test]
    fn retries_are_possible_for_a_span_after_a_refusal() {
        assert!(!retries_possible(0, 5_000), "a pool that never refused");
        assert!(retries_possible(4_000, 4_000));
        assert!(retries_possible(4_000, 4_000 + RETRY_SPAN_MS));
        assert!(!retries_possible(4_000, 4_001 + RETRY_SPAN_MS));
        assert!(retries_possible(4_010, 4_000), "a clock behind the refuser's");
    }

    #[test]
    fn a_stretch_multiplies_the_hint() {
        assert_eq!(stretched(500, ONE), 500);
        assert_eq!(stretched(500, 0), 500);
        assert_eq!(stretched(500, 40), 1_250);
        assert_eq!(stretched(u64::MAX, MAX_STRETCH), u64::MAX / ONE as u64);
    }
}
