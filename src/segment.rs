//! The segment: a file under `/dev/shm`, mapped shared, overlaid with the records of
//! `layout`.
//!
//! Creation writes everything, then `header.ready` last with Release; an opener waits
//! (briefly) for `ready` with Acquire and then validates every field it will trust
//! before returning: magic, version, size, the config block and its checksum, every
//! region offset (recomputed from the config, never taken on trust), and the owner.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::time::Duration;

use memmap2::MmapMut;

use crate::config::{Config, fnv1a};
use crate::error::{Error, Result};
use crate::layout::{
    Geometry, HEADER, Header, LAYOUT_VERSION, LeaseRec, LogRec, MAGIC, RateRec, POOL_RECORD, PoolRec, ProcRec, READY,
    RECORD, TENANT_POOL_RECORD, TenantPoolRec, TenantRec,
};
use crate::region::Region;
use crate::sync::Ordering::*;

mod abandoned;
mod open;

pub use abandoned::{Abandoned, holders, remove_if_never_ready, remove_if_version};
pub(crate) use abandoned::{is_never_ready_error, read_start, remove_if_never_ready_seen};

/// Where segments live.
pub const SHM_DIR: &str = "/dev/shm";
/// How long an opener waits for a creator that is still building the segment.
pub const READY_WAIT: Duration = Duration::from_millis(1000);

/// A mapped, validated segment.
pub struct Segment {
    name: String,
    /// Base of the mapping, taken once from `map` with write provenance.
    base: *mut u8,
    len: usize,
    geo: Geometry,
    cfg: Config,
    /// The segment's file, kept open so that an anchor thread can map its own page of
    /// it (see `anchor`) even after the name is unlinked.
    file: File,
    /// Opened for reading only (an observer): the mapping is `PROT_READ`, and every
    /// writing entry point of the engine refuses with `Error::ReadOnly` before it could
    /// touch it.
    read_only: bool,
    /// The guaranteed pools' places and rules, from `cfg`.
    gplaces: Vec<crate::guaranteed::GPlace>,
    grules: Vec<crate::guaranteed::Rules>,
    _map: Mapping,
}

/// The mapping, kept alive for as long as the segment.
enum Mapping {
    ReadWrite(#[allow(dead_code)] MmapMut),
    ReadOnly(#[allow(dead_code)] memmap2::Mmap),
}

// SAFETY: the mapping is only ever accessed through atomics (every record field is an
// atomic of the `sync` shim), which are designed for shared mutation from any thread.
unsafe impl Send for Segment {}
// SAFETY: as for `Send`.
unsafe impl Sync for Segment {}

/// Checks a segment name: 1 to 200 bytes, no `/`, no NUL, not `.` or `..`.
pub fn check_name(name: &str) -> Result<()> {
    let why = if name.is_empty() {
        "empty"
    } else if name.len() > 200 {
        "longer than 200 bytes"
    } else if name.contains('/') {
        "contains '/'; give the name only, not a path"
    } else if name.contains('\0') {
        "contains a NUL byte"
    } else if name == "." || name == ".." {
        "is a directory name"
    } else {
        return Ok(());
    };
    Err(Error::InvalidName {
        name: name.to_owned(),
        why,
    })
}

pub fn path_of(name: &str) -> PathBuf {
    PathBuf::from(SHM_DIR).join(name)
}

/// The `(dev, ino)` of the file named `name` now (not followed if a symlink), to tell
/// whether the name still names a file judged or mapped earlier ([`Segment::file_id`]).
pub fn named_file_id(name: &str) -> std::io::Result<(u64, u64)> {
    std::fs::symlink_metadata(path_of(name)).map(|m| (m.dev(), m.ino()))
}

fn io<'a>(name: &'a str, op: &'static str) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| match source.kind() {
        std::io::ErrorKind::NotFound => Error::NotFound {
            name: name.to_owned(),
        },
        std::io::ErrorKind::AlreadyExists => Error::AlreadyExists {
            name: name.to_owned(),
        },
        _ => Error::Io {
            name: name.to_owned(),
            op,
            source,
        },
    }
}

