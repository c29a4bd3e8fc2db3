//! `mtlab bench malloc`: what a heap profiler costs (source 000/001).
//!
//! The malloc-test workload (and, with a pipeline, the latency pipeline) runs
//! under every profiler configuration — none, mtlab's sampler inactive and at
//! each interval with each unwinder, jemalloc's profiler, tcmalloc's sampler —
//! all interleaved round by round. Each configuration is compared with the
//! same round's run of its own allocator without a profiler, so drift of a
//! shared machine cancels out of the ratios.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use super::child::{self, measure};
use super::heap::allocators;
use super::StudyError;
use crate::export::{Cell, Plot, PlotKind, Point, Scale, Series, Table, View};
use crate::native::{self, Part};
use crate::trace::keys;
use crate::record::Unwind;
use crate::study::progress::Progress;
use crate::study::runner::{self, RunnerOptions, Sample};
use crate::study::{stats, summary, Configuration, Run};
use crate::units::format_size;

pub const STUDY: &str = "bench-malloc";

const MALLOC_TEST: &str = "malloc-test";
const PIPELINE: &str = "pipeline";

#[derive(Debug, Clone)]
pub struct Pipeline {
    pub messages: u64,
    /// Messages per second (its three stages share the machine's cores).
    pub rate: u64,
}

#[derive(Debug, Clone)]
pub struct ProfilerCostConfig {
    pub threads: Vec<u32>,
    pub size: u64,
    pub depth: u32,
    pub iterations: u64,
    pub touch: bool,
    pub intervals: Vec<u64>,
    pub unwinders: Vec<Unwind>,
    /// Heap managers for mtlab's configurations: names or paths to a .so.
    pub allocators: Vec<String>,
    pub jemalloc: bool,
    pub tcmalloc: bool,
    pub pipeline: Option<Pipeline>,
    /// Join with the coverage curve simulated on a full trace.
    pub coverage: bool,
    pub runner: RunnerOptions,
    pub dir: Option<PathBuf>,
}

