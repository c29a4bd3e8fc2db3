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
//!
//! Layout 4 (version 6) keeps a thread's predictions from one record to its
//! next (`columns::Chain`) and adds:
//! - a free of a block allocated earlier in the chain (beyond the recent
//!   allocations) named by the allocation's number, as a delta to the
//!   number after the previous such free: a FIFO (a cache replacing its
//!   oldest entry, a queue) costs a run of 0;
//! - each size field against the value it had at the same call site last
//!   time, and each kind byte against the call site's last one.
//!
//! Layout 6 (version 8) adds:
//! - each event's stack as its rank among the (at most [`STACK_MTF`])
//!   stacks that followed the thread's previous event's stack, the latest
//!   first, or an escape and the id: a compiler's calls come in long
//!   sequences that repeat;
//! - allocation and free misses' address deltas in units of 16 bytes (the
//!   allocators' alignment), the low bits only when they are not 0.
//!
//! The state a chain carries is bounded per thread: the ring of
//! [`FAR_WINDOW`] allocations (and the writer's index of them), the
//! direct-mapped tables (sizes, kinds, extras, freed blocks per size, and
//! layout 6's [`STACK_CTX`] lists of stacks), about 14 MB at most.

use super::columns::Stream;
use super::format::EV_MALLOC;
use super::fields::{DecErr, Field};
use super::far_index::{FarIndex, Usable};
use super::ring::{Ring, UNKNOWN};
use super::varint::{put_svarint, put_varint, to_zigzag, zigzag};

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
/// Layout 4: a block allocated earlier in the chain, named by its
/// allocation number (`Stream::FreeSeq`); the ranks start one later.
const FREE_FAR: u64 = 2;
const FREE_RANK0_V4: u64 = 3;

/// Layout 4: allocation results remembered by their number in the chain
/// (a ring), for the frees of blocks allocated long before.
pub(crate) const FAR_WINDOW: u64 = 1 << 19;
/// Layout 4: blocks freed, remembered per usable size (direct-mapped lists):
/// glibc's tcache and fastbins, and the size-class allocators, hand a
/// size's last freed block out next, however many of other sizes were
/// freed since.
const SIZE_LISTS: usize = 1 << 10;
/// Newest entries of a size's list an allocation is looked up among.
const SIZE_WINDOW: usize = 16;
/// Layout 4: an allocation result found among the freed blocks of its
/// predicted usable size: this + its rank there (after the ranks among
/// the recent frees).
const ALLOC_SIZE0: u64 = ALLOC_RANK0 + FREE_WINDOW as u64;
/// Layout 7: an allocation at the top, after the top's last block
/// (`top_guess`); the code after the ranks of the freed blocks per size.
const ALLOC_TOP: u64 = ALLOC_SIZE0 + SIZE_WINDOW as u64;
/// Layout 4: entries of the table of the last size seen per call site.
const SITE_SIZES: usize = 1 << 14;
/// Layout 4: entries of the table of the last kind byte per call site.
const SITE_KINDS: usize = 1 << 12;
/// Slots of the writer's filter of recent allocations (`allocs_filter`):
/// four times the most entries the list holds, 8 KiB.
const FILTER_BITS: u32 = 12;

/// Layout 6: stacks remembered per predecessor (direct-mapped on the
/// thread's previous event's stack), and how many each.
pub(crate) const STACK_CTX: usize = 1 << 14;
pub(crate) const STACK_MTF: usize = 4;

/// Layout 6's codings, each of which the recoding harness can turn off
/// (`MTLAB_RECODE_OPTS`, a mask of these) to measure what it buys
/// (docs/benchmarks.md, *What each format change bought*).
pub(crate) const OPT_STACK: u32 = 1;
pub(crate) const OPT_TIMESKIP: u32 = 8;
pub(crate) const OPT_FREE16: u32 = 16;
pub(crate) const OPT_ALLOC16: u32 = 32;

#[cfg(test)]
thread_local! {
    pub(crate) static OPTS: std::cell::Cell<u32> = const { std::cell::Cell::new(u32::MAX) };
}

fn layout6_opts() -> u32 {
    #[cfg(test)]
    {
        OPTS.with(|o| o.get())
    }
    #[cfg(not(test))]
    {
        u32::MAX
    }
}

