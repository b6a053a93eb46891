//! The decision log: each process slot keeps its last [`crate::layout::LOG_PER_PROCESS`] decisions of
//! the admission rule in a ring of its own in the segment, with the inputs the rule
//! used, so that an operator can ask why a tenant was refused at a given moment and
//! `replay` can re-decide each one. A refusal by the tenant's rates is logged too
//! ([`POLICY_RATES`]), by a process that has registered already (a rate refusal
//! registers nothing).
//!
//! Writing costs no shared RMW: the ring and its head (`ProcRec.log_head`) belong to
//! one process, which advances the head with a plain load and store. Two threads of the
//! process that decide at the same instant may take the same position; each entry is a
//! seqlock-stamped line whose stamp carries a hash of its contents, so a reader keeps an
//! entry only when it is whole (one writer's), and skips one that two wrote at once or
//! that is being written. An entry overwritten while read fails its stamp too.
//!
//! Orderings: the writer zeroes the stamp, then a Release fence orders that before the
//! field stores (so a reader that sees a field of the new entry and then the stamp
//! sees the stamp changed), and publishes the stamp with Release last; the reader
//! loads the stamp with Acquire, the fields Relaxed, then an Acquire fence before
//! reloading the stamp (the standard seqlock reader).

use crate::layout::{LogRec, pair};
use crate::policy::Verdict;
use crate::policy::fair_share::{self, Frozen};
use crate::refusal::Reason;
use crate::region::Region;
use crate::sync::Ordering::*;
use crate::sync::fence;
use serde::Serialize;

/// Policy code of seed 000's fair share.
pub const POLICY_FAIR_SHARE: u32 = 0;
/// Fair share in an `evict` pool: where the rule refuses, the acquire evicts a resident
/// (granted) or finds none (`too_many_residents`), which the log's inputs cannot tell.
pub const POLICY_FAIR_SHARE_EVICT: u32 = 1;
/// The tenant's rates refused the acquire before any pool was touched (`rate_limited`
/// or `work_debt`; only refusals are logged: a grant is the pool's decision after it).
/// The entry's words keep the bucket's inputs instead of the pool's: `cap` is its rate
/// per second, `held` and `in_use` the low and high halves of how far its theoretical
/// arrival time was past `now` (ns: [`Entry::lead_ns`]); `floor` and `active_weight`
/// are 0.
pub const POLICY_RATES: u32 = 2;

/// One decision, as logged and read back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub at_ms: u64,
    pub pool: u32,
    pub tenant: u32,
    /// 0 granted, else a [`Reason`] code.
    pub outcome: u32,
    pub policy: u32,
    pub units: u32,
    pub in_use: u32,
    pub held: u32,
    pub cap: u32,
    pub floor: u32,
    pub weight: u32,
    pub active_weight: u32,
    pub hint_ms: u32,
    pub tid: u32,
    pub pid: u32,
}

impl Entry {
    fn words(&self) -> [u64; 7] {
        [
            self.at_ms,
            pair::make(
                (self.pool & 0xFFFF) | (self.outcome & 0xFF) << 16 | (self.policy & 0xFF) << 24,
                self.tenant,
            ),
            pair::make(self.units, self.in_use),
            pair::make(self.held, self.cap),
            pair::make(self.floor, self.weight),
            pair::make(self.active_weight, self.hint_ms),
            pair::make(self.tid, self.pid),
        ]
    }

    fn from_words(w: &[u64; 7]) -> Entry {
        let what = pair::lo(w[1]);
        Entry {
            at_ms: w[0],
            pool: what & 0xFFFF,
            outcome: (what >> 16) & 0xFF,
            policy: what >> 24,
            tenant: pair::hi(w[1]),
            units: pair::lo(w[2]),
            in_use: pair::hi(w[2]),
            held: pair::lo(w[3]),
            cap: pair::hi(w[3]),
            floor: pair::lo(w[4]),
            weight: pair::hi(w[4]),
            active_weight: pair::lo(w[5]),
            hint_ms: pair::hi(w[5]),
            tid: pair::lo(w[6]),
            pid: pair::hi(w[6]),
        }
    }

