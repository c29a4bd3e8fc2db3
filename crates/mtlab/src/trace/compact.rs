//! Compact traces: a finished trace rewritten without per-call timing.
//!
//! On an allocation-heavy program the time stamps and cycles of each call
//! are nearly all the bytes left once the column layout has done its work:
//! they are measurements, and their noise does not compress. A compact
//! trace keeps every event and every figure `mtlab report` derives from
//! whole-run counts exactly, and gives up two things:
//! - **time stamps are rounded down to a quantum** (2¹⁶ ticks by default,
//!   ≈ 25 µs at 2.6 GHz). Between threads, order matters where they touch
//!   the same block, region or the program break; there a stamp is raised
//!   just enough (by ticks) to stay after the other thread's event, so the
//!   shadow heap replays the same blocks and regions;
//! - **each call's cycles are kept as a distribution**: within each chunk
//!   the cycles of each function are sorted before they are stored, so the
//!   per-function totals, means, deviations and percentiles are exact but
//!   an event's `cycles` is no longer its own (the report then shows no
//!   per-window malloc cycles). RUNINFO `compact_quantum` marks such a file.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use rustc_hash::FxHashMap as HashMap;

use super::columns::{split_chained, Chain, RowChunk, Stamps};
use super::encode::ChunkEncoder;
use super::error::TraceError;
use super::event::{Event, EventKind, Item, FLAG_CHUNK_MMAPPED, FLAG_FAILED};
use super::format::*;
use super::keys::{COMPACT_LEAN, COMPACT_QUANTUM, FINISH_WARNING};
use super::lean::Lean;
use super::kv::kv_text;
use super::records::{next_record, read_file_header, write_checked_events, write_record};
use super::rewrite::{copy_record, header_at_this_version, temp_beside};
use super::TraceFile;

/// Default rounding of time stamps, in TSC ticks.
pub const DEFAULT_QUANTUM: u64 = 1 << 16;
/// A lean trace's default rounding (6-7 ms at 2.3-2.6 GHz; heaptrack's
/// trace keeps a time line every 10 ms): the runs of equal stamps cost
/// pychurn's lean trace 123 kB of 548 kB at 2¹⁶ ticks, 3 kB at 2²⁴.
pub const DEFAULT_LEAN_QUANTUM: u64 = 1 << 24;

/// The default quantum of a compact (`lean`: a lean) trace.
pub fn default_quantum(lean: bool) -> u64 {
    if lean {
        DEFAULT_LEAN_QUANTUM
    } else {
        DEFAULT_QUANTUM
    }
}
/// Most events per compacted chunk: bounds the compactor's memory per
/// thread (each pending event is held decoded). 2¹⁸ events are about the
/// 4 MiB of rows `finish_trace` joins: a record compressed alone relearns
/// its streams' statistics, and 2¹⁶ made compact traces larger than the
/// full ones (docs/benchmarks.md, *What each format change bought*).
const CHUNK_EVENTS: usize = 1 << 18;
/// Most events held for all threads together (≈ 100 bytes each).
const PENDING_EVENTS: usize = 1 << 20;
/// Most row bytes per compacted chunk, as `finish_trace` joins at most.
const CHUNK_ROW_BYTES: usize = super::finish::JOIN_MAX_BYTES;
/// zstd level of compacted chunks: their streams are long runs, which
/// higher levels find no better.
const ZSTD_LEVEL: i32 = 9;

#[derive(Debug, Default, Clone)]
pub struct CompactStats {
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// Traced calls, counted as `mtlab report` counts them (the break and
    /// arena records the tracer adds are kept but not counted).
    pub events: u64,
    /// Events whose stamp was raised above its quantum to keep a
    /// cross-thread order.
    pub raised: u64,
    pub warnings: Vec<String>,
}

