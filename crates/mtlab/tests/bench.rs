//! End-to-end tests of the benchmark commands on tiny runs: the real
//! workloads, the real tracer and sampler, the output's shape and the numbers
//! that do not depend on timing (which configurations ran, how many
//! repetitions, event counts, ratios recomputed from the stored values).
//! Timing itself is measured by the benchmarks, not asserted here.

mod util;

use serde_json::Value;
use util::*;

/// The values of one measurement.
fn values(run: &Value, config: &str, metric: &str) -> Vec<f64> {
    let m = run["measurements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["configuration"] == config && m["metric"] == metric)
        .unwrap_or_else(|| panic!("no {config} / {metric} in {run}"));
    m["values"].as_array().unwrap().iter().map(f).collect()
}

fn summary<'a>(run: &'a Value, config: &str, metric: &str) -> &'a Value {
    run["summaries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["configuration"] == config && s["metric"] == metric)
        .unwrap_or_else(|| panic!("no summary of {config} / {metric}"))
}

fn names(run: &Value) -> Vec<String> {
    run["configurations"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().to_string()).collect()
}

#[test]
fn bench_tracer_runs_untraced_the_tsc_floor_mtlab_and_times_the_report() {
    let lab = Lab::new();
    let v = lab.mtlab_json(&["bench", "tracer", "--iterations", "2000", "--reps", "2", "--no-heaptrack"]);
    assert_eq!(v["study"], "bench-tracer");
    assert_eq!(names(&v), ["untraced", "untraced + TSC reads", "mtlab", "mtlab report"]);
    for c in ["untraced", "untraced + TSC reads", "mtlab"] {
        let cpo = values(&v, c, "cycles_per_op");
        assert_eq!(cpo.len(), 2, "{c}: one value per repetition");
        assert!(cpo.iter().all(|x| *x > 0.0), "{c}: {cpo:?}");
    }
    // The ratio to the baseline is the median of per-round ratios of the stored values.
    let (m, b) = (values(&v, "mtlab", "cycles_per_op"), values(&v, "untraced", "cycles_per_op"));
    let want = (m[0] / b[0] + m[1] / b[1]) / 2.0;
    let got = f(&summary(&v, "mtlab", "cycles_per_op")["ratio_to_baseline"]["ratio"]);
    assert!((got - want).abs() < 1e-9 * want, "{got} vs {want}");
    assert!(summary(&v, "untraced", "cycles_per_op")["ratio_to_baseline"].is_null());
    assert!(values(&v, "mtlab", "trace_bytes").iter().all(|b| *b > 0.0));
    assert!(values(&v, "mtlab", "compact_bytes").iter().all(|b| *b > 0.0));
    // The TSC floor and the untraced run leave no trace.
    assert!(v["measurements"].as_array().unwrap().iter().all(|m| m["metric"] != "trace_bytes" || m["configuration"] == "mtlab"));
    // 2 threads × (2000 + 200 warm-up) pairs, each a malloc and a free event,
    // plus whatever the C runtime and the workload's set-up allocate.
    let events = values(&v, "mtlab report", "events");
    assert_eq!(events.len(), 3, "mtlab report is timed at least 3 times");
    assert!(events.iter().all(|e| (8800.0..9000.0).contains(e)), "{events:?} events");
    assert_eq!(v["environment"]["libc"].as_str().unwrap()[..2], *"2.");
    assert!(v["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().contains("--no-heaptrack")));
}

/// `--samples` runs the sampler in the same rounds; `--no-full` leaves out the
/// full trace and with it the timed report.
#[test]
fn bench_program_samples_run_the_sampler_in_the_same_rounds() {
    let lab = Lab::new();
    let prog = lab.compile("n_mallocs");
    let p = prog.to_str().unwrap();
    // n_mallocs N S K: N blocks of S bytes (1 MiB in all), all freed.
    let v = lab.mtlab_json(&["bench", "program", "--no-heaptrack", "--samples", "64KiB,512KiB", "--no-full", "--reps", "2", "--", p, "1024", "1024", "0"]);
    assert_eq!(names(&v), ["untraced", "mtlab --sample 512KiB", "mtlab --sample 64KiB"]);
    for c in ["mtlab --sample 512KiB", "mtlab --sample 64KiB"] {
        assert_eq!(values(&v, c, "wall_s").len(), 2, "{c}: one value per round");
        assert!(values(&v, c, "trace_bytes").iter().all(|b| *b > 0.0), "{c}");
        assert!(summary(&v, c, "wall_s")["ratio_to_baseline"]["ratio"].as_f64().is_some(), "{c}: a ratio to untraced");
    }
    assert!(v["measurements"].as_array().unwrap().iter().all(|m| m["configuration"] != "mtlab report"));
    // Without --samples, --no-full is refused by the argument parser.
    let o = lab.command(MTLAB).args(["bench", "program", "--no-full", "--", p, "1", "1", "0"]).output().unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--samples"), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn bench_malloc_reports_both_measures_of_the_increase() {
    let lab = Lab::new();
    let v = lab.mtlab_json(&[
        "bench", "malloc", "--threads", "1", "--iterations", "2000", "--reps", "1", "--intervals", "64KiB", "--unwinders", "fp",
        "--no-jemalloc", "--no-tcmalloc",
    ]);
    assert_eq!(
        names(&v),
        ["malloc-test 1T glibc none", "malloc-test 1T glibc mtlab inactive", "malloc-test 1T glibc mtlab fp 64KiB"]
    );
    let base = "malloc-test 1T glibc none";
    for c in names(&v) {
        let timer = values(&v, &c, "timer_cycles")[0];
        assert!(timer > 0.0, "{c}");
        // The timed value is the strict value with the timer's cost left in.
        let (strict, timed) = (values(&v, &c, "malloc_cycles")[0], values(&v, &c, "malloc_cycles_timed")[0]);
        assert!((timed - strict - timer).abs() < 1e-9, "{c}");
        if c != base {
            let want = strict / values(&v, base, "malloc_cycles")[0];
            let got = f(&summary(&v, &c, "malloc_cycles")["ratio_to_baseline"]["ratio"]);
            assert!((got - want).abs() < 1e-9, "{c}: {got} vs {want}");
        }
    }
    // Only the sampling configuration captures stacks, and it did.
    assert!(values(&v, "malloc-test 1T glibc mtlab fp 64KiB", "stacks_captured")[0] > 0.0);
    assert!(v["measurements"].as_array().unwrap().iter().all(|m| m["metric"] != "stacks_captured"
        || m["configuration"] == "malloc-test 1T glibc mtlab fp 64KiB"));
}

#[test]
fn bench_malloc_text_shows_the_paper_table_and_writes_plots_and_csv() {
    let lab = Lab::new();
    let o = lab
        .command(MTLAB)
        .args(["bench", "malloc", "--threads", "1", "--iterations", "2000", "--reps", "1", "--intervals", "64KiB,128KiB"])
        .args(["--unwinders", "fp", "--no-jemalloc", "--no-tcmalloc", "--svg", "plots", "--csv", "csv"])
        .output()
        .unwrap();
    assert_success(&o, "bench malloc");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("malloc-test: increase of mean malloc cycles"), "{out}");
    assert!(out.contains("64KiB") && out.contains("128KiB"), "{out}");
    assert!(out.contains("as the source paper timed it"), "{out}");
    let svg = std::fs::read_to_string(lab.path("plots/bench-malloc-malloc-test.svg")).unwrap();
    assert!(svg.contains("sampling interval") && svg.contains("mtlab fp (glibc, 1 thr)"), "{svg}");
    let rows = std::fs::read_to_string(lab.path("csv/measurements.csv")).unwrap();
    // One repetition: 4 configurations × 5 timing metrics, and 2 stack metrics for each of the 2 sampling ones.
    let n = rows.lines().count() - 1;
    assert_eq!(n, 4 * 5 + 2 * 2, "{rows}");
    assert!(lab.path("csv/malloc-test.csv").exists());
}

#[test]
fn malloc_test_refuses_two_timing_modes_at_once() {
    let lab = Lab::new();
    // The workload is unpacked by mtlab; its path is in bench tracer's settings.
    let v = lab.mtlab_json(&["bench", "tracer", "--iterations", "10", "--reps", "1", "--no-heaptrack", "--no-store"]);
    let workload = v["settings"]["command"].as_str().unwrap().split(' ').next().unwrap().to_string();
    let o = lab.command(&workload).args(["--time-each", "--stamp-calls"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("exclude each other"), "{}", stderr(&o));
    assert!(!lab.store().exists(), "--no-store wrote a store");
}
