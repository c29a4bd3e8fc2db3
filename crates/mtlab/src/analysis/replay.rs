//! The shadow heap aggregator, first in the pass: each event replayed into
//! the shadow heap (`heap::model`), which keeps live and mapped bytes,
//! fragmentation and utilization, and the peak of live bytes. It also gives
//! each allocation's stack its site (a dense index the heap keeps with the
//! block), so that what an event did — the block it freed, the one it
//! allocated — reaches the other aggregators as a `Step` by site, without
//! a second map of live blocks.

use super::model::{PeakReport, ProgramMappings};
use super::sites::SiteIndex;
use super::step::{Block, Call, Step};
use crate::heap::model::{HeapSnapshot, RawSnapshot, RegionKind, ShadowHeap};
use crate::trace::event::{FLAG_CHUNK_MMAPPED, FLAG_FAILED, FLAG_IN_ALLOCATOR};
use crate::trace::{Event, EventKind, Func, Header, StackTable};

const MAP_ANONYMOUS: u64 = 0x20;
/// glibc: a block's chunk starts this many bytes before it.
const GLIBC_CHUNK_HEADER: u64 = 16;
/// A glibc thread arena heap's aligned reservation (HEAP_MAX_SIZE on 64-bit).
const GLIBC_HEAP_MAX: u64 = 64 << 20;

/// The peak while the pass runs: counters and the time stamp, turned into
/// a `PeakReport` when the report is made (`Replay::peak`).
#[derive(Default)]
struct PeakState {
    heap: RawSnapshot,
    at_event: u64,
    at_tsc: Option<u64>,
}

pub struct Replay {
    pub heap: ShadowHeap,
    /// The site of each allocation's stack.
    pub sites: SiteIndex,
    page: u64,
    peak: PeakState,
    /// mmap calls of the program itself (not the allocator's).
    pub program_maps: ProgramMappings,
    /// The heap at the end, once the pass is over (`release`).
    end: Option<HeapSnapshot>,
}

impl Replay {
    /// A shadow heap whose program break starts where the trace's header says.
    pub fn new(header: &Header) -> Replay {
        let mut heap = ShadowHeap::new(header.brk_start);
        heap.set_break(header.brk_init);
        Replay {
            heap,
            sites: SiteIndex::new(),
            page: header.page_size.max(1),
            peak: PeakState::default(),
            program_maps: ProgramMappings { calls: 0, bytes: 0 },
            end: None,
        }
    }

