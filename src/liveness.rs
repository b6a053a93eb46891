//! Process slots, and telling a dead process from a live one.
//!
//! A slot records the pid and the process start time (`/proc/PID/stat` field 22, clock
//! ticks since boot). A pid alone is not an identity (pid_max is 32768 here and pids
//! are reused quickly); pid plus start time is, since a new process with the same pid
//! starts later. A zombie keeps its start time, so states `Z` and `X` count as dead,
//! but only once it is the last thread of its process: a main thread that exits alone
//! shows `Z` while the other threads still run and still hold leases.
//!
//! `/proc` is the authority, and the slow path. The fast path is the slot's owner word
//! (see `anchor`): while it holds a live anchor's tid the process is alive, one load and
//! no system call; once the kernel has marked it `OWNER_DIED` the process is dying, and
//! `/proc` says when it is dead (all its threads gone, so none can take another step).

use crate::error::{Error, Result};
use crate::layout::{owner_word as ow, proc_state as ps};
use crate::region::Region;
use crate::sync::Ordering::*;

/// What `/proc/PID/stat` says of a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcInfo {
    pub start_time: u64,
    /// The one-letter state (`R`, `S`, `Z`, ...).
    pub state: u8,
    /// Threads of the process (field 20), the zombie main thread included.
    pub num_threads: u64,
}

/// Parses a `/proc/PID/stat` line. The command name may hold spaces and parentheses,
/// so fields are counted from the last `)`.
pub fn parse_stat(stat: &str) -> Option<ProcInfo> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.bytes().next()?;
    // Field 3 is the state; num_threads is field 20 (17 further on), the start time
    // field 22.
    let num_threads = fields.nth(16)?.parse().ok()?;
    let start_time = fields.nth(1)?.parse().ok()?;
    Some(ProcInfo {
        start_time,
        state,
        num_threads,
    })
}

/// `/proc/PID/stat` of a process, or `None` if there is no such process.
pub fn proc_info(pid: u32) -> Option<ProcInfo> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat)
}

/// Whether the process `pid` that started at `start_time` is gone: no such process, a
/// zombie with no thread left but its main one, or a pid that now names another process.
pub fn is_dead(pid: u32, start_time: u64) -> bool {
    dead_by(proc_info(pid).as_ref(), start_time)
}

/// [`is_dead`]'s judgement of what `/proc` said (`None`: no such process) of a process
/// that started at `start_time`.
pub fn dead_by(info: Option<&ProcInfo>, start_time: u64) -> bool {
    match info {
        None => true,
        Some(i) => {
            i.start_time != start_time || (matches!(i.state, b'Z' | b'X') && i.num_threads <= 1)
        }
    }
}

/// Waits until one of `procs` (pid, start time) has wholly exited, or `timeout`. The
/// kernel makes a pidfd readable when the last thread of its process is gone, which is
/// the moment [`is_dead`] turns true; a pidfd pins its pid, so the start time is
/// checked once it is open. Without pidfds (Linux before 5.3) this just sleeps.
#[cfg(not(loom))]
pub fn wait_exit(procs: &[(u32, u64)], timeout: std::time::Duration) {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut fds: Vec<OwnedFd> = Vec::new();
    for &(pid, start) in procs {
        // SAFETY: pidfd_open takes a pid and flags 0; it returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        if fd < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
                return; // gone already
            }
            continue;
        }
        // SAFETY: `fd` was just returned to us and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        if is_dead(pid, start) {
            return; // exited, or the pid is another process's now
        }
        fds.push(fd);
    }
    if fds.is_empty() {
        std::thread::sleep(timeout);
        return;
    }
    let mut polls: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: std::os::fd::AsRawFd::as_raw_fd(fd),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as _,
    };
    // SAFETY: `polls` holds `polls.len()` valid pollfds on fds we own; the timeout is a
    // valid relative timespec; a null sigmask leaves the mask alone.
    unsafe {
        libc::ppoll(
            polls.as_mut_ptr(),
            polls.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
}

/// The identity of this process's pid namespace (the inode of `/proc/self/ns/pid`), 0
/// if it cannot be read. Pids, start times and `/proc` mean something only inside one
/// pid namespace: a segment records its creator's, and only processes of that one
/// register in it or judge its processes (see `Segment::check_pid_ns`).
pub fn pid_ns() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid").map_or(0, |m| m.ino())
}

