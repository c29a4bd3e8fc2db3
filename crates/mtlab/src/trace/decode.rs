//! Reading trace files: the header, an index of records, and a merged,
//! time-ordered stream of decoded items (docs/trace-format.md).
//!
//! Memory stays bounded: `TraceFile::open` only reads record headers (and the
//! small MAPS / END / RUNINFO payloads); `TraceFile::items` reads a chunk's
//! events when the merge reaches the chunk's `first_tsc` and drops them when
//! the chunk is exhausted.

use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::columns::{Chain, ColumnFields, CHAIN_RECORDS};
use super::error::TraceError;
use super::keys;
use super::event::{Event, EventKind, Func, Item, UNTIMED};
use super::fields::{DecErr, Field, Fields};
use super::format::*;
use super::kv::parse_kv_text;
use super::maps::MapsKept;
use super::records::{
    check_framing, next_record, parse_chunk_header, read_file_header, size_words, stored_limit, text_limit, ChunkInfo, Damage,
    EndRecord, RecHdr, RepeatedChunks, MAX_PAYLOAD,
};
use super::resync::Resync;
use super::varint::{varint, zigzag};

/// The most text the compressed records other than EVENTS of one trace may
/// decompress to, all together. mtlab never compresses them; a crafted trace
/// of small frames that each inflate to their type's limit is stopped here.
const MAX_INFLATED_TEXT: u64 = 64 << 20;

/// Damaged records described one by one in the warnings; the rest are counted.
const MAX_DAMAGE_WARNINGS: u64 = 20;

/// The file header's `key=value` text, parsed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Header {
    pub version: u32,
    pub pid: u32,
    pub ppid: u32,
    pub cmdline: Vec<String>,
    pub exe: String,
    pub start_ns: u64,
    pub start_tsc: u64,
    pub tsc_hz: u64,
    pub page_size: u64,
    pub allocator: String,
    pub allocator_path: String,
    pub stacks: String,
    pub max_depth: u32,
    pub brk_start: u64,
    /// The program break when tracing started (the brk heap's initial end).
    pub brk_init: u64,
    /// Mean sampling interval in bytes (0: a full trace).
    pub sample_interval: u64,
    /// Stack capture: fp, libgcc or libunwind.
    pub unwind: String,
    /// A full trace timed one call in `time_sample` on average (0 or 1:
    /// every call); above 1 an event's cycles field 0 means "not timed".
    pub time_sample: u64,
    pub follow: bool,
    pub mtlab_version: String,
    /// Every pair in file order, values unescaped (including unknown keys).
    pub raw: Vec<(String, String)>,
}

impl Header {
    /// Parses header text; returns the header (with `version` 0) and
    /// warnings about values that are not numbers.
    pub fn parse(text: &str) -> (Header, Vec<String>) {
        let mut h = Header {
            raw: parse_kv_text(text),
            ..Header::default()
        };
        let mut warnings = Vec::new();
        let raw = std::mem::take(&mut h.raw);
        for (k, v) in &raw {
            let mut num = |v: &str| -> u64 {
                match v.trim().parse::<u64>() {
                    Ok(n) => n,
                    Err(_) => {
                        warnings.push(format!("trace header: {k}={v:?} is not a number; using 0"));
                        0
                    }
                }
            };
            match k.as_str() {
                "pid" => h.pid = num(v) as u32,
                "ppid" => h.ppid = num(v) as u32,
                "cmdline" => {
                    h.cmdline = if v.is_empty() {
                        Vec::new()
                    } else {
                        v.split('\u{1f}').map(str::to_string).collect()
                    }
                }
                "exe" => h.exe = v.clone(),
                "start_ns" => h.start_ns = num(v),
                "start_tsc" => h.start_tsc = num(v),
                "tsc_hz" => h.tsc_hz = num(v),
                "page_size" => h.page_size = num(v),
                "allocator" => h.allocator = v.clone(),
                "allocator_path" => h.allocator_path = v.clone(),
                "stacks" => h.stacks = v.clone(),
                "max_depth" => h.max_depth = num(v) as u32,
                "brk_start" => h.brk_start = num(v),
                "brk_init" => h.brk_init = num(v),
                "sample_interval" => h.sample_interval = num(v),
                "unwind" => h.unwind = v.to_string(),
                "time_sample" => h.time_sample = num(v),
                "follow" => h.follow = v.trim() == "1",
                "mtlab_version" => h.mtlab_version = v.clone(),
                _ => {}
            }
        }
        h.raw = raw;
        (h, warnings)
    }

    /// The value of `key` as written (unescaped), if present.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.raw.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// Nanoseconds from the start of tracing to `tsc`, when `tsc_hz` is known.
    pub fn ns_since_start(&self, tsc: u64) -> Option<u64> {
        if self.tsc_hz == 0 {
            return None;
        }
        let d = tsc.saturating_sub(self.start_tsc) as u128;
        Some((d * 1_000_000_000 / self.tsc_hz as u128) as u64)
    }
}

/// Decompresses one zstd frame (or several) into `out`, refusing more than `limit` bytes.
pub(crate) fn zstd_decompress_into(
    dctx: &mut zstd::bulk::Decompressor<'static>,
    src: &[u8],
    out: &mut Vec<u8>,
    limit: u64,
) -> io::Result<()> {
    out.clear();
    match zstd::zstd_safe::get_frame_content_size(src) {
        Ok(Some(n)) if n <= limit && zstd::zstd_safe::find_frame_compressed_size(src).ok() == Some(src.len()) => {
            out.reserve(n as usize);
            let got = dctx.decompress_to_buffer(src, out)?;
            if got as u64 != n {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "zstd frame is shorter than it says",
                ));
            }
            Ok(())
        }
        Ok(Some(n)) if n > limit => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("zstd frame says it holds {n} bytes, more than mtlab ever writes"),
        )),
        _ => {
            // Unknown content size or several frames: stream it.
            let dec = zstd::stream::read::Decoder::new(src)?;
            dec.take(limit + 1).read_to_end(out)?;
            if out.len() as u64 > limit {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "zstd payload is larger than mtlab ever writes",
                ));
            }
            Ok(())
        }
    }
}

thread_local! {
    /// Decompression contexts that finished readers gave back. A context is
    /// over 100 KiB, so a fresh one per trace was mapped and faulted in anew
    /// for every process of a tree (twice: index pass and events).
    static DCTXS: std::cell::RefCell<Vec<zstd::bulk::Decompressor<'static>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A decompression context: one given back earlier on this thread, or a new one.
fn take_dctx() -> io::Result<zstd::bulk::Decompressor<'static>> {
    match DCTXS.with(|p| p.borrow_mut().pop()) {
        Some(d) => Ok(d),
        None => zstd::bulk::Decompressor::new(),
    }
}

/// Keeps `d` for the next reader of this thread (each call starts a new frame,
/// so nothing of the last trace carries over).
fn give_back_dctx(d: Option<zstd::bulk::Decompressor<'static>>) {
    if let Some(d) = d {
        DCTXS.with(|p| {
            let mut p = p.borrow_mut();
            if p.len() < 4 {
                p.push(d);
            }
        });
    }
}

// ---------------------------------------------------------------------------
// The index pass.

/// Why a chunk was skipped when its event bytes fail their checksum (told
/// apart from other read errors by type, for the count of damaged chunks).
#[derive(Debug, thiserror::Error)]
#[error("its event bytes do not match their checksum: damaged")]
struct ChecksumMismatch;

/// A chunk that needs the predictions of its thread's previous chunk
/// (layout 4), which was not read to its end.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct BrokenChain(String);

/// Buffers the index pass reuses from record to record.
#[derive(Default)]
struct Scratch {
    dctx: Option<zstd::bulk::Decompressor<'static>>,
    buf: Vec<u8>,
    plain: Vec<u8>,
    /// MAPS records are checked (they decompress) but not kept.
    skip_maps: bool,
    repeated: RepeatedChunks,
    maps: MapsKept,
    /// Bytes the compressed text records decompressed to so far.
    inflated: u64,
    /// Made on the first damage met.
    resync: Option<Resync>,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        give_back_dctx(self.dctx.take());
    }
}

/// An opened trace: its header and an index of its records.
#[derive(Debug, Clone)]
pub struct TraceFile {
    pub path: PathBuf,
    pub header: Header,
    /// EVENTS records in file order.
    pub chunks: Vec<ChunkInfo>,
    /// The MAPS texts, as many as the mappings need: the first whole, then
    /// the distinct lines of the later ones, each where it last appeared
    /// (see `trace::maps`; `symbolize::parse_all_maps` reads them).
    pub maps: Vec<String>,
    pub end: Option<EndRecord>,
    pub runinfo: Vec<(String, String)>,
    /// The writer's own costs (STATS record): stacks captured, unwind cycles, samples.
    pub stats: Vec<(String, String)>,
    /// The heap manager's own figures read after each `mtlab ctl dump`
    /// (ALLOCSTATS records: tsc=, dump=, allocator_* keys), in file order.
    pub allocator_readings: Vec<Vec<(String, String)>>,
    /// Problems met while indexing (damage, odd header values).
    pub warnings: Vec<String>,
    /// Records found damaged and skipped by the index pass (version 3:
    /// checksums tell damage, and reading resumes at the next intact record).
    pub records_damaged: u64,
    pub file_len: u64,
}

/// The header of the trace at `path` alone, without indexing its records.
pub fn read_header(path: &Path) -> Result<Header, TraceError> {
    let file = File::open(path).map_err(TraceError::io(path))?;
    let file_len = file.metadata().map_err(TraceError::io(path))?.len();
    let (version, text, _) = read_file_header(&file, path, file_len)?;
    let (mut header, _) = Header::parse(&text);
    header.version = version;
    Ok(header)
}

impl TraceFile {
    pub fn open(path: impl AsRef<Path>) -> Result<TraceFile, TraceError> {
        Self::open_with(path.as_ref(), Scratch::default())
    }

    /// `open` without the memory maps (`maps` empty), for a process that
    /// is replayed but not symbolized: the maps text is most of a small
    /// process's metadata, and turning it into strings was ~5 % of the
    /// report of a tree of 600 small processes. A damaged MAPS record is
    /// still found (it must decompress).
    pub fn open_without_maps(path: impl AsRef<Path>) -> Result<TraceFile, TraceError> {
        let mut scratch = Scratch::default();
        scratch.skip_maps = true;
        Self::open_with(path.as_ref(), scratch)
    }

    fn open_with(path: &Path, mut scratch: Scratch) -> Result<TraceFile, TraceError> {
        let file = File::open(path).map_err(TraceError::io(path))?;
        let file_len = file.metadata().map_err(TraceError::io(path))?.len();
        let (version, text, mut off) = read_file_header(&file, path, file_len)?;
        let (mut header, warnings) = Header::parse(&text);
        header.version = version;
        let mut tf = TraceFile {
            path: path.to_path_buf(),
            header,
            chunks: Vec::new(),
            maps: Vec::new(),
            end: None,
            runinfo: Vec::new(),
            stats: Vec::new(),
            allocator_readings: Vec::new(),
            warnings,
            records_damaged: 0,
            file_len,
        };
        // Version 3 files carry checksums: damage is skipped, not the end of reading.
        let checked = version >= FIRST_REWRITTEN_VERSION;
        loop {
            let step = match next_record(&file, off, file_len).map_err(TraceError::io(path))? {
                Ok(Some(rec)) => tf.index_record(&file, &rec, checked, &mut scratch)?.map(|()| rec.end()),
                Ok(None) => break,
                Err(d) => Err(d),
            };
            off = match step {
                Ok(next) => next,
                Err(d) if checked => {
                    // Damage is skipped: reading resumes at the next intact record.
                    let at = d.offset();
                    tf.records_damaged += 1;
                    let next = scratch.resync.get_or_insert_with(Resync::new).next_intact_record(&file, at + 1, file_len);
                    let next = next.map_err(TraceError::io(path))?;
                    if tf.records_damaged <= MAX_DAMAGE_WARNINGS {
                        tf.warnings.push(match next {
                            Some(n) => format!("damaged record at byte {at}: {}; skipped to the next intact record, at byte {n}", d.reason()),
                            None => format!("damaged record at byte {at}: {}; no intact record after it", d.reason()),
                        });
                    }
                    match next {
                        Some(n) => n,
                        None => break,
                    }
                }
                Err(d) => {
                    tf.warnings.push(d.message(tf.chunks.len()));
                    break;
                }
            };
        }
        tf.warnings.extend(scratch.repeated.warning());
        if let Some(passed) = scratch.resync.as_ref().map(|r| r.work.passed_over).filter(|&n| n > 0) {
            tf.warnings.push(format!(
                "the search for intact records after damage passed over {passed} candidates it had no budget left to check: \
                 intact records among them were skipped (the damaged part looks crafted)"
            ));
        }
        if tf.records_damaged > MAX_DAMAGE_WARNINGS {
            tf.warnings.push(format!("{} more damaged records skipped", tf.records_damaged - MAX_DAMAGE_WARNINGS));
        }
        tf.maps = std::mem::take(&mut scratch.maps).into_texts();
        Ok(tf)
    }

