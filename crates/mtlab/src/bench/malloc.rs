//! `mtlab bench malloc`: what a heap profiler costs (source 000/001).
//!
//! Runs the malloc-test workload (and, with --pipeline, the latency
//! pipeline) under every profiler configuration — none, mtlab's sampler
//! inactive and at each interval with each unwinder, jemalloc's profiler,
//! tcmalloc's sampler — interleaved over repetitions. Each configuration is
//! compared with the same repetition's run of its own allocator without a
//! profiler, so drift of a shared machine cancels out of the ratios.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Args;
use serde::Serialize;

use super::{measure, median, BenchError};
use crate::native::{self, Part};
use crate::record::Unwind;
use crate::units::{format_size, parse_size};

fn size_arg(s: &str) -> Result<u64, String> {
    parse_size(s).map_err(|e| e.to_string())
}

#[derive(Args, Debug, Clone)]
pub struct MallocArgs {
    /// Thread counts to run, e.g. 1,2.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub threads: Vec<u32>,
    /// Block size of the malloc-test workload.
    #[arg(long, default_value = "512", value_parser = size_arg)]
    pub size: u64,
    /// Call depth at which malloc is called.
    #[arg(long, default_value_t = 10)]
    pub depth: u32,
    /// malloc/free pairs per thread.
    #[arg(long, default_value_t = 3_000_000)]
    pub iterations: u64,
    /// Touch (write) every block, as a real program would.
    #[arg(long)]
    pub touch: bool,
    /// Sampling intervals to sweep.
    #[arg(long, value_delimiter = ',', default_value = "64KiB,128KiB,256KiB,512KiB,1MiB,2MiB", value_parser = size_arg)]
    pub intervals: Vec<u64>,
    /// mtlab unwinders to sweep (fp, libgcc, libunwind).
    #[arg(long, value_delimiter = ',', default_value = "fp,libgcc")]
    pub unwinders: Vec<Unwind>,
    /// Repetitions of every configuration.
    #[arg(long, default_value_t = 3)]
    pub reps: u32,
    /// Allocators for mtlab's configurations: glibc, jemalloc, tcmalloc, mimalloc or a path to a .so.
    #[arg(long = "allocator", default_value = "glibc")]
    pub allocators: Vec<String>,
    /// Leave out jemalloc's profiler even if libjemalloc is installed.
    #[arg(long)]
    pub no_jemalloc: bool,
    /// Leave out tcmalloc's sampler even if libtcmalloc is installed.
    #[arg(long)]
    pub no_tcmalloc: bool,
    /// Also run the latency pipeline under the same configurations.
    #[arg(long)]
    pub pipeline: bool,
    /// Messages per pipeline run.
    #[arg(long, default_value_t = 40_000)]
    pub pipeline_messages: u64,
    /// Pipeline messages per second (its three stages share this machine's cores).
    #[arg(long, default_value_t = 20_000)]
    pub pipeline_rate: u64,
    /// Join with the coverage curve (mtlab profile simulate on a full trace of
    /// the realistic workload) and recommend an interval.
    #[arg(long)]
    pub coverage: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Write the results as CSV files into DIR.
    #[arg(long, value_name = "DIR")]
    pub csv: Option<PathBuf>,
    /// Write the overhead curves as an SVG plot.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Directory for traces (default: a temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// Where to find a heap manager's shared library.
pub fn allocator_library(name: &str) -> Option<PathBuf> {
    let file = match name {
        "glibc" => return None,
        "jemalloc" => "libjemalloc.so.2",
        "tcmalloc" => "libtcmalloc.so.4",
        "tcmalloc-minimal" => "libtcmalloc_minimal.so.4",
        "mimalloc" => "libmimalloc.so.2",
        path => return Some(PathBuf::from(path)),
    };
    ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib"]
        .iter()
        .map(|d| Path::new(d).join(file))
        .find(|p| p.exists())
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Profiler {
    None,
    MtlabInactive,
    Mtlab { unwind: String, interval: u64 },
    JemallocProf { interval: u64 },
    TcmallocSample { interval: u64 },
}

impl Profiler {
    pub fn label(&self) -> String {
        match self {
            Profiler::None => "none".into(),
            Profiler::MtlabInactive => "mtlab inactive".into(),
            Profiler::Mtlab { unwind, .. } => format!("mtlab {unwind}"),
            Profiler::JemallocProf { .. } => "jemalloc prof".into(),
            Profiler::TcmallocSample { .. } => "tcmalloc sample".into(),
        }
    }
    pub fn interval(&self) -> Option<u64> {
        match self {
            Profiler::Mtlab { interval, .. } | Profiler::JemallocProf { interval } | Profiler::TcmallocSample { interval } => {
                Some(*interval)
            }
            _ => None,
        }
    }
}

/// One configuration: a heap manager, a profiler, and the baseline it is compared with.
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    pub allocator: String,
    pub profiler: Profiler,
    /// Index of the configuration this one is compared with (itself for baselines).
    pub baseline: usize,
}

fn configs(a: &MallocArgs) -> Vec<Config> {
    let mut v = Vec::new();
    let push = |v: &mut Vec<Config>, allocator: &str, profiler: Profiler, baseline: usize| {
        v.push(Config { allocator: allocator.to_string(), profiler, baseline });
        v.len() - 1
    };
    for alloc in &a.allocators {
        let base = v.len();
        push(&mut v, alloc, Profiler::None, base);
        push(&mut v, alloc, Profiler::MtlabInactive, base);
        for u in &a.unwinders {
            for &i in &a.intervals {
                push(&mut v, alloc, Profiler::Mtlab { unwind: u.name().into(), interval: i }, base);
            }
        }
    }
    if !a.no_jemalloc && allocator_library("jemalloc").is_some() {
        let base = v.len();
        push(&mut v, "jemalloc", Profiler::None, base);
        for &i in &a.intervals {
            push(&mut v, "jemalloc", Profiler::JemallocProf { interval: i }, base);
        }
    }
    if !a.no_tcmalloc && allocator_library("tcmalloc").is_some() {
        let base = v.len();
        push(&mut v, "tcmalloc", Profiler::None, base);
        for &i in &a.intervals {
            push(&mut v, "tcmalloc", Profiler::TcmallocSample { interval: i }, base);
        }
    }
    v
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Workload {
    MallocTest,
    Pipeline,
}

/// Numbers from one run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunMetrics {
    /// The compared figure: trimmed mean malloc cycles, or mean latency in ns.
    pub value: f64,
    pub p50: f64,
    pub p99: f64,
    /// Cycles per captured stack, from the trace's STATS (mtlab runs only).
    pub cycles_per_stack: Option<f64>,
    pub samples: Option<u64>,
    /// malloc-test: the fenced TSC pair's own cost, taken off `value`.
    pub timer: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConfigResult {
    pub workload: Workload,
    pub threads: u32,
    pub config: Config,
    pub label: String,
    pub interval: Option<u64>,
    /// Median of the runs' values.
    pub value: f64,
    pub p50: f64,
    pub p99: f64,
    /// Median, min and max over repetitions of value / baseline's value (same repetition).
    pub ratio: f64,
    pub ratio_min: f64,
    pub ratio_max: f64,
    pub increase_pct: f64,
    /// malloc-test: the increase with the timer's own cost left in each
    /// timed call, as the source paper measured t (median over repetitions).
    pub increase_pct_timed: Option<f64>,
    /// malloc-test: median cost of the fenced TSC pair around each call.
    pub timer_cycles: Option<f64>,
    /// malloc-test: median of the runs' values with the timer left in.
    pub value_timed: Option<f64>,
    pub cycles_per_stack: Option<f64>,
    pub runs: Vec<f64>,
}

struct Runner {
    mtlab: PathBuf,
    dir: PathBuf,
    malloc_test: PathBuf,
    pipeline: PathBuf,
}

fn json_line(stdout: &str, workload: &str) -> Option<serde_json::Value> {
    stdout
        .lines()
        .filter(|l| l.starts_with("{\"workload\""))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["workload"] == workload)
}

impl Runner {
    fn workload_args(&self, w: Workload, a: &MallocArgs, threads: u32) -> Vec<OsString> {
        match w {
            Workload::MallocTest => {
                let mut v: Vec<OsString> = vec![
                    self.malloc_test.clone().into(),
                    "--threads".into(),
                    threads.to_string().into(),
                    "--size".into(),
                    a.size.to_string().into(),
                    "--depth".into(),
                    a.depth.to_string().into(),
                    "--iterations".into(),
                    a.iterations.to_string().into(),
                    "--time-each".into(),
                    "--pin".into(),
                ];
                if a.touch {
                    v.push("--touch".into());
                }
                v
            }
            Workload::Pipeline => vec![
                self.pipeline.clone().into(),
                "--messages".into(),
                a.pipeline_messages.to_string().into(),
                "--rate".into(),
                a.pipeline_rate.to_string().into(),
                "--warmup".into(),
                (a.pipeline_messages / 10).to_string().into(),
            ],
        }
    }

