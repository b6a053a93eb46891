//! Typed errors. A refusal is not an error (see [`crate::Refusal`]); these are the
//! things that went wrong: bad input, a segment that cannot be trusted, a full table.

use std::io;

/// The end of `UnitsExceedCapacity`'s message for a capacity no change can raise.
pub(crate) const NEVER: &str = ": this can never be granted";

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

    #[error(
        "segment {name:?} has layout version {found}; this library reads version \
         {expected}: once no process of the old version uses it, remove it (shmtool clean) \
         and let the new master create it"
    )]
    VersionMismatch {
        name: String,
        found: u32,
        expected: u32,
    },

    #[error("segment {name:?} was never marked ready by its creator (pid {creator_pid})")]
    NotReady { name: String, creator_pid: u32 },

    #[error("segment {name:?} is owned by uid {owner}, not by this process's uid {me}")]
    WrongOwner { name: String, owner: u32, me: u32 },

    #[error(
        "segment {name:?} was created with a different config: {what}; a segment keeps \
         the config it was created with, so once no process of the old config uses it, \
         remove it (shmtool clean) and let the new master create it"
    )]
    ConfigMismatch { name: String, what: String },

    #[error("shared memory is corrupt: {0}")]
    Corrupt(String),

    #[error("unknown pool {pool:?}; this table has {known}")]
    UnknownPool { pool: String, known: String },

    #[error("invalid tenant name {name:?}: {why}")]
    InvalidTenant { name: String, why: &'static str },

    #[error(
        "the tenant table is full (max_tenants = {max}), so tenant {name:?} cannot be added: a \
         name keeps its slot for the segment's life, so raise max_tenants in the config \
         (at most {max_tenants}) and recreate the segment (shmtool clean, then a new \
         master)",
        max_tenants = crate::config::MAX_TENANTS
    )]
    TenantTableFull { name: String, max: usize },

    #[error(
        "every lease slot of this process is in use (leases_per_process = {max}); release \
         a lease first, or raise leases_per_process in the config"
    )]
    LeaseTableFull { max: usize },

    #[error(
        "the process table is full (max_processes = {max}, none free or reapable): raise \
         max_processes in the config, or end processes that opened the table and no \
         longer use it"
    )]
    ProcessTableFull { max: usize },

    #[error("invalid request: {0}")]
    InvalidRequest(String),

    #[error("asked for {units} unit{} of pool {pool:?}, whose capacity is {capacity}{when}", if *.units == 1 { "" } else { "s" })]
    UnitsExceedCapacity {
        pool: String,
        /// As asked (a guaranteed pool's cost may be any `u64`).
        units: u64,
        capacity: u64,
        /// Whether it ever can be: ": this can never be granted" for a fixed capacity;
        /// a `per_worker` pool's says whether more workers would make room.
        when: String,
    },

    #[error("lease {lease} was already released")]
    AlreadyReleased { lease: String },

    #[error("lease {lease} {why}")]
    NotOwner {
        lease: String,
        /// "is not held by this process", with which process holds it, or that another
        /// table handle of this process acquired it.
        why: String,
    },

    #[error("segment {name:?} was opened read-only (an observer); {what} needs a worker's open")]
    ReadOnly { name: String, what: &'static str },

    /// A tenant slot that a lookup must pass is still being written by a live process
    /// (stopped, or very slow) after the lookup's time bound. Retryable: the writer
    /// finishes, or dies and its slot is cleared.
    #[error(
        "tenant {name:?} cannot be looked up now: directory slot {slot} is still being \
         written by a live process after {waited_ms} ms; retry"
    )]
    TenantBusy {
        name: String,
        slot: usize,
        waited_ms: u64,
    },

    /// The segment's path is not a regular file that this process may trust (a
    /// symlink, a directory, a device, or a file with a mode fairshm never sets).
    #[error("segment {name:?} is not a usable segment file: {why}")]
    BadFile { name: String, why: String },

    /// A guaranteed pool has `max` leases (or loan slices) outstanding, all it can hold.
    #[error(
        "guaranteed pool {pool:?} has all {max} of its {what} outstanding; release a lease, \
         or create the segment with a larger max_leases"
    )]
    PoolLeasesFull {
        pool: String,
        what: &'static str,
        max: usize,
    },

    /// A resident lease was revoked to make room for another (an `evict` pool): put
    /// the object to sleep and release the lease.
    #[error(
        "resident lease {lease} was revoked to make room in its pool: put the object to \
         sleep and release the lease"
    )]
    Revoked { lease: String },

    /// A resident's call on a lease of a pool that does not evict, or an end without
    /// a begin.
    #[error("lease {lease}: {why}")]
    NotResident { lease: String, why: &'static str },

    /// This process is in another pid namespace than the segment's creator: pids and
    /// `/proc` mean something else here (a container sharing `/dev/shm` with another).
    #[error(
        "segment {name:?} was created in another pid namespace (pid:[{theirs}], this process \
         is in pid:[{ours}]): {what} here would judge its processes by pids that mean \
         nothing here. Run it in the creator's pid namespace, or open the segment as an \
         observer (read-only) to look at it"
    )]
    ForeignPidNamespace {
        name: String,
        what: &'static str,
        ours: u64,
        theirs: u64,
    },

    #[error("{op} on segment {name:?} failed: {source}")]
    Io {
        name: String,
        op: &'static str,
        #[source]
        source: io::Error,
    },
}

