//! Lean traces (`mtlab compact --lean`): a compact trace whose heap
//! addresses are made up and whose frees carry no stack.
//!
//! Each allocation gets the next address of its thread's bump arena
//! (which the column layout predicts exactly), and each free or realloc
//! names its own block's made-up address: the real addresses, with every
//! figure derived from them (fragmentation, utilization, unplaced bytes),
//! are gone; counts, sites, temporaries, leaks and live bytes are the
//! trace's. A free of its own block costs what the real free cost against
//! the real allocations (a rank among recent ones, or the allocation's
//! number): naming instead the latest live block of the same kind, as
//! heaptrack's (size, stack) index does, left a program's long-lived
//! blocks the oldest made-up ones, whose frees at exit missed every
//! window (python3's dict teardown: 211 kB of pychurn's 548 kB, issue 38 §2).

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::event::{Event, EventKind, Item, FLAG_FAILED};

/// Made-up addresses start here (1 TiB): above where a non-PIE program's
/// break heap lies, below where Linux maps PIE programs and libraries.
const ARENA_BASE: u64 = 1 << 40;
/// Each thread takes arenas of this size in turn from one bump pointer.
const ARENA: u64 = 1 << 30;
/// Between two made-up blocks (room for a glibc chunk header, so that
/// the range an mmap'd chunk maps never overlaps its neighbour).
const GAP: u64 = 16;

/// The stack an event keeps in a lean trace: a free's is dropped.
pub fn kept_stack(e: &Event) -> Option<u32> {
    (!matches!(e.kind, EventKind::Free { .. } | EventKind::SampleFree { .. }) && e.stack != 0).then_some(e.stack)
}

/// Rewrites events, in the global order the report replays them, to a lean
/// trace's made-up addresses.
pub struct Lean {
    /// Stacks some event other than a free names: the others are dropped.
    keep_stacks: HashSet<u32>,
    /// Live real address → its made-up one.
    real: HashMap<u64, u64>,
    /// Each thread's next address and the end of its arena.
    arenas: HashMap<u32, (u64, u64)>,
    next_arena: u64,
}

impl Lean {
    /// `items`: the whole trace once, to find the stacks a lean trace keeps.
    pub fn new(items: impl Iterator<Item = Item>) -> Lean {
        let mut keep_stacks = HashSet::default();
        for it in items {
            if let Item::Event(e) = it {
                keep_stacks.extend(kept_stack(&e));
            }
        }
        Lean::keeping(keep_stacks)
    }

    /// With the stacks to keep known: [`kept_stack`] of every event, found
    /// by a pass that read the trace anyway (`mtlab compact`'s exact one).
    pub fn keeping(keep_stacks: HashSet<u32>) -> Lean {
        Lean { keep_stacks, real: HashMap::default(), arenas: HashMap::default(), next_arena: ARENA_BASE }
    }

    /// Whether a stack definition stays in the lean trace.
    pub fn keeps(&self, item: &Item) -> bool {
        match item {
            Item::Stack { id, .. } => self.keep_stacks.contains(id),
            Item::Event(_) => true,
        }
    }

    fn bump(&mut self, tid: u32, len: u64) -> u64 {
        let need = len.saturating_add(GAP);
        let (next, end) = self.arenas.entry(tid).or_insert((0, 0));
        if next.saturating_add(need) > *end {
            let arenas = need.div_ceil(ARENA).max(1);
            *next = self.next_arena + GAP;
            self.next_arena += arenas * ARENA;
            *end = self.next_arena;
        }
        let p = *next;
        *next += need;
        p
    }

    fn born(&mut self, tid: u32, ptr: u64, len: u64) -> u64 {
        let p = self.bump(tid, len);
        self.real.insert(ptr, p);
        p
    }

    /// The made-up address of the live block at real address `ptr`; `take`:
    /// it dies. Unknown blocks (allocated before tracing began) keep theirs.
    fn named(&mut self, ptr: u64, take: bool) -> u64 {
        let p = if take { self.real.remove(&ptr) } else { self.real.get(&ptr).copied() };
        p.unwrap_or(ptr)
    }

