//! Sleeping on the segment: process-shared futexes on `PoolRec.wake` and on the owner
//! words of the processes a waiter is blocked behind.
//!
//! Never `FUTEX_PRIVATE_FLAG` (nor `FUTEX2_PRIVATE`): the private flag keys the futex
//! by this process's address space, so a waker in another process would never find the
//! waiter.
//!
//! `wake` is two futex words in one u64, one per waiter [`Class`]: the low half for
//! waiters refused under their share, the high half for those at or over it.
//!
//! Protocol (no lost wake-up), std's futex mutex idea of "wake only if someone waits"
//! carried across processes:
//! - a waiter first announces itself (`waiters += 1`), then reads `wake`, then tries to
//!   acquire (its first load of the pool word), and when refused sleeps only if its
//!   class's half of `wake` is unchanged; the kernel re-checks the half atomically with
//!   going to sleep;
//! - a releaser changes the pool word (its CAS), then reads `waiters`; only if it is
//!   not zero does it bump both halves of `wake` (one `fetch_add`) and wake.
//!
//! Those four accesses are SeqCst, a store-load pattern on two words (Dekker): in the
//! single total order, either the releaser's read of `waiters` comes after the
//! waiter's announcement (so the releaser bumps `wake` after the waiter read it, and
//! the waiter's sleep returns at once or is woken), or it comes before it, and then the
//! waiter's try, which follows its announcement, reads the pool word after the
//! release. So an uncontended release costs one load of `waiters`, no RMW.
//!
//! A release of `n` units wakes at most `n` waiters, under-share ones first, so no herd
//! wakes for one permit and the tenant the rule favours is served first. A waiter
//! sleeps with its tenant's bit ([`tenant_bit`], `FUTEX_WAIT_BITSET`), so that a wake
//! can pass over the sleepers it cannot serve: an owner's release wakes sleepers past
//! their share only of its own tenant when no ask past the floor fits, and those only
//! when it left that tenant under its share ([`released_by`]), and a woken waiter
//! refused again passes the wake on only where an ask may fit ([`pass_bits`]): once a
//! release, under-share sleepers first ([`pass_on`]); one of those that had tried
//! since the release hands it to the sleepers past their share ([`hand_over`]), so
//! that an ask of fewer units behind the asks that did not fit is reached.
//! Without that, a busy tenant's waiters all woke, each the next, for every unit
//! another tenant turned over: a herd in single file. A sleeper's class is that of its
//! last refusal, which its own tenant's release may have made stale (under its share
//! now): that release wakes its tenant's sleepers past their share besides the
//! under-share ones. A reap wakes every sleeper past its share ([`reaped`]). In an
//! `evict` pool, a tenant's arrival in the active set, or a shrink, wakes every
//! sleeper ([`shares_fell`]): with nothing released, lower shares give spawns victims.
//!
//! A waiter may also watch owner words ([`Watch`], armed by `watch::arm`): it then
//! sleeps on its half and on them at once with `futex_waitv` (Linux 5.16+), and the
//! kernel wakes it when one of those processes dies. It does so only in a process
//! whose anchor could not start: an anchor watches every peer already and wakes the
//! waiters of the pools a dead one held, and a sleep on one word wakes sooner. On an
//! older kernel it sleeps on its half alone, and the table's periodic sweep is what
//! notices deaths.

pub mod watch;

#[cfg(test)]
mod tests;

use std::time::{Duration, Instant};

use crate::layout::PoolRec;
use crate::sync::{AtomicU32, Ordering::*};

#[cfg(not(target_endian = "little"))]
compile_error!("PoolRec.wake is two u32 futex words in a little-endian u64");

/// The two kinds of waiter, each sleeping on its own half of `wake`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Refused `pool_full` while under its share: woken first.
    Under = 0,
    /// Refused `over_share`.
    Over = 1,
}

/// An owner word to sleep on, with the value it must still hold.
#[derive(Clone, Copy, Debug)]
pub struct Watch<'a> {
    pub word: &'a AtomicU32,
    pub val: u32,
}

/// Adding this to `wake` bumps both halves.
const BOTH: u64 = 1 | 1 << 32;
/// Most words one `futex_waitv` takes (`FUTEX_WAITV_MAX`).
pub const WAITV_MAX: usize = 128;
/// `FUTEX2_SIZE_U32` of `<linux/futex.h>`: a 32-bit word, shared (no `FUTEX2_PRIVATE`).
const FUTEX2_SIZE_U32: u32 = 0x02;