    /// Indexes one record: a chunk's header, or the text and counts of the
    /// other records. `Ok(Err(damage))` when the record is damaged.
    fn index_record(&mut self, file: &File, rec: &RecHdr, checked: bool, s: &mut Scratch) -> Result<Result<(), Damage>, TraceError> {
        let path = self.path.clone();
        let io = TraceError::io(&path);
        let bad = |reason: String| Err(Damage::Bad { offset: rec.offset, reason });
        match rec.ty {
            REC_EVENTS => {
                let mut head = [0u8; EVENTS_HEADER as usize];
                let n = (rec.payload_len as usize).min(head.len());
                file.read_exact_at(&mut head[..n], rec.payload_offset()).map_err(io)?;
                let crc = if rec.flags & RECORD_FLAG_CRC != 0 {
                    let mut trailer = [0u8; CHECK_TRAILER as usize];
                    if rec.payload_len as u64 >= (EVENTS_HEADER + CHECK_TRAILER) as u64 {
                        file.read_exact_at(&mut trailer, rec.end() - CHECK_TRAILER as u64).map_err(TraceError::io(&path))?;
                    }
                    match check_framing(rec, &head[..n], &trailer) {
                        Ok(crc) => Some(crc),
                        Err(d) => return Ok(Err(d)),
                    }
                } else if checked {
                    return Ok(bad("EVENTS record without its checksums".into()));
                } else {
                    None
                };
                match parse_chunk_header(rec, &head[..n]) {
                    Ok(info) if s.repeated.is_repeat(&info) => {}
                    Ok(info) => self.chunks.push(ChunkInfo { body_crc: crc, ..info }),
                    Err(d) => return Ok(Err(d)),
                }
            }
            // Only EVENTS carry checksums: a flag for them elsewhere is a
            // damaged type (an EVENTS record read as END would invent counts).
            REC_MAPS | REC_END | REC_RUNINFO | REC_STATS | REC_ALLOCSTATS if checked && rec.flags & !RECORD_FLAG_ZSTD != 0 => {
                return Ok(bad(format!("{} record with flags {:#x} only EVENTS records have", record_name(rec.ty), rec.flags)));
            }
            REC_MAPS | REC_END | REC_RUNINFO | REC_STATS | REC_ALLOCSTATS => {
                let name = record_name(rec.ty);
                let compressed = rec.flags & RECORD_FLAG_ZSTD != 0;
                if rec.payload_len as u64 > stored_limit(rec.ty, compressed) {
                    let limit = size_words(text_limit(rec.ty));
                    return Ok(bad(format!("{name} record of {} bytes: mtlab's writers put at most {limit} in one", rec.payload_len)));
                }
                s.buf.resize(rec.payload_len as usize, 0);
                file.read_exact_at(&mut s.buf, rec.payload_offset()).map_err(io)?;
                let payload: &[u8] = if compressed {
                    let d = match &mut s.dctx {
                        Some(d) => d,
                        None => s.dctx.insert(take_dctx().map_err(TraceError::io(&path))?),
                    };
                    let left = MAX_INFLATED_TEXT.saturating_sub(s.inflated);
                    let limit = text_limit(rec.ty).min(left);
                    if let Err(e) = zstd_decompress_into(d, &s.buf, &mut s.plain, limit) {
                        return Ok(bad(if limit < text_limit(rec.ty) {
                            format!(
                                "compressed {name} record: the trace's compressed text records decompress to more than {} in all, which mtlab never writes",
                                size_words(MAX_INFLATED_TEXT)
                            )
                        } else {
                            format!("{name} record does not decompress to at most {} ({e})", size_words(limit))
                        }));
                    }
                    s.inflated += s.plain.len() as u64;
                    &s.plain
                } else {
                    &s.buf
                };
                match rec.ty {
                    REC_MAPS if s.skip_maps => {}
                    REC_MAPS => s.maps.add(payload),
                    REC_RUNINFO => self.runinfo.extend(parse_kv_text(&String::from_utf8_lossy(payload))),
                    REC_STATS => self.stats.extend(parse_kv_text(&String::from_utf8_lossy(payload))),
                    REC_ALLOCSTATS => self.allocator_readings.push(parse_kv_text(&String::from_utf8_lossy(payload))),
                    _ => match EndRecord::from_bytes(payload) {
                        Some(end) => self.end = Some(end),
                        None => return Ok(bad(format!("END record of {} bytes is shorter than {END_PAYLOAD}", payload.len()))),
                    },
                }
            }
            // A newer writer's record type is skipped; one flagged with
            // checksums is an EVENTS record whose type was damaged.
            _ if rec.flags & RECORD_FLAG_CRC != 0 => {
                return Ok(bad(format!("record of unknown type {} with the checksum flag of EVENTS", rec.ty)))
            }
            _ => {}
        }
        Ok(Ok(()))
    }

    /// Every item of the trace: events in global TSC order (ties in chunk
    /// file order), stack definitions as they are reached.
    pub fn items(&self) -> Result<Items, TraceError> {
        let file = File::open(&self.path).map_err(TraceError::io(&self.path))?;
        Ok(Items::over(self.path.clone(), file, self.chunks.clone(), &self.header))
    }

    /// Looks up a RUNINFO value.
    /// The time quantum of a compact trace (`keys::COMPACT_QUANTUM`), from
    /// RUNINFO or, where that was cut off, from the header; None: exact.
    pub fn compact_quantum(&self) -> Option<&str> {
        self.runinfo_get(keys::COMPACT_QUANTUM)
            .or_else(|| self.header.raw.iter().find(|(k, _)| k == keys::COMPACT_QUANTUM).map(|(_, v)| v.as_str()))
    }

    /// A lean compact trace (`mtlab compact --lean`): its heap addresses
    /// are made up. Read from the header too, as `compact_quantum` is.
    pub fn is_lean(&self) -> bool {
        self.runinfo_get(keys::COMPACT_LEAN)
            .or_else(|| self.header.raw.iter().find(|(k, _)| k == keys::COMPACT_LEAN).map(|(_, v)| v.as_str()))
            == Some("1")
    }

    pub fn runinfo_get(&self, key: &str) -> Option<&str> {
        self.runinfo
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Distinct thread ids that have chunks, in order of first appearance.
    pub fn tids(&self) -> Vec<u32> {
        let mut seen = Vec::new();
        for c in &self.chunks {
            if !seen.contains(&c.tid) {
                seen.push(c.tid);
            }
        }
        seen
    }
}

fn record_name(ty: u16) -> &'static str {
    match ty {
        REC_EVENTS => "EVENTS",
        REC_MAPS => "MAPS",
        REC_END => "END",
        REC_RUNINFO => "RUNINFO",
        REC_STATS => "STATS",
        REC_ALLOCSTATS => "ALLOCSTATS",
        _ => "unknown",
    }
}

// ---------------------------------------------------------------------------
// Event decoding.

#[inline(always)]
fn usable(flags: u8, size: u64, ptr: u64, extra: u64) -> u64 {
    if flags & EVF_FAILED != 0 || ptr == 0 {
        0
    } else {
        size.saturating_add(extra)
    }
}

/// Row bytes, read in order; addresses are deltas to the previous address.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RowFields {
    pos: usize,
    ptr: u64,
}

impl Fields for RowFields {
    #[inline(always)]
    fn kind(&mut self, buf: &[u8]) -> Result<Option<u8>, DecErr> {
        let Some(&b) = buf.get(self.pos) else { return Ok(None) };
        self.pos += 1;
        Ok(Some(b))
    }
    #[inline(always)]
    fn value(&mut self, buf: &[u8], what: Field) -> Result<u64, DecErr> {
        let v = varint(buf, &mut self.pos)?;
        if what.is_address() {
            self.ptr = self.ptr.wrapping_add(zigzag(v) as u64);
            Ok(self.ptr)
        } else {
            Ok(v)
        }
    }
    fn def_room(&self, buf: &[u8]) -> u64 {
        buf.len().saturating_sub(self.pos) as u64
    }
    fn position(&self) -> usize {
        self.pos
    }
}

/// How a chunk's bytes are laid out.
enum Layout {
    Rows(RowFields),
    Columns(Box<ColumnFields>),
}

/// One chunk's decoded-so-far state.
struct ChunkCursor {
    /// Index of the chunk in file order.
    idx: u32,
    offset: u64,
    tid: u32,
    /// The event bytes (after the 24-byte chunk header), decompressed.
    buf: Vec<u8>,
    layout: Layout,
    tsc: u64,
    /// Timing was sampled (`Header::time_sample` > 1): cycles 0 is [`UNTIMED`].
    untimed_zero: bool,
}

enum Step {
    /// An event, written to the `out` the step was given.
    Event,
    Stack(u32, Vec<u64>),
}

impl ChunkCursor {
    /// Decodes the next item; `Ok(None)` at the end of the chunk.
    #[inline(always)]
    fn step(&mut self, out: &mut Event) -> Result<Option<Step>, DecErr> {
        let r = self.step_raw(out);
        if self.untimed_zero && out.cycles == 0 && matches!(r, Ok(Some(Step::Event))) {
            out.cycles = UNTIMED;
        }
        r
    }

    #[inline(always)]
    fn step_raw(&mut self, out: &mut Event) -> Result<Option<Step>, DecErr> {
        match &mut self.layout {
            Layout::Rows(f) => {
                // Work on a copy: an error leaves the cursor at the item's start.
                let mut g = *f;
                let r = step_with(&mut g, &self.buf, &mut self.tsc, self.tid, out);
                if r.is_ok() {
                    *f = g;
                }
                r
            }
            Layout::Columns(f) => step_with(f.as_mut(), &self.buf, &mut self.tsc, self.tid, out),
        }
    }

    fn position(&self) -> usize {
        match &self.layout {
            Layout::Rows(f) => f.position(),
            Layout::Columns(f) => f.position(),
        }
    }
}

/// The STACK_DEFs of one chunk of rows, as (id, pcs): what a flight
/// recorder keeps of a chunk it drops (`flight::Ring`).
pub fn row_stack_defs(rows: &[u8], first_tsc: u64, tid: u32) -> Result<Vec<(u32, Vec<u64>)>, String> {
    let items = decode_chunk(RowFields::default(), rows, first_tsc, tid).map_err(|e| e.to_string())?;
    Ok(items
        .into_iter()
        .filter_map(|i| match i {
            Item::Stack { id, pcs } => Some((id, pcs)),
            Item::Event(_) => None,
        })
        .collect())
}

/// Every item of one chunk's bytes, read through `f`.
pub(crate) fn decode_chunk<F: Fields>(mut f: F, buf: &[u8], first_tsc: u64, tid: u32) -> Result<Vec<Item>, DecErr> {
    decode_chunk_with(&mut f, buf, first_tsc, tid)
}

/// `decode_chunk` through a reader that outlives it (its predictions go on
/// to the thread's next record).
pub(crate) fn decode_chunk_with<F: Fields>(f: &mut F, buf: &[u8], first_tsc: u64, tid: u32) -> Result<Vec<Item>, DecErr> {
    let mut tsc = first_tsc;
    let mut out = Vec::new();
    let mut ev = Event { tid, tsc: 0, cycles: 0, stack: 0, flags: 0, kind: EventKind::Free { func: Func::Free, ptr: 0 } };
    while let Some(step) = step_with(f, buf, &mut tsc, tid, &mut ev)? {
        out.push(match step {
            Step::Event => Item::Event(ev.clone()),
            Step::Stack(id, pcs) => Item::Stack { id, pcs },
        });
    }
    Ok(out)
}

