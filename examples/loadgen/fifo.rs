//! The `fifo` client of `loadgen`: a tenant that honours `Retry-After` as a pause of
//! the whole tenant ("waits that long before that tenant's next request"), keeps one
//! first-in-first-out queue of all its requests, and adapts how many it has in flight.
//!
//! Each of the tenant's connections is a closed loop, as in the other modes, but its
//! request goes through the tenant's gate before every attempt:
//! - the gate lets the oldest waiting request go first (a refused request keeps the
//!   time it was first made, so it goes back to the head of the queue);
//! - no request goes before the latest hint the tenant was given has run out (the
//!   pause is the tenant's: a 429 stops its fresh requests too, not only the refused
//!   one);
//! - at most `window` requests are on the wire at once, a window that grows by one per
//!   200 until the first 429 and by a quarter over the window per 200 after it (one a
//!   four windows' worth of 200s), and that a 429 takes down by a tenth, and by one at
//!   least (the request it refused), never below 1: an additive-increase,
//!   multiplicative-decrease window, as TCP's and adaptive-concurrency clients' are
//!   (0.9 is the backoff ratio of Netflix's `concurrency-limits` AIMD limit), so that
//!   the tenant keeps about what it is admitted in flight and queues the rest at home
//!   instead of in the server. `LOADGEN_FIFO_INCREASE` (default 0.25) and
//!   `LOADGEN_FIFO_DECREASE` (default 0.9) set the two. TCP's own (1 and 0.5) made the
//!   tenant's extra request wait in the server's queue more often, which raised the
//!   library's queue stretch and with it every pause, and halving a window of 12
//!   (Puma 4x4) left permits free for long (see `docs/fairness-through-servers.md`).
//!
//! The latency of a request runs from when its connection made it, so that the time it
//! waited in the tenant's own queue counts.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// The most a waiter sleeps before it looks again (the stop flag; a lost wake-up).
const NAP: Duration = Duration::from_millis(50);

/// One tenant's gate (see the module docs).
pub struct Fifo {
    state: Mutex<State>,
}

struct State {
    /// No request goes before this.
    resume_at: Instant,
    /// Requests on the wire.
    in_flight: u32,
    /// How many may be on the wire.
    window: f64,
    /// Growing by one per 200, until the first 429.
    slow_start: bool,
    /// A 200 after the first 429 adds this over the window (`LOADGEN_FIFO_INCREASE`).
    increase: f64,
    /// A 429 multiplies the window by this, and takes one at least
    /// (`LOADGEN_FIFO_DECREASE`).
    decrease: f64,
    /// The waiting requests, oldest first: (made at, connection), and the thread to
    /// wake when it may go. Only `dispatch` and a stop take a request out, so a waiter
    /// that finds its key gone was let go.
    waiting: BTreeMap<(Instant, usize), Thread>,
}

impl Default for Fifo {
    fn default() -> Self {
        Fifo {
            state: Mutex::new(State {
                resume_at: Instant::now(),
                in_flight: 0,
                window: 1.0,
                slow_start: true,
                increase: knob("LOADGEN_FIFO_INCREASE", 0.25),
                decrease: knob("LOADGEN_FIFO_DECREASE", 0.9),
                waiting: BTreeMap::new(),
            }),
        }
    }
}

/// A number from the environment, else `default`.
fn knob(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|v: &f64| v.is_finite() && *v > 0.0)
        .unwrap_or(default)
}

impl State {
    /// Lets the oldest waiting requests go, as many as the window and the pause allow.
    fn dispatch(&mut self) {
        if Instant::now() < self.resume_at {
            return;
        }
        while (self.in_flight as f64) < self.window.floor().max(1.0) {
            let Some((_, thread)) = self.waiting.pop_first() else {
                return;
            };
            self.in_flight += 1;
            thread.unpark();
        }
    }

    /// Wakes the head of the queue, so that it times the pause anew.
    fn nudge_head(&self) {
        if let Some((_, thread)) = self.waiting.first_key_value() {
            thread.unpark();
        }
    }
}

