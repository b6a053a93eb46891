//! `State::check` against the pairwise check it replaced (every lease compared with
//! every lease and slice), on valid states and on states broken in every way a hostile
//! write could break them: the same first violation, named the same way.

use super::*;

/// The check as it was, O(L^2 + L S), kept as the oracle (its sums cannot wrap here:
/// the states below count small numbers).
fn pairwise(st: &State, rules: &Rules) -> std::result::Result<(), String> {
    let n = rules.tenants();
    if st.tenants.len() != n {
        return Err(format!(
            "{} tenant records, the config has {n}",
            st.tenants.len()
        ));
    }
    if st.leases.len() > rules.max_leases || st.slices.len() > rules.max_slices {
        return Err(format!(
            "{} leases and {} slices",
            st.leases.len(),
            st.slices.len()
        ));
    }
    for (i, l) in st.leases.iter().enumerate() {
        if l.tenant as usize >= n || l.no == 0 {
            return Err(format!("lease {} names tenant {}", l.no, l.tenant));
        }
        if st.leases[..i].iter().any(|m| m.no == l.no) {
            return Err(format!("lease {} appears twice", l.no));
        }
        let sliced: u64 = st
            .slices
            .iter()
            .filter(|s| s.lease == l.no)
            .map(|s| s.units)
            .sum();
        if l.units == 0 || l.own.checked_add(sliced) != Some(l.units) {
            return Err(format!(
                "lease {} counts {} units but funds {} own + {sliced} borrowed (I2)",
                l.no, l.units, l.own
            ));
        }
    }
    for s in &st.slices {
        if s.lender as usize >= n || s.units == 0 || !st.leases.iter().any(|l| l.no == s.lease) {
            return Err(format!(
                "slice of lease {} from lender {} is dangling",
                s.lease, s.lender
            ));
        }
        if st
            .leases
            .iter()
            .any(|l| l.no == s.lease && l.tenant == s.lender)
        {
            return Err(format!("lease {} borrows from its own tenant", s.lease));
        }
    }
    for t in 0..n {
        if st.own_used(t) + st.lent(t) > rules.guarantees[t] {
            return Err(format!(
                "tenant {} uses {} own + {} lent of a guarantee of {} (I1)",
                rules.names[t],
                st.own_used(t),
                st.lent(t),
                rules.guarantees[t]
            ));
        }
    }
    if st.in_use() > rules.ceiling {
        return Err(format!(
            "{} units in use over a ceiling of {} (I3)",
            st.in_use(),
            rules.ceiling
        ));
    }
    Ok(())
}

/// `n` tenants (named `a`, `b`, ...) weighing 1, 2, 1, 2, ..., 30 units each on average.
fn tenants(n: usize) -> Rules {
    let mut cfg = GuaranteedConfig::new("g", 30 * n as u32)
        .unit(FairnessUnit::Cost)
        .reclaim_horizon_ms(100)
        .idle_after_ms(150)
        .max_leases(30);
    for (k, name) in "abcdefghijklmnop".chars().take(n).enumerate() {
        cfg = cfg.tenant(&name.to_string(), 1 + k as u32 % 2);
    }
    Rules::new(&cfg)
}

/// Four tenants (the check's sums on the stack) and ten (on the heap).
#[test]
fn the_check_names_what_the_pairwise_check_named() {
    for n in [4, 10] {
        names_what_the_pairwise_check_named(n);
    }
}

fn names_what_the_pairwise_check_named(n: usize) {
    let rules = tenants(n);
    let n = n as u64;
    let mut next = super::tests::lcg(0x9e37_79b9_7f4a_7c15);
    let (mut valid, mut broken, mut out_of_order) = (0, 0, 0);
    let mut named = std::collections::BTreeSet::new();
    for _ in 0..60 {
        let mut st = State::new(&rules);
        // Lease numbers that come round past u32::MAX in some runs.
        if next(2) == 0 {
            st.next_no = u32::MAX - next(4) as u32;
        }
        let mut now = 0;
        for _ in 0..80 {
            let call = super::tests::random_call(&mut next, &st, n, &mut now, (40, 40, 200));
            let _ = st.apply(&rules, call);
            assert_eq!(st.check(&rules), Ok(()), "{st:?}");
            valid += 1;
            // One break of each kind a hostile write could make, on a copy.
            let mut bad = st.clone();
            let (l, s) = (bad.leases.len() as u64, bad.slices.len() as u64);
            let li = next(l) as usize;
            let si = next(s) as usize;
            let other = bad.leases.get(next(l) as usize).map(|l| l.no).unwrap_or(7);
            match next(11) {
                0 if l > 0 => bad.leases[li].no = other,
                1 if l > 0 => bad.leases[li].no = 0,
                2 if l > 0 => bad.leases[li].tenant = (n + next(3)) as u16,
                3 if l > 0 => bad.leases[li].own += 1 + next(3),
                4 if l > 1 => bad.leases.swap(li, (li + 1) % l as usize),
                5 if s > 0 => bad.slices[si].lease = other,
                6 if s > 0 => bad.slices[si].lease = other.wrapping_add(1 + next(3) as u32),
                7 if s > 0 => bad.slices[si].lender = next(n + 2) as u16,
                8 if s > 0 => bad.slices[si].units = next(3),
                9 if l > 0 => {
                    bad.leases[li].units += 60;
                    bad.leases[li].own += 60;
                }
                10 => bad.tenants.truncate(next(n) as usize),
                _ => continue,
            }
            out_of_order += usize::from(bad.leases.windows(2).any(|w| w[0].no >= w[1].no));
            let (new, old) = (bad.check(&rules), pairwise(&bad, &rules));
            assert_eq!(new, old, "{bad:?}");
            if let Err(e) = new {
                broken += 1;
                let kind = [
                    "twice",
                    "names tenant",
                    "(I1)",
                    "(I2)",
                    "(I3)",
                    "dangling",
                    "own tenant",
                    "records",
                ];
                named.extend(
                    kind.iter()
                        .filter(|k| e.contains(*k))
                        .map(|k| k.to_string()),
                );
            }
        }
    }
    // Every kind of violation came up (but I3: with I1 and I2 it cannot fail, the
    // guarantees summing to the ceiling), and states out of order (the index's path).
    for kind in [
        "twice",
        "names tenant",
        "(I1)",
        "(I2)",
        "dangling",
        "own tenant",
        "records",
    ] {
        assert!(
            named.contains(kind),
            "{n} tenants: no {kind} among {broken} broken states"
        );
    }
    assert!(
        valid > 4000 && broken > 2000 && out_of_order > 500,
        "{n} tenants: {valid} {broken} {out_of_order}"
    );
}

#[test]
fn sums_past_u64_are_violations_not_wrapped_round() {
    let rules = tenants(4);
    let mut st = State::new(&rules);
    let grant = |st: &mut State, tenant, now| {
        let call = Call::Acquire {
            tenant,
            cost: 5,
            hold_ms: 50,
            owner: 0,
            now,
        };
        assert!(matches!(st.apply(&rules, call), Ok(Effect::Granted(_))));
    };
    grant(&mut st, 0, 0);
    grant(&mut st, 0, 1);
    // Two leases of half of 2^64 each: a wrapping sum would make it 0 units in use.
    for l in &mut st.leases {
        l.units = 1 << 63;
        l.own = 1 << 63;
    }
    let e = st.check(&rules).unwrap_err();
    assert_eq!(
        e,
        format!(
            "tenant a uses {} or more own + 0 lent of a guarantee of 20 (I1)",
            u64::MAX
        )
    );
}
