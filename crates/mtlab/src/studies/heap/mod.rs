//! The heap study: one program run several ways — under several heap
//! managers (`mtlab heap compare`), or under one with a tunable set to each
//! of several values (`mtlab heap sweep`). Each way runs the program
//! untraced (wall time, peak RSS) and under `mtlab record` (the per-function
//! cycle table, live and mapped bytes, fragmentation, utilization, and the
//! time series behind the plots), interleaved round by round through the
//! study runner.

pub mod allocators;
pub mod replay;
pub mod tunables;
pub mod views;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

pub use allocators::{resolve, Allocator};

use super::child::{self, measure};
use super::StudyError;
use crate::study::progress::Progress;
use crate::units::human_bytes;
use crate::study::runner::{self, RunnerOptions, Sample};
use crate::study::{Configuration, Run};
use crate::trace::{keys, TraceFile};

pub const STUDY: &str = "heap-compare";
pub const SWEEP: &str = "heap-sweep";
pub const REPLAY: &str = "heap-replay";

/// The allocator functions whose cycles the comparison tables show (a
/// function never called has no row): C's, and C++'s operators in their
/// common forms, which jemalloc, tcmalloc and mimalloc serve without malloc.
pub const FUNCTIONS: [&str; 10] = [
    "malloc",
    "free",
    "calloc",
    "realloc",
    "operator new",
    "operator new[]",
    "operator delete",
    "operator delete(size)",
    "operator delete[]",
    "operator delete[](size)",
];

#[derive(Debug, Clone)]
pub struct HeapCompareConfig {
    pub allocators: Vec<Allocator>,
    pub argv: Vec<OsString>,
    pub runner: RunnerOptions,
    /// Where traces go (default: a temporary directory).
    pub dir: Option<PathBuf>,
}

/// One way of running the program: an allocator and the environment that tunes it.
#[derive(Debug, Clone)]
pub struct Variant {
    pub name: String,
    pub allocator: Allocator,
    pub env: Vec<(String, String)>,
}

/// What a sweep's summary minimizes (`--objective`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Objective {
    PeakMapped,
    EndMapped,
    PeakRss,
    Wall,
    MallocP99,
}

