//! Finding segments by their header, and removing those no live process uses.

use std::fs::OpenOptions;
use std::mem::offset_of;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::layout::{HEADER, Header, LAYOUT_VERSION, MAGIC, READY};
use crate::segment::{SHM_DIR, path_of};
use crate::table::Table;

use super::report::{liveness, processes_counted};

/// A segment header, read from the file's first bytes (not mapped).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HeaderInfo {
    pub layout_version: u32,
    pub ready: bool,
    pub total_size: u64,
    pub created_unix_ms: u64,
    pub creator_pid: u32,
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

/// Reads the header of the file at `path` with `read(2)`: never follows a symbolic
/// link, never blocks on a FIFO, never maps (so a truncated file cannot raise SIGBUS).
/// `Err` says why the file is not a fairshm segment.
pub fn read_header(path: &Path) -> std::result::Result<HeaderInfo, String> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| e.to_string())?;
    let ft = meta.file_type();
    if ft.is_symlink() {
        return Err("a symbolic link".into());
    }
    if ft.is_dir() || ft.is_fifo() || ft.is_socket() || ft.is_block_device() || ft.is_char_device()
    {
        return Err("not a regular file".into());
    }
    let mut f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| e.to_string())?;
    let b = crate::segment::read_start(&mut f).map_err(|e| e.to_string())?;
    let got = b.len();
    if got < HEADER {
        return Err(format!("{got} bytes, shorter than a header ({HEADER})"));
    }
    let magic = u64_at(&b, offset_of!(Header, magic));
    if magic != MAGIC {
        return Err(format!("no fairshm header (magic {magic:#018x})"));
    }
    let h = HeaderInfo {
        layout_version: u32_at(&b, offset_of!(Header, version)),
        ready: u32_at(&b, offset_of!(Header, ready)) == READY,
        total_size: u64_at(&b, offset_of!(Header, total_size)),
        created_unix_ms: u64_at(&b, offset_of!(Header, created_unix_ms)),
        creator_pid: u32_at(&b, offset_of!(Header, creator_pid)),
    };
    if h.total_size != meta.len() {
        return Err(format!(
            "{} bytes where its header says {}",
            meta.len(),
            h.total_size
        ));
    }
    Ok(h)
}

/// One file of the shared-memory directory.
#[derive(Clone, Debug, Serialize)]
pub struct Listed {
    pub name: String,
    /// The file's size in bytes.
    pub size: u64,
    /// Its header, when it has a fairshm one.
    pub header: Option<HeaderInfo>,
    /// Why it cannot be read as a segment of this version (`None`: it can).
    pub unreadable: Option<String>,
    /// Registered processes, by liveness (see [`liveness`]); a process counts once,
    /// however many slots it holds (one per registered handle).
    pub live: usize,
    pub dying: usize,
    pub dead: usize,
}

/// Every file of `/dev/shm`, each recognised by its header (see [`list_dir`]).
pub fn list() -> Result<Vec<Listed>> {
    list_dir(Path::new(SHM_DIR))
}

