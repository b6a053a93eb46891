//! The C ABI's calls on an open table: handles, acquire and release, statistics and
//! reaping, and the no-op baselines. Conventions: see the module above.

use std::ffi::{CString, c_char};
use std::time::Duration;

use super::{
    FAIRSHM_ABSENT, FAIRSHM_OK, FAIRSHM_REFUSED, TableRef, arg_name, arg_table, arg_table_tenant,
    fail, fairshm_cancel, fairshm_refusal, fairshm_table, guard, invalid, not_utf8_tenant,
};
use crate::clock;
use crate::engine::{Asked, Outcome, PoolId, TenantId};
use crate::error::Error;
use crate::table::Table;

/// `fairshm_acquire`'s `flags`: this wait is one slice of a longer one (a binding
/// that wakes up now and then so its language's interrupts land): its timeout is not
/// counted as a `timed_out` refusal in the statistics, and a rate refusal waits to the
/// slice's end (the caller, which knows the whole wait's deadline, ends it with a last
/// call, without this flag, once the refusal's retry-after reaches past it).
pub const FAIRSHM_WAIT_SLICE: u32 = 1;

/// `fairshm_acquire`'s `flags`: this call continues a wait whose earlier call (a slice)
/// already asked, so the request's refusal was counted then: a refusal of this call's
/// tries is not counted, logged nor given a turn again (each still marks the tenant
/// active). With `FAIRSHM_WAIT_SLICE` on every slice after the first, and without it
/// on a last call after slices.
pub const FAIRSHM_WAIT_CONTINUED: u32 = 2;

/// `fairshm_acquire`'s `flags`: this call continues a wait whose earlier call passed
/// the tenant's rates (its refusal's `rule` was neither `rate_limited` nor
/// `work_debt`), so the request took its token of the request rate then: this call's
/// tries take none, and are not refused by the rates (a wait is one request). Implies
/// `FAIRSHM_WAIT_CONTINUED`. Without it, each slice of the wait takes a token again
/// (within one call, only its first try that passes the rates takes one).
pub const FAIRSHM_WAIT_RATED: u32 = 4;

/// Writes `v` to `*p` unless `p` is null.
///
/// # Safety
/// `p` is null or valid for a write of `T`.
pub(super) unsafe fn put<T>(p: *mut T, v: T) {
    if let Some(slot) = std::ptr::NonNull::new(p) {
        // SAFETY: non-null, and writable by this function's contract.
        unsafe { slot.as_ptr().write(v) };
    }
}

/// The handles of an acquire or of a refusal to explain: the pool checked first, then
/// the tenant read from the directory.
pub(super) fn handles(table: &Table, pool: u32, tenant: u32) -> Result<(PoolId, TenantId), i32> {
    if pool as usize >= table.config().pools.len() {
        return Err(fail(
            table.engine().bad_handles(pool as usize, tenant as usize),
        ));
    }
    let t = table.engine().tenant_by_index(tenant).map_err(fail)?;
    Ok((PoolId(pool), t))
}

/// The arguments of an acquire, checked in their order: the table, the pool handle,
/// the tenant (its weight read from the directory), and a lease pointer to write. So
/// an error names the first bad argument: a pool handle of no pool is named as such
/// even when the tenant handle is bad too (the engine's acquire checks its pool
/// handle first as well, but it is called with a tenant already resolved here).
///
/// # Safety
/// `t` is null or an open table.
unsafe fn asking<'a>(
    t: *const fairshm_table,
    lease: *mut u64,
    pool: u32,
    tenant: u32,
) -> Result<(TableRef<'a>, PoolId, TenantId), i32> {
    // SAFETY: per the caller's contract.
    let table = unsafe { arg_table(t) }?;
    let (p, tn) = handles(&table, pool, tenant)?;
    if lease.is_null() {
        return Err(invalid("argument `lease` is null".into()));
    }
    Ok((table, p, tn))
}

