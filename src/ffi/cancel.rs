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
/// Async-signal-safe (one atomic store and one `FUTEX_WAKE`, nothing that allocates
/// or locks; `errno` is left as it was): a signal handler may fire it, and ends so a
/// wait of its own thread too (the kernel's restarted or interrupted sleep finds the
/// token's word changed). A signal alone does not end a wait.
///
/// # Safety
/// `c` is null or a live token.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairshm_cancel_fire(c: *const fairshm_cancel) {
    // SAFETY: null or live, by the contract.
    if let Some(c) = unsafe { c.as_ref() } {
        // SAFETY: `__errno_location` returns this thread's `errno`, valid for the
        // thread's life; kept so that a signal handler firing the token does not change
        // the `errno` of the code it interrupted.
        let errno = unsafe { libc::__errno_location() };
        // SAFETY: as above.
        let saved = unsafe { *errno };
        c.c.cancel();
        // SAFETY: as above.
        unsafe { *errno = saved };
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