/// `struct futex_waitv` of `<linux/futex.h>`.
#[repr(C)]
#[derive(Clone, Copy)]
struct FutexWaitv {
    val: u64,
    uaddr: u64,
    flags: u32,
    reserved: u32,
}

impl FutexWaitv {
    /// An entry past the count given to the kernel, which it does not read.
    const UNUSED: FutexWaitv = FutexWaitv {
        val: 0,
        uaddr: 0,
        flags: 0,
        reserved: 0,
    };
}

/// Set once `futex_waitv` answered ENOSYS; Relaxed: a cache of a fact about the kernel.
static NO_WAITV: AtomicU32 = AtomicU32::new(0);

/// The half of a `wake` value that `class` sleeps on.
#[inline]
pub fn half(wake: u64, class: Class) -> u32 {
    (wake >> (32 * class as u32)) as u32
}

fn word_ptr(pool: &PoolRec, class: Class) -> *mut u32 {
    // Little-endian: the low half is at the lower address.
    pool.wake
        .as_ptr()
        .cast::<u32>()
        .wrapping_add(class as usize)
}

/// An absolute CLOCK_MONOTONIC deadline for `until`.
fn deadline(until: Instant) -> Option<libc::timespec> {
    let left = until
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())?;
    let abs = (crate::clock::monotonic() + left).min(Duration::from_secs(i32::MAX as u64));
    Some(libc::timespec {
        tv_sec: abs.as_secs() as libc::time_t,
        tv_nsec: abs.subsec_nanos() as _,
    })
}

/// A waiter's bit in the futex bitset it sleeps with (`FUTEX_WAIT_BITSET`): its
/// tenant's, modulo 32. Releases and reaps wake every bit; a wake that leaves a tenant's
/// bit out (see [`released_by`], [`pass_on`]) passes over that tenant's sleepers, and
/// over those of the tenants that share its bit.
#[inline]
pub fn tenant_bit(tenant: usize) -> u32 {
    1 << (tenant % 32)
}

/// Every bit (`FUTEX_BITSET_MATCH_ANY`): a wake that reaches every sleeper of a half,
/// or a sleep that every wake of its word ends.
pub const EVERY_TENANT: u32 = libc::FUTEX_BITSET_MATCH_ANY as u32;

/// The bits a waiter refused `last` sleeps with: its tenant's ([`tenant_bit`]), or, for
/// a spawn with nothing to evict (`too_many_residents`), two bits of its tenant and its
/// units together ([`spawn_bits`]): a spawn's victims are residents of as many units,
/// so two spawns of one tenant and size find the same ones, or none.
pub fn sleep_bits(last: &crate::refusal::Refused, tenant: usize) -> u32 {
    if last.reason == crate::refusal::Reason::TooManyResidents {
        spawn_bits(tenant, last.units)
    } else {
        tenant_bit(tenant)
    }
}

/// A spawn's two bits, one in each half of the bitset: `(tenant + 13 * units) % 16`
/// and `16 + (tenant / 16 + 7 * units) % 16`. A pass that leaves them out
/// ([`pass_bits`]) passes over the spawns of the same tenant and size, and over a spawn
/// of another whose two bits are the same: of one size, only a tenant whose directory
/// slot is a multiple of 256 away; of other sizes, about 1 in 256 of the pairs. Such a
/// spawn waits for the next wake, its sweep or the recount. (With one bit, `(tenant +
/// 13 * units) % 32`, 1 in 32: the test
/// `no_admissible_waiter_stays_asleep_after_ops_in_any_window` found "t0" asking 3
/// and "t2" asking 1 on one bit, one left asleep with a victim for it.)
pub fn spawn_bits(tenant: usize, units: u32) -> u32 {
    let (t, u) = (tenant as u64, units as u64);
    let lo = t.wrapping_add(13u64.wrapping_mul(u)) % 16;
    let hi = 16 + (t / 16).wrapping_add(7u64.wrapping_mul(u)) % 16;
    (1 << lo) | (1 << hi)
}

