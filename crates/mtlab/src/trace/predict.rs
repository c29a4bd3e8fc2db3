//! Address and usable-size prediction for the column layout, run
//! identically by the writer (`columns::split`) and the reader
//! (`columns::ColumnFields`): each side sees the same values in the same
//! order, so a value the prediction gets right costs one small code.
//!
//! Layout 1 (version 3 traces): an allocation's result is coded as its rank
//! among recently freed addresses, a freed address as its rank among recent
//! allocation results, every miss as a delta to the previous address.
//!
//! Layout 2 (version 4) adds what the allocators' own placement makes
//! predictable (issue 38 §2; docs/benchmarks.md, *Trace size*):
//! - an allocation that misses the freed list is predicted at the end of
//!   the previous allocation (plus the gap last seen there: glibc's chunk
//!   header), or at the end of the last allocation of its size class (the
//!   size-class allocators carve a class's blocks side by side); its misses
//!   are deltas to the first prediction, in a stream of their own;
//! - a free that misses the recent allocations is a delta to the previous
//!   such free (teardowns walk memory in order); `free(NULL)` has a code;
//! - the usable-size extra is the residual of the allocator's rounding:
//!   against the extra last seen for the same requested size, else against
//!   the rounding that makes the usable size agree modulo 16 with the last
//!   one (glibc's sizes are all 8 mod 16).

use super::columns::Stream;
use super::fields::{DecErr, Field};
use super::varint::{put_svarint, put_varint, zigzag};

/// Recent allocation results a free is looked up among.
pub(crate) const ALLOC_WINDOW: usize = 256;
/// Recent freed addresses an allocation result is looked up among.
pub(crate) const FREE_WINDOW: usize = 64;

/// Entries of the table of the last extra seen per requested size.
const EXTRA_TABLE: usize = 4096;
/// Size classes followed for the end-of-class prediction.
const CLASSES: usize = 256;
/// Largest gap between the end of one allocation and the start of the next
/// that is learned as the allocator's header.
const MAX_GAP: u64 = 64;

/// Stream codes of an allocation result in layout 2 (`Stream::AllocRank`).
const ALLOC_MISS: u64 = 0;
const ALLOC_CLASS: u64 = 1;
const ALLOC_RANK0: u64 = 2;
/// Stream codes of a freed address in layout 2 (`Stream::FreeRank`).
const FREE_MISS: u64 = 0;
const FREE_NULL: u64 = 1;
const FREE_RANK0: u64 = 2;

pub(crate) type Streams = [Vec<u8>; super::columns::MAX_STREAMS];

pub(crate) struct Predictor {
    layout: u8,
    allocs: Vec<u64>,
    frees: Vec<u64>,
    /// The previous address of any field (layout 1: every miss's base;
    /// layout 2: mappings' and breaks').
    prev: u64,
    // Layout 2 only.
    /// End of the previous allocation (result + size + extra) and the gap
    /// last seen after such an end.
    next_end: u64,
    gap: u64,
    /// End of the last allocation of each size class.
    class_end: Vec<u64>,
    /// The previous free that missed the recent allocations.
    prev_free_miss: u64,
    /// Per requested size (direct-mapped): (size, extra) last seen.
    extras: Vec<(u64, u64)>,
    last_usable: u64,
    /// The current event's requested size (product of its size fields) and
    /// its allocation result.
    cur_size: u64,
    cur_new: u64,
}

/// Rank of `p` counted from the newest, among the last `window` entries.
/// Compares 8 entries at a time (the compiler vectorizes it): finishing a
/// trace runs this for every pointer.
fn rank_of(list: &[u64], p: u64, window: usize) -> Option<usize> {
    let w = &list[list.len().saturating_sub(window)..];
    let n = w.len();
    let mut end = n;
    while end >= 8 {
        let blk: &[u64; 8] = w[end - 8..end].try_into().expect("8 entries");
        let mut mask = 0u32;
        for (i, &x) in blk.iter().enumerate() {
            mask |= u32::from(x == p) << i;
        }
        if mask != 0 {
            let newest = end - 8 + (31 - mask.leading_zeros()) as usize;
            return Some(n - 1 - newest);
        }
        end -= 8;
    }
    w[..end].iter().rev().position(|&x| x == p).map(|r| r + (n - end))
}

