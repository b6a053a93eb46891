//! A refusal is a value: a stable reason code, a retry-after, and the facts the rule
//! decided on. [`Refused`] is those facts, `Copy`, built without allocating on the
//! engine's path; [`Refusal`] adds the pool's and tenant's names for the façade, and
//! writes the explanation (what was asked, what blocked it, what to do) only when it is
//! asked for.

use crate::admission::RefusalFacts;
use crate::policy::Verdict;
use crate::policy::fair_share::{OVER_SHARE, POOL_FULL, share};
use serde::Serialize;

/// Stable reason codes (also the C ABI's integers). Never renumbered; later policies
/// add codes, so matches need a wildcard arm.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[repr(u32)]
pub enum Reason {
    /// Under its share, but the pool has no room for the units asked.
    PoolFull = 1,
    /// At or past its share; granting would eat into the floor kept for others.
    OverShare = 2,
    /// A blocking acquire's timeout ran out.
    TimedOut = 3,
    /// A blocking acquire was cancelled (`Table::acquire_cancellable`).
    Cancelled = 4,
    /// Over the tenant's request rate: refused before any pool was touched.
    RateLimited = 5,
    /// The tenant's charged work ran past its work rate's burst: in debt until refilled.
    WorkDebt = 6,
    /// Guaranteed pool: the request needs borrowed units for longer than the reclaim
    /// horizon.
    HoldExceedsReclaimHorizon = 7,
    /// Guaranteed pool: the tenant's own guarantee is on loan; it comes back as the
    /// blocking leases end.
    GuaranteeOnLoan = 8,
    /// Guaranteed pool: the tenant's guarantee is in use and no idle tenant can lend
    /// the rest.
    GuaranteeExhausted = 9,
    /// `evict` pool: full, and no resident became evictable (all in a call, or none of
    /// the tenant's own while it is over its share) within the pool's wait.
    TooManyResidents = 10,
}

impl Reason {
    /// Reasons with a per-tenant counter in the segment (index = code - 1).
    ///
    /// cbindgen:ignore
    pub const ALL_COUNTED: [Reason; 4] = [
        Reason::PoolFull,
        Reason::OverShare,
        Reason::TimedOut,
        Reason::Cancelled,
    ];

    pub fn code(self) -> u32 {
        self as u32
    }
    /// Every reason, in code order.
    ///
    /// cbindgen:ignore
    pub const ALL: [Reason; 10] = [
        Reason::PoolFull,
        Reason::OverShare,
        Reason::TimedOut,
        Reason::Cancelled,
        Reason::RateLimited,
        Reason::WorkDebt,
        Reason::HoldExceedsReclaimHorizon,
        Reason::GuaranteeOnLoan,
        Reason::GuaranteeExhausted,
        Reason::TooManyResidents,
    ];

    /// The reason with this code, if it is one.
    pub fn from_code(code: u32) -> Option<Reason> {
        Self::ALL.into_iter().find(|r| r.code() == code)
    }

    /// Whether a tenant's rates gave it (not a pool's rule).
    pub fn is_rate(self) -> bool {
        matches!(self, Reason::RateLimited | Reason::WorkDebt)
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::PoolFull => "pool_full",
            Reason::OverShare => "over_share",
            Reason::TimedOut => "timed_out",
            Reason::Cancelled => "cancelled",
            Reason::RateLimited => "rate_limited",
            Reason::WorkDebt => "work_debt",
            Reason::HoldExceedsReclaimHorizon => "hold_exceeds_reclaim_horizon",
            Reason::GuaranteeOnLoan => "guarantee_on_loan",
            Reason::GuaranteeExhausted => "guarantee_exhausted",
            Reason::TooManyResidents => "too_many_residents",
        }
    }
}

/// The facts of a refusal, as the engine returns them: `Copy`, no allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Refused {
    pub reason: Reason,
    /// When to try again, in ms, rounded up, at least 1.
    pub retry_after_ms: u64,
    /// Units asked for.
    pub units: u32,
    /// The pool's units in use, and the tenant's units held, that the rule saw.
    pub in_use: u32,
    pub held: u32,
    /// `POOL` and `SHARE_FLOOR` as frozen for the decision.
    pub capacity: u32,
    pub floor: u32,
    /// The tenant's weight and the active weight it was judged among (its own
    /// included).
    pub weight: u32,
    pub active_weight: u64,
    /// Units more that would have to be free (`pool_full`), or that would eat into
    /// the floor (`over_share`).
    pub short: u32,
    /// The tenant's refused requests whose turns come before this one's: its backlog.
    pub queued: u32,
    /// How often a turn of this tenant's comes, in µs (saturating): its mean hold over the units
    /// that turn over for it (its own if over its share, the pool's if not), over its
    /// share stretched by its refusals per grant, at most twice (see `retry`).
    pub interval_us: u32,
    /// How far the server's queue stretched the hint of a tenant over its
    /// share, in percent (100: not at all; see `Table::note_queue`), and that queue: the
    /// mean wait in the server's queue over the last window, beyond its usual, µs.
    pub queue_stretch_pct: u32,
    pub server_queue_us: u32,
    /// A refusal by the tenant's rates (`rate_limited`, `work_debt`): the refusing
    /// bucket's rate per second, exactly as set (`interval_us` is its interval, which
    /// rounds). 0 for every other reason.
    pub rate_per_s: u32,
}

