//! Arbitrary sequences of operations, applied to the real protocol (the very functions
//! that run on the mapping, over a heap region) and to a small sequential model of
//! seed 000's rule written here from the seed, not from the library: the same verdict
//! at every step, and the invariants after each.
//!
//! Input: chunks of 3 bytes `[op, a, b]`:
//! - `op % 6` 0 or 1: process `a % 3` acquires `1 + b % 3` units (1 of the residents
//!   pool) of pool `(b >> 4) % 4` for tenant `(a >> 2) % 4` (registering first if it is
//!   not);
//! - 2: process `a % 3` releases its `b`-th lease (modulo how many it holds);
//! - 3: time moves on by `8 * b` ms (the window is 1000 ms), or, for an odd `a`, back
//!   by as much (never below 1): an explicit `now` is the caller's, and a replayed or
//!   merged trace may step back;
//! - 4: process `a % 3` dies: its slot is reaped, and it registers again on its next
//!   acquire;
//! - 5: process `a % 3` begins a call on its `b`-th lease if that is an idle resident,
//!   ends it if in a call, and finds a revoked one revoked.
//!
//! The pools: 6 permits with the default floor (5%: 1); a `per_worker` pool (quota 1,
//! so as many tickets as registered processes: 0 to 3, recomputed as they register
//! and die, and below what is held when a holder's peer dies); 7 permits with a floor
//! of 30% (2); and a residents pool of 4 (`evict`): when the rule refuses, the
//! asker revokes a resident and takes its permit, which seed 000 names: over its share
//! its own idlest (oldest last call, not in a call), under it the idlest of the tenant
//! furthest over its share (with residents not in a call); with none, the refusal is
//! `too_many_residents`. The victim's tenant counts its unit until its owner releases
//! the revoked lease, which gives back no pool unit (the revoker's now).
//!
//! `OPSEQ_TRACE=1` prints every step (to read a finding).
//! Run: `cd fuzz && cargo fuzz run -s none op_sequence`.
#![no_main]

use fairshm::admission::{self, Admitted, Attempt};
use fairshm::config::{Config, PoolConfig};
use fairshm::layout::{held_word, lease_state as ls, pair, pool_word};
use fairshm::region::{HeapRegion, Region};
use fairshm::{capacity, recovery, residents};
use fairshm::{liveness, tenants};
use libfuzzer_sys::fuzz_target;

const POOLS: usize = 4;
/// The most each pool can ever hold (the `per_worker` pool's with all three registered).
const MOST: [u32; POOLS] = [6, 3, 7, 4];
/// The residents pool.
const EVICT: usize = 3;
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
        PoolConfig::new("residents", 4).evicting(),
    ])
}

