//! Typed errors. A refusal is not an error (see [`crate::Refusal`]); these are the
//! things that went wrong: bad input, a segment that cannot be trusted, a full table.

use std::io;

/// Everything that can go wrong in fairshm, each naming what was wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A loom model thread stopped at a crash point (models only).
    #[cfg(loom)]
    #[error("stopped at a crash point")]
    Crashed,

    #[error("invalid segment name {name:?}: {why}")]
    InvalidName { name: String, why: &'static str },

    #[error("invalid config: {0}")]
    InvalidConfig(String),

    #[error("segment {name:?} does not exist")]
    NotFound { name: String },

    #[error("segment {name:?} already exists")]
    AlreadyExists { name: String },

    #[error("segment {name:?} is truncated: it has {size} bytes but needs {need}")]
    Truncated { name: String, size: u64, need: u64 },

    #[error("segment {name:?} has magic {found:#018x}, not fairshm's {expected:#018x}")]
    BadMagic {
        name: String,
        found: u64,
        expected: u64,
    },

    #[error("segment {name:?} has layout version {found}; this library reads version {expected}")]
    VersionMismatch {
        name: String,
        found: u32,
        expected: u32,
    },

    #[error("segment {name:?} was never marked ready by its creator (pid {creator_pid})")]
    NotReady { name: String, creator_pid: u32 },

    #[error("segment {name:?} is owned by uid {owner}, not by this process's uid {me}")]
    WrongOwner { name: String, owner: u32, me: u32 },

    #[error("segment {name:?} was created with a different config: {what}")]
    ConfigMismatch { name: String, what: String },

    #[error("shared memory is corrupt: {0}")]
    Corrupt(String),

    #[error("unknown pool {pool:?}; this table has {known}")]
    UnknownPool { pool: String, known: String },

    #[error("invalid tenant name {name:?}: {why}")]
    InvalidTenant { name: String, why: &'static str },

    #[error("the tenant table is full ({max} tenants), so tenant {name:?} cannot be added")]
    TenantTableFull { name: String, max: usize },

    #[error("all {max} lease slots of this process are in use; release a lease first")]
    LeaseTableFull { max: usize },

    #[error("the process table is full ({max} slots, none free or reapable)")]
    ProcessTableFull { max: usize },

    #[error("invalid request: {0}")]
    InvalidRequest(String),

    #[error(
        "asked for {units} units of pool {pool:?}, whose capacity is {capacity}: \
         this can never be granted"
    )]
    UnitsExceedCapacity {
        pool: String,
        units: u32,
        capacity: u32,
    },

    #[error("lease {lease} was already released")]
    AlreadyReleased { lease: String },

    #[error("lease {lease} is not held by this process")]
    NotOwner { lease: String },

    #[error("{op} on segment {name:?} failed: {source}")]
    Io {
        name: String,
        op: &'static str,
        #[source]
        source: io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
