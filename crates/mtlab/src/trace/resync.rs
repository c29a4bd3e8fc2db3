//! Finding the next intact record after damage, in a checksummed (version 3)
//! trace: a damaged length field leaves no way to step to the next record,
//! but every EVENTS record's framing carries a CRC, so the next offset where
//! a record header and its chunk header match their checksum is a record
//! boundary (a false match has odds of 2⁻³² per candidate that already looks
//! like a record). The records that end the file (MAPS, END, RUNINFO, STATS)
//! have no checksum: a candidate among them counts when the chain of record
//! headers from it ends exactly at the end of the file.
//!
//! The scan tries every byte offset, so its cost per offset must stay
//! constant. Bytes come from a window read once (not a read per candidate),
//! and the length of each tail chain is remembered: in bytes that repeat a
//! short record header (a crafted trace, or zeros with one set byte), every
//! eighth offset starts a chain that would otherwise be walked to its limit
//! anew, some 64 reads an offset. A candidate whose record ends beyond the
//! window needs a read of its own; there is a budget of those, after which
//! such candidates are passed over (and the trace's warnings say so).
//! `Work` counts what the scan did.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use super::format::*;
use super::records::{check_framing, RecHdr, MAX_PAYLOAD};

/// Bytes read per step of the scan.
const WINDOW: usize = 4 << 20;
/// Bytes the window holds past the offset being tried (a MAPS record, a
/// joined EVENTS chunk is at most about 1 MiB): it moves on before less is left.
const LOOKAHEAD: u64 = 2 << 20;
/// Reads of single headers beyond the window, for all of one trace's scans:
/// real data needs a few (a random record header rarely looks like one
/// that ends inside the file); crafted data needs one per candidate.
const MAX_FAR_READS: u64 = 1 << 18;
/// Most records a tail of the file may hold for a candidate there to count.
const MAX_TAIL_RECORDS: u8 = 64;
/// Records one walk follows before it stops: twice the limit, so that each
/// walk settles at least `MAX_TAIL_RECORDS` offsets for good.
const WALK: usize = 2 * MAX_TAIL_RECORDS as usize;
/// A chain that does not reach the end of the file within the limit.
const FAR: u8 = u8::MAX;
/// Remembered chain lengths kept at most (then those behind the scan go).
const MEMO_MAX: usize = 1 << 18;

/// What a scan did, for tests: it must stay proportional to the bytes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Work {
    /// Byte offsets tried as a record's start.
    pub offsets: u64,
    /// Record headers and chunk headers looked at past the first.
    pub probes: u64,
    /// Reads of a window.
    pub loads: u64,
    /// Reads of a header beyond the window.
    pub far_reads: u64,
    /// Candidates passed over once `MAX_FAR_READS` were spent.
    pub passed_over: u64,
}

/// The scanner of one trace, kept across its damaged records so that a run
/// of them close together reads the file once.
pub(crate) struct Resync {
    /// Bytes of the file from offset `at`.
    window: Vec<u8>,
    at: u64,
    /// Records from an offset to the end of the file along its chain of
    /// tail records (`FAR`: not within `MAX_TAIL_RECORDS`).
    tail_len: HashMap<u64, u8>,
    path: Vec<u64>,
    pub work: Work,
}

fn header_at(b: &[u8], offset: u64) -> RecHdr {
    RecHdr {
        offset,
        payload_len: u32::from_le_bytes(b[0..4].try_into().unwrap()),
        ty: u16::from_le_bytes(b[4..6].try_into().unwrap()),
        flags: u16::from_le_bytes(b[6..8].try_into().unwrap()),
    }
}

/// A record that may end the file. (One larger than its writer makes is
/// refused by the index pass, which then looks for the next one.)
fn is_tail_record(r: &RecHdr) -> bool {
    matches!(r.ty, REC_MAPS | REC_END | REC_RUNINFO | REC_STATS | REC_ALLOCSTATS) && r.flags & !RECORD_FLAG_ZSTD == 0
}

impl Resync {
    pub fn new() -> Resync {
        Resync { window: Vec::new(), at: 0, tail_len: HashMap::new(), path: Vec::new(), work: Work::default() }
    }

