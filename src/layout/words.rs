//! The bit layout of every state and op word of the segment, and the codes stored in
//! them: one module per word. (The records that hold the words are in `layout`;
//! `shm-layout.md` documents both.)

/// How a death was noticed (`ProcRec.death_info`, low half).
pub mod noticed {
    /// An anchor watching its peers' owner words: woken by the kernel at the death.
    pub const WATCHER: u32 = 1;
    /// An anchor's periodic sweep (unanchored processes, missed wakes).
    pub const SWEEP: u32 = 2;
    /// A blocked acquirer (woken by the kernel, or its own sweep).
    pub const WAITER: u32 = 3;
    /// An explicit `reap_dead`, or a registration that found the table full.
    pub const CALL: u32 = 4;
    /// A registration, which reaps the dead that nobody noticed (the last worker's)
    /// before its first acquire and before the pools are sized.
    pub const REGISTER: u32 = 5;

    /// The code's name, as the snapshot shows it.
    pub fn name(code: u32) -> &'static str {
        match code {
            WATCHER => "watcher",
            SWEEP => "sweep",
            WAITER => "waiter",
            CALL => "call",
            REGISTER => "register",
            _ => "unknown",
        }
    }
}

/// A resident record's word ([`ResidentRec::word`](crate::layout::ResidentRec::word)).
///
/// | bits   | field        | meaning                                                  |
/// |--------|--------------|----------------------------------------------------------|
/// | 0..24  | `generation` | the claim generation of the lease this word describes    |
/// | 24..28 | `state`      | one of the states below                                  |
/// | 28..32 | (zero)       |                                                          |
/// | 32..64 | `arg`        | `IN_CALL`: calls in progress; `REVOKED`: the revoker, as lease index + 1 (bits 32..48) and the low 16 bits of its generation (48..64); else 0 |
///
/// A word whose generation is not its lease's current one describes nothing.
pub mod resident_word {
    pub const GEN_MASK: u64 = 0xFF_FFFF;
    /// Written when the acquire is published: not evictable yet.
    pub const PENDING: u32 = 0;
    /// Granted, no call in progress: evictable.
    pub const IDLE: u32 = 1;
    /// `arg` calls in progress: not evictable.
    pub const IN_CALL: u32 = 2;
    /// Revoked by the acquire `arg` names: its unit in the pool word is the revoker's;
    /// the release of this lease gives back only the tenant's held unit.
    pub const REVOKED: u32 = 3;
    /// Released (or being released) unrevoked: no longer revocable.
    pub const CLOSED: u32 = 4;

    #[inline]
    pub fn make(generation: u32, state: u32, arg: u32) -> u64 {
        (generation as u64 & GEN_MASK) | ((state as u64 & 0xF) << 24) | ((arg as u64) << 32)
    }
    #[inline]
    pub fn generation(w: u64) -> u32 {
        (w & GEN_MASK) as u32
    }
    #[inline]
    pub fn state(w: u64) -> u32 {
        ((w >> 24) & 0xF) as u32
    }
    #[inline]
    pub fn arg(w: u64) -> u32 {
        (w >> 32) as u32
    }
    /// `arg` naming revoker lease `lease` of generation `generation`.
    #[inline]
    pub fn revoker(lease: usize, generation: u32) -> u32 {
        debug_assert!(lease < crate::layout::MAX_LEASES);
        (lease as u32 + 1) | ((generation & 0xFFFF) << 16)
    }
    /// The revoker an `arg` names: (lease index, low 16 bits of its generation).
    #[inline]
    pub fn revoker_of(arg: u32) -> Option<(usize, u32)> {
        match arg & 0xFFFF {
            0 => None,
            i => Some((i as usize - 1, arg >> 16)),
        }
    }
    pub fn name(state: u32) -> &'static str {
        match state {
            PENDING => "pending",
            IDLE => "idle",
            IN_CALL => "in_call",
            REVOKED => "revoked",
            CLOSED => "closed",
            _ => "corrupt",
        }
    }
}