/// Resolves `name` with `f` into `*out`: the body of `fairshm_pool` and
/// `fairshm_tenant`.
///
/// # Safety
/// As `fairshm_pool`.
unsafe fn resolve(
    t: *const fairshm_table,
    name: *const c_char,
    out: *mut u32,
    not_utf8: impl FnOnce(&Table, String) -> Error,
    f: impl FnOnce(&Table, &str) -> crate::error::Result<u32>,
) -> i32 {
    guard(|| {
        // SAFETY: per the caller's contract.
        let table = match unsafe { arg_table(t) } {
            Ok(t) => t,
            Err(rc) => return rc,
        };
        // SAFETY: per the caller's contract.
        let name = match unsafe { arg_name(name, |n| not_utf8(&table, n)) } {
            Ok(n) => n,
            Err(rc) => return rc,
        };
        if out.is_null() {
            return invalid("argument `out` is null".into());
        }
        match f(&table, name) {
            Ok(h) => {
                // SAFETY: `out` is non-null (checked) and writable by the contract.
                unsafe { put(out, h) };
                FAIRSHM_OK
            }
            Err(e) => fail(e),
        }
    })
}

/// Resolves a pool's name to its handle, in `*out`. A name that is not UTF-8 is
/// `FAIRSHM_E_UNKNOWN_POOL`, as one the table does not have.
///
/// # Safety
/// `t` is null or an open table; `name` null or a NUL-terminated string; `out` null
/// or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_pool(
    t: *const fairshm_table,
    name: *const c_char,
    out: *mut u32,
) -> i32 {
    // SAFETY: this function's contract is `resolve`'s.
    unsafe {
        resolve(
            t,
            name,
            out,
            |table, n| table.engine().unknown_pool(&n),
            |table, n| table.engine().pool(n).map(|p| p.0),
        )
    }
}

/// Resolves a tenant's name to its handle, in `*out`, claiming a directory slot on
/// the name's first use (which registers this process, as a tool that `per_worker`
/// pools do not count until it acquires). A name the table cannot take
/// (empty, over 48 bytes, not UTF-8) is `FAIRSHM_E_INVALID_TENANT`.
///
/// # Safety
/// As `fairshm_pool`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_tenant(
    t: *const fairshm_table,
    name: *const c_char,
    out: *mut u32,
) -> i32 {
    // SAFETY: this function's contract is `resolve`'s.
    unsafe {
        resolve(
            t,
            name,
            out,
            |_, name| not_utf8_tenant(name),
            |table, n| table.engine().tenant(n).map(|x| x.index),
        )
    }
}

/// Looks a tenant's name up without claiming anything, on an observer's table too:
/// `FAIRSHM_OK` with its handle in `*out`, or `FAIRSHM_ABSENT` when no tenant of that
/// name has a directory slot yet (`*out` untouched; its rates are unbounded). A name no
/// tenant can have (empty, over 48 bytes, not UTF-8) is `FAIRSHM_E_INVALID_TENANT`.
///
/// # Safety
/// As `fairshm_pool`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_find_tenant(
    t: *const fairshm_table,
    name: *const c_char,
    out: *mut u32,
) -> i32 {
    guard(|| {
        // SAFETY: per this function's contract.
        let (table, name) = match unsafe { arg_table_tenant(t, name) } {
            Ok(x) => x,
            Err(rc) => return rc,
        };
        if out.is_null() {
            return invalid("argument `out` is null".into());
        }
        match table.engine().lookup_tenant(name) {
            Ok(Some(tn)) => {
                // SAFETY: `out` is non-null (checked) and writable by the contract.
                unsafe { put(out, tn.index) };
                FAIRSHM_OK
            }
            Ok(None) => FAIRSHM_ABSENT,
            Err(e) => fail(e),
        }
    })
}

/// Checks a request of `units` from `pool` against the table's config, claiming
/// nothing and registering nothing: `FAIRSHM_OK` if it can be granted some day, else
/// the error its acquire would return: `FAIRSHM_E_INVALID_REQUEST` for 0 units or a
/// pool handle not of this table, `FAIRSHM_E_UNITS_EXCEED_CAPACITY` for more than a
/// fixed pool holds, or than a `per_worker` pool holds with a worker in every process
/// slot. A binding calls it before `fairshm_tenant` claims a new name's directory slot
/// (kept for the segment's life), so that a request that can never be granted claims
/// none.
///
/// # Safety
/// `t` is null or an open table.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_check_units(
    t: *const fairshm_table,
    pool: u32,
    units: u32,
) -> i32 {
    guard(|| {
        // SAFETY: per this function's contract.
        let table = match unsafe { arg_table(t) } {
            Ok(t) => t,
            Err(rc) => return rc,
        };
        match table.engine().never_granted(PoolId(pool), units) {
            Ok(()) => FAIRSHM_OK,
            Err(e) => fail(e),
        }
    })
}