/// Sleeps while `class`'s half of `pool.wake` equals `seq` and every watched word holds
/// its value, for at most until `until`; woken by a wake of its half whose bitset has
/// a bit of `bits` ([`tenant_bit`]; a sleep on several words, with `futex_waitv`, by
/// every wake of its half). Returns early on a wake, a signal or a changed word; the
/// caller re-checks everything. True if a wake of its half ended it (not a timeout, a
/// signal, a changed word or a watched word's wake).
#[must_use]
pub fn sleep(
    pool: &PoolRec,
    class: Class,
    seq: u32,
    bits: u32,
    watch: &[Watch<'_>],
    until: Instant,
) -> bool {
    let Some(deadline) = deadline(until) else {
        return false;
    };
    if !watch.is_empty() {
        let first = std::iter::once((seq, word_ptr(pool, class)));
        let rest = watch.iter().map(|w| (w.val, w.word.as_ptr()));
        if let Some(rc) = waitv_rc(first.chain(rest), &deadline) {
            return rc == 0;
        }
    }
    futex_wait(word_ptr(pool, class), seq, &deadline, bits)
}

/// Sleeps while every watched word holds its value, for at most until `until` (the
/// first word alone is slept on where the kernel has no `futex_waitv`). Returns early
/// on a wake, a signal or a changed word.
pub fn sleep_on(watch: &[Watch<'_>], until: Instant) {
    let Some(deadline) = deadline(until) else {
        return;
    };
    debug_assert!(!watch.is_empty(), "sleep_on needs a word to sleep on");
    let Some(first) = watch.first() else {
        return;
    };
    if !waitv(watch.iter().map(|w| (w.val, w.word.as_ptr())), &deadline) {
        let _ = futex_wait(first.word.as_ptr(), first.val, &deadline, EVERY_TENANT);
    }
}

/// `futex_waitv` on the first `WAITV_MAX` of `words` (value, address); false if the
/// kernel has no `futex_waitv` (then nothing was waited for).
fn waitv(words: impl Iterator<Item = (u32, *mut u32)>, deadline: &libc::timespec) -> bool {
    waitv_rc(words, deadline).is_some()
}

/// [`waitv`], with what the call returned: the index of the word whose wake ended it
/// (`>= 0`), or -1 (a timeout, a signal, a word that did not hold its value); `None`
/// if the kernel has no `futex_waitv`.
fn waitv_rc(
    words: impl Iterator<Item = (u32, *mut u32)>,
    deadline: &libc::timespec,
) -> Option<i64> {
    if NO_WAITV.load(Relaxed) != 0 {
        return None;
    }
    // On the stack: the `Vec` this was would be freed on the waiter's way from the
    // kernel to its try, the path a wake's latency is measured on.
    let mut v = [FutexWaitv::UNUSED; WAITV_MAX];
    let mut n = 0;
    for ((val, addr), slot) in words.zip(v.iter_mut()) {
        *slot = FutexWaitv {
            val: val as u64,
            uaddr: addr as u64,
            flags: FUTEX2_SIZE_U32,
            reserved: 0,
        };
        n += 1;
    }
    // SAFETY:
    //   * the first `n` (<= 128) entries of `v` are the words, with zero `reserved`;
    //   * every `uaddr` is a 4-byte aligned u32 that outlives this call (a pool's
    //     `wake`, a `ProcRec.owner_futex` or the header's `registry` in a shared
    //     mapping, or a `Cancel`'s or an anchor's stop word); the kernel only reads them;
    //   * `deadline` is an absolute CLOCK_MONOTONIC time; flags must be 0.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex_waitv,
            v.as_ptr(),
            n as libc::c_uint,
            0 as libc::c_uint,
            deadline as *const libc::timespec,
            libc::CLOCK_MONOTONIC,
        )
    };
    if rc >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ENOSYS) {
        return Some(rc as i64);
    }
    NO_WAITV.store(1, Relaxed);
    None
}