/// Decodes one item from `f`; `tsc` is the thread's time so far.
#[inline(always)]
fn step_with<F: Fields>(
    f: &mut F,
    buf: &[u8],
    tsc: &mut u64,
    tid: u32,
    out: &mut Event,
) -> Result<Option<Step>, DecErr> {
    let Some(b) = f.kind(buf)? else {
        f.check_end()?;
        return Ok(None);
    };
    let kind = b & KIND_MASK;
    let flags = b & EVF_MASK;
    if kind == EV_STACK_DEF {
        let id = f.value(buf, Field::Def)?;
        let id = u32::try_from(id).map_err(|_| DecErr::StackIdTooLarge(id))?;
        let depth = f.value(buf, Field::Def)?;
        if depth > f.def_room(buf) {
            return Err(DecErr::StackTooDeep(depth));
        }
        let mut pcs = Vec::with_capacity(depth as usize);
        let mut pc: u64 = 0;
        for _ in 0..depth {
            pc = pc.wrapping_add(zigzag(f.value(buf, Field::Def)?) as u64);
            pcs.push(pc);
        }
        return Ok(Some(Step::Stack(id, pcs)));
    }
    let ts = f.value(buf, Field::Time)?;
    let cycles = f.value(buf, Field::Cycles)?;
    let stack = f.value(buf, Field::Stack)?;
    let stack = u32::try_from(stack).map_err(|_| DecErr::StackIdTooLarge(stack))?;
    // The field order of each kind is the format's (docs/trace-format.md);
    // `columns::fields` lists the same fields by meaning.
    let ek = match kind {
        EV_MALLOC | EV_VALLOC | EV_PVALLOC => {
            let size = f.value(buf, Field::Size)?;
            let res = f.value(buf, Field::NewPtr)?;
            let extra = f.value(buf, Field::Extra)?;
            let func = match kind {
                EV_MALLOC => Func::Malloc,
                EV_VALLOC => Func::Valloc,
                _ => Func::Pvalloc,
            };
            EventKind::Alloc {
                func,
                size,
                align: 0,
                ptr: res,
                usable: usable(flags, size, res, extra),
            }
        }
        EV_FREE => EventKind::Free { func: Func::Free, ptr: f.value(buf, Field::OldPtr)? },
        EV_NEW => {
            let form = f.value(buf, Field::Misc)?;
            let align = f.value(buf, Field::Misc)?;
            let size = f.value(buf, Field::Size)?;
            let res = f.value(buf, Field::NewPtr)?;
            let extra = f.value(buf, Field::Extra)?;
            let func = Func::from_new_form(form).ok_or(DecErr::UnknownKind(kind))?;
            EventKind::Alloc {
                func,
                size,
                align,
                ptr: res,
                usable: usable(flags, size, res, extra),
            }
        }
        EV_DELETE => {
            let form = f.value(buf, Field::Misc)?;
            let ptr = f.value(buf, Field::OldPtr)?;
            let func = Func::from_delete_form(form).ok_or(DecErr::UnknownKind(kind))?;
            EventKind::Free { func, ptr }
        }
        EV_USABLE_SIZE => {
            let ptr = f.value(buf, Field::Addr)?;
            let usable = f.value(buf, Field::Size)?;
            EventKind::UsableSize { ptr, usable }
        }
        EV_CALLOC => {
            let nmemb = f.value(buf, Field::Size)?;
            let sz = f.value(buf, Field::Size)?;
            let size = nmemb.saturating_mul(sz);
            let res = f.value(buf, Field::NewPtr)?;
            let extra = f.value(buf, Field::Extra)?;
            EventKind::Alloc {
                func: Func::Calloc,
                size,
                align: 0,
                ptr: res,
                usable: usable(flags, size, res, extra),
            }
        }
        EV_REALLOC => {
            let old = f.value(buf, Field::OldPtr)?;
            let size = f.value(buf, Field::Size)?;
            let res = f.value(buf, Field::NewPtr)?;
            let extra = f.value(buf, Field::Extra)?;
            EventKind::Realloc {
                func: Func::Realloc,
                old,
                size,
                ptr: res,
                usable: usable(flags, size, res, extra),
            }
        }
        EV_REALLOCARRAY => {
            let old = f.value(buf, Field::OldPtr)?;
            let nmemb = f.value(buf, Field::Size)?;
            let sz = f.value(buf, Field::Size)?;
            let size = nmemb.saturating_mul(sz);
            let res = f.value(buf, Field::NewPtr)?;
            let extra = f.value(buf, Field::Extra)?;
            EventKind::Realloc {
                func: Func::Reallocarray,
                old,
                size,
                ptr: res,
                usable: usable(flags, size, res, extra),
            }
        }
        EV_POSIX_MEMALIGN => {
            let align = f.value(buf, Field::Misc)?;
            let size = f.value(buf, Field::Size)?;
            let res = f.value(buf, Field::NewPtr)?;
            let _ret = f.value(buf, Field::Misc)?;
            let extra = f.value(buf, Field::Extra)?;
            EventKind::Alloc {
                func: Func::PosixMemalign,
                size,
                align,
                ptr: res,
                usable: usable(flags, size, res, extra),
            }
        }
        EV_ALIGNED_ALLOC | EV_MEMALIGN => {
            let align = f.value(buf, Field::Misc)?;
            let size = f.value(buf, Field::Size)?;
            let res = f.value(buf, Field::NewPtr)?;
            let extra = f.value(buf, Field::Extra)?;
            let func = if kind == EV_MEMALIGN {
                Func::Memalign
            } else {
                Func::AlignedAlloc
            };
            EventKind::Alloc {
                func,
                size,
                align,
                ptr: res,
                usable: usable(flags, size, res, extra),
            }
        }
        EV_MMAP | EV_MMAP64 => {
            let hint = f.value(buf, Field::Addr)?;
            let len = f.value(buf, Field::Size)?;
            let prot = f.value(buf, Field::Misc)?;
            let mflags = f.value(buf, Field::Misc)?;
            let fd = zigzag(f.value(buf, Field::Misc)?);
            let offset = f.value(buf, Field::Misc)?;
            let result = f.value(buf, Field::Addr)?;
            let func = if kind == EV_MMAP { Func::Mmap } else { Func::Mmap64 };
            EventKind::Mmap {
                func,
                hint,
                len,
                prot,
                flags: mflags,
                fd,
                offset,
                result,
            }
        }
        EV_MUNMAP => {
            let addr = f.value(buf, Field::Addr)?;
            let len = f.value(buf, Field::Size)?;
            let ret = zigzag(f.value(buf, Field::Misc)?);
            EventKind::Munmap { addr, len, ret }
        }
        EV_MREMAP => {
            let old = f.value(buf, Field::Addr)?;
            let old_len = f.value(buf, Field::Size)?;
            let new_len = f.value(buf, Field::Size)?;
            let mflags = f.value(buf, Field::Misc)?;
            let result = f.value(buf, Field::Addr)?;
            EventKind::Mremap {
                old,
                old_len,
                new_len,
                flags: mflags,
                result,
            }
        }
        EV_BRK => {
            let addr = f.value(buf, Field::Addr)?;
            let ret = zigzag(f.value(buf, Field::Misc)?);
            let brk_after = f.value(buf, Field::Addr)?;
            EventKind::Brk { addr, ret, brk_after }
        }
        EV_SBRK => {
            let increment = zigzag(f.value(buf, Field::Misc)?);
            let result = f.value(buf, Field::Addr)?;
            let brk_after = f.value(buf, Field::Addr)?;
            EventKind::Sbrk {
                increment,
                result,
                brk_after,
            }
        }
        EV_BRK_SEEN => EventKind::BrkSeen { brk: f.value(buf, Field::Addr)? },
        EV_ARENA_HEAP => {
            let base = f.value(buf, Field::Addr)?;
            let size = f.value(buf, Field::Size)?;
            EventKind::ArenaHeap { base, size }
        }
        EV_SAMPLE => {
            let fk = f.value(buf, Field::Misc)?;
            let size = f.value(buf, Field::Size)?;
            let res = f.value(buf, Field::NewPtr)?;
            let interval = f.value(buf, Field::Misc)?;
            let func = Func::from_sample_func(fk).ok_or(DecErr::UnknownKind(kind))?;
            EventKind::Sample { func, size, ptr: res, interval }
        }
        EV_SAMPLE_FREE => EventKind::SampleFree { ptr: f.value(buf, Field::OldPtr)? },
        k => return Err(DecErr::UnknownKind(k)),
    };
    *tsc = tsc.wrapping_add(ts);
    *out = Event {
        tid,
        tsc: *tsc,
        cycles,
        stack,
        flags,
        kind: ek,
    };
    Ok(Some(Step::Event))
}

/// A chunk being merged, with its next event decoded ahead.
struct Active {
    cur: ChunkCursor,
    /// `next` holds the chunk's next event, not yet yielded.
    has_next: bool,
    next: Event,
}

const NO_KEY: (u64, u32) = (u64::MAX, u32::MAX);
const NO_SLOT: u32 = u32::MAX;

/// Heap entry: (tsc, chunk index, slot); `Reverse` makes the max-heap a min-heap.
type HeapKey = std::cmp::Reverse<(u64, u32, u32)>;

/// Iterator over a trace's items; see [`TraceFile::items`].
pub struct Items {
    path: PathBuf,
    file: File,
    chunks: Vec<ChunkInfo>,
    /// Chunk indices by (first_tsc, file order).
    order: Vec<u32>,
    next_pending: usize,
    /// Chunks being merged (the current one and those parked in the heap).
    slots: Vec<Active>,
    free_slots: Vec<u32>,
    /// Parked chunks by the key of their buffered next event.
    heap: BinaryHeap<HeapKey>,
    /// The chunk being drained, or NO_SLOT.
    cur: u32,
    /// Smallest key among the heap, the pending chunks and `limit`.
    bound: (u64, u32),
    /// Only events whose key is below it are yielded (`set_horizon`); never
    /// a chunk's key, so that it is never the heap's top.
    limit: (u64, u32),
    warnings: Vec<String>,
    events: u64,
    /// Chunks whose event bytes do not match their checksum, and their events.
    chunks_damaged: u64,
    events_lost: u64,
    pool: Vec<Vec<u8>>,
    raw: Vec<u8>,
    dctx: Option<zstd::bulk::Decompressor<'static>>,
    /// Timing was sampled: an event's cycles 0 is [`UNTIMED`].
    untimed_zero: bool,
    /// Chunks held in memory rather than in the file ([`NewChunk::memory`]), by index.
    memory: rustc_hash::FxHashMap<u32, Vec<u8>>,
    /// Chunks whose first event bytes were yielded before ([`NewChunk::skip`]), by index.
    skip: rustc_hash::FxHashMap<u32, usize>,
    /// Per chunk: the previous chunk of its thread in the file (NO_SLOT:
    /// none), and whether a later one follows; the last chunk of each thread.
    prev_of_thread: Vec<u32>,
    has_later: Vec<bool>,
    last_of_thread: rustc_hash::FxHashMap<u32, u32>,
    /// Per thread: the predictions its last chunk read ended with, and
    /// that chunk (layout 4: its next record runs on from them).
    chains: rustc_hash::FxHashMap<u32, (u32, Chain)>,
}

/// A chunk added to the items of a trace still being written
/// ([`Items::extend_from`]).
pub struct NewChunk {
    pub info: ChunkInfo,
    /// Its event bytes (rows), when they are not in the file: a copy of a
    /// thread's buffer taken from the process (`record --live`).
    pub memory: Option<Vec<u8>>,
    /// Its first `skip` event bytes were in a chunk added before (a copy of
    /// its buffer): decoded and dropped, items and all.
    pub skip: usize,
}

impl Items {
    /// The items of `chunks` (records of `file`, at `path`): what
    /// `TraceFile::items` gives for a whole trace, for a batch of chunks
    /// of a trace still being written (`record --live`), whose `header`
    /// says how its cycles read (sampled timing: cycles 0 is [`UNTIMED`]).
    pub fn over(path: PathBuf, file: File, chunks: Vec<ChunkInfo>, header: &Header) -> Items {
        let mut items = Items::new(path, file, chunks);
        items.untimed_zero = header.time_sample > 1;
        items
    }

    fn new(path: PathBuf, file: File, chunks: Vec<ChunkInfo>) -> Items {
        let mut order: Vec<u32> = (0..chunks.len() as u32).collect();
        order.sort_by_key(|&i| (chunks[i as usize].first_tsc, i));
        let mut it = Items {
            path,
            file,
            chunks,
            order,
            next_pending: 0,
            slots: Vec::new(),
            free_slots: Vec::new(),
            heap: BinaryHeap::new(),
            cur: NO_SLOT,
            bound: NO_KEY,
            limit: NO_KEY,
            warnings: Vec::new(),
            events: 0,
            chunks_damaged: 0,
            events_lost: 0,
            pool: Vec::new(),
            raw: Vec::new(),
            dctx: None,
            untimed_zero: false,
            memory: Default::default(),
            skip: Default::default(),
            prev_of_thread: Vec::new(),
            has_later: Vec::new(),
            last_of_thread: Default::default(),
            chains: Default::default(),
        };
        it.link_threads(0);
        it.bound = it.compute_bound();
        it
    }

    /// Links chunks `from..` to the previous chunk of their thread.
    fn link_threads(&mut self, from: usize) {
        for i in from..self.chunks.len() {
            let tid = self.chunks[i].tid;
            let prev = self.last_of_thread.insert(tid, i as u32).unwrap_or(NO_SLOT);
            if prev != NO_SLOT {
                self.has_later[prev as usize] = true;
            }
            self.prev_of_thread.push(prev);
            self.has_later.push(false);
        }
    }

    /// Problems met while decoding (each abandons the rest of one chunk).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Events yielded so far.
    pub fn events_decoded(&self) -> u64 {
        self.events
    }

    /// Chunks skipped so far because their events did not match their
    /// checksum, and the events their headers counted.
    pub fn chunks_damaged(&self) -> (u64, u64) {
        (self.chunks_damaged, self.events_lost)
    }

    /// The trace's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    #[inline]
    fn pending_key(&self) -> Option<(u64, u32)> {
        self.order
            .get(self.next_pending)
            .map(|&i| (self.chunks[i as usize].first_tsc, i))
    }

    #[inline]
    fn compute_bound(&self) -> (u64, u32) {
        let h = self.heap.peek().map_or(NO_KEY, |e| (e.0 .0, e.0 .1));
        let p = self.pending_key().unwrap_or(NO_KEY);
        h.min(p).min(self.limit)
    }

    /// More chunks of the trace being written (`record --live`), later in
    /// the file than those before: merged with the ones not yet drained.
    /// Each must start at or after the horizon the items were drained to
    /// (`set_horizon`), or its events come late.
    pub fn extend(&mut self, chunks: Vec<ChunkInfo>) {
        self.extend_from(chunks.into_iter().map(|info| NewChunk { info, memory: None, skip: 0 }).collect());
    }

    /// [`Items::extend`] with chunks held in memory or read in part.
    pub fn extend_from(&mut self, chunks: Vec<NewChunk>) {
        let from = self.chunks.len() as u32;
        for (i, c) in chunks.into_iter().enumerate() {
            let idx = from + i as u32;
            if let Some(bytes) = c.memory {
                self.memory.insert(idx, bytes);
            }
            if c.skip > 0 {
                self.skip.insert(idx, c.skip);
            }
            self.chunks.push(c.info);
        }
        self.link_threads(from as usize);
        let mut order = self.order.split_off(self.next_pending);
        order.extend(from..self.chunks.len() as u32);
        order.sort_by_key(|&i| (self.chunks[i as usize].first_tsc, i));
        self.order = order;
        self.next_pending = 0;
        self.bound = self.compute_bound();
    }

    /// From now on, yields only the events before time stamp `tsc`
    /// (u64::MAX: all): the iterator ends there, and goes on from there
    /// after a later horizon.
    pub fn set_horizon(&mut self, tsc: u64) {
        // Just below (tsc, 0), and equal to no chunk's key: events before tsc.
        self.limit = match tsc {
            u64::MAX => NO_KEY,
            0 => (0, 0),
            t => (t - 1, u32::MAX),
        };
        self.bound = self.compute_bound();
    }

