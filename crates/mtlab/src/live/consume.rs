//! The consumer: reads the raw trace's complete records as the program
//! writes them, feeds each batch of chunks to one analysis pass, hands the
//! bytes it read to the sink, and then releases them (punches them out of
//! the file), so the raw file's blocks on disk stay what the analysis has
//! not reached yet.
//!
//! The horizon (`progress.rs`) waits for every thread's events. A thread
//! that has gone quiet with events in its buffer is copied from the
//! process instead (`bufcopy.rs`), and its own chunk of that buffer, when
//! it comes, is read without the bytes the copy gave. Where no copy can be
//! taken (the process's memory cannot be read, a thread stuck inside an
//! append), the raw bytes waiting for the horizon are held to at most
//! `HOLD_BYTES`: past that the horizon moves on without the thread, whose
//! events are then analysed late (`late_events`, `late_bytes`). A thread
//! that waits for a CPU or inside its own write (`thread_goes_on`) is
//! neither copied nor passed: it writes its events itself.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::bufcopy::{self, BufferCopy};
use super::progress::{self, Progress};
use super::spool::{Spool, FILL_EVERY};
use crate::analysis::finish::{self, Decoded};
use crate::analysis::pass::{feed, Pass};
use crate::analysis::{AnalyzeOptions, ProcessReport};
use crate::profile::sampled::SampledPass;
use crate::symbolize::{parse_all_maps, CodeRanges};
use crate::trace::format::*;
use crate::platform::process::thread_goes_on;
use crate::platform::shared_page::SharedPage;
use crate::trace::records::{next_record, parse_chunk_header, read_file_header, ChunkInfo, RepeatedChunks};
use crate::trace::{EndRecord, Header, Items, MapsKept, NewChunk, TraceError, TraceFile};

/// Raw chunk bytes held in memory waiting for the replay (`read_records`):
/// with the spool's as much again, the recorder's memory for a backlog the
/// analysis has not reached; a longer backlog waits on disk.
const MEMORY_CHUNKS: usize = 32 << 20;
/// Raw bytes the horizon may hold on disk before it moves on without a
/// thread whose buffer could not be copied.
pub const HOLD_BYTES: u64 = 4 << 20;
/// How long a thread's oldest buffered event holds the horizon before its
/// buffer is copied: a thread that is making calls fills and writes its
/// buffer itself.
const QUIET_MS: u64 = 100;

/// One look at the writer's progress (`Consumer::advance`).
pub struct Look<'a> {
    pub progress: &'a Progress,
    pub page: &'a SharedPage,
    /// The time stamp counter at the look, and how long before it an event
    /// must be stamped to be analysed (ticks).
    pub now: u64,
    pub settle: u64,
}

/// The latest copy taken of a thread's buffer.
#[derive(Debug, Clone, Copy)]
struct Copied {
    first_tsc: u64,
    len: usize,
    crc: u32,
}

/// What one `read_records` read: where it started, the chunks to merge,
/// and their time span (first and last time stamp).
struct ReadBatch {
    start: u64,
    chunks: Vec<NewChunk>,
    span: (u64, u64),
}

/// Where each byte range the consumer read goes before it is released: the
/// flight recorder's ring (`record --keep-last`) plugs in here. `first_tsc`
/// and `last_tsc` are the time span of the range's events (0, 0: no events).
pub trait RawSink: Send {
    fn consumed(&mut self, bytes: &[u8], first_tsc: u64, last_tsc: u64);
}

pub struct Consumer {
    path: PathBuf,
    file: File,
    header: Option<(Header, u64)>,
    /// Where the next record starts.
    off: u64,
    /// Below this the file's blocks are released.
    released: u64,
    keep_raw: bool,
    pass: Option<Pass>,
    /// A sampled trace's estimates (`record --sample --live`), made in the same pass.
    sampled: Option<SampledPass>,
    maps: MapsKept,
    /// The process's own /proc maps, read before each batch: the stacks of a
    /// module loaded since the last MAPS record are cut where they end.
    live_maps: String,
    code: CodeRanges,
    end: Option<EndRecord>,
    stats: Vec<(String, String)>,
    allocator_readings: Vec<Vec<(String, String)>>,
    repeated: RepeatedChunks,
    /// The chunks read so far, merged by time: drained up to the horizon,
    /// the rest kept for the next batch.
    items: Option<Items>,
    /// Per thread, the first time stamp of the latest chunk read.
    read_first: HashMap<u32, u64>,
    max_points: usize,
    /// The latest time stamp replayed in an earlier batch.
    replayed_tsc: u64,
    /// The horizon replayed to (every event before it was replayed).
    replayed_to: u64,
    pub late_events: u64,
    /// The live bytes the late events moved, summed (each event's change
    /// of live bytes, taken positive): how far a peak or a time-series
    /// point can be off because of them.
    pub late_bytes: u64,
    /// Buffer copies taken from the process, and the horizons moved past
    /// a thread to keep `HOLD_BYTES`.
    pub copies: u64,
    pub forced: u64,
    /// Per thread, the latest copy of its buffer not yet met in the file.
    copied: HashMap<u32, Copied>,
    /// Why the process's memory could not be read (copies stop).
    copy_error: Option<String>,
    pub max_disk: u64,
    pub max_behind: u64,
    /// The raw file read ahead during long replays (once the header is read).
    spool: Option<Spool>,
    sink: Option<Box<dyn RawSink>>,
    warnings: Vec<String>,
}