#[inline(always)]
fn take(list: &mut Vec<u64>, rank: usize) -> u64 {
    if rank == 0 {
        // The commonest case: the newest entry.
        return list.pop().unwrap_or(0);
    }
    list.remove(list.len() - 1 - rank)
}

#[inline(always)]
fn push(list: &mut Vec<u64>, p: u64, window: usize) {
    if p == 0 {
        return;
    }
    if list.len() >= 4 * window {
        list.drain(..list.len() - window);
    }
    list.push(p);
}

/// Size class of a requested size: 16-byte steps up to 128, then four
/// classes per doubling (as jemalloc's, mimalloc's and tcmalloc's roughly
/// are); only a key, so exactness does not depend on it.
#[inline(always)]
fn class(size: u64) -> usize {
    if size <= 128 {
        return size.div_ceil(16) as usize;
    }
    let lg = 63 - (size - 1).leading_zeros() as u64; // size-1 ≥ 128: lg ≥ 7
    let sub = ((size - 1) >> (lg - 2)) & 3;
    (8 + (lg - 7) * 4 + sub).min(CLASSES as u64 - 1) as usize
}

fn get_rank(list: &mut Vec<u64>, window: usize, r: u64) -> Result<u64, DecErr> {
    let r = usize::try_from(r).map_err(|_| DecErr::Columns("address rank out of range"))?;
    if r >= window.min(list.len()) {
        return Err(DecErr::Columns("address rank out of range"));
    }
    Ok(take(list, r))
}

impl Predictor {
    pub(crate) fn new(layout: u8) -> Predictor {
        let v2 = layout >= 2;
        Predictor {
            layout,
            allocs: Vec::new(),
            frees: Vec::new(),
            prev: 0,
            next_end: 0,
            gap: 0,
            class_end: if v2 { vec![0; CLASSES] } else { Vec::new() },
            prev_free_miss: 0,
            extras: if v2 { vec![(u64::MAX, 0); EXTRA_TABLE] } else { Vec::new() },
            last_usable: 0,
            cur_size: 1,
            cur_new: 0,
        }
    }

    /// A new event starts (both sides call this at each kind byte).
    #[inline(always)]
    pub(crate) fn event(&mut self) {
        self.cur_size = 1;
        self.cur_new = 0;
    }

    /// A size field of the current event was read or written.
    #[inline(always)]
    pub(crate) fn size(&mut self, v: u64) {
        self.cur_size = self.cur_size.wrapping_mul(v);
    }

    #[inline(always)]
    fn alloc_guess(&self) -> u64 {
        self.next_end.wrapping_add(self.gap)
    }

    /// Writer side: codes address `p` of field `f` into the streams.
    pub(crate) fn put(&mut self, f: Field, p: u64, out: &mut Streams) {
        if self.layout < 2 {
            return self.put_v1(f, p, out);
        }
        match f {
            Field::NewPtr => {
                if let Some(r) = rank_of(&self.frees, p, FREE_WINDOW) {
                    put_varint(&mut out[Stream::AllocRank as usize], ALLOC_RANK0 + r as u64);
                    take(&mut self.frees, r);
                } else if p != self.alloc_guess() && p != 0 && p == self.class_end[class(self.cur_size)] {
                    put_varint(&mut out[Stream::AllocRank as usize], ALLOC_CLASS);
                } else {
                    put_varint(&mut out[Stream::AllocRank as usize], ALLOC_MISS);
                    put_svarint(&mut out[Stream::AllocDelta as usize], p.wrapping_sub(self.alloc_guess()) as i64);
                    self.learn_gap(p);
                }
            }
            Field::OldPtr => {
                if p == 0 {
                    put_varint(&mut out[Stream::FreeRank as usize], FREE_NULL);
                } else if let Some(r) = rank_of(&self.allocs, p, ALLOC_WINDOW) {
                    put_varint(&mut out[Stream::FreeRank as usize], FREE_RANK0 + r as u64);
                    take(&mut self.allocs, r);
                } else {
                    put_varint(&mut out[Stream::FreeRank as usize], FREE_MISS);
                    put_svarint(&mut out[Stream::FreeDelta as usize], p.wrapping_sub(self.prev_free_miss) as i64);
                    self.prev_free_miss = p;
                }
            }
            _ => put_svarint(&mut out[Stream::PtrDelta as usize], p.wrapping_sub(self.prev) as i64),
        }
        self.after(f, p);
    }