    /// The file offset of the first chunk not read yet (u64::MAX: none):
    /// the file's bytes below it are no longer needed.
    pub fn unread_from(&self) -> u64 {
        self.order[self.next_pending..].iter().map(|&i| self.chunks[i as usize].offset).min().unwrap_or(u64::MAX)
    }

    /// Event bytes of the chunks held in memory, not yet read.
    pub fn memory_bytes(&self) -> usize {
        self.memory.values().map(Vec::len).sum()
    }

    /// `unread_from` over the chunks the decoder will read from the file
    /// (not those held in memory).
    pub fn unread_from_file(&self) -> u64 {
        self.order[self.next_pending..]
            .iter()
            .filter(|i| !self.memory.contains_key(i))
            .map(|&i| self.chunks[i as usize].offset)
            .min()
            .unwrap_or(u64::MAX)
    }

    /// The horizon (`set_horizon`) at which every chunk not read yet that
    /// starts below file offset `offset` would be read: the bytes below
    /// `offset` could then be released. 0: none is waiting.
    pub fn horizon_to_read_below(&self, offset: u64) -> u64 {
        self.order[self.next_pending..]
            .iter()
            .map(|&i| &self.chunks[i as usize])
            .filter(|c| c.offset < offset)
            .map(|c| c.first_tsc.saturating_add(1))
            .max()
            .unwrap_or(0)
    }

    /// The current chunk has been read to its end: its predictions are kept
    /// for its thread's next chunk — unless that one must start a chain of
    /// its own (this one ends its chain: up to 6 MiB a thread were held for
    /// nothing) — then its slot freed.
    fn end_cur(&mut self) {
        let a = &mut self.slots[self.cur as usize].cur;
        if self.has_later[a.idx as usize] {
            if let Layout::Columns(f) = std::mem::replace(&mut a.layout, Layout::Rows(RowFields::default())) {
                if let Some(chain) = f.into_chain().filter(|c| c.pos() + 1 < CHAIN_RECORDS) {
                    self.chains.insert(a.tid, (a.idx, chain));
                }
            }
        }
        self.release_cur();
    }

    /// Frees the current chunk's slot, keeping its buffer for reuse.
    fn release_cur(&mut self) {
        let slot = self.cur;
        self.cur = NO_SLOT;
        let buf = std::mem::take(&mut self.slots[slot as usize].cur.buf);
        if self.pool.len() < 8 {
            self.pool.push(buf);
        }
        self.free_slots.push(slot);
    }

    /// Reads (and decompresses) chunk `idx` into a free slot.
    fn load(&mut self, idx: u32) -> Option<u32> {
        let c = self.chunks[idx as usize];
        let (start, len) = c.event_bytes();
        let mut buf = self.pool.pop().unwrap_or_default();
        let in_memory = self.memory.remove(&idx);
        // The predictions of the thread's previous chunk, when that chunk was
        // read to its end (layout 4); let go here whatever this chunk is.
        let prev = self.chains.remove(&c.tid).filter(|(i, _)| *i == self.prev_of_thread[idx as usize]).map(|(_, ch)| ch);
        let res: io::Result<Layout> = (|| {
            if let Some(bytes) = in_memory {
                buf = bytes;
                return Ok(Layout::Rows(RowFields::default()));
            }
            if let Some(want) = c.body_crc {
                self.raw.resize(len, 0);
                self.file.read_exact_at(&mut self.raw, start)?;
                if crc32fast::hash(&self.raw) != want {
                    return Err(io::Error::new(io::ErrorKind::InvalidData, ChecksumMismatch));
                }
                if !c.compressed {
                    buf.clear();
                    buf.extend_from_slice(&self.raw);
                    return Ok(Layout::Rows(RowFields::default()));
                }
            }
            if c.compressed {
                if c.body_crc.is_none() {
                    self.raw.resize(len, 0);
                    self.file.read_exact_at(&mut self.raw, start)?;
                }
                let d = match &mut self.dctx {
                    Some(d) => d,
                    None => self.dctx.insert(take_dctx()?),
                };
                zstd_decompress_into(d, &self.raw, &mut buf, MAX_PAYLOAD as u64)?;
                if c.columns {
                    let mut f = ColumnFields::new(&buf)
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
                    f.resume(prev).map_err(|why| io::Error::new(io::ErrorKind::InvalidData, BrokenChain(why)))?;
                    buf.extend_from_slice(&[0; ColumnFields::PADDING]);
                    return Ok(Layout::Columns(Box::new(f)));
                }
            } else {
                buf.resize(len, 0);
                self.file.read_exact_at(&mut buf, start)?;
            }
            Ok(Layout::Rows(RowFields::default()))
        })();
        let layout = match res {
            Ok(l) => l,
            Err(e) => {
                // A chunk whose predictions came from one that could not be
                // read is lost with it: counted as damaged too.
                if e.get_ref().is_some_and(|inner| inner.is::<ChecksumMismatch>() || inner.is::<BrokenChain>()) {
                    self.chunks_damaged += 1;
                    self.events_lost += c.n_events as u64;
                }
                self.warnings.push(format!(
                    "chunk at byte {} (thread {}): cannot read its events ({e}); skipped",
                    c.offset, c.tid
                ));
                if self.pool.len() < 8 {
                    self.pool.push(buf);
                }
                return None;
            }
        };
        let mut active = Active {
            cur: ChunkCursor {
                idx,
                offset: c.offset,
                tid: c.tid,
                buf,
                layout,
                tsc: c.first_tsc,
                untimed_zero: self.untimed_zero,
            },
            has_next: false,
            next: Event {
                tid: c.tid,
                tsc: 0,
                cycles: 0,
                stack: 0,
                flags: 0,
                kind: EventKind::Free { func: Func::Free, ptr: 0 },
            },
        };
        if let Some(skip) = self.skip.remove(&idx) {
            // Yielded before from a copy of the buffer: decoded, not yielded.
            while active.cur.position() < skip {
                match active.cur.step(&mut active.next) {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(e) => {
                        self.warnings.push(format!("chunk at byte {} (thread {}): {e} in the part copied before; skipped", c.offset, c.tid));
                        if self.pool.len() < 8 {
                            self.pool.push(active.cur.buf);
                        }
                        return None;
                    }
                }
            }
        }
        Some(match self.free_slots.pop() {
            Some(s) => {
                self.slots[s as usize] = active;
                s
            }
            None => {
                self.slots.push(active);
                (self.slots.len() - 1) as u32
            }
        })
    }

    #[cold]
    fn chunk_error(&mut self, e: DecErr) {
        let a = &self.slots[self.cur as usize].cur;
        self.warnings.push(format!(
            "chunk at byte {} (thread {}): {e} at event byte {}; the rest of the chunk is skipped",
            a.offset, a.tid, a.position()
        ));
        self.release_cur();
    }

    /// The current chunk's next event has `key`, which is not below the
    /// bound: park it and pick the chunk that holds the bound.
    #[inline]
    fn yield_cur(&mut self, key: (u64, u32)) {
        let from_heap = self.bound != self.limit && self.heap.peek().is_some_and(|e| (e.0 .0, e.0 .1) == self.bound);
        if from_heap {
            // Swap with the heap's top: one sift instead of a push and a pop.
            let mut top = self.heap.peek_mut().unwrap();
            let next = top.0 .2;
            *top = std::cmp::Reverse((key.0, key.1, self.cur));
            drop(top);
            self.cur = next;
            self.bound = self.compute_bound();
        } else {
            self.heap.push(std::cmp::Reverse((key.0, key.1, self.cur)));
            self.cur = NO_SLOT;
        }
    }

    /// Picks the next chunk to drain. Returns false when everything is done.
    fn switch(&mut self) -> bool {
        loop {
            let h = self.heap.peek().map(|e| (e.0 .0, e.0 .1));
            let p = self.pending_key();
            if h.unwrap_or(NO_KEY).min(p.unwrap_or(NO_KEY)) >= self.limit {
                return false;
            }
            let take_heap = match (h, p) {
                (None, None) => return false,
                (Some(h), Some(p)) => h < p,
                (Some(_), None) => true,
                (None, Some(_)) => false,
            };
            if take_heap {
                self.cur = self.heap.pop().unwrap().0 .2;
            } else {
                let idx = self.order[self.next_pending];
                self.next_pending += 1;
                match self.load(idx) {
                    Some(slot) => self.cur = slot,
                    None => continue,
                }
            }
            self.bound = self.compute_bound();
            return true;
        }
    }
}

impl Drop for Items {
    fn drop(&mut self) {
        give_back_dctx(self.dctx.take());
    }
}

/// What one turn with the current chunk gave (`Items::turn`).
enum Turn {
    /// Its next event, in `slots[cur].next`, comes first: lend it.
    Event,
    Stack(u32, Vec<u64>),
    /// Nothing to lend yet: the chunk ended, failed or yielded to another.
    Again,
}

/// An item borrowed from the decoder ([`Items::next_ref`]).
pub enum ItemRef<'a> {
    Stack { id: u32, pcs: Vec<u64> },
    Event(&'a Event),
}

impl Items {
    /// The next item, its event lent rather than copied out: the report's
    /// pass reads an event where it was decoded. Copying it into an `Item`
    /// read back, in 16-byte moves, the fields just stored one by one, and
    /// that copy was a fifth of the decoder's time.
    #[inline(always)]
    pub fn next_ref(&mut self) -> Option<ItemRef<'_>> {
        // The common case — the current chunk's next event comes first — is
        // inlined into the caller's loop (a call per event was 1 % of a
        // report's instructions); the rest (the end of a chunk, another
        // thread's turn) is the loop below.
        if self.cur != NO_SLOT {
            let cur = self.cur as usize;
            match self.turn(cur) {
                Turn::Event => return Some(ItemRef::Event(&self.slots[cur].next)),
                Turn::Stack(id, pcs) => return Some(ItemRef::Stack { id, pcs }),
                Turn::Again => {}
            }
        }
        self.next_ref_rest()
    }

    /// One step of the current chunk (`cur`, the slot of `self.cur`).
    #[inline(always)]
    fn turn(&mut self, cur: usize) -> Turn {
        let a = &mut self.slots[cur];
        let stepped = if a.has_next {
            a.has_next = false;
            Ok(Some(Step::Event))
        } else {
            a.cur.step(&mut a.next)
        };
        match stepped {
            Ok(Some(Step::Event)) => {
                let key = (a.next.tsc, a.cur.idx);
                if key < self.bound {
                    self.events += 1;
                    return Turn::Event;
                }
                a.has_next = true;
                self.yield_cur(key);
                Turn::Again
            }
            Ok(Some(Step::Stack(id, pcs))) => Turn::Stack(id, pcs),
            Ok(None) => {
                self.end_cur();
                Turn::Again
            }
            Err(e) => {
                self.chunk_error(e);
                Turn::Again
            }
        }
    }

    #[inline(never)]
    fn next_ref_rest(&mut self) -> Option<ItemRef<'_>> {
        loop {
            if self.cur != NO_SLOT {
                let cur = self.cur as usize;
                match self.turn(cur) {
                    Turn::Event => return Some(ItemRef::Event(&self.slots[cur].next)),
                    Turn::Stack(id, pcs) => return Some(ItemRef::Stack { id, pcs }),
                    Turn::Again => continue,
                }
            }
            if !self.switch() {
                return None;
            }
        }
    }
}

impl Iterator for Items {
    type Item = Item;

