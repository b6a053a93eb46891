//! A guaranteed pool's [`State`] as the words of a state block, and back.
//!
//! | words                 | what                                                        |
//! |-----------------------|-------------------------------------------------------------|
//! | 0                     | `seq`                                                       |
//! | 1                     | `clock`                                                     |
//! | 2                     | `next_no` (bits 0..32), tenants (32..64)                    |
//! | 3                     | leases (0..32), slices (32..64)                             |
//! | 4                     | checksum of every other used word                           |
//! | 5..8                  | reserved, 0                                                 |
//! | 8 + 12 t ..           | tenant `t`: last_activity, want, want_since, want_last_ask, deficit, worst_reclaim_ms, reclaims, grants, cost_granted, refusals (3 words) |
//! | then 6 per lease      | `no` (0..32) `tenant` (32..48) `owner` (48..64), units, cost, own, granted_at, hold_ms |
//! | then 2 per slice      | `lease` (0..32) `lender` (32..48), units                     |
//!
//! Decoding is a parse of untrusted input: every count and index is bound-checked
//! against the pool's rules, the checksum must match, and the state's invariants must
//! hold ([`State::check`]); anything else is `Corrupt`, never a panic.

use super::state::{LeaseEntry, Rules, Slice, State, TenantState};

pub const HEADER_WORDS: usize = 8;
pub const TENANT_WORDS: usize = 12;
pub const LEASE_WORDS: usize = 6;
pub const SLICE_WORDS: usize = 2;
const CHECKSUM: usize = 4;

/// Words a block needs for these rules, rounded up to whole 128-byte lines.
pub fn block_words(tenants: usize, max_leases: usize, max_slices: usize) -> usize {
    let n =
        HEADER_WORDS + TENANT_WORDS * tenants + LEASE_WORDS * max_leases + SLICE_WORDS * max_slices;
    n.div_ceil(16) * 16
}

/// Words a state with these counts uses (the header's words 2 and 3 give them).
pub fn used_words(header2: u64, header3: u64) -> usize {
    let (t, l, s) = (
        (header2 >> 32) as usize,
        (header3 as u32) as usize,
        (header3 >> 32) as usize,
    );
    HEADER_WORDS
        .saturating_add(TENANT_WORDS.saturating_mul(t))
        .saturating_add(LEASE_WORDS.saturating_mul(l))
        .saturating_add(SLICE_WORDS.saturating_mul(s))
}

fn checksum(words: &[u64]) -> u64 {
    let mut h: u64 = 0x9e37_79b9_7f4a_7c15;
    for (i, &w) in words.iter().enumerate() {
        if i != CHECKSUM {
            h = (h ^ w).wrapping_mul(0x0100_0000_01b3).rotate_left(5);
        }
    }
    h
}

/// The used words of `s` (no more than [`block_words`]).
pub fn encode(s: &State) -> Vec<u64> {
    let mut w = Vec::new();
    encode_into(s, &mut w);
    w
}

/// [`encode`] into `w` (cleared first), reusing its allocation: an op's publish writes
/// through the same buffer every time.
pub fn encode_into(s: &State, w: &mut Vec<u64>) {
    w.clear();
    w.reserve(
        HEADER_WORDS
            + TENANT_WORDS * s.tenants.len()
            + LEASE_WORDS * s.leases.len()
            + SLICE_WORDS * s.slices.len(),
    );
    w.extend_from_slice(&[
        s.seq,
        s.clock,
        s.next_no as u64 | (s.tenants.len() as u64) << 32,
        s.leases.len() as u64 | (s.slices.len() as u64) << 32,
        0,
        0,
        0,
        0,
    ]);
    for t in &s.tenants {
        w.extend_from_slice(&[
            t.last_activity,
            t.want,
            t.want_since,
            t.want_last_ask,
            t.deficit,
            t.worst_reclaim_ms,
            t.reclaims,
            t.grants,
            t.cost_granted,
            t.refusals[0],
            t.refusals[1],
            t.refusals[2],
        ]);
    }
    for l in &s.leases {
        w.extend_from_slice(&[
            l.no as u64 | (l.tenant as u64) << 32 | (l.owner as u64) << 48,
            l.units,
            l.cost,
            l.own,
            l.granted_at,
            l.hold_ms,
        ]);
    }
    for sl in &s.slices {
        w.extend_from_slice(&[sl.lease as u64 | (sl.lender as u64) << 32, sl.units]);
    }
    w[CHECKSUM] = checksum(w);
}

/// Parses a block's words (a private copy). `Err` says what is wrong.
pub fn decode(w: &[u64], rules: &Rules) -> Result<State, String> {
    let mut st = State::empty();
    decode_into(w, rules, &mut st)?;
    Ok(st)
}

