//! The fixed layout of the segment: `#[repr(C)]` records of atomics, the bit layout of
//! every state word, and the geometry that places the regions.
//!
//! `shm-layout.md` documents every byte described here; `tests/layout_doc.rs` parses
//! that document and checks it against [`field_table`], so neither can drift alone.
//!
//! No record holds a pointer: they refer to each other by index, and every index read
//! back from shared memory is bounds-checked by the reader before use.

use crate::sync::{AtomicU32, AtomicU64};

mod words;
pub use words::{
    held_word, lease_state, noticed, op_word, owner_word, pair, pool_word, proc_state, residency,
    resident_word, tenant_state,
};

/// `b"FAIRSHM\0"` read as a little-endian u64.
pub const MAGIC: u64 = u64::from_le_bytes(*b"FAIRSHM\0");
/// Bumped on every change to this file that moves or reinterprets a byte.
pub const LAYOUT_VERSION: u32 = 9;
/// `header.ready` once the creator has written everything else.
pub const READY: u32 = 0x5245_4459; // "READ" "Y"
/// Every record but `PoolRec` is one cache line, so that two records never share one.
pub const RECORD: usize = 64;
/// `TenantPoolRec` is two lines: the counters of the tenant's own ops in the first, the
/// retry-after estimator's state (written on refusals only) in the second.
pub const TENANT_POOL_RECORD: usize = 128;
/// `PoolRec` is two 128-byte halves: the pool word alone in the first (128 bytes, since
/// x86 prefetches cache lines in adjacent pairs), everything else in the second.
pub const POOL_RECORD: usize = 256;
/// Longest tenant or pool name, in bytes.
pub const MAX_NAME: usize = 48;
/// Lease indices are stored in 16 bits (as index + 1), so at most this many leases.
pub const MAX_LEASES: usize = 65_535;

/// Bytes of the header: magic, version and sizes, then the region directory.
pub const HEADER: usize = 256;
/// Entries of the region directory (unused ones are zero): room for the regions of
/// later policies (rates, residents, a decision log, the guaranteed policy).
pub const MAX_REGIONS: usize = 12;
/// Entries of each process slot's decision log (a ring of [`LogRec`]s).
pub const LOG_PER_PROCESS: usize = 128;

/// Kinds of region in the directory. Never renumbered.
pub mod region_kind {
    pub const CONFIG: u32 = 1;
    pub const POOLS: u32 = 2;
    pub const TENANTS: u32 = 3;
    pub const TENANT_POOLS: u32 = 4;
    pub const PROCS: u32 = 5;
    pub const LEASES: u32 = 6;
    pub const LOGS: u32 = 7;
    pub const RATES: u32 = 8;
    /// The guaranteed pools' heads and state blocks, as 8-byte words (seed 001).
    pub const GUARANTEED: u32 = 9;
    /// One [`super::ResidentRec`] per lease: the residency of the `evict` pools' leases.
    pub const RESIDENTS: u32 = 10;
    /// Each process slot's waiters per pool ([`super::WaitingRec`]s), so that a reaper
    /// takes a dead process's waiters out of `PoolRec.waiters`.
    pub const WAITING: u32 = 11;
}

/// Pools whose waiter counts one [`WaitingRec`] holds.
pub const WAITING_PER_RECORD: usize = 16;

/// Segment header, at offset 0. Written once by the creator; `ready` last.
#[repr(C)]
pub struct Header {
    pub magic: AtomicU64,
    pub version: AtomicU32,
    pub ready: AtomicU32,
    pub total_size: AtomicU64,
    pub config_checksum: AtomicU64,
    /// `CLOCK_REALTIME` of the creation, in ms since the Unix epoch.
    pub created_unix_ms: AtomicU64,
    pub creator_pid: AtomicU32,
    /// Entries used in `regions`.
    pub n_regions: AtomicU32,
    /// A futex word bumped (and woken) by each registration once its anchor holds its
    /// tid: the anchors watching their peers (`peers`) sleep on it to learn of a new
    /// process to watch.
    pub registry: AtomicU32,
    pub reserved32: AtomicU32,
    /// The creator's pid namespace (`liveness::pid_ns`); 0 if unknown (or a segment
    /// made before this field was).
    pub pid_ns: AtomicU64,
    /// The region directory: where each region starts, its record size and count.
    pub regions: [RegionEntry; MAX_REGIONS],
}