impl Error {
    /// A stable number per kind (the C ABI's error codes). Never renumbered; new kinds
    /// take new numbers.
    pub fn code(&self) -> u32 {
        match self {
            #[cfg(loom)]
            Error::Crashed => 999,
            Error::InvalidName { .. } => 1,
            Error::InvalidConfig(_) => 2,
            Error::NotFound { .. } => 3,
            Error::AlreadyExists { .. } => 4,
            Error::Truncated { .. } => 5,
            Error::BadMagic { .. } => 6,
            Error::VersionMismatch { .. } => 7,
            Error::NotReady { .. } => 8,
            Error::WrongOwner { .. } => 9,
            Error::ConfigMismatch { .. } => 10,
            Error::Corrupt(_) => 11,
            Error::UnknownPool { .. } => 12,
            Error::InvalidTenant { .. } => 13,
            Error::TenantTableFull { .. } => 14,
            Error::LeaseTableFull { .. } => 15,
            Error::ProcessTableFull { .. } => 16,
            Error::InvalidRequest(_) => 17,
            Error::UnitsExceedCapacity { .. } => 18,
            Error::AlreadyReleased { .. } => 19,
            Error::NotOwner { .. } => 20,
            Error::Io { .. } => 21,
            Error::ReadOnly { .. } => 22,
            Error::TenantBusy { .. } => 23,
            Error::BadFile { .. } => 24,
            Error::PoolLeasesFull { .. } => 25,
            Error::Revoked { .. } => 26,
            Error::NotResident { .. } => 27,
            Error::ForeignPidNamespace { .. } => 28,
        }
    }

