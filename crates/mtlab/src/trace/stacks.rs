//! The call stacks a trace defines, by id, as a report keeps them.

use rustc_hash::FxHashMap;

/// Stacks by id, their frames end to end in one vector: a vector of its own
/// per stack cost an allocation and 40 bytes of bookkeeping each, and made
/// the table by id four times larger (a program allocating from half a
/// million distinct call paths: a fifth of its report's time went to
/// looking stacks up in it).
#[derive(Default, Debug)]
pub struct StackTable {
    /// id → where its frames are: all while they are few, then those that
    /// `dense` cannot hold.
    map: FxHashMap<u32, StackRef>,
    /// From `DENSE_FROM` stacks on, where the frames of each id below
    /// `DENSE_IDS` are, by id (`pack`ed, 0 where none). mtlab's tracer
    /// numbers stacks by their slot in a table of 2^21: a program allocating
    /// from millions of call paths spent 8 % of its report inserting them
    /// into the map. Not from the start: the ids are spread over the whole
    /// range, so a few thousand of them touch every page of it (cc1's
    /// report: 15 MiB more).
    dense: Vec<u64>,
    /// Ids defined.
    len: usize,
    pcs: Vec<u64>,
    /// Whether some id was defined twice (a `StackRef` taken before the
    /// second definition then names the first).
    redefined: bool,
}

/// Stacks from which `StackTable` keeps them by id in `dense` (a map of this
/// many takes about as much memory as the array).
const DENSE_FROM: usize = 1 << 18;

/// Ids below this go in `StackTable::dense` (32 MiB of address space,
/// pages touched as ids fall in them).
const DENSE_IDS: usize = 1 << 22;

/// Where one stack's frames are in its table: kept by whoever meets the
/// stack when its definition is still in the cache, to read it later in
/// the table's order, not the map's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackRef {
    start: usize,
    len: u32,
}

impl StackRef {
    /// As `StackTable::dense` holds it: never 0.
    fn pack(self) -> Option<u64> {
        let start = u32::try_from(self.start).ok()?;
        let len = self.len.checked_add(1)?;
        Some(start as u64 | (len as u64) << 32)
    }

    fn unpack(v: u64) -> Option<StackRef> {
        (v != 0).then(|| StackRef { start: v as u32 as usize, len: (v >> 32) as u32 - 1 })
    }
}

impl StackTable {
    /// Defines stack `id` (a later definition of the same id replaces it).
    pub fn insert(&mut self, id: u32, pcs: &[u64]) {
        let r = StackRef { start: self.pcs.len(), len: pcs.len() as u32 };
        use crate::platform::huge_pages::{reserve, FILLED_FROM};
        reserve(&mut self.pcs, pcs.len(), FILLED_FROM);
        self.pcs.extend_from_slice(pcs);
        let old = self.put(id, r);
        self.redefined |= old.is_some();
        self.len += old.is_none() as usize;
        if self.dense.is_empty() && self.len >= DENSE_FROM {
            self.densify();
        }
    }

    /// Files `r` as the frames of `id`; returns what it replaces.
    fn put(&mut self, id: u32, r: StackRef) -> Option<StackRef> {
        let Some(slot) = self.dense.get_mut(id as usize) else { return self.map.insert(id, r) };
        let old = StackRef::unpack(std::mem::take(slot));
        match r.pack() {
            Some(v) => *slot = v,
            // Frames past 2^32: the map holds it.
            None => return self.map.insert(id, r).or(old),
        }
        old.or_else(|| self.map.remove(&id))
    }

    /// Moves the stacks whose ids `dense` takes there from the map.
    #[cold]
    fn densify(&mut self) {
        // Zeroed memory: pages no id falls in are never touched.
        let mut dense = vec![0u64; DENSE_IDS];
        self.map.retain(|&id, r| match (dense.get_mut(id as usize), r.pack()) {
            (Some(slot), Some(v)) => {
                *slot = v;
                false
            }
            _ => true,
        });
        self.dense = dense;
    }

    /// The frames of stack `id`, innermost first.
    pub fn get(&self, id: u32) -> Option<&[u64]> {
        self.find(id).map(|r| self.frames(r))
    }

    /// Where the frames of stack `id` are.
    pub fn find(&self, id: u32) -> Option<StackRef> {
        match self.dense.get(id as usize) {
            Some(&v) if v != 0 => StackRef::unpack(v),
            _ => self.map.get(&id).copied(),
        }
    }

    /// The frames at `r`, a `find` of this table.
    pub fn frames(&self, r: StackRef) -> &[u64] {
        &self.pcs[r.start..r.start + r.len as usize]
    }

    /// Whether an id was defined more than once: a `StackRef` may be stale.
    pub fn redefined(&self) -> bool {
        self.redefined
    }

    /// Distinct stack ids defined.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacks_come_back_as_defined_and_a_redefinition_wins() {
        let mut t = StackTable::default();
        t.insert(7, &[1, 2, 3]);
        t.insert(9, &[]);
        t.insert(8, &[4, 5]);
        assert_eq!(t.get(7), Some(&[1u64, 2, 3][..]));
        assert_eq!(t.get(9), Some(&[][..]));
        assert_eq!(t.get(8), Some(&[4u64, 5][..]));
        assert_eq!(t.get(1), None);
        let old = t.find(7).unwrap();
        assert!(!t.redefined());
        t.insert(7, &[6]);
        assert_eq!(t.get(7), Some(&[6u64][..]));
        assert_eq!(t.frames(old), &[1, 2, 3], "a reference names what it was taken of");
        assert!(t.redefined());
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn many_stacks_and_large_ids_are_kept_alike() {
        let mut t = StackTable::default();
        let mut model = std::collections::HashMap::new();
        let mut x = 88172645463325252u64;
        // Past DENSE_FROM, with ids in and out of the dense range and
        // redefinitions on both sides of the switch.
        for n in 0..(DENSE_FROM + DENSE_FROM / 2) as u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let id = if n % 97 == 0 { u32::MAX - (x % 1000) as u32 } else { (x % (1 << 21)) as u32 };
            let pcs: Vec<u64> = (0..x % 5).map(|k| n * 8 + k).collect();
            t.insert(id, &pcs);
            model.insert(id, pcs);
        }
        assert!(!t.dense.is_empty(), "switched to the dense index");
        assert_eq!(t.len(), model.len());
        assert!(t.redefined());
        for (&id, pcs) in &model {
            assert_eq!(t.get(id), Some(&pcs[..]), "id {id}");
        }
        assert_eq!(t.get(1 << 23), model.get(&(1 << 23)).map(|v| &v[..]));
    }
}