impl CompactStats {
    /// How many times smaller the trace became.
    pub fn shrink(&self) -> f64 {
        self.bytes_before as f64 / self.bytes_after.max(1) as f64
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CompactError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error("{} is compact already (quantum {quantum} ticks): nothing to do", path.display())]
    AlreadyCompact { path: PathBuf, quantum: String },
    #[error("{} is a lean compact trace already: nothing to do", path.display())]
    AlreadyLean { path: PathBuf },
    /// A lean trace's addresses are made up from the exact replay order,
    /// which a compact trace no longer has (nor its full timing to re-stamp).
    #[error(
        "{} is compact already (quantum {quantum} ticks): a lean trace is made from the full trace — run \
         `mtlab compact --lean` on a trace that was not compacted (or record with `--compact=lean`)",
        path.display()
    )]
    LeanOfCompact { path: PathBuf, quantum: String },
    #[error("the quantum must be a power of two from 2 to 2^30 ticks, not {0}")]
    BadQuantum(u64),
    #[error("{} is still being written by process {pid} (no END record yet): compact it once that process has ended", path.display())]
    StillWriting { path: PathBuf, pid: u32 },
}

/// What an event touches that another thread's event may also touch.
#[derive(Clone, Copy)]
enum Touch {
    None,
    Block(u64),
    Region(u64, u64),
    Break,
}

fn touches(ev: &Event) -> [Touch; 2] {
    let failed = ev.flags & FLAG_FAILED != 0;
    let block = |p: u64| if p == 0 { Touch::None } else { Touch::Block(p) };
    let region = |a: u64, len: u64| if len == 0 || failed { Touch::None } else { Touch::Region(a, a.saturating_add(len)) };
    match ev.kind {
        EventKind::Alloc { ptr, .. } | EventKind::Sample { ptr, .. } => [block(ptr), Touch::None],
        EventKind::Free { ptr, .. } | EventKind::SampleFree { ptr } | EventKind::UsableSize { ptr, .. } => {
            [block(ptr), Touch::None]
        }
        EventKind::Realloc { old, ptr, .. } => [block(old), block(ptr)],
        EventKind::Mmap { result, len, .. } => [region(result, len), Touch::None],
        EventKind::Munmap { addr, len, .. } => [region(addr, len), Touch::None],
        EventKind::Mremap { old, old_len, new_len, result, .. } => [region(old, old_len), region(result, new_len)],
        EventKind::ArenaHeap { base, size } => [region(base, size), Touch::None],
        EventKind::Brk { .. } | EventKind::Sbrk { .. } | EventKind::BrkSeen { .. } => [Touch::Break, Touch::None],
    }
}

/// Gives each event its compact stamp, in global time order.
///
/// A stamp is the event's time rounded down to the quantum, raised to its
/// thread's previous stamp and to one tick past the stamp of the last event
/// of another thread that touched the same thing. All three bounds are at
/// most the true time when the other thread's event came strictly earlier,
/// so raising never drifts; two threads' events on the same TSC value can
/// put a stamp a tick above it.
struct Stamper {
    quantum: u64,
    /// The quantum the latest event fell in: entries stamped before it
    /// cannot raise anything any more and are dropped.
    current: u64,
    last_of_thread: HashMap<u32, u64>,
    /// Block address (u64::MAX: the program break) → (thread, stamp).
    blocks: HashMap<u64, (u32, u64)>,
    /// Recent region events: (start, end, thread, stamp).
    regions: Vec<(u64, u64, u32, u64)>,
    /// Live glibc blocks that are their own mmap'd chunk (CHUNK_MMAPPED) →
    /// the range the shadow heap maps for them: allocating and releasing
    /// such a block touches that range, not just the address.
    chunk_ranges: HashMap<u64, (u64, u64)>,
    raised: u64,
}

/// glibc: an mmap'd chunk starts this many bytes before its block (as
/// `analysis::replay` maps it).
const GLIBC_CHUNK_HEADER: u64 = 16;

const BREAK_KEY: u64 = u64::MAX;

impl Stamper {
    fn new(quantum: u64) -> Stamper {
        Stamper {
            quantum,
            current: 0,
            last_of_thread: HashMap::default(),
            blocks: HashMap::default(),
            regions: Vec::new(),
            chunk_ranges: HashMap::default(),
            raised: 0,
        }
    }

