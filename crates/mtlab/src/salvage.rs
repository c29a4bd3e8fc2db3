//! The events a root program killed by a signal still held in its
//! threads' buffers, copied out of it while it ran.
//!
//! Each thread of a traced process keeps its latest events in a 64 KiB
//! buffer and writes them as a chunk when the buffer is full, at its next
//! call once the oldest is ~100 ms old, or when the process exits. A
//! process killed by a signal (a service stopped with SIGTERM, an OOM kill)
//! writes none of them: a thread that went quiet — a worker waiting for the
//! next request — lost everything since its last chunk, and a service
//! stopped while idle left a trace of no events at all.
//!
//! While the program runs, a thread of `record` reads the writer's
//! per-buffer progress in the watermark page every `POLL` (the preload
//! publishes it once a chunk, `PROGRESS_SLOTS_ONLY`) and copies out of the
//! process (`live::bufcopy`, the protocol `record --live` uses) each buffer
//! that holds events and whose owner wrote no chunk since the look before:
//! a quiet thread. A buffer is copied again only when it has changed. The
//! owner is never waited for, signalled or written to.
//!
//! After a death by a signal, a copy is kept when its buffer's slot shows
//! no chunk written and no buffer started since (the slots live in the
//! memfd, which outlives the process): its events are then exactly the
//! start of the chunk the owner never wrote, and they are appended to the
//! raw trace as that chunk before it is finished. Still lost: what a thread
//! added after its last copy — a busy thread's last ~100 ms.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::live::bufcopy::{self, BufferCopy};
use crate::live::progress::{self, Progress};
use crate::platform::shared_page::SharedPage;
use crate::trace::format::REC_EVENTS;
use crate::trace::records;

/// How often the buffers' progress is looked at: a thread that wrote no
/// chunk for this long is quiet. Each look costs a read of the page, and a
/// quiet buffer's copy a few system calls, once per change. More than the
/// writer's ~100 ms: a buffer copied after a look that found its slot
/// unchanged then has a first event older than that, so its owner's next
/// call writes it as it was copied, before adding to it — and a kill inside
/// that write, before the slot is republished, leaves a chunk the reader
/// drops as a repeat of the copy (`trace::records::RepeatedChunks`), not a
/// longer one the copy is only the start of.
const POLL: Duration = Duration::from_millis(120);

/// A copy and the slot's sequence number it was taken under.
struct Kept {
    seq: u64,
    copy: BufferCopy,
}

/// The thread that copies quiet buffers while the program runs.
pub struct Salvage {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<HashMap<u32, Kept>>>,
    page: Arc<SharedPage>,
}

/// What a salvage added to a raw trace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Salvaged {
    pub events: u64,
    pub threads: u32,
}

impl Salvage {
    /// Starts copying the quiet buffers of process `pid`, whose progress
    /// `page` (its watermark page, progress wanted) publishes. None when no
    /// thread can be started: then nothing is salvaged, as before.
    pub fn start(page: Arc<SharedPage>, pid: u32) -> Option<Salvage> {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (page, stop) = (Arc::clone(&page), Arc::clone(&stop));
            std::thread::Builder::new().name("mtlab-salvage".into()).spawn(move || watch(&page, pid, &stop)).ok()?
        };
        Some(Salvage { stop, thread: Some(thread), page })
    }

    /// Stops copying (the program has ended) and returns the copies that
    /// hold: each buffer's owner wrote no chunk and started no buffer after
    /// it, as its slot shows now. Only a process that died by a signal
    /// has such buffers: an exit writes them all.
    pub fn stop(mut self) -> Vec<BufferCopy> {
        self.stop.store(true, Ordering::Release);
        let Some(t) = self.thread.take() else { return Vec::new() };
        t.thread().unpark();
        let kept = t.join().unwrap_or_default();
        let mut held: Vec<BufferCopy> = kept
            .into_iter()
            .filter(|(index, k)| progress::reread(&self.page, *index).is_some_and(|s| s.seq == k.seq && !s.empty))
            .map(|(_, k)| k.copy)
            .collect();
        held.sort_by_key(|c| (c.first_tsc, c.tid));
        held
    }
}

