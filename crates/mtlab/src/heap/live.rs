//! The shadow heap's live blocks by address: an ordered hash table
//! (linear probing with each run kept sorted by hash, Amble and Knuth's
//! ordered hashing), each key beside its value, at most four fifths full.
//!
//! A lookup in a table of millions of blocks misses the cache; keys apart
//! from values (or hashbrown's separate control bytes) made that two misses
//! per lookup, so a slot holds both. Kept sorted, a run is left as soon as a
//! slot holds a greater hash: a miss (every allocation's insert starts with
//! one) reads as few slots as a hit, where plain linear probing at this fill
//! reads a whole run. That lets the table be fuller — four fifths, and seven
//! eighths once it outgrows a last-level cache (`most`), not half: python3's
//! 2.8 M live blocks took 128 MiB of table at most half full, plus the
//! 64 MiB one it grew from while it rehashed; now 51 MiB.
//!
//! Sorted by hash, the table grows in place: its memory is remapped larger
//! (`platform::anon_table`, no second copy), its entries pushed to the end
//! in order, then laid out again from the start with the homes of the new
//! size (a home is the hash scaled to the size, so order is kept). It grows
//! by a quarter, so it stays between 64 % and 80 % full (70 % and 87.5 %
//! once large): 20 to 25 bytes a live block (18 to 23), where it was 32 to
//! 64 and up to 96 while doubling.
//!
//! Removal leaves the slot empty when no entry after it is displaced
//! through it; otherwise it leaves a tombstone there (the key kept, the
//! value `TOMB`), which keeps the order for lookups and ends an insertion's
//! shift as an empty slot does. Linear probing's clusters are long at this
//! fill: with python3's 2.8 M live blocks (70 % to 87.5 % full) an
//! insertion moved 17.6 entries on average to the next empty slot and a
//! removal's backward shift 14.7, four or five cache lines each. The table
//! is laid out again at the same size (`rebuild`) once live entries and
//! tombstones together reach halfway from the growth limit to full
//! (`cap`), at least homes / 16 removals after the last time; it grows
//! when the live entries alone reach the limit, as without tombstones, so
//! its size is the same. There is no wrap-around: entries whose run
//! passes the last home go on into a few spare slots at the end, the very
//! last of which is always empty.

use crate::platform::anon_table::AnonPairs;

/// A slot's stored key when empty; the one key that would be stored so
/// (`stored`) is kept apart (`LiveMap::apart`).
const EMPTY: u64 = 0;

/// The value of a removed entry's slot when entries after it are displaced
/// through it (a tombstone); the one value a caller may not store.
const TOMB: u64 = u64::MAX;

/// log2 of the span of address space whose blocks share a home.
const SPAN_BITS: u32 = 5;
/// Bits of `key >> SPAN_BITS` mixed.
const MIX_BITS: u32 = 64 - SPAN_BITS;
const MIX_MASK: u64 = (1 << MIX_BITS) - 1;
const K1: u64 = 0x9E37_79B9_7F4A_7C15;
const K2: u64 = 0xD6E8_FEB8_6659_FD93;

/// The inverse of an odd `k` modulo 2^64 (Newton's iteration).
#[cfg(test)]
const fn inverse(k: u64) -> u64 {
    let mut x = k;
    let mut i = 0;
    while i < 6 {
        x = x.wrapping_mul(2u64.wrapping_sub(k.wrapping_mul(x)));
        i += 1;
    }
    x
}

/// A bijection of [0, 2^59): multiplies by odd constants (modulo 2^59)
/// with a fold between them (by 30 bits: at least half, so that the fold
/// is its own inverse), so that the top bits, which pick the home, depend
/// on every bit of the address.
#[inline(always)]
fn mix(x: u64) -> u64 {
    let x = x.wrapping_mul(K1) & MIX_MASK;
    let x = x ^ (x >> 30);
    x.wrapping_mul(K2) & MIX_MASK
}

#[cfg(test)]
fn unmix(x: u64) -> u64 {
    let x = x.wrapping_mul(inverse(K2)) & MIX_MASK;
    let x = x ^ (x >> 30);
    x.wrapping_mul(inverse(K1)) & MIX_MASK
}