    /// Gives `ev` its made-up addresses; a free loses its stack.
    pub fn rewrite(&mut self, ev: &mut Event) {
        let failed = ev.flags & FLAG_FAILED != 0;
        let tid = ev.tid;
        match &mut ev.kind {
            EventKind::Alloc { size, ptr, usable, .. } if *ptr != 0 => {
                *ptr = self.born(tid, *ptr, (*usable).max(*size));
            }
            EventKind::Free { ptr, .. } => {
                *ptr = self.named(*ptr, true);
                ev.stack = 0;
            }
            EventKind::UsableSize { ptr, .. } => *ptr = self.named(*ptr, false),
            EventKind::Realloc { old, size, ptr, usable, .. } => {
                // A failed realloc leaves the old block where it was.
                let moved = !failed && (*ptr != 0 || *size == 0);
                if *old != 0 {
                    *old = self.named(*old, moved);
                }
                if *ptr != 0 && !failed {
                    *ptr = self.born(tid, *ptr, (*usable).max(*size));
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::event::Func;
    use crate::testutil::Xorshift;

    fn alloc(tid: u32, stack: u32, size: u64, ptr: u64) -> Event {
        Event { tid, tsc: 0, cycles: 0, stack, flags: 0, kind: EventKind::Alloc { func: Func::Malloc, size, align: 0, ptr, usable: size } }
    }
    fn free(tid: u32, ptr: u64) -> Event {
        Event { tid, tsc: 0, cycles: 0, stack: 7, flags: 0, kind: EventKind::Free { func: Func::Free, ptr } }
    }

    /// Per thread, the frees of its own last allocation (the report's
    /// temporary allocations), and per (thread, stack, size) the live count
    /// after each event: what a lean trace must keep.
    /// A block's kind here: (thread, stack, size).
    type Key = (u32, u32, u64);

    fn figures(evs: &[Event]) -> (u64, Vec<Vec<(Key, usize)>>) {
        let mut kind_of: HashMap<u64, Key> = HashMap::default();
        let mut live: std::collections::BTreeMap<Key, usize> = Default::default();
        let mut last: HashMap<u32, u64> = HashMap::default();
        let (mut temporary, mut after) = (0, Vec::new());
        for e in evs {
            match e.kind {
                EventKind::Alloc { size, ptr, .. } => {
                    assert!(kind_of.insert(ptr, (e.tid, e.stack, size)).is_none(), "{ptr:#x} allocated while live");
                    *live.entry((e.tid, e.stack, size)).or_default() += 1;
                    last.insert(e.tid, ptr);
                }
                EventKind::Free { ptr, .. } => {
                    let k = kind_of.remove(&ptr).expect("a free of a live block");
                    *live.get_mut(&k).unwrap() -= 1;
                    if last.get(&e.tid) == Some(&ptr) {
                        temporary += 1;
                        last.insert(e.tid, 0);
                    }
                }
                _ => unreachable!(),
            }
            after.push(live.iter().map(|(&k, &n)| (k, n)).collect());
        }
        (temporary, after)
    }

    /// Three threads allocate two sizes at two stacks and free at random
    /// (often their own last block, often another thread's): the made-up
    /// addresses never collide, every free names the made-up address its
    /// own block was given (so a program's long-lived blocks stay those of
    /// the trace, not the oldest made-up ones of their kind), the
    /// temporary allocations and live blocks per kind after every event
    /// are the trace's, frees lose their stacks and the stacks only frees
    /// named are dropped.
    #[test]
    fn made_up_addresses_keep_every_block_and_count() {
        let mut rnd = Xorshift::new(0x9e37_79b9_7f4a_7c15);
        let (mut live, mut next, mut evs) = (Vec::new(), 0x5555_0000u64, Vec::new());
        for _ in 0..20_000 {
            let tid = 1 + rnd.below(3) as u32;
            if live.is_empty() || rnd.below(2) == 0 {
                next += 64;
                live.push(next);
                evs.push(alloc(tid, 1 + rnd.below(2) as u32, 16 << rnd.below(2), next));
            } else {
                // Half the time the latest block: a temporary when its thread frees it.
                let i = if rnd.below(2) == 0 { live.len() - 1 } else { rnd.below(live.len() as u64) as usize };
                let p = live.swap_remove(i);
                evs.push(free(tid, p));
            }
        }
        let items = evs.iter().cloned().map(Item::Event).chain([Item::Stack { id: 7, pcs: vec![1] }]);
        let mut lean = Lean::new(items);
        assert!(lean.keeps(&Item::Stack { id: 1, pcs: vec![] }));
        assert!(!lean.keeps(&Item::Stack { id: 7, pcs: vec![] }), "a stack only frees named");
        let made: Vec<Event> = evs
            .iter()
            .map(|e| {
                let mut e = e.clone();
                lean.rewrite(&mut e);
                e
            })
            .collect();
        assert!(made.iter().all(|e| !matches!(e.kind, EventKind::Free { .. }) || e.stack == 0));
        let (mut given, mut named_own) = (HashMap::default(), 0);
        for (real, lean) in evs.iter().zip(&made) {
            match (&real.kind, &lean.kind) {
                (EventKind::Alloc { ptr: r, .. }, EventKind::Alloc { ptr: l, .. }) => {
                    assert!(*l >= ARENA_BASE, "{l:#x} is made up");
                    given.insert(*r, *l);
                }
                (EventKind::Free { ptr: r, .. }, EventKind::Free { ptr: l, .. }) => {
                    assert_eq!(given.remove(r), Some(*l), "the free of {r:#x} names its own block");
                    named_own += 1;
                }
                _ => unreachable!(),
            }
        }
        assert!(named_own > 5000, "{named_own}");
        let (t0, a0) = figures(&evs);
        let (t1, a1) = figures(&made);
        assert!(t0 > 1000, "the test makes temporaries: {t0}");
        assert_eq!(t0, t1);
        assert!(a0 == a1, "live blocks per kind");
    }
}

#[cfg(test)]
mod lean_sizes {
    //! `MTLAB_LEAN=TRACE [MTLAB_LEAN_HT=HEAPTRACK.zst] cargo test --release
    //! --lib lean_sizes -- --ignored --nocapture`: the bytes of candidate
    //! lean codings of a finished trace's events (issue 38 §2):
    //! (a) heaptrack's: one text stream in global order, "+ info" per
    //!     allocation and "- info" per free (info: a (size, stack) pair, the
    //!     freed block's own), stacks as a trie of program counters, a time
    //!     line every 10 ms; zstd at several levels, and the same as varints;
    //! (b) `compact` with this module's made-up addresses, at several quanta.
    use std::fmt::Write as _;

    use super::*;
    use crate::trace::compact::{compact, compact_with};
    use crate::trace::TraceFile;

    fn zstd_sizes(name: &str, data: &[u8]) {
        let mut out = format!("  (a) {name:<8} raw {:>11}", data.len());
        for (level, long) in [(3, false), (9, false), (19, false), (19, true)] {
            let mut c = zstd::bulk::Compressor::new(level).unwrap();
            if long {
                c.set_parameter(zstd::zstd_safe::CParameter::WindowLog(27)).unwrap();
                c.set_parameter(zstd::zstd_safe::CParameter::EnableLongDistanceMatching(true)).unwrap();
            }
            let n = c.compress(data).unwrap().len();
            let _ = write!(out, "  zstd-{level}{} {n:>10}", if long { "L" } else { "" });
        }
        say!("{out}");
    }

    fn varint(out: &mut Vec<u8>, v: u64) {
        crate::trace::varint::put_varint(out, v);
    }

    /// (a): heaptrack's coding of `path`'s events, as text and as varints.
    fn heaptrack_like(path: &str) {
        let t = TraceFile::open(path).unwrap();
        let hz: f64 = t.runinfo_get("tsc_hz").or_else(|| t.header.get("tsc_hz")).and_then(|v| v.parse().ok()).unwrap_or(2.6e9);
        let tick10ms = (hz / 100.0) as u64;
        let (mut text, mut bin) = (String::new(), Vec::new());
        let mut stacks: HashMap<u32, Vec<u64>> = HashMap::default();
        let mut ips: HashMap<u64, u64> = HashMap::default();
        let mut trie: HashMap<(u64, u64), u64> = HashMap::default();
        let mut traces: HashMap<u32, u64> = HashMap::default();
        let mut infos: HashMap<(u64, u64), u64> = HashMap::default();
        let mut live: HashMap<u64, u64> = HashMap::default();
        let (mut events, mut next_c) = (0u64, 0u64);
        let mut first_tsc = None;
        for it in t.items().unwrap() {
            let ev = match it {
                Item::Stack { id, pcs } => {
                    stacks.insert(id, pcs);
                    continue;
                }
                Item::Event(e) => e,
            };
            let t0 = *first_tsc.get_or_insert(ev.tsc);
            if ev.tsc.saturating_sub(t0) >= next_c {
                let ms = ev.tsc.saturating_sub(t0) / tick10ms.max(1) * 10;
                let _ = writeln!(text, "c {ms:x}");
                bin.push(b'c');
                varint(&mut bin, ms);
                next_c = (ms / 10 + 1) * tick10ms;
            }
            let mut info = |size: u64, stack: u32, text: &mut String, bin: &mut Vec<u8>| -> u64 {
                let trace = match traces.get(&stack) {
                    Some(&t) => t,
                    None => {
                        let mut parent = 0u64;
                        for &pc in stacks.get(&stack).map(|v| v.as_slice()).unwrap_or_default().iter().rev() {
                            let n = ips.len() as u64 + 1;
                            let ip = *ips.entry(pc).or_insert_with(|| {
                                let _ = writeln!(text, "i {pc:x}");
                                bin.push(b'i');
                                varint(bin, pc);
                                n
                            });
                            let n = trie.len() as u64 + 1;
                            parent = *trie.entry((parent, ip)).or_insert_with(|| {
                                let _ = writeln!(text, "t {ip:x} {parent:x}");
                                bin.push(b't');
                                varint(bin, ip);
                                varint(bin, parent);
                                n
                            });
                        }
                        traces.insert(stack, parent);
                        parent
                    }
                };
                let n = infos.len() as u64;
                *infos.entry((size, trace)).or_insert_with(|| {
                    let _ = writeln!(text, "a {size:x} {trace:x}");
                    bin.push(b'a');
                    varint(bin, size);
                    varint(bin, trace);
                    n
                })
            };
            let mut free = |p: u64, text: &mut String, bin: &mut Vec<u8>| {
                if let Some(i) = live.remove(&p) {
                    let _ = writeln!(text, "- {i:x}");
                    bin.push(b'-');
                    varint(bin, i);
                }
            };
            match ev.kind {
                EventKind::Alloc { size, ptr, .. } if ptr != 0 => {
                    let i = info(size, ev.stack, &mut text, &mut bin);
                    let _ = writeln!(text, "+ {i:x}");
                    bin.push(b'+');
                    varint(&mut bin, i);
                    live.insert(ptr, i);
                }
                EventKind::Free { ptr, .. } => free(ptr, &mut text, &mut bin),
                EventKind::Realloc { old, size, ptr, .. } if ev.flags & FLAG_FAILED == 0 => {
                    if old != 0 {
                        free(old, &mut text, &mut bin);
                    }
                    if ptr != 0 {
                        let i = info(size, ev.stack, &mut text, &mut bin);
                        let _ = writeln!(text, "+ {i:x}");
                        bin.push(b'+');
                        varint(&mut bin, i);
                        live.insert(ptr, i);
                    }
                }
                _ => {}
            }
            events += 1;
        }
        say!("{path}: {events} events, {} infos, {} stacks, {} trie nodes", infos.len(), traces.len(), trie.len());
        zstd_sizes("text", text.as_bytes());
        zstd_sizes("varints", &bin);
    }

    #[test]
    #[ignore]
    fn lean_sizes() {
        let Ok(path) = std::env::var("MTLAB_LEAN") else { return };
        if let Ok(ht) = std::env::var("MTLAB_LEAN_HT") {
            say!("heaptrack's trace {ht}: {} bytes", std::fs::metadata(&ht).unwrap().len());
        }
        let t0 = std::time::Instant::now();
        heaptrack_like(&path);
        say!("  ({:.1} s)", t0.elapsed().as_secs_f64());
        let dir = tempfile::tempdir().unwrap();
        let tf = TraceFile::open(&path).unwrap();
        say!("  trace as given: {} bytes", tf.file_len);
        if tf.compact_quantum().is_some() {
            say!("  (b) skipped: the trace is compact already");
            return;
        }
        let out = dir.path().join("c.mtl");
        // MTLAB_LEAN_OUT=FILE: the lean trace (quantum 2^16) kept, to report on.
        if let Ok(keep) = std::env::var("MTLAB_LEAN_OUT") {
            let st = compact_with(&tf, std::path::Path::new(&keep), 1 << 16, &[], true).unwrap();
            say!("  lean trace written to {keep}: {} bytes", st.bytes_after);
        }
        let st = compact(&tf, &out, 1 << 16, &[]).unwrap();
        say!("  compact, quantum 2^16: {} bytes", st.bytes_after);
        for q in [16, 20, 24] {
            let t0 = std::time::Instant::now();
            let st = compact_with(&tf, &out, 1 << q, &[], true).unwrap();
            say!("  (b) lean, quantum 2^{q}: {} bytes ({:.1} s)", st.bytes_after, t0.elapsed().as_secs_f64());
        }
    }
}
