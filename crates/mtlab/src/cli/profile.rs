//! `mtlab profile simulate`: the sampler replayed offline over a full trace,
//! and the coverage curve it gives.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde_json::json;

use super::{emit, parse_percent, parse_size_arg, CliError};
use crate::export::{human_bytes, Cell, Document, Table, View};
use crate::profile::simulate;
use crate::study::progress::Progress;
use crate::trace::TraceFile;
use crate::units::format_size;

#[derive(Args, Debug)]
pub struct SimulateArgs {
    /// A full trace written by `mtlab record` without --sample.
    file: PathBuf,
    /// Mean sampling intervals to simulate, comma separated.
    #[arg(long, value_name = "SIZE,...", value_delimiter = ',', value_parser = parse_size_arg,
          default_value = "64KiB,128KiB,256KiB,512KiB,1MiB,2MiB,4MiB,8MiB")]
    intervals: Vec<u64>,
    /// Simulated profiles per interval (each with its own random sample points).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    runs: u32,
    /// Seed of the simulated samplers: the same seed gives the same numbers.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Simulate on this traced child process's trace (default: the root process of FILE).
    #[arg(long)]
    pid: Option<u32>,
    /// Coverage a useful profile must reach, in percent: the stacks found account for this share of the
    /// allocated bytes (90, the criterion of the jemalloc profiler study; docs/metrics.md)
    #[arg(long, default_value_t = 90.0, value_parser = parse_percent)]
    threshold: f64,
    /// Recommend an interval even when the trace's stacks look truncated
    /// (then distinct sites share a stack, and coverage is overstated).
    #[arg(long)]
    allow_truncated: bool,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Also write the coverage table as CSV into DIR.
    #[arg(long, value_name = "DIR")]
    csv: Option<PathBuf>,
    /// No progress bar.
    #[arg(short, long)]
    quiet: bool,
}


/// The trace of process `pid` among FILE and its children's traces. A process
/// that called exec has one trace per image (FILE.d/PID.N): the last image is
/// taken, and the others are named on stderr.
fn trace_of_pid(file: &std::path::Path, pid: u32) -> Result<TraceFile, CliError> {
    let mut seen = Vec::new();
    let mut matches = Vec::new();
    for f in crate::platform::names::trace_family(file) {
        match TraceFile::open(&f) {
            Ok(t) if t.header.pid == pid => matches.push(t),
            Ok(t) => {
                if !seen.contains(&t.header.pid) {
                    seen.push(t.header.pid)
                }
            }
            Err(e) => say!("mtlab: warning: skipping {}: {e}", f.display()),
        }
    }
    let Some(last) = matches.pop() else {
        let seen: Vec<String> = seen.iter().map(u32::to_string).collect();
        return Err(CliError::Other(format!(
            "no traced process {pid} in {} (traced processes: {})",
            file.display(),
            if seen.is_empty() { "none".to_string() } else { seen.join(", ") }
        )));
    };
    if !matches.is_empty() {
        say!(
            "mtlab: process {pid} ran {} programs (exec); simulating the last, {} ({}); give another trace file as FILE to choose it: {}",
            matches.len() + 1,
            last.path.display(),
            last.header.exe,
            matches.iter().map(|t| format!("{} ({})", t.path.display(), t.header.exe)).collect::<Vec<_>>().join(", ")
        );
    }
    Ok(last)
}