/// Registers this process as a worker now (per_worker pools count it). Returns its
/// process slot (>= 0) or an error code.
///
/// # Safety
/// `t` is null or an open table.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_register(t: *const fairshm_table) -> i32 {
    guard(|| {
        // SAFETY: per this function's contract.
        match unsafe { arg_table(t) }.map(|t| t.register()) {
            Ok(Ok(slot)) => slot as i32,
            Ok(Err(e)) => fail(e),
            Err(rc) => rc,
        }
    })
}

/// Asks for `units` of `pool` for `tenant`, declaring a hold of `hold_ms` (0: none),
/// without waiting. `FAIRSHM_OK`: `*lease` is the lease. `FAIRSHM_REFUSED`:
/// `*refusal` (if not null) holds the facts. Negative: an error.
///
/// # Safety
/// `t` is null or an open table; `lease` and `refusal` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_try_acquire(
    t: *const fairshm_table,
    pool: u32,
    tenant: u32,
    units: u32,
    hold_ms: u64,
    lease: *mut u64,
    refusal: *mut fairshm_refusal,
) -> i32 {
    // SAFETY: the same contract.
    unsafe {
        try_acquire(
            t,
            pool,
            tenant,
            units,
            hold_ms,
            None,
            clock::now_ms(),
            lease,
            refusal,
        )
    }
}

/// As `fairshm_try_acquire`, for a request that waited `queued_us` in the server's own
/// queue before it asked (from the front proxy's `X-Request-Start` to the
/// application): the wait is noted as by `fairshm_note_queue`, and an over-share
/// refusal's retry-after is stretched by it at once.
///
/// # Safety
/// As `fairshm_try_acquire`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn fairshm_try_acquire_queued(
    t: *const fairshm_table,
    pool: u32,
    tenant: u32,
    units: u32,
    hold_ms: u64,
    queued_us: u64,
    lease: *mut u64,
    refusal: *mut fairshm_refusal,
) -> i32 {
    // SAFETY: the same contract.
    unsafe {
        try_acquire(
            t,
            pool,
            tenant,
            units,
            hold_ms,
            Some(queued_us),
            clock::now_ms(),
            lease,
            refusal,
        )
    }
}

/// As `fairshm_try_acquire`, at `now_ms` (`FAIRSHM_NOW`: the library's clock; any
/// other value an explicit time in ms, 0 included), so that a recorded sequence of
/// calls replays to the same decisions. Release such a lease with `fairshm_release_at`
/// and read the table with `fairshm_stats_json_at` at times of the same sequence: the
/// library's clock is another time base.
///
/// # Safety
/// As `fairshm_try_acquire`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn fairshm_try_acquire_at(
    t: *const fairshm_table,
    pool: u32,
    tenant: u32,
    units: u32,
    hold_ms: u64,
    now_ms: u64,
    lease: *mut u64,
    refusal: *mut fairshm_refusal,
) -> i32 {
    // SAFETY: the same contract.
    unsafe {
        try_acquire(
            t,
            pool,
            tenant,
            units,
            hold_ms,
            None,
            super::now_or_clock(now_ms),
            lease,
            refusal,
        )
    }
}

/// The body of the try-acquires, at `now` (the engine's clock).
///
/// # Safety
/// As `fairshm_try_acquire`.
#[allow(clippy::too_many_arguments)]
unsafe fn try_acquire(
    t: *const fairshm_table,
    pool: u32,
    tenant: u32,
    units: u32,
    hold_ms: u64,
    queued_us: Option<u64>,
    now: u64,
    lease: *mut u64,
    refusal: *mut fairshm_refusal,
) -> i32 {
    guard(|| {
        // SAFETY: per this function's contract.
        let (table, p, tn) = match unsafe { asking(t, lease, pool, tenant) } {
            Ok(x) => x,
            Err(rc) => return rc,
        };
        match table
            .engine()
            .acquire_queued(p, tn, units, hold_ms, now, queued_us)
        {
            Ok(Outcome::Granted(id)) => {
                // SAFETY: `lease` is non-null (checked) and writable by the contract.
                unsafe { put(lease, id.to_u64()) };
                FAIRSHM_OK
            }
            Ok(Outcome::Refused(r)) => {
                // SAFETY: `refusal` is null or writable by the contract.
                unsafe { put(refusal, fairshm_refusal::new(&r, r.reason, 0, pool, tenant)) };
                FAIRSHM_REFUSED
            }
            Err(e) => fail(e),
        }
    })
}

