//! The column layout is lossless on real programs' event streams: every
//! thread's events of a real run, written as the preload library's rows and
//! rewritten in columns (the current layout and the previous ones, which
//! version 3 to 5 traces hold; the current one also as chained records),
//! decode to the very same events, one by one.

mod util;

use mtlab::trace::columns::{
    decode_columns, decode_columns_chained, split_chained, split_layout, timing_runs, RowChunk, Stamps, COLUMNS_LAYOUT,
};
use mtlab::trace::encode::ChunkEncoder;
use mtlab::trace::{EventKind, Item, TraceFile, UNTIMED};
use util::*;

/// Events per row chunk (the preload library's chunks are 64 KiB of rows).
const CHUNK_EVENTS: usize = 4000;

/// Every thread's events of `trace`, rewritten and decoded in every layout;
/// the number of events compared.
fn recode_all(trace: &std::path::Path) -> usize {
    let t = TraceFile::open(trace).unwrap();
    let mut per_thread: std::collections::BTreeMap<u32, Vec<Item>> = Default::default();
    for item in t.items().unwrap() {
        if let Item::Event(mut e) = item {
            // The reader's mark of a call not timed (`time_sample` above 1)
            // is written as cycles 0 in rows and columns alike.
            if e.cycles == UNTIMED {
                e.cycles = 0;
            }
            per_thread.entry(e.tid).or_default().push(Item::Event(e));
        }
    }
    let mut compared = 0;
    for (tid, items) in &per_thread {
        let mut chunks = Vec::new();
        for part in items.chunks(CHUNK_EVENTS) {
            let Item::Event(first) = &part[0] else { unreachable!() };
            let mut enc = ChunkEncoder::new(*tid);
            for it in part {
                enc.item(it);
            }
            chunks.push((first.tsc, enc));
        }
        let rows: Vec<RowChunk> = chunks.iter().map(|(t0, e)| RowChunk { first_tsc: *t0, rows: e.body() }).collect();
        for layout in [1, 2, 3, 4, 5, 6, COLUMNS_LAYOUT] {
            let cols = split_layout(&rows, None, layout).unwrap();
            let back = decode_columns(&cols, rows[0].first_tsc, *tid).unwrap();
            assert_eq!(back.len(), items.len(), "thread {tid}, layout {layout}");
            for (i, (a, b)) in back.iter().zip(items).enumerate() {
                assert_eq!(a, b, "thread {tid}, layout {layout}, event {i}");
            }
            compared += back.len();
        }
        // Layout 4 as `mtlab record` writes it: records of 8 row chunks,
        // each running on from its thread's previous one (a chain), against
        // the same records each standing alone.
        let (mut wchain, mut rchain) = (None, None);
        let (mut chained_bytes, mut alone_bytes) = (0, 0);
        let mut back = Vec::new();
        for rec in rows.chunks(8) {
            let cols = split_chained(rec, Stamps::Exact, &mut wchain).unwrap();
            back.extend(decode_columns_chained(&cols, rec[0].first_tsc, *tid, &mut rchain).unwrap());
            chained_bytes += zstd::bulk::compress(&cols, 3).unwrap().len();
            alone_bytes += zstd::bulk::compress(&split_chained(rec, Stamps::Exact, &mut None).unwrap(), 3).unwrap().len();
        }
        assert_eq!(back.len(), items.len(), "thread {tid}, chained");
        for (i, (a, b)) in back.iter().zip(items).enumerate() {
            assert_eq!(a, b, "thread {tid}, chained, event {i}");
        }
        compared += back.len();
        if rows.len() > 8 {
            assert!(chained_bytes < alone_bytes, "thread {tid}: chained {chained_bytes} vs alone {alone_bytes} bytes");
        }
    }
    compared
}

/// The interpreter itself, not a wrapper (pyenv's shim is a shell script,
/// whose trace would hold the shell's few events).
fn python3() -> String {
    let o = std::process::Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output().unwrap();
    assert!(o.status.success(), "python3 runs");
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}

