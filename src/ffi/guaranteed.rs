//! The C ABI of guaranteed pools (seed 001): resolve a pool and a tenant once, acquire
//! with cost, declared hold and `now`, release, and the statistics, fairness report
//! and plan as JSON.

use std::ffi::{CString, c_char};

use super::{
    FAIRSHM_OK, FAIRSHM_REFUSED, arg_name, arg_table, arg_table_tenant, fail, fairshm_table, guard,
    invalid,
};
use crate::engine::Engine;
use crate::guaranteed::{GLeaseId, GOutcome, GPoolId};
use crate::waiting::Cancel;

/// Blocking leases a `fairshm_guaranteed_refusal` carries (`n_blocking` counts all).
pub const FAIRSHM_GUARANTEED_BLOCKING: usize = 8;

/// Bit 63 of a lease id: set in every guaranteed lease's id, in no fair-share lease's.
pub const FAIRSHM_GUARANTEED_LEASE_TAG: u64 = 0x8000_0000_0000_0000;
const _: () = assert!(FAIRSHM_GUARANTEED_LEASE_TAG == crate::guaranteed::G_LEASE_TAG);

/// Bytes of a `why` buffer that always hold a guaranteed refusal's whole explanation
/// and its NUL (it names at most five blocking leases and counts the rest).
pub const FAIRSHM_GUARANTEED_WHY_MAX: usize = 4096;

/// The facts of a guaranteed pool's refusal (`FAIRSHM_REFUSED`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct fairshm_guaranteed_refusal {
    /// 7 `hold_exceeds_reclaim_horizon`, 8 `guarantee_on_loan`, 9 `guarantee_exhausted`.
    pub reason: u32,
    /// 1 if `retry_after_ms` holds an estimate; 0 when none can be promised (a blocking
    /// lease has overrun its declared hold).
    pub has_retry_after: u32,
    pub retry_after_ms: u64,
    /// Units asked (the cost, or 1 under the `requests` unit).
    pub units: u64,
    pub guarantee: u64,
    /// Free in the tenant's guarantee; on loan to others; to borrow; lendable now.
    pub own_free: u64,
    pub lent: u64,
    pub need: u64,
    pub lendable: u64,
    /// The seq of the state this call published (its place in a replay).
    pub seq: u64,
    /// Blocking leases in all; the first `FAIRSHM_GUARANTEED_BLOCKING` are in `blocking`.
    pub n_blocking: u32,
    /// The explanation's full length in bytes, without the NUL: more than the `why`
    /// buffer held means it was cut (a buffer of `FAIRSHM_GUARANTEED_WHY_MAX` bytes
    /// never cuts it).
    pub why_len: u32,
    /// The ids of the blocking leases, the earliest due first.
    pub blocking: [u64; FAIRSHM_GUARANTEED_BLOCKING],
    /// The borrower of each lease in `blocking`, as the tenant handle that
    /// `fairshm_guaranteed_tenant` gives: with its name, a lease's name in explanations
    /// and stats is `tenant#number`, its number the low 32 bits of its id.
    pub blocking_tenant: [u32; FAIRSHM_GUARANTEED_BLOCKING],
}

/// Resolves guaranteed pool `name` into `*pool`.
///
/// # Safety
/// `t` is null or an open table; `name` null or a NUL-terminated string; `pool` null or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_guaranteed_pool(
    t: *const fairshm_table,
    name: *const c_char,
    pool: *mut u32,
) -> i32 {
    guard(|| {
        // SAFETY: per this function's contract.
        let table = match unsafe { arg_table(t) } {
            Ok(t) => t,
            Err(rc) => return rc,
        };
        // SAFETY: per this function's contract.
        let name = match unsafe { arg_name(name, |n| table.engine().unknown_guaranteed_pool(&n)) } {
            Ok(n) => n,
            Err(rc) => return rc,
        };
        let Some(out) = std::ptr::NonNull::new(pool) else {
            return invalid("argument `pool` is null".into());
        };
        match table.engine().guaranteed_pool(name) {
            Ok(id) => {
                // SAFETY: non-null, and writable by this function's contract.
                unsafe { out.as_ptr().write(id.index() as u32) };
                FAIRSHM_OK
            }
            Err(e) => fail(e),
        }
    })
}

