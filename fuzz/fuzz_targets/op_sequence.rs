//! Arbitrary sequences of operations, applied to the real protocol (the very functions
//! that run on the mapping, over a heap region) and to a small sequential model of
//! seed 000's rule written here from the seed, not from the library: the same verdict
//! at every step, and the invariants after each.
//!
//! Input: chunks of 3 bytes `[op, a, b]`:
//! - `op % 5` 0 or 1: process `a % 3` acquires `1 + b % 3` units of pool `(b >> 4) % 3`
//!   for tenant `(a >> 2) % 4` (registering first if it is not);
//! - 2: process `a % 3` releases its `b`-th lease (modulo how many it holds);
//! - 3: time moves on by `8 * b` ms (the window is 1000 ms), or, for an odd `a`, back
//!   by as much (never below 1): an explicit `now` is the caller's, and a replayed or
//!   merged trace may step back;
//! - 4: process `a % 3` dies: its slot is reaped, and it registers again on its next
//!   acquire.
//!
//! The pools: 6 permits with the default floor (5%: 1); a `per_worker` pool (quota 1,
//! so as many tickets as registered processes: 0 to 3, recomputed as they register
//! and die, and below what is held when a holder's peer dies); 7 permits with a floor
//! of 30% (2).
//!
//! `OPSEQ_TRACE=1` prints every step (to read a finding).
//! Run: `cd fuzz && cargo fuzz run -s none op_sequence`.
#![no_main]

use fairshm::admission::{self, Admitted, Attempt};
use fairshm::config::{Config, PoolConfig};
use fairshm::layout::{held_word, lease_state as ls, pair, pool_word};
use fairshm::region::{HeapRegion, Region};
use fairshm::{capacity, recovery};
use fairshm::{liveness, tenants};
use libfuzzer_sys::fuzz_target;

const POOLS: usize = 3;
/// The most each pool can ever hold (the `per_worker` pool's with all three registered).
const MOST: [u32; POOLS] = [6, 3, 7];
const TENANTS: usize = 4;
const WEIGHTS: [u32; TENANTS] = [1, 2, 1, 3];
const PROCS: usize = 3;
const LEASES: usize = 4;
const WINDOW: u64 = 1000;

fn config() -> Config {
    Config::with_pools(vec![
        PoolConfig::new("fixed", 6),
        PoolConfig::per_worker("workers", 1.0, 0),
        PoolConfig::new("floored", 7).floor_percent(30),
    ])
}

/// Pool `p`'s `(POOL, FLOOR)` with `workers` registered processes, from the seeds:
/// seed 002's `tickets = min(workers, max(ceil(quota * workers), min_tickets))`, and
/// seed 000's floor, a percentage of the pool rounded down, at least one permit.
fn limits(p: usize, workers: u32) -> (u32, u32) {
    let (cap, pct) = match p {
        0 => (6, 5),
        1 => (workers, 5), // quota 1, min_tickets 0
        _ => (7, 30),
    };
    (cap, (cap * pct / 100).max(1))
}

#[derive(Clone, Copy, Debug)]
struct Held {
    lease: usize,
    generation: u32,
    pool: usize,
    tenant: usize,
    units: u32,
}

/// The sequential model: seed 000, read literally.
#[derive(Default)]
struct Model {
    in_use: [u32; POOLS],
    held: [[u32; TENANTS]; POOLS],
    /// Last attempt or release, 0 = never.
    last: [[u64; TENANTS]; POOLS],
}

impl Model {
    fn active_weight(&self, p: usize, now: u64) -> u64 {
        (0..TENANTS)
            .filter(|&t| {
                self.held[p][t] > 0 || (self.last[p][t] != 0 && self.last[p][t] + WINDOW > now)
            })
            .map(|t| WEIGHTS[t] as u64)
            .sum()
    }

    /// `Ok(())` granted, `Err(reason)` refused: 1 pool full, 2 over share.
    fn acquire(
        &mut self,
        p: usize,
        t: usize,
        units: u32,
        now: u64,
        workers: u32,
    ) -> Result<(), u32> {
        self.last[p][t] = self.last[p][t].max(now); // asking counts, granted or not
        let (cap, floor) = limits(p, workers);
        let (cap, floor) = (cap as u64, floor as u64);
        let total = self.active_weight(p, now);
        let held = self.held[p][t] as u64;
        // share = max(FLOOR, POOL * w / W); under share: held < share.
        let under = held < floor || held * total < cap * WEIGHTS[t] as u64;
        let limit = if under {
            cap
        } else {
            cap.saturating_sub(floor)
        };
        if self.in_use[p] as u64 + units as u64 <= limit {
            self.in_use[p] += units;
            self.held[p][t] += units;
            Ok(())
        } else {
            Err(if under { 1 } else { 2 })
        }
    }

