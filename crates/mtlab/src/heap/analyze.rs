//! One pass over a process's trace: replays every event into the shadow
//! heap and gathers what `mtlab report` prints (docs/metrics.md).

use rustc_hash::FxHashMap as HashMap;

use super::model::{RawSnapshot, RegionKind, ShadowHeap};
use super::stats::FuncStats;
pub use crate::analysis::model::{
    AllocatorReading, AllocatorStats, CallerReport, FrameReport, FunctionReport, LeakReport, PeakReport, ProcessReport,
    ProgramMappings, SampledSite, SampledSummary, SeriesPoint, Slowdown, SiteReport, SpaceSplit, StackQuality, TemporaryReport,
    TopSites,
};
use crate::profile::sampled::SampledPass;
use crate::symbolize::{parse_all_maps, CodeRanges, Mapping, Symbolizer};
use crate::trace::event::{FLAG_CHUNK_MMAPPED, FLAG_FAILED, FLAG_IN_ALLOCATOR};
use crate::trace::{keys, Event, EventKind, Func, Item, ItemRef, Items, StackRef, StackTable, TraceError, TraceFile};

const MAP_ANONYMOUS: u64 = 0x20;
/// glibc: a block's chunk starts this many bytes before it.
const GLIBC_CHUNK_HEADER: u64 = 16;

#[derive(Clone, Debug)]
pub struct AnalyzeOptions {
    /// Most points in the time series.
    pub max_points: usize,
    /// Sites listed in each top table.
    pub top: usize,
    /// Also the functions by allocation in them and below them (symbolizes
    /// every stack, not only the top sites').
    pub callers: bool,
}

impl Default for AnalyzeOptions {
    fn default() -> Self {
        AnalyzeOptions { max_points: 200, top: 10, callers: false }
    }
}


/// The functions of every stack, with the calls and bytes of the stacks they
/// are on; ranked by total bytes, the first `top`.
fn callers(sites: &[(&[u64], u64, u64)], symbols: &mut Symbols, top: usize) -> Vec<CallerReport> {
    let mut by: HashMap<String, CallerReport> = HashMap::default();
    let mut seen: Vec<String> = Vec::new();
    for &(pcs, calls, bytes) in sites {
        let frames = symbols.frames(pcs);
        seen.clear();
        for (i, f) in frames.iter().enumerate() {
            let name = f.function.clone().unwrap_or_else(|| format!("{}+{}", f.module, f.offset));
            let e = by.entry(name.clone()).or_insert_with(|| CallerReport {
                function: name.clone(),
                self_calls: 0,
                self_bytes: 0,
                total_calls: 0,
                total_bytes: 0,
            });
            if i == 0 {
                e.self_calls += calls;
                e.self_bytes += bytes;
            }
            // A recursive function counts once per stack.
            if !seen.contains(&name) {
                e.total_calls += calls;
                e.total_bytes += bytes;
                seen.push(name);
            }
        }
    }
    let mut list: Vec<CallerReport> = by.into_values().collect();
    list.sort_by(|a, b| b.total_bytes.cmp(&a.total_bytes).then(b.self_bytes.cmp(&a.self_bytes)).then(a.function.cmp(&b.function)));
    list.truncate(top);
    list
}


/// The peak while the pass runs: counters and the time stamp, turned into
/// a `PeakReport` once, at the end (`PeakState::report`).
#[derive(Default)]
struct PeakState {
    heap: RawSnapshot,
    at_event: u64,
    at_tsc: Option<u64>,
}


#[derive(Default, Clone, Copy)]
struct SiteAcc {
    calls: u64,
    bytes: u64,
    live_objects: u64,
    live_bytes: u64,
    /// Live objects and bytes when the heap last peaked, kept once the site
    /// changes after that peak (`peak_gen` says which peak they belong to).
    peak_objects: u64,
    peak_bytes: u64,
    peak_gen: u32,
    /// Blocks freed with no other allocation of their thread in between.
    temporary: u64,
}

impl SiteAcc {
    /// Before the site changes: keep its state at peak `gen` if not yet kept.
    #[inline(always)]
    fn keep_peak(&mut self, gen: u32) {
        if self.peak_gen != gen {
            self.peak_objects = self.live_objects;
            self.peak_bytes = self.live_bytes;
            self.peak_gen = gen;
        }
    }

    /// (live objects, live bytes) at the last peak, `gen` being its number.
    fn at_peak(&self, gen: u32) -> (u64, u64) {
        if self.peak_gen == gen {
            (self.peak_objects, self.peak_bytes)
        } else {
            (self.live_objects, self.live_bytes)
        }
    }
}

/// Allocation sites in a dense array. The shadow heap's objects carry their
/// site's index (not the stack id), so a free finds its site without a
/// lookup. An allocation finds its site by stack id in an open-addressing
/// table of (id, index) pairs, 8 bytes each and at most half full. It
/// replaced a table indexed by id (the writer's ids are slots of its
/// 2^20-entry table: 4 MiB, one cache line per site in use), whose load
/// missed the cache on most allocations of cc1 (57 K sites: an eighth of
/// the report's time); 57 K pairs take 1 MiB.
struct Sites {
    /// (stack id, site index); index `NONE`: empty.
    table: Vec<(u32, u32)>,
    /// 64 - log2(table.len()).
    shift: u32,
    stacks: Vec<u32>,
    acc: Vec<SiteAcc>,
    /// Each site's stack in the table of stacks, found when the site was
    /// added (its definition then just read): the passes over every site
    /// read stacks in the table's order instead of looking each up by id
    /// (half a million stacks: a fifth of a report's time).
    frames: Vec<Option<StackRef>>,
}

impl Sites {
    const NONE: u32 = u32::MAX;