/// [`decode`] into `st`, reusing its vectors' allocations: an op reads the state into
/// the same `State` every time. On `Err`, `st` holds no valid state (its contents are
/// unspecified).
pub fn decode_into(w: &[u64], rules: &Rules, st: &mut State) -> Result<(), String> {
    let get = |i: usize| {
        w.get(i)
            .copied()
            .ok_or_else(|| format!("block ends at word {}", w.len()))
    };
    let n_tenants = (get(2)? >> 32) as usize;
    let (n_leases, n_slices) = ((get(3)? as u32) as usize, (get(3)? >> 32) as usize);
    if n_tenants != rules.tenants() || n_leases > rules.max_leases || n_slices > rules.max_slices {
        return Err(format!(
            "block counts {n_tenants} tenants, {n_leases} leases, {n_slices} slices; the \
             pool allows {}, {}, {}",
            rules.tenants(),
            rules.max_leases,
            rules.max_slices
        ));
    }
    let used =
        HEADER_WORDS + TENANT_WORDS * n_tenants + LEASE_WORDS * n_leases + SLICE_WORDS * n_slices;
    let w = w
        .get(..used)
        .ok_or_else(|| format!("block of {} words, its counts need {used}", w.len()))?;
    if checksum(w) != w[CHECKSUM] {
        return Err("block checksum does not match its words".into());
    }
    let mut off = HEADER_WORDS;
    st.tenants.clear();
    st.tenants.extend((0..n_tenants).map(|_| {
        let t = &w[off..off + TENANT_WORDS];
        off += TENANT_WORDS;
        TenantState {
            last_activity: t[0],
            want: t[1],
            want_since: t[2],
            want_last_ask: t[3],
            deficit: t[4],
            worst_reclaim_ms: t[5],
            reclaims: t[6],
            grants: t[7],
            cost_granted: t[8],
            refusals: [t[9], t[10], t[11]],
        }
    }));
    st.leases.clear();
    st.leases.extend((0..n_leases).map(|_| {
        let l = &w[off..off + LEASE_WORDS];
        off += LEASE_WORDS;
        LeaseEntry {
            no: l[0] as u32,
            tenant: (l[0] >> 32) as u16,
            owner: (l[0] >> 48) as u16,
            units: l[1],
            cost: l[2],
            own: l[3],
            granted_at: l[4],
            hold_ms: l[5],
        }
    }));
    st.slices.clear();
    st.slices.extend((0..n_slices).map(|_| {
        let s = &w[off..off + SLICE_WORDS];
        off += SLICE_WORDS;
        Slice {
            lease: s[0] as u32,
            lender: (s[0] >> 32) as u16,
            units: s[1],
        }
    }));
    st.seq = w[0];
    st.clock = w[1];
    st.next_no = w[2] as u32;
    st.check(rules)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guaranteed::state::tests::even_pair;
    use crate::guaranteed::state::{Call, Model};

    #[test]
    fn a_state_round_trips_and_any_flipped_bit_is_caught() {
        let cfg = even_pair("a");
        let mut m = Model::new(&cfg).unwrap();
        m.apply(Call::Acquire {
            tenant: 1,
            cost: 50,
            hold_ms: 100,
            owner: 3,
            now: 0,
        })
        .unwrap();
        m.apply(Call::Acquire {
            tenant: 1,
            cost: 30,
            hold_ms: 100,
            owner: 3,
            now: 0,
        })
        .unwrap();
        m.apply(Call::Acquire {
            tenant: 0,
            cost: 40,
            hold_ms: 10,
            owner: 2,
            now: 10,
        })
        .unwrap();
        let w = encode(&m.state);
        assert_eq!(decode(&w, &m.rules).unwrap(), m.state);
        assert!(w.len() <= block_words(2, 64, cfg.max_slices()));
        for i in 0..w.len() {
            for bit in [0, 17, 63] {
                let mut bad = w.clone();
                bad[i] ^= 1 << bit;
                assert!(decode(&bad, &m.rules).is_err(), "word {i} bit {bit}");
            }
        }
        for cut in 0..w.len() {
            assert!(decode(&w[..cut], &m.rules).is_err());
        }
    }

    /// The buffers an op reuses carry nothing of the state they held before: decoding
    /// into a `State` of more leases and slices, or encoding into a longer buffer, gives
    /// what a fresh one does (and a failed decode leaves nothing a retry keeps).
    #[test]
    fn decoding_and_encoding_into_used_buffers_keep_nothing_of_them() {
        let cfg = even_pair("a");
        let mut m = Model::new(&cfg).unwrap();
        let small = encode(&m.state);
        for (tenant, cost, owner) in [(1, 50, 3), (1, 30, 3), (0, 10, 2)] {
            m.apply(Call::Acquire {
                tenant,
                cost,
                hold_ms: 100,
                owner,
                now: 0,
            })
            .unwrap();
        }
        assert!(!m.state.slices.is_empty(), "the trace borrows");
        let big = encode(&m.state);
        let mut st = decode(&big, &m.rules).unwrap();
        assert!(decode_into(&big[..big.len() - 1], &m.rules, &mut st).is_err());
        decode_into(&small, &m.rules, &mut st).unwrap();
        assert_eq!(st, decode(&small, &m.rules).unwrap());
        let mut buf = big.clone();
        encode_into(&st, &mut buf);
        assert_eq!(buf, small);
    }
}