impl Objective {
    pub const NAMES: [&'static str; 5] = ["peak-mapped", "end-mapped", "peak-rss", "wall", "malloc-p99"];

    pub fn parse(s: &str) -> Option<Objective> {
        Some(match s {
            "peak-mapped" => Objective::PeakMapped,
            "end-mapped" => Objective::EndMapped,
            "peak-rss" => Objective::PeakRss,
            "wall" => Objective::Wall,
            "malloc-p99" => Objective::MallocP99,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    /// The measurement minimized, and in which configuration it lives.
    pub fn metric(self, variant: &str) -> (String, &'static str) {
        match self {
            Objective::PeakMapped => (traced(variant), "peak_mapped_bytes"),
            Objective::EndMapped => (traced(variant), "end_mapped_bytes"),
            Objective::PeakRss => (untraced(variant), "peak_rss"),
            Objective::Wall => (untraced(variant), "wall_s"),
            Objective::MallocP99 => (traced(variant), "malloc.cycles_p99"),
        }
    }
}

#[derive(Debug, Clone)]
pub struct HeapSweepConfig {
    /// As given (`top_pad`, `jemalloc.dirty_decay_ms`, …).
    pub tunable_name: String,
    pub tunable: tunables::Tunable,
    pub values: Vec<String>,
    pub allocator: Allocator,
    pub objective: Objective,
    pub argv: Vec<OsString>,
    pub runner: RunnerOptions,
    pub dir: Option<PathBuf>,
}

pub fn untraced(a: &str) -> String {
    format!("{a} untraced")
}

pub fn traced(a: &str) -> String {
    format!("{a} traced")
}

/// One point of an allocator's time series (the run's `details`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SeriesPoint {
    pub event: u64,
    pub seconds: Option<f64>,
    pub live_bytes: u64,
    pub mapped_bytes: u64,
    pub fragmentation_mean: f64,
    pub utilization: f64,
    pub malloc_mean_cycles: Option<f64>,
    #[serde(default)]
    pub overhead_bytes: u64,
    #[serde(default)]
    pub free_bytes: u64,
}

/// `details`: each allocator's time series, from its last traced repetition.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Details {
    pub series: BTreeMap<String, Vec<SeriesPoint>>,
}

struct Lab {
    dir: PathBuf,
    mtlab: PathBuf,
    argv: Vec<OsString>,
    series: RefCell<BTreeMap<String, Vec<SeriesPoint>>>,
    /// Per variant: the traced process measured, when not the root process.
    measured: RefCell<BTreeMap<String, String>>,
    /// Per variant: its traced run's sites by live bytes at the peak (the
    /// last repetition's), and whether that list is complete.
    sites: RefCell<BTreeMap<String, PeakSites>>,
    /// Per variant: the most frees of unknown blocks in one traced run, and
    /// that run's frees.
    unknown_frees: RefCell<BTreeMap<String, (u64, u64)>>,
}

/// Frees of blocks never seen allocated, past which a run's figures are
/// not to be trusted: at least this many, and at least 1 % of the frees.
const UNKNOWN_FREES_WARN: u64 = 100;

/// The warning for a traced run with `unknown` frees of blocks the trace
/// never saw allocated, out of `frees`: its allocations went around the
/// tracer (a heap manager's own entry points that mtlab does not trace),
/// so live, peak and mapped figures are short of the truth.
fn unknown_frees_warning(variant: &str, unknown: u64, frees: u64) -> Option<String> {
    (unknown >= UNKNOWN_FREES_WARN && unknown.saturating_mul(100) >= frees).then(|| {
        format!(
            "warning: {variant}: {unknown} of {frees} frees were of blocks the trace never saw allocated — its \
             allocations went around the tracer, so its live, peak and mapped figures are short of the truth"
        )
    })
}

/// A report's frees: free and every form of operator delete.
fn frees_of(r: &serde_json::Value) -> u64 {
    let funcs = r["functions"].as_object();
    funcs
        .map(|f| f.iter().filter(|(k, _)| *k == "free" || k.starts_with("operator delete")).filter_map(|(_, v)| v["calls"].as_u64()).sum())
        .unwrap_or(0)
}

fn bytes(metric: &str, v: u64) -> Sample {
    Sample::cost(metric, "bytes", v as f64)
}

/// A number at `path` in a report's JSON.
fn num(v: &serde_json::Value, path: &[&str]) -> Option<f64> {
    path.iter().try_fold(v, |v, k| v.get(k)).and_then(serde_json::Value::as_f64)
}

/// The measurements of one traced run, from the root process's report
/// (`mtlab report --json`, run as a child so that its memory never adds to
/// the peak RSS of the programs measured after it).
fn traced_samples(r: &serde_json::Value, program_wall_s: f64, what: &str) -> Result<Vec<Sample>, StudyError> {
    let need = |path: &[&str]| num(r, path).ok_or_else(|| StudyError::Output(format!("{what}: the report has no {}", path.join("."))));
    let mut out = vec![
        Sample::cost("wall_s", "s", program_wall_s),
        Sample::cost("peak_live_bytes", "bytes", need(&["peak", "live_bytes"])?),
        Sample::cost("peak_mapped_bytes", "bytes", need(&["peak", "mapped_bytes"])?),
        Sample::cost("end_live_bytes", "bytes", need(&["end", "live_bytes"])?),
        Sample::cost("end_mapped_bytes", "bytes", need(&["end", "mapped_bytes"])?),
        Sample::cost("peak_fragmentation_mean", "fraction", need(&["peak", "fragmentation", "mean"])?),
        Sample::cost("peak_fragmentation_total", "fraction", need(&["peak", "fragmentation", "total"])?),
        Sample::gain("peak_utilization", "fraction", need(&["peak", "utilization"])?),
    ];
    for at in ["peak", "end"] {
        for part in ["overhead", "free"] {
            let v = need(&[&format!("space_{at}"), &format!("{part}_bytes")])?;
            out.push(Sample::cost(&format!("{at}_{part}_bytes"), "bytes", v));
        }
    }
    // The heap manager's own figures, since tracing started (what mtlab could see).
    let own = &r["allocator_stats"];
    for (metric, key) in [("allocator_in_use_bytes", "in_use"), ("allocator_mapped_bytes", "mapped")] {
        if let Some(v) = own[format!("{key}_bytes")].as_f64() {
            let before = own[format!("{key}_at_start_bytes")].as_f64().unwrap_or(0.0);
            out.push(Sample::cost(metric, "bytes", (v - before).max(0.0)));
        }
    }
    if let Some(v) = own["mtlab_in_use_bytes"].as_f64() {
        out.push(Sample::cost("mtlab_in_use_bytes", "bytes", v));
    }
    for f in FUNCTIONS {
        let fr = |k: &[&str]| num(&r["functions"][f], k);
        let Some(calls) = fr(&["calls"]).filter(|&c| c > 0.0) else { continue };
        out.push(Sample::cost(&format!("{f}.calls"), "calls", calls));
        let fields = [
            ("mean_size", "bytes", &["mean_size"][..]),
            ("cycles_mean", "cycles", &["cycles", "mean"][..]),
            ("cycles_sd", "cycles", &["cycles", "stddev"][..]),
            ("cycles_p99", "cycles", &["cycles", "p99"][..]),
            ("cycles_total", "cycles", &["cycles", "total"][..]),
        ];
        for (name, unit, path) in fields {
            if let Some(v) = fr(path) {
                out.push(Sample::cost(&format!("{f}.{name}"), unit, v));
            }
        }
    }
    Ok(out)
}

fn series_of(r: &serde_json::Value) -> Vec<SeriesPoint> {
    let points = r["time_series"].as_array().map(Vec::as_slice).unwrap_or_default();
    points
        .iter()
        .map(|p| SeriesPoint {
            event: p["event"].as_u64().unwrap_or(0),
            seconds: p["ns"].as_f64().map(|n| n / 1e9),
            live_bytes: p["live_bytes"].as_u64().unwrap_or(0),
            mapped_bytes: p["mapped_bytes"].as_u64().unwrap_or(0),
            fragmentation_mean: p["fragmentation_mean"].as_f64().unwrap_or(0.0),
            utilization: p["utilization"].as_f64().unwrap_or(0.0),
            malloc_mean_cycles: p["malloc_mean_cycles"].as_f64(),
            overhead_bytes: p["overhead_bytes"].as_u64().unwrap_or(0),
            free_bytes: p["free_bytes"].as_u64().unwrap_or(0),
        })
        .collect()
}

impl Lab {
    fn command(&self, v: &Variant, traced_to: Option<&Path>) -> Command {
        let mut c = match traced_to {
            Some(trace) => {
                let mut c = Command::new(&self.mtlab);
                // Every call timed: the comparison and `--objective malloc-p99`
                // rank heap managers by these cycles, so no sampling error in them.
                c.arg("record").arg("--time").arg("every").arg("-o").arg(trace).arg("--").args(&self.argv);
                c
            }
            None => {
                let mut c = Command::new(&self.argv[0]);
                c.args(&self.argv[1..]);
                c
            }
        };
        // `mtlab record` puts its own library first and keeps this one after it.
        match &v.allocator.library {
            Some(lib) => c.env("LD_PRELOAD", lib),
            None => c.env_remove("LD_PRELOAD"),
        };
        c.envs(v.env.iter().map(|(k, val)| (k, val)));
        c
    }

    fn trial(&self, cfg: &Configuration, variants: &[Variant]) -> Result<Vec<Sample>, StudyError> {
        let v = variants
            .iter()
            .find(|v| cfg.name == untraced(&v.name) || cfg.name == traced(&v.name))
            .expect("every configuration names a variant");
        let a = &v.allocator;
        if cfg.name == untraced(&v.name) {
            let floor = child::own_rss_kib();
            let m = measure(self.command(v, None), &cfg.name)?;
            let replay = replay_line(&m.stdout);
            let mut out = vec![
                Sample::cost("wall_s", "s", m.wall.as_secs_f64()),
                bytes("peak_rss", heap_rss_kib(m.max_rss_kib, replay.as_ref()) * 1024),
                bytes("rss_floor", floor * 1024),
            ];
            // The replay program's own figures: its rate, its peak of live bytes, its ops and tables.
            if let Some(r) = replay {
                if let Some(rate) = r["events_per_s"].as_f64() {
                    out.push(Sample::gain("events_per_s", "events/s", rate));
                }
                if let Some(p) = r["peak_live_bytes"].as_u64() {
                    out.push(bytes("replay_peak_live_bytes", p));
                }
                if let Some(k) = r["own_rss_kib"].as_u64() {
                    out.push(bytes("replay_own_rss", k * 1024));
                }
            }
            return Ok(out);
        }
        let trace = self.dir.join(format!("{}.mtl", file_stem(&v.name)));
        let _ = std::fs::remove_file(&trace);
        let recorded = measure(self.command(v, Some(&trace)), &cfg.name)?;
        if !trace.exists() {
            return Err(StudyError::Output(format!(
                "{}: the program made no traced call (statically linked, or it clears LD_PRELOAD): it keeps its own \
                 malloc, so no other allocator can take its place",
                cfg.name
            )));
        }
        let mut c = Command::new(&self.mtlab);
        c.arg("report").arg("--json").arg("--top").arg(SITES_TOP.to_string()).arg(&trace);
        let m = measure(c, "mtlab report")?;
        let root: serde_json::Value =
            serde_json::from_str(&m.stdout).map_err(|e| StudyError::Output(format!("mtlab report --json: {e}")))?;
        let r = busiest(&root);
        if !std::ptr::eq(r, &root) {
            self.measured.borrow_mut().insert(v.name.clone(), measured_name(r));
        }
        let (detected, path) = (r["allocator"].as_str().unwrap_or("?"), r["allocator_path"].as_str().unwrap_or("?"));
        if !a.matches(detected, path) {
            return Err(StudyError::Output(format!(
                "the program did not use {} — its malloc came from {detected} ({path}): a statically linked program, \
                 or one that brings its own allocator, cannot be given another",
                a.name
            )));
        }
        let tf = TraceFile::open(&trace).map_err(|e| StudyError::Output(format!("{}: {e}", cfg.name)))?;
        let wall = tf
            .runinfo_get(keys::WALL_NS)
            .and_then(|v| v.parse::<f64>().ok())
            .ok_or_else(|| StudyError::Output(format!("{}: the trace has no wall_ns in RUNINFO", cfg.name)))?;
        let rss = tf.stats.iter().find(|(k, _)| k == keys::MAX_RSS_KIB).and_then(|(_, v)| v.parse::<u64>().ok());
        let unknown = r["unknown_frees"].as_u64().unwrap_or(0);
        let mut worst = self.unknown_frees.borrow_mut();
        let seen = worst.entry(v.name.clone()).or_insert((0, 0));
        if unknown >= seen.0 {
            *seen = (unknown, frees_of(r));
        }
        drop(worst);
        let mut out = traced_samples(r, wall / 1e9, &cfg.name)?;
        if let Some(kib) = rss {
            out.push(bytes("peak_rss", heap_rss_kib(kib, replay_line(&recorded.stdout).as_ref()) * 1024));
        }
        self.series.borrow_mut().insert(v.name.clone(), series_of(r));
        self.sites.borrow_mut().insert(v.name.clone(), sites_at_peak(r));
        Ok(out)
    }
}

/// Sites read from each traced run's report, by live bytes at the peak.
const SITES_TOP: usize = 40;

/// A traced run's sites (by `site_key`) with their live bytes at the peak,
/// and whether that list is all of them.
type PeakSites = (BTreeMap<String, u64>, bool);

/// A site's name that holds across runs under different allocators: its
/// innermost frames by function (module and offset where unnamed), since
/// addresses move with the libraries loaded.
fn site_key(site: &serde_json::Value) -> String {
    let frames = site["frames"].as_array().map(Vec::as_slice).unwrap_or_default();
    let names: Vec<String> = frames
        .iter()
        .take(4)
        .map(|f| match f["function"].as_str() {
            Some(name) => name.to_string(),
            None => format!("{}+{}", f["module"].as_str().unwrap_or("?"), f["offset"].as_str().unwrap_or("?")),
        })
        .collect();
    if names.is_empty() { "(no stack recorded)".into() } else { names.join(" ← ") }
}

/// A report's sites with live bytes at its peak, and whether the list is
/// all of them (shorter than the --top it was asked with).
fn sites_at_peak(r: &serde_json::Value) -> PeakSites {
    let list = r["top_sites"]["at_peak"].as_array().map(Vec::as_slice).unwrap_or_default();
    let mut out = BTreeMap::new();
    for s in list {
        let bytes = s["peak_live_bytes"].as_u64().unwrap_or(0);
        if bytes > 0 {
            *out.entry(site_key(s)).or_insert(0) += bytes;
        }
    }
    (out, list.len() < SITES_TOP)
}

/// The allocation sites live at the peak under some variants and not under
/// others: the program did not make the same requests (a library one
/// allocator brings, such as libstdc++'s 72 704-byte emergency exception
/// pool under jemalloc and tcmalloc, or a code path that depends on the
/// allocator), so its live figures differ by those sites, not by the
/// allocators' handling of the same requests.
fn differing_sites(sites: &BTreeMap<String, PeakSites>) -> Option<String> {
    if sites.len() < 2 {
        return None;
    }
    let all: std::collections::BTreeSet<&String> = sites.values().flat_map(|(s, _)| s.keys()).collect();
    let mut lines = Vec::new();
    for key in all {
        let with: Vec<String> =
            sites.iter().filter_map(|(v, (s, _))| s.get(key).map(|b| format!("{v} {}", crate::units::human_bytes(*b)))).collect();
        let without: Vec<&str> = sites.iter().filter(|(_, (s, complete))| *complete && !s.contains_key(key)).map(|(v, _)| v.as_str()).collect();
        if !without.is_empty() {
            lines.push(format!("{key}: live at the peak under {}; none under {}", with.join(", "), without.join(", ")));
        }
    }
    (!lines.is_empty()).then(|| {
        format!(
            "the program did not make the same requests under each: these sites hold live bytes at the peak under some \
             and none under others, so peak and end live bytes differ by them (a library one allocator brings, or a code \
             path that depends on the allocator), not by how the allocators serve the same requests: {}",
            lines.join("; ")
        )
    })
}

/// The replay program's result line, if the program was the replay.
fn replay_line(stdout: &str) -> Option<serde_json::Value> {
    stdout.lines().rev().find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()).filter(|v| v.get("events").is_some())
}

/// A peak RSS less the replay's own ops file and tables (resident before its
/// first replayed call; ~760 MiB on cfrac's trace): the heap's part. Any
/// other program's peak RSS as it is.
fn heap_rss_kib(max_rss_kib: u64, replay: Option<&serde_json::Value>) -> u64 {
    let own = replay.and_then(|r| r["own_rss_kib"].as_u64()).unwrap_or(0);
    max_rss_kib.saturating_sub(own)
}

/// How close the replays' peak of live bytes stayed to the recording's: the
/// largest deviation of any repetition, as a fraction; None without figures.
fn peak_live_deviation(run: &Run, recorded: u64) -> Option<(f64, f64, f64)> {
    let v: Vec<f64> = run.measurements.iter().filter(|m| m.metric == "replay_peak_live_bytes").flat_map(|m| m.values.iter().copied()).collect();
    if v.is_empty() || recorded == 0 {
        return None;
    }
    let (lo, hi) = v.iter().fold((f64::MAX, 0.0f64), |(l, h), x| (l.min(*x), h.max(*x)));
    let worst = v.iter().map(|x| (x / recorded as f64 - 1.0).abs()).fold(0.0, f64::max);
    Some((lo, hi, worst))
}

/// The traced process (or exec'd image) whose heap is the program's: the
/// largest at its peak (live bytes), then the one with the most allocator
/// calls — the program itself when a wrapper (a shell script, an `env` or
/// version-manager shim) runs it, or its busiest child. Calls alone picked
/// pyenv's bash helper over python3, whose own small objects never reach
/// malloc (pymalloc), though its heap was a hundred times larger.
fn busiest(root: &serde_json::Value) -> &serde_json::Value {
    let key = |p: &serde_json::Value| -> (u64, u64) {
        let calls = p["functions"].as_object().map(|f| f.values().filter_map(|v| v["calls"].as_u64()).sum()).unwrap_or(0);
        (p["peak"]["live_bytes"].as_u64().unwrap_or(0), calls)
    };
    let mut best = root;
    let mut stack = vec![root];
    while let Some(p) = stack.pop() {
        if key(p) > key(best) {
            best = p;
        }
        if let Some(children) = p["children"].as_array() {
            stack.extend(children.iter());
        }
    }
    best
}

/// The command line of a report node (its pid changes from run to run).
fn measured_name(p: &serde_json::Value) -> String {
    let cmd: Vec<&str> = p["cmdline"].as_array().map(|a| a.iter().filter_map(|v| v.as_str()).collect()).unwrap_or_default();
    cmd.join(" ")
}

/// A file name for a variant's traces.
fn file_stem(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect()
}

/// Runs the variants through the runner: the shape both commands share.
fn run_variants(mut run: Run, variants: &[Variant], argv: &[OsString], runner_opts: &RunnerOptions, dir: Option<&Path>, progress: &Progress) -> Result<Run, StudyError> {
    let started = std::time::Instant::now();
    child::say_if_stdin_is_not_passed_on();
    let (dir, _tmp) = child::work_dir(dir)?;
    let mtlab = std::env::current_exe().map_err(|source| StudyError::Io { path: "mtlab".into(), source })?;
    run.settings.insert("command".into(), argv.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" "));
    run.settings.insert("variants".into(), variants.iter().map(|v| v.name.as_str()).collect::<Vec<_>>().join(","));
    run.settings.insert("repetitions".into(), runner_opts.reps.to_string());
    run.settings.insert("warm-up".into(), runner_opts.warmup.to_string());
    let mut configs = Vec::new();
    for v in variants {
        let a = &v.allocator;
        let lib = a.library.as_ref().map(|l| l.display().to_string()).unwrap_or_else(|| "the system's (glibc)".into());
        let env = v.env.iter().map(|(k, val)| format!("{k}={val}")).collect::<Vec<_>>().join(" ");
        let config = |name: String| {
            let c = Configuration::new(name).param("allocator", &a.name).param("library", &lib);
            if env.is_empty() { c } else { c.param("environment", &env) }
        };
        configs.push(config(untraced(&v.name)));
        configs.push(config(traced(&v.name)).baseline(untraced(&v.name)));
        if let Some(ver) = a.version() {
            run.environment.software.insert(a.name.clone(), ver);
        }
    }
    let lab = Lab {
        dir,
        mtlab,
        argv: argv.to_vec(),
        series: RefCell::new(BTreeMap::new()),
        measured: RefCell::new(BTreeMap::new()),
        sites: RefCell::new(BTreeMap::new()),
        unknown_frees: RefCell::new(BTreeMap::new()),
    };
    progress.inc_length(((runner_opts.warmup + runner_opts.reps) as usize * configs.len()) as u64);
    runner::run_all(&mut run, &configs, runner_opts, progress, |c, _| lab.trial(c, variants))?;
    for (variant, (unknown, frees)) in lab.unknown_frees.into_inner() {
        run.notes.extend(unknown_frees_warning(&variant, unknown, frees));
    }
    run.notes.extend(differing_sites(&lab.sites.into_inner()));
    let details = Details { series: lab.series.into_inner() };
    let mut measured: Vec<String> = lab.measured.into_inner().into_values().collect();
    measured.sort();
    measured.dedup();
    for m in measured {
        run.notes.push(format!(
            "traced figures are those of the traced process with the largest heap at its peak, not the first one \
             started (a wrapper ran the program): {m}"
        ));
    }
    run.details = serde_json::to_value(details).unwrap_or_default();
    run.notes.push(
        "traced figures come from mtlab's shadow heap: live = bytes requested and not freed; mapped = bytes the \
         allocator holds from the system (brk and mmap); fragmentation and utilization as docs/metrics.md defines them"
            .into(),
    );
    run.duration_s = started.elapsed().as_secs_f64();
    Ok(run)
}