/// `FUTEX_WAIT_BITSET` on one word while it holds `val`, until an absolute deadline;
/// only a wake whose bitset shares a bit with `bits` (non-zero) wakes it. Whether a
/// wake ended it (not a timeout, a signal, or a word that did not hold `val`).
#[must_use]
fn futex_wait(word: *mut u32, val: u32, deadline: &libc::timespec, bits: u32) -> bool {
    debug_assert_ne!(bits, 0, "a futex waiter's bitset must not be empty");
    // SAFETY:
    //   * the word is a 4-byte aligned u32 that outlives this call (as in `waitv`); the
    //     kernel only reads it;
    //   * FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC deadline (no
    //     FUTEX_CLOCK_REALTIME), a non-zero bitset (`bits.max(1)`), and ignores uaddr2;
    //   * no FUTEX_PRIVATE_FLAG: the word is shared with other processes.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word,
            libc::FUTEX_WAIT_BITSET,
            val,
            deadline as *const libc::timespec,
            std::ptr::null::<u32>(),
            bits.max(1),
        )
    };
    rc == 0
}

/// Wakes up to `n` waiters of `class`; returns how many woke.
pub fn wake(pool: &PoolRec, class: Class, n: u32) -> u32 {
    wake_word(word_ptr(pool, class), n)
}

/// `FUTEX_WAKE` of up to `n` waiters of the u32 at `word` (process-shared); returns how
/// many woke.
pub(crate) fn wake_word(word: *mut u32, n: u32) -> u32 {
    wake_bits(word, n, EVERY_TENANT)
}

/// Wakes up to `n` waiters of the u32 at `word` (process-shared) whose bitset shares a
/// bit with `bits` (a sleeper of `futex_waitv`, or of plain `FUTEX_WAIT`, matches every
/// bitset); returns how many woke. With every bit, this is `FUTEX_WAKE` (the kernel's
/// `FUTEX_WAKE` is this call with `FUTEX_BITSET_MATCH_ANY`).
fn wake_bits(word: *mut u32, n: u32, bits: u32) -> u32 {
    // SAFETY: `word` is an aligned u32 that lives at least as long as this call (a pool's
    // `wake` or an owner word in a live mapping, or a `Cancel`'s word); FUTEX_WAKE_BITSET
    // only uses the address as a key, takes a non-zero bitset in val3 (`bits.max(1)`)
    // and ignores the timeout and uaddr2 arguments; no FUTEX_PRIVATE_FLAG (shared word).
    let woke = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word,
            libc::FUTEX_WAKE_BITSET,
            n.min(i32::MAX as u32),
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            bits.max(1),
        )
    };
    woke.max(0) as u32
}

/// After an op on guaranteed pool `gp` that gave units back was published (a release,
/// a reap, a reset): wakes up to `n` of the waiters asleep on the pool whose bits share
/// one with `bits` (`guaranteed::waiters::release_bits`, or `EVERY_BIT`), if one may
/// be asleep (see `guaranteed::waiters`). A release wakes one, which passes the wake
/// on (`guaranteed::pass`); a reap wakes every one.
pub fn guaranteed_freed<R: crate::region::Region>(r: &R, gp: usize, bits: u32, n: u32) {
    if crate::guaranteed::waiters::after_freeing(r, gp, bits, crate::clock::now_ms) {
        guaranteed_wake(r, gp, bits, n);
    }
}

/// Wakes up to `n` of the waiters asleep on guaranteed pool `gp`'s wake word whose
/// bits share one with `bits`, those that queued first: `FUTEX_WAKE_BITSET` (a sleeper
/// on `futex_waitv` matches every bitset). Bumps nothing: a reset's caller bumped the
/// word before, and a pass (`guaranteed::pass`, `n` = 1) needs no bump, the woken
/// waiter's ask reading what the releases published.
pub fn guaranteed_wake<R: crate::region::Region>(r: &R, gp: usize, bits: u32, n: u32) {
    wake_bits(r.g_head_rec(gp).wake.as_ptr(), n, bits);
}

/// Sleeps on guaranteed pool `gp`'s wake word while it holds `seen` (what
/// `guaranteed::waiters::seen` returned before the refused ask, once `announce` was
/// made), and while `cancel` is not cancelled, for at most until `until`, woken by a
/// release whose bits share one with `bits` (`guaranteed::waiters::waiter_bits`; a
/// sleep with a cancel token, on `futex_waitv`, by every one). Returns early on a
/// wake, a signal or a changed word; true if a wake of the pool's word ended it.
pub fn guaranteed_sleep<R: crate::region::Region>(
    r: &R,
    gp: usize,
    seen: u32,
    bits: u32,
    cancel: Option<&Cancel>,
    until: Instant,
) -> bool {
    let Some(deadline) = deadline(until) else {
        return false;
    };
    let word = r.g_head_rec(gp).wake.as_ptr();
    if let Some(c) = cancel {
        let c = c.watch();
        // Without futex_waitv (None), the pool's word alone: a cancel is seen at the end.
        if let Some(rc) = waitv_rc(
            [(seen, word), (c.val, c.word.as_ptr())].into_iter(),
            &deadline,
        ) {
            return rc == 0;
        }
    }
    futex_wait(word, seen, &deadline, bits)
}

