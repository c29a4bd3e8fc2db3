//! The ring: the last DURATION of a raw (version 2) trace's records, fed as
//! the program wrote them, and what a readable trace needs from before that:
//! the header, MAPS, STACK_DEFs (the events of a chunk name stacks defined
//! in any earlier chunk of the process) and the records written at exit.
//!
//! EVENTS chunks are kept zstd-compressed (level 1) and dropped, oldest
//! first, once their last event is older than DURATION before the newest
//! event seen, or when they exceed the byte bound; a dropped chunk's
//! STACK_DEFs are re-encoded into chunks of stack definitions only, kept for
//! good (bounded by the program's distinct stacks). `write_trace` writes the
//! kept records as a raw trace and rewrites it as `mtlab record` does
//! (`trace::finish_trace`: joined, columns, checksums, RUNINFO).

use std::collections::VecDeque;
use std::io::Write;
use std::path::Path;

use crate::trace::decode::row_stack_defs;
use crate::trace::format::*;
use crate::trace::{ChunkEncoder, Header, TraceError};

/// Distinct MAPS texts kept besides the first: a report takes the first
/// whole and the distinct lines of later ones, so the newest few name what
/// the window's stacks ran.
const MAPS_KEPT: usize = 8;
/// Stack definitions re-encoded per kept chunk, at most (bytes of rows).
const STACK_CHUNK_BYTES: usize = 64 << 10;

/// One EVENTS chunk in the ring.
struct Chunk {
    head: [u8; EVENTS_HEADER as usize],
    tid: u32,
    n_events: u32,
    first_tsc: u64,
    last_tsc: u64,
    /// The row bytes, zstd level 1.
    packed: Vec<u8>,
}

/// What the ring holds and has dropped, for the dump's RUNINFO and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingStats {
    /// Bytes held now: compressed chunks, kept stacks, MAPS and the header.
    pub bytes: u64,
    pub chunks: u64,
    pub chunks_dropped: u64,
    pub events_dropped: u64,
    /// Chunks dropped before their time because the byte bound was reached.
    pub dropped_for_room: u64,
    /// Dropped chunks whose STACK_DEFs could not be read (not rows).
    pub unreadable: u64,
}

/// The window a written trace holds, in TSC ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The first event kept (the oldest kept chunk's first event).
    pub start_tsc: u64,
    /// The newest event seen, or the time of the trigger when later.
    pub end_tsc: u64,
    pub events: u64,
}

pub struct Ring {
    keep_ns: u64,
    keep_ticks: u64,
    max_bytes: u64,
    /// The file header (magic, version, text) once it has arrived.
    header: Option<Vec<u8>>,
    tsc_hz: u64,
    /// Bytes pushed that do not yet make a whole record.
    pending: Vec<u8>,
    maps_first: Option<Vec<u8>>,
    maps_recent: VecDeque<Vec<u8>>,
    /// END, STATS, ALLOCSTATS: the newest of each type.
    tail: Vec<(u16, Vec<u8>)>,
    chunks: VecDeque<Chunk>,
    stacks: Vec<ChunkEncoder>,
    /// Chunks of STACK_DEFs only, as the writer wrote them.
    stack_payloads: Vec<Vec<u8>>,
    newest_tsc: u64,
    /// The window's start as `window` last set it; events before it are
    /// left out of the chunks that began earlier.
    cut_tsc: u64,
    /// Events `write_trace` left out of such chunks, last time.
    trimmed: u64,
    /// Bytes of `chunks`, and of `stacks` and `stack_payloads`.
    chunk_bytes: usize,
    stack_bytes: usize,
    stats: RingStats,
    /// Unusable input (a record larger than any writer makes): reading stopped.
    broken: Option<String>,
    comp: zstd::bulk::Compressor<'static>,
}

