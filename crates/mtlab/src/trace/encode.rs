//! Writing trace files from Rust (for tests and tools), and `finish_trace`,
//! which `mtlab record` runs on a trace after the traced program has ended.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::decode::{next_record, parse_chunk_header, read_file_header, Damage, EndRecord, RecHdr, TraceError};
use super::event::{Event, EventKind, Func, Item};
use super::format::*;

/// zstd level `finish_trace` compresses EVENTS payloads with.
pub const FINISH_ZSTD_LEVEL: i32 = 3;

/// Appends an unsigned LEB128 varint.
#[inline]
pub fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// Appends a zigzag-encoded signed varint.
#[inline]
pub fn put_svarint(buf: &mut Vec<u8>, v: i64) {
    put_varint(buf, ((v << 1) ^ (v >> 63)) as u64);
}

/// Escapes a header / RUNINFO value: newline → `\n`, backslash → `\\`.
pub fn escape_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out
}

/// `key=value\n` text with escaped values.
pub fn kv_text<K: AsRef<str>, V: AsRef<str>>(pairs: impl IntoIterator<Item = (K, V)>) -> String {
    let mut s = String::new();
    for (k, v) in pairs {
        s.push_str(k.as_ref());
        s.push('=');
        s.push_str(&escape_value(v.as_ref()));
        s.push('\n');
    }
    s
}

/// Builds one EVENTS chunk the way the C writer does: `first_tsc` is the
/// first event's TSC, `last_tsc` the last one's, `n_events` counts events
/// (not STACK_DEFs), ptr fields chain through the chunk from 0.
#[derive(Debug, Clone)]
pub struct ChunkEncoder {
    tid: u32,
    body: Vec<u8>,
    n_events: u32,
    first_tsc: Option<u64>,
    last_tsc: u64,
    prev_ptr: u64,
}

impl ChunkEncoder {
    pub fn new(tid: u32) -> ChunkEncoder {
        ChunkEncoder {
            tid,
            body: Vec::new(),
            n_events: 0,
            first_tsc: None,
            last_tsc: 0,
            prev_ptr: 0,
        }
    }

    pub fn tid(&self) -> u32 {
        self.tid
    }

    pub fn n_events(&self) -> u32 {
        self.n_events
    }

    pub fn is_empty(&self) -> bool {
        self.body.is_empty()
    }

    /// Encodes a decoded item (an event's own `tid` is ignored: the chunk's is used).
    pub fn item(&mut self, item: &Item) {
        match item {
            Item::Stack { id, pcs } => self.stack(*id, pcs),
            Item::Event(ev) => self.event(ev),
        }
    }

    /// A STACK_DEF.
    pub fn stack(&mut self, id: u32, pcs: &[u64]) {
        self.body.push(EV_STACK_DEF);
        put_varint(&mut self.body, id as u64);
        put_varint(&mut self.body, pcs.len() as u64);
        let mut prev = 0u64;
        for &pc in pcs {
            put_svarint(&mut self.body, pc.wrapping_sub(prev) as i64);
            prev = pc;
        }
    }

    fn common(&mut self, kind: u8, flags: u8, tsc: u64, cycles: u64, stack: u32) {
        let prev = match self.first_tsc {
            Some(_) => self.last_tsc,
            None => {
                self.first_tsc = Some(tsc);
                tsc
            }
        };
        self.body.push(kind | (flags & EVF_MASK));
        put_varint(&mut self.body, tsc.wrapping_sub(prev));
        put_varint(&mut self.body, cycles);
        put_varint(&mut self.body, stack as u64);
        self.last_tsc = tsc;
        self.n_events += 1;
    }

    fn ptr(&mut self, p: u64) {
        put_svarint(&mut self.body, p.wrapping_sub(self.prev_ptr) as i64);
        self.prev_ptr = p;
    }

    fn v(&mut self, v: u64) {
        put_varint(&mut self.body, v);
    }

    fn sv(&mut self, v: i64) {
        put_svarint(&mut self.body, v);
    }

