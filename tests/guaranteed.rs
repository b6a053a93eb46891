//! Seed 001's traces, each a test with its stated outcome, through a real segment with
//! explicit `now`; then the adversarial borrower, an overrunning holder, and the
//! configuration errors.
mod common;

use common::Seg;
use fairshm::guaranteed::{GGrant, GRefusal, Guaranteed};
use fairshm::{Config, Error, FairnessUnit, Reason, Request, Table};

fn pool(
    ceiling: u32,
    unit: FairnessUnit,
    tenants: &[(&str, u32)],
    horizon: u32,
    idle: u32,
) -> Config {
    common::guaranteed("ceiling", ceiling, unit, tenants, (horizon, idle), 8)
}

fn even(horizon: u32, idle: u32) -> Config {
    pool(
        100,
        FairnessUnit::Cost,
        &[("a", 1), ("b", 1)],
        horizon,
        idle,
    )
}

fn grant(g: &Guaranteed<'_>, t: &str, cost: u64, hold: u64, now: u64) -> GGrant {
    match g.acquire(t, cost, hold, now).unwrap() {
        Ok(l) => l,
        Err(r) => panic!("{t} {cost} for {hold} at {now}: refused {r}"),
    }
}

fn refuse(g: &Guaranteed<'_>, t: &str, cost: u64, hold: u64, now: u64) -> GRefusal {
    match g.acquire(t, cost, hold, now).unwrap() {
        Ok(l) => panic!("{t} {cost} for {hold} at {now}: granted {}", l.name),
        Err(r) => r,
    }
}

fn tenant<'a>(
    s: &'a fairshm::guaranteed::GStats,
    name: &str,
) -> &'a fairshm::guaranteed::TenantStats {
    s.tenants.iter().find(|t| t.name == name).unwrap()
}

/// The obvious design's stall: with no effective horizon, b funds a 1000 ms call out of
/// a's idle guarantee and a, back at t=10, waits 990 ms for capacity it never gave away.
#[test]
fn without_a_horizon_the_returner_stalls_990_ms() {
    let seg = Seg::new("g-stall");
    let t: Table = seg.create(&even(1000, 1001));
    let g = t.guaranteed("ceiling").unwrap();
    let own = grant(&g, "b", 50, 1000, 0);
    let loan = grant(&g, "b", 50, 1000, 0);
    assert_eq!((own.grant.own, loan.grant.own), (50, 0));
    assert_eq!(
        loan.grant.borrowed,
        vec![(0, 50)],
        "a's idle 50 funds the loan"
    );
    let r = refuse(&g, "a", 50, 100, 10);
    assert_eq!(r.reason, Reason::GuaranteeOnLoan);
    assert_eq!(r.retry_after_ms, Some(990));
    assert_eq!(r.blocking_leases, vec![loan.name.clone()]);
    // Nothing errs meanwhile, and nothing preempts.
    for now in (20..1000).step_by(100) {
        assert_eq!(
            refuse(&g, "a", 50, 100, now).reason,
            Reason::GuaranteeOnLoan
        );
    }
    g.release(own.id, 1000).unwrap();
    g.release(loan.id, 1000).unwrap();
    grant(&g, "a", 50, 100, 1000);
    let s = g.stats(1000).unwrap();
    assert_eq!(tenant(&s, "a").worst_reclaim_ms, Some(990));
    assert_eq!(tenant(&s, "a").deficit_unit_ms, 990 * 50);
}

/// The rule that kills that trace: with a 100 ms horizon, b cannot fund a 1000 ms call
/// out of a's share; it can still run the call inside its own guarantee.
#[test]
fn with_a_100_ms_horizon_the_long_loan_is_refused() {
    let seg = Seg::new("g-horizon");
    let t: Table = seg.create(&even(100, 150));
    let g = t.guaranteed("ceiling").unwrap();
    grant(&g, "b", 50, 1000, 0);
    let r = refuse(&g, "b", 50, 1000, 0);
    assert_eq!(r.reason, Reason::HoldExceedsReclaimHorizon);
    assert_eq!(
        (r.facts.own_free, r.facts.need, r.facts.horizon_ms),
        (0, 50, 100)
    );
    let text = r.explanation();
    for part in [
        "Tenant \"b\" asked to hold 50 cost units for 1000ms",
        "exceeds the reclaim horizon of 100ms",
        "only 0 of its own guarantee is free",
        "Retry with hold_ms of 100 or less",
        "split the work so it fits inside the tenant's own guarantee",
        "raise reclaim_horizon_ms",
    ] {
        assert!(text.contains(part), "{part:?} not in {text}");
    }
    // The same loan within the horizon is granted, and a gets in on its own later.
    let loan = grant(&g, "b", 50, 100, 0);
    assert_eq!(loan.grant.borrowed, vec![(0, 50)]);
}

