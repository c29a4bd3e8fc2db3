//! `mtlab bench`: benchmarks that compare ratios inside one run.
//!
//! `bench tracer` runs the malloc-test workload untraced, under `mtlab
//! record` and under heaptrack (when installed), interleaving the three so
//! drift of a shared VM hits all alike, and reports medians and ratios,
//! trace sizes, and the speed and memory of `mtlab report` on the trace.
//! `bench program` does the same for any command by wall time.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use serde::Serialize;

use crate::native::{self, Part};

pub mod malloc;
pub mod plot;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Cost of tracing the malloc-test workload: untraced vs mtlab vs heaptrack.
    Tracer(TracerArgs),
    /// Wall-time cost of tracing any program: untraced vs mtlab vs heaptrack.
    Program(ProgramArgs),
    /// What heap profilers cost: mtlab's sampler, jemalloc's and tcmalloc's, by interval, threads and unwinder.
    Malloc(malloc::MallocArgs),
}

/// Options every heap-tracer comparison takes.
#[derive(Args, Debug)]
pub struct CommonArgs {
    /// Directory for the traces (default: a temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Skip heaptrack even if installed.
    #[arg(long)]
    no_heaptrack: bool,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
pub struct TracerArgs {
    /// Threads of the workload.
    #[arg(long, default_value_t = 2)]
    threads: u32,
    /// Iterations (malloc+free pairs) per thread.
    #[arg(long, default_value_t = 1_000_000)]
    iterations: u64,
    /// Repetitions of each configuration (interleaved).
    #[arg(long, default_value_t = 5)]
    reps: u32,
    #[command(flatten)]
    common: CommonArgs,
}

#[derive(Args, Debug)]
pub struct ProgramArgs {
    /// Repetitions of each configuration (interleaved).
    #[arg(long, default_value_t = 3)]
    reps: u32,
    #[command(flatten)]
    common: CommonArgs,
    /// Run heaptrack in record-only mode (`--raw`): its interpreter runs out
    /// of memory on some programs (cc1 with heaptrack 1.4).
    #[arg(long)]
    heaptrack_raw: bool,
    /// The program to run, then its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<OsString>,
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("cannot run {what}: {source}")]
    Spawn { what: String, source: std::io::Error },
    #[error("{what} failed ({status}); its stderr:\n{stderr}")]
    Failed { what: String, status: String, stderr: String },
    #[error("{0}")]
    Output(String),
    #[error(transparent)]
    Unpack(#[from] native::UnpackError),
    #[error("cannot use {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

pub(crate) struct Measured {
    stdout: String,
    wall: Duration,
    max_rss_kib: u64,
}

/// Runs `cmd` to completion, with its own peak RSS from wait4.
pub(crate) fn measure(mut cmd: Command, what: &str) -> Result<Measured, BenchError> {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let start = Instant::now();
    let child = cmd.spawn().map_err(|source| BenchError::Spawn { what: what.into(), source })?;
    let pid = child.id() as libc::pid_t;
    let out = {
        let mut child = child;
        let mut stdout = String::new();
        let mut stderr = String::new();
        use std::io::Read;
        let (mut o, mut e) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
        let t = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = e.read_to_string(&mut s);
            s
        });
        let _ = o.read_to_string(&mut stdout);
        stderr.push_str(&t.join().unwrap_or_default());
        (stdout, stderr)
    };
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: pid is our own unwaited child; status and usage are valid pointers.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let wall = start.elapsed();
    if r < 0 {
        return Err(BenchError::Spawn { what: what.into(), source: std::io::Error::last_os_error() });
    }
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
        return Err(BenchError::Failed { what: what.into(), status: format!("wait status {status}"), stderr: out.1 });
    }
    Ok(Measured { stdout: out.0, wall, max_rss_kib: usage.ru_maxrss as u64 })
}

fn cycles_per_op(stdout: &str, what: &str) -> Result<f64, BenchError> {
    stdout
        .lines()
        .filter(|l| l.starts_with("{\"workload\""))
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?["cycles_per_op"].as_f64())
        .ok_or_else(|| BenchError::Output(format!("{what}: no cycles_per_op line in the workload's output")))
}

