//! fairshm: node-wide pools of permits, shared fairly among tenants by the forked
//! worker processes of one server, in one lock-free shared-memory segment.
//!
//! ```no_run
//! use fairshm::{Config, Request, Table};
//! let table = Table::open_or_create("fairshm-demo", &Config::default())?;
//! match table.try_acquire(&Request::new("requests", "acme").hold_ms(20))? {
//!     Ok(lease) => { /* serve the request */ drop(lease) }
//!     Err(refusal) => eprintln!("429, retry after {:?} ms: {}", refusal.retry_after_ms, refusal),
//! }
//! # Ok::<(), fairshm::Error>(())
//! ```
//!
//! The public surface is the façade ([`Table`], [`Lease`], [`OwnedLease`], [`Request`],
//! [`Refusal`]), the handle-based [`Engine`] under it ([`PoolId`], [`TenantId`],
//! [`LeaseId`], [`Outcome`], [`Refused`]), the config and the errors.
//!
//! Modules, one responsibility each: `layout` (the bytes), `segment` (the mapping),
//! `region` (the records, mapped or on the heap), `ops` (the crash-safe op protocol,
//! which names no policy), `policy` (the seam, and `fair_share`: seed 000's rule),
//! `admission` (activity, frozen inputs, statistics), `retry` (the retry-after
//! estimator: a turn clock per tenant), `server_queue` (the server's own queue, from the
//! front proxy's stamp, which spreads over-share turns), `rates` (per-tenant token buckets), `residents`
//! (the `evict` pools: victim choice, calls, revocations), `tenants`,
//! `liveness` (pid, start time, owner word), `anchor` (the robust-futex death wake), `peers` (anchors watching each other),
//! `waiting` (futexes), `blocking` (the blocking acquire), `recovery`, `capacity`
//! (`per_worker` sizing), `stats`, `refusal`, `engine` (handles), `table` (the façade), `ffi` (the C ABI, public), `decisions` (the decision log), `tool` (what `shmtool` does, public),
//! `sync` (the atomics shim that loom swaps out). They are private; the feature
//! `internals` makes them public for the project's own tests, benches and fuzz targets.

/// A module that the feature `internals` makes public (tests, benches, fuzzing).
macro_rules! internal {
    ($($(#[$m:meta])* $name:ident),* $(,)?) => {$(
        $(#[$m])*
        #[cfg(feature = "internals")]
        #[doc(hidden)]
        pub mod $name;
        $(#[$m])*
        #[cfg(not(feature = "internals"))]
        #[allow(dead_code, unreachable_pub)]
        pub(crate) mod $name;
    )*};
}

internal!(
    admission,
    capacity,
    decisions,
    layout,
    liveness,
    ops,
    policy,
    rates,
    recovery,
    region,
    residents,
    repair,
    retry,
    server_queue,
    tenants,
    #[cfg(not(loom))]
    anchor,
    #[cfg(not(loom))]
    peers,
    clock,
    #[cfg(not(loom))]
    segment,
    #[cfg(not(loom))]
    selfid,
    #[cfg(not(loom))]
    waiting,
);

pub mod config;
mod config_file;
pub mod error;
pub mod guaranteed;
/// The C ABI handle's count of calls in flight (see `ffi`); loom-checked on its own.
#[cfg_attr(loom, allow(dead_code))]
mod handle_users;
pub mod refusal;
pub mod stats;
pub(crate) mod sync;

#[cfg(not(loom))]
mod blocking;
#[cfg(feature = "crash-points")]
pub mod crash;
#[cfg(not(loom))]
mod engine;
#[cfg(not(loom))]
pub mod ffi;
#[cfg(not(loom))]
mod table;
#[cfg(not(loom))]
pub mod tool;

#[cfg(not(loom))]
pub use blocking::Ended;
pub use config::{Config, PerWorker, PoolConfig};
#[cfg(not(loom))]
pub use engine::{Engine, LeaseId, Outcome, PoolId, Repaired, TenantId};
pub use error::{Error, Result};
pub use guaranteed::{FairnessUnit, GuaranteedConfig};
pub use rates::RateState;
pub use recovery::Reaped;
pub use refusal::{Reason, Refusal, Refused};
pub use repair::PoolRepair;
pub use residents::Status as ResidentStatus;
pub use stats::Snapshot;
#[cfg(not(loom))]
pub use table::{DEFAULT_SWEEP, Lease, LeaseGuard, OwnedLease, Request, Table};
#[cfg(not(loom))]
pub use waiting::Cancel;

#[cfg(all(not(loom), feature = "count-locked"))]
pub use sync::{locked_instructions, plain_stores};

#[cfg(loom)]
mod loom_crash;
#[cfg(all(test, loom))]
mod loom_guaranteed;
#[cfg(all(test, loom))]
mod loom_lending;
#[cfg(all(test, loom))]
mod loom_rates;
#[cfg(all(test, loom))]
mod loom_residents;
#[cfg(all(test, loom))]
mod loom_tests;

/// The README's Rust code blocks, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