impl Consumer {
    pub fn new(path: &Path, keep_raw: bool, max_points: usize, sink: Option<Box<dyn RawSink>>) -> Result<Consumer, TraceError> {
        // Written to (its consumed blocks punched out), so only this user's regular file.
        let file = crate::platform::safe_fs::open_owned_regular(path, !keep_raw).map_err(TraceError::io(path))?;
        Ok(Consumer {
            path: path.to_path_buf(),
            file,
            header: None,
            off: 0,
            released: 0,
            keep_raw,
            pass: None,
            sampled: None,
            maps: MapsKept::default(),
            live_maps: String::new(),
            code: CodeRanges::new(&[]),
            end: None,
            stats: Vec::new(),
            allocator_readings: Vec::new(),
            repeated: RepeatedChunks::default(),
            items: None,
            read_first: HashMap::new(),
            max_points,
            replayed_tsc: 0,
            replayed_to: 0,
            late_events: 0,
            late_bytes: 0,
            copies: 0,
            forced: 0,
            copied: HashMap::new(),
            // `MTLAB_LIVE_COPY=0`: no copies (what a process whose memory
            // cannot be read gets; the tests of the hold limit use it).
            copy_error: std::env::var_os("MTLAB_LIVE_COPY").is_some_and(|v| v == "0").then(|| "MTLAB_LIVE_COPY=0".to_string()),
            max_disk: 0,
            max_behind: 0,
            spool: None,
            sink,
            warnings: Vec::new(),
        })
    }

    /// The trace's time stamp counter ticks per second (0 before its header is read).
    pub fn tsc_hz(&self) -> u64 {
        self.header.as_ref().map_or(0, |(h, _)| h.tsc_hz)
    }

    /// Trace bytes analysed so far.
    pub fn consumed(&self) -> u64 {
        self.off
    }

    /// The traced process (None before the trace's header is read).
    pub fn pid(&self) -> Option<u32> {
        self.header.as_ref().map(|(h, _)| h.pid).filter(|&p| p != 0)
    }

    /// Calls analysed so far.
    pub fn events(&self) -> u64 {
        self.pass.as_ref().map_or(0, |p| p.events)
    }

    /// How far the newest event analysed is behind time stamp `now` (ns;
    /// 0 at the end, `now` 0, or before any event).
    pub fn behind_ns(&self, now: u64) -> u64 {
        let hz = self.tsc_hz();
        if now == 0 || hz == 0 || self.replayed_tsc == 0 {
            return 0;
        }
        (now.saturating_sub(self.replayed_tsc) as u128 * 1_000_000_000 / hz as u128) as u64
    }

    /// The raw file's blocks on disk now.
    pub fn disk_bytes(&self) -> u64 {
        self.file.metadata().map(|m| m.blocks() * 512).unwrap_or(0)
    }