    /// The kind's stable name, as `snake_case` (`"unknown_pool"`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            #[cfg(loom)]
            Error::Crashed => "crashed",
            Error::InvalidName { .. } => "invalid_name",
            Error::InvalidConfig(_) => "invalid_config",
            Error::NotFound { .. } => "not_found",
            Error::AlreadyExists { .. } => "already_exists",
            Error::Truncated { .. } => "truncated",
            Error::BadMagic { .. } => "bad_magic",
            Error::VersionMismatch { .. } => "version_mismatch",
            Error::NotReady { .. } => "not_ready",
            Error::WrongOwner { .. } => "wrong_owner",
            Error::ConfigMismatch { .. } => "config_mismatch",
            Error::Corrupt(_) => "corrupt",
            Error::UnknownPool { .. } => "unknown_pool",
            Error::InvalidTenant { .. } => "invalid_tenant",
            Error::TenantTableFull { .. } => "tenant_table_full",
            Error::LeaseTableFull { .. } => "lease_table_full",
            Error::ProcessTableFull { .. } => "process_table_full",
            Error::InvalidRequest(_) => "invalid_request",
            Error::UnitsExceedCapacity { .. } => "units_exceed_capacity",
            Error::AlreadyReleased { .. } => "already_released",
            Error::NotOwner { .. } => "not_owner",
            Error::Io { .. } => "io",
            Error::ReadOnly { .. } => "read_only",
            Error::TenantBusy { .. } => "tenant_busy",
            Error::BadFile { .. } => "bad_file",
            Error::PoolLeasesFull { .. } => "pool_leases_full",
            Error::Revoked { .. } => "revoked",
            Error::NotResident { .. } => "not_resident",
            Error::ForeignPidNamespace { .. } => "foreign_pid_namespace",
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_stable() {
        let all = [
            Error::InvalidName {
                name: String::new(),
                why: "",
            },
            Error::InvalidConfig(String::new()),
            Error::NotFound {
                name: String::new(),
            },
            Error::AlreadyExists {
                name: String::new(),
            },
            Error::Truncated {
                name: String::new(),
                size: 0,
                need: 0,
            },
            Error::BadMagic {
                name: String::new(),
                found: 0,
                expected: 0,
            },
            Error::VersionMismatch {
                name: String::new(),
                found: 0,
                expected: 0,
            },
            Error::NotReady {
                name: String::new(),
                creator_pid: 0,
            },
            Error::WrongOwner {
                name: String::new(),
                owner: 0,
                me: 0,
            },
            Error::ConfigMismatch {
                name: String::new(),
                what: String::new(),
            },
            Error::Corrupt(String::new()),
            Error::UnknownPool {
                pool: String::new(),
                known: String::new(),
            },
            Error::InvalidTenant {
                name: String::new(),
                why: "",
            },
            Error::TenantTableFull {
                name: String::new(),
                max: 0,
            },
            Error::LeaseTableFull { max: 0 },
            Error::ProcessTableFull { max: 0 },
            Error::InvalidRequest(String::new()),
            Error::UnitsExceedCapacity {
                pool: String::new(),
                units: 0,
                capacity: 0,
                when: String::new(),
            },
            Error::AlreadyReleased {
                lease: String::new(),
            },
            Error::NotOwner {
                lease: String::new(),
                why: String::new(),
            },
            Error::Io {
                name: String::new(),
                op: "",
                source: io::Error::other("x"),
            },
            Error::ReadOnly {
                name: String::new(),
                what: "",
            },
            Error::TenantBusy {
                name: String::new(),
                slot: 0,
                waited_ms: 0,
            },
            Error::BadFile {
                name: String::new(),
                why: String::new(),
            },
            Error::PoolLeasesFull {
                pool: String::new(),
                what: "",
                max: 0,
            },
            Error::Revoked {
                lease: String::new(),
            },
            Error::NotResident {
                lease: String::new(),
                why: "",
            },
        ];
        let codes: Vec<u32> = all.iter().map(Error::code).collect();
        assert_eq!(
            codes,
            (1..=27).collect::<Vec<_>>(),
            "codes are 1..=27 in order"
        );
        let mut kinds: Vec<&str> = all.iter().map(Error::kind).collect();
        kinds.sort_unstable();
        kinds.dedup();
        assert_eq!(kinds.len(), all.len(), "every kind has its own name");
        assert_eq!(Error::LeaseTableFull { max: 0 }.kind(), "lease_table_full");
        #[cfg(not(loom))]
        for e in &all {
            // The C ABI's names of the (negated) codes are the same.
            let name = crate::ffi::fairshm_code_name(-(e.code() as i32));
            // SAFETY: a static NUL-terminated string.
            let name = unsafe { std::ffi::CStr::from_ptr(name) };
            assert_eq!(name.to_str().unwrap(), e.kind());
        }
    }

    /// The table-full errors name the config key and its value rather than counting
    /// (no "1 slots"); one unit is "1 unit".
    #[test]
    fn messages_read_right_for_one() {
        let said = [
            Error::TenantTableFull {
                name: "c".into(),
                max: 1,
            }
            .to_string(),
            Error::LeaseTableFull { max: 1 }.to_string(),
            Error::ProcessTableFull { max: 1 }.to_string(),
        ];
        assert!(said[0].starts_with("the tenant table is full (max_tenants = 1)"));
        assert!(said[1].contains("(leases_per_process = 1)"));
        assert!(said[2].starts_with("the process table is full (max_processes = 1,"));
        let units = |units| {
            Error::UnitsExceedCapacity {
                pool: "p".into(),
                units,
                capacity: 0,
                when: String::new(),
            }
            .to_string()
        };
        assert_eq!(
            units(1),
            "asked for 1 unit of pool \"p\", whose capacity is 0"
        );
        assert_eq!(
            units(2),
            "asked for 2 units of pool \"p\", whose capacity is 0"
        );
    }
}
