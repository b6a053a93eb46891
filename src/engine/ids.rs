//! The engine's handles and answers: a pool, a tenant (its weight included) and a lease
//! resolved once, what an acquire came to, and what a repair did.

use crate::recovery::Reaped;
use crate::refusal::Refused;

/// A pool of a table, resolved from its name by [`Engine::pool`](super::Engine::pool).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PoolId(pub(crate) u32);

impl PoolId {
    /// The pool's index in the table's config.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A tenant of a table, resolved (and claimed on first use) by [`Engine::tenant`](super::Engine::tenant). It
/// carries the tenant's weight, fixed when the name was claimed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TenantId {
    pub(crate) index: u32,
    pub(crate) weight: u32,
}

impl TenantId {
    /// The tenant's slot in the table's directory.
    pub fn index(self) -> usize {
        self.index as usize
    }
    pub fn weight(self) -> u32 {
        self.weight
    }
}

/// A lease's identity: its slot and the slot's claim generation. Round-trips through
/// one `u64` ([`LeaseId::to_u64`], [`LeaseId::from_u64`]) for bindings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LeaseId {
    pub index: u32,
    pub generation: u32,
}

impl LeaseId {
    pub fn to_u64(self) -> u64 {
        (self.index as u64) << 32 | self.generation as u64
    }
    pub fn from_u64(v: u64) -> LeaseId {
        LeaseId {
            index: (v >> 32) as u32,
            generation: v as u32,
        }
    }
}

impl std::fmt::Display for LeaseId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{}/{}", self.index, self.generation)
    }
}

/// What an acquire came to. `Copy`, no allocation either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Granted(LeaseId),
    Refused(Refused),
}

/// What [`Engine::repair`](super::Engine::repair) did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Repaired {
    /// Process slots in a state no version writes, taken and emptied.
    pub slots_taken: usize,
    /// Slots emptied (those taken, and dead processes reaped).
    pub reaped: Vec<Reaped>,
    /// Tenant slots left `WRITING` by no live process, cleared.
    pub tenant_slots_cleared: usize,
    /// Lease records in a state no version writes (or that could not be resolved),
    /// quarantined.
    pub leases_quarantined: usize,
    /// Leases found in the range of a free process slot, resolved as a reaper would.
    pub orphans_resolved: usize,
    /// Each pool's counters, rebuilt from its lease records.
    pub pools: Vec<crate::repair::PoolRepair>,
    /// Quarantined leases freed once every pool was rebuilt without them.
    pub leases_freed: usize,
    /// Guaranteed pools whose state could not be read, reset to the state at creation
    /// (their leases are lost; see `guaranteed::shared::reset`).
    pub guaranteed_reset: Vec<String>,
    /// Guaranteed leases whose owner slot no live process holds (a scribble, or a reap
    /// that could not read the pool), released.
    pub guaranteed_orphans_released: usize,
    /// Rate buckets refilled (debts forgiven): every tenant's, since a scribbled bucket
    /// cannot be told from a real debt. The rates themselves are kept: `set_rates`
    /// them again if they may have been overwritten.
    pub rate_buckets_refilled: usize,
}