    /// The mapped ranges an event maps or unmaps with a glibc mmap'd chunk.
    fn chunk_touches(&mut self, ev: &Event) -> [Touch; 2] {
        let failed = ev.flags & FLAG_FAILED != 0;
        let (released, made) = match ev.kind {
            EventKind::Free { ptr, .. } => (ptr, None),
            // A failed realloc leaves the old block where it was.
            EventKind::Realloc { old, ptr, usable, .. } => (if failed { 0 } else { old }, Some((ptr, usable))),
            EventKind::Alloc { ptr, usable, .. } => (0, Some((ptr, usable))),
            _ => (0, None),
        };
        let mut t = [Touch::None, Touch::None];
        if released != 0 {
            if let Some((lo, hi)) = self.chunk_ranges.remove(&released) {
                t[0] = Touch::Region(lo, hi);
            }
        }
        if let Some((p, usable)) = made.filter(|&(p, _)| p != 0 && ev.flags & FLAG_CHUNK_MMAPPED != 0) {
            let r = (p.saturating_sub(GLIBC_CHUNK_HEADER), p.saturating_add(usable));
            self.chunk_ranges.insert(p, r);
            t[1] = Touch::Region(r.0, r.1);
        }
        t
    }

    fn stamp(&mut self, ev: &Event) -> u64 {
        let floor = ev.tsc - ev.tsc % self.quantum;
        if floor > self.current {
            self.current = floor;
            self.blocks.retain(|_, &mut (_, s)| s >= floor);
            self.regions.retain(|r| r.3 >= floor);
        }
        let tid = ev.tid;
        let base = floor.max(self.last_of_thread.get(&tid).copied().unwrap_or(0));
        let mut s = base;
        let [a, b] = touches(ev);
        let [c, d] = self.chunk_touches(ev);
        let t = [a, b, c, d];
        for touch in t {
            let after = |other: u32, os: u64| if other != tid { os + 1 } else { 0 };
            match touch {
                Touch::None => {}
                Touch::Block(p) => {
                    if let Some(&(other, os)) = self.blocks.get(&p) {
                        s = s.max(after(other, os));
                    }
                }
                Touch::Break => {
                    if let Some(&(other, os)) = self.blocks.get(&BREAK_KEY) {
                        s = s.max(after(other, os));
                    }
                }
                Touch::Region(lo, hi) => {
                    for &(a, b, other, os) in &self.regions {
                        if a < hi && lo < b {
                            s = s.max(after(other, os));
                        }
                    }
                }
            }
        }
        self.raised += u64::from(s > base);
        for touch in t {
            match touch {
                Touch::None => {}
                Touch::Block(p) => {
                    self.blocks.insert(p, (tid, s));
                }
                Touch::Break => {
                    self.blocks.insert(BREAK_KEY, (tid, s));
                }
                Touch::Region(lo, hi) => self.regions.push((lo, hi, tid, s)),
            }
        }
        self.last_of_thread.insert(tid, s);
        s
    }
}

/// One thread's events waiting to be written as a chunk.
#[derive(Default)]
struct Pending {
    items: Vec<Item>,
    events: usize,
    /// Rough row bytes: flushing at the cap keeps chunks like `finish_trace`'s.
    row_bytes: usize,
}

/// Sorts the cycles of each function's calls within `items`, in place.
fn sort_cycles_per_function(items: &mut [Item]) {
    let mut by_func: Vec<Vec<u64>> = vec![Vec::new(); crate::trace::Func::ALL.len()];
    for it in items.iter() {
        if let Item::Event(ev) = it {
            if let Some(f) = ev.kind.func() {
                by_func[f.index()].push(ev.cycles);
            }
        }
    }
    for v in &mut by_func {
        v.sort_unstable();
    }
    let mut next = vec![0usize; by_func.len()];
    for it in items.iter_mut() {
        if let Item::Event(ev) = it {
            if let Some(f) = ev.kind.func() {
                let i = f.index();
                ev.cycles = by_func[i][next[i]];
                next[i] += 1;
            }
        }
    }
}

struct Writer {
    out: BufWriter<File>,
    tmp_path: PathBuf,
    comp: zstd::bulk::Compressor<'static>,
    quantum: u64,
    written: u64,
    /// Each thread's predictions, from its last chunk written (layout 4).
    chains: HashMap<u32, Option<Chain>>,
}

