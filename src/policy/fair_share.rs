//! The fair-share rule of seed 000, exactly:
//!
//! ```text
//! active(pool)  = tenants that held or asked for a permit in the last window
//! share(t)      = max(FLOOR, POOL * w_t / sum of active weights)
//! admit(t, u)   = in_use + u <= POOL          when t holds <  share(t)
//!               = in_use + u <= POOL - FLOOR  when t holds >= share(t)
//! ```
//!
//! [`decide`] is exact integer arithmetic (`held * W < POOL * w`), so no float tolerance
//! enters the rule. Its inputs besides the two words are frozen by the acquirer:
//! `POOL` and `FLOOR` (the pool's limits), the tenant's weight and the active weight
//! (`admission::touch`), a priority input that may be a few ms stale under concurrency,
//! which moves a share, never the capacity bound.

use super::{Inputs, Policy, Verdict};
use crate::layout::pair;

/// Reason codes of the rule's refusals (see `crate::Reason`).
pub const POOL_FULL: u32 = 1;
pub const OVER_SHARE: u32 = 2;

/// The rule's inputs besides the two words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frozen {
    pub cap: u32,
    pub floor: u32,
    pub weight: u32,
    /// The active weight, the tenant's own included (saturated to 32 bits).
    pub active_weight: u32,
}

impl Frozen {
    #[inline]
    pub fn inputs(&self) -> Inputs {
        [
            pair::make(self.cap, self.floor),
            pair::make(self.weight, self.active_weight),
            0,
        ]
    }
    #[inline]
    pub fn from_inputs(i: &Inputs) -> Frozen {
        Frozen {
            cap: pair::lo(i[0]),
            floor: pair::hi(i[0]),
            weight: pair::lo(i[1]),
            active_weight: pair::hi(i[1]),
        }
    }
}

/// Seed 000's policy.
#[derive(Clone, Copy, Debug, Default)]
pub struct FairShare;

impl Policy for FairShare {
    #[inline]
    fn decide(&self, inputs: &Inputs, in_use: u32, held: u32, _extra: u32, units: u32) -> Verdict {
        decide(&Frozen::from_inputs(inputs), in_use, held, units)
    }
    #[inline]
    fn capacity(&self, inputs: &Inputs) -> u32 {
        pair::lo(inputs[0])
    }
}

/// `true` when a tenant holding `held` is below its share.
#[inline]
pub fn under_share(f: &Frozen, held: u32) -> bool {
    let w = f.weight as u128;
    let total = (f.active_weight as u128).max(w).max(1);
    held < f.floor || (held as u128) * total < (f.cap as u128) * w
}

/// The rule, exactly.
#[inline]
pub fn decide(f: &Frozen, in_use: u32, held: u32, units: u32) -> Verdict {
    let want = in_use as u64 + units as u64;
    let (limit, reason) = if under_share(f, held) {
        (f.cap as u64, POOL_FULL)
    } else {
        ((f.cap as u64).saturating_sub(f.floor as u64), OVER_SHARE)
    };
    match want.checked_sub(limit) {
        None | Some(0) => Verdict::Admit,
        Some(short) => Verdict::Refuse {
            reason,
            short: short.min(u32::MAX as u64) as u32,
        },
    }
}

/// `share(t)` as a real number, for reports.
pub fn share(cap: u32, floor: u32, weight: u32, active_weight: u64) -> f64 {
    let total = active_weight.max(weight as u64).max(1) as f64;
    (cap as f64 * weight as f64 / total).max(floor as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(cap: u32, floor: u32, weight: u32, active_weight: u32) -> Frozen {
        Frozen {
            cap,
            floor,
            weight,
            active_weight,
        }
    }
    fn full(short: u32) -> Verdict {
        Verdict::Refuse {
            reason: POOL_FULL,
            short,
        }
    }
    fn over(short: u32) -> Verdict {
        Verdict::Refuse {
            reason: OVER_SHARE,
            short,
        }
    }

    #[test]
    fn room_refuses_nothing_and_alone_gets_all() {
        let d = f(8, 1, 1, 1);
        for held in 0..8 {
            assert_eq!(decide(&d, held, held, 1), Verdict::Admit, "held {held}");
        }
        // Holding all 8 it holds exactly its share: refused at the floor (the pool is
        // full either way); a lone tenant under its share finds the pool full instead.
        assert_eq!(decide(&d, 8, 8, 1), over(2));
        assert_eq!(decide(&d, 8, 7, 1), full(1));
    }

    #[test]
    fn over_share_stops_one_floor_short() {
        let d = f(8, 1, 1, 2); // share 4
        assert_eq!(decide(&d, 6, 3, 1), Verdict::Admit); // under share: up to POOL
        assert_eq!(decide(&d, 6, 4, 1), Verdict::Admit); // 7 <= 8 - 1
        assert_eq!(decide(&d, 7, 4, 1), over(1));
        assert_eq!(decide(&d, 7, 3, 1), Verdict::Admit); // under share takes the floor
    }

    #[test]
    fn weights_and_floor_set_the_share() {
        // POOL 100, weights 3:1 -> shares 75 and 25; floor 5.
        let heavy = f(100, 5, 3, 4);
        let light = f(100, 5, 1, 4);
        assert!(under_share(&heavy, 74) && !under_share(&heavy, 75));
        assert!(under_share(&light, 24) && !under_share(&light, 25));
        // 30 tenants of weight 1: POOL/30 = 3.3 < floor 5, so the floor is the share.
        let many = f(100, 5, 1, 30);
        assert!(under_share(&many, 4) && !under_share(&many, 5));
        assert_eq!(share(100, 5, 1, 30), 5.0);
        assert_eq!(share(100, 5, 3, 4), 75.0);
    }

    #[test]
    fn all_or_nothing() {
        let d = f(8, 1, 1, 1);
        assert_eq!(decide(&d, 6, 0, 3), full(1));
        assert_eq!(decide(&d, 5, 0, 3), Verdict::Admit);
    }

    #[test]
    fn inputs_round_trip() {
        let d = f(1000, 50, 3, 7);
        assert_eq!(Frozen::from_inputs(&d.inputs()), d);
        assert_eq!(FairShare.capacity(&d.inputs()), 1000);
    }
}
