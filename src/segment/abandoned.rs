//! Leftovers that wedge a segment's name. A creator killed before it marked its
//! segment ready leaves a file that no open can ever accept (`NotReady`, or a zero
//! header); a segment of another layout version (left by an upgrade or a downgrade) is
//! one this version cannot read. `Table::open_or_create` replaces the first kind and
//! `shmtool clean` removes both:
//! - **never ready:** a creator holds an exclusive `flock` on its file from just after
//!   its exclusive create until `ready` is stored, and the kernel drops it when the
//!   creator dies. So a never-ready file whose lock can be taken has no creator at
//!   work. (Openers waiting for `ready` hold the file open too, so who has it open
//!   says nothing here.)
//! - **another version:** every process that uses a segment has it open or mapped, so
//!   it goes when no process does ([`holders`]).
//!
//! Either judgement is made holding that lock, on the file still at the path, so of
//! several processes that judge the same file, one removes it and the others find it
//! gone (or a new one in its place, which they leave alone).

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use nix::fcntl::{Flock, FlockArg};

use crate::error::{Error, Result};
use crate::layout::{HEADER, MAGIC, READY};

use super::{check_name, io, path_of};

/// How long a judge waits for the lock of a file (see [`lock`]).
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// The pids of the processes that have the file `(dev, ino)` at `path` open or mapped,
/// this one included, except through this process's descriptor `skip_fd`. Only the
/// processes whose `/proc` entries this user may read are seen (a segment's users are
/// its owner, its group, or root).
pub fn holders(path: &Path, (dev, ino): (u64, u64), skip_fd: Option<i32>) -> Vec<u32> {
    let me = std::process::id();
    let want = path.to_string_lossy().into_owned();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out: Vec<u32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            let open = std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
                fds.filter_map(|e| e.ok()).any(|e| {
                    let fd = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok());
                    if pid == me && fd.is_some() && fd == skip_fd {
                        return false;
                    }
                    // Follows the descriptor to its file, deleted or not.
                    std::fs::metadata(e.path()).is_ok_and(|m| m.dev() == dev && m.ino() == ino)
                })
            });
            open || std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|maps| {
                maps.lines().any(|l| {
                    // `start-end perms offset dev inode path`, the path maybe " (deleted)".
                    let l = l.strip_suffix(" (deleted)").unwrap_or(l);
                    let inode = l.split_whitespace().nth(4).and_then(|i| i.parse::<u64>().ok());
                    inode == Some(ino) && l.ends_with(&want)
                })
            })
        })
        .collect();
    out.sort_unstable();
    out
}

/// Whether the file's first bytes say it was never made ready by its creator: shorter
/// than a header and all zero (killed before its size was set or anything written), a
/// header of zeros (killed before writing it), or fairshm's magic without `ready`. Any
/// other content is not judged: it may be another program's file.
fn never_ready(f: &mut File) -> std::io::Result<bool> {
    let b = read_start(f)?;
    if b.len() < HEADER || b[..8].iter().all(|&x| x == 0) {
        return Ok(b.iter().all(|&x| x == 0));
    }
    Ok(le(&b, 0, 8) == MAGIC && le(&b, 12, 4) != READY as u64)
}

/// The little-endian integer of `n` bytes (at most 8) at `off` of header bytes `b`
/// (the caller has checked that `b` holds them).
fn le(b: &[u8], off: usize, n: usize) -> u64 {
    debug_assert!(n <= 8 && off + n <= b.len());
    b[off..off + n].iter().rev().fold(0, |a, &x| a << 8 | x as u64)
}