/// b borrows a's 50 for 100 ms at t=0 beside a long call in its own 50; a asks at t=10.
/// At t=100 the borrower gets first move: it releases its loan and at once asks again.
fn demand_trace(t: &Table) -> (Option<GGrant>, GRefusal, Result<GGrant, GRefusal>) {
    let g = t.guaranteed("ceiling").unwrap();
    grant(&g, "b", 50, 10_000, 0);
    let loan = grant(&g, "b", 50, 100, 0);
    let r = refuse(&g, "a", 50, 50, 10);
    assert_eq!(r.reason, Reason::GuaranteeOnLoan);
    assert_eq!(r.retry_after_ms, Some(90));
    assert_eq!(r.blocking_leases, vec![loan.name.clone()]);
    g.release(loan.id, 100).unwrap();
    let renewal = g.acquire("b", 50, 100, 100).unwrap().ok();
    let a = g.acquire("a", 50, 50, 100).unwrap();
    (renewal, r, a)
}

#[test]
fn with_the_demand_signal_the_returner_is_served_at_t100() {
    let seg = Seg::new("g-demand");
    let t: Table = seg.create(&even(100, 150));
    let (renewal, _, a) = demand_trace(&t);
    assert!(
        renewal.is_none(),
        "a is waiting, so it is not a lender: b cannot renew"
    );
    let a = a.expect("a is served at t=100");
    assert_eq!(a.grant.at, 100);
    let s = t.guaranteed("ceiling").unwrap().stats(100).unwrap();
    assert_eq!(tenant(&s, "a").worst_reclaim_ms, Some(90));
}

#[test]
fn without_the_demand_signal_the_borrower_renews_and_the_returner_is_told_t200() {
    let seg = Seg::new("g-nodemand");
    let mut cfg = even(100, 150);
    cfg.guaranteed[0].demand_signal = false;
    let t: Table = seg.create(&cfg);
    let (renewal, _, a) = demand_trace(&t);
    let renewal = renewal.expect("b renews at t=100 against a's units");
    assert_eq!(renewal.grant.borrowed, vec![(0, 50)]);
    let r = a.expect_err("a is refused again");
    assert_eq!(r.reason, Reason::GuaranteeOnLoan);
    assert_eq!(r.retry_after_ms, Some(100), "told to come back at t=200");
}

/// Loans come from the largest available lender first: c funds the whole loan, and a
/// and b, coming back, reclaim at once.
#[test]
fn four_tenants_one_lender_funds_the_whole_loan() {
    let seg = Seg::new("g-four");
    let t: Table = seg.create(&pool(
        120,
        FairnessUnit::Cost,
        &[("a", 1), ("b", 1), ("c", 2), ("d", 2)],
        100,
        150,
    ));
    let g = t.guaranteed("ceiling").unwrap();
    let s = g.stats(0).unwrap();
    let guarantees: Vec<u64> = s.tenants.iter().map(|t| t.guarantee).collect();
    assert_eq!(guarantees, vec![20, 20, 40, 40]);
    grant(&g, "d", 40, 100, 0);
    let loan = grant(&g, "d", 30, 100, 0);
    assert_eq!(loan.grant.borrowed, vec![(2, 30)], "c alone funds it");
    let a = grant(&g, "a", 20, 50, 5);
    let b = grant(&g, "b", 20, 50, 5);
    assert_eq!((a.grant.own, b.grant.own), (20, 20));
    let s = g.stats(5).unwrap();
    assert_eq!(tenant(&s, "c").lent_to, vec![("d".to_owned(), 30)]);
    assert_eq!(tenant(&s, "d").borrowed_from, vec![("c".to_owned(), 30)]);
    assert_eq!(s.on_loan, 30);
}

/// One identical trace under both units: the same request is admitted under
/// `requests` and refused under `cost`.
#[test]
fn the_same_request_is_admitted_under_requests_and_refused_under_cost() {
    let mut answers = Vec::new();
    for unit in [FairnessUnit::Requests, FairnessUnit::Cost] {
        let seg = Seg::new("g-units");
        let t: Table = seg.create(&pool(1000, unit, &[("a", 1), ("b", 1)], 100, 150));
        let g = t.guaranteed("ceiling").unwrap();
        grant(&g, "b", 10, 1000, 0);
        answers.push(g.acquire("a", 600, 50, 1).unwrap().map(|l| l.grant.units));
    }
    assert_eq!(answers[0], Ok(1), "requests: one request of a's 500");
    let r = answers[1].as_ref().unwrap_err();
    assert_eq!(
        r.reason,
        Reason::GuaranteeExhausted,
        "cost: 600 of a guarantee of 500, b active"
    );
    assert_eq!(
        (r.facts.own_free, r.facts.need, r.facts.lendable),
        (500, 100, 0)
    );
}