impl Writer {
    fn io(&self) -> impl FnOnce(io::Error) -> TraceError + '_ {
        move |e| TraceError::Io { path: self.tmp_path.clone(), source: e }
    }

    fn chunk(&mut self, tid: u32, p: &mut Pending) -> Result<(), TraceError> {
        if p.items.is_empty() {
            return Ok(());
        }
        sort_cycles_per_function(&mut p.items);
        let mut enc = ChunkEncoder::new(tid);
        for it in &p.items {
            enc.item(it);
        }
        let head = enc.chunk_header();
        let first_tsc = u64::from_le_bytes(head[8..16].try_into().expect("8 bytes"));
        let chain = self.chains.entry(tid).or_default();
        let cols = split_chained(&[RowChunk { first_tsc, rows: enc.body() }], Stamps::Step(self.quantum), chain)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
            .map_err(self.io())?;
        let body = self.comp.compress(&cols).map_err(self.io())?;
        let flags = RECORD_FLAG_ZSTD | RECORD_FLAG_COLUMNS;
        self.written += write_checked_events(&mut self.out, flags, &head, &body).map_err(self.io())?;
        p.items.clear();
        p.events = 0;
        p.row_bytes = 0;
        Ok(())
    }
}

/// Refuses a trace that is compact already: it has no per-call timing left
/// to drop; `lean`: a lean trace was asked for.
pub fn refuse_compact(tf: &TraceFile, lean: bool) -> Result<(), CompactError> {
    let path = tf.path.clone();
    match tf.compact_quantum() {
        Some(_) if tf.is_lean() => Err(CompactError::AlreadyLean { path }),
        Some(q) if lean => Err(CompactError::LeanOfCompact { path, quantum: q.to_string() }),
        Some(q) => Err(CompactError::AlreadyCompact { path, quantum: q.to_string() }),
        None => Ok(()),
    }
}

fn check_quantum(quantum: u64) -> Result<(), CompactError> {
    match quantum.is_power_of_two() && (2..=1 << 30).contains(&quantum) {
        true => Ok(()),
        false => Err(CompactError::BadQuantum(quantum)),
    }
}

/// Rewrites the opened trace `tf` as a compact trace at `dst` (which may be
/// its own path), with `extra` added to its RUNINFO.
pub fn compact(tf: &TraceFile, dst: &Path, quantum: u64, extra: &[(String, String)]) -> Result<CompactStats, CompactError> {
    compact_with(tf, dst, quantum, extra, false)
}

/// [`compact`], and with `lean` the heap addresses made up and the frees'
/// stacks dropped (`trace::lean`; RUNINFO `compact_lean`). A lean trace
/// costs a read of the trace more here, to find the stacks it keeps.
pub fn compact_with(
    tf: &TraceFile,
    dst: &Path,
    quantum: u64,
    extra: &[(String, String)],
    lean: bool,
) -> Result<CompactStats, CompactError> {
    check_quantum(quantum)?;
    refuse_compact(tf, lean)?;
    let lean = if lean { Some(Lean::new(tf.items()?)) } else { None };
    compact_into(tf, dst, quantum, extra, lean)
}

