//! The shadow heap: live objects and mapped regions, with the fragmentation
//! sums of docs/metrics.md kept up to date so that a snapshot (time-series
//! point, peak, end) costs no walk over all regions: spans and live bytes at
//! every event, each region's fragmentation (a division) at the next
//! snapshot for the regions changed since.
//!
//! A region's *span* runs from its start to the end of its last live object
//! (the one at the highest address). Live objects sit in a table by address
//! (`live::LiveMap`, one lookup per event) whose value is the whole block —
//! size, site and usable extra packed in 8 bytes, the rare block that does
//! not fit spilled to a map of its own — and their start addresses in a
//! sparse bitmap (`starts::Starts`): when a region's last object is freed,
//! the new last one is the highest start below it, and when a region
//! appears, the blocks it takes in are the starts in its range. A table
//! slot, 16 bytes, at 64 % to 80 % fill (70 % to 87.5 % once the table is
//! large), and a bit: about 20 bytes a live block, where a table at most
//! half full, a slab entry and heaps of region ends took ~130 (python3 with
//! 2.8 M live blocks: 365 MiB of report).

use super::live::LiveMap;
use super::region_index::RegionIndex;
use super::starts::Starts;

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RegionKind {
    /// The brk heap, from its start to the current break.
    Brk,
    /// An anonymous mapping the allocator made through mmap/mremap.
    Mmap,
    /// A glibc block that is its own mmap'd chunk.
    GlibcChunk,
    /// A glibc non-main-arena heap.
    Arena,
}

#[derive(Clone, Debug)]
struct Region {
    start: u64,
    end: u64,
    kind: RegionKind,
    live_bytes: u64,
    live_count: u64,
    /// Start of the last live object (the highest); meaningless when none.
    last_start: u64,
    /// End of the last live object; == start when none.
    last_end: u64,
    /// `frag_fixed(start)` as last counted in `ShadowHeap::sum_frag`.
    frag: u64,
    /// Changed since `frag` was computed (and listed in `ShadowHeap::dirty`).
    dirty: bool,
}

impl Region {
    /// An empty region at 0 (a vacant slot of the slab, or the base of a new one).
    fn vacant() -> Region {
        Region { start: 0, end: 0, kind: RegionKind::Brk, live_bytes: 0, live_count: 0, last_start: 0, last_end: 0, frag: 0, dirty: false }
    }

    fn span(&self, start: u64) -> u64 {
        self.last_end.saturating_sub(start)
    }
    fn frag_fixed(&self, start: u64) -> u64 {
        frag_fixed(self.span(start), self.live_bytes)
    }

    /// Counts a live object of `size` bytes at `addr` in the region.
    #[inline(always)]
    fn place(&mut self, addr: u64, size: u64) {
        self.live_bytes += size;
        if self.live_count == 0 || addr >= self.last_start {
            self.last_start = addr;
            self.last_end = addr + size;
        }
        self.live_count += 1;
    }
}

/// The fragmentation of a span holding `live` bytes, (span − live) / span,
/// in units of 2^-52: the form the sums take, since integers add exactly in
/// any order and the mean at a peak then does not depend on which updates
/// came between (a float running sum did: a compact trace's peak and the
/// full trace's differed in the last digit).
fn frag_fixed(span: u64, live: u64) -> u64 {
    if span == 0 {
        return 0;
    }
    // Through i64: one conversion instruction instead of u64's several
    // (spans are far below 2^63, the result at most 2^52).
    (span.saturating_sub(live) as i64 as f64 / span as i64 as f64 * FRAG_ONE) as i64 as u64
}

/// Entries of `ShadowHeap::region_cache`.
const REGION_CACHE: usize = 1024;

/// `ShadowHeap::last_region`'s index for a gap between regions.
const NO_REGION: u32 = u32::MAX;

/// Fragmentation 1.0 in the fixed-point form of `frag_fixed`.
const FRAG_ONE: f64 = (1u64 << 52) as f64;

/// A live block as the table by address stores it: usable extra in the low
/// 12 bits, then the site in 24, the size in the top 28. A block with any
/// of them larger (256 MiB and more, a site past 16 M, an extra of 4 KiB
/// and more: rare, and each a large block) has every extra bit set, and
/// its details in `ShadowHeap::spilled`.
const EXTRA_BITS: u32 = 12;
const SITE_BITS: u32 = 24;
const SIZE_BITS: u32 = 64 - EXTRA_BITS - SITE_BITS;
const SPILLED: u64 = (1 << EXTRA_BITS) - 1;

#[inline(always)]
fn pack(o: &Object) -> Option<u64> {
    let fits = o.size >> SIZE_BITS == 0 && (o.stack as u64) >> SITE_BITS == 0 && (o.usable_extra as u64) < SPILLED;
    fits.then_some(o.usable_extra as u64 | (o.stack as u64) << EXTRA_BITS | o.size << (EXTRA_BITS + SITE_BITS))
}

#[inline(always)]
fn unpack(v: u64) -> Option<Object> {
    (v & SPILLED != SPILLED).then_some(Object {
        size: v >> (EXTRA_BITS + SITE_BITS),
        stack: (v >> EXTRA_BITS) as u32 & ((1 << SITE_BITS) - 1),
        usable_extra: (v & SPILLED) as u32,
    })
}

/// A live block, as the shadow heap hands it out.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Object {
    pub size: u64,
    /// The caller's tag for the allocation site (`analyze` passes its dense site index).
    pub stack: u32,
    /// malloc_usable_size minus size (saturated).
    usable_extra: u32,
}

impl Object {
    pub fn usable(&self) -> u64 {
        self.size + self.usable_extra as u64
    }
}

/// Numbers describing the heap at one moment (docs/metrics.md).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct HeapSnapshot {
    pub live_objects: u64,
    pub live_bytes: u64,
    pub live_usable_bytes: u64,
    pub regions: u64,
    pub mapped_bytes: u64,
    pub brk_bytes: u64,
    pub mmap_regions: u64,
    pub mmap_bytes: u64,
    /// Live bytes outside every known region (allocator memory mtlab did not see mapped).
    pub unplaced_bytes: u64,
    pub fragmentation: Fragmentation,
    pub utilization: f64,
}