impl Ring {
    /// A ring keeping `keep_ns` of events and at most `max_bytes` in all.
    /// The TSC rate comes from the trace's header; until then, or when the
    /// header has none, `fallback_tsc_hz`.
    pub fn new(keep_ns: u64, max_bytes: u64, fallback_tsc_hz: u64) -> Ring {
        let mut r = Ring {
            keep_ns,
            keep_ticks: 0,
            max_bytes,
            header: None,
            tsc_hz: fallback_tsc_hz.max(1),
            pending: Vec::new(),
            maps_first: None,
            maps_recent: VecDeque::new(),
            tail: Vec::new(),
            chunks: VecDeque::new(),
            stacks: Vec::new(),
            stack_payloads: Vec::new(),
            newest_tsc: 0,
            cut_tsc: 0,
            trimmed: 0,
            chunk_bytes: 0,
            stack_bytes: 0,
            stats: RingStats::default(),
            broken: None,
            comp: zstd::bulk::Compressor::new(1).expect("zstd level 1"),
        };
        r.keep_ticks = r.ticks(keep_ns);
        r
    }

    fn ticks(&self, ns: u64) -> u64 {
        (ns as u128 * self.tsc_hz as u128 / 1_000_000_000) as u64
    }

    /// The TSC rate in use (ticks per second).
    pub fn tsc_hz(&self) -> u64 {
        self.tsc_hz
    }

    /// The trace's header text, once it has arrived.
    pub fn header(&self) -> Option<Header> {
        let h = self.header.as_ref()?;
        let text = std::str::from_utf8(&h[FILE_HEADER_FIXED as usize..]).ok()?;
        Some(Header::parse(text).0)
    }

    pub fn stats(&self) -> RingStats {
        self.stats
    }

    /// Events before the last window written: dropped from the ring, or
    /// left out of its oldest chunks.
    pub fn events_before_window(&self) -> u64 {
        self.stats.events_dropped + self.trimmed
    }