/// Both tenants run two calls of 50: every averaged measure says textbook fairness,
/// and the deficit integral says a spent 90 ms holding nothing while entitled to 50.
#[test]
fn shares_are_even_and_the_deficit_shows_the_stall() {
    let seg = Seg::new("g-deficit");
    let t: Table = seg.create(&even(100, 150));
    let g = t.guaranteed("ceiling").unwrap();
    let b1 = grant(&g, "b", 50, 100, 0);
    let b2 = grant(&g, "b", 50, 100, 0);
    refuse(&g, "a", 50, 50, 10);
    g.release(b1.id, 100).unwrap();
    g.release(b2.id, 100).unwrap();
    let a1 = grant(&g, "a", 50, 50, 100);
    g.release(a1.id, 150).unwrap();
    let a2 = grant(&g, "a", 50, 50, 150);
    g.release(a2.id, 200).unwrap();
    let rep = g.fairness_report().unwrap();
    for s in &rep.tenants {
        assert_eq!(
            (s.cost_share, s.request_share, s.weight_share),
            (0.5, 0.5, 0.5),
            "{s:?}"
        );
        assert_eq!(format!("{:.2}", s.skew), "1.00");
    }
    assert_eq!(format!("{:.2}", rep.skew), "1.00");
    assert!(!rep.units_disagree);
    let s = g.stats(1000).unwrap();
    assert_eq!(tenant(&s, "a").deficit_unit_ms, 90 * 50);
    assert_eq!(tenant(&s, "b").deficit_unit_ms, 0);
}

/// A `now` earlier than one the pool has decided at counts as that later one (the
/// pool's clock only moves forward, `guaranteed::state`): a call out of order neither
/// rewinds the deficit integral nor makes it count a stretch of time twice. (`stats`
/// projects from the pool's clock without moving it.)
#[test]
fn a_now_that_steps_back_counts_as_the_pools_latest() {
    let seg = Seg::new("g-back");
    let t: Table = seg.create(&even(100, 150));
    let g = t.guaranteed("ceiling").unwrap();
    let _b1 = grant(&g, "b", 50, 100, 0);
    let _b2 = grant(&g, "b", 50, 100, 0);
    refuse(&g, "a", 50, 50, 10);
    refuse(&g, "a", 50, 50, 50);
    // Asked again at 20, behind the ask at 50: decided at 50, the integral kept.
    refuse(&g, "a", 50, 50, 20);
    assert_eq!(tenant(&g.stats(30).unwrap(), "a").deficit_unit_ms, 40 * 50);
    // From 10 to 60, once: 50 ms short of 50 units.
    assert_eq!(tenant(&g.stats(60).unwrap(), "a").deficit_unit_ms, 50 * 50);
}

/// A client retrying every 10 ms cannot inflate its demand, and a want that lapses is
/// cut when it lapses and is not counted as a reclaim.
#[test]
fn demand_is_the_largest_refusal_and_a_lapsed_want_is_cut() {
    let seg = Seg::new("g-lapse");
    let t: Table = seg.create(&even(100, 150));
    let g = t.guaranteed("ceiling").unwrap();
    grant(&g, "b", 50, 10_000, 0);
    grant(&g, "b", 50, 100, 0);
    for now in [10, 20, 30] {
        refuse(&g, "a", 20, 50, now);
    }
    refuse(&g, "a", 40, 50, 40);
    refuse(&g, "a", 30, 50, 50);
    let s = g.stats(60).unwrap();
    assert_eq!(
        tenant(&s, "a").demand,
        40,
        "the largest single refusal, not the sum"
    );
    assert_eq!(tenant(&s, "a").wanting_since, Some(10));
    // a gives up after t=50: its want lapses at 50 + 150 = 200.
    let s = g.stats(10_000).unwrap();
    let a = tenant(&s, "a");
    assert_eq!(a.demand, 0);
    assert_eq!(
        a.worst_reclaim_ms, None,
        "an abandoned wait is not a reclaim"
    );
    // 20 units short from 10 to 40, then 40 short from 40 to 200.
    assert_eq!(a.deficit_unit_ms, 20 * 30 + 40 * 160);
}