#[test]
fn real_programs_event_streams_round_trip_through_every_layout() {
    let lab = Lab::new();
    let py = python3();
    // python3 with the system allocator: dict and string churn, glibc's
    // reuse and carving (a program mtlab did not write).
    let churn = "d = {}\nfor i in range(60000):\n    k = str(i % 3000)\n    d[k] = ('x' * (i % 90)) + k\n";
    let o = lab.record_cmd("py.mtl", &[], &py, &["-c", churn]).env("PYTHONMALLOC", "malloc").output().unwrap();
    assert_success(&o, "mtlab record python3");
    let n = recode_all(&lab.path("py.mtl"));
    assert!(n > 4 * 100_000, "{n} events compared");

    // A size-class allocator: the same program under mimalloc.
    let mi = "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2";
    if std::path::Path::new(mi).exists() {
        let o = lab
            .record_cmd("mi.mtl", &[], &py, &["-c", churn])
            .env("PYTHONMALLOC", "malloc")
            .env("LD_PRELOAD", mi)
            .output()
            .unwrap();
        assert_success(&o, "mtlab record python3 under mimalloc");
        let n = recode_all(&lab.path("mi.mtl"));
        assert!(n > 4 * 100_000, "{n} events compared");
    } else {
        skip(&format!("{mi} not installed"));
    }
}

/// A finished trace's EVENTS records in columns, and the values of their
/// CYCLES_SKIP streams.
fn records_and_timing_runs(trace: &std::path::Path) -> (usize, usize) {
    let bytes = std::fs::read(trace).unwrap();
    let (mut records, mut runs) = (0, 0);
    for r in raw_records(&bytes).iter().filter(|r| r.ty == 1 && r.flags & 2 != 0) {
        let crc = if r.flags & 4 != 0 { 8 } else { 0 };
        let body = zstd::bulk::decompress(&bytes[r.offset as usize + 8 + 24..r.end as usize - crc], 64 << 20).unwrap();
        runs += timing_runs(&body).unwrap();
        records += 1;
    }
    (records, runs)
}

/// The rewrite replays the preload library's timing draws (each thread's
/// generator seeded from its first call's stamp and id): in the finished
/// traces of four threads and of a fork child, no call's timing departs
/// from the replay, so each record's CYCLES_SKIP holds at most its last run,
/// where it held one value per timed call before; the calls are still one
/// in 32 timed, and a thread's first call never.
#[test]
fn the_preload_librarys_timing_draws_are_replayed() {
    let lab = Lab::new();
    let threads = lab.compile("threads");
    let o = lab.record_cmd("t.mtl", &[], &threads, &["4", "40000"]).output().unwrap();
    assert_success(&o, "mtlab record threads");
    let fork = lab.compile("fork");
    let o = lab.record_cmd("f.mtl", &[], &fork, &["30000", "30000"]).output().unwrap();
    assert_success(&o, "mtlab record fork");
    let mut traces = vec![lab.path("t.mtl"), lab.path("f.mtl")];
    traces.extend(std::fs::read_dir(lab.path("f.mtl.d")).unwrap().map(|e| e.unwrap().path()));
    assert_eq!(traces.len(), 3, "the fork child's trace: {traces:?}");
    for trace in &traces {
        let (records, runs) = records_and_timing_runs(trace);
        assert!(records > 0, "{trace:?}: records in columns");
        assert!(runs <= records, "{trace:?}: {runs} timing runs in {records} records: calls departed from the replayed draws");
        let (mut calls, mut timed) = (0u64, 0u64);
        let mut seen = std::collections::HashSet::new();
        for item in TraceFile::open(trace).unwrap().items().unwrap() {
            let Item::Event(e) = item else { continue };
            if !matches!(e.kind, EventKind::Alloc { .. } | EventKind::Free { .. }) {
                continue;
            }
            if seen.insert(e.tid) {
                assert_eq!(e.cycles, UNTIMED, "{trace:?}: thread {}'s first call is not timed", e.tid);
            }
            calls += 1;
            timed += (e.cycles != UNTIMED) as u64;
        }
        // 1/32 of 30 000 to 320 000 calls: the binomial's sd is under 3 %.
        let share = timed as f64 * 32.0 / calls as f64;
        assert!((0.85..1.15).contains(&share), "{trace:?}: {timed} of {calls} calls timed, {share:.3} x 1/32");
    }
}
