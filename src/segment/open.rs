//! Opening an existing segment: waiting for its creator, then validating every field
//! the opener will trust (see `segment`).

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::time::{Duration, Instant};

use super::{Segment, check_file, check_name, io, path_of};
use crate::config::{Config, fnv1a};
use crate::error::{Error, Result};
use crate::layout::{Geometry, HEADER, LAYOUT_VERSION, MAGIC, READY};
use crate::sync::Ordering::*;

impl Segment {
    /// Opens an existing segment, validating it; with `expected`, its config must be
    /// exactly that one. Waits up to `ready_wait` for a creator still building it.
    pub fn open(name: &str, expected: Option<&Config>, ready_wait: Duration) -> Result<Segment> {
        Self::open_mode(name, expected, ready_wait, false)
    }

    /// Opens an existing segment for reading only, as an observer: whoever may read the
    /// file (its owner, root, a group it was shared with) may observe it. Validated
    /// like any open.
    pub fn open_read_only(name: &str, ready_wait: Duration) -> Result<Segment> {
        Self::open_mode(name, None, ready_wait, true)
    }

    fn open_mode(
        name: &str,
        expected: Option<&Config>,
        ready_wait: Duration,
        read_only: bool,
    ) -> Result<Segment> {
        check_name(name)?;
        // O_NOFOLLOW: a symlink planted at the path is refused (ELOOP), never followed
        // into a file outside /dev/shm. O_NONBLOCK: opening a FIFO planted there does not
        // block (it is refused below as not a regular file).
        let file = OpenOptions::new()
            .read(true)
            .write(!read_only)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path_of(name))
            .map_err(|e| {
                if e.raw_os_error() == Some(libc::ELOOP) {
                    Error::BadFile {
                        name: name.to_owned(),
                        why: "it is a symbolic link".into(),
                    }
                } else {
                    io(name, "open")(e)
                }
            })?;
        let meta = file.metadata().map_err(io(name, "fstat"))?;
        check_file(name, &meta, read_only)?;
        let deadline = crate::clock::after(Instant::now(), ready_wait);
        // A creator between create and ftruncate shows a short file: wait for it.
        let mut size = meta.len();
        while size < HEADER as u64 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
            size = file.metadata().map_err(io(name, "fstat"))?.len();
        }
        if size < HEADER as u64 {
            return Err(Error::Truncated {
                name: name.to_owned(),
                size,
                need: HEADER as u64,
            });
        }
        let placeholder = Geometry::new(0, 0, 0, 0, 0);
        let probe = Self::map(name, &file, placeholder, Config::default(), read_only)?;
        let h = probe.header();
        // Relaxed, the header's fields: read after the Acquire load of READY, which
        // published them (before it, only to name what is wrong).
        loop {
            let magic = h.magic.load(Relaxed);
            if magic != 0 && magic != MAGIC {
                return Err(Error::BadMagic {
                    name: name.to_owned(),
                    found: magic,
                    expected: MAGIC,
                });
            }
            // Acquire: pairs with the creator's Release store of READY.
            if h.ready.load(Acquire) == READY {
                break;
            }
            if Instant::now() >= deadline {
                if magic == 0 && h.version.load(Relaxed) == 0 && h.creator_pid.load(Relaxed) == 0 {
                    return Err(Error::BadMagic {
                        name: name.to_owned(),
                        found: 0,
                        expected: MAGIC,
                    });
                }
                return Err(Error::NotReady {
                    name: name.to_owned(),
                    creator_pid: h.creator_pid.load(Relaxed),
                });
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if h.magic.load(Relaxed) != MAGIC {
            let found = h.magic.load(Relaxed);
            return Err(Error::BadMagic {
                name: name.to_owned(),
                found,
                expected: MAGIC,
            });
        }
        let version = h.version.load(Relaxed);
        if version != LAYOUT_VERSION {
            return Err(Error::VersionMismatch {
                name: name.to_owned(),
                found: version,
                expected: LAYOUT_VERSION,
            });
        }
        let total = h.total_size.load(Relaxed);
        if total != probe.len as u64 {
            return Err(Error::Truncated {
                name: name.to_owned(),
                size: probe.len as u64,
                need: total,
            });
        }
        let cfg = probe.read_config()?;
        let geo = cfg.geometry();
        if geo.total_size != probe.len {
            return Err(Error::Corrupt(format!(
                "segment {name:?}: its config needs {} bytes, the file has {}",
                geo.total_size, probe.len
            )));
        }
        // The region directory must be exactly the one the config makes, and the rest
        // of it empty: nothing is placed from a number read back from the segment.
        let dir = geo.directory();
        let n = h.n_regions.load(Relaxed) as usize;
        if n != dir.len() {
            return Err(Error::Corrupt(format!(
                "segment {name:?}: the region directory has {n} entries, this version {}",
                dir.len()
            )));
        }
        for (i, e) in h.regions.iter().enumerate() {
            let found = (
                e.kind.load(Relaxed),
                e.offset.load(Relaxed) as usize,
                e.record_size.load(Relaxed) as usize,
                e.count.load(Relaxed) as usize,
            );
            let want = dir.get(i).copied().unwrap_or((0, 0, 0, 0));
            if found != want {
                return Err(Error::Corrupt(format!(
                    "segment {name:?}: region directory entry {i} is \
                     (kind, offset, record size, count) {found:?}, its config makes {want:?}"
                )));
            }
        }
        if let Some(asked) = expected
            && let Some(what) = cfg.diff(asked)
        {
            return Err(Error::ConfigMismatch {
                name: name.to_owned(),
                what,
            });
        }
        let (gplaces, grules) = Self::guaranteed_of(&cfg, &geo);
        Ok(Segment {
            geo,
            cfg,
            gplaces,
            grules,
            ..probe
        })
    }

    /// Copies the config block out (never parsed in place) and checks its checksum.
    fn read_config(&self) -> Result<Config> {
        let h = self.header();
        let entry = &h.regions[0];
        let (kind, off, len) = (
            entry.kind.load(Relaxed),
            entry.offset.load(Relaxed) as usize,
            entry.record_size.load(Relaxed) as usize,
        );
        if kind != crate::layout::region_kind::CONFIG
            || off != HEADER
            || off.checked_add(len).is_none_or(|end| end > self.len)
            || len > 1 << 24
        {
            return Err(Error::Corrupt(format!(
                "segment {:?}: config block at {off}+{len} lies outside {} bytes",
                self.name, self.len
            )));
        }
        let mut bytes = vec![0u8; len];
        // SAFETY:
        //   * `off..off + len` lies inside the mapping (checked just above);
        //   * `bytes` is a fresh allocation of `len` bytes, so the ranges cannot overlap;
        //   * the block is immutable after `ready`; a hostile writer can only make the
        //     copy garbage, which the checksum and `decode` reject.
        unsafe { std::ptr::copy_nonoverlapping(self.base.add(off), bytes.as_mut_ptr(), len) };
        let sum = fnv1a(&bytes);
        let want = h.config_checksum.load(Relaxed);
        if sum != want {
            return Err(Error::Corrupt(format!(
                "segment {:?}: config checksum {sum:#x} does not match header {want:#x}",
                self.name
            )));
        }
        Config::decode(&bytes)
    }
}
