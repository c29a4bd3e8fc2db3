//! Command-line parsing into validated configs, then one call into a study.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::heap::{self, AnalyzeOptions};
use crate::record::{self, RecordConfig, RecordError, SampleConfig, Stacks, Unwind};

fn parse_size_arg(s: &str) -> Result<u64, String> {
    crate::units::parse_size(s).map_err(|e| e.to_string())
}
use crate::report::{self, RunReport};
use crate::trace::{TraceError, TraceFile};

#[derive(Parser, Debug)]
#[command(name = "mtlab", version, about = "A performance lab for multithreaded programs on Linux",
          long_about = "mtlab measures how the runtime layers under a program — heap manager, heap profiler, \
thread library, core placement — change its speed and memory, and what it costs to look.\n\n\
Start with `mtlab demo`, or trace any program with `mtlab record -- PROGRAM` and read it with `mtlab report FILE`.")]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a program with the heap tracer and write a trace file.
    Record(RecordArgs),
    /// Analyse a trace: per-function costs, heap shape, fragmentation, top sites, leaks.
    Report(ReportArgs),
    /// Record and report the built-in malloc-test workload.
    Demo(DemoArgs),
    /// Control a running sampled process: start, stop, interval SIZE, dump, status.
    Ctl(CtlArgs),
    /// Benchmarks: measure what mtlab costs against other tools.
    #[command(subcommand)]
    Bench(crate::bench::BenchCommand),
}

#[derive(Args, Debug)]
struct RecordArgs {
    /// Trace file to write; traced children write FILE.PID beside it.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Capture call stacks (fp) or not (none); see --unwind for how.
    #[arg(long, value_enum, default_value = "fp")]
    stacks: Stacks,
    /// How stacks are captured: frame pointers, or a DWARF unwinder for code built without them.
    #[arg(long, value_enum, default_value = "fp")]
    unwind: Unwind,
    /// Sampling heap profiler instead of a full trace: sample one byte in INTERVAL on average (e.g. 512KiB).
    #[arg(long, value_name = "INTERVAL", value_parser = parse_size_arg)]
    sample: Option<u64>,
    /// With --sample: start with sampling off; switch it with `mtlab ctl PID start`.
    #[arg(long, requires = "sample")]
    inactive: bool,
    /// With --sample: fixed seed for the sampler (reproducible runs); 0 draws one from the clock.
    #[arg(long, default_value_t = 0, requires = "sample")]
    sample_seed: u64,
    /// Most frames kept per stack (1-256).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=256))]
    depth: u32,
    /// Trace only the started process, not the processes it starts.
    #[arg(long)]
    no_follow: bool,
    /// Capture a stack for free() too (off by default: frees carry stack id 0).
    #[arg(long)]
    free_stacks: bool,
    /// Run the program once untraced first, to report the tracing slowdown.
    #[arg(long)]
    baseline: bool,
    /// The program to run, then its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "PROGRAM [ARGS]...")]
    command: Vec<OsString>,
}

#[derive(Args, Debug)]
struct ReportArgs {
    /// A trace written by `mtlab record` (its children's traces are found beside it).
    file: PathBuf,
    /// Print one JSON object instead of tables (shape: docs/metrics.md).
    #[arg(long)]
    json: bool,
    /// Also write every table and the time series as CSV files into DIR.
    #[arg(long, value_name = "DIR")]
    csv: Option<PathBuf>,
    /// Most points in the time series.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    points: u64,
    /// Sites listed in each top table.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// Report only FILE, not the traces of its child processes.
    #[arg(long)]
    no_children: bool,
    /// Write the heap profile (allocated and in-use objects and bytes) as gzipped pprof, for `go tool pprof`.
    #[arg(long, value_name = "OUT.pb.gz")]
    pprof: Option<PathBuf>,
    /// Write an interactive SVG flame graph of --flame-value.
    #[arg(long, value_name = "OUT.svg")]
    flamegraph: Option<PathBuf>,
    /// Write folded stacks ("outer;...;inner value" lines) of --flame-value.
    #[arg(long, value_name = "OUT.txt")]
    collapsed: Option<PathBuf>,
    /// What the flame graph and folded stacks weigh.
    #[arg(long, value_enum, default_value = "alloc-bytes")]
    flame_value: crate::profile::flame::FlameValue,
    /// Export the profile of this traced process (default: the root process of FILE).
    #[arg(long)]
    pid: Option<u32>,
}