    /// Analyses the records that end within the first `available` bytes:
    /// their events before the horizon `look` gives (None: all; the
    /// program has ended, the file is whole, and a record that does not
    /// parse is damage, not one still being written).
    pub fn advance(&mut self, available: u64, look: Option<&Look>) -> Result<(), TraceError> {
        let ended = look.is_none();
        self.max_behind = self.max_behind.max(available.saturating_sub(self.off));
        // The first batch hands the sink the file's header too: a sink
        // gets the trace's bytes in order from its start.
        let first = self.header.is_none();
        if self.header.is_none() {
            let Ok((version, text, end)) = read_file_header(&self.file, &self.path, available) else {
                return Ok(());
            };
            let (mut header, warnings) = Header::parse(&text);
            header.version = version;
            self.warnings.extend(warnings);
            self.pass = Some(Pass::new(&header, self.max_points, false));
            self.sampled = (header.sample_interval > 0).then(SampledPass::default);
            self.off = end;
            self.header = Some((header, end));
            let file = self.file.try_clone().map_err(TraceError::io(&self.path))?;
            self.spool = Some(Spool::new(file, end, !self.keep_raw));
        }
        let Some(spool) = self.spool.take() else { return Ok(()) };
        let r = self.read_records(available, ended, first, &spool);
        self.spool = Some(spool);
        let ReadBatch { start, mut chunks, span } = r?;
        let mut copied = HashSet::new();
        if let Some(look) = look {
            let quiet = look.now.saturating_sub(self.tsc_hz().saturating_mul(QUIET_MS) / 1000);
            copied = self.copy_quiet(look, &mut chunks, quiet);
        }
        let mut added = !chunks.is_empty();
        self.add_chunks(chunks)?;
        // What was read is in memory now: its bytes go to the sink and its
        // blocks are released before the replay, which may take long
        // enough for the program to write megabytes (a burst of
        // allocations faster than one thread analyses them): the backlog
        // waits in memory, not on disk.
        if let Some(spool) = self.spool.as_mut() {
            if self.off > start {
                if let Some(sink) = self.sink.as_mut() {
                    let mut bytes = vec![0u8; (self.off - start) as usize];
                    spool.read_exact_at(&mut bytes, start).map_err(TraceError::io(&self.path))?;
                    let (first, last) = if span.0 == u64::MAX { (0, 0) } else { span };
                    sink.consumed(&bytes, first, last);
                }
            }
            spool.consumed(self.off);
        }
        self.release();
        let horizon = match look {
            None => u64::MAX,
            Some(look) => {
                // Raw bytes pile up behind a thread not quiet for long yet: copied now.
                if self.held() > HOLD_BYTES {
                    let mut more = Vec::new();
                    copied.extend(self.copy_quiet(look, &mut more, u64::MAX));
                    added |= !more.is_empty();
                    self.add_chunks(more)?;
                }
                let h = look.progress.horizon(&self.read_first, &copied).unwrap_or(u64::MAX).min(look.now.saturating_sub(look.settle));
                self.held_to(h, look)
            }
        };
        if self.items.is_some() && (added || horizon != self.replayed_to) {
            self.update_code();
            self.replay(horizon, look.map(|l| l.page));
        }
        self.max_disk = self.max_disk.max(self.disk_bytes());
        Ok(())
    }

    /// Reads the records that end within the first `available` bytes (from
    /// `spool`: what it holds in memory, the rest from the file): the
    /// chunks to merge, and the other records' contents. Returns where the
    /// reading started, the chunks, and their time span.
    fn read_records(&mut self, available: u64, ended: bool, first: bool, spool: &Spool) -> Result<ReadBatch, TraceError> {
        let start = if first { 0 } else { self.off };
        let mut held_in_memory = self.items.as_ref().map_or(0, Items::memory_bytes);
        let mut chunks = Vec::new();
        let mut span = (u64::MAX, 0u64);
        loop {
            let rec = match next_record(spool, self.off, available).map_err(TraceError::io(&self.path))? {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(d) => {
                    if ended {
                        self.warnings.push(d.message(chunks.len()));
                    }
                    break;
                }
            };
            let mut payload = vec![0u8; rec.payload_len as usize];
            spool.read_exact_at(&mut payload, rec.payload_offset()).map_err(TraceError::io(&self.path))?;
            match rec.ty {
                REC_EVENTS => match parse_chunk_header(&rec, &payload) {
                    Ok(info) if self.repeated.is_repeat(&info) => {}
                    Ok(info) => {
                        span = (span.0.min(info.first_tsc), span.1.max(info.last_tsc));
                        let f = self.read_first.entry(info.tid).or_insert(0);
                        *f = (*f).max(info.first_tsc);
                        let skip = self.copied_part(&info, &payload);
                        // Kept in memory, as read: the file's blocks go
                        // before the replay (`release`), and the decoder
                        // does not read them a second time. Up to
                        // `MEMORY_CHUNKS`: a backlog beyond waits on disk,
                        // but for what the spool read (its blocks may be
                        // punched already; a raw trace being written holds
                        // no compressed chunk).
                        let room = held_in_memory < MEMORY_CHUNKS || spool.holds(rec.offset, rec.end());
                        let memory = (room && !info.compressed).then(|| {
                            held_in_memory += info.event_bytes().1;
                            let len = info.event_bytes().1;
                            payload.drain(..EVENTS_HEADER as usize);
                            payload.truncate(len);
                            std::mem::take(&mut payload)
                        });
                        chunks.push(NewChunk { info, memory, skip });
                    }
                    Err(d) => self.warnings.push(d.message(chunks.len())),
                },
                REC_MAPS | REC_END | REC_STATS | REC_ALLOCSTATS => {
                    let text = if rec.flags & RECORD_FLAG_ZSTD != 0 {
                        zstd::decode_all(&payload[..]).map_err(TraceError::io(&self.path))?
                    } else {
                        payload
                    };
                    let kv = || crate::trace::kv::parse_kv_text(&String::from_utf8_lossy(&text));
                    match rec.ty {
                        REC_MAPS => self.maps.add(&text),
                        REC_STATS => self.stats.extend(kv()),
                        REC_ALLOCSTATS => self.allocator_readings.push(kv()),
                        _ => self.end = EndRecord::from_bytes(&text),
                    }
                }
                _ => {}
            }
            self.off = rec.end();
        }
        Ok(ReadBatch { start, chunks, span })
    }

