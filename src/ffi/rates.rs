//! The C ABI's per-tenant rates: setting them on a live table, and charging work.

use super::{FAIRSHM_OK, arg_table, fail, fairshm_table, guard, invalid};

/// Sets tenant `tenant`'s rates: requests per second and work units per second, each
/// a token bucket with a burst of one second's worth, 0 for unbounded. Applies at once
/// to every process: over its request rate an acquire is `FAIRSHM_REFUSED` with reason
/// 5 (`rate_limited`), in work debt with reason 6 (`work_debt`), before any pool is
/// touched.
///
/// # Safety
/// `t` is null or an open table.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_set_rates(
    t: *const fairshm_table,
    tenant: u32,
    requests_per_s: u32,
    work_units_per_s: u32,
) -> i32 {
    guard(|| {
        // SAFETY: per this function's contract.
        let table = match unsafe { arg_table(t) } {
            Ok(t) => t,
            Err(rc) => return rc,
        };
        let e = table.engine();
        match e
            .tenant_by_index(tenant)
            .and_then(|tn| e.set_rates(tn, requests_per_s, work_units_per_s))
        {
            Ok(()) => FAIRSHM_OK,
            Err(err) => fail(err),
        }
    })
}

/// Charges `units` of work done for tenant `tenant` to its work rate (after the work:
/// it may put the tenant in debt). `now_ms`: `FAIRSHM_NOW` for the library's clock, else
/// an explicit time (ms, the clock of the acquires). Writes the ms until the tenant is out
/// of debt (0: not in debt) to `debt_ms` if it is not null.
///
/// # Safety
/// `t` is null or an open table; `debt_ms` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_charge(
    t: *const fairshm_table,
    tenant: u32,
    units: u64,
    now_ms: u64,
    debt_ms: *mut u64,
) -> i32 {
    guard(|| {
        // SAFETY: per this function's contract.
        let table = match unsafe { arg_table(t) } {
            Ok(t) => t,
            Err(rc) => return rc,
        };
        let now = super::now_or_clock(now_ms);
        let e = table.engine();
        match e
            .tenant_by_index(tenant)
            .and_then(|tn| e.charge(tn, units, now))
        {
            Ok(d) => {
                if let Some(out) = std::ptr::NonNull::new(debt_ms) {
                    // SAFETY: non-null, and writable by this function's contract.
                    unsafe { out.as_ptr().write(d) };
                }
                FAIRSHM_OK
            }
            Err(err) => fail(err),
        }
    })
}

/// A tenant's rates, written to `requests_per_s` and `work_units_per_s` (each null or
/// writable); 0 is unbounded.
///
/// # Safety
/// `t` is null or an open table; the out-pointers null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_rates(
    t: *const fairshm_table,
    tenant: u32,
    requests_per_s: *mut u32,
    work_units_per_s: *mut u32,
) -> i32 {
    guard(|| {
        // SAFETY: per this function's contract.
        let table = match unsafe { arg_table(t) } {
            Ok(t) => t,
            Err(rc) => return rc,
        };
        if requests_per_s.is_null() && work_units_per_s.is_null() {
            return invalid(
                "arguments `requests_per_s` and `work_units_per_s` are both null".into(),
            );
        }
        let e = table.engine();
        match e.tenant_by_index(tenant).and_then(|tn| e.rates(tn)) {
            Ok((r, w)) => {
                for (p, v) in [(requests_per_s, r), (work_units_per_s, w)] {
                    if let Some(out) = std::ptr::NonNull::new(p) {
                        // SAFETY: non-null, and writable by this function's contract.
                        unsafe { out.as_ptr().write(v) };
                    }
                }
                FAIRSHM_OK
            }
            Err(err) => fail(err),
        }
    })
}