pub fn run(cfg: &HeapCompareConfig, progress: &Progress) -> Result<Run, StudyError> {
    let variants: Vec<Variant> =
        cfg.allocators.iter().map(|a| Variant { name: a.name.clone(), allocator: a.clone(), env: Vec::new() }).collect();
    let run = Run::new(STUDY, "heap managers compared on one program");
    run_variants(run, &variants, &cfg.argv, &cfg.runner, cfg.dir.as_deref(), progress)
}

/// `mtlab heap sweep`: values the allocator rejects are left out, and said so.
pub fn sweep(cfg: &HeapSweepConfig, progress: &Progress) -> Result<Run, StudyError> {
    let mut run = Run::new(SWEEP, format!("{} swept under {}", cfg.tunable_name, cfg.allocator.name));
    // The allocator as it comes, for reference: setting one glibc threshold
    // also turns off its dynamic mmap threshold, so "unset" is a value of its own.
    cfg.tunable.check_name(&cfg.allocator)?;
    let mut variants =
        vec![Variant { name: format!("{} unset", cfg.tunable_name), allocator: cfg.allocator.clone(), env: Vec::new() }];
    for value in &cfg.values {
        if let Some(why) = cfg.tunable.check(value, &cfg.allocator)? {
            run.notes.push(format!("{}={value} left out: {why}", cfg.tunable_name));
            continue;
        }
        variants.push(Variant {
            name: format!("{}={value}", cfg.tunable_name),
            allocator: cfg.allocator.clone(),
            env: vec![cfg.tunable.env(value)],
        });
    }
    if variants.len() == 1 {
        return Err(StudyError::Config(format!("no value of {} to run: {}", cfg.tunable_name, run.notes.join("; "))));
    }
    run.settings.insert("tunable".into(), cfg.tunable_name.clone());
    run.settings.insert("objective".into(), cfg.objective.name().into());
    if let tunables::Tunable::Glibc(n) = &cfg.tunable {
        if let Some((_, what)) = tunables::GLIBC.iter().find(|(k, _)| k == n) {
            run.notes.push(format!("{n}: {what}"));
        }
    }
    run_variants(run, &variants, &cfg.argv, &cfg.runner, cfg.dir.as_deref(), progress)
}

