//! This process's registration in the segment's process table: as a worker (on its
//! first acquire, or `register`), as a tool, or only to claim tenant names; again
//! after a fork. The anchor that makes its death wake waiters starts here.

use super::{Engine, slot_of};
use crate::anchor;
use crate::clock;
use crate::error::{Error, Result};
use crate::liveness;
use crate::sync::Ordering::*;

impl Engine {
    /// Registers this process as a worker now (it would be on its first acquire), so
    /// that `per_worker` pools count it. Returns its process slot.
    pub fn register(&self) -> Result<usize> {
        self.process_slot()
    }

    /// This process's slot as a worker (a tool's, for a tool's handle), registering it
    /// (again, after a fork) if needed, or making a registration that only claimed
    /// tenant names so far a worker's.
    #[inline]
    pub fn process_slot(&self) -> Result<usize> {
        let pid = crate::selfid::pid() as u64;
        // Acquire: pairs with the Release stores in `register_slow` (same process,
        // other thread), so the registration it names is complete.
        match slot_of(self.reg.load(Acquire), pid) {
            Some(slot) => Ok(slot),
            None => self.register_slow(pid, self.tool),
        }
    }

    /// This process's slot, of either kind, for a call that is no worker's (claiming a
    /// tenant's name to set its rates, say): a process not registered yet registers as
    /// a tool, which `per_worker` pools do not count until it acquires.
    pub(crate) fn claimer_slot(&self) -> Result<usize> {
        let pid = crate::selfid::pid() as u64;
        match self.registered(pid) {
            Some(slot) => Ok(slot),
            None => self.register_slow(pid, true),
        }
    }

    /// The slot this handle registered for process `pid`, if it did (a forked child's
    /// inherited handle names the parent's), of either kind.
    #[inline]
    pub(crate) fn registered(&self, pid: u64) -> Option<usize> {
        // Acquire, both: as in `process_slot`.
        slot_of(self.reg.load(Acquire), pid).or_else(|| slot_of(self.claimed.load(Acquire), pid))
    }

    /// Whether this process has a running anchor of this handle's registration (a
    /// forked child has none until it registers; an anchor may also fail to start).
    pub(crate) fn anchored(&self) -> bool {
        let pid = crate::selfid::pid() as u64;
        self.anchor
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|(p, _)| *p == pid)
    }

    /// Test-only (feature `internals`): detaches this process's anchor, as if it had
    /// never started (its owner word reads unanchored from then on), so that a blocked
    /// acquire of this process watches the processes ahead of it itself.
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub fn detach_anchor(&self) {
        let taken = self.anchor.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some((_, a)) = taken {
            a.detach();
        }
    }

    /// Registers this process (as a tool if `tool`), or makes its tool's registration a
    /// worker's (`tool` false).
    #[cold]
    fn register_slow(&self, pid: u64, tool: bool) -> Result<usize> {
        self.writable("registering a worker")?;
        self.seg.check_pid_ns("registering a worker")?;
        let _g = self.reg_lock.lock().unwrap_or_else(|e| e.into_inner());
        // Relaxed, these two: under the lock, which the stores below are made under.
        if let Some(slot) = slot_of(self.reg.load(Relaxed), pid) {
            return Ok(slot);
        }
        if let Some(slot) = slot_of(self.claimed.load(Relaxed), pid) {
            if !tool {
                // It claimed names so far; now it works: counted from here on.
                // Relaxed: this process's own start time, stored with `claimed`.
                let start = self.start.load(Relaxed);
                liveness::become_worker(&self.seg, slot, pid as u32, start)?;
                // Release: as below.
                self.reg.store(pid << 32 | (slot as u64 + 1), Release);
                self.claimed.store(0, Relaxed);
                crate::capacity::recompute(&self.seg, self.config());
            }
            return Ok(slot);
        }
        let (pid32, start) = liveness::me();
        let now = clock::segment_now();
        let slot = match liveness::register(&self.seg, pid32, start, now, tool) {
            Err(Error::ProcessTableFull { .. }) => {
                self.reap_dead_as(crate::layout::noticed::CALL)?;
                liveness::register(&self.seg, pid32, start, now, tool)?
            }
            other => other?,
        };
        crate::ops::crash_point("register.live")?;
        // The anchor makes our death wake waiters. Without one (it could not start) we
        // are judged by `/proc`, through the sweeps; `Snapshot` shows which processes
        // are anchored.
        let attached = anchor::attach(&self.seg, slot, (pid32, start)).ok();
        let attached_ok = attached.is_some();
        let mut a = self.anchor.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, inherited)) = a.take() {
            // The parent's: its thread does not exist here; leave it alone.
            std::mem::forget(inherited);
        }
        *a = attached.map(|x| (pid, x));
        drop(a);
        self.start.store(start, Relaxed);
        // Release: see the Acquire load in `process_slot`. A worker's handle that
        // registered as a tool keeps it in `claimed`, which the acquire does not test.
        let word = if tool && !self.tool {
            &self.claimed
        } else {
            &self.reg
        };
        word.store(pid << 32 | (slot as u64 + 1), Release);
        if attached_ok {
            // Release: pairs with the Acquire load in `peers::run`, which then sees our
            // slot LIVE with our anchor's tid, and watches it.
            self.seg.registry().fetch_add(1, Release);
            crate::waiting::wake_word(self.seg.registry().as_ptr(), u32::MAX);
        }
        // A process that died with no live process to notice it (the last worker) is
        // still LIVE in its slot, holding its permits, until our anchor's first scan
        // reaps it. Reaped now, before our first acquire and before the pools are
        // sized: its permits are back for that acquire, and a `per_worker` pool does
        // not count a worker that is gone (Semian's count, kept by the kernel, drops
        // at the exit).
        self.reap_dead_as(crate::layout::noticed::REGISTER)?;
        crate::capacity::recompute(&self.seg, self.config());
        Ok(slot)
    }
}
