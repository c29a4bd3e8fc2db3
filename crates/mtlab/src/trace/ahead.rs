//! The raw trace as `Finisher` reads it: its records read ahead into memory
//! and punched out of the file while the rewrite is busy.
//!
//! The rewrite during the run takes the raw records in 16 MiB batches; a
//! batch's columns and compression take a few hundred ms of one core, and
//! meanwhile the program writes on: measured on pyjson, the raw rows not
//! yet taken were most of the disk held at the peak (2.4× the finished
//! trace with the rewrite unthrottled). `fill` (another thread, every poll)
//! reads the whole records written since into memory, up to a cap, and
//! `punch` frees their blocks at once: on disk there is then the rewrite so
//! far, and raw records only past the cap. The rewrite reads them from here
//! (`read_at`), in the same order, so its bytes do not change.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use super::error::TraceError;
use super::format::*;
use super::keys;
use super::kv::kv_text;
use super::records::{next_record, record_header, write_record};

/// What the raw trace says where its records were released, for a reader of
/// it when the rewrite never finished (`mtlab record` killed): a RUNINFO
/// record with this warning, then a SKIP record over the zeros.
pub const RELEASED_NOTE: &str = "mtlab record rewrote the start of this trace while the program ran and was stopped \
     before it finished: the raw events it had taken were released from the file and are missing from every figure";
/// The longest SKIP record over released records; a longer run of them is
/// covered by several (readers refuse records beyond `MAX_PAYLOAD`).
const SKIP_MAX: u64 = 256 << 20;
/// Holes are punched in whole file system blocks.
const BLOCK: u64 = 4096;

/// The source trace, shared by the rewrite and the thread that reads ahead.
pub struct Source {
    file: File,
    path: PathBuf,
    state: Mutex<State>,
}

struct State {
    /// Whole records read ahead, in file order and contiguous: (offset, bytes).
    blocks: VecDeque<(u64, Vec<u8>)>,
    /// Bytes in `blocks`.
    held: usize,
    /// The file is read ahead up to here (a record boundary; 0: not yet).
    end: u64,
    /// The rewrite's progress: every record before `off` it holds (in its
    /// batch or written); `written`: its output bytes; `flushed`: `off` at
    /// its last batch written (for `progress`).
    off: u64,
    written: u64,
    flushed: u64,
    punch: Option<Punch>,
    /// Why punching stopped (the file system cannot), for the finish's warnings.
    warning: Option<String>,
}

/// The source opened for writing, to punch out what was taken, and how far
/// it is released.
struct Punch {
    file: File,
    header_end: u64,
    /// Released up to here (a record boundary; the block it ends in is zeroed, not freed).
    released: u64,
    /// Where the SKIP record over the released records starts (0: none yet).
    skip_at: u64,
}

/// Where the rewrite stands, for `MTLAB_LIVE_FINISH_LOG`.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Raw bytes read ahead into memory, not yet taken by the rewrite.
    pub ahead: u64,
    /// Raw bytes the rewrite took into its batch, not yet written.
    pub batch: u64,
    /// Where the source is read (into memory or by the rewrite) up to, and released up to.
    pub taken: u64,
    pub released: u64,
    /// Output bytes of the rewrite so far.
    pub written: u64,
}

