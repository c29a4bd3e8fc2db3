//! `mtlab heap replay`: a recorded trace's heap calls turned into the ops
//! file the replay program (`native/heap/replay.c`) re-executes — each
//! thread's calls in its own order, every block numbered so that a free in
//! one thread of a block from another can wait for its allocation. Run under
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
}

#[derive(Default)]
struct Builder {
    per_thread: BTreeMap<u32, Vec<[u64; 4]>>,
    first_seen: Vec<u32>,
    ids: HashMap<u64, (u64, u32)>,
    next_id: u64,
    summary: OpsSummary,
}

impl Builder {
    fn push(&mut self, tid: u32, kind: u32, align: u64, size: u64, id: u64, old: u64) {
        if !self.per_thread.contains_key(&tid) {
            self.first_seen.push(tid);
        }
        self.per_thread.entry(tid).or_default().push([kind as u64 | (align << 32), size, id, old]);
        self.summary.ops += 1;
    }

    fn new_id(&mut self, ptr: u64, tid: u32) -> u64 {
        self.next_id += 1;
        self.ids.insert(ptr, (self.next_id, tid));
        self.next_id
    }

    fn take(&mut self, ptr: u64, tid: u32) -> Option<u64> {
        let (id, owner) = self.ids.remove(&ptr)?;
        if owner != tid {
            self.summary.cross_thread += 1;
        }
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
                    _ => (ALIGNED, align),
                };
                let id = self.new_id(ptr, tid);
                self.push(tid, kind, align, size, id, 0);
            }
            EventKind::Realloc { old, size, ptr, .. } => {
                let old_id = if old == 0 { Some(0) } else { self.take(old, tid) };
                match (old_id, ptr) {
                    // realloc(p, 0) freed p.
                    (Some(o), 0) if o != 0 && size == 0 => self.push(tid, FREE, 0, 0, o, 0),
                    (Some(_), 0) => {} // failed: nothing happened
                    (Some(o), p) => {
                        let id = self.new_id(p, tid);
                        self.push(tid, REALLOC, 0, size, id, o);
                    }
                    // The block predates tracing: its replay starts as a new block.
                    (None, p) if p != 0 => {
                        self.summary.unknown += 1;
                        let id = self.new_id(p, tid);
                        self.push(tid, MALLOC, 0, size, id, 0);
                    }
                    (None, _) => self.summary.unknown += 1,
                }
            }
            EventKind::Free { ptr } if ptr != 0 => match self.take(ptr, tid) {
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
    let mut w = BufWriter::new(std::fs::File::create(out).map_err(io)?);
    w.write_all(b"MTLABRP1").map_err(io)?;
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
    w.flush().map_err(io)?;
    b.summary.threads = b.first_seen.len();
    Ok(b.summary)
}