#[derive(Debug, Clone)]
pub struct HeapReplayConfig {
    pub trace: PathBuf,
    pub allocators: Vec<Allocator>,
    pub runner: RunnerOptions,
    pub dir: Option<PathBuf>,
}

/// `mtlab heap replay`: the trace's heap calls re-executed under each
/// allocator by the replay program, measured like any program.
pub fn replay(cfg: &HeapReplayConfig, progress: &Progress) -> Result<Run, StudyError> {
    let tf = TraceFile::open(&cfg.trace).map_err(|e| StudyError::Config(e.to_string()))?;
    if tf.header.sample_interval != 0 {
        return Err(StudyError::Config(format!(
            "{} is a sampled trace: it holds a sample of the calls, not all of them; replay a full trace (`mtlab record` without --sample)",
            cfg.trace.display()
        )));
    }
    if tf.compact_quantum().is_some() {
        return Err(StudyError::Config(format!(
            "{} is compact: its calls are in a coarser order across threads than they ran; replay the trace before `mtlab compact`",
            cfg.trace.display()
        )));
    }
    let (dir, _tmp) = child::work_dir(cfg.dir.as_deref())?;
    let ops = dir.join("replay.ops");
    let summary = replay::write_ops(&tf, &ops)?;
    let exe = crate::native::path(crate::native::Part::HeapReplay)?;
    let mut run = Run::new(REPLAY, format!("{} replayed under each heap manager", cfg.trace.display()));
    run.settings.insert("trace".into(), cfg.trace.display().to_string());
    run.settings.insert("replayed calls".into(), summary.ops.to_string());
    run.settings.insert("threads".into(), summary.threads.to_string());
    run.settings.insert("replay window (ops)".into(), REPLAY_WINDOW.to_string());
    run.settings.insert("recorded peak live bytes".into(), summary.peak_live.to_string());
    if summary.unknown > 0 {
        run.notes.push(format!(
            "{} frees or reallocs were of blocks allocated before tracing began: frees skipped, reallocs replayed as mallocs",
            summary.unknown
        ));
    }
    run.notes.push(format!(
        "replayed {} calls of {} thread(s) in each thread's recorded order; {} frees of another thread's block wait for its allocation{}",
        summary.ops,
        summary.threads,
        summary.cross_thread,
        if summary.threads > 1 {
            format!(", and no call runs until all but {REPLAY_WINDOW} of the calls recorded before it (in any thread) have run")
        } else {
            String::new()
        }
    ));
    if summary.threads > 1 {
        run.notes.push(
            "the replay starts a thread per recorded thread, and the thread library allocates for each (glibc: its TLS \
             vector): the traced replay has those calls too"
                .into(),
        );
    }
    run.notes.push("peak RSS of the replay is its heap's: the replay's own ops file and tables (resident before its first call) are taken off".into());
    let variants: Vec<Variant> =
        cfg.allocators.iter().map(|a| Variant { name: a.name.clone(), allocator: a.clone(), env: Vec::new() }).collect();
    let argv = vec![exe.into_os_string(), ops.into_os_string(), REPLAY_WINDOW.to_string().into()];
    let mut run = run_variants(run, &variants, &argv, &cfg.runner, Some(&dir), progress)?;
    if let Some((lo, hi, worst)) = peak_live_deviation(&run, summary.peak_live) {
        let (lo, hi) = (human_bytes(lo as u64), human_bytes(hi as u64));
        let span = if lo == hi { lo } else { format!("{lo}–{hi}") };
        run.notes.push(format!(
            "{}peak live bytes in the replays: {span} against {} recorded (within {:.1} %{})",
            if worst > PEAK_LIVE_TOLERANCE { "warning: " } else { "" },
            human_bytes(summary.peak_live),
            worst * 100.0,
            if worst > PEAK_LIVE_TOLERANCE {
                "; the threads' order drifted from the recording's, so the heap managers were not given the same heap"
            } else {
                ""
            }
        ));
    }
    Ok(run)
}