/// A `HeapSnapshot`'s counters, taken when it happens; `finish` divides
/// out its ratios when it is read.
#[derive(Clone, Copy, Debug, Default)]
pub struct RawSnapshot {
    pub live_objects: u64,
    pub live_bytes: u64,
    live_usable_bytes: u64,
    regions: u64,
    mapped_bytes: u64,
    brk_bytes: u64,
    mmap_regions: u64,
    unplaced_bytes: u64,
    sum_span: u64,
    sum_region_live: u64,
    /// The settled regions' part of the sum of fragmentations...
    sum_frag: u128,
    /// ...and the span and live bytes of the one region changed since
    /// (span 0 when none), whose division waits for `finish`.
    unsettled: (u64, u64),
}

impl RawSnapshot {
    pub fn finish(&self) -> HeapSnapshot {
        let n = self.regions;
        let sum_frag = self.sum_frag + frag_fixed(self.unsettled.0, self.unsettled.1) as u128;
        HeapSnapshot {
            live_objects: self.live_objects,
            live_bytes: self.live_bytes,
            live_usable_bytes: self.live_usable_bytes,
            regions: n,
            mapped_bytes: self.mapped_bytes,
            brk_bytes: self.brk_bytes,
            mmap_regions: self.mmap_regions,
            mmap_bytes: self.mapped_bytes - self.brk_bytes,
            unplaced_bytes: self.unplaced_bytes,
            fragmentation: Fragmentation {
                mean: if n == 0 { 0.0 } else { sum_frag as f64 / FRAG_ONE / n as f64 },
                total: if self.sum_span == 0 {
                    0.0
                } else {
                    (self.sum_span - self.sum_region_live.min(self.sum_span)) as f64 / self.sum_span as f64
                },
            },
            // Unplaced bytes lie in no region `mapped_bytes` counts: left out,
            // or a heap mtlab cannot see mapped (musl's) would be over 100 % used.
            utilization: if self.mapped_bytes == 0 {
                0.0
            } else {
                (self.live_bytes - self.unplaced_bytes.min(self.live_bytes)) as f64 / self.mapped_bytes as f64
            },
        }
    }
}

#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Fragmentation {
    pub mean: f64,
    pub total: f64,
}

#[derive(Default)]
pub struct ShadowHeap {
    /// Live blocks by address, packed (`pack`).
    objects: LiveMap,
    /// The live blocks that do not pack, by address.
    spilled: FxHashMap<u64, Object>,
    /// Every live block's start.
    starts: Starts,
    /// Live blocks in no known region: how many, their bytes, and an
    /// interval their addresses are all in (it only grows while there are
    /// any), so that a new region elsewhere (most, in a program whose
    /// allocator mapped one chunk before tracing) looks for none.
    unplaced_live: usize,
    unplaced_bytes: u64,
    unplaced_span: (u64, u64),
    /// Regions by start: their index in `slab`, where they live so that a
    /// lookup's result (`last_region`) leads to the region itself without
    /// a second search of the tree.
    regions: RegionIndex,
    slab: Vec<Region>,
    free_regions: Vec<u32>,
    brk_start: u64,
    live_bytes: u64,
    live_usable: u64,
    mapped_bytes: u64,
    brk_bytes: u64,
    /// Regions other than the brk heap (a snapshot at every new peak
    /// counted them).
    mmap_regions: u64,
    sum_span: u64,
    sum_region_live: u64,
    /// Sum of the regions' `frag` fields (fixed point, exact); regions
    /// listed in `dirty` have changed since. Recomputed for them at a
    /// snapshot, not at every event: the division was a tenth of the shadow
    /// heap's work, and snapshots (time-series points, new peaks) are far
    /// fewer.
    sum_frag: u128,
    /// (slot, start) of each region changed since the last settle. Settled
    /// is whatever region is at that start then (the slot says where,
    /// unless the region was unmapped since).
    dirty: Vec<(u32, u64)>,
    /// Frees of addresses that were not live (allocated before tracing, or bugs).
    pub unknown_frees: u64,
    /// Allocations returning an address that was still live.
    pub overlapping_allocs: u64,
    /// The region found by the last lookup (start, end, index in `slab`);
    /// (0, 0, _) when none.
    last_region: std::cell::Cell<(u64, u64, u32)>,
    /// Regions found by lookups, (start, end, index in `slab`), by the
    /// address's 128 KiB window (`cache_slot`): right while that slab slot
    /// still holds a region of that start and end (checked on each use, so
    /// never invalidated). Lookups that alternate between regions — the
    /// arenas of a multithreaded program, blocks that are their own
    /// mappings — each searched the tree.
    region_cache: Vec<std::cell::Cell<(u64, u64, u32)>>,
}

impl ShadowHeap {
    pub fn new(brk_start: u64) -> Self {
        ShadowHeap { brk_start, starts: Starts::new(), region_cache: vec![Default::default(); REGION_CACHE], ..Default::default() }
    }


    #[inline(always)]
    fn cache_slot(addr: u64) -> usize {
        (addr >> 17) as usize & (REGION_CACHE - 1)
    }

    #[inline(always)]
    fn region_at(&self, addr: u64) -> Option<u32> {
        let (start, end, i) = self.last_region.get();
        if addr >= start && addr < end {
            return (i != NO_REGION).then_some(i);
        }
        let cached = self.region_cache.get(Self::cache_slot(addr));
        if let Some((start, end, i)) = cached.map(|c| c.get()) {
            if addr >= start && addr < end && self.slab.get(i as usize).is_some_and(|r| (r.start, r.end) == (start, end)) {
                self.last_region.set((start, end, i));
                return Some(i);
            }
        }
        let before = self.regions.at_or_before(addr);
        if let Some((start, i)) = before {
            let end = self.slab[i as usize].end;
            if addr < end {
                self.last_region.set((start, end, i));
                if let Some(c) = cached {
                    c.set((start, end, i));
                }
                return Some(i);
            }
        }
        // In no region: the gap around `addr` is remembered too, so that
        // the blocks of a chunk mapped before tracing are not each a search.
        let gap_start = before.map_or(0, |(_, i)| self.slab[i as usize].end);
        let gap_end = self.regions.at_or_after(addr).map_or(u64::MAX, |(s, _)| s);
        self.last_region.set((gap_start, gap_end, NO_REGION));
        None
    }

    /// The region starting at `start`.
    fn region(&self, start: u64) -> Option<&Region> {
        self.regions.get(start).map(|i| &self.slab[i as usize])
    }

