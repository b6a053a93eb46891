//! Segments that nothing holds: a creator killed before it marked its segment ready
//! leaves a file that no open can ever accept (`NotReady`, or a zero header), and a
//! segment of another layout version (an upgrade or a downgrade left it) is one this
//! version cannot read. Either wedges its name until someone removes the file.
//! `Table::open_or_create` replaces a never-ready one, and `shmtool clean` removes
//! both, once nothing holds the file: no process has it open or mapped. A creator at
//! work always holds it (it keeps the file open from its exclusive create to the end);
//! a dead process holds nothing; and a process that uses a segment maps it.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use nix::fcntl::{Flock, FlockArg};

use crate::error::{Error, Result};
use crate::layout::{HEADER, MAGIC, READY};

use super::{check_name, io, path_of};

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
    let magic = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
    let ready = u32::from_le_bytes(b[12..16].try_into().expect("4 bytes"));
    Ok(magic == MAGIC && ready != READY)
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
    /// It is not what `judge` accepts: left alone.
    NotAbandoned,
    /// These processes hold it: left alone.
    Held(Vec<u32>),
}

/// Removes segment `name`'s file if `judge` accepts it and no process holds it (see
/// [`holders`]). The judgement is made under an exclusive `flock` of the file and on
/// the file still at the path, so that of several processes that find the same file
/// abandoned, one removes it and the others see it gone (or a new one in its place,
/// which they leave alone). `judge` reads the file from its start.
fn remove_if(name: &str, judge: impl FnOnce(&mut File) -> std::io::Result<bool>) -> Result<Abandoned> {
    check_name(name)?;
    let path = path_of(name);
    let f = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Abandoned::Removed),
        Err(e) => return Err(io(name, "open")(e)),
    };
    let meta = f.metadata().map_err(io(name, "fstat"))?;
    if !meta.file_type().is_file() {
        return Ok(Abandoned::NotAbandoned);
    }
    let mut f = Flock::lock(f, FlockArg::LockExclusive)
        .map_err(|(_, errno)| io(name, "flock")(std::io::Error::from(errno)))?;
    // Still the file at the path? Another process may have removed it (and another
    // created a new one) while we waited for the lock.
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.dev() == meta.dev() && m.ino() == meta.ino() => {}
        _ => return Ok(Abandoned::Removed),
    }
    if !judge(&mut f).map_err(io(name, "read"))? {
        return Ok(Abandoned::NotAbandoned);
    }
    let held = holders(&path, (meta.dev(), meta.ino()), Some(f.as_raw_fd()));
    if !held.is_empty() {
        return Ok(Abandoned::Held(held));
    }
    std::fs::remove_file(&path).map_err(io(name, "unlink"))?;
    Ok(Abandoned::Removed)
}

/// Removes segment `name` if its creator never made it ready and nothing holds it.
pub fn remove_if_never_ready(name: &str) -> Result<Abandoned> {
    remove_if(name, never_ready)
}

/// Removes segment `name` if it has fairshm's magic and layout version `version` (not
/// this one's) and nothing holds it.
pub fn remove_if_version(name: &str, version: u32) -> Result<Abandoned> {
    debug_assert_ne!(version, crate::layout::LAYOUT_VERSION);
    remove_if(name, |f| {
        let b = read_start(f)?;
        Ok(b.len() == HEADER
            && u64::from_le_bytes(b[..8].try_into().expect("8 bytes")) == MAGIC
            && u32::from_le_bytes(b[8..12].try_into().expect("4 bytes")) == version)
    })
}

/// Whether `e` is what an opener gets from a never-ready file (also from other files:
/// [`remove_if_never_ready`] judges the file itself).
pub(crate) fn is_never_ready_error(e: &Error) -> bool {
    matches!(
        e,
        Error::NotReady { .. } | Error::BadMagic { found: 0, .. } | Error::Truncated { .. }
    )
}
