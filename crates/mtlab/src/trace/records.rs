//! Records: finding, checking and writing their headers, the chunk header
//! of EVENTS records and the END record's totals. What the reader, the
//! finisher and the compactor all need, and nothing about events.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::error::TraceError;
use super::format::*;

/// Records larger than this are taken as damage: mtlab never writes one.
pub(crate) const MAX_PAYLOAD: u32 = 1 << 30;

/// The most text a MAPS record holds: the preload library reads
/// /proc/self/maps into a buffer of this size (`maps` in
/// native/preload/writer.c; the test `maps_limit_is_the_writers_buffer`
/// checks that they agree).
pub(crate) const MAX_MAPS_TEXT: u64 = 1 << 20;

/// The most text (decompressed) a record other than EVENTS may hold: what
/// its writer can produce, with room. MAPS: the preload library's buffer;
/// END, STATS, ALLOCSTATS: its 48-byte totals and 1 KiB and 768-byte
/// buffers; RUNINFO: mtlab's own `key=value` pairs, the longest being the
/// names of a process tree's child traces.
pub(crate) fn text_limit(ty: u16) -> u64 {
    match ty {
        REC_MAPS => MAX_MAPS_TEXT,
        REC_RUNINFO => 16 << 20,
        _ => 64 << 10,
    }
}

/// The most bytes a record of type `ty` may take in the file: its text
/// limit, or what zstd may make of that much text when compressed.
pub(crate) fn stored_limit(ty: u16, compressed: bool) -> u64 {
    let limit = text_limit(ty);
    if compressed {
        zstd::zstd_safe::compress_bound(limit as usize) as u64
    } else {
        limit
    }
}

/// "1 MiB", "64 KiB": a limit for a message.
pub(crate) fn size_words(n: u64) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

/// The END record's totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EndRecord {
    pub end_tsc: u64,
    pub end_ns: u64,
    pub events_written: u64,
    pub events_dropped: u64,
    pub chunks_dropped: u64,
    pub stacks_overflowed: u64,
}

/// Why the preload library dropped events, where its writer knows (STATS
/// `write_failed_at`, `size_limited`): what `record` warns of at the end of
/// the run and the report names beside `events_dropped`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct WriteLoss {
    /// Offset of the first record a write could not hold whole (a full disk or quota).
    pub write_failed_at: Option<u64>,
    /// A record would have crossed the file size limit.
    pub size_limited: bool,
}

impl WriteLoss {
    pub fn from_stats(stats: &[(String, String)]) -> WriteLoss {
        let get = |k: &str| stats.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
        WriteLoss {
            write_failed_at: get(super::keys::WRITE_FAILED_AT).and_then(|v| v.parse().ok()),
            size_limited: get(super::keys::SIZE_LIMITED) == Some("1"),
        }
    }

    /// The cause in words, with what to do about it, when one is known.
    pub fn cause(&self) -> Option<String> {
        match (self.write_failed_at, self.size_limited) {
            (Some(at), _) => Some(format!(
                "the file system holding the trace ran out of room (a full disk or quota) after {:.1} MiB of raw trace \
                 had been written to it, and nothing but the final counts was written after that; free space there or \
                 write the trace elsewhere (-o) (`record --live` and `--sample` hold less on disk than a full trace)",
                at as f64 / (1u64 << 20) as f64
            )),
            (None, true) => Some(
                "the file size limit (`ulimit -f`) was reached; raise it, or trace less (`record --sample`, `--live`)".into(),
            ),
            (None, false) => None,
        }
    }

    /// `record`'s warning: how many of the events the process saw were
    /// dropped, and why.
    pub fn dropped_text(&self, dropped: u64, seen: u64) -> String {
        let cause = self.cause().unwrap_or_else(|| {
            "calls mtlab saw but could not write (no memory for a buffer, threads still allocating after the exit \
             flush or after an exec that failed, or a process made without fork handlers); `mtlab report` counts them"
                .into()
        });
        format!("{dropped} of {seen} events ({:.1} %) were dropped: {cause}", 100.0 * dropped as f64 / seen.max(1) as f64)
    }
}

