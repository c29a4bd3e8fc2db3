//! The numbers of the trace format, mirroring `native/include/mtlab_trace.h`.
//!
//! docs/trace-format.md is the normative description. The test
//! `format_constants_match_header` parses the C header and fails when a
//! number here and there disagree.

/// File magic: the first 8 bytes of every trace.
pub const TRACE_MAGIC: [u8; 8] = *b"MTLABTR\0";
/// The newest format version this mtlab reads and writes: versions 3 to 9
/// are mtlab's rewrites (`finish`, `compact`), where every EVENTS record
/// carries checksums (`RECORD_FLAG_CRC`); version 4's column chunks are in
/// layout 2, version 5's in layout 3 (the timed calls' cycles coded by the
/// gaps between them, and solo chunks' time stamps rounded), version 6's
/// in layout 4 (`columns::COLUMNS_LAYOUT`: a thread's predictions run on
/// from one record to the next), version 7's in layout 5 (the preload
/// library's timing draws replayed, `draws`), version 8's in layout 6
/// (stacks coded in the context of the previous event's, `predict`),
/// version 9's in layout 7 (an allocation guessed at the top's end and at
/// its class's end plus the gap), which older readers do not know.
/// Version 10 is layout 7 with the timed calls' cycles sorted per function
/// within groups of a record's events under sampled timing
/// (`cycle_groups`): read as version 9, but a call's cycles are no longer
/// its own.
pub const TRACE_VERSION: u32 = 10;
/// The first version of mtlab's rewrites (checksummed chunks).
pub const FIRST_REWRITTEN_VERSION: u32 = 3;
/// The version the preload library writes (raw chunks, no checksums).
pub const PRELOAD_TRACE_VERSION: u32 = 2;

/// magic[8], u32 version, u32 text_len.
pub const FILE_HEADER_FIXED: u32 = 16;

/// u32 payload_len, u16 type, u16 flags.
pub const RECORD_HEADER: u32 = 8;
/// The payload is zstd-compressed (EVENTS: the bytes after the 24-byte chunk header).
pub const RECORD_FLAG_ZSTD: u16 = 0x1;
/// EVENTS only, with ZSTD: the event bytes are in the column layout (`columns.rs`).
pub const RECORD_FLAG_COLUMNS: u16 = 0x2;
/// EVENTS only: the payload ends with two CRC-32s (`CHECK_TRAILER`), of the
/// record's framing (its 8-byte header and 24-byte chunk header) and of the
/// event bytes between them. Always set in version 3 files.
pub const RECORD_FLAG_CRC: u16 = 0x4;
/// EVENTS, raw: the preload library flushed the chunk while the process had
/// only ever had one thread, so no other thread's event lies within its
/// time, and the rewrite may round its stamps (`finish`).
pub const RECORD_FLAG_SOLO: u16 = 0x8;
/// u32 framing CRC, u32 body CRC.
pub const CHECK_TRAILER: u32 = 8;