    /// Why the ring stopped reading, if it did.
    pub fn broken(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    /// Feeds the next bytes of the raw trace, in file order from its start.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.broken.is_some() {
            return;
        }
        self.pending.extend_from_slice(bytes);
        let mut at = 0usize;
        if self.header.is_none() {
            let p = &self.pending;
            if p.len() < FILE_HEADER_FIXED as usize {
                return;
            }
            if p[..8] != TRACE_MAGIC {
                self.broken = Some("the trace does not start with an mtlab header".into());
                return;
            }
            let text_len = u32::from_le_bytes(p[12..16].try_into().unwrap()) as usize;
            let end = FILE_HEADER_FIXED as usize + text_len;
            if p.len() < end {
                return;
            }
            self.header = Some(p[..end].to_vec());
            if let Some(h) = self.header().filter(|h| h.tsc_hz > 0) {
                self.tsc_hz = h.tsc_hz;
                self.keep_ticks = self.ticks(self.keep_ns);
            }
            at = end;
        }
        loop {
            let rest = &self.pending[at..];
            if rest.len() < RECORD_HEADER as usize {
                break;
            }
            let len = u32::from_le_bytes(rest[0..4].try_into().unwrap()) as usize;
            let ty = u16::from_le_bytes(rest[4..6].try_into().unwrap());
            let flags = u16::from_le_bytes(rest[6..8].try_into().unwrap());
            if len > crate::trace::records::MAX_PAYLOAD as usize {
                self.broken = Some(format!("a record of {len} bytes, larger than mtlab ever writes: the rest was not kept"));
                break;
            }
            let end = RECORD_HEADER as usize + len;
            if rest.len() < end {
                break;
            }
            let payload = rest[RECORD_HEADER as usize..end].to_vec();
            at += end;
            self.record(ty, flags, payload);
        }
        self.pending.drain(..at);
        self.evict(self.newest_tsc);
    }

    fn record(&mut self, ty: u16, flags: u16, payload: Vec<u8>) {
        match ty {
            REC_EVENTS if flags & !RECORD_FLAG_SOLO == 0 && payload.len() >= EVENTS_HEADER as usize => self.events(payload),
            REC_MAPS => {
                if self.maps_first.is_none() {
                    self.maps_first = Some(record_bytes(ty, flags, &payload));
                } else {
                    let rec = record_bytes(ty, flags, &payload);
                    self.maps_recent.retain(|m| *m != rec);
                    self.maps_recent.push_back(rec);
                    if self.maps_recent.len() > MAPS_KEPT {
                        self.maps_recent.pop_front();
                    }
                }
            }
            REC_END | REC_STATS | REC_ALLOCSTATS => {
                self.tail.retain(|(t, _)| *t != ty);
                self.tail.push((ty, record_bytes(ty, flags, &payload)));
            }
            // Compressed chunks and unknown types (a range the writer could
            // not fill) are no part of a raw trace worth keeping.
            _ => {}
        }
        self.recount();
    }

    fn events(&mut self, payload: Vec<u8>) {
        let mut head = [0u8; EVENTS_HEADER as usize];
        head.copy_from_slice(&payload[..EVENTS_HEADER as usize]);
        let u32_at = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().unwrap());
        let u64_at = |i: usize| u64::from_le_bytes(head[i..i + 8].try_into().unwrap());
        let (tid, n_events, first_tsc, last_tsc) = (u32_at(0), u32_at(4), u64_at(8), u64_at(16));
        if n_events == 0 {
            // Only STACK_DEFs: kept for good, as written.
            self.stack_bytes += payload.len();
            self.stack_payloads.push(payload);
            return;
        }
        let rows = &payload[EVENTS_HEADER as usize..];
        let packed = self.comp.compress(rows).unwrap_or_else(|_| rows.to_vec());
        self.newest_tsc = self.newest_tsc.max(last_tsc);
        self.chunk_bytes += packed.len() + EVENTS_HEADER as usize;
        self.chunks.push_back(Chunk { head, tid, n_events, first_tsc, last_tsc, packed });
    }

    fn recount(&mut self) {
        let (chunks, stacks) = (self.chunk_bytes, self.stack_bytes);
        let other: usize = self.header.as_ref().map_or(0, Vec::len)
            + self.maps_first.as_ref().map_or(0, Vec::len)
            + self.maps_recent.iter().map(Vec::len).sum::<usize>()
            + self.tail.iter().map(|(_, r)| r.len()).sum::<usize>();
        self.stats.bytes = (chunks + stacks + other + self.pending.len()) as u64;
        self.stats.chunks = self.chunks.len() as u64;
    }

    /// Drops chunks that ended more than the window before `end_tsc`, and
    /// the oldest while the ring is over its byte bound.
    fn evict(&mut self, end_tsc: u64) {
        let cut = end_tsc.saturating_sub(self.keep_ticks);
        self.recount();
        while let Some(c) = self.chunks.front() {
            let old = c.last_tsc < cut;
            let over = self.stats.bytes > self.max_bytes && self.chunks.len() > 1;
            if !old && !over {
                break;
            }
            let c = self.chunks.pop_front().expect("a front chunk");
            self.chunk_bytes -= c.packed.len() + EVENTS_HEADER as usize;
            self.stats.dropped_for_room += (!old) as u64;
            self.stats.chunks_dropped += 1;
            self.stats.events_dropped += c.n_events as u64;
            self.keep_stacks(&c);
            self.recount();
        }
    }

    fn keep_stacks(&mut self, c: &Chunk) {
        let rows = zstd::bulk::decompress(&c.packed, 1 << 24).unwrap_or_else(|_| c.packed.clone());
        let Ok(defs) = row_stack_defs(&rows, c.first_tsc, c.tid) else {
            self.stats.unreadable += 1;
            return;
        };
        for (id, pcs) in defs {
            if self.stacks.last().is_none_or(|s| s.body().len() >= STACK_CHUNK_BYTES) {
                self.stacks.push(ChunkEncoder::new(c.tid));
            }
            let s = self.stacks.last_mut().expect("a stack chunk");
            let before = s.body().len();
            s.stack(id, &pcs);
            self.stack_bytes += s.body().len() - before;
        }
    }

    /// The window a trace written now would hold, when it holds any event;
    /// `write_trace` writes that one.
    pub fn window(&mut self, now_tsc: u64) -> Option<Window> {
        let end = self.newest_tsc.max(now_tsc);
        self.evict(end);
        self.cut_tsc = end.saturating_sub(self.keep_ticks);
        let start = self.chunks.iter().map(|c| c.first_tsc).min()?.max(self.cut_tsc);
        let events = self.chunks.iter().map(|c| c.n_events as u64).sum();
        Some(Window { start_tsc: start, end_tsc: end, events })
    }

    /// A kept chunk's payload: the events before the window's start taken
    /// out of a chunk that began before it (a thread that flushes seldom:
    /// one chunk can span the whole run), its STACK_DEFs kept. Those events
    /// are counted as before the window. Re-encoded as the writer encodes
    /// (calloc as one element of the whole size).
    fn payload_from(&mut self, i: usize, cut: u64) -> Vec<u8> {
        let c = &self.chunks[i];
        let rows = zstd::bulk::decompress(&c.packed, 1 << 24).unwrap_or_else(|_| c.packed.clone());
        if c.first_tsc >= cut {
            return [&c.head[..], &rows].concat();
        }
        let Ok(items) = crate::trace::decode::decode_chunk(crate::trace::decode::RowFields::default(), &rows, c.first_tsc, c.tid) else {
            return [&c.head[..], &rows].concat();
        };
        let mut enc = ChunkEncoder::new(c.tid);
        let mut before = 0u64;
        for it in &items {
            match it {
                crate::trace::Item::Event(e) if e.tsc < cut => before += 1,
                it => enc.item(it),
            }
        }
        self.stats.events_dropped += before;
        enc.payload()
    }

    /// Writes the window `window` set as a trace at `path` (created new:
    /// nothing may be there), then rewrites it as `mtlab record` finishes a
    /// trace, with RUNINFO `runinfo(events before the window)` appended.
    pub fn write_trace(
        &mut self,
        path: &Path,
        runinfo: impl FnOnce(u64) -> Vec<(String, String)>,
    ) -> Result<crate::trace::FinishStats, TraceError> {
        let header = self.header.clone().ok_or_else(|| TraceError::BadHeader {
            path: path.to_path_buf(),
            reason: "the program has not written its trace header yet".into(),
        })?;
        let file = crate::platform::safe_fs::create_new(path, 0o600).map_err(TraceError::io(path))?;
        let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
        let mut written = || -> std::io::Result<()> {
            out.write_all(&header)?;
            for m in self.maps_first.iter().chain(self.maps_recent.iter()) {
                out.write_all(m)?;
            }
            for p in &self.stack_payloads {
                out.write_all(&record_bytes(REC_EVENTS, 0, p))?;
            }
            for s in &self.stacks {
                out.write_all(&record_bytes(REC_EVENTS, 0, &s.payload()))?;
            }
            let (cut, dropped) = (self.cut_tsc, self.stats.events_dropped);
            for i in 0..self.chunks.len() {
                let payload = self.payload_from(i, cut);
                out.write_all(&record_bytes(REC_EVENTS, 0, &payload))?;
            }
            // Counted for this window only: the chunks stay in the ring.
            self.trimmed = self.stats.events_dropped - dropped;
            self.stats.events_dropped = dropped;
            for (_, r) in &self.tail {
                out.write_all(r)?;
            }
            out.flush()
        };
        let written = written();
        drop(out);
        if let Err(e) = written {
            let _ = std::fs::remove_file(path);
            return Err(TraceError::Io { path: path.to_path_buf(), source: e });
        }
        crate::trace::finish_trace(path, &runinfo(self.events_before_window()))
    }
}