    fn new() -> Sites {
        Self::with_slots(1 << 10)
    }

    fn with_slots(n: usize) -> Sites {
        Sites { table: vec![(0, Self::NONE); n], shift: 64 - n.trailing_zeros(), stacks: Vec::new(), acc: Vec::new(), frames: Vec::new() }
    }

    #[inline(always)]
    fn home(&self, stack: u32) -> usize {
        ((stack as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    /// Starts loading the slot where a lookup of `stack` begins.
    #[inline(always)]
    fn prefetch(&self, stack: u32) {
        super::prefetch::prefetch(&self.table[self.home(stack)]);
    }

    #[inline(always)]
    fn index_of(&mut self, stack: u32, stacks: &StackTable) -> u32 {
        match self.find(stack) {
            Ok(idx) => idx,
            Err(slot) => self.add(stack, slot, stacks),
        }
    }

    /// The site of `stack` (Ok), or the empty slot where it would go (Err).
    #[inline(always)]
    fn find(&self, stack: u32) -> Result<u32, usize> {
        let mask = self.table.len() - 1;
        let mut i = self.home(stack);
        loop {
            let (id, idx) = self.table[i];
            if idx == Self::NONE {
                return Err(i);
            }
            if id == stack {
                return Ok(idx);
            }
            i = (i + 1) & mask;
        }
    }

    /// A new site for `stack`, whose empty slot is `slot`.
    #[inline(never)]
    fn add(&mut self, stack: u32, slot: usize, stacks: &StackTable) -> u32 {
        let idx = self.acc.len() as u32;
        self.stacks.push(stack);
        self.frames.push(stacks.find(stack));
        self.acc.push(SiteAcc::default());
        self.table[slot] = (stack, idx);
        if 2 * self.acc.len() > self.table.len() {
            let mut t = Sites::with_slots(2 * self.table.len());
            let mask = t.table.len() - 1;
            for (idx, &id) in self.stacks.iter().enumerate() {
                let mut i = t.home(id);
                while t.table[i].1 != Self::NONE {
                    i = (i + 1) & mask;
                }
                t.table[i] = (id, idx as u32);
            }
            self.table = t.table;
            self.shift = t.shift;
        }
        idx
    }

    /// Whether the sites' tables have outgrown a last-level cache (a program
    /// allocating from millions of distinct stacks), where each allocation's
    /// site is worth prefetching.
    fn is_large(&self) -> bool {
        std::mem::size_of_val(self.table.as_slice()) + std::mem::size_of_val(self.acc.as_slice()) >= 8 << 20
    }

    /// (accumulator, frames) of every site whose stack was defined when the
    /// site was met (by id when an id was defined twice).
    fn with_frames<'s>(&'s self, stacks: &'s StackTable) -> impl Iterator<Item = (&'s SiteAcc, &'s [u64])> {
        let by_ref = !stacks.redefined();
        self.stacks.iter().zip(&self.acc).zip(&self.frames).filter_map(move |((&id, acc), r)| {
            let frames = if by_ref { r.map(|r| stacks.frames(r)) } else { stacks.get(id) };
            frames.map(|f| (acc, f))
        })
    }

    /// The frames of site `i`: through the reference it kept, else by id
    /// (an id defined twice, or defined after the site was met — another
    /// thread's definition merged later).
    fn frames_of<'s>(&'s self, i: usize, stacks: &'s StackTable) -> Option<&'s [u64]> {
        match self.frames[i] {
            Some(r) if !stacks.redefined() => Some(stacks.frames(r)),
            _ => stacks.get(self.stacks[i]),
        }
    }

    /// (stack id, accumulator) of every site.
    fn iter(&self) -> impl Iterator<Item = (u32, &SiteAcc)> {
        self.stacks.iter().copied().zip(&self.acc)
    }
}

struct Pass<'a> {
    trace: &'a TraceFile,
    heap: ShadowHeap,
    funcs: Vec<FuncStats>,
    sites: Sites,
    stacks: StackTable,
    peak: PeakState,
    /// The peak measured before the trace was compacted (its own replay
    /// order can move the peak): reported instead of `peak`.
    peak_given: Option<PeakReport>,
    /// Number of the last new peak (`SiteAcc::keep_peak`).
    peak_gen: u32,
    /// Each thread's last allocated block: (tid, address; 0 after its free).
    last_alloc: Vec<(u32, u64)>,
    last_slot: usize,
    temporary: u64,
    series: Vec<SeriesPoint>,
    every: u64,
    /// Events left before the next time-series point (a countdown: a
    /// division per event showed in profiles).
    to_point: u64,
    events: u64,
    window_cycles: u64,
    window_mallocs: u64,
    /// A compact trace: events' cycles are not their own.
    compact: bool,
    program_maps: ProgramMappings,
}

impl<'a> Pass<'a> {
    fn ns(&self, tsc: u64) -> Option<u64> {
        self.trace.header.ns_since_start(tsc)
    }

    #[inline(always)]
    fn allocated(&mut self, ptr: u64, size: u64, usable: u64, stack: u32, flags: u8, at: u64) {
        if flags & FLAG_CHUNK_MMAPPED != 0 {
            self.heap.map(ptr - GLIBC_CHUNK_HEADER, ptr + usable, RegionKind::GlibcChunk);
        }
        let si = self.sites.index_of(stack, &self.stacks);
        if let Some(old) = self.heap.alloc(ptr, size, usable, si) {
            self.site_released(old.stack, old.size);
        }
        let gen = self.peak_gen;
        let site = &mut self.sites.acc[si as usize];
        site.keep_peak(gen);
        site.calls += 1;
        site.bytes += size;
        site.live_objects += 1;
        site.live_bytes += size;
        if self.heap.live_bytes() > self.peak.heap.live_bytes {
            self.peak = PeakState { heap: self.heap.raw_snapshot(), at_event: self.events, at_tsc: Some(at) };
            self.peak_gen = self.peak_gen.wrapping_add(1);
        }
    }

