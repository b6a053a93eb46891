//! A guaranteed pool's configuration (seed 001), validated at creation, and its
//! guarantees apportioned in integers.

use crate::error::{Error, Result};

/// Most tenants a guaranteed pool may name (its tenants are fixed at creation).
pub const MAX_TENANTS: usize = 64;
/// Most leases a guaranteed pool may have outstanding at once.
pub const MAX_LEASES: u32 = 1024;
/// Default `max_leases`.
pub const DEFAULT_MAX_LEASES: u32 = 64;
/// Default reclaim horizon and idleness threshold: the seed's example values.
pub const DEFAULT_RECLAIM_HORIZON_MS: u32 = 250;
pub const DEFAULT_IDLE_AFTER_MS: u32 = 1000;

/// What the ceiling counts. Required: there is no default, because max-min fairness
/// over cost and over request count admit different sets and both are defensible.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FairnessUnit {
    /// Each lease counts its `cost` (a token budget).
    Cost,
    /// Each lease counts 1, whatever its cost (a connection pool).
    Requests,
}

impl FairnessUnit {
    pub fn code(self) -> u32 {
        match self {
            FairnessUnit::Cost => 1,
            FairnessUnit::Requests => 2,
        }
    }
    pub fn from_code(c: u32) -> Option<FairnessUnit> {
        match c {
            1 => Some(FairnessUnit::Cost),
            2 => Some(FairnessUnit::Requests),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            FairnessUnit::Cost => "cost",
            FairnessUnit::Requests => "requests",
        }
    }
    /// The units a lease of `cost` counts against the ceiling.
    #[inline]
    pub fn units(self, cost: u64) -> u64 {
        match self {
            FairnessUnit::Cost => cost,
            FairnessUnit::Requests => 1,
        }
    }
}

/// One pool under seed 001's guaranteed policy: a ceiling shared by fixed, weighted
/// tenants, each guaranteed its apportioned part, lending what it leaves idle.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct GuaranteedConfig {
    pub name: String,
    /// Capacity held concurrently, in the fairness unit.
    pub ceiling: u32,
    /// Required: [`GuaranteedConfig::validate`] refuses `None`.
    pub fairness_unit: Option<FairnessUnit>,
    /// `(name, weight)`, fixed for the life of the segment.
    pub tenants: Vec<(String, u32)>,
    /// How long a returning tenant can be kept waiting: no loan may be held longer.
    pub reclaim_horizon_ms: u32,
    /// How long with no attempt and no release makes a tenant lendable; strictly
    /// greater than the horizon.
    pub idle_after_ms: u32,
    /// The time origin of the pool's explicit `now` (ms): earlier `now`s count as it.
    pub started_at_ms: u64,
    /// Leases outstanding at once, across all processes.
    pub max_leases: u32,
    /// Whether a refused acquire marks its tenant active (the reclaim freeze). Always
    /// true in use; false only to show the starvation it prevents (seed 001's test
    /// without the demand signal).
    pub demand_signal: bool,
}

impl GuaranteedConfig {
    /// A guaranteed pool with no tenants and no fairness unit yet (both required), the
    /// seed's example horizon (250 ms) and idleness (1000 ms).
    pub fn new(name: &str, ceiling: u32) -> Self {
        GuaranteedConfig {
            name: name.to_owned(),
            ceiling,
            fairness_unit: None,
            tenants: Vec::new(),
            reclaim_horizon_ms: DEFAULT_RECLAIM_HORIZON_MS,
            idle_after_ms: DEFAULT_IDLE_AFTER_MS,
            started_at_ms: 0,
            max_leases: DEFAULT_MAX_LEASES,
            demand_signal: true,
        }
    }
    pub fn unit(mut self, u: FairnessUnit) -> Self {
        self.fairness_unit = Some(u);
        self
    }
    pub fn tenant(mut self, name: &str, weight: u32) -> Self {
        self.tenants.push((name.to_owned(), weight));
        self
    }
    pub fn reclaim_horizon_ms(mut self, ms: u32) -> Self {
        self.reclaim_horizon_ms = ms;
        self
    }
    pub fn idle_after_ms(mut self, ms: u32) -> Self {
        self.idle_after_ms = ms;
        self
    }
    pub fn started_at_ms(mut self, ms: u64) -> Self {
        self.started_at_ms = ms;
        self
    }
    pub fn max_leases(mut self, n: u32) -> Self {
        self.max_leases = n;
        self
    }
    pub fn demand_signal(mut self, on: bool) -> Self {
        self.demand_signal = on;
        self
    }

