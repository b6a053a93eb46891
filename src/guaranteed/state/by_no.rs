//! Outstanding leases found by number in O(log L), so that an op on a pool of many
//! leases does not compare every slice, or every lease, with every lease.
//!
//! Every op leaves the leases in increasing order of number: numbers are handed out in
//! order and appended, and a release or reap removes without reordering. Then the
//! leases themselves are searched. Otherwise (numbers that came round past
//! `u32::MAX`, or a state that a hostile write left out of order or with a number
//! twice) a sorted index of `(number, position)` is built once, in O(L log L).

use std::cell::Cell;

use super::LeaseEntry;

pub(crate) struct ByNo<'a> {
    leases: &'a [LeaseEntry],
    /// `(no, position)` in increasing order, when the leases are not in order.
    index: Option<Vec<(u32, u32)>>,
    /// Where the last search of leases in order ended: the slices are in the order of
    /// their leases (each op appends a lease's slices after it), so a walk over them
    /// finds each lease at, or just after, the previous one.
    last: Cell<usize>,
}

impl<'a> ByNo<'a> {
    #[inline]
    pub(crate) fn new(leases: &'a [LeaseEntry]) -> ByNo<'a> {
        let in_order = leases.windows(2).all(|w| w[0].no < w[1].no);
        let index = (!in_order).then(|| {
            let mut v: Vec<(u32, u32)> = leases
                .iter()
                .enumerate()
                .map(|(i, l)| (l.no, i as u32))
                .collect();
            v.sort_unstable();
            v
        });
        ByNo {
            leases,
            index,
            last: Cell::new(0),
        }
    }

    /// The position of the first lease (in the leases' order) numbered `no`.
    #[inline]
    pub(crate) fn find(&self, no: u32) -> Option<usize> {
        match &self.index {
            None => {
                let last = self.last.get();
                let near = [last, last + 1]
                    .into_iter()
                    .find(|&p| self.leases.get(p).is_some_and(|l| l.no == no));
                let found = near.or_else(|| self.leases.binary_search_by_key(&no, |l| l.no).ok());
                if let Some(p) = found {
                    self.last.set(p);
                }
                found
            }
            Some(v) => {
                // The first entry of `no`: its smallest position, as the sort put it.
                let k = v.partition_point(|e| e.0 < no);
                v.get(k).filter(|e| e.0 == no).map(|e| e.1 as usize)
            }
        }
    }

    /// Whether a lease before position `i` has lease `i`'s number.
    pub(crate) fn repeats_earlier(&self, i: usize) -> bool {
        debug_assert!(i < self.leases.len());
        // In order means strictly increasing: no number twice.
        self.index.is_some() && self.find(self.leases[i].no) != Some(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leases(nos: &[u32]) -> Vec<LeaseEntry> {
        nos.iter()
            .map(|&no| LeaseEntry {
                no,
                tenant: 0,
                owner: 0,
                units: 1,
                cost: 1,
                own: 1,
                granted_at: 0,
                hold_ms: 0,
            })
            .collect()
    }

    /// The linear search it replaces: the first position of `no`.
    fn scan(l: &[LeaseEntry], no: u32) -> Option<usize> {
        l.iter().position(|e| e.no == no)
    }

    #[test]
    fn finds_what_a_scan_finds_in_order_out_of_order_and_with_repeats() {
        for nos in [
            &[][..],
            &[5],
            &[1, 2, 3, 7, 9],
            // Numbers that came round past u32::MAX.
            &[u32::MAX - 1, u32::MAX, 1, 2],
            &[9, 3, 7, 3, 1, 9, 9],
        ] {
            let l = leases(nos);
            let by = ByNo::new(&l);
            // Every number held, and numbers between and around them held by none, in
            // increasing order (a walk over slices) and then back and forth.
            let nos_to_find: Vec<u32> = (0..=10)
                .chain([u32::MAX - 2, u32::MAX - 1, u32::MAX])
                .collect();
            for &no in nos_to_find
                .iter()
                .chain(nos_to_find.iter().rev())
                .chain(nos)
            {
                assert_eq!(by.find(no), scan(&l, no), "{no} in {nos:?}");
            }
            for i in 0..l.len() {
                let earlier = l[..i].iter().any(|e| e.no == l[i].no);
                assert_eq!(by.repeats_earlier(i), earlier, "{i} in {nos:?}");
            }
        }
    }

    #[test]
    fn leases_in_order_build_no_index() {
        let l = leases(&[1, 4, 6]);
        assert!(ByNo::new(&l).index.is_none());
        let l = leases(&[1, 6, 4]);
        assert!(ByNo::new(&l).index.is_some());
        // Equal neighbours are not in order: a number twice needs the index.
        let l = leases(&[1, 4, 4]);
        assert!(ByNo::new(&l).index.is_some());
    }
}
