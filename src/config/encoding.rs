//! The config block's bytes: how a [`Config`] is written into the segment at creation
//! and read back (copied out, checksummed, then decoded, never trusted in place).

use super::{Config, DEFAULT_EVICT_WAIT_MS, MAX_POOLS, MAX_TENANTS, PerWorker, PoolConfig};
use crate::error::{Error, Result};
use crate::guaranteed::{FairnessUnit, GuaranteedConfig};
use crate::layout::MAX_NAME;

pub(super) const HEAD_LEN: usize = 32;
pub(super) const POOL_LEN: usize = MAX_NAME + 24;
pub(super) const WEIGHT_LEN: usize = MAX_NAME + 8;
/// A guaranteed pool's fixed part: name, eight u32s, `started_at_ms`.
pub(super) const G_LEN: usize = MAX_NAME + 40;
/// An exact quota (see [`PerWorker::exact_bits`]): pool index u32, 4 zero bytes, the
/// quota's `f64` bits. Only pools whose quota millionths do not hold are listed, after
/// everything else, so a config without one encodes as it always has.
pub(super) const EXACT_LEN: usize = 16;
/// A pool the tenants' rates do not apply to (see [`PoolConfig::rates`]): pool index
/// u32, 4 zero bytes. Listed after the exact quotas, in pool order, counted by the
/// head's last word (zero before the list existed), so a config whose pools are all
/// rated encodes as it always has.
pub(super) const UNRATED_LEN: usize = 8;

impl Config {
    pub(super) fn encoded_len(&self) -> usize {
        HEAD_LEN
            + self.pools.len() * POOL_LEN
            + self.weights.len() * WEIGHT_LEN
            + self
                .guaranteed
                .iter()
                .map(|g| G_LEN + g.tenants.len() * WEIGHT_LEN)
                .sum::<usize>()
            + self.exact_quotas().count() * EXACT_LEN
            + self.unrated().count() * UNRATED_LEN
    }

    /// The pools whose quota is kept as an `f64` too: (index, bits), in pool order.
    fn exact_quotas(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.pools.iter().enumerate().filter_map(|(i, p)| {
            p.per_worker
                .filter(|w| w.exact_bits != 0)
                .map(|w| (i as u32, w.exact_bits))
        })
    }

    /// The canonical bytes written into the config block.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(self.encoded_len());
        for v in [
            self.pools.len() as u32,
            self.max_tenants,
            self.max_processes,
            self.leases_per_process,
            self.weights.len() as u32,
            self.guaranteed.len() as u32,
            self.exact_quotas().count() as u32,
            self.unrated().count() as u32,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        for p in &self.pools {
            b.extend_from_slice(&name_bytes(&p.name));
            let (q, m) = p
                .per_worker
                .map_or((0, 0), |w| (w.quota_ppm, w.min_tickets));
            // The sixth word: an evict pool's wait (>= 1), 0 for a pool that refuses.
            let evict = if p.evict { p.evict_wait_ms.max(1) } else { 0 };
            for v in [p.capacity, p.floor_percent, p.window_ms, q, m, evict] {
                b.extend_from_slice(&v.to_le_bytes());
            }
        }
        for (name, w) in &self.weights {
            b.extend_from_slice(&name_bytes(name));
            b.extend_from_slice(&w.to_le_bytes());
            b.extend_from_slice(&0u32.to_le_bytes());
        }
        for g in &self.guaranteed {
            b.extend_from_slice(&name_bytes(&g.name));
            for v in [
                g.ceiling,
                g.fairness_unit.map_or(0, FairnessUnit::code),
                g.reclaim_horizon_ms,
                g.idle_after_ms,
                g.max_leases,
                g.demand_signal as u32,
                g.tenants.len() as u32,
                0,
            ] {
                b.extend_from_slice(&v.to_le_bytes());
            }
            b.extend_from_slice(&g.started_at_ms.to_le_bytes());
            for (name, w) in &g.tenants {
                b.extend_from_slice(&name_bytes(name));
                b.extend_from_slice(&w.to_le_bytes());
                b.extend_from_slice(&0u32.to_le_bytes());
            }
        }
        for (i, bits) in self.exact_quotas() {
            b.extend_from_slice(&i.to_le_bytes());
            b.extend_from_slice(&0u32.to_le_bytes());
            b.extend_from_slice(&bits.to_le_bytes());
        }
        for (i, _) in self.unrated() {
            b.extend_from_slice(&(i as u32).to_le_bytes());
            b.extend_from_slice(&0u32.to_le_bytes());
        }
        debug_assert_eq!(b.len(), self.encoded_len());
        b
    }

