//! The shadow heap's live blocks by address: open addressing with linear
//! probing, each key stored beside its value. A lookup in a table of tens of
//! thousands of blocks misses the cache; hashbrown's separate control bytes
//! made that two misses per lookup (cc1: a fifth of the report's time in the
//! shadow heap), and so did keys kept apart from values once the values were
//! small enough to share the key's line.
//!
//! Removal shifts the entries that follow back (no tombstones), so a table
//! that has seen millions of allocations probes as little as a fresh one.

/// An empty slot's key. Address 0 is kept apart (`zero`).
const EMPTY: u64 = 0;

/// log2 of the slots of a group (see `LiveMap::home`). Eight: 8-byte
/// blocks side by side fill their group, and where two 64-byte spans of
/// address space share a group one spills into the next; with groups of 64
/// slots such runs were hundreds of slots long, and a removal walks the rest
/// of its run (3 M 8-byte blocks freed in random order: a third of the
/// report's time).
const GROUP_BITS: u32 = 3;

/// Slots (16 MiB of table) from which the table is kept in huge pages.
const LARGE_SLOTS: usize = 1 << 20;

pub(crate) struct LiveMap {
    /// Each key beside its value: a lookup of a block not in the caches
    /// waits for one line, not two (keys apart from values: one for the
    /// probe, one for the value). Values are 8 bytes, so a slot is 16 and a
    /// probe still reads four of them a line; and a table of integer pairs
    /// is allocated zeroed (calloc: fresh pages, no fill pass), which is
    /// empty — filling python3's growing tables with a generic empty value
    /// was 4 % of its report's instructions.
    slots: Vec<(u64, u64)>,
    /// 64 - log2(slots.len()): the hash's top bits pick the home slot.
    shift: u32,
    len: usize,
    zero: Option<u64>,
}

/// Writes one slot of every page of a freshly allocated (zeroed, not yet
/// faulted) table. A table's first touch of a page is otherwise a lookup's
/// read, which maps the shared zero page, and then the insert's write
/// faults again to copy it: two faults a page where this makes one.
fn touch_for_writing(slots: &mut [(u64, u64)]) {
    const PER_PAGE: usize = 4096 / std::mem::size_of::<(u64, u64)>();
    for i in (0..slots.len()).step_by(PER_PAGE) {
        // SAFETY: `i` is in bounds; a volatile write of the value the slot
        // already holds keeps the compiler from dropping it.
        unsafe { std::ptr::write_volatile(&mut slots[i], (EMPTY, 0)) };
    }
}

impl Default for LiveMap {
    fn default() -> Self {
        Self::with_slots(1 << 10)
    }
}

impl LiveMap {
    fn with_slots(n: usize) -> Self {
        debug_assert!(n.is_power_of_two());
        // At least two groups: `home` shifts by `shift + GROUP_BITS` < 64.
        let n = n.max(2 << GROUP_BITS);
        let mut slots = vec![(EMPTY, 0); n];
        if n >= LARGE_SLOTS {
            crate::platform::huge_pages::advise(&mut slots);
            touch_for_writing(&mut slots);
        }
        LiveMap {
            slots,
            shift: 64 - n.trailing_zeros(),
            len: 0,
            zero: None,
        }
    }

    /// The home slot of an address. A block of 2^(3 + GROUP_BITS) bytes of
    /// address space has a group of 2^GROUP_BITS slots, chosen by a hash of
    /// the block (two multiplies with a fold between them: one alone crowded
    /// aligned blocks into a third fewer groups than a random spread); within
    /// it each 8-byte address has its own slot, offset by a mix of the hash
    /// so that blocks holding one aligned object each do not all start at
    /// slot 0. Allocators hand out neighbouring addresses one after another,
    /// so a replay now walks the table as it walks the heap: a program with
    /// millions of live blocks hit main memory twice an event when every
    /// address had a random slot.
    #[inline(always)]
    fn home(&self, key: u64) -> usize {
        const K: u64 = 0x9E37_79B9_7F4A_7C15;
        let x = (key >> (3 + GROUP_BITS)).wrapping_mul(K);
        let h = (x ^ (x >> 32)).wrapping_mul(K);
        let group = h >> (self.shift + GROUP_BITS);
        let within = ((key >> 3) ^ (h >> 24)) & ((1 << GROUP_BITS) - 1);
        ((group << GROUP_BITS) | within) as usize
    }

    #[inline(always)]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// The slot holding `key`, or the empty slot where it would go.
    #[inline(always)]
    fn find(&self, key: u64) -> (usize, bool) {
        let mask = self.mask();
        let mut i = self.home(key);
        loop {
            let k = self.slots[i].0;
            if k == key {
                return (i, true);
            }
            if k == EMPTY {
                return (i, false);
            }
            i = (i + 1) & mask;
        }
    }

