//! The C ABI's residents (the leases of an `evict` pool): calls that keep a resident
//! from being revoked, and learning of a revocation.
//!
//! An acquire of an `evict` pool that finds it full revokes the idlest resident (see
//! `fairshm_begin_call`) and is granted; with nothing evictable it is
//! `FAIRSHM_REFUSED` with reason 10 (`too_many_residents`), at once for
//! `fairshm_try_acquire`, after the pool's wait (1 s by default) for `fairshm_acquire`.

use super::{FAIRSHM_OK, arg_table, fail, fairshm_table, guard};
use crate::engine::LeaseId;

/// `fairshm_resident_status`: no call in progress (evictable).
pub const FAIRSHM_RESIDENT_IDLE: u32 = 0;
/// A call is in progress (never evicted).
pub const FAIRSHM_RESIDENT_IN_CALL: u32 = 1;
/// Revoked: put the object to sleep and release the lease.
pub const FAIRSHM_RESIDENT_REVOKED: u32 = 2;

/// Runs `f` on the table `t` and lease `lease` (an owned lease of this process).
///
/// # Safety
/// `t` is null or an open table.
unsafe fn with_lease(
    t: *const fairshm_table,
    lease: u64,
    f: impl FnOnce(&crate::Table, LeaseId) -> crate::Result<()>,
) -> i32 {
    guard(|| {
        // SAFETY: per the caller's contract.
        let table = match unsafe { arg_table(t) } {
            Ok(t) => t,
            Err(rc) => return rc,
        };
        let id = match super::fair_lease(lease) {
            Ok(id) => id,
            Err(rc) => return rc,
        };
        match f(&table, id) {
            Ok(()) => FAIRSHM_OK,
            Err(err) => fail(err),
        }
    })
}

/// Starts a call on resident `lease` at `now_ms` (`FAIRSHM_NOW`: the library's clock;
/// else an explicit time, ms, which orders residents by their last call): while any
/// call is in progress it is never revoked. Calls nest. `FAIRSHM_E_REVOKED` once it
/// was revoked: put the object to sleep and release the lease. `FAIRSHM_E_NOT_RESIDENT`
/// for a lease of a pool that does not evict.
///
/// # Safety
/// `t` is null or an open table.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_begin_call(
    t: *const fairshm_table,
    lease: u64,
    now_ms: u64,
) -> i32 {
    // SAFETY: per this function's contract.
    unsafe {
        with_lease(t, lease, |tb, id| {
            tb.engine().begin_call(id, super::now_or_clock(now_ms))
        })
    }
}

/// Ends a call begun with `fairshm_begin_call` (`FAIRSHM_E_NOT_RESIDENT` if none is in
/// progress) at `now_ms` (as `fairshm_begin_call`'s). Once its last call ends the
/// resident is evictable again.
///
/// # Safety
/// `t` is null or an open table.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_end_call(t: *const fairshm_table, lease: u64, now_ms: u64) -> i32 {
    // SAFETY: per this function's contract.
    unsafe {
        with_lease(t, lease, |tb, id| {
            tb.engine().end_call(id, super::now_or_clock(now_ms))
        })
    }
}

/// Writes resident `lease`'s status (`FAIRSHM_RESIDENT_*`) to `status` (null or
/// writable).
///
/// # Safety
/// `t` is null or an open table; `status` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_resident_status(
    t: *const fairshm_table,
    lease: u64,
    status: *mut u32,
) -> i32 {
    // SAFETY: per this function's contract.
    unsafe {
        with_lease(t, lease, |tb, id| {
            let s = match tb.engine().resident_status(id)? {
                crate::ResidentStatus::Idle => FAIRSHM_RESIDENT_IDLE,
                crate::ResidentStatus::InCall => FAIRSHM_RESIDENT_IN_CALL,
                crate::ResidentStatus::Revoked => FAIRSHM_RESIDENT_REVOKED,
            };
            if let Some(out) = std::ptr::NonNull::new(status) {
                // SAFETY: non-null, and writable by this function's contract.
                out.as_ptr().write(s);
            }
            Ok(())
        })
    }
}

/// Waits up to `timeout_ms` for resident `lease` to be revoked (woken at once by the
/// revocation); writes 1 to `revoked` (null or writable) if it is, else 0. Blocks the
/// calling thread: a binding calls it without its interpreter lock, in slices.
///
/// # Safety
/// `t` is null or an open table; `revoked` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_wait_revoked(
    t: *const fairshm_table,
    lease: u64,
    timeout_ms: u64,
    revoked: *mut u32,
) -> i32 {
    // SAFETY: per this function's contract.
    unsafe {
        with_lease(t, lease, |tb, id| {
            let timeout = std::time::Duration::from_millis(timeout_ms);
            let got = tb.engine().wait_revoked(id, timeout)?;
            if let Some(out) = std::ptr::NonNull::new(revoked) {
                // SAFETY: non-null, and writable by this function's contract.
                out.as_ptr().write(got as u32);
            }
            Ok(())
        })
    }
}

/// Writes pool `pool`'s eviction wait to `ms` (null or writable): how long a blocking
/// acquire of that `evict` pool waits for a resident to become evictable before it is
/// refused `too_many_residents`; 0 for a pool that refuses instead of evicting. A
/// binding that waits in slices stops after this much of `too_many_residents`.
///
/// # Safety
/// `t` is null or an open table; `ms` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_evict_wait_ms(
    t: *const fairshm_table,
    pool: u32,
    ms: *mut u32,
) -> i32 {
    guard(|| {
        // SAFETY: per this function's contract.
        let table = match unsafe { arg_table(t) } {
            Ok(t) => t,
            Err(rc) => return rc,
        };
        let Some(pc) = table.config().pools.get(pool as usize) else {
            return fail(crate::Error::InvalidRequest(format!(
                "pool handle {pool} is not of this table"
            )));
        };
        if let Some(out) = std::ptr::NonNull::new(ms) {
            // SAFETY: non-null, and writable by this function's contract.
            unsafe {
                out.as_ptr()
                    .write(if pc.evict { pc.evict_wait_ms } else { 0 })
            };
        }
        FAIRSHM_OK
    })
}