impl Refused {
    #[cfg_attr(loom, allow(dead_code))] // the engine, its caller, is not built under loom
    pub(crate) fn from_facts(units: u32, f: &RefusalFacts) -> Refused {
        let (reason, short) = match f.verdict {
            Verdict::Refuse {
                reason: OVER_SHARE,
                short,
            } => (Reason::OverShare, short),
            Verdict::Refuse {
                reason: POOL_FULL,
                short,
            } => (Reason::PoolFull, short),
            Verdict::Refuse {
                reason: crate::residents::TOO_MANY_RESIDENTS,
                short,
            } => (Reason::TooManyResidents, short),
            Verdict::Refuse { short, .. } => (Reason::PoolFull, short),
            Verdict::Admit | Verdict::AdmitCharging => (Reason::PoolFull, 0),
        };
        Refused {
            reason,
            retry_after_ms: f.retry_after_ms,
            units,
            in_use: f.in_use,
            held: f.held,
            capacity: f.cap,
            floor: f.floor,
            weight: f.weight,
            active_weight: f.active_weight.max(f.weight as u64),
            short,
            queued: f.queued,
            interval_us: f.interval_us,
            queue_stretch_pct: stretch_pct(f.queue_stretch),
            server_queue_us: f.server_queue_us,
            rate_per_s: 0,
        }
    }

    /// A refusal by the tenant's rates (`rate_limited`, `work_debt`): no pool was
    /// touched, so the pool's numbers are 0; `interval_us` is the bucket's: how often a
    /// token comes.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn by_rate(units: u32, weight: u32, l: &crate::rates::Limited) -> Refused {
        Refused {
            reason: l.reason,
            retry_after_ms: l.retry_after_ms,
            units,
            in_use: 0,
            held: 0,
            capacity: 0,
            floor: 0,
            weight,
            active_weight: weight as u64,
            short: 0,
            queued: 0,
            interval_us: (l.interval_ns() / 1000).min(u32::MAX as u64) as u32,
            queue_stretch_pct: 100,
            server_queue_us: 0,
            rate_per_s: l.rate,
        }
    }

    /// `share(t)` of the tenant when it was refused.
    pub fn share(&self) -> f64 {
        share(self.capacity, self.floor, self.weight, self.active_weight)
    }
}

/// A stretch in sixteenths (`server_queue`) in percent, 100 at least.
pub(crate) fn stretch_pct(s: u32) -> u32 {
    (s.max(crate::server_queue::ONE) as u64 * 100 / crate::server_queue::ONE as u64) as u32
}

/// Why an acquire was not granted, with the names it was asked by.
#[derive(Clone, Debug, PartialEq)]
pub struct Refusal {
    pub reason: Reason,
    /// When to try again, in ms, rounded up; `None` when no estimate is honest.
    pub retry_after_ms: Option<u64>,
    pub pool: Box<str>,
    pub tenant: Box<str>,
    /// The facts of the last refusal by the rule (for `timed_out` and `cancelled`, the
    /// one before the wait ended).
    pub facts: Refused,
    /// How long a blocking acquire waited (ms, saturating), for `timed_out` and
    /// `cancelled`, and for what ended its wait otherwise (`too_many_residents`, or a
    /// rate whose next token comes after its deadline).
    pub waited_ms: Option<u32>,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: ", self.reason.as_str())?;
        self.write_explanation(f)
    }
}

impl Serialize for Refusal {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Refusal", 13)?;
        st.serialize_field("reason", &self.reason)?;
        st.serialize_field("code", &self.reason.code())?;
        st.serialize_field("retry_after_ms", &self.retry_after_ms)?;
        st.serialize_field("explanation", &self.explanation())?;
        st.serialize_field("pool", &self.pool)?;
        st.serialize_field("tenant", &self.tenant)?;
        st.serialize_field("units", &self.facts.units)?;
        st.serialize_field("in_use", &self.facts.in_use)?;
        st.serialize_field("capacity", &self.facts.capacity)?;
        st.serialize_field("floor", &self.facts.floor)?;
        st.serialize_field("held", &self.facts.held)?;
        st.serialize_field("share", &self.share())?;
        st.serialize_field("waited_ms", &self.waited_ms)?;
        st.end()
    }
}