#[derive(Args, Debug)]
struct DemoArgs {
    /// Where to keep the demo's trace.
    #[arg(short, long, default_value = "mtlab-demo.mtl")]
    output: PathBuf,
    /// Iterations per thread of the workload.
    #[arg(long, default_value_t = 200_000)]
    iterations: u64,
}

#[derive(Args, Debug)]
struct CtlArgs {
    /// The process id of a program started with `mtlab record --sample`.
    pid: u32,
    #[command(subcommand)]
    action: CtlAction,
}

#[derive(Subcommand, Debug)]
enum CtlAction {
    /// Switch sampling on.
    Start,
    /// Switch sampling off (already sampled blocks still have their frees recorded).
    Stop,
    /// Change the mean sampling interval, e.g. 2MiB.
    Interval {
        #[arg(value_parser = parse_size_arg)]
        size: u64,
    },
    /// Write the profile so far (pprof) without stopping the program.
    Dump {
        /// Output file (default mtlab.PID.heap.pb.gz).
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Seconds to wait for the process to flush.
        #[arg(long, default_value_t = 5)]
        timeout: u64,
    },
    /// Print whether sampling is on, the interval and the number of samples.
    Status,
}

/// Errors that end the command, mapped to exit codes.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error(transparent)]
    Csv(#[from] report::csv_out::CsvError),
    #[error(transparent)]
    Bench(#[from] crate::bench::BenchError),
    #[error(transparent)]
    Export(#[from] crate::profile::export::ProfileExportError),
    #[error(transparent)]
    Ctl(#[from] crate::ctl::CtlError),
    #[error("{0}")]
    Other(String),
}

impl CliError {
    fn exit_code(&self) -> u8 {
        match self {
            CliError::Record(RecordError::ProgramNotFound(_)) => 127,
            CliError::Record(RecordError::NotExecutable(_)) => 126,
            _ => 1,
        }
    }
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("mtlab: error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode, CliError> {
    match cli.command {
        Command::Record(a) => cmd_record(a),
        Command::Report(a) => cmd_report(a),
        Command::Demo(a) => cmd_demo(a),
        Command::Ctl(a) => cmd_ctl(a),
        Command::Bench(b) => crate::bench::run(b).map_err(Into::into),
    }
}

fn default_output(program: &OsString) -> PathBuf {
    let name = std::path::Path::new(program).file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    PathBuf::from(format!("mtlab.{name}.mtl"))
}

fn cmd_record(a: RecordArgs) -> Result<ExitCode, CliError> {
    let mut command = a.command.into_iter();
    let program = command.next().expect("clap requires PROGRAM");
    let cfg = RecordConfig {
        output: a.output.unwrap_or_else(|| default_output(&program)),
        stacks: a.stacks,
        unwind: a.unwind,
        sample: a.sample.map(|interval| SampleConfig { interval, inactive: a.inactive, seed: a.sample_seed }),
        depth: a.depth,
        follow: !a.no_follow,
        free_stacks: a.free_stacks,
        baseline: a.baseline,
        program,
        args: command.collect(),
    };
    let outcome = record::record(&cfg)?;
    let n = outcome.traces.len();
    match outcome.traces.first() {
        Some(first) => eprintln!(
            "mtlab: wrote {} ({} trace file{}, {}) in {:.3} s; read it with `mtlab report {}`",
            first.display(),
            n,
            if n == 1 { "" } else { "s" },
            report::human_bytes(outcome.bytes),
            outcome.wall.as_secs_f64(),
            first.display()
        ),
        None => eprintln!(
            "mtlab: no trace was written: the program made no traced call (statically linked, or it cleared LD_PRELOAD)"
        ),
    }
    if let Some(sig) = std::os::unix::process::ExitStatusExt::signal(&outcome.status) {
        reraise(sig);
    }
    Ok(ExitCode::from(outcome.exit_code() as u8))
}

/// Ends mtlab by the signal that ended the program, so shells see the same.
fn reraise(sig: i32) {
    // SAFETY: resetting to the default action and raising are plain libc calls.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

pub fn load_reports(file: &std::path::Path, children: bool, opts: &AnalyzeOptions) -> Result<RunReport, CliError> {
    if !file.exists() {
        return Err(CliError::Other(format!(
            "{} does not exist; write a trace with `mtlab record -o {} -- PROGRAM`",
            file.display(),
            file.display()
        )));
    }
    let files = if children { record::trace_family(file) } else { vec![file.to_path_buf()] };
    let mut processes = Vec::new();
    for (i, f) in files.iter().enumerate() {
        match TraceFile::open(f) {
            Ok(t) => processes.push(heap::analyze(&t, opts)?),
            Err(e) if i == 0 => return Err(e.into()),
            Err(e) => eprintln!("mtlab: warning: skipping {}: {e}", f.display()),
        }
    }
    Ok(RunReport { processes })
}

fn cmd_report(a: ReportArgs) -> Result<ExitCode, CliError> {
    let opts = AnalyzeOptions { max_points: a.points as usize, top: a.top };
    let run = load_reports(&a.file, !a.no_children, &opts)?;
    let req = crate::profile::export::ExportRequest {
        pprof: a.pprof.clone(),
        flamegraph: a.flamegraph.clone(),
        collapsed: a.collapsed.clone(),
        value: Some(a.flame_value),
    };
    if !req.is_empty() {
        let source = match a.pid {
            None => a.file.clone(),
            Some(pid) => run
                .processes
                .iter()
                .find(|p| p.pid == pid)
                .map(|p| PathBuf::from(&p.file))
                .ok_or_else(|| CliError::Other(format!("no traced process {pid} in {}", a.file.display())))?,
        };
        for f in crate::profile::export::export(&source, &req)? {
            eprintln!("mtlab: wrote {}", f.display());
        }
    }
    if let Some(dir) = &a.csv {
        let files = report::csv_out::write_csv(&run, dir)?;
        eprintln!("mtlab: wrote {} CSV files into {}", files.len(), dir.display());
    }
    if a.json {
        let mut text = serde_json::to_string_pretty(&report::json::to_json(&run)).expect("json");
        text.push('\n');
        print_out(&text);
    } else {
        print_out(&report::table::render(&run));
    }
    Ok(ExitCode::SUCCESS)
}

fn cmd_ctl(a: CtlArgs) -> Result<ExitCode, CliError> {
    use crate::ctl::{self, CtlPage};
    match a.action {
        CtlAction::Dump { output, timeout } => {
            let trace = ctl::flush_for_dump(a.pid, std::time::Duration::from_secs(timeout))?;
            let out = output.unwrap_or_else(|| ctl::default_dump_path(a.pid));
            let req = crate::profile::export::ExportRequest { pprof: Some(out.clone()), ..Default::default() };
            crate::profile::export::export(&trace, &req)?;
            eprintln!("mtlab: wrote {} (profile of process {} so far, from {})", out.display(), a.pid, trace.display());
        }
        action => {
            let page = CtlPage::open(a.pid)?;
            match action {
                CtlAction::Start => page.set_active(true),
                CtlAction::Stop => page.set_active(false),
                CtlAction::Interval { size } => page.set_interval(size),
                _ => {}
            }
            println!("{}", ctl::status_line(a.pid, &page));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes to stdout; a closed pipe (`mtlab report ... | head`) ends quietly.
fn print_out(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("mtlab: cannot write to stdout: {e}");
        }
    }
}

fn cmd_demo(a: DemoArgs) -> Result<ExitCode, CliError> {
    let workload = crate::native::path(crate::native::Part::MallocTest).map_err(RecordError::from)?;
    eprintln!("mtlab demo: tracing the built-in malloc-test workload (2 threads, 512-byte blocks, call depth 10)");
    let cfg = RecordConfig {
        output: a.output.clone(),
        stacks: Stacks::Fp,
        unwind: Unwind::Fp,
        sample: None,
        depth: 64,
        follow: true,
        free_stacks: false,
        baseline: true,
        program: workload.into_os_string(),
        args: ["--threads", "2", "--size", "512", "--depth", "10", "--iterations", &a.iterations.to_string()]
            .iter()
            .map(OsString::from)
            .collect(),
    };
    let outcome = record::record(&cfg)?;
    if !outcome.status.success() {
        return Err(CliError::Other(format!("the demo workload failed: {}", outcome.status)));
    }
    let run = load_reports(&a.output, true, &AnalyzeOptions::default())?;
    print_out(&report::table::render(&run));
    eprintln!("mtlab demo: trace kept in {}; try `mtlab report --json {}`", a.output.display(), a.output.display());
    Ok(ExitCode::SUCCESS)
}
