//! loom model of the rate buckets (`rates`): two processes race for the last request
//! token of one tenant while a third charges work, on the very code the mapping runs.
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --lib loom_`

use loom::sync::Arc;

use crate::rates::{self, Limited};
use crate::refusal::Reason;
use crate::region::HeapRegion;

/// Two threads each try to take a token at the same instant when one is left: exactly
/// one gets it, and the other is told when the next comes.
#[test]
fn loom_two_processes_cannot_both_take_the_last_token() {
    loom::model(|| {
        let r = Arc::new(HeapRegion::new(1, 1, 2, 1));
        rates::set(&*r, 0, 2, 0); // a burst of 2, one every 500 ms
        assert!(rates::admit(&*r, 0, 1_000).is_ok());
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let r = r.clone();
                loom::thread::spawn(move || rates::admit(&*r, 0, 1_000))
            })
            .collect();
        let got: Vec<Result<Option<rates::Token>, Limited>> =
            threads.into_iter().map(|h| h.join().unwrap()).collect();
        let won = got.iter().filter(|g| g.is_ok()).count();
        assert_eq!(won, 1, "{got:?}");
        let lost = got.iter().find_map(|g| g.err()).unwrap();
        assert_eq!(
            lost,
            Limited {
                reason: Reason::RateLimited,
                retry_after_ms: 500,
                rate: 2,
                lead_ns: 1_000_000_000,
            }
        );
        assert_eq!(lost.interval_ns(), 500_000_000);
        assert_eq!(rates::state(&*r, 0, 1_000).rate_limited, 1);
    });
}

/// Two charges racing both count: the debt is the sum of both.
#[test]
fn loom_racing_charges_both_count() {
    loom::model(|| {
        let r = Arc::new(HeapRegion::new(1, 1, 2, 1));
        rates::set(&*r, 0, 0, 1_000); // 1 ms a unit
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let r = r.clone();
                loom::thread::spawn(move || rates::charge(&*r, 0, 1_500, 1_000))
            })
            .collect();
        for h in threads {
            h.join().unwrap();
        }
        // 3,000 units from 1,000 ms: 2,000 ms past the burst's horizon.
        assert_eq!(rates::state(&*r, 0, 1_000).work_debt_ms, 2_000);
        let e = rates::admit(&*r, 0, 1_000).unwrap_err();
        assert_eq!((e.reason, e.retry_after_ms), (Reason::WorkDebt, 2_000));
    });
}

/// A token given back (its request erred) while another process takes one: however
/// they interleave, the bucket ends with exactly the one token left that neither moved
/// (a give-back that wrote over the other's take would leave two).
#[test]
fn loom_a_token_given_back_while_another_is_taken() {
    loom::model(|| {
        let r = Arc::new(HeapRegion::new(1, 1, 2, 1));
        rates::set(&*r, 0, 2, 0); // a burst of 2, one every 500 ms
        let token = rates::admit(&*r, 0, 1_000).unwrap().unwrap();
        let giver = {
            let r = r.clone();
            loom::thread::spawn(move || rates::give_back(&*r, 0, token))
        };
        let taker = {
            let r = r.clone();
            loom::thread::spawn(move || rates::admit(&*r, 0, 1_000).is_ok())
        };
        giver.join().unwrap();
        assert!(taker.join().unwrap(), "one of two tokens was always left");
        assert!(rates::admit(&*r, 0, 1_000).is_ok(), "the token given back");
        assert!(rates::admit(&*r, 0, 1_000).is_err(), "a burst of 2, not 3");
    });
}
