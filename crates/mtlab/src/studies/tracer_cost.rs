//! `mtlab bench tracer` and `mtlab bench program`: what full heap tracing
//! costs. The workload (malloc-test, or any program) runs untraced, under
//! `mtlab record` and under heaptrack as its users run it, interleaved;
//! malloc-test also runs reading the TSC around every call (the floor of any
//! tracer that times each call). Then `mtlab report` is timed on the trace.
//! With `--samples`, `mtlab record --sample INTERVAL` runs in the same rounds,
//! so the sampler's cost on a real program is a ratio inside one run too.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::child::{self, measure, Measured};
use super::StudyError;
use crate::export::{Bar, Cell, Plot, PlotKind, Table, View};
use crate::native::{self, Part};
use crate::record::Unwind;
use crate::trace::keys;
use crate::study::progress::Progress;
use crate::study::runner::{self, Phase, RunnerOptions, Sample};
use crate::study::{stats, summary, Configuration, Run};

pub const TRACER: &str = "bench-tracer";
pub const PROGRAM: &str = "bench-program";

const UNTRACED: &str = "untraced";
/// malloc-test reading the TSC before and after every call (--stamp-calls).
const STAMP_FLOOR: &str = "untraced + TSC reads";
const MTLAB: &str = "mtlab";
const REPORT: &str = "mtlab report";

/// What is traced.
#[derive(Debug, Clone)]
pub enum Target {
    /// The built-in malloc-test: 512-byte blocks at call depth 10; cycles per
    /// malloc+free pair from the workload's own TSC reads.
    MallocTest { threads: u32, iterations: u64 },
    /// Any command, by wall time.
    Program(Vec<OsString>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heaptrack {
    Off,
    /// As its users run it: compressed trace, interpreted after the run.
    Default,
    /// Record only (`--raw`): its interpreter runs out of memory on some programs.
    Raw,
}

#[derive(Debug, Clone)]
pub struct TracerCostConfig {
    pub target: Target,
    pub heaptrack: Heaptrack,
    pub runner: RunnerOptions,
    /// Runs of `mtlab report` timed on the last trace.
    pub report_runs: u32,
    /// Where traces go (default: a temporary directory).
    pub dir: Option<PathBuf>,
    /// How `mtlab record` captures stacks: one configuration each; the first
    /// is named "mtlab", the others "mtlab --unwind NAME".
    pub unwinders: Vec<Unwind>,
    /// Sampling intervals in bytes: one `mtlab record --sample` configuration
    /// each, with the first unwinder.
    pub samples: Vec<u64>,
    /// Run the full-trace configurations (off: untraced and sampled only).
    pub full: bool,
}

/// The configuration name of `mtlab record --sample` at `interval` bytes.
fn sampled_config_name(interval: u64) -> String {
    format!("{MTLAB} --sample {}", crate::units::format_size(interval))
}

/// The configuration name of `mtlab record` with the `i`-th unwinder.
fn mtlab_config_name(i: usize, u: Unwind) -> String {
    if i == 0 {
        MTLAB.to_string()
    } else {
        format!("{MTLAB} --unwind {}", u.name())
    }
}

struct Lab {
    dir: PathBuf,
    mtlab: PathBuf,
    heaptrack: Option<PathBuf>,
    raw: bool,
    argv: Vec<OsString>,
    /// The compared figure: the workload's cycles per op, or wall seconds.
    cycles: bool,
}

fn heaptrack_files(dir: &Path, stem: &str) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(stem)))
        .collect()
}

fn files_size(paths: &[PathBuf]) -> u64 {
    paths.iter().filter_map(|p| std::fs::metadata(p).ok()).map(|m| m.len()).sum()
}

fn bytes(metric: &str, v: u64) -> Sample {
    Sample::cost(metric, "bytes", v as f64)
}

