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
//! Modules, one responsibility each: `layout` (the bytes), `segment` (the mapping),
//! `ops` (the crash-safe op protocol), `admission` (the fair-share rule), `tenants`,
//! `liveness` (pid, start time, owner word), `anchor` (the robust-futex death wake),
//! `waiting` (futexes), `recovery`, `capacity` (`per_worker` sizing), `stats`,
//! `refusal`, `table` (the API), `sync` (the atomics shim that loom swaps out).

pub mod admission;
pub mod capacity;
pub mod config;
pub mod error;
pub mod layout;
pub mod liveness;
pub mod ops;
pub mod recovery;
pub mod refusal;
pub mod region;
pub mod stats;
pub(crate) mod sync;
pub mod tenants;

#[cfg(not(loom))]
pub mod anchor;
#[cfg(not(loom))]
pub mod clock;
#[cfg(feature = "crash-points")]
pub mod crash;
#[cfg(not(loom))]
pub mod segment;
#[cfg(not(loom))]
pub mod selfid;
#[cfg(not(loom))]
mod table;
#[cfg(not(loom))]
pub mod waiting;

pub use config::{Config, PerWorker, PoolConfig};
pub use error::{Error, Result};
pub use refusal::{Reason, Refusal};
#[cfg(not(loom))]
pub use table::{Lease, LeaseId, Request, Table};

#[cfg(all(not(loom), feature = "count-locked"))]
pub use sync::locked_instructions;

#[cfg(loom)]
mod loom_crash;
#[cfg(all(test, loom))]
mod loom_tests;