/// The file's first bytes, up to a header's worth (fewer if it is shorter).
pub(crate) fn read_start(f: &mut File) -> std::io::Result<Vec<u8>> {
    let mut b = vec![0u8; HEADER];
    let mut got = 0;
    while got < HEADER {
        match f.read(&mut b[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    b.truncate(got);
    Ok(b)
}

/// What [`remove_if_never_ready`] or [`remove_if_version`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Abandoned {
    /// It was removed (or was gone, or replaced by another, when looked at again).
    Removed,
    /// It is not such a leftover: left alone.
    NotLeftover,
    /// In use: a creator still holds its lock, or these processes have it open or
    /// mapped. Left alone.
    Held(Vec<u32>),
}

/// Opens segment `name`'s file and takes its exclusive lock, waiting at most
/// [`LOCK_WAIT`] (a creator holds it for the milliseconds of a creation, another judge
/// for a look). With `seen`, the `(dev, ino)` of the file the caller judged, another
/// file at the path is an answer: the one seen is gone. `Ok(Err(..))`: what to answer
/// without a lock.
fn lock(
    name: &str,
    seen: Option<(u64, u64)>,
) -> Result<std::result::Result<(Flock<File>, std::fs::Metadata), Abandoned>> {
    let path = path_of(name);
    let mut f = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Err(Abandoned::Removed)),
        Err(e) => return Err(io(name, "open")(e)),
    };
    let meta = f.metadata().map_err(io(name, "fstat"))?;
    if seen.is_some_and(|s| s != (meta.dev(), meta.ino())) {
        return Ok(Err(Abandoned::Removed));
    }
    if !meta.file_type().is_file() {
        return Ok(Err(Abandoned::NotLeftover));
    }
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    let locked = loop {
        match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
            Ok(locked) => break locked,
            Err((back, nix::errno::Errno::EWOULDBLOCK | nix::errno::Errno::EINTR))
                if std::time::Instant::now() < deadline =>
            {
                f = back;
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            Err((back, nix::errno::Errno::EWOULDBLOCK)) => {
                drop(back); // not ours to count among the holders
                return Ok(Err(Abandoned::Held(holders(&path, (meta.dev(), meta.ino()), None))));
            }
            Err((_, errno)) => return Err(io(name, "flock")(std::io::Error::from(errno))),
        }
    };
    // Still the file at the path? Another judge may have removed it (and a starter
    // created a new one) while we waited for the lock.
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.dev() == meta.dev() && m.ino() == meta.ino() => Ok(Ok((locked, meta))),
        _ => Ok(Err(Abandoned::Removed)),
    }
}

/// Removes segment `name` if its creator never made it ready and is not at work (see
/// the module docs).
pub fn remove_if_never_ready(name: &str) -> Result<Abandoned> {
    remove_if_never_ready_seen(name, None)
}

/// [`remove_if_never_ready`] of the file `seen` (`(dev, ino)`), if it is still the one
/// at the path (`Removed` if it is not: replaced by another starter, say).
pub(crate) fn remove_if_never_ready_seen(name: &str, seen: Option<(u64, u64)>) -> Result<Abandoned> {
    check_name(name)?;
    let (mut f, _) = match lock(name, seen)? {
        Ok(x) => x,
        Err(answer) => return Ok(answer),
    };
    if !never_ready(&mut f).map_err(io(name, "read"))? {
        return Ok(Abandoned::NotLeftover);
    }
    std::fs::remove_file(path_of(name)).map_err(io(name, "unlink"))?;
    Ok(Abandoned::Removed)
}

/// Removes segment `name` if it has fairshm's magic and layout version `version` (not
/// this one's) and no process has it open or mapped.
pub fn remove_if_version(name: &str, version: u32) -> Result<Abandoned> {
    debug_assert_ne!(version, crate::layout::LAYOUT_VERSION);
    check_name(name)?;
    let (mut f, meta) = match lock(name, None)? {
        Ok(x) => x,
        Err(answer) => return Ok(answer),
    };
    let b = read_start(&mut f).map_err(io(name, "read"))?;
    if b.len() < HEADER || le(&b, 0, 8) != MAGIC || le(&b, 8, 4) != version as u64 {
        return Ok(Abandoned::NotLeftover);
    }
    let path = path_of(name);
    let held = holders(&path, (meta.dev(), meta.ino()), Some(f.as_raw_fd()));
    if !held.is_empty() {
        return Ok(Abandoned::Held(held));
    }
    std::fs::remove_file(&path).map_err(io(name, "unlink"))?;
    Ok(Abandoned::Removed)
}

/// Whether `e` is what an opener gets from a never-ready file (also from other files:
/// [`remove_if_never_ready`] judges the file itself).
pub(crate) fn is_never_ready_error(e: &Error) -> bool {
    matches!(
        e,
        Error::NotReady { .. } | Error::BadMagic { found: 0, .. } | Error::Truncated { .. }
    )
}