/// The watermark page shared with the traced program (see mtlab_trace.h).
pub const WATERMARK_SIZE: u32 = 20480;
pub const WATERMARK_MAGIC: u64 = 0x004d_5742_4c41_544d;
pub const WATERMARK_OFF_MAGIC: u32 = 8;
pub const WATERMARK_OFF_PROGRESS_USED: u32 = 16;
pub const WATERMARK_OFF_PROGRESS_WANTED: u32 = 24;
/// OFF_PROGRESS_WANTED's values: `record --live`'s reader of the horizon;
/// `record`'s copies of quiet threads' buffers (the slots only).
pub const PROGRESS_HORIZON: u64 = 1;
pub const PROGRESS_SLOTS_ONLY: u64 = 2;
pub const WATERMARK_OFF_PID: u32 = 32;
pub const WATERMARK_OFF_FILE_DEV: u32 = 40;
pub const WATERMARK_OFF_FILE_INO: u32 = 48;
pub const WATERMARK_OFF_START_TSC: u32 = 56;
pub const WATERMARK_OFF_PROGRESS: u32 = 64;
pub const WATERMARK_PROGRESS_SLOTS: u32 = (WATERMARK_OFF_PROGRESS_BUFS - WATERMARK_OFF_PROGRESS) / 32;
pub const WATERMARK_OFF_PROGRESS_BUFS: u32 = 16384;
/// Offsets in the preload's event buffer (`struct mtlab_buf`), where
/// `record --live` copies a quiet thread's events from (mtlab_trace.h).
pub const BUF_OFF_TID: u64 = 16;
pub const BUF_OFF_N_EVENTS: u64 = 20;
pub const BUF_OFF_FIRST_TSC: u64 = 24;
pub const BUF_OFF_PREV_TSC: u64 = 32;
pub const BUF_OFF_LEN: u64 = 48;
pub const BUF_OFF_BUSY: u64 = 56;
pub const BUF_OFF_GEN: u64 = 60;
pub const BUF_OFF_EVENTS: u64 = 136;

pub const REC_EVENTS: u16 = 1;
pub const REC_MAPS: u16 = 2;
pub const REC_END: u16 = 3;
pub const REC_RUNINFO: u16 = 4;
pub const REC_STATS: u16 = 5;
/// The heap manager's own figures read after `mtlab ctl dump` (key=value text).
pub const REC_ALLOCSTATS: u16 = 6;
/// A range readers skip (writer.c's REC_SKIP: a chunk that could not be
/// written in full; `Finisher::releasing`: raw records punched out).
pub const REC_SKIP: u16 = 0x7fff;

/// u32 tid, u32 n_events, u64 first_tsc, u64 last_tsc.
pub const EVENTS_HEADER: u32 = 24;
/// Kind bits of an event's first byte.
pub const KIND_MASK: u8 = 0x1f;
/// Flag bits of an event's first byte.
pub const EVF_MASK: u8 = 0xe0;

pub const EV_STACK_DEF: u8 = 0;
pub const EV_MALLOC: u8 = 1;
pub const EV_FREE: u8 = 2;
pub const EV_CALLOC: u8 = 3;
pub const EV_REALLOC: u8 = 4;
pub const EV_REALLOCARRAY: u8 = 5;
pub const EV_POSIX_MEMALIGN: u8 = 6;
pub const EV_ALIGNED_ALLOC: u8 = 7;
pub const EV_MEMALIGN: u8 = 8;
pub const EV_VALLOC: u8 = 9;
pub const EV_PVALLOC: u8 = 10;
pub const EV_MMAP: u8 = 11;
pub const EV_MMAP64: u8 = 12;
pub const EV_MUNMAP: u8 = 13;
pub const EV_MREMAP: u8 = 14;
pub const EV_BRK: u8 = 15;
pub const EV_SBRK: u8 = 16;
pub const EV_BRK_SEEN: u8 = 17;
pub const EV_ARENA_HEAP: u8 = 18;
pub const EV_SAMPLE: u8 = 19;
pub const EV_SAMPLE_FREE: u8 = 20;
pub const EV_NEW: u8 = 21;
pub const EV_DELETE: u8 = 22;
pub const EV_USABLE_SIZE: u8 = 23;
pub const EV_KIND_COUNT: u8 = 24;

/// Bits of operator new's and delete's forms (EV_NEW, EV_DELETE).
pub const NEW_ARRAY: u64 = 0x1;
pub const NEW_NOTHROW: u64 = 0x2;
pub const NEW_ALIGNED: u64 = 0x4;
pub const NEW_FORMS: u64 = 8;
pub const DELETE_SIZED: u64 = 0x8;
pub const DELETE_FORMS: u64 = 16;

pub const EVF_CHUNK_MMAPPED: u8 = 0x20;
pub const EVF_IN_ALLOCATOR: u8 = 0x40;
pub const EVF_FAILED: u8 = 0x80;

