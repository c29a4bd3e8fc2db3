//! The one pass: each item decoded once, each event replayed into the
//! shadow heap (`Replay`) and handed with what it did (`Step`) to the
//! aggregators. Fed item by item (`stack`, `event`), so the same pass can
//! follow a trace that is still being written; `feed` drives it over a
//! whole trace with the decoder running ahead to prefetch, `feed_piped`
//! with the decoder on a thread of its own (`pipe`).

use super::functions::Functions;
use super::pipe::{self, Batch};
use super::replay::Replay;
use super::series::Series;
use super::sites::Sites;
use super::threads::ThreadSplit;
use crate::symbolize::CodeRanges;
use crate::trace::{Event, EventKind, Header, ItemRef, Items, StackTable};

pub struct Pass {
    pub replay: Replay,
    pub stacks: StackTable,
    pub functions: Functions,
    pub sites: Sites,
    pub series: Series,
    /// Sites by allocating thread, when asked (`AnalyzeOptions::threads`).
    pub threads: Option<ThreadSplit>,
    /// Calls counted so far (`Step::counted`).
    pub events: u64,
    /// The last event's time stamp.
    pub last_tsc: u64,
    header: Header,
}

impl Pass {
    /// A pass over the trace whose header is `header`, with a time series
    /// of at most `max_points` points.
    pub fn new(header: &Header, max_points: usize, compact: bool) -> Pass {
        Pass {
            replay: Replay::new(header),
            stacks: StackTable::default(),
            functions: Functions::default(),
            sites: Sites::default(),
            series: Series::new(max_points, compact, super::model::SpaceSplit::header_bytes(&header.allocator)),
            threads: None,
            events: 0,
            last_tsc: 0,
            header: header.clone(),
        }
    }

    /// Ns since the trace started at time stamp `tsc` (None: no clock rate).
    pub fn ns(&self, tsc: u64) -> Option<u64> {
        self.header.ns_since_start(tsc)
    }

    /// A stack definition, its frames cut where `code` ends.
    pub fn stack(&mut self, id: u32, pcs: Vec<u64>, code: &CodeRanges) {
        self.stacks.insert(id, &code.cut(pcs));
    }

    // Inlined into each of `feed`'s two loops: a call per event costs 3 %.
    #[inline(always)]
    pub fn event(&mut self, ev: &Event) {
        self.last_tsc = ev.tsc;
        let step = self.replay.event(ev, &self.stacks, self.events);
        self.functions.on_event(ev, &step);
        self.sites.on_event(ev, &step);
        self.series.on_event(ev, &step);
        if let Some(t) = &mut self.threads {
            t.on_event(ev, &step);
        }
        if step.counted {
            self.events += 1;
            if self.series.tick(self.events) {
                let ns = self.ns(ev.tsc);
                self.series.point(&mut self.replay.heap, self.events, ns);
            }
        }
    }

    /// Ends the time series with the heap at the end, unless its last point is that.
    pub fn end_series(&mut self) {
        if self.series.wants_last(self.events) {
            let ns = self.ns(self.last_tsc);
            self.series.point(&mut self.replay.heap, self.events, ns);
        }
    }

    /// Whether the live-block table or the site tables have outgrown a
    /// last-level cache (a program allocating from millions of distinct
    /// stacks), where each event's slots are worth prefetching.
    fn is_large(&self) -> bool {
        self.replay.heap.is_large() || self.replay.sites.table_bytes() + self.sites.bytes() >= 8 << 20
    }

    /// Whether the site tables are too large to stay cached between the
    /// events that touch them (`SITES_CACHED`).
    #[inline(always)]
    fn sites_large(&self) -> bool {
        self.replay.sites.table_bytes() + self.sites.bytes() >= SITES_CACHED
    }

    /// Starts loading what `ev` reads through the table slots that
    /// `Replay::prefetch(ev)` has loaded by now: an allocation's site
    /// counters; a free's block (its table slot read for its site) and its
    /// site's counters. Only while the site tables are large: otherwise
    /// their lines are cached anyway, and a free's early lookup of its
    /// block was a second probe of the live table, 5 % of python3's
    /// report with 2.8 M live blocks (6 144 stacks, ~0.4 MiB of site
    /// counters; cc1's 56 692 stacks are past the bound and keep it).
    #[inline(always)]
    fn prefetch_blocks(&self, ev: &Event) {
        if !self.sites_large() {
            return;
        }
        if matches!(ev.kind, EventKind::Alloc { .. } | EventKind::Realloc { .. }) {
            if let Ok(site) = self.replay.sites.find(ev.stack) {
                self.sites.prefetch(site);
            }
        }
        let addr = match ev.kind {
            EventKind::Free { ptr, .. } => ptr,
            EventKind::Realloc { old, .. } => old,
            _ => return,
        };
        if let Some(site) = self.replay.heap.prefetch_block(addr) {
            self.sites.prefetch(site);
        }
    }
}