/// One entry of the region directory.
#[repr(C)]
pub struct RegionEntry {
    /// A [`region_kind`]; 0 for an unused entry.
    pub kind: AtomicU32,
    /// Byte offset of the region in the segment.
    pub offset: AtomicU32,
    /// Bytes per record (the config block: its length, as one record).
    pub record_size: AtomicU32,
    pub count: AtomicU32,
}

/// One pool's live state.
///
/// The pool word, which every acquire and release of the pool CASes, sits alone in the
/// first 128 bytes; the fields every op only reads (`limits`, `active_weight`,
/// `waiters`) sit in the second half, so reading them never steals the word's line.
#[repr(C)]
pub struct PoolRec {
    /// See [`op_word`]: units in use plus the tag of the last op applied to them.
    pub word: AtomicU64,
    pub pad: [AtomicU64; 15],
    /// See [`pair`]: effective capacity (`POOL`, low half) and floor (`SHARE_FLOOR`,
    /// high half), one word so that one load reads a consistent pair.
    pub limits: AtomicU64,
    /// Cached sum of the weights of the active tenants (see `admission::touch`).
    pub active_weight: AtomicU64,
    /// When `active_weight` must next be recomputed by a scan, in ms: the earliest
    /// instant a counted tenant's window can end (0: at the next decision).
    pub rescan_at_ms: AtomicU64,
    /// Number of waiters about to sleep or asleep on `wake`; a release wakes (and
    /// bumps `wake`) only when it is not zero.
    pub waiters: AtomicU32,
    /// Which tenant's window set `rescan_at_ms`: 1 + its directory index (a counted
    /// tenant that held nothing at the scan), or 0 when none did (the scan's cap, one
    /// window ahead, set it) or it is not known. Read by an over-share refusal to tell
    /// whether that tenant may really leave then (`admission::active::leaves_at`).
    pub rescan_for: AtomicU32,
    /// Two futex words, one per waiter class: the low half (bytes 160..164) for
    /// waiters refused under their share, the high half (164..168) for those at or
    /// over it (see `waiting`).
    pub wake: AtomicU64,
    /// An op word a policy may charge besides the pool word and the held word (a
    /// count and the last op's tag, see [`op_word`]): loans, for a lending policy.
    /// Fair share leaves it 0.
    pub extra: AtomicU64,
    /// Residents revoked by acquires of this pool (an `evict` pool), ever. Bumped by
    /// the revoker after its revocation and before its lease is `HELD`, so that a
    /// check that sees it unchanged across its scan saw no transfer complete unseen
    /// (see `repair`).
    pub evictions: AtomicU64,
    /// The server's queue (see `server_queue`), written by requests whose wait in it is
    /// known: the current window's start (low 32 bits of ms, never 0; high half) and
    /// the least wait seen in it (µs, low half); 0 before the first.
    pub queue_window: AtomicU64,
    /// The base of the waits: the least seen, rising slowly (µs; from 0).
    pub queue_base: AtomicU64,
    /// The stretch of over-share turns (sixteenths, low half; 0 reads as 1) and the
    /// queue of the last closed window: its mean wait over the base (µs, high half).
    pub queue_stretch: AtomicU64,
    /// The waits noted in the current window: their count (high 24 bits) and their
    /// sum (µs, each at most `server_queue::MAX_SAMPLE_US`; low 40 bits).
    pub queue_sum: AtomicU64,
    /// When this pool last refused a request (ms, the refuser's `now`; 0: never since
    /// this field exists): a window's queue stretches hints only while refusals are
    /// recent, since only refused requests' retries can be what it holds (see
    /// `server_queue::note`).
    pub queue_refused_ms: AtomicU64,
    /// The mean hold of the units held in this pool at the last scan of its active set,
    /// µs, as their releases come: the units over the rate at which they free, each
    /// holder's units over its hold average (`TenantPoolRec::hold_ewma_us`; 0: none
    /// known). How often a release comes, for a refusal that any release can end
    /// (`pool_full`; see `retry`).
    pub hold_mean_us: AtomicU64,
    /// The `now` of the last scan of the active set (`admission::active::rescan`), ms:
    /// the time `active_weight` is as of (0: none yet, or a segment written before this
    /// field). A decision or a release at an earlier `now` (a caller's explicit time
    /// that steps back, or a clock read that a scan overtook) is behind the sum.
    pub scanned_at_ms: AtomicU64,
    pub reserved: [AtomicU64; 2],
}