    /// The slot of thread `tid` in `last_alloc` (threads are few, and
    /// consecutive events are mostly one thread's).
    #[inline(always)]
    fn thread_slot(&mut self, tid: u32) -> usize {
        if self.last_alloc.get(self.last_slot).is_some_and(|&(t, _)| t == tid) {
            return self.last_slot;
        }
        let i = match self.last_alloc.iter().position(|&(t, _)| t == tid) {
            Some(i) => i,
            None => {
                self.last_alloc.push((tid, 0));
                self.last_alloc.len() - 1
            }
        };
        self.last_slot = i;
        i
    }

    /// `site` is the index the object was allocated with.
    #[inline(always)]
    fn site_released(&mut self, site: u32, size: u64) {
        let gen = self.peak_gen;
        if let Some(s) = self.sites.acc.get_mut(site as usize) {
            s.keep_peak(gen);
            s.live_objects = s.live_objects.saturating_sub(1);
            s.live_bytes = s.live_bytes.saturating_sub(size);
        }
    }

    /// Frees `ptr`; returns its size when it was live.
    fn released(&mut self, ptr: u64) -> Option<u64> {
        self.released_temporary(ptr, false)
    }

    /// `released`, counting the block as a temporary allocation of its site.
    #[inline(always)]
    fn released_temporary(&mut self, ptr: u64, temporary: bool) -> Option<u64> {
        match self.heap.free_in(ptr) {
            Some((obj, held)) => {
                self.site_released(obj.stack, obj.size);
                if temporary {
                    self.temporary += 1;
                    if let Some(s) = self.sites.acc.get_mut(obj.stack as usize) {
                        s.temporary += 1;
                    }
                }
                if let Some((start, RegionKind::GlibcChunk)) = held {
                    self.heap.unmap(start, ptr + obj.usable());
                }
                Some(obj.size)
            }
            None => {
                self.heap.count_unknown_free();
                None
            }
        }
    }

    /// Starts loading the table slots that `event(ev)` will probe.
    #[inline(always)]
    fn prefetch(&self, ev: &Event) {
        match ev.kind {
            EventKind::Alloc { ptr, .. } => {
                self.heap.prefetch(ptr);
                self.sites.prefetch(ev.stack);
            }
            EventKind::Free { ptr } => self.heap.prefetch(ptr),
            EventKind::Realloc { old, ptr, .. } => {
                self.heap.prefetch(old);
                self.heap.prefetch(ptr);
                self.sites.prefetch(ev.stack);
            }
            _ => {}
        }
    }

    /// Starts loading what `ev` reads through the table slots that
    /// `prefetch(ev)` has loaded by now: an allocation's site counters; a
    /// free's slab entry and its site's counters.
    #[inline(always)]
    fn prefetch_blocks(&self, ev: &Event) {
        if matches!(ev.kind, EventKind::Alloc { .. } | EventKind::Realloc { .. }) {
            if let Some(site) = self.sites.find(ev.stack).ok().and_then(|s| self.sites.acc.get(s as usize)) {
                super::prefetch::prefetch(site);
            }
        }
        let addr = match ev.kind {
            EventKind::Free { ptr } => ptr,
            EventKind::Realloc { old, .. } => old,
            _ => return,
        };
        if let Some(site) = self.heap.prefetch_block(addr).and_then(|s| self.sites.acc.get(s as usize)) {
            super::prefetch::prefetch(site);
        }
    }

    // Inlined into each of `feed`'s two loops: a call per event costs 3 %.
    #[inline(always)]
    fn event(&mut self, ev: &crate::trace::Event) {
        let failed = ev.flags & FLAG_FAILED != 0;
        let page = self.trace.header.page_size.max(1);
        let round = |len: u64| len.div_ceil(page) * page;
        match ev.kind {
            EventKind::Alloc { func, size, ptr, usable, .. } => {
                self.funcs[func.index()].add(ev.cycles, Some(size), failed || ptr == 0);
                if func == Func::Malloc {
                    self.window_cycles += ev.cycles;
                    self.window_mallocs += 1;
                }
                if ptr != 0 {
                    self.allocated(ptr, size, usable, ev.stack, ev.flags, ev.tsc);
                    let slot = self.thread_slot(ev.tid);
                    self.last_alloc[slot].1 = ptr;
                }
            }
            EventKind::Free { ptr } => {
                let slot = self.thread_slot(ev.tid);
                let temporary = ptr != 0 && self.last_alloc[slot].1 == ptr;
                if temporary {
                    self.last_alloc[slot].1 = 0;
                }
                let size = self.released_temporary(ptr, temporary);
                self.funcs[Func::Free.index()].add(ev.cycles, size, false);
            }
            EventKind::Realloc { func, old, size, ptr, usable } => {
                self.funcs[func.index()].add(ev.cycles, Some(size), failed);
                if ptr != 0 || size == 0 {
                    // Success, or realloc(p, 0) which frees p.
                    if old != 0 {
                        self.released(old);
                    }
                    if ptr != 0 {
                        self.allocated(ptr, size, usable, ev.stack, ev.flags, ev.tsc);
                        let slot = self.thread_slot(ev.tid);
                        self.last_alloc[slot].1 = ptr;
                    }
                }
            }
            EventKind::Mmap { func, len, flags, result, .. } => {
                self.funcs[func.index()].add(ev.cycles, Some(len), failed);
                if failed {
                    return;
                }
                if ev.flags & FLAG_IN_ALLOCATOR != 0 && flags & MAP_ANONYMOUS != 0 {
                    self.heap.map(result, result + round(len), RegionKind::Mmap);
                } else {
                    self.program_maps.calls += 1;
                    self.program_maps.bytes += len;
                }
            }
            EventKind::Munmap { addr, len, ret } => {
                self.funcs[Func::Munmap.index()].add(ev.cycles, Some(len), failed || ret != 0);
                if ret == 0 {
                    self.heap.unmap(addr, addr + round(len));
                }
            }
            EventKind::Mremap { old, old_len, new_len, result, .. } => {
                self.funcs[Func::Mremap.index()].add(ev.cycles, Some(new_len), failed);
                if failed {
                    return;
                }
                let kind = self.heap.region_of(old).map(|(_, k)| k);
                let kind = kind.or((ev.flags & FLAG_IN_ALLOCATOR != 0).then_some(RegionKind::Mmap));
                if let Some(kind) = kind {
                    self.heap.unmap(old, old + round(old_len));
                    self.heap.map(result, result + round(new_len), kind);
                }
            }
            EventKind::Brk { ret, brk_after, .. } => {
                self.funcs[Func::Brk.index()].add(ev.cycles, None, failed || ret != 0);
                self.heap.set_break(brk_after);
            }
            EventKind::Sbrk { increment, brk_after, .. } => {
                self.funcs[Func::Sbrk.index()].add(ev.cycles, Some(increment.unsigned_abs()), failed);
                self.heap.set_break(brk_after);
            }
            EventKind::BrkSeen { brk } => self.heap.set_break(brk),
            EventKind::ArenaHeap { base, size } => self.heap.map(base, base + size, RegionKind::Arena),
            // Sampled traces are read by profile::sampled, not replayed here.
            EventKind::Sample { .. } | EventKind::SampleFree { .. } => {}
        }
        if ev.kind.func().is_some() {
            self.events += 1;
            self.to_point -= 1;
            if self.to_point == 0 {
                self.to_point = self.every;
                self.point(ev.tsc);
            }
        }
    }