    /// Encodes a decoded event. calloc and reallocarray are written with
    /// `nmemb = 1` (use [`ChunkEncoder::calloc`] / [`ChunkEncoder::reallocarray`]
    /// for other splits); posix_memalign's `ret` is 0, or ENOMEM when FAILED.
    ///
    /// Panics when an `Alloc`/`Realloc`/`Mmap` carries a `func` of another family.
    pub fn event(&mut self, ev: &Event) {
        let extra = |size: u64, usable: u64| usable.saturating_sub(size);
        let (tsc, cyc, st, fl) = (ev.tsc, ev.cycles, ev.stack, ev.flags);
        match ev.kind {
            EventKind::Alloc {
                func,
                size,
                align,
                ptr,
                usable,
            } => match func {
                Func::Malloc | Func::Valloc | Func::Pvalloc => {
                    let kind = match func {
                        Func::Malloc => EV_MALLOC,
                        Func::Valloc => EV_VALLOC,
                        _ => EV_PVALLOC,
                    };
                    self.common(kind, fl, tsc, cyc, st);
                    self.v(size);
                    self.ptr(ptr);
                    self.v(extra(size, usable));
                }
                Func::Calloc => self.calloc(tsc, cyc, st, fl, 1, size, ptr, extra(size, usable)),
                Func::PosixMemalign => {
                    self.common(EV_POSIX_MEMALIGN, fl, tsc, cyc, st);
                    self.v(align);
                    self.v(size);
                    self.ptr(ptr);
                    self.v(if fl & EVF_FAILED != 0 { libc::ENOMEM as u64 } else { 0 });
                    self.v(extra(size, usable));
                }
                Func::AlignedAlloc | Func::Memalign => {
                    let kind = if func == Func::Memalign {
                        EV_MEMALIGN
                    } else {
                        EV_ALIGNED_ALLOC
                    };
                    self.common(kind, fl, tsc, cyc, st);
                    self.v(align);
                    self.v(size);
                    self.ptr(ptr);
                    self.v(extra(size, usable));
                }
                f => panic!("EventKind::Alloc cannot carry {}", f.name()),
            },
            EventKind::Free { ptr } => {
                self.common(EV_FREE, fl, tsc, cyc, st);
                self.ptr(ptr);
            }
            EventKind::Realloc {
                func,
                old,
                size,
                ptr,
                usable,
            } => match func {
                Func::Realloc => {
                    self.common(EV_REALLOC, fl, tsc, cyc, st);
                    self.ptr(old);
                    self.v(size);
                    self.ptr(ptr);
                    self.v(extra(size, usable));
                }
                Func::Reallocarray => self.reallocarray(tsc, cyc, st, fl, old, 1, size, ptr, extra(size, usable)),
                f => panic!("EventKind::Realloc cannot carry {}", f.name()),
            },
            EventKind::Mmap {
                func,
                hint,
                len,
                prot,
                flags,
                fd,
                offset,
                result,
            } => {
                let kind = match func {
                    Func::Mmap => EV_MMAP,
                    Func::Mmap64 => EV_MMAP64,
                    f => panic!("EventKind::Mmap cannot carry {}", f.name()),
                };
                self.common(kind, fl, tsc, cyc, st);
                self.ptr(hint);
                self.v(len);
                self.v(prot);
                self.v(flags);
                self.sv(fd);
                self.v(offset);
                self.ptr(result);
            }
            EventKind::Munmap { addr, len, ret } => {
                self.common(EV_MUNMAP, fl, tsc, cyc, st);
                self.ptr(addr);
                self.v(len);
                self.sv(ret);
            }
            EventKind::Mremap {
                old,
                old_len,
                new_len,
                flags,
                result,
            } => {
                self.common(EV_MREMAP, fl, tsc, cyc, st);
                self.ptr(old);
                self.v(old_len);
                self.v(new_len);
                self.v(flags);
                self.ptr(result);
            }
            EventKind::Brk { addr, ret, brk_after } => {
                self.common(EV_BRK, fl, tsc, cyc, st);
                self.ptr(addr);
                self.sv(ret);
                self.ptr(brk_after);
            }
            EventKind::Sbrk {
                increment,
                result,
                brk_after,
            } => {
                self.common(EV_SBRK, fl, tsc, cyc, st);
                self.sv(increment);
                self.ptr(result);
                self.ptr(brk_after);
            }
            EventKind::BrkSeen { brk } => {
                self.common(EV_BRK_SEEN, fl, tsc, cyc, st);
                self.ptr(brk);
            }
            EventKind::ArenaHeap { base, size } => {
                self.common(EV_ARENA_HEAP, fl, tsc, cyc, st);
                self.ptr(base);
                self.v(size);
            }
            EventKind::Sample { func, size, ptr, interval } => {
                self.common(EV_SAMPLE, fl, tsc, cyc, st);
                self.v(func.alloc_kind().expect("samples come from allocation functions") as u64);
                self.v(size);
                self.ptr(ptr);
                self.v(interval);
            }
            EventKind::SampleFree { ptr } => {
                self.common(EV_SAMPLE_FREE, fl, tsc, cyc, st);
                self.ptr(ptr);
            }
        }
    }

