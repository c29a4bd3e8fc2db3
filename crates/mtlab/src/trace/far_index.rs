//! The column writer's index of allocations that left the recent list
//! unfreed: address → (allocation number, usable size), for naming a far
//! free by its number (`predict::Predictor::far_seq`).
//!
//! Linear probing with each entry whole in a 16-byte slot, at most five
//! eighths full. On python3 most frees are of such blocks, and each lookup
//! of a table of hundreds of thousands misses the cache: a `HashMap`
//! (hashbrown) reads a group of control bytes and then the bucket, in two
//! lines, where a slot here is one. Entries arrive 768 at a time (the
//! recent list's oldest, `Predictor::after`): `insert_all` starts loading
//! each one's slot a few entries ahead of writing it. Never shrinks and
//! never removes: an entry whose number is out of the ring's range is
//! stale, which its reader checks.

/// An empty slot's key: no allocation returns address 0.
const EMPTY: u64 = 0;

/// How far ahead of its insert an entry's slot is loaded.
const AHEAD: usize = 8;

/// A slot's value: the allocation number above `USABLE_BITS` bits of its
/// usable size + 1 (0: not known), or `USABLE_WIDE` where the size does not
/// fit (the ring has it). A number does not fit past 2^40 allocations in a
/// chain (which `columns::CHAIN_ROWS` keeps far below); such an entry is
/// stored as `NO_NUMBER`, found as no entry, so the free is coded as a miss.
const USABLE_BITS: u32 = 24;
const USABLE_WIDE: u64 = (1 << USABLE_BITS) - 1;
const SEQ_LIMIT: u64 = 1 << (64 - USABLE_BITS);
const NO_NUMBER: u64 = u64::MAX;

/// The usable size of an entry whose size the ring has.
pub(crate) enum Usable {
    Known(u32),
    InRing,
}

#[derive(Default)]
pub(crate) struct FarIndex {
    /// (key, value): see `USABLE_BITS`.
    slots: Vec<(u64, u64)>,
    /// log2 of the slots.
    bits: u32,
    len: usize,
}

fn pack(seq: u64, usable: u32) -> u64 {
    if seq >= SEQ_LIMIT {
        return NO_NUMBER;
    }
    // `UNKNOWN` (u32::MAX) + 1 wraps to 0, "not known", as it should.
    let u = u64::from(usable.wrapping_add(1));
    seq << USABLE_BITS | u.min(USABLE_WIDE)
}