/// END payload: six u64s.
pub const END_PAYLOAD: u32 = 48;

/// The sampler's control page (`/dev/shm/mtlab-PID`), see mtlab_trace.h.
pub const CTL_MAGIC: u64 = 0x4c54_4342_414c_544d;
pub const CTL_VERSION: u32 = 3;
pub const CTL_SIZE: u32 = 4096;
pub const CTL_ON: u32 = 0x1;
pub const CTL_ACTIVE: u32 = 0x2;
pub const CTL_LIVE: u32 = 0x4;
pub const CTL_DUMP_VALUE: u32 = 0x6d74_6c64;
pub const CTL_APPLY_VALUE: u32 = 0x6d74_6c61;
pub const CTL_ROUTE_ON: u32 = 0x1;
pub const CTL_ROUTE_ALLOC: u32 = 0x2;
pub const CTL_ROUTE_FREE: u32 = 0x4;
pub const CTL_OFF_STATE: u32 = 16;
pub const CTL_OFF_SIGNAL: u32 = 20;
pub const CTL_OFF_INTERVAL: u32 = 24;
pub const CTL_OFF_DUMP_SEQ: u32 = 64;
pub const CTL_OFF_DUMP_DONE: u32 = 72;
pub const CTL_OFF_SAMPLES: u32 = 80;
pub const CTL_OFF_ROUTED: u32 = 88;
pub const CTL_OFF_STATS_DONE: u32 = 96;
pub const CTL_OFF_CTL_SEQ: u32 = 104;
pub const CTL_OFF_CTL_DONE: u32 = 108;
pub const CTL_OFF_WAKE: u32 = 112;
pub const CTL_WAKE_FUTEX: u32 = 1;
pub const CTL_WAKE_SIGNAL: u32 = 2;
pub const CTL_OFF_PATH: u32 = 128;