    fn command(&self, cfg: &Config, argv: &[OsString], trace: &Path) -> Result<Command, BenchError> {
        let lib = allocator_library(&cfg.allocator);
        if lib.as_ref().is_some_and(|l| !l.exists()) {
            return Err(BenchError::Output(format!("allocator library {} not found", lib.unwrap().display())));
        }
        let mut cmd = match &cfg.profiler {
            Profiler::MtlabInactive | Profiler::Mtlab { .. } => {
                let mut c = Command::new(&self.mtlab);
                c.arg("record").arg("-o").arg(trace);
                match &cfg.profiler {
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
        match cfg.profiler {
            Profiler::JemallocProf { interval } => {
                let lg = 63 - interval.leading_zeros();
                cmd.env("MALLOC_CONF", format!("prof:true,prof_active:true,lg_prof_sample:{lg}"));
            }
            Profiler::TcmallocSample { interval } => {
                cmd.env("TCMALLOC_SAMPLE_PARAMETER", interval.to_string());
            }
            Profiler::None if cfg.allocator == "tcmalloc" => {
                cmd.env("TCMALLOC_SAMPLE_PARAMETER", "0");
            }
            _ => {}
        }
        Ok(cmd)
    }

    fn run(&self, w: Workload, cfg: &Config, a: &MallocArgs, threads: u32) -> Result<RunMetrics, BenchError> {
        let argv = self.workload_args(w, a, threads);
        let trace = self.dir.join("bench-malloc.mtl");
        let cmd = self.command(cfg, &argv, &trace)?;
        let what = format!("{} / {}", cfg.allocator, cfg.profiler.label());
        let m = measure(cmd, &what)?;
        let mut out = match w {
            Workload::MallocTest => {
                let v = json_line(&m.stdout, "malloc-test")
                    .ok_or_else(|| BenchError::Output(format!("{what}: no malloc-test result line")))?;
                RunMetrics {
                    value: v["malloc_trimmed_mean_cycles"].as_f64().unwrap_or(f64::NAN),
                    p50: v["malloc_p50_cycles"].as_f64().unwrap_or(f64::NAN),
                    p99: v["malloc_p99_cycles"].as_f64().unwrap_or(f64::NAN),
                    timer: v["timer_overhead_cycles"].as_f64(),
                    ..Default::default()
                }
            }
            Workload::Pipeline => {
                let v = json_line(&m.stdout, "latency-pipeline")
                    .ok_or_else(|| BenchError::Output(format!("{what}: no latency-pipeline result line")))?;
                let l = &v["latency_ns"];
                RunMetrics {
                    value: l["trimmed_mean"].as_f64().unwrap_or(f64::NAN),
                    p50: l["p50"].as_f64().unwrap_or(f64::NAN),
                    p99: l["p99"].as_f64().unwrap_or(f64::NAN),
                    ..Default::default()
                }
            }
        };
        if matches!(cfg.profiler, Profiler::Mtlab { .. }) {
            for t in crate::record::trace_family(&trace) {
                let Ok(tf) = crate::trace::TraceFile::open(&t) else { continue };
                let get = |k: &str| tf.stats.iter().find(|(key, _)| key == k).and_then(|(_, v)| v.parse::<u64>().ok());
                if let (Some(n), Some(c)) = (get("stacks_captured"), get("unwind_cycles")) {
                    if n > 0 {
                        out.cycles_per_stack = Some(c as f64 / n as f64);
                        out.samples = Some(n);
                    }
                }
            }
        }
        Ok(out)
    }
}

fn summarize(
    w: Workload,
    threads: u32,
    cfgs: &[Config],
    runs: &[Vec<RunMetrics>], // [config][rep]
) -> Vec<ConfigResult> {
    cfgs.iter()
        .enumerate()
        .map(|(i, c)| {
            let mine = &runs[i];
            let base = &runs[c.baseline];
            let mut ratios: Vec<f64> = mine.iter().zip(base).map(|(m, b)| m.value / b.value).collect();
            let mut values: Vec<f64> = mine.iter().map(|m| m.value).collect();
            let mut p50s: Vec<f64> = mine.iter().map(|m| m.p50).collect();
            let mut p99s: Vec<f64> = mine.iter().map(|m| m.p99).collect();
            let mut cps: Vec<f64> = mine.iter().filter_map(|m| m.cycles_per_stack).collect();
            let ratio = median(&mut ratios);
            // With the timer left in; None unless every run (and its baseline) has one.
            let with_timer = |runs: &[RunMetrics]| -> Option<Vec<f64>> {
                let v: Option<Vec<f64>> = runs.iter().map(|m| Some(m.value + m.timer?)).collect();
                v.filter(|v| !v.is_empty())
            };
            let (mine_timed, base_timed) = (with_timer(mine), with_timer(base));
            let increase_pct_timed = mine_timed.as_ref().zip(base_timed.as_ref()).map(|(m, b)| {
                let mut ratios: Vec<f64> = m.iter().zip(b).map(|(m, b)| m / b).collect();
                (median(&mut ratios) - 1.0) * 100.0
            });
            ConfigResult {
                workload: w,
                threads,
                config: c.clone(),
                label: c.profiler.label(),
                interval: c.profiler.interval(),
                value: median(&mut values),
                p50: median(&mut p50s),
                p99: median(&mut p99s),
                ratio,
                ratio_min: ratios.iter().cloned().fold(f64::INFINITY, f64::min),
                ratio_max: ratios.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
                increase_pct: (ratio - 1.0) * 100.0,
                increase_pct_timed,
                timer_cycles: {
                    let mut t: Vec<f64> = mine.iter().filter_map(|m| m.timer).collect();
                    (!t.is_empty()).then(|| median(&mut t))
                },
                value_timed: mine_timed.map(|mut t| median(&mut t)),
                cycles_per_stack: (!cps.is_empty()).then(|| median(&mut cps)),
                runs: values,
            }
        })
        .collect()
}

#[derive(Debug, Serialize)]
pub struct CoverageResult {
    pub workload: Workload,
    pub points: Vec<crate::profile::simulate::CoveragePoint>,
    pub recommended_interval: Option<u64>,
    pub overhead_at_recommended_pct: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct MallocBenchResult {
    pub results: Vec<ConfigResult>,
    pub coverage: Option<CoverageResult>,
}

fn sweep(runner: &Runner, a: &MallocArgs, w: Workload, cfgs: &[Config], threads: u32) -> Result<Vec<ConfigResult>, BenchError> {
    let mut runs: Vec<Vec<RunMetrics>> = vec![Vec::new(); cfgs.len()];
    let total = a.reps as usize * cfgs.len();
    for rep in 0..a.reps {
        for (i, c) in cfgs.iter().enumerate() {
            let done = rep as usize * cfgs.len() + i + 1;
            eprint!(
                "\rmtlab bench malloc: {:?} {threads} thread(s): run {done}/{total}: {:<14} {:<16} {:<8}",
                w,
                c.allocator,
                c.profiler.label(),
                c.profiler.interval().map(format_size).unwrap_or_default()
            );
            runs[i].push(runner.run(w, c, a, threads)?);
        }
    }
    eprintln!();
    Ok(summarize(w, threads, cfgs, &runs))
}

fn coverage(runner: &Runner, a: &MallocArgs, results: &[ConfigResult]) -> Result<CoverageResult, BenchError> {
    // The realistic workload has many call sites; malloc-test has one (coverage is trivially 100 %).
    let (w, argv) = if a.pipeline {
        (Workload::Pipeline, runner.workload_args(Workload::Pipeline, a, 1))
    } else {
        (Workload::MallocTest, runner.workload_args(Workload::MallocTest, a, 1))
    };
    let trace = runner.dir.join("coverage.mtl");
    let mut c = Command::new(&runner.mtlab);
    c.arg("record").arg("-o").arg(&trace).arg("--").args(&argv);
    eprintln!("mtlab bench malloc: full trace of {w:?} for the coverage curve");
    measure(c, "full trace for coverage")?;
    let tf = crate::trace::TraceFile::open(&trace)
        .map_err(|e| BenchError::Output(format!("reading the coverage trace: {e}")))?;
    let sim = crate::profile::simulate::simulate(
        &tf,
        &crate::profile::simulate::SimulateOptions { intervals: a.intervals.clone(), runs: 20, seed: 1 },
    )
    .map_err(|e| BenchError::Output(format!("simulating the sampler: {e}")))?;
    let rec = crate::profile::simulate::recommend(&sim.points, 0.9);
    // The overhead of the configuration the coverage trace ran: mtlab fp on
    // glibc, and for malloc-test the fewest threads swept.
    let threads = if w == Workload::Pipeline { 1 } else { a.threads.iter().copied().min().unwrap_or(1) };
    let overhead = rec.and_then(|i| {
        results
            .iter()
            .filter(|r| {
                r.workload == w
                    && r.interval == Some(i)
                    && r.label == "mtlab fp"
                    && r.config.allocator == "glibc"
                    && r.threads == threads
            })
            .map(|r| r.increase_pct)
            .next()
    });
    Ok(CoverageResult { workload: w, points: sim.points, recommended_interval: rec, overhead_at_recommended_pct: overhead })
}

pub fn run(a: MallocArgs) -> Result<MallocBenchResult, BenchError> {
    let (dir, _tmp) = super::work_dir(a.dir.clone())?;
    let runner = Runner {
        mtlab: std::env::current_exe().map_err(|source| BenchError::Io { path: "mtlab".into(), source })?,
        dir,
        malloc_test: native::path(Part::MallocTest)?,
        pipeline: native::path(Part::LatencyPipeline)?,
    };
    if a.unwinders.contains(&Unwind::Libunwind) && !crate::record::library_available("libunwind.so.8") {
        return Err(BenchError::Output("--unwinders libunwind: libunwind is not installed (apt-get install libunwind8)".into()));
    }
    if !a.no_jemalloc && allocator_library("jemalloc").is_some() {
        if let Some(bad) = a.intervals.iter().find(|i| !i.is_power_of_two()) {
            return Err(BenchError::Output(format!(
                "jemalloc's profiler samples at powers of two only (lg_prof_sample): {} is not one; use powers of two or --no-jemalloc",
                format_size(*bad)
            )));
        }
    }
    let cfgs = configs(&a);
    let mut results = Vec::new();
    for &t in &a.threads {
        results.extend(sweep(&runner, &a, Workload::MallocTest, &cfgs, t)?);
    }
    if a.pipeline {
        results.extend(sweep(&runner, &a, Workload::Pipeline, &cfgs, 1)?);
    }
    let coverage = if a.coverage { Some(coverage(&runner, &a, &results)?) } else { None };
    Ok(MallocBenchResult { results, coverage })
}

/// The source paper's table for one workload: one row per (profiler,
/// allocator, threads), one column per interval. `timed`: the increases
/// and the baseline with the timer's own cost left in.
fn paper_table(rows: &[&ConfigResult], intervals: &[u64], timed: bool) -> comfy_table::Table {
    let cell = |c: &ConfigResult| if timed { c.increase_pct_timed } else { Some(c.increase_pct) };
    let mut t = comfy_table::Table::new();
    t.load_style(comfy_table::presets::UTF8_FULL_CONDENSED);
    let mut header = vec!["profiler".to_string(), "allocator".into(), "threads".into(), "baseline".into(), "inactive".into()];
    header.extend(intervals.iter().map(|&i| format_size(i)));
    t.set_header(header);
    let mut groups: BTreeMap<(String, String, u32), Vec<&ConfigResult>> = BTreeMap::new();
    for c in rows {
        if matches!(c.config.profiler, Profiler::None) {
            continue;
        }
        let label = if matches!(c.config.profiler, Profiler::MtlabInactive) { "mtlab fp".to_string() } else { c.label.clone() };
        groups.entry((label, c.config.allocator.clone(), c.threads)).or_default().push(c);
    }
    let text = |c: &ConfigResult| cell(c).map(|v| format!("{v:+.0} %")).unwrap_or_default();
    for ((label, alloc, threads), cs) in groups {
        let base = rows
            .iter()
            .find(|b| b.threads == threads && matches!(b.config.profiler, Profiler::None) && b.config.allocator == alloc)
            .and_then(|b| if timed { b.value_timed } else { Some(b.value) })
            .map(|v| format!("{v:.1}"))
            .unwrap_or_default();
        let inactive = cs.iter().find(|c| matches!(c.config.profiler, Profiler::MtlabInactive)).map(|c| text(c)).unwrap_or_default();
        let mut row = vec![label, alloc, threads.to_string(), base, inactive];
        for &i in intervals {
            row.push(cs.iter().find(|c| c.interval == Some(i)).map(|c| text(c)).unwrap_or_default());
        }
        t.add_row(row);
    }
    t
}

/// The source paper's table: one row per (profiler, threads), one column per interval.
pub fn render(r: &MallocBenchResult, intervals: &[u64]) -> String {
    let mut out = String::new();
    for w in [Workload::MallocTest, Workload::Pipeline] {
        let rows: Vec<&ConfigResult> = r.results.iter().filter(|c| c.workload == w).collect();
        if rows.is_empty() {
            continue;
        }
        let what = match w {
            Workload::MallocTest => "malloc-test: increase of mean malloc cycles (99.99 %-trimmed) over the same allocator without a profiler",
            Workload::Pipeline => "latency pipeline: increase of mean tick-to-trade latency (slowest 1 % trimmed) over the same allocator without a profiler",
        };
        out.push_str(&format!("{what}\n"));
        out.push_str(&format!("{}\n", paper_table(&rows, intervals, false)));
        if w == Workload::MallocTest && rows.iter().any(|c| c.increase_pct_timed.is_some()) {
            let timer = rows.iter().filter_map(|c| c.timer_cycles).next().map(|t| format!(" ({t:.0} cycles here)")).unwrap_or_default();
            out.push_str(&format!(
                "the same, as the source paper timed it: each call's fenced TSC pair{timer} left in the time\n"
            ));
            out.push_str(&format!("{}\n", paper_table(&rows, intervals, true)));
        }
        let unw: Vec<&ConfigResult> = rows.iter().copied().filter(|c| c.cycles_per_stack.is_some()).collect();
        if !unw.is_empty() {
            let mut per: BTreeMap<String, Vec<f64>> = BTreeMap::new();
            for c in unw {
                per.entry(c.label.clone()).or_default().push(c.cycles_per_stack.unwrap());
            }
            let fp = per.get("mtlab fp").map(|v| median(&mut v.clone()));
            out.push_str(
                "stack capture cost per sample (median over configurations; fp includes samples whose stack the per-thread memo of the last walk answered):\n",
            );
            for (label, mut v) in per {
                let m = median(&mut v);
                let vs = fp.map(|f| format!(" ({:.1}× fp)", m / f)).unwrap_or_default();
                out.push_str(&format!("  {label}: {m:.0} cycles per stack{vs}\n"));
            }
        }
        out.push('\n');
    }
    if let Some(c) = &r.coverage {
        out.push_str(&format!("coverage of the profile by interval ({:?}, simulated on a full trace, 20 runs each):\n", c.workload));
        for p in &c.points {
            out.push_str(&format!(
                "  {:>7}: {:.1} % ± {:.1} (min {:.1} %)\n",
                format_size(p.interval),
                p.coverage_mean * 100.0,
                p.coverage_stddev * 100.0,
                p.coverage_min * 100.0
            ));
        }
        match (c.recommended_interval, c.overhead_at_recommended_pct) {
            (Some(i), Some(o)) => out.push_str(&format!(
                "recommended interval: {} — the largest whose mean coverage stays >= 90 %; mtlab's overhead there: {o:+.1} %\n",
                format_size(i)
            )),
            (Some(i), None) => out.push_str(&format!("recommended interval: {} (largest with coverage >= 90 %)\n", format_size(i))),
            (None, _) => out.push_str("no interval reaches 90 % coverage: sample more often\n"),
        }
    }
    out
}

/// results.csv: one row per (workload, threads, configuration).
pub fn write_csv(r: &MallocBenchResult, dir: &Path) -> Result<PathBuf, BenchError> {
    std::fs::create_dir_all(dir).map_err(|source| BenchError::Io { path: dir.to_path_buf(), source })?;
    let path = dir.join("bench_malloc.csv");
    let io = |e: csv::Error| BenchError::Io { path: path.clone(), source: std::io::Error::other(e.to_string()) };
    let mut w = csv::Writer::from_path(&path).map_err(io)?;
    w.write_record([
        "workload", "threads", "allocator", "profiler", "interval", "value", "p50", "p99", "ratio", "ratio_min", "ratio_max",
        "increase_pct", "increase_pct_timed", "timer_cycles", "cycles_per_stack",
    ])
    .map_err(io)?;
    for c in &r.results {
        w.write_record([
            format!("{:?}", c.workload),
            c.threads.to_string(),
            c.config.allocator.clone(),
            c.label.clone(),
            c.interval.map(|i| i.to_string()).unwrap_or_default(),
            c.value.to_string(),
            c.p50.to_string(),
            c.p99.to_string(),
            c.ratio.to_string(),
            c.ratio_min.to_string(),
            c.ratio_max.to_string(),
            c.increase_pct.to_string(),
            c.increase_pct_timed.map(|v| v.to_string()).unwrap_or_default(),
            c.timer_cycles.map(|v| v.to_string()).unwrap_or_default(),
            c.cycles_per_stack.map(|v| v.to_string()).unwrap_or_default(),
        ])
        .map_err(io)?;
    }
    w.flush().map_err(|e| io(e.into()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(value: f64, timer: Option<f64>) -> RunMetrics {
        RunMetrics { value, timer, ..Default::default() }
    }

    #[test]
    fn increases_are_per_repetition_medians_with_and_without_the_timer() {
        let cfgs = vec![
            Config { allocator: "glibc".into(), profiler: Profiler::None, baseline: 0 },
            Config { allocator: "glibc".into(), profiler: Profiler::MtlabInactive, baseline: 0 },
        ];
        // Timer 60 cycles; the profiled call costs 20 → 25, 10 → 12, 20 → 30.
        let runs = vec![
            vec![run(20.0, Some(60.0)), run(10.0, Some(60.0)), run(20.0, Some(60.0))],
            vec![run(25.0, Some(60.0)), run(12.0, Some(60.0)), run(30.0, Some(60.0))],
        ];
        let r = summarize(Workload::MallocTest, 1, &cfgs, &runs);
        // Strict ratios 1.25, 1.2, 1.5: median 1.25.
        assert!((r[1].increase_pct - 25.0).abs() < 1e-9, "{}", r[1].increase_pct);
        // Timed ratios 85/80, 72/70, 90/80: median 85/80.
        assert!((r[1].increase_pct_timed.unwrap() - 6.25).abs() < 1e-9, "{:?}", r[1].increase_pct_timed);
        assert_eq!(r[1].timer_cycles, Some(60.0));
        // Runs 85, 72, 90 with the timer in: median 85.
        assert_eq!(r[1].value_timed, Some(85.0));
        assert_eq!(r[0].increase_pct_timed, Some(0.0));
    }

    #[test]
    fn no_timed_increase_without_the_timer() {
        let cfgs = vec![Config { allocator: "glibc".into(), profiler: Profiler::None, baseline: 0 }];
        let r = summarize(Workload::Pipeline, 1, &cfgs, &[vec![run(40.0, None), run(50.0, None)]]);
        assert_eq!(r[0].increase_pct_timed, None);
        assert_eq!(r[0].timer_cycles, None);
    }
}