impl FarIndex {
    /// The home slot of `key`: its top bits after a multiply (block
    /// addresses differ in their middle bits).
    #[inline(always)]
    fn home(&self, key: u64) -> usize {
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - self.bits)) as usize
    }

    #[inline(always)]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// The allocation number and usable size (`ring::UNKNOWN`: not known)
    /// last inserted for `key`.
    #[inline(always)]
    pub(crate) fn get(&self, key: u64) -> Option<(u64, Usable)> {
        if self.len == 0 || key == EMPTY {
            return None;
        }
        let mut i = self.home(key);
        loop {
            let (k, v) = self.slots[i];
            if k == key {
                if v == NO_NUMBER {
                    return None;
                }
                let usable = match v & USABLE_WIDE {
                    USABLE_WIDE => Usable::InRing,
                    u => Usable::Known((u as u32).wrapping_sub(1)),
                };
                return Some((v >> USABLE_BITS, usable));
            }
            if k == EMPTY {
                return None;
            }
            i = (i + 1) & self.mask();
        }
    }

    /// Inserts each (address, number, usable size), replacing an address's
    /// earlier entry; address 0 is left out.
    pub(crate) fn insert_all(&mut self, entries: impl ExactSizeIterator<Item = (u64, u64, u32)> + Clone) {
        self.reserve(entries.len());
        let mut ahead = entries.clone().skip(AHEAD);
        for (key, seq, usable) in entries {
            if let Some((k, _, _)) = ahead.next() {
                crate::platform::prefetch::prefetch(&self.slots[self.home(k)]);
            }
            self.put(key, pack(seq, usable));
        }
    }

    #[inline(always)]
    fn put(&mut self, key: u64, val: u64) {
        if key == EMPTY {
            return;
        }
        let mut i = self.home(key);
        loop {
            let s = &mut self.slots[i];
            if s.0 == EMPTY {
                *s = (key, val);
                self.len += 1;
                return;
            }
            if s.0 == key {
                s.1 = val;
                return;
            }
            i = (i + 1) & self.mask();
        }
    }

    /// Room for `more` new keys at most five eighths full.
    fn reserve(&mut self, more: usize) {
        let need = (self.len + more) * 8 / 5 + 1;
        if need <= self.slots.len() {
            return;
        }
        let bits = need.next_power_of_two().max(1 << 10).trailing_zeros();
        let old = std::mem::replace(&mut self.slots, vec![(EMPTY, 0); 1 << bits]);
        self.bits = bits;
        self.len = 0;
        for (k, v) in old.into_iter().filter(|s| s.0 != EMPTY) {
            self.put(k, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Xorshift;
    use std::collections::HashMap;

    #[test]
    fn agrees_with_a_map_over_batches_with_repeats_and_growth() {
        let mut rng = Xorshift::new(7);
        let mut idx = FarIndex::default();
        let mut map: HashMap<u64, (u64, u32)> = HashMap::new();
        assert!(idx.get(0x1000).is_none(), "an empty index finds nothing");
        let mut seq = 0u64;
        for batch in 0..60 {
            // Addresses from a small range so that keys repeat (a block
            // allocated again replaces its entry), 16-byte aligned as a
            // heap's are, and now and then 0, which is left out.
            let entries: Vec<(u64, u64, u32)> = (0..768)
                .map(|_| {
                    seq += 1;
                    let a = if rng.below(97) == 0 { 0 } else { 0x5555_0000_0000 + rng.below(40_000) * 16 };
                    (a, seq, rng.below(5000) as u32)
                })
                .collect();
            idx.insert_all(entries.iter().copied());
            for &(a, s, u) in &entries {
                if a != 0 {
                    map.insert(a, (s, u));
                }
            }
            if batch % 10 == 9 {
                for (&a, &v) in &map {
                    assert_eq!(found(&idx, a), Some(v), "address {a:#x}");
                }
                assert_eq!(idx.len, map.len());
                assert!(idx.len * 8 <= idx.slots.len() * 5, "at most five eighths full");
            }
        }
        assert!(idx.get(0).is_none());
        assert!(idx.get(0x5555_0000_0008).is_none(), "an address never inserted");
    }

    /// (number, usable size), the usable size `u32::MAX - 1` for one the
    /// ring has.
    fn found(idx: &FarIndex, a: u64) -> Option<(u64, u32)> {
        idx.get(a).map(|(s, u)| (s, match u {
            Usable::Known(u) => u,
            Usable::InRing => u32::MAX - 1,
        }))
    }

    #[test]
    fn sizes_and_numbers_that_do_not_fit_a_slot_are_said_so() {
        let mut idx = FarIndex::default();
        let unknown = crate::trace::ring::UNKNOWN;
        idx.insert_all([(0x10, 1, 0), (0x20, 2, unknown), (0x30, 3, 1 << 24), (0x40, SEQ_LIMIT, 5), (0x50, SEQ_LIMIT - 1, (1 << 24) - 3)].into_iter());
        assert_eq!(found(&idx, 0x10), Some((1, 0)));
        assert_eq!(found(&idx, 0x20), Some((2, unknown)), "not known yet");
        assert_eq!(found(&idx, 0x30), Some((3, u32::MAX - 1)), "too large: the ring has it");
        assert_eq!(found(&idx, 0x40), None, "a number past 2^40: coded as a miss");
        assert_eq!(found(&idx, 0x50), Some((SEQ_LIMIT - 1, (1 << 24) - 3)), "the largest that fit");
        // A later allocation of the same address replaces the entry, even
        // by one that cannot be kept.
        idx.insert_all([(0x10, SEQ_LIMIT + 1, 0)].into_iter());
        assert_eq!(found(&idx, 0x10), None);
    }
}