/// One entry of the tenant directory. Claimed lock-free, never freed.
#[repr(C)]
pub struct TenantRec {
    /// See [`tenant_state`]: status, name length, writer.
    pub state: AtomicU32,
    /// Configured weight (1 when the config names none).
    pub weight: AtomicU32,
    /// FNV-1a 64 of the name, to skip most byte comparisons.
    pub hash: AtomicU64,
    /// The name, little-endian, zero-padded.
    pub name: [AtomicU64; 6],
}

/// Counters of one tenant in one pool. Every field of the first line is on the line that
/// the tenant's own ops already own (they CAS `held`), so the bookkeeping costs no extra
/// cache miss; the second line is the retry-after estimator's, touched by refusals only.
#[repr(C)]
pub struct TenantPoolRec {
    /// See [`op_word`]: units held plus the tag of the last op applied to them.
    pub held: AtomicU64,
    /// Last acquire attempt or release, in ms (0 = never).
    pub last_active_ms: AtomicU64,
    pub grants: AtomicU64,
    /// Refusals by reason code, index = `ReasonCode as usize - 1`.
    pub refusals: [AtomicU64; 4],
    /// Moving average of this tenant's hold times in this pool, in µs, saturating
    /// (drives retry-after).
    pub hold_ewma_us: AtomicU32,
    /// Low 32 bits of the earliest due time (ms) of the hints given since this tenant's
    /// last grant here, 0 = none: a refusal before it is counted an early return.
    pub first_due_lo: AtomicU32,
    /// The tenant's turn clock here, in µs of the callers' `now`: the turn promised to
    /// its latest refused request (see `retry`).
    pub turn_at_us: AtomicU64,
    /// The sum of the hints given, in ms (their count is the rule's refusals).
    pub hint_ms_total: AtomicU64,
    /// Refusals that came before an earlier hint of this tenant's had run out.
    pub early_returns: AtomicU64,
    /// Acquires refused `too_many_residents` (an `evict` pool with nothing evictable).
    pub too_many_residents: AtomicU64,
    /// This tenant's residents revoked by others' acquires (or its own).
    pub revoked: AtomicU64,
    /// Residents this tenant's acquires revoked.
    pub evictions: AtomicU64,
    /// The gap between this tenant's refusals here: the low 32 bits of the latest
    /// one's time (ms, never 0; 0 = none yet), and above them the moving average of
    /// the gaps, µs (see `retry::next_gap`).
    pub refusal_gap: AtomicU64,
    /// The moving average (1/8) of the hints given to this tenant here, µs (0: none
    /// yet; see `retry::next_hint_avg`). Beside `refusal_gap` it says how many of its
    /// refused requests are out waiting their hints (`server_queue::others_out`).
    pub hint_avg_us: AtomicU64,
}

/// One process slot.
#[repr(C)]
pub struct ProcRec {
    /// See [`proc_state`]: status, pid and the low 32 bits of the start time, one
    /// word, so that a claim names the whole identity of its process at once.
    pub state: AtomicU64,
    /// Process start time in clock ticks since boot (`/proc/PID/stat` field 22).
    pub start_time: AtomicU64,
    /// Robust-futex owner word: the tid of the process's anchor thread, on that thread's
    /// robust list; the kernel sets `FUTEX_OWNER_DIED` when it exits (see `anchor`).
    pub owner_futex: AtomicU32,
    /// Bumped each time the slot is claimed.
    pub generation: AtomicU32,
    pub registered_ms: AtomicU64,
    /// The last death reaped from this slot (kept until the next one): the dead
    /// process's pid (low half) and the pid of the process that noticed it (high).
    pub death_pids: AtomicU64,
    /// When that death was noticed (the reaper took the slot), `CLOCK_REALTIME` ms.
    pub death_unix_ms: AtomicU64,
    /// How it was noticed (a [`noticed`] code, low half) and the leases it released
    /// (high half).
    pub death_info: AtomicU64,
    /// Decisions this slot's processes have logged, ever: the next one goes to entry
    /// `log_head % LOG_PER_PROCESS` of the slot's ring (see `decisions`). Written by
    /// the slot's process with plain stores; never reset.
    pub log_head: AtomicU64,
}