/// The interval of a rate of `.0` per second, in the unit that shows it (ms down to
/// 0.1 ms, then us, then ns).
struct Every(f64);

impl std::fmt::Display for Every {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = 1000.0 / self.0.max(1.0);
        if ms >= 0.1 {
            write!(f, "{ms:.1} ms")
        } else if ms >= 0.001 {
            write!(f, "{:.1} us", ms * 1000.0)
        } else {
            write!(f, "{:.1} ns", ms * 1_000_000.0)
        }
    }
}

/// The estimate behind the retry-after, in words.
struct Turn<'a>(&'a Refused);

impl std::fmt::Display for Turn<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let x = self.0;
        let every = x.interval_us as f64 / 1000.0;
        let whose = if x.reason == Reason::OverShare {
            "its own releases, shared with its new requests,"
        } else {
            "the pool's releases"
        };
        match x.queued {
            0 => write!(f, "No request of this tenant's is queued ahead")?,
            q => write!(
                f,
                "{} of this tenant's {} queued ahead",
                plural(q, "refused request"),
                if q == 1 { "is" } else { "are" },
            )?,
        }
        let turn_ms = crate::retry::turn_ms(x.queued, x.interval_us as u64);
        // "every 0.0 ms" would say nothing: a burst of releases in a few us.
        let (how_often, every) = if x.interval_us < 50 {
            ("more often than", 0.1)
        } else {
            ("about", every)
        };
        write!(
            f,
            "; {whose} make room {how_often} every {every:.1} ms, so its turn is expected in "
        )?;
        if x.queue_stretch_pct > 100 && x.retry_after_ms > turn_ms {
            // A stretched hint (see `server_queue`): the turn, then why later.
            return write!(
                f,
                "{turn_ms} ms; but requests wait {:.1} ms more than usual in the server's \
                 queue, where a retry would wait ahead of other tenants' requests, so it is \
                 told to come back {:.2}x as late: in {} ms",
                x.server_queue_us as f64 / 1000.0,
                x.queue_stretch_pct as f64 / 100.0,
                x.retry_after_ms
            );
        }
        // A hint shorter than its turn was cut: at the longest hint, or (see
        // `admission`) at the departure of a quiet tenant from the active set.
        if x.retry_after_ms >= turn_ms {
            write!(f, "{} ms", x.retry_after_ms)
        } else if x.retry_after_ms >= crate::retry::MAX_HINT_MS {
            write!(
                f,
                "{turn_ms} ms, past the longest hint given ({} ms)",
                crate::retry::MAX_HINT_MS
            )
        } else {
            write!(
                f,
                "{turn_ms} ms, but another tenant, quiet since, leaves the active set in {} ms \
                 unless it asks again, and this tenant's share grows then",
                x.retry_after_ms
            )
        }
    }
}

/// How much room the pool had: "is full (8 of 8 in use)", or, for a request of more
/// units than are free, "has only 5 of 8 units free (3 in use)": a pool with room
/// left is not called full; nor is one holding past its capacity, which says so.
struct Room<'a>(&'a Refused);

impl std::fmt::Display for Room<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let x = self.0;
        match x.capacity.checked_sub(x.in_use) {
            Some(free) if free > 0 => write!(
                f,
                "has only {} of {} free ({} in use)",
                free,
                plural(x.capacity, "unit"),
                x.in_use
            ),
            // A `per_worker` pool shrinks as workers go, under what its holders keep.
            _ if x.in_use > x.capacity => write!(
                f,
                "holds more than its capacity ({} of {} in use: it shrank as workers \
                 went, and its holders keep what they hold)",
                x.in_use, x.capacity
            ),
            _ => write!(f, "is full ({} of {} in use)", x.in_use, x.capacity),
        }
    }
}

/// `n` things, as English says them: "1 unit", "2 units" (also `shmtool`'s lines).
pub(crate) fn plural(n: impl Into<u64>, one: &str) -> String {
    let n = n.into();
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {one}s")
    }
}

impl Refusal {
    /// The refusal of `pool` / `tenant` described by `facts`.
    pub fn new(pool: &str, tenant: &str, facts: Refused) -> Refusal {
        Refusal {
            reason: facts.reason,
            retry_after_ms: Some(facts.retry_after_ms),
            pool: pool.into(),
            tenant: tenant.into(),
            facts,
            waited_ms: None,
        }
    }

    /// `share(t)` of the tenant when the rule refused it.
    pub fn share(&self) -> f64 {
        self.facts.share()
    }