/// Bytes of site tables (`SiteIndex`'s and `Sites`' counters) under which
/// a site's lines are not prefetched (`Pass::prefetch_blocks`): half of a
/// 2 MiB L2, where the counters of sites met every few events stay.
const SITES_CACHED: usize = 1 << 20;

/// Events before its replay when an event's table slots are prefetched: far
/// enough for a cache miss started by `Replay::prefetch` to complete before
/// the event is replayed, near enough for its line to still be cached then.
const AHEAD: usize = 16;

/// Events before its replay when a free's second miss, the slab entry its
/// table slot names, is started (`Pass::prefetch_blocks`): the slot was
/// prefetched `AHEAD - DEEP` events before.
const DEEP: usize = 8;

/// Feeds every item of the trace to the pass, and each event to `also`
/// (with the pass, just after the event).
/// Until the live-block table or the site tables have outgrown a last-level
/// cache (`Pass::is_large`), each event is replayed as the decoder lends it:
/// with everything cached, copies and prefetches were 5 % more instructions
/// for nothing (malloc-test, 5 live blocks). From then on the items are
/// gathered in batches and replayed by `replay_batch`, as `feed_piped`'s
/// are: each event's table slots prefetched `AHEAD` events before its replay.
#[inline(always)]
pub fn feed(items: &mut Items, pass: &mut Pass, code: &CodeRanges, mut also: impl FnMut(&Event, &Pass)) {
    loop {
        match items.next_ref() {
            None => return,
            Some(ItemRef::Stack { id, pcs }) => pass.stack(id, pcs, code),
            Some(ItemRef::Event(ev)) => {
                pass.event(ev);
                also(ev, pass);
                // The tables never shrink: once large, always large.
                if pass.is_large() {
                    break;
                }
            }
        }
    }
    let mut batch = Batch::default();
    let mut large = true;
    loop {
        let ended = pipe::fill(items, &mut batch, pipe::BATCH);
        replay_batch(&mut batch, pass, code, &mut large, &mut also);
        if ended {
            return;
        }
    }
}

/// `feed` with the decoder on a thread of its own (`pipe::decode`, batches
/// of `batch` events), the
/// pass here: the same items in the same order, the same prefetching, the
/// events read from the batches rather than lent by the decoder. Returns
/// false, with nothing fed, when the thread cannot be started.
pub fn feed_piped(items: &mut Items, pass: &mut Pass, code: &CodeRanges, batch: usize, mut also: impl FnMut(&Event, &Pass)) -> bool {
    let (queue, full, empty) = pipe::queue(pipe::QUEUED);
    std::thread::scope(|s| {
        let decoder = std::thread::Builder::new()
            .name("mtlab-decode".into())
            .spawn_scoped(s, move || pipe::decode(items, full, empty, batch));
        if decoder.is_err() {
            return false;
        }
        let mut large = false;
        // A panic of the decoder drops its sender: the loop ends and the
        // scope passes the panic on.
        for mut batch in queue.full.iter() {
            replay_batch(&mut batch, pass, code, &mut large, &mut also);
            // The decoder fills it again (it has gone: nothing to do).
            let _ = queue.empty.send(batch);
        }
        true
    })
}

/// Replays one batch (of `feed` or `feed_piped`): each stack definition
/// taken at its place among the events, and once the tables are large
/// (`Pass::is_large`) each event's table slots prefetched `AHEAD` events
/// before its replay and a free's block `DEEP` before.
#[inline(always)]
fn replay_batch(batch: &mut Batch, pass: &mut Pass, code: &CodeRanges, large: &mut bool, also: &mut impl FnMut(&Event, &Pass)) {
    let events = &batch.events;
    let mut stacks = std::mem::take(&mut batch.stacks).into_iter().peekable();
    let mut next_stack = stacks.peek().map_or(usize::MAX, |s| s.0);
    if *large {
        for ev in events.iter().take(AHEAD) {
            pass.replay.prefetch(ev);
        }
    }
    for (i, ev) in events.iter().enumerate() {
        while i == next_stack {
            if let Some((_, id, pcs)) = stacks.next() {
                pass.stack(id, pcs, code);
            }
            next_stack = stacks.peek().map_or(usize::MAX, |s| s.0);
        }
        if *large {
            if let Some(ahead) = events.get(i + AHEAD) {
                pass.replay.prefetch(ahead);
            }
            if let Some(deep) = events.get(i + DEEP) {
                pass.prefetch_blocks(deep);
            }
            pass.event(ev);
            also(ev, pass);
        } else {
            pass.event(ev);
            also(ev, pass);
            if pass.is_large() {
                *large = true;
                for ev in events.iter().skip(i + 1).take(AHEAD) {
                    pass.replay.prefetch(ev);
                }
            }
        }
    }
    for (_, id, pcs) in stacks {
        pass.stack(id, pcs, code);
    }
}
