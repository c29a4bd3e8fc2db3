//! End-to-end tests: the built `mtlab` records small C programs from
//! native/tests/ (compiled per test) and real programs, and the numbers of
//! `mtlab report --json` are checked exactly.
//!
//! Exactness: a test program's own calls are counted either through its
//! allocation sites (the innermost frame is a function of the program, see
//! `util::site`) or by subtracting a run of the same program that does none of
//! the work (N = 0, or the argument "baseline"), which makes whatever the C
//! runtime allocates by itself cancel out.

mod util;

use std::os::unix::process::ExitStatusExt;

use util::*;

// ---------------------------------------------------------------------------
// Small programs with exactly known behaviour.

#[test]
fn n_mallocs_counts_peak_and_leaks_are_exact() {
    let lab = Lab::new();
    let prog = lab.compile("n_mallocs");
    let (n, s, k) = (1000u64, 48u64, 10u64);
    lab.record_ok("base.mtl", &prog, &["0", "48", "0"]);
    lab.record_ok("t.mtl", &prog, &[&n.to_string(), &s.to_string(), &k.to_string()]);
    let base = lab.report("base.mtl");
    let r = lab.report("t.mtl");
    strict(&r);
    strict(&base);

    assert_eq!(call_deltas(&r, &base), deltas(&[("malloc", n as i64), ("free", (n - k) as i64)]));
    assert_eq!(total_size(&r, "malloc") - total_size(&base, "malloc"), n * s);
    assert_eq!(total_size(&r, "free") - total_size(&base, "free"), (n - k) * s, "free sizes are the freed blocks'");
    assert_eq!(site(&r, "do_allocs"), site_of(n, n * s, k, k * s));
    assert_eq!(live_bytes_peak(&r) - live_bytes_peak(&base), n * s, "all N blocks are live at the peak");
    assert_eq!(live_bytes_end(&r) - live_bytes_end(&base), k * s, "K blocks leak");
    assert_eq!(u(&r["leaks"]["objects"]) - u(&base["leaks"]["objects"]), k);
    assert_eq!(u(&r["end"]["live_objects"]) - u(&base["end"]["live_objects"]), k);
    if calls(&base, "malloc") == 0 {
        // The runtime allocated nothing: the means are this program's alone.
        assert_eq!(mean_size(&r, "malloc"), s as f64);
        assert_eq!(live_bytes_peak(&r), n * s);
        assert_eq!(live_bytes_end(&r), k * s);
    }
    // The leak table's first site is the program's.
    let leak = &r["leaks"]["top"][0];
    assert_eq!(leak["frames"][0]["function"], "do_allocs");
    assert_eq!((u(&leak["live_objects"]), u(&leak["live_bytes"])), (k, k * s));
    assert_eq!(r["exit"], "exit code 0");
    assert_eq!(r["clean_end"], true);
    assert_eq!(u(&r["events_dropped"]), 0);
    // The blocks live in the brk heap, which is known, so fragmentation and
    // utilization are meaningful: the K survivors sit at the top of a span
    // of at least N*S bytes.
    assert!(u(&r["end"]["brk_bytes"]) >= n * s);
    let frag = f(&r["end"]["fragmentation"]["total"]);
    assert!(frag > 0.5, "K of N blocks live at the top of the heap: fragmentation {frag}");
}

#[test]
fn a_sample_of_calls_is_timed_by_default_and_every_call_with_time_every() {
    // 100 000 mallocs and frees: counts, bytes and the heap are the same
    // whatever is timed; by default each call is timed with probability
    // 1/32, so the timed mallocs are binomial(100 000, 1/32): 3125 ± 55.
    let lab = Lab::new();
    let prog = lab.compile("n_mallocs");
    let n = 100_000u64;
    let args = [&n.to_string()[..], "48", "0"];
    lab.record_ok("s.mtl", &prog, &args);
    assert_success(&lab.record_cmd("e.mtl", &["--time", "every"], &prog, &args).output().unwrap(), "record --time every");
    assert_success(&lab.record_cmd("h.mtl", &["--time", "1/2"], &prog, &args).output().unwrap(), "record --time 1/2");
    let (s, e, h) = (lab.report("s.mtl"), lab.report("e.mtl"), lab.report("h.mtl"));
    for r in [&s, &e, &h] {
        strict(r);
        assert_eq!(site(r, "do_allocs"), site_of(n, n * 48, 0, 0));
    }
    for func in ["malloc", "free"] {
        let (cs, ce, ch) = (&s["functions"][func], &e["functions"][func], &h["functions"][func]);
        assert_eq!((u(&cs["calls"]), u(&ch["calls"])), (u(&ce["calls"]), u(&ce["calls"])), "{func}: calls are exact");
        assert_eq!(u(&ce["cycles"]["timed"]), u(&ce["calls"]), "{func}: --time every times every call");
        assert!(ce["cycles"]["intervals"].is_null(), "{func}: every call timed, nothing to estimate");
        let calls = u(&cs["calls"]) as f64;
        for (r, p) in [(cs, 1.0 / 32.0), (ch, 0.5)] {
            let (timed, sd) = (u(&r["cycles"]["timed"]) as f64, (calls * p * (1.0 - p)).sqrt());
            assert!((timed - calls * p).abs() < 6.0 * sd, "{func}: {timed} of {calls} timed at p = {p}");
            let ci = &r["cycles"]["intervals"];
            let mean = f(&r["cycles"]["mean"]);
            assert!(f(&ci["mean"]["low"]) <= mean && mean <= f(&ci["mean"]["high"]), "{func}: {ci}");
            assert!(f(&ci["p99"]["low"]) <= f(&ci["p99"]["high"]) && f(&ci["p99"]["level"]) >= 0.95, "{func}: {ci}");
        }
    }
    let without_time = |r: &serde_json::Value| {
        let mut p = r["peak"].clone();
        p["at_ns"] = serde_json::Value::Null;
        p
    };
    assert_eq!(without_time(&s), without_time(&e), "the peak is the same whatever is timed");
    assert_eq!(s["end"], e["end"]);
    let o = lab.record_cmd("x.mtl", &["--time", "1/0"], &prog, &args).output().unwrap();
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("`every` nor `1/N`"), "{o:?}");
}

/// A function none of whose calls was timed (here: 200 calls each of
/// malloc and free at one call in a million) has unknown cycles: `null` in
/// JSON, blank in the text and CSV reports, not a mean of 0 cycles.
#[test]
fn a_function_with_no_timed_call_has_no_cycle_figures() {
    let lab = Lab::new();
    let prog = lab.compile("n_mallocs");
    assert_success(&lab.record_cmd("t.mtl", &["--time", "1/1000000"], &prog, &["200", "48", "0"]).output().unwrap(), "record");
    let r = lab.report("t.mtl");
    let untimed: Vec<&str> = ["malloc", "free"].into_iter().filter(|f| u(&r["functions"][*f]["cycles"]["timed"]) == 0).collect();
    // A thread's first call may be timed: at most one of the two is.
    assert!(!untimed.is_empty(), "{}", r["functions"]);
    for func in &untimed {
        let c = &r["functions"][*func]["cycles"];
        assert_eq!(u(&r["functions"][*func]["calls"]), 200);
        for key in ["total", "mean", "stddev", "p50", "p99", "max"] {
            assert!(c[key].is_null(), "{func}: cycles.{key} = {}", c[key]);
        }
    }
    let text = String::from_utf8_lossy(&lab.command(MTLAB).args(["report", "t.mtl"]).output().unwrap().stdout).into_owned();
    for func in &untimed {
        let row = text.lines().find(|l| l.starts_with(&format!("│ {func} "))).unwrap_or_else(|| panic!("{func} row: {text}"));
        let cells: Vec<&str> = row.split('┆').map(str::trim).collect();
        // function, calls, failed, timed, mean size, then the seven cycle columns, blank.
        assert_eq!(cells[3], "0", "{row}");
        assert!(cells[5..].iter().all(|c| c.is_empty() || *c == "│"), "{row}");
    }
}

#[test]
fn top_site_by_bytes_symbolizes_to_the_program_function() {
    let lab = Lab::new();
    let prog = lab.compile("n_mallocs");
    lab.record_ok("t.mtl", &prog, &["200", "4000", "0"]);
    let r = lab.report("t.mtl");
    let top = &r["top_sites"]["by_bytes"][0];
    assert_eq!(u(&top["bytes"]), 200 * 4000);
    let frames = top["frames"].as_array().unwrap();
    assert_eq!(frames[0]["function"], "do_allocs", "{top}");
    assert!(frames[0]["file"].as_str().unwrap().ends_with("n_mallocs.c"), "{top}");
    assert_eq!(u(&frames[0]["line"]), source_line("n_mallocs", "blocks[i] = malloc(s);"));
    assert_eq!(frames[0]["module"], "n_mallocs");
    assert_eq!(frames[1]["function"], "main", "{top}");
    assert_eq!(u(&frames[1]["line"]), source_line("n_mallocs", "do_allocs(n, (size_t)s);"));
    // The program is built with frame pointers: its stacks reach main.
    assert_eq!(f(&r["stacks"]["truncated_call_fraction"]), 0.0);
    assert!(r["stacks"]["note"].is_null());
}

#[test]
fn same_inner_frames_under_different_callers_are_two_sites() {
    // Guards the per-thread memo of the last stack walk: the frames nearest
    // malloc are identical for both callers; only the third differs.
    let lab = Lab::new();
    let prog = lab.compile("same_frames");
    let n = 5000;
    lab.record_ok("t.mtl", &prog, &[&n.to_string()]);
    let r = lab.report("t.mtl");
    let mut seen = Vec::new();
    for site in r["top_sites"]["by_calls"].as_array().unwrap() {
        let frames = site["frames"].as_array().unwrap();
        if frames.first().map(|f| f["function"] == "leaf") != Some(true) {
            continue;
        }
        assert_eq!(frames[1]["function"], "middle", "{site}");
        seen.push((frames[2]["function"].as_str().unwrap().to_string(), u(&site["calls"]), u(&site["bytes"])));
    }
    seen.sort();
    assert_eq!(seen, vec![("from_a".to_string(), n, 100 * n), ("from_b".to_string(), n, 200 * n)]);
}

/// The screen's site tables show `--frames N` frames and merge the sites
/// whose shown frames are equal (JSON keeps every stack: the test above).
#[test]
fn site_rows_merge_when_their_shown_frames_are_equal() {
    let lab = Lab::new();
    let prog = lab.compile("same_frames");
    let n = 1000u64;
    lab.record_ok("t.mtl", &prog, &[&n.to_string()]);
    // Cells of the table rows whose stack starts at leaf: [#, calls, bytes, stacks, stack].
    let leaf_rows = |frames: &str| -> Vec<Vec<String>> {
        let o = lab.command(MTLAB).args(["report", "t.mtl", "--frames", frames]).output().unwrap();
        assert_success(&o, "mtlab report --frames");
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        // The two tables of allocated calls and bytes (by bytes, by calls).
        let from = out.find("top allocation sites by bytes").expect("the sites-by-bytes table");
        let to = out.find("top allocation sites at the peak").expect("the next table");
        out[from..to]
            .lines()
            .filter(|l| l.contains("leaf"))
            .map(|l| l.split('┆').map(|c| c.trim_matches(|ch: char| ch == '│' || ch.is_whitespace()).to_string()).collect())
            .collect()
    };
    let two = leaf_rows("2");
    assert_eq!(two.len(), 2, "one merged row in each of the two site tables: {two:?}");
    for r in &two {
        assert_eq!((r[1].as_str(), r[2].as_str(), r[3].as_str()), ("2000", "293.0 KiB", "2"), "{r:?}");
        assert!(r[4].contains("middle") && !r[4].contains("from_"), "{r:?}");
    }
    let three = leaf_rows("3");
    assert_eq!(three.len(), 4, "two rows in each table: {three:?}");
    for r in &three {
        assert_eq!((r[1].as_str(), r[3].as_str()), ("1000", "1"), "{r:?}");
        assert!(r[4].contains("from_a") || r[4].contains("from_b"), "{r:?}");
    }
}

#[test]
fn errno_is_left_as_the_program_set_it() {
    let lab = Lab::new();
    let prog = lab.compile("errno_kept");
    let mut modes: Vec<Vec<&str>> = vec![
        vec![],
        vec!["--stacks", "none"],
        vec!["--unwind", "libgcc"],
        vec!["--sample", "1KiB"],
        vec!["--sample", "1KiB", "--unwind", "libgcc"],
    ];
    if std::path::Path::new("/usr/lib/x86_64-linux-gnu/libunwind.so.8").exists() {
        modes.push(vec!["--unwind", "libunwind"]);
        modes.push(vec!["--sample", "1KiB", "--unwind", "libunwind"]);
    }
    for extra in modes {
        let o = lab.record_cmd("t.mtl", &extra, &prog, &["3000"]).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&o.stdout), "errno changed 0 times\n", "mtlab record {extra:?}");
        assert_eq!(o.status.code(), Some(0), "mtlab record {extra:?}: {}", stderr(&o));
    }
}

#[test]
fn calloc_once_is_one_call_of_1000_bytes() {
    let lab = Lab::new();
    let prog = lab.compile("calloc_once");
    lab.record_ok("base.mtl", &prog, &["baseline"]);
    lab.record_ok("t.mtl", &prog, &[]);
    let (base, r) = (lab.report("base.mtl"), lab.report("t.mtl"));
    strict(&r);
    assert_eq!(call_deltas(&r, &base), deltas(&[("calloc", 1), ("free", 1)]));
    assert_eq!(total_size(&r, "calloc") - total_size(&base, "calloc"), 1000, "nmemb * size");
    assert_eq!(site(&r, "one_calloc"), site_of(1, 1000, 0, 0));
    assert_eq!(live_bytes_peak(&r) - live_bytes_peak(&base), 1000);
    assert_eq!(live_bytes_end(&r), live_bytes_end(&base));
}

#[test]
fn realloc_chain_is_nine_reallocs() {
    let lab = Lab::new();
    let prog = lab.compile("realloc_chain");
    lab.record_ok("base.mtl", &prog, &["baseline"]);
    lab.record_ok("t.mtl", &prog, &[]);
    let (base, r) = (lab.report("base.mtl"), lab.report("t.mtl"));
    strict(&r);
    assert_eq!(call_deltas(&r, &base), deltas(&[("malloc", 1), ("realloc", 9), ("free", 1)]));
    assert_eq!(calls(&r, "realloc"), 9);
    assert_eq!(failed(&r, "realloc"), 0);
    let sizes: u64 = (5..=13).map(|b| 1u64 << b).sum(); // 32 + 64 + ... + 8192
    assert_eq!(sizes, 16352);
    assert_eq!(total_size(&r, "realloc") - total_size(&base, "realloc"), sizes);
    assert!((mean_size(&r, "realloc") - sizes as f64 / 9.0).abs() < 1e-9);
    assert_eq!(site(&r, "grow"), site_of(9, sizes, 0, 0));
    // Only one block is ever live: the peak is the last size.
    assert_eq!(live_bytes_peak(&r) - live_bytes_peak(&base), 8192);
    assert_eq!(live_bytes_end(&r), live_bytes_end(&base));
    // The final free releases the 8192-byte block.
    assert_eq!(total_size(&r, "free") - total_size(&base, "free"), 8192);
}

#[test]
fn memalign_family_one_call_each() {
    let lab = Lab::new();
    let prog = lab.compile("memalign");
    lab.record_ok("base.mtl", &prog, &["baseline"]);
    lab.record_ok("t.mtl", &prog, &[]);
    let (base, r) = (lab.report("base.mtl"), lab.report("t.mtl"));
    strict(&r);
    assert_eq!(
        call_deltas(&r, &base),
        deltas(&[
            ("posix_memalign", 1),
            ("aligned_alloc", 1),
            ("memalign", 1),
            ("valloc", 1),
            ("pvalloc", 1),
            ("free", 5)
        ])
    );
    for (func, size) in [("posix_memalign", 1000), ("aligned_alloc", 8192), ("memalign", 300), ("valloc", 100), ("pvalloc", 100)] {
        assert_eq!(mean_size(&r, func), size as f64, "{func}: the requested size, not the rounded one");
        assert_eq!(failed(&r, func), 0, "{func}");
    }
    assert_eq!(site(&r, "main").calls - site(&base, "main").calls, 5);
    assert_eq!(live_bytes_peak(&r) - live_bytes_peak(&base), 1000 + 8192 + 300 + 100 + 100);
    assert_eq!(live_bytes_end(&r), live_bytes_end(&base));
    assert_eq!(total_size(&r, "free") - total_size(&base, "free"), 9692);
}

#[test]
fn maps_mmap_mremap_munmap_counts() {
    let lab = Lab::new();
    let prog = lab.compile("maps");
    lab.record_ok("base.mtl", &prog, &["baseline"]);
    lab.record_ok("t.mtl", &prog, &[]);
    let (base, r) = (lab.report("base.mtl"), lab.report("t.mtl"));
    strict(&r);
    assert_eq!(call_deltas(&r, &base), deltas(&[("mmap", 1), ("mmap64", 1), ("mremap", 1), ("munmap", 2)]));
    let mib = 1u64 << 20;
    assert_eq!(mean_size(&r, "mmap"), mib as f64);
    assert_eq!(mean_size(&r, "mmap64"), (64 << 10) as f64);
    assert_eq!(mean_size(&r, "mremap"), (2 * mib) as f64, "mremap counts the new length");
    assert_eq!(total_size(&r, "munmap") - total_size(&base, "munmap"), 2 * mib + (64 << 10));
    for func in ["mmap", "mmap64", "mremap", "munmap"] {
        assert_eq!(failed(&r, func), 0, "{func}");
    }
    // The program's own mappings are not heap: counted apart, no heap region.
    assert_eq!(u(&r["program_mappings"]["calls"]) - u(&base["program_mappings"]["calls"]), 2);
    assert_eq!(u(&r["program_mappings"]["bytes"]) - u(&base["program_mappings"]["bytes"]), mib + (64 << 10));
    assert_eq!(u(&r["end"]["mmap_bytes"]), u(&base["end"]["mmap_bytes"]));
    assert_eq!(live_bytes_peak(&r), live_bytes_peak(&base));
    // The text report shows them beside the heap.
    let o = lab.command(MTLAB).args(["report", "t.mtl"]).output().unwrap();
    assert_success(&o, "report");
    let want = format!("{} calls, {} mapped in all; not in the heap's", u(&r["program_mappings"]["calls"]), human(u(&r["program_mappings"]["bytes"])));
    assert!(String::from_utf8_lossy(&o.stdout).contains(&want), "{want:?} in the text report: {}", String::from_utf8_lossy(&o.stdout));
}


#[test]
fn sbrk_and_brk_move_the_brk_heap() {
    let lab = Lab::new();
    let prog = lab.compile("sbrk");
    lab.record_ok("base.mtl", &prog, &["baseline"]);
    // Exit code 0 also says: tracing did not move the break under the program.
    lab.record_ok("t.mtl", &prog, &[]);
    let (base, r) = (lab.report("base.mtl"), lab.report("t.mtl"));
    strict(&r);
    // sbrk(0) is a call too (three of them), with no size for the mean.
    assert_eq!(call_deltas(&r, &base), deltas(&[("sbrk", 6), ("brk", 1)]));
    assert_eq!(mean_size(&r, "sbrk"), 4096.0, "|increment|");
    assert_eq!(failed(&r, "sbrk") + failed(&r, "brk"), 0);
    assert_eq!(u(&r["end"]["brk_bytes"]), 0, "brk(start) gave everything back");
    if r["events"] == 7 {
        // Nothing else was traced: one time-series point per call, and the
        // brk heap after each call is exactly as the program moved it.
        let mapped: Vec<u64> = r["time_series"].as_array().unwrap().iter().map(|p| u(&p["mapped_bytes"])).collect();
        assert_eq!(mapped, [0, 4096, 8192, 4096, 4096, 0, 0]);
    } else {
        panic!("the sbrk program made other traced calls: {}", r["functions"]);
    }
}

/// `threads` threads × `pairs` malloc(64)+free pairs: every event is in the
/// trace, counted exactly against a run of the same threads doing none.
fn threads_lose_no_event(threads: u64, pairs: u64) {
    let lab = Lab::new();
    let prog = lab.compile("threads");
    lab.record_ok("base.mtl", &prog, &[&threads.to_string(), "0"]);
    lab.record_ok("t.mtl", &prog, &[&threads.to_string(), &pairs.to_string()]);
    let (base, r) = (lab.report("base.mtl"), lab.report("t.mtl"));
    strict(&r);
    let n = threads * pairs;
    assert!(u(&r["events"]) >= 2 * n, "events {}", r["events"]);
    assert_eq!(u(&r["events"]) - u(&base["events"]), 2 * n);
    assert_eq!(call_deltas(&r, &base), deltas(&[("malloc", n as i64), ("free", n as i64)]));
    assert_eq!(total_size(&r, "malloc") - total_size(&base, "malloc"), n * 64);
    assert_eq!(site(&r, "worker"), site_of(n, n * 64, 0, 0));
    assert_eq!(u(&r["events_dropped"]), 0);
    assert_eq!(u(&r["chunks_dropped"]), 0);
    assert_eq!(live_bytes_end(&r), live_bytes_end(&base), "every block of the workers is freed");
}

