//! musl-linked programs under `mtlab record`: the tiny exact programs of the
//! glibc tests, built with musl-gcc, give the counts their glibc builds give
//! and that the programs are written to make, traced fully and sampled; a
//! tree that mixes the two C libraries is traced in both; a static musl
//! program is told why it has no trace. (Attaching to a musl program:
//! tests/attach.rs.) Where musl-gcc is missing each test says SKIPPED, and
//! fails under CI=true.

mod util;

use serde_json::Value;
use util::*;

/// What a test compares between the two builds: for each function the calls
/// of the work run minus those of the baseline run, the site of the work's
/// own function, and the live bytes at the peak and at the end (differences).
#[derive(Debug, PartialEq, Eq)]
struct Counts {
    calls: Vec<(String, i64)>,
    sizes: Vec<(String, u64)>,
    site: Site,
    peak: u64,
    end: u64,
}

/// The invariants of [`strict`] that hold for musl's heap too: musl's
/// mallocng maps its groups with internal calls that are not interposable,
/// so its blocks lie outside the regions mtlab sees (unplaced bytes are
/// expected, and said in the docs).
fn musl_strict(p: &Value) {
    assert_eq!(p["allocator"], "musl", "the allocator is musl's: {}", p["allocator_path"]);
    assert_eq!(u(&p["unknown_frees"]), 0);
    assert_eq!(u(&p["overlapping_allocs"]), 0);
    assert_eq!(u(&p["events_dropped"]), 0);
    assert_eq!(u(&p["chunks_dropped"]), 0);
    assert_eq!(p["clean_end"], true);
}

/// Records `prog` with `base` and `work` arguments and returns the work's
/// counts beyond the baseline's, at the site of `function`.
fn counts(lab: &Lab, tag: &str, prog: &std::path::Path, base: &[&str], work: &[&str], function: &str) -> Counts {
    lab.record_ok(&format!("{tag}-base.mtl"), prog, base);
    lab.record_ok(&format!("{tag}.mtl"), prog, work);
    let (b, r) = (lab.report(&format!("{tag}-base.mtl")), lab.report(&format!("{tag}.mtl")));
    let calls = call_deltas(&r, &b);
    let sizes = calls.iter().map(|(f, _)| (f.clone(), total_size(&r, f) - total_size(&b, f))).collect();
    if tag.starts_with("musl") {
        musl_strict(&r);
    } else {
        strict(&r);
    }
    Counts { calls, sizes, site: site(&r, function), peak: live_bytes_peak(&r) - live_bytes_peak(&b), end: live_bytes_end(&r) - live_bytes_end(&b) }
}

/// Both builds of native/tests/NAME.c, glibc's and musl's (None: skipped).
fn both(lab: &Lab, name: &str, extra: &[&str]) -> Option<(std::path::PathBuf, std::path::PathBuf)> {
    let musl = lab.compile_musl(name, &format!("{name}-musl"), extra)?;
    Some((lab.compile_as(name, &format!("{name}-glibc"), extra), musl))
}

#[test]
fn musl_builds_count_what_glibc_builds_count() {
    let lab = Lab::new();
    let Some((glibc, musl)) = both(&lab, "n_mallocs", &[]) else { return };
    let (base, work) = (["0", "48", "0"], ["1000", "48", "10"]);
    let g = counts(&lab, "glibc-n", &glibc, &base, &work, "do_allocs");
    let m = counts(&lab, "musl-n", &musl, &base, &work, "do_allocs");
    assert_eq!(m, g, "musl build against glibc build");
    // And what n_mallocs does: 1000 mallocs of 48 bytes, 990 freed.
    assert_eq!(m.calls, deltas(&[("free", 990), ("malloc", 1000)]));
    assert_eq!(m.site, site_of(1000, 48_000, 10, 480));
    assert_eq!((m.peak, m.end), (48_000, 480));

    let Some((glibc, musl)) = both(&lab, "calloc_once", &[]) else { return };
    let g = counts(&lab, "glibc-c", &glibc, &["baseline"], &[], "one_calloc");
    let m = counts(&lab, "musl-c", &musl, &["baseline"], &[], "one_calloc");
    assert_eq!(m, g);
    // musl's calloc calls malloc (its exported one, which the shims
    // intercept): that nested call is the calloc's own, not counted again.
    assert_eq!(m.calls, deltas(&[("calloc", 1), ("free", 1)]));
    assert_eq!(m.site, site_of(1, 1000, 0, 0));

    let Some((glibc, musl)) = both(&lab, "realloc_chain", &[]) else { return };
    let g = counts(&lab, "glibc-r", &glibc, &["baseline"], &[], "grow");
    let m = counts(&lab, "musl-r", &musl, &["baseline"], &[], "grow");
    assert_eq!(m, g);
    assert_eq!(m.calls, deltas(&[("free", 1), ("malloc", 1), ("realloc", 9)]));
    assert_eq!((m.peak, m.end), (8192, 0));

    // musl has no pvalloc: both builds call valloc in its place. musl's
    // posix_memalign, memalign and valloc call its aligned_alloc, and that
    // its malloc: each is one call.
    let Some((glibc, musl)) = both(&lab, "memalign", &["-Dpvalloc=valloc"]) else { return };
    let g = counts(&lab, "glibc-a", &glibc, &["baseline"], &[], "main");
    let m = counts(&lab, "musl-a", &musl, &["baseline"], &[], "main");
    assert_eq!(m, g);
    assert_eq!(m.calls, deltas(&[("aligned_alloc", 1), ("free", 5), ("memalign", 1), ("posix_memalign", 1), ("valloc", 2)]));
    assert_eq!((m.peak, m.end), (9692, 0));
}