/// Notes that a request for `pool` waited `queued_us` in the server's own queue (from
/// the front proxy's `X-Request-Start` to the application): while such waits show a
/// queue, a tenant over its share is told to come back later, so its retries
/// stay out of that queue. `FAIRSHM_OK`, or a negative error.
///
/// # Safety
/// `t` is null or an open table.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_note_queue(
    t: *const fairshm_table,
    pool: u32,
    queued_us: u64,
) -> i32 {
    guard(|| {
        // SAFETY: per this function's contract.
        let table = match unsafe { arg_table(t) } {
            Ok(x) => x,
            Err(rc) => return rc,
        };
        // The engine checks the pool handle.
        match table
            .engine()
            .note_queue(PoolId(pool), queued_us, clock::now_ms())
        {
            Ok(()) => FAIRSHM_OK,
            Err(e) => fail(e),
        }
    })
}

/// As `fairshm_try_acquire`, but when refused waits up to `timeout_ms` for room, and
/// ends early when `cancel` (may be null) is fired. A wait that ends unserved is
/// `FAIRSHM_REFUSED` with reason `timed_out` or `cancelled`, or (at once) `rate_limited`
/// or `work_debt` when the tenant's next token comes after the deadline.
/// `flags`: 0, or `FAIRSHM_WAIT_SLICE`, `FAIRSHM_WAIT_CONTINUED` and
/// `FAIRSHM_WAIT_RATED`, or'd.
///
/// # Safety
/// As `fairshm_try_acquire`; `cancel` null or from `fairshm_cancel_new`, not freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_acquire(
    t: *const fairshm_table,
    pool: u32,
    tenant: u32,
    units: u32,
    hold_ms: u64,
    timeout_ms: u64,
    flags: u32,
    cancel: *const fairshm_cancel,
    lease: *mut u64,
    refusal: *mut fairshm_refusal,
) -> i32 {
    guard(|| {
        if flags & !(FAIRSHM_WAIT_SLICE | FAIRSHM_WAIT_CONTINUED | FAIRSHM_WAIT_RATED) != 0 {
            return invalid(format!("flags {flags:#x} has bits no FAIRSHM_ flag names"));
        }
        // SAFETY: per this function's contract.
        let (table, p, tn) = match unsafe { asking(t, lease, pool, tenant) } {
            Ok(x) => x,
            Err(rc) => return rc,
        };
        // SAFETY: null or live, by the contract.
        let cancel = unsafe { cancel.as_ref() }.map(|c| &c.c);
        let waited = crate::blocking::acquire(
            table.engine(),
            p,
            tn,
            units,
            hold_ms,
            Duration::from_millis(timeout_ms),
            table.sweep_interval(),
            cancel,
            flags & FAIRSHM_WAIT_SLICE != 0,
            if flags & FAIRSHM_WAIT_RATED != 0 {
                Asked::Rated
            } else if flags & FAIRSHM_WAIT_CONTINUED != 0 {
                Asked::Unrated
            } else {
                Asked::No
            },
        );
        match waited {
            Ok(Ok(id)) => {
                // SAFETY: `lease` is non-null (checked) and writable by the contract.
                unsafe { put(lease, id.to_u64()) };
                FAIRSHM_OK
            }
            Ok(Err((ended, waited))) => {
                let ms = waited.as_millis() as u64;
                let facts = fairshm_refusal::new(&ended.last, ended.reason, ms, pool, tenant);
                // SAFETY: `refusal` is null or writable by the contract.
                unsafe { put(refusal, facts) };
                FAIRSHM_REFUSED
            }
            Err(e) => fail(e),
        }
    })
}

/// Releases a lease of this process, acquired through this handle (another's is
/// `FAIRSHM_E_NOT_OWNER`, saying who holds it). A second release of one lease is
/// `FAIRSHM_E_ALREADY_RELEASED` and changes nothing; a guaranteed pool's lease
/// (`FAIRSHM_GUARANTEED_LEASE_TAG` set) is `FAIRSHM_E_INVALID_REQUEST`, saying so.
///
/// # Safety
/// `t` is null or an open table.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_release(t: *const fairshm_table, lease: u64) -> i32 {
    // SAFETY: the same contract.
    unsafe { release(t, lease, clock::now_ms()) }
}

