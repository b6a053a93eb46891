//! The tenant directory: names claimed lock-free on first use, never freed.
//!
//! Open addressing from the name's FNV hash, linear probing. A claimant CASes an
//! `EMPTY` slot to `WRITING` (naming its process slot), writes name, hash and weight,
//! then stores `READY` with Release. Every searcher follows the same probe order and
//! never passes a `WRITING` slot without resolving it (waiting for it, or clearing it if
//! its writer is dead or names no process slot), so one name never gets two slots. The
//! wait is bounded by time ([`WRITING_WAIT`]): a live writer that does not finish (a
//! stopped process, or garbage naming a live one) makes the lookup fail with the
//! retryable [`Error::TenantBusy`], never wait without bound.

use std::time::{Duration, Instant};

use crate::config::fnv1a;
use crate::error::{Error, Result};
use crate::layout::{MAX_NAME, TenantRec, tenant_state as ts};
use crate::region::Region;
use crate::sync::{Backoff, Ordering::*};

/// How long a lookup waits on a `WRITING` slot before asking whether its writer is
/// alive (a writer needs a few stores; it may have been preempted).
const LIVENESS_AFTER: Duration = Duration::from_millis(1);
/// How long a lookup waits, at most, on a slot whose writer is alive: then it gives up
/// with the retryable [`Error::TenantBusy`] (the writer is stopped, or the slot is
/// garbage naming a live process). Time, not a count of yields: on a loaded machine a
/// count of yields can take seconds.
pub const WRITING_WAIT: Duration = Duration::from_millis(20);

/// A name as the six little-endian words a record stores it in (zero-padded).
fn pack_name(name: &[u8]) -> [u64; 6] {
    let mut padded = [0u8; MAX_NAME];
    padded[..name.len()].copy_from_slice(name);
    std::array::from_fn(|k| {
        u64::from_le_bytes(padded[k * 8..k * 8 + 8].try_into().expect("8 bytes"))
    })
}

/// Compares without allocating: this runs on every acquire.
fn matches(rec: &TenantRec, s: u32, name: &[u8], packed: &[u64; 6], hash: u64) -> bool {
    // Relaxed: the caller's Acquire load of READY in `s` published the hash and the
    // name, which a READY slot never changes (slots are not reused).
    ts::len(s) == name.len()
        && rec.hash.load(Relaxed) == hash
        && rec
            .name
            .iter()
            .zip(packed)
            .all(|(w, p)| w.load(Relaxed) == *p)
}

/// The name in a `READY` record (its state word `s` gives the length).
pub fn read_name(rec: &TenantRec, s: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(MAX_NAME);
    for w in &rec.name {
        out.extend_from_slice(&w.load(Relaxed).to_le_bytes());
    }
    out.truncate(ts::len(s).min(MAX_NAME));
    out
}

/// Looks a tenant up without claiming a slot.
pub fn find<R: Region>(r: &R, name: &[u8]) -> Option<usize> {
    probe(r, name, None, &|_| false).ok().flatten()
}

/// Finds a tenant's slot, claiming one on first use.
///
/// `me` is the caller's process slot (recorded while writing); `writer_dead` says
/// whether the process in a given slot is dead, for a writer that never finished.
pub fn find_or_claim<R: Region>(
    r: &R,
    name: &[u8],
    weight: &dyn Fn() -> u32,
    me: usize,
    writer_dead: &dyn Fn(usize) -> bool,
) -> Result<usize> {
    match probe(r, name, Some((weight, me)), writer_dead)? {
        Some(t) => Ok(t),
        None => Err(Error::TenantTableFull {
            name: String::from_utf8_lossy(name).into_owned(),
            max: r.geometry().tenants,
        }),
    }
}

fn probe<R: Region>(
    r: &R,
    name: &[u8],
    claim: Option<(&dyn Fn() -> u32, usize)>,
    writer_dead: &dyn Fn(usize) -> bool,
) -> Result<Option<usize>> {
    debug_assert!(!name.is_empty() && name.len() <= MAX_NAME);
    let n = r.geometry().tenants;
    let hash = fnv1a(name);
    let packed = pack_name(name);
    let start = (hash % n as u64) as usize;
    for i in 0..n {
        let t = (start + i) % n;
        let rec = r.tenant(t);
        let backoff = Backoff::new();
        let mut waiting_since: Option<Instant> = None;
        loop {
            // Acquire: pairs with the Release store of READY, so name/hash are visible.
            let s = rec.state.load(Acquire);
            match ts::status(s) {
                ts::READY if matches(rec, s, name, &packed, hash) => return Ok(Some(t)),
                ts::READY => break,
                ts::EMPTY => {
                    let Some((weight, me)) = claim else {
                        return Ok(None);
                    };
                    let writing = ts::make(ts::WRITING, name.len(), Some(me));
                    // Acquire: nothing to see yet; the slot is ours if this wins.
                    if rec
                        .state
                        .compare_exchange(s, writing, Acquire, Acquire)
                        .is_err()
                    {
                        continue;
                    }
                    // Relaxed: published by the Release store of READY below.
                    for (w, p) in rec.name.iter().zip(&packed) {
                        w.store(*p, Relaxed);
                    }
                    rec.hash.store(hash, Relaxed);
                    rec.weight.store(weight(), Relaxed);
                    // Release: publishes the name, hash and weight with READY.
                    rec.state
                        .store(ts::make(ts::READY, name.len(), None), Release);
                    return Ok(Some(t));
                }
                ts::WRITING => {
                    let now = Instant::now();
                    let since = *waiting_since.get_or_insert(now);
                    if now - since >= LIVENESS_AFTER {
                        // A writer that is no process slot, or a dead one, never
                        // finishes: the slot is cleared (and claimed again, maybe by
                        // us).
                        if clear_if(rec, s, |s| stale(r, s, writer_dead)) {
                            continue;
                        }
                        if now - since >= WRITING_WAIT {
                            return Err(Error::TenantBusy {
                                name: String::from_utf8_lossy(name).into_owned(),
                                slot: t,
                                waited_ms: (now - since).as_millis() as u64,
                            });
                        }
                    }
                    backoff.wait();
                }
                _ => {
                    // A state no version writes: garbage, no writer behind it.
                    clear_if(rec, s, |_| true);
                }
            }
        }
    }
    Ok(None)
}