    /// Puts `r` in a free slot of the slab and indexes it by its start.
    fn insert_region(&mut self, r: Region) {
        let (start, end) = (r.start, r.end);
        let i = match self.free_regions.pop() {
            Some(i) => {
                self.slab[i as usize] = r;
                i
            }
            None => {
                self.slab.push(r);
                (self.slab.len() - 1) as u32
            }
        };
        self.regions.insert(start, i);
        // The next lookup is most likely of a block in it (an mmapped chunk
        // is mapped, then allocated in); a cached gap it overlaps is gone.
        self.last_region.set((start, end, i));
        // And a later one of a block at its start (that chunk's free).
        if let Some(c) = self.region_cache.get(Self::cache_slot(start)) {
            c.set((start, end, i));
        }
    }

    /// Takes the region starting at `start` out of the index and the slab.
    fn remove_region(&mut self, start: u64) -> Option<Region> {
        let i = self.regions.remove(start)?;
        self.free_regions.push(i);
        // The vacant slot is not dirty: `settle_frag` skips it.
        Some(std::mem::replace(&mut self.slab[i as usize], Region::vacant()))
    }

    /// Removes a region's contribution to the sums, runs `f`, adds it back
    /// (its fragmentation at the next snapshot). Returns false when there is
    /// no region at `start`.
    #[inline(always)]
    fn update_region(&mut self, i: u32, f: impl FnOnce(&mut Region)) {
        let r = &mut self.slab[i as usize];
        let start = r.start;
        self.sum_span -= r.span(start);
        self.sum_region_live -= r.live_bytes;
        f(r);
        self.sum_span += r.span(start);
        self.sum_region_live += r.live_bytes;
        if !r.dirty {
            r.dirty = true;
            self.dirty.push((i, start));
        }
    }

    /// Brings `sum_frag` up to date with the regions changed since the last call.
    fn settle_frag(&mut self) {
        for k in 0..self.dirty.len() {
            let (i, start) = self.dirty[k];
            // Unmapped since: skipped. A region mapped at that start since
            // was settled when it was mapped (`map`), and listed itself
            // when it changed after (`update_region`).
            let r = &mut self.slab[i as usize];
            if r.start != start {
                continue;
            }
            if !r.dirty {
                continue;
            }
            r.dirty = false;
            let old = r.frag;
            r.frag = r.frag_fixed(start);
            self.sum_frag = self.sum_frag - old as u128 + r.frag as u128;
        }
        self.dirty.clear();
    }


    /// Starts loading what an allocation or free of `addr` will read.
    #[inline(always)]
    pub fn prefetch(&self, addr: u64) {
        self.objects.prefetch(addr);
    }

    /// The site of the live block at `addr`, for the pass to start loading
    /// its counters (`prefetch` some events before brought the table slot).
    #[inline(always)]
    pub fn prefetch_block(&self, addr: u64) -> Option<u32> {
        self.get(addr).map(|o| o.stack)
    }

    /// The object a table value stands for (`addr` finds a spilled one).
    #[inline(always)]
    fn object(&self, addr: u64, v: u64) -> Object {
        unpack(v).unwrap_or_else(|| self.spilled.get(&addr).copied().unwrap_or_default())
    }

    #[inline(always)]
    pub fn alloc(&mut self, addr: u64, size: u64, usable: u64, stack: u32) -> Option<Object> {
        let region = self.region_at(addr);
        let extra = usable.saturating_sub(size).min(u32::MAX as u64) as u32;
        let obj = Object { size, stack, usable_extra: extra };
        let packed = pack(&obj);
        let v = packed.unwrap_or(SPILLED);
        // One hash lookup on the common path; an address still live is rare.
        let replaced = if self.objects.insert_new(addr, v) {
            None
        } else {
            let old = self.free(addr);
            self.overlapping_allocs += 1;
            self.objects.insert(addr, v);
            old
        };
        if packed.is_none() {
            self.spilled.insert(addr, obj);
        }
        self.starts.insert(addr);
        self.live_bytes += size;
        self.live_usable += obj.usable();
        match region {
            Some(i) => self.update_region(i, |r| r.place(addr, size)),
            None => self.add_unplaced(addr, addr, 1, size),
        }
        replaced
    }

    /// Removes a live object; None (and counted) when `addr` was not live.
    pub fn free(&mut self, addr: u64) -> Option<Object> {
        self.free_in(addr).map(|(o, _)| o)
    }

    /// As `free`, with the start and kind of the region that held the object.
    #[inline(always)]
    pub fn free_in(&mut self, addr: u64) -> Option<(Object, Option<(u64, RegionKind)>)> {
        let v = self.objects.remove(addr)?;
        let obj = match unpack(v) {
            Some(o) => o,
            None => self.spilled.remove(&addr).unwrap_or_default(),
        };
        self.starts.remove(addr);
        self.live_bytes -= obj.size;
        self.live_usable -= obj.usable();
        let mut held = None;
        let region = self.region_at(addr);
        if let Some(i) = region {
            let starts = &self.starts;
            let objects = &self.objects;
            let spilled = &self.spilled;
            let r = &mut self.slab[i as usize];
            let start = r.start;
            self.sum_span -= r.span(start);
            self.sum_region_live -= r.live_bytes;
            held = Some((r.start, r.kind));
            r.live_bytes -= obj.size;
            r.live_count -= 1;
            if r.live_count == 0 {
                r.last_end = r.start;
            } else if addr == r.last_start {
                // The last object freed: the new last one is the highest
                // start below it.
                match starts.highest_in(r.start, addr) {
                    Some(a) => {
                        let v = objects.get(a).expect("a live start is in the table");
                        let size = unpack(v).unwrap_or_else(|| spilled.get(&a).copied().unwrap_or_default()).size;
                        (r.last_start, r.last_end) = (a, a + size);
                    }
                    None => r.last_end = r.start,
                }
            }
            self.sum_span += r.span(start);
            self.sum_region_live += r.live_bytes;
            if !r.dirty {
                r.dirty = true;
                self.dirty.push((i, start));
            }
        } else {
            debug_assert!(self.unplaced_live > 0, "a block in no region was not counted");
            self.unplaced_live = self.unplaced_live.saturating_sub(1);
            self.unplaced_bytes = self.unplaced_bytes.saturating_sub(obj.size);
        }
        Some((obj, held))
    }

    /// The region holding `addr`: its start and kind.
    pub fn region_of(&self, addr: u64) -> Option<(u64, RegionKind)> {
        let r = &self.slab[self.region_at(addr)? as usize];
        Some((r.start, r.kind))
    }