/// The residency of a lease, in its third input word (`LeaseRec.inputs[2]`), which
/// fair share leaves 0: set by the protocol for the leases of `evict` pools.
///
/// | bits   | field        | meaning                                                 |
/// |--------|--------------|---------------------------------------------------------|
/// | 0..16  | `victim`     | a transfer's victim lease index                         |
/// | 16..40 | `victim_gen` | that lease's generation                                 |
/// | 40..62 | (zero)       |                                                         |
/// | 62     | `TRANSFER`   | this acquire's pool step is revoking the victim         |
/// | 63     | `RESIDENT`   | the lease is a resident (its record is kept)            |
pub mod residency {
    pub const RESIDENT: u64 = 1 << 63;
    pub const TRANSFER: u64 = 1 << 62;
    #[inline]
    pub fn is_resident(w: u64) -> bool {
        w & RESIDENT != 0
    }
    /// A transfer's victim: (lease index, generation).
    #[inline]
    pub fn victim(w: u64) -> Option<(usize, u32)> {
        (w & TRANSFER != 0).then_some(((w & 0xFFFF) as usize, ((w >> 16) & 0xFF_FFFF) as u32))
    }
    #[inline]
    pub fn transfer(lease: usize, generation: u32) -> u64 {
        debug_assert!(lease < crate::layout::MAX_LEASES);
        RESIDENT | TRANSFER | lease as u64 | ((generation as u64 & 0xFF_FFFF) << 16)
    }
}

/// Two u32 halves in one u64: `lo | hi << 32`.
pub mod pair {
    #[inline]
    pub fn make(lo: u32, hi: u32) -> u64 {
        lo as u64 | ((hi as u64) << 32)
    }
    #[inline]
    pub fn lo(w: u64) -> u32 {
        w as u32
    }
    #[inline]
    pub fn hi(w: u64) -> u32 {
        (w >> 32) as u32
    }
}

/// The two op words: a pool's `word` and a (pool, tenant)'s `held`. Each holds a count
/// and the *tag* of the last op that changed it, changed only by CAS.
///
/// | bits   | field     | meaning                                                   |
/// |--------|-----------|-----------------------------------------------------------|
/// | 0..24  | `count`   | units in use (pool word) or held (held word)              |
/// | 24..40 | `lease`   | 0: no op yet; else lease index + 1 of the last op applied |
/// | 40     | `release` | that op was a release (0: an acquire)                     |
/// | 41..64 | `gen`     | low 23 bits of that lease's claim generation              |
///
/// The tag attributes the last change of each word to a lease, so that a process that
/// dies right after its CAS can be told to have made it. Whoever replaces a tag first
/// records the change in that lease's state word ([`lease_state::POOL_DONE`] /
/// [`lease_state::HELD_DONE`]): see `ops`.
pub mod op_word {
    pub const COUNT_BITS: u32 = 24;
    pub const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
    /// Largest count a word holds: the largest capacity a pool may have.
    pub const MAX_COUNT: u32 = (1 << COUNT_BITS) - 1;
    pub const LEASE_MASK: u64 = 0xFFFF;
    pub const REL_BIT: u64 = 1 << 16; // within the tag
    pub const GEN_SHIFT: u32 = 17; // within the tag
    pub const GEN_MASK: u32 = (1 << 23) - 1;

    /// The op a tag names.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Tag {
        pub lease: usize,
        pub release: bool,
        /// Low 23 bits of the lease's claim generation.
        pub generation: u32,
    }

    #[inline]
    pub fn count(w: u64) -> u32 {
        (w & COUNT_MASK) as u32
    }
    /// The raw tag (bits 24..64 shifted down).
    #[inline]
    pub fn raw_tag(w: u64) -> u64 {
        w >> COUNT_BITS
    }
    #[inline]
    pub fn make(count: u32, raw_tag: u64) -> u64 {
        debug_assert!(count <= MAX_COUNT, "count {count} exceeds 24 bits");
        (count as u64 & COUNT_MASK) | (raw_tag << COUNT_BITS)
    }
    /// The raw tag of lease `idx`'s acquire or release in cycle `generation`.
    #[inline]
    pub fn make_tag(idx: usize, release: bool, generation: u32) -> u64 {
        debug_assert!(idx < crate::layout::MAX_LEASES);
        (idx as u64 + 1)
            | if release { REL_BIT } else { 0 }
            | (((generation & GEN_MASK) as u64) << GEN_SHIFT)
    }
    #[inline]
    pub fn tag(w: u64) -> Option<Tag> {
        let t = raw_tag(w);
        match t & LEASE_MASK {
            0 => None,
            i => Some(Tag {
                lease: i as usize - 1,
                release: t & REL_BIT != 0,
                generation: (t >> GEN_SHIFT) as u32 & GEN_MASK,
            }),
        }
    }
}

