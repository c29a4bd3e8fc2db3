//! Calls the heap tracer must see whatever serves them: C++'s operator new
//! and delete under every heap manager, the heap glibc gives back inside
//! free, and the calls that change nothing (free(NULL), sbrk(0),
//! malloc_usable_size).

mod util;

use std::path::{Path, PathBuf};
use std::process::Command;

use util::*;

/// Compiles native/tests/NAME.cpp with g++ (-O0: a new/delete pair is kept).
fn compile_cxx(lab: &Lab, name: &str) -> Option<PathBuf> {
    let src = repo_root().join("native/tests").join(format!("{name}.cpp"));
    let out = lab.path(name);
    let Ok(o) = Command::new("g++").args(["-O0", "-g", "-fno-omit-frame-pointer", "-o"]).arg(&out).arg(&src).output() else {
        skip("g++ is not installed (Debian: g++)");
        return None;
    };
    assert!(o.status.success(), "compiling {name}.cpp failed:\n{}", String::from_utf8_lossy(&o.stderr));
    Some(out)
}

/// The heap managers to run under: glibc (no library), and each other one
/// installed (.ci/run installs them all).
fn heap_managers() -> Vec<(&'static str, Option<PathBuf>)> {
    let mut out = vec![("glibc", None)];
    for (name, so) in [
        ("jemalloc", "libjemalloc.so.2"),
        ("tcmalloc", "libtcmalloc_minimal.so.4"),
        ("mimalloc", "libmimalloc.so.2"),
    ] {
        let found = ["/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"]
            .iter()
            .map(|d| Path::new(d).join(so))
            .find(|p| p.exists());
        match found {
            Some(p) => out.push((name, Some(p))),
            None => skip(&format!("{so} is not installed (Debian: see .ci/run)")),
        }
    }
    out
}

/// `mtlab record` of PROG ARGS with `lib` preloaded (mtlab puts its own first).
fn record_under(lab: &Lab, trace: &str, lib: Option<&Path>, prog: &Path, args: &[&str]) -> serde_json::Value {
    let mut c = lab.record_cmd(trace, &[], prog, args);
    match lib {
        Some(l) => c.env("LD_PRELOAD", l),
        None => c.env_remove("LD_PRELOAD"),
    };
    assert_success(&c.output().unwrap(), &format!("mtlab record {trace}"));
    lab.report(trace)
}

/// Every form of operator new and delete, counted as its own function with
/// the same counts under each heap manager (jemalloc, tcmalloc and mimalloc
/// define the operators themselves: their calls never reached malloc), the
/// same live bytes, and no free of a block never seen.
#[test]
fn every_form_of_new_and_delete_is_traced_under_every_heap_manager() {
    let lab = Lab::new();
    let Some(prog) = compile_cxx(&lab, "cxx_new") else { return };
    let expected = deltas(&[
        ("operator new", 13),
        ("operator new[]", 12),
        ("operator new(nothrow)", 14),
        ("operator new[](nothrow)", 14),
        ("operator new(align)", 15),
        ("operator new[](align)", 16),
        ("operator new(align nothrow)", 17),
        ("operator new[](align nothrow)", 18),
        ("operator delete", 8),
        ("operator delete(size)", 6),
        ("operator delete[]", 7),
        ("operator delete[](size)", 5),
        ("operator delete(nothrow)", 13),
        ("operator delete[](nothrow)", 14),
        ("operator delete(align)", 8),
        ("operator delete(size align)", 7),
        ("operator delete[](align)", 9),
        ("operator delete[](size align)", 7),
        ("operator delete(align nothrow)", 17),
        ("operator delete[](align nothrow)", 18),
    ]);
    for (name, lib) in heap_managers() {
        let base = record_under(&lab, &format!("{name}-base.mtl"), lib.as_deref(), &prog, &["baseline"]);
        let r = record_under(&lab, &format!("{name}.mtl"), lib.as_deref(), &prog, &[]);
        sanity(&r);
        let operators: Vec<(String, i64)> =
            call_deltas(&r, &base).into_iter().filter(|(f, _)| f.starts_with("operator ")).collect();
        assert_eq!(operators, expected, "{name}: calls of each form");
        assert_eq!(failed(&r, "operator new(nothrow)"), 1, "{name}: the nothrow new that could not allocate");
        // 11 × 24 bytes and 2 × 1000 (the failed call has no size).
        assert_eq!(total_size(&r, "operator new") - total_size(&base, "operator new"), 11 * 24 + 2 * 1000, "{name}");
        assert_eq!(mean_size(&r, "operator new(align nothrow)"), 64.0, "{name}");
        assert_eq!(live_bytes_end(&r) - live_bytes_end(&base), 2000, "{name}: the two blocks kept live");
        assert_eq!(u(&r["unknown_frees"]), 0, "{name}: frees of blocks never allocated");
        assert_eq!(u(&r["overlapping_allocs"]), 0, "{name}");
    }
}