impl Fifo {
    /// Waits until the request made at `made` by connection `conn` may go. False when
    /// `stop` was set first (the request is then out of the queue).
    pub fn enter(&self, made: Instant, conn: usize, stop: &AtomicBool) -> bool {
        let key = (made, conn);
        let mut st = self.state.lock().unwrap();
        st.waiting.insert(key, std::thread::current());
        loop {
            st.dispatch();
            if !st.waiting.contains_key(&key) {
                return true;
            }
            // Relaxed: the run's end flag, which publishes nothing.
            if stop.load(Ordering::Relaxed) {
                st.waiting.remove(&key);
                return false;
            }
            // The head times the pause; the others wait for `dispatch` to wake them.
            let now = Instant::now();
            let nap = match st.waiting.first_key_value() {
                Some((k, _)) if *k == key && st.resume_at > now => (st.resume_at - now).min(NAP),
                _ => NAP,
            };
            drop(st);
            std::thread::park_timeout(nap);
            st = self.state.lock().unwrap();
        }
    }

    /// An attempt that `enter` let go was answered: `status` (None: no answer) and its
    /// hint (ms) if it was a 429.
    pub fn done(&self, status: Option<u16>, hint_ms: Option<u64>) {
        let mut st = self.state.lock().unwrap();
        st.in_flight -= 1;
        match status {
            Some(200) => {
                st.window += if st.slow_start {
                    1.0
                } else {
                    st.increase / st.window
                };
                st.window = st.window.min(4096.0);
            }
            Some(429) => {
                st.slow_start = false;
                st.window = (st.window * st.decrease).min(st.window - 1.0).max(1.0);
                let until = Instant::now() + Duration::from_millis(hint_ms.unwrap_or(1000));
                st.resume_at = st.resume_at.max(until);
                st.nudge_head();
            }
            _ => {}
        }
        st.dispatch();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, mpsc};

    /// Enters `gate` from a thread of its own as connection `conn`, with a request made
    /// at `made`; sends `conn` on `tx` once let go.
    fn enter_async(gate: &Arc<Fifo>, made: Instant, conn: usize, tx: &mpsc::Sender<usize>) {
        let (gate, tx) = (Arc::clone(gate), tx.clone());
        std::thread::spawn(move || {
            let never = AtomicBool::new(false);
            assert!(gate.enter(made, conn, &never));
            tx.send(conn).unwrap();
        });
    }

    /// Waits until `gate` has `n` requests waiting (at most 5 s).
    fn until_waiting(gate: &Fifo, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while gate.state.lock().unwrap().waiting.len() != n {
            assert!(Instant::now() < deadline, "never saw {n} waiting");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn the_oldest_request_goes_first_and_the_window_bounds_the_wire() {
        let gate = Arc::new(Fifo::default());
        let t0 = Instant::now();
        let never = AtomicBool::new(false);
        // The window starts at 1: the first request goes at once.
        assert!(gate.enter(t0, 0, &never));
        let (tx, rx) = mpsc::channel();
        // The younger request queues first, the older one after it.
        enter_async(&gate, t0 + Duration::from_millis(2), 2, &tx);
        until_waiting(&gate, 1);
        enter_async(&gate, t0 + Duration::from_millis(1), 1, &tx);
        until_waiting(&gate, 2);
        assert!(rx.try_recv().is_err(), "a request went past a full window");
        // A 429 with a hint of 0: the window stays 1 (never below), one goes: the
        // oldest, though it queued last.
        gate.done(Some(429), Some(0));
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(1));
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
        // Its 200 makes room (1.25 after the first 429: still one on the wire).
        gate.done(Some(200), None);
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(2));
    }

    #[test]
    fn a_429_pauses_the_whole_tenant_for_its_hint() {
        let gate = Arc::new(Fifo::default());
        let never = AtomicBool::new(false);
        assert!(gate.enter(Instant::now(), 0, &never));
        // Grow the window first, so that only the pause can hold a request back.
        gate.done(Some(200), None);
        assert!(gate.enter(Instant::now(), 0, &never));
        let refused_at = Instant::now();
        gate.done(Some(429), Some(60));
        // A fresh request of another connection, made after the 429, waits it out.
        assert!(gate.enter(Instant::now(), 1, &never));
        assert!(refused_at.elapsed() >= Duration::from_millis(60));
    }

    #[test]
    fn a_stop_takes_a_waiting_request_out_of_the_queue() {
        let gate = Fifo::default();
        let never = AtomicBool::new(false);
        assert!(gate.enter(Instant::now(), 0, &never));
        let stop = AtomicBool::new(true);
        assert!(!gate.enter(Instant::now(), 1, &stop));
        assert!(gate.state.lock().unwrap().waiting.is_empty());
    }
}