/// What an mtlab run's traces say of the program: the largest peak RSS any
/// traced process reported (STATS), and the root's wall time (RUNINFO).
fn traced_facts(family: &[PathBuf]) -> (Option<u64>, Option<f64>) {
    let (mut rss, mut wall) = (None, None);
    for (i, f) in family.iter().enumerate() {
        let Ok(t) = crate::trace::TraceFile::open(f) else { continue };
        if let Some(kib) = t.stats.iter().find(|(k, _)| k == keys::MAX_RSS_KIB).and_then(|(_, v)| v.parse::<u64>().ok()) {
            rss = Some(rss.map_or(kib, |r: u64| r.max(kib)));
        }
        if i == 0 {
            wall = t.runinfo_get(keys::WALL_NS).and_then(|v| v.parse::<f64>().ok()).map(|ns| ns / 1e9);
        }
    }
    (rss, wall)
}

impl Lab {
    /// The trace of the default configuration ("mtlab"), which `mtlab report` is timed on.
    fn trace(&self) -> PathBuf {
        self.dir.join("bench.mtl")
    }

    fn trace_of(&self, cfg: &Configuration) -> PathBuf {
        if cfg.name == MTLAB {
            self.trace()
        } else if let Some(bytes) = cfg.params.get("sample") {
            self.dir.join(format!("bench-sample-{bytes}.mtl"))
        } else {
            self.dir.join(format!("bench-{}.mtl", cfg.params.get("unwind").map(String::as_str).unwrap_or("other")))
        }
    }

    /// The fraction of allocation calls whose stack stops before main or a
    /// thread start, from `mtlab report --json` (untimed).
    fn truncated_fraction(&self, trace: &Path) -> Result<f64, StudyError> {
        let mut c = Command::new(&self.mtlab);
        c.arg("report").arg("--json").arg("--top").arg("1").arg(trace);
        let m = measure(c, "mtlab report")?;
        let v: serde_json::Value =
            serde_json::from_str(&m.stdout).map_err(|e| StudyError::Output(format!("mtlab report --json: {e}")))?;
        v["stacks"]["truncated_call_fraction"]
            .as_f64()
            .ok_or_else(|| StudyError::Output("mtlab report --json: no stacks.truncated_call_fraction".into()))
    }

    fn main_sample(&self, m: &Measured, what: &str) -> Result<Sample, StudyError> {
        if self.cycles {
            let v = child::json_line(&m.stdout, "malloc-test")
                .ok_or_else(|| StudyError::Output(format!("{what}: no malloc-test result line in its output")))?;
            Ok(Sample::cost("cycles_per_op", "cycles", child::field(&v, &["cycles_per_op"], what)?))
        } else {
            Ok(Sample::cost("wall_s", "s", m.wall.as_secs_f64()))
        }
    }

    fn trial(&self, cfg: &Configuration) -> Result<Vec<Sample>, StudyError> {
        let name = cfg.name.as_str();
        match name {
            _ if name.starts_with(MTLAB) && name != REPORT => {
                let trace = self.trace_of(cfg);
                let unwind = cfg.params.get("unwind").map(String::as_str).unwrap_or("dwarf");
                let mut c = Command::new(&self.mtlab);
                c.arg("record").arg("--unwind").arg(unwind);
                if let Some(bytes) = cfg.params.get("sample") {
                    c.arg("--sample").arg(bytes);
                }
                c.arg("-o").arg(&trace).arg("--").args(&self.argv);
                let m = measure(c, "mtlab record")?;
                let family = crate::platform::names::trace_family(&trace);
                let (program_rss, wall) = traced_facts(&family);
                let mut out = vec![
                    self.main_sample(&m, name)?,
                    bytes("peak_rss", program_rss.unwrap_or(m.max_rss_kib) * 1024),
                    bytes("recorder_rss", m.max_rss_kib * 1024),
                    bytes("trace_bytes", files_size(&family)),
                ];
                if !self.cycles {
                    let w = wall.ok_or_else(|| StudyError::Output("mtlab record: the trace has no wall_ns in RUNINFO".into()))?;
                    out.push(Sample::cost("program_wall_s", "s", w));
                }
                out.push(Sample::cost("truncated_calls", "fraction", self.truncated_fraction(&trace)?));
                if name == MTLAB {
                    let (compact, secs) = self.compact_copies(&family)?;
                    out.push(bytes("compact_bytes", compact));
                    out.push(Sample::cost("compact_s", "s", secs));
                }
                Ok(out)
            }
            REPORT => {
                let mut c = Command::new(&self.mtlab);
                c.arg("report").arg("--json").arg(self.trace());
                let m = measure(c, "mtlab report")?;
                let v: serde_json::Value = serde_json::from_str(&m.stdout)
                    .map_err(|e| StudyError::Output(format!("mtlab report --json: {e}")))?;
                let events = v["events"].as_u64().unwrap_or(0)
                    + v["children"].as_array().map(|c| c.iter().filter_map(|p| p["events"].as_u64()).sum()).unwrap_or(0);
                Ok(vec![
                    Sample::cost("report_s", "s", m.wall.as_secs_f64()),
                    bytes("report_rss", m.max_rss_kib * 1024),
                    Sample::gain("events", "events", events as f64),
                ])
            }
            _ if name.starts_with("heaptrack") => {
                let stem = "bench.heaptrack";
                for old in heaptrack_files(&self.dir, stem) {
                    let _ = std::fs::remove_file(old);
                }
                let mut c = Command::new(self.heaptrack.as_ref().expect("heaptrack configuration only when found"));
                if self.raw {
                    c.arg("--raw");
                }
                c.arg("-o").arg(self.dir.join(stem)).args(&self.argv);
                let m = measure(c, name)?;
                Ok(vec![
                    self.main_sample(&m, name)?,
                    bytes("peak_rss", m.max_rss_kib * 1024),
                    bytes("trace_bytes", files_size(&heaptrack_files(&self.dir, stem))),
                ])
            }
            _ => {
                let mut c = Command::new(&self.argv[0]);
                c.args(&self.argv[1..]);
                if name == STAMP_FLOOR {
                    c.arg("--stamp-calls");
                }
                let m = measure(c, name)?;
                Ok(vec![self.main_sample(&m, name)?, bytes("peak_rss", m.max_rss_kib * 1024)])
            }
        }
    }