/// The hash a key is sorted by: the 32-byte span of address space it lies
/// in, mixed, above its place in the span. The blocks of one span share a
/// home and sit side by side in order, most often in one cache line:
/// allocators hand out neighbouring addresses one after another, so a
/// replay walks the table as it walks the heap (a program with millions of
/// live blocks hit main memory twice an event when every address had a
/// random slot). Spans of 64 bytes made runs twice as long at this fill
/// where 8-byte blocks sit side by side (eight keys a home). A bijection:
/// the key is not stored, its hash is.
#[inline(always)]
fn hash(key: u64) -> u64 {
    mix(key >> SPAN_BITS) << SPAN_BITS | (key & ((1 << SPAN_BITS) - 1))
}

/// As a slot stores `key`: the hash's complement, so that an empty slot
/// (0, what fresh pages hold) sorts after every entry and ends a lookup.
#[inline(always)]
fn stored(key: u64) -> u64 {
    !hash(key)
}

#[cfg(test)]
fn key_of(stored: u64) -> u64 {
    let h = !stored;
    unmix(h >> SPAN_BITS) << SPAN_BITS | (h & ((1 << SPAN_BITS) - 1))
}

/// Homes from which a table is filled to seven eighths (8 MiB of slots,
/// where `ShadowHeap::is_large` starts prefetching).
const FULLER_FROM: usize = (8 << 20) / 16;

/// Entries a table of `homes` holds before it grows: four fifths while it
/// is small, seven eighths once it has outgrown a last-level cache. A large
/// table is most of a report's memory and its lookups miss the cache
/// anyway; the longer runs cost python3's report with 2.8 M live blocks
/// ~8 % more CPU for a table of 51 MiB instead of 63.
fn most(homes: usize) -> usize {
    if homes >= FULLER_FROM {
        homes * 7 / 8
    } else {
        homes * 4 / 5
    }
}

/// Entries and tombstones together from which a table of `homes` with
/// growth limit `limit` is laid out again without its tombstones: halfway
/// from the limit to full (15/16 once large, 9/10 small).
fn cap(homes: usize, limit: usize) -> usize {
    limit + (homes - limit) / 2
}

/// Homes (entries) of a new table.
const FIRST_HOMES: usize = 1 << 10;

/// Spare slots after the last home: runs that pass it go on there.
fn spare(homes: usize) -> usize {
    64 + homes / 512
}

pub(crate) struct LiveMap {
    /// (stored key, value), sorted by stored key descending (hash
    /// ascending) with empty slots between runs.
    slots: AnonPairs,
    /// Home slots: a key's home is its hash scaled to [0, homes).
    homes: usize,
    len: usize,
    /// Slots holding a tombstone.
    tombs: usize,
    /// Entries from which the table grows (`most`).
    limit: usize,
    /// Entries and tombstones from which it is laid out again (`cap`).
    cap: usize,
    /// The value of the key whose stored form is EMPTY.
    apart: Option<u64>,
}

impl Default for LiveMap {
    fn default() -> Self {
        Self::with_homes(FIRST_HOMES)
    }
}

impl LiveMap {
    fn with_homes(homes: usize) -> Self {
        let limit = most(homes);
        LiveMap { slots: AnonPairs::zeroed(homes + spare(homes)), homes, len: 0, tombs: 0, limit, cap: cap(homes, limit), apart: None }
    }

    /// A table that holds `n` entries before it grows: laid out once at
    /// that size (in huge pages when large) rather than grown a quarter at
    /// a time, each step a re-layout of every entry and, past 16 MiB, a
    /// collapse of its pages — a fifth of the report's wall time on
    /// python3 with 2.8 M live blocks.
    pub fn with_capacity(n: usize) -> Self {
        let mut homes = FIRST_HOMES;
        if most(homes) < n {
            homes = n + n / 7 + 1;
            if most(homes) < n {
                homes = n + n / 4 + 1;
            }
        }
        debug_assert!(most(homes) >= n);
        Self::with_homes(homes)
    }

    /// The home slot of a stored key: its hash times the homes, over 2^64.
    #[inline(always)]
    fn home_of(&self, s: u64) -> usize {
        ((!s as u128 * self.homes as u128) >> 64) as usize
    }