    /// Counts `count` live blocks of `bytes` with starts in [lo, hi] as in
    /// no known region.
    fn add_unplaced(&mut self, lo: u64, hi: u64, count: usize, bytes: u64) {
        if count == 0 {
            return;
        }
        if self.unplaced_live == 0 {
            self.unplaced_span = (lo, hi);
        }
        self.unplaced_span = (self.unplaced_span.0.min(lo), self.unplaced_span.1.max(hi));
        self.unplaced_live += count;
        self.unplaced_bytes += bytes;
    }

    /// Places the unplaced live blocks with starts in [start, end) in the
    /// region in slot `i` (which now holds that range).
    fn take_unplaced(&mut self, i: u32, start: u64, end: u64) {
        let (lo, hi) = self.unplaced_span;
        // An empty range too: a break that did not move resizes its region
        // to the same end (1 M unplaced blocks made each such event 1.6 ms).
        if self.unplaced_live == 0 || end <= start || end <= lo || start > hi {
            return;
        }
        let found = self.starts.all_in(start, end);
        if found.is_empty() {
            return;
        }
        let (mut n, mut bytes) = (0usize, 0u64);
        let mut placed: Vec<(u64, u64)> = Vec::with_capacity(found.len());
        for a in found {
            let v = self.objects.get(a).expect("a live start is in the table");
            let size = self.object(a, v).size;
            placed.push((a, size));
            n += 1;
            bytes += size;
        }
        self.update_region(i, |r| {
            for (a, size) in placed {
                r.place(a, size);
            }
        });
        self.unplaced_live -= n;
        self.unplaced_bytes -= bytes;
    }

    /// The addresses of the live blocks in no known region.
    #[cfg(test)]
    fn unplaced_addrs(&self) -> Vec<u64> {
        self.starts.all_in(0, u64::MAX).into_iter().filter(|&a| self.region_at(a).is_none()).collect()
    }

    pub fn count_unknown_free(&mut self) {
        self.unknown_frees += 1;
    }

    pub fn get(&self, addr: u64) -> Option<Object> {
        self.objects.get(addr).map(|v| self.object(addr, v))
    }

    /// Adds a region, or — for the brk heap and arena heaps, which grow and
    /// shrink in place — resizes the one starting at `start`. A new mapping
    /// replaces whatever it overlaps (mmap semantics). Objects already live
    /// in the new range are taken in.
    pub fn map(&mut self, start: u64, end: u64, kind: RegionKind) {
        if end <= start {
            return;
        }
        self.last_region.set((0, 0, 0));
        let resizable = matches!(kind, RegionKind::Brk | RegionKind::Arena);
        // Searched for only when it could be resized (an mmapped chunk is not).
        let same = if resizable { self.region(start).filter(|r| r.kind == kind).map(|r| r.end) } else { None };
        if let Some(old_end) = same {
            self.set_region_end(start, end, old_end);
            return;
        }
        self.unmap(start, end);
        let region = Region { start, end, kind, last_end: start, ..Region::vacant() };
        self.mapped_bytes += end - start;
        if kind == RegionKind::Brk {
            self.brk_bytes += end - start;
        } else {
            self.mmap_regions += 1;
        }
        // Empty: span 0, fragmentation 0, until it takes blocks in.
        self.insert_region(region);
        let i = self.regions.get(start).expect("just inserted");
        // Objects seen before their region was known are taken in now.
        self.take_unplaced(i, start, end);
    }

    fn set_region_end(&mut self, start: u64, end: u64, old_end: u64) {
        self.last_region.set((0, 0, 0));
        if end < old_end {
            self.unmap(end, old_end);
            return;
        }
        // Whatever the grown part overlaps is replaced, as the kernel would.
        self.unmap(old_end, end);
        let grow = end - old_end;
        let Some(i) = self.regions.get(start) else { return };
        let r = &mut self.slab[i as usize];
        r.end = end;
        let kind = r.kind;
        self.mapped_bytes += grow;
        if kind == RegionKind::Brk {
            self.brk_bytes += grow;
        }
        // Objects seen in the grown part before the growth was are taken in.
        self.take_unplaced(i, old_end, end);
    }

    /// Removes [start, end) from every region it touches (munmap semantics).
    pub fn unmap(&mut self, start: u64, end: u64) {
        if end <= start {
            return;
        }
        // A freed chunk's mapping, just looked up by the free: no search.
        let (cached_start, cached_end, cached) = self.last_region.get();
        self.last_region.set((0, 0, 0));
        if (cached_start, cached_end) == (start, end) && cached != NO_REGION {
            self.unmap_from(start, start, end);
            return;
        }
        // Regions are disjoint and sorted: the last one starting before
        // `end` overlaps the range unless it ends by `start`, and then no
        // other does (a new mapping, most often: one search, not two).
        let last = self.regions.before(end);
        let Some(last_start) = last.filter(|&(_, i)| self.slab[i as usize].end > start).map(|(s, _)| s) else { return };
        if last_start == start {
            // The only region touched (none before it reaches `start`): a
            // freed chunk's own mapping, most often.
            self.unmap_from(start, start, end);
            return;
        }
        let first = self.regions.before(start).filter(|&(_, i)| self.slab[i as usize].end > start).map(|(s, _)| s);
        let touched: Vec<u64> = first.into_iter().chain(self.regions.starts_in(start, end)).collect();
        for s in touched {
            self.unmap_from(s, start, end);
        }
    }


    /// Removes [start, end) from the region at `s`, which overlaps it.
    fn unmap_from(&mut self, s: u64, start: u64, end: u64) {
        if s < start && self.cut_free_tail(s, start, end) {
            return;
        }
        // An earlier step of `unmap`'s loop may have removed it already.
        let Some(r) = self.remove_region(s) else { return };
        self.sum_span -= r.span(s);
        self.sum_region_live -= r.live_bytes;
        self.sum_frag -= r.frag as u128;
        self.mapped_bytes -= r.end - s;
        if r.kind == RegionKind::Brk {
            self.brk_bytes -= r.end - s;
        } else {
            self.mmap_regions -= 1;
        }
        // Its live blocks are in no region now (their starts are in [s, r.end)).
        self.add_unplaced(s, r.end - 1, r.live_count as usize, r.live_bytes);
        // Pieces outside the unmapped range survive as regions of the same kind.
        if s < start {
            self.map(s, start, r.kind);
        }
        if r.end > end {
            self.map(end, r.end, r.kind);
        }
    }