/// [`compact_with`], a lean trace's stacks given in `lean`
/// ([`Lean::keeping`]) by a pass that read the trace anyway.
pub fn compact_into(
    tf: &TraceFile,
    dst: &Path,
    quantum: u64,
    extra: &[(String, String)],
    mut lean: Option<Lean>,
) -> Result<CompactStats, CompactError> {
    check_quantum(quantum)?;
    refuse_compact(tf, lean.is_some())?;
    let src = tf.path.as_path();
    let source = File::open(src).map_err(TraceError::io(src))?;
    let (_version, text, header_end) = read_file_header(&source, src, tf.file_len)?;
    // The header's own complaints come back whenever the file is read: only
    // damage found in the records is carried over (as finish_warning).
    let header_warnings = super::Header::parse(&text).1.len();

    let (tmp, tmp_path, guard) = temp_beside(dst, "compact")?;
    let mut w = Writer {
        out: BufWriter::with_capacity(1 << 20, tmp),
        comp: zstd::bulk::Compressor::new(ZSTD_LEVEL).map_err(TraceError::io(&tmp_path))?,
        tmp_path: tmp_path.clone(),
        quantum,
        written: 0,
        chains: HashMap::default(),
    };

    // The quantum in the header too: RUNINFO is the file's last record, and
    // a copy cut short (a full disk, a partial transfer) lost it — then it
    // read as an exact trace and was compacted again.
    let mut head = header_at_this_version(&source, src, header_end)?;
    let mut line = format!("{COMPACT_QUANTUM}={quantum}\n");
    if lean.is_some() {
        line.push_str(&format!("{COMPACT_LEAN}=1\n"));
    }
    let text_len = u32::from_le_bytes(head[12..16].try_into().expect("4 bytes")) + line.len() as u32;
    head[12..16].copy_from_slice(&text_len.to_le_bytes());
    head.extend_from_slice(line.as_bytes());
    w.out.write_all(&head).map_err(w.io())?;
    w.written = head.len() as u64;

    let damage = tf.warnings.get(header_warnings..).unwrap_or_default().to_vec();
    let mut stats = CompactStats { bytes_before: tf.file_len, warnings: damage, ..Default::default() };
    let mut pending_total = 0usize;
    let mut stamper = Stamper::new(quantum);
    let mut pending: HashMap<u32, Pending> = HashMap::default();
    // Stack definitions go into the chunk of the next event's thread.
    let mut stacks: Vec<Item> = Vec::new();
    let mut items = tf.items()?;
    for item in &mut items {
        match item {
            Item::Stack { .. } => {
                if lean.as_ref().is_none_or(|l| l.keeps(&item)) {
                    stacks.push(item)
                }
            }
            Item::Event(mut ev) => {
                if let Some(l) = &mut lean {
                    l.rewrite(&mut ev);
                }
                ev.tsc = stamper.stamp(&ev);
                stats.events += ev.kind.func().is_some() as u64;
                let tid = ev.tid;
                let p = pending.entry(tid).or_default();
                for s in stacks.drain(..) {
                    if let Item::Stack { pcs, .. } = &s {
                        p.row_bytes += 8 + 5 * pcs.len();
                    }
                    p.items.push(s);
                }
                p.items.push(Item::Event(ev));
                p.events += 1;
                p.row_bytes += 12;
                pending_total += 1;
                if p.events >= CHUNK_EVENTS || p.row_bytes >= CHUNK_ROW_BYTES {
                    pending_total -= p.events;
                    w.chunk(tid, p)?;
                } else if pending_total >= PENDING_EVENTS {
                    // Many busy threads: write the largest pending chunk early.
                    let (&t, p) = pending.iter_mut().max_by_key(|(_, p)| p.events).expect("one is pending");
                    pending_total -= p.events;
                    w.chunk(t, p)?;
                }
            }
        }
    }
    stats.warnings.extend(items.warnings().iter().cloned());
    let mut tids: Vec<u32> = pending.keys().copied().collect();
    tids.sort_unstable();
    if let (false, Some(&t)) = (stacks.is_empty(), tids.first()) {
        pending.get_mut(&t).expect("listed").items.splice(0..0, stacks.drain(..));
    }
    for t in tids {
        let mut p = pending.remove(&t).expect("listed");
        w.chunk(t, &mut p)?;
    }
    if !stacks.is_empty() {
        // Stacks but no events at all: keep them in a chunk of their own.
        let mut p = Pending { items: std::mem::take(&mut stacks), ..Default::default() };
        w.chunk(0, &mut p)?;
    }
    stats.raised = stamper.raised;

    // Every other record, verbatim and in order, up to any damage.
    let mut reader = source.try_clone().map_err(TraceError::io(src))?;
    let mut off = header_end;
    while let Ok(Some(rec)) = next_record(&source, off, tf.file_len).map_err(TraceError::io(src))? {
        if rec.ty != REC_EVENTS {
            w.written += copy_record(&mut reader, src, &rec, &mut w.out, &tmp_path)?;
        }
        off = rec.end();
    }
    // The damage found here stays visible in the report, as finish_trace's does.
    let q = quantum.to_string();
    let text = kv_text(
        std::iter::once((COMPACT_QUANTUM, q.as_str()))
            .chain(lean.is_some().then_some((COMPACT_LEAN, "1")))
            .chain(extra.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .chain(stats.warnings.iter().map(|m| (FINISH_WARNING, m.as_str()))),
    );
    w.written += write_record(&mut w.out, REC_RUNINFO, 0, &[text.as_bytes()]).map_err(w.io())?;
    let out = w.out.into_inner().map_err(|e| TraceError::Io { path: tmp_path.clone(), source: e.into_error() })?;
    guard.install(out, source.metadata().ok().map(|m| m.permissions()), true, dst)?;
    stats.bytes_after = w.written;
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{EventKind, Func, TraceWriter};
    use crate::testutil::Xorshift;

    fn ev(tid: u32, tsc: u64, cycles: u64, kind: EventKind) -> Event {
        Event { tid, tsc, cycles, stack: 0, flags: 0, kind }
    }
    fn malloc(tid: u32, tsc: u64, ptr: u64) -> Event {
        ev(tid, tsc, 26, EventKind::Alloc { func: Func::Malloc, size: 16, align: 0, ptr, usable: 24 })
    }
    fn free(tid: u32, tsc: u64, ptr: u64) -> Event {
        ev(tid, tsc, 26, EventKind::Free { func: Func::Free, ptr })
    }

    #[test]
    fn stamps_round_down_but_keep_cross_thread_order() {
        let mut s = Stamper::new(1024);
        // Thread 1 allocates, thread 2 frees the block in the same quantum.
        assert_eq!(s.stamp(&malloc(1, 4200, 0xa0)), 4096);
        assert_eq!(s.stamp(&free(2, 4300, 0xa0)), 4097, "after the malloc it frees");
        // Unrelated events of either thread stay rounded down, but a thread
        // never goes back in time.
        assert_eq!(s.stamp(&malloc(1, 4400, 0xb0)), 4096);
        assert_eq!(s.stamp(&malloc(2, 4500, 0xc0)), 4097);
        // Thread 1 gets the address back from thread 2's free.
        assert_eq!(s.stamp(&malloc(1, 4600, 0xa0)), 4098);
        // A new quantum starts clean.
        assert_eq!(s.stamp(&free(2, 9000, 0xa0)), 8192);
        assert_eq!(s.raised, 2);
        // Regions overlap, the program break is one thing.
        let mmap = |tid, tsc, result| {
            ev(tid, tsc, 0, EventKind::Mmap { func: Func::Mmap, hint: 0, len: 4096, prot: 3, flags: 0x22, fd: -1, offset: 0, result })
        };
        assert_eq!(s.stamp(&mmap(1, 20_000, 0x10_000)), 19_456);
        let unmap = ev(2, 20_001, 0, EventKind::Munmap { addr: 0x10_800, len: 100, ret: 0 });
        assert_eq!(s.stamp(&unmap), 19_457);
        assert_eq!(s.stamp(&mmap(1, 20_002, 0x20_000)), 19_456, "no overlap, no order needed");
        assert_eq!(s.stamp(&ev(3, 20_003, 0, EventKind::BrkSeen { brk: 1 })), 19_456);
        assert_eq!(s.stamp(&ev(1, 20_004, 0, EventKind::BrkSeen { brk: 2 })), 19_457);
    }

    #[test]
    fn cycles_are_sorted_within_each_function_only() {
        let mut items: Vec<Item> = [(30, true), (10, false), (20, true), (5, false), (40, true)]
            .iter()
            .enumerate()
            .map(|(i, &(c, is_malloc))| {
                let mut e = if is_malloc { malloc(1, i as u64, 16 + i as u64) } else { free(1, i as u64, 16) };
                e.cycles = c;
                Item::Event(e)
            })
            .collect();
        items.insert(1, Item::Stack { id: 1, pcs: vec![1, 2] });
        sort_cycles_per_function(&mut items);
        let got: Vec<u64> = items
            .iter()
            .filter_map(|i| match i {
                Item::Event(e) => Some(e.cycles),
                _ => None,
            })
            .collect();
        assert_eq!(got, [20, 5, 30, 10, 40]);
    }

    /// `n` random mallocs and frees of three threads passing 200 addresses
    /// around, time advancing by `min_step`..`min_step`+39 ticks per event,
    /// written as the C writer would flush them.
    fn random_handoffs(path: &Path, n: usize, min_step: u64) -> Vec<Event> {
        let mut rnd = Xorshift::new(0x2545_f491_4f6c_dd1d);
        let (mut live, mut dead): (Vec<u64>, Vec<u64>) = (Vec::new(), (1..200).map(|i| i * 64).collect());
        let mut tsc = 1000;
        let mut truth: Vec<Event> = Vec::new();
        for _ in 0..n {
            tsc += min_step + rnd.below(40);
            let tid = 1 + rnd.below(3) as u32;
            let mut e = if (rnd.below(2) == 0 && !dead.is_empty()) || live.is_empty() {
                let p = dead.swap_remove(rnd.below(dead.len() as u64) as usize);
                live.push(p);
                malloc(tid, tsc, p)
            } else {
                let p = live.swap_remove(rnd.below(live.len() as u64) as usize);
                dead.push(p);
                free(tid, tsc, p)
            };
            e.cycles = 26 * (1 + rnd.below(3));
            truth.push(e);
        }
        let mut w = TraceWriter::create(path, [("pid", "1"), ("tsc_hz", "1000000000")]).unwrap();
        for part in truth.chunks(700) {
            for tid in 1..=3 {
                let items: Vec<Item> = part.iter().filter(|e| e.tid == tid).cloned().map(Item::Event).collect();
                w.events_chunk(tid, &items).unwrap();
            }
        }
        w.finish().unwrap();
        truth
    }

    /// The events of a trace in the order the report replays them.
    fn replay(path: &Path) -> Vec<Event> {
        let tf = TraceFile::open(path).unwrap();
        tf.items()
            .unwrap()
            .filter_map(|i| match i {
                Item::Event(e) => Some(e),
                _ => None,
            })
            .collect()
    }

    /// Three threads pass blocks around at random, many events per quantum:
    /// the compact trace replays without a free of a dead block or an
    /// allocation of a live one, every thread's events keep their order and
    /// arguments, and each stamp lies within one quantum below the true time.
    #[test]
    fn a_random_handoff_replays_in_a_valid_order() {
        let dir = tempfile::tempdir().unwrap();
        let (src, dst) = (dir.path().join("t.mtl"), dir.path().join("c.mtl"));
        let truth = random_handoffs(&src, 20_000, 1);
        let st = compact(&TraceFile::open(&src).unwrap(), &dst, 4096, &[]).unwrap();
        assert_eq!(st.events, truth.len() as u64);
        assert_eq!(TraceFile::open(&dst).unwrap().runinfo_get(COMPACT_QUANTUM), Some("4096"));
        let got = replay(&dst);
        assert_eq!(got.len(), truth.len());
        let mut is_live = std::collections::HashSet::new();
        for e in &got {
            match e.kind {
                EventKind::Alloc { ptr, .. } => assert!(is_live.insert(ptr), "{ptr:#x} allocated while live"),
                EventKind::Free { ptr, .. } => assert!(is_live.remove(&ptr), "{ptr:#x} freed while dead"),
                _ => unreachable!(),
            }
        }
        assert!(st.raised > 0);
        for tid in 1..=3 {
            let mine = |v: &[Event]| v.iter().filter(|e| e.tid == tid).cloned().collect::<Vec<_>>();
            let (a, b) = (mine(&truth), mine(&got));
            assert_eq!(a.len(), b.len());
            for (t, c) in a.iter().zip(&b) {
                assert_eq!(t.kind, c.kind);
                assert!(c.tsc <= t.tsc && t.tsc - c.tsc < 4096, "stamp {} for time {}", c.tsc, t.tsc);
            }
            let mut ca: Vec<u64> = a.iter().map(|e| e.cycles).collect();
            let mut cb: Vec<u64> = b.iter().map(|e| e.cycles).collect();
            ca.sort_unstable();
            cb.sort_unstable();
            assert_eq!(ca, cb, "each thread keeps its cycles");
        }
        assert!(compact(&TraceFile::open(&dst).unwrap(), &dir.path().join("d.mtl"), 4096, &[]).is_err(), "compact twice");
        assert!(matches!(compact(&TraceFile::open(&src).unwrap(), &dst, 3, &[]), Err(CompactError::BadQuantum(3))));
    }

    /// Threads' events often share a TSC value (VMs tick in steps): the
    /// report's replay of the exact trace breaks those ties one way, and the
    /// compact trace's replay gives every address the same history.
    #[test]
    fn ties_in_time_replay_each_address_as_the_exact_trace_does() {
        let dir = tempfile::tempdir().unwrap();
        let (src, dst) = (dir.path().join("t.mtl"), dir.path().join("c.mtl"));
        random_handoffs(&src, 20_000, 0);
        compact(&TraceFile::open(&src).unwrap(), &dst, 4096, &[]).unwrap();
        let history = |events: &[Event]| {
            let mut h: std::collections::BTreeMap<u64, Vec<(u32, bool)>> = Default::default();
            for e in events {
                match e.kind {
                    EventKind::Alloc { ptr, .. } => h.entry(ptr).or_default().push((e.tid, true)),
                    EventKind::Free { ptr, .. } => h.entry(ptr).or_default().push((e.tid, false)),
                    _ => unreachable!(),
                }
            }
            h
        };
        let (exact, compacted) = (replay(&src), replay(&dst));
        assert!(exact.windows(2).any(|w| w[0].tsc == w[1].tsc && w[0].tid != w[1].tid), "ties present");
        assert_eq!(history(&exact), history(&compacted));
    }

    /// Runs the exact and the compact trace of `chunks` through the report's
    /// analysis.
    fn both_reports(chunks: &[(u32, Vec<Event>)]) -> (crate::analysis::ProcessReport, crate::analysis::ProcessReport) {
        let dir = tempfile::tempdir().unwrap();
        let (src, dst) = (dir.path().join("t.mtl"), dir.path().join("c.mtl"));
        let mut w = TraceWriter::create(&src, [("pid", "1"), ("tsc_hz", "1000000000"), ("page_size", "4096")]).unwrap();
        for (tid, evs) in chunks {
            let items: Vec<Item> = evs.iter().cloned().map(Item::Event).collect();
            w.events_chunk(*tid, &items).unwrap();
        }
        w.finish().unwrap();
        compact(&TraceFile::open(&src).unwrap(), &dst, 4096, &[]).unwrap();
        let o = crate::analysis::AnalyzeOptions::default();
        let exact = crate::analysis::analyze(&TraceFile::open(&src).unwrap(), &o).unwrap();
        let compacted = crate::analysis::analyze(&TraceFile::open(&dst).unwrap(), &o).unwrap();
        (exact, compacted)
    }

    /// A glibc block that is its own mmap'd chunk.
    fn chunk_block(tid: u32, tsc: u64, ptr: u64, size: u64) -> Event {
        let mut e = ev(tid, tsc, 26, EventKind::Alloc { func: Func::Malloc, size, align: 0, ptr, usable: size });
        e.flags = crate::trace::event::FLAG_CHUNK_MMAPPED;
        e
    }

    /// Thread 2 unmaps a range; thread 1's large malloc then gets part of it
    /// as an mmap'd chunk, in the same quantum.
    #[test]
    fn an_mmapped_chunk_stays_after_the_munmap_that_freed_its_range() {
        let base = 0x7f00_0000_0000u64;
        let (exact, compacted) = both_reports(&[
            (1, vec![chunk_block(1, 1100, base + 16, 0x30000 - 16)]),
            (2, vec![ev(2, 1000, 0, EventKind::Munmap { addr: base, len: 0x40000, ret: 0 })]),
        ]);
        assert_eq!(exact.end.mapped_bytes, 0x30000);
        assert_eq!(exact.end, compacted.end);
    }

    /// Thread 2 frees mmap'd chunk X; thread 1 then gets chunk Y over part of
    /// X's old range, at another address, and frees it later.
    #[test]
    fn an_mmapped_chunk_stays_after_the_free_of_an_overlapping_one() {
        let base = 0x7f00_0000_0000u64;
        let (x, y) = (base + 16, base + 0x10000 + 16);
        let (exact, compacted) = both_reports(&[
            (1, vec![chunk_block(1, 5100, y, 0x30000 - 16), free(1, 20_000, y)]),
            (2, vec![chunk_block(2, 100, x, 0x20000 - 16), free(2, 5000, x)]),
        ]);
        assert_eq!(exact.end.mapped_bytes, 0);
        assert_eq!(exact.end, compacted.end);
        assert_eq!((compacted.unknown_frees, compacted.overlapping_allocs), (0, 0));
    }

    /// Two threads on one TSC value: the later one in the exact replay stays
    /// later, a tick above the shared time.
    #[test]
    fn equal_time_stamps_keep_their_order() {
        let mut s = Stamper::new(1024);
        assert_eq!(s.stamp(&malloc(1, 4096, 0xa0)), 4096);
        assert_eq!(s.stamp(&free(2, 4096, 0xa0)), 4097);
    }
}