/// Resolves tenant `name` of guaranteed pool `pool` (its tenants are fixed) into
/// `*tenant`.
///
/// # Safety
/// As `fairshm_guaranteed_pool`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_guaranteed_tenant(
    t: *const fairshm_table,
    pool: u32,
    name: *const c_char,
    tenant: *mut u32,
) -> i32 {
    guard(|| {
        // SAFETY: per this function's contract.
        let (table, name) = match unsafe { arg_table_tenant(t, name) } {
            Ok(x) => x,
            Err(rc) => return rc,
        };
        let Some(out) = std::ptr::NonNull::new(tenant) else {
            return invalid("argument `tenant` is null".into());
        };
        match table.engine().guaranteed_tenant(GPoolId(pool), name) {
            Ok(i) => {
                // SAFETY: non-null, and writable by this function's contract.
                unsafe { out.as_ptr().write(i as u32) };
                FAIRSHM_OK
            }
            Err(e) => fail(e),
        }
    })
}

/// Asks for `cost` for `tenant` of guaranteed pool `pool`, declaring a hold of
/// `hold_ms`, at `now_ms` (`FAIRSHM_NOW`: the library's clock; 0 is the time 0).
/// `FAIRSHM_OK`: `*lease` is the lease.
/// `FAIRSHM_REFUSED`: `*refusal` has the facts and, if `why` is not null, the
/// explanation is written there, NUL-terminated in the `why_len` bytes given and cut
/// between characters if they are too few (`FAIRSHM_GUARANTEED_WHY_MAX` bytes always
/// hold it whole; the refusal's own `why_len` is its full length).
///
/// # Safety
/// `t` is null or an open table; `lease` and `refusal` null or writable; `why` null or
/// writable for `why_len` bytes.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn fairshm_guaranteed_acquire(
    t: *const fairshm_table,
    pool: u32,
    tenant: u32,
    cost: u64,
    hold_ms: u64,
    now_ms: u64,
    lease: *mut u64,
    refusal: *mut fairshm_guaranteed_refusal,
    why: *mut c_char,
    why_len: usize,
) -> i32 {
    guard(|| {
        let now = super::now_or_clock(now_ms);
        let ask =
            |e: &Engine, tenant| e.guaranteed_acquire(GPoolId(pool), tenant, cost, hold_ms, now);
        // SAFETY: this function's contract is `acquire_with`'s.
        unsafe { acquire_with(t, pool, tenant, (lease, refusal, why, why_len), ask) }
    })
}

/// `fairshm_guaranteed_acquire` on the library's clock, asked again until granted or
/// `timeout_ms` has passed (`UINT64_MAX`: for ever): as soon as units come back to the
/// pool (a release, or the reap of a dead holder, in any process), else at each
/// refusal's retry-after, and at least every half `idle_after_ms`, so that the tenant's
/// demand stays signalled and its guarantee frozen while it waits. `cancel` (may be
/// null), fired from another thread, ends the wait at once. A wait that ends unserved
/// (the time is up, the token fired, or at once a refusal that waiting cannot end:
/// `hold_exceeds_reclaim_horizon` with no retry-after) is `FAIRSHM_REFUSED` with the
/// last refusal, written as `fairshm_guaranteed_acquire` writes it. Sleeps in the
/// calling thread, and a signal alone does not end the wait: a handler may fire
/// `cancel` (`fairshm_cancel_fire` is async-signal-safe), and a caller that must run
/// its own code between sleeps (an interpreter) loops with
/// `fairshm_guaranteed_wake_seen_as` and `fairshm_guaranteed_sleep_as` instead.
///
/// # Safety
/// As `fairshm_guaranteed_acquire`; `cancel` null or from `fairshm_cancel_new`, not
/// freed.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn fairshm_guaranteed_acquire_wait(
    t: *const fairshm_table,
    pool: u32,
    tenant: u32,
    cost: u64,
    hold_ms: u64,
    timeout_ms: u64,
    cancel: *const super::cancel::fairshm_cancel,
    lease: *mut u64,
    refusal: *mut fairshm_guaranteed_refusal,
    why: *mut c_char,
    why_len: usize,
) -> i32 {
    guard(|| {
        // SAFETY: null or a live token, by this function's contract.
        let cancel = unsafe { cancel.as_ref() }.map(|c| &c.c);
        let timeout = std::time::Duration::from_millis(timeout_ms);
        let ask = |e: &Engine, tenant| {
            e.guaranteed_acquire_wait(GPoolId(pool), tenant, cost, hold_ms, timeout, cancel)
        };
        // SAFETY: this function's contract includes `acquire_with`'s.
        unsafe { acquire_with(t, pool, tenant, (lease, refusal, why, why_len), ask) }
    })
}