    /// Cuts [start, end) off the region at `s` in place when that is its
    /// tail and no live block starts or reaches into it — glibc trimming
    /// the free top of its heap, the usual shrink. Its span and live bytes
    /// stay as they were. Otherwise (false) `unmap` takes the region out
    /// and maps the piece that is left, moving every live block out and
    /// back in: with a million of them, 12 ms a trim.
    fn cut_free_tail(&mut self, s: u64, start: u64, end: u64) -> bool {
        let Some(i) = self.regions.get(s) else { return false };
        let r = &mut self.slab[i as usize];
        if r.end > end || r.last_end > start || (r.live_count > 0 && r.last_start >= start) {
            return false;
        }
        let cut = r.end - start;
        r.end = start;
        self.mapped_bytes -= cut;
        if r.kind == RegionKind::Brk {
            self.brk_bytes -= cut;
        }
        true
    }

    /// The brk heap now ends at `brk`.
    pub fn set_break(&mut self, brk: u64) {
        if self.brk_start == 0 {
            self.brk_start = brk;
        }
        let start = self.brk_start;
        match self.region(start).map(|r| r.end) {
            Some(old) if brk > start => self.set_region_end(start, brk, old),
            Some(old) => self.unmap(start, old),
            None if brk > start => self.map(start, brk, RegionKind::Brk),
            None => {}
        }
    }

    /// Snapshot using the running sums (equal to `exact_snapshot`'s, faster).
    pub fn snapshot(&mut self) -> HeapSnapshot {
        self.raw_snapshot().finish()
    }

    /// The counters `snapshot` is made of, ratios not yet divided out: a
    /// growing program makes a new peak at nearly every allocation, and
    /// the conversions and divisions of a whole snapshot at each one were
    /// 4 % of a report (python3, 5 M peaks).
    ///
    /// A growing program changes one region between its peaks: that region
    /// is copied as it is, not settled (its division is made by `finish`).
    #[inline(always)]
    pub fn raw_snapshot(&mut self) -> RawSnapshot {
        if let [(i, start)] = self.dirty[..] {
            let r = &self.slab[i as usize];
            if r.start == start && r.dirty {
                let mut raw = self.raw(self.sum_frag - r.frag as u128);
                raw.unsettled = (r.span(start), r.live_bytes);
                return raw;
            }
        }
        self.settle_frag();
        self.raw(self.sum_frag)
    }

    /// Snapshot with mean fragmentation recomputed region by region.
    pub fn exact_snapshot(&self) -> HeapSnapshot {
        let sum: u128 = self.regions.iter().map(|(_, i)| &self.slab[i as usize]).map(|r| r.frag_fixed(r.start) as u128).sum();
        self.build(sum)
    }

    fn build(&self, sum_frag: u128) -> HeapSnapshot {
        self.raw(sum_frag).finish()
    }

    #[inline(always)]
    fn raw(&self, sum_frag: u128) -> RawSnapshot {
        RawSnapshot {
            live_objects: self.objects.len() as u64,
            live_bytes: self.live_bytes,
            live_usable_bytes: self.live_usable,
            regions: self.regions.len() as u64,
            mapped_bytes: self.mapped_bytes,
            brk_bytes: self.brk_bytes,
            mmap_regions: self.mmap_regions,
            unplaced_bytes: self.unplaced_bytes,
            sum_span: self.sum_span,
            sum_region_live: self.sum_region_live,
            sum_frag,
            unsettled: (0, 0),
        }
    }

    /// Sizes the live blocks' table for `n` blocks at once (a trace's
    /// `live_blocks_hint`), before any block is live; it still grows past
    /// that when it must.
    pub fn reserve_blocks(&mut self, n: usize) {
        if self.objects.len() == 0 {
            self.objects = LiveMap::with_capacity(n);
        }
    }

    /// Drops the live blocks' table and starts, for good: what is read
    /// after (snapshots) no longer counts them.
    pub fn release_blocks(&mut self) {
        self.objects = LiveMap::default();
        self.spilled = FxHashMap::default();
        self.starts = Starts::new();
    }

    pub fn live_bytes(&self) -> u64 {
        self.live_bytes
    }

