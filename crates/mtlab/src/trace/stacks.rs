//! The call stacks a trace defines, by id, as a report keeps them.

use std::cell::{RefCell, RefMut};

use rustc_hash::{FxHashMap, FxHashSet};

/// Stacks by id, their frames end to end in one vector: a vector of its own
/// per stack cost an allocation and 40 bytes of bookkeeping each, and made
/// the table by id four times larger (a program allocating from half a
/// million distinct call paths: a fifth of its report's time went to
/// looking stacks up in it).
///
/// Definitions are appended in order and the index by id is built only when
/// a lookup needs it: a replay looks up a stack when a new site meets it,
/// just after its definition (found among the last few), and a report reads
/// its sites' stacks through the `StackRef`s they kept. Indexing every
/// definition as it came — a random write into a map or an array of 2^22
/// per stack — was 12 % of the report of a program with half a million.
#[derive(Default, Debug)]
pub struct StackTable {
    pcs: FrameStore,
    /// Every definition, in order.
    defs: Vec<(u32, StackRef)>,
    /// Ids below `DENSE_IDS` defined so far, a bit each (512 KiB at most:
    /// the caches hold it, where they do not hold an index by id).
    seen: Vec<u64>,
    /// Larger ids defined so far (traces of other makers).
    seen_sparse: FxHashSet<u32>,
    /// Ids defined.
    len: usize,
    /// Whether some id was defined twice (a `StackRef` taken before the
    /// second definition then names the first).
    redefined: bool,
    index: RefCell<Index>,
}

/// Where the frames of each id are, built from `StackTable::defs`.
#[derive(Default, Debug)]
struct Index {
    /// Definitions taken in so far.
    done: usize,
    /// id → where its frames are: all while they are few, then those that
    /// `dense` cannot hold.
    map: FxHashMap<u32, StackRef>,
    /// From `DENSE_FROM` stacks on, where the frames of each id below
    /// `DENSE_IDS` are, by id (`pack`ed, 0 where none). mtlab's tracer
    /// numbers stacks by their slot in a table of 2^21. Not from the start:
    /// the ids are spread over the whole range, so a few thousand of them
    /// touch every page of it (cc1's report: 15 MiB more).
    dense: Vec<u64>,
}

/// Stacks from which `Index` keeps them by id in `dense` (a map of this
/// many takes about as much memory as the array).
const DENSE_FROM: usize = 1 << 18;

/// Ids below this go in `Index::dense` (32 MiB of address space, pages
/// touched as ids fall in them) and in `StackTable::seen`.
const DENSE_IDS: usize = 1 << 22;

/// Definitions a lookup looks back through before it asks the index.
const RECENT: usize = 8;

/// Entries of a `FrameStore` block (8 MiB).
const BLOCK_BITS: u32 = 20;
const BLOCK: usize = 1 << BLOCK_BITS;

/// Every stack's frames, end to end in blocks of `BLOCK` entries: a stack
/// is never split, so where it starts (block << `BLOCK_BITS` | offset) names
/// a slice. The first block grows as a vector does; the others are made
/// whole, in huge pages. A program with 660 K deep call paths (python3's
/// parser) filled 320 MiB of frames: one vector took 80 K page faults
/// (a tenth of its report), and growing it by copies into huge pages held
/// two copies at each doubling (+60 MiB of peak RSS).
#[derive(Default, Debug)]
struct FrameStore {
    blocks: Vec<Vec<u64>>,
}

impl FrameStore {
    /// Appends `pcs`; returns where they start.
    fn push(&mut self, pcs: &[u64]) -> usize {
        // Offsets stay below BLOCK (a block made for one larger stack takes
        // no other); blocks after the first never grow past their capacity.
        let room = self.blocks.last().map_or(0, |b| BLOCK.saturating_sub(b.len()));
        if self.blocks.is_empty() || (room < pcs.len() && !pcs.is_empty()) {
            let mut b = Vec::new();
            if !self.blocks.is_empty() {
                // Whole, so that it never moves; one stack larger than a
                // block has a block of its own.
                b.reserve_exact(BLOCK.max(pcs.len()));
                crate::platform::huge_pages::advise(b.spare_capacity_mut());
            }
            self.blocks.push(b);
        }
        let i = self.blocks.len() - 1;
        let b = &mut self.blocks[i];
        let start = (i << BLOCK_BITS) + b.len();
        b.extend_from_slice(pcs);
        start
    }

    fn get(&self, start: usize, len: usize) -> &[u64] {
        &self.blocks[start >> BLOCK_BITS][start & (BLOCK - 1)..][..len]
    }
}

/// Where one stack's frames are in its table: kept by whoever meets the
/// stack when its definition is still in the cache, to read it later in
/// the table's order, not the map's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackRef {
    start: usize,
    len: u32,
}