impl Source {
    pub(crate) fn new(file: File, path: &Path, header_end: u64) -> Source {
        let state = State {
            blocks: VecDeque::new(),
            held: 0,
            end: 0,
            off: header_end,
            written: header_end,
            flushed: header_end,
            punch: None,
            warning: None,
        };
        Source { file, path: path.to_path_buf(), state: Mutex::new(state) }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    /// From now on taken records are punched out of the file (`Finisher::releasing`).
    pub(crate) fn releasing(&self, header_end: u64) -> Result<(), TraceError> {
        let file = crate::platform::safe_fs::open_owned_regular(&self.path, true).map_err(TraceError::io(&self.path))?;
        self.state().punch = Some(Punch { file, header_end, released: 0, skip_at: 0 });
        Ok(())
    }

    /// The source's bytes punched out so far (its records from the header's end on).
    pub(crate) fn released(&self) -> u64 {
        self.state().punch.as_ref().map_or(0, |p| p.released.saturating_sub(p.header_end))
    }

    /// Why punching stopped, once.
    pub(crate) fn take_warning(&self) -> Option<String> {
        self.state().warning.take()
    }

    /// The rewrite has taken every record before `off` and written
    /// `written` bytes (`flushed`: its batch is written): the blocks read
    /// ahead before `off` are dropped.
    pub(crate) fn taken(&self, off: u64, written: u64, flushed: bool) {
        let mut s = self.state();
        s.off = off;
        s.written = written;
        if flushed {
            s.flushed = off;
        }
        while s.blocks.front().is_some_and(|(at, b)| at + b.len() as u64 <= off) {
            let (_, b) = s.blocks.pop_front().expect("a block");
            s.held -= b.len();
        }
    }

    pub fn progress(&self) -> Progress {
        let s = self.state();
        let taken = s.end.max(s.off);
        Progress {
            ahead: taken - s.off,
            batch: s.off - s.flushed,
            taken,
            released: s.punch.as_ref().map_or(0, |p| p.released),
            written: s.written,
        }
    }

    /// Reads the whole records between where the source is taken up to and
    /// `available` into memory, as long as fewer than `cap` bytes are held
    /// (one record past it at most). Only while punching: otherwise the
    /// memory would hold what the disk holds too. Ok(bytes read).
    pub fn fill(&self, available: u64, cap: usize) -> io::Result<u64> {
        let from = {
            let s = self.state();
            if s.punch.is_none() || s.held >= cap {
                return Ok(0);
            }
            s.end.max(s.off)
        };
        let room = cap - self.state().held;
        // Record boundaries, from the headers (the rewrite judges damage itself).
        let mut to = from;
        while ((to - from) as usize) < room {
            match next_record(&self.file, to, available)? {
                Ok(Some(rec)) => to = rec.end(),
                _ => break,
            }
        }
        if to == from {
            return Ok(0);
        }
        let mut bytes = vec![0u8; (to - from) as usize];
        self.file.read_exact_at(&mut bytes, from)?;
        let mut s = self.state();
        // The rewrite read past `from` from the file meanwhile: what it took is dropped.
        if s.off >= to {
            return Ok(0);
        }
        let skip = s.off.saturating_sub(from);
        let at = from + skip;
        let bytes = if skip > 0 { bytes.split_off(skip as usize) } else { bytes };
        s.held += bytes.len();
        s.blocks.push_back((at, bytes));
        s.end = to;
        Ok(to - at)
    }

    /// Punches the records taken (read ahead, or by the rewrite) out of the
    /// file, when at least `min_step` more are: from the block the last
    /// punch ended in (its taken part was zeroed, now the whole block goes)
    /// to the end of the last record taken, so the file reads as its
    /// header, zeros where the taken records were (damage a reader resyncs
    /// after) and the records not taken yet. A file system that cannot
    /// punch holes keeps them: the raw trace then stays whole. Ok(true):
    /// blocks were freed.
    pub fn punch(&self, min_step: u64) -> Result<bool, TraceError> {
        let mut s = self.state();
        let to = s.end.max(s.off);
        let Some(p) = s.punch.as_mut() else { return Ok(false) };
        let io = |e| TraceError::io(&self.path)(e);
        let note = {
            let text = kv_text([(keys::FINISH_WARNING, RELEASED_NOTE)]);
            let mut rec = Vec::new();
            write_record(&mut rec, REC_RUNINFO, 0, &[text.as_bytes()]).map_err(io)?;
            rec
        };
        let first = p.skip_at == 0;
        let start = if first { p.header_end + note.len() as u64 } else { p.skip_at };
        if to < (p.released / BLOCK * BLOCK).max(start + RECORD_HEADER as u64) + min_step.max(1) {
            return Ok(false);
        }
        // The note and SKIP headers first, then the zeros: a reader of the
        // file at any moment finds records that chain to the untaken ones.
        if first {
            p.file.write_all_at(&note, p.header_end).map_err(io)?;
            p.skip_at = start;
        } else if to - p.skip_at - RECORD_HEADER as u64 > SKIP_MAX {
            // The last SKIP ends where the last release did (a record boundary).
            p.skip_at = p.released;
        }
        let skip_len = to - p.skip_at - RECORD_HEADER as u64;
        p.file.write_all_at(&record_header(REC_SKIP, 0, skip_len as usize), p.skip_at).map_err(io)?;
        let from = (p.released / BLOCK * BLOCK).max(p.skip_at + RECORD_HEADER as u64);
        match crate::platform::safe_fs::punch_hole(&p.file, from, to) {
            Ok(()) => {
                p.released = to;
                Ok(true)
            }
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                s.punch = None;
                // What was read ahead stays on disk too: the rewrite takes it from memory all the same.
                s.warning = Some(format!(
                    "the raw trace's rewritten records could not be released while finishing ({e}): this file system does not punch holes"
                ));
                Ok(false)
            }
            Err(e) => Err(io(e)),
        }
    }
}