/// Ends a blocking acquire early, from another thread: `Table::acquire_cancellable`
/// then returns a `cancelled` refusal. The waiter sleeps on this word too (with
/// `futex_waitv`), so `cancel` wakes it at once; on a kernel without `futex_waitv` it
/// is noticed at the next wake, sweep or deadline.
#[derive(Debug, Default)]
pub struct Cancel {
    word: AtomicU32,
}

impl Cancel {
    pub fn new() -> Cancel {
        Cancel::default()
    }
    /// Cancels every acquire waiting with this token, now and until `reset`. One atomic
    /// store and one `FUTEX_WAKE`: async-signal-safe (the C ABI's `fairshm_cancel_fire`
    /// keeps `errno` around it).
    pub fn cancel(&self) {
        // Release: the canceller's writes before it happen before the waiter's return.
        self.word.store(1, Release);
        wake_word(self.word.as_ptr(), u32::MAX);
    }
    pub fn is_cancelled(&self) -> bool {
        // Acquire: pairs with `cancel`.
        self.word.load(Acquire) != 0
    }
    /// Makes the token usable again.
    pub fn reset(&self) {
        // Relaxed: the owner of the token resets it between uses.
        self.word.store(0, Relaxed);
    }
    /// The word to sleep on, while not cancelled.
    pub(crate) fn watch(&self) -> Watch<'_> {
        Watch {
            word: &self.word,
            val: 0,
        }
    }
}

/// Wakes one waiter whose bitset has a bit of `bits`, under-share first: a woken
/// waiter that was refused again passes its wake on with this (see [`pass_bits`]).
pub fn pass_on(pool: &PoolRec, bits: u32) {
    if wake_bits(word_ptr(pool, Class::Under), 1, bits) == 0 {
        wake_bits(word_ptr(pool, Class::Over), 1, bits);
    }
}

/// Wakes one sleeper past its share whose bitset has a bit of `bits`: a waiter woken
/// from the under-share half with no release it had not seen (a wake passed on, or a
/// release's wake that came after its try), and refused again, hands the wake on to
/// that half with this.
///
/// A woken waiter refused passes the wake on ([`pass_on`]) once a release (a new value
/// of `wake`), under-share sleepers first, where one that has tried since the release
/// may sleep at the head (refused, it slept again, or it started after the release)
/// and take it. Before, that one passed nothing on, and the sleepers past their share
/// in the other half were never asked: with asks of several units, one of them may fit
/// where the asks woken did not (the tests
/// `a_wake_passed_to_a_sleeper_that_tried_since_the_release_reaches_the_other_half` and
/// `no_admissible_waiter_stays_asleep_after_ops_in_any_window` found such a sleeper
/// left to its deadline, or its sweep).
///
/// The chain of wakes ends: a hand-on goes from the under-share half to the other only,
/// and a sleeper past its share woken with no release it had not seen hands nothing
/// on; one that had not tried since the release passes once. In each half, FIFO, those
/// that had not tried since the release sleep ahead of those that had, so a chain ends
/// only once none of them is left that its bits reach.
pub fn hand_over(pool: &PoolRec, bits: u32) {
    wake_bits(word_ptr(pool, Class::Over), 1, bits);
}

