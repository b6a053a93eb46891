//! Configuration: pools, table sizes and tenant weights, and its canonical byte form.
//!
//! The creator writes the canonical bytes into the segment's config block and their
//! FNV-1a checksum into the header. An opener decodes the block from a private copy,
//! checks the checksum, validates every field, and compares it with the config it
//! expected, naming the first difference.

use crate::error::{Error, Result};
use crate::guaranteed::GuaranteedConfig;
use crate::layout::{Geometry, MAX_LEASES, MAX_NAME};

mod diff;
mod encoding;

/// Default `SHARE_FLOOR`: 5% of the pool (at least one permit).
pub const DEFAULT_FLOOR_PERCENT: u32 = 5;
/// Default activity window: a tenant is active if it held or asked in the last second.
pub const DEFAULT_WINDOW_MS: u32 = 1000;
/// Default wait of an `evict` pool's blocking acquire for an evictable resident.
pub const DEFAULT_EVICT_WAIT_MS: u32 = 1000;
/// Largest capacity: what the 24-bit count of an op word holds (16,777,215).
pub const MAX_CAPACITY: u32 = crate::layout::op_word::MAX_COUNT;
pub const MAX_POOLS: usize = 64;
pub const MAX_TENANTS: usize = 65_535;
pub const MAX_PROCESSES: usize = 65_535;
/// Largest weight, so that the sum over all tenants fits 32 bits.
pub const MAX_WEIGHT: u32 = 65_535;

/// One pool of permits.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PoolConfig {
    pub name: String,
    /// `POOL`: permits in the pool.
    pub capacity: u32,
    /// `SHARE_FLOOR` as a percentage of `capacity`, rounded down, at least 1 permit.
    pub floor_percent: u32,
    /// The activity window in ms.
    pub window_ms: u32,
    /// Capacity sized from the live registered workers instead of `capacity`.
    pub per_worker: Option<PerWorker>,
    /// The residents pool of seed 000: when full, an acquire revokes the idlest resident
    /// (of the asker if it is over its share, else of the tenant furthest over its
    /// share) instead of refusing; see `residents`.
    pub evict: bool,
    /// In an `evict` pool, how long a blocking acquire waits for a resident to become
    /// evictable before it fails `too_many_residents` (seed 000: one second).
    pub evict_wait_ms: u32,
    /// Whether the tenants' rates apply to this pool's acquires (default: yes). Seed
    /// 000's rates count requests, so in a node whose requests also take permits of
    /// other pools (a connection, a resident, a store call), only the pool that admits
    /// the request should be rated; the others set this false: their acquires take no
    /// request token and are not refused for work debt, so a request is counted once
    /// and one admitted is not refused halfway. The built-in config rates `requests`
    /// only.
    pub rates: bool,
}

/// Semian's worker-sized capacity: `tickets = min(workers, max(ceil(quota * workers),
/// min_tickets))` over the live registered workers (observers and tools do not count).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PerWorker {
    /// `quota` in parts per million (so configs compare exactly): 1..=1_000_000.
    pub quota_ppm: u32,
    pub min_tickets: u32,
    /// The quota's `f64` bits when millionths do not hold it exactly (a quota of more
    /// than six decimals, as 2/3), so that its tickets are Semian's too; 0 when
    /// `quota_ppm / 10^6` is the quota. [`PerWorker::new`] sets it; validation checks
    /// that it rounds to `quota_ppm`.
    #[serde(skip)]
    pub exact_bits: u64,
}

impl PerWorker {
    /// `quota` in (0, 1], kept in millionths (and, when they do not hold it exactly, as
    /// its `f64` too). Rounding never moves a quota across a bound of that range: a
    /// positive quota below half a millionth counts as one, one just above 1 stays
    /// above it, and both out-of-range sides keep what validation needs to say which
    /// side they are on (0: not above 0, or not a number; above 10^6: above 1).
    pub fn new(quota: f64, min_tickets: u32) -> Self {
        let ppm = if quota.is_nan() || quota <= 0.0 {
            0
        } else if quota <= 1.0 {
            ((quota * 1e6).round() as u32).clamp(1, 1_000_000)
        } else {
            (quota * 1e6).round().clamp(1_000_001.0, 2e9) as u32
        };
        let in_range = (1..=1_000_000).contains(&ppm);
        let exact_bits = if in_range && ppm as f64 / 1e6 != quota {
            quota.to_bits()
        } else {
            0
        };
        PerWorker {
            quota_ppm: ppm,
            min_tickets,
            exact_bits,
        }
    }