/// Sixteen pools' counts of one process slot's waiters (see `blocking`): count `p % 16`
/// of the slot's record `p / 16` is how many of the slot's threads are announced in
/// pool `p`'s `waiters`. A slot has `ceil(pools / 16)` records.
#[repr(C)]
pub struct WaitingRec {
    /// Written by the slot's waiters (`fetch_add` after announcing themselves in the
    /// pool, `fetch_sub` before leaving it); emptied by the reaper of a dead process
    /// (`swap` to 0), which takes what it found out of the pools' `waiters`.
    pub counts: [AtomicU32; WAITING_PER_RECORD],
}

/// One tenant's rates and their token buckets (see `rates`): node-wide, not per pool.
#[repr(C)]
pub struct RateRec {
    /// Requests per second (low half) and work units per second (high half); 0 is
    /// unbounded. Set on a live segment by any writer, read by every acquire.
    pub limits: AtomicU64,
    /// The request bucket's theoretical arrival time (GCRA), ns of the engine clock.
    pub req_tat_ns: AtomicU64,
    /// The work bucket's theoretical arrival time, ns: past `now + 1 s`, in debt.
    pub work_tat_ns: AtomicU64,
    /// Acquires refused `rate_limited`, and `work_debt`.
    pub rate_limited: AtomicU64,
    pub work_debt: AtomicU64,
    /// Work units charged, ever.
    pub work_charged: AtomicU64,
    pub reserved: [AtomicU64; 2],
}

/// One decision of a process's log (see `decisions`): a seqlock-stamped line written
/// by its process's threads with plain stores.
#[repr(C)]
pub struct LogRec {
    /// `(position + 1) << 32 | check`: 0 while being written. `check` is a hash of the
    /// position and the seven words below, so a reader tells a whole entry from one
    /// that two threads of the process wrote at once.
    pub stamp: AtomicU64,
    /// `now` of the decision, ms (the engine's clock: `CLOCK_MONOTONIC` for the
    /// implicit-`now` calls).
    pub at_ms: AtomicU64,
    /// Pool index (bits 0-15), outcome (16-23: 0 granted, else a `Reason` code),
    /// policy (24-31: 0 fair share, 1 fair share in an `evict` pool) | tenant index (high
    /// half).
    pub what: AtomicU64,
    /// Units asked for | the pool's units in use the rule saw (high half).
    pub units_in_use: AtomicU64,
    /// The tenant's held units the rule saw | the pool's capacity.
    pub held_cap: AtomicU64,
    /// The pool's floor | the tenant's weight.
    pub floor_weight: AtomicU64,
    /// The active weight the rule used (the tenant's own included) | the retry-after
    /// hint given, ms (0 for a grant).
    pub active_hint: AtomicU64,
    /// Kernel thread id | pid of the deciding thread.
    pub tid_pid: AtomicU64,
}

/// One lease record: a grant, or an acquire or release in progress.
///
/// Lease `L` belongs to process slot `L / leases_per_proc`. Every field except `state`
/// is written only by the owner while the lease is `CLAIMED` (private), and read by
/// settlers and reapers under the generation seqlock (see `ops`).
#[repr(C)]
pub struct LeaseRec {
    /// See [`lease_state`]: the state and the claim generation, changed only by CAS
    /// (and by its owner's stores of `HELD` and `FREE`).
    pub state: AtomicU32,
    /// Units asked for / held.
    pub units: AtomicU32,
    /// Pool index (low half) and tenant index (high half).
    pub pool_tenant: AtomicU64,
    /// The inputs the pool's policy froze for its decision (`policy::Inputs`); their
    /// layout is the policy's (fair share: `[POOL | FLOOR, weight | active weight, 0]`).
    pub inputs: [AtomicU64; 3],
    /// `now` of the acquire, in ms.
    pub granted_ms: AtomicU64,
    /// Declared hold in ms (0 = not declared).
    pub hold_ms: AtomicU64,
    /// Kernel thread id of the holder (threads hold their own leases), or of the
    /// thread that keeps the slot as its spare.
    pub tid: AtomicU32,
    /// Grants made through this slot for the (pool, tenant) in `pool_tenant` that are
    /// not yet added to that tenant's `grants` counter: the owner counts here with
    /// plain stores, and adds them (one RMW) when the slot next serves another pair.
    pub pending_grants: AtomicU32,
}