    /// Whether the live-block table has outgrown a last-level cache (8 MiB
    /// and more), where a lookup is worth prefetching. Below, its misses
    /// are the cache's, short: from 1 MiB, cc1's report (a 2 MiB table)
    /// paid 10 % more for the prefetch stages than they saved.
    pub fn is_large(&self) -> bool {
        self.objects.table_bytes() >= 8 << 20
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Xorshift;

    #[test]
    fn fragmentation_follows_the_definition() {
        let mut h = ShadowHeap::new(0x1000);
        h.set_break(0x1000 + 1000);
        h.alloc(0x1000, 100, 100, 1);
        h.alloc(0x1000 + 300, 100, 100, 1);
        // span 400, live 200 -> 0.5
        let s = h.exact_snapshot();
        assert_eq!(s.fragmentation.total, 0.5);
        assert_eq!(s.fragmentation.mean, 0.5);
        assert_eq!(s.utilization, 0.2);
        // Freeing the last object shrinks the span to the first: frag 0.
        h.free(0x1000 + 300);
        assert_eq!(h.exact_snapshot().fragmentation.total, 0.0);
        // Trailing free space is ignored; a second empty region counts 0 in the mean.
        h.map(0x10_0000, 0x10_0000 + 4096, RegionKind::Mmap);
        h.alloc(0x1000 + 500, 100, 100, 1); // span 600, live 200
        let s = h.exact_snapshot();
        assert!((s.fragmentation.total - 400.0 / 600.0).abs() < 1e-12);
        assert!((s.fragmentation.mean - (400.0 / 600.0) / 2.0).abs() < 1e-12);
        assert_eq!(s.regions, 2);
        assert_eq!(s.mapped_bytes, 1000 + 4096);
        assert_eq!(s.brk_bytes, 1000);
        assert_eq!(h.snapshot().fragmentation, s.fragmentation);
    }

    #[test]
    fn unmap_splits_and_drops_regions() {
        let mut h = ShadowHeap::new(0);
        h.map(0x10000, 0x20000, RegionKind::Mmap);
        h.unmap(0x14000, 0x18000);
        let s = h.snapshot();
        assert_eq!(s.regions, 2);
        assert_eq!(s.mapped_bytes, 0xC000);
        h.unmap(0, u64::MAX);
        assert_eq!(h.snapshot().mapped_bytes, 0);
    }

    #[test]
    fn churn_keeps_span_exact_and_memory_bounded() {
        let mut h = ShadowHeap::new(0);
        h.map(0x10000, 0x20000, RegionKind::Mmap);
        h.alloc(0x10000, 64, 64, 1); // a long-lived object at the bottom
        for i in 0..100_000u64 {
            // The same address reused with the same size: duplicates in the heap of ends.
            h.alloc(0x18000, 32, 32, 2);
            if i % 3 == 0 {
                h.alloc(0x1a000, 16, 16, 3);
                h.free(0x1a000);
            }
            h.free(0x18000);
        }
        let s = h.exact_snapshot();
        assert_eq!(s.live_objects, 1);
        assert_eq!(s.fragmentation.total, 0.0, "span shrank back to the bottom object");
        let r = &h.region(0x10000).unwrap();
        assert_eq!(r.last_end, 0x10000 + 64);
        assert_eq!(h.starts.leaves(), 3, "a leaf of starts for each 4 KiB used, reused");
        // The top object freed while a lower one lives: span = up to the lower one.
        h.alloc(0x11000, 100, 100, 4);
        h.alloc(0x12000, 100, 100, 4);
        h.free(0x12000);
        assert_eq!(h.region(0x10000).unwrap().last_end, 0x11000 + 100);
    }

    #[test]
    fn overlapping_maps_replace_and_growth_adopts() {
        let mut h = ShadowHeap::new(0);
        // Three mappings, then a bigger one at the first one's start: mmap replaces.
        h.map(0x10000, 0x11000, RegionKind::Mmap);
        h.map(0x11000, 0x12000, RegionKind::Mmap);
        h.map(0x12000, 0x13000, RegionKind::Mmap);
        h.map(0x10000, 0x14000, RegionKind::Mmap);
        assert_eq!(h.snapshot().regions, 1);
        assert_eq!(h.snapshot().mapped_bytes, 0x4000);
        h.unmap(0x11000, 0x12000);
        assert_eq!(h.snapshot().regions, 2);
        assert_eq!(h.snapshot().mapped_bytes, 0x3000);
        // A fixed mapping over the first page of a big one does not shrink it.
        h.map(0x20000, 0x30000, RegionKind::Mmap);
        h.alloc(0x28000, 100, 100, 1);
        h.map(0x20000, 0x21000, RegionKind::Mmap);
        let s = h.snapshot();
        assert_eq!(s.unplaced_bytes, 0, "the object stays placed");
        assert_eq!(s.mapped_bytes, 0x3000 + 0x10000);
        // The brk heap grows over an object seen before the growth.
        let mut b = ShadowHeap::new(0x1000);
        b.set_break(0x2000);
        b.alloc(0x2800, 100, 100, 1);
        assert_eq!(b.snapshot().unplaced_bytes, 100);
        b.set_break(0x3000);
        assert_eq!(b.snapshot().unplaced_bytes, 0);
        assert_eq!(b.snapshot().regions, 1);
    }

    #[test]
    fn a_block_whose_region_goes_keeps_its_address_until_another_takes_it() {
        let mut h = ShadowHeap::new(0);
        h.map(0x10000, 0x20000, RegionKind::Mmap);
        h.alloc(0x10100, 100, 112, 7);
        h.alloc(0x10200, 50, 64, 8);
        h.free(0x10200);
        h.unmap(0x10000, 0x20000);
        assert_eq!(h.snapshot().unplaced_bytes, 100);
        assert_eq!(h.unplaced_addrs(), vec![0x10100]);
        h.map(0x10000, 0x11000, RegionKind::Mmap);
        assert_eq!(h.snapshot().unplaced_bytes, 0);
        let r = &h.region(0x10000).unwrap();
        assert_eq!((r.live_bytes, r.live_count, r.last_end), (100, 1, 0x10100 + 100));
        let o = h.free(0x10100).expect("still live");
        assert_eq!((o.size, o.stack, o.usable()), (100, 7, 112));
        assert_eq!(h.region(0x10000).unwrap().last_end, 0x10000);
        assert_eq!(h.snapshot().live_bytes, 0);
    }

    #[test]
    fn blocks_that_do_not_pack_are_kept_whole() {
        // Sizes from 256 MiB, usable extras from 4 KiB, sites from 16 M:
        // spilled to a map, and found there by every path that reads a block.
        let mut h = ShadowHeap::new(0);
        h.map(0x10_0000, 0x8000_0000, RegionKind::Mmap);
        let blocks = [
            (0x10_0000u64, 1u64 << 30, (1u64 << 30) + 4000, 3u32),
            (0x20_0000, 100, 100 + 5000, 4),
            (0x30_0000, 64, 64, 1 << 25),
            (0x30_0040, 64, 72, 5),
        ];
        for &(a, size, usable, site) in &blocks {
            h.alloc(a, size, usable, site);
        }
        assert_eq!(h.spilled.len(), 3);
        for &(a, size, usable, site) in &blocks {
            let o = h.get(a).unwrap();
            assert_eq!((o.size, o.stack, o.usable()), (size, site, usable), "{a:#x}");
        }
        let s = h.snapshot();
        assert_eq!(s.live_bytes, blocks.iter().map(|b| b.1).sum::<u64>());
        assert_eq!(s.live_usable_bytes, blocks.iter().map(|b| b.2).sum::<u64>());
        // Each free of the last block finds the one below, spilled or not.
        let last_end = |h: &ShadowHeap| h.region(0x10_0000).unwrap().last_end;
        assert_eq!(h.free(0x30_0040).map(|o| o.usable()), Some(72));
        assert_eq!(last_end(&h), 0x30_0000 + 64);
        assert_eq!(h.free(0x30_0000).map(|o| o.stack), Some(1 << 25));
        assert_eq!(last_end(&h), 0x20_0000 + 100);
        h.free(0x20_0000);
        assert_eq!(last_end(&h), 0x10_0000 + (1 << 30));
        assert_eq!(h.spilled.len(), 1);
        // Unmapped and mapped again: taken in with its spilled size.
        h.unmap(0x10_0000, 0x8000_0000);
        assert_eq!(h.snapshot().unplaced_bytes, 1 << 30);
        h.map(0x10_0000, 0x8000_0000, RegionKind::Mmap);
        assert_eq!((h.snapshot().unplaced_bytes, last_end(&h)), (0, 0x10_0000 + (1 << 30)));
    }

    #[test]
    fn unknown_free_and_reuse() {
        let mut h = ShadowHeap::new(0);
        assert!(h.free(42).is_none());
        h.alloc(8, 10, 16, 0);
        h.alloc(8, 20, 24, 0);
        assert_eq!(h.overlapping_allocs, 1);
        assert_eq!(h.snapshot().live_bytes, 20);
        assert_eq!(h.snapshot().unplaced_bytes, 20);
        // Address 0 is a block like any other to the shadow heap.
        h.alloc(0, 5, 8, 0);
        assert_eq!(h.snapshot().live_objects, 2);
        assert_eq!(h.free(0).map(|o| o.size), Some(5));
        assert_eq!(h.snapshot().live_objects, 1);
    }

    #[test]
    fn blocks_outside_every_region_are_kept_exactly() {
        // Regions come and go under live blocks: the unplaced ones (and
        // their bytes) must always be the live blocks in no region.
        let mut h = ShadowHeap::new(0);
        let mut live: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
        let mut x = 11u64;
        for i in 0..20_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let page = 0x40_0000 + (x >> 33) % 64 * 0x1000;
            match (x >> 20) % 16 {
                0 => h.map(page, page + 0x1000 * (1 + (x >> 50) % 4), RegionKind::Mmap),
                1 => h.unmap(page, page + 0x1000 * (1 + (x >> 50) % 4)),
                2..=8 => {
                    let a = page + (x >> 8) % 256 * 16;
                    if let std::collections::hash_map::Entry::Vacant(e) = live.entry(a) {
                        let size = 1 + (x >> 40) % 16;
                        h.alloc(a, size, 16, 0);
                        e.insert(size);
                    }
                }
                _ => {
                    let a = page + (x >> 8) % 256 * 16;
                    assert_eq!(h.free(a).map(|o| o.size), live.remove(&a), "free {a:#x} at step {i}");
                }
            }
            let in_region = |a: u64| h.regions.at_or_before(a).is_some_and(|(_, r)| a < h.slab[r as usize].end);
            let mut want: Vec<u64> = live.keys().copied().filter(|&a| !in_region(a)).collect();
            let mut got = h.unplaced_addrs();
            want.sort();
            got.sort();
            assert_eq!(got, want, "step {i}");
            assert_eq!(h.unplaced_live, want.len(), "step {i}");
            assert_eq!(h.unplaced_bytes, want.iter().map(|a| live[a]).sum::<u64>(), "step {i}");
            assert!(want.iter().all(|&a| a >= h.unplaced_span.0 && a <= h.unplaced_span.1), "step {i}");
        }
    }