    /// The quota as configured: `quota_ppm / 10^6` in `f64`, which is the very double
    /// the configured quota was whenever it has at most six decimals (a correctly
    /// rounded quotient of two exact integers is the double nearest the decimal, as
    /// parsing it is), or the kept `f64` of one with more.
    pub fn quota(&self) -> f64 {
        if self.exact_bits != 0 {
            f64::from_bits(self.exact_bits)
        } else {
            self.quota_ppm as f64 / 1e6
        }
    }

    /// Tickets for `workers` live workers, computed as Semian computes them: `ceil` of
    /// the product in `f64`, so the same config gives the same tickets (0.14 of 50
    /// workers is 8, since `0.14 * 50` is 7.000000000000001 in `f64`; 2/3 of 3 is 2).
    pub fn tickets(&self, workers: u32) -> u32 {
        // `as u64` saturates (and takes NaN to 0); a quota in (0, 1] gives at most
        // `workers` anyway.
        let by_quota = (self.quota() * workers as f64).ceil() as u64;
        (by_quota.max(self.min_tickets as u64)).min(workers as u64) as u32
    }

    /// The most tickets the pool can ever have: those of a worker in each of `procs`
    /// process slots (every grant fitted the tickets of its moment).
    pub fn most_tickets(&self, procs: usize) -> u32 {
        self.tickets(procs.min(u32::MAX as usize) as u32)
    }
}

impl PoolConfig {
    /// A fair-share pool with the default floor (5%) and window (1 s).
    pub fn new(name: &str, capacity: u32) -> Self {
        PoolConfig {
            name: name.to_owned(),
            capacity,
            floor_percent: DEFAULT_FLOOR_PERCENT,
            window_ms: DEFAULT_WINDOW_MS,
            per_worker: None,
            evict: false,
            evict_wait_ms: DEFAULT_EVICT_WAIT_MS,
            rates: true,
        }
    }
    /// A pool sized from the workers: see [`PerWorker`]. Validation requires
    /// `quota` in (0, 1].
    pub fn per_worker(name: &str, quota: f64, min_tickets: u32) -> Self {
        PoolConfig {
            capacity: 0,
            per_worker: Some(PerWorker::new(quota, min_tickets)),
            ..PoolConfig::new(name, 0)
        }
    }
    pub fn floor_percent(mut self, pct: u32) -> Self {
        self.floor_percent = pct;
        self
    }
    pub fn window_ms(mut self, ms: u32) -> Self {
        self.window_ms = ms;
        self
    }
    /// This pool as its canonical bytes keep it: a pool that does not evict keeps no
    /// eviction wait (it reads back as the default).
    pub fn canonical(&self) -> PoolConfig {
        let mut p = self.clone();
        if !p.evict {
            p.evict_wait_ms = DEFAULT_EVICT_WAIT_MS;
        }
        p
    }
    /// Makes this the residents pool: evict instead of refusing (see [`PoolConfig::evict`]).
    pub fn evicting(mut self) -> Self {
        self.evict = true;
        self
    }
    /// Sets how long a blocking acquire waits for an evictable resident.
    pub fn evict_wait_ms(mut self, ms: u32) -> Self {
        self.evict_wait_ms = ms;
        self
    }
    /// Exempts this pool from the tenants' rates (see [`PoolConfig::rates`]).
    pub fn without_rates(mut self) -> Self {
        self.rates = false;
        self
    }
}

/// `SHARE_FLOOR` for a pool of `capacity` permits: `pct`% rounded down, at least 1.
pub fn floor_of(capacity: u32, pct: u32) -> u32 {
    ((capacity as u64 * pct as u64 / 100) as u32).max(1)
}

