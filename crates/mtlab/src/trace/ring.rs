//! Layout 4's ring of allocation results by their number in the chain
//! (`predict::Predictor`): each entry an address and its usable size,
//! packed in one word.
//!
//! The reader holds one ring per thread while the thread's next record
//! waits (up to `FAR_WINDOW` entries each), and a far free reads the entry
//! of a block allocated long before — a cache miss. Kept as two arrays
//! (8 + 4 bytes an entry) each such free missed twice; one word is one miss
//! and two thirds of the memory. An entry that does not fit the word (an
//! address not 8-aligned or above 2^48, a usable size from 2^19 − 2 on) is
//! kept in a side table by its slot: the word says so.

use rustc_hash::FxHashMap;

/// Low bits of a word: the usable size + 1 (0: not known yet), or all ones
/// for an entry kept in `Ring::wide`.
const USABLE_BITS: u32 = 19;
const WIDE: u64 = (1 << USABLE_BITS) - 1;
/// Addresses are stored divided by their least alignment.
const ALIGN_BITS: u32 = 3;
const ADDR_LIMIT: u64 = 1 << 48;

/// The usable size of an entry not known yet (`Ring::usable`).
pub(crate) const UNKNOWN: u32 = u32::MAX;

#[derive(Default)]
pub(crate) struct Ring {
    words: Vec<u64>,
    /// Entries that do not fit a word, by slot.
    wide: FxHashMap<u32, (u64, u32)>,
}

#[inline(always)]
fn pack(p: u64, usable: u32) -> Option<u64> {
    let u = if usable == UNKNOWN { 0 } else { u64::from(usable) + 1 };
    (p & ((1 << ALIGN_BITS) - 1) == 0 && p < ADDR_LIMIT && u < WIDE).then_some((p >> ALIGN_BITS) << USABLE_BITS | u)
}

impl Ring {
    /// A new entry at the end: address `p`, its usable size not known yet.
    #[inline(always)]
    pub(crate) fn push(&mut self, p: u64) {
        self.words.push(0);
        self.set(self.words.len() - 1, p, UNKNOWN);
    }

    /// Entry `slot` is now address `p` of usable size `usable`.
    #[inline(always)]
    pub(crate) fn set(&mut self, slot: usize, p: u64, usable: u32) {
        let w = match pack(p, usable) {
            Some(w) => {
                if self.words[slot] & WIDE == WIDE {
                    self.wide.remove(&(slot as u32));
                }
                w
            }
            None => self.set_wide(slot, p, usable),
        };
        self.words[slot] = w;
    }

    #[cold]
    fn set_wide(&mut self, slot: usize, p: u64, usable: u32) -> u64 {
        self.wide.insert(slot as u32, (p, usable));
        WIDE
    }

    /// Entry `slot`'s address and usable size (`UNKNOWN`: not known).
    #[inline(always)]
    pub(crate) fn get(&self, slot: usize) -> (u64, u32) {
        let w = self.words[slot];
        match w & WIDE {
            WIDE => self.wide[&(slot as u32)],
            0 => ((w >> USABLE_BITS) << ALIGN_BITS, UNKNOWN),
            u => ((w >> USABLE_BITS) << ALIGN_BITS, (u - 1) as u32),
        }
    }

    /// Entry `slot`'s address.
    #[inline(always)]
    pub(crate) fn addr(&self, slot: usize) -> u64 {
        self.get(slot).0
    }

    /// Starts loading entry `slot`'s word, which a far free will soon read
    /// (`columns::ColumnFields` reads the far frees' numbers ahead).
    #[inline(always)]
    pub(crate) fn prefetch(&self, slot: usize) {
        if let Some(w) = self.words.get(slot) {
            crate::platform::prefetch::prefetch(w);
        }
    }

    /// Entry `slot`'s usable size is now known.
    #[inline(always)]
    pub(crate) fn set_usable(&mut self, slot: usize, usable: u32) {
        let p = self.addr(slot);
        self.set(slot, p, usable);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_read_back_as_written_packed_or_wide() {
        let cases: [(u64, u32); 9] = [
            (0, UNKNOWN),
            (0x7f12_3456_7890, 24),
            (0x5555_0000_0010, 0),
            (0x7fff_ffff_fff8, (WIDE - 2) as u32), // the largest size that packs
            (0x7fff_ffff_fff8, (WIDE - 1) as u32), // the smallest that does not
            (0x1234_5671, 40),                     // not 8-aligned
            (ADDR_LIMIT, 16),                      // above 48 bits
            (u64::MAX, UNKNOWN - 1),
            (0x1000, UNKNOWN),
        ];
        let mut r = Ring::default();
        for &(p, _) in &cases {
            r.push(p);
        }
        for (i, &(p, u)) in cases.iter().enumerate() {
            assert_eq!(r.get(i), (p, UNKNOWN), "pushed {i}");
            r.set_usable(i, u);
            assert_eq!(r.get(i), (p, u), "entry {i}");
        }
        assert_eq!(r.wide.len(), 4, "the wide entries only");
        // Overwriting a wide entry with one that packs lets the side entry go.
        for i in 0..cases.len() {
            r.set(i, 0x2000 + 16 * i as u64, 32);
            assert_eq!(r.get(i), (0x2000 + 16 * i as u64, 32));
        }
        assert!(r.wide.is_empty());
        assert_eq!(r.words.len(), cases.len());
    }
}
