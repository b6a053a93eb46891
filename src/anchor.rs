//! The anchor: how a process's death wakes a waiter, with no polling.
//!
//! Every registered process starts one thread of its own, the *anchor*, which:
//! 1. blocks every signal (process-directed signals go to the application's threads);
//! 2. maps the segment again, for itself, and keeps that mapping while its slot's owner
//!    word (`ProcRec.owner_futex`) is on its robust list: the kernel writes to that
//!    address when the thread dies, so it must never point at anything else (the
//!    `Table`'s own mapping may go first);
//! 3. puts that word on its robust list (`set_robust_list`), whose head and single
//!    entry live in leaked heap memory;
//! 4. stores its tid in the word (Release), reports success, and then watches its
//!    peers (`peers`) until it is told to detach, which only `Table`'s drop does
//!    ([`Anchor::detach`]).
//!
//! When the anchor exits, and it exits only with its process (SIGKILL, `exit`, a
//! crash, `exec`), the kernel walks its robust list, finds the word still holding the
//! anchor's tid, replaces the tid by `FUTEX_OWNER_DIED` and, if a waiter set
//! `FUTEX_WAITERS`, wakes one waiter of the word (a shared-futex wake, so it reaches
//! other processes). The anchors of the other processes arm those words (`peers`); so
//! does a blocked acquirer of a process whose anchor could not start, which sleeps on
//! them and its pool at once (`futex_waitv`): that side is `waiting::watch`.
//!
//! Step 3 comes before step 4, so a tid is never in the word without the kernel's
//! promise to clear it. The robust list is set only on this thread, which the library
//! created and which never takes a glibc robust mutex: `set_robust_list` replaces
//! glibc's own list for the calling thread, which is harmless only there.
//!
//! A forked child has no anchor (fork copies only the calling thread); it registers in
//! a slot of its own and attaches its own anchor.
//!
//! Detaching is the reverse, in an order that never leaves a tid in the word without
//! the kernel's promise to mark it: the word becomes 0 (unanchored: `/proc` judges),
//! its watchers are woken, then `set_robust_list(NULL)`, then the list is freed, the
//! mapping dropped, and the thread ends.

use std::io;
use std::sync::{Arc, mpsc};
use std::time::Duration;

use crate::layout::owner_word;
use crate::region::Region;
use crate::segment::Segment;
use crate::sync::{AtomicU32, Ordering::*};

/// How long a registration waits for its anchor to report.
const ATTACH_WAIT: Duration = Duration::from_secs(5);

/// `struct robust_list` of `<linux/futex.h>`.
#[repr(C)]
struct RobustList {
    next: *mut RobustList,
}

/// `struct robust_list_head` of `<linux/futex.h>`.
#[repr(C)]
struct RobustListHead {
    list: RobustList,
    futex_offset: libc::c_long,
    list_op_pending: *mut RobustList,
}

/// The head and the one entry, together in one allocation.
#[repr(C)]
struct RobustAnchor {
    head: RobustListHead,
    entry: RobustList,
}

/// A running anchor thread of this process.
pub struct Anchor {
    /// Non-zero: detach. A futex word the thread sleeps on (process-shared flags, like
    /// every futex here, though only this process uses it).
    stop: Arc<AtomicU32>,
    thread: std::thread::JoinHandle<()>,
}

impl Anchor {
    /// Detaches the anchor (see the module docs) and waits for its thread to end. The
    /// slot's owner word is 0 afterwards.
    pub fn detach(self) {
        // Release: pairs with the Acquire load in `peers::run`.
        self.stop.store(1, Release);
        crate::waiting::wake_word(self.stop.as_ptr(), u32::MAX);
        let _ = self.thread.join();
    }
}

