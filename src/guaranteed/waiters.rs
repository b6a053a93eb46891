//! Waiting on a guaranteed pool: a waiter refused by the rules sleeps until units come
//! back (a release, a reap, a reset) or its own deadline, whichever is first.
//!
//! Two words of the pool's head record (`layout::GHeadRec`) carry it, on the head word's
//! line, which a releaser has just taken for its CAS:
//! - `wake`: the futex word the waiters sleep on, bumped by every op that gave units
//!   back, right after its head CAS;
//! - `sleep_until_ms`: until when some waiter may be asleep (ms of `CLOCK_MONOTONIC`,
//!   the latest any waiter announced, with `fetch_max`), so that a release makes the
//!   `FUTEX_WAKE` system call only while someone may sleep.
//!
//! Protocol (no lost wake-up):
//! - a waiter loads `wake` ([`seen`], Acquire) before it asks (its op reads the head);
//!   refused, it announces the end of its sleep ([`announce`]: `fetch_max` of
//!   `sleep_until_ms`, a SeqCst fence, a load of `wake`), asks again at once if `wake`
//!   moved since [`seen`], and otherwise sleeps while `wake` still holds that value;
//! - an op that gave units back publishes (its head CAS), bumps `wake` (SeqCst), fences
//!   SeqCst and loads `sleep_until_ms` ([`after_freeing`]); if that is not past, the
//!   caller wakes the sleepers it may serve: one for a release, which passes the wake
//!   on (`guaranteed::pass`), every one for a reap or a reset.
//!
//! A release the waiter's ask did not see bumped `wake` after the waiter's load of it:
//! a [`seen`] that read the bump synchronizes with it, and the head CAS before it
//! happens before the ask. So the sleep returns at once, unless it began before the
//! bump; then, by the two SeqCst fences, the releaser's load of `sleep_until_ms` saw the
//! announcement (or the waiter's load of `wake` in [`announce`] saw the bump), and the
//! releaser wakes it. A refusal published by another waiter's ask bumps nothing, so
//! waiters do not wake one another, and a waiter's ask is not repeated without cause
//! (each ask counts as a refusal in the statistics).
//!
//! No count of waiters is kept: a waiter killed asleep leaves only its deadline, which
//! runs out by itself (at most half `idle_after_ms` later: a longer sleep is announced
//! in parts, [`announce_step_ms`]); until then a release pays one `FUTEX_WAKE` for
//! nobody.
//!
//! Which sleepers a release may wake (the futex's bitset): a waiter sleeps with
//! [`waiter_bits`], its tenant's bit and, if its request may borrow (its hold is
//! within the horizon), [`BORROW_BIT`]; a release
//! wakes [`release_bits`], the bits of the tenants whose guarantee gets units back (the
//! lease's own tenant, each lender of its slices) and [`BORROW_BIT`] when a lender
//! that gets units back may lend them at once. A waiter that a release can serve is
//! woken: its own guarantee's free units grew (it is the lease's tenant or a lender),
//! or what idle tenants can lend grew, which only a lender of the lease's slices can
//! make so (the lease's tenant is active from its release on, so not lendable), and a
//! request that may borrow sleeps with [`BORROW_BIT`] (a refused request always needs
//! more than its own guarantee has free). The test `a_release_wakes_every_waiter_it_can_serve`
//! (`tests/guaranteed_props.rs`) checks it over random states. Of those, a release
//! wakes the one that went to sleep first, which passes the wake on while units are
//! free for them (`guaranteed::pass`: no herd of a tenant's waiters for one lease).
//! Anything that comes with time (a lender turning idle, a want lapsing) is each
//! waiter's own retry-after, at most half `idle_after_ms` away. A reap of a dead
//! holder and a reset by `repair` wake every sleeper, and a sleeper that does not say
//! who it is (`fairshm_guaranteed_sleep`) uses every bit: each such sleeper wakes, asks
//! once, and sleeps again if refused. A wait with a cancel token sleeps on
//! `futex_waitv`, whose entries match every bitset: any release's wake may reach it,
//! and its epochs (below) send it back to sleep, the wake passed on, when the release
//! was not for it.
//!
//! A waiter back from its sleep (a timeout, a signal, a word that had moved before it
//! slept) with `wake` moved tells a release for it from one that was not by the
//! `epochs` of its bits, one byte each, which a release adds one to before its bump:
//! [`seen_as`] takes a cookie of `wake` and the two bytes before the ask, [`for_me`]
//! compares after a load of `wake`, and [`moved_on`] moves the cookie past the moves
//! that were not for it, so that it sleeps on (and a caller sleeping in slices passes
//! the cookie on). A release for it whose bump the load read has its add visible (the
//! add came first and the bump is a Release); one whose bump it did not read bumps
//! later, which the next sleep's kernel check or wake sees. A move of 256 or more
//! counts as for it (a byte may have come round). The loom model
//! `loom_a_waiter_sleeps_on_past_others_releases_only` checks it.

