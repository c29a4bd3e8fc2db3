//! End-to-end tests of the benchmark commands on tiny runs: the real
//! workloads, the real tracer and sampler, the output's shape and the numbers
//! that do not depend on timing (which configurations ran, event counts,
//! baselines at exactly 1). Timing itself is measured by the benchmarks, not
//! asserted here.

mod util;

use util::*;

fn bench_json(lab: &Lab, args: &[&str]) -> serde_json::Value {
    let o = lab.command(MTLAB).arg("bench").args(args).arg("--json").output().unwrap();
    assert_success(&o, "mtlab bench");
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("bench --json: {e}\n{}", String::from_utf8_lossy(&o.stdout)))
}

#[test]
fn bench_tracer_runs_untraced_the_tsc_floor_and_mtlab() {
    let lab = Lab::new();
    let v = bench_json(&lab, &["tracer", "--iterations", "2000", "--reps", "1", "--no-heaptrack"]);
    let names: Vec<&str> = v["configs"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["untraced", "untraced + TSC reads", "mtlab"]);
    let cfg = |n: &str| v["configs"].as_array().unwrap().iter().find(|c| c["name"] == n).unwrap().clone();
    assert_eq!(f(&cfg("untraced")["ratio"]), 1.0);
    assert!(f(&cfg("untraced")["median"]) > 0.0);
    assert!(cfg("untraced + TSC reads")["trace_bytes"].is_null());
    assert!(u(&cfg("mtlab")["trace_bytes"]) > 0);
    // 2 threads × (2000 + 200 warm-up) pairs, each a malloc and a free event,
    // plus whatever the C runtime and the workload's set-up allocate.
    let events = u(&v["report"]["events"]);
    assert!((8800..8800 + 200).contains(&events), "{events} events");
}

#[test]
fn bench_malloc_reports_both_measures_of_the_increase() {
    let lab = Lab::new();
    let v = bench_json(
        &lab,
        &[
            "malloc", "--threads", "1", "--iterations", "2000", "--reps", "1", "--intervals", "64KiB", "--unwinders", "fp",
            "--no-jemalloc", "--no-tcmalloc",
        ],
    );
    let results = v["results"].as_array().unwrap();
    let labels: Vec<&str> = results.iter().map(|r| r["label"].as_str().unwrap()).collect();
    assert_eq!(labels, ["none", "mtlab inactive", "mtlab fp"], "{v}");
    for r in results {
        let timer = f(&r["timer_cycles"]);
        assert!(timer > 0.0, "{r}");
        // One repetition: the timed increase is the same ratio with the timer left in.
        let base = &results[0];
        let strict = f(&r["value"]) / f(&base["value"]);
        let timed = (f(&r["value"]) + timer) / (f(&base["value"]) + f(&base["timer_cycles"]));
        assert!((f(&r["increase_pct"]) - (strict - 1.0) * 100.0).abs() < 1e-6, "{r}");
        assert!((f(&r["increase_pct_timed"]) - (timed - 1.0) * 100.0).abs() < 1e-6, "{r}");
    }
    assert_eq!(f(&results[0]["increase_pct_timed"]), 0.0);
}

#[test]
fn malloc_test_refuses_two_timing_modes_at_once() {
    let lab = Lab::new();
    // The workload is unpacked by mtlab; its path is in bench tracer's command line.
    let v = bench_json(&lab, &["tracer", "--iterations", "10", "--reps", "1", "--no-heaptrack"]);
    let workload = v["command"][0].as_str().unwrap().to_string();
    let o = lab.command(&workload).args(["--time-each", "--stamp-calls"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("exclude each other"), "{}", stderr(&o));
}