/// The whole configuration of a segment.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Config {
    pub pools: Vec<PoolConfig>,
    /// Tenant directory size: distinct tenant names the segment can ever hold.
    pub max_tenants: u32,
    /// Process slots: processes that may hold leases at once.
    pub max_processes: u32,
    /// Leases one process may hold (or have in flight) at once.
    pub leases_per_process: u32,
    /// Optional tenant weights; unnamed tenants weigh 1.
    pub weights: Vec<(String, u32)>,
    /// Pools under seed 001's guaranteed policy (their names share the namespace of
    /// `pools`; their tenants and weights are their own).
    pub guaranteed: Vec<GuaranteedConfig>,
}

impl Default for Config {
    /// The built-in node config: pools `requests`, `connections`, `residents`,
    /// `flights`, 1024 tenants, 256 processes of 64 leases each. A request takes its
    /// permit of `requests` first, so the tenants' rates apply there only.
    fn default() -> Self {
        Config {
            pools: vec![
                PoolConfig::new("requests", 1000),
                PoolConfig::new("connections", 200).without_rates(),
                PoolConfig::new("residents", 500).evicting().without_rates(),
                PoolConfig::new("flights", 100).without_rates(),
            ],
            max_tenants: 1024,
            max_processes: 256,
            leases_per_process: 64,
            weights: Vec::new(),
            guaranteed: Vec::new(),
        }
    }
}

impl Config {
    /// A config with the given pools and the default table sizes.
    pub fn with_pools(pools: Vec<PoolConfig>) -> Self {
        Config {
            pools,
            ..Config::default()
        }
    }

    pub fn weight(mut self, tenant: &str, weight: u32) -> Self {
        self.weights.push((tenant.to_owned(), weight));
        self
    }

