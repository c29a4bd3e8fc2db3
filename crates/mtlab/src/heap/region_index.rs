//! The shadow heap's regions by start address: a sorted vector while they
//! are few, a B-tree once they are many.
//!
//! A program whose large blocks are each their own mapping makes and drops
//! a region per block among a few dozen: in a `BTreeMap` each was a
//! search, an insertion and a removal through two levels of nodes, 28 % of
//! such a report. A sorted vector of a few dozen entries is one binary
//! search in a line or two and a short move. Past `FEW` entries, moves grow
//! with the count and the tree takes over (for good: counts that large
//! tend to stay).

use std::collections::BTreeMap;

/// Entries from which the index is a B-tree.
const FEW: usize = 128;

#[derive(Debug)]
pub(crate) enum RegionIndex {
    /// (start, slab index), sorted by start.
    Few(Vec<(u64, u32)>),
    Many(BTreeMap<u64, u32>),
}

impl Default for RegionIndex {
    fn default() -> Self {
        RegionIndex::Few(Vec::new())
    }
}

impl RegionIndex {
    pub fn len(&self) -> usize {
        match self {
            RegionIndex::Few(v) => v.len(),
            RegionIndex::Many(m) => m.len(),
        }
    }

    pub fn get(&self, start: u64) -> Option<u32> {
        match self {
            RegionIndex::Few(v) => v.binary_search_by_key(&start, |e| e.0).ok().map(|i| v[i].1),
            RegionIndex::Many(m) => m.get(&start).copied(),
        }
    }

    /// Adds or replaces the entry of `start`.
    pub fn insert(&mut self, start: u64, idx: u32) {
        match self {
            RegionIndex::Few(v) => match v.binary_search_by_key(&start, |e| e.0) {
                Ok(i) => v[i].1 = idx,
                Err(i) => {
                    v.insert(i, (start, idx));
                    if v.len() > FEW {
                        *self = RegionIndex::Many(v.iter().copied().collect());
                    }
                }
            },
            RegionIndex::Many(m) => {
                m.insert(start, idx);
            }
        }
    }

    pub fn remove(&mut self, start: u64) -> Option<u32> {
        match self {
            RegionIndex::Few(v) => v.binary_search_by_key(&start, |e| e.0).ok().map(|i| v.remove(i).1),
            RegionIndex::Many(m) => m.remove(&start),
        }
    }

    /// The entry with the greatest start at or below `addr`.
    pub fn at_or_before(&self, addr: u64) -> Option<(u64, u32)> {
        match self {
            RegionIndex::Few(v) => v[..v.partition_point(|e| e.0 <= addr)].last().copied(),
            RegionIndex::Many(m) => m.range(..=addr).next_back().map(|(&s, &i)| (s, i)),
        }
    }

    /// The entry with the greatest start below `addr`.
    pub fn before(&self, addr: u64) -> Option<(u64, u32)> {
        match self {
            RegionIndex::Few(v) => v[..v.partition_point(|e| e.0 < addr)].last().copied(),
            RegionIndex::Many(m) => m.range(..addr).next_back().map(|(&s, &i)| (s, i)),
        }
    }

    /// The entry with the least start at or above `addr`.
    pub fn at_or_after(&self, addr: u64) -> Option<(u64, u32)> {
        match self {
            RegionIndex::Few(v) => v.get(v.partition_point(|e| e.0 < addr)).copied(),
            RegionIndex::Many(m) => m.range(addr..).next().map(|(&s, &i)| (s, i)),
        }
    }

    /// The starts in [start, end), in order.
    pub fn starts_in(&self, start: u64, end: u64) -> Vec<u64> {
        if end <= start {
            return Vec::new();
        }
        match self {
            RegionIndex::Few(v) => {
                let from = v.partition_point(|e| e.0 < start);
                let to = v.partition_point(|e| e.0 < end);
                v[from..to].iter().map(|e| e.0).collect()
            }
            RegionIndex::Many(m) => m.range(start..end).map(|(&s, _)| s).collect(),
        }
    }

    /// Every entry, in order of start.
    pub fn iter(&self) -> Box<dyn Iterator<Item = (u64, u32)> + '_> {
        match self {
            RegionIndex::Few(v) => Box::new(v.iter().copied()),
            RegionIndex::Many(m) => Box::new(m.iter().map(|(&s, &i)| (s, i))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Xorshift;

    #[test]
    fn answers_as_a_btree_does_below_and_above_the_switch() {
        let mut ours = RegionIndex::default();
        let mut reference: BTreeMap<u64, u32> = BTreeMap::new();
        let mut rnd = Xorshift::new(88172645463325252);
        let mut switched_at = None;
        for step in 0..60_000u32 {
            // Keys from a small space, so that lookups hit and miss alike;
            // the count climbs past FEW in the first phase.
            let key = rnd.below(600) * 4096;
            let grow = (step / 10_000) % 2 == 0;
            let insert = if grow { rnd.below(3) != 0 } else { rnd.below(3) == 0 };
            if insert {
                ours.insert(key, step);
                reference.insert(key, step);
            } else {
                assert_eq!(ours.remove(key), reference.remove(&key));
            }
            if switched_at.is_none() && matches!(ours, RegionIndex::Many(_)) {
                switched_at = Some(step);
            }
            let probe = rnd.below(600 * 4096 + 8192);
            let r = &reference;
            assert_eq!(ours.len(), r.len());
            assert_eq!(ours.get(key), r.get(&key).copied());
            assert_eq!(ours.at_or_before(probe), r.range(..=probe).next_back().map(|(&s, &i)| (s, i)));
            assert_eq!(ours.before(probe), r.range(..probe).next_back().map(|(&s, &i)| (s, i)));
            assert_eq!(ours.at_or_after(probe), r.range(probe..).next().map(|(&s, &i)| (s, i)));
            let end = probe + rnd.below(100_000);
            assert_eq!(ours.starts_in(probe, end), r.range(probe..end).map(|(&s, _)| s).collect::<Vec<_>>());
            if step % 1000 == 0 {
                assert!(ours.iter().eq(r.iter().map(|(&s, &i)| (s, i))));
            }
        }
        assert!(switched_at.is_some_and(|s| s > FEW as u32), "the count passed FEW, not at once: {switched_at:?}");
    }
}
