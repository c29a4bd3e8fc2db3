//! The rewrite's output file, held in memory while the disk is full.
//!
//! `Finisher` punches the raw trace's records out of the file once it holds
//! them in memory (`releasing`), so its output must not fail for want of
//! room: the program's writer may have taken the blocks just freed (it
//! fills the disk, then stops: `writer.c`'s `full_at`). A write that finds
//! no room (ENOSPC, EDQUOT) keeps the bytes here, and the next attempt —
//! after the next punch has freed more blocks — writes them where they
//! belong; the rewrite so far and what it released are never lost to a
//! full disk. Any other error is returned.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;

/// Bytes gathered before a write is attempted (as a `BufWriter`'s capacity).
const WRITE_AT: usize = 1 << 20;

pub(crate) struct HeldWriter {
    file: File,
    /// Where `held` goes in the file: every byte before it is written.
    at: u64,
    held: Vec<u8>,
    /// The last write found no room; retried once `held` has grown by
    /// another `WRITE_AT`, or when asked (`try_write`).
    full: bool,
    retry_at: usize,
}

impl HeldWriter {
    /// Output to `file`, whose first `at` bytes are written already.
    pub(crate) fn new(file: File, at: u64) -> HeldWriter {
        HeldWriter { file, at, held: Vec::with_capacity(WRITE_AT), full: false, retry_at: WRITE_AT }
    }

    /// The last write found the disk full: bytes are held in memory.
    pub(crate) fn waiting_for_room(&self) -> bool {
        self.full
    }

    /// Bytes held in memory, not yet written.
    pub(crate) fn held(&self) -> usize {
        self.held.len()
    }

    /// Writes what is held, as much as there is room for. Ok(false): the
    /// disk is full, the rest stays held.
    pub(crate) fn try_write(&mut self) -> io::Result<bool> {
        let mut done = 0;
        let r = loop {
            if done == self.held.len() {
                break Ok(true);
            }
            match self.file.write_at(&self.held[done..], self.at + done as u64) {
                Ok(0) => break Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if no_room(&e) => break Ok(false),
                Err(e) => break Err(e),
            }
        };
        self.held.drain(..done);
        self.at += done as u64;
        let all = *r.as_ref().unwrap_or(&false);
        self.full = !all && r.is_ok();
        self.retry_at = self.held.len() + WRITE_AT;
        r
    }

    /// Everything written so far: the file's bytes and those held.
    #[cfg(test)]
    pub(crate) fn contents(&self) -> io::Result<Vec<u8>> {
        let mut v = vec![0u8; self.at as usize];
        self.file.read_exact_at(&mut v, 0)?;
        v.extend_from_slice(&self.held);
        Ok(v)
    }

    /// The file with everything written, cut where the output ends (a write
    /// that found no room may have left a partial block beyond it). A disk
    /// still full is an error: the output cannot be completed.
    pub(crate) fn into_file(mut self) -> io::Result<File> {
        if !self.try_write()? {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        self.file.set_len(self.at)?;
        Ok(self.file)
    }
}

fn no_room(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}

impl Write for HeldWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.held.extend_from_slice(buf);
        if self.held.len() >= self.retry_at {
            self.try_write()?;
        }
        Ok(buf.len())
    }

    /// Writes what is held if there is room; a full disk is not an error
    /// here (the bytes stay held).
    fn flush(&mut self) -> io::Result<()> {
        self.try_write().map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn writes_in_order_where_the_file_left_off() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("o");
        let mut f = File::create(&p).unwrap();
        f.write_all(b"head").unwrap();
        let mut w = HeldWriter::new(f, 4);
        let big = vec![7u8; WRITE_AT + 10];
        w.write_all(b"-a-").unwrap();
        w.write_all(&big).unwrap();
        assert_eq!(w.held(), 0, "written once WRITE_AT bytes were held");
        w.write_all(b"tail").unwrap();
        assert_eq!(w.held(), 4);
        drop(w.into_file().unwrap());
        let mut got = Vec::new();
        File::open(&p).unwrap().read_to_end(&mut got).unwrap();
        assert_eq!(got.len(), 4 + 3 + big.len() + 4);
        assert!(got.starts_with(b"head-a-") && got.ends_with(b"\x07tail"));
    }

    /// /dev/full answers every write with ENOSPC: the bytes stay held, and
    /// the output cannot be completed.
    #[test]
    fn a_full_disk_keeps_the_bytes_held() {
        let Ok(f) = std::fs::OpenOptions::new().write(true).open("/dev/full") else { return };
        let mut w = HeldWriter::new(f, 0);
        let big = vec![1u8; WRITE_AT * 2];
        w.write_all(&big).unwrap();
        assert!(w.waiting_for_room());
        assert_eq!(w.held(), big.len());
        assert!(!w.try_write().unwrap());
        assert_eq!(w.into_file().unwrap_err().raw_os_error(), Some(libc::ENOSPC));
    }
}