#[test]
fn threads_of_a_musl_program_lose_no_event() {
    let lab = Lab::new();
    let Some((glibc, musl)) = both(&lab, "threads", &[]) else { return };
    let g = counts(&lab, "glibc-t", &glibc, &["8", "0"], &["8", "20000"], "worker");
    let m = counts(&lab, "musl-t", &musl, &["8", "0"], &["8", "20000"], "worker");
    // The peak depends on how the threads interleaved: not compared.
    assert_eq!((&m.calls, m.site, m.end), (&g.calls, g.site, g.end));
    assert_eq!(m.calls, deltas(&[("free", 160_000), ("malloc", 160_000)]));
    assert_eq!(m.site, site_of(160_000, 160_000 * 64, 0, 0));
}

/// `--sample 1`: every allocation is a sample, so the sampled profile's
/// site is exact too.
#[test]
fn sampling_a_musl_program_samples_what_glibc_samples() {
    let lab = Lab::new();
    let Some((glibc, musl)) = both(&lab, "n_mallocs", &[]) else { return };
    let sampled = |tag: &str, prog: &std::path::Path| -> (u64, f64, f64) {
        let o = lab.record_cmd(&format!("{tag}.mtl"), &["--sample", "1", "--sample-seed", "7"], prog, &["1000", "48", "10"]).output().unwrap();
        assert_success(&o, "mtlab record --sample 1");
        let r = lab.report(&format!("{tag}.mtl"));
        let top = r["profile"]["top"].as_array().unwrap_or_else(|| panic!("a sampled report: {}", r["profile"]));
        let at = top
            .iter()
            .filter(|s| s["frames"][0]["function"] == "do_allocs")
            .map(|s| (u(&s["samples"]), f(&s["inuse_objects"]["value"]), f(&s["alloc_bytes"]["value"])))
            .fold((0, 0.0, 0.0), |a, s| (a.0 + s.0, a.1 + s.1, a.2 + s.2));
        at
    };
    let (g, m) = (sampled("glibc-s", &glibc), sampled("musl-s", &musl));
    assert_eq!(m, g);
    assert_eq!(m, (1000, 10.0, 48_000.0), "every one of the 1000 blocks sampled, 10 still in use");
}

/// One LD_PRELOAD for the whole tree: glibc's sh runs the musl build and the
/// glibc build, and each is traced by its own build of the library. With the
/// glibc library alone, musl's loader could not load it and the musl
/// program would not start (exit 127).
#[test]
fn a_glibc_shell_running_musl_and_glibc_programs_traces_both() {
    let lab = Lab::new();
    let Some((glibc, musl)) = both(&lab, "n_mallocs", &[]) else { return };
    let script = format!("{} 100 48 0 && {} 200 48 0", musl.display(), glibc.display());
    let o = lab.record_cmd("tree.mtl", &[], "/bin/sh", &["-c", &script]).output().unwrap();
    assert_success(&o, "mtlab record -- sh -c 'musl; glibc'");
    let r = lab.report("tree.mtl");
    let children = r["children"].as_array().unwrap();
    let of = |needle: &str| -> &Value {
        children
            .iter()
            .find(|c| c["cmdline"][0].as_str().is_some_and(|s| s.ends_with(needle)))
            .unwrap_or_else(|| panic!("no traced process ran {needle}: {:?}", children.iter().map(|c| &c["cmdline"]).collect::<Vec<_>>()))
    };
    let (m, g) = (of("n_mallocs-musl"), of("n_mallocs-glibc"));
    assert_eq!(m["allocator"], "musl");
    assert_eq!(g["allocator"], "glibc");
    assert_eq!(site(m, "do_allocs"), site_of(100, 4800, 0, 0));
    assert_eq!(site(g, "do_allocs"), site_of(200, 9600, 0, 0));
}

#[test]
fn a_static_musl_program_is_told_why_it_has_no_trace() {
    let lab = Lab::new();
    let Some(stat) = lab.compile_musl("exit_early", "exit_early_static", &["-static"]) else { return };
    let o = lab.record("s.mtl", &stat, &[]);
    assert_eq!(o.status.code(), Some(3), "the program's own exit code");
    assert!(stderr(&o).contains("is statically linked: no dynamic loader runs"), "{}", stderr(&o));
}

/// `record --live` reads the trace as the program writes it: nothing of it
/// depends on the C library, and the live profile's counts are exact.
#[test]
fn a_musl_program_recorded_live_counts_exactly() {
    let lab = Lab::new();
    let Some(musl) = lab.compile_musl("n_mallocs", "n_mallocs-musl", &[]) else { return };
    let o = lab.record_cmd("live.mtl", &["--live"], &musl, &["1000", "48", "10"]).output().unwrap();
    assert_success(&o, "mtlab record --live");
    let r = lab.report("live.mtl");
    assert_eq!(r["allocator"], "musl");
    assert_eq!((calls(&r, "malloc"), calls(&r, "free")), (1000, 990));
    assert_eq!(site(&r, "do_allocs"), site_of(1000, 48_000, 10, 480));
}