    /// What was asked, what blocked it and what to do, in words. Built on each call.
    pub fn explanation(&self) -> String {
        struct E<'a>(&'a Refusal);
        impl std::fmt::Display for E<'_> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.write_explanation(f)
            }
        }
        E(self).to_string()
    }

    fn write_explanation(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (pool, tenant, units) = (&self.pool, &self.tenant, self.facts.units);
        if let Some(waited) = self.waited_ms {
            let units = plural(units, "unit");
            if self.reason.is_rate() {
                // A blocking acquire ended early: its next token came after its deadline.
                if waited > 0 {
                    write!(
                        f,
                        "gave up after {waited} ms waiting for {units} of pool {pool:?} for \
                         tenant {tenant:?}, as the tenant's next token comes after the \
                         wait's deadline: ",
                    )?;
                }
            } else if self.reason == Reason::TooManyResidents {
                // Seed 000: a pool where nothing is evicted within its wait refuses.
                write!(
                    f,
                    "nothing became evictable in {waited} ms of waiting for {units} of \
                     pool {pool:?} for tenant {tenant:?}; what blocked it last: ",
                )?;
            } else {
                let what = if self.reason == Reason::Cancelled {
                    "cancelled"
                } else {
                    "timed out"
                };
                write!(
                    f,
                    "{what} after {waited} ms waiting for {units} of pool {pool:?} for \
                     tenant {tenant:?}; what blocked it last: ",
                )?;
            }
        }
        let x = &self.facts;
        let retry = x.retry_after_ms;
        // The rate as set; from the interval (which rounds) only for facts that lack it
        // (a C caller's refusal filled by hand).
        let per_s = if x.rate_per_s > 0 {
            x.rate_per_s as f64
        } else if x.interval_us > 0 {
            (1_000_000.0 / x.interval_us as f64).round()
        } else {
            0.0
        };
        match x.reason {
            Reason::RateLimited => {
                return write!(
                    f,
                    "tenant {tenant:?} asked for {} of pool {pool:?} over its request rate \
                     of {per_s} per second (a burst of one second's worth, then one every \
                     {}): refused before any pool was touched. Its next token \
                     comes in {retry} ms: retry after {retry} ms, slow this tenant's \
                     clients down, or raise its rate (set_rates).",
                    plural(units, "unit"),
                    Every(per_s),
                );
            }
            Reason::WorkDebt => {
                return write!(
                    f,
                    "tenant {tenant:?} asked for {} of pool {pool:?} while in work debt: \
                     the work charged to it ran past its rate of {per_s} units per second \
                     and its one-second burst. It is refused until the debt is paid: \
                     retry after {retry} ms, charge less work per request, or raise its \
                     work rate (set_rates).",
                    plural(units, "unit"),
                );
            }
            _ => {}
        }
        let sh = x.share();
        let company = if x.active_weight <= x.weight as u64 {
            "it is the only active tenant".to_owned()
        } else {
            format!("active weight {} (its own {})", x.active_weight, x.weight)
        };
        let turn = Turn(x);
        // What must come free for it: its units, less what is free now, or more in a
        // pool that holds past its capacity (a `per_worker` pool that shrank).
        let need = if x.short > 0 { x.short } else { units };
        match x.reason {
            Reason::TooManyResidents => {
                let (standing, whose) = if x.held as f64 >= sh && x.held >= x.floor {
                    ("at or past", "its own residents are")
                } else {
                    (
                        "under",
                        "every resident of the tenants at or past their shares is",
                    )
                };
                write!(
                    f,
                    "tenant {tenant:?} asked for {} of pool {pool:?}, which evicts residents \
                     to make room and {}. It holds {}, {standing} its share of {sh:.1} \
                     ({company}), and {whose} in a call, so none could be put to sleep. \
                     Retry after {retry} ms: a resident that ends its call becomes \
                     evictable, and a release makes room.",
                    plural(units, "unit"),
                    Room(x),
                    x.held,
                )
            }
            Reason::OverShare => write!(
                f,
                "tenant {tenant:?} asked for {} of pool {pool:?} ({} of {} in use). \
                 It holds {}, at or past its share of {sh:.1} ({company}), so it may \
                 use the pool only up to {} (capacity less the floor of {} kept for \
                 other tenants), and that is {} short. {turn}: retry after {retry} ms, \
                 or lower this tenant's concurrency.",
                plural(units, "unit"),
                x.in_use,
                x.capacity,
                x.held,
                x.capacity.saturating_sub(x.floor),
                x.floor,
                plural(x.short, "unit"),
            ),
            _ => write!(
                f,
                "tenant {tenant:?} asked for {} of pool {pool:?}, which {}. It holds {}, \
                 under its share of {sh:.1} ({company}), so it is first in line. {turn}: \
                 retry after {retry} ms, when a release is expected; it is admitted as \
                 soon as {} free{}.",
                plural(units, "unit"),
                Room(x),
                x.held,
                plural(need, "unit"),
                if need == 1 { "s" } else { "" },
            ),
        }
    }
}