/// The thread's loop: the latest copy of each quiet buffer, by slot.
fn watch(page: &SharedPage, pid: u32, stop: &AtomicBool) -> HashMap<u32, Kept> {
    let mut kept: HashMap<u32, Kept> = HashMap::new();
    // Each slot's sequence number at the look before.
    let mut seen: HashMap<u32, u64> = HashMap::new();
    while !stop.load(Ordering::Acquire) {
        std::thread::park_timeout(POLL);
        if stop.load(Ordering::Acquire) {
            break;
        }
        let look = Progress::read(page);
        for s in look.slots() {
            let quiet = seen.insert(s.index, s.seq) == Some(s.seq);
            if !quiet || s.empty || s.buf == 0 {
                continue;
            }
            match copy_if_changed(pid, s, kept.get(&s.index)) {
                Ok(Some(copy)) => {
                    // Taken under the slot as read: the owner wrote no chunk
                    // meanwhile, and the buffer is still this thread's.
                    if copy.tid == s.tid && progress::reread(page, s.index).is_some_and(|n| n.seq == s.seq) {
                        kept.insert(s.index, Kept { seq: s.seq, copy });
                    }
                }
                Ok(None) => {}
                // The process has ended, or its memory cannot be read (an
                // undumpable process): nothing more to copy.
                Err(_) => return kept,
            }
        }
    }
    kept
}

/// A copy of the buffer of slot `s`, unless the copy kept of it is of the
/// same buffer at the same generation (or its owner is writing it now).
fn copy_if_changed(pid: u32, s: &progress::Slot, had: Option<&Kept>) -> std::io::Result<Option<BufferCopy>> {
    if let Some(k) = had.filter(|k| k.seq == s.seq) {
        if bufcopy::generation(pid, s.buf)? == Some(k.copy.gen) {
            return Ok(None);
        }
    }
    bufcopy::copy(pid, s.buf)
}

/// Appends `copies` to the raw trace at `raw` as the EVENTS records their
/// owners would have written (a chunk header, then the events).
pub fn append(raw: &Path, copies: &[BufferCopy]) -> std::io::Result<Salvaged> {
    let mut done = Salvaged::default();
    if copies.is_empty() {
        return Ok(done);
    }
    let mut out = Vec::new();
    for c in copies {
        let head = records::chunk_header(c.tid, c.n_events, c.first_tsc, c.last_tsc);
        records::write_record(&mut out, REC_EVENTS, 0, &[&head, &c.events])?;
        done.events += u64::from(c.n_events);
        done.threads += 1;
    }
    // One write at the end of the file: the program has ended, no other
    // writer is left.
    std::fs::OpenOptions::new().append(true).open(raw)?.write_all(&out)?;
    Ok(done)
}

/// What `record` says of a salvage.
pub fn note(n: Salvaged) -> String {
    format!(
        "the program was killed before it wrote its threads' buffers: {} events of {} thread{} that had gone quiet were \
         copied from the process while it ran and are in the trace; calls made after a thread's last copy (a busy \
         thread's last ~100 ms) are not",
        n.events,
        n.threads,
        if n.threads == 1 { "" } else { "s" }
    )
}

impl Drop for Salvage {
    fn drop(&mut self) {
        // Not stopped (the run failed): the thread ends at its next look.
        self.stop.store(true, Ordering::Release);
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{ChunkEncoder, Event, EventKind, Func, UNTIMED};

    #[test]
    fn copies_become_chunks_a_reader_finds_at_the_end_of_the_raw_trace() {
        let dir = tempfile::tempdir().unwrap();
        let raw = dir.path().join("t.mtl");
        // A raw trace of one chunk of thread 7, written as the preload does.
        let malloc = |tid: u32, tsc: u64, ptr: u64| Event {
            tid,
            tsc,
            cycles: UNTIMED,
            stack: 0,
            flags: 0,
            kind: EventKind::Alloc { func: Func::Malloc, size: 64, align: 0, ptr, usable: 64 },
        };
        let mut enc = ChunkEncoder::new(7);
        enc.event(&malloc(7, 1000, 0x1000));
        let mut w = crate::trace::TraceWriter::create(&raw, [("pid", "42"), ("tsc_hz", "1000000000")]).unwrap();
        w.chunk(&enc).unwrap();
        w.finish().unwrap();
        // Thread 8's buffer as copied: one more malloc.
        let mut quiet = ChunkEncoder::new(8);
        quiet.event(&malloc(8, 2000, 0x2000));
        let copy = BufferCopy { tid: 8, n_events: 1, first_tsc: 2000, last_tsc: 2000, events: quiet.body().to_vec(), gen: 3 };
        let added = append(&raw, &[copy]).unwrap();
        assert_eq!(added, Salvaged { events: 1, threads: 1 });
        let t = crate::trace::TraceFile::open(&raw).unwrap();
        let tids: Vec<u32> = t.chunks.iter().map(|c| c.tid).collect();
        assert_eq!(tids, [7, 8]);
        assert_eq!(append(&raw, &[]).unwrap(), Salvaged::default(), "nothing to add");
    }
}