    /// A CALLOC event with its two factors.
    #[allow(clippy::too_many_arguments)]
    pub fn calloc(
        &mut self,
        tsc: u64,
        cycles: u64,
        stack: u32,
        flags: u8,
        nmemb: u64,
        size: u64,
        ptr: u64,
        usable_extra: u64,
    ) {
        self.common(EV_CALLOC, flags, tsc, cycles, stack);
        self.v(nmemb);
        self.v(size);
        self.ptr(ptr);
        self.v(usable_extra);
    }

    /// A REALLOCARRAY event with its two factors.
    #[allow(clippy::too_many_arguments)]
    pub fn reallocarray(
        &mut self,
        tsc: u64,
        cycles: u64,
        stack: u32,
        flags: u8,
        old: u64,
        nmemb: u64,
        size: u64,
        ptr: u64,
        usable_extra: u64,
    ) {
        self.common(EV_REALLOCARRAY, flags, tsc, cycles, stack);
        self.ptr(old);
        self.v(nmemb);
        self.v(size);
        self.ptr(ptr);
        self.v(usable_extra);
    }

    /// Appends raw bytes to the event stream (to build damaged chunks in tests).
    pub fn raw_bytes(&mut self, bytes: &[u8]) {
        self.body.extend_from_slice(bytes);
    }

    /// The 24-byte chunk header.
    pub fn chunk_header(&self) -> [u8; EVENTS_HEADER as usize] {
        let mut h = [0u8; EVENTS_HEADER as usize];
        let first = self.first_tsc.unwrap_or(0);
        let last = if self.first_tsc.is_some() { self.last_tsc } else { 0 };
        h[0..4].copy_from_slice(&self.tid.to_le_bytes());
        h[4..8].copy_from_slice(&self.n_events.to_le_bytes());
        h[8..16].copy_from_slice(&first.to_le_bytes());
        h[16..24].copy_from_slice(&last.to_le_bytes());
        h
    }

    /// The event bytes after the chunk header.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The whole EVENTS payload (chunk header + events), uncompressed.
    pub fn payload(&self) -> Vec<u8> {
        let mut p = Vec::with_capacity(EVENTS_HEADER as usize + self.body.len());
        p.extend_from_slice(&self.chunk_header());
        p.extend_from_slice(&self.body);
        p
    }
}

/// Writes a trace file record by record.
pub struct TraceWriter<W: Write> {
    out: W,
    written: u64,
}

impl TraceWriter<BufWriter<File>> {
    /// Creates `path` and writes the header.
    pub fn create<K: AsRef<str>, V: AsRef<str>>(
        path: impl AsRef<Path>,
        header: impl IntoIterator<Item = (K, V)>,
    ) -> io::Result<Self> {
        TraceWriter::new(BufWriter::new(File::create(path)?), header)
    }
}

impl<W: Write> TraceWriter<W> {
    /// Writes the file header (current format version) from key/value pairs.
    pub fn new<K: AsRef<str>, V: AsRef<str>>(out: W, header: impl IntoIterator<Item = (K, V)>) -> io::Result<Self> {
        TraceWriter::with_version(out, TRACE_VERSION, header)
    }