/// The borrower gets first move at the instant capacity frees and loops on acquire;
/// the returner keeps asking. It is whole within the horizon of its first ask.
#[test]
fn a_borrower_looping_with_first_move_cannot_starve_the_returner() {
    let seg = Seg::new("g-loop");
    let t: Table = seg.create(&even(100, 150));
    let g = t.guaranteed("ceiling").unwrap();
    grant(&g, "b", 50, 100_000, 0);
    let mut loan = Some(grant(&g, "b", 50, 100, 0));
    let mut served = None;
    for now in 1..400u64 {
        // b first, every ms: release a loan that is due, then ask for another.
        if let Some(l) = loan.take_if(|l| l.grant.at + 100 <= now) {
            g.release(l.id, now).unwrap();
        }
        if loan.is_none()
            && let Ok(l) = g.acquire("b", 50, 100, now).unwrap()
        {
            loan = Some(l);
        }
        if now >= 10 && now % 10 == 0 && served.is_none() {
            served = g
                .acquire("a", 50, 50, now)
                .unwrap()
                .ok()
                .map(|l| l.grant.at);
        }
    }
    assert_eq!(
        served,
        Some(100),
        "served when the loan outstanding at its ask came back"
    );
    let s = g.stats(400).unwrap();
    assert!(
        tenant(&s, "a").worst_reclaim_ms.unwrap() <= 100,
        "within the horizon"
    );
}

/// A holder that overruns its declared deadline: the retry-after is withheld, the lease
/// is listed and stays counted, never freed silently.
#[test]
fn an_overrunning_loan_is_listed_and_withholds_the_retry_after() {
    let seg = Seg::new("g-overrun");
    let t: Table = seg.create(&even(100, 150));
    let g = t.guaranteed("ceiling").unwrap();
    grant(&g, "b", 50, 100_000, 0);
    let loan = grant(&g, "b", 50, 100, 0);
    assert_eq!(refuse(&g, "a", 50, 50, 10).retry_after_ms, Some(90));
    assert_eq!(
        refuse(&g, "a", 50, 50, 100).retry_after_ms,
        Some(1),
        "due now, not yet late"
    );
    let r = refuse(&g, "a", 50, 50, 120);
    assert_eq!(r.reason, Reason::GuaranteeOnLoan);
    assert_eq!(r.retry_after_ms, None);
    assert_eq!(r.facts.blocking[0].overrun_ms, 20);
    assert!(
        r.explanation().contains("20 ms past its declared deadline"),
        "{}",
        r.explanation()
    );
    let s = g.stats(120).unwrap();
    assert_eq!(s.overrun_leases, vec![loan.name.clone()]);
    assert_eq!(s.in_use, 100, "still counted against the ceiling");
    // a keeps signalling its demand (a want lapses idle_after after its last ask).
    for now in [200, 290] {
        assert_eq!(refuse(&g, "a", 50, 50, now).retry_after_ms, None);
    }
    g.release(loan.id, 300).unwrap();
    grant(&g, "a", 50, 50, 300);
    assert_eq!(
        tenant(&g.stats(300).unwrap(), "a").worst_reclaim_ms,
        Some(290)
    );
}

/// Fifty loans hold a's guarantee: the explanation names the five due first, in
/// deadline order, and counts the rest, so it still ends with what to do; the refusal
/// itself lists all fifty.
#[test]
fn a_refusal_names_the_five_leases_due_first_and_counts_the_rest() {
    let seg = Seg::new("g-many-blocking");
    let t: Table = seg.create(&even(100, 150));
    let g = t.guaranteed("ceiling").unwrap();
    grant(&g, "b", 50, 100_000, 0);
    // Later leases are due sooner: the order of deadlines is not the order of grants.
    let loans: Vec<GGrant> = (0..50).map(|i| grant(&g, "b", 1, 100 - i, 0)).collect();
    let r = refuse(&g, "a", 50, 50, 10);
    assert_eq!(r.reason, Reason::GuaranteeOnLoan);
    let by_deadline: Vec<String> = loans.iter().rev().map(|l| l.name.clone()).collect();
    assert_eq!(r.blocking_leases, by_deadline);
    let text = r.explanation();
    assert!(
        text.contains(&format!(
            "in 50 leases, the earliest due first: {} (1 cost unit, due in 41 ms), ",
            by_deadline[0]
        )),
        "{text}"
    );
    for (i, name) in by_deadline.iter().enumerate() {
        let named = text.contains(&format!("{name} ("));
        assert_eq!(named, i < 5, "lease {name}, {i}th due: {text}");
    }
    assert!(text.contains("(1 cost unit, due in 45 ms) and 45 more due no sooner. Nothing"));
    assert!(text.ends_with("so that loans come back sooner."), "{text}");
    assert!(text.len() < 1024, "{} bytes: {text}", text.len());
}