    /// Replays the merged chunks' events before `horizon`.
    /// Every `FILL_EVERY` events it copies what the writer has made complete
    /// since (`page`'s watermark) into the spool, releasing it from disk.
    fn replay(&mut self, horizon: u64, page: Option<&SharedPage>) {
        let (Some(pass), Some(items)) = (self.pass.as_mut(), self.items.as_mut()) else { return };
        // Chunks the decoder reads from the file stay there.
        let ceiling = items.unread_from_file();
        let mut spool = self.spool.as_mut().zip(page);
        let mut n = 0u64;
        items.set_horizon(horizon);
        if let Some(s) = self.sampled.as_mut() {
            s.set_checkpoints(reading_tscs(&self.allocator_readings));
        }
        let sampled = &mut self.sampled;
        let before = self.replayed_tsc;
        let (mut late, mut late_bytes) = (0u64, 0u64);
        let mut last = before;
        let mut live = pass.replay.heap.live_bytes();
        feed(items, pass, &self.code, |ev, pass| {
            let now = pass.replay.heap.live_bytes();
            if ev.tsc < before {
                late += 1;
                late_bytes += now.abs_diff(live);
            }
            live = now;
            last = last.max(ev.tsc);
            if let Some(s) = sampled.as_mut() {
                s.event(ev);
            }
            n += 1;
            if n.is_multiple_of(FILL_EVERY) {
                if let Some((spool, page)) = spool.as_mut() {
                    spool.fill(page.u64_at(0).load(std::sync::atomic::Ordering::Acquire), ceiling);
                }
            }
        });
        self.late_events += late;
        self.late_bytes += late_bytes;
        self.replayed_tsc = last;
        self.replayed_to = horizon;
    }

    /// How many bytes of a chunk of the file a copy of its buffer gave
    /// before (its first bytes, checked), to be skipped.
    fn copied_part(&mut self, info: &ChunkInfo, payload: &[u8]) -> usize {
        let Some(c) = self.copied.get(&info.tid).copied().filter(|c| c.first_tsc == info.first_tsc) else { return 0 };
        self.copied.remove(&info.tid);
        let events = payload.get(EVENTS_HEADER as usize..).unwrap_or(&[]);
        match events.get(..c.len) {
            Some(prefix) if crc32fast::hash(prefix) == c.crc => c.len,
            _ => {
                self.warnings.push(format!(
                    "thread {}'s chunk at byte {} does not start with the events copied from its buffer: they may be counted twice",
                    info.tid, info.offset
                ));
                0
            }
        }
    }

    fn add_chunks(&mut self, chunks: Vec<NewChunk>) -> Result<(), TraceError> {
        if chunks.is_empty() {
            return Ok(());
        }
        if self.items.is_none() {
            let header = &self.header.as_ref().expect("chunks are read only after the header").0;
            let file = self.file.try_clone().map_err(TraceError::io(&self.path))?;
            self.items = Some(Items::over(self.path.clone(), file, Vec::new(), header));
        }
        if let Some(items) = self.items.as_mut() {
            items.extend_from(chunks);
        }
        Ok(())
    }