    fn release(&mut self, h: &Held, now: Option<u64>) {
        self.in_use[h.pool] -= h.units;
        self.held[h.pool][h.tenant] -= h.units;
        if let Some(now) = now {
            let l = &mut self.last[h.pool][h.tenant];
            *l = (*l).max(now);
        }
    }
}

struct World {
    r: HeapRegion,
    cfg: Config,
    model: Model,
    slots: [Option<usize>; PROCS],
    leases: [Vec<Held>; PROCS],
    tenant_idx: [Option<usize>; TENANTS],
    now: u64,
    pid: u32,
    /// The refusals each tenant's record should count per pool: a quiet try's (a
    /// waiter's later try) are not.
    refused: [[u64; TENANTS]; POOLS],
}

impl World {
    fn new() -> World {
        let r = HeapRegion::new(POOLS, TENANTS, PROCS, LEASES);
        let cfg = config();
        capacity::reset(&r, &cfg);
        World {
            r,
            cfg,
            model: Model::default(),
            slots: [None; PROCS],
            leases: Default::default(),
            tenant_idx: [None; TENANTS],
            now: 1,
            pid: 1000,
            refused: [[0; TENANTS]; POOLS],
        }
    }

    fn slot(&mut self, proc: usize) -> usize {
        if let Some(s) = self.slots[proc] {
            return s;
        }
        self.pid += 1; // a new process each time (a fake pid, judged by the closures)
        let s = liveness::register(&self.r, self.pid, 1, self.now, false).expect("a free slot");
        self.slots[proc] = Some(s);
        // As the engine's registration does: a worker more, a ticket more.
        capacity::recompute(&self.r, &self.cfg);
        s
    }

    fn workers(&self) -> u32 {
        self.slots.iter().flatten().count() as u32
    }

    fn acquire(&mut self, proc: usize, t: usize, p: usize, units: u32, quiet: bool) {
        let slot = self.slot(proc);
        if self.leases[proc].len() == LEASES {
            return; // the real table would say LeaseTableFull; not what we test here
        }
        let name = format!("t{t}");
        let weight = || WEIGHTS[t];
        let ti = tenants::find_or_claim(&self.r, name.as_bytes(), &weight, slot, &|_| false)
            .expect("4 names fit 4 slots");
        assert_eq!(
            *self.tenant_idx[t].get_or_insert(ti),
            ti,
            "one slot per name"
        );
        let a = Attempt {
            pool: p,
            tenant: ti,
            units,
            hold_ms: 0,
            now: self.now,
            window_ms: WINDOW,
            weight: WEIGHTS[t],
            tid: 1,
            pid: 1,
            log: true,
            limits: self
                .r
                .pool(p)
                .limits
                .load(std::sync::atomic::Ordering::Relaxed),
            evict: false,
            queued_us: fairshm::server_queue::UNKNOWN,
            quiet,
        };
        let real = admission::try_acquire(&self.r, slot, 0, &a, None).expect("no error");
        let model = self.model.acquire(p, t, units, self.now, self.workers());
        if std::env::var_os("OPSEQ_TRACE").is_some() {
            eprintln!(
                "{}: t{t} asks {units} of pool {p}: real {real:?}, model {model:?}",
                self.now
            );
        }
        match (real, model) {
            (Admitted::Granted { lease, desc }, Ok(())) => self.leases[proc].push(Held {
                lease,
                generation: desc.generation,
                pool: p,
                tenant: t,
                units,
            }),
            (Admitted::Refused { facts, .. }, Err(reason)) => {
                let real_reason = match facts.verdict {
                    fairshm::policy::Verdict::Refuse { reason, .. } => reason,
                    v => panic!("a refusal with verdict {v:?}"),
                };
                assert_eq!(real_reason, reason, "reason at {}: {facts:?}", self.now);
                assert_eq!(facts.in_use, self.model.in_use[p], "in use seen");
                assert_eq!(facts.held, self.model.held[p][t], "held seen");
                assert_eq!(
                    facts.active_weight,
                    self.model.active_weight(p, self.now),
                    "active weight at {}",
                    self.now
                );
                // A quiet try decides the same and is not counted.
                self.refused[p][t] += u64::from(!quiet);
                let counted: u64 = self
                    .r
                    .tenant_pool(p, ti)
                    .refusals
                    .iter()
                    .map(|c| c.load(std::sync::atomic::Ordering::Relaxed))
                    .sum();
                assert_eq!(
                    counted, self.refused[p][t],
                    "refusals counted (quiet {quiet})"
                );
            }
            (real, model) => panic!(
                "t{t} asks {units} of pool {p} at {}: real {real:?}, model {model:?} \
                 (in use {:?}, held {:?})",
                self.now, self.model.in_use, self.model.held
            ),
        }
    }

