//! The raw trace read ahead into memory while the consumer is busy.
//!
//! A burst of allocations faster than one thread analyses them (python3
//! making 2.8 M blocks in a second) keeps the consumer in one long replay
//! while the program writes megabytes: on disk they wait for the next
//! batch. The replay stops every `FILL_EVERY` events to copy what the
//! program has written since (up to the watermark) into memory and punch
//! it out of the file: the backlog waits in memory, where the recorder's
//! own figures count it, and the raw file on disk stays what one fill
//! interval writes. The consumer then reads its records from here.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// Events replayed between two fills.
pub(crate) const FILL_EVERY: u64 = 1 << 16;
/// The most raw bytes held in memory: past it, the backlog stays on disk
/// (the consumer holds as much again in chunks waiting for the replay).
const MOST: usize = 32 << 20;
/// Holes are punched in whole file system blocks.
const BLOCK: u64 = 4096;

pub(crate) struct Spool {
    file: File,
    /// File offset of `bytes[0]`; `bytes` holds the file from there on.
    base: u64,
    bytes: Vec<u8>,
    /// Blocks below this are punched out (none below `floor`, the header's).
    released: u64,
    floor: u64,
    /// Release what is read ahead (false: the raw trace is kept,
    /// `--keep-raw`; it is read ahead all the same, so that the records
    /// are read as with release).
    release: bool,
}

impl Spool {
    /// A spool of `file` (opened for writing, to punch it) whose records
    /// start at `records`; nothing below them is ever released. Without
    /// `release` nothing is.
    pub(crate) fn new(file: File, records: u64, release: bool) -> Spool {
        Spool { file, base: records, bytes: Vec::new(), released: 0, floor: records.next_multiple_of(BLOCK), release }
    }

    fn end(&self) -> u64 {
        self.base + self.bytes.len() as u64
    }

    /// Bytes held in memory.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.bytes.len()
    }

    /// Whether some of the file's bytes from `from` to `to` are held here
    /// (and so may be punched out of the file).
    pub(crate) fn holds(&self, from: u64, to: u64) -> bool {
        from < self.end() && to > self.base
    }

    /// Copies the file from where the spool ends up to `watermark` (every
    /// byte below it is written) into memory, and punches the blocks
    /// copied, below `ceiling` only (bytes a reader still reads from the
    /// file). A read or punch that fails leaves the rest on disk.
    pub(crate) fn fill(&mut self, watermark: u64, ceiling: u64) {
        let end = self.end();
        let n = watermark.saturating_sub(end).min(MOST.saturating_sub(self.bytes.len()) as u64) as usize;
        if n > 0 {
            let old = self.bytes.len();
            self.bytes.resize(old + n, 0);
            if self.file.read_exact_at(&mut self.bytes[old..], end).is_err() {
                self.bytes.truncate(old);
            }
        }
        let from = self.released.max(self.floor);
        let to = self.end().min(ceiling) / BLOCK * BLOCK;
        if !self.release || to <= from {
            return;
        }
        // Failure leaves the bytes in the file as well as here.
        if crate::platform::safe_fs::punch_hole(&self.file, from, to).is_ok() {
            self.released = to;
        }
    }

    /// The consumer has read the file up to `off`: the bytes below go.
    pub(crate) fn consumed(&mut self, off: u64) {
        if off >= self.end() {
            self.bytes.clear();
            self.base = off;
        } else if off > self.base {
            self.bytes.drain(..(off - self.base) as usize);
            self.base = off;
        }
    }
}

/// Reads what the spool holds from memory and the rest from the file.
impl FileExt for Spool {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if offset >= self.base && offset < self.end() {
            let at = (offset - self.base) as usize;
            let n = buf.len().min(self.bytes.len() - at);
            buf[..n].copy_from_slice(&self.bytes[at..at + n]);
            return Ok(n);
        }
        if offset < self.base && offset + buf.len() as u64 > self.base {
            // Below the spool: from the file, up to where the spool starts.
            let n = (self.base - offset) as usize;
            return self.file.read_at(&mut buf[..n], offset);
        }
        self.file.read_at(buf, offset)
    }

    fn write_at(&self, _buf: &[u8], _offset: u64) -> io::Result<usize> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "the spool is read only"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// A 160 000-byte file of counting words, opened for reading and writing.
    fn raw_file(dir: &tempfile::TempDir) -> (std::path::PathBuf, Vec<u8>, File) {
        let p = dir.path().join("raw");
        let data: Vec<u8> = (0..40_000u32).flat_map(|i| i.to_le_bytes()).collect();
        std::fs::write(&p, &data).unwrap();
        let f = std::fs::OpenOptions::new().read(true).write(true).open(&p).unwrap();
        (p, data, f)
    }

    #[test]
    fn reads_the_same_bytes_and_releases_the_blocks_it_holds() {
        let dir = tempfile::tempdir().unwrap();
        let (p, data, f) = raw_file(&dir);
        let allocated = || std::fs::metadata(&p).unwrap().blocks() * 512;
        let before = allocated();
        let mut s = Spool::new(f, 100, true);
        s.fill(120_000, u64::MAX);
        assert_eq!(s.held(), 120_000 - 100);
        // Blocks 1 to 28 punched: block 0 holds the header, block 29 runs past 120 000.
        assert_eq!(allocated(), before - 28 * 4096);
        let mut buf = vec![0u8; 50_000];
        s.read_exact_at(&mut buf, 90_000).unwrap(); // across the spool's end into the file
        assert_eq!(buf, data[90_000..140_000]);
        assert!(s.holds(119_000, 121_000) && s.holds(100, 200) && !s.holds(120_000, 130_000) && !s.holds(0, 100));
        s.consumed(110_000);
        assert_eq!(s.held(), 10_000);
        s.read_exact_at(&mut buf[..4], 119_996).unwrap();
        assert_eq!(&buf[..4], &data[119_996..120_000]);
        // A ceiling keeps what a reader still reads from the file.
        s.fill(160_000, 130_000);
        let mut tail = vec![0u8; 30_000];
        std::fs::File::open(&p).unwrap().read_exact_at(&mut tail, 130_000).unwrap();
        assert_eq!(tail, data[130_000..160_000]);
    }

    #[test]
    fn a_kept_raw_trace_is_read_ahead_and_never_released() {
        let dir = tempfile::tempdir().unwrap();
        let (p, data, f) = raw_file(&dir);
        let mut s = Spool::new(f, 100, false);
        s.fill(120_000, u64::MAX);
        assert_eq!(s.held(), 120_000 - 100);
        assert_eq!(std::fs::read(&p).unwrap(), data, "the file is whole");
        let mut buf = vec![0u8; 30_000];
        s.read_exact_at(&mut buf, 100_000).unwrap();
        assert_eq!(buf, data[100_000..130_000]);
    }
}