/// One resident record per lease, used by the leases of `evict` pools (see
/// `residents`): whether the resident is in a call, revoked, or closed, and when it
/// was last called. Lease `L`'s record is record `L` of the residents region.
#[repr(C)]
pub struct ResidentRec {
    /// See [`resident_word`]: the lease generation it describes, its state, and the
    /// calls in progress or the revoker. Changed by CAS (owner's calls, a revoker, the
    /// release's close) and by the owner's stores while the lease is its own alone.
    pub word: AtomicU64,
    /// The resident's last call (begun or ended), or its grant, in ms of the callers'
    /// `now`: what "idlest" is judged by. Written by the owner only.
    pub last_call_ms: AtomicU64,
    /// A futex word bumped (and woken) by a revocation: the owner can sleep on it.
    pub wake: AtomicU32,
    /// Calls begun on this record, ever (wraps).
    pub calls: AtomicU32,
    pub reserved: [AtomicU64; 5],
}

/// A guaranteed pool's head record (128 bytes, [`crate::guaranteed::HEAD_WORDS`]
/// words), first in the pool's part of the guaranteed region (see
/// `guaranteed::shared`). The head word shares its line only with the two words of the
/// pool's waiters, which a releaser reads right after its CAS of the head.
#[repr(C)]
pub struct GHeadRec {
    /// `seq << 20 | block`: the block holding the current state. CAS only.
    pub head: AtomicU64,
    /// Until when (ms of `CLOCK_MONOTONIC`) a waiter may sleep on `wake`: the latest
    /// such time any waiter announced (`fetch_max`); 0, never. A release, a reap or a
    /// reset that finds it not yet past bumps `wake` and wakes the sleepers. A waiter
    /// killed asleep leaves it to run out by itself.
    pub sleep_until_ms: AtomicU64,
    /// Futex word of the pool's waiters: bumped (then woken) after an op that gave
    /// units back, while `sleep_until_ms` is not past.
    pub wake: AtomicU32,
    pub reserved32: AtomicU32,
    /// One byte per waiters' bit (byte `k` of the four words, little-endian, for bit
    /// `k`), counting the releases that woke that bit (mod 256; a carry into the next
    /// byte only says more than happened): a waiter back from its sleep with `wake`
    /// moved tells a release that was for it from one that was not
    /// (`guaranteed::waiters`).
    pub epochs: [AtomicU64; 4],
    pub reserved: [AtomicU64; 9],
}

/// Where each region starts, derived from the table sizes alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub pools: usize,
    pub tenants: usize,
    pub procs: usize,
    pub leases_per_proc: usize,
    pub config_off: usize,
    pub config_len: usize,
    pub pools_off: usize,
    pub tenants_off: usize,
    pub tenant_pools_off: usize,
    pub procs_off: usize,
    /// The waiting region: [`Geometry::waiting_records`] [`WaitingRec`]s per process
    /// slot, slot-major.
    pub waiting_off: usize,
    pub leases_off: usize,
    /// Entries of each process's decision log (0: no log, as on the heap regions of
    /// the loom models).
    pub log_per_proc: usize,
    pub logs_off: usize,
    pub rates_off: usize,
    /// The guaranteed pools' region (128-aligned) and its size in 8-byte words.
    pub guaranteed_off: usize,
    pub guaranteed_words: usize,
    /// The residents region (one record per lease, or none when no pool evicts).
    pub residents_off: usize,
    pub residents: usize,
    pub total_size: usize,
}

/// Rounds up to the next multiple of [`RECORD`].
pub const fn align_up(n: usize) -> usize {
    n.div_ceil(RECORD) * RECORD
}