impl EndRecord {
    pub fn from_bytes(b: &[u8]) -> Option<EndRecord> {
        if b.len() < END_PAYLOAD as usize {
            return None;
        }
        let u = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
        Some(EndRecord {
            end_tsc: u(0),
            end_ns: u(1),
            events_written: u(2),
            events_dropped: u(3),
            chunks_dropped: u(4),
            stacks_overflowed: u(5),
        })
    }

    pub fn to_bytes(&self) -> [u8; END_PAYLOAD as usize] {
        let mut b = [0u8; END_PAYLOAD as usize];
        for (i, v) in [
            self.end_tsc,
            self.end_ns,
            self.events_written,
            self.events_dropped,
            self.chunks_dropped,
            self.stacks_overflowed,
        ]
        .into_iter()
        .enumerate()
        {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        b
    }
}

/// One EVENTS record, as found by the index pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkInfo {
    /// File offset of the record header.
    pub offset: u64,
    /// Record payload length (24-byte chunk header included).
    pub payload_len: u32,
    /// The event bytes are one zstd frame.
    pub compressed: bool,
    /// ... holding the column layout (`columns.rs`) rather than rows.
    pub columns: bool,
    /// The CRC-32 of the event bytes, when the record carries checksums
    /// (`RECORD_FLAG_CRC`; its framing was checked by the index pass).
    pub body_crc: Option<u32>,
    pub tid: u32,
    pub n_events: u32,
    pub first_tsc: u64,
    pub last_tsc: u64,
}

impl ChunkInfo {
    /// The chunk's event bytes in the file: (offset, length), between the
    /// chunk header and the checksums.
    pub fn event_bytes(&self) -> (u64, usize) {
        let trailer = if self.body_crc.is_some() { CHECK_TRAILER } else { 0 };
        let len = (self.payload_len as usize).saturating_sub((EVENTS_HEADER + trailer) as usize);
        (self.offset + (RECORD_HEADER + EVENTS_HEADER) as u64, len)
    }
}

/// Finds EVENTS chunks the writer wrote twice. A signal handler that exits
/// or jumps out, or an asynchronous cancel, can stop the writer's flush just
/// after its write and before it empties the buffer; the writer then notices
/// (STATS `flushes_resumed`) except in a window of a few instructions, where
/// the next flush writes the same chunk again. A repeat has the same thread,
/// event count, first and last time stamps and length as a chunk before it
/// (a thread's time stamps only grow, so two real chunks never share them);
/// it is read once. Only the writer's plain chunks are checked: mtlab's own
/// rewrites are made from chunks already checked.
#[derive(Debug, Default)]
pub(crate) struct RepeatedChunks {
    seen: rustc_hash::FxHashSet<(u32, u32, u64, u64, u32)>,
    pub repeats: u64,
}

impl RepeatedChunks {
    /// True when `c` repeats a chunk seen before (and counts it).
    pub fn is_repeat(&mut self, c: &ChunkInfo) -> bool {
        if c.compressed || c.n_events == 0 || c.first_tsc == 0 {
            return false;
        }
        let repeat = !self.seen.insert((c.tid, c.n_events, c.first_tsc, c.last_tsc, c.payload_len));
        self.repeats += repeat as u64;
        repeat
    }

    /// What the reader says of the repeats it dropped, if any.
    pub fn warning(&self) -> Option<String> {
        (self.repeats > 0).then(|| {
            format!(
                "{} chunk{} of events appeared twice in the file (a flush stopped by a signal handler that exited or \
                 jumped out, or by a cancellation, after its write) and {} read once",
                self.repeats,
                if self.repeats == 1 { "" } else { "s" },
                if self.repeats == 1 { "was" } else { "were" }
            )
        })
    }
}

/// A record header found at `offset`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecHdr {
    pub offset: u64,
    pub payload_len: u32,
    pub ty: u16,
    pub flags: u16,
}