/// Where a guaranteed acquire writes its outcome: the lease id, the refusal, and the
/// explanation's buffer and its length.
type Out = (
    *mut u64,
    *mut fairshm_guaranteed_refusal,
    *mut c_char,
    usize,
);

/// The two guaranteed acquires' common part: checks the table, the pool handle, the
/// tenant handle and the out-pointers (in their order, so that an error names the
/// first bad argument), asks with `ask`, and writes what it came to for C.
///
/// # Safety
/// `t` is null or an open table; `lease` and `refusal` null or writable; `why` null or
/// writable for `why_len` bytes.
unsafe fn acquire_with(
    t: *const fairshm_table,
    pool: u32,
    tenant: u32,
    (lease, refusal, why, why_len): Out,
    ask: impl FnOnce(&Engine, u16) -> crate::error::Result<GOutcome>,
) -> i32 {
    // SAFETY: per this function's contract.
    let table = match unsafe { arg_table(t) } {
        Ok(t) => t,
        Err(rc) => return rc,
    };
    if let Err(e) = table.engine().guaranteed_rules(GPoolId(pool)) {
        return fail(e);
    }
    let Ok(tenant) = u16::try_from(tenant) else {
        return invalid(format!(
            "tenant handle {tenant} is not one of a guaranteed pool's"
        ));
    };
    let (Some(lease), Some(refusal)) = (
        std::ptr::NonNull::new(lease),
        std::ptr::NonNull::new(refusal),
    ) else {
        return invalid("argument `lease` or `refusal` is null".into());
    };
    let outcome = ask(table.engine(), tenant);
    // SAFETY: non-null, hence writable, and `why` null or writable for `why_len` bytes,
    // by this function's contract.
    unsafe { put_outcome(pool, outcome, lease, refusal, why, why_len) }
}

/// Writes a guaranteed acquire's outcome for C: the lease id, or the refusal's facts
/// and its explanation (into `why`, if not null); an error's code otherwise.
///
/// # Safety
/// `lease` and `refusal` writable; `why` null or writable for `why_len` bytes.
unsafe fn put_outcome(
    pool: u32,
    outcome: crate::error::Result<GOutcome>,
    lease: std::ptr::NonNull<u64>,
    refusal: std::ptr::NonNull<fairshm_guaranteed_refusal>,
    why: *mut c_char,
    why_len: usize,
) -> i32 {
    match outcome {
        Ok(GOutcome::Granted(g)) => {
            // SAFETY: writable by this function's contract.
            unsafe { lease.as_ptr().write(g.id.to_u64()) };
            FAIRSHM_OK
        }
        Ok(GOutcome::Refused(r)) => {
            let x = &r.facts;
            let mut out = fairshm_guaranteed_refusal {
                reason: r.reason.code(),
                has_retry_after: r.retry_after_ms.is_some() as u32,
                retry_after_ms: r.retry_after_ms.unwrap_or(0),
                units: x.units,
                guarantee: x.guarantee,
                own_free: x.own_free,
                lent: x.lent,
                need: x.need,
                lendable: x.lendable,
                seq: r.seq,
                n_blocking: x.blocking.len() as u32,
                ..Default::default()
            };
            for (k, b) in x
                .blocking
                .iter()
                .take(FAIRSHM_GUARANTEED_BLOCKING)
                .enumerate()
            {
                out.blocking[k] = GLeaseId { pool, no: b.lease }.to_u64();
                out.blocking_tenant[k] = b.tenant as u32;
            }
            let text = r.explanation();
            out.why_len = u32::try_from(text.len()).unwrap_or(u32::MAX);
            // SAFETY: writable by this function's contract.
            unsafe { refusal.as_ptr().write(out) };
            if !why.is_null() && why_len > 0 {
                // SAFETY: non-null, and writable for `why_len > 0` bytes (contract).
                unsafe { super::write_text(&text, why, why_len) };
            }
            FAIRSHM_REFUSED
        }
        Err(e) => fail(e),
    }
}