use crate::layout::GHeadRec;
use crate::region::Region;
use crate::sync::{Ordering::*, fence};

use super::state::{LeaseEntry, Rules, State};

/// The index of [`BORROW_BIT`]: bits 0..31 are the tenants'.
const BORROW_INDEX: u32 = 31;
/// The bit of the waiters whose request may borrow (its hold is within the reclaim
/// horizon).
pub const BORROW_BIT: u32 = 1 << BORROW_INDEX;
/// Every waiter: a sleeper that does not say who it is, or a wake for every sleeper.
pub const EVERY_BIT: u32 = u32::MAX;

/// Tenant `t`'s bit. Tenants beyond 31 share bits (`t % 31`): a shared bit only wakes
/// a sleeper that then asks once more than it needed to.
pub fn tenant_bit(t: u16) -> u32 {
    1 << tenant_index(t)
}

/// The index of tenant `t`'s bit (and of its epoch byte).
fn tenant_index(t: u16) -> u32 {
    t as u32 % BORROW_INDEX
}

/// The bits a waiter of `tenant` asking to hold for `hold_ms` sleeps with, on a pool
/// whose reclaim horizon is `horizon_ms` (module docs).
pub fn waiter_bits(tenant: u16, hold_ms: u64, horizon_ms: u64) -> u32 {
    tenant_bit(tenant) | if hold_ms <= horizon_ms { BORROW_BIT } else { 0 }
}

/// The bits that the release of `lease` (outstanding in `st`) at `now` wakes, from the
/// state `st` before it (module docs).
pub fn release_bits(st: &State, rules: &Rules, lease: &LeaseEntry, now: u64) -> u32 {
    let now = now.max(st.clock).max(rules.started_at);
    let mut bits = tenant_bit(lease.tenant);
    for s in st.slices.iter().filter(|s| s.lease == lease.no) {
        bits |= tenant_bit(s.lender);
        if st.lendable(rules, s.lender as usize, now) {
            bits |= BORROW_BIT;
        }
    }
    bits
}

/// Before a waiter's ask on pool `gp`: the value of `wake` to sleep on if refused.
pub fn seen<R: Region>(r: &R, gp: usize) -> u32 {
    // Acquire: a bump read here synchronizes with its releaser, whose head CAS then
    // happens before this waiter's ask (module docs).
    r.g_head_rec(gp).wake.load(Acquire)
}

/// A cookie of [`seen_as`] carries the epochs (a plain [`seen`] value does not).
const COOKIE_EPOCHS: u64 = 1 << 48;

/// The epoch byte of waiters' bit `bit` (0..32).
fn epoch(r: &impl Region, gp: usize, bit: u32) -> u8 {
    debug_assert!(bit < 32);
    let word = &r.g_head_rec(gp).epochs[(bit / 8) as usize % 4];
    // Acquire: an add read here synchronizes with its releaser, whose head CAS then
    // happens before what this waiter does next (its ask, or its verdict).
    (word.load(Acquire) >> (8 * (bit % 8))) as u8
}

/// Before an ask of `tenant` on pool `gp` that may end in a sleep: a cookie of `wake`
/// (bits 0..32) and the epochs of the tenant's bit (32..40) and of [`BORROW_BIT`]
/// (40..48), read after it, for [`for_me`] and [`moved_on`] after the sleep.
pub fn seen_as<R: Region>(r: &R, gp: usize, tenant: u16) -> u64 {
    let w = seen(r, gp);
    let mine = epoch(r, gp, tenant_index(tenant)) as u64;
    let borrow = epoch(r, gp, BORROW_INDEX) as u64;
    w as u64 | mine << 32 | borrow << 40 | COOKIE_EPOCHS
}

/// The value of `wake` a cookie (of [`seen_as`], or a plain [`seen`] value) holds.
pub fn cookie_wake(cookie: u64) -> u32 {
    cookie as u32
}

/// Whether `wake`, read as `now` just before this call, moved since `cookie` for a
/// release that may serve the waiter of `tenant` sleeping with `bits`: one of its
/// bits' epochs moved, or `wake` moved by 256 or more (an epoch may have come round),
/// or the cookie carries no epochs (then any move counts). A move that is not for it
/// leaves the epochs of its bits as they were, and a release that is for it and whose
/// bump `now` includes has its epoch add visible here (it came before the bump, a
/// Release the Acquire load of `now` read).
pub fn for_me<R: Region>(r: &R, gp: usize, cookie: u64, tenant: u16, bits: u32, now: u32) -> bool {
    let was = cookie_wake(cookie);
    if now == was {
        return false;
    }
    if cookie & COOKIE_EPOCHS == 0 || now.wrapping_sub(was) >= 256 {
        return true;
    }
    let mine = epoch(r, gp, tenant_index(tenant)) != (cookie >> 32) as u8;
    let borrow = bits & BORROW_BIT != 0 && epoch(r, gp, BORROW_INDEX) != (cookie >> 40) as u8;
    mine || borrow
}