/// This process's pid and start time.
pub fn me() -> (u32, u64) {
    let pid = std::process::id();
    let start = proc_info(pid).map_or(0, |i| i.start_time);
    (pid, start)
}

/// A slot as read at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotView {
    pub status: u32,
    pub pid: u32,
    pub start_time: u64,
}

pub fn view<R: Region>(r: &R, s: usize) -> SlotView {
    let rec = r.proc_slot(s);
    // Acquire: pairs with the Release store of LIVE, so the fields below are current.
    let st = rec.state.load(Acquire);
    SlotView {
        status: ps::status(st),
        pid: ps::pid(st),
        start_time: rec.start_time.load(Relaxed),
    }
}

/// Whether the process named by a state word `st` (its pid and the low 32 bits of its
/// start time, as a claim or a reaper writes them) is gone.
pub fn named_dead(st: u64) -> bool {
    match proc_info(ps::pid(st)) {
        None => true,
        Some(i) => {
            i.start_time as u32 != ps::start_lo(st)
                || (matches!(i.state, b'Z' | b'X') && i.num_threads <= 1)
        }
    }
}

/// Whether slot `s` belongs to a process that is gone, judged by `dead(pid, start)`
/// alone, not by the owner word: for rare checks (a tenant slot left WRITING), where a
/// corrupt owner word claiming a live anchor must not stall the caller. A slot still
/// being claimed is judged by the identity its claim names; a slot that is free or
/// being reaped holds no live process.
pub fn slot_dead<R: Region>(r: &R, s: usize, dead: &dyn Fn(u32, u64) -> bool) -> bool {
    let rec = r.proc_slot(s);
    // Acquire: pairs with the Release store of LIVE, so `start_time` is current.
    let st = rec.state.load(Acquire);
    match ps::status(st) {
        ps::LIVE => dead(ps::pid(st), rec.start_time.load(Relaxed)),
        ps::CLAIMING => named_dead(st),
        // No process holds the slot (or garbage does): nobody behind it is writing.
        _ => true,
    }
}

/// Whether the LIVE slot `s` of `(pid, start)` is dead: alive while its anchor is, else
/// as `dead` (the `/proc` authority) says.
pub fn live_slot_dead<R: Region>(
    r: &R,
    s: usize,
    pid: u32,
    start: u64,
    dead: &dyn Fn(u32, u64) -> bool,
) -> bool {
    // Acquire: pairs with the anchor's Release store of its tid.
    match ow::decode(r.proc_slot(s).owner_futex.load(Acquire)) {
        ow::Owner::Alive { .. } => false,
        ow::Owner::Unanchored | ow::Owner::Died => dead(pid, start),
    }
}