    /// Decodes and validates a config block. Never panics on any input.
    pub fn decode(b: &[u8]) -> Result<Config> {
        let corrupt = |what: String| Error::Corrupt(format!("config block: {what}"));
        let u32_at = |off: usize| -> Result<u32> {
            b.get(off..off + 4)
                .map(|s| u32::from_le_bytes(s.try_into().expect("4 bytes")))
                .ok_or_else(|| corrupt(format!("ends at {} bytes, before offset {off}", b.len())))
        };
        let n_pools = u32_at(0)? as usize;
        let n_weights = u32_at(16)? as usize;
        let n_guaranteed = u32_at(20)? as usize;
        let n_exact = u32_at(24)? as usize;
        let n_unrated = u32_at(28)? as usize;
        if n_pools > MAX_POOLS
            || n_weights > MAX_TENANTS
            || n_guaranteed > MAX_POOLS
            || n_exact > n_pools
            || n_unrated > n_pools
        {
            return Err(corrupt(format!(
                "{n_pools} pools, {n_weights} weights, {n_guaranteed} guaranteed pools, \
                 {n_exact} exact quotas, {n_unrated} pools without rates"
            )));
        }
        let fixed = HEAD_LEN + n_pools * POOL_LEN + n_weights * WEIGHT_LEN;
        if b.len() < fixed {
            return Err(corrupt(format!(
                "{} bytes, expected at least {fixed}",
                b.len()
            )));
        }
        let mut pools = Vec::with_capacity(n_pools);
        for i in 0..n_pools {
            let off = HEAD_LEN + i * POOL_LEN;
            pools.push(PoolConfig {
                name: decode_name(&b[off..off + MAX_NAME]).map_err(|e| corrupt(e.into()))?,
                capacity: u32_at(off + MAX_NAME)?,
                floor_percent: u32_at(off + MAX_NAME + 4)?,
                window_ms: u32_at(off + MAX_NAME + 8)?,
                per_worker: match u32_at(off + MAX_NAME + 12)? {
                    0 => None,
                    quota_ppm => Some(PerWorker {
                        quota_ppm,
                        min_tickets: u32_at(off + MAX_NAME + 16)?,
                        exact_bits: 0, // from the list at the end, if there
                    }),
                },
                evict: u32_at(off + MAX_NAME + 20)? != 0,
                evict_wait_ms: match u32_at(off + MAX_NAME + 20)? {
                    0 => DEFAULT_EVICT_WAIT_MS,
                    w => w,
                },
                rates: true, // unless the list at the end has the pool
            });
        }
        let mut weights = Vec::with_capacity(n_weights);
        for i in 0..n_weights {
            let off = HEAD_LEN + n_pools * POOL_LEN + i * WEIGHT_LEN;
            let name = decode_name(&b[off..off + MAX_NAME]).map_err(|e| corrupt(e.into()))?;
            weights.push((name, u32_at(off + MAX_NAME)?));
        }
        let mut guaranteed = Vec::with_capacity(n_guaranteed);
        let mut off = fixed;
        for _ in 0..n_guaranteed {
            let name_at = |o: usize| {
                b.get(o..o + MAX_NAME)
                    .ok_or_else(|| corrupt(format!("ends at {} bytes, before offset {o}", b.len())))
                    .and_then(|s| decode_name(s).map_err(|e| corrupt(e.into())))
            };
            let name = name_at(off)?;
            let f = |i: usize| u32_at(off + MAX_NAME + 4 * i);
            let unit = match f(1)? {
                0 => None,
                c => Some(
                    FairnessUnit::from_code(c)
                        .ok_or_else(|| corrupt(format!("fairness unit {c}")))?,
                ),
            };
            let n_tenants = f(6)? as usize;
            if n_tenants > crate::guaranteed::config::MAX_TENANTS {
                return Err(corrupt(format!(
                    "guaranteed pool {name:?} has {n_tenants} tenants"
                )));
            }
            let started = b
                .get(off + MAX_NAME + 32..off + MAX_NAME + 40)
                .map(|s| u64::from_le_bytes(s.try_into().expect("8 bytes")))
                .ok_or_else(|| {
                    corrupt(format!(
                        "ends at {} bytes, in guaranteed pool {name:?}",
                        b.len()
                    ))
                })?;
            let mut g = GuaranteedConfig {
                name,
                ceiling: f(0)?,
                fairness_unit: unit,
                tenants: Vec::with_capacity(n_tenants),
                reclaim_horizon_ms: f(2)?,
                idle_after_ms: f(3)?,
                started_at_ms: started,
                max_leases: f(4)?,
                demand_signal: f(5)? != 0,
            };
            off += G_LEN;
            for _ in 0..n_tenants {
                g.tenants.push((name_at(off)?, u32_at(off + MAX_NAME)?));
                off += WEIGHT_LEN;
            }
            guaranteed.push(g);
        }
        let mut last = None;
        for _ in 0..n_exact {
            let entry = b.get(off..off + EXACT_LEN).ok_or_else(|| {
                corrupt(format!("ends at {} bytes, in its exact quotas", b.len()))
            })?;
            let i = u32::from_le_bytes(entry[..4].try_into().expect("4 bytes")) as usize;
            let pad = u32::from_le_bytes(entry[4..8].try_into().expect("4 bytes"));
            let bits = u64::from_le_bytes(entry[8..].try_into().expect("8 bytes"));
            // In pool order, one a pool, of a per_worker pool, and not zero.
            let pw = pools
                .get_mut(i)
                .filter(|_| last.is_none_or(|l| l < i) && pad == 0 && bits != 0)
                .and_then(|p| p.per_worker.as_mut())
                .ok_or_else(|| {
                    corrupt(format!("exact quota entry for pool {i} (bits {bits:#x})"))
                })?;
            pw.exact_bits = bits; // validation checks it against the millionths
            last = Some(i);
            off += EXACT_LEN;
        }
        let mut last = None;
        for _ in 0..n_unrated {
            let entry = b.get(off..off + UNRATED_LEN).ok_or_else(|| {
                corrupt(format!(
                    "ends at {} bytes, in its pools without rates",
                    b.len()
                ))
            })?;
            let i = u32::from_le_bytes(entry[..4].try_into().expect("4 bytes")) as usize;
            let pad = u32::from_le_bytes(entry[4..].try_into().expect("4 bytes"));
            // In pool order, one a pool, of a pool that exists.
            let p = pools
                .get_mut(i)
                .filter(|_| last.is_none_or(|l| l < i) && pad == 0)
                .ok_or_else(|| corrupt(format!("entry for pool {i} without rates")))?;
            p.rates = false;
            last = Some(i);
            off += UNRATED_LEN;
        }
        if b.len() != off {
            return Err(corrupt(format!("{} bytes, expected {off}", b.len())));
        }
        let cfg = Config {
            pools,
            max_tenants: u32_at(4)?,
            max_processes: u32_at(8)?,
            leases_per_process: u32_at(12)?,
            weights,
            guaranteed,
        };
        cfg.validate().map_err(|e| corrupt(e.to_string()))?;
        Ok(cfg)
    }
}

fn name_bytes(name: &str) -> [u8; MAX_NAME] {
    let mut out = [0u8; MAX_NAME];
    out[..name.len()].copy_from_slice(name.as_bytes());
    out
}

fn decode_name(b: &[u8]) -> std::result::Result<String, &'static str> {
    let len = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    if b[len..].iter().any(|&c| c != 0) {
        return Err("name has bytes after its NUL terminator");
    }
    String::from_utf8(b[..len].to_vec()).map_err(|_| "name is not UTF-8")
}