/// The pool word ([`op_word`]): `in_use` and the last op's tag.
pub mod pool_word {
    pub use super::op_word::count as in_use;
}

/// The held word of a (pool, tenant) ([`op_word`]): units held and the last op's tag.
pub mod held_word {
    pub use super::op_word::count as held;
}

/// Lease state word. See `shm-layout.md` for the transition table.
///
/// | bits  | field        | meaning                                                 |
/// |-------|--------------|---------------------------------------------------------|
/// | 0..4  | `state`      | one of the states below                                 |
/// | 4     | `HELD_DONE`  | the current op's change to the tenant's held word is made |
/// | 5     | `POOL_DONE`  | the current op's change to the pool word is made        |
/// | 6     | `EXTRA_DONE` | the current op's change to the pool's extra word is made |
/// | 7     | `CHARGES_EXTRA` | the lease charges the pool's extra word             |
/// | 8..32 | `generation` | claim generation, bumped by the claiming CAS (wraps at 2^24) |
///
/// The two flags are set only in `ACQUIRING` and `RELEASING`, by whoever replaces the
/// op's tag in a word before the owner has finished (or by a reaper converting an
/// interrupted acquire into a release: see `recovery`). Every CAS on this word names
/// the full generation, so a settler that lags behind can never move a later cycle.
pub mod lease_state {
    pub const GEN_MASK: u32 = 0xFF_FFFF;
    pub const HELD_DONE: u32 = 0x10;
    pub const POOL_DONE: u32 = 0x20;
    /// The op's change to the pool's `extra` word is made.
    pub const EXTRA_DONE: u32 = 0x40;
    /// The op charges the pool's `extra` word too (the policy decided so, and the
    /// decision is recorded here before any effect; kept through HELD and RELEASING).
    pub const CHARGES_EXTRA: u32 = 0x80;
    pub const FLAGS: u32 = HELD_DONE | POOL_DONE | EXTRA_DONE;
    #[inline]
    pub fn state(s: u32) -> u32 {
        s & 0x0F
    }
    #[inline]
    pub fn flags(s: u32) -> u32 {
        s & FLAGS
    }
    #[inline]
    pub fn generation(s: u32) -> u32 {
        s >> 8
    }
    #[inline]
    pub fn make(generation: u32, state: u32) -> u32 {
        ((generation & GEN_MASK) << 8) | (state & 0xFF)
    }

    pub const FREE: u32 = 0;
    /// Owned by its process, fields being written, not visible to anyone.
    pub const CLAIMED: u32 = 1;
    /// An acquire is applying its units: to the held word, then to the pool word.
    pub const ACQUIRING: u32 = 2;
    /// Granted: counted in the pool's `in_use` and the tenant's `held`.
    pub const HELD: u32 = 3;
    /// A release is taking its units back: from the pool word, then the held word.
    pub const RELEASING: u32 = 4;
    /// Could not be understood or finished (garbage fields, or words that contradict
    /// it): counted nowhere, never claimed, until `repair` rebuilds the counters of the
    /// pools without it and frees it.
    pub const QUARANTINED: u32 = 5;

    pub fn name(s: u32) -> &'static str {
        match s {
            FREE => "free",
            CLAIMED => "claimed",
            ACQUIRING => "acquiring",
            HELD => "held",
            RELEASING => "releasing",
            QUARANTINED => "quarantined",
            _ => "corrupt",
        }
    }
}

/// Tenant directory state word.
///
/// | bits   | field    | meaning                                      |
/// |--------|----------|----------------------------------------------|
/// | 0..8   | `len`    | name length in bytes (1..=48)                |
/// | 8..10  | `status` | 0 empty, 1 writing, 2 ready                  |
/// | 16..32 | `writer` | process slot + 1 of the writer, while writing |
pub mod tenant_state {
    pub const EMPTY: u32 = 0;
    pub const WRITING: u32 = 1;
    pub const READY: u32 = 2;
    #[inline]
    pub fn len(s: u32) -> usize {
        (s & 0xFF) as usize
    }
    #[inline]
    pub fn status(s: u32) -> u32 {
        (s >> 8) & 0x3
    }
    #[inline]
    pub fn writer(s: u32) -> Option<usize> {
        match s >> 16 {
            0 => None,
            w => Some(w as usize - 1),
        }
    }
    #[inline]
    pub fn make(status: u32, len: usize, writer: Option<usize>) -> u32 {
        debug_assert!(len <= crate::layout::MAX_NAME && status <= READY);
        let w = writer.map_or(0, |w| w as u32 + 1);
        (len as u32) | (status << 8) | (w << 16)
    }
}