    /// Replays `ev`, the pass's event number `at_event`; `stacks` holds the
    /// stacks defined so far (a new site notes where its stack is).
    #[inline(always)]
    pub fn event(&mut self, ev: &Event, stacks: &StackTable, at_event: u64) -> Step {
        let failed = ev.flags & FLAG_FAILED != 0;
        let page = self.page;
        let round = |len: u64| len.div_ceil(page) * page;
        let mut step = Step::default();
        let mut call = |func: Func, size: Option<u64>, failed: bool| {
            step.call = Some(Call { func, size, failed });
            step.counted = true;
        };
        match ev.kind {
            EventKind::Alloc { func, size, ptr, usable, .. } => {
                call(func, Some(size), failed || ptr == 0);
                if ptr != 0 {
                    self.allocated(&mut step, ptr, size, usable, ev, stacks, at_event);
                }
            }
            // free(NULL), `delete nullptr`: a call, and nothing freed.
            EventKind::Free { func, ptr: 0 } => call(func, None, false),
            EventKind::Free { func, ptr } => {
                let freed = self.released(ptr);
                call(func, freed.map(|b| b.size), false);
                step.freed = freed;
            }
            EventKind::UsableSize { .. } => call(Func::MallocUsableSize, None, false),
            EventKind::Realloc { func, old, size, ptr, usable } => {
                call(func, Some(size), failed);
                if ptr != 0 || size == 0 {
                    // Success, or realloc(p, 0) which frees p.
                    if old != 0 {
                        step.freed = self.released(old);
                    }
                    if ptr != 0 {
                        self.allocated(&mut step, ptr, size, usable, ev, stacks, at_event);
                    }
                }
            }
            EventKind::Mmap { func, len, flags, result, .. } => {
                // A failed call is an event all the same.
                call(func, Some(len), failed);
                if failed {
                    // nothing mapped
                } else if ev.flags & FLAG_IN_ALLOCATOR != 0 && flags & MAP_ANONYMOUS != 0 {
                    self.heap.map(result, result + round(len), RegionKind::Mmap);
                } else {
                    self.program_maps.calls += 1;
                    self.program_maps.bytes += len;
                }
            }
            EventKind::Munmap { addr, len, ret } => {
                call(Func::Munmap, Some(len), failed || ret != 0);
                if ret == 0 {
                    self.heap.unmap(addr, addr + round(len));
                }
            }
            EventKind::Mremap { old, old_len, new_len, result, .. } => {
                call(Func::Mremap, Some(new_len), failed);
                if !failed {
                    let kind = self.heap.region_of(old).map(|(_, k)| k);
                    let kind = kind.or((ev.flags & FLAG_IN_ALLOCATOR != 0).then_some(RegionKind::Mmap));
                    if let Some(kind) = kind {
                        self.heap.unmap(old, old + round(old_len));
                        self.heap.map(result, result + round(new_len), kind);
                    }
                }
            }
            EventKind::Brk { ret, brk_after, .. } => {
                call(Func::Brk, None, failed || ret != 0);
                self.heap.set_break(brk_after);
            }
            EventKind::Sbrk { increment, brk_after, .. } => {
                // sbrk(0) asks where the break is: no size to average.
                call(Func::Sbrk, (increment != 0).then(|| increment.unsigned_abs()), failed);
                self.heap.set_break(brk_after);
            }
            EventKind::BrkSeen { brk } => self.heap.set_break(brk),
            // Size 0: glibc unmapped the heap whole (heap_trim deletes an
            // arena's last heap), with its whole aligned reservation.
            EventKind::ArenaHeap { base, size: 0 } => self.heap.unmap(base, base + GLIBC_HEAP_MAX),
            EventKind::ArenaHeap { base, size } => self.heap.map(base, base + size, RegionKind::Arena),
            // Sampled traces are read by profile::sampled, not replayed here.
            EventKind::Sample { .. } | EventKind::SampleFree { .. } => {}
        }
        step
    }

    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn allocated(&mut self, step: &mut Step, ptr: u64, size: u64, usable: u64, ev: &Event, stacks: &StackTable, at_event: u64) {
        if ev.flags & FLAG_CHUNK_MMAPPED != 0 {
            self.heap.map(ptr - GLIBC_CHUNK_HEADER, ptr + usable, RegionKind::GlibcChunk);
        }
        let site = self.sites.index_of(ev.stack, stacks);
        if let Some(old) = self.heap.alloc(ptr, size, usable, site) {
            step.replaced = Some(Block { site: old.stack, size: old.size, addr: ptr });
        }
        step.allocated = Some(Block { site, size, addr: ptr });
        if self.heap.live_bytes() > self.peak.heap.live_bytes {
            self.peak = PeakState { heap: self.heap.raw_snapshot(), at_event, at_tsc: Some(ev.tsc) };
            step.peak = true;
        }
    }

    /// Frees `ptr`: the block, when it was live.
    #[inline(always)]
    fn released(&mut self, ptr: u64) -> Option<Block> {
        match self.heap.free_in(ptr) {
            Some((obj, held)) => {
                if let Some((start, RegionKind::GlibcChunk)) = held {
                    self.heap.unmap(start, ptr + obj.usable());
                }
                Some(Block { site: obj.stack, size: obj.size, addr: ptr })
            }
            None => {
                self.heap.count_unknown_free();
                None
            }
        }
    }

    /// Starts loading the table slots that `event(ev)` will probe.
    #[inline(always)]
    pub fn prefetch(&self, ev: &Event) {
        match ev.kind {
            EventKind::Alloc { ptr, .. } => {
                self.heap.prefetch(ptr);
                self.sites.prefetch(ev.stack);
            }
            EventKind::Free { ptr, .. } => self.heap.prefetch(ptr),
            EventKind::Realloc { old, ptr, .. } => {
                self.heap.prefetch(old);
                self.heap.prefetch(ptr);
                self.sites.prefetch(ev.stack);
            }
            _ => {}
        }
    }

    /// The peak of live bytes so far; `ns` turns a time stamp into ns since the start.
    pub fn peak(&self, ns: impl Fn(u64) -> Option<u64>) -> PeakReport {
        PeakReport { heap: self.peak.heap.finish(), at_event: self.peak.at_event, at_ns: self.peak.at_tsc.and_then(ns) }
    }