    fn point(&mut self, tsc: u64) {
        let s = self.heap.snapshot();
        let split = SpaceSplit::of(&s, SpaceSplit::header_bytes(&self.trace.header.allocator));
        self.series.push(SeriesPoint {
            event: self.events,
            ns: self.ns(tsc),
            live_bytes: s.live_bytes,
            mapped_bytes: s.mapped_bytes,
            fragmentation_total: s.fragmentation.total,
            fragmentation_mean: s.fragmentation.mean,
            utilization: s.utilization,
            malloc_mean_cycles: (self.window_mallocs > 0 && !self.compact)
                .then(|| self.window_cycles as f64 / self.window_mallocs as f64),
            overhead_bytes: split.overhead_bytes,
            free_bytes: split.free_bytes,
        });
        self.window_cycles = 0;
        self.window_mallocs = 0;
    }
}

const STACK_BOTTOMS: [&str; 7] =
    ["main", "__libc_start_call_main", "__libc_start_main", "_start", "start_thread", "clone", "clone3"];

fn is_bottom(name: &str) -> bool {
    // No `format!` here: this runs for the outer frames of every distinct stack.
    name.starts_with("__libc_start_main")
        || STACK_BOTTOMS.iter().any(|b| name.strip_prefix(b).is_some_and(|rest| rest.is_empty() || rest.starts_with('@')))
}

struct Symbols {
    sym: Symbolizer,
    /// Each site's frames once made: a site is in several top tables.
    sites: HashMap<u32, Vec<FrameReport>>,
    /// Whether a pc's frames include a stack's first function
    /// (`outermost_is_bottom`): asked of the last three pcs of every
    /// distinct stack, where a copy of the symbolizer's frames each time
    /// (names, files) was a twentieth of the report of a program with
    /// millions of call paths.
    bottom: HashMap<u64, bool>,
}

impl Symbols {
    fn new(maps: &[Mapping], recorded_until_ns: u64) -> Self {
        Symbols {
            sym: Symbolizer::new(maps).recorded_until(recorded_until_ns),
            sites: HashMap::default(),
            bottom: HashMap::default(),
        }
    }

    /// `frames(pcs)` of stack `id`.
    fn site_frames(&mut self, id: u32, pcs: &[u64]) -> Vec<FrameReport> {
        if let Some(f) = self.sites.get(&id) {
            return f.clone();
        }
        let f = self.frames(pcs);
        self.sites.insert(id, f.clone());
        f
    }

    fn frames(&mut self, pcs: &[u64]) -> Vec<FrameReport> {
        pcs.iter()
            .flat_map(|&pc| self.sym.symbolize(pc))
            .map(|f| FrameReport {
                pc: format!("{:#x}", f.pc),
                function: f.function,
                file: f.file,
                line: f.line,
                module: f.module,
                offset: format!("{:#x}", f.offset),
            })
            .collect()
    }

    /// Does the stack reach a thread's or the process's first frames? The
    /// last three frames are looked at: in a stripped program `_start` (and
    /// even `main`) have no name, but the libc frames above them do.
    fn outermost_is_bottom(&mut self, pcs: &[u64]) -> bool {
        pcs.iter().rev().take(3).any(|&pc| self.is_bottom(pc))
    }