pub fn simulate(a: SimulateArgs) -> Result<ExitCode, CliError> {

    if !a.file.exists() {
        return Err(CliError::Other(format!(
            "{} does not exist; write a full trace with `mtlab record -o {} -- PROGRAM`",
            a.file.display(),
            crate::platform::process::shell_word(&a.file)
        )));
    }
    let trace = match a.pid {
        Some(pid) => trace_of_pid(&a.file, pid)?,
        None => {
            let t = TraceFile::open(&a.file)?;
            let others = crate::platform::names::trace_family(&a.file).len().saturating_sub(1);
            if others > 0 {
                say!(
                    "mtlab: simulating {} (process {}) only; {} more trace{} beside it (children, exec'd programs): \
                     pick one with --pid PID or give its file",
                    a.file.display(),
                    t.header.pid,
                    others,
                    if others == 1 { "" } else { "s" }
                );
            }
            t
        }
    };
    let name = trace.path.display().to_string();
    if trace.header.sample_interval > 0 {
        return Err(CliError::Other(format!(
            "{name} is a sampled trace; simulate needs a full trace from `mtlab record` without --sample"
        )));
    }
    if trace.header.stacks == "none" {
        return Err(CliError::Other(format!(
            "{name} was recorded with --stacks none; simulate needs call stacks (record without --stacks none)"
        )));
    }
    let mut intervals = a.intervals.clone();
    intervals.sort_unstable();
    intervals.dedup();
    let opts = simulate::SimulateOptions { intervals, runs: a.runs, seed: a.seed };
    let threshold = a.threshold / 100.0;

    let total_events: u64 = trace.chunks.iter().map(|c| c.n_events as u64).sum();
    let progress = Progress::new(total_events, a.quiet || total_events < 2 * simulate::PROGRESS_EVERY);
    progress.set_prefix("simulating");
    let started = std::time::Instant::now();
    let sim = simulate::simulate_with_progress(&trace, &opts, &mut |n| progress.set_position(n))?;
    let elapsed = started.elapsed();
    drop(progress);
    for w in &sim.warnings {
        say!("mtlab: warning: {w}");
    }
    // Truncated stacks merge distinct sites, so few samples find "all" of
    // them: coverage is overstated and an interval from it is too coarse.
    let quality = crate::analysis::stack_quality_of(&trace)?;
    let truncated = quality.note.is_some();
    let trusted = !truncated || a.allow_truncated;
    let (recommended, recommended_safe) = recommendations(&sim, threshold, trusted);

    let mut data = serde_json::to_value(&sim).unwrap_or_default();
    if let Some(obj) = data.as_object_mut() {
        obj.insert("file".into(), json!(name));
        obj.insert("pid".into(), json!(trace.header.pid));
        obj.insert("threshold".into(), json!(threshold));
        obj.insert("recommended_interval".into(), json!(recommended));
        obj.insert("recommended_interval_safe".into(), json!(recommended_safe));
        obj.insert("stacks".into(), json!(quality));
        obj.insert("seconds".into(), json!(elapsed.as_secs_f64()));
    }
    let mut views = vec![View::Note(format!(
        "{name} (process {}): {} allocations, {} ({} bytes), {} distinct stacks, {} thread{}",
        trace.header.pid,
        sim.total_allocations,
        human_bytes(sim.total_bytes),
        sim.total_bytes,
        sim.distinct_stacks,
        sim.threads,
        if sim.threads == 1 { "" } else { "s" }
    ))];
    if let Some(note) = &quality.note {
        views.push(View::Note(format!(
            "{note}. Truncated stacks merge distinct sites, so coverage here is overstated{}",
            if a.allow_truncated {
                " (recommending anyway: --allow-truncated)"
            } else {
                ": no interval is recommended (--allow-truncated to have one anyway)"
            }
        )));
    }
    if sim.total_bytes == 0 {
        views.push(View::Note("no successful allocation in the trace: nothing to simulate".into()));
    } else {
        views.extend(coverage_views(&sim, a.threshold, recommended, recommended_safe, !trusted));
    }
    emit(&Document { views, data }, a.json, a.csv.as_ref(), None)?;
    if !a.json {
        say!(
            "mtlab: {} samplers over {} events in {:.2} s",
            sim.points.len() * sim.runs as usize,
            total_events,
            elapsed.as_secs_f64()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The intervals recommended by mean coverage and by mean − 2 sd (`None`
/// each when none reaches `threshold`, or when the stacks are not
/// `trusted`). One run has no spread: its sd is no measurement, so no
/// interval is recommended by mean − 2 sd.
fn recommendations(sim: &simulate::Simulation, threshold: f64, trusted: bool) -> (Option<u64>, Option<u64>) {
    let recommended = simulate::recommend(&sim.points, threshold).filter(|_| trusted);
    let safe = simulate::recommend_safe(&sim.points, threshold).filter(|_| trusted && sim.runs > 1);
    (recommended, safe)
}

/// The coverage table and the recommendation.
/// `withheld`: the stacks are truncated, no recommendation is made (said before).
fn coverage_views(sim: &simulate::Simulation, pct: f64, recommended: Option<u64>, safe: Option<u64>, withheld: bool) -> Vec<View> {
    let mut v = Vec::new();
    if sim.unattributed_bytes > 0 {
        v.push(View::Note(format!(
            "{} of the bytes ({:.2} %) have no recorded stack: no profile can cover them",
            human_bytes(sim.unattributed_bytes),
            100.0 * sim.unattributed_bytes as f64 / sim.total_bytes as f64
        )));
    }
    // One run has no spread: no sd (the statistics module's 0 for one value
    // is no measurement of it), and no mean − 2 sd.
    let spread = sim.runs > 1;
    v.push(View::Note(if spread {
        format!("{} simulated profiles per interval, seed {}", sim.runs, sim.seed)
    } else {
        format!(
            "1 simulated profile per interval, seed {}: one run has no spread (no sd, no mean − 2 sd); --runs 2 or more \
             for them",
            sim.seed
        )
    }));
    let coverage = if spread { "coverage mean ± sd" } else { "coverage" };
    let mut t = Table::new("coverage", "", &["interval", coverage, "min", "max", "mean − 2 sd", "stacks found", "samples (expected)"], 1);
    for p in &sim.points {
        let (coverage, low, found) = if spread {
            (
                format!("{:.2} % ± {:.2}", 100.0 * p.coverage_mean, 100.0 * p.coverage_stddev),
                format!("{:.2} %", 100.0 * p.coverage_low),
                format!("{:.1} ± {:.1} ({:.1} %)", p.stacks_found_mean, p.stacks_found_stddev, 100.0 * p.stacks_found_fraction),
            )
        } else {
            (
                format!("{:.2} %", 100.0 * p.coverage_mean),
                "n/a".to_string(),
                format!("{:.1} ({:.1} %)", p.stacks_found_mean, 100.0 * p.stacks_found_fraction),
            )
        };
        t.push(vec![
            Cell::text(format_size(p.interval)),
            Cell::text(coverage),
            Cell::text(format!("{:.2} %", 100.0 * p.coverage_min)),
            Cell::text(format!("{:.2} %", 100.0 * p.coverage_max)),
            Cell::text(low),
            Cell::text(found),
            Cell::text(format!("{:.1} ({:.1})", p.samples_mean, p.samples_expected)),
        ]);
    }
    v.push(View::Table(t));
    if withheld {
        return v;
    }
    let mut note = |s: String| v.push(View::Note(s));
    match recommended {
        Some(iv) => {
            note(format!("recommended interval: {} (largest with mean coverage >= {pct} %)", format_size(iv)));
            note(match safe {
                _ if !spread => "  one run: no interval nearly every profile reaches can be told (--runs 2 or more)".into(),
                Some(s) if s == iv => format!("  its mean − 2 sd coverage is also >= {pct} %"),
                Some(s) => format!("  for mean − 2 sd coverage >= {pct} % (nearly every profile), use {}", format_size(s)),
                None => format!("  no simulated interval keeps mean − 2 sd coverage >= {pct} %"),
            });
        }
        None => note(format!("no simulated interval reaches a mean coverage of {pct} %: try smaller intervals (--intervals)")),
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn simulation(runs: u32, sd: f64) -> simulate::Simulation {
        let point = simulate::CoveragePoint {
            interval: 64 << 10,
            coverage_mean: 0.97,
            coverage_stddev: sd,
            coverage_min: 0.97 - sd,
            coverage_max: 0.97 + sd,
            coverage_low: 0.97 - 2.0 * sd,
            stacks_found_mean: 4.0,
            stacks_found_stddev: 0.0,
            stacks_found_min: 4,
            stacks_found_max: 4,
            stacks_found_fraction: 0.8,
            samples_expected: 60.0,
            samples_mean: 61.0,
        };
        simulate::Simulation {
            total_bytes: 1 << 20,
            total_allocations: 100,
            distinct_stacks: 5,
            unattributed_bytes: 0,
            threads: 1,
            runs,
            seed: 1,
            points: vec![point],
            warnings: Vec::new(),
        }
    }

    /// The cells of the coverage table's rows, and every note, as text.
    fn shown(views: &[View]) -> (Vec<Vec<String>>, String) {
        let mut rows = Vec::new();
        let mut notes = String::new();
        for v in views {
            match v {
                View::Table(t) => rows.extend(t.rows.iter().map(|r| {
                    r.iter().map(|c| if let Cell::Text(s) = c { s.clone() } else { format!("{c:?}") }).collect()
                })),
                View::Note(n) => notes += &format!("{n}\n"),
                _ => {}
            }
        }
        (rows, notes)
    }

    #[test]
    fn one_run_shows_no_spread_and_recommends_nothing_by_it() {
        // One run: the statistics give sd 0, which is no spread measured.
        let one = simulation(1, 0.0);
        let (rec, safe) = recommendations(&one, 0.9, true);
        assert_eq!((rec, safe), (Some(64 << 10), None));
        let (rows, notes) = shown(&coverage_views(&one, 90.0, rec, safe, false));
        assert_eq!(rows, [["64KiB", "97.00 %", "97.00 %", "97.00 %", "n/a", "4.0 (80.0 %)", "61.0 (60.0)"]]);
        assert!(!notes.contains('±') && !notes.contains("also >="), "{notes}");
        assert!(notes.contains("one run has no spread"), "{notes}");

        // Two runs or more: sd and mean − 2 sd as before.
        let two = simulation(2, 0.01);
        let (rec, safe) = recommendations(&two, 0.9, true);
        assert_eq!((rec, safe), (Some(64 << 10), Some(64 << 10)));
        let (rows, notes) = shown(&coverage_views(&two, 90.0, rec, safe, false));
        assert_eq!(rows, [["64KiB", "97.00 % ± 1.00", "96.00 %", "98.00 %", "95.00 %", "4.0 ± 0.0 (80.0 %)", "61.0 (60.0)"]]);
        assert!(notes.contains("its mean − 2 sd coverage is also >= 90 %"), "{notes}");
    }
}
