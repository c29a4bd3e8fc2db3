//! The start addresses of the live blocks, as a sparse bitmap of address
//! space: one bit for each 8 bytes, in leaves of 512 bits (4 KiB of
//! address space, one cache line), found by the leaf's number in arrays
//! over address space (`leaf_dir`) and ordered by a set of those numbers
//! for the scans.
//!
//! The shadow heap asks it two things a table by address cannot answer:
//! the last live block of a region once its last one is freed (the highest
//! start below), and the live blocks in a range that a new region takes in.
//! Heaps of region ends answered the first at 16 to 48 bytes a live block,
//! and a list the second at 16 bytes an unplaced block; a heap's live blocks
//! sit close together, so a leaf holds many: python3's 2.8 M live blocks
//! take ~40 000 leaves, 4 MiB with their index.
//!
//! Starts that are not a multiple of 8 (no allocator returns one, but a
//! trace may say so) are kept apart in an ordered set.

use super::leaf_dir::LeafDir;
use std::collections::BTreeSet;

/// log2 of the address space a leaf covers.
const LEAF_SHIFT: u32 = 12;
/// Words of a leaf: a bit for each 8 bytes of its 4 KiB.
const WORDS: usize = 8;

type Leaf = [u64; WORDS];

pub(crate) struct Starts {
    /// Leaf number (address >> LEAF_SHIFT) → index in `leaves`.
    dir: LeafDir,
    /// The leaf numbers of `dir`, for the scans.
    order: BTreeSet<u64>,
    leaves: Vec<Leaf>,
    /// Indexes of `leaves` no leaf number uses.
    free: Vec<u32>,
    /// Leaves in `dir` with no bit set, kept for their next block (a
    /// program that frees its one block and allocates it again would
    /// otherwise drop and make a leaf every time) until they outnumber
    /// the others.
    empty: usize,
    /// The last leaf looked up: (number, index); u64::MAX when none.
    last: (u64, u32),
    /// Starts not a multiple of 8.
    odd: BTreeSet<u64>,
}

impl Default for Starts {
    fn default() -> Starts {
        Starts::new()
    }
}

#[inline(always)]
fn bit_of(addr: u64) -> (usize, u64) {
    let b = (addr >> 3) as usize & (WORDS * 64 - 1);
    (b / 64, 1u64 << (b % 64))
}

impl Starts {
    pub fn new() -> Starts {
        Starts {
            dir: LeafDir::new(),
            order: BTreeSet::new(),
            leaves: Vec::new(),
            free: Vec::new(),
            empty: 0,
            last: (u64::MAX, 0),
            odd: BTreeSet::new(),
        }
    }

    #[inline(always)]
    fn leaf_index(&mut self, key: u64) -> Option<u32> {
        if self.last.0 == key {
            return Some(self.last.1);
        }
        let i = self.dir.get(key)?;
        self.last = (key, i);
        Some(i)
    }

    /// Adds `addr` (which must not be in the set).
    #[inline(always)]
    pub fn insert(&mut self, addr: u64) {
        if addr & 7 != 0 {
            self.odd.insert(addr);
            return;
        }
        let key = addr >> LEAF_SHIFT;
        let i = match self.leaf_index(key) {
            Some(i) => i,
            None => self.new_leaf(key),
        };
        let leaf = &mut self.leaves[i as usize];
        if leaf.iter().all(|&w| w == 0) {
            self.empty -= 1;
        }
        let (w, bit) = bit_of(addr);
        leaf[w] |= bit;
    }