    /// The slot holding stored key `s` (live, or a tombstone of it), or
    /// the slot where it would go.
    #[inline(always)]
    fn slot_of(&self, s: u64) -> usize {
        let mut i = self.home_of(s);
        // Entries before it in the run have smaller hashes (greater stored
        // keys); the last slot is empty (0), which ends every search.
        while self.slots[i].0 > s {
            i += 1;
        }
        i
    }

    /// `slot_of`, and whether the slot holds `s` live.
    #[inline(always)]
    fn find(&self, s: u64) -> (usize, bool) {
        let i = self.slot_of(s);
        let e = self.slots[i];
        (i, e.0 == s && e.1 != TOMB)
    }

    /// Starts loading the slots where a lookup of `key` begins.
    #[inline(always)]
    pub fn prefetch(&self, key: u64) {
        let i = self.home_of(stored(key));
        crate::platform::prefetch::prefetch(&self.slots[i]);
        // And the line after: a key displaced from its home, and a
        // removal's look at the slot after the key's, may read it.
        crate::platform::prefetch::prefetch(&self.slots[i + 4]);
    }

    pub fn len(&self) -> usize {
        self.len + self.apart.is_some() as usize
    }

    /// Bytes of the table's slots.
    pub fn table_bytes(&self) -> usize {
        std::mem::size_of_val(&self.slots[..])
    }

    pub fn get(&self, key: u64) -> Option<u64> {
        let s = stored(key);
        if s == EMPTY {
            return self.apart;
        }
        match self.find(s) {
            (i, true) => Some(self.slots[i].1),
            _ => None,
        }
    }

    pub fn get_mut(&mut self, key: u64) -> Option<&mut u64> {
        let s = stored(key);
        if s == EMPTY {
            return self.apart.as_mut();
        }
        match self.find(s) {
            (i, true) => Some(&mut self.slots[i].1),
            _ => None,
        }
    }

    /// Inserts `val` (not `u64::MAX`) unless `key` is present; returns
    /// whether it did.
    #[inline(always)]
    pub fn insert_new(&mut self, key: u64, val: u64) -> bool {
        debug_assert_ne!(val, TOMB, "u64::MAX marks a tombstone");
        let s = stored(key);
        if s == EMPTY {
            if self.apart.is_some() {
                return false;
            }
            self.apart = Some(val);
            return true;
        }
        loop {
            let i = self.slot_of(s);
            if self.slots[i].0 == s {
                if self.slots[i].1 != TOMB {
                    return false;
                }
                // Its own tombstone: in order where it lies.
                self.slots[i].1 = val;
                self.tombs -= 1;
                self.len += 1;
                return true;
            }
            // The entries from `i` up to the next empty slot or tombstone
            // move one slot on (each stays at or after its home, none
            // leaves a gap); a tombstone taken is gone.
            let mut end = i;
            while self.slots[end].0 != EMPTY && self.slots[end].1 != TOMB {
                end += 1;
            }
            // At most four fifths full (seven eighths once large): a run
            // is 3 slots long on average at four fifths (4.5 at seven
            // eighths), and so is the part of it a lookup reads. The last
            // slot stays empty.
            if self.len >= self.limit || end + 1 >= self.slots.len() {
                self.grow();
                continue;
            }
            if self.len + self.tombs >= self.cap {
                self.rebuild(self.homes);
                continue;
            }
            self.tombs -= (self.slots[end].1 == TOMB) as usize;
            // Each entry handed on in a register: the run's part is a few
            // slots, for which `copy_within` called libc's memmove.
            let mut carry = (s, val);
            for e in &mut self.slots[i..=end] {
                carry = std::mem::replace(e, carry);
            }
            self.len += 1;
            return true;
        }
    }

    /// Inserts or replaces; returns the value replaced.
    pub fn insert(&mut self, key: u64, val: u64) -> Option<u64> {
        if self.insert_new(key, val) {
            return None;
        }
        let v = self.get_mut(key).expect("present: insert_new refused it");
        Some(std::mem::replace(v, val))
    }