    /// Starts loading the slots where a lookup of `key` begins.
    #[inline(always)]
    pub fn prefetch(&self, key: u64) {
        let i = self.home(key);
        super::prefetch::prefetch(&self.slots[i]);
        // And the line after: a key displaced from its home, and a
        // removal's look at the slot after the key's, may read it.
        super::prefetch::prefetch(&self.slots[(i + 4) & self.mask()]);
    }

    pub fn len(&self) -> usize {
        self.len + self.zero.is_some() as usize
    }

    /// Bytes of the table's slots.
    pub fn table_bytes(&self) -> usize {
        std::mem::size_of_val(self.slots.as_slice())
    }

    pub fn get(&self, key: u64) -> Option<u64> {
        if key == EMPTY {
            return self.zero;
        }
        match self.find(key) {
            (i, true) => Some(self.slots[i].1),
            _ => None,
        }
    }

    pub fn get_mut(&mut self, key: u64) -> Option<&mut u64> {
        if key == EMPTY {
            return self.zero.as_mut();
        }
        match self.find(key) {
            (i, true) => Some(&mut self.slots[i].1),
            _ => None,
        }
    }

    /// Inserts `val` unless `key` is present; returns whether it did.
    #[inline(always)]
    pub fn insert_new(&mut self, key: u64, val: u64) -> bool {
        if key == EMPTY {
            if self.zero.is_some() {
                return false;
            }
            self.zero = Some(val);
            return true;
        }
        let (i, found) = self.find(key);
        if found {
            return false;
        }
        self.slots[i] = (key, val);
        self.len += 1;
        // At most half full: linear probing's misses stay short (2.5 slots
        // expected) while the table is still a few MiB for 100 K blocks.
        if 2 * self.len > self.slots.len() {
            self.grow();
        }
        true
    }

    /// Inserts or replaces; returns the value replaced.
    pub fn insert(&mut self, key: u64, val: u64) -> Option<u64> {
        if self.insert_new(key, val) {
            return None;
        }
        let v = self.get_mut(key).expect("present: insert_new refused it");
        Some(std::mem::replace(v, val))
    }

    #[cold]
    fn grow(&mut self) {
        // Twofold at any size. Growing a large table fourfold moved fewer
        // entries, but left it an eighth full: 2.8 M live blocks (python3)
        // took a 256 MiB table where 128 MiB holds them at the same
        // at-most-half fill, and the report's peak RSS is the old table plus
        // the new one while it rehashes (64 + 256 MiB there, 64 + 128 now).
        let old = std::mem::replace(self, Self::with_slots(2 * self.slots.len()));
        self.zero = old.zero;
        self.len = old.len;
        let mask = self.mask();
        for &(key, val) in old.slots.iter().filter(|(k, _)| *k != EMPTY) {
            let mut i = self.home(key);
            while self.slots[i].0 != EMPTY {
                i = (i + 1) & mask;
            }
            self.slots[i] = (key, val);
        }
    }