    #[cold]
    fn new_leaf(&mut self, key: u64) -> u32 {
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.leaves.push([0; WORDS]);
                (self.leaves.len() - 1) as u32
            }
        };
        self.dir.insert(key, i);
        self.order.insert(key);
        self.empty += 1;
        self.last = (key, i);
        i
    }

    /// Removes `addr` (which must be in the set).
    #[inline(always)]
    pub fn remove(&mut self, addr: u64) {
        if addr & 7 != 0 {
            self.odd.remove(&addr);
            return;
        }
        let Some(i) = self.leaf_index(addr >> LEAF_SHIFT) else { return };
        let leaf = &mut self.leaves[i as usize];
        let (w, bit) = bit_of(addr);
        leaf[w] &= !bit;
        if leaf[w] == 0 && leaf.iter().all(|&w| w == 0) {
            self.empty += 1;
            if self.empty > 1024 + self.dir.len() / 2 {
                self.drop_empty();
            }
        }
    }

    #[cold]
    fn drop_empty(&mut self) {
        let (leaves, dir) = (&self.leaves, &self.dir);
        let gone: Vec<(u64, u32)> = self
            .order
            .iter()
            .filter_map(|&k| dir.get(k).map(|i| (k, i)))
            .filter(|&(_, i)| leaves[i as usize].iter().all(|&w| w == 0))
            .collect();
        for (k, i) in gone {
            self.dir.remove(k);
            self.order.remove(&k);
            self.free.push(i);
        }
        self.empty = 0;
        self.last = (u64::MAX, 0);
    }

    /// The highest start in [lo, hi) of leaf `key`.
    fn highest_in_leaf(&self, key: u64, i: u32, lo: u64, hi: u64) -> Option<u64> {
        let base = key << LEAF_SHIFT;
        let span = 1u64 << LEAF_SHIFT;
        // Bits [from, to] of the leaf are in range.
        let from = if lo > base { (lo - base).div_ceil(8) } else { 0 };
        let to = if hi - 1 < base + span - 1 { (hi - 1 - base) / 8 } else { span / 8 - 1 };
        if from > to {
            return None;
        }
        let leaf = &self.leaves[i as usize];
        let (fw, tw) = (from as usize / 64, to as usize / 64);
        for w in (fw..=tw).rev() {
            let mut bits = leaf[w];
            if w == tw && to % 64 != 63 {
                bits &= (1u64 << (to % 64 + 1)) - 1;
            }
            if w == fw {
                bits &= !0u64 << (from % 64);
            }
            if bits != 0 {
                return Some(base + 8 * (w as u64 * 64 + 63 - bits.leading_zeros() as u64));
            }
        }
        None
    }

    /// The highest start in [lo, hi).
    pub fn highest_in(&self, lo: u64, hi: u64) -> Option<u64> {
        if hi <= lo {
            return None;
        }
        let odd = self.odd.range(lo..hi).next_back().copied();
        let top = (hi - 1) >> LEAF_SHIFT;
        // Most often in the top leaf itself: no walk of the ordered set.
        let found = match self.dir.get(top).and_then(|i| self.highest_in_leaf(top, i, lo, hi)) {
            Some(a) => Some(a),
            None => self
                .order
                .range(lo >> LEAF_SHIFT..top)
                .rev()
                .find_map(|&k| self.highest_in_leaf(k, self.dir.get(k)?, lo, hi)),
        };
        found.max(odd)
    }

    /// Every start in [lo, hi), in no particular order.
    pub fn all_in(&self, lo: u64, hi: u64) -> Vec<u64> {
        let mut out: Vec<u64> = self.odd.range(lo..hi).copied().collect();
        if hi <= lo {
            return out;
        }
        for &k in self.order.range(lo >> LEAF_SHIFT..=(hi - 1) >> LEAF_SHIFT) {
            let base = k << LEAF_SHIFT;
            for (w, &word) in self.leaves[self.leaf(k) as usize].iter().enumerate() {
                let mut bits = word;
                while bits != 0 {
                    let a = base + 8 * (w as u64 * 64 + bits.trailing_zeros() as u64);
                    if a >= lo && a < hi {
                        out.push(a);
                    }
                    bits &= bits - 1;
                }
            }
        }
        out
    }

    /// The index of leaf `k`, one of `order`'s.
    fn leaf(&self, k: u64) -> u32 {
        self.dir.get(k).expect("every leaf number in order is in the directory")
    }

    /// Leaves held (empty ones included), for the tests' bounds.
    #[cfg(test)]
    pub fn leaves(&self) -> usize {
        self.dir.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Xorshift;

    #[test]
    fn answers_as_an_ordered_set_does() {
        let mut s = Starts::new();
        let mut r: BTreeSet<u64> = BTreeSet::new();
        let mut rng = Xorshift::new(0x2545_F491_4F6C_DD1D);
        for step in 0..200_000u32 {
            let x = rng.next_u64();
            // Dense 16-byte blocks, sparse 64 KiB ones, and now and then an odd address.
            let a = match x % 7 {
                0 => 0x7f00_0000_0000 + (x >> 8) % 512 * 65536,
                1 if x.is_multiple_of(11) => 0x5555_0000_0003 + (x >> 8) % 4000 * 16,
                _ => 0x5555_0000_0000 + (x >> 8) % 40_000 * 16,
            };
            if r.contains(&a) {
                s.remove(a);
                r.remove(&a);
            } else {
                s.insert(a);
                r.insert(a);
            }
            let lo = a.saturating_sub((x >> 30) % 300_000);
            let hi = a + (x >> 40) % 5000;
            assert_eq!(s.highest_in(lo, hi), r.range(lo..hi).next_back().copied(), "step {step} [{lo:#x}, {hi:#x})");
            if step % 5000 == 0 {
                let mut all = s.all_in(lo, hi + 1_000_000);
                all.sort();
                assert_eq!(all, r.range(lo..hi + 1_000_000).copied().collect::<Vec<_>>(), "step {step}");
            }
        }
        assert_eq!(s.highest_in(0, u64::MAX), r.iter().next_back().copied());
        // Everything gone: the empty leaves are dropped in time.
        for a in std::mem::take(&mut r) {
            s.remove(a);
        }
        assert_eq!(s.highest_in(0, u64::MAX), None);
        assert!(s.leaves() <= 1024 + 1, "{} leaves held", s.leaves());
    }

    #[test]
    fn a_range_at_the_ends_of_address_space() {
        let mut s = Starts::new();
        s.insert(0);
        s.insert(u64::MAX - 7);
        assert_eq!(s.highest_in(0, 1), Some(0));
        assert_eq!(s.highest_in(1, u64::MAX - 7), None, "hi is excluded");
        assert_eq!(s.highest_in(0, u64::MAX), Some(u64::MAX - 7));
        assert_eq!(s.highest_in(0, u64::MAX - 7), Some(0));
        assert_eq!(s.all_in(0, u64::MAX), vec![0, u64::MAX - 7]);
    }
}