/// Releases guaranteed lease `lease` at `now_ms` (`FAIRSHM_NOW`: the library's clock).
/// A second release is `FAIRSHM_E_ALREADY_RELEASED`; a lease acquired through another
/// handle or by another process `FAIRSHM_E_NOT_OWNER`, saying who holds it; a
/// fair-share lease's id (no `FAIRSHM_GUARANTEED_LEASE_TAG`) is
/// `FAIRSHM_E_INVALID_REQUEST`, saying so.
///
/// # Safety
/// `t` is null or an open table.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_guaranteed_release(
    t: *const fairshm_table,
    lease: u64,
    now_ms: u64,
) -> i32 {
    guard(|| {
        // SAFETY: per this function's contract.
        let table = match unsafe { arg_table(t) } {
            Ok(t) => t,
            Err(rc) => return rc,
        };
        let Some(id) = GLeaseId::from_u64(lease) else {
            return invalid(format!(
                "lease id {lease} is not a guaranteed pool's lease: release a fair-share \
                 lease through the table (fairshm_release in C)"
            ));
        };
        let now = super::now_or_clock(now_ms);
        match table.engine().guaranteed_release(id, now) {
            Ok(_) => FAIRSHM_OK,
            Err(e) => fail(e),
        }
    })
}

/// Before an ask that may end in a sleep (`fairshm_guaranteed_sleep`): `*seen` is the
/// value of guaranteed pool `pool`'s wake word, which every release and reap of the
/// pool bumps.
///
/// # Safety
/// `t` is null or an open table; `seen` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_guaranteed_wake_seen(
    t: *const fairshm_table,
    pool: u32,
    seen: *mut u32,
) -> i32 {
    // SAFETY: per this function's contract, which is `put_seen`'s.
    unsafe { put_seen(t, seen, |e| e.guaranteed_wake_seen(GPoolId(pool))) }
}

/// Before an ask of tenant `tenant` that may end in a `fairshm_guaranteed_sleep_as`:
/// `*seen` is a cookie of guaranteed pool `pool`'s wake word and of the count of
/// releases for the tenant's waiters, which that sleep reads and moves on.
///
/// # Safety
/// `t` is null or an open table; `seen` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_guaranteed_wake_seen_as(
    t: *const fairshm_table,
    pool: u32,
    tenant: u32,
    seen: *mut u64,
) -> i32 {
    let tenant = g_tenant(tenant);
    // SAFETY: per this function's contract, which is `put_seen`'s.
    unsafe {
        put_seen(t, seen, |e| {
            e.guaranteed_wake_seen_as(GPoolId(pool), tenant)
        })
    }
}

/// After a wait on guaranteed pool `pool` that ends without its next
/// `fairshm_guaranteed_acquire` (an exception or a cancel between the calls of a
/// caller's loop): passes on the wake that ended this thread's last sleep, if it owes
/// one (a release wakes one waiter, which passes the wake on with its next ask on the
/// same thread). Nothing if it owes none: a wait may call it whenever it ends, as the
/// bindings do.
///
/// # Safety
/// `t` is null or an open table.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_guaranteed_wait_end(t: *const fairshm_table, pool: u32) -> i32 {
    guard(|| {
        // SAFETY: per this function's contract.
        let table = match unsafe { arg_table(t) } {
            Ok(t) => t,
            Err(rc) => return rc,
        };
        match table.engine().guaranteed_wait_end(GPoolId(pool)) {
            Ok(()) => FAIRSHM_OK,
            Err(e) => fail(e),
        }
    })
}