    /// Checks every rule; the error says what to change.
    pub fn validate(&self) -> Result<()> {
        let bad = |s: String| {
            Err(Error::InvalidConfig(format!(
                "guaranteed pool {:?}: {s}",
                self.name
            )))
        };
        if let Err(why) = crate::config::check_name(&self.name) {
            return bad(format!("name: {why}"));
        }
        if self.fairness_unit.is_none() {
            return bad(
                "fairness_unit is required: set \"cost\" if the ceiling protects a \
                        budget of work (tokens), \"requests\" if it protects a count of \
                        concurrent calls (connections); there is no default"
                    .into(),
            );
        }
        if self.ceiling == 0 {
            return bad("ceiling must be at least 1".into());
        }
        if self.tenants.is_empty() {
            return bad(
                "no tenants: name each tenant with its weight; guarantees are \
                        fixed at creation"
                    .into(),
            );
        }
        if self.tenants.len() > MAX_TENANTS {
            return bad(format!(
                "{} tenants; at most {MAX_TENANTS}",
                self.tenants.len()
            ));
        }
        for (i, (name, w)) in self.tenants.iter().enumerate() {
            if let Err(why) = crate::config::check_name(name) {
                return bad(format!("tenant name {name:?}: {why}"));
            }
            if *w == 0 || *w > crate::config::MAX_WEIGHT {
                return bad(format!(
                    "tenant {name:?}: weight {w} is not in 1..={}; a tenant with no \
                     guarantee does not belong to a guaranteed pool",
                    crate::config::MAX_WEIGHT
                ));
            }
            if self.tenants[..i].iter().any(|(n, _)| n == name) {
                return bad(format!("tenant {name:?} is named twice"));
            }
        }
        if self.idle_after_ms <= self.reclaim_horizon_ms {
            return bad(format!(
                "idle_after_ms ({}) must be strictly greater than reclaim_horizon_ms ({}): \
                 the worst loan a returner faces was taken the instant it asked and ends \
                 a horizon later, and the freeze must still hold at that instant; raise \
                 idle_after_ms above {} or lower the horizon",
                self.idle_after_ms, self.reclaim_horizon_ms, self.reclaim_horizon_ms
            ));
        }
        if self.max_leases == 0 || self.max_leases > MAX_LEASES {
            return bad(format!(
                "max_leases {} is not in 1..={MAX_LEASES}",
                self.max_leases
            ));
        }
        Ok(())
    }

    /// The unit, once validated.
    pub fn unit_or_cost(&self) -> FairnessUnit {
        self.fairness_unit.unwrap_or(FairnessUnit::Cost)
    }

    /// Each tenant's guarantee, in tenant order: see [`apportion`].
    pub fn guarantees(&self) -> Vec<u64> {
        let w: Vec<u32> = self.tenants.iter().map(|t| t.1).collect();
        apportion(self.ceiling as u64, &w)
    }

    /// Slices (per-lender parts of loans) a state can hold: every lease may borrow
    /// from several lenders; largest-lender-first keeps most loans to one or two.
    pub fn max_slices(&self) -> usize {
        2 * self.max_leases as usize + self.tenants.len()
    }
}