    /// Like `new` with any version number (to test version checks).
    pub fn with_version<K: AsRef<str>, V: AsRef<str>>(
        mut out: W,
        version: u32,
        header: impl IntoIterator<Item = (K, V)>,
    ) -> io::Result<Self> {
        let text = kv_text(header);
        out.write_all(&TRACE_MAGIC)?;
        out.write_all(&version.to_le_bytes())?;
        out.write_all(&(text.len() as u32).to_le_bytes())?;
        out.write_all(text.as_bytes())?;
        Ok(TraceWriter {
            out,
            written: FILE_HEADER_FIXED as u64 + text.len() as u64,
        })
    }

    /// Any record, payload as given.
    pub fn record(&mut self, ty: u16, flags: u16, payload: &[u8]) -> io::Result<()> {
        self.written += write_record(&mut self.out, ty, flags, &[payload])?;
        Ok(())
    }

    /// An uncompressed EVENTS record.
    pub fn chunk(&mut self, chunk: &ChunkEncoder) -> io::Result<()> {
        self.record(REC_EVENTS, 0, &chunk.payload())
    }

    /// An EVENTS record holding `items`, encoded as the C writer does.
    pub fn events_chunk(&mut self, tid: u32, items: &[Item]) -> io::Result<()> {
        let mut c = ChunkEncoder::new(tid);
        for it in items {
            c.item(it);
        }
        self.chunk(&c)
    }

    pub fn maps(&mut self, text: &str) -> io::Result<()> {
        self.record(REC_MAPS, 0, text.as_bytes())
    }

    /// A MAPS record whose whole payload is one zstd frame.
    pub fn maps_compressed(&mut self, text: &str) -> io::Result<()> {
        let c = zstd::bulk::compress(text.as_bytes(), FINISH_ZSTD_LEVEL)?;
        self.record(REC_MAPS, RECORD_FLAG_ZSTD, &c)
    }

    pub fn end(&mut self, end: &EndRecord) -> io::Result<()> {
        self.record(REC_END, 0, &end.to_bytes())
    }

    pub fn runinfo<K: AsRef<str>, V: AsRef<str>>(&mut self, pairs: impl IntoIterator<Item = (K, V)>) -> io::Result<()> {
        self.record(REC_RUNINFO, 0, kv_text(pairs).as_bytes())
    }

    /// Bytes written so far (the offset of the next record).
    pub fn bytes_written(&self) -> u64 {
        self.written
    }

    /// Flushes and hands back the writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// What `finish_trace` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FinishStats {
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub chunks_compressed: u64,
    /// Damage found (the records from there on were dropped).
    pub warnings: Vec<String>,
}

/// Removes the temp file unless disarmed.
pub(crate) struct TempGuard(pub(crate) Option<PathBuf>);

/// Creates the temp file a rewrite of `dst` is written to before it is
/// renamed over it: `.NAME.WHAT-PID` in the same directory (so the rename
/// stays within one file system), removed again unless the guard is disarmed.
pub(crate) fn temp_beside(dst: &Path, what: &str) -> Result<(File, PathBuf, TempGuard), TraceError> {
    let dir = match dst.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = dst.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "trace".into());
    let tmp_path = dir.join(format!(".{name}.{what}-{}", std::process::id()));
    let _ = fs::remove_file(&tmp_path);
    let tmp = OpenOptions::new().write(true).create_new(true).open(&tmp_path).map_err(TraceError::io(&tmp_path))?;
    let guard = TempGuard(Some(tmp_path.clone()));
    Ok((tmp, tmp_path, guard))
}

/// The file header of `src` (its first `header_end` bytes), verbatim but
/// for the version: rewritten records use this version's layouts, which
/// readers of older versions do not know.
pub(crate) fn header_at_this_version(src: &File, path: &Path, header_end: u64) -> Result<Vec<u8>, TraceError> {
    let mut head = vec![0u8; header_end as usize];
    src.read_exact_at(&mut head, 0).map_err(TraceError::io(path))?;
    let version = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
    if version < TRACE_VERSION {
        head[8..12].copy_from_slice(&TRACE_VERSION.to_le_bytes());
    }
    Ok(head)
}