/// A guaranteed tenant handle as the engine takes it: one beyond u16 is beyond every
/// pool's tenants, and u16::MAX (the engine's error names it) says so.
fn g_tenant(tenant: u32) -> u16 {
    u16::try_from(tenant).unwrap_or(u16::MAX)
}

/// The two wake_seen calls: `*seen` = what `read` gives from the table's engine.
///
/// # Safety
/// `t` is null or an open table; `seen` null or writable.
unsafe fn put_seen<T>(
    t: *const fairshm_table,
    seen: *mut T,
    read: impl FnOnce(&Engine) -> crate::error::Result<T>,
) -> i32 {
    guard(|| {
        // SAFETY: per this function's contract.
        let table = match unsafe { arg_table(t) } {
            Ok(t) => t,
            Err(rc) => return rc,
        };
        let Some(out) = std::ptr::NonNull::new(seen) else {
            return invalid("argument `seen` is null".into());
        };
        match read(table.engine()) {
            Ok(v) => {
                // SAFETY: non-null, and writable by this function's contract.
                unsafe { out.as_ptr().write(v) };
                FAIRSHM_OK
            }
            Err(e) => fail(e),
        }
    })
}

/// After a refused `fairshm_guaranteed_acquire`: sleeps until units come back to
/// guaranteed pool `pool` (a release or a reap since `fairshm_guaranteed_wake_seen`
/// gave `seen`, before the ask), `cancel` fires, a signal arrives, or `timeout_ms` has
/// passed; at once if units came back before. `*woken` (if not null) is 1 when units
/// came back, 0 otherwise. Ask again after it: the wait for a guaranteed pool is the
/// caller's loop (ask; on a refusal, sleep until its retry-after with this), so that
/// every ask keeps the tenant's demand signalled. A sleep longer than half the pool's
/// `idle_after_ms` is slept in parts of that length, each announced anew. Any release
/// may wake it: `fairshm_guaranteed_sleep_as` sleeps through the releases that cannot
/// serve the refused request. A release wakes one waiter, which passes the wake on
/// with its next `fairshm_guaranteed_acquire` on the same thread (granted or refused),
/// after a `fairshm_guaranteed_wake_seen` or `_wake_seen_as` on that thread: ask again
/// after every sleep that said `*woken` = 1, or, ending the wait there, call
/// `fairshm_guaranteed_wait_end`; else a waiter behind this one waits for its own
/// retry-after.
///
/// # Safety
/// `t` is null or an open table; `cancel` null or from `fairshm_cancel_new`, not freed;
/// `woken` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_guaranteed_sleep(
    t: *const fairshm_table,
    pool: u32,
    seen: u32,
    timeout_ms: u64,
    cancel: *const super::cancel::fairshm_cancel,
    woken: *mut u32,
) -> i32 {
    // SAFETY: per this function's contract, which is `sleep`'s.
    unsafe {
        sleep(t, timeout_ms, cancel, woken, |e, until, cancel| {
            e.guaranteed_sleep(GPoolId(pool), seen, until, cancel)
        })
    }
}

/// `fairshm_guaranteed_sleep` after a refused request of tenant `tenant` to hold for
/// `hold_ms` (the handle and the hold it asked with), with `*seen` from
/// `fairshm_guaranteed_wake_seen_as` before the ask: woken only by a release that may
/// serve it (units back to its tenant's guarantee or, if its hold is within the
/// reclaim horizon, to a lender that is idle), or a reap, a reset, `cancel`, a signal
/// or the timeout. It sleeps on through the releases that cannot serve it and moves
/// `*seen` past them, so that a caller sleeping in slices passes the same `seen` to
/// the next slice and is not woken by them there either. A tenant handle out of range
/// is `FAIRSHM_E_INVALID_REQUEST`.
///
/// # Safety
/// As `fairshm_guaranteed_sleep`; `seen` readable and writable.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn fairshm_guaranteed_sleep_as(
    t: *const fairshm_table,
    pool: u32,
    tenant: u32,
    hold_ms: u64,
    seen: *mut u64,
    timeout_ms: u64,
    cancel: *const super::cancel::fairshm_cancel,
    woken: *mut u32,
) -> i32 {
    let Some(seen) = std::ptr::NonNull::new(seen) else {
        return guard(|| invalid("argument `seen` is null".into()));
    };
    let tenant = g_tenant(tenant);
    let slept = |e: &Engine, until, cancel: Option<&Cancel>| {
        // SAFETY: non-null, readable and writable, by this function's contract.
        let mut cookie = unsafe { seen.as_ptr().read() };
        let slept =
            e.guaranteed_sleep_as(GPoolId(pool), tenant, hold_ms, &mut cookie, until, cancel);
        // SAFETY: as above.
        unsafe { seen.as_ptr().write(cookie) };
        slept
    };
    // SAFETY: per this function's contract, which is `sleep`'s.
    unsafe { sleep(t, timeout_ms, cancel, woken, slept) }
}