#[test]
fn eight_threads_lose_no_event() {
    threads_lose_no_event(8, 50_000);
}

#[test]
fn two_hundred_fifty_six_threads_lose_no_event() {
    threads_lose_no_event(256, 2_000);
}

/// Parses "child <pid>" from a program's stdout.
fn child_pid(stdout: &[u8]) -> u32 {
    let s = String::from_utf8_lossy(stdout);
    s.trim().strip_prefix("child ").and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("no child pid in {s:?}"))
}

#[test]
fn a_fork_child_keeps_the_file_the_program_put_at_the_traces_number() {
    let lab = Lab::new();
    let prog = lab.compile("fork_fd_reuse");
    let out = lab.record("t.mtl", &prog, &[]);
    let line = String::from_utf8_lossy(&out.stdout).into_owned();
    // The program took the trace's own number, so the test means something.
    assert!(line.contains(": yes;"), "the trace was not open before the dup2: {line}");
    assert!(line.contains("child wrote: ok"), "the fork child lost the program's descriptor: {line}\n{}", stderr(&out));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn events_after_the_program_closes_every_descriptor_are_still_traced() {
    let lab = Lab::new();
    let prog = lab.compile("close_all");
    let n = 20_000u64;
    let out = lab.record_ok("t.mtl", &prog, &[&n.to_string()]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "trace was open: yes\n", "the trace must be open before close_range for this test to mean anything");
    let r = lab.report("t.mtl");
    strict(&r);
    let s = site(&r, "after_close");
    assert_eq!((s.calls, s.bytes), (n, n * 48), "{s:?}");
    // The report says that the trace had to be opened again.
    assert!(u(&r["trace_reopened"]) >= 1, "{}", r["trace_reopened"]);
    let text = lab.command(MTLAB).args(["report", "t.mtl"]).output().unwrap();
    assert!(String::from_utf8_lossy(&text.stdout).contains("the trace was opened again by path"));
}

#[test]
fn fork_child_writes_its_own_trace() {
    let lab = Lab::new();
    let prog = lab.compile("fork");
    let (a, b) = (50u64, 70u64);
    let base_out = lab.record_ok("base.mtl", &prog, &["0", "0"]);
    let out = lab.record_ok("t.mtl", &prog, &[&a.to_string(), &b.to_string()]);
    let pid = child_pid(&out.stdout);
    assert_eq!(lab.family("t.mtl"), ["t.mtl".to_string(), format!("t.mtl.d/{pid}")]);

    let (base, r) = (lab.report("base.mtl"), lab.report("t.mtl"));
    let bpid = child_pid(&base_out.stdout);
    let children = r["children"].as_array().unwrap();
    assert_eq!(children.len(), 1, "one child trace");
    let child = &children[0];
    let base_child = &base["children"][0];
    assert_eq!(u(&base_child["pid"]), bpid as u64);
    for p in [&r, child] {
        strict(p);
    }
    assert_eq!(u(&child["pid"]), pid as u64);
    assert_eq!(u(&child["ppid"]), u(&r["pid"]));
    assert_eq!(child["cmdline"], r["cmdline"], "a fork child runs the same command line");
    assert!(child["file"].as_str().unwrap().ends_with(&format!("t.mtl.d/{pid}")));

    // Parent: its A blocks, none of the child's.
    assert_eq!(call_deltas(&r, &base), deltas(&[("malloc", a as i64)]));
    assert_eq!(site(&r, "parent_allocs"), site_of(a, a * 100, a, a * 100));
    assert_eq!(site(&r, "child_allocs"), Site::default());
    assert_eq!(live_bytes_end(&r) - live_bytes_end(&base), a * 100);
    // Child: its B blocks only; the trace starts empty at the fork.
    assert_eq!(call_deltas(child, base_child), deltas(&[("malloc", b as i64)]));
    assert_eq!(site(child, "child_allocs"), site_of(b, b * 200, b, b * 200));
    assert_eq!(site(child, "parent_allocs"), Site::default());
    assert_eq!(live_bytes_end(child) - live_bytes_end(base_child), b * 200);
    assert_eq!(live_bytes_peak(child) - live_bytes_peak(base_child), b * 200);
    assert_eq!(child["clean_end"], true, "the child ended by exit()");
    assert_eq!(u(&child["events_dropped"]), 0);
    // The child's blocks are placed in the brk heap it inherited.
    assert!(u(&child["end"]["brk_bytes"]) > 0);

    // --no-children reports the root alone.
    let o = lab.command(MTLAB).args(["report", "--json", "--no-children", "t.mtl"]).output().unwrap();
    assert_success(&o, "report --no-children");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["children"].as_array().unwrap().len(), 0);
    assert_eq!(v["pid"], r["pid"]);
}

/// The report puts the kernel's count of the whole process beside the heap
/// (issue 37 §3: a heap peak read as all the program used): a program that
/// writes every page of one 48 MiB block has a peak resident set of at least
/// that, and no more than the same program run untraced (`ru_maxrss` from
/// wait4, the independent count) plus mtlab's own buffers. (Not "at least
/// the untraced run's": transparent huge pages can make either run's count
/// a few MiB larger than the other's.)
#[test]
fn the_kernels_peak_resident_set_stands_beside_the_heap() {
    let lab = Lab::new();
    let prog = lab.compile("rss_touch");
    let mib = 48u64;
    // Reaped by wait4 below, which gives its rusage (std's wait does not).
    #[allow(clippy::zombie_processes)]
    let child = lab.command(&prog).arg(mib.to_string()).spawn().unwrap();
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child; status and usage are valid for writes.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32);
    assert_eq!(status, 0, "rss_touch untraced");
    let untraced = usage.ru_maxrss as u64 * 1024;

    lab.record_ok("t.mtl", &prog, &[&mib.to_string()]);
    let r = lab.report("t.mtl");
    let rss = u(&r["max_rss_bytes"]);
    assert_eq!(u(&r["peak"]["live_bytes"]), mib << 20);
    assert!(rss >= mib << 20, "at least the block written: {rss}");
    assert!(rss <= untraced + (32 << 20), "the untraced run's {untraced} and mtlab's buffers: {rss}");
    let text = lab.command(MTLAB).args(["report", "t.mtl"]).output().unwrap();
    assert_success(&text, "report");
    let shown = format!("the process's peak resident memory, as the kernel counts it at exit: {}", human_mib(rss));
    assert!(String::from_utf8_lossy(&text.stdout).contains(&shown), "{shown}");
}

/// `human_bytes` as the report prints a size of some MiB.
fn human_mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / 1048576.0)
}

#[test]
fn no_follow_leaves_children_untraced() {
    let lab = Lab::new();
    let prog = lab.compile("fork");
    let out = lab.record_cmd("t.mtl", &["--no-follow"], &prog, &["5", "7"]).output().unwrap();
    assert_success(&out, "mtlab record --no-follow");
    assert_eq!(lab.files_with_prefix("t.mtl"), ["t.mtl"]);
    let r = lab.report("t.mtl");
    assert_eq!(r["children"].as_array().unwrap().len(), 0);
    assert_eq!(site(&r, "parent_allocs").calls, 5);
}