/// The 8-byte header of a record of `len` payload bytes.
fn record_header(ty: u16, flags: u16, len: usize) -> [u8; RECORD_HEADER as usize] {
    let mut h = [0u8; RECORD_HEADER as usize];
    h[0..4].copy_from_slice(&(len as u32).to_le_bytes());
    h[4..6].copy_from_slice(&ty.to_le_bytes());
    h[6..8].copy_from_slice(&flags.to_le_bytes());
    h
}

/// Writes one record whose payload is `parts` back to back; its size in the file.
pub(crate) fn write_record(out: &mut impl Write, ty: u16, flags: u16, parts: &[&[u8]]) -> io::Result<u64> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    out.write_all(&record_header(ty, flags, len))?;
    for p in parts {
        out.write_all(p)?;
    }
    Ok(RECORD_HEADER as u64 + len as u64)
}

/// Copies record `rec` of the trace `src` (at `src_path`), header
/// included, to `out` (at `out_path`); its size in the file.
pub(crate) fn copy_record(
    src: &mut File,
    src_path: &Path,
    rec: &RecHdr,
    out: &mut impl Write,
    out_path: &Path,
) -> Result<u64, TraceError> {
    src.seek(SeekFrom::Start(rec.offset)).map_err(TraceError::io(src_path))?;
    let n = RECORD_HEADER as u64 + rec.payload_len as u64;
    let copied = io::copy(&mut src.take(n), out).map_err(TraceError::io(out_path))?;
    if copied != n {
        let e = io::Error::new(io::ErrorKind::UnexpectedEof, "the trace shrank while being rewritten");
        return Err(TraceError::io(src_path)(e));
    }
    Ok(n)
}

impl TempGuard {
    /// Replaces `dst` with the finished rewrite in `out` (this guard's temp
    /// file): flushed, given `perms`, synced to disk when `durable`, renamed.
    pub(crate) fn install(
        mut self,
        out: BufWriter<File>,
        perms: Option<fs::Permissions>,
        durable: bool,
        dst: &Path,
    ) -> Result<(), TraceError> {
        let tmp_path = self.0.clone().expect("an armed guard");
        let file = out.into_inner().map_err(|e| TraceError::Io { path: tmp_path.clone(), source: e.into_error() })?;
        if let Some(p) = perms {
            let _ = file.set_permissions(p);
        }
        if durable {
            file.sync_data().map_err(TraceError::io(&tmp_path))?;
        }
        drop(file);
        fs::rename(&tmp_path, dst).map_err(TraceError::io(dst))?;
        self.0 = None;
        Ok(())
    }
}

impl Drop for TempGuard {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = fs::remove_file(p);
        }
    }
}

/// Rewrites the trace at `path` after the traced program has ended: joins
/// consecutive EVENTS chunks of each thread, rewrites them in columns and
/// compresses them (zstd level 3; see `columns`), copies other records
/// verbatim, stops at the first damaged record, and appends a RUNINFO
/// record with `runinfo`. The rewrite goes to a temp file in the same
/// directory that then replaces `path`.
///
/// Uncompressed EVENTS payload bytes gathered before they are rewritten together, on all cores.
const FINISH_BATCH_BYTES: usize = 16 << 20;
/// Row bytes joined into one chunk at most: the reader holds one such chunk
/// per thread in memory while merging threads by time.
const JOIN_MAX_BYTES: usize = 1 << 20;

/// A run of chunks of one thread, in time order, to become one record.
struct Group {
    tid: u32,
    members: Vec<usize>,
    row_bytes: usize,
    first_tsc: u64,
    last_tsc: u64,
    n_events: u64,
}