/// Claims a free process slot for `(pid, start_time)`; `tool`: as a tool, which
/// `per_worker` pools do not count (see `proc_state::TOOL`).
pub fn register<R: Region>(
    r: &R,
    pid: u32,
    start_time: u64,
    now: u64,
    tool: bool,
) -> Result<usize> {
    let flag = ps::kind(tool);
    let n = r.geometry().procs;
    if pid >= 1 << 24 {
        return Err(Error::InvalidRequest(format!(
            "pid {pid} does not fit 24 bits"
        )));
    }
    // Start where the pid points, so that siblings rarely race for one slot.
    let start = pid as usize % n;
    for i in 0..n {
        let s = (start + i) % n;
        let rec = r.proc_slot(s);
        // Relaxed: a probe; the CAS below re-checks with Acquire.
        let st = rec.state.load(Relaxed);
        if ps::status(st) != ps::FREE {
            continue;
        }
        // Acquire: the reaper's writes that freed the slot happen before ours. SeqCst:
        // a victim scan skips `FREE` slots, and reads their states with SeqCst after
        // its announcement among the pool's waiters; our first resident's grant reads
        // `waiters` with SeqCst after this (`residents::live_slots_leases`).
        if rec
            .state
            .compare_exchange(
                st,
                ps::make(ps::CLAIMING | flag, pid, start_time),
                SeqCst,
                Relaxed,
            )
            .is_err()
        {
            continue;
        }
        crate::ops::crash_point("register.claimed")?;
        // Relaxed, these four: the slot is ours while CLAIMING; the Release store of
        // LIVE below publishes them.
        rec.start_time.store(start_time, Relaxed);
        rec.registered_ms.store(now, Relaxed);
        rec.generation.fetch_add(1, Relaxed);
        // No anchor yet: the previous owner's OWNER_DIED must not be read as ours.
        rec.owner_futex.store(0, Relaxed);
        // No waiter of ours yet: a count left in a free slot (only a hostile write
        // leaves one) must not be taken out of `waiters` when we die.
        for p in 0..r.geometry().pools {
            r.slot_waiters(s, p).store(0, Relaxed);
        }
        // Release: the fields above are visible to whoever sees LIVE.
        rec.state
            .store(ps::make(ps::LIVE | flag, pid, start_time), Release);
        return Ok(s);
    }
    Err(Error::ProcessTableFull { max: n })
}

/// Makes the tool's registration of process `(pid, start_time)` in slot `s` a worker's
/// (it claimed tenant names first, and now acquires): clears the slot's `TOOL` flag.
/// Nothing else changes: a reaper judges the slot by its pid and start time either way.
pub fn become_worker<R: Region>(r: &R, s: usize, pid: u32, start_time: u64) -> Result<()> {
    let rec = r.proc_slot(s);
    let tool = ps::make(ps::LIVE | ps::TOOL, pid, start_time);
    // Relaxed: the flag orders nothing (the capacity recomputed after it reads the
    // slots with Acquire, and this process's own acquires follow in program order).
    match rec.state.compare_exchange(tool, ps::make(ps::LIVE, pid, start_time), Relaxed, Relaxed) {
        Ok(_) => Ok(()),
        Err(now) if now == ps::make(ps::LIVE, pid, start_time) => Ok(()),
        Err(now) => Err(Error::Corrupt(format!(
            "process slot {s}: this process's registration reads {now:#x}, not its own"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_awkward_names() {
        let line = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 \
                    987654 1000 100 18446744073709551615";
        let i = parse_stat(line).unwrap();
        assert_eq!(i.state, b'S');
        assert_eq!(i.start_time, 987654);
        assert_eq!(i.num_threads, 1);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_is_alive_and_a_changed_start_time_is_not() {
        let (pid, start) = me();
        assert!(start > 0);
        assert!(!is_dead(pid, start));
        assert!(is_dead(pid, start + 1), "a reused pid must not look alive");
        assert!(is_dead(u32::MAX >> 9, 1));
    }

    #[test]
    fn a_claim_is_judged_by_pid_and_start_time() {
        let (pid, start) = me();
        assert!(!named_dead(ps::make(ps::CLAIMING, pid, start)));
        assert!(
            named_dead(ps::make(ps::CLAIMING, pid, start + 1)),
            "a pid that now names another process does not keep a claim alive"
        );
        assert!(named_dead(ps::make(ps::CLAIMING, (1 << 24) - 1, start)));
    }

    #[test]
    fn a_registration_starts_with_no_waiters_counted_in_its_slot() {
        use crate::region::HeapRegion;
        use crate::sync::Ordering::SeqCst;
        // A free slot with counts left in it (a hostile write): its next process must
        // not have them taken out of `waiters` at its death.
        let r = HeapRegion::new(17, 1, 1, 1);
        r.slot_waiters(0, 0).store(3, SeqCst);
        r.slot_waiters(0, 16).store(1, SeqCst);
        let (pid, start) = me();
        assert_eq!(register(&r, pid, start, 1, false).unwrap(), 0);
        assert_eq!(r.slot_waiters(0, 0).load(SeqCst), 0);
        assert_eq!(r.slot_waiters(0, 16).load(SeqCst), 0);
    }
}