    /// The offset of the first intact record at or after `from`, if any.
    pub fn next_intact_record(&mut self, file: &File, from: u64, file_len: u64) -> io::Result<Option<u64>> {
        let mut pos = from;
        while pos + RECORD_HEADER as u64 <= file_len {
            let window_end = self.at + self.window.len() as u64;
            if !self.holds(pos, RECORD_HEADER as usize) || (pos + LOOKAHEAD > window_end && window_end < file_len) {
                self.load(file, pos, file_len)?;
            }
            self.work.offsets += 1;
            let i = (pos - self.at) as usize;
            let r = header_at(&self.window[i..], pos);
            if r.end() <= file_len && r.payload_len <= MAX_PAYLOAD {
                if self.intact_events(file, &r)? {
                    return Ok(Some(pos));
                }
                if is_tail_record(&r) && self.tail_length(file, r, file_len)? != FAR {
                    return Ok(Some(pos));
                }
            }
            pos += 1;
        }
        Ok(None)
    }

    fn holds(&self, pos: u64, len: usize) -> bool {
        pos >= self.at && pos + len as u64 <= self.at + self.window.len() as u64
    }

    fn load(&mut self, file: &File, pos: u64, file_len: u64) -> io::Result<()> {
        let n = ((file_len - pos) as usize).min(WINDOW);
        self.window.resize(n, 0);
        file.read_exact_at(&mut self.window, pos)?;
        self.at = pos;
        self.work.loads += 1;
        if self.tail_len.len() > MEMO_MAX {
            self.tail_len.retain(|&o, _| o >= pos);
            if self.tail_len.len() > MEMO_MAX / 2 {
                self.tail_len.clear();
            }
        }
        Ok(())
    }

    /// Bytes at `pos`: from the window when it holds them, else read while
    /// the budget lasts. False when it is spent.
    fn read_at(&mut self, file: &File, pos: u64, out: &mut [u8]) -> io::Result<bool> {
        if self.holds(pos, out.len()) {
            let i = (pos - self.at) as usize;
            out.copy_from_slice(&self.window[i..i + out.len()]);
            return Ok(true);
        }
        if self.work.far_reads >= MAX_FAR_READS {
            self.work.passed_over += 1;
            return Ok(false);
        }
        self.work.far_reads += 1;
        file.read_exact_at(out, pos)?;
        Ok(true)
    }

    /// A checked EVENTS record whose framing matches its checksum.
    fn intact_events(&mut self, file: &File, r: &RecHdr) -> io::Result<bool> {
        if r.ty != REC_EVENTS || r.flags & RECORD_FLAG_CRC == 0 {
            return Ok(false);
        }
        if (r.payload_len as u64) < (EVENTS_HEADER + CHECK_TRAILER) as u64 {
            return Ok(false);
        }
        self.work.probes += 1;
        let mut head = [0u8; EVENTS_HEADER as usize];
        let mut trailer = [0u8; CHECK_TRAILER as usize];
        let read = self.read_at(file, r.payload_offset(), &mut head)? && self.read_at(file, r.end() - CHECK_TRAILER as u64, &mut trailer)?;
        Ok(read && check_framing(r, &head, &trailer).is_ok())
    }