/// Sorts a batch's chunks (in file order) into groups: a chunk joins its
/// thread's open group when it starts no earlier than the group ends, the
/// group stays under `JOIN_MAX_BYTES`, and every other thread's chunk
/// between the two ended before it starts. The reader orders events of equal
/// time stamps by record position, and a joined group takes its first
/// member's position: without the last rule, a tie between this chunk and a
/// chunk in between would flip.
fn group_chunks(batch: &[(ChunkHead, Vec<u8>)]) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    let mut open: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
    for (i, (h, payload)) in batch.iter().enumerate() {
        let rows = payload.len() - EVENTS_HEADER as usize;
        if let Some(&g) = open.get(&h.tid) {
            let grp = &mut groups[g];
            let after = *grp.members.last().expect("groups have members") + 1;
            if h.first_tsc >= grp.last_tsc
                && grp.row_bytes + rows <= JOIN_MAX_BYTES
                && grp.n_events + h.n_events as u64 <= u32::MAX as u64
                && batch[after..i].iter().all(|(o, _)| o.last_tsc < h.first_tsc)
            {
                grp.members.push(i);
                grp.row_bytes += rows;
                grp.last_tsc = h.last_tsc;
                grp.n_events += h.n_events as u64;
                continue;
            }
        }
        open.insert(h.tid, groups.len());
        groups.push(Group {
            tid: h.tid,
            members: vec![i],
            row_bytes: rows,
            first_tsc: h.first_tsc,
            last_tsc: h.last_tsc,
            n_events: h.n_events as u64,
        });
    }
    groups
}

/// The fields of a chunk header `finish_trace` needs.
#[derive(Debug, Clone, Copy)]
struct ChunkHead {
    tid: u32,
    n_events: u32,
    first_tsc: u64,
    last_tsc: u64,
}

/// One record to write: a chunk header and its (flagged) body.
struct Rewritten {
    head: [u8; EVENTS_HEADER as usize],
    flags: u16,
    body: Vec<u8>,
}

fn chunk_head_bytes(tid: u32, n_events: u32, first_tsc: u64, last_tsc: u64) -> [u8; EVENTS_HEADER as usize] {
    let mut h = [0u8; EVENTS_HEADER as usize];
    h[0..4].copy_from_slice(&tid.to_le_bytes());
    h[4..8].copy_from_slice(&n_events.to_le_bytes());
    h[8..16].copy_from_slice(&first_tsc.to_le_bytes());
    h[16..24].copy_from_slice(&last_tsc.to_le_bytes());
    h
}

/// Rewrites one group: joined in columns and compressed; when the rows
/// cannot be read as columns (an unknown kind), each chunk is compressed as
/// it is; a chunk that does not shrink is kept as it was.
fn rewrite_group(
    comp: &mut zstd::bulk::Compressor<'_>,
    g: &Group,
    batch: &[(ChunkHead, Vec<u8>)],
) -> io::Result<Vec<Rewritten>> {
    let head = EVENTS_HEADER as usize;
    let rows: Vec<super::columns::RowChunk> = g
        .members
        .iter()
        .map(|&i| super::columns::RowChunk {
            first_tsc: batch[i].0.first_tsc,
            rows: &batch[i].1[head..],
        })
        .collect();
    if let Ok(cols) = super::columns::split(&rows) {
        let c = comp.compress(&cols)?;
        if c.len() < g.row_bytes {
            return Ok(vec![Rewritten {
                head: chunk_head_bytes(g.tid, g.n_events as u32, g.first_tsc, g.last_tsc),
                flags: RECORD_FLAG_ZSTD | RECORD_FLAG_COLUMNS,
                body: c,
            }]);
        }
    }
    let mut out = Vec::with_capacity(g.members.len());
    for &i in &g.members {
        let payload = &batch[i].1;
        let body = &payload[head..];
        let c = if body.is_empty() { None } else { Some(comp.compress(body)?) };
        let mut h = [0u8; EVENTS_HEADER as usize];
        h.copy_from_slice(&payload[..head]);
        out.push(match c {
            Some(c) if c.len() < body.len() => Rewritten { head: h, flags: RECORD_FLAG_ZSTD, body: c },
            _ => Rewritten { head: h, flags: 0, body: body.to_vec() },
        });
    }
    Ok(out)
}