impl RecHdr {
    pub fn payload_offset(&self) -> u64 {
        self.offset + RECORD_HEADER as u64
    }
    pub fn end(&self) -> u64 {
        self.payload_offset() + self.payload_len as u64
    }
}

/// Why reading records stopped early.
#[derive(Debug, Clone)]
pub(crate) enum Damage {
    Truncated {
        offset: u64,
        record_len: u64,
        file_len: u64,
    },
    Bad {
        offset: u64,
        reason: String,
    },
}

impl Damage {
    pub fn offset(&self) -> u64 {
        match self {
            Damage::Truncated { offset, .. } | Damage::Bad { offset, .. } => *offset,
        }
    }

    /// What is wrong, without where.
    pub fn reason(&self) -> String {
        match self {
            Damage::Truncated { record_len, file_len, .. } => {
                format!("a record of {record_len} bytes runs past the end of the file ({file_len} bytes)")
            }
            Damage::Bad { reason, .. } => reason.clone(),
        }
    }

    pub fn message(&self, chunks_before: usize) -> String {
        let using = if chunks_before == 1 {
            "using the 1 chunk before it".to_string()
        } else {
            format!("using the {chunks_before} chunks before it")
        };
        match self {
            Damage::Truncated {
                offset,
                record_len,
                file_len,
            } => format!(
                "trace truncated at byte {offset}: record of {record_len} bytes runs past the end \
                 (file is {file_len} bytes); {using}"
            ),
            Damage::Bad { offset, reason } => format!("trace damaged at byte {offset}: {reason}; {using}"),
        }
    }
}

/// Reads and checks the file header. Returns the version, the header text
/// and the offset of the first record.
pub(crate) fn read_file_header(file: &File, path: &Path, file_len: u64) -> Result<(u32, String, u64), TraceError> {
    let not_a_trace = || TraceError::NotATrace {
        path: path.to_path_buf(),
    };
    if file_len < FILE_HEADER_FIXED as u64 {
        return Err(not_a_trace());
    }
    let mut fixed = [0u8; FILE_HEADER_FIXED as usize];
    file.read_exact_at(&mut fixed, 0).map_err(TraceError::io(path))?;
    if fixed[..8] != TRACE_MAGIC {
        return Err(not_a_trace());
    }
    let version = u32::from_le_bytes(fixed[8..12].try_into().unwrap());
    let text_len = u32::from_le_bytes(fixed[12..16].try_into().unwrap()) as u64;
    if version > TRACE_VERSION {
        return Err(TraceError::NewerVersion {
            path: path.to_path_buf(),
            found: version,
            supported: TRACE_VERSION,
        });
    }
    if version == 0 {
        return Err(TraceError::BadHeader {
            path: path.to_path_buf(),
            reason: "format version 0 does not exist".into(),
        });
    }
    if FILE_HEADER_FIXED as u64 + text_len > file_len {
        return Err(TraceError::BadHeader {
            path: path.to_path_buf(),
            reason: format!("its text of {text_len} bytes runs past the end of the file ({file_len} bytes)"),
        });
    }
    let mut text = vec![0u8; text_len as usize];
    file.read_exact_at(&mut text, FILE_HEADER_FIXED as u64)
        .map_err(TraceError::io(path))?;
    let text = String::from_utf8(text).map_err(|e| TraceError::BadHeader {
        path: path.to_path_buf(),
        reason: format!("its text is not UTF-8 ({e})"),
    })?;
    Ok((version, text, FILE_HEADER_FIXED as u64 + text_len))
}

