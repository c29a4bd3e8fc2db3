//! Allocation sites: the site of each allocation's stack (`SiteIndex`, kept
//! by the replay), and the sites aggregator (`Sites`): calls, bytes, live
//! blocks now and at the peak, temporary allocations, by site. The tables
//! by bytes, by calls, at the peak, by temporaries and of leaks rank it;
//! the callers table and the exact profile behind pprof, the flame graph
//! and speedscope are read from it too.

use rustc_hash::FxHashMap as HashMap;

use super::model::CallerReport;
use super::step::{Block, Step};
use super::symbols::Symbols;
use crate::platform::prefetch::prefetch;
use super::threads::ThreadSplit;
use crate::profile::{StackSample, ThreadShare};
use crate::trace::{Event, EventKind, StackRef, StackTable};

/// Allocation sites by stack id, as dense indices. The shadow heap's
/// objects carry their site's index (not the stack id), so a free finds its
/// site without a lookup. An allocation finds its site by stack id in an
/// open-addressing table of (id, index) pairs, 8 bytes each and at most
/// half full. It replaced a table indexed by id (the writer's ids are slots
/// of its 2^20-entry table: 4 MiB, one cache line per site in use), whose
/// load missed the cache on most allocations of cc1 (57 K sites: an eighth
/// of the report's time); 57 K pairs take 1 MiB.
pub struct SiteIndex {
    /// (stack id, site index); index `NONE`: empty.
    table: Vec<(u32, u32)>,
    /// 64 - log2(table.len()).
    shift: u32,
    stacks: Vec<u32>,
    /// Each site's stack in the table of stacks, found when the site was
    /// added (its definition then just read): the passes over every site
    /// read stacks in the table's order instead of looking each up by id
    /// (half a million stacks: a fifth of a report's time).
    frames: Vec<Option<StackRef>>,
}

impl SiteIndex {
    const NONE: u32 = u32::MAX;

    pub fn new() -> SiteIndex {
        Self::with_slots(1 << 10)
    }

    fn with_slots(n: usize) -> SiteIndex {
        SiteIndex { table: vec![(0, Self::NONE); n], shift: 64 - n.trailing_zeros(), stacks: Vec::new(), frames: Vec::new() }
    }

    /// How many sites there are.
    pub fn len(&self) -> usize {
        self.stacks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.stacks.is_empty()
    }

