//! `mtlab heap replay`: a recorded trace's heap calls turned into the ops
//! file the replay program (`native/heap/replay.c`) re-executes — each
//! thread's calls in its own order, every block numbered so that a free in
//! one thread of a block from another can wait for its allocation, and every
//! op carries its place in the recorded order of all threads, so that no
//! thread runs more than a window of ops ahead of it. Run under
//! each allocator like any program (`heap compare`), it answers "what if"
//! without the original program.

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::path::Path;

use rustc_hash::FxHashMap as HashMap;

use super::StudyError;
use crate::trace::{Event, EventKind, Func, Item, TraceFile};

const MALLOC: u32 = 1;
const CALLOC: u32 = 2;
const ALIGNED: u32 = 3;
const REALLOC: u32 = 4;
const FREE: u32 = 5;

/// What went into an ops file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OpsSummary {
    pub threads: usize,
    pub ops: u64,
    /// Frees and reallocs of blocks allocated before tracing began (nothing to replay).
    pub unknown: u64,
    /// Frees whose block another thread allocated.
    pub cross_thread: u64,
    /// The peak of live bytes (sizes asked for) over the replayed calls in
    /// their recorded order: what a faithful replay reaches too.
    pub peak_live: u64,
}

#[derive(Default)]
struct Builder {
    per_thread: BTreeMap<u32, Vec<[u64; 5]>>,
    first_seen: Vec<u32>,
    /// Address → (block id, allocating thread, size).
    ids: HashMap<u64, (u64, u32, u64)>,
    next_id: u64,
    live: u64,
    summary: OpsSummary,
}

impl Builder {
    /// One op, numbered by its place among all threads' ops (the trace is read in time order).
    fn push(&mut self, tid: u32, kind: u32, align: u64, size: u64, id: u64, old: u64) {
        if !self.per_thread.contains_key(&tid) {
            self.first_seen.push(tid);
        }
        let seq = self.summary.ops;
        self.per_thread.entry(tid).or_default().push([kind as u64 | (align << 32), size, id, old, seq]);
        self.summary.ops += 1;
    }

    fn new_id(&mut self, ptr: u64, tid: u32, size: u64) -> u64 {
        self.next_id += 1;
        self.ids.insert(ptr, (self.next_id, tid, size));
        self.live += size;
        self.summary.peak_live = self.summary.peak_live.max(self.live);
        self.next_id
    }

    fn take(&mut self, ptr: u64, tid: u32) -> Option<u64> {
        let (id, owner, size) = self.ids.remove(&ptr)?;
        if owner != tid {
            self.summary.cross_thread += 1;
        }
        self.live -= size;
        Some(id)
    }

    fn event(&mut self, ev: &Event) {
        let tid = ev.tid;
        match ev.kind {
            EventKind::Alloc { func, size, align, ptr, .. } if ptr != 0 => {
                let (kind, align) = match func {
                    Func::Malloc => (MALLOC, 0),
                    Func::Calloc => (CALLOC, 0),
                    Func::Valloc | Func::Pvalloc => (ALIGNED, 4096),
                    // C++'s operator new, replayed as the C call its heap manager serves it with.
                    _ if align == 0 => (MALLOC, 0),
                    _ => (ALIGNED, align),
                };
                let id = self.new_id(ptr, tid, size);
                self.push(tid, kind, align, size, id, 0);
            }
            // A failed realloc left its block where it was: nothing to replay.
            EventKind::Realloc { ptr: 0, size, .. } if size != 0 => {}
            EventKind::Realloc { old, size, ptr, .. } => {
                let old_id = if old == 0 { Some(0) } else { self.take(old, tid) };
                match (old_id, ptr) {
                    // realloc(p, 0) freed p.
                    (Some(o), 0) if o != 0 => self.push(tid, FREE, 0, 0, o, 0),
                    (Some(_), 0) => {} // realloc(NULL, 0) that returned NULL
                    (Some(o), p) => {
                        let id = self.new_id(p, tid, size);
                        self.push(tid, REALLOC, 0, size, id, o);
                    }
                    // The block predates tracing: its replay starts as a new block.
                    (None, p) if p != 0 => {
                        self.summary.unknown += 1;
                        let id = self.new_id(p, tid, size);
                        self.push(tid, MALLOC, 0, size, id, 0);
                    }
                    (None, _) => self.summary.unknown += 1,
                }
            }
            EventKind::Free { ptr, .. } if ptr != 0 => match self.take(ptr, tid) {
                Some(id) => self.push(tid, FREE, 0, 0, id, 0),
                None => self.summary.unknown += 1,
            },
            _ => {}
        }
    }
}