/// Reads come from the records read ahead where they are there (their
/// blocks may be punched out of the file already), else from the file.
impl FileExt for Source {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        // Under the lock: a record not read ahead yet is not punched while
        // it is read from the file. The blocks are contiguous, and the
        // rewrite reads nothing before its own progress (`taken`).
        let s = self.state();
        if let Some((at, b)) = s.blocks.iter().find(|(at, b)| offset >= *at && offset < at + b.len() as u64) {
            let from = (offset - at) as usize;
            let n = buf.len().min(b.len() - from);
            buf[..n].copy_from_slice(&b[from..from + n]);
            return Ok(n);
        }
        // Not read ahead: from the file, up to the first block at most.
        let n = match s.blocks.front() {
            Some((at, _)) if offset < *at => buf.len().min((at - offset) as usize),
            _ => buf.len(),
        };
        self.file.read_at(&mut buf[..n], offset)
    }

    fn write_at(&self, _buf: &[u8], _offset: u64) -> io::Result<usize> {
        Err(io::Error::other("the source trace is read only"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records of 100-byte payloads, back to back after a 16-byte "header".
    fn file_of_records(dir: &Path, n: usize) -> (PathBuf, Vec<u8>) {
        let mut bytes = vec![9u8; 16];
        for i in 0..n {
            write_record(&mut bytes, REC_MAPS, 0, &[&[i as u8; 100]]).unwrap();
        }
        let p = dir.join("t");
        std::fs::write(&p, &bytes).unwrap();
        (p, bytes)
    }

    #[test]
    fn records_read_ahead_read_as_the_file_did_and_only_whole_ones_are_taken() {
        let dir = tempfile::tempdir().unwrap();
        let (p, bytes) = file_of_records(dir.path(), 10);
        let src = Source::new(File::open(&p).unwrap(), &p, 16);
        // Not punching: nothing is read ahead.
        assert_eq!(src.fill(bytes.len() as u64, 1 << 20).unwrap(), 0);
        src.releasing(16).unwrap();
        let rec = RECORD_HEADER as usize + 100;
        // Three records and a half available: three taken.
        assert_eq!(src.fill(16 + 3 * rec as u64 + 50, 1 << 20).unwrap(), 3 * rec as u64);
        // The rest, at most one record past a cap of 1 byte more.
        assert_eq!(src.fill(bytes.len() as u64, 3 * rec + 1).unwrap(), rec as u64);
        assert_eq!(src.progress().ahead, 4 * rec as u64);
        assert!(src.punch(0).unwrap());
        let mut got = vec![0u8; bytes.len() - 16];
        src.read_exact_at(&mut got, 16).unwrap();
        assert!(got == bytes[16..], "read ahead and from the file, the same bytes");
        let on_disk = std::fs::read(&p).unwrap();
        assert!(on_disk[16 + 4 * rec..] == bytes[16 + 4 * rec..], "the untaken records are still there");
        // The rewrite takes two records: their block goes.
        src.taken(16 + 2 * rec as u64, 0, false);
        assert_eq!(src.progress().ahead, 2 * rec as u64);
        let mut again = vec![0u8; rec];
        src.read_exact_at(&mut again, 16 + 2 * rec as u64).unwrap();
        assert!(again == bytes[16 + 2 * rec..16 + 3 * rec]);
    }
}