/// Where to find a heap manager's shared library: a known name (through
/// the linker cache), else the path given.
pub fn allocator_library(name: &str) -> Option<PathBuf> {
    match name {
        "glibc" => None,
        n if allocators::package(n).is_some() => allocators::library(n),
        path => Some(PathBuf::from(path)),
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Profiler {
    None,
    MtlabInactive,
    Mtlab { unwind: &'static str, interval: u64 },
    JemallocProf { interval: u64 },
    TcmallocSample { interval: u64 },
}

impl Profiler {
    fn label(&self) -> String {
        match self {
            Profiler::None => "none".into(),
            Profiler::MtlabInactive => "mtlab inactive".into(),
            Profiler::Mtlab { unwind, .. } => format!("mtlab {unwind}"),
            Profiler::JemallocProf { .. } => "jemalloc prof".into(),
            Profiler::TcmallocSample { .. } => "tcmalloc sample".into(),
        }
    }
    fn interval(&self) -> Option<u64> {
        match self {
            Profiler::Mtlab { interval, .. } | Profiler::JemallocProf { interval } | Profiler::TcmallocSample { interval } => {
                Some(*interval)
            }
            _ => None,
        }
    }
}

/// One configuration of the sweep, before it becomes a named `Configuration`.
struct Planned {
    workload: &'static str,
    threads: u32,
    allocator: String,
    profiler: Profiler,
}

impl Planned {
    fn base_name(&self) -> String {
        format!("{} {}T {} none", self.workload, self.threads, self.allocator)
    }
    fn name(&self) -> String {
        let iv = self.profiler.interval().map(|i| format!(" {}", format_size(i))).unwrap_or_default();
        format!("{} {}T {} {}{iv}", self.workload, self.threads, self.allocator, self.profiler.label())
    }
    fn configuration(&self) -> Configuration {
        let mut c = Configuration::new(self.name())
            .param("workload", self.workload)
            .param("threads", self.threads)
            .param("allocator", &self.allocator)
            .param("profiler", self.profiler.label());
        if let Some(i) = self.profiler.interval() {
            c = c.param("interval", i);
        }
        if self.profiler != Profiler::None {
            c = c.baseline(self.base_name());
        }
        c
    }
}

fn plan(cfg: &ProfilerCostConfig) -> Vec<Planned> {
    let mut groups: Vec<(&'static str, u32)> = cfg.threads.iter().map(|&t| (MALLOC_TEST, t)).collect();
    if cfg.pipeline.is_some() {
        groups.push((PIPELINE, 1));
    }
    let mut v: Vec<Planned> = Vec::new();
    for (workload, threads) in groups {
        // `--allocator jemalloc` and jemalloc's own profiler share one baseline.
        let mut push = |allocator: &str, profiler: Profiler| {
            let p = Planned { workload, threads, allocator: allocator.to_string(), profiler };
            if !v.iter().any(|q| q.name() == p.name()) {
                v.push(p);
            }
        };
        for alloc in &cfg.allocators {
            push(alloc, Profiler::None);
            push(alloc, Profiler::MtlabInactive);
            for u in &cfg.unwinders {
                for &i in &cfg.intervals {
                    push(alloc, Profiler::Mtlab { unwind: u.name(), interval: i });
                }
            }
        }
        if cfg.jemalloc {
            push("jemalloc", Profiler::None);
            for &i in &cfg.intervals {
                push("jemalloc", Profiler::JemallocProf { interval: i });
            }
        }
        if cfg.tcmalloc {
            push("tcmalloc", Profiler::None);
            for &i in &cfg.intervals {
                push("tcmalloc", Profiler::TcmallocSample { interval: i });
            }
        }
    }
    v
}

struct Lab {
    mtlab: PathBuf,
    dir: PathBuf,
    malloc_test: PathBuf,
    pipeline: PathBuf,
}

impl Lab {
    fn workload_args(&self, workload: &str, cfg: &ProfilerCostConfig, threads: u32) -> Vec<OsString> {
        if workload == PIPELINE {
            let p = cfg.pipeline.clone().unwrap_or(Pipeline { messages: 40_000, rate: 20_000 });
            return vec![
                self.pipeline.clone().into(),
                "--messages".into(),
                p.messages.to_string().into(),
                "--rate".into(),
                p.rate.to_string().into(),
                "--warmup".into(),
                (p.messages / 10).to_string().into(),
            ];
        }
        let mut v: Vec<OsString> = vec![
            self.malloc_test.clone().into(),
            "--threads".into(),
            threads.to_string().into(),
            "--size".into(),
            cfg.size.to_string().into(),
            "--depth".into(),
            cfg.depth.to_string().into(),
            "--iterations".into(),
            cfg.iterations.to_string().into(),
            "--time-each".into(),
            "--pin".into(),
        ];
        if cfg.touch {
            v.push("--touch".into());
        }
        v
    }

    fn command(&self, p: &Planned, argv: &[OsString], trace: &Path) -> Result<Command, StudyError> {
        let lib = allocator_library(&p.allocator);
        if let Some(l) = lib.as_ref().filter(|l| !l.exists()) {
            return Err(StudyError::Config(format!("allocator library {} not found", l.display())));
        }
        let mut cmd = match &p.profiler {
            Profiler::MtlabInactive | Profiler::Mtlab { .. } => {
                let mut c = Command::new(&self.mtlab);
                c.arg("record").arg("-o").arg(trace);
                match &p.profiler {
                    Profiler::Mtlab { unwind, interval } => {
                        c.arg("--sample").arg(interval.to_string()).arg("--unwind").arg(unwind);
                    }
                    _ => {
                        c.arg("--sample").arg("512KiB").arg("--inactive");
                    }
                }
                c.arg("--").args(argv);
                c
            }
            _ => {
                let mut c = Command::new(&argv[0]);
                c.args(&argv[1..]);
                c
            }
        };
        cmd.env_remove("MALLOC_CONF").env_remove("TCMALLOC_SAMPLE_PARAMETER");
        match &lib {
            Some(l) => cmd.env("LD_PRELOAD", l),
            None => cmd.env_remove("LD_PRELOAD"),
        };
        match p.profiler {
            Profiler::JemallocProf { interval } => {
                let lg = 63 - interval.leading_zeros();
                cmd.env("MALLOC_CONF", format!("prof:true,prof_active:true,lg_prof_sample:{lg}"));
            }
            Profiler::TcmallocSample { interval } => {
                cmd.env("TCMALLOC_SAMPLE_PARAMETER", interval.to_string());
            }
            Profiler::None if p.allocator == "tcmalloc" => {
                cmd.env("TCMALLOC_SAMPLE_PARAMETER", "0");
            }
            _ => {}
        }
        Ok(cmd)
    }

    fn trial(&self, p: &Planned, cfg: &ProfilerCostConfig) -> Result<Vec<Sample>, StudyError> {
        let argv = self.workload_args(p.workload, cfg, p.threads);
        let trace = self.dir.join("bench-malloc.mtl");
        let what = p.name();
        let m = measure(self.command(p, &argv, &trace)?, &what)?;
        let mut out = Vec::new();
        if p.workload == MALLOC_TEST {
            let v = child::json_line(&m.stdout, "malloc-test")
                .ok_or_else(|| StudyError::Output(format!("{what}: no malloc-test result line")))?;
            let value = child::field(&v, &["malloc_trimmed_mean_cycles"], &what)?;
            let timer = child::field(&v, &["timer_overhead_cycles"], &what)?;
            out.push(Sample::cost("malloc_cycles", "cycles", value));
            out.push(Sample::cost("malloc_p50_cycles", "cycles", child::field(&v, &["malloc_p50_cycles"], &what)?));
            out.push(Sample::cost("malloc_p99_cycles", "cycles", child::field(&v, &["malloc_p99_cycles"], &what)?));
            out.push(Sample::cost("timer_cycles", "cycles", timer));
            // As the source paper timed it: the fenced TSC pair's cost left in.
            out.push(Sample::cost("malloc_cycles_timed", "cycles", value + timer));
        } else {
            let v = child::json_line(&m.stdout, "latency-pipeline")
                .ok_or_else(|| StudyError::Output(format!("{what}: no latency-pipeline result line")))?;
            out.push(Sample::cost("latency_ns", "ns", child::field(&v, &["latency_ns", "trimmed_mean"], &what)?));
            out.push(Sample::cost("latency_p50_ns", "ns", child::field(&v, &["latency_ns", "p50"], &what)?));
            out.push(Sample::cost("latency_p99_ns", "ns", child::field(&v, &["latency_ns", "p99"], &what)?));
        }
        if matches!(p.profiler, Profiler::Mtlab { .. }) {
            let (mut stacks, mut cycles) = (0u64, 0u64);
            for t in crate::platform::names::trace_family(&trace) {
                let Ok(tf) = crate::trace::TraceFile::open(&t) else { continue };
                let get = |k: &str| tf.stats.iter().find(|(key, _)| key == k).and_then(|(_, v)| v.parse::<u64>().ok());
                stacks += get(keys::STACKS_CAPTURED).unwrap_or(0);
                cycles += get(keys::UNWIND_CYCLES).unwrap_or(0);
            }
            out.push(Sample::gain("stacks_captured", "stacks", stacks as f64));
            out.push(Sample::cost("unwind_cycles", "cycles", cycles as f64));
        }
        Ok(out)
    }
}

/// The coverage curve joined to the sweep (stored in the run's details).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Coverage {
    pub workload: String,
    pub threads: u32,
    pub points: Vec<crate::profile::simulate::CoveragePoint>,
    pub recommended_interval: Option<u64>,
}

fn coverage(lab: &Lab, cfg: &ProfilerCostConfig, progress: &Progress) -> Result<Coverage, StudyError> {
    // The realistic workload has many call sites; malloc-test has one (coverage is trivially 100 %).
    let (workload, threads) = if cfg.pipeline.is_some() {
        (PIPELINE, 1)
    } else {
        (MALLOC_TEST, cfg.threads.iter().copied().min().unwrap_or(1))
    };
    let argv = lab.workload_args(workload, cfg, threads);
    let trace = lab.dir.join("coverage.mtl");
    let mut c = Command::new(&lab.mtlab);
    c.arg("record").arg("-o").arg(&trace).arg("--").args(&argv);
    progress.set_message(format!("full trace of {workload} for the coverage curve"));
    measure(c, "full trace for coverage")?;
    let tf = crate::trace::TraceFile::open(&trace)
        .map_err(|e| StudyError::Output(format!("reading the coverage trace: {e}")))?;
    let sim = crate::profile::simulate::simulate(
        &tf,
        &crate::profile::simulate::SimulateOptions { intervals: cfg.intervals.clone(), runs: 20, seed: 1 },
    )
    .map_err(|e| StudyError::Output(format!("simulating the sampler: {e}")))?;
    let recommended_interval = crate::profile::simulate::recommend(&sim.points, 0.9);
    Ok(Coverage { workload: workload.into(), threads, points: sim.points, recommended_interval })
}

/// Checks what cannot work before anything runs.
fn validate(cfg: &ProfilerCostConfig) -> Result<(), StudyError> {
    if cfg.unwinders.contains(&Unwind::Libunwind) && !crate::record::library_available("libunwind.so.8") {
        return Err(StudyError::Config("--unwinders libunwind: libunwind is not installed (apt-get install libunwind8)".into()));
    }
    if cfg.jemalloc {
        if let Some(bad) = cfg.intervals.iter().find(|i| !i.is_power_of_two()) {
            return Err(StudyError::Config(format!(
                "jemalloc's profiler samples at powers of two only (lg_prof_sample): {} is not one; use powers of two or --no-jemalloc",
                format_size(*bad)
            )));
        }
    }
    for a in &cfg.allocators {
        if a != "glibc" && allocator_library(a).is_none_or(|l| !l.exists()) {
            return Err(StudyError::Config(format!(
                "allocator `{a}` not found: install it (e.g. apt-get install {}) or give the path to its .so",
                allocators::package(a).unwrap_or("its package")
            )));
        }
        if let Some(l) = allocator_library(a) {
            allocators::preloadable(&l)?;
        }
    }
    if cfg.threads.is_empty() || cfg.threads.contains(&0) {
        return Err(StudyError::Config("--threads needs one or more thread counts above 0".into()));
    }
    Ok(())
}

pub fn run(cfg: &ProfilerCostConfig, progress: &Progress) -> Result<Run, StudyError> {
    let started = std::time::Instant::now();
    validate(cfg)?;
    let (dir, _tmp) = child::work_dir(cfg.dir.as_deref())?;
    let lab = Lab {
        mtlab: std::env::current_exe().map_err(|source| StudyError::Io { path: "mtlab".into(), source })?,
        dir,
        malloc_test: native::path(Part::MallocTest)?,
        pipeline: native::path(Part::LatencyPipeline)?,
    };
    let mut run = Run::new(STUDY, "what heap profilers cost");
    let s = &mut run.settings;
    s.insert("size".into(), cfg.size.to_string());
    s.insert("depth".into(), cfg.depth.to_string());
    s.insert("iterations".into(), cfg.iterations.to_string());
    s.insert("touch".into(), cfg.touch.to_string());
    s.insert("intervals".into(), cfg.intervals.iter().map(|i| format_size(*i)).collect::<Vec<_>>().join(","));
    s.insert("repetitions".into(), cfg.runner.reps.to_string());
    s.insert("warm-up".into(), cfg.runner.warmup.to_string());
    if let Some(p) = &cfg.pipeline {
        s.insert("pipeline".into(), format!("{} messages at {}/s", p.messages, p.rate));
    }
    let planned = plan(cfg);
    for p in &planned {
        if let Some(pkg) = allocators::package(&p.allocator) {
            if !run.environment.software.contains_key(&p.allocator) {
                if let Some(v) = crate::study::env::package_version(pkg) {
                    run.environment.software.insert(p.allocator.clone(), v);
                }
            }
        }
    }
    let configs: Vec<Configuration> = planned.iter().map(Planned::configuration).collect();
    progress.inc_length((cfg.runner.warmup + cfg.runner.reps) as u64 * configs.len() as u64);
    let by_name: BTreeMap<String, &Planned> = planned.iter().map(|p| (p.name(), p)).collect();
    runner::run_all(&mut run, &configs, &cfg.runner, progress, |c, _| lab.trial(by_name[&c.name], cfg))?;
    if cfg.coverage {
        let c = coverage(&lab, cfg, progress)?;
        run.details = serde_json::json!({ "coverage": c });
    }
    run.duration_s = started.elapsed().as_secs_f64();
    Ok(run)
}

/// The increase over the baseline, in percent, and its interval.
fn increase(run: &Run, c: &Configuration, metric: &str) -> Option<(f64, Option<(f64, f64)>)> {
    let base = c.baseline.as_deref().unwrap_or(&c.name);
    let r = summary::ratio(run, &c.name, metric, base, metric)?;
    Some(((r.ratio - 1.0) * 100.0, r.interval.map(|i| ((i.low - 1.0) * 100.0, (i.high - 1.0) * 100.0))))
}

fn interval_of(c: &Configuration) -> Option<u64> {
    c.get("interval").and_then(|v| v.parse().ok())
}

/// The source paper's table: one row per (profiler, allocator, threads), one
/// column per interval; `metric` strict or with the timer left in.
fn paper_table(run: &Run, workload: &str, metric: &str, intervals: &[u64], name: &str, title: String) -> Table {
    let mut columns = vec!["profiler".to_string(), "allocator".into(), "threads".into(), "baseline".into(), "inactive".into()];
    columns.extend(intervals.iter().map(|&i| format_size(i)));
    let cols: Vec<&str> = columns.iter().map(String::as_str).collect();
    let mut t = Table::new(name, title, &cols, 2);
    let mut groups: BTreeMap<(String, String, u32), Vec<&Configuration>> = BTreeMap::new();
    for c in run.configurations.iter().filter(|c| c.get("workload") == Some(workload)) {
        let profiler = c.get("profiler").unwrap_or("");
        if profiler == "none" {
            continue;
        }
        let label = if profiler == "mtlab inactive" { "mtlab fp" } else { profiler };
        let threads = c.get("threads").and_then(|t| t.parse().ok()).unwrap_or(1);
        groups.entry((label.to_string(), c.get("allocator").unwrap_or("").to_string(), threads)).or_default().push(c);
    }
    for ((label, alloc, threads), cs) in groups {
        let pct = |c: &Configuration| Cell::pct(increase(run, c, metric).map(|i| i.0));
        let base = cs.first().and_then(|c| c.baseline.as_deref()).and_then(|b| summary::median(run, b, metric));
        let inactive = cs.iter().find(|c| c.get("profiler") == Some("mtlab inactive")).map(|c| pct(c)).unwrap_or(Cell::Empty);
        let mut row = vec![Cell::text(label), Cell::text(alloc), Cell::Int(threads as i64), Cell::num(base, 1), inactive];
        for &i in intervals {
            row.push(cs.iter().find(|c| interval_of(c) == Some(i)).map(|c| pct(c)).unwrap_or(Cell::Empty));
        }
        t.push(row);
    }
    t
}

fn intervals_of(run: &Run) -> Vec<u64> {
    let mut v: Vec<u64> = run.configurations.iter().filter_map(interval_of).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Stack capture cost per sample, by unwinder (median over configurations and rounds).
fn unwind_table(run: &Run, workload: &str) -> Option<Table> {
    let mut per: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for c in run.configurations.iter().filter(|c| c.get("workload") == Some(workload)) {
        let (Some(s), Some(u)) = (run.measurement(&c.name, "stacks_captured"), run.measurement(&c.name, "unwind_cycles")) else {
            continue;
        };
        let label = c.get("profiler").unwrap_or("").to_string();
        per.entry(label).or_default().extend(s.values.iter().zip(&u.values).filter(|(s, _)| **s > 0.0).map(|(s, u)| u / s));
    }
    if per.is_empty() {
        return None;
    }
    let fp = per.get("mtlab fp").map(|v| stats::median(v));
    let mut t = Table::new(
        &format!("{workload}-unwind"),
        "stack capture cost per sample (median over configurations and rounds; fp includes samples the per-thread memo of the last walk answered)",
        &["unwinder", "cycles per stack", "× fp"],
        1,
    );
    for (label, v) in per {
        let m = stats::median(&v);
        t.push(vec![Cell::text(label), Cell::Num(m, 0), fp.map(|f| Cell::Ratio(m / f)).unwrap_or(Cell::Empty)]);
    }
    Some(t)
}

/// Increase vs interval, one curve per (profiler, allocator, threads), with the ratio's interval.
fn overhead_plot(run: &Run, workload: &str, metric: &str, what: &str) -> Option<Plot> {
    let mut curves: BTreeMap<String, Vec<Point>> = BTreeMap::new();
    for c in run.configurations.iter().filter(|c| c.get("workload") == Some(workload)) {
        let (Some(i), Some((v, ci))) = (interval_of(c), increase(run, c, metric)) else { continue };
        let name = format!("{} ({}, {} thr)", c.get("profiler").unwrap_or(""), c.get("allocator").unwrap_or(""), c.get("threads").unwrap_or("1"));
        curves.entry(name).or_default().push(Point { x: i as f64, y: v, low: ci.map(|c| c.0), high: ci.map(|c| c.1) });
    }
    if curves.is_empty() {
        return None;
    }
    let series = curves
        .into_iter()
        .map(|(name, mut points)| {
            points.sort_by(|a, b| a.x.total_cmp(&b.x));
            Series { name, points }
        })
        .collect();
    Some(Plot {
        name: format!("bench-malloc-{workload}"),
        title: format!("{workload}: % increase of {what}"),
        x_label: "sampling interval".into(),
        y_label: "% increase over no profiler (median; whisker: its interval)".into(),
        kind: PlotKind::Line { x_scale: Scale::Log2Bytes, series },
    })
}

fn coverage_views(run: &Run) -> Vec<View> {
    let Some(c) = run.details.get("coverage").and_then(|v| serde_json::from_value::<Coverage>(v.clone()).ok()) else {
        return Vec::new();
    };
    let mut t = Table::new(
        "coverage",
        format!("coverage of the profile by interval ({}, simulated on a full trace, 20 runs each)", c.workload),
        &["interval", "coverage mean", "sd", "min"],
        1,
    );
    for p in &c.points {
        t.push(vec![
            Cell::text(format_size(p.interval)),
            Cell::Num(p.coverage_mean * 100.0, 1),
            Cell::Num(p.coverage_stddev * 100.0, 1),
            Cell::Num(p.coverage_min * 100.0, 1),
        ]);
    }
    let metric = if c.workload == PIPELINE { "latency_ns" } else { "malloc_cycles" };
    // mtlab's overhead in the configuration the coverage trace ran: fp on glibc.
    let overhead = c.recommended_interval.and_then(|i| {
        run.configurations
            .iter()
            .find(|k| {
                k.get("workload") == Some(c.workload.as_str())
                    && interval_of(k) == Some(i)
                    && k.get("profiler") == Some("mtlab fp")
                    && k.get("allocator") == Some("glibc")
                    && k.get("threads") == Some(c.threads.to_string().as_str())
            })
            .and_then(|k| increase(run, k, metric))
            .map(|x| x.0)
    });
    let note = match (c.recommended_interval, overhead) {
        (Some(i), Some(o)) => format!(
            "recommended interval: {} — the largest whose mean coverage stays >= 90 %; mtlab's overhead there: {o:+.1} %",
            format_size(i)
        ),
        (Some(i), None) => format!("recommended interval: {} (largest with coverage >= 90 %)", format_size(i)),
        (None, _) => "no interval reaches 90 % coverage: sample more often".into(),
    };
    vec![View::Table(t), View::Note(note)]
}

pub fn views(run: &Run) -> Vec<View> {
    let intervals = intervals_of(run);
    let mut v = Vec::new();
    let has = |w: &str| run.configurations.iter().any(|c| c.get("workload") == Some(w));
    if has(MALLOC_TEST) {
        v.push(View::Table(paper_table(
            run,
            MALLOC_TEST,
            "malloc_cycles",
            &intervals,
            "malloc-test",
            "malloc-test: increase of mean malloc cycles (99.99 %-trimmed) over the same allocator without a profiler".into(),
        )));
        let timer = run.measurements.iter().find(|m| m.metric == "timer_cycles").map(|m| stats::median(&m.values));
        v.push(View::Table(paper_table(
            run,
            MALLOC_TEST,
            "malloc_cycles_timed",
            &intervals,
            "malloc-test-timed",
            format!(
                "the same, as the source paper timed it: each call's fenced TSC pair{} left in the time",
                timer.map(|t| format!(" ({t:.0} cycles here)")).unwrap_or_default()
            ),
        )));
        v.extend(unwind_table(run, MALLOC_TEST).map(View::Table));
        v.extend(overhead_plot(run, MALLOC_TEST, "malloc_cycles", "mean malloc cycles").map(View::Plot));
    }
    if has(PIPELINE) {
        v.push(View::Table(paper_table(
            run,
            PIPELINE,
            "latency_ns",
            &intervals,
            "pipeline",
            "latency pipeline: increase of mean tick-to-trade latency (slowest 1 % trimmed) over the same allocator without a profiler".into(),
        )));
        v.extend(unwind_table(run, PIPELINE).map(View::Table));
        v.extend(overhead_plot(run, PIPELINE, "latency_ns", "mean tick-to-trade latency (1 % trimmed)").map(View::Plot));
    }
    v.extend(coverage_views(run));
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::Measurement;

    fn m(config: &str, metric: &str, values: &[f64]) -> Measurement {
        Measurement { configuration: config.into(), metric: metric.into(), unit: "cycles".into(), lower_is_better: true, values: values.to_vec() }
    }

    #[test]
    fn an_allocator_swept_for_mtlab_and_for_its_own_profiler_has_one_baseline() {
        let cfg = ProfilerCostConfig {
            threads: vec![1],
            size: 512,
            depth: 10,
            iterations: 10,
            touch: false,
            intervals: vec![65536],
            unwinders: vec![Unwind::Fp],
            allocators: vec!["glibc".into(), "jemalloc".into()],
            jemalloc: true,
            tcmalloc: false,
            pipeline: None,
            coverage: false,
            runner: RunnerOptions::default(),
            dir: None,
        };
        let names: Vec<String> = plan(&cfg).iter().map(Planned::name).collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        assert_eq!(names.iter().filter(|n| *n == "malloc-test 1T jemalloc none").count(), 1);
        assert!(names.contains(&"malloc-test 1T jemalloc jemalloc prof 64KiB".to_string()));
        assert!(names.contains(&"malloc-test 1T jemalloc mtlab fp 64KiB".to_string()));
    }

    #[test]
    fn increases_are_per_round_medians_with_and_without_the_timer() {
        let base = Planned { workload: MALLOC_TEST, threads: 1, allocator: "glibc".into(), profiler: Profiler::None };
        let prof = Planned { profiler: Profiler::Mtlab { unwind: "fp", interval: 65536 }, ..Planned { workload: MALLOC_TEST, threads: 1, allocator: "glibc".into(), profiler: Profiler::None } };
        let mut run = Run::new(STUDY, "t");
        run.configurations = vec![base.configuration(), prof.configuration()];
        // Timer 60 cycles; the profiled call costs 20 → 25, 10 → 12, 20 → 30.
        run.measurements = vec![
            m(&base.name(), "malloc_cycles", &[20.0, 10.0, 20.0]),
            m(&base.name(), "malloc_cycles_timed", &[80.0, 70.0, 80.0]),
            m(&prof.name(), "malloc_cycles", &[25.0, 12.0, 30.0]),
            m(&prof.name(), "malloc_cycles_timed", &[85.0, 72.0, 90.0]),
        ];
        let c = &run.configurations[1];
        assert_eq!(c.baseline.as_deref(), Some("malloc-test 1T glibc none"));
        // Strict ratios 1.25, 1.2, 1.5: median 1.25.
        assert!((increase(&run, c, "malloc_cycles").unwrap().0 - 25.0).abs() < 1e-9);
        // Timed ratios 85/80, 72/70, 90/80: median 85/80.
        assert!((increase(&run, c, "malloc_cycles_timed").unwrap().0 - 6.25).abs() < 1e-9);
        let t = paper_table(&run, MALLOC_TEST, "malloc_cycles", &[65536], "x", String::new());
        assert_eq!(t.rows.len(), 1);
        assert_eq!(t.rows[0][0], Cell::text("mtlab fp"));
        assert_eq!(t.rows[0][3], Cell::Num(20.0, 1));
        assert!(matches!(t.rows[0][5], Cell::Pct(p) if (p - 25.0).abs() < 1e-9));
    }
}