/// Writes the ops file of `trace` (one process) to `out`.
pub fn write_ops(trace: &TraceFile, out: &Path) -> Result<OpsSummary, StudyError> {
    let io = |source| StudyError::Io { path: out.to_path_buf(), source };
    let mut b = Builder::default();
    let items = trace.items().map_err(|e| StudyError::Output(format!("{}: {e}", trace.path.display())))?;
    for item in items {
        if let Item::Event(ev) = item {
            b.event(&ev);
        }
    }
    let mut w = BufWriter::new(crate::platform::safe_fs::replace(out, 0o666).map_err(io)?);
    w.write_all(b"MTLABRP2").map_err(io)?;
    w.write_all(&(b.first_seen.len() as u32).to_le_bytes()).map_err(io)?;
    w.write_all(&0u32.to_le_bytes()).map_err(io)?;
    w.write_all(&b.next_id.to_le_bytes()).map_err(io)?;
    for tid in &b.first_seen {
        let ops = &b.per_thread[tid];
        w.write_all(&(ops.len() as u64).to_le_bytes()).map_err(io)?;
        for op in ops {
            for v in op {
                w.write_all(&v.to_le_bytes()).map_err(io)?;
            }
        }
    }
    w.into_inner().map_err(|e| io(e.into_error()))?.commit().map_err(io)?;
    b.summary.threads = b.first_seen.len();
    Ok(b.summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(tid: u32, kind: EventKind) -> Event {
        Event { tid, tsc: 0, cycles: 0, stack: 0, flags: 0, kind }
    }

    fn alloc(tid: u32, size: u64, ptr: u64) -> Event {
        ev(tid, EventKind::Alloc { func: Func::Malloc, size, align: 0, ptr, usable: size })
    }

    fn realloc(tid: u32, old: u64, size: u64, ptr: u64) -> Event {
        ev(tid, EventKind::Realloc { func: Func::Realloc, old, size, ptr, usable: size })
    }

    #[test]
    fn ops_keep_each_thread_order_and_number_blocks() {
        let mut b = Builder::default();
        for e in [
            alloc(1, 100, 0x10),
            alloc(2, 50, 0x20),
            realloc(1, 0x10, 200, 0x30),     // block 1 moves: block 3
            realloc(1, 0x30, 1 << 40, 0),    // fails: block 3 stays
            ev(2, EventKind::Free { func: Func::Free, ptr: 0x30 }), // thread 2 frees thread 1's block
            realloc(2, 0x20, 0, 0),          // realloc(p, 0) frees block 2
            ev(1, EventKind::Free { func: Func::Free, ptr: 0x99 }), // from before tracing
        ] {
            b.event(&e);
        }
        assert_eq!(b.first_seen, vec![1, 2]);
        // The last column: each op's place in the order of all threads.
        assert_eq!(b.per_thread[&1], vec![[MALLOC as u64, 100, 1, 0, 0], [REALLOC as u64, 200, 3, 1, 2]]);
        assert_eq!(b.per_thread[&2], vec![[MALLOC as u64, 50, 2, 0, 1], [FREE as u64, 0, 3, 0, 3], [FREE as u64, 0, 2, 0, 4]]);
        // Live: 100, 150, 250 (realloc 100 → 200), then frees.
        assert_eq!(b.summary, OpsSummary { threads: 0, ops: 5, unknown: 1, cross_thread: 1, peak_live: 250 });
    }
}