    #[test]
    fn kept_fragmentation_matches_a_fresh_computation() {
        // Once settled, every region's kept `frag` must be what `frag()`
        // gives after every kind of change, and the running sum their sum.
        let mut h = ShadowHeap::new(0x1000);
        h.set_break(0x9000);
        h.map(0x10_0000, 0x20_0000, RegionKind::Mmap);
        let mut x = 7u64;
        let mut one_unsettled = 0u32;
        for i in 0..5000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let (base, room) = if x >> 63 == 0 { (0x1000, 0x8000) } else { (0x10_0000, 0x10_0000) };
            let a = base + (x >> 20) % (room / 64) * 64;
            if i % 3 == 2 {
                h.free(a);
            } else if h.get(a).is_none() {
                h.alloc(a, 1 + (x >> 40) % 48, 48, 1);
            }
            if i % 1000 == 999 {
                h.set_break(0x9000 + i * 16);
                h.unmap(0x18_0000, 0x18_1000);
            }
            if i % 4 != 3 {
                // A snapshot of one changed region leaves it unsettled.
                one_unsettled += (h.dirty.len() == 1) as u32;
                let exact = h.exact_snapshot().fragmentation;
                assert_eq!(h.raw_snapshot().finish().fragmentation, exact, "after event {i}");
                continue;
            }
            h.settle_frag();
            for (s, i) in h.regions.iter() {
                let r = &h.slab[i as usize];
                assert!(!r.dirty);
                assert_eq!(r.frag, r.frag_fixed(s), "region {s:#x} after event {i}");
            }
            let fresh: u128 = h.regions.iter().map(|(_, i)| &h.slab[i as usize]).map(|r| r.frag_fixed(r.start) as u128).sum();
            assert_eq!(h.sum_frag, fresh, "after event {i}");
            assert_eq!(h.snapshot().fragmentation, h.exact_snapshot().fragmentation, "after event {i}");
        }
        assert!(one_unsettled > 1000, "the unsettled snapshot was taken {one_unsettled} times");
    }

    #[test]
    fn the_shadow_heap_matches_a_reference_model_step_by_step() {
        // Random maps (three kinds), unmaps, breaks that grow, shrink or stay,
        // resizes at a region's start, overlapping allocations and frees; after
        // each step every figure is checked against a model kept the slow way:
        // regions, lookups through the cache (gaps and boundaries too), each
        // region's live bytes, count and last end, unplaced blocks, the sums.
        use std::collections::{BTreeMap as RefMap, HashMap};
        for seed in 1..=40u64 {
            let mut h = ShadowHeap::new(0x1_0000);
            // The reference: start -> (end, kind).
            let mut regs: RefMap<u64, (u64, RegionKind)> = RefMap::new();
            let mut brk_start = 0x1_0000u64;
            let mut live: HashMap<u64, u64> = HashMap::new();
            let mut rng = Xorshift::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            fn ref_unmap(regs: &mut RefMap<u64, (u64, RegionKind)>, s: u64, e: u64) {
                if e <= s { return; }
                let hit: Vec<(u64, (u64, RegionKind))> = regs.iter().filter(|(&rs, &(re, _))| rs < e && re > s).map(|(&a, &b)| (a, b)).collect();
                for (rs, (re, k)) in hit {
                    regs.remove(&rs);
                    if rs < s { regs.insert(rs, (s, k)); }
                    if re > e { regs.insert(e, (re, k)); }
                }
            }
            fn ref_map(regs: &mut RefMap<u64, (u64, RegionKind)>, s: u64, e: u64, k: RegionKind) {
                if e <= s { return; }
                let resizable = matches!(k, RegionKind::Brk | RegionKind::Arena);
                if let Some(&(oe, ok)) = regs.get(&s) {
                    if resizable && ok == k {
                        if e < oe { ref_unmap(regs, e, oe); } else { ref_unmap(regs, oe, e); regs.insert(s, (e, k)); }
                        return;
                    }
                }
                ref_unmap(regs, s, e);
                regs.insert(s, (e, k));
            }
            let region_of = |regs: &RefMap<u64, (u64, RegionKind)>, a: u64| regs.range(..=a).next_back().filter(|(_, &(e, _))| a < e).map(|(&s, &(_, k))| (s, k));
            for step in 0..4000u64 {
                let x = rng.next_u64();
                let page = 0x1_0000 + (x >> 33) % 48 * 0x1000;
                let len = 0x1000 * (1 + (x >> 50) % 5);
                let a = page + (x >> 8) % 256 * 16;
                match (x >> 20) % 24 {
                    0 => { h.map(page, page + len, RegionKind::Mmap); ref_map(&mut regs, page, page + len, RegionKind::Mmap); }
                    1 => { h.map(page, page + len, RegionKind::Arena); ref_map(&mut regs, page, page + len, RegionKind::Arena); }
                    2 => { h.map(page, page + len, RegionKind::GlibcChunk); ref_map(&mut regs, page, page + len, RegionKind::GlibcChunk); }
                    3 | 4 => { h.unmap(page, page + len); ref_unmap(&mut regs, page, page + len); }
                    5 => {
                        // set_break
                        let brk = brk_start + (x >> 40) % 12 * 0x1000;
                        h.set_break(brk);
                        let old = regs.get(&brk_start).map(|r| r.0);
                        match old {
                            Some(o) if brk > brk_start => { if brk < o { ref_unmap(&mut regs, brk, o) } else { ref_unmap(&mut regs, o, brk); regs.insert(brk_start, (brk, regs.get(&brk_start).unwrap().1)); } }
                            Some(o) => ref_unmap(&mut regs, brk_start, o),
                            None if brk > brk_start => ref_map(&mut regs, brk_start, brk, RegionKind::Brk),
                            None => {}
                        }
                        let _ = &mut brk_start;
                    }
                    6 => {
                        // a resize of an existing arena/brk via map at its start
                        if let Some((&s, &(_, k))) = regs.range(page..).next() {
                            let e = s + len;
                            h.map(s, e, k); ref_map(&mut regs, s, e, k);
                        }
                    }
                    7..=14 => {
                        let size = 1 + (x >> 40) % 40;
                        // overlapping allocs allowed
                        let want_old = live.get(&a).copied();
                        let got = h.alloc(a, size, size + 8, (x % 7) as u32).map(|o| o.size);
                        assert_eq!(got, want_old, "seed {seed} step {step} alloc {a:#x}");
                        live.insert(a, size);
                    }
                    _ => {
                        let want_held = region_of(&regs, a);
                        let got = h.free_in(a);
                        let want = live.remove(&a);
                        assert_eq!(got.map(|g| g.0.size), want, "seed {seed} step {step} free {a:#x}");
                        if let Some((_, held)) = got {
                            assert_eq!(held, want_held, "seed {seed} step {step} held of {a:#x}");
                        }
                    }
                }
                // regions equal
                let got_regs: Vec<(u64, u64, RegionKind)> = h.regions.iter().map(|(s, i)| { let r = &h.slab[i as usize]; assert_eq!(r.start, s); (s, r.end, r.kind) }).collect();
                let want_regs: Vec<(u64, u64, RegionKind)> = regs.iter().map(|(&s, &(e, k))| (s, e, k)).collect();
                assert_eq!(got_regs, want_regs, "seed {seed} step {step} regions");
                // region_of via cache, probing several addresses
                for k in 0..6u64 {
                    let p = 0x1_0000 + ((x >> (k * 7)) % (60 * 0x1000)) ;
                    assert_eq!(h.region_of(p), region_of(&regs, p), "seed {seed} step {step} region_of {p:#x}");
                    assert_eq!(h.region_of(a), region_of(&regs, a), "seed {seed} step {step} region_of a {a:#x}");
                }
                // per-region live and unplaced
                let mut per: HashMap<u64, (u64, u64, u64, u64)> = HashMap::new();
                let mut unpl = (0u64, 0usize);
                for (&b, &sz) in &live {
                    match region_of(&regs, b) {
                        // The span ends where the last object (highest start) ends,
                        // whether or not a lower one, overlapping it, reaches further.
                        Some((s, _)) => { let e = per.entry(s).or_insert((0, 0, s, 0)); e.0 += sz; e.1 += 1; if b >= e.3 { (e.2, e.3) = (b + sz, b) } }
                        None => { unpl.0 += sz; unpl.1 += 1; }
                    }
                }
                let (mut span, mut rlive) = (0u64, 0u64);
                for (s, i) in h.regions.iter() {
                    let r = &h.slab[i as usize];
                    let w = per.get(&s).copied().unwrap_or((0, 0, s, 0));
                    assert_eq!((r.live_bytes, r.live_count, r.last_end), (w.0, w.1, w.2), "seed {seed} step {step} region {s:#x}");
                    span += w.2 - s; rlive += w.0;
                }
                assert_eq!(h.unplaced_bytes, unpl.0, "seed {seed} step {step} unplaced bytes");
                assert_eq!(h.unplaced_live, unpl.1, "seed {seed} step {step} unplaced live");
                assert_eq!(h.unplaced_addrs().len(), unpl.1, "seed {seed} step {step} unplaced entries");
                assert_eq!((h.sum_span, h.sum_region_live), (span, rlive), "seed {seed} step {step} sums");
                let mapped: u64 = regs.iter().map(|(&s, &(e, _))| e - s).sum();
                let brk: u64 = regs.iter().filter(|(_, &(_, k))| k == RegionKind::Brk).map(|(&s, &(e, _))| e - s).sum();
                assert_eq!((h.mapped_bytes, h.brk_bytes, h.mmap_regions), (mapped, brk, regs.values().filter(|r| r.1 != RegionKind::Brk).count() as u64), "seed {seed} step {step} mapped");
                assert_eq!(h.live_bytes, live.values().sum::<u64>());
                assert_eq!(h.snapshot().fragmentation, h.exact_snapshot().fragmentation);
            }
        }
    }
}