    #[inline(always)]
    fn home(&self, stack: u32) -> usize {
        ((stack as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    /// Starts loading the slot where a lookup of `stack` begins.
    #[inline(always)]
    pub fn prefetch(&self, stack: u32) {
        prefetch(&self.table[self.home(stack)]);
    }

    #[inline(always)]
    pub fn index_of(&mut self, stack: u32, stacks: &StackTable) -> u32 {
        match self.find(stack) {
            Ok(idx) => idx,
            Err(slot) => self.add(stack, slot, stacks),
        }
    }

    /// The site of `stack` (Ok), or the empty slot where it would go (Err).
    #[inline(always)]
    pub fn find(&self, stack: u32) -> Result<u32, usize> {
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
        let idx = self.stacks.len() as u32;
        self.stacks.push(stack);
        self.frames.push(stacks.find(stack));
        self.table[slot] = (stack, idx);
        if 2 * self.stacks.len() > self.table.len() {
            let mut t = SiteIndex::with_slots(2 * self.table.len());
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

    /// Bytes of the lookup table.
    pub fn table_bytes(&self) -> usize {
        std::mem::size_of_val(self.table.as_slice())
    }

    /// The stack id of site `i`.
    pub fn stack_of(&self, i: usize) -> u32 {
        self.stacks[i]
    }

    /// The frames of site `i`: through the reference it kept, else by id
    /// (an id defined twice, or defined after the site was met — another
    /// thread's definition merged later).
    pub fn frames_of<'s>(&self, i: usize, stacks: &'s StackTable) -> Option<&'s [u64]> {
        match self.frames[i] {
            Some(r) if !stacks.redefined() => Some(stacks.frames(r)),
            _ => stacks.get(self.stacks[i]),
        }
    }

    /// (site index, frames) of every site whose stack was defined when the
    /// site was met (by id when an id was defined twice).
    pub fn with_frames<'s>(&'s self, stacks: &'s StackTable) -> impl Iterator<Item = (usize, &'s [u64])> {
        let by_ref = !stacks.redefined();
        self.stacks.iter().zip(&self.frames).enumerate().filter_map(move |(i, (&id, r))| {
            let frames = if by_ref { r.map(|r| stacks.frames(r)) } else { stacks.get(id) };
            frames.map(|f| (i, f))
        })
    }
}

impl Default for SiteIndex {
    fn default() -> Self {
        Self::new()
    }
}

/// One site's counters.
#[derive(Default, Clone, Copy)]
pub struct SiteAcc {
    pub calls: u64,
    pub bytes: u64,
    pub live_objects: u64,
    pub live_bytes: u64,
    /// Live objects and bytes when the heap last peaked, kept once the site
    /// changes after that peak (`peak_gen` says which peak they belong to).
    peak_objects: u64,
    peak_bytes: u64,
    peak_gen: u32,
    /// Blocks freed with no other allocation of their thread in between.
    pub temporary: u64,
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
    pub fn at_peak(&self, gen: u32) -> (u64, u64) {
        if self.peak_gen == gen {
            (self.peak_objects, self.peak_bytes)
        } else {
            (self.live_objects, self.live_bytes)
        }
    }
}

/// The sites aggregator: each site's counters, by the index `SiteIndex`
/// gave it, and the temporary allocations (heaptrack's: freed with no other
/// allocation of their thread in between).
#[derive(Default)]
pub struct Sites {
    acc: Vec<SiteAcc>,
    /// Number of the last new peak (`SiteAcc::keep_peak`).
    gen: u32,
    /// Each thread's last allocated block: (tid, address; 0 after its free).
    last_alloc: Vec<(u32, u64)>,
    last_slot: usize,
    temporary: u64,
}

impl Sites {
    /// Counts what `ev` did to the heap (`step`).
    #[inline(always)]
    pub fn on_event(&mut self, ev: &Event, step: &Step) {
        if let EventKind::Free { ptr, .. } = ev.kind {
            let slot = self.thread_slot(ev.tid);
            let temporary = ptr != 0 && self.last_alloc[slot].1 == ptr;
            if temporary {
                self.last_alloc[slot].1 = 0;
                if let Some(b) = step.freed {
                    self.temporary += 1;
                    if let Some(s) = self.acc.get_mut(b.site as usize) {
                        s.temporary += 1;
                    }
                }
            }
        }
        if let Some(b) = step.freed {
            self.released(b);
        }
        if let Some(b) = step.replaced {
            self.released(b);
        }
        if let Some(b) = step.allocated {
            self.allocated(b);
            let slot = self.thread_slot(ev.tid);
            self.last_alloc[slot].1 = b.addr;
            if step.peak {
                self.gen = self.gen.wrapping_add(1);
            }
        }
    }

    #[inline(always)]
    fn allocated(&mut self, b: Block) {
        if b.site as usize >= self.acc.len() {
            self.acc.resize(b.site as usize + 1, SiteAcc::default());
        }
        let gen = self.gen;
        let site = &mut self.acc[b.site as usize];
        site.keep_peak(gen);
        site.calls += 1;
        site.bytes += b.size;
        site.live_objects += 1;
        site.live_bytes += b.size;
    }

    #[inline(always)]
    fn released(&mut self, b: Block) {
        let gen = self.gen;
        if let Some(s) = self.acc.get_mut(b.site as usize) {
            s.keep_peak(gen);
            s.live_objects = s.live_objects.saturating_sub(1);
            s.live_bytes = s.live_bytes.saturating_sub(b.size);
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

    /// Starts loading the counters of site `site`.
    #[inline(always)]
    pub fn prefetch(&self, site: u32) {
        if let Some(s) = self.acc.get(site as usize) {
            prefetch(s);
        }
    }

    /// Bytes of the counters.
    pub fn bytes(&self) -> usize {
        std::mem::size_of_val(self.acc.as_slice())
    }

    /// The counters of site `i`.
    pub fn get(&self, i: usize) -> SiteAcc {
        self.acc.get(i).copied().unwrap_or_default()
    }

    /// The number of the last peak, for `SiteAcc::at_peak`.
    pub fn peak_gen(&self) -> u32 {
        self.gen
    }

    /// Temporary allocations, all sites together.
    pub fn temporary(&self) -> u64 {
        self.temporary
    }

    /// Allocation calls, all sites together.
    pub fn calls(&self) -> u64 {
        self.acc.iter().map(|a| a.calls).sum()
    }

    /// (stack id, counters) of every site of `index`.
    pub fn all(&self, index: &SiteIndex) -> Vec<(u32, SiteAcc)> {
        (0..index.len()).map(|i| (index.stack_of(i), self.get(i))).collect()
    }

    /// The exact profile: each stack with its calls and bytes allocated and
    /// its blocks still live, most bytes first (equal bytes: in the order
    /// the sites were met); with each stack's split by thread when `threads`
    /// holds one.
    pub fn profile(&self, index: &SiteIndex, stacks: &StackTable, threads: Option<&ThreadSplit>) -> Vec<StackSample> {
        let mut split = threads.map(ThreadSplit::by_site).unwrap_or_default();
        let mut samples: Vec<StackSample> = (0..index.len())
            .map(|i| {
                let a = self.get(i);
                let threads = split
                    .remove(&(i as u32))
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(tid, c)| ThreadShare {
                        tid,
                        alloc_objects: c.calls as f64,
                        alloc_bytes: c.bytes as f64,
                        inuse_objects: c.live_objects as f64,
                        inuse_bytes: c.live_bytes as f64,
                        bounds: None,
                    })
                    .collect();
                StackSample {
                    pcs: index.frames_of(i, stacks).map(<[u64]>::to_vec).unwrap_or_default(),
                    alloc_objects: a.calls as f64,
                    alloc_bytes: a.bytes as f64,
                    inuse_objects: a.live_objects as f64,
                    inuse_bytes: a.live_bytes as f64,
                    bounds: None,
                    threads,
                }
            })
            .collect();
        samples.sort_by(|a, b| b.alloc_bytes.total_cmp(&a.alloc_bytes));
        samples
    }
}

/// Indices of the `top` sites with the largest `key` (equal keys: the lower
/// stack id first) among those `keep` accepts. A partial selection, not a
/// sort of every site: a report ranks sites five ways, and sorting cc1's
/// 57 K sites each time was 2 % of its report.
pub fn top_by(sites: &[(u32, SiteAcc)], top: usize, keep: impl Fn(&SiteAcc) -> bool, key: impl Fn(&SiteAcc) -> u64) -> Vec<usize> {
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

/// The functions of every stack, with the calls and bytes of the stacks they
/// are on; ranked by total bytes, the first `top`.
pub fn callers(sites: &[(&[u64], u64, u64)], symbols: &mut Symbols, top: usize) -> Vec<CallerReport> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::replay::Replay;
    use crate::trace::{Func, Header};

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
        let mut sites = SiteIndex::new();
        let none = StackTable::default();
        let got: Vec<u32> = ids.iter().map(|&id| sites.index_of(id, &none)).collect();
        assert_eq!(got, [0, 1, 0, 2, 3, 4, 2, 5, 6]);
        assert_eq!(sites.stacks, [5, 1 << 20, 7, u32::MAX, 1024 + 5, 0, (1 << 20) + 1]);
        // Through the table's growth: 100 K ids, every one found again.
        let mut sites = SiteIndex::new();
        let ids: Vec<u32> = (0..100_000u32).map(|i| i.wrapping_mul(2_654_435_761) % (1 << 20)).collect();
        let mut first = std::collections::HashMap::new();
        for &id in &ids {
            let n = first.len() as u32;
            let want = *first.entry(id).or_insert(n);
            assert_eq!(sites.index_of(id, &none), want, "id {id}");
        }
        assert!(2 * sites.len() <= sites.table.len());
        for (&id, &want) in &first {
            assert_eq!(sites.index_of(id, &none), want);
        }
        assert_eq!(sites.len(), first.len());
    }

    /// Events replayed into a shadow heap and fed to the sites aggregator.
    fn fed(events: &[Event], stacks: &StackTable) -> (Replay, Sites) {
        let mut replay = Replay::new(&Header { page_size: 4096, ..Header::default() });
        let mut sites = Sites::default();
        for (i, ev) in events.iter().enumerate() {
            let step = replay.event(ev, stacks, i as u64);
            sites.on_event(ev, &step);
        }
        (replay, sites)
    }

    fn ev(tid: u32, stack: u32, kind: EventKind) -> Event {
        Event { tid, tsc: 0, cycles: 1, stack, flags: 0, kind }
    }

    fn malloc(tid: u32, stack: u32, size: u64, ptr: u64) -> Event {
        ev(tid, stack, EventKind::Alloc { func: Func::Malloc, size, align: 0, ptr, usable: size })
    }

    fn free(tid: u32, ptr: u64) -> Event {
        ev(tid, 0, EventKind::Free { func: Func::Free, ptr })
    }

    #[test]
    fn sites_count_calls_live_blocks_the_peak_and_temporaries() {
        let mut stacks = StackTable::default();
        stacks.insert(1, &[0x10, 0x20]);
        stacks.insert(2, &[0x30]);
        let events = [
            malloc(1, 1, 100, 0xa0),
            malloc(1, 2, 10, 0xb0),
            free(1, 0xb0), // thread 1's last allocation: temporary
            malloc(2, 2, 20, 0xc0),
            malloc(1, 1, 300, 0xd0), // the peak: 420 live
            free(2, 0xa0),           // not thread 2's last: not temporary
            free(1, 0xd0),           // thread 1's last: temporary
            ev(1, 2, EventKind::Realloc { func: Func::Realloc, old: 0xc0, size: 40, ptr: 0xe0, usable: 40 }),
        ];
        let (replay, sites) = fed(&events, &stacks);
        let gen = sites.peak_gen();
        let all = sites.all(&replay.sites);
        assert_eq!(all.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [1, 2]);
        let (one, two) = (all[0].1, all[1].1);
        assert_eq!((one.calls, one.bytes, one.live_objects, one.live_bytes, one.temporary), (2, 400, 0, 0, 1));
        assert_eq!((two.calls, two.bytes, two.live_objects, two.live_bytes, two.temporary), (3, 70, 1, 40, 1));
        assert_eq!(one.at_peak(gen), (2, 400), "both of stack 1's blocks were live at the peak");
        assert_eq!(two.at_peak(gen), (1, 20));
        assert_eq!((sites.temporary(), sites.calls()), (2, 5));
        // The exact profile is the same counters by stack, most bytes first.
        let p = sites.profile(&replay.sites, &stacks, None);
        assert_eq!(p[0].pcs, [0x10, 0x20]);
        assert_eq!((p[0].alloc_objects, p[0].alloc_bytes, p[0].inuse_objects, p[0].inuse_bytes), (2.0, 400.0, 0.0, 0.0));
        assert_eq!((p[1].alloc_objects, p[1].alloc_bytes, p[1].inuse_objects, p[1].inuse_bytes), (3.0, 70.0, 1.0, 40.0));
    }
}