/// Pool `p`'s `(POOL, FLOOR)` with `workers` registered processes, from the seeds:
/// seed 002's `tickets = min(workers, max(ceil(quota * workers), min_tickets))`, and
/// seed 000's floor, a percentage of the pool rounded down, at least one permit.
fn limits(p: usize, workers: u32) -> (u32, u32) {
    let (cap, pct) = match p {
        0 => (6, 5),
        1 => (workers, 5), // quota 1, min_tickets 0
        2 => (7, 30),
        _ => (4, 5),
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
    /// A resident's: in a call, its last call (or grant), revoked.
    in_call: bool,
    last_call: u64,
    revoked: bool,
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

    /// Whether tenant `t` of pool `p` is under its share at `now`.
    fn under(&self, p: usize, t: usize, now: u64, workers: u32) -> bool {
        let (cap, floor) = limits(p, workers);
        let held = self.held[p][t] as u64;
        held < floor as u64 || held * self.active_weight(p, now) < cap as u64 * WEIGHTS[t] as u64
    }

    /// How far past its share tenant `t` is, times the active weight.
    fn excess(&self, p: usize, t: usize, now: u64, workers: u32) -> i128 {
        let (cap, floor) = limits(p, workers);
        let total = self.active_weight(p, now) as i128;
        self.held[p][t] as i128 * total
            - (floor as i128 * total).max(cap as i128 * WEIGHTS[t] as i128)
    }

    fn release(&mut self, h: &Held, now: Option<u64>) {
        // A revoked resident's pool unit is its revoker's already.
        self.in_use[h.pool] -= if h.revoked { 0 } else { h.units };
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
    /// Per tenant of the residents pool: residents its acquires revoked, its residents
    /// revoked, and its counted `too_many_residents` refusals.
    evicted: [[u64; 3]; TENANTS],
}

impl World {
    fn new() -> World {
        let r = HeapRegion::new(POOLS, TENANTS, PROCS, LEASES).with_residents();
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
            evicted: [[0; 3]; TENANTS],
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
            evict: p == EVICT,
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
        let now = self.now;
        let held = |lease, desc: fairshm::ops::Desc| Held {
            lease,
            generation: desc.generation,
            pool: p,
            tenant: t,
            units,
            in_call: false,
            last_call: now,
            revoked: false,
        };
        match (real, model) {
            (Admitted::Granted { lease, desc }, Ok(())) => {
                self.leases[proc].push(held(lease, desc))
            }
            (Admitted::Granted { lease, desc }, Err(_)) if p == EVICT => {
                let victims = self.victims(t, model.unwrap_err() == 2);
                let taken: Vec<(usize, usize)> = (0..PROCS)
                    .flat_map(|q| (0..self.leases[q].len()).map(move |i| (q, i)))
                    .filter(|&(q, i)| {
                        let h = &self.leases[q][i];
                        !h.revoked
                            && h.pool == EVICT
                            && residents::status(&self.r, h.lease, h.generation, "v").unwrap()
                                == residents::Status::Revoked
                    })
                    .collect();
                assert_eq!(taken.len(), 1, "one resident revoked for a grant");
                assert!(
                    victims.contains(&taken[0]),
                    "t{t} revoked {:?}, the seed's victims are {victims:?}",
                    self.leases[taken[0].0][taken[0].1]
                );
                self.leases[taken[0].0][taken[0].1].revoked = true;
                self.evicted[t][0] += 1;
                self.evicted[self.leases[taken[0].0][taken[0].1].tenant][1] += 1;
                self.model.held[p][t] += units; // the victim's tenant counts its unit too
                self.leases[proc].push(held(lease, desc));
            }
            (Admitted::Refused { facts, .. }, Err(reason)) => {
                let real_reason = match facts.verdict {
                    fairshm::policy::Verdict::Refuse { reason, .. } => reason,
                    v => panic!("a refusal with verdict {v:?}"),
                };
                let evict = p == EVICT;
                if evict {
                    let victims = self.victims(t, reason == 2);
                    assert!(victims.is_empty(), "refused with victims {victims:?}");
                }
                let reason = if evict {
                    residents::TOO_MANY_RESIDENTS
                } else {
                    reason
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
                // A quiet try decides the same and is not counted; a residents pool
                // counts `too_many_residents` apart.
                self.refused[p][t] += u64::from(!quiet && !evict);
                self.evicted[t][2] += u64::from(!quiet && evict);
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

    /// The residents seed 000 lets tenant `t` put to sleep, as `(process, index)`:
    /// `over` its share, its own idlest; under it, the idlest of the tenant furthest
    /// over its share among those with residents not in a call (ties: any of the
    /// oldest last call).
    fn victims(&self, t: usize, over: bool) -> Vec<(usize, usize)> {
        let (now, workers) = (self.now, self.workers());
        let all: Vec<(usize, usize, &Held)> = (0..PROCS)
            .flat_map(|q| {
                self.leases[q]
                    .iter()
                    .enumerate()
                    .map(move |(i, h)| (q, i, h))
            })
            .filter(|(_, _, h)| h.pool == EVICT && !h.revoked && !h.in_call)
            .collect();
        let tenants: Vec<usize> = if over {
            vec![t]
        } else {
            let over_share: Vec<usize> = (0..TENANTS)
                .filter(|&v| v != t && !self.model.under(EVICT, v, now, workers))
                .filter(|&v| all.iter().any(|(_, _, h)| h.tenant == v))
                .collect();
            let most = over_share
                .iter()
                .map(|&v| self.model.excess(EVICT, v, now, workers))
                .max();
            over_share
                .into_iter()
                .filter(|&v| Some(self.model.excess(EVICT, v, now, workers)) == most)
                .collect()
        };
        let of = |h: &Held| tenants.contains(&h.tenant);
        let oldest = all.iter().filter(|x| of(x.2)).map(|x| x.2.last_call).min();
        all.iter()
            .filter(|x| of(x.2) && Some(x.2.last_call) == oldest)
            .map(|x| (x.0, x.1))
            .collect()
    }

    /// Begins or ends a call on a resident, or finds a revoked one revoked.
    fn call(&mut self, proc: usize, which: usize) {
        if self.leases[proc].is_empty() {
            return;
        }
        let i = which % self.leases[proc].len();
        let now = self.now;
        let h = &mut self.leases[proc][i];
        if h.pool != EVICT {
            return;
        }
        let (r, l, g) = (&self.r, h.lease, h.generation);
        if h.revoked {
            let e = residents::begin_call(r, l, g, now, "x").expect_err("revoked");
            assert!(matches!(e, fairshm::Error::Revoked { .. }), "{e:?}");
        } else if h.in_call {
            residents::end_call(r, l, g, now, "x").expect("in a call");
            (h.in_call, h.last_call) = (false, now);
        } else {
            residents::begin_call(r, l, g, now, "x").expect("idle");
            (h.in_call, h.last_call) = (true, now);
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
        let (mut returned, mut held) = ([0u64; POOLS], [0u64; POOLS]);
        for h in std::mem::take(&mut self.leases[proc]) {
            returned[h.pool] += if h.revoked { 0 } else { h.units as u64 };
            held[h.pool] += h.units as u64;
            self.model.release(&h, None); // a reaper's release is not the tenant's activity
        }
        assert_eq!(reaped.units_returned, returned.to_vec(), "units returned");
        // Every unit its tenants held, a revoked resident's too: what waiters wake for.
        assert_eq!(
            reaped.held_units_returned,
            held.to_vec(),
            "held units returned"
        );
    }

    fn check(&self) {
        let r = &self.r;
        for (t, want) in self.evicted.iter().enumerate() {
            let Some(ti) = self.tenant_idx[t] else {
                continue;
            };
            let tp = r.tenant_pool(EVICT, ti);
            let got = [&tp.evictions, &tp.revoked, &tp.too_many_residents]
                .map(|c| c.load(std::sync::atomic::Ordering::Relaxed));
            assert_eq!(
                &got, want,
                "t{t}'s evictions, residents revoked, too_many_residents"
            );
        }
        for (p, &most) in MOST.iter().enumerate() {
            let in_use =
                pool_word::in_use(r.pool(p).word.load(std::sync::atomic::Ordering::SeqCst));
            assert_eq!(in_use, self.model.in_use[p], "pool {p} in use");
            assert!(in_use <= most, "pool {p} over capacity");
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
        let pool = (b as usize >> 4) % POOLS;
        match op % 6 {
            0 | 1 => w.acquire(
                a % PROCS,
                (a >> 2) % TENANTS,
                pool,
                if pool == EVICT { 1 } else { 1 + b as u32 % 3 },
                op >= 128, // a waiter's later try
            ),
            2 => w.release(a % PROCS, b as usize),
            3 if a % 2 == 1 => w.now = w.now.saturating_sub(8 * b as u64).max(1),
            3 => w.now += 8 * b as u64,
            4 => w.kill(a % PROCS),
            _ => w.call(a % PROCS, b as usize),
        }
        w.check();
    }
});