/// Rewrites the EVENTS payloads in `batch` (in parallel: the program has
/// ended, its cores are free) and writes the records in order. Returns the
/// bytes written and empties the batch.
fn write_compressed_batch(
    batch: &mut Vec<(ChunkHead, Vec<u8>)>,
    out: &mut impl Write,
    stats: &mut FinishStats,
) -> io::Result<u64> {
    if batch.is_empty() {
        return Ok(0);
    }
    let groups = group_chunks(batch);
    let workers = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).clamp(1, 8);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<Vec<Rewritten>>>> =
        groups.iter().map(|_| std::sync::Mutex::new(None)).collect();
    let batch_ref: &[(ChunkHead, Vec<u8>)] = batch;
    std::thread::scope(|scope| -> io::Result<()> {
        let jobs: Vec<_> = (0..workers.min(groups.len()))
            .map(|_| {
                scope.spawn(|| -> io::Result<()> {
                    let mut comp = zstd::bulk::Compressor::new(FINISH_ZSTD_LEVEL)?;
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(g) = groups.get(i) else { return Ok(()) };
                        let r = rewrite_group(&mut comp, g, batch_ref)?;
                        *results[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
                    }
                })
            })
            .collect();
        for j in jobs {
            j.join().map_err(|_| io::Error::other("a compression thread panicked"))??;
        }
        Ok(())
    })?;
    let mut written = 0u64;
    for r in results {
        let recs = r.into_inner().unwrap_or_else(|e| e.into_inner()).unwrap_or_default();
        for rec in recs {
            if rec.flags & RECORD_FLAG_ZSTD != 0 {
                stats.chunks_compressed += 1;
            }
            written += write_record(out, REC_EVENTS, rec.flags, &[&rec.head, &rec.body])?;
        }
    }
    batch.clear();
    Ok(written)
}

pub fn finish_trace(path: &Path, runinfo: &[(String, String)]) -> Result<FinishStats, TraceError> {
    let file_len = fs::metadata(path).map_err(TraceError::io(path))?.len();
    Finisher::start(path, file_len)?.finish(runinfo)
}

/// `finish_trace` in steps: `mtlab record` can rewrite the part of the trace
/// the program has finished writing while the program still runs
/// (`advance`), and the rest after it has ended (`finish`).
pub struct Finisher {
    path: PathBuf,
    src: File,
    reader: File,
    tmp_path: PathBuf,
    guard: TempGuard,
    out: BufWriter<File>,
    stats: FinishStats,
    batch: Vec<(ChunkHead, Vec<u8>)>,
    batch_bytes: usize,
    n_chunks: usize,
    /// Where the next record starts in the source.
    off: u64,
    /// Where the records start, and where `advance` had got to when
    /// `finish` began.
    header_end: u64,
    advanced_to: u64,
    written: u64,
}

/// What one step of the rewrite did with a record.
enum Next {
    Done,
    /// The next record is not (yet) all there, or is damaged.
    Stop(Damage),
}

impl Finisher {
    /// Starts rewriting `path`, whose first `available` bytes are written
    /// (the whole file once the program has ended).
    pub fn start(path: &Path, available: u64) -> Result<Finisher, TraceError> {
        let src = File::open(path).map_err(TraceError::io(path))?;
        let (_version, _text, header_end) = read_file_header(&src, path, available)?;
        let (tmp, tmp_path, guard) = temp_beside(path, "finish")?;
        let mut out = BufWriter::with_capacity(1 << 20, tmp);
        let head = header_at_this_version(&src, path, header_end)?;
        out.write_all(&head).map_err(|e| TraceError::Io { path: tmp_path.clone(), source: e })?;
        let reader = src.try_clone().map_err(TraceError::io(path))?;
        Ok(Finisher {
            path: path.to_path_buf(),
            src,
            reader,
            tmp_path,
            guard,
            out,
            stats: FinishStats::default(),
            batch: Vec::new(),
            batch_bytes: 0,
            n_chunks: 0,
            off: header_end,
            header_end,
            advanced_to: header_end,
            written: header_end,
        })
    }