/// Moves entry `r` of `l` to the front (`r` = len - 1 drops the last one
/// for `v`, which is new): both sides' lists stay alike. Each entry handed
/// on in a register: `copy_within` called libc's memmove for at most three
/// entries, at every event of a layout-6 trace.
#[inline(always)]
fn to_front<T: Copy>(l: &mut [T], r: usize, v: T) {
    let mut carry = v;
    for x in &mut l[..=r] {
        carry = std::mem::replace(x, carry);
    }
}

/// Layout 6: an address delta in units of 16 bytes (the allocators'
/// alignment) with a flag, and its low bits after it when they are not 0.
#[inline(always)]
fn put_delta16(out: &mut Vec<u8>, d: i64) {
    let low = d as u64 & 15;
    // d >> 4 lies in [-2^59, 2^59): its zigzag and the flag fit 64 bits.
    let h = d >> 4;
    put_varint(out, to_zigzag(h) * 2 + u64::from(low != 0));
    if low != 0 {
        put_varint(out, low);
    }
}

#[inline(always)]
fn get_delta16(mut read: impl FnMut() -> Result<u64, DecErr>) -> Result<u64, DecErr> {
    let c = read()?;
    let high = (zigzag(c >> 1) as u64) << 4;
    Ok(if c & 1 != 0 { high | (read()? & 15) } else { high })
}

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
    /// Layout 7: the end of the last allocation not coded as a freed
    /// block's rank (a miss, the class end or the top itself), and whether
    /// the current event's allocation is such a one.
    top_end: u64,
    cur_fresh: bool,
    /// The previous free that missed the recent allocations.
    prev_free_miss: u64,
    /// Per requested size (direct-mapped): (size, extra) last seen.
    extras: Vec<(u64, u64)>,
    last_usable: u64,
    /// The current event's requested size (product of its size fields) and
    /// its allocation result.
    cur_size: u64,
    cur_new: u64,
    // Layout 4 only.
    /// Allocation results and their usable sizes by their number in the
    /// chain (mod FAR_WINDOW), and how many there were.
    ring: Ring,
    seq: u64,
    /// The number of each entry of `allocs`.
    allocs_seq: Vec<u64>,
    /// Per usable size (direct-mapped on `size_slot`): the size the slot
    /// holds, and its freed blocks, newest last.
    size_tag: Vec<u64>,
    size_frees: Vec<Vec<u64>>,
    /// Number of the block the previous far free freed.
    prev_far: u64,
    /// Writer only (`for_writer`): each address's latest allocation number,
    /// and that block's usable size (`Ring::get`'s), so that a far free
    /// found here does not also read the ring (a second cache miss).
    is_writer: bool,
    seq_of: FarIndex,
    /// Writer only (layout 4): how many entries of `allocs` fall in each
    /// slot of `filter_slot`, so that `far_seq` scans the entries past the
    /// window only for an address some entry may be (on python3 most far
    /// frees are of blocks in none, and the scan was a fifth of the column
    /// time).
    allocs_filter: Vec<u16>,
    /// The current event's call site (stack id) and size fields so far;
    /// per (site, field), direct-mapped: the size last seen (only a guess:
    /// two sites may share a slot).
    site: u64,
    size_n: u64,
    site_sizes: Vec<u64>,
    /// The kind byte last seen per call site (direct-mapped, no key: only
    /// a guess, which the stream corrects by XOR).
    site_kinds: Vec<u8>,
    // Layout 6 only.
    /// Which of layout 6's codings are on (`OPT_*`; all but in the
    /// harness's experiments).
    opts: u32,
    /// Per predecessor (direct-mapped on the thread's previous event's
    /// stack): the stacks that followed it, the latest first.
    stack_ctx: Vec<[u32; STACK_MTF]>,
    prev_stack: u64,
}

/// Rank of `p` counted from the newest, among the last `window` entries.
/// Finishing a trace runs this for every pointer, over up to 256 recent
/// and 768 older entries: with AVX2, 8 entries a step by two vector
/// compares (the scalar form's 8 compares and branches were a sixth of
/// glibc-simple's column time).
fn rank_of(list: &[u64], p: u64, window: usize) -> Option<usize> {
    let w = &list[list.len().saturating_sub(window)..];
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { rank_of_avx2(w, p) };
    }
    rank_of_scalar(w, p)
}