/// Apportions `ceiling` among `weights` so that the parts sum to exactly `ceiling`:
/// the largest-remainder (Hamilton) method. Each tenant first gets
/// `floor(ceiling * w / W)`; the units left over (fewer than the number of tenants) go
/// one each to the largest remainders `ceiling * w mod W`, ties to the earlier tenant.
///
/// Why this method: every part is the floor or the ceiling of its exact quota
/// `ceiling * w / W`, which is what "the ceiling times the weight over the total
/// weight" promises; divisor methods (D'Hondt, Sainte-Laguë) can miss the quota by more
/// than one unit. Its known paradoxes arise when the ceiling or the tenants change, and
/// here both are fixed at creation. Integer arithmetic throughout, so no comparison
/// anywhere needs the seed's 1e-9 tolerance.
pub fn apportion(ceiling: u64, weights: &[u32]) -> Vec<u64> {
    let total: u128 = weights.iter().map(|&w| w as u128).sum();
    if total == 0 {
        return vec![0; weights.len()];
    }
    let mut parts: Vec<u64> = Vec::with_capacity(weights.len());
    let mut rems: Vec<(u128, usize)> = Vec::with_capacity(weights.len());
    for (i, &w) in weights.iter().enumerate() {
        let q = ceiling as u128 * w as u128;
        parts.push((q / total) as u64);
        rems.push((q % total, i));
    }
    let left = ceiling - parts.iter().sum::<u64>();
    // Largest remainder first; ties to the earlier tenant.
    rems.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for &(_, i) in rems.iter().take(left as usize) {
        parts[i] += 1;
    }
    debug_assert_eq!(parts.iter().sum::<u64>(), ceiling);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> GuaranteedConfig {
        GuaranteedConfig::new("tokens", 100)
            .unit(FairnessUnit::Cost)
            .tenant("a", 1)
            .tenant("b", 1)
            .reclaim_horizon_ms(100)
            .idle_after_ms(150)
    }

    #[test]
    fn apportion_sums_to_the_ceiling_and_stays_within_one_of_the_quota() {
        assert_eq!(apportion(100, &[3, 1]), vec![75, 25]);
        assert_eq!(apportion(100, &[1, 1, 1]), vec![34, 33, 33]);
        assert_eq!(
            apportion(10, &[1, 1, 1, 1, 1, 1, 1]),
            vec![2, 2, 2, 1, 1, 1, 1]
        );
        assert_eq!(apportion(7, &[65_535, 1]), vec![7, 0]);
        let mut seed = 12345u64;
        for _ in 0..2000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let n = (seed % 64 + 1) as usize;
            let ceiling = seed >> 40;
            let w: Vec<u32> = (0..n)
                .map(|i| ((seed >> (i % 40)) % 65_535 + 1) as u32)
                .collect();
            let parts = apportion(ceiling, &w);
            assert_eq!(parts.iter().sum::<u64>(), ceiling);
            let total: u128 = w.iter().map(|&x| x as u128).sum();
            for (p, &wi) in parts.iter().zip(&w) {
                let q = ceiling as u128 * wi as u128;
                let lo = (q / total) as u64;
                assert!(
                    *p == lo || *p == lo + 1,
                    "part {p} not within one of {q}/{total}"
                );
            }
        }
    }

    #[test]
    fn a_good_config_validates() {
        good().validate().unwrap();
        assert_eq!(good().guarantees(), vec![50, 50]);
    }

    #[test]
    fn a_missing_fairness_unit_is_refused_and_the_error_says_what_to_set() {
        let mut c = good();
        c.fairness_unit = None;
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("fairness_unit is required") && e.contains("\"cost\""),
            "{e}"
        );
    }

    #[test]
    fn idle_after_must_exceed_the_horizon() {
        for idle in [100, 99, 0] {
            let e = good()
                .idle_after_ms(idle)
                .validate()
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("strictly greater than reclaim_horizon_ms (100)"),
                "{e}"
            );
        }
        good().idle_after_ms(101).validate().unwrap();
    }

    #[test]
    fn zero_weights_and_no_tenants_are_refused() {
        let e = good().tenant("c", 0).validate().unwrap_err().to_string();
        assert!(e.contains("tenant \"c\": weight 0"), "{e}");
        let mut c = good();
        c.tenants.clear();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("no tenants"), "{e}");
        let e = good().tenant("a", 2).validate().unwrap_err().to_string();
        assert!(e.contains("named twice"), "{e}");
        let e = GuaranteedConfig {
            ceiling: 0,
            ..good()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("ceiling"), "{e}");
    }
}