    fn is_bottom(&mut self, pc: u64) -> bool {
        if let Some(&b) = self.bottom.get(&pc) {
            return b;
        }
        let b = self.sym.symbolize(pc).iter().any(|f| f.function.as_deref().is_some_and(is_bottom));
        self.bottom.insert(pc, b);
        b
    }
}

/// Events the decoder runs ahead of the replay: far enough for a cache
/// miss started by `Pass::prefetch` to complete before the event is
/// replayed, near enough for its line to still be cached then.
const AHEAD: usize = 16;

/// Events before its replay when a free's second miss, the slab entry its
/// table slot names, is started (`Pass::prefetch_blocks`): the slot was
/// prefetched `AHEAD - DEEP` events before.
const DEEP: usize = 8;

/// Feeds every item of the trace to the heap pass, and each event to `also`.
/// Once the live-block table or the site tables have outgrown a last-level
/// cache (`ShadowHeap::is_large`, `Sites::is_large`), events are replayed
/// `AHEAD` behind the decoder (in their order): each decoded event's table
/// slots are prefetched while earlier ones replay. Before that, each is
/// replayed as it comes: with everything cached the ring and the prefetches
/// were 5 % more instructions for nothing (malloc-test, 5 live blocks).
/// Stack definitions are taken at once; the replay does not read them.
#[inline(always)]
fn feed(items: &mut Items, pass: &mut Pass<'_>, code: &CodeRanges, last_tsc: &mut u64, mut also: impl FnMut(&Event)) {
    let mut ahead: [Option<Event>; AHEAD] = Default::default();
    let mut next = 0;
    // A function, not a closure: a closure's inlining is LLVM's choice,
    // and a call per event cost eight threads' report 15 %.
    #[inline(always)]
    fn replay_one(ev: &Event, pass: &mut Pass<'_>, last_tsc: &mut u64, also: &mut impl FnMut(&Event)) {
        *last_tsc = ev.tsc;
        pass.event(ev);
        also(ev);
    }
    // The table never shrinks: once large, always large.
    let mut large = false;
    while let Some(item) = items.next_ref() {
        match item {
            ItemRef::Stack { id, pcs } => {
                pass.stacks.insert(id, &code.cut(pcs));
            }
            ItemRef::Event(ev) if !large => {
                replay_one(ev, pass, last_tsc, &mut also);
                large = pass.heap.is_large() || pass.sites.is_large();
            }
            ItemRef::Event(ev) => {
                pass.prefetch(ev);
                let slot = &mut ahead[next];
                if let Some(old) = slot {
                    replay_one(old, pass, last_tsc, &mut also);
                }
                *slot = Some(ev.clone());
                if let Some(deep) = &ahead[(next + DEEP) % AHEAD] {
                    pass.prefetch_blocks(deep);
                }
                next = (next + 1) % AHEAD;
            }
        }
    }
    for i in 0..AHEAD {
        if let Some(ev) = &ahead[(next + i) % AHEAD] {
            replay_one(ev, pass, last_tsc, &mut also);
        }
    }
}

pub fn analyze(trace: &TraceFile, opts: &AnalyzeOptions) -> Result<ProcessReport, TraceError> {
    analyze_with(trace, opts, true)
}

/// The same pass for a process only listed in `mtlab report`'s process
/// index: events, peak, end, how it ended are whole; nothing is symbolized —
/// no site tables, no stack quality (its `truncated_call_fraction` is 0), no
/// per-function table, a time series of one point, no maps in a sampled
/// profile. On a tree of hundreds of small processes the
/// symbolizing and ranking of sites cost more than replaying their heaps.
pub fn analyze_for_index(trace: &TraceFile) -> Result<ProcessReport, TraceError> {
    analyze_with(trace, &AnalyzeOptions { max_points: 1, top: 0, callers: false }, false)
}

fn analyze_with(trace: &TraceFile, opts: &AnalyzeOptions, symbolize: bool) -> Result<ProcessReport, TraceError> {
    let compact_quantum = trace.runinfo_get(keys::COMPACT_QUANTUM).and_then(|q| q.parse::<u64>().ok());
    let total: u64 = trace.chunks.iter().map(|c| c.n_events as u64).sum();
    let every = total.div_ceil(opts.max_points.max(1) as u64).max(1);
    let mut pass = Pass {
        trace,
        heap: {
            let mut h = ShadowHeap::new(trace.header.brk_start);
            h.set_break(trace.header.brk_init);
            h
        },
        funcs: Func::ALL.iter().map(|_| FuncStats::default()).collect(),
        sites: Sites::new(),
        stacks: StackTable::default(),
        peak: PeakState::default(),
        peak_given: None,
        peak_gen: 0,
        last_alloc: Vec::new(),
        last_slot: 0,
        temporary: 0,
        series: Vec::new(),
        every,
        to_point: every,
        events: 0,
        window_cycles: 0,
        window_mallocs: 0,
        compact: compact_quantum.is_some(),
        program_maps: ProgramMappings { calls: 0, bytes: 0 },
    };
    // A sampled trace's profile is estimated in this same decode pass.
    let readings = AllocatorReading::all_of(trace);
    let mut sampled = (trace.header.sample_interval > 0).then(|| SampledPass::with_checkpoints(AllocatorReading::tscs(&readings)));
    let mut items = trace.items()?;
    let mut last_tsc = 0;
    // Without symbols no stack is shown: no maps to read (their parse cost
    // an index-only process as much as its heap's replay), stacks kept whole.
    let maps = if symbolize { parse_all_maps(&trace.maps) } else { Vec::new() };
    let code = CodeRanges::new(&maps);
    // Two monomorphized loops: a full trace's loop carries no test for the
    // sampled pass (it cost ~20 instructions an event, 6 % of the report).
    match &mut sampled {
        Some(s) => feed(&mut items, &mut pass, &code, &mut last_tsc, |ev| s.event(ev)),
        None => feed(&mut items, &mut pass, &code, &mut last_tsc, |_| {}),
    }
    if compact_quantum.is_some() {
        // Threads' independent events within one quantum replay in an order
        // of their own, which can move the peak: the one measured on the
        // exact trace before compaction is the truth (`crate::compact`).
        if let Some(p) = trace.runinfo_get(keys::COMPACT_PEAK).and_then(|j| serde_json::from_str(j).ok()) {
            pass.peak_given = Some(p);
        }
    }
    let mut warnings = trace.warnings.clone();
    // Damage that `mtlab record` found (and cut off) when it finished the file.
    warnings.extend(
        trace.runinfo.iter().filter(|(k, _)| k == keys::FINISH_WARNING).map(|(_, v)| format!("when recorded: {v}")),
    );
    warnings.extend(items.warnings().iter().cloned());
    let stat = |key: &str| trace.stats.iter().find(|(k, _)| k == key).and_then(|(_, v)| v.parse::<u64>().ok());
    let unnamed = stat(keys::SAMPLES_THREADS_UNNAMED);
    if let Some(n @ 1..) = unnamed {
        warnings.push(format!(
            "{n} thread(s) did not start through pthread_create (or started while 256 creations were in flight): \
             with --sample-seed their samples need not repeat from run to run"
        ));
    }
    let decoded = items.events_decoded();
    if !pass.events.is_multiple_of(every) || pass.series.is_empty() {
        pass.point(last_tsc);
    }

    let mut symbols = Symbols::new(&maps, recorded_until(trace, last_tsc));
    let top = opts.top;
    let gen = pass.peak_gen;
    let site_report = |i: usize, id: u32, acc: &SiteAcc, symbols: &mut Symbols, pass: &Pass| SiteReport {
        stack_id: id,
        calls: acc.calls,
        bytes: acc.bytes,
        live_objects: acc.live_objects,
        live_bytes: acc.live_bytes,
        peak_live_objects: compact_quantum.is_none().then(|| acc.at_peak(gen).0),
        peak_live_bytes: compact_quantum.is_none().then(|| acc.at_peak(gen).1),
        temporary: acc.temporary,
        frames: pass.sites.frames_of(i, &pass.stacks).map(|pcs| symbols.site_frames(id, pcs)).unwrap_or_default(),
    };
    let sites: Vec<(u32, SiteAcc)> = pass.sites.iter().map(|(k, &v)| (k, v)).collect();
    let report = |i: usize, symbols: &mut Symbols| site_report(i, sites[i].0, &sites[i].1, symbols, &pass);
    let by_bytes = top_by(&sites, top, |_| true, |a| a.bytes).into_iter().map(|i| report(i, &mut symbols)).collect();
    let by_calls = top_by(&sites, top, |_| true, |a| a.calls).into_iter().map(|i| report(i, &mut symbols)).collect();
    let at_peak = if compact_quantum.is_some() {
        Vec::new()
    } else {
        top_by(&sites, top, |a| a.at_peak(gen).0 > 0, |a| a.at_peak(gen).1).into_iter().map(|i| report(i, &mut symbols)).collect()
    };
    let temporary_top =
        top_by(&sites, top, |a| a.temporary > 0, |a| a.temporary).into_iter().map(|i| report(i, &mut symbols)).collect();
    let callers = if opts.callers {
        let list: Vec<(&[u64], u64, u64)> =
            pass.sites.with_frames(&pass.stacks).map(|(a, pcs)| (pcs, a.calls, a.bytes)).collect();
        callers(&list, &mut symbols, top)
    } else {
        Vec::new()
    };
    let leak_top =
        top_by(&sites, top, |a| a.live_objects > 0, |a| a.live_bytes).into_iter().map(|i| report(i, &mut symbols)).collect();

    let end = pass.heap.exact_snapshot();
    let peak = pass.peak_given.take().unwrap_or_else(|| PeakReport {
        heap: pass.peak.heap.finish(),
        at_event: pass.peak.at_event,
        at_ns: pass.peak.at_tsc.and_then(|t| pass.ns(t)),
    });
    // Each function's cycle percentiles: shown only in a detailed report.
    let functions = Func::ALL
        .iter()
        .filter(|_| symbolize)
        .map(|f| {
            let s = &pass.funcs[f.index()];
            (f.name().to_string(), FunctionReport { calls: s.calls, failed: s.failed, mean_size: s.mean_size(), cycles: s.cycles() })
        })
        .collect();
    let run = |k: &str| trace.runinfo.iter().find(|(key, _)| key == k).and_then(|(_, v)| v.parse::<u64>().ok());
    let slowdown = match (run(keys::BASELINE_WALL_NS), run(keys::WALL_NS)) {
        (Some(b), Some(t)) if b > 0 => Some(Slowdown {
            baseline_wall_ns: b,
            traced_wall_ns: t,
            ratio: t as f64 / b as f64,
            baseline_stdin_empty: run(keys::BASELINE_STDIN_EMPTY) == Some(1),
        }),
        _ => None,
    };
    let sampled = sampled.map(|s| s.finish(trace, &pass.stacks, maps));
    let allocator_readings = match &sampled {
        Some(p) => AllocatorReading::with_estimates(readings, &p.inuse_at_checkpoints),
        None => readings,
    };
    let distinct = pass.stacks.len() as u64;
    let stacks = match &sampled {
        _ if !symbolize => stack_quality(trace, std::iter::empty(), distinct, "allocation calls", &mut symbols),
        // A sampled trace's allocations are its samples.
        Some(p) => stack_quality(trace, p.stacks.iter().map(|s| (&s.pcs[..], s.samples)), distinct, "sampled allocations", &mut symbols),
        None => stack_quality(
            trace,
            pass.sites.with_frames(&pass.stacks).map(|(acc, pcs)| (pcs, acc.calls)),
            distinct,
            "allocation calls",
            &mut symbols,
        ),
    };
    let profile = if let Some(p) = sampled {
        let top = p
            .stacks
            .iter()
            .take(top)
            .map(|s| SampledSite {
                stack_id: s.stack_id,
                samples: s.samples,
                alloc_bytes: s.alloc_bytes,
                alloc_objects: s.alloc_objects,
                inuse_bytes: s.inuse_bytes,
                inuse_objects: s.inuse_objects,
                frames: symbols.frames(&s.pcs),
            })
            .collect();
        Some(SampledSummary {
            totals: p.totals,
            unwind: trace.header.unwind.clone(),
            started_inactive: trace.runinfo_get(keys::SAMPLE_STARTED_INACTIVE) == Some("1"),
            top,
            data: p.data,
        })
    } else {
        None
    };
    for path in symbols.sym.replaced_modules() {
        warnings.push(format!(
            "{path} is not the file the program ran (another file has its path now: rebuilt, upgraded, or \
             another machine's): its frames are shown as {}+OFFSET, not named from the new file",
            path.rsplit('/').next().unwrap_or(&path)
        ));
    }
    let exit = run(keys::EXIT_CODE).map(|c| format!("exit code {c}")).or_else(|| run(keys::SIGNAL).map(|s| format!("killed by signal {s}")));
    let duration_ns = trace.end.as_ref().and_then(|e| pass.ns(e.end_tsc)).or_else(|| pass.ns(last_tsc));
    Ok(ProcessReport {
        file: trace.path.display().to_string(),
        pid: trace.header.pid,
        ppid: trace.header.ppid,
        cmdline: trace.header.cmdline.clone(),
        exe: trace.header.exe.clone(),
        allocator: trace.header.allocator.clone(),
        allocator_path: trace.header.allocator_path.clone(),
        duration_ns,
        tsc_hz: trace.header.tsc_hz,
        events: pass.events,
        functions,
        space_peak: SpaceSplit::of(&peak.heap, SpaceSplit::header_bytes(&trace.header.allocator)),
        space_end: SpaceSplit::of(&end, SpaceSplit::header_bytes(&trace.header.allocator)),
        peak,
        end,
        time_series: std::mem::take(&mut pass.series),
        top_sites: TopSites { by_bytes, by_calls, at_peak, temporary: temporary_top },
        callers,
        temporary: {
            let allocs: u64 = pass.sites.iter().map(|(_, a)| a.calls).sum();
            TemporaryReport {
                calls: pass.temporary,
                of_calls: allocs,
                fraction: if allocs > 0 { pass.temporary as f64 / allocs as f64 } else { 0.0 },
            }
        },
        leaks: LeakReport { objects: end.live_objects, bytes: end.live_bytes, top: leak_top },
        // Events the writer counted as written that the file does not hold
        // (cut away when the disk filled, or in a damaged chunk) are lost too.
        events_dropped: trace.end.as_ref().map(|e| e.events_dropped + e.events_written.saturating_sub(decoded)),
        chunks_dropped: trace.end.as_ref().map(|e| e.chunks_dropped),
        chunks_damaged: trace.records_damaged + items.chunks_damaged().0,
        trace_reopened: stat(keys::TRACE_REOPENED).unwrap_or(0),
        forked_without_handlers: stat(keys::FORKED_WITHOUT_HANDLERS).unwrap_or(0) > 0,
        stopped_by_seccomp: stat(keys::STOPPED_BY_SECCOMP).unwrap_or(0) > 0,
        ctl_page_refused: stat(keys::CTL_PAGE_REFUSED).unwrap_or(0) > 0,
        guards_reset: stat(keys::GUARDS_RESET).unwrap_or(0),
        allocator_stats: AllocatorStats::read(trace, &trace.header.allocator, &end),
        allocator_readings,
        stacks_overflowed: trace.end.as_ref().map(|e| e.stacks_overflowed),
        clean_end: trace.end.is_some(),
        running: trace.end.is_none() && crate::platform::process::holds_open(trace.header.pid, &trace.path),
        unknown_frees: pass.heap.unknown_frees,
        overlapping_allocs: pass.heap.overlapping_allocs,
        program_mappings: pass.program_maps.clone(),
        stacks,
        slowdown,
        compact_quantum_ticks: compact_quantum,
        exit,
        profile,
        warnings,
    })
}

/// Indices of the `top` sites with the largest `key` (equal keys: the lower
/// stack id first) among those `keep` accepts. A partial selection, not a
/// sort of every site: a report ranks sites five ways, and sorting cc1's
/// 57 K sites each time was 2 % of its report.
fn top_by(sites: &[(u32, SiteAcc)], top: usize, keep: impl Fn(&SiteAcc) -> bool, key: impl Fn(&SiteAcc) -> u64) -> Vec<usize> {
    let mut ranked: Vec<(std::cmp::Reverse<u64>, u32, u32)> = sites
        .iter()
        .enumerate()
        .filter(|(_, (_, a))| keep(a))
        .map(|(i, (id, a))| (std::cmp::Reverse(key(a)), *id, i as u32))
        .collect();
    if ranked.len() > top {
        if top == 0 {
            return Vec::new();
        }
        ranked.select_nth_unstable(top - 1);
        ranked.truncate(top);
    }
    ranked.sort_unstable();
    ranked.into_iter().map(|(_, _, i)| i as usize).collect()
}

/// When the recording ended, in ns since the epoch (0: unknown): its END,
/// else the last event decoded.
fn recorded_until(trace: &TraceFile, last_tsc: u64) -> u64 {
    let end = trace.end.as_ref().map_or(last_tsc, |e| e.end_tsc.max(last_tsc));
    trace.header.ns_since_start(end).map_or(0, |ns| trace.header.start_ns.saturating_add(ns))
}

/// How whole the stacks of a full trace are, without the rest of the analysis
/// (one decode pass: the stacks, and the allocation calls of each).
pub fn stack_quality_of(trace: &TraceFile) -> Result<StackQuality, TraceError> {
    let maps = parse_all_maps(&trace.maps);
    let code = CodeRanges::new(&maps);
    let mut stacks = StackTable::default();
    let mut calls: HashMap<u32, u64> = HashMap::default();
    let mut last_tsc = 0;
    for item in trace.items()? {
        match item {
            Item::Stack { id, pcs } => {
                stacks.insert(id, &code.cut(pcs));
            }
            Item::Event(ev) => {
                last_tsc = last_tsc.max(ev.tsc);
                if matches!(ev.kind, EventKind::Alloc { .. } | EventKind::Realloc { .. }) {
                    *calls.entry(ev.stack).or_default() += 1;
                }
            }
        }
    }
    let mut symbols = Symbols::new(&maps, recorded_until(trace, last_tsc));
    let weighted = calls.iter().filter_map(|(&id, &n)| stacks.get(id).map(|pcs| (pcs, n)));
    Ok(stack_quality(trace, weighted, stacks.len() as u64, "allocation calls", &mut symbols))
}

/// How whole the stacks are: `weighted` gives each stack with the allocation
/// calls (or samples) it stands for.
fn stack_quality<'a>(
    trace: &TraceFile,
    weighted: impl Iterator<Item = (&'a [u64], u64)>,
    distinct: u64,
    what: &str,
    symbols: &mut Symbols,
) -> StackQuality {
    let mode = if trace.header.stacks == "none" {
        "none".to_string()
    } else if trace.header.unwind.is_empty() {
        trace.header.stacks.clone() // traces of mtlab before the unwind key: frame pointers
    } else {
        trace.header.unwind.clone()
    };
    let mut calls = 0u64;
    let mut truncated = 0u64;
    for (pcs, weight) in weighted {
        calls += weight;
        if !symbols.outermost_is_bottom(pcs) && pcs.len() < trace.header.max_depth as usize {
            truncated += weight;
        }
    }
    let fraction = if calls == 0 { 0.0 } else { truncated as f64 / calls as f64 };
    let note = (mode != "none" && fraction > 0.2).then(|| {
        let why = if mode == "fp" {
            "the program or its libraries were likely built without frame pointers (-fno-omit-frame-pointer), \
             so frame-pointer walking ends early: record with --unwind dwarf (the default) for whole stacks"
        } else {
            "the walk met code without unwind information (JIT-compiled code, hand-written assembly) \
             or a stack it cannot read (coroutines, a signal stack), or --depth cut it"
        };
        format!(
            "stacks look truncated: {:.0}% of {what} have a stack that stops before main or a thread start; {why}",
            fraction * 100.0
        )
    });
    StackQuality { mode, distinct, truncated_call_fraction: fraction, note }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_sites_are_those_a_full_sort_puts_first() {
        let mut x = 5u64;
        let sites: Vec<(u32, SiteAcc)> = (0..3000u32)
            .map(|i| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                // Few distinct values: many ties, broken by stack id.
                let acc = SiteAcc { calls: (x >> 60) * 7, temporary: (x >> 58) % 5, ..SiteAcc::default() };
                ((x >> 20) as u32 ^ i, acc)
            })
            .collect();
        let keep = |a: &SiteAcc| a.temporary > 0;
        for top in [0, 1, 10, 2999, 3000, 5000] {
            let mut sorted: Vec<&(u32, SiteAcc)> = sites.iter().filter(|(_, a)| keep(a)).collect();
            sorted.sort_by(|a, b| b.1.calls.cmp(&a.1.calls).then(a.0.cmp(&b.0)));
            let want: Vec<u32> = sorted.iter().take(top).map(|(id, _)| *id).collect();
            let got: Vec<u32> = top_by(&sites, top, keep, |a| a.calls).into_iter().map(|i| sites[i].0).collect();
            assert_eq!(got, want, "top {top}");
        }
    }

