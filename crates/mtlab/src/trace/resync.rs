//! Finding the next intact record after damage, in a checksummed (version 3)
//! trace: a damaged length field leaves no way to step to the next record,
//! but every EVENTS record's framing carries a CRC, so the next offset where
//! a record header and its chunk header match their checksum is a record
//! boundary (a false match has odds of 2⁻³² per candidate that already looks
//! like a record). The records that end the file (MAPS, END, RUNINFO, STATS)
//! have no checksum: a candidate among them counts when the chain of record
//! headers from it ends exactly at the end of the file.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use super::format::*;
use super::records::{check_framing, RecHdr};

/// Bytes read per step of the scan.
const WINDOW: usize = 1 << 20;
/// Most records a tail of the file may hold for a candidate there to count.
const MAX_TAIL_RECORDS: usize = 64;

fn header_at(b: &[u8], offset: u64) -> RecHdr {
    RecHdr {
        offset,
        payload_len: u32::from_le_bytes(b[0..4].try_into().unwrap()),
        ty: u16::from_le_bytes(b[4..6].try_into().unwrap()),
        flags: u16::from_le_bytes(b[6..8].try_into().unwrap()),
    }
}

fn is_tail_record(r: &RecHdr) -> bool {
    matches!(r.ty, REC_MAPS | REC_END | REC_RUNINFO | REC_STATS | REC_ALLOCSTATS) && r.flags & !RECORD_FLAG_ZSTD == 0
}

/// A checked EVENTS record whose framing matches its checksum.
fn intact_events(file: &File, r: &RecHdr, file_len: u64) -> io::Result<bool> {
    if r.ty != REC_EVENTS || r.flags & RECORD_FLAG_CRC == 0 || r.end() > file_len {
        return Ok(false);
    }
    if (r.payload_len as u64) < (EVENTS_HEADER + CHECK_TRAILER) as u64 {
        return Ok(false);
    }
    let mut head = [0u8; EVENTS_HEADER as usize];
    let mut trailer = [0u8; CHECK_TRAILER as usize];
    file.read_exact_at(&mut head, r.payload_offset())?;
    file.read_exact_at(&mut trailer, r.end() - CHECK_TRAILER as u64)?;
    Ok(check_framing(r, &head, &trailer).is_ok())
}

/// Tail records from `r` on, ending exactly at the end of the file.
fn intact_tail(file: &File, r: &RecHdr, file_len: u64) -> io::Result<bool> {
    let mut r = *r;
    for _ in 0..MAX_TAIL_RECORDS {
        if !is_tail_record(&r) || r.end() > file_len {
            return Ok(false);
        }
        if r.end() == file_len {
            return Ok(true);
        }
        if r.end() + RECORD_HEADER as u64 > file_len {
            return Ok(false);
        }
        let mut b = [0u8; RECORD_HEADER as usize];
        file.read_exact_at(&mut b, r.end())?;
        r = header_at(&b, r.end());
    }
    Ok(false)
}

/// The offset of the first intact record at or after `from`, if any.
pub(crate) fn next_intact_record(file: &File, from: u64, file_len: u64) -> io::Result<Option<u64>> {
    let mut buf = vec![0u8; WINDOW + RECORD_HEADER as usize];
    let mut start = from;
    while start + RECORD_HEADER as u64 <= file_len {
        let n = ((file_len - start) as usize).min(buf.len());
        file.read_exact_at(&mut buf[..n], start)?;
        let last = n - RECORD_HEADER as usize;
        for i in 0..=last.min(WINDOW - 1) {
            let r = header_at(&buf[i..], start + i as u64);
            if r.end() > file_len || r.payload_len > super::records::MAX_PAYLOAD {
                continue;
            }
            if intact_events(file, &r, file_len)? || intact_tail(file, &r, file_len)? {
                return Ok(Some(r.offset));
            }
        }
        start += WINDOW as u64;
    }
    Ok(None)
}