    #[inline(always)]
    fn next(&mut self) -> Option<Item> {
        self.next_ref().map(|r| match r {
            ItemRef::Stack { id, pcs } => Item::Stack { id, pcs },
            ItemRef::Event(e) => Item::Event(e.clone()),
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn header_text() {
        let (h, w) = Header::parse(
            "pid=12\nppid=1\ncmdline=./a\u{1f}x y\u{1f}\\n\\\\z\nexe=/bin/a\ntsc_hz=3000000000\nfollow=1\n\
             stacks=fp\nmax_depth=64\nweird=\\q\nstart_tsc=abc\n",
        );
        assert_eq!(h.pid, 12);
        assert_eq!(h.ppid, 1);
        assert_eq!(h.cmdline, vec!["./a".to_string(), "x y".into(), "\n\\z".into()]);
        assert_eq!(h.exe, "/bin/a");
        assert_eq!(h.tsc_hz, 3_000_000_000);
        assert!(h.follow);
        assert_eq!(h.stacks, "fp");
        assert_eq!(h.max_depth, 64);
        assert_eq!(h.get("weird"), Some("\\q"));
        assert_eq!(h.start_tsc, 0);
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(h.allocator, "");
        assert_eq!(h.ns_since_start(3_000_000_000), Some(1_000_000_000));
    }

    // ---- round trips through the Rust writer -------------------------------

    use crate::trace::encode::{ChunkEncoder, TraceWriter};
    use crate::trace::finish::finish_trace;
    use crate::trace::event::{FLAG_CHUNK_MMAPPED, FLAG_FAILED, FLAG_IN_ALLOCATOR};

    fn header_pairs() -> Vec<(String, String)> {
        [
            ("pid", "4242"),
            ("ppid", "1"),
            ("cmdline", "./prog\u{1f}--x\u{1f}a\nb\\c"),
            ("exe", "/usr/bin/prog"),
            ("start_ns", "1700000000000000000"),
            ("start_tsc", "1000"),
            ("tsc_hz", "2000000000"),
            ("page_size", "4096"),
            ("allocator", "glibc"),
            ("allocator_path", "/lib/x86_64-linux-gnu/libc.so.6"),
            ("stacks", "fp"),
            ("max_depth", "128"),
            ("brk_start", "93824992235520"),
            ("follow", "1"),
            ("mtlab_version", "0.1.0"),
            ("future_key", "kept"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    fn ev(tid: u32, tsc: u64, flags: u8, kind: EventKind) -> Item {
        Item::Event(Event {
            tid,
            tsc,
            cycles: tsc % 1000 + 7,
            stack: (tsc % 5) as u32,
            flags,
            kind,
        })
    }

    fn alloc(func: Func, size: u64, align: u64, ptr: u64, usable: u64) -> EventKind {
        EventKind::Alloc {
            func,
            size,
            align,
            ptr,
            usable,
        }
    }

    /// One event of every kind and flag combination, with awkward values.
    pub(crate) fn every_kind(tid: u32, t0: u64) -> Vec<Item> {
        let big = u64::MAX - 4095;
        let kinds = vec![
            alloc(Func::Malloc, 24, 0, 0x5555_5555_9000, 40),
            alloc(Func::Malloc, 1 << 40, 0, 0, 0),
            EventKind::Free { func: Func::Free, ptr: 0x5555_5555_9000 },
            EventKind::Free { func: Func::Free, ptr: 0 },
            alloc(Func::New, 24, 0, 0x5555_5555_a000, 40),
            alloc(Func::NewArrayAlignedNothrow, 1 << 40, 128, 0, 0),
            alloc(Func::NewAligned, 64, 64, 0x5555_5555_b000, 64),
            EventKind::Free { func: Func::DeleteArraySizedAligned, ptr: 0x5555_5555_b000 },
            EventKind::Free { func: Func::Delete, ptr: 0 },
            EventKind::Free { func: Func::DeleteNothrow, ptr: 0x5555_5555_a000 },
            EventKind::UsableSize { ptr: 0x5555_5555_a000, usable: 40 },
            EventKind::UsableSize { ptr: 1, usable: 0 },
            alloc(Func::Calloc, 800, 0, 0x7fff_f000_0010, 808),
            EventKind::Realloc {
                func: Func::Realloc,
                old: 0x7fff_f000_0010,
                size: 1600,
                ptr: 0x1000,
                usable: 1608,
            },
            EventKind::Realloc {
                func: Func::Reallocarray,
                old: 0x1000,
                size: 3200,
                ptr: big,
                usable: 3208,
            },
            alloc(Func::PosixMemalign, 100, 64, 0x4000_0040, 112),
            alloc(Func::AlignedAlloc, 4096, 4096, 0x4000_1000, 4096),
            alloc(Func::Memalign, 5000, 256, 0x10, 5008),
            alloc(Func::Valloc, 10, 0, 0x7000_0000_1000, 4096),
            alloc(Func::Pvalloc, 10, 0, 0x7000_0000_2000, 4096),
            EventKind::Mmap {
                func: Func::Mmap,
                hint: 0,
                len: 1 << 21,
                prot: 3,
                flags: 0x22,
                fd: -1,
                offset: 0,
                result: 0x7f00_0000_0000,
            },
            EventKind::Mmap {
                func: Func::Mmap64,
                hint: 0x6000_0000_0000,
                len: u64::MAX,
                prot: 1,
                flags: 0x1,
                fd: i64::MAX,
                offset: u64::MAX,
                result: u64::MAX,
            },
            EventKind::Munmap {
                addr: 0x7f00_0000_0000,
                len: 1 << 21,
                ret: 0,
            },
            EventKind::Munmap {
                addr: 1,
                len: 0,
                ret: -1,
            },
            EventKind::Mremap {
                old: 0x7f00_0000_0000,
                old_len: 4096,
                new_len: 1 << 30,
                flags: 1,
                result: 0x10,
            },
            EventKind::Brk {
                addr: 0x5555_5600_0000,
                ret: 0,
                brk_after: 0x5555_5600_0000,
            },
            EventKind::Brk {
                addr: 0,
                ret: i64::MIN,
                brk_after: 0x5555_5600_0000,
            },
            EventKind::Sbrk {
                increment: -135168,
                result: 0x5555_5600_0000,
                brk_after: 0x5555_55fd_f000,
            },
            EventKind::Sbrk {
                increment: i64::MAX,
                result: u64::MAX,
                brk_after: 0,
            },
            EventKind::BrkSeen { brk: 0x5555_5700_0000 },
            EventKind::ArenaHeap {
                base: 0x7ff0_0000_0000,
                size: 64 << 20,
            },
            EventKind::Sample { func: Func::Calloc, size: 4096, ptr: 0x7ff0_0000_1000, interval: 512 << 10 },
            EventKind::Sample { func: Func::NewArrayAligned, size: 4096, ptr: 0x7ff0_0000_2000, interval: 512 << 10 },
            EventKind::SampleFree { ptr: 0x7ff0_0000_1000 },
        ];
        let mut out = vec![Item::Stack {
            id: tid * 100 + 1,
            pcs: vec![0x40_1000, 0x40_0f00, u64::MAX, 0, 0x7fff_ffff_ffff],
        }];
        let mut t = t0;
        for (i, k) in kinds.into_iter().enumerate() {
            for f in 0..8u8 {
                let flags = f << 5;
                let mut k = k.clone();
                // The decoder reports usable 0 for failed calls and NULL results.
                if let EventKind::Alloc { ptr, usable, .. } | EventKind::Realloc { ptr, usable, .. } = &mut k {
                    if flags & FLAG_FAILED != 0 || *ptr == 0 {
                        *usable = 0;
                    }
                }
                out.push(ev(tid, t, flags, k));
                t += (i as u64 * 37 + f as u64) % 50; // includes equal timestamps
            }
        }
        out.push(Item::Stack {
            id: tid * 100 + 2,
            pcs: vec![],
        });
        // A huge jump in time.
        out.push(ev(
            tid,
            t + (1u64 << 62),
            FLAG_IN_ALLOCATOR,
            EventKind::Free { func: Func::Free, ptr: 0x42 },
        ));
        out
    }

    fn events_of(items: &[Item]) -> Vec<Event> {
        items
            .iter()
            .filter_map(|i| match i {
                Item::Event(e) => Some(e.clone()),
                _ => None,
            })
            .collect()
    }

    fn mallocs(tid: u32, t0: u64, n: u64, base: u64) -> Vec<Item> {
        (0..n).map(|i| ev(tid, t0 + i * 26, 0, alloc(Func::Malloc, 32, 0, base + i * 48, 40))).collect()
    }

    fn events_in(path: &std::path::Path) -> (Vec<Event>, Vec<String>) {
        let tf = TraceFile::open(path).unwrap();
        let mut items = tf.items().unwrap();
        let evs = events_of(&(&mut items).collect::<Vec<_>>());
        (evs, items.warnings().to_vec())
    }

    #[test]
    fn finishing_in_steps_writes_the_same_file() {
        finish_in_steps(false);
    }

    #[test]
    fn finishing_in_steps_releasing_the_raw_blocks_writes_the_same_file() {
        // As `mtlab record` does: the raw records taken are punched out of
        // the file as it goes; the rewrite is the same, and the raw file's
        // blocks are gone but for the header's and the untaken tail's.
        finish_in_steps(true);
    }

    /// `mtlab record` on a disk the program fills: the rewrite while it
    /// ran punched raw records out, the program's writer took the blocks
    /// freed, and the disk is full when the rest is finished. Nothing is
    /// lost: the output waits in memory for the room the last punches make,
    /// and the file is the one finishing in one go writes.
    #[test]
    fn finishing_releasing_on_a_disk_the_program_filled_loses_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let one = dir.path().join("one.mtl");
        let mut w = TraceWriter::create(&one, header_pairs()).unwrap();
        for k in 0..36u64 {
            w.events_chunk(1 + (k % 3) as u32, &mallocs(1 + (k % 3) as u32, 1000 + k * 100_000, 2000, k << 20)).unwrap();
        }
        w.finish().unwrap();
        let len = std::fs::metadata(&one).unwrap().len();
        assert!(len > 300 << 10 && len < 1 << 20, "{len}: more than the output, less than one release step");
        let disk = dir.path().join("disk");
        std::fs::create_dir(&disk).unwrap();
        let size = format!("size={}k", len / 1024 + 64);
        let mounted = std::process::Command::new("mount").args(["-t", "tmpfs", "-o", &size, "tmpfs"]).arg(&disk).status();
        if !mounted.is_ok_and(|s| s.success()) {
            say!("skipped: mounting a small tmpfs needs root");
            return;
        }
        struct Unmount<'a>(&'a std::path::Path);
        impl Drop for Unmount<'_> {
            fn drop(&mut self) {
                let _ = std::process::Command::new("umount").arg(self.0).status();
            }
        }
        let _unmount = Unmount(&disk);
        let fill = |name: &str| {
            use std::io::Write;
            let mut f = std::fs::File::create(disk.join(name)).unwrap();
            while f.write_all(&[0u8; 4096]).is_ok() {}
        };
        let steps = disk.join("steps.mtl");
        std::fs::copy(&one, &steps).unwrap();
        let info = vec![("wall_ns".to_string(), "5".to_string())];
        finish_trace(&one, &info).unwrap();
        let header_len = read_file_header(&std::fs::File::open(&steps).unwrap(), &steps, len).unwrap().2;
        let mut f = crate::trace::Finisher::start(&steps, header_len).unwrap();
        f.one_worker();
        f.releasing().unwrap();
        fill("before");
        f.advance(len / 3).unwrap();
        assert!(f.released() > 0);
        fill("after"); // the program's writer takes what the punches freed
        f.finish(&info).expect("finished on a full disk");
        let (a, b) = (std::fs::read(&one).unwrap(), std::fs::read(&steps).unwrap());
        let cut = |v: &[u8]| {
            let at = v.windows(8).rposition(|w| w == b"wall_ns=").unwrap() - RECORD_HEADER as usize;
            v[..at].to_vec()
        };
        assert!(cut(&a) == cut(&b), "the rewrites differ before RUNINFO");
    }

    /// Each thread's predictions run on across the Finisher's steps (a
    /// record written while the program runs and the thread's next one,
    /// written in a later step), and what each step has written is a
    /// readable trace: every record there, none broken for want of its
    /// chain's earlier records.
    #[test]
    fn chains_run_on_across_the_finishers_steps_and_each_step_leaves_a_readable_trace() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.mtl");
        let mut w = TraceWriter::create(&path, header_pairs()).unwrap();
        for k in 0..24u64 {
            for tid in 1..=2u32 {
                let t0 = 1000 + k * 100_000 + tid as u64 * 40_000;
                w.events_chunk(tid, &mallocs(tid, t0, 500, (k << 20) + ((tid as u64) << 40))).unwrap();
            }
            // A record that is not EVENTS: the batch so far is written.
            w.maps("00400000-00401000 r-xp 00000000 08:01 1 /usr/bin/prog\n").unwrap();
        }
        w.finish().unwrap();
        let len = std::fs::metadata(&path).unwrap().len();
        let header_len = read_file_header(&File::open(&path).unwrap(), &path, len).unwrap().2;
        let whole = dir.path().join("whole.mtl");
        std::fs::copy(&path, &whole).unwrap();
        finish_trace(&whole, &[]).unwrap();
        let (want, _) = events_in(&whole);

        let mut f = crate::trace::Finisher::start(&path, header_len).unwrap();
        f.one_worker();
        let prefix = dir.path().join("prefix.mtl");
        let (mut chained, mut seen) = (0, 0);
        for step in 1..=6 {
            f.advance(header_len + (len - header_len) * step / 6).unwrap();
            let bytes = f.output_so_far();
            std::fs::write(&prefix, &bytes).unwrap();
            let (got, warnings) = events_in(&prefix);
            assert!(warnings.is_empty(), "step {step}: {warnings:?}");
            for tid in 1..=2u32 {
                let mine = |v: &[Event]| v.iter().filter(|e| e.tid == tid).cloned().collect::<Vec<_>>();
                let (g, a) = (mine(&got), mine(&want));
                assert!(g[..] == a[..g.len()], "step {step}: thread {tid}'s events are the first of the whole trace's");
            }
            assert!(got.len() > seen, "step {step} wrote records: {} events", got.len());
            seen = got.len();
            // The records written in this step whose predictions run on
            // from an earlier record (their place in the chain, after the
            // layout byte, is not 0).
            let (fb, blen) = (File::open(&prefix).unwrap(), bytes.len() as u64);
            let mut off = header_len;
            chained = 0;
            while let Ok(Some(rec)) = next_record(&fb, off, blen).unwrap() {
                if rec.ty == REC_EVENTS && rec.flags & RECORD_FLAG_COLUMNS != 0 {
                    let payload = &bytes[rec.payload_offset() as usize..rec.end() as usize];
                    let body = &payload[EVENTS_HEADER as usize..payload.len() - CHECK_TRAILER as usize];
                    let cols = zstd::bulk::decompress(body, 64 << 20).unwrap();
                    assert_eq!(cols[0], crate::trace::columns::COLUMNS_LAYOUT);
                    let mut at = 1;
                    if crate::trace::varint::varint(&cols, &mut at).unwrap() > 0 {
                        chained += 1;
                    }
                }
                off = rec.end();
            }
        }
        assert_eq!(seen, want.len(), "the last step took every record");
        // 24 batches of one record per thread: all but each thread's first
        // run on from the one before (chains of 32).
        assert_eq!(chained, 2 * 23, "records whose chain ran on across steps");
        f.finish(&[]).unwrap();
        let (got, warnings) = events_in(&path);
        assert!(got == want && warnings.is_empty(), "finished: the events of finishing in one go; {warnings:?}");
    }

    fn allocated(path: &std::path::Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).unwrap().blocks() * 512
    }

    /// A Finisher advanced to many limits (mid-record ones included), as
    /// `mtlab record` does while the program runs, ends with the same
    /// bytes as finishing in one go.
    fn finish_in_steps(release: bool) {
        let dir = tempfile::tempdir().unwrap();
        let one = dir.path().join("one.mtl");
        let mut w = TraceWriter::create(&one, header_pairs()).unwrap();
        for k in 0..12u64 {
            w.events_chunk(1 + (k % 3) as u32, &mallocs(1 + (k % 3) as u32, 1000 + k * 100_000, 2000, k << 20))
                .unwrap();
            if k == 5 {
                w.maps("00400000-00401000 r-xp 00000000 08:01 1 /usr/bin/prog\n").unwrap();
            }
        }
        w.finish().unwrap();
        let steps = dir.path().join("steps.mtl");
        std::fs::copy(&one, &steps).unwrap();
        let len = std::fs::metadata(&steps).unwrap().len();
        let info = vec![("wall_ns".to_string(), "5".to_string())];
        finish_trace(&one, &info).unwrap();

        let header_len = {
            let f = std::fs::File::open(&steps).unwrap();
            read_file_header(&f, &steps, len).unwrap().2
        };
        let mut f = crate::trace::Finisher::start(&steps, header_len).unwrap();
        if release {
            f.one_worker();
            f.releasing().unwrap();
        }
        let before = allocated(&steps);
        let mut limit = header_len;
        while limit < len {
            f.advance(limit).unwrap();
            limit += 7919;
        }
        if release {
            // All taken but the last partial step: every whole block but
            // the header's and the last few released.
            let (left, taken) = (allocated(&steps), f.taken());
            assert!(taken > len / 2, "taken {taken} of {len}");
            assert_eq!(f.released(), taken - header_len);
            // Whole blocks are freed; the ones a punch ended in are zeroed, and freed by the next.
            assert!(left <= before.saturating_sub(f.released()) + 2 * 4096, "{left} bytes still allocated of {before}, {} released", f.released());
        } else {
            assert_eq!(f.released(), 0);
        }
        f.finish(&info).unwrap();
        let (a, b) = (std::fs::read(&one).unwrap(), std::fs::read(&steps).unwrap());
        // Identical up to the RUNINFO record (whose rewritten_while_running
        // figure, and so length, differs).
        let cut = |v: &[u8]| {
            let at = v.windows(8).rposition(|w| w == b"wall_ns=").unwrap() - RECORD_HEADER as usize;
            v[..at].to_vec()
        };
        assert!(cut(&a) == cut(&b), "the rewrites differ before RUNINFO");
        let tail = String::from_utf8_lossy(&b).into_owned();
        let live: u64 = tail[tail.rfind("rewritten_while_running=").unwrap() + 24..].lines().next().unwrap().trim().parse().unwrap();
        assert!(live > len / 2, "rewritten while running: {live} of {len}");
    }

    #[test]
    fn untimed_calls_of_a_sampled_timing_trace_read_as_untimed_before_and_after_finishing() {
        // time_sample=32: cycles 0 on the wire is "not timed". Every third
        // event untimed, the rest timed; an old trace (no key) reads 0 as 0.
        let dir = tempfile::tempdir().unwrap();
        let mut items = mallocs(1, 1000, 300, 0x10_0000);
        for (i, it) in items.iter_mut().enumerate() {
            if let Item::Event(e) = it {
                e.cycles = if i % 3 == 0 { crate::trace::UNTIMED } else { 40 + i as u64 };
            }
        }
        let want: Vec<Event> = events_of(&items);
        for (key, untimed_reads_as) in [(Some("32"), crate::trace::UNTIMED), (Some("1"), 0), (None, 0)] {
            let path = dir.path().join(format!("t{key:?}.mtl"));
            let mut pairs = header_pairs();
            if let Some(k) = key {
                pairs.push(("time_sample".into(), k.into()));
            }
            let mut w = TraceWriter::create(&path, pairs).unwrap();
            w.events_chunk(1, &items).unwrap();
            w.finish().unwrap();
            let expect: Vec<Event> = want
                .iter()
                .map(|e| Event { cycles: if e.cycles == crate::trace::UNTIMED { untimed_reads_as } else { e.cycles }, ..e.clone() })
                .collect();
            assert_eq!(events_in(&path).0, expect, "raw, time_sample {key:?}");
            finish_trace(&path, &[]).unwrap();
            // Under sampled timing, each function's cycles are kept as a
            // distribution (`cycle_groups`); every call's timing is exact.
            let items = |v: Vec<Event>| v.into_iter().map(Item::Event).collect::<Vec<_>>();
            let apart = crate::trace::columns::tests::cycles_apart;
            assert_eq!(apart(&items(events_in(&path).0)), apart(&items(expect)), "columns, time_sample {key:?}");
        }
    }

    /// Thread 1: 40 chunks of 25 mallocs and (from the 13th on) 25 frees of
    /// the blocks its chunk twelve before allocated (so frees name blocks
    /// of earlier records, beyond the recent allocations); thread 2: a short chunk overlapping the start of each of
    /// thread 1's next and ending at its first time stamp, so that no two of
    /// thread 1's chunks are joined (a join would flip that tie).
    fn chained_trace(path: &Path) -> Vec<Event> {
        let mut w = TraceWriter::create(path, header_pairs()).unwrap();
        let mut all = Vec::new();
        let block = |i: u64, j: u64| 0x5555_0000_0000 + (i * 25 + j) * 64;
        for i in 0..40u64 {
            let t = 1000 + i * 10_000;
            let mut a = Vec::new();
            for j in 0..25u64 {
                a.push(ev(1, t + j * 52, 0, alloc(Func::Malloc, 48, 0, block(i, j), 56)));
                if i >= 12 {
                    a.push(ev(1, t + j * 52 + 26, 0, EventKind::Free { func: Func::Free, ptr: block(i - 12, j) }));
                }
            }
            let b = vec![
                ev(2, t + 9_999, 0, alloc(Func::Malloc, 16, 0, 0x7000_0000 + i * 32, 24)),
                ev(2, t + 10_000, 0, EventKind::Free { func: Func::Free, ptr: 0x7000_0000 + i * 32 }),
            ];
            w.events_chunk(1, &a).unwrap();
            w.events_chunk(2, &b).unwrap();
            all.extend(events_of(&a));
            all.extend(events_of(&b));
        }
        w.finish().unwrap();
        all.sort_by_key(|e| e.tsc);
        all
    }

    #[test]
    fn the_predictions_of_a_chains_last_record_are_not_held() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.mtl");
        let want = chained_trace(&path);
        finish_trace(&path, &[]).unwrap();
        let tf = TraceFile::open(&path).unwrap();
        let mut items = tf.items().unwrap();
        let last = crate::trace::columns::CHAIN_RECORDS - 1;
        let (mut events, mut held) = (0, std::collections::BTreeSet::new());
        while let Some(item) = items.next_ref() {
            events += matches!(item, ItemRef::Event(_)) as usize;
            held.extend(items.chains.values().map(|(_, c)| c.pos()));
        }
        assert_eq!(events, want.len());
        assert!(items.warnings().is_empty(), "{:?}", items.warnings());
        // Thread 1's 40 records: every place of the first chain but its last
        // is held for the next record, and the second chain's (to 7).
        assert_eq!(held, (0..last).collect(), "places of the chains held");
        assert!(items.chains.is_empty(), "nothing held after the last record");
    }