/// The two sleeps' common part: checks the table, sleeps with `slept` for up to
/// `timeout_ms` (with the token `cancel`), and writes whether units came back.
///
/// # Safety
/// `t` is null or an open table; `cancel` null or from `fairshm_cancel_new`, not freed;
/// `woken` null or writable.
unsafe fn sleep(
    t: *const fairshm_table,
    timeout_ms: u64,
    cancel: *const super::cancel::fairshm_cancel,
    woken: *mut u32,
    slept: impl FnOnce(&Engine, std::time::Instant, Option<&Cancel>) -> crate::error::Result<bool>,
) -> i32 {
    guard(|| {
        // SAFETY: per this function's contract.
        let table = match unsafe { arg_table(t) } {
            Ok(t) => t,
            Err(rc) => return rc,
        };
        // SAFETY: null or a live token, by this function's contract.
        let cancel = unsafe { cancel.as_ref() }.map(|c| &c.c);
        let until = crate::clock::after(
            std::time::Instant::now(),
            std::time::Duration::from_millis(timeout_ms),
        );
        match slept(table.engine(), until, cancel) {
            Ok(w) => {
                // SAFETY: null or writable, by this function's contract.
                unsafe { super::calls::put(woken, w as u32) };
                FAIRSHM_OK
            }
            Err(e) => fail(e),
        }
    })
}

/// Guaranteed pool `pool` at `now_ms` (`FAIRSHM_NOW`: the library's clock; a time
/// before the pool's own clock, the latest `now` it was given, such as 0, counts as
/// that clock) as JSON: `{"stats": ..., "fairness_report": ..., "plan": [...]}`, each
/// of the stats' leases with its `id` in this ABI. Free it with `fairshm_string_free`;
/// null on error (`fairshm_last_error`).
///
/// # Safety
/// `t` is null or an open table.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_guaranteed_stats_json(
    t: *const fairshm_table,
    pool: u32,
    now_ms: u64,
) -> *mut c_char {
    let mut s = std::ptr::null_mut();
    guard(|| {
        // SAFETY: per this function's contract.
        let table = match unsafe { arg_table(t) } {
            Ok(t) => t,
            Err(rc) => return rc,
        };
        let e = table.engine();
        let id = GPoolId(pool);
        let (st, rules) = match e
            .guaranteed_state(id)
            .and_then(|st| Ok((st, e.guaranteed_rules(id)?)))
        {
            Ok(x) => x,
            Err(err) => return fail(err),
        };
        // The state's own reports count a `now` before its clock as the clock.
        let now = super::now_or_clock(now_ms);
        let mut stats = serde_json::to_value(st.stats(rules, now)).expect("plain data");
        // Each lease also by the id this ABI gives it (what a binding's lease holds, and
        // what a refusal's `blocking` lists), beside its number in the pool.
        if let Some(leases) = stats.get_mut("leases").and_then(|l| l.as_array_mut()) {
            for l in leases {
                if let Some(no) = l.get("lease").and_then(|n| n.as_u64()) {
                    let no = no as u32;
                    l["id"] = GLeaseId { pool, no }.to_u64().into();
                }
            }
        }
        let json = serde_json::json!({
            "stats": stats,
            "fairness_report": st.fairness_report(rules),
            "plan": st.plan(rules, now),
        });
        s = CString::new(json.to_string())
            .expect("JSON has no NUL")
            .into_raw();
        FAIRSHM_OK
    });
    s
}
