//! The decoder on a thread of its own: it fills batches of events (with
//! the stack definitions met among them, at their places) and hands them
//! through a bounded queue to the pass on the calling thread, which
//! replays them in the order decoded. The decode (zstd, the columns, the
//! predictions, the merge of threads' chunks by time) and the replay take
//! comparable time on a large trace, and a report otherwise leaves all but
//! one core idle.
//!
//! The order is the decoder's: one producer fills each batch in the order
//! `Items` yields, one consumer empties them in the order sent.

use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};

use crate::trace::{Event, ItemRef, Items, TraceFile};

/// Events a batch holds: ~100 bytes each, ~400 KiB a batch, so that the
/// batches alive at once (`QUEUED` waiting, one being filled, one being
/// replayed) add under 2 MiB to a report's peak, and a hand-over (a futex
/// wake at most) is spread over thousands of events.
pub const BATCH: usize = 4096;

/// Batches decoded and waiting for the replay: enough to ride over the
/// unevenness of either side (a chunk's zstd frame, a table growing).
pub const QUEUED: usize = 2;

/// Events in a trace below which the decode stays on the calling thread: a
/// thread's start and the hand-overs cost more than a small trace's decode
/// (a tree of hundreds of small processes is reported one after another).
pub const MIN_EVENTS: u64 = 1 << 16;

/// The environment variable that sets the threads a report decodes and
/// replays with: 1 keeps both on the calling thread.
pub const THREADS_VAR: &str = "MTLAB_REPORT_THREADS";

/// Decoded events and the stack definitions among them.
#[derive(Debug, Default)]
pub struct Batch {
    pub events: Vec<Event>,
    /// Each stack definition with the count of the batch's events decoded
    /// before it, in the order decoded.
    pub stacks: Vec<(usize, u32, Vec<u64>)>,
}

impl Batch {
    fn with_capacity(n: usize) -> Batch {
        Batch { events: Vec::with_capacity(n), stacks: Vec::new() }
    }
}

/// The threads `MTLAB_REPORT_THREADS` asks for: None when unset; an error
/// saying what to do when it is not a number from 1 up.
pub fn threads_from_env() -> Result<Option<usize>, String> {
    match std::env::var(THREADS_VAR) {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if n >= 1 => Ok(Some(n)),
            _ => Err(format!("{THREADS_VAR}={v:?}: give a number of threads from 1 up (1: decode and replay on one thread)")),
        },
        Err(e) => Err(format!("{THREADS_VAR}: {e}")),
    }
}

/// Whether `trace` is decoded on a thread of its own: it is large enough,
/// more than one CPU is allowed to the process (`available_parallelism`
/// reads `sched_getaffinity` and the cgroup's quota), and
/// `MTLAB_REPORT_THREADS` does not ask for one (a value the report's entry
/// refused counts as 1).
pub fn wanted(trace: &TraceFile) -> bool {
    let events: u64 = trace.chunks.iter().map(|c| c.n_events as u64).sum();
    if events < MIN_EVENTS {
        return false;
    }
    match threads_from_env() {
        Ok(Some(n)) => n >= 2,
        Err(_) => false,
        Ok(None) => std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2),
    }
}

/// The decoder's side: fills batches from `items` and sends them on
/// `full`, reusing the batches `empty` gives back, until the items end or
/// the replay hangs up.
pub fn decode(items: &mut Items, full: SyncSender<Batch>, empty: Receiver<Batch>, batch: usize) {
    loop {
        let mut b = empty.try_recv().unwrap_or_else(|_| Batch::with_capacity(batch));
        let ended = fill(items, &mut b, batch);
        if (!b.events.is_empty() || !b.stacks.is_empty()) && full.send(b).is_err() {
            return;
        }
        if ended {
            return;
        }
    }
}

/// Fills `b` afresh with the next items, up to `batch` events (and the
/// stack definitions met among them); true when the items have ended.
pub fn fill(items: &mut Items, b: &mut Batch, batch: usize) -> bool {
    b.events.clear();
    b.stacks.clear();
    while b.events.len() < batch {
        match items.next_ref() {
            Some(ItemRef::Event(ev)) => b.events.push(ev.clone()),
            Some(ItemRef::Stack { id, pcs }) => b.stacks.push((b.events.len(), id, pcs)),
            None => return true,
        }
    }
    false
}

/// The two ends of the queue the replay holds: batches in, used ones back.
pub struct Queue {
    pub full: Receiver<Batch>,
    pub empty: Sender<Batch>,
}

