//! The call stacks a trace defines, by id, as a report keeps them.

use rustc_hash::FxHashMap;

/// Stacks by id, their frames end to end in one vector: a vector of its own
/// per stack cost an allocation and 40 bytes of bookkeeping each, and made
/// the table by id four times larger (a program allocating from half a
/// million distinct call paths: a fifth of its report's time went to
/// looking stacks up in it).
#[derive(Default, Debug)]
pub struct StackTable {
    /// id → where its frames are.
    index: FxHashMap<u32, StackRef>,
    pcs: Vec<u64>,
    /// Whether some id was defined twice (a `StackRef` taken before the
    /// second definition then names the first).
    redefined: bool,
}

/// Where one stack's frames are in its table: kept by whoever meets the
/// stack when its definition is still in the cache, to read it later in
/// the table's order, not the map's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackRef {
    start: usize,
    len: u32,
}

impl StackTable {
    /// Defines stack `id` (a later definition of the same id replaces it).
    pub fn insert(&mut self, id: u32, pcs: &[u64]) {
        let r = StackRef { start: self.pcs.len(), len: pcs.len() as u32 };
        self.pcs.extend_from_slice(pcs);
        self.redefined |= self.index.insert(id, r).is_some();
    }

    /// The frames of stack `id`, innermost first.
    pub fn get(&self, id: u32) -> Option<&[u64]> {
        self.find(id).map(|r| self.frames(r))
    }

    /// Where the frames of stack `id` are.
    pub fn find(&self, id: u32) -> Option<StackRef> {
        self.index.get(&id).copied()
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
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
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
}