/// A whole record: its 8-byte header and payload.
fn record_bytes(ty: u16, flags: u16, payload: &[u8]) -> Vec<u8> {
    let mut r = Vec::with_capacity(RECORD_HEADER as usize + payload.len());
    r.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    r.extend_from_slice(&ty.to_le_bytes());
    r.extend_from_slice(&flags.to_le_bytes());
    r.extend_from_slice(payload);
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Event, EventKind, Func, TraceFile, TraceWriter};
    use crate::testutil::Xorshift;

    const HZ: u64 = 1_000_000_000;

    fn header() -> Vec<u8> {
        let w = TraceWriter::new(Vec::new(), [("pid", "7"), ("tsc_hz", "1000000000"), ("start_tsc", "0"), ("stacks", "fp")]).unwrap();
        w.finish().unwrap()
    }

    fn malloc(tsc: u64, ptr: u64, stack: u32) -> Event {
        Event { tid: 7, tsc, cycles: 10, stack, flags: 0, kind: EventKind::Alloc { func: Func::Malloc, size: 64, align: 0, ptr, usable: 64 } }
    }

    /// One second of a program's run: `n` mallocs of thread 7 in one chunk
    /// at second `s`; stack `s % 4 + 1` is defined in the chunk of its first use.
    fn second(s: u64, n: u64) -> Vec<u8> {
        let mut c = ChunkEncoder::new(7);
        let stack = (s % 4 + 1) as u32;
        if s < 4 {
            c.stack(stack, &[0x1000 + s, 0x2000]);
        }
        // Addresses scattered as a real heap's are: chunks compress little.
        let mut rng = Xorshift::new(s.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        for i in 0..n {
            let x = rng.next_u64();
            c.event(&malloc(s * HZ + i * 1000, (x & 0xffff_fff0) + 0x10_0000, stack));
        }
        let mut w = TraceWriter::new(Vec::new(), std::iter::empty::<(&str, &str)>()).unwrap();
        w.chunk(&c).unwrap();
        // Without the empty header TraceWriter wrote first.
        w.finish().unwrap()[FILE_HEADER_FIXED as usize..].to_vec()
    }

    #[test]
    fn a_long_run_stays_in_bounded_memory_and_keeps_its_stacks() {
        let mut ring = Ring::new(3 * HZ, 64 << 20, HZ);
        ring.push(&header());
        let mut most = 0;
        for s in 0..2000 {
            // Pushed in pieces that split records, as a reader below a watermark may.
            let b = second(s, 200);
            let (x, y) = b.split_at(b.len() / 3);
            ring.push(x);
            ring.push(y);
            most = most.max(ring.stats().bytes);
        }
        let st = ring.stats();
        assert_eq!(st.chunks, 4, "the last 3 s and the one that ends within them: {st:?}");
        assert_eq!(st.chunks_dropped, 1996);
        assert_eq!(st.events_dropped, 1996 * 200);
        assert!(most < 5 * 2048, "ring held {most} bytes at most over 2000 s");
        // The stacks defined in the first seconds survive their chunks.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("w.mtl");
        let w = ring.window(0).unwrap();
        // 3 s before the last event: the last event of second 1996 on.
        assert_eq!((w.start_tsc, w.end_tsc, w.events), (1996 * HZ + 199_000, 1999 * HZ + 199_000, 800));
        ring.write_trace(&p, |before| vec![("before".into(), before.to_string())]).unwrap();
        let t = TraceFile::open(&p).unwrap();
        assert_eq!(t.runinfo_get("before"), Some("399399"));
        let mut items = t.items().unwrap();
        let (mut events, mut undefined) = (0, 0);
        let mut stacks = std::collections::HashSet::new();
        for it in items.by_ref() {
            match it {
                crate::trace::Item::Stack { id, .. } => {
                    stacks.insert(id);
                }
                crate::trace::Item::Event(e) => {
                    events += 1;
                    undefined += !stacks.contains(&e.stack) as u64;
                }
            }
        }
        assert_eq!(events, 601, "the kept chunks' events from the window's start on");
        assert_eq!(stacks.len(), 4);
        assert_eq!(undefined, 0, "every event's stack is defined before it");
        assert!(items.warnings().is_empty(), "{:?}", items.warnings());
    }

    #[test]
    fn the_byte_bound_drops_the_oldest_first() {
        let mut ring = Ring::new(3600 * HZ, 16 << 10, HZ);
        ring.push(&header());
        for s in 0..200 {
            ring.push(&second(s, 500));
            assert!(ring.stats().bytes <= (16 << 10) + (8 << 10), "{:?}", ring.stats());
        }
        let st = ring.stats();
        assert!(st.dropped_for_room > 0 && st.dropped_for_room == st.chunks_dropped, "{st:?}");
        assert!(ring.window(0).unwrap().end_tsc >= 199 * HZ);
    }

    #[test]
    fn nothing_to_write_before_the_header_and_the_first_event() {
        let mut ring = Ring::new(HZ, 1 << 20, HZ);
        assert!(ring.window(0).is_none());
        let dir = tempfile::tempdir().unwrap();
        assert!(ring.write_trace(&dir.path().join("x"), |_| vec![]).is_err());
        ring.push(b"not a trace at all");
        assert!(ring.broken().is_some());
    }
}