/// A throwing operator new that fails: counted as a failed call, and its
/// std::bad_alloc — allocated while the call was in flight, freed after the
/// catch — is a block the trace saw allocated (mimalloc's new aborts
/// instead of throwing: not run there).
#[test]
fn a_throwing_new_that_fails_is_a_failed_call_and_its_exception_a_known_block() {
    let lab = Lab::new();
    let Some(prog) = compile_cxx(&lab, "cxx_new") else { return };
    for (name, lib) in heap_managers().into_iter().filter(|(n, _)| *n != "mimalloc") {
        let base = record_under(&lab, &format!("{name}-base.mtl"), lib.as_deref(), &prog, &["baseline"]);
        let r = record_under(&lab, &format!("{name}.mtl"), lib.as_deref(), &prog, &["throw"]);
        sanity(&r);
        let new_calls = calls(&r, "operator new") - calls(&base, "operator new");
        assert_eq!((new_calls, failed(&r, "operator new")), (14, 1), "{name}");
        assert_eq!(u(&r["unknown_frees"]), 0, "{name}: the exception's free");
        // The calls after the throw are traced (the shim's call was left).
        assert_eq!(calls(&r, "operator delete[](align nothrow)"), 18, "{name}");
    }
}

/// glibc trims the top of the brk heap inside free, with an internal brk no
/// shim sees: the end's mapped bytes are the break's true distance from the
/// heap's start, as the program reads it with a raw system call.
#[test]
fn the_brk_heap_glibc_gives_back_inside_free_is_gone_from_the_end() {
    let lab = Lab::new();
    let prog = lab.compile("brk_trim");
    let o = lab.record_ok("t.mtl", &prog, &[]);
    let line = String::from_utf8_lossy(&o.stdout).lines().find(|l| l.starts_with("heap=")).map(str::to_string);
    let line = line.unwrap_or_else(|| panic!("no heap= line: {}", String::from_utf8_lossy(&o.stdout)));
    let field = |k: &str| -> u64 {
        let v = line.split_whitespace().find_map(|w| w.strip_prefix(&format!("{k}="))).unwrap();
        v.parse().unwrap()
    };
    let (heap, mmapped) = (field("heap"), field("mmapped"));
    let r = lab.report("t.mtl");
    strict(&r);
    assert!(u(&r["peak"]["brk_bytes"]) > 50 << 20, "the heap grew to ~60 MiB: {}", r["peak"]);
    assert_eq!(u(&r["end"]["brk_bytes"]), heap, "end brk heap = the break's distance from [heap]");
    assert_eq!(u(&r["end"]["mapped_bytes"]), heap + mmapped, "end mapped = brk heap + mmap'd chunks");
    let last = r["time_series"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(u(&last["mapped_bytes"]), heap + mmapped, "the last point of the time series");
}

/// Calls that change nothing are counted: free(NULL), sbrk(0),
/// malloc_usable_size — and kept out of the mean sizes.
#[test]
fn free_null_sbrk_0_and_malloc_usable_size_are_counted() {
    let lab = Lab::new();
    let prog = lab.compile("null_calls");
    lab.record_ok("base.mtl", &prog, &["baseline"]);
    lab.record_ok("t.mtl", &prog, &[]);
    let (base, r) = (lab.report("base.mtl"), lab.report("t.mtl"));
    strict(&r);
    sanity(&r);
    assert_eq!(
        call_deltas(&r, &base),
        deltas(&[("free", 1235), ("sbrk", 567), ("malloc_usable_size", 89), ("malloc", 1)])
    );
    // free's mean size is the one block's: free(NULL) freed nothing; sbrk(0) has no size.
    assert_eq!(mean_size(&r, "free"), 100.0);
    assert_eq!(mean_size(&r, "sbrk"), 0.0);
    assert_eq!(failed(&r, "sbrk") + failed(&r, "free") + failed(&r, "malloc_usable_size"), 0);
}

/// Sampling every byte (`--sample 1`), each operator new is one sample under
/// every heap manager: a heap manager's own operator is sampled in its shim,
/// once — jemalloc's aligned forms call its exported aligned allocation
/// inside, which is not sampled again — and libstdc++'s through its malloc.
#[test]
fn sampling_takes_each_operator_new_once_under_every_heap_manager() {
    let lab = Lab::new();
    let Some(prog) = compile_cxx(&lab, "cxx_new") else { return };
    let samples = |trace: &str, lib: Option<&Path>, args: &[&str]| -> u64 {
        let mut c = lab.record_cmd(trace, &["--sample", "1"], &prog, args);
        match lib {
            Some(l) => c.env("LD_PRELOAD", l),
            None => c.env_remove("LD_PRELOAD"),
        };
        assert_success(&c.output().unwrap(), &format!("mtlab record --sample 1 {trace}"));
        u(&lab.report(trace)["profile"]["samples"])
    };
    for (name, lib) in heap_managers() {
        let base = samples(&format!("{name}-base.mtl"), lib.as_deref(), &["baseline"]);
        let all = samples(&format!("{name}.mtl"), lib.as_deref(), &[]);
        // 118 blocks; under glibc one more: libstdc++'s nothrow new that
        // fails catches a std::bad_alloc it allocated.
        let expected = if name == "glibc" { 119 } else { 118 };
        assert_eq!(all - base, expected, "{name}: samples");
    }
}

/// Records native/tests/PROG.c, which prints mallinfo2's `arena` (all
/// arenas' system bytes) after `prefix` on stderr once glibc has done what
/// the program is about; returns (that figure, mtlab's peak and end mapped).
fn mapped_against_mallinfo2(prog: &str, prefix: &str) -> (u64, u64, u64) {
    let lab = Lab::new();
    let exe = lab.compile(prog);
    let o = lab.record("a.mtl", &exe, &[]);
    assert_success(&o, prog);
    let e = String::from_utf8_lossy(&o.stderr);
    let truth: u64 = e
        .lines()
        .find_map(|l| l.strip_prefix(prefix))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{e}"));
    let r = lab.report("a.mtl");
    (truth, u(&r["peak"]["mapped_bytes"]), u(&r["end"]["mapped_bytes"]))
}

/// #33 §1: glibc shrinks a thread arena's heap inside `free` (heap_trim), with
/// no allocation after it to show the new size: mtlab kept the arena heap at
/// its largest. A thread grows its arena's first heap to ~20 MB with blocks
/// below the mmap threshold and frees them all, newest first.
#[test]
fn a_thread_arena_glibc_shrinks_inside_free_is_shrunk_in_the_trace() {
    let (truth, peak, end) = mapped_against_mallinfo2("arena_trim", "after frees: arena ");
    assert!(peak >= 20_000_000, "the arena grew to 20 MB: peak mapped {peak}");
    assert!(truth < 2_000_000, "glibc trimmed the arena: {truth}");
    // The main arena's brk heap (mallinfo2 counts it too) and the arena's
    // heap as glibc left it: mtlab's end is glibc's figure, page for page.
    assert_eq!(end, truth, "end mapped {end}, mallinfo2 arena {truth}");
}

/// #33 §1: glibc changes thread arenas where no traced call shows it: it
/// unmaps an arena's second heap whole inside free, makes an arena inside a
/// thread's first free (for its tcache) with no traced block in it, and
/// frees a thread's cached blocks at its exit (the heap then shrinks). The
/// old build ended at 82 178 048 B mapped against mallinfo2's 540 672.
#[test]
fn arena_heaps_glibc_unmaps_makes_or_shrinks_unseen_are_followed() {
    let (truth, peak, end) = mapped_against_mallinfo2("arena_heaps", "after joins: arena ");
    assert!(peak >= 80_000_000, "the arena grew past one 64 MiB heap: peak mapped {peak}");
    assert!(truth < 1_000_000, "glibc unmapped and trimmed: {truth}");
    // glibc may give `drain` an arena another thread made, so their number
    // is not fixed; mallinfo2 counts whatever it made.
    assert_eq!(end, truth, "end mapped {end}, mallinfo2 arena {truth}");
}