/// Whom a waiter refused `last` after a wake (of tenant `tenant`) passes the wake on
/// to, as [`pass_on`]'s bits; `None`: nobody, as nobody can be admitted.
/// - The pool was full (`in_use >= POOL`): no ask of any tenant fits, and the holders'
///   releases wake again.
/// - Refused past its share with no room past the floor even for one unit (`in_use +
///   1 > POOL - FLOOR`): every ask of its tenant is refused as it was (its tenant holds
///   what it held, at or past the same share), so the wake goes to other tenants only.
///   Without this, each waiter of a busy tenant woke the next, all of them, for every
///   unit another tenant released (the test `a_busy_tenants_waiters_do_not_all_wake_for_another_tenants_unit`).
/// - Otherwise, anyone: a smaller ask, another tenant's, may fit.
///
/// A spawn with nothing to evict (`too_many_residents`) passes to any but its own
/// tenant's spawns of as many units (its [`sleep_bits`]): their scans would find what
/// its found, while another tenant's, or another size, may evict the resident that
/// came idle. (Before, a busy tenant's spawns all woke, each the next, for every call
/// another tenant ended: `a_busy_tenants_spawns_do_not_all_wake_for_another_tenants_idle_resident`.)
/// A refusal by the rates passes to anyone.
pub fn pass_bits(last: &crate::refusal::Refused, tenant: usize) -> Option<u32> {
    use crate::refusal::Reason;
    if last.reason == Reason::TooManyResidents {
        return Some(!sleep_bits(last, tenant));
    }
    let by_rule = matches!(last.reason, Reason::PoolFull | Reason::OverShare);
    if by_rule && last.in_use >= last.capacity {
        return None;
    }
    let floor_reached = last.in_use as u64 + 1 + last.floor as u64 > last.capacity as u64;
    if last.reason == Reason::OverShare && floor_reached {
        return Some(!tenant_bit(tenant));
    }
    Some(EVERY_TENANT)
}

/// After `units` came free in `pool` (the pool word's SeqCst CAS is done): if anyone
/// waits, bumps both sequences and wakes up to `units` waiters, under-share ones first.
#[inline]
pub fn released(pool: &PoolRec, units: u32) {
    // SeqCst: see the module docs (pairs with the waiter's announcement and its try).
    let waiting = pool.waiters.load(SeqCst);
    if waiting != 0 {
        wake_waiters(pool, units, waiting, None::<(usize, fn() -> bool)>);
    }
}

/// After a resident of `pool` came idle by the end of its last call (its record's
/// SeqCst CAS is done): if anyone waits and `evictable()` says a spawn may take it,
/// bumps both sequences and wakes one waiter, as a release of one unit does.
/// `evictable` is asked only when someone waits: the resident's tenant is at or past
/// its share ([`crate::residents::idle_is_evictable`]). One under its share is
/// nobody's victim (a spawn past its share takes only its own tenant's, one under it
/// only a tenant's at or past its share), so the spawn a wake reached would scan, find
/// it no victim, and pass the wake on, waiter after waiter; a call's end changes no
/// share and no holding, so it makes no other resident a victim either. What makes it
/// a victim later wakes for itself: a grant (which wakes whatever its tenant), a
/// release, a tenant's arrival in the active set or a pool sized per worker that
/// shrinks (both lower every share: [`shares_fell`]).
#[inline]
pub fn resident_idle(pool: &PoolRec, evictable: impl FnOnce() -> bool) {
    // SeqCst: as in `released` (pairs with the waiter's announcement and its scan).
    let waiting = pool.waiters.load(SeqCst);
    if waiting != 0 && evictable() {
        wake_waiters(pool, 1, waiting, None::<(usize, fn() -> bool)>);
    }
}

/// [`released`], for a release by tenant `tenant` of its own lease (or an acquire's
/// back-out): a sleeper past its share is woken only if it may be admitted. One
/// refused `over_share` is admitted only below the floor (`in_use + units <= POOL -
/// FLOOR`) or once its tenant is under its share again; a release changes no share
/// (the active set stays) and no holdings but its own tenant's. So when the pool, as
/// read after the release, has no room past the floor even for one unit, the others'
/// sleepers past their share are not woken (they would try, be refused as before, and
/// sleep again, each of them, for every unit another tenant turns over). And, room or
/// not, `tenant`'s own are woken, up to `units` of them besides the under-share
/// sleepers, when `under()` says the release left it under its share
/// ([`crate::admission::under_share_now`], asked only when some waiter counted is
/// still asleep): they may be admitted now, while they sleep with the class of their
/// last refusal. (Before, the under-share
/// sleepers took every wake first: such a sleeper, its tenant under its share and a
/// unit free for it, slept on until another wake, its deadline or the next recount,
/// the test `no_admissible_waiter_stays_asleep_after_ops_in_any_window` found.)
#[inline]
pub fn released_by(pool: &PoolRec, units: u32, tenant: usize, under: impl FnOnce() -> bool) {
    // SeqCst: as in `released`.
    let waiting = pool.waiters.load(SeqCst);
    if waiting != 0 {
        wake_waiters(pool, units, waiting, Some((tenant, under)));
    }
}