impl Geometry {
    /// Places the regions one after the other, each aligned to [`RECORD`].
    pub fn new(
        pools: usize,
        tenants: usize,
        procs: usize,
        leases_per_proc: usize,
        config_len: usize,
    ) -> Self {
        let config_off = HEADER;
        let pools_off = (config_off + config_len).div_ceil(128) * 128;
        let tenants_off = pools_off + pools * POOL_RECORD;
        let tenant_pools_off = tenants_off + tenants * RECORD;
        let procs_off = tenant_pools_off + pools * tenants * TENANT_POOL_RECORD;
        let waiting_off = procs_off + procs * RECORD;
        let leases_off = waiting_off + procs * Self::waiting_records_for(pools) * RECORD;
        let logs_off = leases_off + procs * leases_per_proc * RECORD;
        let log_per_proc = LOG_PER_PROCESS;
        let rates_off = logs_off + procs * log_per_proc * RECORD;
        let total_size = rates_off + tenants * RECORD;
        let guaranteed_off = total_size.div_ceil(128) * 128;
        Geometry {
            pools,
            tenants,
            procs,
            leases_per_proc,
            config_off,
            config_len,
            pools_off,
            tenants_off,
            tenant_pools_off,
            procs_off,
            waiting_off,
            leases_off,
            log_per_proc,
            logs_off,
            rates_off,
            guaranteed_off,
            guaranteed_words: 0,
            residents_off: total_size,
            residents: 0,
            total_size,
        }
    }

    /// The same, with a guaranteed region of `words` 8-byte words at the end.
    pub fn with_guaranteed(mut self, words: usize) -> Self {
        self.guaranteed_words = words;
        if words > 0 {
            self.total_size = self.guaranteed_off + words * 8;
        }
        self.residents_off = align_up(self.total_size);
        self
    }

    /// The same, with a residents region (one record per lease) at the end, when
    /// `evicting` (some pool evicts).
    pub fn with_residents(mut self, evicting: bool) -> Self {
        self.residents_off = align_up(self.total_size);
        if evicting {
            self.residents = self.leases();
            self.total_size = self.residents_off + self.residents * RECORD;
        }
        self
    }

    pub fn leases(&self) -> usize {
        self.procs * self.leases_per_proc
    }

    /// The leases of process slot `slot`: `leases_per_proc` of them, slot-major (no
    /// division: an acquire checks its spare against this).
    #[inline]
    pub fn slot_leases(&self, slot: usize) -> std::ops::Range<usize> {
        slot * self.leases_per_proc..(slot + 1) * self.leases_per_proc
    }

    /// [`WaitingRec`]s per process slot: one per 16 pools.
    pub fn waiting_records(&self) -> usize {
        Self::waiting_records_for(self.pools)
    }

    const fn waiting_records_for(pools: usize) -> usize {
        pools.div_ceil(WAITING_PER_RECORD)
    }

    /// The region directory this geometry makes: `(kind, offset, record size, count)`.
    pub fn directory(&self) -> [(u32, usize, usize, usize); 11] {
        use region_kind::*;
        [
            (CONFIG, self.config_off, self.config_len, 1),
            (POOLS, self.pools_off, POOL_RECORD, self.pools),
            (TENANTS, self.tenants_off, RECORD, self.tenants),
            (
                TENANT_POOLS,
                self.tenant_pools_off,
                TENANT_POOL_RECORD,
                self.pools * self.tenants,
            ),
            (PROCS, self.procs_off, RECORD, self.procs),
            (LEASES, self.leases_off, RECORD, self.leases()),
            (LOGS, self.logs_off, RECORD, self.procs * self.log_per_proc),
            (RATES, self.rates_off, RECORD, self.tenants),
            (GUARANTEED, self.guaranteed_off, 8, self.guaranteed_words),
            (RESIDENTS, self.residents_off, RECORD, self.residents),
            (
                WAITING,
                self.waiting_off,
                RECORD,
                self.procs * self.waiting_records(),
            ),
        ]
    }
}

/// Every record's size in bytes, by name.
pub fn record_size(record: &str) -> Option<usize> {
    match record {
        "PoolRec" => Some(POOL_RECORD),
        "Header" => Some(HEADER),
        "RegionEntry" => Some(16),
        "TenantPoolRec" => Some(TENANT_POOL_RECORD),
        "TenantRec" | "ProcRec" | "LeaseRec" | "LogRec" | "RateRec" | "ResidentRec"
        | "WaitingRec" => {
            Some(RECORD)
        }
        "GHeadRec" => Some(crate::guaranteed::HEAD_WORDS * 8),
        _ => None,
    }
}