pub(crate) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub fn heaptrack_path() -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join("heaptrack")).find(|p| p.is_file())
}

fn files_size(paths: &[PathBuf]) -> u64 {
    paths.iter().filter_map(|p| std::fs::metadata(p).ok()).map(|m| m.len()).sum()
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

#[derive(Debug, Serialize)]
pub struct ConfigResult {
    pub name: String,
    /// Median over repetitions: cycles per op (tracer) or wall seconds (program).
    pub median: f64,
    pub samples: Vec<f64>,
    pub ratio: f64,
    pub trace_bytes: Option<u64>,
    /// Peak RSS of the measured program: for mtlab, what the traced process
    /// itself reported (STATS `max_rss_kib`); otherwise the largest process
    /// of the run (from wait4).
    pub max_rss_kib: u64,
    /// mtlab only: peak RSS of the largest process of the run (the program,
    /// or `mtlab record` finishing the trace after the program ended).
    pub recorder_rss_kib: Option<u64>,
    /// mtlab only: median wall seconds of the program itself (RUNINFO
    /// `wall_ns`: from its start to its exit, before the trace is finished),
    /// and that over the untraced median.
    pub program_wall_s: Option<f64>,
    pub program_ratio: Option<f64>,
    /// mtlab only: the same traces after `mtlab compact` (largest over the
    /// repetitions), and the median seconds compaction took.
    pub compact_bytes: Option<u64>,
    pub compact_s: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct ReportSpeed {
    pub events: u64,
    /// The fastest of `runs` runs: on a shared machine, the one least
    /// disturbed by others.
    pub seconds: f64,
    pub events_per_second: f64,
    pub median_seconds: f64,
    pub runs: u32,
    pub max_rss_kib: u64,
}

#[derive(Debug, Serialize)]
pub struct BenchResult {
    pub benchmark: String,
    pub unit: String,
    pub command: Vec<String>,
    pub configs: Vec<ConfigResult>,
    pub report: Option<ReportSpeed>,
}

/// A directory for traces: the one given, or a fresh temporary one (kept alive by the guard).
pub(crate) fn work_dir(dir: Option<PathBuf>) -> Result<(PathBuf, Option<tempfile::TempDir>), BenchError> {
    match dir {
        Some(d) => {
            std::fs::create_dir_all(&d).map_err(|source| BenchError::Io { path: d.clone(), source })?;
            Ok((d, None))
        }
        None => {
            let t = tempfile::Builder::new()
                .prefix("mtlab-bench")
                .tempdir()
                .map_err(|source| BenchError::Io { path: std::env::temp_dir(), source })?;
            Ok((t.path().to_path_buf(), Some(t)))
        }
    }
}

struct Runner {
    dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    mtlab: PathBuf,
    heaptrack: Option<PathBuf>,
    heaptrack_raw: bool,
    /// Also run the workload with its own TSC reads around every call
    /// (malloc-test's --stamp-calls): the floor of a tracer that times each call.
    stamp_floor: bool,
}

/// The configuration that runs malloc-test with --stamp-calls.
const STAMP_FLOOR: &str = "untraced + TSC reads";

impl Runner {
    fn new(dir: Option<PathBuf>, no_heaptrack: bool, heaptrack_raw: bool) -> Result<Self, BenchError> {
        let (dir, tmp) = work_dir(dir)?;
        let mtlab = std::env::current_exe().map_err(|source| BenchError::Io { path: "mtlab".into(), source })?;
        let heaptrack = if no_heaptrack { None } else { heaptrack_path() };
        Ok(Runner { dir, _tmp: tmp, mtlab, heaptrack, heaptrack_raw, stamp_floor: false })
    }

    fn configs(&self) -> Vec<&'static str> {
        let mut v = vec!["untraced"];
        if self.stamp_floor {
            v.push(STAMP_FLOOR);
        }
        v.push("mtlab");
        if self.heaptrack.is_some() {
            v.push(if self.heaptrack_raw { "heaptrack --raw" } else { "heaptrack" });
        }
        v
    }

    /// The command for one configuration, and the trace files it leaves.
    fn command(&self, config: &str, argv: &[OsString]) -> (Command, Box<dyn Fn() -> Vec<PathBuf> + '_>) {
        match config {
            "mtlab" => {
                let out = self.dir.join("bench.mtl");
                let mut c = Command::new(&self.mtlab);
                c.arg("record").arg("-o").arg(&out).arg("--").args(argv);
                (c, Box::new(move || crate::record::trace_family(&self.dir.join("bench.mtl"))))
            }
            "heaptrack" | "heaptrack --raw" => {
                for old in heaptrack_files(&self.dir, "bench.heaptrack") {
                    let _ = std::fs::remove_file(old);
                }
                let mut c = Command::new(self.heaptrack.as_ref().unwrap());
                if self.heaptrack_raw {
                    c.arg("--raw");
                }
                c.arg("-o").arg(self.dir.join("bench.heaptrack")).args(argv);
                (c, Box::new(move || heaptrack_files(&self.dir, "bench.heaptrack")))
            }
            _ => {
                let mut c = Command::new(&argv[0]);
                c.args(&argv[1..]);
                if config == STAMP_FLOOR {
                    c.arg("--stamp-calls");
                }
                (c, Box::new(Vec::new))
            }
        }
    }

    /// Runs every configuration `reps` times, interleaved; `value` turns a
    /// run into the compared number.
    fn sweep(
        &self,
        argv: &[OsString],
        reps: u32,
        value: &dyn Fn(&Measured, &str) -> Result<f64, BenchError>,
    ) -> Result<Vec<ConfigResult>, BenchError> {
        let configs = self.configs();
        let mut samples = vec![Vec::new(); configs.len()];
        let mut sizes = vec![None; configs.len()];
        let mut rss = vec![0u64; configs.len()];
        let mut recorder_rss = vec![None; configs.len()];
        let mut program_wall: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
        let (mut compact_bytes, mut compact_s): (Vec<Option<u64>>, Vec<Vec<f64>>) =
            (vec![None; configs.len()], vec![Vec::new(); configs.len()]);
        for rep in 0..reps {
            for (i, cfg) in configs.iter().enumerate() {
                eprint!("\rmtlab bench: repetition {}/{reps}: {cfg:<20}", rep + 1);
                let (cmd, files) = self.command(cfg, argv);
                let m = measure(cmd, cfg)?;
                samples[i].push(value(&m, cfg)?);
                let family = files();
                let (program_rss, wall) = if *cfg == "mtlab" { traced_facts(&family) } else { (None, None) };
                if let Some(w) = wall {
                    program_wall[i].push(w);
                }
                if program_rss.is_some() {
                    recorder_rss[i] = Some(recorder_rss[i].unwrap_or(0).max(m.max_rss_kib));
                }
                rss[i] = rss[i].max(program_rss.unwrap_or(m.max_rss_kib));
                if *cfg != "untraced" && *cfg != STAMP_FLOOR {
                    sizes[i] = Some(files_size(&family));
                }
                if *cfg == "mtlab" {
                    let (bytes, secs) = self.compact_copies(&family)?;
                    compact_bytes[i] = Some(compact_bytes[i].unwrap_or(0).max(bytes));
                    compact_s[i].push(secs);
                }
            }
        }
        eprintln!();
        let base = median(&mut samples[0].clone());
        Ok(configs
            .iter()
            .zip(samples)
            .zip(sizes.into_iter().zip(rss.into_iter().zip(recorder_rss)))
            .zip(program_wall)
            .zip(compact_bytes.into_iter().zip(compact_s))
            .map(|((((name, mut s), (trace_bytes, (max_rss_kib, recorder_rss_kib))), mut pw), (cb, mut cs))| {
                let m = median(&mut s);
                let program_wall_s = (!pw.is_empty()).then(|| median(&mut pw));
                ConfigResult {
                    name: name.to_string(),
                    median: m,
                    samples: s,
                    ratio: m / base,
                    trace_bytes,
                    max_rss_kib,
                    recorder_rss_kib,
                    program_wall_s,
                    program_ratio: program_wall_s.map(|w| w / base),
                    compact_bytes: cb,
                    compact_s: (!cs.is_empty()).then(|| median(&mut cs)),
                }
            })
            .collect())
    }

    /// Compacts copies of an mtlab run's traces with `mtlab compact` (a
    /// child process: the work must not raise this process's RSS, which its
    /// later children would inherit in their peak-RSS figures). Returns their
    /// total size and the seconds it took.
    fn compact_copies(&self, family: &[PathBuf]) -> Result<(u64, f64), BenchError> {
        let dir = self.dir.join("compact");
        std::fs::create_dir_all(&dir).map_err(|source| BenchError::Io { path: dir.clone(), source })?;
        let start = std::time::Instant::now();
        let mut bytes = 0;
        for f in family {
            let dst = dir.join(f.file_name().unwrap_or_default());
            let mut c = Command::new(&self.mtlab);
            c.arg("compact").arg("-o").arg(&dst).arg(f);
            measure(c, "mtlab compact")?;
            bytes += std::fs::metadata(&dst).map_err(|source| BenchError::Io { path: dst.clone(), source })?.len();
        }
        Ok((bytes, start.elapsed().as_secs_f64()))
    }

    /// Times `mtlab report --json` on the last mtlab trace, `runs` times.
    fn report_speed(&self, runs: u32) -> Result<ReportSpeed, BenchError> {
        let trace = self.dir.join("bench.mtl");
        let (mut times, mut events, mut rss) = (Vec::new(), 0, 0);
        for i in 0..runs.max(1) {
            eprint!("\rmtlab bench: timing mtlab report {}/{}   ", i + 1, runs.max(1));
            let mut c = Command::new(&self.mtlab);
            c.arg("report").arg("--json").arg(&trace);
            let m = measure(c, "mtlab report")?;
            let v: serde_json::Value = serde_json::from_str(&m.stdout)
                .map_err(|e| BenchError::Output(format!("mtlab report --json: {e}")))?;
            events = v["events"].as_u64().unwrap_or(0)
                + v["children"].as_array().map(|c| c.iter().filter_map(|p| p["events"].as_u64()).sum()).unwrap_or(0);
            times.push(m.wall.as_secs_f64());
            rss = rss.max(m.max_rss_kib);
        }
        eprintln!();
        let seconds = times.iter().copied().fold(f64::INFINITY, f64::min);
        Ok(ReportSpeed {
            events,
            seconds,
            events_per_second: events as f64 / seconds,
            median_seconds: median(&mut times),
            runs: runs.max(1),
            max_rss_kib: rss,
        })
    }
}

/// What the traces of one mtlab run say of the program: the largest peak
/// RSS any traced process reported in its STATS (like wait4's figure for
/// the untraced run: the largest process), and the root's wall time from
/// RUNINFO. `family` is the root trace first; each file is opened once.
fn traced_facts(family: &[PathBuf]) -> (Option<u64>, Option<f64>) {
    let mut rss = None;
    let mut wall = None;
    for (i, f) in family.iter().enumerate() {
        let Ok(t) = crate::trace::TraceFile::open(f) else { continue };
        if let Some(kib) = t.stats.iter().find(|(k, _)| k == "max_rss_kib").and_then(|(_, v)| v.parse::<u64>().ok()) {
            rss = Some(rss.map_or(kib, |r: u64| r.max(kib)));
        }
        if i == 0 {
            wall = t.runinfo_get("wall_ns").and_then(|v| v.parse::<f64>().ok()).map(|ns| ns / 1e9);
        }
    }
    (rss, wall)
}

fn print_result(r: &BenchResult, json: bool) {
    if json {
        println!("{}", serde_json::to_string_pretty(r).expect("json"));
        return;
    }
    println!("{}: {}", r.benchmark, r.command.join(" "));
    let mut t = comfy_table::Table::new();
    t.load_style(comfy_table::presets::UTF8_FULL_CONDENSED);
    t.set_header(vec!["configuration", &format!("median {}", r.unit), "× untraced", "trace size", "peak RSS", "samples"]);
    for c in &r.configs {
        t.add_row(vec![
            c.name.clone(),
            format!("{:.3}", c.median),
            format!("{:.2}", c.ratio),
            c.trace_bytes.map(crate::report::human_bytes).unwrap_or_else(|| "-".into()),
            crate::report::human_bytes(c.max_rss_kib * 1024),
            c.samples.iter().map(|s| format!("{s:.1}")).collect::<Vec<_>>().join(" "),
        ]);
    }
    println!("{t}");
    println!(
        "peak RSS: for mtlab, the largest the traced processes reported themselves (STATS); otherwise of the largest process of the run"
    );
    if r.configs.iter().any(|c| c.name == STAMP_FLOOR) {
        println!(
            "{STAMP_FLOOR}: the untraced workload reading the TSC before and after every malloc and free, as a tracer that times each call must: that tracer's floor here"
        );
    }
    for c in &r.configs {
        if let Some(kib) = c.recorder_rss_kib {
            println!(
                "{}: largest process of the run (the program, or mtlab record finishing the trace): {}",
                c.name,
                crate::report::human_bytes(kib * 1024)
            );
        }
        if let (Some(b), Some(t)) = (c.compact_bytes, c.compact_s) {
            println!(
                "{}: the same traces after `mtlab compact` (no per-call timing): {} (largest of the runs), in {t:.2} s (median)",
                c.name,
                crate::report::human_bytes(b)
            );
        }
        if let (Some(w), Some(x), true) = (c.program_wall_s, c.program_ratio, r.unit.contains("wall")) {
            println!(
                "{}: the program's own wall time, before mtlab record finishes the trace: median {w:.3} s = {x:.2}× untraced",
                c.name
            );
        }
    }
    if let Some(s) = &r.report {
        println!(
            "mtlab report: {} events in {:.3} s (fastest of {} runs; median {:.3} s) = {:.1} M events/s, peak RSS {}",
            s.events,
            s.seconds,
            s.runs,
            s.median_seconds,
            s.events_per_second / 1e6,
            crate::report::human_bytes(s.max_rss_kib * 1024)
        );
    }
}

pub fn run(cmd: BenchCommand) -> Result<ExitCode, BenchError> {
    match cmd {
        BenchCommand::Tracer(a) => {
            let mut runner = Runner::new(a.common.dir, a.common.no_heaptrack, false)?;
            runner.stamp_floor = true;
            let workload = native::path(Part::MallocTest)?;
            let argv: Vec<OsString> = vec![
                workload.into_os_string(),
                "--threads".into(),
                a.threads.to_string().into(),
                "--size".into(),
                "512".into(),
                "--depth".into(),
                "10".into(),
                "--iterations".into(),
                a.iterations.to_string().into(),
            ];
            let mut configs = runner.sweep(&argv, a.reps, &|m, what| cycles_per_op(&m.stdout, what))?;
            // The workload's own timings are the measure here; wall times are not.
            for c in &mut configs {
                c.program_wall_s = None;
                c.program_ratio = None;
            }
            let report = Some(runner.report_speed(a.reps.max(3))?);
            let r = BenchResult {
                benchmark: "tracer overhead on malloc-test".into(),
                unit: "cycles/op".into(),
                command: argv.iter().map(|s| s.to_string_lossy().to_string()).collect(),
                configs,
                report,
            };
            print_result(&r, a.common.json);
        }
        BenchCommand::Program(a) => {
            let runner = Runner::new(a.common.dir, a.common.no_heaptrack, a.heaptrack_raw)?;
            let configs = runner.sweep(&a.command, a.reps, &|m, _| Ok(m.wall.as_secs_f64()))?;
            let report = Some(runner.report_speed(a.reps.max(3))?);
            let r = BenchResult {
                benchmark: "tracer overhead on a program".into(),
                unit: "wall s".into(),
                command: a.command.iter().map(|s| s.to_string_lossy().to_string()).collect(),
                configs,
                report,
            };
            print_result(&r, a.common.json);
        }
        BenchCommand::Malloc(a) => {
            let r = malloc::run(a.clone())?;
            if let Some(path) = &a.svg {
                plot::write_svg(&r.results, path)?;
                eprintln!("mtlab: wrote {}", path.display());
            }
            if let Some(dir) = &a.csv {
                let path = malloc::write_csv(&r, dir)?;
                eprintln!("mtlab: wrote {}", path.display());
            }
            if a.json {
                println!("{}", serde_json::to_string_pretty(&r).expect("json"));
            } else {
                print!("{}", malloc::render(&r, &a.intervals));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