/// Bumps both halves of `pool.wake` and wakes, for `units` released, with `waiting`
/// waiters announced when the release looked (after its pool CAS).
#[cold]
fn wake_waiters(
    pool: &PoolRec,
    units: u32,
    waiting: u32,
    by: Option<(usize, impl FnOnce() -> bool)>,
) {
    // SeqCst: see the module docs.
    pool.wake.fetch_add(BOTH, SeqCst);
    let mut woke = wake(pool, Class::Under, units);
    let Some((t, under)) = by else {
        if woke < units {
            wake_bits(word_ptr(pool, Class::Over), units - woke, EVERY_TENANT);
        }
        return;
    };
    if woke < units && room_past_floor(pool) {
        woke += wake_bits(word_ptr(pool, Class::Over), units - woke, EVERY_TENANT);
    }
    // The tenant's own sleepers past their share sleep with the class of their last
    // refusal: if this left it under its share, they are admitted as the under-share
    // sleepers are, and are woken with them. Only if some waiter counted before the
    // bump is still asleep: one announced after it sees this release, and one not yet
    // asleep sees the bump (so a lone waiter, woken above, costs no second call).
    if waiting > woke && under() {
        wake_bits(word_ptr(pool, Class::Over), units, tenant_bit(t));
    }
}

/// After a tenant joined the active set of `evict` pool `pool` (its ask's SeqCst add to
/// the active weight, `admission::active::touch`), or a `per_worker` one shrank: every
/// share fell, so a spawn asleep with nothing to evict may have a victim now, with
/// nothing released (one past its share now, its own tenant's idle residents; one
/// under it, those of a tenant put past its share). If anyone waits, bumps both
/// sequences and wakes every sleeper: which spawns can evict depends on each one's
/// tenant and the residents idle, and a grant's wake of one, passed on, stops at the
/// first spawn it serves. Rare: a tenant arrives at most once a window.
#[cold]
#[inline(never)]
pub fn shares_fell(pool: &PoolRec) {
    // SeqCst: as in `released` (pairs with the waiter's announcement and its load of
    // the active weight, `touch`).
    if pool.waiters.load(SeqCst) != 0 {
        wake_halves(pool, u32::MAX);
    }
}

/// Bumps both halves of `pool.wake`, wakes up to `under` under-share sleepers and
/// every sleeper past its share.
fn wake_halves(pool: &PoolRec, under: u32) {
    // SeqCst: see the module docs.
    pool.wake.fetch_add(BOTH, SeqCst);
    wake(pool, Class::Under, under);
    wake_bits(word_ptr(pool, Class::Over), u32::MAX, EVERY_TENANT);
}

/// After a reap gave back `units` of pool `pool`, or took out as many of its waiters (a
/// death: rare; a waiter killed as a wake ended its sleep took that wake along): wakes
/// up to `units` under-share sleepers and every sleeper past its share. The dead
/// process's tenants hold less now, and their sleepers past their share (in other
/// processes) may be under it: without knowing which tenants they are, every such
/// sleeper asks again.
pub fn reaped(pool: &PoolRec, units: u32) {
    // SeqCst: as in `released`.
    if pool.waiters.load(SeqCst) != 0 {
        wake_halves(pool, units);
    }
}

/// Whether an ask of one unit fits `pool` past its floor now (`in_use + 1 <= POOL -
/// FLOOR`), as its words read after a release.
fn room_past_floor(pool: &PoolRec) -> bool {
    use crate::layout::{op_word, pair};
    // SeqCst, both: the pool word as the waiter handshake reads it (after our release's
    // CAS, so it counts that release), and the limits as every acquire loads them.
    // What changes them after this read wakes for itself: a later release or reap
    // reads them again, and a `per_worker` pool's growth wakes with every bit.
    let in_use = op_word::count(pool.word.load(SeqCst)) as u64;
    let limits = pool.limits.load(SeqCst);
    in_use + 1 + pair::hi(limits) as u64 <= pair::lo(limits) as u64
}