    /// Raw bytes read and waiting for the horizon on disk.
    fn held(&self) -> u64 {
        let unread = self.items.as_ref().map_or(u64::MAX, Items::unread_from);
        if unread == u64::MAX {
            0
        } else {
            self.off.saturating_sub(unread)
        }
    }

    /// Copies the buffers that have held the horizon back since before
    /// time stamp `quiet` (their threads make no calls) and adds the new
    /// part of each to `chunks`; returns the threads copied.
    fn copy_quiet(&mut self, look: &Look, chunks: &mut Vec<NewChunk>, quiet_before: u64) -> HashSet<u32> {
        let mut covered = HashSet::new();
        let Some((header, _)) = &self.header else { return covered };
        let pid = header.pid;
        if self.copy_error.is_some() || pid == 0 {
            return covered;
        }
        let quiet: Vec<progress::Slot> = look.progress.quiet(&self.read_first, quiet_before).copied().collect();
        for s in quiet {
            // Quiet because it waits for a CPU (or inside a write), not for
            // something: it may have stamped a call it has not appended yet
            // (a free is stamped before the real free), which the copy would
            // miss and which would then be replayed late once the horizon
            // passed it; it writes its events itself (`tests/live.rs`: 1 or
            // 2 late events in 1 run of 5 at load 11).
            if thread_goes_on(pid, s.tid) {
                continue;
            }
            let c = match bufcopy::copy(pid, s.buf) {
                Ok(Some(c)) => c,
                Ok(None) => continue,
                Err(e) => {
                    self.copy_error = Some(e.to_string());
                    // A process that has ended (ESRCH) wrote every buffer
                    // at its exit: nothing waits for a copy.
                    if e.raw_os_error() != Some(libc::ESRCH) {
                        self.warnings.push(format!(
                            "cannot read the buffers of quiet threads from process {pid} ({e}): a thread that makes no calls \
                             holds the analysis back until {} MiB of raw trace wait, then its events are analysed late",
                            HOLD_BYTES >> 20
                        ));
                    }
                    break;
                }
            };
            // Checked against the slot read before the chunks, read again after the copy.
            let plausible = c.first_tsc >= s.pending && c.last_tsc >= c.first_tsc;
            if !plausible || !s.copy_holds(progress::reread(look.page, s.index), c.tid, &self.read_first) {
                continue;
            }
            covered.insert(c.tid);
            if let Some(chunk) = self.new_part(c) {
                self.copies += 1;
                chunks.push(chunk);
            }
        }
        covered
    }

    /// The part of a buffer's copy not given by an earlier copy of it, as
    /// a chunk held in memory (None: nothing new).
    fn new_part(&mut self, c: BufferCopy) -> Option<NewChunk> {
        let skip = match self.copied.get(&c.tid) {
            Some(p) if p.first_tsc == c.first_tsc => {
                if c.events.len() <= p.len || crc32fast::hash(&c.events[..p.len]) != p.crc {
                    return None;
                }
                p.len
            }
            _ => 0,
        };
        self.copied.insert(c.tid, Copied { first_tsc: c.first_tsc, len: c.events.len(), crc: crc32fast::hash(&c.events) });
        let info = ChunkInfo {
            offset: u64::MAX,
            payload_len: EVENTS_HEADER + c.events.len() as u32,
            compressed: false,
            columns: false,
            body_crc: None,
            tid: c.tid,
            n_events: c.n_events,
            first_tsc: c.first_tsc,
            last_tsc: c.last_tsc,
        };
        Some(NewChunk { info, memory: Some(c.events), skip })
    }

    /// The horizon, moved on where the raw bytes waiting for it exceed
    /// `HOLD_BYTES`: to where they are half that, but never past a thread
    /// whose events are on their way (`Progress::arriving_floor`). Under
    /// load the watermark waits for a writer descheduled inside its write
    /// while the other threads write megabytes: the events of a thread
    /// whose chunk is above it were replayed late when the horizon passed
    /// them (`tests/live.rs`, 18 runs in 20 at load 20).
    fn held_to(&mut self, horizon: u64, look: &Look) -> u64 {
        let Some(items) = self.items.as_ref() else { return horizon };
        if self.held() <= HOLD_BYTES {
            return horizon;
        }
        let pid = self.pid().unwrap_or(0);
        let arriving = look.progress.arriving_floor(&self.read_first, |i| progress::reread(look.page, i), |tid| thread_goes_on(pid, tid));
        let need = items
            .horizon_to_read_below(self.off - HOLD_BYTES / 2)
            .min(look.now.saturating_sub(look.settle))
            .min(arriving.max(horizon));
        if need > horizon {
            self.forced += 1;
            return need;
        }
        horizon
    }