    /// The heap as it is now (as it was at `release`, after it).
    pub fn now(&self) -> HeapSnapshot {
        self.end.unwrap_or_else(|| self.heap.exact_snapshot())
    }

    /// Ends the replay: the heap's figures at the end are kept, its blocks
    /// dropped, before the report symbolizes its sites — the memory of
    /// one is free for the other (python3 with 2.8 M live blocks: the
    /// debug information read was 30 MiB on top of the table).
    pub fn release(&mut self) {
        self.end = Some(self.heap.exact_snapshot());
        self.heap.release_blocks();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header { page_size: 4096, ..Header::default() }
    }

    fn ev(kind: EventKind, stack: u32) -> Event {
        Event { tid: 1, tsc: 100, cycles: 10, stack, flags: 0, kind }
    }

    fn malloc(size: u64, ptr: u64, stack: u32) -> Event {
        ev(EventKind::Alloc { func: Func::Malloc, size, align: 0, ptr, usable: size }, stack)
    }

    #[test]
    fn steps_name_the_blocks_by_site_and_the_peak() {
        let mut r = Replay::new(&header());
        let stacks = StackTable::default();
        let a = r.event(&malloc(100, 0x1000, 7), &stacks, 0);
        assert_eq!(a.allocated, Some(Block { site: 0, size: 100, addr: 0x1000 }));
        assert!(a.peak && a.counted);
        let b = r.event(&malloc(50, 0x2000, 9), &stacks, 1);
        assert_eq!(b.allocated.map(|b| b.site), Some(1), "a new stack, a new site");
        let f = r.event(&ev(EventKind::Free { func: Func::Free, ptr: 0x1000 }, 0), &stacks, 2);
        assert_eq!(f.freed, Some(Block { site: 0, size: 100, addr: 0x1000 }));
        assert!(!f.peak);
        let again = r.event(&malloc(10, 0x3000, 7), &stacks, 3);
        assert_eq!(again.allocated.map(|b| b.site), Some(0), "stack 7's site again");
        assert!(!again.peak, "60 live bytes, below the peak of 150");
        // An allocation at a live address: the old block is replaced.
        let over = r.event(&malloc(500, 0x2000, 9), &stacks, 4);
        assert_eq!(over.replaced, Some(Block { site: 1, size: 50, addr: 0x2000 }));
        assert!(over.peak);
        let p = r.peak(Some);
        assert_eq!((p.heap.live_bytes, p.at_event, p.at_ns), (510, 4, Some(100)));
        assert_eq!(r.now().live_bytes, 510);
        // A free of nothing live frees nothing, and is counted as unknown.
        let none = r.event(&ev(EventKind::Free { func: Func::Free, ptr: 0x9000 }, 0), &stacks, 5);
        assert_eq!(none.freed, None);
        assert_eq!(r.heap.unknown_frees, 1);
    }

    #[test]
    fn a_failed_mapping_is_a_call_that_maps_nothing_and_the_programs_own_maps_are_apart() {
        let mut r = Replay::new(&header());
        let stacks = StackTable::default();
        let map = |flags: u8, map_flags: u64| {
            let kind = EventKind::Mmap { func: Func::Mmap, hint: 0, len: 5000, prot: 3, flags: map_flags, fd: -1, offset: 0, result: 0x7000_0000 };
            Event { flags, ..ev(kind, 0) }
        };
        let failed = r.event(&map(FLAG_FAILED | FLAG_IN_ALLOCATOR, MAP_ANONYMOUS), &stacks, 0);
        assert!(failed.counted && failed.call.is_some_and(|c| c.failed), "a failed call is an event all the same");
        assert_eq!(r.now().mapped_bytes, 0, "and maps nothing");
        assert!(r.event(&map(FLAG_IN_ALLOCATOR, MAP_ANONYMOUS), &stacks, 0).counted);
        assert_eq!(r.now().mapped_bytes, 8192, "the allocator's mapping, rounded to pages");
        r.event(&map(0, MAP_ANONYMOUS), &stacks, 0);
        assert_eq!((r.program_maps.calls, r.program_maps.bytes), (1, 5000));
        assert!(!r.event(&ev(EventKind::BrkSeen { brk: 0 }, 0), &stacks, 0).counted, "no call");
    }
}
