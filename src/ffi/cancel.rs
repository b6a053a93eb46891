//! The C ABI's cancel tokens: a blocking acquire waiting with one returns `cancelled`
//! as soon as another thread fires it.

use crate::waiting::Cancel;

/// A token that ends blocking acquires early, from another thread. Opaque.
pub struct fairshm_cancel {
    pub(super) c: Cancel,
}

/// A new cancel token (never null), freed by `fairshm_cancel_free`.
#[unsafe(no_mangle)]
pub extern "C" fn fairshm_cancel_new() -> *mut fairshm_cancel {
    Box::into_raw(Box::new(fairshm_cancel { c: Cancel::new() }))
}

/// Fires the token: every acquire waiting with it returns `cancelled` now, and later
/// ones at once, until `fairshm_cancel_reset`. Null is ignored.
///
/// # Safety
/// `c` is null or a live token.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_cancel_fire(c: *const fairshm_cancel) {
    // SAFETY: null or live, by the contract.
    if let Some(c) = unsafe { c.as_ref() } {
        c.c.cancel();
    }
}

/// Makes a fired token usable again. Null is ignored.
///
/// # Safety
/// `c` is null or a live token.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_cancel_reset(c: *const fairshm_cancel) {
    // SAFETY: null or live, by the contract.
    if let Some(c) = unsafe { c.as_ref() } {
        c.c.reset();
    }
}

/// Whether the token is fired (and not reset since): what a caller's own wait loop
/// (around `fairshm_guaranteed_sleep`, whose `*woken` is 0 for a cancel as for a
/// timeout) checks to stop. Null is not fired.
///
/// # Safety
/// `c` is null or a live token.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_cancel_fired(c: *const fairshm_cancel) -> bool {
    // SAFETY: null or live, by the contract.
    unsafe { c.as_ref() }.is_some_and(|c| c.c.is_cancelled())
}

/// Frees a token. No acquire may still be waiting with it. Null is ignored.
///
/// # Safety
/// `c` is null or a token from `fairshm_cancel_new`, freed once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_cancel_free(c: *mut fairshm_cancel) {
    if !c.is_null() {
        // SAFETY: from `Box::into_raw`, freed once by the contract.
        drop(unsafe { Box::from_raw(c) });
    }
}