/// A `guarantee_on_loan` refusal's retry-after says what it waits for: the blocking
/// leases' deadlines, only the first of them when that gives back enough, or more than
/// them when the request needs more than its guarantee (a lender must turn idle).
#[test]
fn a_refusals_retry_after_says_what_it_waits_for() {
    let seg = Seg::new("g-waits-for");
    let t: Table = seg.create(&even(100, 150));
    let g = t.guaranteed("ceiling").unwrap();
    grant(&g, "b", 50, 10_000, 0);
    grant(&g, "b", 25, 50, 0);
    grant(&g, "b", 25, 100, 0);
    let all = refuse(&g, "a", 50, 50, 10);
    let first = refuse(&g, "a", 25, 50, 10);
    let more = refuse(&g, "a", 60, 50, 10);
    let said = |r: &GRefusal| (r.reason, r.retry_after_ms, r.explanation());
    let (reason, after, text) = said(&all);
    assert_eq!((reason, after), (Reason::GuaranteeOnLoan, Some(90)));
    assert!(
        text.contains("Retry after 90 ms (when the blocking leases are due);"),
        "{text}"
    );
    let (reason, after, text) = said(&first);
    assert_eq!((reason, after), (Reason::GuaranteeOnLoan, Some(40)));
    assert!(
        text.contains("Retry after 40 ms (when enough of the blocking leases are due);"),
        "{text}"
    );
    // 50 of its own back at 100, and 10 more only when b, done at 10,000, has been
    // idle for 150 ms: long after the loans are due, which the text must not claim.
    let (reason, after, text) = said(&more);
    assert_eq!((reason, after), (Reason::GuaranteeOnLoan, Some(10_140)));
    assert!(
        text.contains("Retry after 10140 ms (when the rest it needs is free too: "),
        "{text}"
    );
    assert!(
        !text.contains("(when the blocking leases are due)"),
        "{text}"
    );
}

/// A refusal's ways out are ones that can help: "ask for less" only when some of the
/// tenant's own guarantee is free and the unit is cost. Under `requests` every lease
/// counts one whatever its work (a refusal there never has any of its own free), so no
/// text may tell it to ask for "no more than the 0 requests free" or to split the work;
/// nor may a tenant with no guarantee be told to fit inside it.
#[test]
fn a_refusal_offers_no_way_out_that_cannot_help() {
    let seg = Seg::new("g-ways-req");
    let t: Table = seg.create(&pool(
        4,
        FairnessUnit::Requests,
        &[("a", 1), ("b", 1)],
        100,
        150,
    ));
    let g = t.guaranteed("ceiling").unwrap();
    grant(&g, "a", 1000, 1000, 0);
    grant(&g, "a", 1000, 1000, 0);
    grant(&g, "a", 1000, 50, 0);
    grant(&g, "a", 1000, 50, 0); // b's 2 lent
    let texts = [
        refuse(&g, "b", 5, 50, 10),  // guarantee_on_loan
        refuse(&g, "a", 5, 50, 10),  // guarantee_exhausted: b is asking
        refuse(&g, "a", 5, 500, 10), // hold_exceeds_reclaim_horizon
    ]
    .map(|r| {
        assert_eq!(r.facts.own_free, 0, "{r}");
        r.to_string()
    });
    for text in &texts {
        for wrong in ["no more than the 0", "fit the 0", "split the work"] {
            assert!(!text.contains(wrong), "{wrong:?} in {text}");
        }
    }
    assert!(texts[0].starts_with("guarantee_on_loan"), "{}", texts[0]);
    assert!(
        texts[0].contains("(when the blocking leases are due); or lower reclaim_horizon_ms"),
        "{}",
        texts[0]
    );
    assert!(texts[1].starts_with("guarantee_exhausted"), "{}", texts[1]);
    assert!(
        texts[1].contains("turns idle); or give \"a\" a larger weight"),
        "{}",
        texts[1]
    );
    assert!(
        texts[2].contains("wait until one of its own leases ends"),
        "{}",
        texts[2]
    );

    // Cost: with some of its own free, asking for that much is offered; with none, not.
    let seg = Seg::new("g-ways-cost");
    let t: Table = seg.create(&even(100, 150));
    let g = t.guaranteed("ceiling").unwrap();
    grant(&g, "b", 40, 10_000, 0);
    grant(&g, "b", 50, 50, 0); // 40 of a's 50 lent, 10 left to lend
    let some = refuse(&g, "a", 50, 50, 10).explanation();
    assert!(
        some.contains("; ask for no more than the 10 cost units free now; or lower"),
        "{some}"
    );
    // b holds its own 50 (40, and 10 of the loan); a is asking, so lends nothing.
    let exhausted = refuse(&g, "b", 20, 50, 20);
    assert_eq!(
        (exhausted.reason, exhausted.facts.own_free),
        (Reason::GuaranteeExhausted, 0)
    );
    let exhausted = exhausted.explanation();
    assert!(!exhausted.contains("split the work"), "{exhausted}");
    let seg = Seg::new("g-ways-none");
    let t: Table = seg.create(&pool(
        1,
        FairnessUnit::Cost,
        &[("a", 1), ("b", 1)],
        100,
        150,
    ));
    let g = t.guaranteed("ceiling").unwrap();
    let nothing = g
        .stats(0)
        .unwrap()
        .tenants
        .iter()
        .find(|t| t.guarantee == 0)
        .map(|t| t.name.clone())
        .unwrap();
    let r = refuse(&g, &nothing, 1, 500, 0);
    assert_eq!(r.reason, Reason::HoldExceedsReclaimHorizon);
    let text = r.explanation();
    assert!(!text.contains("fits inside"), "{text}");
    assert!(
        text.contains("give the tenant a weight that guarantees it some units"),
        "{text}"
    );
}