    fn tmp_err(&self) -> impl FnOnce(io::Error) -> TraceError + '_ {
        move |e| TraceError::Io { path: self.tmp_path.clone(), source: e }
    }

    /// Rewrites the records that end within the first `available` bytes.
    /// A record that runs past them, or does not parse, is left for
    /// `finish`, which judges it on the whole file.
    pub fn advance(&mut self, available: u64) -> Result<(), TraceError> {
        self.run(available)?;
        self.advanced_to = self.off;
        Ok(())
    }

    fn run(&mut self, available: u64) -> Result<Next, TraceError> {
        let path = self.path.clone();
        loop {
            let rec = match next_record(&self.src, self.off, available).map_err(TraceError::io(&path))? {
                Ok(Some(r)) => r,
                Ok(None) => return Ok(Next::Done),
                Err(d) => return Ok(Next::Stop(d)),
            };
            if rec.ty == REC_EVENTS && rec.flags & RECORD_FLAG_ZSTD == 0 {
                let mut payload = vec![0u8; rec.payload_len as usize];
                self.src.read_exact_at(&mut payload, rec.payload_offset()).map_err(TraceError::io(&path))?;
                let info = match parse_chunk_header(&rec, &payload) {
                    Ok(info) => info,
                    Err(d) => return Ok(Next::Stop(d)),
                };
                self.n_chunks += 1;
                self.batch_bytes += payload.len();
                let head = ChunkHead {
                    tid: info.tid,
                    n_events: info.n_events,
                    first_tsc: info.first_tsc,
                    last_tsc: info.last_tsc,
                };
                self.batch.push((head, payload));
                if self.batch_bytes >= FINISH_BATCH_BYTES {
                    self.flush_batch()?;
                }
            } else {
                self.flush_batch()?;
                // Verbatim, streamed (header included).
                self.written += copy_record(&mut self.reader, &path, &rec, &mut self.out, &self.tmp_path)?;
            }
            self.off = rec.end();
        }
    }

    fn flush_batch(&mut self) -> Result<(), TraceError> {
        let mut batch = std::mem::take(&mut self.batch);
        let n = write_compressed_batch(&mut batch, &mut self.out, &mut self.stats);
        self.batch = batch;
        self.written += n.map_err(self.tmp_err())?;
        self.batch_bytes = 0;
        Ok(())
    }

    /// Rewrites the rest of the (now complete) file, appends RUNINFO with
    /// `runinfo`, and replaces the trace with the rewrite.
    pub fn finish(mut self, runinfo: &[(String, String)]) -> Result<FinishStats, TraceError> {
        let path = self.path.clone();
        let meta = self.src.metadata().map_err(TraceError::io(&path))?;
        self.stats.bytes_before = meta.len();
        let live = self.advanced_to - self.header_end;
        if let Next::Stop(d) = self.run(meta.len())? {
            self.stats.warnings.push(d.message(self.n_chunks));
        }
        self.flush_batch()?;

        // RUNINFO, with the damage found here: the records after it are gone
        // from the rewritten file, so the report must still be able to say so.
        let live = live.to_string();
        let text = kv_text(
            runinfo
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .chain(self.stats.warnings.iter().map(|w| ("finish_warning", w.as_str())))
                .chain(std::iter::once(("rewritten_while_running", live.as_str())).filter(|_| live != "0")),
        );
        self.written += write_record(&mut self.out, REC_RUNINFO, 0, &[text.as_bytes()]).map_err(self.tmp_err())?;

        drop(self.src);
        drop(self.reader);
        self.guard.install(self.out, Some(meta.permissions()), false, &path)?;
        self.stats.bytes_after = self.written;
        Ok(self.stats)
    }
}

#[cfg(test)]
mod finish_speed {
    /// `MTLAB_FINISH_TRACE=FILE cargo test --release --lib finish_speed -- --ignored --nocapture`:
    /// times finish_trace on a copy of an unfinished trace.
    #[test]
    #[ignore]
    fn finish_speed() {
        let Ok(src) = std::env::var("MTLAB_FINISH_TRACE") else { return };
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.mtl");
        std::fs::copy(&src, &p).unwrap();
        let t = std::time::Instant::now();
        let st = super::finish_trace(&p, &[]).unwrap();
        eprintln!("finish: {:.3} s, {} -> {} bytes", t.elapsed().as_secs_f64(), st.bytes_before, st.bytes_after);
    }
}