    #[inline(always)]
    pub fn remove(&mut self, key: u64) -> Option<u64> {
        if key == EMPTY {
            return self.zero.take();
        }
        let (mut hole, found) = self.find(key);
        if !found {
            return None;
        }
        let val = self.slots[hole].1;
        self.len -= 1;
        // Backward shift: an entry after the hole moves into it unless its
        // home lies after the hole (cyclically), where a lookup starts past it.
        let mask = self.mask();
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let k = self.slots[j].0;
            if k == EMPTY {
                break;
            }
            let home = self.home(k);
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.slots[hole] = self.slots[j];
                hole = j;
            }
        }
        self.slots[hole].0 = EMPTY;
        Some(val)
    }

    /// Every entry, in no particular order (the tests compare with a map).
    #[cfg(test)]
    pub fn iter(&self) -> impl Iterator<Item = (u64, &u64)> {
        self.zero
            .as_ref()
            .map(|v| (EMPTY, v))
            .into_iter()
            .chain(self.slots.iter().filter(|(k, _)| *k != EMPTY).map(|(k, v)| (*k, v)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn insert_get_remove_exactly() {
        let mut m: LiveMap = LiveMap::default();
        assert!(m.insert_new(0x1000, 1));
        assert!(!m.insert_new(0x1000, 2), "a present key is refused");
        assert_eq!(m.get(0x1000), Some(1), "and keeps its value");
        assert_eq!(m.insert(0x1000, 3), Some(1));
        assert_eq!(m.get(0x1000), Some(3));
        assert_eq!(m.len(), 1);
        assert_eq!(m.remove(0x1000), Some(3));
        assert_eq!(m.remove(0x1000), None);
        assert_eq!(m.get(0x1000), None);
        assert_eq!(m.len(), 0);
    }

    #[test]
    fn address_zero_is_a_key_like_any_other() {
        let mut m: LiveMap = LiveMap::default();
        assert_eq!(m.get(0), None);
        assert_eq!(m.remove(0), None);
        assert!(m.insert_new(0, 7));
        assert!(!m.insert_new(0, 8));
        *m.get_mut(0).unwrap() += 1;
        assert_eq!(m.iter().collect::<Vec<_>>(), vec![(0, &8)]);
        assert_eq!(m.len(), 1);
        assert_eq!(m.remove(0), Some(8));
        assert_eq!(m.get(0), None);
    }

    #[test]
    fn colliding_keys_survive_removal_of_any_of_them() {
        // Keys of one home slot form a run; removing any one must leave the
        // others reachable (the backward shift), including across the wrap.
        let mut m: LiveMap = LiveMap::with_slots(16);
        let end = m.slots.len() - 1;
        let home = |k: u64| m.home(k);
        let want = home(0x10);
        let mut keys: Vec<u64> = (1..1_000_000u64).map(|k| k * 16).filter(|&k| home(k) == want).take(4).collect();
        let last = (1..1_000_000u64).map(|k| k * 16).find(|&k| home(k) == end).unwrap();
        keys.push(last);
        let wrap: Vec<u64> = (1..1_000_000u64).map(|k| k * 16).filter(|&k| home(k) == end && k != last).take(2).collect();
        keys.extend(&wrap);
        for &k in &keys {
            assert!(m.insert_new(k, k + 1));
        }
        for (n, &k) in keys.iter().enumerate() {
            assert_eq!(m.remove(k), Some(k + 1));
            for &other in &keys[n + 1..] {
                assert_eq!(m.get(other), Some(other + 1), "after removing {k:#x}");
            }
        }
        assert_eq!(m.len(), 0);
        assert!(m.slots.iter().all(|&(k, _)| k == EMPTY));
    }

    #[test]
    fn matches_a_hash_map_under_churn() {
        let mut m: LiveMap = LiveMap::default();
        let mut r: HashMap<u64, u64> = HashMap::new();
        let mut x = 0x1234_5678u64;
        for i in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Few distinct keys at 2 MiB, 4 KiB and 16-byte spacing: many hits and collisions.
            let key = match x % 3 {
                0 => 0x7f00_0000_0000 + (x >> 8) % 3000 * (2 << 20),
                1 => 0x5555_0000_0000 + (x >> 8) % 3000 * 4096,
                _ => 0x5555_0000_0000 + (x >> 8) % 3000 * 16,
            };
            if x % 5 < 3 {
                assert_eq!(m.insert(key, i), r.insert(key, i));
            } else {
                assert_eq!(m.remove(key), r.remove(&key));
            }
            assert_eq!(m.len(), r.len());
        }
        let mut got: Vec<(u64, u64)> = m.iter().map(|(k, &v)| (k, v)).collect();
        let mut want: Vec<(u64, u64)> = r.into_iter().collect();
        got.sort();
        want.sort();
        assert_eq!(got, want);
        assert!(2 * m.len() <= m.slots.len(), "at most half full");
    }

    #[test]
    fn a_large_table_doubles_and_keeps_every_entry() {
        let mut m: LiveMap = LiveMap::default();
        let n = LARGE_SLOTS as u64; // past half of LARGE_SLOTS: one more doubling
        for i in 0..n {
            assert!(m.insert_new(0x5555_0000_0000 + i * 32, i));
        }
        // At most half full and no emptier than a quarter: the table's bytes stay within 64 per entry.
        assert_eq!(m.slots.len(), 2 * LARGE_SLOTS);
        assert_eq!(m.len(), n as usize);
        for i in (0..n).step_by(7) {
            assert_eq!(m.get(0x5555_0000_0000 + i * 32), Some(i));
        }
        assert_eq!(m.get(0x5555_0000_0000 + n * 32), None);
    }

    #[test]
    fn densely_packed_small_blocks_make_short_runs() {
        // 8-byte blocks side by side, as jemalloc hands them out: every
        // group full, and groups colliding. A removal walks its key's run.
        let mut m: LiveMap = LiveMap::default();
        for i in 0..200_000u64 {
            assert!(m.insert_new(0x7f00_0000_0000 + i * 8, i));
        }
        let n = m.slots.len();
        let first_empty = m.slots.iter().position(|&(k, _)| k == EMPTY).unwrap();
        let (mut longest, mut run) = (0, 0);
        for i in 1..=n {
            if m.slots[(first_empty + i) % n].0 == EMPTY {
                run = 0;
            } else {
                run += 1;
                longest = longest.max(run);
            }
        }
        // 176 here with groups of 8 slots, 1 216 with groups of 64.
        assert!(longest <= 400, "longest run {longest} slots");
    }

    #[test]
    fn aligned_addresses_spread_over_home_slots() {
        // 4096 keys at random would take 3971 of 65536 home slots.
        let m = LiveMap::with_slots(1 << 16);
        for spacing in [2u64 << 20, 64 << 10, 4096, 48, 32, 16, 8] {
            let homes: std::collections::HashSet<usize> = (0..4096u64).map(|i| m.home(0x7f00_0000_0000 + i * spacing)).collect();
            assert!(homes.len() > 3900, "spacing {spacing}: {} home slots", homes.len());
        }
    }
}