/// A queue of `queued` batches: the replay's ends, and the decoder's
/// (`decode`'s `full` and `empty`).
pub fn queue(queued: usize) -> (Queue, SyncSender<Batch>, Receiver<Batch>) {
    let (full_tx, full_rx) = sync_channel(queued);
    let (empty_tx, empty_rx) = channel();
    (Queue { full: full_rx, empty: empty_tx }, full_tx, empty_rx)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::trace::encode::TraceWriter;
    use crate::trace::{EventKind, Func, Item};
    use std::path::Path;

    /// A trace of three threads whose chunks overlap in time, each chunk
    /// with stack definitions among its events: 64-byte blocks allocated
    /// by each thread and freed by the next thread's following chunk, and
    /// a large block per chunk freed at once by its thread, so that the
    /// live bytes' peak and the time series depend on the order of the
    /// threads' events.
    pub(crate) fn threads_trace(path: &Path) {
        let header = [
            ("pid", "4242"),
            ("ppid", "1"),
            ("cmdline", "./threads"),
            ("exe", "/usr/bin/threads"),
            ("start_ns", "1700000000000000000"),
            ("start_tsc", "1000"),
            ("tsc_hz", "2000000000"),
            ("page_size", "4096"),
            ("allocator", "glibc"),
            ("stacks", "fp"),
            ("max_depth", "128"),
            ("mtlab_version", "0.1.0"),
        ];
        let mut w = TraceWriter::create(path, header).unwrap();
        let block = |t: u64, k: u64, j: u64| 0x5555_0000_0000 + (t << 32) + (k << 16) + j * 64;
        let ev = |tid: u32, tsc: u64, stack: u32, kind: EventKind| {
            Item::Event(crate::trace::Event { tid, tsc, cycles: 11, stack, flags: 0, kind })
        };
        for k in 0..6u64 {
            for t in 1..=3u64 {
                let tid = t as u32;
                let mut items = Vec::new();
                for j in 0..40u64 {
                    let tsc = 1000 + k * 10_000 + j * 31 + t * 7;
                    if j % 10 == 0 {
                        let id = (t * 1000 + k * 10 + j / 10) as u32;
                        items.push(Item::Stack { id, pcs: vec![0x40_1000 + id as u64, 0x40_2000 + t] });
                    }
                    let stack = (t * 1000 + k * 10 + j / 10) as u32;
                    let kind = EventKind::Alloc { func: Func::Malloc, size: 48, align: 0, ptr: block(t, k, j), usable: 56 };
                    items.push(ev(tid, tsc, stack, kind));
                    if k > 0 {
                        let from = t % 3 + 1;
                        let kind = EventKind::Free { func: Func::Free, ptr: block(from, k - 1, j) };
                        items.push(ev(tid, tsc + 3, 0, kind));
                    }
                    if j == t * 10 {
                        let ptr = 0x7000_0000_0000 + (t << 24) + k;
                        let size = 100_000 * t;
                        let kind = EventKind::Alloc { func: Func::Malloc, size, align: 0, ptr, usable: size };
                        items.push(ev(tid, tsc + 1, stack, kind));
                        items.push(ev(tid, tsc + 2 + 40 * t, 0, EventKind::Free { func: Func::Free, ptr }));
                    }
                }
                items.sort_by_key(|i| match i {
                    Item::Event(e) => e.tsc,
                    Item::Stack { .. } => 0,
                });
                w.events_chunk(tid, &items).unwrap();
            }
        }
        w.finish().unwrap();
    }

    /// Events and stack definitions decoded on the other thread come back
    /// in the decoder's order, whatever the batch size, and a batch holds
    /// at most `batch` events.
    #[test]
    fn batches_keep_the_decoders_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.mtl");
        threads_trace(&path);
        let trace = TraceFile::open(&path).unwrap();
        let want: Vec<Item> = trace.items().unwrap().collect();
        assert!(want.iter().filter(|i| matches!(i, Item::Event(_))).count() > 500);
        assert!(want.iter().filter(|i| matches!(i, Item::Stack { .. })).count() > 50);
        // The threads' events are interleaved by time.
        let tids: Vec<u32> = want.iter().filter_map(|i| if let Item::Event(e) = i { Some(e.tid) } else { None }).collect();
        assert!(tids.windows(2).filter(|w| w[0] != w[1]).count() > 100);
        for batch in [1, 3, 7, 64, 4096] {
            let mut items = trace.items().unwrap();
            let (q, full, empty) = queue(2);
            let got = std::thread::scope(|s| {
                s.spawn(|| decode(&mut items, full, empty, batch));
                let mut got = Vec::new();
                for mut b in q.full.iter() {
                    assert!(b.events.len() <= batch);
                    let mut stacks = std::mem::take(&mut b.stacks).into_iter().peekable();
                    for (i, ev) in b.events.iter().enumerate() {
                        while let Some((_, id, pcs)) = stacks.next_if(|s| s.0 == i) {
                            got.push(Item::Stack { id, pcs });
                        }
                        got.push(Item::Event(ev.clone()));
                    }
                    got.extend(stacks.map(|(_, id, pcs)| Item::Stack { id, pcs }));
                    // The decoder has gone after its last batch.
                    let _ = q.empty.send(b);
                }
                got
            });
            assert_eq!(got, want, "batch of {batch}");
        }
    }
}