impl StackRef {
    /// As `Index::dense` holds it: never 0.
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
    // Out of line: the report's replay loop calls it once a stack, and
    // inlined it changed that loop's code layout (malloc-test's report
    // 0.26 -> 0.30 s for the same instructions).
    #[inline(never)]
    pub fn insert(&mut self, id: u32, pcs: &[u64]) {
        let r = StackRef { start: self.pcs.push(pcs), len: pcs.len() as u32 };
        self.defs.push((id, r));
        let new = if (id as usize) < DENSE_IDS {
            if self.seen.is_empty() {
                // Zeroed memory: pages no id falls in are never touched.
                self.seen = vec![0; DENSE_IDS / 64];
            }
            let (word, bit) = (id as usize / 64, 1u64 << (id % 64));
            let new = self.seen[word] & bit == 0;
            self.seen[word] |= bit;
            new
        } else {
            self.seen_sparse.insert(id)
        };
        self.redefined |= !new;
        self.len += new as usize;
    }

    /// The index, with every definition taken in.
    fn index(&self) -> RefMut<'_, Index> {
        let mut index = self.index.borrow_mut();
        for &(id, r) in &self.defs[index.done..] {
            index.put(id, r);
        }
        index.done = self.defs.len();
        index
    }

    /// The frames of stack `id`, innermost first.
    pub fn get(&self, id: u32) -> Option<&[u64]> {
        self.find(id).map(|r| self.frames(r))
    }

    /// Where the frames of stack `id` are.
    pub fn find(&self, id: u32) -> Option<StackRef> {
        // The latest definitions first: a new site's stack was most often
        // defined just before the allocation that made it.
        if let Some(&(_, r)) = self.defs.iter().rev().take(RECENT).find(|d| d.0 == id) {
            return Some(r);
        }
        self.index().find(id)
    }

    /// The frames at `r`, a `find` of this table.
    pub fn frames(&self, r: StackRef) -> &[u64] {
        self.pcs.get(r.start, r.len as usize)
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

impl Index {
    /// Files `r` as the frames of `id`, replacing what was there.
    fn put(&mut self, id: u32, r: StackRef) {
        if self.dense.is_empty() && self.map.len() >= DENSE_FROM {
            self.densify();
        }
        let Some(slot) = self.dense.get_mut(id as usize) else {
            self.map.insert(id, r);
            return;
        };
        match r.pack() {
            Some(v) => {
                *slot = v;
                // An earlier definition whose frames were past 2^32.
                if !self.map.is_empty() {
                    self.map.remove(&id);
                }
            }
            // Frames past 2^32: the map holds it.
            None => {
                *slot = 0;
                self.map.insert(id, r);
            }
        }
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

    fn find(&self, id: u32) -> Option<StackRef> {
        match self.dense.get(id as usize) {
            Some(&v) if v != 0 => StackRef::unpack(v),
            _ => self.map.get(&id).copied(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Xorshift;

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
    fn frames_are_kept_across_blocks_and_larger_than_one() {
        let mut t = StackTable::default();
        let mut want = Vec::new();
        // Enough frames for several blocks, with stacks that do not fit the
        // room left in one, and one stack longer than a block.
        for id in 0..300u32 {
            let len = if id == 150 { BLOCK + 5 } else { 10_000 + (id as usize * 7919) % 20_000 };
            let pcs: Vec<u64> = (0..len as u64).map(|k| (id as u64) << 32 | k).collect();
            t.insert(id, &pcs);
            want.push(pcs);
        }
        assert!(t.pcs.blocks.len() > 3);
        assert!(t.pcs.blocks.iter().skip(1).all(|b| b.len() <= b.capacity().max(BLOCK)));
        for (id, pcs) in want.iter().enumerate() {
            assert_eq!(t.get(id as u32), Some(&pcs[..]), "stack {id}");
        }
    }

    #[test]
    fn many_stacks_and_large_ids_are_kept_alike() {
        let mut t = StackTable::default();
        let mut model = std::collections::HashMap::new();
        let mut rng = Xorshift::new(88172645463325252);
        // Past DENSE_FROM, with ids in and out of the dense range and
        // redefinitions on both sides of the switch.
        for n in 0..(DENSE_FROM + DENSE_FROM / 2) as u64 {
            let x = rng.next_u64();
            let id = if n % 97 == 0 { u32::MAX - (x % 1000) as u32 } else { (x % (1 << 21)) as u32 };
            let pcs: Vec<u64> = (0..x % 5).map(|k| n * 8 + k).collect();
            t.insert(id, &pcs);
            model.insert(id, pcs);
            // Lookups between definitions: of the latest (found among the
            // recent ones), and of any id (the index catches up).
            assert_eq!(t.get(id), model.get(&id).map(|v| &v[..]));
            if n % 1000 == 0 {
                let any = (x >> 20) as u32 % (1 << 21);
                assert_eq!(t.get(any), model.get(&any).map(|v| &v[..]), "id {any} after {n} definitions");
            }
        }
        assert!(!t.index.borrow().dense.is_empty(), "switched to the dense index");
        assert_eq!(t.len(), model.len());
        assert!(t.redefined());
        for (&id, pcs) in &model {
            assert_eq!(t.get(id), Some(&pcs[..]), "id {id}");
        }
        assert_eq!(t.get(1 << 23), model.get(&(1 << 23)).map(|v| &v[..]));
    }
}