/// Name of an event kind, for messages.
pub fn kind_name(kind: u8) -> &'static str {
    match kind {
        EV_STACK_DEF => "STACK_DEF",
        EV_MALLOC => "MALLOC",
        EV_FREE => "FREE",
        EV_CALLOC => "CALLOC",
        EV_REALLOC => "REALLOC",
        EV_REALLOCARRAY => "REALLOCARRAY",
        EV_POSIX_MEMALIGN => "POSIX_MEMALIGN",
        EV_ALIGNED_ALLOC => "ALIGNED_ALLOC",
        EV_MEMALIGN => "MEMALIGN",
        EV_VALLOC => "VALLOC",
        EV_PVALLOC => "PVALLOC",
        EV_MMAP => "MMAP",
        EV_MMAP64 => "MMAP64",
        EV_MUNMAP => "MUNMAP",
        EV_MREMAP => "MREMAP",
        EV_BRK => "BRK",
        EV_SBRK => "SBRK",
        EV_BRK_SEEN => "BRK_SEEN",
        EV_ARENA_HEAP => "ARENA_HEAP",
        EV_SAMPLE => "SAMPLE",
        EV_SAMPLE_FREE => "SAMPLE_FREE",
        EV_NEW => "NEW",
        EV_DELETE => "DELETE",
        EV_USABLE_SIZE => "USABLE_SIZE",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::event::{FLAG_CHUNK_MMAPPED, FLAG_FAILED, FLAG_IN_ALLOCATOR};
    use std::collections::BTreeMap;

    /// Every numeric constant of the C header, by its name without `MTLAB_`.
    fn rust_constants() -> BTreeMap<&'static str, u64> {
        let list: &[(&str, u64)] = &[
            ("TRACE_VERSION", PRELOAD_TRACE_VERSION as u64),
            ("FILE_HEADER_FIXED", FILE_HEADER_FIXED as u64),
            ("RECORD_HEADER", RECORD_HEADER as u64),
            ("RECORD_FLAG_ZSTD", RECORD_FLAG_ZSTD as u64),
            ("RECORD_FLAG_COLUMNS", RECORD_FLAG_COLUMNS as u64),
            ("RECORD_FLAG_SOLO", RECORD_FLAG_SOLO as u64),
            ("WATERMARK_SIZE", WATERMARK_SIZE as u64),
            ("WATERMARK_MAGIC", WATERMARK_MAGIC),
            ("WATERMARK_OFF_MAGIC", WATERMARK_OFF_MAGIC as u64),
            ("WATERMARK_OFF_PROGRESS_USED", WATERMARK_OFF_PROGRESS_USED as u64),
            ("WATERMARK_OFF_PROGRESS", WATERMARK_OFF_PROGRESS as u64),
            ("WATERMARK_OFF_PID", WATERMARK_OFF_PID as u64),
            ("WATERMARK_OFF_FILE_DEV", WATERMARK_OFF_FILE_DEV as u64),
            ("WATERMARK_OFF_FILE_INO", WATERMARK_OFF_FILE_INO as u64),
            ("WATERMARK_OFF_START_TSC", WATERMARK_OFF_START_TSC as u64),
            ("WATERMARK_OFF_PROGRESS_WANTED", WATERMARK_OFF_PROGRESS_WANTED as u64),
            ("PROGRESS_HORIZON", PROGRESS_HORIZON),
            ("PROGRESS_SLOTS_ONLY", PROGRESS_SLOTS_ONLY),
            ("WATERMARK_PROGRESS_SLOTS", WATERMARK_PROGRESS_SLOTS as u64),
            ("WATERMARK_OFF_PROGRESS_BUFS", WATERMARK_OFF_PROGRESS_BUFS as u64),
            ("BUF_OFF_TID", BUF_OFF_TID),
            ("BUF_OFF_N_EVENTS", BUF_OFF_N_EVENTS),
            ("BUF_OFF_FIRST_TSC", BUF_OFF_FIRST_TSC),
            ("BUF_OFF_PREV_TSC", BUF_OFF_PREV_TSC),
            ("BUF_OFF_LEN", BUF_OFF_LEN),
            ("BUF_OFF_BUSY", BUF_OFF_BUSY),
            ("BUF_OFF_GEN", BUF_OFF_GEN),
            ("BUF_OFF_EVENTS", BUF_OFF_EVENTS),
            ("REC_EVENTS", REC_EVENTS as u64),
            ("REC_MAPS", REC_MAPS as u64),
            ("REC_END", REC_END as u64),
            ("REC_RUNINFO", REC_RUNINFO as u64),
            ("EVENTS_HEADER", EVENTS_HEADER as u64),
            ("KIND_MASK", KIND_MASK as u64),
            ("EV_STACK_DEF", EV_STACK_DEF as u64),
            ("EV_MALLOC", EV_MALLOC as u64),
            ("EV_FREE", EV_FREE as u64),
            ("EV_CALLOC", EV_CALLOC as u64),
            ("EV_REALLOC", EV_REALLOC as u64),
            ("EV_REALLOCARRAY", EV_REALLOCARRAY as u64),
            ("EV_POSIX_MEMALIGN", EV_POSIX_MEMALIGN as u64),
            ("EV_ALIGNED_ALLOC", EV_ALIGNED_ALLOC as u64),
            ("EV_MEMALIGN", EV_MEMALIGN as u64),
            ("EV_VALLOC", EV_VALLOC as u64),
            ("EV_PVALLOC", EV_PVALLOC as u64),
            ("EV_MMAP", EV_MMAP as u64),
            ("EV_MMAP64", EV_MMAP64 as u64),
            ("EV_MUNMAP", EV_MUNMAP as u64),
            ("EV_MREMAP", EV_MREMAP as u64),
            ("EV_BRK", EV_BRK as u64),
            ("EV_SBRK", EV_SBRK as u64),
            ("EV_BRK_SEEN", EV_BRK_SEEN as u64),
            ("EV_ARENA_HEAP", EV_ARENA_HEAP as u64),
            ("EV_SAMPLE", EV_SAMPLE as u64),
            ("EV_SAMPLE_FREE", EV_SAMPLE_FREE as u64),
            ("EV_NEW", EV_NEW as u64),
            ("EV_DELETE", EV_DELETE as u64),
            ("EV_USABLE_SIZE", EV_USABLE_SIZE as u64),
            ("EV_KIND_COUNT", EV_KIND_COUNT as u64),
            ("NEW_ARRAY", NEW_ARRAY),
            ("NEW_NOTHROW", NEW_NOTHROW),
            ("NEW_ALIGNED", NEW_ALIGNED),
            ("NEW_FORMS", NEW_FORMS),
            ("DELETE_SIZED", DELETE_SIZED),
            ("DELETE_FORMS", DELETE_FORMS),
            ("REC_STATS", REC_STATS as u64),
            ("REC_ALLOCSTATS", REC_ALLOCSTATS as u64),
            ("CTL_MAGIC", CTL_MAGIC),
            ("CTL_VERSION", CTL_VERSION as u64),
            ("CTL_SIZE", CTL_SIZE as u64),
            ("CTL_ON", CTL_ON as u64),
            ("CTL_ACTIVE", CTL_ACTIVE as u64),
            ("CTL_LIVE", CTL_LIVE as u64),
            ("CTL_DUMP_VALUE", CTL_DUMP_VALUE as u64),
            ("CTL_APPLY_VALUE", CTL_APPLY_VALUE as u64),
            ("CTL_ROUTE_ON", CTL_ROUTE_ON as u64),
            ("CTL_ROUTE_ALLOC", CTL_ROUTE_ALLOC as u64),
            ("CTL_ROUTE_FREE", CTL_ROUTE_FREE as u64),
            ("CTL_OFF_STATS_DONE", CTL_OFF_STATS_DONE as u64),
            ("CTL_OFF_STATE", CTL_OFF_STATE as u64),
            ("CTL_OFF_SIGNAL", CTL_OFF_SIGNAL as u64),
            ("CTL_OFF_INTERVAL", CTL_OFF_INTERVAL as u64),
            ("CTL_OFF_DUMP_SEQ", CTL_OFF_DUMP_SEQ as u64),
            ("CTL_OFF_DUMP_DONE", CTL_OFF_DUMP_DONE as u64),
            ("CTL_OFF_SAMPLES", CTL_OFF_SAMPLES as u64),
            ("CTL_OFF_ROUTED", CTL_OFF_ROUTED as u64),
            ("CTL_OFF_PATH", CTL_OFF_PATH as u64),
            ("CTL_OFF_CTL_SEQ", CTL_OFF_CTL_SEQ as u64),
            ("CTL_OFF_CTL_DONE", CTL_OFF_CTL_DONE as u64),
            ("CTL_OFF_WAKE", CTL_OFF_WAKE as u64),
            ("CTL_WAKE_FUTEX", CTL_WAKE_FUTEX as u64),
            ("CTL_WAKE_SIGNAL", CTL_WAKE_SIGNAL as u64),
            ("EVF_CHUNK_MMAPPED", EVF_CHUNK_MMAPPED as u64),
            ("EVF_IN_ALLOCATOR", EVF_IN_ALLOCATOR as u64),
            ("EVF_FAILED", EVF_FAILED as u64),
            ("END_PAYLOAD", END_PAYLOAD as u64),
        ];
        list.iter().copied().collect()
    }

    fn parse_number(s: &str) -> Option<u64> {
        let s = s.trim().trim_end_matches(['u', 'U', 'l', 'L']);
        if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
            u64::from_str_radix(hex, 16).ok()
        } else {
            s.parse().ok()
        }
    }

    /// Strips `/* ... */` and `// ...` comments.
    fn strip_comments(src: &str) -> String {
        let mut out = String::with_capacity(src.len());
        let mut rest = src;
        loop {
            let block = rest.find("/*");
            let line = rest.find("//");
            match (block, line) {
                (Some(b), l) if l.is_none_or(|l| b < l) => {
                    out.push_str(&rest[..b]);
                    match rest[b + 2..].find("*/") {
                        Some(e) => rest = &rest[b + 2 + e + 2..],
                        None => break,
                    }
                }
                (_, Some(l)) => {
                    out.push_str(&rest[..l]);
                    match rest[l..].find('\n') {
                        Some(e) => rest = &rest[l + e..],
                        None => break,
                    }
                }
                _ => {
                    out.push_str(rest);
                    break;
                }
            }
        }
        out
    }

    #[test]
    fn format_constants_match_header() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../native/include/mtlab_trace.h");
        let src = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
        let src = strip_comments(&src);
        let rust = rust_constants();
        let mut seen = BTreeMap::new();
        let mut magic_seen = false;

        for line in src.lines() {
            let line = line.trim();
            if let Some(rest) = line.strip_prefix("#define") {
                let mut parts = rest.split_whitespace();
                let Some(name) = parts.next() else { continue };
                let Some(name) = name.strip_prefix("MTLAB_") else {
                    continue;
                };
                let value: String = parts.collect::<Vec<_>>().join(" ");
                if value.is_empty() {
                    continue; // include guard
                }
                if name == "TRACE_MAGIC" {
                    let inner = value.trim().trim_matches('"').replace("\\0", "\0");
                    assert_eq!(
                        inner.as_bytes(),
                        &TRACE_MAGIC[..],
                        "MTLAB_TRACE_MAGIC differs from TRACE_MAGIC"
                    );
                    magic_seen = true;
                    continue;
                }
                let n =
                    parse_number(&value).unwrap_or_else(|| panic!("cannot parse the value of MTLAB_{name}: {value:?}"));
                seen.insert(name.to_string(), n);
            } else {
                // enum members: `MTLAB_X = N,`
                for piece in line.split(',') {
                    let piece = piece.trim();
                    let Some((name, value)) = piece.split_once('=') else {
                        continue;
                    };
                    let Some(name) = name.trim().strip_prefix("MTLAB_") else {
                        continue;
                    };
                    let n = parse_number(value)
                        .unwrap_or_else(|| panic!("cannot parse the value of MTLAB_{name}: {value:?}"));
                    seen.insert(name.to_string(), n);
                }
            }
        }

        assert!(magic_seen, "MTLAB_TRACE_MAGIC not found in {path}");
        assert!(seen.len() >= 30, "parsed only {} constants from {path}", seen.len());
        for (name, value) in &seen {
            match rust.get(name.as_str()) {
                Some(r) => assert_eq!(r, value, "MTLAB_{name} is {value} in the C header but {r} in format.rs"),
                None => panic!("MTLAB_{name} = {value} in the C header has no constant in format.rs"),
            }
        }
        for name in rust.keys() {
            assert!(
                seen.contains_key(*name),
                "format.rs has {name} but the C header has no MTLAB_{name}"
            );
        }

        // The decoded-event flag bits in event.rs are the same numbers.
        assert_eq!(FLAG_CHUNK_MMAPPED, EVF_CHUNK_MMAPPED);
        assert_eq!(FLAG_IN_ALLOCATOR, EVF_IN_ALLOCATOR);
        assert_eq!(FLAG_FAILED, EVF_FAILED);
        assert_eq!(EVF_MASK, EVF_CHUNK_MMAPPED | EVF_IN_ALLOCATOR | EVF_FAILED);
        assert_eq!(EVF_MASK & KIND_MASK, 0);
        assert_eq!(EVF_MASK | KIND_MASK, 0xff);
    }
}