#[test]
fn fork_exec_lists_the_exec_image_and_the_pre_exec_child() {
    let lab = Lab::new();
    let prog = lab.compile("fork_exec");
    let (c, m) = (30u64, 40u64);
    let out = lab.record_ok("t.mtl", &prog, &[&c.to_string(), &m.to_string()]);
    let pid = child_pid(&out.stdout);
    // The fork child wrote FILE.d/PID (flushed at exec); the image it exec'd
    // has the same pid and so wrote FILE.d/PID.1.
    assert_eq!(lab.family("t.mtl"), ["t.mtl".to_string(), format!("t.mtl.d/{pid}"), format!("t.mtl.d/{pid}.1")]);
    let r = lab.report("t.mtl");
    let children = r["children"].as_array().unwrap();
    assert_eq!(children.len(), 2);
    for p in processes(&r) {
        strict(p);
        assert_eq!(site(p, "before_exec").calls + site(p, "in_exec_image").calls > 0, u(&p["pid"]) == pid as u64);
    }
    assert_eq!(site(&r, "before_exec"), Site::default());
    let (pre, img) = (&children[0], &children[1]);
    assert_eq!(u(&pre["pid"]), pid as u64);
    assert_eq!(u(&img["pid"]), pid as u64);
    // Before exec: C blocks, no END record (exec does not run exit handlers).
    assert_eq!(site(pre, "before_exec"), site_of(c, c * 300, c, c * 300));
    assert_eq!(pre["clean_end"], false);
    assert!(pre["events_dropped"].is_null());
    // The exec'd image: its own command line, M blocks all freed, clean end.
    let cmd: Vec<&str> = img["cmdline"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(cmd[1..], ["inner", "40"]);
    assert_eq!(site(img, "in_exec_image"), site_of(m, m * 400, 0, 0));
    assert_eq!(site(img, "before_exec"), Site::default());
    assert_eq!(img["clean_end"], true);
    assert!(calls(img, "free") >= m, "the M blocks are freed");
}

#[test]
fn fork_exec_child_without_events_leaves_no_trace() {
    let lab = Lab::new();
    let prog = lab.compile("fork_exec");
    let out = lab.record_ok("t.mtl", &prog, &["0", "25"]);
    let pid = child_pid(&out.stdout);
    // The fork child made no traced call before exec: only the image's trace.
    assert_eq!(lab.family("t.mtl"), ["t.mtl".to_string(), format!("t.mtl.d/{pid}")]);
    let r = lab.report("t.mtl");
    let children = r["children"].as_array().unwrap();
    assert_eq!(children.len(), 1);
    assert_eq!(children[0]["cmdline"][1], "inner");
    assert_eq!(site(&children[0], "in_exec_image"), site_of(25, 25 * 400, 0, 0));
}

/// The root pid exec's: `mtlab record` passes on the exit status of the last
/// image, and the report gives it to that image, not to the one that exec'd.
#[test]
fn the_root_pids_exit_status_belongs_to_its_last_image() {
    let lab = Lab::new();
    let prog = lab.compile("exec_root");
    let (c, m) = (30u64, 40u64);
    let out = lab.record("t.mtl", &prog, &[&c.to_string(), &m.to_string(), "3"]);
    assert_eq!(out.status.code(), Some(3), "the exec'd image's exit code, passed through");
    let r = lab.report("t.mtl");
    let children = r["children"].as_array().unwrap();
    assert_eq!(children.len(), 1);
    let img = &children[0];
    assert_eq!(u(&img["pid"]), u(&r["pid"]));
    assert_eq!(site(&r, "before_exec"), site_of(c, c * 300, c, c * 300));
    assert_eq!(site(img, "in_exec_image"), site_of(m, m * 400, 0, 0));
    assert_eq!(r["clean_end"], false);
    assert!(r["exit"].is_null(), "the image that exec'd did not exit: {}", r["exit"]);
    assert_eq!(img["exit"], "exit code 3");
    assert_eq!(img["clean_end"], true);
    let ends: Vec<&str> = r["processes_index"].as_array().unwrap().iter().map(|x| x["end"].as_str().unwrap()).collect();
    assert_eq!(ends, ["execd", "exit_code"]);
    assert_eq!(r["processes_index"][1]["exit_code"], 3);

    // On screen: the exit code under the image that exited, once; the first image exec'd.
    let o = report_output(&lab, &["t.mtl"]);
    assert_success(&o, "mtlab report");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(!text.contains("══ child process"), "the root's own pid is no child: {text}");
    let second = text.find(&format!("══ process (image after exec) {} ", u(&r["pid"]))).expect("the exec'd image's report");
    let (first, second) = text.split_at(second);
    assert_eq!(text.matches("program ended with").count(), 1, "{text}");
    assert!(second.contains("program ended with exit code 3"), "{second}");
    assert!(first.contains("program exec'd another program"), "{first}");
    assert!(first.contains(&format!("live when it exec'd: {c} objects, {} bytes", c * 300)), "{first}");
    assert!(first.contains("events dropped: unknown — no END record: the process exec'd another program"), "{first}");

    // Without the child traces the root's list still tells that it exec'd.
    let alone = report_json(&lab, &["t.mtl", "--no-children"]);
    assert!(alone["exit"].is_null(), "{}", alone["exit"]);
    assert_eq!(alone["processes_index"][0]["end"], "execd");
    // On screen the status is still told: no image trace follows here.
    let o = report_output(&lab, &["t.mtl", "--no-children"]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        text.contains("whose trace is not read here (--no-children); the process ended with exit code 3"),
        "{text}"
    );

    // The image's trace deleted: the root image still exec'd, the status is told.
    std::fs::copy(lab.path("t.mtl"), lab.path("gone.mtl")).unwrap();
    let o = report_output(&lab, &["gone.mtl"]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(text.contains("whose trace is missing (see below); the process ended with exit code 3"), "{text}");
    assert!(!text.contains("program ended with exit code 3"), "not the exec'd image's status: {text}");

    // An exec of another program (/bin/true): its image exited with 0.
    if !std::path::Path::new("/bin/true").exists() {
        return skip("no /bin/true");
    }
    lab.record_ok("true.mtl", &prog, &[&c.to_string(), "true"]);
    let r = lab.report("true.mtl");
    let img = &r["children"][0];
    assert_eq!(img["cmdline"][0], "true");
    assert!(r["exit"].is_null(), "{}", r["exit"]);
    assert_eq!(img["exit"], "exit code 0");
    assert_eq!(site(&r, "before_exec"), site_of(c, c * 300, c, c * 300));
}

/// A process whose other threads are alive execs (rustup runs the real cargo
/// or rustc so, its worker threads waiting): the exec ends them, and the
/// events still in their buffers were lost, uncounted (rustup's 6 callocs
/// of 66 under `cargo --version`). They are written before the exec. When
/// the exec fails, the threads go on; what they add before their next flush
/// is dropped and counted, and their buffers are written again after it.
#[test]
fn other_threads_events_are_written_before_an_exec() {
    let lab = Lab::new();
    let prog = lab.compile("exec_threads");
    let (t, n, k) = (3u64, 50u64, 40u64);
    lab.record_ok("ok.mtl", &prog, &[&t.to_string(), &n.to_string(), "ok"]);
    let r = lab.report("ok.mtl");
    assert_eq!(site(&r, "in_thread"), site_of(t * n, t * n * 500, t * n, t * n * 500), "the waiting threads' events");
    let children = r["children"].as_array().unwrap();
    assert_eq!(children.len(), 1);
    assert_eq!(children[0]["cmdline"][1], "inner");
    assert_eq!(site(&children[0], "main"), site_of(1, 100, 1, 100));

    // Sampled (a 1-byte mean interval: every call of 500 bytes is sampled):
    // their samples too, flushed under each buffer's lock.
    let o = lab.record_cmd("s.mtl", &["--sample", "1"], &prog, &[&t.to_string(), &n.to_string(), "ok"]).output().unwrap();
    assert_success(&o, "mtlab record --sample 1");
    let r = lab.report("s.mtl");
    let top = r["profile"]["top"].as_array().unwrap();
    let in_thread: u64 = top.iter().filter(|s| s["frames"][0]["function"] == "in_thread").map(|s| u(&s["samples"])).sum();
    assert_eq!(in_thread, t * n, "{}", r["profile"]["top"]);

    lab.record_ok("fail.mtl", &prog, &[&t.to_string(), &n.to_string(), "fail", &k.to_string()]);
    let r = lab.report("fail.mtl");
    assert_eq!(r["clean_end"], true);
    assert_eq!(site(&r, "in_thread"), site_of(t * n, t * n * 500, t * n, t * n * 500), "written once, not twice");
    assert_eq!(site(&r, "after_failed_exec"), Site::default(), "added after the copy, before the owner's flush");
    assert_eq!(u(&r["events_dropped"]), t * k, "and counted as dropped");
    assert_eq!(site(&r, "in_new_thread"), site_of(n, n * 700, n, n * 700), "buffers are written again after that flush");
    let o = report_output(&lab, &["fail.mtl"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains(&format!("events dropped: {} — ", t * k)) && text.contains("after an exec that failed"), "{text}");
}

// ---------------------------------------------------------------------------
// Process trees: the index, --pid/--comm, what the exports took, missing traces.

/// `mtlab report ARGS` in the lab: its output (not checked).
fn report_output(lab: &Lab, args: &[&str]) -> std::process::Output {
    lab.command(MTLAB).arg("report").args(args).output().unwrap()
}

/// `mtlab report --json --top TOP ARGS`, which must succeed, parsed.
fn report_json(lab: &Lab, args: &[&str]) -> serde_json::Value {
    let o = lab.command(MTLAB).args(["report", "--json", "--top", &TOP.to_string()]).args(args).output().unwrap();
    assert_success(&o, &format!("mtlab report {}", args.join(" ")));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// (pid, ppid, command, events, peak_live_bytes, end, reported) of each index row.
fn index_rows(v: &serde_json::Value) -> Vec<(u64, u64, String, u64, u64, String, bool)> {
    v["processes_index"]
        .as_array()
        .expect("processes_index")
        .iter()
        .map(|r| {
            (
                u(&r["pid"]),
                u(&r["ppid"]),
                r["command"].as_str().unwrap().to_string(),
                u(&r["events"]),
                u(&r["peak_live_bytes"]),
                r["end"].as_str().unwrap().to_string(),
                r["reported"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// The sum of the counts of a folded-stacks file's lines that contain `needle` ("" for all).
fn collapsed_sum(lab: &Lab, file: &str, needle: &str) -> u64 {
    let text = std::fs::read_to_string(lab.path(file)).unwrap();
    text.lines()
        .filter(|l| l.contains(needle))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum()
}

#[test]
fn the_index_lists_every_traced_process_with_its_own_figures() {
    let lab = Lab::new();
    let prog = lab.compile("fork_exec");
    let (c, m) = (30u64, 40u64);
    let out = lab.record_ok("t.mtl", &prog, &[&c.to_string(), &m.to_string()]);
    let pid = child_pid(&out.stdout) as u64;
    let r = report_json(&lab, &["t.mtl"]);
    let all = processes(&r);
    let rows = index_rows(&r);
    let root = u(&r["pid"]);
    // The root; the fork child, which exec'd (no END, a later image of its pid);
    // the image, which exited.
    let ends: Vec<(u64, u64, &str, &str)> = rows.iter().map(|x| (x.0, x.1, x.2.as_str(), x.5.as_str())).collect();
    assert_eq!(ends, [(root, u(&r["ppid"]), "fork_exec", "exit_code"), (pid, root, "fork_exec", "execd"), (pid, root, "fork_exec", "exited")]);
    assert_eq!(r["processes_index"][0]["exit_code"], 0);
    for (row, p) in rows.iter().zip(&all) {
        assert_eq!(row.3, u(&p["events"]), "the index's events are the process's");
        assert_eq!(row.4, live_bytes_peak(p), "the index's peak is the process's");
        assert!(row.6, "every process is reported without --pid/--comm");
    }
    // The pre-exec child holds its C blocks of 300 bytes at its peak, the image none at its end.
    assert!(rows[1].4 >= c * 300, "{rows:?}");
    assert!(r["missing_traces"].as_array().unwrap().is_empty());

    // On screen: the index first, one row per process.
    let o = report_output(&lab, &["t.mtl"]);
    assert_success(&o, "mtlab report");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(text.starts_with("══ 3 traced processes ══\n"), "{}", &text[..200.min(text.len())]);
    let index = &text[..text.find("══ process").expect("the root's report after the index")];
    assert_eq!(index.lines().filter(|l| l.contains('│') && l.contains(&format!(" {pid} "))).count(), 2, "{index}");
    assert!(index.contains("fork_exec inner 40"), "{index}");
    // One process: no index.
    let o = report_output(&lab, &["t.mtl", "--no-children"]);
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("══ process"));
}

#[test]
fn pid_and_comm_select_the_processes_reported() {
    let lab = Lab::new();
    let prog = lab.compile("fork");
    let (a, b) = (50u64, 70u64);
    // bash runs fork, whose child forks off: two processes named fork under a
    // shell (bash, as dash may make no traced call and write no root trace).
    let line = format!("{} {a} {b}; true", prog.display());
    let out = lab.record_ok("t.mtl", "bash", &["-c", &line]);
    let child = child_pid(&out.stdout) as u64;
    let all = report_json(&lab, &["t.mtl"]);
    let rows = index_rows(&all);
    let forks: Vec<&(u64, u64, String, u64, u64, String, bool)> = rows.iter().filter(|x| x.2 == "fork").collect();
    assert_eq!(forks.len(), 2, "{rows:?}");
    let parent = forks[0].0;
    assert_eq!((forks[1].0, forks[1].1), (child, parent), "the fork child's parent is the traced fork");

    let by_comm = report_json(&lab, &["t.mtl", "--comm", "fork"]);
    let got: Vec<u64> = processes(&by_comm).iter().map(|p| u(&p["pid"])).collect();
    assert_eq!(got, [parent, child]);
    assert_eq!(site(processes(&by_comm)[0], "parent_allocs").calls, a);
    assert_eq!(site(processes(&by_comm)[1], "child_allocs").calls, b);
    let reported: Vec<u64> = index_rows(&by_comm).iter().filter(|x| x.6).map(|x| x.0).collect();
    assert_eq!(reported, [parent, child]);
    assert_eq!(index_rows(&by_comm).len(), rows.len(), "the index keeps every process");

    let by_pid = report_json(&lab, &["t.mtl", "--pid", &child.to_string()]);
    assert_eq!(u(&by_pid["pid"]), child);
    assert!(by_pid["children"].as_array().unwrap().is_empty());
    let both = report_json(&lab, &["t.mtl", "--pid", &format!("{child},{}", u(&all["pid"]))]);
    assert_eq!(processes(&both).len(), 1 + rows.iter().filter(|x| x.0 == u(&all["pid"])).count());

    // What matches nothing is an error that names what there is.
    let o = report_output(&lab, &["t.mtl", "--pid", "1", "--comm", "nosuch"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("--pid 1, --comm nosuch matches no traced process in t.mtl"), "{err}");
    assert!(err.contains(&format!("{child} (fork)")) && err.contains(&format!("{parent} (fork)")), "{err}");
    assert!(o.stdout.is_empty(), "no report on a selection error");
}

#[test]
fn a_tree_larger_than_the_limit_details_the_root_and_the_busiest_and_indexes_the_rest() {
    // Processes reported in detail by default (report::select::DETAILED).
    const DETAILED: usize = 20;
    let lab = Lab::new();
    let prog = lab.compile("fork_many");
    let (n, k) = (DETAILED as u64 + 5, 10u64);
    let out = lab.record_ok("t.mtl", &prog, &[&n.to_string(), &k.to_string()]);
    // pid -> i: child i made i*K mallocs of 64 bytes.
    let nth: std::collections::HashMap<u64, u64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let f: Vec<u64> = l.split_whitespace().skip(1).map(|x| x.parse().unwrap()).collect();
            (f[0], f[1])
        })
        .collect();
    assert_eq!(nth.len() as u64, n);

    // Every process detailed: each child's own figures.
    let all = report_json(&lab, &["t.mtl", "--all-processes"]);
    let every = processes(&all);
    assert_eq!(every.len() as u64, n + 1);
    let root = u(&all["pid"]);
    let zero = every.iter().find(|p| nth.get(&u(&p["pid"])) == Some(&0)).expect("child 0");
    for p in &every[1..] {
        strict(p);
        let i = nth[&u(&p["pid"])];
        assert_eq!(site(p, "child_allocs"), if i == 0 { Site::default() } else { site_of(i * k, i * k * 64, i * k, i * k * 64) });
        assert_eq!(u(&p["events"]), u(&zero["events"]) + i * k, "child {i}");
    }

    // By default: every process in the index with its exact events and peak,
    // the root and the busiest others in detail.
    let r = report_json(&lab, &["t.mtl"]);
    let rows = index_rows(&r);
    assert_eq!(rows.len() as u64, n + 1);
    let figures = |v: &serde_json::Value| index_rows(v).into_iter().map(|x| (x.0, x.1, x.2, x.3, x.4, x.5)).collect::<Vec<_>>();
    assert_eq!(figures(&r), figures(&all), "the same figures whether detailed or in the index only");
    for (row, p) in rows.iter().zip(&every) {
        assert_eq!((row.0, row.3, row.4), (u(&p["pid"]), u(&p["events"]), live_bytes_peak(p)));
        if row.0 != root {
            assert_eq!(row.3, u(&zero["events"]) + nth[&row.0] * k, "exact events of child {}", nth[&row.0]);
        }
    }
    // The busiest children are the last ones: i = n - (DETAILED - 1) .. n - 1.
    let busiest = |i: u64| i >= n - (DETAILED as u64 - 1);
    let reported: Vec<u64> = rows.iter().filter(|x| x.6).map(|x| x.0).collect();
    let mut want: Vec<u64> = vec![root];
    want.extend(rows.iter().filter(|x| x.0 != root && busiest(nth[&x.0])).map(|x| x.0));
    assert_eq!(reported, want);
    assert_eq!(reported.len(), DETAILED);
    let detailed: Vec<u64> = processes(&r).iter().map(|p| u(&p["pid"])).collect();
    assert_eq!(detailed, want, "--json details what the screen does");
    for p in processes(&r).iter().skip(1) {
        assert_eq!(site(p, "child_allocs").calls, nth[&u(&p["pid"])] * k);
    }

    // On screen: the count of the others and how to see them.
    let o = report_output(&lab, &["t.mtl"]);
    assert_success(&o, "mtlab report");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let rest = n + 1 - DETAILED as u64;
    let note = format!(
        "{rest} of {} processes are in the process index only: with more than {DETAILED} processes, the root and the {} busiest \
         (by events) are reported in detail; report others with --pid PID or --comm NAME, every one with --all-processes",
        n + 1,
        DETAILED - 1
    );
    assert_eq!(text.matches(&note).count(), 2, "after the index and at the end:\n{text}");
    assert!(text.trim_end().ends_with(&note));
    assert!(text.starts_with(&format!("══ {} traced processes, {DETAILED} reported below (marked *) ══\n", n + 1)), "{}", &text[..300]);
    assert_eq!(text.matches("══ child process ").count(), DETAILED - 1);
    let o = report_output(&lab, &["t.mtl", "--all-processes"]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(text.matches("══ child process ").count() as u64, n);
    assert!(!text.contains("in the process index only"));

    // --pid of a process in the index only details it (and only it).
    let quiet = *nth.iter().find(|(_, &i)| i == 2).unwrap().0;
    let one = report_json(&lab, &["t.mtl", "--pid", &quiet.to_string()]);
    assert_eq!(u(&one["pid"]), quiet);
    assert!(one["children"].as_array().unwrap().is_empty());
    assert_eq!(site(&one, "child_allocs"), site_of(2 * k, 2 * k * 64, 2 * k, 2 * k * 64));
    assert_eq!(index_rows(&one).len() as u64, n + 1);
    let o = report_output(&lab, &["t.mtl", "--pid", &quiet.to_string(), "--all-processes"]);
    assert_eq!(o.status.code(), Some(2), "--all-processes with --pid is a usage error");

    // CSV: every process's row.
    let o = lab.command(MTLAB).args(["report", "t.mtl", "--csv", "csv"]).output().unwrap();
    assert_success(&o, "report --csv");
    let csv = std::fs::read_to_string(lab.path("csv/processes.csv")).unwrap();
    assert_eq!(csv.lines().count() as u64, 1 + n + 1);
    assert_eq!(csv.lines().filter(|l| l.contains(",yes,")).count(), DETAILED);

    // The exports still take every process with --merge.
    let o = report_output(&lab, &["t.mtl", "--collapsed", "merged.txt", "--merge"]);
    assert_success(&o, "report --collapsed --merge");
    assert!(stderr(&o).contains(&format!("the exports sum the profiles of {} processes", n + 1)), "{}", stderr(&o));
    assert_eq!(collapsed_sum(&lab, "merged.txt", "child_allocs"), (0..n).map(|i| i * k * 64).sum::<u64>());
}

/// The rows of a CSV file the report wrote (no field of these tables holds a
/// comma or a quote), each as column → field.
fn csv_rows(lab: &Lab, file: &str) -> Vec<std::collections::BTreeMap<String, String>> {
    let text = std::fs::read_to_string(lab.path(file)).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
    lines
        .map(|l| {
            let fields: Vec<&str> = l.split(',').collect();
            assert_eq!(fields.len(), header.len(), "{file}: {l}");
            header.iter().zip(fields).map(|(h, v)| (h.to_string(), v.to_string())).collect()
        })
        .collect()
}

/// The files `report --csv DIR` wrote into DIR.
fn csv_files(lab: &Lab, dir: &str) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(lab.path(dir)).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

/// The CSV of a sampled trace holds its estimates, exactly as JSON `profile`
/// has them, and none of a full trace's exact tables (a sampled trace has
/// no cycles, heap shape or exact counts: JSON has them as null).
#[test]
fn csv_of_a_sampled_trace_holds_its_estimates() {
    let lab = Lab::new();
    let prog = lab.compile("n_mallocs");
    let (n, s, k) = (1000u64, 4000u64, 10u64);
    let args = [n.to_string(), s.to_string(), k.to_string()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = lab.record_cmd("s.mtl", &["--sample", "4KiB", "--sample-seed", "7"], &prog, &args).output().unwrap();
    assert_success(&o, "record --sample");
    let r = lab.report("s.mtl");
    let o = lab.command(MTLAB).args(["report", "s.mtl", "--top", &TOP.to_string(), "--csv", "csv"]).output().unwrap();
    assert_success(&o, "report --csv of a sampled trace");
    assert_eq!(csv_files(&lab, "csv"), ["sampled.csv", "sampled_sites.csv"]);
    let est = |row: &std::collections::BTreeMap<String, String>, json: &serde_json::Value| {
        for e in ["alloc_bytes", "alloc_objects", "inuse_bytes", "inuse_objects"] {
            for (col, key) in [(e.to_string(), "value"), (format!("{e}_low"), "low"), (format!("{e}_high"), "high")] {
                assert_eq!(row[&col].parse::<f64>().unwrap(), f(&json[e][key]), "{col}");
            }
        }
    };
    let profile = &r["profile"];
    let totals = csv_rows(&lab, "csv/sampled.csv");
    assert_eq!(totals.len(), 1);
    let t = &totals[0];
    assert_eq!(t["pid"], r["pid"].to_string());
    assert_eq!(t["samples"], profile["samples"].to_string());
    assert_eq!(t["sample_frees"], profile["sample_frees"].to_string());
    assert_eq!(t["inuse_samples"], profile["inuse_bytes"]["samples"].to_string());
    assert_eq!((t["intervals"].as_str(), t["unwind"].as_str(), t["started_inactive"].as_str()), ("4096", "dwarf", "no"));
    est(t, profile);
    assert!(u(&profile["samples"]) > 0);
    // What a sampled trace does not measure is null in JSON, not a zero that reads as "no leaks".
    for key in ["events", "functions", "peak", "end", "space_peak", "space_end", "temporary", "leaks", "top_sites", "time_series"] {
        assert!(r[key].is_null(), "{key}: {}", r[key]);
    }
    assert!(r["processes_index"][0]["peak_live_bytes"].is_null());
    let o = lab.command(MTLAB).args(["report", "s.mtl", "--html", "s.html"]).output().unwrap();
    assert_success(&o, "report --html of a sampled trace");
    let page = std::fs::read_to_string(lab.path("s.html")).unwrap();
    assert!(page.contains("not measured: a sampled trace has no exact heap"), "the HTML summary's peak is not measured, not 0 B");

    let sites = csv_rows(&lab, "csv/sampled_sites.csv");
    let top = profile["top"].as_array().unwrap();
    assert_eq!(sites.len(), top.len());
    for (row, site) in sites.iter().zip(top) {
        assert_eq!(row["stack_id"], site["stack_id"].to_string());
        assert_eq!(row["samples"], site["samples"].to_string());
        est(row, site);
    }
    // The program's site: its N blocks of S bytes and K live at the end lie
    // inside the intervals (with this seed; the estimator's coverage is sampler.rs's).
    let ours = sites.iter().find(|r| r["function"] == "do_allocs").expect("the program's site");
    assert_eq!(ours["line"], source_line("n_mallocs", "blocks[i] = malloc(s);").to_string());
    assert!(ours["stack"].starts_with("do_allocs;main;"), "{}", ours["stack"]);
    let covers = |e: &str, truth: u64| {
        let (low, high): (f64, f64) = (ours[&format!("{e}_low")].parse().unwrap(), ours[&format!("{e}_high")].parse().unwrap());
        assert!(low <= truth as f64 && truth as f64 <= high, "{e}: {truth} outside [{low}, {high}]");
    };
    covers("alloc_bytes", n * s);
    covers("alloc_objects", n);
    covers("inuse_bytes", k * s);
    covers("inuse_objects", k);

    // A full trace's CSV: the exact tables, as before.
    lab.record_ok("t.mtl", &prog, &args);
    let o = lab.command(MTLAB).args(["report", "t.mtl", "--csv", "full"]).output().unwrap();
    assert_success(&o, "report --csv of a full trace");
    assert_eq!(csv_files(&lab, "full"), ["functions.csv", "heap.csv", "sites.csv", "time_series.csv"]);
    let sites = csv_rows(&lab, "full/sites.csv");
    let ours = sites.iter().find(|r| r["table"] == "by_bytes" && r["function"] == "do_allocs").expect("the program's site");
    let exact = ["calls", "bytes", "live_objects", "live_bytes"].map(|c| ours[c].parse::<u64>().unwrap());
    assert_eq!(exact, [n, n * s, k, k * s]);
    let malloc = csv_rows(&lab, "full/functions.csv").into_iter().find(|r| r["function"] == "malloc").unwrap();
    assert!(malloc["calls"].parse::<u64>().unwrap() >= n);
    // The calls the cycle figures are of, as JSON has them (a 1/32 sample by default).
    let full = lab.report("t.mtl");
    let timed = u(&full["functions"]["malloc"]["cycles"]["timed"]);
    assert_eq!(malloc["cycles_timed"], timed.to_string());
    assert!(timed > 0 && timed < calls(&full, "malloc"), "a sample of the calls was timed: {timed}");
}

/// A pid that exec'd has a trace per image: CSV rows are keyed by pid and
/// trace file (`trace`: JSON's `file`), so the images' rows stay apart.
#[test]
fn csv_rows_of_a_pids_images_are_told_apart_by_their_trace() {
    let lab = Lab::new();
    let prog = lab.compile("exec_root");
    let (c, m) = (30u64, 40u64);
    let o = lab.record("t.mtl", &prog, &[&c.to_string(), &m.to_string(), "3"]);
    assert_eq!(o.status.code(), Some(3));
    let r = report_json(&lab, &["t.mtl"]);
    let (first, last) = (r["file"].as_str().unwrap(), r["children"][0]["file"].as_str().unwrap());
    assert_eq!(r["children"][0]["pid"], r["pid"]);
    let pid = r["pid"].to_string();
    let o = lab.command(MTLAB).args(["report", "t.mtl", "--top", &TOP.to_string(), "--callers", "--csv", "csv"]).output().unwrap();
    assert_success(&o, "report --csv");
    assert_eq!(csv_files(&lab, "csv"), ["callers.csv", "functions.csv", "heap.csv", "processes.csv", "sites.csv", "time_series.csv"]);
    // Every row is keyed by pid and trace file; one pid, two images.
    for (table, item) in [("functions", "function"), ("heap", "when"), ("callers", "function"), ("time_series", "event")] {
        let rows = csv_rows(&lab, &format!("csv/{table}.csv"));
        let mut keys: Vec<(&str, &str, &str)> = rows.iter().map(|x| (x["pid"].as_str(), x["trace"].as_str(), x[item].as_str())).collect();
        let n = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), n, "{table}.csv: a key that names two rows");
        assert!(n > 2, "{table}.csv: {n} rows");
        let files: std::collections::BTreeSet<(&str, &str)> = rows.iter().map(|x| (x["pid"].as_str(), x["trace"].as_str())).collect();
        assert_eq!(files, [(pid.as_str(), first), (pid.as_str(), last)].into(), "{table}.csv");
    }
    let heap = csv_rows(&lab, "csv/heap.csv");
    assert_eq!(heap.iter().map(|x| (x["trace"].as_str(), x["when"].as_str())).collect::<Vec<_>>(), [(first, "peak"), (first, "end"), (last, "peak"), (last, "end")]);
    let end = |file: &str| heap.iter().find(|x| x["trace"] == file && x["when"] == "end").unwrap()["live_bytes"].clone();
    assert_eq!(end(first), live_bytes_end(&r).to_string());
    assert_eq!(end(last), live_bytes_end(&r["children"][0]).to_string());
    // Each image's sites under its own file: the first's C blocks, the last's M.
    let sites = csv_rows(&lab, "csv/sites.csv");
    let site = |file: &str, function: &str| -> Vec<[u64; 4]> {
        sites
            .iter()
            .filter(|x| x["table"] == "by_bytes" && x["trace"] == file && x["function"] == function)
            .map(|x| ["calls", "bytes", "live_objects", "live_bytes"].map(|k| x[k].parse().unwrap()))
            .collect()
    };
    assert_eq!(site(first, "before_exec"), [[c, c * 300, c, c * 300]]);
    assert_eq!(site(last, "in_exec_image"), [[m, m * 400, 0, 0]]);
    assert!(site(first, "in_exec_image").is_empty() && site(last, "before_exec").is_empty());
    let processes = csv_rows(&lab, "csv/processes.csv");
    assert_eq!(processes.iter().map(|x| (x["pid"].as_str(), x["file"].as_str())).collect::<Vec<_>>(), [(pid.as_str(), first), (pid.as_str(), last)]);
}

#[test]
fn exports_say_which_process_they_took_and_merge_sums_the_processes() {
    let lab = Lab::new();
    let prog = lab.compile("fork");
    let (a, b) = (50u64, 70u64);
    let out = lab.record_ok("t.mtl", &prog, &[&a.to_string(), &b.to_string()]);
    let child = child_pid(&out.stdout);
    let r = lab.report("t.mtl");
    let root = u(&r["pid"]);

    let o = report_output(&lab, &["t.mtl", "--collapsed", "root.txt"]);
    assert_success(&o, "report --collapsed");
    let err = stderr(&o);
    assert!(
        err.contains(&format!(
            "mtlab: the exports are of process {root} (fork, t.mtl), the root of 2 selected processes; --merge sums them all, --pid PID takes another"
        )),
        "{err}"
    );
    let o = report_output(&lab, &["t.mtl", "--collapsed", "child.txt", "--pid", &child.to_string()]);
    assert_success(&o, "report --collapsed --pid");
    assert!(stderr(&o).contains(&format!("mtlab: the exports are of process {child} (fork, ./t.mtl.d/{child})\n")), "{}", stderr(&o));
    let o = report_output(&lab, &["t.mtl", "--collapsed", "merged.txt", "--merge"]);
    assert_success(&o, "report --collapsed --merge");
    assert!(stderr(&o).contains(&format!("mtlab: the exports sum the profiles of 2 processes: {root} (fork), {child} (fork)")), "{}", stderr(&o));

    // Allocated bytes: each process's own sites, and the merge the sum of both.
    assert_eq!(collapsed_sum(&lab, "root.txt", "parent_allocs"), a * 100);
    assert_eq!(collapsed_sum(&lab, "root.txt", "child_allocs"), 0);
    assert_eq!(collapsed_sum(&lab, "child.txt", "child_allocs"), b * 200);
    assert_eq!(collapsed_sum(&lab, "child.txt", "parent_allocs"), 0);
    assert_eq!(collapsed_sum(&lab, "merged.txt", "parent_allocs"), a * 100);
    assert_eq!(collapsed_sum(&lab, "merged.txt", "child_allocs"), b * 200);
    assert_eq!(
        collapsed_sum(&lab, "merged.txt", ""),
        collapsed_sum(&lab, "root.txt", "") + collapsed_sum(&lab, "child.txt", ""),
        "the merge's total is the sum of the processes' totals"
    );
}

#[test]
fn a_deleted_or_corrupt_child_trace_is_named() {
    let lab = Lab::new();
    let prog = lab.compile("fork");
    let out = lab.record_ok("t.mtl", &prog, &["5", "7"]);
    let child = child_pid(&out.stdout);
    let file = format!("t.mtl.d/{child}");
    std::fs::remove_file(lab.path(&file)).unwrap();
    let o = lab.command(MTLAB).args(["report", "--json", "t.mtl"]).output().unwrap();
    assert_success(&o, "report with a deleted child trace");
    let err = stderr(&o);
    assert!(err.contains(&format!("mtlab: warning: trace of child {child} (fork) is missing: ")), "{err}");
    assert!(err.contains("it is not there now (deleted or moved)"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["processes_index"].as_array().unwrap().len(), 1);
    let missing = v["missing_traces"].as_array().unwrap();
    assert_eq!(missing.len(), 1);
    assert_eq!((u(&missing[0]["pid"]), missing[0]["command"].as_str()), (child as u64, Some("fork")));
    assert!(missing[0]["file"].as_str().unwrap().ends_with(&file));

    // A file beside the root that is not a trace: named with the reason.
    std::fs::write(lab.path(&file), b"not a trace").unwrap();
    let o = report_output(&lab, &["t.mtl"]);
    assert_success(&o, "report with a corrupt child trace");
    let err = stderr(&o);
    assert!(err.contains(&format!("mtlab: warning: trace of child {child} (fork) is missing: ")), "{err}");
    assert!(err.contains("unreadable: ") && err.contains("is not an mtlab trace"), "{err}");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains(&format!("warning: trace of child {child} (fork) is missing")), "the report says it too");
}

#[test]
fn thread_exit_flushes_the_thread_buffer() {
    let lab = Lab::new();
    let prog = lab.compile("thread_exit");
    let (m, p) = (500u64, 300u64);
    lab.record_ok("t.mtl", &prog, &[&m.to_string(), &p.to_string(), "exit"]);
    let r = lab.report("t.mtl");
    strict(&r);
    assert_eq!(site(&r, "thread_allocs"), site_of(m, m * 32, m, m * 32));
    assert_eq!(site(&r, "main_allocs"), site_of(p, p * 48, p, p * 48));
    assert_eq!(site(&r, "second_allocs"), site_of(10, 160, 10, 160));
    assert_eq!(r["clean_end"], true);
    assert_eq!(u(&r["events_dropped"]), 0);

    // Ending by _exit: no exit handler runs, mtlab's _exit wrapper finishes
    // the trace. The first thread's events are there because its buffer was
    // written when it exited (before the second thread could take it over).
    lab.record_ok("q.mtl", &prog, &[&m.to_string(), &p.to_string(), "_exit"]);
    let q = lab.report("q.mtl");
    strict(&q);
    assert_eq!(q["clean_end"], true);
    assert_eq!(u(&q["events_dropped"]), 0);
    assert_eq!(site(&q, "thread_allocs"), site_of(m, m * 32, m, m * 32));
    assert_eq!(site(&q, "second_allocs"), site_of(10, 160, 10, 160));
    assert_eq!(site(&q, "main_allocs"), site_of(p, p * 48, p, p * 48));
}

#[test]
fn sleeping_program_timestamps_cover_the_run() {
    let lab = Lab::new();
    let prog = lab.compile("sleep_between");
    lab.record_ok("t.mtl", &prog, &[]);
    let r = lab.report("t.mtl");
    strict(&r);
    assert_eq!(site(&r, "first_alloc"), site_of(1, 100, 0, 0));
    assert_eq!(site(&r, "second_alloc"), site_of(1, 200, 0, 0));
    let ms = 1_000_000u64;
    assert!(u(&r["duration_ns"]) >= 200 * ms, "duration {} ns", r["duration_ns"]);
    assert_eq!(live_bytes_peak(&r), 300);
    let at = u(&r["peak"]["at_ns"]);
    assert!(at >= 200 * ms, "the peak comes after the sleep: at {at} ns");
    let first = u(&r["time_series"][0]["ns"]);
    assert!(at - first >= 200 * ms, "the sleep lies between the first event ({first} ns) and the peak ({at} ns)");
}

#[test]
fn a_double_free_caught_by_glibc_keeps_the_events_before_it() {
    // glibc aborts inside libc, past the abort() shim: the preload's SIGABRT
    // handler writes the thread's buffer, then the process dies of the signal.
    let lab = Lab::new();
    let prog = lab.compile("double_free");
    let no_core = |cmd: &mut std::process::Command| unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            let zero = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            libc::setrlimit(libc::RLIMIT_CORE, &zero);
            Ok(())
        });
    };
    let mut plain = lab.command(&prog);
    plain.arg("1000");
    no_core(&mut plain);
    let plain = plain.output().unwrap();
    let mut traced = lab.record_cmd("t.mtl", &[], &prog, &["1000"]);
    no_core(&mut traced);
    let traced = traced.output().unwrap();
    assert_eq!(plain.status.signal(), Some(libc::SIGABRT), "{}", plain.status);
    assert_eq!(traced.status.signal(), Some(libc::SIGABRT), "the program still dies of its abort: {}", traced.status);
    assert!(String::from_utf8_lossy(&plain.stderr).contains("double free detected"));
    assert_eq!(program_stderr(&traced), String::from_utf8_lossy(&plain.stderr), "glibc's message unchanged");
    let r = lab.report("t.mtl");
    assert_eq!(r["exit"], "killed by signal 6");
    // All 1000 kept blocks and the 48-byte one; the first free (the second never returned).
    assert_eq!(calls(&r, "malloc"), 1001);
    assert_eq!(calls(&r, "free"), 1);
    assert_eq!(site(&r, "keep_allocs"), site_of(1000, 64_000, 1000, 64_000));
}

/// A process killed by SIGKILL (an OOM kill, `kill -9`) takes with it what
/// its threads still buffered. A thread's buffer is written once its oldest
/// event is ~100 ms old, at its next event: what each thread did before a
/// pause is in the trace; only its newest event, after the pause, is lost.
/// Before, every thread's 100 mallocs (far below a buffer's 64 KiB) died
/// with the process: 0 calls.
#[test]
fn a_killed_process_loses_only_what_its_threads_did_last() {
    let lab = Lab::new();
    let prog = lab.compile("killed_tail");
    let out = lab.record_cmd("t.mtl", &[], &prog, &["100", "300"]).output().unwrap();
    assert_eq!(out.status.signal(), Some(libc::SIGKILL), "record ends as the program did: {}", out.status);
    let r = lab.report("t.mtl");
    assert_eq!(r["exit"], "killed by signal 9");
    assert_eq!(r["clean_end"], false);
    for who in ["main", "worker"] {
        assert_eq!(site(&r, &format!("{who}_before")), site_of(100, 100_000, 100, 100_000), "{who}: written before the pause's end");
        assert_eq!(site(&r, &format!("{who}_after")).calls, 0, "{who}: the newest event died with the process");
    }
}

#[test]
fn abort_keeps_the_trace_readable_and_the_signal() {
    let lab = Lab::new();
    let prog = lab.compile("abort");
    let n = 100_000u64;
    // No core files from the program or from mtlab re-raising SIGABRT.
    let mut cmd = lab.record_cmd("t.mtl", &[], &prog, &[&n.to_string()]);
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            let zero = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            libc::setrlimit(libc::RLIMIT_CORE, &zero);
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    assert_eq!(out.status.signal(), Some(libc::SIGABRT), "mtlab dies by the program's signal: {}", out.status);
    let r = lab.report("t.mtl");
    strict(&r);
    assert_eq!(r["clean_end"], false);
    assert!(r["events_dropped"].is_null(), "unknown without an END record");
    assert_eq!(r["exit"], "killed by signal 6");
    let text = lab.command(MTLAB).arg("report").arg(lab.path("t.mtl")).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(text.contains("program was killed by signal 6 (Aborted)"), "the text report names the signal: {text}");
    assert!(
        text.contains("live at the last event written:") && !text.contains("not freed at exit"),
        "what was live is not called a leak of a killed program: {text}"
    );
    // The abort shim wrote the thread's last, partly filled buffer too.
    assert_eq!(site(&r, "abort_allocs"), site_of(n, n * 64, n, n * 64));
    // The table report says why the count is unknown.
    let o = lab.command(MTLAB).args(["report", "t.mtl"]).output().unwrap();
    assert_success(&o, "mtlab report");
    assert!(String::from_utf8_lossy(&o.stdout).contains("events dropped: unknown"));

    // As a shell sees it: status 128 + 6.
    let o = lab
        .command("sh")
        .arg("-c")
        .arg(r#"ulimit -c 0; "$0" record -o s.mtl -- "$1" 20000 2>/dev/null; echo "status=$?""#)
        .arg(MTLAB)
        .arg(&prog)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "status=134");
}

#[test]
fn exit_code_and_stdio_pass_through() {
    let lab = Lab::new();
    let prog = lab.compile("exit_code");
    let input = b"abc\ndef\n";
    let plain = run_with_stdin(lab.command(&prog), input);
    let traced = run_with_stdin(lab.record_cmd("t.mtl", &[], &prog, &[]), input);
    assert_eq!(plain.status.code(), Some(7));
    assert_eq!(traced.status.code(), Some(7), "{}", stderr(&traced));
    assert_eq!(String::from_utf8_lossy(&traced.stdout), "to stdout: hello\necho: abc\ndef\n");
    assert_eq!(traced.stdout, plain.stdout);
    assert_eq!(program_stderr(&traced), "to stderr: hello\n");
    assert_eq!(program_stderr(&traced).as_bytes(), plain.stderr.as_slice());
    // mtlab's own lines follow the program's.
    assert!(stderr(&traced).starts_with("to stderr: hello\nmtlab: wrote "), "{}", stderr(&traced));
    let r = lab.report("t.mtl");
    assert_eq!(r["exit"], "exit code 7");
}

// ---------------------------------------------------------------------------
// Real programs.

/// The real interpreter behind `python3` (not a pyenv-style wrapper script).
/// Started with stdout and stdin closed (`>&- <&-`), a program finds them
/// closed under `mtlab record` too: Rust's runtime had opened /dev/null at
/// every closed standard descriptor of mtlab, which the program inherited, so
/// its writes to a closed stdout succeeded (and its exit code changed).
#[test]
fn closed_standard_descriptors_stay_closed_for_the_program() {
    let lab = Lab::new();
    let prog = lab.compile("std_closed");
    let prog = prog.to_str().unwrap();
    let closed = |args: &[&str]| {
        lab.command("sh").args(["-c", r#"exec "$@" >&- <&-"#, "sh"]).args(args).output().unwrap()
    };
    assert_eq!(closed(&[prog, "1000"]).status.code(), Some(3), "untraced: both closed");
    for extra in [&[][..], &["--sample", "4KiB"][..]] {
        let mut args = vec![MTLAB, "record"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["-o", "t.mtl", "--", prog, "1000"]);
        let o = closed(&args);
        assert_eq!(o.status.code(), Some(3), "{extra:?}: as untraced: {}", stderr(&o));
        let r = lab.report("t.mtl");
        assert_eq!(r["exit"], "exit code 3");
        let _ = std::fs::remove_file(lab.path("t.mtl"));
    }
    // Open descriptors are the program's as ever.
    let o = lab.record("o.mtl", prog, &["10"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(o.stdout, b"x");
}

/// The program renames or removes the directory its trace is written in:
/// what was written went with the directory, and record says where, instead
/// of "no trace was written ... cleared LD_PRELOAD".
#[test]
fn a_trace_directory_moved_or_removed_by_the_program_is_named() {
    let lab = Lab::new();
    let prog = lab.compile("n_mallocs");
    let prog = prog.to_str().unwrap();
    std::fs::create_dir(lab.path("d")).unwrap();
    let o = lab.record("d/t.mtl", "sh", &["-c", r#"mv d d.moved && "$0" 1000 48 0"#, prog]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    let moved = lab.path("d.moved").join("t.mtl");
    assert!(err.contains(&format!("was renamed to {}", lab.path("d.moved").display())), "{err}");
    assert!(err.contains(&moved.display().to_string()), "{err}");
    assert!(!err.contains("LD_PRELOAD"), "{err}");
    assert!(moved.exists());
    std::fs::create_dir(lab.path("e")).unwrap();
    let o = lab.record("e/t.mtl", "sh", &["-c", r#"rm -r e && "$0" 1000 48 0"#, prog]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains(&format!("its directory {} was removed while the program ran", lab.path("e").display())), "{err}");
}

/// 4^LEVELS call stacks that differ only in which of a few return
/// addresses sits at which depth: each must keep its own id. The stack hash
/// summed position-weighted addresses, a linear function under which such
/// stacks collide (4^5 stacks got 669 ids), and the table takes equal hashes
/// for one stack, so allocations were charged to other stacks than theirs.
#[test]
fn stacks_differing_only_in_the_order_of_their_frames_keep_their_own_ids() {
    let lab = Lab::new();
    let prog = lab.compile("many_stacks");
    let levels = 6u32;
    let paths = 4u64.pow(levels);
    for unwind in ["dwarf", "fp"] {
        let trace = format!("{unwind}.mtl");
        let o = lab.record_cmd(&trace, &["--unwind", unwind], &prog, &[&levels.to_string()]).output().unwrap();
        assert_success(&o, "many_stacks");
        let out = lab.path(&format!("{unwind}.txt"));
        let o = lab.command(MTLAB).args(["report", &trace, "--collapsed"]).arg(&out).output().unwrap();
        assert_success(&o, "report --collapsed");
        let text = std::fs::read_to_string(&out).unwrap();
        let leaf: Vec<&str> = text.lines().filter(|l| l.contains(";leaf;malloc") || l.contains(";leaf ")).collect();
        assert_eq!(leaf.len() as u64, paths, "{unwind}: one stack per path");
        assert!(leaf.iter().all(|l| l.ends_with(" 16")), "{unwind}: one malloc(16) per stack: {:?}", leaf.iter().find(|l| !l.ends_with(" 16")));
    }
}

/// More distinct stacks than mtlab's stack table holds (2^20): the calls
/// that got none are counted under "(no stack recorded)", and the text
/// report says why instead of leaving that row unexplained.
#[test]
fn a_full_stack_table_is_told_in_the_report() {
    let lab = Lab::new();
    let prog = lab.compile("many_stacks");
    lab.record_ok("t.mtl", &prog, &["10"]);
    let r = lab.report("t.mtl");
    let overflowed = u(&r["stacks_overflowed"]);
    assert!(overflowed > 0, "4^10 stacks and the program's own overflow a table of 2^20");
    let o = lab.command(MTLAB).args(["report", "t.mtl"]).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("(no stack recorded)"));
    assert!(text.contains(&format!("{overflowed} call(s) got no stack: mtlab's table of distinct stacks")), "{text}");
}

fn python() -> Option<String> {
    let o = std::process::Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output().ok()?;
    let p = String::from_utf8(o.stdout).ok()?.trim().to_string();
    (o.status.success() && !p.is_empty()).then_some(p)
}

#[test]
fn python_script_output_and_exit_code_unchanged() {
    let Some(py) = python() else {
        skip("(python3 part): python3 is not installed");
        return;
    };
    let lab = Lab::new();
    let script = "import json, sys\n\
                  d = {i: str(i) * 10 for i in range(20000)}\n\
                  rows = [list(range(i % 50)) for i in range(5000)]\n\
                  blobs = ['x' * (600 + i % 7) for i in range(3000)]\n\
                  print(len(d), sum(map(len, rows)), sorted(d)[-1], sum(map(len, blobs)))\n\
                  print(json.dumps({'k': [1, 2, 3], 's': d[123]}))\n\
                  print('to stderr', file=sys.stderr)\n\
                  sys.exit(5)\n";
    let plain = lab.command(&py).args(["-c", script]).output().unwrap();
    let traced = lab.record("t.mtl", &py, &["-c", script]);
    assert_eq!(plain.status.code(), Some(5));
    assert_eq!(traced.status.code(), Some(5), "{}", stderr(&traced));
    assert_eq!(String::from_utf8_lossy(&traced.stdout), String::from_utf8_lossy(&plain.stdout));
    assert_eq!(String::from_utf8_lossy(&traced.stdout), "20000 122500 19999 1808994\n{\"k\": [1, 2, 3], \"s\": \"123123123123123123123123123123\"}\n");
    assert_eq!(program_stderr(&traced), String::from_utf8_lossy(&plain.stderr));
    let r = lab.report("t.mtl");
    // 3000 of them at least for the blobs: strings above pymalloc's 512-byte
    // limit come from malloc (bytes(n) would come from calloc).
    assert!(calls(&r, "malloc") > 3000, "malloc calls {}", calls(&r, "malloc"));
    assert!(calls(&r, "free") > 1000);
    assert_eq!(r["exit"], "exit code 5");
    assert_eq!(r["clean_end"], true);
    assert_eq!(u(&r["events_dropped"]), 0);
    assert!(r["warnings"].as_array().unwrap().is_empty(), "{}", r["warnings"]);
    assert_eq!(r["cmdline"][0], py);
    assert!(live_bytes_peak(&r) > 1808994, "the blobs alone are 1808994 bytes, all live at once");
}

#[test]
fn gcc_driver_children_are_traced() {
    let lab = Lab::new();
    std::fs::create_dir(lab.path("plain")).unwrap();
    std::fs::create_dir(lab.path("traced")).unwrap();
    let src = "int add(int a, int b) { return a + b; }\nint twice(int x) { return add(x, x); }\n";
    std::fs::write(lab.path("plain/tiny.c"), src).unwrap();
    std::fs::write(lab.path("traced/tiny.c"), src).unwrap();
    let plain = lab.command("gcc").current_dir(lab.path("plain")).args(["-c", "tiny.c", "-o", "tiny.o"]).output().unwrap();
    assert_success(&plain, "gcc untraced");
    let traced = lab
        .record_cmd("t.mtl", &[], "gcc", &["-c", "tiny.c", "-o", "tiny.o"])
        .current_dir(lab.path("traced"))
        .output()
        .unwrap();
    assert_success(&traced, "mtlab record -- gcc");
    let a = std::fs::read(lab.path("plain/tiny.o")).unwrap();
    let b = std::fs::read(lab.path("traced/tiny.o")).unwrap();
    assert_eq!(a.len(), b.len(), "object sizes");
    assert!(a == b, "the traced compile produced a different object");
    let r = lab.report("t.mtl");
    assert!(r["cmdline"][0].as_str().unwrap().ends_with("gcc"));
    // The driver starts cc1 with vfork: the child must not write the driver's
    // trace for it (it once did, and the driver's own trace was lost).
    assert_eq!(r["clean_end"], true, "the driver's own trace ends cleanly");
    let children = r["children"].as_array().unwrap();
    assert!(children.iter().all(|c| c["pid"] != r["pid"]), "the root trace is the driver's, not a child's");
    assert!(children.iter().all(|c| c["ppid"] == r["pid"]), "children are the driver's");
    let argv0 = |c: &serde_json::Value| c["cmdline"][0].as_str().unwrap_or("").to_string();
    let cc1 = children.iter().find(|c| argv0(c).ends_with("cc1")).unwrap_or_else(|| {
        panic!("no cc1 among {:?}", children.iter().map(argv0).collect::<Vec<_>>())
    });
    assert!(children.iter().any(|c| argv0(c) == "as" || argv0(c).ends_with("/as")), "the assembler is traced too");
    assert!(calls(cc1, "malloc") > 100, "cc1 malloc calls {}", calls(cc1, "malloc"));
    assert_eq!(cc1["clean_end"], true);
    for c in children {
        assert!(c["warnings"].as_array().unwrap().is_empty(), "{}", c["warnings"]);
    }
    assert_eq!(r["exit"], "exit code 0");
}

/// A git repository with at least 3 commits: this source tree when it is a
/// checkout, else a small one made in the lab.
fn git_repo(lab: &Lab) -> std::path::PathBuf {
    let root = repo_root();
    let n = lab.command("git").arg("-C").arg(&root).args(["rev-list", "--count", "HEAD"]).output().unwrap();
    if n.status.success() && String::from_utf8_lossy(&n.stdout).trim().parse::<u64>().unwrap_or(0) >= 3 {
        return root;
    }
    let repo = lab.path("repo");
    std::fs::create_dir(&repo).unwrap();
    let git = |args: &[&str]| {
        let o = lab
            .command("git")
            .arg("-C")
            .arg(&repo)
            .args(["-c", "user.name=e2e", "-c", "user.email=e2e@example.invalid"])
            .args(args)
            .output()
            .unwrap();
        assert_success(&o, &format!("git {args:?}"));
    };
    git(&["init", "-q"]);
    for i in 1..=4 {
        git(&["commit", "-q", "--allow-empty", "-m", &format!("commit number {i}")]);
    }
    repo
}

#[test]
fn git_log_output_unchanged() {
    let lab = Lab::new();
    let root = git_repo(&lab);
    let args = ["-C", root.to_str().unwrap(), "log", "--oneline", "-3"];
    // Others may commit meanwhile: compare with untraced runs on both sides.
    for attempt in 0..3 {
        let before = lab.command("git").args(args).output().unwrap();
        assert_success(&before, "git log");
        let traced = lab.record("t.mtl", "git", &args);
        let after = lab.command("git").args(args).output().unwrap();
        if before.stdout != after.stdout && attempt < 2 {
            continue;
        }
        assert_success(&traced, "mtlab record -- git log");
        assert_eq!(String::from_utf8_lossy(&traced.stdout), String::from_utf8_lossy(&before.stdout));
        assert_eq!(String::from_utf8_lossy(&traced.stdout).lines().count(), 3);
        let r = lab.report("t.mtl");
        assert!(calls(&r, "malloc") > 10);
        assert_eq!(r["exit"], "exit code 0");
        return;
    }
}

// ---------------------------------------------------------------------------
// Bad input.

#[test]
fn missing_program_exits_127_naming_it() {
    let lab = Lab::new();
    let o = lab.record("t.mtl", "no-such-program-mtlab-e2e", &["x"]);
    assert_eq!(o.status.code(), Some(127));
    assert!(stderr(&o).contains("no-such-program-mtlab-e2e"), "{}", stderr(&o));
    assert!(lab.files_with_prefix("t.mtl").is_empty());
}

/// A mistyped option before `--` is an error that names it and the option
/// meant, not a program name (it was: "cannot find program `--stack`"); the
/// program's own options after its name still pass through.
#[test]
fn a_mistyped_option_is_named_with_the_one_meant() {
    let lab = Lab::new();
    for (args, typo, meant) in [
        (&["record", "--stack", "none", "--", "true"][..], "--stack", "--stacks"),
        (&["record", "--ouput", "x.mtl", "--", "true"], "--ouput", "--output"),
        (&["heap", "compare", "--alocators", "glibc", "--", "true"], "--alocators", "--allocators"),
        (&["bench", "program", "--rep", "3", "--", "true"], "--rep", "--reps"),
    ] {
        let o = lab.command(MTLAB).args(args).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "mtlab {}: {}", args.join(" "), stderr(&o));
        let err = stderr(&o);
        assert!(err.contains(&format!("unexpected argument '{typo}'")), "{err}");
        assert!(err.contains(&format!("'{meant}'")), "{err}");
        assert!(!err.contains("cannot find program"), "{err}");
    }
    let o = lab.command(MTLAB).args(["record", "-o", "ls.mtl", "ls", "-d", "/"]).output().unwrap();
    assert_success(&o, "mtlab record ls -d / (no --)");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "/\n");
}

#[test]
fn unwritable_output_is_refused() {
    let lab = Lab::new();
    let prog = lab.compile("calloc_once");
    let o = lab.command(MTLAB).args(["record", "-o", "/proc/nope/x.mtl", "--"]).arg(&prog).output().unwrap();
    assert!(!o.status.success());
    assert_ne!(o.status.code(), Some(0));
    assert!(stderr(&o).contains("cannot write"), "{}", stderr(&o));
    assert!(stderr(&o).contains("/proc/nope/x.mtl"), "{}", stderr(&o));
}

/// A trace path with spaces and non-ASCII letters is written and read, and
/// the `mtlab report` command record suggests works when pasted into a shell.
#[test]
fn the_suggested_report_command_works_for_a_path_with_spaces() {
    let lab = Lab::new();
    let prog = lab.compile("calloc_once");
    std::fs::create_dir(lab.path("sp ace")).unwrap();
    let o = lab.record("sp ace/t räce's.mtl", &prog, &[]);
    assert_success(&o, "record to a path with spaces");
    let e = stderr(&o);
    let cmd = e.split('`').nth(1).unwrap_or_else(|| panic!("no suggested command: {e}"));
    assert!(cmd.starts_with("mtlab report "), "{cmd}");
    let cmd = cmd.replacen("mtlab", MTLAB, 1);
    let r = lab.command("sh").args(["-c", &format!("{cmd} --json")]).output().unwrap();
    assert_success(&r, &cmd);
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(calls(&v, "calloc"), lab.report("sp ace/t räce's.mtl")["functions"]["calloc"]["calls"].as_u64().unwrap());
    assert!(calls(&v, "calloc") >= 1);
}

#[test]
fn truncated_trace_is_read_up_to_the_damage() {
    let lab = Lab::new();
    let prog = lab.compile("n_mallocs");
    // Enough events for several EVENTS records after finishing joins a
    // thread's chunks into records of up to 4 MiB of events.
    lab.record_ok("t.mtl", &prog, &["2000000", "16", "0"]);
    let bytes = std::fs::read(lab.path("t.mtl")).unwrap();
    let records = raw_records(&bytes);
    assert!(records.iter().filter(|r| r.ty == 1).count() >= 4, "want several EVENTS records");
    let mut cut = bytes.len() as u64 / 2;
    if records.iter().any(|r| r.offset == cut) {
        cut += 1; // cut inside a record, not between two
    }
    let hit = records.iter().find(|r| r.offset < cut && cut < r.end).unwrap();
    std::fs::write(lab.path("half.mtl"), &bytes[..cut as usize]).unwrap();
    // The same file cut cleanly just before the damaged record.
    std::fs::write(lab.path("clean.mtl"), &bytes[..hit.offset as usize]).unwrap();

    let o = lab.command(MTLAB).args(["report", "--json", "half.mtl"]).output().unwrap();
    assert_success(&o, "report of a truncated trace");
    let half: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let warnings = half["warnings"].as_array().unwrap();
    let needle = format!("byte {}", hit.offset);
    assert!(warnings.iter().any(|w| w.as_str().unwrap().contains(&needle)), "no warning with {needle:?}: {warnings:?}");
    assert_eq!(half["clean_end"], false);
    let clean = lab.report("clean.mtl");
    assert!(clean["warnings"].as_array().unwrap().is_empty());
    // Every record before the damage is used, nothing after it.
    assert_eq!(half["functions"], clean["functions"]);
    assert_eq!(half["events"], clean["events"]);
    let full = lab.report("t.mtl");
    let n = u(&half["events"]);
    assert!(n > 0 && n < u(&full["events"]), "events {n} of {}", full["events"]);
    // The table output shows the warning too.
    let o = lab.command(MTLAB).args(["report", "half.mtl"]).output().unwrap();
    assert_success(&o, "table report of a truncated trace");
    let all = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert!(all.contains(&needle), "{all}");
    // Before the figures it qualifies, not after every table.
    let out = String::from_utf8_lossy(&o.stdout);
    let (warned, table) = (out.find(&needle), out.find("per function"));
    assert!(warned.is_some() && table.is_some() && warned < table, "the warning comes first: {out}");
    // --strict: the same report, and a non-zero exit; a clean trace passes.
    let o = lab.command(MTLAB).args(["report", "--strict", "half.mtl"]).output().unwrap();
    assert_eq!(o.status.code(), Some(3), "report --strict of a damaged trace: {}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains(&needle) && stderr(&o).contains("(--strict)"));
    let o = lab.command(MTLAB).args(["report", "--strict", "clean.mtl"]).output().unwrap();
    assert_success(&o, "report --strict of a clean trace");
}

#[test]
fn trace_from_a_newer_version_is_refused() {
    let lab = Lab::new();
    let prog = lab.compile("calloc_once");
    lab.record_ok("t.mtl", &prog, &[]);
    let mut bytes = std::fs::read(lab.path("t.mtl")).unwrap();
    bytes[8..12].copy_from_slice(&99u32.to_le_bytes());
    std::fs::write(lab.path("new.mtl"), &bytes).unwrap();
    let o = lab.command(MTLAB).args(["report", "--json", "new.mtl"]).output().unwrap();
    assert!(!o.status.success());
    assert!(o.stdout.is_empty());
    let e = stderr(&o);
    assert!(e.contains("newer") && e.contains("v99") && e.contains("up to v10"), "{e}");
}

/// Xorshift64 (shifts 13, 7, 17) from the seed `x`: a fixed stream of test data,
/// the same on every run.
fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

#[test]
fn garbage_and_empty_files_are_not_traces() {
    let lab = Lab::new();
    let mut rnd = xorshift(0x9e3779b97f4a7c15);
    let garbage: Vec<u8> = (0..4096).map(|_| rnd() as u8).collect();
    std::fs::write(lab.path("garbage.mtl"), &garbage).unwrap();
    std::fs::write(lab.path("empty.mtl"), b"").unwrap();
    for name in ["garbage.mtl", "empty.mtl"] {
        let o = lab.command(MTLAB).args(["report", "--json", name]).output().unwrap();
        assert!(!o.status.success(), "{name}");
        assert!(stderr(&o).contains("not an mtlab trace"), "{name}: {}", stderr(&o));
    }
}

#[test]
fn report_of_a_missing_file() {
    let lab = Lab::new();
    let o = lab.command(MTLAB).args(["report", "--json", "nowhere.mtl"]).output().unwrap();
    assert!(!o.status.success());
    assert!(stderr(&o).contains("nowhere.mtl") && stderr(&o).contains("does not exist"), "{}", stderr(&o));
}

/// A directory given as the trace names the traces in it; an export into a
/// directory that is not there fails before the report is printed (it was
/// printed whole first); a terminal that reports 0 columns gets tables of
/// the default width, not one-character columns (1 330 lines for a 109-line
/// report).
#[test]
fn report_refuses_a_directory_and_a_missing_output_directory_up_front() {
    let lab = Lab::new();
    let prog = lab.compile("calloc_once");
    lab.record_ok("t.mtl", &prog, &[]);
    let o = lab.command(MTLAB).args(["report"]).arg(lab.dir.path()).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("is a directory, not a trace file (the traces in it: t.mtl)"), "{}", stderr(&o));
    let o = lab.command(MTLAB).args(["report", "--html", "/missing-dir-mtlab/x.html", "t.mtl"]).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(o.stdout.is_empty(), "nothing printed before the refusal: {}", String::from_utf8_lossy(&o.stdout));
    assert!(stderr(&o).contains("its directory /missing-dir-mtlab does not exist"), "{}", stderr(&o));
    let plain = lab.command(MTLAB).args(["report", "t.mtl"]).output().unwrap();
    let lines = String::from_utf8_lossy(&plain.stdout).lines().count();
    let pty = lab
        .command("script")
        .arg("-qc")
        .arg(format!("stty cols 0; {MTLAB} report t.mtl"))
        .arg("/dev/null")
        .env_remove("COLUMNS")
        .output()
        .unwrap();
    assert_success(&pty, "mtlab report on a terminal of 0 columns");
    let on_pty = String::from_utf8_lossy(&pty.stdout).lines().count();
    assert!(on_pty <= lines + 5, "{on_pty} lines on a 0-column terminal, {lines} on a pipe");
}

/// Full traces work over every installed heap manager, not only glibc's: the
/// allocator is named, the program's calls are counted exactly, and nothing
/// hangs (the first event of a thread can come from inside the allocator,
/// under its own lock: jemalloc deadlocked there once).
#[test]
fn other_allocators_are_traced_exactly() {
    let lab = Lab::new();
    let prog = lab.compile("n_mallocs");
    let threads = lab.compile("threads");
    let libs = [
        ("jemalloc", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"),
        ("tcmalloc", "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4"),
        ("mimalloc", "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2"),
    ];
    let mut tried = 0;
    for (name, lib) in libs {
        if !std::path::Path::new(lib).exists() {
            skip(&format!("{name}: {lib} not installed"));
            continue;
        }
        tried += 1;
        let trace = format!("{name}.mtl");
        let out = lab.record_cmd(&trace, &[], &prog, &["1000", "48", "10"]).env("LD_PRELOAD", lib).output().unwrap();
        assert_success(&out, &format!("mtlab record under {name}"));
        let r = lab.report(&trace);
        assert_eq!(r["allocator"], name, "allocator detected from the malloc in use");
        assert_eq!(site(&r, "do_allocs"), site_of(1000, 48_000, 10, 480), "{name}");
        assert_eq!(r["clean_end"], true);
        // Threads under the same allocator: each thread's first event may be an mmap made
        // inside the allocator.
        let trace = format!("{name}-threads.mtl");
        let mut child = lab
            .record_cmd(&trace, &[], &threads, &["8", "5000"])
            .env("LD_PRELOAD", lib)
            .spawn()
            .unwrap();
        let start = std::time::Instant::now();
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if start.elapsed() > std::time::Duration::from_secs(60) {
                let _ = child.kill();
                panic!("mtlab record of 8 threads under {name} did not finish in 60 s (deadlock?)");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        assert!(status.success(), "mtlab record threads under {name}: {status}");
        let r = lab.report(&trace);
        assert_eq!(r["events_dropped"], 0);
    }
    eprintln!("{tried} allocators traced");
}

#[test]
fn the_traced_process_reports_its_own_peak_rss() {
    // 100 000 blocks of 1 KiB: glibc writes each chunk's header, so every
    // page is touched and the process's resident set passes 100 000 KiB.
    let lab = Lab::new();
    let prog = lab.compile("n_mallocs");
    lab.record_ok("t.mtl", &prog, &["100000", "1024", "0"]);
    let bytes = std::fs::read(lab.path("t.mtl")).unwrap();
    let stats: Vec<String> = raw_records(&bytes)
        .iter()
        .filter(|r| r.ty == 5)
        .map(|r| String::from_utf8_lossy(&bytes[r.offset as usize + 8..r.end as usize]).into_owned())
        .collect();
    assert_eq!(stats.len(), 1, "one STATS record");
    let kib: u64 = stats[0]
        .lines()
        .find_map(|l| l.strip_prefix("max_rss_kib="))
        .expect("max_rss_kib in STATS")
        .parse()
        .unwrap();
    assert!((100_000..200_000).contains(&kib), "peak RSS {kib} KiB");
}

#[test]
fn the_trace_is_rewritten_while_the_program_runs() {
    // 5 phases of 20 000 mallocs with 80 ms pauses: `mtlab record` rewrites
    // the flushed part during the pauses, from the watermark the program
    // publishes. The result must be exactly what the program did.
    let lab = Lab::new();
    let prog = lab.compile("phased_mallocs");
    let (phases, n) = (5u64, 20_000u64);
    lab.record_ok("base.mtl", &prog, &["1", "1"]);
    // `always`: by default the rewrite works on a busy host within a small
    // budget, and tests running beside this one may leave no CPU idle.
    let mut rec = lab
        .record_cmd("t.mtl", &[], &prog, &[&phases.to_string(), &n.to_string()])
        .env("MTLAB_LIVE_FINISH", "always")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // While it runs, the raw records rewritten are punched out of the file:
    // its blocks fall well below its length.
    let mut least_allocated = f64::MAX;
    while rec.try_wait().unwrap().is_none() {
        if let Ok(m) = std::fs::metadata(lab.path("t.mtl")) {
            use std::os::unix::fs::MetadataExt;
            if m.len() > 1 << 20 {
                least_allocated = least_allocated.min((m.blocks() * 512) as f64 / m.len() as f64);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let o = rec.wait_with_output().unwrap();
    assert_success(&o, "mtlab record");
    assert!(least_allocated < 0.5, "the raw trace kept {:.0} % of its length on disk at least", least_allocated * 100.0);
    let base = lab.report("base.mtl");
    let r = lab.report("t.mtl");
    strict(&r);
    assert_eq!(
        call_deltas(&r, &base),
        deltas(&[("malloc", (phases * n - 1) as i64), ("free", (phases * n - 1) as i64)])
    );
    assert_eq!(live_bytes_peak(&r) - live_bytes_peak(&base), (phases * n - 1) * 64);
    assert_eq!(live_bytes_end(&r), live_bytes_end(&base));
    // RUNINFO says how much was rewritten before the program ended: most of it.
    let bytes = std::fs::read(lab.path("t.mtl")).unwrap();
    let runinfo: String = raw_records(&bytes)
        .iter()
        .filter(|rec| rec.ty == 4)
        .map(|rec| String::from_utf8_lossy(&bytes[rec.offset as usize + 8..rec.end as usize]).into_owned())
        .collect();
    let live: u64 = runinfo
        .lines()
        .find_map(|l| l.strip_prefix("rewritten_while_running="))
        .expect("rewritten_while_running in RUNINFO")
        .parse()
        .unwrap();
    assert!(live > 500_000, "only {live} bytes rewritten while running: {runinfo}");
    // The program saw no descriptor or variable of mtlab's.
    let o = lab
        .command(MTLAB)
        .args(["record", "-o", "fds.mtl", "--", "sh", "-c", "env | grep -c MTLAB_WATERMARK; ls -l /proc/$$/fd | grep -c memfd"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout), "0\n0\n");
}

// ---------------------------------------------------------------------------
// Compact traces (`mtlab compact`, `record --compact`).

/// Blocks handed between threads within microseconds: compaction rounds the
/// time stamps far coarser than that, yet the report replays the same heap
/// (no free before its malloc, no block allocated twice), and every
/// per-function figure is the same as the exact trace's.
#[test]
fn compact_trace_keeps_every_figure_but_per_call_timing() {
    let lab = Lab::new();
    let prog = lab.compile("handoff");
    let (n, ring) = (100_000u64, 4u64);
    lab.record_ok("t.mtl", &prog, &[&n.to_string(), &ring.to_string()]);
    // 2^24 ticks (several ms): hundreds of handoffs share each quantum.
    let o = lab.command(MTLAB).args(["compact", "t.mtl", "-o", "c.mtl", "--quantum", "16777216"]).output().unwrap();
    assert_success(&o, "mtlab compact");
    let said = stderr(&o);
    let kept: u64 = said
        .split(" kept after another thread's")
        .next()
        .and_then(|s| s.rsplit(", ").next())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("no count of kept orders in {said:?}"));
    assert!(kept > 0, "handoffs share quanta, so some stamps must be raised: {said}");
    let (full, c) = (lab.report("t.mtl"), lab.report("c.mtl"));
    strict(&full);
    strict(&c);
    assert_eq!(u(&full["unknown_frees"]), 0);
    assert_eq!(u(&full["overlapping_allocs"]), 0);
    // Each site's live bytes at the peak are the one thing a compact trace
    // does not give (its replay order within a quantum is its own).
    let without_peak_sites = |r: &serde_json::Value| {
        let mut r = r.clone();
        r["top_sites"]["at_peak"] = serde_json::Value::Null;
        for list in ["by_bytes", "by_calls", "temporary"] {
            for site in r["top_sites"][list].as_array_mut().unwrap() {
                site["peak_live_objects"] = serde_json::Value::Null;
                site["peak_live_bytes"] = serde_json::Value::Null;
            }
        }
        for site in r["leaks"]["top"].as_array_mut().unwrap() {
            site["peak_live_objects"] = serde_json::Value::Null;
            site["peak_live_bytes"] = serde_json::Value::Null;
        }
        r
    };
    assert!(c["top_sites"]["at_peak"].as_array().unwrap().is_empty() && c["top_sites"]["by_bytes"][0]["peak_live_bytes"].is_null());
    let (full, c) = (without_peak_sites(&full), without_peak_sites(&c));
    for key in ["events", "functions", "end", "peak", "unknown_frees", "overlapping_allocs", "top_sites", "temporary", "leaks"] {
        assert_eq!(full[key], c[key], "{key} differs after compaction");
    }
    assert_eq!(site(&c, "produce").calls, n);
    assert_eq!(full["compact_quantum_ticks"], serde_json::Value::Null);
    assert_eq!(u(&c["compact_quantum_ticks"]), 1 << 24);
    let series = c["time_series"].as_array().unwrap();
    assert!(!series.is_empty() && series.iter().all(|p| p["malloc_mean_cycles"].is_null()));
    assert!(full["time_series"].as_array().unwrap().iter().any(|p| !p["malloc_mean_cycles"].is_null()));
    let size = |name: &str| std::fs::metadata(lab.path(name)).unwrap().len();
    assert!(size("c.mtl") * 4 < size("t.mtl"), "compact {} vs {} bytes", size("c.mtl"), size("t.mtl"));
    // The table says what was given up: exactly the fields removed above.
    let o = lab.command(MTLAB).args(["report", "c.mtl"]).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout).split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(text.contains("compact trace"), "{text}");
    assert!(text.contains("dropped: the sites live at the peak") && text.contains("malloc cycles"), "{text}");
}

#[test]
fn record_compact_counts_exactly() {
    let lab = Lab::new();
    let prog = lab.compile("n_mallocs");
    let (n, s, k) = (5000u64, 48u64, 10u64);
    let o = lab.record_cmd("t.mtl", &["--compact"], &prog, &[&n.to_string(), &s.to_string(), &k.to_string()]).output().unwrap();
    assert_success(&o, "mtlab record --compact");
    let r = lab.report("t.mtl");
    strict(&r);
    assert_eq!(u(&r["compact_quantum_ticks"]), 65536);
    assert_eq!(site(&r, "do_allocs"), site_of(n, n * s, k, k * s));
    assert_eq!(r["exit"], "exit code 0");
    // A compact trace is not compacted twice; other bad requests are refused too.
    let o = lab.command(MTLAB).args(["compact", "t.mtl"]).output().unwrap();
    assert!(!o.status.success() && stderr(&o).contains("compact already"), "{}", stderr(&o));
    let o = lab.command(MTLAB).args(["compact", "nowhere.mtl"]).output().unwrap();
    assert!(!o.status.success() && stderr(&o).contains("does not exist"), "{}", stderr(&o));
    lab.record_ok("u.mtl", &prog, &["10", "16", "0"]);
    let o = lab.command(MTLAB).args(["compact", "u.mtl", "--quantum", "1000"]).output().unwrap();
    assert!(!o.status.success() && stderr(&o).contains("power of two"), "{}", stderr(&o));
    std::fs::write(lab.path("junk.mtl"), b"not a trace").unwrap();
    let o = lab.command(MTLAB).args(["compact", "junk.mtl"]).output().unwrap();
    assert!(!o.status.success() && stderr(&o).contains("not an mtlab trace"), "{}", stderr(&o));
    assert_eq!(std::fs::read(lab.path("junk.mtl")).unwrap(), b"not a trace", "a refused file is left as it was");
}

/// `mtlab compact --lean`: a producer hands blocks of 16 sizes to a
/// consumer thread, which frees them. The lean trace reports every count,
/// site, temporary, leak, the peak, live and mapped bytes as the plain
/// compact trace of the same run does; fragmentation, utilization and
/// unplaced bytes at the end and over time are null ("not in a lean trace"
/// in the text and CSV), and the file is smaller: 2.0–2.3× in five runs
/// of this test's program (81–89 KB against 38–40 KB).
#[test]
fn lean_compact_keeps_every_count_and_drops_what_addresses_give() {
    let lab = Lab::new();
    let prog = lab.compile("handoff");
    let n = 100_000u64;
    lab.record_ok("t.mtl", &prog, &[&n.to_string(), "4"]);
    for (args, what) in [(&["-o", "c.mtl"][..], "compact"), (&["--lean", "-o", "l.mtl"][..], "compact --lean")] {
        let o = lab.command(MTLAB).arg("compact").arg("t.mtl").args(args).output().unwrap();
        assert_success(&o, what);
    }
    let (full, c, l) = (lab.report("t.mtl"), lab.report("c.mtl"), lab.report("l.mtl"));
    strict(&full);
    strict(&l);
    assert_eq!(l["compact_lean"], true);
    assert_eq!((full["compact_lean"].clone(), c["compact_lean"].clone()), (false.into(), false.into()));
    // Against the program's own numbers...
    assert_eq!(site(&l, "produce"), site_of(n, (0..n).map(|i| 32 + 16 * (i % 16)).sum(), 0, 0));
    assert_eq!(calls(&l, "free"), calls(&full, "free"));
    assert!(calls(&l, "free") >= n);
    // ...and against the compact trace of the same run, figure by figure.
    for key in ["events", "functions", "peak", "unknown_frees", "overlapping_allocs", "top_sites", "temporary", "leaks", "space_peak", "space_end"] {
        assert_eq!(c[key], l[key], "{key} differs in the lean trace");
    }
    // The peak was measured on the real addresses: the full trace's, all of it.
    assert_eq!(full["peak"], l["peak"]);
    assert!(f(&l["peak"]["utilization"]) > 0.0);
    let mut end = c["end"].clone();
    for key in FROM_ADDRESSES {
        assert!(!end.pointer(key).unwrap().is_null(), "the compact trace has {key}");
        *end.pointer_mut(key).unwrap() = serde_json::Value::Null;
    }
    assert_eq!(end, l["end"], "the end: only the figures from addresses are gone");
    let (cs, ls) = (c["time_series"].as_array().unwrap(), l["time_series"].as_array().unwrap());
    assert_eq!(cs.len(), ls.len());
    // Within a quantum the two threads' events replay in an order of each
    // trace's own (different addresses, different orders kept), so the
    // series' live bytes may differ point by point, as compact's from the full's.
    for (a, b) in cs.iter().zip(ls) {
        assert_eq!(a["event"], b["event"]);
        assert!(b["utilization"].is_null() && b["fragmentation_mean"].is_null() && !a["utilization"].is_null());
    }
    let size = |name: &str| std::fs::metadata(lab.path(name)).unwrap().len();
    assert!(size("l.mtl") * 3 < size("c.mtl") * 2, "lean {} against compact {} bytes", size("l.mtl"), size("c.mtl"));

    // The text, CSV and HTML say so; the diff and the exports take a lean side.
    let o = lab.command(MTLAB).args(["report", "l.mtl", "--csv", "csv", "--html", "l.html", "--pprof", "l.pb.gz", "--flamegraph", "l.svg"]).output().unwrap();
    assert_success(&o, "report of a lean trace");
    let text = String::from_utf8_lossy(&o.stdout).split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(text.contains("lean trace (`mtlab compact --lean`)"), "{text}");
    assert_eq!(text.matches("┆ not in a lean trace │").count(), 4, "{text}");
    let html = std::fs::read_to_string(lab.path("l.html")).unwrap();
    assert!(html.contains("not in a lean trace"));
    for name in ["l.pb.gz", "l.svg"] {
        assert!(size(name) > 0, "{name}");
    }
    let heap = csv_rows(&lab, "csv/heap.csv");
    let at = |when: &str| heap.iter().find(|r| r["when"] == when).unwrap().clone();
    assert!(at("end")["utilization"].is_empty() && at("end")["fragmentation_mean"].is_empty() && !at("end")["live_bytes"].is_empty());
    assert!(!at("peak")["utilization"].is_empty());
    assert!(csv_rows(&lab, "csv/time_series.csv").iter().all(|r| r["utilization"].is_empty() && !r["live_bytes"].is_empty()));
    let o = lab.command(MTLAB).args(["report", "--json", "--diff", "t.mtl", "l.mtl"]).output().unwrap();
    assert_success(&o, "report --diff against a lean trace");
    let d: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let totals = &d["pairs"][0]["totals"];
    for key in ["allocation_calls", "allocated_bytes", "peak_live_bytes", "leaked_bytes", "temporary_allocations"] {
        assert_eq!(f(&totals[key]["change"]), 0.0, "{key}: {}", totals[key]);
    }

    // A lean trace is not compacted again, nor is a compact one made lean.
    let o = lab.command(MTLAB).args(["compact", "l.mtl"]).output().unwrap();
    assert!(!o.status.success() && stderr(&o).contains("lean compact trace already"), "{}", stderr(&o));
    let o = lab.command(MTLAB).args(["compact", "--lean", "c.mtl"]).output().unwrap();
    assert!(!o.status.success() && stderr(&o).contains("a lean trace is made from the full trace"), "{}", stderr(&o));
}

/// `record --compact=lean` leaves a lean trace whose counts are the program's.
#[test]
fn record_compact_lean_counts_exactly() {
    let lab = Lab::new();
    let prog = lab.compile("n_mallocs");
    let (n, s, k) = (5000u64, 48u64, 10u64);
    let o = lab.record_cmd("t.mtl", &["--compact=lean"], &prog, &[&n.to_string(), &s.to_string(), &k.to_string()]).output().unwrap();
    assert_success(&o, "mtlab record --compact=lean");
    let r = lab.report("t.mtl");
    strict(&r);
    assert_eq!((r["compact_lean"].clone(), u(&r["compact_quantum_ticks"])), (true.into(), 1 << 24), "a lean trace's own default quantum");
    assert_eq!(site(&r, "do_allocs"), site_of(n, n * s, k, k * s));
    assert_eq!((u(&r["leaks"]["objects"]), u(&r["leaks"]["bytes"])), (k, k * s));
    assert_eq!(live_bytes_peak(&r), n * s);
    assert!(r["end"]["utilization"].is_null());
}

// ---------------------------------------------------------------------------
// Limits: a file size limit, a full disk.

/// RLIMIT_FSIZE set by the program's own shell: the writer stops below the
/// limit instead of raising SIGXFSZ, counts what it could not write, and
/// still writes that count (END) at exit; the program runs on unharmed.
#[test]
fn a_file_size_limit_drops_events_and_counts_them() {
    let lab = Lab::new();
    let prog = lab.compile("n_mallocs");
    let n = 200_000u64;
    lab.record_ok("free.mtl", &prog, &[&n.to_string(), "48", "0"]);
    let unlimited = lab.report("free.mtl");
    let script = r#"ulimit -f 512; exec "$0" "$@""#;
    let prog_s = prog.to_str().unwrap();
    let o = lab.command(MTLAB)
        .args(["record", "-o", "t.mtl", "--", "sh", "-c", script, prog_s, &n.to_string(), "48", "0"])
        .output()
        .unwrap();
    assert_success(&o, "a traced program under a 512 KiB file size limit");
    let v = lab.report("t.mtl");
    let child = v["children"].as_array().unwrap().iter().find(|p| p["cmdline"][0] == prog_s).expect("the exec'd program's trace");
    assert_eq!(child["clean_end"], true, "END fits in the room kept below the limit");
    let (events, dropped) = (u(&child["events"]), u(&child["events_dropped"]));
    assert!(dropped > 0 && events < 2 * n, "events {events}, dropped {dropped}");
    // Every call is either in the file or counted (the dropped chunks also
    // held a few heap-extent observations, which are not calls).
    let all = u(&unlimited["events"]);
    assert!(events + dropped >= all && events + dropped < all + 1000, "{events} + {dropped} vs {all}");
    // The cause is named, by the report and by record itself.
    assert_eq!(child["size_limited"], true);
    assert!(child["write_failed_at"].is_null(), "nothing failed below the limit");
    let out = lab.command(MTLAB).args(["report", "t.mtl"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("events dropped: {dropped} — the file size limit (`ulimit -f`) was reached")), "{text}");
    let e = stderr(&o);
    assert!(e.contains(" events (") && e.contains("were dropped: the file size limit (`ulimit -f`) was reached"), "{e}");
}

/// The program lowers its own file size limit while traced (to 1 MiB, above
/// what the trace holds by then): the writer keeps below the new limit (no
/// SIGXFSZ), and still ends the file with END.
#[test]
fn a_file_size_limit_lowered_by_the_program_is_kept() {
    let lab = Lab::new();
    let prog = lab.compile("lower_fsize");
    let o = lab.record("t.mtl", &prog, &["20000", "1048576"]);
    assert_eq!(o.status.code(), Some(0), "the program ends as untraced: {}", stderr(&o));
    let r = lab.report("t.mtl");
    assert_eq!(r["clean_end"], true);
    assert!(u(&r["events_dropped"]) > 0);
}

/// A file size limit below a trace header's size, set before a fork: the
/// child's header cannot be written, and must then not be written in part
/// (a 16-byte stub read as a damaged trace); in sampling mode the child's
/// control page cannot be sized to a page either, and sizing it anyway raised
/// SIGXFSZ, which killed the child. The child ends as untraced (exit 7) in
/// both modes, and its lost trace is named for what it is.
#[test]
fn a_file_size_limit_below_a_header_set_before_a_fork_leaves_the_child_alone() {
    let lab = Lab::new();
    let prog = lab.compile("fsize_fork");
    let untraced = lab.command(&prog).args(["200", "1000"]).output().unwrap();
    assert_eq!(untraced.status.code(), Some(7));
    for (trace, extra) in [("t.mtl", &[][..]), ("s.mtl", &["--sample", "4KiB"][..])] {
        let o = lab.record_cmd(trace, extra, &prog, &["200", "1000"]).output().unwrap();
        assert_eq!(o.status.code(), Some(7), "{extra:?}: the child ends as untraced (107+ is a signal): {}", stderr(&o));
        let err = stderr(&o);
        assert!(!err.contains("damaged header"), "{extra:?}: no half-written header: {err}");
        assert!(err.contains("could not write even its header"), "{extra:?}: the child's lost trace is named: {err}");
        assert!(err.contains("file size limit"), "{extra:?}: {err}");
        assert_eq!(lab.files_with_prefix(&format!("{trace}.")), Vec::<String>::new(), "{extra:?}: no stub left");
        let r = lab.report(trace);
        assert_eq!(r["exit"], "exit code 7");
    }
}

/// A program that lowers its soft RLIMIT_NOFILE below 900 and then forks:
/// the child's trace may not be numbered 900 or above, and used to take the
/// lowest free number instead, so the child's first open got 4, not 3, and one
/// open fewer succeeded. The soft limit is raised for the moment of the open
/// (the hard limit allows it), so the child opens as many files as untraced.
/// With the hard limit lowered too, one descriptor is the trace's: the
/// highest free one, so the program's first open still gets 3.
#[test]
fn a_low_descriptor_limit_set_before_a_fork_is_left_to_the_program() {
    let lab = Lab::new();
    let prog = lab.compile("nofile_fork");
    let untraced = lab.command(&prog).args(["8", "1000"]).output().unwrap();
    assert_eq!(untraced.status.code(), Some(5), "5 opens from 3 to 7 untraced");
    for extra in [&[][..], &["--sample", "4KiB"][..]] {
        let trace = if extra.is_empty() { "t.mtl" } else { "s.mtl" };
        let o = lab.record_cmd(trace, extra, &prog, &["8", "1000"]).output().unwrap();
        assert_eq!(o.status.code(), Some(5), "{extra:?}: as many opens as untraced, from 3: {}", stderr(&o));
        let r = lab.report(trace);
        let child = r["children"].as_array().unwrap().first().expect("the child's trace");
        assert_eq!(child["clean_end"], true);
        if extra.is_empty() {
            assert!(calls(child, "malloc") >= 1000, "the child is traced");
        }
        let o = lab.record_cmd(&format!("h{trace}"), extra, &prog, &["8", "1000", "hard"]).output().unwrap();
        assert_eq!(o.status.code(), Some(4), "{extra:?}: the trace takes one descriptor, the highest: {}", stderr(&o));
    }
}

/// A program that installs a seccomp filter allowing only the system calls
/// it needs: mtlab's writes (pwrite64, fstat, prlimit64) after it would
/// be killed (SIGSYS: the program died where untraced it ends with 0) or fail
/// (the trace then ended with no event and the report blamed exit_group or a
/// full disk). The trace is finished before the filter goes in, says why,
/// and the program runs on as untraced; a filter that lets mtlab's calls
/// through changes nothing.
#[test]
fn a_seccomp_filter_finishes_the_trace_before_it_and_leaves_the_program_alone() {
    let lab = Lab::new();
    let prog = lab.compile("seccomp_filter");
    let n = 1000u64;
    for mode in ["kill", "errno", "syscall", "lenient"] {
        let untraced = lab.command(&prog).args([mode, &n.to_string()]).output().unwrap();
        assert_eq!(untraced.status.code(), Some(0), "{mode}: untraced");
        for extra in [&[][..], &["--sample", "4KiB"][..]] {
            let trace = format!("{mode}{}.mtl", extra.len());
            let o = lab.record_cmd(&trace, extra, &prog, &[mode, &n.to_string()]).output().unwrap();
            assert_eq!(o.status.code(), Some(0), "{mode} {extra:?}: as untraced: {}", stderr(&o));
            let r = lab.report(&trace);
            assert_eq!(r["clean_end"], true, "{mode} {extra:?}");
            let stopped = mode != "lenient";
            assert_eq!(r["stopped_by_seccomp"], stopped, "{mode} {extra:?}");
            if extra.is_empty() {
                assert_eq!(site(&r, "before_filter"), site_of(n, n * 48, 0, 0), "{mode}");
                let after = r["top_sites"]["by_calls"].as_array().unwrap().iter().any(|s| s["frames"][0]["function"] == "after_filter");
                assert_eq!(after, !stopped, "{mode}: the calls after the filter are traced only when mtlab can go on");
                if !stopped {
                    assert_eq!(site(&r, "after_filter"), site_of(n, n * 48, 0, 0), "{mode}");
                }
            }
            let text = String::from_utf8_lossy(&lab.command(MTLAB).args(["report", &trace]).output().unwrap().stdout).to_string();
            assert_eq!(text.contains("seccomp filter"), stopped, "{mode} {extra:?}: {text}");
        }
    }
}

/// Records PROGRAM ARGS on the full disk and once without limit; checks that
/// the program ran to its end, that the file reads cleanly to an END record,
/// and that every event is either in it or counted as dropped.
///
/// `live_finish`: MTLAB_LIVE_FINISH, when the rewrite while the program runs
/// (which punches the raw records it took, and whose freed blocks the
/// program's writer then fills) is to run at every poll.
fn full_disk_keeps_count(lab: &Lab, disk: &SmallDisk, name: &str, prog: &std::path::Path, args: &[&str], live_finish: &str) {
    let trace = disk.0.join(format!("{name}.mtl"));
    let _ = std::fs::remove_file(&trace);
    let o = lab
        .command(MTLAB)
        .env("MTLAB_LIVE_FINISH", live_finish)
        .arg("record")
        .arg("-o")
        .arg(&trace)
        .arg("--")
        .arg(prog)
        .args(args)
        .output()
        .unwrap();
    assert_success(&o, &format!("{name}: a traced program whose trace fills the disk"));
    let v = lab.report_path(&trace);
    assert_eq!(v["clean_end"], true, "{name}: END is written");
    // (Left as written when the disk had no room for record's rewrite, it is
    // called unverified: that is no damage.)
    let damage: Vec<&serde_json::Value> =
        v["warnings"].as_array().unwrap().iter().filter(|w| !w.as_str().unwrap().contains("never finished by `mtlab record`")).collect();
    assert!(damage.is_empty(), "{name}: the file reads to its end without damage: {damage:?}");
    let free = format!("{name}.free.mtl");
    lab.record_ok(&free, prog, args);
    let all = u(&lab.report(&free)["events"]);
    let (events, dropped) = (u(&v["events"]), u(&v["events_dropped"]));
    // Without the rewrite during the run the raw rows cannot fit; with it, a
    // rewrite that keeps up (a CPU idle) can leave the disk room for all.
    assert!(events > 0 && (dropped > 0 || live_finish != "off"), "{name}: events {events}, dropped {dropped}");
    // Where the disk refused a write, the report and record both name it.
    if dropped > 0 && live_finish == "off" {
        assert!(v["write_failed_at"].as_u64().is_some_and(|at| at > 0), "{name}: {}", v["write_failed_at"]);
    }
    if v["write_failed_at"].is_u64() {
        let e = stderr(&o);
        assert!(e.contains("were dropped: the file system holding the trace ran out of room"), "{name}: {e}");
    }
    // The dropped chunks also held a few heap-extent observations, which are not calls.
    assert!(events + dropped >= all && events + dropped < all + 1000, "{name}: {events} + {dropped} vs {all}");
    std::fs::remove_file(&trace).unwrap();
}

/// A full disk (a 1 MiB tmpfs): the program runs to its normal end with its
/// exit code, and the trace reads cleanly and counts what it could not hold
/// (the writer cuts the file at the first record that did not fit and puts
/// STATS and END there). With many threads failing at once, and with
/// threads whose buffers only the exit flush writes; and with the rewrite
/// during the run releasing raw records the disk then fills again.
#[test]
fn a_full_disk_leaves_the_program_alone_and_the_trace_counted() {
    let lab = Lab::new();
    let Some(disk) = SmallDisk::mount(&lab) else { return };
    let n_mallocs = lab.compile("n_mallocs");
    full_disk_keeps_count(&lab, &disk, "one_off", &n_mallocs, &["200000", "48", "0"], "off");
    full_disk_keeps_count(&lab, &disk, "one", &n_mallocs, &["200000", "48", "0"], "auto");
    full_disk_keeps_count(&lab, &disk, "one_always", &n_mallocs, &["200000", "48", "0"], "always");
    let threads = lab.compile("threads");
    for i in 0..6 {
        let live_finish = if i % 2 == 0 { "auto" } else { "always" };
        full_disk_keeps_count(&lab, &disk, &format!("many{i}"), &threads, &["32", "20000"], live_finish);
    }
    let parked = lab.compile("park_at_exit");
    full_disk_keeps_count(&lab, &disk, "parked", &parked, &["200000", "8", "1000"], "auto");
}

// ---------------------------------------------------------------------------
// The README's main command.

/// A disk already full when the program starts: the library can create the
/// trace files but write nothing to them. The program runs as untraced, and
/// record says the disk is full and leaves no empty "trace" behind (report
/// would call it "not an mtlab trace").
#[test]
fn a_disk_full_from_the_start_is_named_and_leaves_no_empty_trace() {
    use std::io::Write;
    let lab = Lab::new();
    let Some(disk) = SmallDisk::mount(&lab) else { return };
    let prog = lab.compile("fork");
    let mut fill = std::fs::File::create(disk.0.join("fill")).unwrap();
    let block = vec![0u8; 4096];
    while fill.write_all(&block).is_ok() {}
    drop(fill);
    let plain = lab.command(&prog).args(["10", "10"]).output().unwrap();
    let trace = disk.0.join("t.mtl");
    let o = lab.command(MTLAB).arg("record").arg("-o").arg(&trace).args(["--"]).arg(&prog).args(["10", "10"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(plain.status.code(), Some(0));
    // The child's pid differs; the line is the same otherwise.
    assert!(o.stdout.starts_with(b"child "), "{}", String::from_utf8_lossy(&o.stdout));
    assert_eq!(program_stderr(&o).as_bytes(), plain.stderr.as_slice());
    let e = stderr(&o);
    let want = format!(
        "mtlab: no trace was written: mtlab's library created {} but could not write even its header: the file system \
         holding {} is full",
        trace.display(),
        disk.0.display()
    );
    assert!(e.contains(&want), "{e}");
    assert!(!e.contains("not an mtlab trace"), "{e}");
    let left: Vec<_> = std::fs::read_dir(&disk.0).unwrap().map(|d| d.unwrap().file_name()).collect();
    assert_eq!(left, ["fill"], "empty trace files left behind");
}

#[test]
fn demo_records_compacts_and_samples_the_built_in_workload() {
    let lab = Lab::new();
    let iterations = 20_000u64;
    // The tracer's half of the tour; the whole tour (studies, HTML) is tests/html.rs's.
    let o = lab.command(MTLAB).args(["demo", "--trace-only", "--no-store", "--iterations", &iterations.to_string(), "-o", "d.mtl"]).output().unwrap();
    assert_success(&o, "mtlab demo");
    let out = String::from_utf8_lossy(&o.stdout);
    for part in ["per function", "without per-call timing (`mtlab compact`)", "sampled profile", "estimated from"] {
        assert!(out.contains(part), "demo output lacks {part:?}:\n{out}");
    }
    for f in ["d.mtl", "d.compact.mtl", "d.sampled.mtl"] {
        assert!(lab.path(f).exists(), "{f} kept");
    }
    // 2 threads × (warm-up of 10 % + iterations) mallocs of 512 bytes, all at the workload's one site.
    let full = lab.report("d.mtl");
    strict(&full);
    let pairs = 2 * (iterations + iterations / 10);
    assert_eq!(site(&full, "descend"), site_of(pairs, pairs * 512, 0, 0));
    assert!(full["slowdown"].is_object(), "the demo runs a baseline");
    let compact = lab.report("d.compact.mtl");
    assert_eq!(full["functions"], compact["functions"]);
    assert_eq!(full["peak"], compact["peak"]);
}

#[test]
fn the_peak_sites_and_temporary_allocations_are_exact() {
    let lab = Lab::new();
    let prog = lab.compile("peak_temp");
    lab.record_ok("t.mtl", &prog, &[]);
    let r = lab.report("t.mtl");
    strict(&r);
    assert_eq!(r["peak"]["live_bytes"], 100_000, "the peak is build_up's 100 blocks");
    let at_peak = r["top_sites"]["at_peak"].as_array().unwrap();
    let top = &at_peak[0];
    assert_eq!(top["frames"][0]["function"], "build_up", "{top}");
    assert_eq!((top["peak_live_objects"].as_u64(), top["peak_live_bytes"].as_u64()), (Some(100), Some(100_000)));
    assert_eq!((top["live_objects"].as_u64(), top["live_bytes"].as_u64()), (Some(0), Some(0)), "freed before the end");
    assert_eq!(at_peak.len(), 1, "nothing else was live at the peak: {at_peak:?}");
    let keep = r["top_sites"]["by_bytes"].as_array().unwrap().iter().find(|s| s["frames"][0]["function"] == "keep").unwrap();
    assert_eq!((keep["peak_live_bytes"].as_u64(), keep["live_bytes"].as_u64()), (Some(0), Some(50_000)), "keep came after the peak");

    // build_up's last block too: only allocations in between make a block not temporary.
    assert_eq!(r["temporary"]["calls"], 81, "churn's 50, second's 30, build_up's last");
    assert_eq!(r["temporary"]["of_calls"], 220);
    assert!((r["temporary"]["fraction"].as_f64().unwrap() - 81.0 / 220.0).abs() < 1e-9);
    let temp: Vec<(String, u64)> = r["top_sites"]["temporary"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["frames"][0]["function"].as_str().unwrap().to_string(), s["temporary"].as_u64().unwrap()))
        .collect();
    let want = [("churn".to_string(), 50), ("second".to_string(), 30), ("build_up".to_string(), 1)];
    assert_eq!(temp, want, "first's blocks had second's allocation after them");

    // Bottom-up and top-down: build_up allocated its 100 000 B itself; main is
    // on every stack of the program's own allocations.
    let o = lab.command(MTLAB).args(["report", "t.mtl", "--json", "--callers", "--top", "100"]).output().unwrap();
    assert_success(&o, "report --callers");
    let c: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let of = |f: &str| c["callers"].as_array().unwrap().iter().find(|x| x["function"] == f).cloned().unwrap_or_else(|| panic!("{f} in {}", c["callers"]));
    let b = of("build_up");
    assert_eq!((b["self_bytes"].as_u64(), b["total_bytes"].as_u64(), b["self_calls"].as_u64()), (Some(100_000), Some(100_000), Some(100)));
    let m = of("main");
    assert_eq!((m["self_bytes"].as_u64(), m["total_bytes"].as_u64()), (Some(0), Some(157_040)), "main calls the allocator only through the others");
    assert_eq!(m["total_calls"], 220);
    // The same trace for speedscope: exact weights, stacks outermost first.
    let o = lab.command(MTLAB).args(["report", "t.mtl", "--speedscope", "t.speedscope.json"]).output().unwrap();
    assert_success(&o, "report --speedscope");
    let ss: serde_json::Value = serde_json::from_slice(&std::fs::read(lab.path("t.speedscope.json")).unwrap()).unwrap();
    assert_eq!(ss["$schema"], "https://www.speedscope.app/file-format-schema.json");
    let frames = ss["shared"]["frames"].as_array().unwrap();
    let allocated = &ss["profiles"][0];
    assert_eq!((allocated["type"].as_str(), allocated["unit"].as_str()), (Some("sampled"), Some("bytes")));
    let weights: u64 = allocated["weights"].as_array().unwrap().iter().map(|w| w.as_u64().unwrap()).sum();
    // 100 × 1000 + 10 × 5000 + 50 × 64 + 30 × 64 × 2 B, all the program allocates.
    assert_eq!(weights, 100_000 + 50_000 + 3_200 + 3_840);
    assert_eq!(allocated["endValue"].as_u64(), Some(weights));
    let names = |stack: &serde_json::Value| -> Vec<String> {
        stack.as_array().unwrap().iter().map(|i| frames[i.as_u64().unwrap() as usize]["name"].as_str().unwrap().to_string()).collect()
    };
    let build_up = allocated["samples"].as_array().unwrap().iter().map(names).find(|n| n.last().is_some_and(|f| f == "build_up")).unwrap();
    assert_eq!(build_up[build_up.len() - 2], "main", "outermost first, the allocating function last: {build_up:?}");
    let inuse = &ss["profiles"][1];
    assert_eq!(inuse["endValue"].as_u64(), Some(50_000), "keep's blocks are in use at the end");
    let text = lab.command(MTLAB).arg("report").arg(lab.path("t.mtl")).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(text.contains("top allocation sites at the peak (97.7 KiB live"), "{text}");
    assert!(text.contains("temporary allocations (freed with no other allocation of their thread in between): 81 of 220"), "{text}");
}

#[test]
fn a_program_leaving_through_exit_underscore_is_traced_whole_and_a_static_one_is_told_why() {
    let lab = Lab::new();
    // _exit before the first buffer filled: mtlab finishes the trace in its
    // _exit wrapper, so the ten blocks are there and the trace ends cleanly.
    let prog = lab.compile("exit_early");
    let o = lab.record("e.mtl", &prog, &[]);
    assert_eq!(o.status.code(), Some(3), "the program's own exit code");
    let r = lab.report("e.mtl");
    strict(&r);
    assert_eq!(site(&r, "main"), site_of(10, 1000, 10, 1000));
    // A static program: no loader, so no library.
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let stat = lab.path("exit_early_static");
    let c = std::process::Command::new(&cc).args(["-O1", "-static", "-o"]).arg(&stat).arg(test_source("exit_early")).output().unwrap();
    if !c.status.success() {
        return skip("no static libc to link against (Debian: libc6-dev)");
    }
    let o = lab.record("s.mtl", &stat, &[]);
    assert_eq!(o.status.code(), Some(3));
    assert!(stderr(&o).contains("is statically linked: no dynamic loader runs"), "{}", stderr(&o));
}

/// A 32-bit program cannot load the 64-bit library: it runs untraced with its
/// output untouched (no "wrong ELF class" line from the loader on its stderr),
/// and mtlab says why there is no trace instead of blaming the program.
#[test]
fn a_32_bit_program_runs_untouched_and_is_told_untraceable() {
    let lab = Lab::new();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let prog = lab.path("exit_code32");
    let c = std::process::Command::new(&cc).args(["-m32", "-O1", "-o"]).arg(&prog).arg(test_source("exit_code")).output().unwrap();
    if !c.status.success() {
        return skip("cannot build a 32-bit program (Debian: gcc-multilib)");
    }
    let input = b"abc\n";
    let plain = run_with_stdin(lab.command(&prog), input);
    let traced = run_with_stdin(lab.record_cmd("t.mtl", &[], &prog, &[]), input);
    assert_eq!(plain.status.code(), Some(7));
    assert_eq!(traced.status.code(), Some(7), "{}", stderr(&traced));
    assert_eq!(traced.stdout, plain.stdout);
    assert_eq!(program_stderr(&traced).as_bytes(), plain.stderr.as_slice(), "{}", stderr(&traced));
    let e = stderr(&traced);
    assert!(!e.contains("wrong ELF class"), "{e}");
    assert!(e.contains("cannot be traced: it is a 32-bit x86 (i386) program and mtlab's library is built for 64-bit x86-64"), "{e}");
    assert!(lab.files_with_prefix("t.mtl").is_empty());
}

/// A program that ends through the exit_group system call (as Go programs
/// do) loses its buffered events: the report names that cause, and record
/// warns about a Go program at once.
#[test]
fn a_program_ending_through_exit_group_is_told_what_is_missing() {
    let lab = Lab::new();
    let prog = lab.compile("raw_exit_group");
    let o = lab.record("r.mtl", &prog, &[]);
    assert_eq!(o.status.code(), Some(5));
    assert_eq!(o.stdout, b"bye\n");
    let r = lab.report("r.mtl");
    assert_eq!(r["clean_end"], false);
    assert_eq!(r["exit"], "exit code 5");
    let text = report_output(&lab, &["r.mtl"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("made the exit_group system call itself instead of calling exit"), "{text}");
    assert!(!text.contains("these estimates are of the samples the trace holds"), "a full trace: {text}");
    // Sampled, the same loss takes the samples: the estimates say they
    // are of what the trace holds (every malloc sampled at 1 byte, none written).
    let o = lab.record_cmd("s.mtl", &["--sample", "1"], &prog, &[]).output().unwrap();
    assert_eq!((o.status.code(), o.stdout.as_slice()), (Some(5), b"bye\n".as_slice()));
    let text = report_output(&lab, &["s.mtl"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("these estimates are of the samples the trace holds: the process ended without writing"), "{text}");

    let Some(go) = ["/usr/local/go/bin/go", "/usr/bin/go"].into_iter().find(|g| std::path::Path::new(g).exists()) else {
        return skip("no Go toolchain (Debian: golang-go)");
    };
    let exe = lab.path("cgo_exit");
    let b = lab
        .command(go)
        .args(["build", "-o"])
        .arg(&exe)
        .arg(repo_root().join("native/tests/cgo_exit.go"))
        .env("CGO_ENABLED", "1")
        .env("GO111MODULE", "off")
        .output()
        .unwrap();
    assert_success(&b, "go build cgo_exit.go");
    let plain = lab.command(&exe).output().unwrap();
    let o = lab.record("g.mtl", &exe, &[]);
    assert_eq!(o.status.code(), Some(5));
    assert_eq!(plain.status.code(), Some(5));
    assert_eq!(o.stdout, plain.stdout);
    assert_eq!(program_stderr(&o).as_bytes(), plain.stderr.as_slice());
    let e = stderr(&o);
    assert!(e.contains("is a Go program: Go ends its process with the exit_group system call"), "{e}");

    // A Go program that ends through the C library's exit (cgo's C.exit) loses
    // nothing: no warning, its calls and the END record are there.
    let o = lab.record("c.mtl", &exe, &["cexit"]);
    assert_eq!(o.status.code(), Some(5));
    assert_eq!(o.stdout, b"cgo\n");
    let e = stderr(&o);
    assert!(!e.contains("is a Go program"), "{e}");
    let r = lab.report("c.mtl");
    assert_eq!(r["clean_end"], true);
    assert_eq!(u(&r["events_dropped"]), 0);
    assert_eq!(site(&r, "keep"), site_of(1, 77, 1, 77), "the last call, which os.Exit's run leaves in its buffer");
}

/// A program with an allocator of its own (rustc links jemalloc) calls no
/// heap function: its report said "allocator: glibc" over an empty heap and
/// no more. It now says why the heap is empty and where the memory went.
#[test]
fn a_program_with_an_allocator_of_its_own_is_told_apart_from_an_empty_heap() {
    let lab = Lab::new();
    let prog = lab.compile("own_allocator");
    lab.record_ok("t.mtl", &prog, &["1000"]);
    let r = lab.report("t.mtl");
    let calls: u64 = r["functions"].as_object().unwrap().values().map(|f| u(&f["calls"])).sum();
    assert_eq!(calls, 2, "its mmap and munmap only: {}", r["functions"]);
    assert_eq!(u(&r["program_mappings"]["calls"]), 1);
    let o = report_output(&lab, &["t.mtl"]);
    assert_success(&o, "mtlab report");
    let text = String::from_utf8_lossy(&o.stdout);
    let said = "no call of the heap manager's functions (malloc, free, operator new, …) was seen in this process";
    assert!(text.contains(said), "{text}");
    assert!(text.contains("beside the heap: the program's own mappings (mmap outside the heap manager, e.g. python3's pymalloc arenas): 1 calls, 64.0 KiB"), "{text}");

    // The same with one malloc beside its own region: not told so.
    lab.record_ok("m.mtl", &prog, &["1000", "heap"]);
    assert_eq!(u(&lab.report("m.mtl")["program_mappings"]["calls"]), 1);
    let o = report_output(&lab, &["m.mtl"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(!text.contains(said), "{text}");
}

#[test]
fn a_trace_still_being_written_is_reported_as_running() {
    use std::io::{BufRead, Write};
    let lab = Lab::new();
    let prog = lab.compile("s_hold");
    // s_hold keeps 20 000 blocks of 100 B (more than a buffer holds, so they
    // reach the file) and waits for a line on stdin.
    let mut child = lab
        .record_cmd("r.mtl", &[], &prog, &["20000", "100"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(lines.next().unwrap().unwrap().starts_with("pid "));
    assert_eq!(lines.next().unwrap().unwrap(), "held");
    let during = lab.report("r.mtl");
    let text = lab.command(MTLAB).args(["report", "r.mtl"]).output().unwrap();
    child.stdin.take().unwrap().write_all(b"stop\n").unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(during["running"], true, "the process was running");
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(text.contains("is still running: every figure below is as far as its trace is written now"), "{text}");
    assert!(text.contains("live so far (the process is still running)") && !text.contains("not freed at exit"), "{text}");
    assert!(text.contains("events dropped: not known until the process ends"), "{text}");
    let after = lab.report("r.mtl");
    assert_eq!(after["running"], false);
    assert_eq!(after["clean_end"], true);
}

#[test]
fn built_in_workloads_run_by_name_and_under_record_by_their_path() {
    let lab = Lab::new();
    let o = lab.command(MTLAB).arg("workload").output().unwrap();
    assert_success(&o, "mtlab workload");
    let list = String::from_utf8_lossy(&o.stdout).into_owned();
    for name in ["malloc-test", "latency-pipeline", "heap-small", "heap-phases", "threads-ctx", "threads-chat"] {
        assert!(list.contains(name), "the list names {name}: {list}");
    }
    // Run by name: the heap workload's own JSON line, its exact allocation count.
    let o = lab.command(MTLAB).args(["workload", "heap-threshold", "1"]).output().unwrap();
    assert_success(&o, "mtlab workload heap-threshold 1");
    let line: serde_json::Value = serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim()).unwrap();
    assert_eq!(line["workload"], "threshold");
    // Traced by its path: the same calls, seen by the tracer.
    let o = lab.command(MTLAB).args(["workload", "--path", "heap-threshold"]).output().unwrap();
    assert_success(&o, "mtlab workload --path");
    let cmd: Vec<String> = String::from_utf8_lossy(&o.stdout).split_whitespace().map(str::to_string).collect();
    assert_eq!(cmd.len(), 2, "path and the workload's leading argument: {cmd:?}");
    assert_eq!(cmd[1], "threshold");
    let args: Vec<&str> = vec![&cmd[1], "1"];
    lab.record_ok("w.mtl", &cmd[0], &args);
    let r = lab.report("w.mtl");
    let calls: u64 = ["malloc", "calloc", "realloc"].iter().map(|f| r["functions"][f]["calls"].as_u64().unwrap_or(0)).sum();
    // ... and one more: the buffer stdio allocates for the result line.
    assert_eq!(calls, line["allocations"].as_u64().unwrap() + 1, "every allocation the workload counts is traced");
    // Bad input: an unknown name lists the known ones; a bad argument is the workload's own usage.
    let o = lab.command(MTLAB).args(["workload", "nope"]).output().unwrap();
    assert!(!o.status.success() && stderr(&o).contains("no built-in workload \"nope\"; there are: malloc-test"), "{}", stderr(&o));
    let o = lab.command(MTLAB).args(["workload", "heap-small", "0"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "the workload's own exit code for a bad argument");
}

#[test]
fn a_flipped_bit_in_any_chunk_is_reported_as_damage_never_as_a_changed_figure() {
    let lab = Lab::new();
    let prog = lab.compile("threads");
    lab.record_ok("full.mtl", &prog, &["4", "20000"]);
    let o = lab.record_cmd("sampled.mtl", &["--sample", "16KiB", "--sample-seed", "1"], &prog, &["4", "20000"]).output().unwrap();
    assert_success(&o, "record --sample");
    let o = lab.command(MTLAB).args(["compact", "full.mtl", "-o", "compact.mtl"]).output().unwrap();
    assert_success(&o, "compact");

    // A fixed stream of positions: the test sees the same flips every run.
    let mut rnd = xorshift(0x2545_f491_4f6c_dd1d);
    let mut next = |n: usize| (rnd() % n as u64) as usize;
    let mut seen = String::new();
    for trace in ["full.mtl", "sampled.mtl", "compact.mtl"] {
        let bytes = std::fs::read(lab.path(trace)).unwrap();
        assert_eq!(u32::from_le_bytes(bytes[8..12].try_into().unwrap()), 10, "{trace}: a rewritten trace is version 10");
        let chunks: Vec<RawRecord> = raw_records(&bytes).into_iter().filter(|r| r.ty == 1).collect();
        assert!(chunks.len() >= 4, "{trace}: {} chunks", chunks.len());
        assert!(chunks.iter().all(|r| r.flags & 0x4 != 0), "{trace}: every chunk carries checksums");
        let base = lab.report(trace);
        assert_eq!(base["chunks_damaged"], 0, "{trace}");
        // A sampled trace counts no calls or events (null): its samples stand for them.
        let exact = |r: &serde_json::Value, key: &str| if trace == "sampled.mtl" { 0 } else { u(&r["functions"][key]["calls"]) };
        let calls = exact(&base, "malloc") + exact(&base, "free");
        let held = |r: &serde_json::Value| r["events"].as_u64().unwrap_or(0) + r["profile"]["samples"].as_u64().unwrap_or(0);
        const TRIALS: usize = 40;
        for _ in 0..TRIALS {
            // Any bit of a chunk: record header, chunk header, events, checksums.
            let c = &chunks[next(chunks.len())];
            let (off, len) = (c.offset as usize, (c.end - c.offset) as usize);
            let at = off + next(len);
            let bit = next(8);
            let mut damaged = bytes.clone();
            damaged[at] ^= 1 << bit;
            std::fs::write(lab.path("flipped.mtl"), &damaged).unwrap();
            let r = lab.report("flipped.mtl");
            let what = format!("{trace}: bit {bit} of byte {} of the chunk at {off}", at - off);
            assert!(u(&r["chunks_damaged"]) >= 1, "{what}: not reported as damage; warnings {}", r["warnings"]);
            assert!(!r["warnings"].as_array().unwrap().is_empty(), "{what}");
            // What is left is a subset of the truth, never something new.
            let left = exact(&r, "malloc") + exact(&r, "free");
            assert!(left <= calls, "{what}: {left} calls after damage, {calls} before");
            assert!(held(&r) < held(&base), "{what}: {} events and samples after damage, {} before", held(&r), held(&base));
        }
        seen += &format!("{trace}: {TRIALS} flipped bits over {} chunks, each reported as damage\n", chunks.len());

        // A flipped length leaves no way to step to the next record: reading
        // resumes at the next record whose checksums match.
        let off = chunks[1].offset as usize;
        let mut damaged = bytes.clone();
        damaged[off + 1] ^= 0x10;
        std::fs::write(lab.path("flipped.mtl"), &damaged).unwrap();
        let r = lab.report("flipped.mtl");
        // The record is lost, and so are the records of its thread whose
        // predictions ran on from it (the rest of its chain, at most 31),
        // each with a warning of its own; no other thread's.
        let tid = u32::from_le_bytes(bytes[off + 8..off + 12].try_into().unwrap());
        let warnings: Vec<&str> = r["warnings"].as_array().unwrap().iter().filter_map(|w| w.as_str()).collect();
        let chained: Vec<&&str> = warnings.iter().filter(|w| w.contains("predictions run on from the previous record")).collect();
        let mine = format!("(thread {tid})");
        assert!(chained.iter().all(|w| w.contains(&mine)), "{trace}: only thread {tid}'s records go with it: {warnings:?}");
        assert!(chained.len() <= 31, "{trace}: at most the rest of a chain: {warnings:?}");
        assert_eq!(u(&r["chunks_damaged"]), 1 + chained.len() as u64, "{trace}: {warnings:?}");
        assert!(r["warnings"].to_string().contains("skipped to the next intact record"), "{}", r["warnings"]);
        let left = held(&r);
        assert!(left > 0 && left < held(&base), "{trace}: {left} of {} events and samples after a damaged length", held(&base));
        assert_eq!(r["exit"], base["exit"], "{trace}: the records after the damage are read");
    }
    let text = lab.command(MTLAB).args(["report", "flipped.mtl"]).output().unwrap();
    assert!(String::from_utf8_lossy(&text.stdout).contains("DAMAGED TRACE: 1 chunk(s)"), "{}", String::from_utf8_lossy(&text.stdout));
    eprintln!("{seen}");
}

#[test]
fn a_librarys_constructor_and_destructor_are_inside_the_traced_window() {
    let lab = Lab::new();
    let prog = lab.compile_linked("ctor_main", "ctor_lib");
    lab.record_ok("c.mtl", &prog, &[]);
    let r = lab.report("c.mtl");
    strict(&r);
    // The constructor's block is seen (it runs before mtlab's constructor)
    // and so is its free (the destructor runs after mtlab's would).
    assert_eq!(site(&r, "ctor_lib_start"), site_of(1, 777, 0, 0));
    assert_eq!(site(&r, "main"), site_of(1, 555, 1, 555));
    assert_eq!((calls(&r, "malloc"), calls(&r, "free")), (2, 1));
    assert_eq!(u(&r["end"]["live_objects"]), 1, "one block is leaked: main's");
    assert_eq!(live_bytes_end(&r), 555);
}

#[test]
fn a_librarys_constructor_allocation_is_a_candidate_sample_too() {
    // Under --sample the call that starts mtlab (from the library's
    // constructor, before mtlab's own) must go through the sampler like any
    // other: at a mean interval of 1 byte every allocation is a sample.
    let lab = Lab::new();
    let prog = lab.compile_linked("ctor_main", "ctor_lib");
    let o = lab.record_cmd("s.mtl", &["--sample", "1", "--sample-seed", "7"], &prog, &[]).output().unwrap();
    assert_success(&o, "mtlab record --sample 1");
    let r = lab.report("s.mtl");
    let top = r["profile"]["top"].as_array().unwrap_or_else(|| panic!("a sampled report: {}", r["profile"]));
    let samples = |function: &str| -> Vec<u64> {
        top.iter()
            .filter(|s| s["frames"].as_array().unwrap().iter().any(|f| f["function"].as_str() == Some(function)))
            .map(|s| u(&s["samples"]))
            .collect()
    };
    assert_eq!(samples("ctor_lib_start"), vec![1], "the constructor's one block: {top:#?}");
    assert_eq!(samples("main"), vec![1], "main's one block: {top:#?}");
}

#[test]
fn the_cxx_runtimes_constructor_allocation_is_traced() {
    let lab = Lab::new();
    let src = lab.path("pool.cpp");
    std::fs::write(&src, "#include <string>\nint main() { std::string s(100, 'x'); return s.size() == 100 ? 0 : 1; }\n").unwrap();
    let prog = lab.path("pool");
    let Ok(o) = std::process::Command::new("g++").args(["-O1", "-o"]).arg(&prog).arg(&src).output() else {
        return skip("g++ is not installed (Debian: g++)");
    };
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    lab.record_ok("p.mtl", &prog, &[]);
    let r = lab.report("p.mtl");
    // libstdc++'s emergency exception pool, allocated by its constructor
    // before main and kept: one block reached from the loader's call_init.
    let sites = r["top_sites"]["by_calls"].as_array().unwrap();
    let pool: Vec<_> = sites
        .iter()
        .filter(|s| {
            let frames = s["frames"].as_array().unwrap();
            frames[0]["module"].as_str().is_some_and(|m| m.starts_with("libstdc++"))
                && frames.iter().any(|f| f["function"].as_str() == Some("call_init"))
        })
        .collect();
    assert_eq!(pool.len(), 1, "one allocation by libstdc++'s constructor: {sites:#?}");
    assert_eq!(u(&pool[0]["calls"]), 1);
    assert!(u(&pool[0]["bytes"]) >= 1024, "the pool is tens of KiB: {}", pool[0]["bytes"]);
}

/// Runs raw_fork.c in MODE with N child pairs; returns (parent, child) reports.
fn raw_fork_reports(lab: &Lab, mode: &str, n: u64) -> (serde_json::Value, serde_json::Value) {
    let prog = lab.compile("raw_fork");
    let trace = format!("{mode}-{n}.mtl");
    let out = lab.record_ok(&trace, &prog, &[mode, &n.to_string()]);
    let pid = child_pid(&out.stdout);
    let r = lab.report(&trace);
    let children = r["children"].as_array().unwrap();
    assert_eq!(children.len(), 1, "one child trace");
    assert_eq!(u(&children[0]["pid"]), pid as u64);
    let child = children[0].clone();
    // The parent's trace is whole and its own: the child wrote elsewhere.
    strict(&r);
    assert_eq!(site(&r, "main"), site_of(20, 4000, 0, 0), "the parent's 10 x 100 B and 10 x 300 B only");
    (r, child)
}

#[test]
fn a_child_made_by_glibcs_underscore_fork_gets_its_own_trace() {
    let lab = Lab::new();
    let (_, child) = raw_fork_reports(&lab, "_Fork", 1000);
    strict(&child);
    assert_eq!(site(&child, "main"), site_of(1000, 200_000, 0, 0));
    assert_eq!(child["forked_without_handlers"], false, "_Fork is wrapped: the fork handlers ran");
}

#[test]
fn a_child_made_by_the_clone_system_call_gets_its_own_trace() {
    let lab = Lab::new();
    // Seen at the child's first flush: that buffer is dropped and counted.
    let n = 100_000;
    let (_, child) = raw_fork_reports(&lab, "clone", n);
    assert_eq!(child["forked_without_handlers"], true);
    let s = site(&child, "main");
    let dropped = u(&child["events_dropped"]);
    assert!(dropped > 0 && dropped < 20_000, "one buffer's events: {dropped}");
    // Every pair is traced or counted as dropped; the dropped buffer also
    // held the parent's last few events.
    let seen = 2 * s.calls + dropped;
    assert!((2 * n..2 * n + 100).contains(&seen), "{s:?}, {dropped} dropped");
    assert_eq!(s.bytes, s.calls * 200);
    // A child that ends before its first flush: found at exit.
    let (_, small) = raw_fork_reports(&lab, "clone", 50);
    assert_eq!(small["forked_without_handlers"], true);
    // Its one buffer held the parent's last events and its own 100.
    assert_eq!(u(&small["events"]), 0);
    assert!(u(&small["events_dropped"]) >= 100, "{}", small["events_dropped"]);
    let text = lab.command(MTLAB).args(["report", "clone-50.mtl"]).output().unwrap();
    assert!(String::from_utf8_lossy(&text.stdout).contains("made by a raw fork or clone system call"));
}

#[test]
fn a_longjmp_out_of_an_allocator_call_does_not_stop_the_threads_tracing() {
    let lab = Lab::new();
    let prog = lab.compile_linked("jump_out", "jump_hook");
    let n = 1000;
    lab.record_ok("j.mtl", &prog, &[&n.to_string()]);
    let r = lab.report("j.mtl");
    // (The allocator mtlab calls is the hook's, so not called glibc.)
    assert_eq!(u(&r["unknown_frees"]), 0);
    assert_eq!(u(&r["events_dropped"]), 0);
    // Without the check every call after the jump passed untraced.
    assert_eq!(site(&r, "after_jump"), site_of(n, n * 64, 0, 0));
    assert_eq!(calls(&r, "free"), n);
    assert_eq!(u(&r["guards_reset"]), 1);
    let text = lab.command(MTLAB).args(["report", "j.mtl"]).output().unwrap();
    assert!(String::from_utf8_lossy(&text.stdout).contains("left mtlab's code or an allocator call by longjmp"));
}

#[test]
fn a_program_that_drops_privileges_or_chroots_keeps_its_trace() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return skip("dropping privileges needs root (CI runs as root)");
    }
    let lab = Lab::new();
    let prog = lab.compile("drop_priv");
    let jail = lab.path("jail");
    std::fs::create_dir(&jail).unwrap();
    let n = 3000;
    for mode in ["setuid", "chroot"] {
        // The lab directory is 0700 root's: user nobody could not open a file
        // there, and inside the jail the path does not exist at all.
        let trace = format!("{mode}.mtl");
        let o = lab.record_cmd(&trace, &[], &prog, &[mode, &n.to_string()]).env("DROP_ROOT", &jail).output().unwrap();
        assert_success(&o, &format!("drop_priv {mode}"));
        let r = lab.report(&trace);
        strict(&r);
        assert_eq!(site(&r, "after_drop"), site_of(n, n * 80, 0, 0), "{mode}");
        assert_eq!(r["clean_end"], true, "{mode}");
    }
}

// ---------------------------------------------------------------------------
// Where the trace goes, and what --baseline does to the program's streams.

#[test]
fn an_output_that_is_not_a_regular_file_is_refused_and_left_alone() {
    let lab = Lab::new();
    let prog = lab.compile("n_mallocs");
    let fifo = lab.path("fifo.mtl");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let o = lab.record("fifo.mtl", &prog, &["10", "16", "0"]);
    assert!(!o.status.success(), "a FIFO is not a trace file");
    assert!(stderr(&o).contains("not a regular file"), "{}", stderr(&o));
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo(), "the FIFO is still there");
    let dir = lab.path("adir");
    std::fs::create_dir(&dir).unwrap();
    let o = lab.record("adir", &prog, &["10", "16", "0"]);
    assert!(!o.status.success() && stderr(&o).contains("is a directory"), "{}", stderr(&o));
    assert!(dir.is_dir());

    // A symbolic link: refused, link and file left as they were (followed,
    // the children's traces would land beside the target, unseen by a report
    // of the link).
    std::fs::write(lab.path("real.mtl"), "old").unwrap();
    std::os::unix::fs::symlink("real.mtl", lab.path("link.mtl")).unwrap();
    let o = lab.record("link.mtl", &prog, &["10", "16", "0"]);
    assert!(!o.status.success() && stderr(&o).contains("is a symbolic link (to real.mtl)"), "{}", stderr(&o));
    assert!(std::fs::symlink_metadata(lab.path("link.mtl")).unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read_to_string(lab.path("real.mtl")).unwrap(), "old");
    lab.record_ok("real.mtl", &prog, &["10", "16", "0"]);

    // compact -o: the same rule.
    let o = lab.command(MTLAB).args(["compact", "-o"]).arg(&fifo).arg(lab.path("real.mtl")).output().unwrap();
    assert!(!o.status.success() && stderr(&o).contains("not a regular file"), "{}", stderr(&o));
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
}

#[test]
fn baseline_output_is_not_doubled_and_a_file_stdin_is_read_by_both_runs() {
    let lab = Lab::new();
    let prog = lab.compile("exit_code");
    std::fs::write(lab.path("in.txt"), "abc\ndef\n").unwrap();
    let o = lab
        .record_cmd("b.mtl", &["--baseline"], &prog, &[])
        .stdin(std::fs::File::open(lab.path("in.txt")).unwrap())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(7));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "to stdout: hello\necho: abc\ndef\n", "once, with the whole input");
    assert_eq!(stderr(&o).matches("to stderr: hello\n").count(), 1, "{}", stderr(&o));
    let r = lab.report("b.mtl");
    assert_eq!(r["slowdown"]["baseline_stdin_empty"], false);
    // Input from a pipe goes to the traced run; the report says the baseline had none.
    let o = run_with_stdin(lab.record_cmd("p.mtl", &["--baseline"], &prog, &[]), b"xyz\n");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "to stdout: hello\necho: xyz\n");
    let r = lab.report("p.mtl");
    assert_eq!(r["slowdown"]["baseline_stdin_empty"], true);
    let text = report_output(&lab, &["p.mtl"]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("the untraced run read an empty stdin"));
}

#[test]
fn a_program_rebuilt_after_its_recording_is_not_used_to_name_its_frames() {
    let lab = Lab::new();
    let prog = lab.compile("n_mallocs");
    lab.record_ok("t.mtl", &prog, &["100", "48", "0"]);
    assert_eq!(site(&lab.report("t.mtl"), "do_allocs").calls, 100);
    // Another program written over it in place (as a rebuild may: same
    // inode), after the recording: its symbols would name the old addresses.
    let other = lab.compile("exit_code");
    std::fs::copy(&other, &prog).unwrap();
    let r = lab.report("t.mtl");
    let name = prog.file_name().unwrap().to_str().unwrap();
    let warned = r["warnings"].as_array().unwrap().iter().any(|w| w.as_str().unwrap().contains("is not the file the program ran"));
    assert!(warned, "{}", r["warnings"]);
    let sites = r["top_sites"]["by_calls"].as_array().unwrap();
    let ours: Vec<&serde_json::Value> =
        sites.iter().filter(|s| s["frames"][0]["module"].as_str() == Some(name)).collect();
    assert!(!ours.is_empty(), "the program's site is still there, by module: {sites:?}");
    for s in ours {
        assert!(s["frames"][0]["function"].is_null(), "not named from the new file: {}", s["frames"][0]);
    }
    assert_eq!(sites.iter().map(|s| u(&s["calls"])).max(), Some(100), "the site's figures are unchanged");
    // The exports name frames as the tables do.
    let o = lab.command(MTLAB).args(["report", "t.mtl", "--collapsed", "c.txt"]).output().unwrap();
    assert_success(&o, "report --collapsed");
    let folded = std::fs::read_to_string(lab.path("c.txt")).unwrap();
    assert!(folded.contains(&format!("{name}+0x")) && !folded.contains("do_allocs"), "{folded}");
}

#[test]
fn a_closed_stderr_loses_messages_not_outputs() {
    let lab = Lab::new();
    let prog = lab.compile("n_mallocs");
    lab.record_ok("t.mtl", &prog, &["10", "16", "0"]);
    // stderr a pipe nobody reads (`mtlab … 2>&1 | head -1` after head quit).
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let o = lab
        .command(MTLAB)
        .args(["report", "t.mtl", "--flamegraph", "f.svg", "--pprof", "p.pb.gz"])
        .stdout(std::process::Stdio::null())
        .stderr(writer)
        .status()
        .unwrap();
    assert!(o.success(), "{o:?}");
    assert!(lab.path("f.svg").exists() && lab.path("p.pb.gz").exists());
}

#[test]
fn merged_site_rows_rank_by_their_sums() {
    let lab = Lab::new();
    let prog = lab.compile("merge_order");
    lab.record_ok("t.mtl", &prog, &[]);
    let o = lab.command(MTLAB).args(["report", "t.mtl", "--frames", "1"]).output().unwrap();
    assert_success(&o, "mtlab report --frames 1");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let from = out.find("top allocation sites by calls").expect("the sites-by-calls table");
    let rows: Vec<Vec<String>> = out[from..]
        .lines()
        .take_while(|l| !l.starts_with('└'))
        .filter(|l| l.contains("five_sites") || l.contains("one_site"))
        .map(|l| l.split('┆').map(|c| c.trim_matches(|ch: char| ch == '│' || ch.is_whitespace()).to_string()).collect())
        .collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!((rows[0][0].as_str(), rows[0][1].as_str(), rows[0][3].as_str()), ("1", "5", "5"), "{rows:?}");
    assert!(rows[0][4].contains("five_sites"), "{rows:?}");
    assert_eq!((rows[1][0].as_str(), rows[1][1].as_str(), rows[1][3].as_str()), ("2", "3", "1"), "{rows:?}");
    assert!(out[from..].contains("a row of several stacks sums those"), "the merge is explained");
}

#[test]
fn a_compacted_copy_of_a_trees_root_lists_no_child_as_missing() {
    let lab = Lab::new();
    let prog = lab.compile("fork");
    lab.record_ok("t.mtl", &prog, &["5", "7"]);
    let o = lab.command(MTLAB).args(["compact", "t.mtl", "-o", "c.mtl"]).output().unwrap();
    assert_success(&o, "compact -o of a tree's root");
    let o = lab.command(MTLAB).args(["report", "--json", "c.mtl"]).output().unwrap();
    assert_success(&o, "report of the copy");
    assert!(!stderr(&o).contains("is missing"), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["missing_traces"].as_array().unwrap().is_empty(), "{}", v["missing_traces"]);
    assert_eq!(v["processes_index"].as_array().unwrap().len(), 1, "the root alone");
    // Compacted in place, the family keeps its children.
    let o = lab.command(MTLAB).args(["compact", "t.mtl"]).output().unwrap();
    assert_success(&o, "compact in place");
    assert_eq!(lab.report("t.mtl")["processes_index"].as_array().unwrap().len(), 2);
}

/// The report says why glibc's in-use figure differs from mtlab's: seven
/// freed 100-byte blocks stay in the thread cache (7 × 112-byte chunks), and
/// the thread's cache table (656 B) is glibc's own; with the thread cache
/// off only the table is left. Same program, same mtlab figure (0 B live).
#[test]
fn the_report_says_why_the_heap_managers_in_use_differs() {
    let lab = Lab::new();
    let exe = lab.compile("tcache_held");
    for (tunables, glibc_in_use) in [(None, 656 + 7 * 112), (Some("glibc.malloc.tcache_count=0"), 656)] {
        let mut c = lab.record_cmd("t.mtl", &[], &exe, &[]);
        if let Some(t) = tunables {
            c.env("GLIBC_TUNABLES", t);
        }
        assert_success(&c.output().unwrap(), "mtlab record tcache_held");
        let v = lab.report("t.mtl");
        let a = &processes(&v)[0]["allocator_stats"];
        let traced = a["in_use_bytes"].as_u64().unwrap() - a["in_use_at_start_bytes"].as_u64().unwrap_or(0);
        assert_eq!(traced, glibc_in_use, "mallinfo2's in-use bytes with {tunables:?}: {a}");
        assert_eq!(a["mtlab_in_use_bytes"], 0, "{a}");
        let o = lab.command(MTLAB).args(["report", "t.mtl"]).output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(
            text.contains("\n  in use differs: glibc counts as in use its per-thread cache table (656 B"),
            "the reason beside the gap: {text}"
        );
        assert!(!text.contains("mapped differs"), "no reason where the figures agree: {text}");
    }
}

/// `report` decodes on a thread of its own on a large trace (pipelined with
/// the replay) and on the calling thread with `MTLAB_REPORT_THREADS=1`: the
/// same report, byte for byte, on traces where the order of threads'
/// events decides the figures (blocks handed between two threads, whose
/// addresses glibc gives back and forth), a sampled trace, a compact one
/// and a tree of two child processes.
#[test]
fn the_report_is_the_same_with_the_decoder_on_its_own_thread() {
    let lab = Lab::new();
    let handoff = lab.compile("handoff");
    let threads = lab.compile("threads");
    let sh = find_in_path("sh").expect("sh");
    lab.record_ok("h.mtl", &handoff, &["100000", "4"]);
    lab.record_ok("t.mtl", &threads, &["4", "40000"]);
    let o = lab.record_cmd("s.mtl", &["--sample", "256", "--sample-seed", "7"], &threads, &["4", "40000"]).output().unwrap();
    assert_success(&o, "mtlab record --sample");
    let o = lab.command(MTLAB).arg("compact").arg("-o").arg(lab.path("c.mtl")).arg(lab.path("h.mtl")).output().unwrap();
    assert_success(&o, "mtlab compact");
    let script = format!("{0} 50000 4; {0} 40000 2", handoff.display());
    lab.record_ok("tree.mtl", &sh, &["-c", &script]);
    for trace in ["h.mtl", "t.mtl", "s.mtl", "c.mtl", "tree.mtl"] {
        let run = |threads: &str, args: &[&str]| {
            let o = lab.command(MTLAB).env("MTLAB_REPORT_THREADS", threads).arg("report").args(args).arg(lab.path(trace)).output().unwrap();
            assert_success(&o, &format!("mtlab report {trace} with MTLAB_REPORT_THREADS={threads}"));
            o.stdout
        };
        for args in [&["--json", "--threads"][..], &[][..]] {
            let (one, two) = (run("1", args), run("2", args));
            assert!(one == two, "{trace} {args:?}: the report with the decoder on its own thread differs");
        }
    }
    // The traces are large enough to be piped (64 Ki events), and whole.
    let r = lab.report("h.mtl");
    assert!(u(&r["events"]) >= 200_000, "{}", r["events"]);
    assert!(calls(&r, "malloc") >= 100_000 && calls(&r, "free") >= 100_000, "{}", r["functions"]);
    // A value that is not a number of threads is refused, with the fix.
    let o = lab.command(MTLAB).env("MTLAB_REPORT_THREADS", "two").arg("report").arg(lab.path("h.mtl")).output().unwrap();
    assert!(!o.status.success());
    assert!(stderr(&o).contains("MTLAB_REPORT_THREADS=\"two\": give a number of threads from 1 up"), "{}", stderr(&o));
}

/// A traced process that execs or spawns (posix_spawn, posix_spawnp) with an
/// LD_PRELOAD of its own (`env LD_PRELOAD=libjemalloc.so.2 prog`, Rust's
/// `Command::env`) or none: the image it starts is traced all the same
/// (mtlab's library put first again, the program's entries kept after it).
/// Before, that image got no trace and nothing said so.
#[test]
fn an_exec_that_replaces_ld_preload_keeps_the_new_image_traced() {
    let lab = Lab::new();
    let prog = lab.compile("exec_own_preload");
    for how in ["setenv", "envp", "unset", "spawn", "spawnp"] {
        let trace = format!("{how}.mtl");
        let out = lab.record_ok(&trace, &prog, &[how, "25"]);
        let lp = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(lp.split(':').next().unwrap().ends_with("/libmtlab_preload.so"), "{how}: mtlab's library first: {lp}");
        let own: Vec<&str> = lp.split(':').skip(1).collect();
        let theirs = if how == "unset" || how == "spawnp" { vec![] } else { vec!["libc.so.6"] };
        assert_eq!(own, theirs, "{how}: the program's own entries kept: {lp}");
        let r = lab.report(&trace);
        // An image that made no traced call before exec (envp) leaves the
        // root file to the one it starts: the image is found by its command line.
        let imgs: Vec<&serde_json::Value> = processes(&r).into_iter().filter(|p| p["cmdline"][1] == "inner").collect();
        assert_eq!(imgs.len(), 1, "{how}: the exec'd image has its trace");
        let img = imgs[0];
        strict(img);
        assert_eq!(site(img, "in_exec_image"), site_of(25, 25 * 400, 0, 0), "{how}");
        assert_eq!(img["clean_end"], true, "{how}");
    }
}