    fn release(&mut self, proc: usize, which: usize) {
        if self.leases[proc].is_empty() {
            return;
        }
        let h = self.leases[proc].remove(which % self.leases[proc].len());
        admission::release(&self.r, h.lease, h.generation, None, self.now, None).expect("release");
        self.model.release(&h, Some(self.now));
    }

    fn kill(&mut self, proc: usize) {
        if std::env::var_os("OPSEQ_TRACE").is_some() {
            eprintln!(
                "{}: kill process {proc} ({:?})",
                self.now, self.leases[proc]
            );
        }
        let Some(s) = self.slots[proc].take() else {
            return;
        };
        let reaped = recovery::reap_slot(&self.r, s, recovery::Reaper::with_pid(1), &|_, _| true)
            .expect("reap")
            .expect("the slot was live");
        // As a reaper does after a reap: a worker fewer, a ticket fewer.
        capacity::recompute(&self.r, &self.cfg);
        let mut returned = [0u64; POOLS];
        for h in std::mem::take(&mut self.leases[proc]) {
            returned[h.pool] += h.units as u64;
            self.model.release(&h, None); // a reaper's release is not the tenant's activity
        }
        assert_eq!(reaped.units_returned, returned.to_vec(), "units returned");
    }

    fn check(&self) {
        let r = &self.r;
        for p in 0..POOLS {
            let in_use =
                pool_word::in_use(r.pool(p).word.load(std::sync::atomic::Ordering::SeqCst));
            assert_eq!(in_use, self.model.in_use[p], "pool {p} in use");
            assert!(in_use <= MOST[p], "pool {p} over capacity");
            let stored = r.pool(p).limits.load(std::sync::atomic::Ordering::SeqCst);
            let (cap, floor) = limits(p, self.workers());
            assert_eq!(
                (pair::lo(stored), pair::hi(stored)),
                (cap, floor),
                "pool {p}'s limits with {} workers",
                self.workers()
            );
            for t in 0..TENANTS {
                let held = self.tenant_idx[t].map_or(0, |ti| {
                    held_word::held(
                        r.tenant_pool(p, ti)
                            .held
                            .load(std::sync::atomic::Ordering::SeqCst),
                    )
                });
                assert_eq!(held, self.model.held[p][t], "pool {p} tenant t{t} held");
            }
        }
        let mut held_leases = 0;
        for l in 0..r.geometry().leases() {
            let s = ls::state(r.lease(l).state.load(std::sync::atomic::Ordering::SeqCst));
            assert!(
                matches!(s, ls::FREE | ls::CLAIMED | ls::HELD),
                "lease {l} left in state {s} between operations"
            );
            held_leases += usize::from(s == ls::HELD);
        }
        assert_eq!(held_leases, self.leases.iter().map(Vec::len).sum::<usize>());
    }
}

fuzz_target!(|data: &[u8]| {
    let mut w = World::new();
    for c in data.chunks_exact(3) {
        let (op, a, b) = (c[0], c[1] as usize, c[2]);
        match op % 5 {
            0 | 1 => w.acquire(
                a % PROCS,
                (a >> 2) % TENANTS,
                (b as usize >> 4) % POOLS,
                1 + b as u32 % 3,
                op >= 128, // a waiter's later try
            ),
            2 => w.release(a % PROCS, b as usize),
            3 if a % 2 == 1 => w.now = w.now.saturating_sub(8 * b as u64).max(1),
            3 => w.now += 8 * b as u64,
            _ => w.kill(a % PROCS),
        }
        w.check();
    }
});