    /// Compacts copies of an mtlab run's traces in a child process (its
    /// memory must not raise this process's RSS, which later children would
    /// inherit in their peak-RSS figures); their size and the seconds taken.
    fn compact_copies(&self, family: &[PathBuf]) -> Result<(u64, f64), StudyError> {
        let dir = self.dir.join("compact");
        std::fs::create_dir_all(&dir).map_err(|source| StudyError::Io { path: dir.clone(), source })?;
        let start = std::time::Instant::now();
        let mut total = 0;
        for f in family {
            let dst = dir.join(f.file_name().unwrap_or_default());
            let mut c = Command::new(&self.mtlab);
            c.arg("compact").arg("-o").arg(&dst).arg(f);
            measure(c, "mtlab compact")?;
            total += std::fs::metadata(&dst).map_err(|source| StudyError::Io { path: dst.clone(), source })?.len();
        }
        Ok((total, start.elapsed().as_secs_f64()))
    }
}

pub fn run(cfg: &TracerCostConfig, progress: &Progress) -> Result<Run, StudyError> {
    let started = std::time::Instant::now();
    child::say_if_stdin_is_not_passed_on();
    let (dir, _tmp) = child::work_dir(cfg.dir.as_deref())?;
    let mtlab = std::env::current_exe().map_err(|source| StudyError::Io { path: "mtlab".into(), source })?;
    let heaptrack = match cfg.heaptrack {
        Heaptrack::Off => None,
        _ => crate::platform::process::find_in_path("heaptrack"),
    };
    let (study, title, argv, cycles) = match &cfg.target {
        Target::MallocTest { threads, iterations } => {
            let workload = native::path(Part::MallocTest)?;
            let argv: Vec<OsString> = vec![
                workload.into_os_string(),
                "--threads".into(),
                threads.to_string().into(),
                "--size".into(),
                "512".into(),
                "--depth".into(),
                "10".into(),
                "--iterations".into(),
                iterations.to_string().into(),
            ];
            (TRACER, "tracer overhead on malloc-test", argv, true)
        }
        Target::Program(argv) => (PROGRAM, "tracer overhead on a program", argv.clone(), false),
    };
    let mut run = Run::new(study, title);
    run.settings.insert("command".into(), argv.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" "));
    run.settings.insert("repetitions".into(), cfg.runner.reps.to_string());
    run.settings.insert("warm-up".into(), cfg.runner.warmup.to_string());
    let mut configs = vec![Configuration::new(UNTRACED)];
    if cycles {
        configs.push(Configuration::new(STAMP_FLOOR).baseline(UNTRACED));
    }
    if cfg.unwinders.is_empty() {
        return Err(StudyError::Config("--unwinders: name at least one (dwarf, fp, libgcc, libunwind)".into()));
    }
    if cfg.unwinders.contains(&Unwind::Libunwind) && !crate::record::library_available("libunwind.so.8") {
        return Err(StudyError::Config("--unwinders libunwind: libunwind is not installed (apt-get install libunwind8)".into()));
    }
    if cfg.samples.contains(&0) {
        return Err(StudyError::Config("--samples: an interval must be at least 1 byte".into()));
    }
    if !cfg.full && cfg.samples.is_empty() {
        return Err(StudyError::Config("--no-full leaves nothing traced: name intervals with --samples (e.g. 512KiB,64KiB)".into()));
    }
    if cfg.full {
        for (i, u) in cfg.unwinders.iter().enumerate() {
            configs.push(Configuration::new(mtlab_config_name(i, *u)).baseline(UNTRACED).param("unwind", u.name()));
        }
    }
    for &bytes in &cfg.samples {
        let unwind = cfg.unwinders[0].name();
        configs.push(Configuration::new(sampled_config_name(bytes)).baseline(UNTRACED).param("unwind", unwind).param("sample", bytes.to_string()));
    }
    match (&heaptrack, cfg.heaptrack) {
        (Some(path), mode) => {
            let name = if mode == Heaptrack::Raw { "heaptrack --raw" } else { "heaptrack" };
            configs.push(Configuration::new(name).baseline(UNTRACED));
            let version = Command::new(path).arg("--version").output().ok().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
            if let Some(v) = version.filter(|v| !v.is_empty()) {
                run.environment.software.insert("heaptrack".into(), v.trim_start_matches("heaptrack ").to_string());
            }
        }
        (None, Heaptrack::Off) => run.notes.push("heaptrack left out (--no-heaptrack)".into()),
        (None, _) => run.notes.push("heaptrack is not installed (apt-get install heaptrack): compared with mtlab only".into()),
    }
    let lab = Lab { dir, mtlab, heaptrack, raw: cfg.heaptrack == Heaptrack::Raw, argv, cycles };
    let rounds = (cfg.runner.warmup + cfg.runner.reps) as u64;
    // `mtlab report` is timed on the full trace, so only when there is one.
    let report_runs = if cfg.full { cfg.report_runs.max(1) } else { 0 };
    let progress_total = rounds * configs.len() as u64 + report_runs as u64;
    progress.inc_length(progress_total);
    runner::run_all(&mut run, &configs, &cfg.runner, progress, |c, _| lab.trial(c))?;
    if report_runs > 0 {
        // `mtlab report` on the last mtlab trace: its own repetitions, after the sweep.
        let report_opts = RunnerOptions { warmup: 0, reps: report_runs, min_duration: Default::default() };
        runner::run_all(&mut run, &[Configuration::new(REPORT)], &report_opts, progress, |c, _: Phase| lab.trial(c))?;
    }
    run.duration_s = started.elapsed().as_secs_f64();
    Ok(run)
}