/// Starts this process's anchor for process slot `slot` of `seg`, registered by the
/// process `me` (pid, start time), and returns it once the slot's owner word holds the
/// anchor's tid.
pub fn attach(seg: &Segment, slot: usize, me: (u32, u64)) -> io::Result<Anchor> {
    let seg = seg.remap().map_err(io::Error::other)?;
    let (tx, rx) = mpsc::channel();
    let stop = Arc::new(AtomicU32::new(0));
    let stop_word = Arc::clone(&stop);
    let thread = std::thread::Builder::new()
        .name("fairshm-anchor".into())
        .stack_size(256 << 10)
        .spawn(move || {
            if let Err(e) = run(seg, slot, me, &tx, &stop_word) {
                // Failed before the word held a tid.
                let _ = tx.send(Err(e));
            }
        })?;
    match rx.recv_timeout(ATTACH_WAIT) {
        Ok(Ok(())) => Ok(Anchor { stop, thread }),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the anchor thread did not report",
        )),
    }
}

/// A shared (never private) `FUTEX_WAKE` of every waiter of `word`.
fn wake_all(word: *mut u32) {
    crate::waiting::wake_word(word, u32::MAX);
}

/// The anchor thread's body: attaches, reports, watches its peers until `stop`,
/// detaches.
fn run(
    seg: Segment,
    slot: usize,
    me: (u32, u64),
    tx: &mpsc::Sender<io::Result<()>>,
    stop: &AtomicU32,
) -> io::Result<()> {
    // SAFETY: sigfillset initialises `set`; pthread_sigmask only reads it and changes
    // this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    let word = &seg.proc_slot(slot).owner_futex;
    let word_ptr = word.as_ptr();
    debug_assert_eq!(word_ptr as usize % 4, 0, "a futex word is 4-byte aligned");
    let anchor = Box::into_raw(Box::new(RobustAnchor {
        head: RobustListHead {
            list: RobustList {
                next: std::ptr::null_mut(),
            },
            futex_offset: 0,
            list_op_pending: std::ptr::null_mut(),
        },
        entry: RobustList {
            next: std::ptr::null_mut(),
        },
    }));
    // SAFETY: `anchor` comes from Box::into_raw and is freed only after the kernel has
    // let go of the list (below), so every pointer into it stays valid while the
    // kernel may read it. The list is circular: head -> entry -> head; the futex is at
    // entry + futex_offset, inside `seg`'s mapping, which this thread owns and drops
    // only after the kernel has let go of the list.
    let rc = unsafe {
        let head = &raw mut (*anchor).head;
        let entry = &raw mut (*anchor).entry;
        (*head).list.next = entry;
        (*entry).next = &raw mut (*head).list;
        (*head).futex_offset = (word_ptr as isize - entry as isize) as libc::c_long;
        libc::syscall(
            libc::SYS_set_robust_list,
            head,
            std::mem::size_of::<RobustListHead>(),
        )
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        // SAFETY: the kernel refused the list; nothing else points into `anchor`.
        drop(unsafe { Box::from_raw(anchor) });
        return Err(e);
    }
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() } as u32;
    debug_assert!(tid & !owner_word::TID_MASK == 0);
    // Release: a process that reads the tid (Acquire) also sees the slot as LIVE.
    word.store(tid, Release);
    let _ = tx.send(Ok(()));
    crate::peers::run(&seg, slot, stop, me);
    // 0 first: from here the kernel would leave the word alone at our exit (it no
    // longer holds our tid), and `/proc` judges the slot. AcqRel: WAITERS bits set by
    // watchers are read and dropped here.
    // (Not on a truncated segment: the word's page may be gone, and touching it would
    // raise SIGBUS; the kernel's write at our exit fails harmlessly there.)
    if seg.check_size().is_ok() {
        word.swap(0, AcqRel);
        wake_all(word_ptr);
    }
    // SAFETY: a NULL head unregisters the list: the kernel reads nothing at our exit.
    unsafe {
        libc::syscall(
            libc::SYS_set_robust_list,
            std::ptr::null::<RobustListHead>(),
            std::mem::size_of::<RobustListHead>(),
        )
    };
    // SAFETY: the kernel no longer holds the list, and nothing else points into it.
    drop(unsafe { Box::from_raw(anchor) });
    drop(seg);
    Ok(())
}