/// Checks a mode for a new segment: read and write for the owner, and optionally read
/// or read and write for the group; nothing else (no execute, setuid, setgid, sticky
/// or world bits).
pub fn check_mode(mode: u32) -> Result<()> {
    if mode & 0o600 != 0o600 || mode & !0o660 != 0 {
        return Err(Error::InvalidConfig(format!(
            "file mode {mode:#o}: a segment's mode is 0o600 (the owner only), 0o640 or \
             0o660 (a group too); no execute, special or world bits"
        )));
    }
    Ok(())
}

/// Whether the open file is one this process may trust as a segment: a regular file
/// with a mode fairshm sets, owned by us, or (a group mode) by a group we are in. An
/// observer (read-only) needs only a regular file: the kernel already checked that it
/// may read it.
fn check_file(name: &str, meta: &std::fs::Metadata, read_only: bool) -> Result<()> {
    let bad = |why: String| Error::BadFile {
        name: name.to_owned(),
        why,
    };
    if !meta.file_type().is_file() {
        return Err(bad("it is not a regular file".into()));
    }
    if read_only {
        return Ok(());
    }
    let mode = meta.mode() & 0o7777;
    if mode & !0o660 != 0 {
        return Err(bad(format!(
            "its mode {mode:#o} has bits fairshm never sets (execute, special or world)"
        )));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() == me {
        return Ok(());
    }
    let group_rw = mode & 0o060 == 0o060;
    let in_group = nix::unistd::getegid().as_raw() == meta.gid()
        || nix::unistd::getgroups().is_ok_and(|g| g.iter().any(|g| g.as_raw() == meta.gid()));
    if group_rw && in_group {
        return Ok(());
    }
    Err(Error::WrongOwner {
        name: name.to_owned(),
        owner: meta.uid(),
        me,
    })
}

/// Removes a segment's file. Processes that mapped it keep their mapping.
pub fn unlink(name: &str) -> Result<()> {
    check_name(name)?;
    std::fs::remove_file(path_of(name)).map_err(io(name, "unlink"))
}

impl Segment {
    /// Creates segment `name` (it must not exist) with file mode `mode`.
    pub fn create(name: &str, cfg: &Config, mode: u32) -> Result<Segment> {
        check_name(name)?;
        check_mode(mode)?;
        cfg.validate()?;
        let path = path_of(name);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&path)
            .map_err(io(name, "create"))?;
        // Held until `ready`, so that a never-ready file whose lock is free has no
        // creator at work (see `abandoned`); the kernel drops it if we die. Nobody else
        // holds a lock on a file this new, but a judge may look for a moment.
        let file = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, errno)| io(name, "flock")(std::io::Error::from(errno)))?;
        #[cfg(feature = "crash-points")]
        crate::crash::hit("create.opened");
        match Self::build(name, cfg, mode, &file) {
            Ok(seg) => Ok(seg), // `file` unlocks as it drops (the segment has its own)
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                Err(e)
            }
        }
    }

    fn build(name: &str, cfg: &Config, mode: u32, file: &File) -> Result<Segment> {
        // The umask may have narrowed the mode; set exactly what was asked.
        file.set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(io(name, "chmod"))?;
        let geo = cfg.geometry();
        file.set_len(geo.total_size as u64)
            .map_err(io(name, "ftruncate"))?;
        #[cfg(feature = "crash-points")]
        crate::crash::hit("create.sized");
        // Every page reserved now: on a full tmpfs, the first write to a page never
        // allocated raises SIGBUS in whichever process makes it (a worker, mid-acquire,
        // in a lease record first used that day). Reserved, a full tmpfs is a typed
        // error here, at creation.
        nix::fcntl::posix_fallocate(
            std::os::fd::AsRawFd::as_raw_fd(file),
            0,
            geo.total_size as libc::off_t,
        )
        .map_err(|errno| io(name, "reserving its pages in /dev/shm (fallocate)")(errno.into()))?;
        let seg = Self::map(name, file, geo, cfg.clone(), false)?;
        let bytes = cfg.encode();
        // SAFETY:
        //   * the config block lies inside the mapping: `geo` places it at
        //     `config_off..config_off + config_len`, and `total_size` covers it;
        //   * nobody else reads it before `ready` is set below (openers wait for it).
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                seg.base.add(geo.config_off),
                bytes.len(),
            );
        }
        crate::capacity::reset(&seg, cfg);
        crate::guaranteed::shared::init(&seg);
        let h = seg.header();
        // Relaxed, the header's fields: nobody trusts them before the Release store of
        // READY below, which publishes them.
        h.magic.store(MAGIC, Relaxed);
        h.version.store(LAYOUT_VERSION, Relaxed);
        h.total_size.store(geo.total_size as u64, Relaxed);
        h.config_checksum.store(fnv1a(&bytes), Relaxed);
        let dir = geo.directory();
        for (e, (kind, off, size, count)) in h.regions.iter().zip(dir) {
            e.kind.store(kind, Relaxed);
            e.offset.store(off as u32, Relaxed);
            e.record_size.store(size as u32, Relaxed);
            e.count.store(count as u32, Relaxed);
        }
        h.n_regions.store(dir.len() as u32, Relaxed);
        h.created_unix_ms.store(crate::clock::unix_ms(), Relaxed);
        h.creator_pid.store(std::process::id(), Relaxed);
        h.pid_ns.store(crate::liveness::pid_ns(), Relaxed);
        #[cfg(feature = "crash-points")]
        crate::crash::hit("create.written");
        // Release: everything above is visible to an opener that sees READY.
        h.ready.store(READY, Release);
        Ok(seg)
    }

    fn map(name: &str, file: &File, geo: Geometry, cfg: Config, read_only: bool) -> Result<Segment> {
        let (base, len, map) = if read_only {
            // SAFETY: as below; the mapping is PROT_READ, and nothing writes through
            // `base` (the engine refuses every writing call on a read-only segment).
            let map = unsafe { memmap2::Mmap::map(file) }.map_err(io(name, "mmap"))?;
            (map.as_ptr() as *mut u8, map.len(), Mapping::ReadOnly(map))
        } else {
            // SAFETY: the file is a tmpfs file that every user maps shared; all access
            // to the mapping goes through atomics, so concurrent writers are not UB. A
            // process that truncates the file under us can still cause SIGBUS: that is
            // documented.
            let mut map = unsafe { MmapMut::map_mut(file) }.map_err(io(name, "mmap"))?;
            (map.as_mut_ptr(), map.len(), Mapping::ReadWrite(map))
        };
        debug_assert_eq!(base as usize % RECORD, 0, "mmap returned an unaligned base");
        let file = file.try_clone().map_err(io(name, "dup"))?;
        let (gplaces, grules) = Self::guaranteed_of(&cfg, &geo);
        Ok(Segment {
            file,
            name: name.to_owned(),
            base,
            len,
            geo,
            cfg,
            read_only,
            gplaces,
            grules,
            _map: map,
        })
    }

    /// A second read-write mapping of the same segment, for a thread of this process
    /// that must outlive this one's mapping (the anchor: see `anchor`).
    pub fn remap(&self) -> Result<Segment> {
        let seg = Self::map(&self.name, &self.file, self.geo, self.cfg.clone(), false)?;
        // Invariant G (see `rec`) holds only for a mapping of the full size.
        if seg.len != self.geo.total_size {
            return Err(Error::Truncated {
                name: self.name.clone(),
                size: seg.len as u64,
                need: self.geo.total_size as u64,
            });
        }
        Ok(seg)
    }

    /// The `(dev, ino)` of the file this mapping is of: the name may since have been
    /// given to another segment (`shmtool clean`, then a new master's create).
    pub fn file_id(&self) -> Result<(u64, u64)> {
        let meta = self.file.metadata().map_err(io(&self.name, "fstat"))?;
        Ok((meta.dev(), meta.ino()))
    }

    /// `Err(Truncated)` if the file is now shorter than this mapping: touching the
    /// missing part would raise SIGBUS. A truncation after this check can still do so
    /// (see the README's trust model: whoever can write the segment is trusted).
    pub fn check_size(&self) -> Result<()> {
        let size = self.file.metadata().map_err(io(&self.name, "fstat"))?.len();
        if size < self.len as u64 {
            return Err(Error::Truncated {
                name: self.name.clone(),
                size,
                need: self.len as u64,
            });
        }
        Ok(())
    }

    /// `Err(ForeignPidNamespace)` if this process's pid namespace is not the creator's
    /// (both known): its pids and `/proc` say nothing of the segment's processes, so it
    /// must neither register (the others could not judge its pid) nor judge theirs (an
    /// unanchored one would look dead, one that only maps the segment would not be seen).
    /// `what` names the refused step.
    pub fn check_pid_ns(&self, what: &'static str) -> Result<()> {
        // Relaxed: written before `ready`, which the open read with Acquire.
        let theirs = self.header().pid_ns.load(Relaxed);
        let ours = crate::liveness::pid_ns();
        if theirs == 0 || ours == 0 || theirs == ours {
            return Ok(());
        }
        Err(Error::ForeignPidNamespace {
            name: self.name.clone(),
            what,
            ours,
            theirs,
        })
    }

    /// The header's `registry` futex word (see `layout::Header`).
    pub fn registry(&self) -> &crate::sync::AtomicU32 {
        &self.header().registry
    }

    /// Whether this is an observer's read-only mapping.
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    pub fn name(&self) -> &str {
        &self.name
    }
    /// The segment's open file.
    pub fn file(&self) -> &File {
        &self.file
    }
    pub fn config(&self) -> &Config {
        &self.cfg
    }
    pub fn size(&self) -> usize {
        self.len
    }
    /// When the segment was created (`CLOCK_REALTIME` ms) and by which pid.
    pub fn created(&self) -> (u64, u32) {
        let h = self.header();
        // Relaxed: written before `ready`, which opening acquired.
        (h.created_unix_ms.load(Relaxed), h.creator_pid.load(Relaxed))
    }

    /// Where the guaranteed pools of `cfg` live under `geo` (none for a geometry
    /// without a guaranteed region, such as the probe's), and their rules.
    fn guaranteed_of(
        cfg: &Config,
        geo: &Geometry,
    ) -> (Vec<crate::guaranteed::GPlace>, Vec<crate::guaranteed::Rules>) {
        if geo.guaranteed_words == 0 {
            return (Vec::new(), Vec::new());
        }
        let (places, words) = cfg.guaranteed_places(geo);
        debug_assert_eq!(words, geo.guaranteed_words);
        let rules = cfg.guaranteed.iter().map(crate::guaranteed::Rules::new).collect();
        (places, rules)
    }

    fn header(&self) -> &Header {
        assert!(self.len >= HEADER, "a mapping shorter than its header");
        // SAFETY: the header is the first 256 bytes, inside the mapping (just checked).
        unsafe { self.rec(0) }
    }

    /// The record of type `T` at byte `off`.
    ///
    /// # Safety
    /// `off` must be a multiple of 64 with `off + size_of::<T>() <= self.len`. The
    /// accessors of [`Region`] guarantee it from an index checked against the geometry
    /// (Invariant G below); `rec` checks it again in debug builds.
    ///
    /// Invariant G: every record that `self.geo` places (an index below its region's
    /// count) lies inside the mapping, at a multiple of 64. `geo` comes from the config
    /// the segment was created with, or was validated against on open, where
    /// `geo.total_size == self.len` is checked; the probe mapping of `open` has a
    /// geometry of empty regions, which places nothing.
    #[inline]
    unsafe fn rec<T>(&self, off: usize) -> &T {
        debug_assert!(
            off % RECORD == 0 && off + std::mem::size_of::<T>() <= self.len,
            "record at {off} outside the {}-byte mapping",
            self.len
        );
        // SAFETY:
        //   * `off + size_of::<T>() <= len` (the caller's contract), so the record lies
        //     in the mapping, which lives as long as `self`;
        //   * `base` is page-aligned and `off` a multiple of 64, so `T` (align <= 8) is aligned;
        //   * every `T` here is a `#[repr(C)]` struct of atomics, valid for any bit
        //     pattern, and only ever accessed through those atomics.
        unsafe { &*(self.base.add(off) as *const T) }
    }
}