    /// The code ranges stacks are cut at: the recorded maps and the
    /// process's maps now (a module loaded since the last MAPS record).
    fn update_code(&mut self) {
        let Some((header, _)) = &self.header else { return };
        let now = std::fs::read_to_string(format!("/proc/{}/maps", header.pid)).unwrap_or_default();
        if !now.is_empty() {
            self.live_maps = now;
        }
        let mut texts = self.maps.clone().into_texts();
        texts.push(self.live_maps.clone());
        self.code = CodeRanges::new(&parse_all_maps(&texts));
    }

    /// Punches the analysed bytes out of the file, whole blocks only, the
    /// header kept (the file stays a trace's size, its blocks go).
    fn release(&mut self) {
        let Some((_, header_end)) = self.header else { return };
        if self.keep_raw {
            return;
        }
        const BLOCK: u64 = 4096;
        let from = self.released.max(header_end.next_multiple_of(BLOCK));
        // Chunks merged but not read yet (after the horizon) stay in the
        // file, unless they are held in memory.
        let unread = self.items.as_ref().map_or(u64::MAX, Items::unread_from_file);
        let to = self.off.min(unread) / BLOCK * BLOCK;
        if to <= from {
            return;
        }
        match crate::platform::safe_fs::punch_hole(&self.file, from, to) {
            Ok(()) => self.released = to,
            Err(e) if self.warnings.iter().all(|w| !w.starts_with("cannot release")) => self.warnings.push(format!(
                "cannot release analysed trace bytes ({e}): this file system does not punch holes; the raw file grows"
            )),
            Err(_) => {}
        }
    }

    /// The file was removed (by its writer: an image that wrote no event
    /// before it exec'd).
    pub fn file_removed(&self) -> bool {
        self.file.metadata().map_or(true, |m| m.nlink() == 0)
    }

    /// The END record was read: the writer wrote its last record.
    pub fn saw_end(&self) -> bool {
        self.end.is_some()
    }

    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The report data as of now; `runinfo` is the run's facts once it has
    /// ended (none before). A snapshot's time series ends with the heap now,
    /// and the pass's own series goes on as it was.
    pub fn report(&mut self, opts: &AnalyzeOptions, runinfo: &[(String, String)], last: bool) -> Option<ProcessReport> {
        let (header, _) = self.header.as_ref()?;
        let mut header = header.clone();
        // The finished trace's version: the raw records were read whole.
        header.version = TRACE_VERSION;
        let trace = TraceFile {
            path: self.path.clone(),
            header,
            chunks: Vec::new(),
            maps: self.maps.clone().into_texts(),
            end: self.end,
            runinfo: runinfo.to_vec(),
            stats: self.stats.clone(),
            allocator_readings: self.allocator_readings.clone(),
            warnings: self.warnings.iter().cloned().chain(self.repeated.warning()).collect(),
            records_damaged: 0,
            file_len: self.off,
        };
        let maps = parse_all_maps(&trace.maps);
        let readings = crate::analysis::model::AllocatorReading::all_of(&trace);
        let mut decoded = Decoded::default();
        if let Some(items) = &self.items {
            decoded.add(items);
        }
        let pass = self.pass.as_mut()?;
        let sampled = self.sampled.clone().map(|s| s.finish(&trace, &pass.stacks, maps.clone()));
        let series = (!last).then(|| pass.series.clone());
        pass.end_series();
        if last {
            // No event comes after the last report: the blocks go before
            // the sites are symbolized, as `mtlab report` drops them (python3
            // with 2.8 M live blocks: a 63 MiB table beside the debug
            // information and the profile being written).
            pass.replay.release();
        }
        let report = finish::report(
            pass,
            finish::Inputs { trace: &trace, opts, symbolize: true, maps, decoded: &decoded, sampled, readings },
        );
        if let Some(s) = series {
            pass.series = s;
        }
        Some(report)
    }
}

/// The time stamps of the heap manager's readings read so far: where a
/// sampled trace's in-use estimate is taken (`SampledPass::set_checkpoints`).
fn reading_tscs(readings: &[Vec<(String, String)>]) -> Vec<u64> {
    let tsc = |kv: &Vec<(String, String)>| kv.iter().find(|(k, _)| k == crate::trace::keys::READING_TSC)?.1.parse().ok();
    readings.iter().filter_map(tsc).collect()
}