/// (record, field, offset, size) for every field, in order: the table that
/// `shm-layout.md` must match. Built with `offset_of!`, so it is the compiler's truth.
#[cfg(not(loom))]
pub fn field_table() -> Vec<(&'static str, &'static str, usize, usize)> {
    use std::mem::{offset_of, size_of_val};
    macro_rules! fields {
        ($out:ident, $rec:ident, $name:literal: $($f:ident),*) => {{
            // SAFETY: `MaybeUninit` storage is only used to measure field sizes via
            // references that are never read.
            let probe = std::mem::MaybeUninit::<$rec>::uninit();
            let p = probe.as_ptr();
            $(
                // SAFETY: `addr_of!` on a field of an uninitialised value creates no
                // reference to uninitialised memory; `size_of_val` on the raw place
                // type is computed from the type alone.
                let size = unsafe { size_of_val(&*std::ptr::addr_of!((*p).$f)) };
                $out.push(($name, stringify!($f), offset_of!($rec, $f), size));
            )*
        }};
    }
    let mut v = Vec::new();
    fields!(v, Header, "Header": magic, version, ready, total_size, config_checksum,
        created_unix_ms, creator_pid, n_regions, registry, reserved32, pid_ns, regions);
    fields!(v, RegionEntry, "RegionEntry": kind, offset, record_size, count);
    fields!(v, PoolRec, "PoolRec": word, pad, limits, active_weight, rescan_at_ms,
        waiters, rescan_for, wake, extra, evictions, queue_window, queue_base, queue_stretch, queue_sum,
        queue_refused_ms, hold_mean_us, scanned_at_ms, reserved);
    fields!(v, TenantRec, "TenantRec": state, weight, hash, name);
    fields!(v, TenantPoolRec, "TenantPoolRec": held, last_active_ms, grants, refusals,
        hold_ewma_us, first_due_lo, turn_at_us, hint_ms_total, early_returns,
        too_many_residents, revoked, evictions, refusal_gap, hint_avg_us);
    fields!(v, ProcRec, "ProcRec": state, start_time, owner_futex, generation,
        registered_ms, death_pids, death_unix_ms, death_info, log_head);
    fields!(v, LeaseRec, "LeaseRec": state, units, pool_tenant, inputs, granted_ms, hold_ms,
        tid, pending_grants);
    fields!(v, LogRec, "LogRec": stamp, at_ms, what, units_in_use, held_cap, floor_weight,
        active_hint, tid_pid);
    fields!(v, RateRec, "RateRec": limits, req_tat_ns, work_tat_ns, rate_limited, work_debt,
        work_charged, reserved);
    fields!(v, ResidentRec, "ResidentRec": word, last_call_ms, wake, calls, reserved);
    fields!(v, WaitingRec, "WaitingRec": counts);
    fields!(v, GHeadRec, "GHeadRec": head, sleep_until_ms, wake, reserved32, epochs, reserved);
    v
}

#[cfg(not(loom))]
const _: () = {
    use std::mem::{align_of, size_of};
    assert!(size_of::<Header>() == HEADER);
    assert!(size_of::<RegionEntry>() == 16);
    assert!(size_of::<PoolRec>() == POOL_RECORD);
    assert!(size_of::<TenantRec>() == RECORD);
    assert!(size_of::<TenantPoolRec>() == TENANT_POOL_RECORD);
    assert!(std::mem::offset_of!(TenantPoolRec, turn_at_us) == RECORD);
    assert!(size_of::<ProcRec>() == RECORD);
    assert!(size_of::<LeaseRec>() == RECORD);
    assert!(size_of::<LogRec>() == RECORD);
    assert!(size_of::<RateRec>() == RECORD);
    assert!(size_of::<ResidentRec>() == RECORD);
    assert!(size_of::<WaitingRec>() == RECORD);
    assert!(size_of::<GHeadRec>() == crate::guaranteed::HEAD_WORDS * 8);
    assert!(align_of::<LeaseRec>() <= RECORD);
};