impl Region for Segment {
    fn geometry(&self) -> &Geometry {
        &self.geo
    }
    // Each accessor checks its index against the geometry (a panic, like slice
    // indexing, is the backstop: callers check indices read from shared memory first),
    // which by Invariant G places the record inside the mapping.
    #[inline]
    fn pool(&self, p: usize) -> &PoolRec {
        assert!(p < self.geo.pools);
        // SAFETY: `p < pools`, so by Invariant G the record is in the pools region.
        unsafe { self.rec(self.geo.pools_off + p * POOL_RECORD) }
    }
    #[inline]
    fn tenant(&self, t: usize) -> &TenantRec {
        assert!(t < self.geo.tenants);
        // SAFETY: `t < tenants`: in the tenant directory (Invariant G).
        unsafe { self.rec(self.geo.tenants_off + t * RECORD) }
    }
    #[inline]
    fn tenant_pool(&self, p: usize, t: usize) -> &TenantPoolRec {
        assert!(p < self.geo.pools && t < self.geo.tenants);
        // SAFETY: `p * tenants + t < pools * tenants`: in the tenant-pool region (G).
        unsafe {
            self.rec(self.geo.tenant_pools_off + (p * self.geo.tenants + t) * TENANT_POOL_RECORD)
        }
    }
    #[inline]
    fn proc_slot(&self, s: usize) -> &ProcRec {
        assert!(s < self.geo.procs);
        // SAFETY: `s < procs`: in the process region (Invariant G).
        unsafe { self.rec(self.geo.procs_off + s * RECORD) }
    }
    #[inline(always)] // on both hot paths; left to the heuristics one call stayed a call
    fn lease(&self, l: usize) -> &LeaseRec {
        assert!(l < self.geo.leases());
        // SAFETY: `l < leases`: in the lease region (Invariant G).
        unsafe { self.rec(self.geo.leases_off + l * RECORD) }
    }
    #[inline(always)] // on the acquire's hot path (the decision log)
    fn log(&self, s: usize, i: usize) -> &LogRec {
        assert!(s < self.geo.procs && i < self.geo.log_per_proc);
        // SAFETY: `s * log_per_proc + i < procs * log_per_proc`: in the log region (G).
        unsafe { self.rec(self.geo.logs_off + (s * self.geo.log_per_proc + i) * RECORD) }
    }
    #[inline]
    fn rate(&self, t: usize) -> &RateRec {
        assert!(t < self.geo.tenants);
        // SAFETY: `t < tenants`: in the rates region (Invariant G).
        unsafe { self.rec(self.geo.rates_off + t * RECORD) }
    }
    fn g_pools(&self) -> usize {
        self.gplaces.len()
    }
    fn g_rules(&self, gp: usize) -> &crate::guaranteed::Rules {
        &self.grules[gp]
    }
    fn g_head_rec(&self, gp: usize) -> &crate::layout::GHeadRec {
        let p = self.gplaces[gp];
        // SAFETY: `gplaces` comes from the config under which `geo` was validated
        // (Invariant G): the head record of pool `gp` (`HEAD_WORDS` words, the size of
        // `GHeadRec`) lies in the guaranteed region, 128-aligned.
        unsafe { self.rec(p.head_off) }
    }
    fn g_block(&self, gp: usize, b: usize) -> &[crate::sync::AtomicU64] {
        let p = self.gplaces[gp];
        assert!(b < p.blocks);
        let off = p.blocks_off + b * p.block_words * 8;
        debug_assert!(off + p.block_words * 8 <= self.len && off % 8 == 0);
        // SAFETY:
        //   * `b < blocks`, so the block's `block_words` words lie in the guaranteed
        //     region, inside the mapping (Invariant G), which lives as long as `self`;
        //   * `off` is a multiple of 8 from a page-aligned base: aligned for `AtomicU64`;
        //   * atomics are valid for any bit pattern and only accessed as atomics.
        unsafe {
            std::slice::from_raw_parts(self.base.add(off) as *const crate::sync::AtomicU64, p.block_words)
        }
    }
    #[inline]
    fn resident(&self, l: usize) -> Option<&crate::layout::ResidentRec> {
        if l >= self.geo.residents {
            return None;
        }
        // SAFETY: `l < residents`: in the residents region (Invariant G).
        Some(unsafe { self.rec(self.geo.residents_off + l * RECORD) })
    }
    #[inline]
    fn waiting_rec(&self, s: usize, i: usize) -> &crate::layout::WaitingRec {
        let per = self.geo.waiting_records();
        assert!(s < self.geo.procs && i < per);
        // SAFETY: `s < procs` and `i < waiting_records()`: in the waiting region
        // (Invariant G).
        unsafe { self.rec(self.geo.waiting_off + (s * per + i) * RECORD) }
    }
}