    /// Grows by a quarter, in place (see the module's notes).
    #[cold]
    fn grow(&mut self) {
        self.rebuild(self.homes + (self.homes / 4).max(FIRST_HOMES));
    }

    /// Lays the live entries out again for `homes` (at least the present
    /// homes), in place, the tombstones dropped.
    #[cold]
    fn rebuild(&mut self, homes: usize) {
        // The layout with the new homes, tried first: the spare slots must
        // hold the runs that pass the last home (a few dozen at most, but
        // nothing bounds them), and the last slot stay empty.
        let mut spare = spare(homes);
        let last = {
            let mut next = 0usize;
            let mut last = 0;
            for &(s, _) in self.slots.iter().filter(|e| e.0 != EMPTY && e.1 != TOMB) {
                let at = next.max(((!s as u128 * homes as u128) >> 64) as usize);
                next = at + 1;
                last = at;
            }
            last
        };
        while last + 2 > homes + spare {
            spare *= 2;
        }
        let old_len = self.slots.len();
        self.slots.grow(homes + spare);
        // Whole pages: maybe a few more spare slots than asked for.
        let new_len = self.slots.len();
        // Entries pushed to the end, in order, the last slot left empty:
        // each moves right (there are at most old_len - i entries from i
        // on, and new_len - 1 > old_len).
        let mut w = new_len - 1;
        for i in (0..old_len).rev() {
            if self.slots[i].1 == TOMB {
                self.slots[i] = (EMPTY, 0);
            } else if self.slots[i].0 != EMPTY {
                w -= 1;
                if w != i {
                    self.slots[w] = self.slots[i];
                    self.slots[i] = (EMPTY, 0);
                }
            }
        }
        // Laid out from the start: each at its new home or just after the
        // one before. None lands past the slot it is read from (the trial
        // above: the rest of the entries fit after it), so none overwrites
        // one not yet read.
        self.homes = homes;
        self.limit = most(homes);
        self.cap = cap(homes, self.limit);
        self.tombs = 0;
        let mut next = 0usize;
        for r in w..new_len - 1 {
            let e = self.slots[r];
            let at = next.max(self.home_of(e.0));
            debug_assert!(at <= r);
            if at != r {
                self.slots[at] = e;
                self.slots[r] = (EMPTY, 0);
            }
            next = at + 1;
        }
    }

    #[inline(always)]
    pub fn remove(&mut self, key: u64) -> Option<u64> {
        let s = stored(key);
        if s == EMPTY {
            return self.apart.take();
        }
        let (hole, found) = self.find(s);
        if !found {
            return None;
        }
        let val = self.slots[hole].1;
        self.len -= 1;
        // Empty when the next slot is empty or at its home (then so is
        // every entry after it in the cluster: none is displaced through
        // the hole); else a tombstone instead of a backward shift of the
        // displaced entries (see the module's notes).
        let next = self.slots[hole + 1].0;
        if next == EMPTY || self.home_of(next) > hole {
            self.slots[hole] = (EMPTY, 0);
        } else {
            self.slots[hole].1 = TOMB;
            self.tombs += 1;
        }
        Some(val)
    }

