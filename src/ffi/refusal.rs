//! The C ABI's refusal: its facts as a `#[repr(C)]` struct the acquire calls fill, its
//! explanation written into a caller's buffer, and the share it was judged by.

use std::ffi::c_char;

use super::calls::handles;
use super::{FAIRSHM_OK, arg_table, fairshm_table, guard, invalid};
use crate::refusal::{Reason, Refusal, Refused};
use crate::table::Table;

/// The facts of a refusal (`FAIRSHM_REFUSED`), filled by the acquire calls.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fairshm_refusal {
    // 96 bytes, no padding; `tests/c_abi.rs` and the bindings rely on the offsets.
    /// 1 `pool_full`, 2 `over_share`, 3 `timed_out`, 4 `cancelled`, 5 `rate_limited`,
    /// 6 `work_debt`, 10 `too_many_residents` (`fairshm_code_name`).
    pub reason: u32,
    /// The rule's reason for the last refusal (1, 2, 5, 6 or 10): `reason` itself, or
    /// for `timed_out` and `cancelled` what blocked the wait last.
    pub rule: u32,
    /// Units asked for.
    pub units: u32,
    /// The tenant's refused requests whose turns come before this one's: its backlog.
    pub queued: u32,
    /// When to try again, in ms, rounded up, at least 1.
    pub retry_after_ms: u64,
    /// The pool's units in use and the tenant's units held, as the rule saw them.
    pub in_use: u32,
    pub held: u32,
    /// The pool's capacity and floor, as frozen for the decision.
    pub capacity: u32,
    pub floor: u32,
    /// The tenant's weight and the active weight it was judged among (its own in it).
    pub weight: u32,
    /// Units more that would have to be free (`pool_full`) or that would eat into the
    /// floor (`over_share`).
    pub short_units: u32,
    pub active_weight: u64,
    /// How long a blocking acquire waited (`timed_out`, `cancelled`, and what else ended
    /// its wait: `too_many_residents`, or a rate whose next token comes after its
    /// deadline); else 0.
    pub waited_ms: u64,
    /// The handles asked with, so that `fairshm_explain` can name them.
    pub pool: u32,
    pub tenant: u32,
    /// How often a turn of this tenant's comes, in µs (the retry-after's estimate).
    pub interval_us: u64,
    /// How far the server's queue stretched the hint of a tenant over its share, in
    /// percent (100: not at all), and that queue, µs: the last window's mean wait over
    /// its usual (`fairshm_note_queue`).
    pub queue_stretch_pct: u32,
    pub server_queue_us: u32,
    /// For `rate_limited` and `work_debt` (as `rule`): the refusing bucket's rate per
    /// second, as set (`interval_us` is its interval, rounded); else 0.
    pub rate_per_s: u32,
    /// 0.
    pub reserved: u32,
}

const _: () = assert!(std::mem::size_of::<fairshm_refusal>() == 96);

impl fairshm_refusal {
    pub(super) fn new(r: &Refused, reason: Reason, waited_ms: u64, pool: u32, tenant: u32) -> Self {
        fairshm_refusal {
            reason: reason.code(),
            rule: r.reason.code(),
            units: r.units,
            queued: r.queued,
            retry_after_ms: r.retry_after_ms,
            in_use: r.in_use,
            held: r.held,
            capacity: r.capacity,
            floor: r.floor,
            weight: r.weight,
            short_units: r.short,
            active_weight: r.active_weight,
            waited_ms,
            pool,
            tenant,
            interval_us: r.interval_us as u64,
            queue_stretch_pct: r.queue_stretch_pct,
            server_queue_us: r.server_queue_us,
            rate_per_s: r.rate_per_s,
            reserved: 0,
        }
    }