/// Reads the record header at `offset`: `Ok(None)` at a clean end of file.
pub(crate) fn next_record(file: &impl std::os::unix::fs::FileExt, offset: u64, file_len: u64) -> io::Result<Result<Option<RecHdr>, Damage>> {
    if offset >= file_len {
        return Ok(Ok(None));
    }
    if offset + RECORD_HEADER as u64 > file_len {
        return Ok(Err(Damage::Truncated {
            offset,
            record_len: RECORD_HEADER as u64,
            file_len,
        }));
    }
    let mut b = [0u8; RECORD_HEADER as usize];
    file.read_exact_at(&mut b, offset)?;
    let rec = RecHdr {
        offset,
        payload_len: u32::from_le_bytes(b[0..4].try_into().unwrap()),
        ty: u16::from_le_bytes(b[4..6].try_into().unwrap()),
        flags: u16::from_le_bytes(b[6..8].try_into().unwrap()),
    };
    if rec.end() > file_len {
        return Ok(Err(Damage::Truncated {
            offset,
            record_len: RECORD_HEADER as u64 + rec.payload_len as u64,
            file_len,
        }));
    }
    if rec.payload_len > MAX_PAYLOAD {
        return Ok(Err(Damage::Bad {
            offset,
            reason: format!("record of {} bytes is larger than mtlab ever writes", rec.payload_len),
        }));
    }
    Ok(Ok(Some(rec)))
}

/// Checks an EVENTS record's 24-byte chunk header (`head` holds at least the
/// first 24 payload bytes, or fewer when the payload is that short).
pub(crate) fn parse_chunk_header(rec: &RecHdr, head: &[u8]) -> Result<ChunkInfo, Damage> {
    if (rec.payload_len as usize) < EVENTS_HEADER as usize || head.len() < EVENTS_HEADER as usize {
        return Err(Damage::Bad {
            offset: rec.offset,
            reason: format!(
                "EVENTS record of {} bytes is shorter than its {EVENTS_HEADER}-byte chunk header",
                rec.payload_len
            ),
        });
    }
    let u32_at = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().unwrap());
    let u64_at = |i: usize| u64::from_le_bytes(head[i..i + 8].try_into().unwrap());
    let info = ChunkInfo {
        offset: rec.offset,
        payload_len: rec.payload_len,
        compressed: rec.flags & RECORD_FLAG_ZSTD != 0,
        columns: rec.flags & RECORD_FLAG_ZSTD != 0 && rec.flags & RECORD_FLAG_COLUMNS != 0,
        body_crc: None,
        tid: u32_at(0),
        n_events: u32_at(4),
        first_tsc: u64_at(8),
        last_tsc: u64_at(16),
    };
    if info.first_tsc > info.last_tsc {
        return Err(Damage::Bad {
            offset: rec.offset,
            reason: format!(
                "EVENTS chunk of thread {} says its first_tsc {} is after its last_tsc {}",
                info.tid, info.first_tsc, info.last_tsc
            ),
        });
    }
    Ok(info)
}

/// The framing CRC of a checked EVENTS record: over its 8-byte record
/// header and its 24-byte chunk header.
pub(crate) fn framing_crc(rec: &RecHdr, chunk_head: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&record_header(rec.ty, rec.flags, rec.payload_len as usize));
    h.update(chunk_head);
    h.finalize()
}

/// Checks a checked EVENTS record's framing against its trailer (the last
/// 8 payload bytes); returns the body CRC to check when the events are read.
pub(crate) fn check_framing(rec: &RecHdr, chunk_head: &[u8], trailer: &[u8]) -> Result<u32, Damage> {
    let bad = |reason: String| Damage::Bad { offset: rec.offset, reason };
    if (rec.payload_len as usize) < (EVENTS_HEADER + CHECK_TRAILER) as usize || trailer.len() != CHECK_TRAILER as usize {
        return Err(bad(format!("EVENTS record of {} bytes is too short for its chunk header and checksums", rec.payload_len)));
    }
    let want = u32::from_le_bytes(trailer[0..4].try_into().unwrap());
    if framing_crc(rec, chunk_head) != want {
        return Err(bad("its record or chunk header does not match its checksum".into()));
    }
    Ok(u32::from_le_bytes(trailer[4..8].try_into().unwrap()))
}