/// As `fairshm_release`, at `now_ms` (`FAIRSHM_NOW`: the library's clock; any other
/// value an explicit time in ms, 0 included).
///
/// # Safety
/// `t` is null or an open table.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_release_at(
    t: *const fairshm_table,
    lease: u64,
    now_ms: u64,
) -> i32 {
    // SAFETY: the same contract.
    unsafe { release(t, lease, super::now_or_clock(now_ms)) }
}

/// The body of both releases, at `now` (the engine's clock).
///
/// # Safety
/// `t` is null or an open table.
unsafe fn release(t: *const fairshm_table, lease: u64, now: u64) -> i32 {
    guard(|| {
        // SAFETY: per this function's contract.
        let table = match unsafe { arg_table(t) } {
            Ok(t) => t,
            Err(rc) => return rc,
        };
        let id = match super::fair_lease(lease) {
            Ok(id) => id,
            Err(rc) => return rc,
        };
        match table.engine().release(id, now) {
            Ok(_) => FAIRSHM_OK,
            Err(e) => fail(e),
        }
    })
}

/// The table's statistics (the whole snapshot) as JSON, in a string the caller frees
/// with `fairshm_string_free`; null on error (`fairshm_last_error`).
///
/// # Safety
/// `t` is null or an open table.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_stats_json(t: *const fairshm_table) -> *mut c_char {
    // SAFETY: the same contract.
    unsafe { stats_json(t, clock::now_ms()) }
}

/// As `fairshm_stats_json`, with activity judged at `now_ms` (`FAIRSHM_NOW`: the
/// library's clock; any other value an explicit time in ms, 0 included).
///
/// # Safety
/// `t` is null or an open table.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_stats_json_at(
    t: *const fairshm_table,
    now_ms: u64,
) -> *mut c_char {
    // SAFETY: the same contract.
    unsafe { stats_json(t, super::now_or_clock(now_ms)) }
}

/// The body of both statistics calls, at `now` (the engine's clock).
///
/// # Safety
/// `t` is null or an open table.
unsafe fn stats_json(t: *const fairshm_table, now: u64) -> *mut c_char {
    let mut s = std::ptr::null_mut();
    guard(|| {
        // SAFETY: per this function's contract.
        let table = match unsafe { arg_table(t) } {
            Ok(t) => t,
            Err(rc) => return rc,
        };
        let snap = match table.try_snapshot_at(now) {
            Ok(snap) => snap,
            Err(e) => return fail(e),
        };
        let json = serde_json::to_string(&snap).expect("a snapshot serializes");
        s = CString::new(json).expect("JSON has no NUL").into_raw();
        FAIRSHM_OK
    });
    s
}

/// Returns the permits of every registered process that has died: the number of
/// processes reaped, or a negative error code.
///
/// # Safety
/// `t` is null or an open table.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_reap_dead(t: *const fairshm_table) -> i32 {
    guard(|| {
        // SAFETY: per this function's contract.
        match unsafe { arg_table(t) }.map(|t| t.reap_dead()) {
            Ok(Ok(v)) => v.len() as i32,
            Ok(Err(e)) => fail(e),
            Err(rc) => rc,
        }
    })
}

/// Sets how often a blocked acquire sweeps for dead processes itself (at least 1 ms).
///
/// # Safety
/// `t` is null or an open table.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_set_sweep_ms(t: *const fairshm_table, ms: u64) -> i32 {
    guard(|| {
        // SAFETY: per this function's contract.
        match unsafe { arg_table(t) } {
            Ok(t) => {
                t.set_sweep_interval(Duration::from_millis(ms));
                FAIRSHM_OK
            }
            Err(rc) => rc,
        }
    })
}

/// Does nothing, with `fairshm_try_acquire`'s signature: the benchmarks' baseline
/// for what a call through a binding's FFI costs. Writes 0 to `*lease` if not null.
///
/// # Safety
/// `lease` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_nop_acquire(
    _t: *const fairshm_table,
    _pool: u32,
    _tenant: u32,
    _units: u32,
    _hold_ms: u64,
    lease: *mut u64,
    _refusal: *mut fairshm_refusal,
) -> i32 {
    // SAFETY: `lease` is null or writable by the contract.
    unsafe { put(lease, 0) };
    FAIRSHM_OK
}

/// Does nothing, with `fairshm_release`'s signature (the benchmarks' baseline).
#[unsafe(no_mangle)]
pub extern "C" fn fairshm_nop_release(_t: *const fairshm_table, _lease: u64) -> i32 {
    FAIRSHM_OK
}