/// The longest explanations there can be (names of 48 bytes that each print as six
/// characters, numbers of 10 to 20 digits, overrunning loans, more blocking leases than
/// are named) fit the C ABI's `FAIRSHM_GUARANTEED_WHY_MAX`, which the bindings'
/// buffers are.
#[test]
fn every_explanation_fits_the_c_abis_why_buffer() {
    let a = "\u{1f}".repeat(48);
    let b = "\u{1e}".repeat(48);
    let horizon = u32::MAX - 1;
    let cfg = Config::with_pools(vec![]).guaranteed(
        fairshm::GuaranteedConfig::new("ceiling", u32::MAX)
            .unit(FairnessUnit::Cost)
            .tenant(&a, 1)
            .tenant(&b, 1)
            .reclaim_horizon_ms(horizon)
            .idle_after_ms(u32::MAX)
            .max_leases(64),
    );
    let seg = Seg::new("g-longest");
    let t: Table = seg.create(&cfg);
    let g = t.guaranteed("ceiling").unwrap();
    let idle = u32::MAX as u64 + 1;
    let own = u32::MAX as u64 / 2;
    grant(&g, &b, own, u64::MAX / 4, idle);
    for _ in 0..20 {
        grant(&g, &b, 100_000_000, horizon as u64, idle);
    }
    let (most, late) = (u32::MAX as u64, u64::MAX / 2);
    let refusals = [
        refuse(&g, &b, most, u64::MAX, idle),
        refuse(&g, &a, most / 2, u64::MAX, late),
        refuse(&g, &b, most, horizon as u64, late + 1),
    ];
    let reasons: Vec<Reason> = refusals.iter().map(|r| r.reason).collect();
    assert_eq!(
        reasons,
        [
            Reason::HoldExceedsReclaimHorizon,
            Reason::GuaranteeOnLoan,
            Reason::GuaranteeExhausted
        ]
    );
    let on_loan = refusals[1].explanation();
    assert!(on_loan.contains("past its declared deadline"), "{on_loan}");
    assert!(on_loan.contains("and 15 more due no sooner"), "{on_loan}");
    for r in &refusals {
        let text = r.explanation();
        assert!(
            text.len() < fairshm::ffi::FAIRSHM_GUARANTEED_WHY_MAX,
            "{} bytes: {text}",
            text.len()
        );
    }
}

#[test]
fn a_lease_released_twice_is_an_error_that_changes_nothing() {
    let seg = Seg::new("g-double");
    let t: Table = seg.create(&even(100, 150));
    let g = t.guaranteed("ceiling").unwrap();
    let l = grant(&g, "a", 10, 50, 0);
    g.release(l.id, 5).unwrap();
    let before = g.state().unwrap();
    let e = g.release(l.id, 6).unwrap_err();
    assert!(matches!(e, Error::AlreadyReleased { .. }), "{e}");
    assert_eq!(g.state().unwrap(), before);
    let e = g.acquire("zed", 1, 1, 7).unwrap_err();
    assert!(matches!(e, Error::InvalidTenant { .. }), "{e}");
    let e = g.acquire("a", 101, 1, 7).unwrap_err();
    assert!(matches!(e, Error::UnitsExceedCapacity { .. }), "{e}");
    // The cost as asked, not cut to 32 bits.
    let e = g.acquire("a", u64::MAX, 1, 7).unwrap_err();
    assert!(e.to_string().contains(&u64::MAX.to_string()), "{e}");
    assert!(matches!(
        t.guaranteed("nope"),
        Err(Error::UnknownPool { .. })
    ));
}