    /// A refusal by the tenant's rates (`l`), at `at_ms`, of an acquire of `units` of
    /// pool `pool`: see [`POLICY_RATES`].
    #[allow(clippy::too_many_arguments)]
    pub fn rate_refusal(
        at_ms: u64,
        pool: u32,
        tenant: u32,
        units: u32,
        weight: u32,
        l: &crate::rates::Limited,
        tid: u32,
        pid: u32,
    ) -> Entry {
        Entry {
            at_ms,
            pool,
            tenant,
            outcome: l.reason as u32,
            policy: POLICY_RATES,
            units,
            in_use: (l.lead_ns >> 32) as u32,
            held: l.lead_ns as u32,
            cap: l.rate,
            floor: 0,
            weight,
            active_weight: 0,
            hint_ms: l.retry_after_ms.min(u32::MAX as u64) as u32,
            tid,
            pid,
        }
    }

    /// A rate refusal's bucket lead over `now`, ns (see [`POLICY_RATES`]).
    pub fn lead_ns(&self) -> u64 {
        (self.in_use as u64) << 32 | self.held as u64
    }

    /// The name of an outcome of this entry's decision: [`outcome_name`]'s, but
    /// `evicted` for a grant of an `evict` pool that the rule refused on these inputs
    /// (so the acquire took a resident's permit: a grant at `2/2` would not explain
    /// itself).
    pub fn outcome_text(&self, code: u32) -> &'static str {
        if code == 0 && self.policy == POLICY_FAIR_SHARE_EVICT && self.rule() != 0 {
            "evicted"
        } else {
            outcome_name(code)
        }
    }

    /// Seed 000's rule on this entry's pool inputs: 0 admitted, else the reason code.
    fn rule(&self) -> u32 {
        match fair_share::decide(&self.frozen(), self.in_use, self.held, self.units) {
            Verdict::Admit | Verdict::AdmitCharging => 0,
            Verdict::Refuse { reason, .. } => reason,
        }
    }

    /// The rule's inputs besides the two words.
    pub fn frozen(&self) -> Frozen {
        Frozen {
            cap: self.cap,
            floor: self.floor,
            weight: self.weight,
            active_weight: self.active_weight,
        }
    }
}

/// The stamp's check: the position and the words, each rotated by a different
/// amount, xor-ed and folded to 32 bits (a few cycles). Two threads' entries mixed
/// word by word differ in some word, which changes the check unless the differences
/// cancel exactly across rotations.
#[inline(always)]
fn check(pos: u64, w: &[u64; 7]) -> u32 {
    let mut h = pos.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for (i, x) in w.iter().enumerate() {
        h ^= x.rotate_left(9 * i as u32 + 5);
    }
    // Never 0: the stamp 0 means "being written".
    (h as u32 ^ (h >> 32) as u32) | 1
}

/// Logs `e` in process slot `slot`'s ring. Only the slot's own process calls this.
/// (Always inlined: on the acquire's hot path, a call would pass the entry through
/// memory.)
#[inline(always)]
pub fn record<R: Region>(r: &R, slot: usize, e: &Entry) {
    let n = r.geometry().log_per_proc;
    if n == 0 {
        return;
    }
    let head = &r.proc_slot(slot).log_head;
    // Relaxed: the head is this process's own; a reader bounds it and checks every
    // entry's stamp, so a stale or raced head costs at most an entry.
    let pos = head.load(Relaxed);
    // Relaxed: as the load (a plain store: the head is this process's own).
    head.store(pos.wrapping_add(1), Relaxed);
    // The ring's index: a mask for the segment's power-of-two ring (a 64-bit division
    // cost about 3% of an uncontended pair: perf, examples/hotloop), a division for any
    // other length (test regions).
    let i = if n.is_power_of_two() {
        pos as usize & (n - 1)
    } else {
        (pos % n as u64) as usize
    };
    let rec = r.log(slot, i);
    let w = e.words();
    let stamp = (pos.wrapping_add(1) << 32) | check(pos, &w) as u64;
    // Relaxed: "being written"; the fence below orders it before the fields.
    rec.stamp.store(0, Relaxed);
    // Release fence: the zeroed stamp is ordered before the field stores below.
    fence(Release);
    let fields = fields(rec);
    for (f, x) in fields.iter().zip(w) {
        // Relaxed: published by the stamp's Release store below.
        f.store(x, Relaxed);
    }
    // Release: a reader that sees this stamp sees the fields above.
    rec.stamp.store(stamp, Release);
}