/// Process slot state word.
///
/// | bits   | field      | meaning                                                  |
/// |--------|------------|----------------------------------------------------------|
/// | 0..7   | `status`   | 0 free, 1 claiming, 2 live, 3 reaping                    |
/// | 7      | `TOOL`     | a tool's registration, or a name claimer's: no worker    |
/// | 8..32  | `pid`      | pid of the registrant (claiming, live) or the reaper     |
/// | 32..64 | `start_lo` | low 32 bits of that process's start time (clock ticks)   |
///
/// The claim CAS names pid and start time together, so a slot whose claimant died
/// before writing `start_time` is still judged by the identity of its process, not by
/// its pid alone (which another process may have by then).
pub mod proc_state {
    pub const FREE: u32 = 0;
    pub const CLAIMING: u32 = 1;
    pub const LIVE: u32 = 2;
    pub const REAPING: u32 = 3;
    /// A flag beside the status of a CLAIMING or LIVE registrant: it registered as a
    /// tool (`Table::open_tool`, as `shmtool rates` does to claim a tenant), or only to
    /// claim a tenant's name (it has not acquired: the flag is cleared then), which a
    /// `per_worker` pool does not count as a worker.
    pub const TOOL: u32 = 0x80;
    /// The status, without the `TOOL` flag.
    #[inline]
    pub fn status(s: u64) -> u32 {
        (s & 0x7F) as u32
    }
    /// The flag a registrant's CLAIMING and LIVE statuses carry: `TOOL` for a tool.
    #[inline]
    pub fn kind(tool: bool) -> u32 {
        if tool { TOOL } else { 0 }
    }
    /// Whether the registrant is a tool.
    #[inline]
    pub fn is_tool(s: u64) -> bool {
        s as u32 & TOOL != 0
    }
    #[inline]
    pub fn pid(s: u64) -> u32 {
        (s >> 8) as u32 & 0xFF_FFFF
    }
    /// The low 32 bits of the named process's start time.
    #[inline]
    pub fn start_lo(s: u64) -> u32 {
        (s >> 32) as u32
    }
    /// A state word naming process `(pid, start_time)`.
    #[inline]
    pub fn make(status: u32, pid: u32, start_time: u64) -> u64 {
        debug_assert!(pid < (1 << 24) && status < 0x100);
        status as u64 | (pid as u64) << 8 | (start_time as u32 as u64) << 32
    }
}

/// Robust-futex owner word (`ProcRec.owner_futex`), in the kernel's format for robust
/// futexes (`Documentation/locking/robust-futex-ABI.rst`):
///
/// | bits   | field         | meaning                                               |
/// |--------|---------------|-------------------------------------------------------|
/// | 0..30  | `tid`         | the anchor thread's tid; 0: no anchor                 |
/// | 30     | `OWNER_DIED`  | set by the kernel when the anchor exits               |
/// | 31     | `WAITERS`     | set by a waiter: the kernel then wakes one at death   |
pub mod owner_word {
    pub const WAITERS: u32 = 0x8000_0000;
    pub const OWNER_DIED: u32 = 0x4000_0000;
    pub const TID_MASK: u32 = 0x3fff_ffff;

    /// What an owner word says of its process.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Owner {
        /// No anchor (not attached yet, or attaching failed): ask `/proc`.
        Unanchored,
        /// The anchor thread is alive, hence so is its process.
        Alive { tid: u32, watched: bool },
        /// The anchor has exited: its process is dying or dead (or has exec'd).
        Died,
    }

    #[inline]
    pub fn decode(w: u32) -> Owner {
        if w & OWNER_DIED != 0 {
            Owner::Died
        } else if w & TID_MASK == 0 {
            Owner::Unanchored
        } else {
            Owner::Alive {
                tid: w & TID_MASK,
                watched: w & WAITERS != 0,
            }
        }
    }
}