    /// Records from tail record `r` to the end of the file along the chain
    /// of tail records (`FAR` when more than `MAX_TAIL_RECORDS` or none).
    /// Each offset's answer is remembered, so that the chains of later
    /// candidates, which mostly run into this one, stop where it is known.
    fn tail_length(&mut self, file: &File, r: RecHdr, file_len: u64) -> io::Result<u8> {
        let mut path = std::mem::take(&mut self.path);
        path.clear();
        let mut r = r;
        let beyond = loop {
            if let Some(&n) = self.tail_len.get(&r.offset) {
                break n;
            }
            if !is_tail_record(&r) || r.end() > file_len {
                break FAR;
            }
            path.push(r.offset);
            if r.end() == file_len {
                break 0;
            }
            if r.end() + RECORD_HEADER as u64 > file_len {
                break FAR;
            }
            if path.len() == WALK {
                // Unsettled; but the first of the walk are too far from the end.
                for &o in &path[..WALK - MAX_TAIL_RECORDS as usize] {
                    self.tail_len.insert(o, FAR);
                }
                self.path = path;
                return Ok(FAR);
            }
            self.work.probes += 1;
            let mut b = [0u8; RECORD_HEADER as usize];
            if !self.read_at(file, r.end(), &mut b)? {
                // Unknown, so nothing is remembered.
                self.path = path;
                return Ok(FAR);
            }
            r = header_at(&b, r.end());
        };
        let n = path.len();
        for (i, &o) in path.iter().enumerate() {
            let len = match beyond {
                FAR => FAR,
                b => u8::try_from(b as usize + n - i).ok().filter(|&l| l <= MAX_TAIL_RECORDS).unwrap_or(FAR),
            };
            self.tail_len.insert(o, len);
        }
        let first = path.first().map_or(beyond, |o| self.tail_len[o]);
        self.path = path;
        Ok(first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file_of(bytes: &[u8]) -> (tempfile::NamedTempFile, u64) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(bytes).unwrap();
        (f, bytes.len() as u64)
    }

    fn header(payload_len: u32, ty: u16, flags: u16) -> Vec<u8> {
        let mut h = payload_len.to_le_bytes().to_vec();
        h.extend(ty.to_le_bytes());
        h.extend(flags.to_le_bytes());
        h
    }

    #[test]
    fn a_chain_of_tail_records_to_the_end_is_found_and_a_longer_one_is_not() {
        let mut bytes = vec![0xee; 5];
        for _ in 0..MAX_TAIL_RECORDS {
            bytes.extend(header(2, REC_MAPS, 0));
            bytes.extend(b"x\n");
        }
        let (f, len) = file_of(&bytes);
        assert_eq!(Resync::new().next_intact_record(f.as_file(), 0, len).unwrap(), Some(5));
        let mut longer = vec![0xee; 5];
        longer.extend(header(2, REC_MAPS, 0));
        longer.extend(b"x\n");
        longer.extend(&bytes[5..]);
        let (f, len) = file_of(&longer);
        assert_eq!(Resync::new().next_intact_record(f.as_file(), 0, len).unwrap(), Some(15), "the second record starts the last 64");
    }

    /// Megabytes of one empty MAPS record header repeated, which never
    /// reach the end of the file as records: each eighth offset starts a
    /// chain of tail records. Walking each to its limit took 64 reads per
    /// candidate (~8 s per MiB); each is now settled about once.
    #[test]
    fn the_scan_over_garbage_that_looks_like_records_does_work_in_proportion_to_its_bytes() {
        let mib = 4;
        let mut bytes: Vec<u8> = header(0, REC_MAPS, 0).repeat(mib << 17);
        bytes.extend(b"\x01\x02\x03");
        let (f, len) = file_of(&bytes);
        let mut s = Resync::new();
        assert_eq!(s.next_intact_record(f.as_file(), 1, len).unwrap(), None);
        let w = s.work;
        assert_eq!(w.offsets, len - RECORD_HEADER as u64);
        let candidates = w.offsets / 8;
        assert!(w.probes <= 3 * candidates, "{w:?}: {} probes per candidate", w.probes as f64 / candidates as f64);
        assert!(w.loads <= 3 && w.far_reads <= 256 && w.passed_over == 0, "{w:?}");
    }

    #[test]
    fn garbage_that_looks_like_checked_events_is_read_once() {
        // A checked EVENTS header of 32 bytes repeated: every candidate
        // looks at its chunk header and checksums, from the window.
        let bytes: Vec<u8> = [header(32, REC_EVENTS, RECORD_FLAG_CRC), vec![0; 32]].concat().repeat(50_000);
        let (f, len) = file_of(&bytes);
        let mut s = Resync::new();
        assert_eq!(s.next_intact_record(f.as_file(), 1, len).unwrap(), None);
        assert!(s.work.loads <= 2 && s.work.passed_over == 0, "{:?}", s.work);
    }

    #[test]
    fn reads_beyond_the_window_are_budgeted_and_an_intact_record_is_still_found() {
        // Every eighth offset a checked EVENTS record of 5 MiB, whose
        // checksums lie beyond the window: a read each, until the budget
        // is spent; then an intact record the window shows is still found.
        let candidates = MAX_FAR_READS as usize + 1000;
        let mut bytes: Vec<u8> = header(5 << 20, REC_EVENTS, RECORD_FLAG_CRC).repeat(candidates);
        let intact = bytes.len() as u64;
        let head = [0u8; EVENTS_HEADER as usize];
        let rec = RecHdr { offset: 0, payload_len: EVENTS_HEADER + CHECK_TRAILER, ty: REC_EVENTS, flags: RECORD_FLAG_CRC };
        bytes.extend(header(rec.payload_len, rec.ty, rec.flags));
        bytes.extend(head);
        bytes.extend(super::super::records::framing_crc(&rec, &head).to_le_bytes());
        bytes.extend(crc32fast::hash(&[]).to_le_bytes());
        bytes.resize(bytes.len() + (6 << 20), 0xee);
        let (f, len) = file_of(&bytes);
        let mut s = Resync::new();
        assert_eq!(s.next_intact_record(f.as_file(), 1, len).unwrap(), Some(intact));
        assert_eq!(s.work.far_reads, MAX_FAR_READS, "{:?}", s.work);
        assert!(s.work.passed_over >= 900, "{:?}", s.work);
    }
}