/// Every regular file of `dir`, sorted by name: fairshm segments with their header
/// and process counts, anything else marked unreadable with the reason. Nothing is
/// written. (Segments are opened by name, so their counts are read only when `dir`
/// is `/dev/shm`.)
pub fn list_dir(dir: &Path) -> Result<Vec<Listed>> {
    let io = |op| {
        move |source| Error::Io {
            name: dir.display().to_string(),
            op,
            source,
        }
    };
    let mut out = Vec::new();
    for ent in std::fs::read_dir(dir).map_err(io("read_dir"))? {
        let ent = ent.map_err(io("read_dir"))?;
        let name = ent.file_name().to_string_lossy().into_owned();
        let path = ent.path();
        let size = std::fs::symlink_metadata(&path).map_or(0, |m| m.len());
        let mut l = Listed {
            name: name.clone(),
            size,
            header: None,
            unreadable: None,
            live: 0,
            dying: 0,
            dead: 0,
        };
        match read_header(&path) {
            Err(why) => l.unreadable = Some(why),
            Ok(h) if h.layout_version != LAYOUT_VERSION => {
                l.unreadable = Some(format!(
                    "layout version {}, this shmtool reads {LAYOUT_VERSION}",
                    h.layout_version
                ));
                l.header = Some(h);
            }
            Ok(h) => {
                l.header = Some(h);
                if dir == Path::new(SHM_DIR) {
                    match Table::open_observer(&name) {
                        Ok(t) => {
                            let procs = t.try_snapshot().map(|s| s.processes).unwrap_or_default();
                            let seen: Vec<_> = procs.iter().map(|p| (liveness(p), p.pid)).collect();
                            let count = |of| processes_counted(seen.iter().copied(), &[of]);
                            (l.live, l.dying, l.dead) =
                                (count("alive"), count("dying"), count("dead"));
                        }
                        Err(e) => l.unreadable = Some(e.to_string()),
                    }
                }
            }
        }
        out.push(l);
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The pids of the processes other than this one that have the file at `path` open
/// or mapped (see `segment::holders`; processes whose `/proc` entries this
/// user may not read are not seen).
pub fn mapped_by(path: &Path) -> Vec<u32> {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::metadata(path) else {
        return Vec::new();
    };
    let me = std::process::id();
    let mut pids = crate::segment::holders(path, (m.dev(), m.ino()), None);
    pids.retain(|&p| p != me);
    pids
}

/// What [`clean`] did with one segment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Clean {
    Removed,
    /// Not removed: these live processes use it (registered, or mapping it).
    InUse {
        pids: Vec<u32>,
    },
}

/// Removes segment `name` if no live process uses it: none registered alive (or
/// dying) in its process table, and none with it open or mapped. With `force`, removes
/// it anyway (its users keep their mappings; new openers will not find it). A segment
/// of another layout version (left by an upgrade or a downgrade) goes when no process
/// has it open or mapped, and one its creator never made ready (killed while creating
/// it) when that creator is gone (see `segment::abandoned`). Any other file that is
/// not a readable segment is never removed: `Err`. (A process that opens the segment
/// between the check and the removal keeps a mapping of a removed file, as with
/// `--force`: clean segments when no server is starting.)
pub fn clean(name: &str, force: bool) -> Result<Clean> {
    let path = path_of(name);
    let t = match Table::open_observer(name) {
        Ok(t) => t,
        Err(e) => return clean_unreadable(name, force, e),
    };
    // From another pid namespace every process of the segment would look dead.
    t.region().check_pid_ns("judging which processes use it")?;
    let snap = t.try_snapshot()?;
    drop(t);
    let mut pids: Vec<u32> = snap
        .processes
        .iter()
        .filter(|p| liveness(p) != "dead")
        .map(|p| p.pid)
        .collect();
    pids.extend(mapped_by(&path));
    pids.sort_unstable();
    pids.dedup();
    if !pids.is_empty() && !force {
        return Ok(Clean::InUse { pids });
    }
    Table::unlink(name)?;
    Ok(Clean::Removed)
}

/// [`clean`] of a segment that `open_observer` refused with `e`: one of another layout
/// version or one never made ready goes when nothing holds it (or with `force`); any
/// other file stays, and `e` is returned.
fn clean_unreadable(name: &str, force: bool, e: Error) -> Result<Clean> {
    use crate::segment::{self, Abandoned};
    let judged = match &e {
        Error::VersionMismatch { found, .. } => segment::remove_if_version(name, *found)?,
        other if segment::is_never_ready_error(other) => segment::remove_if_never_ready(name)?,
        _ => return Err(e),
    };
    match judged {
        Abandoned::Removed => Ok(Clean::Removed),
        Abandoned::NotLeftover => Err(e),
        Abandoned::Held(_) if force => {
            Table::unlink(name)?;
            Ok(Clean::Removed)
        }
        Abandoned::Held(pids) => Ok(Clean::InUse { pids }),
    }
}