    /// Every entry, in no particular order (the tests compare with a map).
    #[cfg(test)]
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let apart_key = key_of(EMPTY);
        self.apart
            .map(|v| (apart_key, v))
            .into_iter()
            .chain(self.slots.iter().filter(|(s, v)| *s != EMPTY && *v != TOMB).map(|&(s, v)| (key_of(s), v)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Every entry (a tombstone too) at or after its home with no empty
    /// slot between, and the entries in order of hash: what lookups rely
    /// on; the counts of live entries and tombstones right, and within the
    /// limits.
    fn check_invariants(m: &LiveMap) {
        let mut prev = None;
        let (mut live, mut tombs) = (0, 0);
        for (i, &(s, v)) in m.slots.iter().enumerate() {
            if s == EMPTY {
                continue;
            }
            if v == TOMB {
                tombs += 1;
            } else {
                live += 1;
            }
            let home = m.home_of(s);
            assert!(home <= i, "slot {i} before its home {home}");
            assert!(m.slots[home..i].iter().all(|e| e.0 != EMPTY), "a gap between home {home} and slot {i}");
            if let Some(p) = prev {
                assert!(p > s, "out of order at slot {i}");
            }
            prev = Some(s);
        }
        assert_eq!(m.slots.last().unwrap().0, EMPTY, "the last slot stays empty");
        assert_eq!((live, tombs), (m.len, m.tombs), "live entries and tombstones counted");
        assert!(m.len <= m.limit && m.len + m.tombs <= m.cap, "{} live, {} tombstones, limit {}, cap {}", m.len, m.tombs, m.limit, m.cap);
    }

    #[test]
    fn a_table_sized_for_n_entries_takes_them_without_growing() {
        for n in [0usize, 1, 500, 1000, 5000, FULLER_FROM - 10, FULLER_FROM * 7 / 8 + 3, 3_000_000] {
            let mut m = LiveMap::with_capacity(n);
            let homes = m.homes;
            assert!(m.limit >= n, "{n}: limit {}", m.limit);
            if n > 1000 {
                assert!(homes <= n + n / 4 + 2, "{n}: {homes} homes, not much more than needed");
            }
            for k in 0..n as u64 {
                assert!(m.insert_new(0x5555_0000_0000 + k * 48, k));
            }
            assert_eq!(m.homes, homes, "{n}: grew");
            assert_eq!(m.len(), n);
            check_invariants(&m);
        }
    }

    #[test]
    fn the_hash_is_a_bijection() {
        for k in [0u64, 8, 0x7f00_dead_bee8, u64::MAX, 1 << 63, 63, 64] {
            assert_eq!(key_of(stored(k)), k);
        }
        assert_eq!(inverse(K1).wrapping_mul(K1), 1);
    }

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
    fn the_key_stored_as_empty_is_a_key_like_any_other() {
        let k = key_of(EMPTY);
        let mut m: LiveMap = LiveMap::default();
        assert_eq!(m.get(k), None);
        assert_eq!(m.remove(k), None);
        assert!(m.insert_new(k, 7));
        assert!(!m.insert_new(k, 8));
        *m.get_mut(k).unwrap() += 1;
        assert_eq!(m.iter().collect::<Vec<_>>(), vec![(k, 8)]);
        assert_eq!(m.len(), 1);
        assert_eq!(m.remove(k), Some(8));
        assert_eq!(m.get(k), None);
        assert!(m.insert_new(0, 1), "address 0 is an ordinary key");
        assert_eq!(m.get(0), Some(1));
    }

    #[test]
    fn keys_of_one_home_survive_removal_of_any_of_them() {
        // Keys of one home slot form a run; removing any one must leave the
        // others reachable (the backward shift), at the last home too,
        // whose run goes on into the spare slots.
        let mut m: LiveMap = LiveMap::default();
        let home = |k: u64| m.home_of(stored(k));
        let want = home(0x10_0000);
        let mut keys: Vec<u64> = (1..4_000_000u64).map(|k| k * 64).filter(|&k| home(k) == want).take(4).collect();
        let last = m.homes - 1;
        keys.extend((1..4_000_000u64).map(|k| k * 64).filter(|&k| home(k) == last).take(3));
        assert_eq!(keys.len(), 7);
        for &k in &keys {
            assert!(m.insert_new(k, k + 1));
        }
        check_invariants(&m);
        for (n, &k) in keys.iter().enumerate() {
            assert_eq!(m.remove(k), Some(k + 1));
            check_invariants(&m);
            for &other in &keys[n + 1..] {
                assert_eq!(m.get(other), Some(other + 1), "after removing {k:#x}");
            }
        }
        assert_eq!(m.len(), 0);
        assert!(m.slots.iter().all(|&(k, v)| k == EMPTY || v == TOMB));
    }

    /// Fills a table of `homes` homes to its limit with keys of distinct
    /// spans, and returns them.
    fn filled(homes: usize) -> (LiveMap, Vec<u64>) {
        let mut m = LiveMap::with_homes(homes);
        let keys: Vec<u64> = (0..m.limit as u64).map(|i| 0x5555_0000_0000 + i * 32).collect();
        for &k in &keys {
            assert!(m.insert_new(k, k));
        }
        assert_eq!(m.homes, homes, "filled without growing");
        (m, keys)
    }

    #[test]
    fn a_removal_moves_no_other_entry() {
        // Four fifths full: long clusters. Removing a key with displaced
        // entries after it leaves every other entry in its slot (a
        // tombstone, where a backward shift moved up to a cluster's
        // length), and lookups through the tombstone still find them.
        let (mut m, keys) = filled(1 << 14);
        let before: Vec<(u64, u64)> = m.slots.to_vec();
        let displaced_after = |m: &LiveMap, k: u64| {
            let i = m.find(stored(k)).0;
            let next = m.slots[i + 1].0;
            next != EMPTY && m.home_of(next) <= i
        };
        let gone: Vec<u64> = keys.iter().copied().filter(|&k| displaced_after(&m, k)).step_by(5).collect();
        assert!(gone.len() > 500, "{} keys with displaced entries after them", gone.len());
        for &k in &gone {
            let at = m.find(stored(k)).0;
            assert_eq!(m.remove(k), Some(k));
            assert_eq!(m.slots[at], (before[at].0, TOMB), "a tombstone with its key");
        }
        check_invariants(&m);
        assert_eq!(m.tombs, gone.len());
        let moved = m.slots.iter().zip(&before).filter(|(a, b)| a.1 != TOMB && a != b).count();
        assert_eq!(moved, 0, "no live entry moved");
        for &k in &keys {
            let want = if gone.contains(&k) { None } else { Some(k) };
            assert_eq!(m.get(k), want);
        }
        // A removed key comes back in its own tombstone, in place.
        let k = gone[0];
        let at = m.find(stored(k)).0;
        assert!(m.insert_new(k, 7));
        assert_eq!(m.slots[at], (stored(k), 7));
        assert_eq!(m.tombs, gone.len() - 1);
        check_invariants(&m);
    }

    #[test]
    fn churn_at_the_limit_clears_tombstones_without_growing() {
        // Live entries held just under the limit while others come and
        // go: the tombstones are cleared in place (`rebuild` at the same
        // homes) and the table does not grow, as it did not without them.
        let (mut m, keys) = filled(1 << 14);
        let homes = m.homes;
        for &k in &keys[..64] {
            assert_eq!(m.remove(k), Some(k));
        }
        let mut next = 0x7777_0000_0000u64;
        let mut live: std::collections::VecDeque<u64> = keys[64..].iter().copied().collect();
        let mut rebuilds = 0;
        for _ in 0..200_000 {
            let k = live.pop_front().unwrap();
            assert_eq!(m.remove(k), Some(k));
            let tombs = m.tombs;
            assert!(m.insert_new(next, next));
            // An insertion takes one tombstone at most; a rebuild all.
            rebuilds += (m.tombs + 1 < tombs) as usize;
            live.push_back(next);
            next += 32;
        }
        check_invariants(&m);
        assert_eq!(m.homes, homes, "no growth at a fixed count");
        assert!(rebuilds >= 2, "{rebuilds} rebuilds");
        assert!(live.iter().all(|&k| m.get(k) == Some(k)));
        assert_eq!(m.len(), live.len());
    }

    #[test]
    fn matches_a_hash_map_under_churn() {
        let mut m: LiveMap = LiveMap::default();
        let mut r: HashMap<u64, u64> = HashMap::new();
        let mut x = 0x1234_5678u64;
        for i in 0..300_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Distinct keys at 2 MiB, 4 KiB and 16-byte spacing: many hits
            // and collisions; the count climbs through several growths.
            let key = match x % 3 {
                0 => 0x7f00_0000_0000 + (x >> 8) % 3000 * (2 << 20),
                1 => 0x5555_0000_0000 + (x >> 8) % 9000 * 4096,
                _ => 0x5555_0000_0000 + (x >> 8) % 30000 * 16,
            };
            if x % 5 < 3 {
                assert_eq!(m.insert(key, i), r.insert(key, i));
            } else {
                assert_eq!(m.remove(key), r.remove(&key));
            }
            assert_eq!(m.len(), r.len());
            if i % 50_000 == 0 {
                check_invariants(&m);
            }
        }
        check_invariants(&m);
        let mut got: Vec<(u64, u64)> = m.iter().collect();
        let mut want: Vec<(u64, u64)> = r.into_iter().collect();
        got.sort();
        want.sort();
        assert_eq!(got, want);
        assert!(m.homes < FULLER_FROM && 5 * m.len() <= 4 * m.homes, "small: at most four fifths full");
    }

    #[test]
    fn a_large_table_grows_in_place_and_stays_full() {
        let mut m: LiveMap = LiveMap::default();
        let n = 1u64 << 21;
        for i in 0..n {
            assert!(m.insert_new(0x5555_0000_0000 + i * 32, i));
        }
        check_invariants(&m);
        assert_eq!(m.len(), n as usize);
        for i in (0..n).step_by(7) {
            assert_eq!(m.get(0x5555_0000_0000 + i * 32), Some(i));
        }
        assert_eq!(m.get(0x5555_0000_0000 + n * 32), None);
        // Large: between 70 % and 87.5 % full, at most 23 bytes of table
        // an entry (and the spare slots).
        let per_entry = m.table_bytes() as f64 / n as f64;
        assert!((18.0..23.5).contains(&per_entry), "{per_entry} bytes an entry");
        assert!(m.homes >= FULLER_FROM && 8 * m.len() <= 7 * m.homes, "at most seven eighths full");
    }

    #[test]
    fn a_large_table_fills_to_seven_eighths_before_it_grows() {
        // Small tables grow at four fifths; once a table holds 8 MiB of
        // slots it takes entries up to seven eighths of its homes first.
        let mut m: LiveMap = LiveMap::default();
        let key = |i: u64| 0x5555_0000_0000 + i * 32;
        let mut n = 0u64;
        let mut small_homes = 0;
        while m.homes < FULLER_FROM {
            small_homes = m.homes;
            assert!(m.insert_new(key(n), n));
            n += 1;
        }
        assert!(5 * (n as usize - 1) <= 4 * small_homes, "the small table grew at four fifths");
        let homes = m.homes;
        while (n as usize) < homes * 7 / 8 {
            assert!(m.insert_new(key(n), n));
            n += 1;
        }
        assert_eq!(m.homes, homes, "no growth up to seven eighths ({n} entries, {homes} homes)");
        assert!(m.insert_new(key(n), n));
        assert!(m.homes > homes, "grown past seven eighths");
        check_invariants(&m);
        assert!((0..=n).step_by(97).all(|i| m.get(key(i)) == Some(i)));
    }

    #[test]
    fn densely_packed_small_blocks_make_short_runs() {
        // 8-byte blocks side by side, as jemalloc hands them out: four
        // keys a home, homes colliding. An insertion and a removal move
        // the rest of their key's run (a model of the layout: longest
        // ~630 at 80 % full, 1 090 with spans of 64 bytes).
        let mut m: LiveMap = LiveMap::default();
        for i in 0..200_000u64 {
            assert!(m.insert_new(0x7f00_0000_0000 + i * 8, i));
        }
        let (mut longest, mut run) = (0, 0);
        for e in m.slots.iter() {
            if e.0 == EMPTY {
                run = 0;
            } else {
                run += 1;
                longest = longest.max(run);
            }
        }
        assert!(longest <= 800, "longest run {longest} slots");
    }

    #[test]
    fn aligned_addresses_spread_over_home_slots() {
        // 4096 keys at random would take 3971 of 65536 home slots.
        let m = LiveMap::with_homes(1 << 16);
        for spacing in [2u64 << 20, 64 << 10, 4096, 64, 32] {
            let homes: std::collections::HashSet<usize> = (0..4096u64).map(|i| m.home_of(stored(0x7f00_0000_0000 + i * spacing))).collect();
            assert!(homes.len() > 3900, "spacing {spacing}: {} home slots", homes.len());
        }
        // Blocks of one 32-byte span share a home.
        let span: std::collections::HashSet<usize> = (0..4u64).map(|i| m.home_of(stored(0x7f00_0000_0040 + i * 8))).collect();
        assert_eq!(span.len(), 1);
    }
}