/// Writes one EVENTS record with checksums (`RECORD_FLAG_CRC`), as every
/// rewrite of a trace does; its size in the file.
pub(crate) fn write_checked_events(out: &mut impl Write, flags: u16, chunk_head: &[u8], body: &[u8]) -> io::Result<u64> {
    let flags = flags | RECORD_FLAG_CRC;
    let len = chunk_head.len() + body.len() + CHECK_TRAILER as usize;
    let rec = RecHdr { offset: 0, payload_len: len as u32, ty: REC_EVENTS, flags };
    let mut trailer = [0u8; CHECK_TRAILER as usize];
    trailer[0..4].copy_from_slice(&framing_crc(&rec, chunk_head).to_le_bytes());
    trailer[4..8].copy_from_slice(&crc32fast::hash(body).to_le_bytes());
    write_record(out, REC_EVENTS, flags, &[chunk_head, body, &trailer])
}

/// The 8-byte header of a record of `len` payload bytes.
pub(crate) fn record_header(ty: u16, flags: u16, len: usize) -> [u8; RECORD_HEADER as usize] {
    let mut h = [0u8; RECORD_HEADER as usize];
    h[0..4].copy_from_slice(&(len as u32).to_le_bytes());
    h[4..6].copy_from_slice(&ty.to_le_bytes());
    h[6..8].copy_from_slice(&flags.to_le_bytes());
    h
}

/// An EVENTS payload's 24-byte chunk header: thread, event count, first
/// and last time stamps (mtlab_trace.h).
pub(crate) fn chunk_header(tid: u32, n_events: u32, first_tsc: u64, last_tsc: u64) -> [u8; EVENTS_HEADER as usize] {
    let mut h = [0u8; EVENTS_HEADER as usize];
    h[0..4].copy_from_slice(&tid.to_le_bytes());
    h[4..8].copy_from_slice(&n_events.to_le_bytes());
    h[8..16].copy_from_slice(&first_tsc.to_le_bytes());
    h[16..24].copy_from_slice(&last_tsc.to_le_bytes());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_limit_is_the_writers_buffer() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../native/preload/writer.c");
        let src = std::fs::read_to_string(path).unwrap();
        let decl = src.lines().find_map(|l| l.trim().strip_prefix("static char maps[")).expect("writer.c declares its maps buffer");
        let size = decl.split(']').next().unwrap().trim();
        let bytes = match size.split_once("<<") {
            Some((a, b)) => a.trim().parse::<u64>().unwrap() << b.trim().parse::<u32>().unwrap(),
            None => size.parse().unwrap(),
        };
        assert_eq!(bytes, MAX_MAPS_TEXT, "writer.c's maps buffer is {size}");
        assert_eq!(size_words(MAX_MAPS_TEXT), "1 MiB");
        assert_eq!(size_words(48), "48 bytes");
    }

    #[test]
    fn a_write_loss_is_read_from_the_stats_the_writer_spells() {
        let kv = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>();
        assert_eq!(WriteLoss::from_stats(&kv(&[("samples", "3")])), WriteLoss::default());
        assert_eq!(WriteLoss::default().cause(), None);
        let full = WriteLoss::from_stats(&kv(&[("write_failed_at", "3145728"), ("size_limited", "1")]));
        assert_eq!(full, WriteLoss { write_failed_at: Some(3 << 20), size_limited: true });
        // The full disk is named first: nothing was written after it.
        let cause = full.cause().unwrap();
        assert!(cause.starts_with("the file system holding the trace ran out of room") && cause.contains("3.0 MiB"), "{cause}");
        assert!(WriteLoss::default().dropped_text(5, 100).starts_with("5 of 100 events (5.0 %) were dropped: calls mtlab saw"));
        let limit = WriteLoss::from_stats(&kv(&[("size_limited", "1")])).cause().unwrap();
        assert!(limit.starts_with("the file size limit (`ulimit -f`)"), "{limit}");
        // The keys are writer.c's own.
        let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../native/preload/writer.c")).unwrap();
        for key in [super::super::keys::WRITE_FAILED_AT, super::super::keys::SIZE_LIMITED] {
            assert!(src.contains(&format!("\"{key}=")), "writer.c writes {key}");
        }
    }
}