    /// The pools the tenants' rates do not apply to (`rates = false`), with their
    /// indices, in pool order.
    pub fn unrated(&self) -> impl Iterator<Item = (usize, &PoolConfig)> + '_ {
        self.pools.iter().enumerate().filter(|(_, p)| !p.rates)
    }

    /// Adds a guaranteed pool (seed 001).
    pub fn guaranteed(mut self, pool: GuaranteedConfig) -> Self {
        self.guaranteed.push(pool);
        self
    }

    /// Checks every rule; the error names the first field that breaks one.
    pub fn validate(&self) -> Result<()> {
        let bad = |s: String| Err(Error::InvalidConfig(s));
        let all = self.pools.len() + self.guaranteed.len();
        if all == 0 || all > MAX_POOLS {
            return bad(format!("{all} pools; need 1 to {MAX_POOLS}"));
        }
        for (i, g) in self.guaranteed.iter().enumerate() {
            g.validate()?;
            if self.pools.iter().any(|p| p.name == g.name)
                || self.guaranteed[..i].iter().any(|h| h.name == g.name)
            {
                return bad(format!("pool {:?} is named twice", g.name));
            }
        }
        for (i, p) in self.pools.iter().enumerate() {
            check_name(&p.name).or_else(|why| bad(format!("pool name {:?}: {why}", p.name)))?;
            if self.pools[..i].iter().any(|q| q.name == p.name) {
                return bad(format!("pool {:?} is named twice", p.name));
            }
            if let Some(pw) = p.per_worker {
                if pw.quota_ppm == 0 {
                    return bad(format!(
                        "pool {:?}: quota is not in (0, 1]: 0 or less, or not a number",
                        p.name
                    ));
                }
                if pw.quota_ppm > 1_000_000 {
                    return bad(format!(
                        "pool {:?}: quota is not in (0, 1]: above 1",
                        p.name
                    ));
                }
                if pw.exact_bits != 0 && PerWorker::new(pw.quota(), pw.min_tickets) != pw {
                    return bad(format!(
                        "pool {:?}: quota {:e} is not the {} millionths it is kept with",
                        p.name,
                        pw.quota(),
                        pw.quota_ppm
                    ));
                }
                if p.capacity != 0 {
                    return bad(format!(
                        "pool {:?}: a per_worker pool takes no fixed capacity (got {})",
                        p.name, p.capacity
                    ));
                }
            } else if p.capacity == 0 || p.capacity > MAX_CAPACITY {
                return bad(format!(
                    "pool {:?}: capacity {} is not in 1..={MAX_CAPACITY}",
                    p.name, p.capacity
                ));
            }
            if p.floor_percent > 100 {
                return bad(format!(
                    "pool {:?}: floor_percent {} is over 100",
                    p.name, p.floor_percent
                ));
            }
            if p.window_ms == 0 {
                return bad(format!("pool {:?}: window_ms must be at least 1", p.name));
            }
            if p.evict && p.evict_wait_ms == 0 {
                return bad(format!(
                    "pool {:?}: evict_wait_ms must be at least 1 (seed 000 waits 1000)",
                    p.name
                ));
            }
        }
        let t = self.max_tenants as usize;
        if t == 0 || t > MAX_TENANTS {
            return bad(format!("max_tenants {t} is not in 1..={MAX_TENANTS}"));
        }
        let procs = self.max_processes as usize;
        if procs == 0 || procs > MAX_PROCESSES {
            return bad(format!(
                "max_processes {procs} is not in 1..={MAX_PROCESSES}"
            ));
        }
        let lpp = self.leases_per_process as usize;
        if lpp == 0 || procs * lpp > MAX_LEASES {
            return bad(format!(
                "max_processes * leases_per_process = {procs} * {lpp} must be in 1..={MAX_LEASES}"
            ));
        }
        if self.weights.len() > t {
            return bad(format!(
                "{} weights but only {t} tenant slots",
                self.weights.len()
            ));
        }
        for (i, (name, w)) in self.weights.iter().enumerate() {
            check_name(name).or_else(|why| bad(format!("weighted tenant {name:?}: {why}")))?;
            if *w == 0 || *w > MAX_WEIGHT {
                return bad(format!(
                    "tenant {name:?}: weight {w} is not in 1..={MAX_WEIGHT}"
                ));
            }
            if self.weights[..i].iter().any(|(n, _)| n == name) {
                return bad(format!("tenant {name:?} is weighted twice"));
            }
        }
        if self.geometry().total_size > u32::MAX as usize {
            return bad("the segment would exceed 4 GiB; shrink the tables".into());
        }
        Ok(())
    }

    /// Configured weight of a tenant (1 if none).
    pub fn weight_of(&self, tenant: &[u8]) -> u32 {
        self.weights
            .iter()
            .find(|(n, _)| n.as_bytes() == tenant)
            .map_or(1, |(_, w)| *w)
    }

    pub fn geometry(&self) -> Geometry {
        let geo = Geometry::new(
            self.pools.len(),
            self.max_tenants as usize,
            self.max_processes as usize,
            self.leases_per_process as usize,
            self.encoded_len(),
        );
        let (_, words) = self.guaranteed_places(&geo);
        geo.with_guaranteed(words)
            .with_residents(self.pools.iter().any(|p| p.evict))
    }

    /// Where each guaranteed pool lives, and the words of the guaranteed region.
    pub fn guaranteed_places(&self, geo: &Geometry) -> (Vec<crate::guaranteed::GPlace>, usize) {
        crate::guaranteed::places(
            &self.guaranteed,
            self.max_processes as usize,
            geo.guaranteed_off,
        )
    }
}

/// A pool or tenant name: 1 to 48 bytes, no NUL.
pub fn check_name(name: &str) -> std::result::Result<(), &'static str> {
    check_name_bytes(name.as_bytes())
}

pub fn check_name_bytes(name: &[u8]) -> std::result::Result<(), &'static str> {
    if name.is_empty() {
        Err("empty")
    } else if name.len() > MAX_NAME {
        Err("longer than 48 bytes")
    } else if name.contains(&0) {
        Err("contains a NUL byte")
    } else {
        Ok(())
    }
}

/// FNV-1a, 64 bits: the config checksum and the tenant name hash.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests;