    /// The engine's facts again (the rule's reason: `pool_full` or `over_share`).
    pub(super) fn facts(&self, rule_reason: Reason) -> Refused {
        Refused {
            reason: rule_reason,
            retry_after_ms: self.retry_after_ms,
            units: self.units,
            in_use: self.in_use,
            held: self.held,
            capacity: self.capacity,
            floor: self.floor,
            weight: self.weight,
            active_weight: self.active_weight,
            short: self.short_units,
            queued: self.queued,
            interval_us: self.interval_us.min(u32::MAX as u64) as u32,
            queue_stretch_pct: self.queue_stretch_pct,
            server_queue_us: self.server_queue_us,
            rate_per_s: self.rate_per_s,
        }
    }
}

/// Writes the explanation of a refusal (what was asked, what blocked it, what to do)
/// into `buf` (`len` bytes, NUL-terminated, cut at a character boundary if too short;
/// `buf` may be null when `len` is 0). Returns the explanation's full length in bytes,
/// without the NUL, or a negative error code, with `buf` (if `len` > 0) the empty
/// string, so that a caller that prints it unchecked prints nothing stale.
///
/// # Safety
/// `t` is null or an open table; `refusal` null or readable; `buf` null or writable
/// for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_explain(
    t: *const fairshm_table,
    refusal: *const fairshm_refusal,
    buf: *mut c_char,
    len: usize,
) -> i64 {
    guard64(|| {
        if len > 0 && !buf.is_null() {
            // SAFETY: non-null, and writable for `len > 0` bytes by the contract.
            unsafe { buf.write(0) };
        }
        // SAFETY: per this function's contract.
        let table = unsafe { arg_table(t) }?;
        // SAFETY: null or readable, by the contract.
        let r = unsafe { refusal.as_ref() }
            .ok_or_else(|| invalid("argument `refusal` is null".into()))?;
        let text = explain(&table, r)?;
        if len > 0 {
            if buf.is_null() {
                return Err(invalid("argument `buf` is null with len > 0".into()));
            }
            // SAFETY: non-null, and writable for `len > 0` bytes by the contract.
            unsafe { super::write_text(&text, buf, len) };
        }
        Ok(text.len() as i64)
    })
}

fn explain(table: &Table, r: &fairshm_refusal) -> Result<String, i32> {
    let Some(reason) = Reason::from_code(r.reason) else {
        return Err(invalid(format!(
            "refusal reason {} is not a reason code",
            r.reason
        )));
    };
    let (p, tn) = handles(table, r.pool, r.tenant)?;
    let rule = match Reason::from_code(r.rule) {
        Some(
            x @ (Reason::PoolFull
            | Reason::OverShare
            | Reason::RateLimited
            | Reason::WorkDebt
            | Reason::TooManyResidents),
        ) => x,
        _ => {
            return Err(invalid(format!(
                "refusal rule {} is not 1, 2, 5, 6 or 10",
                r.rule
            )));
        }
    };
    let tenant = table.engine().tenant_name(tn).unwrap_or_else(|| "?".into());
    let mut refusal = Refusal::new(table.engine().pool_name(p), &tenant, r.facts(rule));
    refusal.reason = reason;
    if matches!(reason, Reason::TimedOut | Reason::Cancelled)
        || ((reason == Reason::TooManyResidents || reason.is_rate()) && r.waited_ms > 0)
    {
        refusal.waited_ms = Some(r.waited_ms.min(u32::MAX as u64) as u32);
    }
    Ok(refusal.explanation())
}

/// `share(t)` of the tenant when the rule refused it, from the refusal's own numbers
/// (the rule's formula, so bindings need not copy it); 0 for a null refusal.
///
/// # Safety
/// `refusal` is null or readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_share(refusal: *const fairshm_refusal) -> f64 {
    // SAFETY: null or readable, by the contract.
    match unsafe { refusal.as_ref() } {
        Some(r) => crate::policy::fair_share::share(r.capacity, r.floor, r.weight, r.active_weight),
        None => 0.0,
    }
}

fn guard64(f: impl FnOnce() -> Result<i64, i32>) -> i64 {
    let mut v = 0i64;
    let rc = guard(|| match f() {
        Ok(x) => {
            v = x;
            FAIRSHM_OK
        }
        Err(rc) => rc,
    });
    if rc == FAIRSHM_OK { v } else { rc as i64 }
}