/// Whether a slot in state `s` is stale: `WRITING` by no process slot or by a dead one
/// (`writer_dead`), or in a state no version writes. Nobody will ever finish it.
fn stale<R: Region>(r: &R, s: u32, writer_dead: &dyn Fn(usize) -> bool) -> bool {
    match ts::status(s) {
        ts::EMPTY | ts::READY => false,
        ts::WRITING => ts::writer(s)
            .filter(|&w| w < r.geometry().procs)
            .is_none_or(writer_dead),
        _ => true,
    }
}

/// Clears tenant slot `rec`, read in state `s`, if `s` is stale by `judge`: CAS back to
/// `EMPTY`. Relaxed: the writer is gone (or never was), so nothing it wrote needs
/// publishing; a claimant's CAS from EMPTY is what orders its own writes, and a
/// prober re-reads the state with Acquire.
fn clear_if(rec: &TenantRec, s: u32, judge: impl Fn(u32) -> bool) -> bool {
    judge(s)
        && rec
            .state
            .compare_exchange(s, ts::make(ts::EMPTY, 0, None), Relaxed, Relaxed)
            .is_ok()
}

/// Clears every stale slot (see `stale`); returns how many.
pub fn clear_stale<R: Region>(r: &R, writer_dead: &dyn Fn(usize) -> bool) -> usize {
    clear_all(r, |s| stale(r, s, writer_dead))
}

/// Clears the `WRITING` slots left by process slot `dead` (after its death).
pub fn clear_writer<R: Region>(r: &R, dead: usize) -> usize {
    clear_all(r, |s| ts::status(s) == ts::WRITING && ts::writer(s) == Some(dead))
}

fn clear_all<R: Region>(r: &R, judge: impl Fn(u32) -> bool) -> usize {
    (0..r.geometry().tenants)
        .filter(|&t| {
            let rec = r.tenant(t);
            // Acquire: as every reader of the state.
            clear_if(rec, rec.state.load(Acquire), &judge)
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::region::HeapRegion;

    #[test]
    fn claims_once_and_finds_again() {
        let r = HeapRegion::new(1, 4, 1, 1);
        let a = find_or_claim(&r, b"acme", &|| 3, 0, &|_| false).unwrap();
        let b = find_or_claim(&r, b"globex", &|| 1, 0, &|_| false).unwrap();
        assert_ne!(a, b);
        assert_eq!(find_or_claim(&r, b"acme", &|| 3, 0, &|_| false).unwrap(), a);
        assert_eq!(find(&r, b"acme"), Some(a));
        assert_eq!(find(&r, b"initech"), None);
        assert_eq!(r.tenant(a).weight.load(Relaxed), 3);
    }

    #[test]
    fn full_table_is_a_typed_error() {
        let r = HeapRegion::new(1, 2, 1, 1);
        find_or_claim(&r, b"a", &|| 1, 0, &|_| false).unwrap();
        find_or_claim(&r, b"b", &|| 1, 0, &|_| false).unwrap();
        let e = find_or_claim(&r, b"c", &|| 1, 0, &|_| false).unwrap_err();
        assert!(matches!(e, Error::TenantTableFull { max: 2, .. }), "{e}");
    }

    #[test]
    fn a_live_writer_that_never_finishes_is_a_retryable_error_within_the_bound() {
        let r = HeapRegion::new(1, 4, 2, 1);
        let stuck = ts::make(ts::WRITING, 3, Some(1));
        r.tenant(0).state.store(stuck, Relaxed);
        // "new" hashes somewhere; find a name whose probe starts at the stuck slot.
        let name = (0..)
            .map(|i| format!("n{i}"))
            .find(|n| fnv1a(n.as_bytes()) % 4 == 0)
            .unwrap();
        let t0 = Instant::now();
        let e = find_or_claim(&r, name.as_bytes(), &|| 1, 0, &|_| false).unwrap_err();
        let took = t0.elapsed();
        assert!(matches!(e, Error::TenantBusy { slot: 0, .. }), "{e}");
        assert!(took >= WRITING_WAIT && took < WRITING_WAIT * 50, "{took:?}");
        assert_eq!(r.tenant(0).state.load(Relaxed), stuck, "a live writer's slot stays");
        // A writer naming no process slot is garbage: cleared, and the name claimed.
        r.tenant(0)
            .state
            .store(ts::make(ts::WRITING, 3, Some(9)), Relaxed);
        let t = find_or_claim(&r, name.as_bytes(), &|| 1, 0, &|_| false).unwrap();
        assert_eq!(t, 0);
    }

    #[test]
    fn a_dead_writer_is_cleared() {
        let r = HeapRegion::new(1, 1, 2, 1);
        r.tenant(0)
            .state
            .store(ts::make(ts::WRITING, 3, Some(1)), Relaxed);
        let t = find_or_claim(&r, b"new", &|| 1, 0, &|slot| slot == 1).unwrap();
        assert_eq!(t, 0);
        assert_eq!(
            read_name(r.tenant(0), r.tenant(0).state.load(Relaxed)),
            b"new"
        );
    }
}