/// The cookie moved on to `wake` = `now` after [`for_me`] said that the moves up to it
/// were not for the waiter: its epochs, unchanged, are the epochs at `now`.
pub fn moved_on(cookie: u64, now: u32) -> u64 {
    (cookie & !0xffff_ffff) | now as u64
}

/// Adds one to the epoch of every bit of `bits`, before the bump of `wake`.
fn add_epochs(rec: &GHeadRec, bits: u32) {
    for (w, word) in rec.epochs.iter().enumerate() {
        let byte_bits = (bits >> (8 * w)) & 0xff;
        if byte_bits == 0 {
            continue;
        }
        // One in the byte of each bit: 0x01 per set bit, spread over the bytes.
        let add = (0..8)
            .filter(|k| byte_bits & (1 << k) != 0)
            .fold(0u64, |a, k| a | 1 << (8 * k));
        // Release: a waiter that reads this add sees our head CAS; and it comes before
        // our bump, so a waiter whose load of `wake` reads the bump reads it too.
        word.fetch_add(add, Release);
    }
}

/// After a refused ask on pool `gp`: says that a waiter may sleep until `until_ms` (ms
/// of `CLOCK_MONOTONIC`), and returns `wake` as it is now. A value other than [`seen`]'s
/// means units came back since: ask again instead of sleeping.
pub fn announce<R: Region>(r: &R, gp: usize, until_ms: u64) -> u32 {
    let rec: &GHeadRec = r.g_head_rec(gp);
    // SeqCst, and the fence: one side of the handshake with `after_freeing`.
    rec.sleep_until_ms.fetch_max(until_ms, SeqCst);
    fence(SeqCst);
    rec.wake.load(SeqCst)
}

/// After an op on pool `gp` that gave units back was published: counts it in the
/// epochs of `bits` (the waiters it may serve: [`release_bits`], or [`EVERY_BIT`]),
/// bumps `wake`, and says whether a waiter may be asleep now (`now_ms`: ms of
/// `CLOCK_MONOTONIC`, read only if some waiter ever announced itself), which the caller
/// must then wake (those of `bits`).
pub fn after_freeing<R: Region>(r: &R, gp: usize, bits: u32, now_ms: impl FnOnce() -> u64) -> bool {
    let rec: &GHeadRec = r.g_head_rec(gp);
    add_epochs(rec, bits);
    // SeqCst (a Release at least): a waiter's `seen` that reads it sees our head CAS.
    rec.wake.fetch_add(1, SeqCst);
    // SeqCst fence: the other side of the handshake with `announce`.
    fence(SeqCst);
    let until = rec.sleep_until_ms.load(SeqCst);
    until != 0 && until >= now_ms()
}

/// The longest sleep a waiter of pool `gp` announces at once, in ms: half
/// `idle_after_ms` (at least 1); a longer sleep is slept in parts of this length.
pub fn announce_step_ms<R: Region>(r: &R, gp: usize) -> u64 {
    (r.g_rules(gp).idle_after / 2).max(1)
}

/// How far past `now_ms` pool `gp`'s `sleep_until_ms` reaches, if further than any
/// waiter announces ([`announce_step_ms`], and the ms rounded up): a hostile write,
/// which would keep every release waking nobody until then. For `check`.
pub fn announced_too_far<R: Region>(r: &R, gp: usize, now_ms: u64) -> Option<u64> {
    // Relaxed: a report; nothing is read through it.
    let until = r.g_head_rec(gp).sleep_until_ms.load(Relaxed);
    let ahead = until.saturating_sub(now_ms);
    (ahead > announce_step_ms(r, gp) + 1).then_some(ahead)
}

/// For `repair`: forgets pool `gp`'s announced sleeps (a hostile `sleep_until_ms` with
/// them) and bumps `wake`; the caller then wakes every sleeper, which asks again and
/// announces itself anew.
pub fn forget<R: Region>(r: &R, gp: usize) {
    let rec: &GHeadRec = r.g_head_rec(gp);
    add_epochs(rec, EVERY_BIT);
    // SeqCst: ordered before the bump, which every sleeper's kernel check then sees.
    rec.sleep_until_ms.store(0, SeqCst);
    rec.wake.fetch_add(1, SeqCst);
}