/// A pool asked for through the other policy's door is named as such, with the way
/// to it; a table without pools of one policy says so rather than listing nothing.
#[test]
fn a_pool_of_the_other_policy_is_named_with_the_way_to_it() {
    let seg = Seg::new("g-other-door");
    let mut cfg = even(100, 150);
    cfg.pools.push(fairshm::PoolConfig::new("requests", 4));
    let t: Table = seg.create(&cfg);
    let e = t.try_acquire(&Request::new("ceiling", "a")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "unknown pool \"ceiling\"; this table has fair-share pools [\"requests\"] (and \
         guaranteed pools [\"ceiling\"]); \"ceiling\" is a guaranteed pool: resolve it with \
         guaranteed(\"ceiling\") (fairshm_guaranteed_pool in C)"
    );
    let e = t.guaranteed("requests").err().unwrap();
    assert!(
        e.to_string()
            .ends_with("\"requests\" is a fair-share pool: acquire it from the table itself"),
        "{e}"
    );
    drop(t);
    let seg = Seg::new("g-no-fair");
    let t: Table = seg.create(&even(100, 150));
    let e = t.try_acquire(&Request::new("nope", "a")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "unknown pool \"nope\"; this table has no fair-share pools (and guaranteed pools \
         [\"ceiling\"])"
    );
}

#[test]
fn the_plan_is_weighted_max_min_over_current_demand() {
    let seg = Seg::new("g-plan");
    let t: Table = seg.create(&pool(
        100,
        FairnessUnit::Cost,
        &[("a", 1), ("b", 1), ("c", 2)],
        100,
        150,
    ));
    let g = t.guaranteed("ceiling").unwrap();
    // Guarantees 25, 25, 50. a wants 10 only; b and c want more than the rest.
    grant(&g, "a", 10, 1000, 0);
    grant(&g, "b", 25, 1000, 0);
    grant(&g, "c", 50, 1000, 0);
    refuse(&g, "b", 40, 50, 1);
    let plan = g.plan(1).unwrap();
    let targets: Vec<(u64, u64)> = plan.iter().map(|p| (p.demand, p.target)).collect();
    // a is met at 10; the 90 left are split 1:2 between b (demand 65) and c (50): c is
    // met at 50, b gets the remaining 40.
    assert_eq!(targets, vec![(10, 10), (65, 40), (50, 50)]);
    assert_eq!(plan[1].drift, 25 - 40);
}

#[test]
fn the_configuration_errors_reach_table_create() {
    let seg = Seg::new("g-cfg");
    let mut bad = even(100, 150);
    bad.guaranteed[0].fairness_unit = None;
    let e = Table::create(&seg.name, &bad).err().unwrap();
    assert!(
        matches!(&e, Error::InvalidConfig(m) if m.contains("fairness_unit is required")),
        "{e}"
    );
    let e = Table::create(&seg.name, &even(100, 100)).err().unwrap();
    assert!(e.to_string().contains("strictly greater"), "{e}");
    let e = Table::create(&seg.name, &pool(10, FairnessUnit::Cost, &[("a", 0)], 1, 2))
        .err()
        .unwrap();
    assert!(e.to_string().contains("weight 0"), "{e}");
    let e = Table::create(&seg.name, &pool(10, FairnessUnit::Cost, &[], 1, 2))
        .err()
        .unwrap();
    assert!(e.to_string().contains("no tenants"), "{e}");
    // A segment with a guaranteed pool is refused by an opener expecting another.
    let t = seg.create(&even(100, 150));
    let e = Table::open_expecting(&seg.name, &even(100, 200))
        .err()
        .unwrap();
    assert!(
        matches!(&e, Error::ConfigMismatch { what, .. } if what.contains("guaranteed pool")),
        "{e}"
    );
    drop(t);
}