    #[test]
    fn a_damaged_record_takes_the_rest_of_its_chain_and_no_more() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.mtl");
        let want = chained_trace(&path);
        finish_trace(&path, &[]).unwrap();
        let (got, warnings) = events_in(&path);
        assert!(got == want, "round trip");
        assert!(warnings.is_empty(), "{warnings:?}");
        // Thread 1's records, each a chunk, in chains of CHAIN_RECORDS.
        let f = File::open(&path).unwrap();
        let len = f.metadata().unwrap().len();
        let mut off = read_file_header(&f, &path, len).unwrap().2;
        let mut ones = Vec::new();
        while let Ok(Some(rec)) = next_record(&f, off, len).unwrap() {
            let mut tid = [0u8; 4];
            if rec.ty == REC_EVENTS {
                f.read_exact_at(&mut tid, rec.payload_offset()).unwrap();
                if u32::from_le_bytes(tid) == 1 {
                    ones.push(rec);
                }
            }
            off = rec.end();
        }
        assert_eq!(ones.len(), 40, "one record per chunk of thread 1");
        let chain = crate::trace::columns::CHAIN_RECORDS as usize;
        // Damage the 6th record's event bytes: it and the records whose
        // predictions run on from it (to the end of its chain) are lost.
        let mut bytes = std::fs::read(&path).unwrap();
        let at = ones[5].payload_offset() as usize + EVENTS_HEADER as usize + 3;
        bytes[at] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        let tf = TraceFile::open(&path).unwrap();
        let mut items = tf.items().unwrap();
        let got = events_of(&(&mut items).collect::<Vec<_>>());
        let lost = chain - 5;
        assert_eq!(items.chunks_damaged().0, lost as u64, "{:?}", items.warnings());
        assert_eq!(items.warnings().len(), lost, "{:?}", items.warnings());
        assert!(items.warnings()[1].contains("could not be read"), "{:?}", items.warnings());
        // Every other event is there, exactly: thread 2's, and thread 1's
        // before the damage and from the next chain on.
        let t_lost = 1000 + 5 * 10_000..1000 + chain as u64 * 10_000;
        let expect: Vec<Event> = want.iter().filter(|e| e.tid == 2 || !t_lost.contains(&e.tsc)).cloned().collect();
        assert_eq!(got.len(), expect.len());
        assert!(got == expect, "the events outside the lost records");
        assert_eq!(items.chunks_damaged().1, (want.len() - expect.len()) as u64);