    #[test]
    fn sites_get_dense_indices_in_first_seen_order() {
        let ids = [5u32, 1 << 20, 5, 7, u32::MAX, 1024 + 5, 7, 0, (1 << 20) + 1];
        let mut sites = Sites::new();
        let none = StackTable::default();
        let got: Vec<u32> = ids.iter().map(|&id| sites.index_of(id, &none)).collect();
        assert_eq!(got, [0, 1, 0, 2, 3, 4, 2, 5, 6]);
        assert_eq!(sites.stacks, [5, 1 << 20, 7, u32::MAX, 1024 + 5, 0, (1 << 20) + 1]);
        // Through the table's growth: 100 K ids, every one found again.
        let mut sites = Sites::new();
        let ids: Vec<u32> = (0..100_000u32).map(|i| i.wrapping_mul(2_654_435_761) % (1 << 20)).collect();
        let mut first = std::collections::HashMap::new();
        for &id in &ids {
            let n = first.len() as u32;
            let want = *first.entry(id).or_insert(n);
            assert_eq!(sites.index_of(id, &none), want, "id {id}");
        }
        assert!(2 * sites.acc.len() <= sites.table.len());
        for (&id, &want) in &first {
            assert_eq!(sites.index_of(id, &none), want);
        }
        assert_eq!(sites.acc.len(), first.len());
    }

    #[test]
    fn stack_bottoms_are_named_exactly_or_with_a_version() {
        for name in ["main", "_start", "clone3", "start_thread@GLIBC_2.34", "__libc_start_main_impl", "__libc_start_call_main"] {
            assert!(is_bottom(name), "{name}");
        }
        for name in ["mainloop", "clone_x", "do_start_thread", "", "mai"] {
            assert!(!is_bottom(name), "{name}");
        }
    }
}