#[test]
fn a_full_lease_table_is_a_typed_error_that_says_what_to_change() {
    let seg = Seg::new("g-full");
    let mut cfg = even(100, 150);
    cfg.guaranteed[0].max_leases = 2;
    let t: Table = seg.create(&cfg);
    let g = t.guaranteed("ceiling").unwrap();
    grant(&g, "a", 1, 10, 0);
    grant(&g, "a", 1, 10, 0);
    let before = g.state().unwrap();
    let e = g.acquire("b", 1, 10, 0).unwrap_err();
    assert!(matches!(e, Error::PoolLeasesFull { max: 2, .. }), "{e}");
    assert!(e.to_string().contains("larger max_leases"), "{e}");
    assert_eq!(g.state().unwrap(), before, "an error publishes nothing");
}

/// On the library's clock: a returner that waits is served when the loan comes back,
/// and keeps its demand signalled meanwhile (the borrower cannot renew); one that waits
/// past its timeout gets the last refusal.
#[test]
fn acquire_timeout_waits_for_the_loan_and_keeps_asking() {
    let seg = Seg::new("g-wait");
    // idle_after 1000: the waiter asks at least every 500 ms, so a scheduling stall of
    // up to half a second cannot let its demand lapse.
    let t: Table = seg.create(&even(100, 1000));
    let g = t.guaranteed("ceiling").unwrap();
    let now = || fairshm_clock_ms();
    grant(&g, "b", 50, 100_000, now());
    let loan = grant(&g, "b", 50, 100, now());
    // Short of the loan's end: the last refusal, after about the timeout.
    let t0 = std::time::Instant::now();
    let r = g
        .acquire_timeout("a", 50, 50, std::time::Duration::from_millis(30))
        .unwrap()
        .unwrap_err();
    assert_eq!(r.reason, Reason::GuaranteeOnLoan);
    assert!(t0.elapsed() >= std::time::Duration::from_millis(30));
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(60));
            g.release(loan.id, now()).unwrap();
            // a has kept asking: b cannot borrow its units again.
            assert!(g.acquire("b", 50, 100, now()).unwrap().is_err());
        });
        let got = g
            .acquire_timeout("a", 50, 50, std::time::Duration::from_secs(10))
            .unwrap();
        assert!(got.is_ok(), "{:?}", got.err());
    });
    assert!(t0.elapsed() < std::time::Duration::from_secs(5));
    // A refusal waiting cannot end comes back at once: 60 is more than b's guarantee
    // of 50, so for 1000 ms it could only ever borrow.
    let t1 = std::time::Instant::now();
    let r = g
        .acquire_timeout("b", 60, 1000, std::time::Duration::from_secs(10))
        .unwrap()
        .unwrap_err();
    assert_eq!(r.reason, Reason::HoldExceedsReclaimHorizon);
    assert!(t1.elapsed() < std::time::Duration::from_secs(1));
}

/// The library's clock (ms), as `acquire_timeout` reads it.
fn fairshm_clock_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer for clock_gettime.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// An op on a guaranteed pool from a thread-local's destructor, at thread exit, after
/// the thread's buffers for such ops are gone (destructors run in the reverse order of
/// their values' first use): it works, on buffers of its own.
#[test]
fn an_op_from_a_thread_locals_destructor_at_exit_works() {
    use std::cell::RefCell;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    struct AtExit {
        table: Arc<Table>,
        done: Arc<AtomicBool>,
    }
    impl Drop for AtExit {
        fn drop(&mut self) {
            let g = self.table.guaranteed("ceiling").unwrap();
            let l = grant(&g, "a", 10, 50, 5);
            g.release(l.id, 6).unwrap();
            self.done.store(true, SeqCst);
        }
    }
    thread_local! {
        static AT_EXIT: RefCell<Option<AtExit>> = const { RefCell::new(None) };
    }
    let seg = Seg::new("g-tls");
    let table = Arc::new(seg.create(&even(100, 150)));
    let done = Arc::new(AtomicBool::new(false));
    let (t, d) = (table.clone(), done.clone());
    std::thread::spawn(move || {
        // First used (so destroyed last): the value whose destructor makes the op.
        AT_EXIT.with(|v| {
            *v.borrow_mut() = Some(AtExit {
                table: t.clone(),
                done: d,
            })
        });
        // Then an op, which takes the thread's buffers into use.
        let g = t.guaranteed("ceiling").unwrap();
        let l = grant(&g, "b", 10, 50, 1);
        g.release(l.id, 2).unwrap();
    })
    .join()
    .unwrap();
    assert!(
        done.load(SeqCst),
        "the destructor's acquire and release ran"
    );
    let s = table.guaranteed("ceiling").unwrap().state().unwrap();
    assert!(s.leases.is_empty(), "{s:?}");
}