/// An entry's seven words after its stamp, in the order `Entry::words` gives them.
pub fn fields(rec: &LogRec) -> [&crate::sync::AtomicU64; 7] {
    [
        &rec.at_ms,
        &rec.what,
        &rec.units_in_use,
        &rec.held_cap,
        &rec.floor_weight,
        &rec.active_hint,
        &rec.tid_pid,
    ]
}

/// Reads entry `pos` of slot `slot`'s ring, if it is whole and still that position's.
fn read_at<R: Region>(r: &R, slot: usize, pos: u64) -> Option<Entry> {
    let n = r.geometry().log_per_proc as u64;
    let rec = r.log(slot, (pos % n) as usize);
    // Acquire: pairs with the writer's Release store of the stamp.
    let s1 = rec.stamp.load(Acquire);
    if s1 >> 32 != pos.wrapping_add(1) & 0xFFFF_FFFF {
        return None;
    }
    let mut w = [0u64; 7];
    for (x, f) in w.iter_mut().zip(fields(rec)) {
        // Relaxed: validated by the stamp's second read.
        *x = f.load(Relaxed);
    }
    // Acquire fence: the field loads above happen before the stamp's reload.
    fence(Acquire);
    // Relaxed: the fence above orders the field loads before it.
    let s2 = rec.stamp.load(Relaxed);
    (s1 == s2 && s1 as u32 == check(pos, &w)).then(|| Entry::from_words(&w))
}

/// A logged decision, read back with where it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Logged {
    pub slot: usize,
    /// Its position in the slot's ring (how many decisions the slot logged before it).
    pub seq: u64,
    pub entry: Entry,
}

/// Every whole entry of every process slot's ring, oldest first by time (ties by
/// slot and position). Read-only; `skipped` counts entries that were being written or
/// were torn by two threads of one process.
pub fn read_all<R: Region>(r: &R) -> (Vec<Logged>, usize) {
    let geo = r.geometry();
    let n = geo.log_per_proc as u64;
    let mut out = Vec::new();
    let mut skipped = 0;
    if n == 0 {
        return (out, 0);
    }
    for slot in 0..geo.procs {
        // Relaxed: a bound only; every entry is validated by its stamp.
        let head = r.proc_slot(slot).log_head.load(Relaxed);
        for pos in head.saturating_sub(n)..head {
            match read_at(r, slot, pos) {
                Some(entry) => out.push(Logged {
                    slot,
                    seq: pos,
                    entry,
                }),
                None => skipped += 1,
            }
        }
    }
    out.sort_by_key(|l| (l.entry.at_ms, l.slot, l.seq));
    (out, skipped)
}

/// The outcome the library's rule gives a logged decision's inputs: 0 granted, else
/// the reason code. `None` for a policy this version does not know.
pub fn redecide(e: &Entry) -> Option<u32> {
    if e.policy == POLICY_RATES {
        // The bucket that refused, as its outcome names it, decided again on its inputs.
        let reason = Reason::from_code(e.outcome).filter(|r| r.is_rate())?;
        return Some(if crate::rates::refuses(reason, e.cap, e.lead_ns()) {
            e.outcome
        } else {
            0
        });
    }
    let rule = e.rule();
    match e.policy {
        POLICY_FAIR_SHARE => Some(rule),
        // The rule's refusal turned into an eviction or `too_many_residents`: both
        // agree with it; a refusal for the rule's own reason would not.
        POLICY_FAIR_SHARE_EVICT
            if rule != 0
                && matches!(e.outcome, 0 | crate::residents::TOO_MANY_RESIDENTS) =>
        {
            Some(e.outcome)
        }
        POLICY_FAIR_SHARE_EVICT => Some(rule),
        _ => None,
    }
}

/// The name of an outcome code.
pub fn outcome_name(code: u32) -> &'static str {
    if code == 0 {
        "granted"
    } else {
        Reason::from_code(code).map_or("unknown", Reason::as_str)
    }
}

/// A decision the rule re-decides differently from its log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Mismatch {
    pub slot: usize,
    pub seq: u64,
    pub logged: &'static str,
    /// `None`: a policy this version cannot re-decide.
    pub replayed: Option<&'static str>,
}

