//! The call stacks a trace defines, by id, as a report keeps them.

use rustc_hash::FxHashMap;

/// Stacks by id, their frames end to end in one vector: a vector of its own
/// per stack cost an allocation and 40 bytes of bookkeeping each, and made
/// the table by id four times larger (a program allocating from half a
/// million distinct call paths: a fifth of its report's time went to
/// looking stacks up in it).
#[derive(Default, Debug)]
pub struct StackTable {
    /// id → (start in `pcs`, frames).
    index: FxHashMap<u32, (usize, u32)>,
    pcs: Vec<u64>,
}

impl StackTable {
    /// Defines stack `id` (a later definition of the same id replaces it).
    pub fn insert(&mut self, id: u32, pcs: &[u64]) {
        let start = self.pcs.len();
        self.pcs.extend_from_slice(pcs);
        self.index.insert(id, (start, pcs.len() as u32));
    }

    /// The frames of stack `id`, innermost first.
    pub fn get(&self, id: u32) -> Option<&[u64]> {
        self.index.get(&id).map(|&(start, n)| &self.pcs[start..start + n as usize])
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
        t.insert(7, &[6]);
        assert_eq!(t.get(7), Some(&[6u64][..]));
        assert_eq!(t.len(), 3);
    }
}