/// How many ops a replay thread may run ahead of the recorded order of all threads.
const REPLAY_WINDOW: u64 = 64;

/// Peak live bytes the replay may miss the recording's by before the run warns.
const PEAK_LIVE_TOLERANCE: f64 = 0.05;


#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn process(cmd: &str, mallocs: u64, peak_live: u64, children: Vec<serde_json::Value>) -> serde_json::Value {
        json!({
            "cmdline": [cmd],
            "functions": {"malloc": {"calls": mallocs}, "free": {"calls": mallocs / 2}},
            "peak": {"live_bytes": peak_live},
            "children": children,
        })
    }

    #[test]
    fn many_frees_of_unknown_blocks_make_a_warning() {
        // larson under jemalloc before operator new was traced.
        let w = unknown_frees_warning("jemalloc", 3_512_671, 3_512_674).expect("a warning");
        assert!(w.contains("jemalloc") && w.contains("3512671 of 3512674"), "{w}");
        // A few blocks from before tracing began: no warning.
        assert_eq!(unknown_frees_warning("glibc", 3, 649_380), None);
        assert_eq!(unknown_frees_warning("glibc", 99, 100), None, "too few to matter");
        assert_eq!(unknown_frees_warning("glibc", 1_000, 1_000_000), None, "0.1 % of the frees");
        assert!(unknown_frees_warning("glibc", 10_000, 1_000_000).is_some(), "1 %");
        // The frees counted are free's and every operator delete's.
        let r = json!({"functions": {"free": {"calls": 5}, "operator delete": {"calls": 7},
                                     "operator delete[](size)": {"calls": 1}, "malloc": {"calls": 100}}});
        assert_eq!(frees_of(&r), 13);
    }

    #[test]
    fn sites_live_under_one_allocator_only_are_named() {
        let site = |f: &str, b: u64| json!({"peak_live_bytes": b, "frames": [{"function": f}, {"module": "libstdc++.so.6", "offset": "0xa0"}]});
        let glibc = json!({"top_sites": {"at_peak": [site("main", 1000)]}});
        let jemalloc = json!({"top_sites": {"at_peak": [site("main", 1000), site("pool", 72704)]}});
        let mut sites = BTreeMap::new();
        sites.insert("glibc".to_string(), sites_at_peak(&glibc));
        sites.insert("jemalloc".to_string(), sites_at_peak(&jemalloc));
        let note = differing_sites(&sites).unwrap();
        assert!(note.contains("pool ← libstdc++.so.6+0xa0: live at the peak under jemalloc 71.0 KiB; none under glibc"), "{note}");
        assert!(!note.contains("main"), "{note}");
        // A variant whose list was cut at --top cannot say "none".
        sites.get_mut("glibc").unwrap().1 = false;
        assert_eq!(differing_sites(&sites), None);
    }

    #[test]
    fn the_measured_process_is_the_one_with_the_largest_heap_then_the_most_calls() {
        // pyenv's shim: bash execs a helper, then python3, whose pymalloc keeps
        // most objects away from malloc: fewer calls, a far larger heap.
        let python = process("python3", 500, 12_900_000, vec![]);
        let helper = process("bash pyenv-which", 3000, 96_000, vec![]);
        let root = process("bash pyenv", 2000, 80_000, vec![helper, python]);
        assert_eq!(measured_name(busiest(&root)), "python3");
        // Equal heaps: the busier one.
        let a = process("a", 10, 4096, vec![]);
        let b = process("b", 20, 4096, vec![]);
        let root = process("sh", 5, 1024, vec![a, b]);
        assert_eq!(measured_name(busiest(&root)), "b");
        // A lone process is itself.
        let root = process("prog", 1, 0, vec![]);
        assert!(std::ptr::eq(busiest(&root), &root));
    }
}