/// `rank_of`'s scan without vectors: 8 entries at a time, only whether
/// any is `p` (a mask of which ones cost a shift and an OR per entry, and
/// the compiler did not vectorize it on x86-64's baseline), then which, in
/// the block that has it.
fn rank_of_scalar(w: &[u64], p: u64) -> Option<usize> {
    let n = w.len();
    let mut end = n;
    while end >= 8 {
        let blk: &[u64; 8] = w[end - 8..end].try_into().expect("8 entries");
        let mut hit = false;
        for &x in blk {
            hit |= x == p;
        }
        if hit {
            let newest = end - 8 + blk.iter().rposition(|&x| x == p).expect("a hit in the block");
            return Some(n - 1 - newest);
        }
        end -= 8;
    }
    w[..end].iter().rev().position(|&x| x == p).map(|r| r + (n - end))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn rank_of_avx2(w: &[u64], p: u64) -> Option<usize> {
    use std::arch::x86_64::{__m256i, _mm256_castsi256_pd, _mm256_cmpeq_epi64, _mm256_loadu_si256, _mm256_movemask_pd, _mm256_set1_epi64x};
    let n = w.len();
    let mut end = n;
    let pv = _mm256_set1_epi64x(p as i64);
    while end >= 8 {
        let blk = &w[end - 8..end];
        // SAFETY: `blk` is 8 readable u64s; the loads are unaligned ones.
        let (lo, hi) = unsafe { (_mm256_loadu_si256(blk.as_ptr() as *const __m256i), _mm256_loadu_si256(blk[4..].as_ptr() as *const __m256i)) };
        let m_lo = _mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(lo, pv))) as u32;
        let m_hi = _mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(hi, pv))) as u32;
        let m = m_hi << 4 | m_lo;
        if m != 0 {
            // The newest match: the highest set bit.
            let newest = end - 8 + (31 - m.leading_zeros()) as usize;
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
            top_end: 0,
            cur_fresh: false,
            prev_free_miss: 0,
            extras: if v2 { vec![(u64::MAX, 0); EXTRA_TABLE] } else { Vec::new() },
            last_usable: 0,
            cur_size: 1,
            cur_new: 0,
            ring: Ring::default(),
            seq: 0,
            allocs_seq: Vec::new(),
            size_tag: if layout >= 4 { vec![u64::MAX; SIZE_LISTS] } else { Vec::new() },
            size_frees: if layout >= 4 { vec![Vec::new(); SIZE_LISTS] } else { Vec::new() },
            prev_far: u64::MAX,
            is_writer: false,
            seq_of: Default::default(),
            allocs_filter: Vec::new(),
            site: 0,
            size_n: 0,
            site_sizes: if layout >= 4 { vec![0; SITE_SIZES] } else { Vec::new() },
            site_kinds: if layout >= 4 { vec![EV_MALLOC; SITE_KINDS] } else { Vec::new() },
            opts: if layout >= 6 { layout6_opts() } else { 0 },
            stack_ctx: if layout >= 6 { vec![[u32::MAX; STACK_MTF]; STACK_CTX] } else { Vec::new() },
            prev_stack: 0,
        }
    }

    /// Reader side: a stand-in for layout `layout`'s predictions, with none
    /// of its tables (half a MiB, layout 6's stacks most of it), for a record
    /// that takes over its thread's previous record's predictions
    /// (`ColumnFields::resume` replaces it before any event is read).
    pub(crate) fn awaiting(layout: u8) -> Predictor {
        Predictor { layout, opts: if layout >= 6 { layout6_opts() } else { 0 }, ..Predictor::new(1) }
    }

    /// Reader side (layout 4): whether `code` (the FreeRank stream's value)
    /// names a block by its allocation number, read from the FreeSeq stream.
    #[inline(always)]
    pub(crate) fn is_far(&self, code: u64) -> bool {
        self.layout >= 4 && code == FREE_FAR
    }

    /// Reader side (layout 4): the number of the block the previous far
    /// free freed.
    pub(crate) fn prev_far(&self) -> u64 {
        self.prev_far
    }

    /// Reader side, ahead of the decode (layout 4): the number a far free
    /// coded `code` in the FreeSeq stream names after number `prev`; its
    /// ring entry starts loading. Only a hint: the decode checks the number.
    #[inline(always)]
    pub(crate) fn prefetch_far(&self, prev: u64, code: u64) -> u64 {
        let s = prev.wrapping_add(1).wrapping_add(zigzag(code) as u64);
        self.ring.prefetch((s % FAR_WINDOW) as usize);
        s
    }

    /// The layout this predictor codes.
    pub(crate) fn layout(&self) -> u8 {
        self.layout
    }

    /// Whether layout 6's coding `opt` is on.
    #[inline(always)]
    pub(crate) fn on(&self, opt: u32) -> bool {
        self.opts & opt != 0
    }

    #[inline(always)]
    fn ctx_slot(&self) -> usize {
        (self.prev_stack.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 50) as usize & (STACK_CTX - 1)
    }

    /// Writer side (layouts 4 on): the STACK stream's code of an event's
    /// stack `v` (0 is a STACK_DEF's). Layout 6: 1 + its rank among the
    /// stacks that followed the thread's previous event's stack, or
    /// 1 + STACK_MTF + `v` (a compiler's calls come in long sequences).
    #[inline(always)]
    pub(crate) fn put_stack(&mut self, v: u64) -> u64 {
        self.site = v;
        if !self.on(OPT_STACK) {
            return v + 1;
        }
        let i = self.ctx_slot();
        let l = &mut self.stack_ctx[i];
        let code = match l.iter().position(|&x| u64::from(x) == v) {
            Some(r) => {
                to_front(l, r, v as u32);
                r as u64 + 1
            }
            None => {
                to_front(l, STACK_MTF - 1, v as u32);
                1 + STACK_MTF as u64 + v
            }
        };
        self.prev_stack = v;
        // The next event's list starts loading now, an event ahead (the
        // table is 256 KiB, and its read was a tenth of the column driver's
        // own samples on cc1's trace).
        crate::platform::prefetch::prefetch(&self.stack_ctx[self.ctx_slot()]);
        code
    }

    /// Reader side: the stack coded by `code` (not 0).
    #[inline(always)]
    pub(crate) fn get_stack(&mut self, code: u64) -> Result<u64, DecErr> {
        let v = if !self.on(OPT_STACK) {
            code - 1
        } else {
            let i = self.ctx_slot();
            let l = &mut self.stack_ctx[i];
            let (r, v) = if code <= STACK_MTF as u64 {
                let r = (code - 1) as usize;
                (r, u64::from(l[r]))
            } else {
                let v = code - 1 - STACK_MTF as u64;
                if v > u64::from(u32::MAX) {
                    return Err(DecErr::Columns("a stack id does not fit 32 bits"));
                }
                (STACK_MTF - 1, v)
            };
            to_front(l, r, v as u32);
            self.prev_stack = v;
            v
        };
        self.site = v;
        Ok(v)
    }

    /// A new event starts (both sides call this at each kind byte).
    #[inline(always)]
    pub(crate) fn event(&mut self) {
        self.cur_size = 1;
        self.cur_new = 0;
        self.size_n = 0;
    }

    /// The current event's stack id (both sides, layout 4: sizes are
    /// predicted per call site).
    #[inline(always)]
    pub(crate) fn site(&mut self, stack: u64) {
        self.site = stack;
    }

    #[inline(always)]
    fn kind_slot(&self) -> usize {
        (self.site.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52) as usize & (SITE_KINDS - 1)
    }

    /// Writer side (layout 4): the KIND stream's byte for kind byte `b` of
    /// the current event, whose site is set: `b` XOR the site's last one.
    #[inline(always)]
    pub(crate) fn put_kind_at_site(&mut self, b: u8) -> u8 {
        let i = self.kind_slot();
        let code = b ^ self.site_kinds[i];
        self.site_kinds[i] = b;
        code
    }

    /// Reader side (layout 4): the kind byte coded by `code`.
    #[inline(always)]
    pub(crate) fn kind_at_site(&mut self, code: u8) -> u8 {
        let i = self.kind_slot();
        let b = code ^ self.site_kinds[i];
        self.site_kinds[i] = b;
        b
    }

    /// The table slot of the current size field.
    #[inline(always)]
    fn site_slot(&self) -> usize {
        let key = self.site << 2 | self.size_n.min(3);
        (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 50) as usize & (SITE_SIZES - 1)
    }

    /// Writer side: codes size field `v` of the current event. Layout 4:
    /// against the guess `g`, the size this field had at this call site
    /// last time: 0 when `v` is `g`, `v + 1` below it, `v` above it (every
    /// value has a code; a slot never written guesses 0, and then the code
    /// is the size itself).
    #[inline(always)]
    pub(crate) fn put_size(&mut self, v: u64, out: &mut Streams) {
        self.size(v);
        if self.layout < 4 {
            return put_varint(&mut out[Stream::Size as usize], v);
        }
        let i = self.site_slot();
        let g = self.site_sizes[i];
        let code = match v.cmp(&g) {
            std::cmp::Ordering::Equal => 0,
            std::cmp::Ordering::Less => v + 1,
            std::cmp::Ordering::Greater => v,
        };
        put_varint(&mut out[Stream::Size as usize], code);
        self.site_sizes[i] = v;
        self.size_n += 1;
    }

    /// Reader side: the size coded by `code` (the Size stream's value).
    #[inline(always)]
    pub(crate) fn get_size(&mut self, code: u64) -> u64 {
        let v = if self.layout < 4 {
            code
        } else {
            let i = self.site_slot();
            let g = self.site_sizes[i];
            let v = match code {
                0 => g,
                c if c <= g => c - 1,
                c => c,
            };
            self.site_sizes[i] = v;
            self.size_n += 1;
            v
        };
        self.size(v);
        v
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

    /// The end of the last allocation of the current event's size class;
    /// layout 7: plus the gap, as `alloc_guess` (glibc carves a new chunk
    /// from the top after the last one carved there, which is often of the
    /// same class while reused blocks come between: python3's str and tuple
    /// of each element of a list).
    /// Layout 7: after the end of the last allocation that was no freed
    /// block's (plus the gap): glibc carves new chunks from its top one
    /// after the other, while the blocks it hands out again from its bins
    /// come between them (pyjson's misses, coded against the previous
    /// allocation's end: 2.0 MB of its trace, 0.08 MB with this guess).
    #[inline(always)]
    fn top_guess(&self) -> u64 {
        if self.top_end == 0 {
            0
        } else {
            self.top_end.wrapping_add(self.gap)
        }
    }

    #[inline(always)]
    fn class_guess(&self) -> u64 {
        let end = self.class_end[class(self.cur_size)];
        if self.layout >= 7 && end != 0 {
            end.wrapping_add(self.gap)
        } else {
            end
        }
    }

    /// Writer side: codes address `p` of field `f` into the streams.
    pub(crate) fn put(&mut self, f: Field, p: u64, out: &mut Streams) {
        if self.layout < 2 {
            return self.put_v1(f, p, out);
        }
        match f {
            Field::NewPtr if self.layout >= 4 => {
                let list = self.size_list();
                let code = if let Some(r) = rank_of(&self.frees, p, FREE_WINDOW) {
                    take(&mut self.frees, r);
                    ALLOC_RANK0 + r as u64
                } else if let Some((i, r)) = list.and_then(|i| rank_of(&self.size_frees[i], p, SIZE_WINDOW).map(|r| (i, r))) {
                    take(&mut self.size_frees[i], r);
                    ALLOC_SIZE0 + r as u64
                } else if p != self.alloc_guess() && p != 0 && p == self.class_guess() {
                    ALLOC_CLASS
                } else if self.layout >= 7 && p != self.alloc_guess() && p != 0 && p == self.top_guess() {
                    // Not the class's guess: that was tried above.
                    ALLOC_TOP
                } else {
                    let d = p.wrapping_sub(self.alloc_guess()) as i64;
                    if self.on(OPT_ALLOC16) {
                        put_delta16(&mut out[Stream::AllocDelta as usize], d);
                    } else {
                        put_svarint(&mut out[Stream::AllocDelta as usize], d);
                    }
                    self.learn_gap(p);
                    ALLOC_MISS
                };
                self.cur_fresh = matches!(code, ALLOC_MISS | ALLOC_CLASS | ALLOC_TOP);
                put_varint(&mut out[Stream::AllocRank as usize], code);
                self.unlist(list, p);
            }
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
            Field::OldPtr if self.layout >= 4 => {
                // An address in no slot of the filter is none of `allocs`.
                let listed = self.allocs_filter[Self::filter_slot(p)] > 0;
                let code = if p == 0 {
                    FREE_NULL
                } else if let Some(r) = if listed { rank_of(&self.allocs, p, ALLOC_WINDOW) } else { None } {
                    let s = self.take_alloc(r).1;
                    self.freed(p, s);
                    FREE_RANK0_V4 + r as u64
                } else if let Some((s, u)) = self.far_seq(p, listed) {
                    put_svarint(&mut out[Stream::FreeSeq as usize], s.wrapping_sub(self.prev_far.wrapping_add(1)) as i64);
                    self.prev_far = s;
                    self.freed_usable(p, u);
                    FREE_FAR
                } else {
                    let d = p.wrapping_sub(self.prev_free_miss) as i64;
                    if self.on(OPT_FREE16) {
                        put_delta16(&mut out[Stream::FreeDelta as usize], d);
                    } else {
                        put_svarint(&mut out[Stream::FreeDelta as usize], d);
                    }
                    self.prev_free_miss = p;
                    FREE_MISS
                };
                put_varint(&mut out[Stream::FreeRank as usize], code);
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
                Field::NewPtr if self.layout >= 4 => {
                    let list = self.size_list();
                    let p = match code {
                        ALLOC_MISS => {
                            let d = if self.on(OPT_ALLOC16) {
                                get_delta16(|| delta(Stream::AllocDelta))?
                            } else {
                                zigzag(delta(Stream::AllocDelta)?) as u64
                            };
                            let p = self.alloc_guess().wrapping_add(d);
                            self.learn_gap(p);
                            p
                        }
                        ALLOC_CLASS => self.class_guess(),
                        ALLOC_TOP if self.layout >= 7 => self.top_guess(),
                        c if c >= ALLOC_SIZE0 => {
                            let i = list.ok_or(DecErr::Columns("an address from a size with no freed blocks"))?;
                            get_rank(&mut self.size_frees[i], SIZE_WINDOW, c - ALLOC_SIZE0)?
                        }
                        c => get_rank(&mut self.frees, FREE_WINDOW, c - ALLOC_RANK0)?,
                    };
                    self.cur_fresh = matches!(code, ALLOC_MISS | ALLOC_CLASS | ALLOC_TOP);
                    self.unlist(list, p);
                    p
                }
                Field::NewPtr => match code {
                    ALLOC_MISS => {
                        let p = self.alloc_guess().wrapping_add(zigzag(delta(Stream::AllocDelta)?) as u64);
                        self.learn_gap(p);
                        p
                    }
                    ALLOC_CLASS => self.class_end[class(self.cur_size)],
                    c => get_rank(&mut self.frees, FREE_WINDOW, c - ALLOC_RANK0)?,
                },
                Field::OldPtr if self.layout >= 4 => match code {
                    FREE_NULL => 0,
                    FREE_MISS => {
                        let d = if self.on(OPT_FREE16) {
                            get_delta16(|| delta(Stream::FreeDelta))?
                        } else {
                            zigzag(delta(Stream::FreeDelta)?) as u64
                        };
                        let p = self.prev_free_miss.wrapping_add(d);
                        self.prev_free_miss = p;
                        p
                    }
                    FREE_FAR => {
                        let s = self.prev_far.wrapping_add(1).wrapping_add(zigzag(delta(Stream::FreeSeq)?) as u64);
                        if s >= self.seq || self.seq - s > FAR_WINDOW {
                            return Err(DecErr::Columns("a freed block's number is out of range"));
                        }
                        self.prev_far = s;
                        let p = self.ring.addr((s % FAR_WINDOW) as usize);
                        self.freed(p, s);
                        p
                    }
                    c => {
                        let r = usize::try_from(c - FREE_RANK0_V4).map_err(|_| DecErr::Columns("address rank out of range"))?;
                        if r >= ALLOC_WINDOW.min(self.allocs.len()) {
                            return Err(DecErr::Columns("address rank out of range"));
                        }
                        let (p, s) = self.take_alloc(r);
                        self.freed(p, s);
                        p
                    }
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

    /// Layout 4, writer: the number of the allocation that returned `p`,
    /// when it is still in the ring and no later one returned `p`, and
    /// that block's usable size.
    #[inline(always)]
    fn far_seq(&self, p: u64, listed: bool) -> Option<(u64, u32)> {
        // Past the window but not yet let go (and so not yet in `seq_of`):
        // the newest such entry, found the way a rank is (`listed`: `p`'s
        // slot of the filter has entries).
        let past = self.allocs.len().saturating_sub(ALLOC_WINDOW);
        let (s, u) = match if listed { rank_of(&self.allocs[..past], p, past) } else { None } {
            Some(r) => {
                let s = self.allocs_seq[past - 1 - r];
                (s, self.ring.get((s % FAR_WINDOW) as usize).1)
            }
            None => match self.seq_of.get(p)? {
                (s, Usable::Known(u)) => (s, u),
                (s, Usable::InRing) => (s, self.ring.get((s % FAR_WINDOW) as usize).1),
            },
        };
        // Number s's ring slot holds allocation s (address p) until
        // allocation s + FAR_WINDOW takes it: the range is the whole check.
        (self.seq - s <= FAR_WINDOW).then_some((s, u))
    }

    /// Layout 4: removes entry `r` (from the newest) of the recent
    /// allocations: (its address, its number).
    #[inline(always)]
    fn take_alloc(&mut self, r: usize) -> (u64, u64) {
        let p = take(&mut self.allocs, r);
        if self.is_writer {
            self.allocs_filter[Self::filter_slot(p)] -= 1;
        }
        (p, take(&mut self.allocs_seq, r))
    }

    /// `allocs_filter`'s slot of address `p`.
    #[inline(always)]
    fn filter_slot(p: u64) -> usize {
        (p.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - FILTER_BITS)) as usize
    }

    /// Layout 4: the slot of usable size `u`'s freed blocks.
    #[inline(always)]
    fn size_slot(u: u64) -> usize {
        (u.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54) as usize & (SIZE_LISTS - 1)
    }

    /// Layout 4: the freed blocks of the current event's predicted usable
    /// size (its size and predicted extra), when the slot holds that size.
    #[inline(always)]
    fn size_list(&self) -> Option<usize> {
        let u = self.cur_size.wrapping_add(self.extra_guess());
        let i = Self::size_slot(u);
        (self.size_tag[i] == u).then_some(i)
    }

    /// Layout 4: block `p`, handed out again, leaves its size's list.
    #[inline(always)]
    fn unlist(&mut self, list: Option<usize>, p: u64) {
        if let Some(i) = list {
            if let Some(r) = rank_of(&self.size_frees[i], p, SIZE_WINDOW) {
                take(&mut self.size_frees[i], r);
            }
        }
    }

    /// Layout 4: block `p` of allocation number `s` was freed: it joins the
    /// list of its usable size, when that is known.
    #[inline(always)]
    fn freed(&mut self, p: u64, s: u64) {
        if s >= self.seq || self.seq - s > FAR_WINDOW {
            return;
        }
        self.freed_usable(p, self.ring.get((s % FAR_WINDOW) as usize).1);
    }

    /// `freed`, with the block's usable size known (`UNKNOWN`: not known).
    #[inline(always)]
    fn freed_usable(&mut self, p: u64, u: u32) {
        if u == UNKNOWN {
            return;
        }
        let u = u as u64;
        let i = Self::size_slot(u);
        if self.size_tag[i] != u {
            self.size_tag[i] = u;
            self.size_frees[i].clear();
        }
        push(&mut self.size_frees[i], p, SIZE_WINDOW);
    }

    /// The writer's predictor: it also finds each address's allocation
    /// number (layout 4), which the reader is given.
    pub(crate) fn for_writer(layout: u8) -> Predictor {
        Predictor { is_writer: true, allocs_filter: vec![0; 1 << FILTER_BITS], ..Predictor::new(layout) }
    }

    #[inline(always)]
    fn after(&mut self, f: Field, p: u64) {
        match f {
            Field::NewPtr if self.layout >= 4 => {
                if p != 0 {
                    // The ring grows to its window (a short chain's stays
                    // small: the reader holds one per thread), then wraps.
                    // The usable size is known once the event's extra is
                    // (`after_extra`).
                    if self.seq < FAR_WINDOW {
                        self.ring.push(p);
                    } else {
                        self.ring.set((self.seq % FAR_WINDOW) as usize, p, UNKNOWN);
                    }
                    if self.allocs.len() >= 4 * ALLOC_WINDOW {
                        let old = self.allocs.len() - ALLOC_WINDOW;
                        // The writer learns an address's number only once the
                        // block has left the recent allocations unfreed: most
                        // blocks are freed within them (named by rank), and the
                        // index's inserts, a cache miss each, were a fifth of
                        // the rewrite's column time on python3. Until then
                        // `far_seq` finds it among the entries past the window;
                        // it checks every number it finds against the ring, so a
                        // stale one is harmless.
                        if self.is_writer {
                            // Its usable size is known: its event has ended.
                            let ring = &self.ring;
                            let left = self.allocs[..old].iter().zip(&self.allocs_seq[..old]);
                            self.seq_of.insert_all(left.clone().map(|(&a, &n)| (a, n, ring.get((n % FAR_WINDOW) as usize).1)));
                            for (&a, _) in left {
                                self.allocs_filter[Self::filter_slot(a)] -= 1;
                            }
                        }
                        self.allocs.drain(..old);
                        self.allocs_seq.drain(..old);
                    }
                    self.allocs.push(p);
                    if self.is_writer {
                        self.allocs_filter[Self::filter_slot(p)] += 1;
                    }
                    self.allocs_seq.push(self.seq);
                    self.seq += 1;
                }
                self.cur_new = p;
            }
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
            if self.cur_fresh {
                self.top_end = end;
            }
            if self.layout >= 4 {
                // The current event's allocation is the ring's newest.
                let slot = (self.seq.wrapping_sub(1) % FAR_WINDOW) as usize;
                self.ring.set_usable(slot, u32::try_from(usable).unwrap_or(UNKNOWN));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Xorshift;

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
    fn rank_of_agrees_with_a_plain_scan_on_random_lists() {
        // Lists of every length around the 8-entry blocks, few distinct
        // values (so that blocks hold several equal entries), windows
        // shorter and longer than the list.
        let plain = |l: &[u64], p: u64, w: usize| l.iter().rev().take(w).position(|&x| x == p);
        let mut rnd = Xorshift::new(0x2545_f491_4f6c_dd1d);
        for _ in 0..20_000 {
            let len = rnd.below(80) as usize;
            let distinct = 1 + rnd.below(40);
            let list: Vec<u64> = (0..len).map(|_| rnd.below(distinct)).collect();
            let (p, w) = (rnd.below(distinct + 2), rnd.below(90) as usize);
            let want = plain(&list, p, w);
            assert_eq!(rank_of(&list, p, w), want, "{list:?} {p} {w}");
            // Both scans, whichever `rank_of` picks on this CPU.
            let win = &list[list.len().saturating_sub(w)..];
            assert_eq!(rank_of_scalar(win, p), want, "scalar: {list:?} {p} {w}");
            #[cfg(target_arch = "x86_64")]
            if std::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2, checked just above.
                assert_eq!(unsafe { rank_of_avx2(win, p) }, want, "AVX2: {list:?} {p} {w}");
            }
        }
    }

    #[test]
    fn address_deltas_in_16_byte_units_round_trip() {
        let mut rng = Xorshift::new(0x2545_f491_4f6c_dd1d);
        let mut ds: Vec<i64> = vec![0, 1, -1, 15, -15, 16, -16, 17, -17, 4096, -4096, i64::MAX, i64::MIN, i64::MAX - 15, i64::MIN + 16];
        for _ in 0..2000 {
            let x = rng.next_u64();
            ds.push(x as i64 >> (x % 60));
        }
        for &d in &ds {
            let mut out = Vec::new();
            put_delta16(&mut out, d);
            let mut at = 0;
            let back = get_delta16(|| super::super::varint::varint(&out, &mut at)).unwrap();
            assert_eq!(back as i64, d);
            assert_eq!(at, out.len(), "{d}: all of it read");
            if d % 16 == 0 && d.unsigned_abs() < 1 << 20 {
                assert!(out.len() <= 3, "{d}: {out:?}");
            }
        }
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