/// The run's table, notes and plot.
pub fn views(run: &Run) -> Vec<View> {
    let main = if run.study == TRACER { ("cycles_per_op", "cycles/op") } else { ("wall_s", "wall s") };
    let mut t = Table::new(
        "configurations",
        format!("{}: {}", run.title, run.settings.get("command").map(String::as_str).unwrap_or("")),
        &["configuration", &format!("median {} [interval]", main.1), "× untraced [interval]", "truncated stacks", "trace size", "peak RSS", "repetitions"],
        1,
    );
    let mut bars = Vec::new();
    for c in run.configurations.iter().filter(|c| c.name != REPORT) {
        let Some(m) = run.measurement(&c.name, main.0) else { continue };
        let s = stats::summarize(&m.values);
        let r = summary::ratio(run, &c.name, main.0, UNTRACED, main.0);
        let d = if run.study == TRACER { 1 } else { 3 };
        t.push(vec![
            Cell::text(&c.name),
            Cell::Estimate { value: s.median, low: s.median_ci.map(|i| i.low), high: s.median_ci.map(|i| i.high), decimals: d },
            match r {
                Some(r) => Cell::Estimate { value: r.ratio, low: r.interval.map(|i| i.low), high: r.interval.map(|i| i.high), decimals: 2 },
                None => Cell::Empty,
            },
            summary::median(run, &c.name, "truncated_calls").map(|f| Cell::text(format!("{:.1} %", f * 100.0))).unwrap_or(Cell::Empty),
            summary::median(run, &c.name, "trace_bytes").map(|b| Cell::Bytes(b as u64)).unwrap_or(Cell::Empty),
            summary::median(run, &c.name, "peak_rss").map(|b| Cell::Bytes(b as u64)).unwrap_or(Cell::Empty),
            Cell::text(m.values.iter().map(|v| format!("{v:.*}", d as usize)).collect::<Vec<_>>().join(" ")),
        ]);
        if let Some(r) = r {
            bars.push((c.name.clone(), Bar { value: r.ratio, low: r.interval.map(|i| i.low), high: r.interval.map(|i| i.high) }));
        }
    }
    let mut v = vec![View::Table(t)];
    v.push(View::Note(
        "peak RSS: for mtlab, the largest the traced processes reported themselves (STATS); otherwise of the largest process of the run (wait4)".into(),
    ));
    if run.configuration(STAMP_FLOOR).is_some() {
        v.push(View::Note(format!(
            "{STAMP_FLOOR}: the untraced workload reading the TSC before and after every malloc and free, as a tracer that times each call must: that tracer's floor here"
        )));
    }
    if run.configurations.iter().any(|c| run.measurement(&c.name, "truncated_calls").is_some()) {
        v.push(View::Note(
            "truncated stacks: share of allocation calls whose stack stops before main or a thread start (mtlab report's stacks.truncated_call_fraction)".into(),
        ));
    }
    if let Some(rss) = summary::median(run, MTLAB, "recorder_rss") {
        v.push(View::Note(format!(
            "mtlab: largest process of the run (the program, or mtlab record finishing the trace): {}",
            crate::units::human_bytes(rss as u64)
        )));
    }
    if let (Some(b), Some(s)) = (run.measurement(MTLAB, "compact_bytes"), summary::median(run, MTLAB, "compact_s")) {
        let largest = b.values.iter().copied().fold(0.0, f64::max);
        v.push(View::Note(format!(
            "mtlab: the same traces after `mtlab compact` (no per-call timing): {} (largest of the runs), in {s:.2} s (median)",
            crate::units::human_bytes(largest as u64)
        )));
    }
    if let (Some(w), Some(r)) = (summary::median(run, MTLAB, "program_wall_s"), summary::ratio(run, MTLAB, "program_wall_s", UNTRACED, "wall_s")) {
        v.push(View::Note(format!(
            "mtlab: the program's own wall time, before mtlab record finishes the trace: median {w:.3} s = {:.2}× untraced",
            r.ratio
        )));
    }
    if let (Some(secs), Some(events)) = (run.measurement(REPORT, "report_s"), summary::median(run, REPORT, "events")) {
        let fastest = secs.values.iter().copied().fold(f64::INFINITY, f64::min);
        v.push(View::Note(format!(
            "mtlab report: {events:.0} events in {fastest:.3} s (fastest of {} runs; median {:.3} s) = {:.1} M events/s, peak RSS {}",
            secs.values.len(),
            stats::median(&secs.values),
            events / fastest / 1e6,
            crate::units::human_bytes(summary::median(run, REPORT, "report_rss").unwrap_or(0.0) as u64)
        )));
    }
    if !bars.is_empty() {
        v.push(View::Plot(Plot {
            name: format!("{}-ratio", run.study),
            title: format!("{}: cost relative to the untraced run", run.title),
            x_label: "configuration".into(),
            y_label: format!("{} × untraced (median; whisker: its interval)", main.1),
            kind: PlotKind::GroupedBars {
                groups: bars.iter().map(|(n, _)| n.clone()).collect(),
                series: vec![("× untraced".into(), bars.into_iter().map(|(_, b)| Some(b)).collect())],
            },
        }));
    }
    v
}