    fn put_v1(&mut self, f: Field, p: u64, out: &mut Streams) {
        let hit = match f {
            Field::NewPtr => rank_of(&self.frees, p, FREE_WINDOW).map(|r| (r, Stream::AllocRank)),
            Field::OldPtr => rank_of(&self.allocs, p, ALLOC_WINDOW).map(|r| (r, Stream::FreeRank)),
            _ => None,
        };
        match (f, hit) {
            (_, Some((r, s))) => {
                put_varint(&mut out[s as usize], r as u64 + 1);
                if f == Field::NewPtr {
                    take(&mut self.frees, r);
                } else {
                    take(&mut self.allocs, r);
                }
            }
            (Field::NewPtr, None) => put_varint(&mut out[Stream::AllocRank as usize], 0),
            (Field::OldPtr, None) => put_varint(&mut out[Stream::FreeRank as usize], 0),
            _ => {}
        }
        if hit.is_none() {
            put_svarint(&mut out[Stream::PtrDelta as usize], p.wrapping_sub(self.prev) as i64);
        }
        self.after(f, p);
    }

    /// Reader side: the address of field `f` coded by `code` (the field's
    /// code stream value; Addr fields have none, pass 0); `delta(s)` reads
    /// the next value of delta stream `s`.
    #[inline(always)]
    pub(crate) fn get(
        &mut self,
        f: Field,
        code: u64,
        mut delta: impl FnMut(Stream) -> Result<u64, DecErr>,
    ) -> Result<u64, DecErr> {
        let p = if self.layout < 2 {
            match (f, code) {
                (_, 0) => self.prev.wrapping_add(zigzag(delta(Stream::PtrDelta)?) as u64),
                (Field::NewPtr, c) => get_rank(&mut self.frees, FREE_WINDOW, c - 1)?,
                (_, c) => get_rank(&mut self.allocs, ALLOC_WINDOW, c - 1)?,
            }
        } else {
            match f {
                Field::NewPtr => match code {
                    ALLOC_MISS => {
                        let p = self.alloc_guess().wrapping_add(zigzag(delta(Stream::AllocDelta)?) as u64);
                        self.learn_gap(p);
                        p
                    }
                    ALLOC_CLASS => self.class_end[class(self.cur_size)],
                    c => get_rank(&mut self.frees, FREE_WINDOW, c - ALLOC_RANK0)?,
                },
                Field::OldPtr => match code {
                    FREE_NULL => 0,
                    FREE_MISS => {
                        let p = self.prev_free_miss.wrapping_add(zigzag(delta(Stream::FreeDelta)?) as u64);
                        self.prev_free_miss = p;
                        p
                    }
                    c => get_rank(&mut self.allocs, ALLOC_WINDOW, c - FREE_RANK0)?,
                },
                _ => self.prev.wrapping_add(zigzag(delta(Stream::PtrDelta)?) as u64),
            }
        };
        self.after(f, p);
        Ok(p)
    }

    #[inline(always)]
    fn learn_gap(&mut self, p: u64) {
        let g = p.wrapping_sub(self.next_end);
        if g <= MAX_GAP {
            self.gap = g;
        }
    }