/// Re-decides every logged decision from its recorded inputs with the library's rule.
pub fn replay(log: &[Logged]) -> Vec<Mismatch> {
    log.iter()
        .filter_map(|l| {
            let again = redecide(&l.entry);
            (again != Some(l.entry.outcome)).then(|| Mismatch {
                slot: l.slot,
                seq: l.seq,
                logged: l.entry.outcome_text(l.entry.outcome),
                replayed: again.map(|c| l.entry.outcome_text(c)),
            })
        })
        .collect()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::region::HeapRegion;

    fn entry(i: u32) -> Entry {
        Entry {
            at_ms: 1000 + i as u64,
            pool: 1,
            tenant: i % 3,
            outcome: 0,
            policy: 0,
            units: 1,
            in_use: i % 4,
            held: 0,
            cap: 4,
            floor: 1,
            weight: 1,
            active_weight: 2,
            hint_ms: 0,
            tid: 77,
            pid: 55,
        }
    }

    #[test]
    fn a_ring_keeps_its_last_entries_in_order() {
        // A power-of-two ring (the segment's: the index is a mask) and another length.
        for n in [8u64, 5] {
            let r = HeapRegion::with_log(2, 4, 2, 2, n as usize);
            for i in 0..20 {
                record(&r, 1, &entry(i));
            }
            record(&r, 0, &entry(100));
            let (log, skipped) = read_all(&r);
            assert_eq!(skipped, 0, "ring of {n}");
            let slot1: Vec<u64> = log.iter().filter(|l| l.slot == 1).map(|l| l.seq).collect();
            assert_eq!(slot1, (20 - n..20).collect::<Vec<_>>(), "ring of {n}");
            assert_eq!(log.last().unwrap().slot, 0);
            assert_eq!(log[0].entry, entry(20 - n as u32));
            assert!(replay(&log).is_empty(), "{:?}", replay(&log));
        }
    }

    #[test]
    fn a_torn_entry_is_skipped_and_a_wrong_outcome_is_reported() {
        let r = HeapRegion::with_log(1, 4, 1, 2, 4);
        record(&r, 0, &entry(1));
        record(&r, 0, &entry(2));
        // A second writer's field lands in entry 0 after its stamp: torn.
        r.log(0, 0).held_cap.store(pair::make(3, 4), Relaxed);
        let (log, skipped) = read_all(&r);
        assert_eq!((log.len(), skipped), (1, 1));
        // A logged grant that the rule refuses (the pool was full).
        let mut e = entry(3);
        e.in_use = 4;
        record(&r, 0, &e);
        let (log, _) = read_all(&r);
        let m = replay(&log);
        assert_eq!(m.len(), 1);
        assert_eq!((m[0].logged, m[0].replayed), ("granted", Some("pool_full")));
    }

    #[test]
    fn a_rate_refusal_round_trips_and_replays_by_the_rates_rule() {
        let r = HeapRegion::with_log(1, 4, 1, 2, 4);
        let l = crate::rates::Limited {
            reason: Reason::WorkDebt,
            retry_after_ms: 2_000,
            rate: 100,
            lead_ns: 3_000_000_000, // past 2^32: both halves kept
        };
        let e = Entry::rate_refusal(500, 0, 1, 1, 2, &l, 7, 8);
        assert_eq!((e.policy, e.outcome, e.lead_ns(), e.cap), (POLICY_RATES, 6, l.lead_ns, 100));
        assert_eq!(Entry::from_words(&e.words()), e);
        record(&r, 0, &e);
        // A work bucket less than a second ahead would not refuse: logged as refused, the
        // replay says it differs; a request bucket's extra token counts.
        let mut wrong = e;
        (wrong.held, wrong.in_use) = (900_000_000, 0);
        record(&r, 0, &wrong);
        let mut limited = wrong;
        (limited.outcome, limited.cap) = (Reason::RateLimited as u32, 9); // + 111 ms > 1 s
        record(&r, 0, &limited);
        let (log, _) = read_all(&r);
        assert_eq!(log.len(), 3);
        let m = replay(&log);
        assert_eq!(m.len(), 1, "{m:?}");
        assert_eq!((m[0].seq, m[0].logged, m[0].replayed), (1, "work_debt", Some("granted")));
        // An outcome the rates cannot give is a policy this version cannot re-decide.
        let mut odd = e;
        odd.outcome = 1;
        assert_eq!(redecide(&odd), None);
    }

    #[test]
    fn words_round_trip() {
        let mut e = entry(5);
        e.outcome = 2;
        e.pool = 0xFFFF;
        e.tenant = 1023;
        e.hint_ms = 12345;
        let w = e.words();
        assert_eq!(Entry::from_words(&w), e);
    }
}