        // Its framing damaged instead (its length): the index resumes at the
        // next intact record, and the records that ran on from the missing
        // one are skipped as before.
        bytes[at] ^= 0x40;
        bytes[ones[5].offset as usize] ^= 0x01;
        std::fs::write(&path, &bytes).unwrap();
        let tf = TraceFile::open(&path).unwrap();
        assert!(tf.warnings.iter().any(|w| w.contains("damaged")), "{:?}", tf.warnings);
        let mut items = tf.items().unwrap();
        let got = events_of(&(&mut items).collect::<Vec<_>>());
        assert_eq!(items.chunks_damaged().0, lost as u64 - 1, "{:?}", items.warnings());
        assert!(got == expect, "the events outside the lost records, after a resync");
    }

    #[test]
    fn finishing_keeps_damage_inside_its_chunk() {
        // Chunk A of thread 1 ends with an event the decoder refuses (a stack
        // id beyond 32 bits); chunk B of the same thread follows. Joined into
        // one record, A's damage would take B's events with it.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.mtl");
        let mut w = TraceWriter::create(&path, header_pairs()).unwrap();
        let mut a = ChunkEncoder::new(1);
        for it in mallocs(1, 1000, 3000, 0x10_0000) {
            a.item(&it);
        }
        let mut bad = vec![EV_FREE, 0, 0];
        crate::trace::varint::put_varint(&mut bad, 1 << 33);
        crate::trace::varint::put_varint(&mut bad, 0);
        a.raw_bytes(&bad);
        w.chunk(&a).unwrap();
        w.events_chunk(1, &mallocs(1, 1_000_000, 3000, 0x20_0000)).unwrap();
        w.finish().unwrap();
        let (before, warn_before) = events_in(&path);
        assert_eq!(before.len(), 6000);
        assert_eq!(warn_before.len(), 1, "{warn_before:?}");
        finish_trace(&path, &[]).unwrap();
        let (after, warn_after) = events_in(&path);
        assert_eq!(after, before);
        assert_eq!(warn_after.len(), 1, "{warn_after:?}");
    }

    #[test]
    fn finishing_keeps_the_order_of_equal_time_stamps() {
        // Thread 2 frees p at t=600 in a chunk that sits between two chunks of
        // thread 1, the second of which allocates p at t=600 again. The
        // reader orders equal times by record position, so the free comes
        // first; joining thread 1's chunks must not move the malloc ahead.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.mtl");
        let p = 0x7000_0000u64;
        let mut w = TraceWriter::create(&path, header_pairs()).unwrap();
        w.events_chunk(1, &[ev(1, 100, 0, alloc(Func::Malloc, 8, 0, p, 8))]).unwrap();
        w.events_chunk(2, &[ev(2, 600, 0, EventKind::Free { func: Func::Free, ptr: p })]).unwrap();
        let mut a2 = vec![ev(1, 600, 0, alloc(Func::Malloc, 8, 0, p, 8))];
        a2.extend(mallocs(1, 700, 500, 0x8000_0000));
        w.events_chunk(1, &a2).unwrap();
        w.finish().unwrap();
        let (before, _) = events_in(&path);
        finish_trace(&path, &[]).unwrap();
        let (after, _) = events_in(&path);
        assert_eq!(after, before);
        assert_eq!((before[1].tid, before[2].tid), (2, 1), "the free first");
    }

    #[test]
    fn finishing_refuses_what_the_decoder_refuses() {
        // A size varint whose 10th byte overflows 64 bits: the row decoder
        // refuses it, so the column rewrite must not turn it into a number.
        let mut rows = vec![EV_MALLOC, 0, 0, 0];
        rows.extend_from_slice(&[0xff; 9]);
        rows.push(2);
        rows.extend_from_slice(&[0, 0]);
        let r = crate::trace::columns::split(&[crate::trace::columns::RowChunk { first_tsc: 0, rows: &rows }]);
        assert!(r.is_err(), "{r:?}");
        // And a SAMPLE naming no allocation function.
        let mut rows = vec![EV_SAMPLE, 0, 0, 0, 99, 8, 0, 1];
        assert!(crate::trace::columns::split(&[crate::trace::columns::RowChunk { first_tsc: 0, rows: &rows }]).is_err());
        rows[4] = 1; // malloc
        assert!(crate::trace::columns::split(&[crate::trace::columns::RowChunk { first_tsc: 0, rows: &rows }]).is_ok());
    }

    #[test]
    fn roundtrip_every_kind_through_finish() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.mtlab");
        let items_a = every_kind(7, 1_000_000);
        let mut items_b = every_kind(8, 1_000_003);
        // Make chunk B long and repetitive so it compresses.
        let extra: Vec<Item> = (0..2000u64)
            .map(|i| {
                ev(
                    8,
                    (1u64 << 62) + 2_000_000 + i * 10,
                    0,
                    alloc(Func::Malloc, 32, 0, 0x1000 + i * 48, 40),
                )
            })
            .collect();
        items_b.extend(extra);

        let mut w = TraceWriter::create(&path, header_pairs()).unwrap();
        w.maps("00400000-00401000 r-xp 00000000 08:01 1 /usr/bin/prog\n")
            .unwrap();
        w.events_chunk(7, &items_a).unwrap();
        let mut raw = ChunkEncoder::new(9);
        raw.calloc(5, 1, 0, FLAG_FAILED, u64::MAX, 2, 0, 0);
        raw.calloc(6, 1, 0, 0, 3, 5, 0x100, 1);
        raw.reallocarray(7, 1, 0, 0, 0x100, 1 << 33, 1 << 33, 0x200, 9);
        raw.reallocarray(8, 1, 0, FLAG_CHUNK_MMAPPED, 0x200, 4, 8, 0x300, 0);
        w.chunk(&raw).unwrap();
        w.events_chunk(8, &items_b).unwrap();
        w.record(77, 0, b"a record type from the future").unwrap();
        w.maps_compressed("second maps\n").unwrap();
        let end = EndRecord {
            end_tsc: 99,
            end_ns: 98,
            events_written: 97,
            events_dropped: 1,
            chunks_dropped: 2,
            stacks_overflowed: u64::MAX,
        };
        w.end(&end).unwrap();
        w.finish().unwrap();

        let before = std::fs::metadata(&path).unwrap().len();
        let runinfo = vec![
            ("exit_code".to_string(), "0".to_string()),
            ("wall_ns".into(), "12345".into()),
        ];
        let stats = finish_trace(&path, &runinfo).unwrap();
        assert_eq!(stats.bytes_before, before);
        assert_eq!(stats.bytes_after, std::fs::metadata(&path).unwrap().len());
        assert!(stats.chunks_compressed >= 1, "{stats:?}");
        assert!(stats.bytes_after < stats.bytes_before, "{stats:?}");
        assert!(stats.warnings.is_empty(), "{stats:?}");
        // No temp file left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

        let tf = TraceFile::open(&path).unwrap();
        assert!(tf.warnings.is_empty(), "{:?}", tf.warnings);
        let h = &tf.header;
        assert_eq!(h.version, TRACE_VERSION);
        assert_eq!(h.pid, 4242);
        assert_eq!(h.cmdline, vec!["./prog".to_string(), "--x".into(), "a\nb\\c".into()]);
        assert_eq!(h.exe, "/usr/bin/prog");
        assert_eq!(h.start_ns, 1_700_000_000_000_000_000);
        assert_eq!(h.start_tsc, 1000);
        assert_eq!(h.tsc_hz, 2_000_000_000);
        assert_eq!(h.page_size, 4096);
        assert_eq!(h.allocator, "glibc");
        assert_eq!(h.allocator_path, "/lib/x86_64-linux-gnu/libc.so.6");
        assert_eq!(h.stacks, "fp");
        assert_eq!(h.max_depth, 128);
        assert_eq!(h.brk_start, 93824992235520);
        assert!(h.follow);
        assert_eq!(h.mtlab_version, "0.1.0");
        assert_eq!(h.get("future_key"), Some("kept"));
        assert_eq!(tf.maps.len(), 2);
        assert!(tf.maps[0].contains("/usr/bin/prog"));
        assert_eq!(tf.maps[1], "second maps\n");
        assert_eq!(tf.end, Some(end));
        // The run's facts, then what the finish adds: its estimate of the
        // blocks live at once.
        let (hint, given): (Vec<_>, Vec<_>) = tf.runinfo.iter().cloned().partition(|(k, _)| k == keys::LIVE_BLOCKS_HINT);
        assert_eq!(given, runinfo);
        assert_eq!(hint.len(), 1, "{:?}", tf.runinfo);
        assert_eq!(tf.runinfo_get("wall_ns"), Some("12345"));
        assert_eq!(tf.chunks.len(), 3);
        assert!(tf.chunks[0].compressed && tf.chunks[2].compressed);
        assert_eq!(tf.chunks[0].tid, 7);
        assert_eq!(tf.chunks[0].n_events as usize, events_of(&items_a).len());
        assert_eq!(tf.chunks[0].first_tsc, 1_000_000);
        assert_eq!(tf.tids(), vec![7, 9, 8]);

        let mut it = tf.items().unwrap();
        let got: Vec<Item> = it.by_ref().collect();
        assert!(it.warnings().is_empty(), "{:?}", it.warnings());

        // Stacks: all four defined, with their pcs.
        let stacks: Vec<&Item> = got.iter().filter(|i| matches!(i, Item::Stack { .. })).collect();
        assert_eq!(stacks.len(), 4);
        for s in items_a
            .iter()
            .chain(items_b.iter())
            .filter(|i| matches!(i, Item::Stack { .. }))
        {
            assert!(stacks.contains(&s), "missing {s:?}");
        }

        // Events: per thread, exactly what was written; globally, TSC order.
        let got_ev = events_of(&got);
        assert_eq!(it.events_decoded() as usize, got_ev.len());
        let per = |tid: u32| got_ev.iter().filter(|e| e.tid == tid).cloned().collect::<Vec<_>>();
        assert_eq!(per(7), events_of(&items_a));
        assert_eq!(per(8), events_of(&items_b));
        let raw_ev = per(9);
        assert_eq!(raw_ev.len(), 4);
        assert_eq!(raw_ev[0].kind, alloc(Func::Calloc, u64::MAX, 0, 0, 0));
        assert_eq!(raw_ev[1].kind, alloc(Func::Calloc, 15, 0, 0x100, 16));
        assert_eq!(
            raw_ev[2].kind,
            EventKind::Realloc {
                func: Func::Reallocarray,
                old: 0x100,
                size: u64::MAX,
                ptr: 0x200,
                usable: u64::MAX
            }
        );
        assert_eq!(
            raw_ev[3].kind,
            EventKind::Realloc {
                func: Func::Reallocarray,
                old: 0x200,
                size: 32,
                ptr: 0x300,
                usable: 32
            }
        );
        assert_eq!(raw_ev[3].flags, FLAG_CHUNK_MMAPPED);
        assert!(got_ev.windows(2).all(|w| w[0].tsc <= w[1].tsc));
        assert_eq!(got_ev.len(), events_of(&items_a).len() + events_of(&items_b).len() + 4);
    }

    /// A tiny deterministic generator.
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 33
        }
    }

    #[test]
    fn chunks_out_of_order_merge_by_tsc() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.mtlab");
        let mk = |tid: u32, ts: &[u64]| -> Vec<Item> {
            ts.iter()
                .map(|&t| {
                    ev(
                        tid,
                        t,
                        0,
                        EventKind::Free {
                            func: Func::Free,
                            ptr: (tid as u64) << 32 | t,
                        },
                    )
                })
                .collect()
        };
        let mut w = TraceWriter::create(&path, header_pairs()).unwrap();
        // Thread 1 flushes its chunks before thread 2 flushes its earlier ones.
        w.events_chunk(1, &mk(1, &[10, 20, 30])).unwrap(); // chunk 0
        w.events_chunk(1, &mk(1, &[40, 50, 50])).unwrap(); // chunk 1
        let mut b = mk(2, &[5, 20, 25]);
        b.insert(
            1,
            Item::Stack {
                id: 3,
                pcs: vec![1, 2, 3],
            },
        );
        w.events_chunk(2, &b).unwrap(); // chunk 2
        w.events_chunk(2, &mk(2, &[26, 40, 60])).unwrap(); // chunk 3
        w.events_chunk(3, &mk(3, &[])).unwrap(); // empty chunk
        w.finish().unwrap();

        let tf = TraceFile::open(&path).unwrap();
        let got: Vec<(u32, u64)> = tf
            .items()
            .unwrap()
            .filter_map(|i| match i {
                Item::Event(e) => Some((e.tid, e.tsc)),
                _ => None,
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (2, 5),
                (1, 10),
                (1, 20), // tie at 20: chunk 0 comes before chunk 2
                (2, 20),
                (2, 25),
                (2, 26),
                (1, 30),
                (1, 40), // tie at 40: chunk 1 before chunk 3
                (2, 40),
                (1, 50),
                (1, 50),
                (2, 60),
            ]
        );
    }

    #[test]
    fn random_merge_matches_sort() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.mtlab");
        let mut rng = Lcg(42);
        let mut w = TraceWriter::create(&path, header_pairs()).unwrap();
        let mut clocks = [0u64; 6];
        let mut pending: Vec<Vec<Item>> = vec![Vec::new(); 6];
        let mut expected: Vec<(u64, usize, u32, u64)> = Vec::new(); // (tsc, chunk idx, tid, ptr)
        let mut chunk_idx = 0usize;
        for step in 0..20_000u64 {
            let t = (rng.next() % 6) as usize;
            clocks[t] += rng.next() % 20;
            pending[t].push(ev(t as u32, clocks[t], 0, EventKind::Free { func: Func::Free, ptr: step }));
            if rng.next().is_multiple_of(50) {
                for i in &pending[t] {
                    if let Item::Event(e) = i {
                        expected.push((e.tsc, chunk_idx, t as u32, step));
                    }
                }
                w.events_chunk(t as u32, &pending[t]).unwrap();
                chunk_idx += 1;
                pending[t].clear();
            }
        }
        w.finish().unwrap();
        expected.sort_by_key(|e| (e.0, e.1));
        let tf = TraceFile::open(&path).unwrap();
        let got: Vec<(u64, u32)> = tf
            .items()
            .unwrap()
            .filter_map(|i| match i {
                Item::Event(e) => Some((e.tsc, e.tid)),
                _ => None,
            })
            .collect();
        let want: Vec<(u64, u32)> = expected.iter().map(|e| (e.0, e.2)).collect();
        assert_eq!(got.len(), want.len());
        assert_eq!(got, want);
    }

    fn write_three_chunks(path: &Path) -> Vec<u64> {
        let mut w = TraceWriter::create(path, header_pairs()).unwrap();
        let mut offsets = Vec::new();
        for c in 0..3u64 {
            offsets.push(w.bytes_written());
            let items: Vec<Item> = (0..100u64)
                .map(|i| ev(1, c * 1000 + i, 0, alloc(Func::Malloc, i, 0, 0x1000 + i * 16, i + 8)))
                .collect();
            w.events_chunk(1, &items).unwrap();
        }
        offsets.push(w.bytes_written());
        w.finish().unwrap();
        offsets
    }

    /// A version 3 trace (damage is skipped) of the records `write` adds, then an END.
    fn checked_trace(dir: &Path, write: impl FnOnce(&mut TraceWriter<std::io::BufWriter<File>>)) -> PathBuf {
        let path = dir.join("t.mtl");
        let out = std::io::BufWriter::new(File::create(&path).unwrap());
        let mut w = TraceWriter::with_version(out, TRACE_VERSION, header_pairs()).unwrap();
        write(&mut w);
        w.end(&EndRecord::default()).unwrap();
        w.finish().unwrap();
        path
    }

    const PROG_MAPS: &str = "00400000-00401000 r-xp 00000000 08:01 1 /usr/bin/prog\n";

    #[test]
    fn maps_records_bigger_than_the_writer_makes_are_refused() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        // 2 MiB of text, over the writer's 1 MiB buffer: a frame that says
        // its size, a stream that does not, and the text as it is.
        let big = PROG_MAPS.repeat((2 << 20) / PROG_MAPS.len() + 1);
        let path = checked_trace(dir.path(), |w| {
            w.maps(PROG_MAPS).unwrap();
            w.record(REC_MAPS, RECORD_FLAG_ZSTD, &zstd::bulk::compress(big.as_bytes(), 3).unwrap()).unwrap();
            let mut stream = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
            stream.write_all(big.as_bytes()).unwrap();
            w.record(REC_MAPS, RECORD_FLAG_ZSTD, &stream.finish().unwrap()).unwrap();
            w.maps(&big).unwrap();
        });
        let tf = TraceFile::open(&path).unwrap();
        assert_eq!(tf.records_damaged, 3, "{:?}", tf.warnings);
        assert!(tf.warnings[0].contains("MAPS record does not decompress to at most 1 MiB"), "{:?}", tf.warnings);
        assert!(tf.warnings[1].contains("MAPS record does not decompress to at most 1 MiB"), "{:?}", tf.warnings);
        assert!(tf.warnings[2].contains("MAPS record of 2097") && tf.warnings[2].contains("at most 1 MiB"), "{:?}", tf.warnings);
        assert_eq!(tf.maps, vec![PROG_MAPS.to_string()]);
        assert_eq!(tf.end, Some(EndRecord::default()), "the records after are read");
    }

    #[test]
    fn a_frame_that_claims_too_much_is_refused_before_any_allocation() {
        // A zstd frame header alone claiming 512 MiB: magic, single segment
        // with an 8-byte content size, then an empty last raw block.
        let mut frame = vec![0x28, 0xb5, 0x2f, 0xfd, 0xe0];
        frame.extend((512u64 << 20).to_le_bytes());
        frame.extend([1, 0, 0]);
        let mut d = zstd::bulk::Decompressor::new().unwrap();
        let mut out = Vec::new();
        let e = zstd_decompress_into(&mut d, &frame, &mut out, text_limit(REC_MAPS)).unwrap_err();
        assert!(e.to_string().contains("536870912 bytes"), "{e}");
        assert_eq!(out.capacity(), 0);
    }

    #[test]
    fn compressed_text_records_inflate_to_a_bounded_total() {
        let dir = tempfile::tempdir().unwrap();
        let text = PROG_MAPS.repeat((1 << 20) / PROG_MAPS.len());
        let frame = zstd::bulk::compress(text.as_bytes(), 3).unwrap();
        let n = (MAX_INFLATED_TEXT / text.len() as u64) as usize + 3;
        let path = checked_trace(dir.path(), |w| {
            for _ in 0..n {
                w.record(REC_MAPS, RECORD_FLAG_ZSTD, &frame).unwrap();
            }
        });
        let tf = TraceFile::open(&path).unwrap();
        assert_eq!(tf.records_damaged, 3, "{:?}", tf.warnings);
        assert!(tf.warnings[0].contains("decompress to more than 64 MiB in all"), "{:?}", tf.warnings);
        assert_eq!(tf.maps, vec![text], "identical snapshots are kept once");
    }

    #[test]
    fn identical_maps_records_are_kept_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = checked_trace(dir.path(), |w| {
            for _ in 0..3000 {
                w.maps(PROG_MAPS).unwrap();
            }
        });
        let tf = TraceFile::open(&path).unwrap();
        assert!(tf.warnings.is_empty(), "{:?}", tf.warnings);
        assert_eq!(tf.maps, vec![PROG_MAPS.to_string()]);
    }

    #[test]
    fn many_damaged_records_make_a_few_warnings() {
        let dir = tempfile::tempdir().unwrap();
        let path = checked_trace(dir.path(), |w| {
            for _ in 0..60 {
                w.record(REC_END, 0, b"short").unwrap();
            }
        });
        let tf = TraceFile::open(&path).unwrap();
        assert_eq!(tf.records_damaged, 60);
        assert_eq!(tf.warnings.len(), MAX_DAMAGE_WARNINGS as usize + 1, "{:?}", tf.warnings);
        assert!(tf.warnings.last().unwrap().contains("40 more damaged records skipped"), "{:?}", tf.warnings);
    }

    #[test]
    fn truncated_file_reads_up_to_the_damage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cut.mtlab");
        let offs = write_three_chunks(&path);
        let cut = offs[2] + 30;
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(cut).unwrap();
        drop(f);

        let tf = TraceFile::open(&path).unwrap();
        assert_eq!(tf.chunks.len(), 2);
        assert_eq!(tf.warnings.len(), 1, "{:?}", tf.warnings);
        let w = &tf.warnings[0];
        assert!(w.contains(&format!("trace truncated at byte {}", offs[2])), "{w}");
        assert!(w.contains(&format!("file is {cut} bytes")), "{w}");
        assert!(w.contains("using the 2 chunks before it"), "{w}");
        let n = tf.items().unwrap().filter(|i| matches!(i, Item::Event(_))).count();
        assert_eq!(n, 200);

        // A cut inside a record header.
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(offs[1] + 3).unwrap();
        drop(f);
        let tf = TraceFile::open(&path).unwrap();
        assert_eq!(tf.chunks.len(), 1);
        assert!(
            tf.warnings[0].contains(&format!("at byte {}", offs[1])),
            "{:?}",
            tf.warnings
        );

        // finish_trace keeps the good part and appends RUNINFO.
        let stats = finish_trace(&path, &[("signal".into(), "9".into())]).unwrap();
        assert_eq!(stats.warnings.len(), 1);
        assert_eq!(stats.chunks_compressed, 1);
        let tf = TraceFile::open(&path).unwrap();
        assert!(tf.warnings.is_empty(), "{:?}", tf.warnings);
        assert_eq!(tf.chunks.len(), 1);
        assert_eq!(tf.runinfo_get("signal"), Some("9"));
        // The damage finish_trace cut off is kept for the report to show.
        let kept = tf.runinfo_get("finish_warning").unwrap_or_default();
        assert!(kept.contains(&format!("at byte {}", offs[1])), "{kept}");
        assert_eq!(tf.items().unwrap().count(), 100);
    }

    /// A chunk the writer wrote twice (a flush stopped after its write by a
    /// handler that exited) is read once, and said; so is it when finished.
    #[test]
    fn a_repeated_chunk_is_read_once_and_said() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("twice.mtlab");
        let mut w = TraceWriter::create(&path, header_pairs()).unwrap();
        let chunk = |c: u64| -> Vec<Item> {
            (0..100u64).map(|i| ev(1, c * 1000 + i + 1, 0, alloc(Func::Malloc, 64, 0, 0x1000 + (c * 100 + i) * 64, 8))).collect()
        };
        for c in [0, 1, 1, 2] {
            w.events_chunk(1, &chunk(c)).unwrap();
        }
        // Another thread's chunk with the same time stamps is no repeat.
        w.events_chunk(2, &chunk(1)).unwrap();
        w.finish().unwrap();
        let tf = TraceFile::open(&path).unwrap();
        assert_eq!(tf.chunks.len(), 4);
        assert_eq!(tf.warnings.len(), 1, "{:?}", tf.warnings);
        assert!(tf.warnings[0].starts_with("1 chunk of events appeared twice"), "{:?}", tf.warnings);
        assert_eq!(tf.items().unwrap().filter(|i| matches!(i, Item::Event(_))).count(), 400);

        let stats = finish_trace(&path, &[]).unwrap();
        assert_eq!(stats.warnings.len(), 1, "{:?}", stats.warnings);
        let tf = TraceFile::open(&path).unwrap();
        assert!(tf.warnings.is_empty(), "{:?}", tf.warnings);
        assert_eq!(tf.items().unwrap().filter(|i| matches!(i, Item::Event(_))).count(), 400);
        assert!(tf.runinfo_get("finish_warning").unwrap_or_default().contains("appeared twice"));
    }

    #[test]
    fn inconsistent_chunk_header_stops_the_index() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.mtlab");
        let offs = write_three_chunks(&path);
        // Make chunk 1's first_tsc larger than its last_tsc.
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&u64::MAX.to_le_bytes(), offs[1] + 8 + 8).unwrap();
        drop(f);
        let tf = TraceFile::open(&path).unwrap();
        assert_eq!(tf.chunks.len(), 1);
        assert!(
            tf.warnings[0].contains(&format!("trace damaged at byte {}", offs[1])),
            "{:?}",
            tf.warnings
        );
        assert!(
            tf.warnings[0].contains("using the 1 chunk before it"),
            "{:?}",
            tf.warnings
        );
    }

    #[test]
    fn garbage_is_not_a_trace() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g");
        std::fs::write(&path, b"#!/bin/sh\necho this is not a trace at all\n").unwrap();
        let e = TraceFile::open(&path).unwrap_err();
        assert!(matches!(e, TraceError::NotATrace { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(
            msg.contains("not an mtlab trace") && msg.contains("mtlab record"),
            "{msg}"
        );
        std::fs::write(&path, b"MTLAB").unwrap();
        assert!(matches!(TraceFile::open(&path), Err(TraceError::NotATrace { .. })));
        std::fs::write(&path, b"").unwrap();
        assert!(matches!(TraceFile::open(&path), Err(TraceError::NotATrace { .. })));
        assert!(matches!(finish_trace(&path, &[]), Err(TraceError::NotATrace { .. })));
        let e = TraceFile::open(dir.path().join("missing")).unwrap_err();
        assert!(matches!(e, TraceError::Io { .. }), "{e:?}");
    }

    #[test]
    fn newer_version_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v99");
        let f = std::fs::File::create(&path).unwrap();
        let mut w = TraceWriter::with_version(f, 99, [("pid", "1")]).unwrap();
        w.events_chunk(1, &[]).unwrap();
        w.finish().unwrap();
        let e = TraceFile::open(&path).unwrap_err();
        match &e {
            TraceError::NewerVersion { found, supported, .. } => {
                assert_eq!((*found, *supported), (99, TRACE_VERSION));
            }
            other => panic!("{other:?}"),
        }
        let msg = e.to_string();
        assert!(
            msg.contains("newer mtlab (format v99)") && msg.contains(&format!("up to v{TRACE_VERSION}")) && msg.contains("upgrade"),
            "{msg}"
        );
    }

    #[test]
    fn bad_header_text_length() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h");
        let mut b = TRACE_MAGIC.to_vec();
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&1000u32.to_le_bytes());
        b.extend_from_slice(b"pid=1\n");
        std::fs::write(&path, b).unwrap();
        assert!(matches!(TraceFile::open(&path), Err(TraceError::BadHeader { .. })));
    }

    #[test]
    fn unknown_kind_abandons_only_that_chunk() {
        for compress in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("k.mtlab");
            let mut w = TraceWriter::create(&path, header_pairs()).unwrap();
            let off_bad = w.bytes_written();
            let mut c = ChunkEncoder::new(5);
            c.item(&ev(5, 10, 0, alloc(Func::Malloc, 8, 0, 0x100, 8)));
            c.item(&ev(5, 12, 0, EventKind::Free { func: Func::Free, ptr: 0x100 }));
            c.raw_bytes(&[0x1f, 0, 0, 0]);
            c.item(&ev(5, 14, 0, EventKind::Free { func: Func::Free, ptr: 0x200 }));
            w.chunk(&c).unwrap();
            let other: Vec<Item> = (0..5u64)
                .map(|i| ev(6, 11 + i, 0, EventKind::Free { func: Func::Free, ptr: i }))
                .collect();
            w.events_chunk(6, &other).unwrap();
            let mut t = ChunkEncoder::new(7);
            t.item(&ev(7, 100, 0, EventKind::Free { func: Func::Free, ptr: 1 }));
            t.raw_bytes(&[EV_MALLOC, 0x80]); // runs out of bytes
            w.chunk(&t).unwrap();
            w.finish().unwrap();
            if compress {
                finish_trace(&path, &[]).unwrap();
            }

            let tf = TraceFile::open(&path).unwrap();
            assert!(tf.warnings.is_empty());
            let mut it = tf.items().unwrap();
            let got: Vec<(u32, u64)> = it
                .by_ref()
                .filter_map(|i| match i {
                    Item::Event(e) => Some((e.tid, e.tsc)),
                    _ => None,
                })
                .collect();
            assert_eq!(
                got,
                vec![(5, 10), (6, 11), (5, 12), (6, 12), (6, 13), (6, 14), (6, 15), (7, 100)]
            );
            assert_eq!(it.warnings().len(), 2, "{:?}", it.warnings());
            let w0 = &it.warnings()[0];
            assert!(w0.contains(&format!("chunk at byte {off_bad}")), "{w0}");
            assert!(w0.contains("thread 5") && w0.contains("unknown event kind 31"), "{w0}");
            assert!(it.warnings()[1].contains("thread 7"), "{:?}", it.warnings());
            assert_eq!(it.events_decoded(), 8);
        }
    }

    /// Decode speed on small events (malloc/free pairs), with the threads'
    /// chunks overlapping in time (a heap switch at nearly every event) and
    /// one after the other (the drain fast path). Run with
    /// `cargo test --release -p mtlab --lib decode_speed -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn decode_speed() {
        for overlapping in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("speed.mtlab");
            let threads = 4u32;
            let per_chunk = 8192u64;
            let chunks_per_thread = 600u64;
            let mut w = TraceWriter::create(&path, header_pairs()).unwrap();
            let mut n = 0u64;
            for c in 0..chunks_per_thread {
                for t in 0..threads {
                    let mut enc = ChunkEncoder::new(t + 1);
                    let base = if overlapping {
                        c * per_chunk * 10 + t as u64 * 3
                    } else {
                        (c * threads as u64 + t as u64) * per_chunk * 10
                    };
                    for i in 0..per_chunk {
                        let tsc = base + i * 10;
                        let p = 0x5555_0000_0000 + ((i * 7919) % 4096) * 64;
                        let e = if i % 2 == 0 {
                            ev(t + 1, tsc, 0, alloc(Func::Malloc, 16 + (i % 48), 0, p, 24 + (i % 48)))
                        } else {
                            ev(t + 1, tsc, 0, EventKind::Free { func: Func::Free, ptr: p })
                        };
                        enc.item(&e);
                        n += 1;
                    }
                    w.chunk(&enc).unwrap();
                }
            }
            w.finish().unwrap();
            for compressed in [false, true] {
                if compressed {
                    let s = finish_trace(&path, &[]).unwrap();
                    say!("finish_trace: {} -> {} bytes", s.bytes_before, s.bytes_after);
                }
                let tf = TraceFile::open(&path).unwrap();
                let t0 = std::time::Instant::now();
                let mut it = tf.items().unwrap();
                let mut sum = 0u64;
                for item in it.by_ref() {
                    if let Item::Event(e) = item {
                        sum = sum.wrapping_add(e.tsc);
                    }
                }
                let dt = t0.elapsed().as_secs_f64();
                assert_eq!(it.events_decoded(), n);
                say!(
                    "overlapping={overlapping} compressed={compressed}: {n} events in {dt:.3}s = {:.1} M events/s \
                     (checksum {sum})",
                    n as f64 / dt / 1e6
                );
            }
        }
    }
}