    #[inline(always)]
    fn after(&mut self, f: Field, p: u64) {
        match f {
            Field::NewPtr => {
                push(&mut self.allocs, p, ALLOC_WINDOW);
                self.cur_new = p;
            }
            Field::OldPtr => push(&mut self.frees, p, FREE_WINDOW),
            _ => {}
        }
        self.prev = p;
    }

    /// The extra predicted for the current event's size (layout 2).
    #[inline(always)]
    fn extra_guess(&self) -> u64 {
        let size = self.cur_size;
        let (s, e) = self.extras[size as usize % EXTRA_TABLE];
        if s == size {
            e
        } else {
            self.last_usable.wrapping_sub(size) & 15
        }
    }

    /// Writer side: codes the usable-size extra `v` of the current event.
    pub(crate) fn put_extra(&mut self, v: u64, out: &mut Streams) {
        if self.layout < 2 {
            return put_varint(&mut out[Stream::Extra as usize], v);
        }
        put_svarint(&mut out[Stream::Extra as usize], v.wrapping_sub(self.extra_guess()) as i64);
        self.after_extra(v);
    }

    /// Reader side: the extra coded by `code` (the Extra stream's value).
    #[inline(always)]
    pub(crate) fn get_extra(&mut self, code: u64) -> u64 {
        if self.layout < 2 {
            return code;
        }
        let v = self.extra_guess().wrapping_add(zigzag(code) as u64);
        self.after_extra(v);
        v
    }

    #[inline(always)]
    fn after_extra(&mut self, extra: u64) {
        let size = self.cur_size;
        self.extras[size as usize % EXTRA_TABLE] = (size, extra);
        let usable = size.wrapping_add(extra);
        self.last_usable = usable;
        if self.cur_new != 0 {
            let end = self.cur_new.wrapping_add(usable);
            self.next_end = end;
            self.class_end[class(size)] = end;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_of_counts_from_the_newest_within_the_window() {
        let list: Vec<u64> = (1..=40).collect(); // 40 is the newest
        for p in 1..=40u64 {
            assert_eq!(rank_of(&list, p, 64), Some(40 - p as usize), "p {p}");
        }
        assert_eq!(rank_of(&list, 41, 64), None);
        assert_eq!(rank_of(&list, 5, 30), None, "outside the window");
        assert_eq!(rank_of(&list, 11, 30), Some(29));
        let dup = [7u64, 9, 7, 3, 3, 3, 3, 3, 3, 3, 3];
        assert_eq!(rank_of(&dup, 7, 64), Some(8), "the newest of equal entries");
    }

    #[test]
    fn size_classes_stay_in_the_table() {
        for s in (0..5000u64).chain([u64::MAX, u64::MAX / 2, 1 << 40]) {
            assert!(class(s) < CLASSES, "{s}");
        }
        assert_eq!((class(16), class(17), class(128), class(129), class(160), class(161)), (1, 2, 8, 8, 8, 9));
    }

    #[test]
    fn glibc_rounding_and_sequential_carving_are_predicted() {
        // glibc: usable = roundup16(size + 8) - 8 (at least 24), each block
        // 16 bytes of header after the previous one's usable end... 8 here.
        let mut w = Predictor::new(2);
        let mut out: Streams = Default::default();
        let mut p = 0x5555_0000_0010u64;
        let mut x = 7u64;
        for _ in 0..2000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let size = 24 + (x >> 33) % 1000;
            let usable = (size + 8).div_ceil(16) * 16 - 8;
            w.event();
            w.size(size);
            w.put(Field::NewPtr, p, &mut out);
            w.put_extra(usable - size, &mut out);
            p += usable + 8;
        }
        // After the first few, every address and every extra is predicted.
        let zeros = |s: &[u8]| s.iter().filter(|&&b| b == 0).count();
        assert!(zeros(&out[Stream::AllocDelta as usize]) >= 1995, "{:?}", &out[Stream::AllocDelta as usize][..8]);
        assert!(zeros(&out[Stream::Extra as usize]) >= 1995);
        assert_eq!(out[Stream::AllocRank as usize].len(), 2000);
    }
}
