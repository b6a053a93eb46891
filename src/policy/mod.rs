//! The seam between the op protocol (`ops`) and admission policies.
//!
//! The protocol names no policy. An acquire freezes the policy's inputs into the lease
//! record ([`Inputs`]: three words whose meaning the pool's policy owns), and the
//! protocol asks the policy for a [`Verdict`] on a snapshot it has validated: the pool
//! word (`in_use`) and the tenant's held word, read so that no grant of the pool can
//! have been counted between the two reads and the acquire's own pool CAS. The policy
//! decides purely from those and its frozen inputs; the protocol applies the effects
//! (the held word, then the pool word, each with a tagged CAS).
//!
//! A policy whose decision reads more words and changes more of them (seed 001's
//! lending: which lenders fund a loan) records its decision in the lease before it
//! applies anything, and applies each effect with a tagged, settle-able CAS in a fixed
//! order: see "Policies that change more words" in `shm-layout.md`.

pub mod fair_share;

/// What a policy freezes into a lease for its decision: three words of the lease
/// record (`LeaseRec.inputs`), laid out by the pool's policy (fair share:
/// `[cap | floor << 32, weight | active_weight << 32, 0]`).
pub type Inputs = [u64; 3];

/// A policy's verdict on one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Admit,
    /// Admit, and charge the units to the pool's extra word too (a loan).
    AdmitCharging,
    /// Refused for `reason` (a [`crate::Reason`] code); `short` is how many units more
    /// would have had to be free (or below the limit that refused it).
    Refuse { reason: u32, short: u32 },
}

impl Verdict {
    #[inline]
    pub fn admits(self) -> bool {
        matches!(self, Verdict::Admit | Verdict::AdmitCharging)
    }
}

/// An admission policy, as the op protocol sees it.
pub trait Policy {
    /// Whether decisions read (and grants may charge) the pool's extra word. The
    /// protocol loads that word only for a policy that says so.
    const USES_EXTRA: bool = false;

    /// Decides `units` for a tenant holding `held`, in a pool with `in_use` units in
    /// use and `extra` in its extra word (0 unless `USES_EXTRA`), from the frozen
    /// `inputs`. Pure: the same arguments give the same verdict, so a recorded sequence
    /// of calls replays to the same decisions.
    fn decide(&self, inputs: &Inputs, in_use: u32, held: u32, extra: u32, units: u32)
    -> Verdict;

    /// The most units an admitted request may leave in use (checked in debug builds).
    fn capacity(&self, inputs: &Inputs) -> u32;
}
