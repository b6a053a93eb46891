//! Names to handles, once: a pool's name to its [`PoolId`], a tenant's to its
//! [`TenantId`] (claiming a directory slot on first use), handles passed as integers
//! checked, and handles back to names.

use super::{Engine, PoolId, TenantId};
use crate::config::check_name_bytes;
use crate::error::{Error, Result};
use crate::layout::tenant_state;
use crate::liveness;
use crate::region::Region;
use crate::sync::Ordering::*;
use crate::tenants;

impl Engine {
    /// Resolves a pool's name.
    pub fn pool(&self, name: &str) -> Result<PoolId> {
        self.config()
            .pools
            .iter()
            .position(|p| p.name == name)
            .map(|p| PoolId(p as u32))
            .ok_or_else(|| self.unknown_pool(name))
    }

    /// The error for fair-share pool `name`, which this table does not have: it lists
    /// the pools it has, and says so when `name` is one of its guaranteed pools.
    pub(crate) fn unknown_pool(&self, name: &str) -> Error {
        self.unknown_of(name, false)
    }

    /// The error for guaranteed pool `name`, which this table does not have (as
    /// [`Engine::unknown_pool`], the other way round).
    pub(crate) fn unknown_guaranteed_pool(&self, name: &str) -> Error {
        self.unknown_of(name, true)
    }

    fn unknown_of(&self, name: &str, guaranteed: bool) -> Error {
        let cfg = self.config();
        let fair: Vec<&str> = cfg.pools.iter().map(|p| p.name.as_str()).collect();
        let sure: Vec<&str> = cfg.guaranteed.iter().map(|g| g.name.as_str()).collect();
        // The asked-for policy's pools first, then the other's (if it has any).
        let ((kind, mine), (other_kind, theirs)) = if guaranteed {
            (("guaranteed", &sure), ("fair-share", &fair))
        } else {
            (("fair-share", &fair), ("guaranteed", &sure))
        };
        let asked = match mine.as_slice() {
            [] => format!("no {kind} pools"),
            names => format!("{kind} pools {names:?}"),
        };
        let other = match theirs.as_slice() {
            [] => String::new(),
            names => format!(" (and {other_kind} pools {names:?})"),
        };
        let hint = match (guaranteed, theirs.contains(&name)) {
            (false, true) => format!(
                "; {name:?} is a guaranteed pool: resolve it with guaranteed({name:?}) \
                 (fairshm_guaranteed_pool in C)"
            ),
            (true, true) => {
                format!("; {name:?} is a fair-share pool: acquire it from the table itself")
            }
            _ => String::new(),
        };
        Error::UnknownPool {
            pool: name.to_owned(),
            known: format!("{asked}{other}{hint}"),
        }
    }

    /// The name of a pool handle.
    pub fn pool_name(&self, pool: PoolId) -> &str {
        self.config()
            .pools
            .get(pool.index())
            .map_or("?", |p| p.name.as_str())
    }

    /// Resolves a tenant's name, claiming a directory slot on its first use (which
    /// registers this process, the slot's writer: as a tool, which `per_worker` pools
    /// do not count, until it acquires).
    pub fn tenant(&self, name: &str) -> Result<TenantId> {
        check_tenant(name)?;
        if let Some(t) = self.find_tenant(name) {
            return Ok(t);
        }
        self.writable("claiming a tenant name")?;
        let slot = self.claimer_slot()?;
        // The configured weight is looked up only when the name claims a slot.
        let weight = || self.config().weight_of(name.as_bytes());
        let t = tenants::find_or_claim(&self.seg, name.as_bytes(), &weight, slot, &|s| {
            liveness::slot_dead(&self.seg, s, &liveness::is_dead)
        })?;
        Ok(self.tenant_at(t))
    }

    /// A tenant's handle if the name has a slot already; claims nothing.
    pub fn find_tenant(&self, name: &str) -> Option<TenantId> {
        self.lookup_tenant(name).ok().flatten()
    }

    /// [`Engine::find_tenant`], with `InvalidTenant` for a name no tenant can have
    /// (where `find_tenant` answers `None`): what a reader of a tenant's state by name
    /// (its rates, on an observer too) reports.
    pub fn lookup_tenant(&self, name: &str) -> Result<Option<TenantId>> {
        check_tenant(name)?;
        Ok(tenants::find(&self.seg, name.as_bytes()).map(|t| self.tenant_at(t)))
    }

    /// A tenant's handle from its directory index (`TenantId::index`), for bindings
    /// that pass handles as integers: the slot must be a claimed name; its weight is
    /// read from the directory, never taken from the caller.
    pub fn tenant_by_index(&self, index: u32) -> Result<TenantId> {
        let t = index as usize;
        if t >= self.seg.geometry().tenants {
            return Err(Error::InvalidRequest(format!(
                "tenant handle {index} is beyond this table's {} tenant slots",
                self.seg.geometry().tenants
            )));
        }
        // Acquire: pairs with the claimer's READY, which publishes the weight.
        let s = self.seg.tenant(t).state.load(Acquire);
        if tenant_state::status(s) != tenant_state::READY {
            return Err(Error::InvalidRequest(format!(
                "tenant handle {index} names no claimed tenant"
            )));
        }
        Ok(self.tenant_at(t))
    }

    fn tenant_at(&self, t: usize) -> TenantId {
        // Relaxed: written before the slot's READY, which the lookup acquired.
        let weight = self.seg.tenant(t).weight.load(Relaxed).max(1);
        TenantId {
            index: t as u32,
            weight,
        }
    }

    /// The name of a tenant handle, read from the directory.
    pub fn tenant_name(&self, tenant: TenantId) -> Option<String> {
        let t = tenant.index();
        if t >= self.seg.geometry().tenants {
            return None;
        }
        let rec = self.seg.tenant(t);
        // Acquire: pairs with the claimer's READY, which publishes the name.
        let s = rec.state.load(Acquire);
        (tenant_state::status(s) == tenant_state::READY)
            .then(|| String::from_utf8_lossy(&tenants::read_name(rec, s)).into_owned())
    }
}

/// `InvalidTenant` for a name no tenant can have (empty, over 48 bytes, a NUL byte).
fn check_tenant(name: &str) -> Result<()> {
    check_name_bytes(name.as_bytes()).map_err(|why| Error::InvalidTenant {
        name: name.to_owned(),
        why,
    })
}
