//! Command-line parsing into validated configs, then one call into a study.
//!
//! - `mod.rs`: the command list, errors and exit codes, `emit` to the
//!   exporters; record, report, demo, ctl, compact.
//! - `study.rs`: `bench …`, `runs`, `diff`: the shared `--reps/--warmup/--min-
//!   time` and `--json/--csv/--svg/-q/--store/--no-store`.
//! - `profile.rs`: `profile simulate`; `threads.rs`: `mtlab threads …`;
//!   `affinity.rs`: `mtlab affinity`; `heap_study.rs`: `mtlab heap compare`.

mod affinity;
mod attach;
mod heap_study;
mod otlp;
mod profile;
mod report_diff;
mod run_ref;
mod study;
mod threads;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::export::{self, csv::CsvExporter, json::JsonExporter, svg::SvgExporter, text::TextExporter, Document, Exporter};
use crate::analysis::AnalyzeOptions;
use crate::record::{self, RecordConfig, RecordError, SampleConfig, Stacks, Unwind};
use crate::report::{self, RunReport};
use crate::trace::TraceError;

/// A size as people write it (`512KiB`), for clap.
pub(crate) fn parse_size_arg(s: &str) -> Result<u64, String> {
    crate::units::parse_size(s).map_err(|e| e.to_string())
}

/// `record --time`: `every`, or `1/N` (one call in N timed, on average).
fn parse_time_arg(s: &str) -> Result<u64, String> {
    let s = s.trim();
    if s == "every" {
        return Ok(1);
    }
    match s.strip_prefix("1/").map(|n| n.trim().parse::<u64>()) {
        Some(Ok(n)) if (1..=1_000_000).contains(&n) => Ok(n),
        _ => Err(format!("`{s}` is neither `every` nor `1/N` with N from 1 to 1000000 (e.g. --time 1/32)")),
    }
}

/// A CPU set flag: `one` (the first CPU this process may use), `all`, or a
/// list such as `0-3,6`, checked against the CPUs this process may use.
pub(crate) fn cpu_set_arg(spec: &str, flag: &str) -> Result<Vec<usize>, CliError> {
    let allowed = crate::study::env::allowed_cpus();
    let cpus = match spec.trim() {
        "one" => allowed.first().map(|&c| vec![c]).unwrap_or_default(),
        "all" => allowed,
        list => crate::study::env::parse_cpu_list(list).map_err(|e| CliError::Other(format!("{flag} {list}: {e}")))?,
    };
    crate::studies::threads::check_cpus(&cpus, &format!("{flag} {spec}"))?;
    Ok(cpus)
}

/// A percentage as people write it (`90`, `2%`, `0.5 %`), above 0 and at most 100.
pub(crate) fn parse_percent(s: &str) -> Result<f64, String> {
    match s.trim().trim_end_matches('%').trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 100.0 => Ok(v),
        _ => Err(format!("`{s}` is not a percentage above 0 and at most 100 (e.g. 90 or 2%)")),
    }
}

/// `parse_percent`, 0 allowed (a threshold of 0: every significant change counts).
pub(crate) fn parse_percent_or_zero(s: &str) -> Result<f64, String> {
    if s.trim().trim_end_matches('%').trim().parse::<f64>() == Ok(0.0) {
        return Ok(0.0);
    }
    parse_percent(s).map_err(|_| format!("`{s}` is not a percentage from 0 to 100 (e.g. 0, 2% or 5)"))
}

/// Prints and writes a document as the flags ask: text or JSON on stdout,
/// CSV and SVG files into the directories given.
pub(crate) fn emit(doc: &Document, json: bool, csv: Option<&PathBuf>, svg: Option<&PathBuf>) -> Result<(), CliError> {
    let screen: &dyn Exporter = if json { &JsonExporter } else { &TextExporter };
    export::print(screen, doc)?;
    for (dir, exporter, what) in [(csv, &CsvExporter as &dyn Exporter, "CSV"), (svg, &SvgExporter, "SVG")] {
        if let Some(dir) = dir {
            let files = export::write_files(exporter, doc, dir)?;
            if files.is_empty() {
                say!("mtlab: nothing to write as {what}");
            } else {
                say!("mtlab: wrote {} {what} file{} into {}", files.len(), if files.len() == 1 { "" } else { "s" }, dir.display());
            }
        }
    }
    Ok(())
}

/// Writes `doc` as one self-contained HTML page (`--html FILE`).
pub(crate) fn write_html(doc: &Document, path: &std::path::Path, title: &str, extras: &export::html::Extras) -> Result<(), CliError> {
    let html = export::html::page(title, &doc.views, extras)?;
    crate::platform::safe_fs::write_replacing(path, html.as_bytes(), 0o666).map_err(|source| export::ExportError::Write { path: path.to_path_buf(), source })?;
    say!("mtlab: wrote {} (a self-contained page: open it in a browser)", path.display());
    Ok(())
}

fn print_out(text: impl AsRef<str>) {
    export::print_stdout(text.as_ref().as_bytes());
}

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
    #[command(after_long_help = RECORD_ENVIRONMENT)]
    Record(RecordArgs),
    /// Analyse a trace: per-function costs, heap shape, fragmentation, top sites, leaks.
    #[command(after_long_help = REPORT_ENVIRONMENT)]
    Report(ReportArgs),
    /// A tour on built-in workloads: a heap trace and a sampled profile, then each study in small (12–25 s on 2 cores); writes one HTML report.
    Demo(DemoArgs),
    /// Control a running sampled process: start, stop, interval SIZE, dump, status.
    Ctl(CtlArgs),
    /// Benchmarks: measure what mtlab costs against other tools (each run is stored).
    #[command(subcommand)]
    Bench(study::BenchCommand),
    /// Threads study: thread creation, context switches and message passing by CPU set, placement, thread library and preemption model.
    #[command(subcommand)]
    Threads(threads::ThreadsCommand),
    /// Heap study: heap managers compared on one program, or one tunable swept (time, memory, fragmentation, per-call cycles).
    #[command(subcommand)]
    Heap(heap_study::HeapCommand),
    /// Affinity study: throughput of one TCP flow for every (flow core, application core) pair, counters per GB, a recommended placement.
    #[command(long_about = affinity::LONG_ABOUT, mut_arg("reps", study::reps_help(3)))]
    Affinity(affinity::AffinityArgs),
    /// Run a built-in workload, or print its command (`--path`) to trace it; without NAME, list them.
    #[command(long_about = "Run one of mtlab's built-in workloads (the programs its studies and `mtlab demo` use), \
or print its command line with --path, to run it under `mtlab record`:\n\n  \
mtlab record -o app.mtl -- $(mtlab workload --path latency-pipeline) --messages 150000\n\n\
Without NAME: the list of workloads with their arguments. Each prints its own usage on a bad argument.")]
    Workload(WorkloadArgs),
    /// The built-in flow's receiver process (started by `mtlab affinity`).
    #[command(name = "__affinity-receiver", hide = true)]
    AffinityReceiver { listen: std::net::Ipv4Addr },
    /// CPU topology: packages, cores, SMT siblings, caches, NUMA nodes, and each CPU pair's placement class.
    #[command(long_about = "CPU topology from sysfs: packages, dies, cores, SMT siblings, each cache with the CPUs sharing it, \
NUMA nodes, limited to the CPUs this process may use; and each CPU pair's placement class.\n\n\
Placement classes, nearest first: same (one logical CPU), smt (two hardware threads of one core), core (different cores \
sharing an L2), llc (different cores sharing the last-level cache), package (same socket, no shared cache), remote \
(different sockets). `mtlab threads ctx --place CLASS` pins a ring's neighbours by them.")]
    Topo(TopoArgs),
    /// List, show and export stored study runs.
    Runs(study::RunsArgs),
    /// Compare two stored runs of one study, measurement by measurement.
    #[command(long_about = "Compare two stored runs of one study, measurement by measurement.\n\n\
The change of each measurement is the Hodges–Lehmann ratio of run B to run A with its Mann–Whitney \
interval (95 % or more), computed from the repetitions. A change is flagged (faster/slower, better/worse) when that \
interval excludes \"no change\" and the change is at least --threshold; otherwise it is within noise. \
Settings or machines that differ between the runs are named. The two runs were not interleaved, so the \
intervals do not hold how the host changed between them: flagged changes of times and rates are marked \
\"(between runs)\".")]
    Diff(study::DiffArgs),
    /// Heap profiles: simulate a sampling profiler on a full trace.
    #[command(subcommand)]
    Profile(ProfileCommand),
    /// Shrink a finished trace: drop per-call timing, keep every event and every per-function figure.
    #[command(long_about = "Shrink a finished trace by dropping per-call timing.\n\n\
Every event stays, with its function, thread, arguments, result, sizes and stack. Time stamps are rounded \
down to QUANTUM ticks, except that an event which touches a block, region or the program break that \
another thread touched within the same quantum is kept after it. The cycles of each function's calls are \
kept as a distribution per chunk: calls, totals, means, deviations and percentiles in `mtlab report` stay \
exact, but no single call keeps its own cycles, and the time series has no per-window malloc cycles. \
The heap at the end, sites and leaks come out exact; the peak is measured before compaction and kept; \
the time series replays independent events of different threads within one quantum in an order of its own. \
Dropped: the sites live at the peak (the report's \"top sites at the peak\" table is empty and each site's \
live objects and bytes at the peak are null), since that replay order decides which blocks were live then.\n\n\
A trace whose process is still writing it is left alone. On an allocation-heavy program the trace becomes \
tens of times smaller; on cc1 it shrinks by 40 % (docs/benchmarks.md).\n\n\
--lean also gives up the heap addresses, as heaptrack's trace keeps none: each block gets a made-up address \
(its thread's next in a bump arena), which its free names; frees keep no stack, and time stamps are rounded to \
2^24 ticks unless --quantum says otherwise. Still exact: the events and every per-function figure, sites (calls, bytes, temporary \
allocations, live at the end), leaks (count, bytes, sites), live and mapped bytes at the end (over time \
as a compact trace replays them), and the peak with all its figures (measured on the real addresses before compaction). Gone (null in \
`report --json`, \"not in a lean trace\" in the text): fragmentation, utilization and the live bytes outside \
known regions at the end and over time, which come from block addresses, and where each block lay. \
A lean trace is made from a full trace only: not from one compact already, nor again.")]
    Compact(CompactArgs),
}

#[derive(Args, Debug)]
struct TopoArgs {
    /// Read a recorded tree (the directory holding cpu/ and node/) instead of this machine's /sys/devices/system.
    #[arg(long, value_name = "DIR")]
    sysfs: Option<PathBuf>,
    /// Print the topology and every pair's class as JSON.
    #[arg(long)]
    json: bool,
    /// Also write the tables as CSV files into DIR.
    #[arg(long, value_name = "DIR")]
    csv: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct WorkloadArgs {
    /// Print the workload's command line (its path and leading arguments) instead of running it.
    #[arg(long)]
    path: bool,
    /// The workload; omit it to list them.
    name: Option<String>,
    /// The workload's own arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<OsString>,
}

fn cmd_workload(a: WorkloadArgs) -> Result<ExitCode, CliError> {
    use crate::native::{workload, WORKLOADS};
    let Some(name) = a.name else {
        if a.path {
            // `$(mtlab workload --path)` would splice the list into a command line.
            let names: Vec<&str> = WORKLOADS.iter().map(|w| w.name).collect();
            return Err(CliError::Other(format!("--path needs a workload NAME: one of {}", names.join(", "))));
        }
        let mut t = export::Table::new("workloads", "", &["workload", "what it does, and its arguments"], 2);
        for w in WORKLOADS {
            t.rows.push(vec![export::Cell::text(w.name), export::Cell::text(w.about)]);
        }
        let t = export::text::render_table(&t);
        print_out(format!("{t}\nrun one: mtlab workload NAME [ARGS]; trace one: mtlab record -- $(mtlab workload --path NAME) [ARGS]\n"));
        return Ok(ExitCode::SUCCESS);
    };
    let w = workload(&name).ok_or_else(|| {
        let names: Vec<&str> = WORKLOADS.iter().map(|w| w.name).collect();
        CliError::Other(format!("no built-in workload {name:?}; there are: {}", names.join(", ")))
    })?;
    let program = crate::native::path(w.part).map_err(RecordError::from)?;
    if a.path {
        let mut line = vec![program.display().to_string()];
        line.extend(w.leading_args.iter().map(|s| s.to_string()));
        print_out(format!("{}\n", line.join(" ")));
        return Ok(ExitCode::SUCCESS);
    }
    use std::os::unix::process::CommandExt;
    let err = std::process::Command::new(&program).args(w.leading_args).args(&a.args).exec();
    Err(CliError::Other(format!("cannot run {}: {err}", program.display())))
}

fn cmd_topo(a: TopoArgs) -> Result<ExitCode, CliError> {
    let t = match &a.sysfs {
        // A recorded tree is another machine: this process's mask does not apply.
        Some(dir) => crate::topo::Topology::from_root(dir, None)?,
        None => crate::topo::Topology::read()?,
    };
    emit(&t.document(), a.json, a.csv.as_ref(), None)?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Args, Debug)]
struct CompactArgs {
    /// Traces written by `mtlab record`, compacted in place (each with its children's traces).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Write the compact trace here instead of in place (one FILE only; children are not included).
    #[arg(short, long, value_name = "OUT")]
    output: Option<PathBuf>,
    /// Rounding of time stamps, in TSC ticks: a power of two [default: 65536 (2^16); with --lean 16777216
    /// (2^24), as coarse as heaptrack's 10 ms time line]
    #[arg(long)]
    quantum: Option<u64>,
    /// Compact only the FILEs given, not their children's traces.
    #[arg(long)]
    no_children: bool,
    /// Also make up the heap addresses and drop the frees' stacks: smaller, and without fragmentation,
    /// utilization or unplaced bytes (see the long help, --help).
    #[arg(long)]
    lean: bool,
}

/// What `record --compact` keeps.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum CompactKind {
    /// A compact trace (`mtlab compact`).
    Full,
    /// A lean compact trace (`mtlab compact --lean`).
    Lean,
}

#[derive(Subcommand, Debug)]
enum ProfileCommand {
    /// Replay a full trace through simulated sampling profilers: how much of the
    /// allocated bytes do the stacks they find cover, at each sampling interval?
    Simulate(profile::SimulateArgs),
}

/// The environment variables `record` reads (the program's own environment
/// passes through untouched otherwise).
const RECORD_ENVIRONMENT: &str = "Environment:\n  \
MTLAB_LIVE_FINISH=auto|idle|always|off  when the trace is rewritten (joined, put in columns, compressed, its raw \
records released from the file) while the program runs: auto (the default) all of it while some CPU sits idle, \
and within a budget of at most 5 % of one CPU when none does; idle only while some CPU sits idle; always at \
every 20 ms poll, without a budget; off only after the program exits\n  \
MTLAB_CTL_THREAD=0  with --sample, no control thread in the program: `mtlab ctl` then signals it, and its \
system calls may see EINTR (for a program that must stay single-threaded, e.g. to call \
unshare(CLONE_NEWUSER))\n  \
MTLAB_GOT=0  with --sample, leave the program's PLT slots alone: while sampling is off its allocation \
calls still pass through mtlab's shims (a little slower, never wrong)";

const REPORT_ENVIRONMENT: &str = "Environment:\n  \
MTLAB_REPORT_THREADS=1  decode each trace on the thread that replays it; by default a trace of 64 Ki events or \
more is decoded on a thread of its own, beside the replay, when more than one CPU is allowed (the report is the \
same either way)";

#[derive(Args, Debug)]
struct RecordArgs {
    /// Trace file to write; traced children write FILE.d/PID (FILE.d is made 0700 and removed when empty).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Capture call stacks (on) or not (none); --unwind says how.
    #[arg(long, value_enum, default_value = "on")]
    stacks: Stacks,
    /// How stacks are captured: mtlab's DWARF unwinder (whole stacks in code built without frame pointers), frame pointers only, or libgcc's or libunwind's unwinder.
    #[arg(long, value_enum, default_value = "dwarf")]
    unwind: Unwind,
    /// Sampling heap profiler instead of a full trace: sample one byte in INTERVAL on average (e.g. 512KiB).
    #[arg(long, value_name = "INTERVAL", value_parser = parse_size_arg)]
    sample: Option<u64>,
    /// With --sample: start with sampling off; switch it with `mtlab ctl PID start`.
    #[arg(long, requires = "sample")]
    inactive: bool,
    /// With --sample: fixed seed for the sampler; a run repeats sample for sample when each thread's allocations and thread creations do (docs/metrics.md, "Seeds"). 0 draws one from the clock.
    #[arg(long, default_value_t = 0, requires = "sample")]
    sample_seed: u64,
    /// With --sample or --live: push each window's heap profile over OTLP every PERIOD (e.g. 60s) while the
    /// program runs, and the last one when it ends, to --otlp-endpoint; a failed push is retried within its
    /// window, then dropped and counted, never holding up the program. The started process's profile only:
    /// the processes it starts (a server's workers) are in the trace or profile file, not pushed.
    #[arg(long, value_name = "PERIOD", value_parser = otlp::parse_every)]
    push_every: Option<std::time::Duration>,
    /// With --push-every: where to; without URL, $OTEL_EXPORTER_OTLP_ENDPOINT, else http://localhost:4318 (over gRPC :4317).
    #[arg(long, value_name = "URL", num_args = 0..=1, default_missing_value = "", requires = "push_every")]
    otlp_endpoint: Option<String>,
    /// With --push-every: grpc, http/protobuf or http/json (default: $OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf).
    #[arg(long, value_name = "PROTOCOL", value_parser = otlp::parse_protocol, requires = "push_every")]
    otlp_protocol: Option<crate::otlp::Protocol>,
    /// With --push-every: the OTLP resource's service.name (default: $OTEL_SERVICE_NAME, else the program's name).
    #[arg(long, value_name = "NAME", requires = "push_every")]
    service: Option<String>,
    /// Most frames kept per stack (1-256).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=256))]
    depth: u32,
    /// Trace only the started process, not the processes it starts.
    #[arg(long)]
    no_follow: bool,
    /// Capture a stack for free() too (off by default: frees carry stack id 0).
    #[arg(long)]
    free_stacks: bool,
    /// Which calls' cycles are measured in a full trace: `every` call, or `1/N`: a random sample of one
    /// call in N on average, each call drawn independently (counts, bytes, addresses and stacks stay
    /// exact for every call; the report gives the sample's cycle figures with 95 % intervals).
    #[arg(long, value_name = "every|1/N", default_value = "1/32", value_parser = parse_time_arg, conflicts_with = "sample")]
    time: u64,
    /// Run the program once untraced first, to report the tracing slowdown. That run's output is
    /// discarded; it reads stdin only when stdin is a file (< FILE), else nothing
    #[arg(long)]
    baseline: bool,
    /// Print where record's own time went once it is done: the program, the end of the rewrite that ran
    /// beside it, and the rest of the rewrite (joining each thread's chunks, columns, compression).
    #[arg(short, long)]
    verbose: bool,
    /// Keep a compact trace: time stamps rounded to 65536 ticks and each function's call cycles kept
    /// as a distribution per chunk (every per-function figure stays exact); see `mtlab compact`.
    /// `--compact=lean`: a lean one, with made-up heap addresses (`mtlab compact --lean`).
    #[arg(long, value_name = "lean", num_args = 0..=1, require_equals = true, default_missing_value = "full")]
    compact: Option<CompactKind>,
    #[command(flatten)]
    attach: attach::AttachArgs,
    /// Analyse the trace while the program runs and write a profile file (-o, default
    /// mtlab.PROGRAM.live) instead of a trace: a snapshot every --snapshot-every, the whole run's
    /// report data at exit; the raw trace is released as it is analysed, so disk stays bounded.
    #[arg(long, conflicts_with = "compact")]
    live: bool,
    /// With --live: seconds between snapshots of the profile (e.g. 10s, 0.5).
    #[arg(long, value_name = "SECONDS", default_value = "10s", value_parser = parse_snapshot_every, requires = "live")]
    snapshot_every: std::time::Duration,
    /// With --live: also keep the whole raw trace and finish it as `record` does (as PROFILE.raw),
    /// for comparing the live profile with the full trace of the same run.
    #[arg(long, requires = "live")]
    keep_raw: bool,
    /// Flight recorder: keep the last DURATION (e.g. 30s, 2m) of the program's events in a bounded ring and write
    /// them as a trace FILE.flight-N on `mtlab ctl PID dump`, on the program's death by a signal, on a new
    /// high/oom/oom_kill in its cgroup's memory.events, or on --pressure (the root process only)
    #[arg(long, value_name = "DURATION", value_parser = crate::flight::parse_duration)]
    keep_last: Option<u64>,
    /// With --keep-last: also write the window when memory pressure (/proc/pressure/memory) crosses this
    /// threshold, e.g. "some avg10>20"
    #[arg(long, value_name = "THRESHOLD", requires = "keep_last", value_parser = crate::flight::Pressure::parse)]
    pressure: Option<crate::flight::Pressure>,
    /// With --keep-last: most bytes the ring holds (compressed events, stacks, maps); older events go first
    #[arg(long, value_name = "SIZE", requires = "keep_last", value_parser = parse_size_arg, default_value_t = crate::flight::DEFAULT_MAX_BYTES)]
    keep_last_max: u64,
    /// The program to run, then its arguments.
    #[arg(required_unless_present = "pid", conflicts_with = "pid", trailing_var_arg = true, value_name = "PROGRAM [ARGS]...")]
    command: Vec<OsString>,
}

#[derive(Args, Debug)]
struct ReportArgs {
    /// A trace written by `mtlab record` (its children's traces are found beside it); with --diff BASE, the NEW trace.
    file: PathBuf,
    /// Compare trace BASE with FILE (`mtlab report --diff BASE NEW`): per allocation site the change of calls, bytes, peak,
    /// leaks and temporaries, largest first, sites matched by their symbolized stacks (not addresses); the totals beside.
    /// Processes pair root with root, the others by command and order. --pprof writes NEW − BASE, --html differential
    /// flame graphs.
    #[arg(long, value_name = "BASE", conflicts_with_all = ["flamegraph", "collapsed", "speedscope", "callers", "merge", "pid", "all_processes"])]
    diff: Option<PathBuf>,
    /// With --diff: match sites by function, file and line, or by function only (when an edit moved lines).
    #[arg(long, value_enum, default_value = "lines", requires = "diff")]
    diff_by: crate::report::diff::sites::KeyBy,
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
    /// Frames shown per stack in the site tables (0: as many as fit the terminal); sites whose shown frames are equal share a row.
    #[arg(long, default_value_t = 0, value_name = "N")]
    frames: usize,
    /// Report only FILE, not the traces of its child processes.
    #[arg(long)]
    no_children: bool,
    /// Write the heap profile (allocated and in-use objects and bytes) as gzipped pprof, for `go tool pprof`.
    #[arg(long, value_name = "OUT.pb.gz")]
    pprof: Option<PathBuf>,
    /// Also list the functions by allocated bytes: where they called the allocator (self) and anywhere on the stack (total).
    #[arg(long)]
    callers: bool,
    /// Also each thread's allocations and the blocks it allocated still live at the end, by thread id (full traces;
    /// JSON `threads`). The OTLP exports split each stack by thread this way.
    #[arg(long)]
    threads: bool,
    /// Also write the report as one self-contained HTML page: tables, memory over time, the flame graph.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Write an interactive SVG flame graph of --flame-value.
    #[arg(long, value_name = "OUT.svg")]
    flamegraph: Option<PathBuf>,
    /// Write folded stacks ("outer;...;inner value" lines) of --flame-value.
    #[arg(long, value_name = "OUT.txt")]
    collapsed: Option<PathBuf>,
    /// Write the profile for speedscope (allocated and in-use bytes and objects), to open with `speedscope OUT.json`.
    #[arg(long, value_name = "OUT.json")]
    speedscope: Option<PathBuf>,
    /// What the flame graph and folded stacks weigh.
    #[arg(long, value_enum, default_value = "alloc-bytes")]
    flame_value: crate::profile::flame::FlameValue,
    /// Report only these traced processes in detail (PID[,PID...], repeatable); the index at the top still lists every process.
    /// The profile exports take one process, named on stderr: the one selected (its last image if it exec'd), else the root
    /// (or the first selected); with --merge, all selected.
    #[arg(long, value_name = "PID", value_delimiter = ',')]
    pid: Vec<u32>,
    /// Report only the processes whose command is NAME (the base name of its first argument or its executable,
    /// e.g. `--comm cc1`; NAME[,NAME...], repeatable); with --pid, the processes matching either.
    #[arg(long, value_name = "NAME", value_delimiter = ',')]
    comm: Vec<String>,
    /// Report every traced process in detail. Without it, a run of more than 20 processes reports the root and the
    /// busiest others (by events) in detail and lists the rest in the process index only.
    #[arg(long, conflicts_with_all = ["pid", "comm"])]
    all_processes: bool,
    /// Make the profile exports (--pprof, --flamegraph, --collapsed, --speedscope, the --html flame graph) of every
    /// selected process, equal stacks summed, instead of one process.
    #[arg(long)]
    merge: bool,
    /// Exit with status 3 when the report has a warning (a damaged or missing trace, dropped events): the report
    /// is printed all the same.
    #[arg(long)]
    strict: bool,
    #[command(flatten)]
    otlp: otlp::ProfileOtlpArgs,
}

#[derive(Args, Debug)]
struct DemoArgs {
    /// Where to keep the demo's trace.
    #[arg(short, long, default_value = "mtlab-demo.mtl")]
    output: PathBuf,
    /// Iterations per thread of the workload.
    #[arg(long, default_value_t = 200_000)]
    iterations: u64,
    /// The tour's HTML report.
    #[arg(long, default_value = "mtlab-demo.html", value_name = "FILE")]
    html: PathBuf,
    /// Only the heap tracer and the sampler (steps 1 and 2), not the studies.
    #[arg(long)]
    trace_only: bool,
    #[command(flatten)]
    store: study::StoreArgs,
}

#[derive(Args, Debug)]
struct CtlArgs {
    /// The process id of a program started with `mtlab record --sample`, or of that `mtlab record` itself (`$!`).
    pid: u32,
    #[command(subcommand)]
    action: CtlAction,
}

#[derive(Subcommand, Debug)]
enum CtlAction {
    /// Switch sampling on.
    Start,
    /// Switch sampling off (already sampled blocks still have their frees
    /// recorded); under `record --live`, once the program has exited and
    /// processes it started still run, finish the recording now.
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
    /// Print whether sampling is on, the interval and the number of samples;
    /// under `record --live`, how far behind the analysis is; under `record --keep-last` without --sample, the window it keeps.
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
    Study(#[from] crate::studies::StudyError),
    #[error(transparent)]
    Output(#[from] crate::export::ExportError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Diff(#[from] crate::study::diff::DiffError),
    #[error(transparent)]
    Export(#[from] crate::profile::export::ProfileExportError),
    #[error(transparent)]
    Ctl(#[from] crate::ctl::CtlError),
    #[error(transparent)]
    Dump(#[from] crate::ctl::DumpError),
    #[error(transparent)]
    Flight(#[from] crate::flight::control::FlightCtlError),
    #[error(transparent)]
    Compact(#[from] crate::trace::compact::CompactError),
    #[error(transparent)]
    Topo(#[from] crate::topo::TopoError),
    #[error(transparent)]
    Load(#[from] crate::report::load::LoadError),
    #[error(transparent)]
    Exports(#[from] crate::report::exports::ExportsError),
    #[error(transparent)]
    Otlp(#[from] crate::otlp::OtlpError),
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
            say!("mtlab: error: {e}");
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
        Command::Bench(b) => study::bench(b),
        Command::Threads(t) => threads::threads(t),
        Command::Affinity(a) => affinity::affinity(a),
        Command::Heap(h) => heap_study::heap(h),
        Command::Topo(a) => cmd_topo(a),
        Command::Workload(a) => cmd_workload(a),
        Command::AffinityReceiver { listen } => {
            crate::studies::affinity::flow::receiver_main(listen)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Runs(a) => study::runs(a),
        Command::Diff(a) => study::diff(a),
        Command::Profile(ProfileCommand::Simulate(a)) => profile::simulate(a),
        Command::Compact(a) => cmd_compact(a),
    }
}

/// The rounding of time stamps a compaction uses, `mtlab compact`'s and
/// `record --compact`'s alike: the one given, else the default of a full or
/// a lean trace (`record --compact` gives none).
fn compact_quantum(given: Option<u64>, lean: bool) -> u64 {
    given.unwrap_or_else(|| crate::trace::compact::default_quantum(lean))
}

fn cmd_compact(a: CompactArgs) -> Result<ExitCode, CliError> {
    use crate::trace::compact::CompactError;
    if a.output.is_some() && a.files.len() > 1 {
        return Err(CliError::Other("-o takes one trace; give one FILE, or leave -o out to compact in place".into()));
    }
    if let Some(out) = &a.output {
        crate::trace::rewrite::check_trace_output(out).map_err(CliError::Other)?;
    }
    let mut failed = 0;
    for file in &a.files {
        if !file.exists() {
            say!("mtlab: error: {} does not exist: give a trace written by `mtlab record`", file.display());
            failed += 1;
            continue;
        }
        let family =
            if a.no_children || a.output.is_some() { vec![file.clone()] } else { crate::platform::names::trace_family(file) };
        for src in &family {
            let dst = a.output.clone().unwrap_or_else(|| src.clone());
            match crate::compact::compact_trace(src, &dst, compact_quantum(a.quantum, a.lean), a.lean) {
                Ok(st) => {
                    let change = if st.bytes_after < st.bytes_before {
                        format!("{:.1}× smaller", st.shrink())
                    } else {
                        // A sampled trace has little timing to drop; the new layout can cost more.
                        format!("{:.0} % larger", (1.0 / st.shrink() - 1.0) * 100.0)
                    };
                    say!(
                        "mtlab: {} → {}: {} → {} ({change}), {} events, {} kept after another thread's",
                        src.display(),
                        dst.display(),
                        report::human_bytes(st.bytes_before),
                        report::human_bytes(st.bytes_after),
                        st.events,
                        st.raised
                    );
                    for w in &st.warnings {
                        say!("mtlab: warning: {}: {w}", src.display());
                    }
                }
                // A family compacted before (record --compact) has nothing left to do;
                // a file named on its own that is compact already is an error.
                Err(e @ (CompactError::AlreadyCompact { .. } | CompactError::AlreadyLean { .. })) if src != file => say!("mtlab: {e}"),
                Err(e) => {
                    say!("mtlab: error: {e}");
                    failed += 1;
                }
            }
        }
    }
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn parse_snapshot_every(s: &str) -> Result<std::time::Duration, String> {
    let v: f64 = s.trim_end_matches('s').parse().map_err(|_| format!("`{s}` is not a number of seconds (e.g. 10s)"))?;
    if !(0.05..=86400.0).contains(&v) {
        return Err(format!("`{s}`: give between 0.05 and 86400 seconds"));
    }
    Ok(std::time::Duration::from_secs_f64(v))
}

fn default_output(program: &OsString) -> PathBuf {
    let name = std::path::Path::new(program).file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    PathBuf::from(format!("mtlab.{name}.mtl"))
}

/// What `record --live` (of a program, or attached) came to, on stderr; `took`: after the sizes.
fn say_live(profile: &std::path::Path, s: &crate::live::LiveSummary, took: &str) {
    let p = crate::platform::process::shell_word(profile);
    match s.complete {
        true => say!(
            "mtlab: wrote {} (live profile, {} snapshot{}, raw trace on disk at most {}{}){took}; read it with `mtlab report {p}`",
            profile.display(),
            s.snapshots,
            if s.snapshots == 1 { "" } else { "s" },
            report::human_bytes(s.lag.max_raw_disk_bytes),
            match s.descendants_max_raw_disk {
                0 => String::new(),
                d => format!(", its descendants' at most {} at once", report::human_bytes(d)),
            },
        ),
        false => say!("mtlab: the live profile {} was not completed (see the warnings)", profile.display()),
    }
    for w in &s.warnings {
        say!("mtlab: warning: {w}");
    }
    if s.lag.late_events > 0 {
        say!("mtlab: warning: {}", crate::live::file::late_text(&s.lag));
    }
}

/// The raw trace beside a live profile: PROFILE.raw (its children's PROFILE.raw.d/PID).
fn live_raw(profile: &std::path::Path) -> PathBuf {
    let mut raw = profile.to_path_buf().into_os_string();
    raw.push(".raw");
    PathBuf::from(raw)
}

fn cmd_record(a: RecordArgs) -> Result<ExitCode, CliError> {
    let push = match a.push_every {
        None => None,
        Some(every) => {
            let flag = a.otlp_endpoint.clone().unwrap_or_default();
            let target = crate::otlp::push::target(&flag, a.otlp_protocol, crate::otlp::Signal::Profiles, &crate::otlp::push::real_env).map_err(crate::otlp::OtlpError::from)?;
            Some(crate::otlp::periodic::Config { target, every, service: a.service.clone() })
        }
    };
    if let Some(pid) = a.attach.pid {
        if a.keep_last.is_some() {
            // The flight recorder's ring and triggers are set up around a spawned program
            // (record.rs); an attached session has neither (not wired yet).
            return Err(CliError::Other(format!(
                "--keep-last does not attach to a running process: use `mtlab record --pid {pid} --live` (its whole trace \
                 analysed while attached, in bounded disk) or `--full`, or start the program under `mtlab record --keep-last DURATION -- PROGRAM`"
            )));
        }
        let sample = a.sample.map(|interval| SampleConfig { interval, inactive: a.inactive, seed: a.sample_seed, push: None });
        let live = attach::LiveArgs { live: a.live, snapshot_every: a.snapshot_every, keep_raw: a.keep_raw };
        return attach::cmd_attach(pid, a.attach, live, a.output, sample, a.stacks, a.unwind, a.depth, a.free_stacks, push);
    }
    if push.is_some() && a.sample.is_none() && !a.live {
        return Err(CliError::Other(
            "--push-every pushes the profile of a running recording: add --sample INTERVAL (a sampled trace) or --live (the full trace analysed as it runs)".into(),
        ));
    }
    let mut command = a.command.into_iter();
    let program = command.next().expect("clap requires PROGRAM");
    let live = a.live.then(|| crate::live::LiveConfig {
        profile: a.output.clone().unwrap_or_else(|| default_output(&program).with_extension("live")),
        snapshot_every: a.snapshot_every,
        keep_raw: a.keep_raw,
        // Published twice a period: a window's profile is at most half a period old.
        publish: push.as_ref().map(|p| crate::live::Publish { every: p.every / 2, slot: Default::default() }),
    });
    let output = match &live {
        Some(l) => live_raw(&l.profile),
        None => a.output.unwrap_or_else(|| default_output(&program)),
    };
    let cfg = RecordConfig {
        output,
        live,
        stacks: a.stacks,
        unwind: a.unwind,
        sample: a.sample.map(|interval| SampleConfig { interval, inactive: a.inactive, seed: a.sample_seed, push: push.clone() }),
        live_push: push.clone().filter(|_| a.live),
        depth: a.depth,
        follow: !a.no_follow,
        free_stacks: a.free_stacks,
        time_sample: a.time,
        baseline: a.baseline,
        compact: a.compact.map(|k| (compact_quantum(None, k == CompactKind::Lean), k == CompactKind::Lean)),
        flight: a.keep_last.map(|keep_last_ns| crate::flight::FlightConfig {
            keep_last_ns,
            max_bytes: a.keep_last_max,
            pressure: a.pressure,
            sampled: a.sample.is_some(),
        }),
        program,
        args: command.collect(),
    };
    let outcome = record::record(&cfg)?;
    let n = outcome.traces.len();
    if let (Some(l), Some(s)) = (&cfg.live, &outcome.live) {
        say_live(&l.profile, s, &format!(" in {:.3} s", outcome.wall.as_secs_f64()));
    }
    let live_only = cfg.live.as_ref().is_some_and(|l| !l.keep_raw) && outcome.live.as_ref().is_some_and(|s| s.complete);
    match outcome.traces.first().filter(|_| !live_only) {
        Some(first) => say!(
            "mtlab: wrote {} ({} trace file{}{}, {}) in {:.3} s; read it with `mtlab report {}`",
            first.display(),
            n,
            if n == 1 { "" } else { "s" },
            if n > 1 { format!(", the descendants' in {}", crate::platform::names::tree_dir(first).display()) } else { String::new() },
            report::human_bytes(outcome.bytes),
            outcome.wall.as_secs_f64(),
            crate::platform::process::shell_word(first)
        ),
        None if live_only => {}
        None => match std::os::unix::process::ExitStatusExt::signal(&outcome.status) {
            Some(sig) => say!(
                "mtlab: no trace was written: the program was killed by signal {sig} before mtlab's first write \
                 (events reach the file when a 64 KiB buffer fills or the program exits normally)"
            ),
            None => match &outcome.root_unwritten {
                Some(why) => say!("mtlab: no trace was written: {why}"),
                None => say!("mtlab: no trace was written: {}", record::why_no_trace(&outcome.program)),
            },
        },
    }
    for w in &outcome.warnings {
        say!("mtlab: warning: {w}");
    }
    if let (true, Some((st, after))) = (a.verbose, &outcome.stages) {
        say!("mtlab: {}", record::stages_line(st, *after));
    }
    for w in &outcome.flight.warnings {
        say!("mtlab: warning: {w}");
    }
    for (path, why) in &outcome.flight.written {
        say!(
            "mtlab: flight recorder wrote {} on {why}; read it with `mtlab report {}`",
            path.display(),
            crate::platform::process::shell_word(path)
        );
    }
    if let Some((url, stats)) = &outcome.pushed {
        say!("mtlab: {}{}", if stats.dropped > 0 { "warning: " } else { "" }, stats.summary(url));
    }
    if let Some(sig) = std::os::unix::process::ExitStatusExt::signal(&outcome.status) {
        reraise(sig);
    }
    Ok(ExitCode::from(outcome.exit_code() as u8))
}

/// Ends mtlab by the signal that ended the program, so shells see the same.
/// No core dump of mtlab's own: it would overwrite the program's `core`.
fn reraise(sig: i32) {
    let no_core = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: setrlimit, signal and raise are plain libc calls with valid arguments.
    unsafe {
        libc::setrlimit(libc::RLIMIT_CORE, &no_core);
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// The reports of FILE's processes (and its children's unless `children` is
/// false), those `sel` picks in detail; child traces that could not be read
/// are named on stderr.
pub fn load_reports(
    file: &std::path::Path,
    children: bool,
    opts: &AnalyzeOptions,
    sel: &report::select::Selection,
    merge: bool,
) -> Result<RunReport, CliError> {
    if crate::live::file::is_profile(file) {
        return report::live::load(file, children, opts, sel).map_err(|e| CliError::Other(e.to_string()));
    }
    let run = report::load::load(file, children, opts, sel, merge)?;
    for m in &run.missing {
        say!("mtlab: warning: {}", m.message());
    }
    Ok(run)
}

/// Refuses, before any work, what would fail after it: a directory given as
/// the trace (naming the traces in it), or an output file whose directory is
/// not there (the whole report was printed before that failed).
fn check_report_paths(a: &ReportArgs) -> Result<(), CliError> {
    if a.file.is_dir() {
        let mut traces: Vec<String> = std::fs::read_dir(&a.file)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().is_file() && crate::trace::read_header(&e.path()).is_ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        traces.sort();
        let found = match traces.len() {
            0 => "it holds no trace".to_string(),
            n if n <= 5 => format!("the traces in it: {}", traces.join(", ")),
            n => format!("it holds {n} traces, e.g. {}", traces[..5].join(", ")),
        };
        return Err(CliError::Other(format!("{} is a directory, not a trace file ({found}); give one of its traces", a.file.display())));
    }
    let outputs = [&a.pprof, &a.html, &a.flamegraph, &a.collapsed, &a.speedscope];
    for out in outputs.into_iter().chain(a.otlp.outputs()).flatten() {
        let dir = out.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
        if !dir.is_dir() {
            return Err(CliError::Other(format!("cannot write {}: its directory {} does not exist", out.display(), dir.display())));
        }
    }
    Ok(())
}

fn cmd_report(a: ReportArgs) -> Result<ExitCode, CliError> {
    check_report_paths(&a)?;
    // Read again by each process's pass (`analysis::pipe::wanted`): refused
    // here, before any work, rather than taken there as 1.
    crate::analysis::pipe::threads_from_env().map_err(CliError::Other)?;
    if let Some(base) = &a.diff {
        return report_diff::cmd_report_diff(&a, base, a.diff_by);
    }
    let otlp_target = a.otlp.target(crate::otlp::Signal::Profiles)?;
    let req = crate::profile::export::ExportRequest {
        pprof: a.pprof.clone(),
        flamegraph: a.flamegraph.clone(),
        collapsed: a.collapsed.clone(),
        speedscope: a.speedscope.clone(),
        value: Some(a.flame_value),
    };
    // The exports and the page's flame graph share one profile, made in the analysis's pass.
    let exports = !req.is_empty() || a.html.is_some() || a.otlp.any();
    let opts = AnalyzeOptions { max_points: a.points as usize, top: a.top, callers: a.callers || a.html.is_some(), profile: exports, sites: false, threads: a.threads || a.otlp.any() };
    let sel = report::select::Selection { pids: a.pid.clone(), comms: a.comm.clone(), all_processes: a.all_processes };
    let mut run = load_reports(&a.file, !a.no_children, &opts, &sel, a.merge)?;
    run.frames = a.frames;
    let profile = if exports { report::exports::profile(&mut run, a.merge)? } else { None };
    if !req.is_empty() {
        if let Some((pick, data)) = &profile {
            say!("mtlab: {}", pick.message);
            let written = crate::profile::export::export_data(data, &req).map_err(crate::profile::export::ProfileExportError::from)?;
            for f in written {
                say!("mtlab: wrote {}", f.display());
            }
        }
    }
    let mut otlp_request = None;
    if a.otlp.any() {
        if let Some((pick, data)) = &profile {
            if req.is_empty() {
                say!("mtlab: {}", pick.message);
            }
            otlp_request = Some(otlp::report_exports(&a.otlp, &run, pick, data)?);
        }
    }
    let doc = report::document_of(&run, report::Parts::for_outputs(a.json, a.csv.is_some()));
    emit(&doc, a.json, a.csv.as_ref(), None)?;
    if let Some(path) = &a.html {
        let flames = profile
            .map(|(pick, data)| {
                let section = match pick.rows.as_slice() {
                    [one] => run.index.get(*one).map(|r| format!("process {} —", r.pid)),
                    _ => None,
                };
                flame_graph(&data, &pick.caption, section, a.flame_value)
            })
            .unwrap_or_default();
        let extras = export::html::Extras { summary: report::summary::summary(&run), flames, images: Vec::new() };
        write_html(&html_document(&mut run), path, &format!("mtlab report {}", a.file.display()), &extras)?;
    }
    let warnings = report::warning_count(&run);
    if a.strict && warnings > 0 {
        say!("mtlab: {warnings} warning{} in this report (--strict)", if warnings == 1 { "" } else { "s" });
        return Ok(ExitCode::from(STRICT_WARNINGS));
    }
    if let (Some(t), Some(r)) = (&otlp_target, &otlp_request) {
        otlp::report_push(t, r)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `report --strict`'s exit status when the report has warnings.
const STRICT_WARNINGS: u8 = 3;

/// The report for a page: whole stacks in the site tables (a page scrolls;
/// a terminal row does not), each process's plot in its section.
fn html_document(run: &mut RunReport) -> Document {
    let shown = run.frames;
    run.frames = usize::MAX;
    let views = report::page_views(run);
    run.frames = shown;
    Document { views, data: serde_json::Value::Null }
}

/// Frames a page's flame graph keeps at most: a few hundred KiB of page.
const FLAME_NODES: usize = 4000;

/// The interactive flame graph of a profile for an HTML page, titled by what
/// it is of and drawn in `section`; none when it has no stacks.
fn flame_graph(data: &crate::profile::ProfileData, of: &str, section: Option<String>, value: crate::profile::flame::FlameValue) -> Vec<export::flame::FlameGraph> {
    use crate::profile::flame::FlameValue;
    let mut sym = data.symbolizer();
    let (root, left_out) = crate::profile::flame::tree(data, &mut sym, FLAME_NODES);
    if root.children.is_empty() {
        return Vec::new();
    }
    let first_value = match value {
        FlameValue::AllocBytes => 0,
        FlameValue::AllocObjects => 1,
        FlameValue::InuseBytes => 2,
        FlameValue::InuseObjects => 3,
    };
    let estimated = data.samples.iter().any(|s| s.bounds.is_some());
    vec![export::flame::FlameGraph { title: format!("flame graph of {of}"), section, root, left_out, first_value, estimated }]
}

/// The demo's flame graph: the root process's, in its section.
fn root_flame_graph(run: &RunReport) -> Vec<export::flame::FlameGraph> {
    let Some(p) = run.processes.first() else { return Vec::new() };
    match report::exports::profile_of(p) {
        Ok(data) => flame_graph(&data, &format!("process {}", p.pid), Some(format!("process {} —", p.pid)), crate::profile::flame::FlameValue::AllocBytes),
        Err(_) => Vec::new(),
    }
}

/// The lines `ctl dump` prints about the heap manager's own figures.
fn reading_lines(d: &crate::ctl::Dump) -> String {
    let Some(r) = &d.reading else {
        return format!(
            "the heap manager's own figures were not read within {} s: they are read at the program's next sampled allocation, and `mtlab report` shows them",
            crate::ctl::READING_WAIT.as_secs()
        );
    };
    report::views::allocator_reading_text(r, &d.allocator)
}

/// How long `mtlab ctl PID stop` waits for a live recorder to write its profile and end.
const LIVE_STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

fn cmd_ctl(a: CtlArgs) -> Result<ExitCode, CliError> {
    use crate::ctl::{self, CtlPage};
    if let (Some(pid), CtlAction::Dump { output, timeout }) = (crate::flight::control::recorded_pid(a.pid), &a.action) {
        let path = crate::flight::control::request_dump(pid, std::time::Duration::from_secs(*timeout))?;
        if output.is_some() {
            say!("mtlab: -o is for sampled profiles: a flight recorder names its windows FILE.flight-N");
        }
        say!("mtlab: the flight recorder of process {pid} wrote {}; read it with `mtlab report {}`", path.display(), crate::platform::process::shell_word(&path));
        print_out(format!("{}\n", path.display()));
        return Ok(ExitCode::SUCCESS);
    }
    // `record --pid PID --live`: stop is the detach (its full trace has no sampler to switch off).
    if let (Some(pid), CtlAction::Stop) = (crate::live::status::recorded_pid(a.pid), &a.action) {
        if crate::live::status::request_detach(pid).map_err(CliError::Other)? {
            say!("mtlab: asked the live recorder attached to process {pid} to detach; it finishes the profile and exits");
            return Ok(ExitCode::SUCCESS);
        }
    }
    // `record --live` waiting for processes that outlived the program: finish now.
    if let CtlAction::Stop = a.action {
        if let Some(recorder) = crate::live::status::request_stop(a.pid).map_err(CliError::Other)? {
            say!("mtlab: asked `mtlab record` (process {recorder}) to finish now; the processes that still run are left running");
            let start = std::time::Instant::now();
            while crate::platform::process::pid_runs(recorder) && start.elapsed() < LIVE_STOP_WAIT {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            if crate::platform::process::pid_runs(recorder) {
                say!("mtlab: it is still writing the profile after {} s", LIVE_STOP_WAIT.as_secs());
            }
            return Ok(ExitCode::SUCCESS);
        }
        if crate::live::status::recorded_pid(a.pid).is_some_and(crate::live::status::program_runs) && ctl::CtlPage::open(a.pid).is_err() {
            return Err(CliError::Other(format!(
                "process {} runs under `record --live`, which ends when the program does: `ctl stop` finishes it early only \
                 once the program has exited and processes it started still run",
                a.pid
            )));
        }
    }
    // `record --live`: how far behind its analysis is; a full trace has no sampler to show.
    if let (Some(pid), CtlAction::Status) = (crate::live::status::recorded_pid(a.pid), &a.action) {
        if let Some(now) = crate::live::status::read(pid).map_err(CliError::Other)? {
            print_out(format!("{}\n", now.line(pid)));
        }
        if CtlPage::open(pid).is_err() {
            return Ok(ExitCode::SUCCESS);
        }
    }
    // A flight recorder without --sample has no sampler page to wait for: only `dump` reaches it.
    if let Some(pid) = crate::flight::control::recorded_pid(a.pid) {
        let about = crate::flight::control::about(pid)?;
        if !about.sampled {
            let keeps = format!("keeps the last {:.3} s of its events", about.keep_last_ns as f64 / 1e9);
            if let CtlAction::Status = a.action {
                print_out(format!("process {pid}: flight recorder (`record --keep-last`), {keeps}; no sampler; `mtlab ctl {} dump` writes the window\n", a.pid));
                return Ok(ExitCode::SUCCESS);
            }
            return Err(CliError::Other(format!(
                "process {pid} runs under `mtlab record --keep-last` without --sample ({keeps}): start, stop and interval are for \
                 a sampler; `mtlab ctl {} dump` writes the flight recorder's window",
                a.pid
            )));
        }
    }
    let (pid, waited) = ctl::traced_pid_waiting(a.pid, ctl::STARTING_WAIT);
    // A process still starting: say what the wait was for, and that it was waited for when it failed.
    if waited.as_millis() >= 20 {
        if CtlPage::open(pid).is_ok() {
            say!("mtlab: waited {:.1} s for process {pid} to start its sampler", waited.as_secs_f64());
        } else {
            say!("mtlab: waited {:.1} s for process {} (or a child of it) to make its sampler's control page", waited.as_secs_f64(), a.pid);
        }
    }
    match a.action {
        CtlAction::Dump { output, timeout } => {
            let out = output.unwrap_or_else(|| ctl::default_dump_path(pid));
            let d = ctl::dump(pid, &out, std::time::Duration::from_secs(timeout))?;
            say!("mtlab: wrote {} (profile of process {} so far, from {})", out.display(), pid, d.trace.display());
            for line in reading_lines(&d).lines() {
                say!("mtlab: {line}");
            }
        }
        action => {
            let page = CtlPage::open(pid)?;
            const ROUTE_TIMEOUT: u64 = 2;
            let routed = |page: &CtlPage| page.apply_routing(pid, std::time::Duration::from_secs(ROUTE_TIMEOUT));
            match action {
                CtlAction::Start => {
                    page.set_active(true);
                    if !routed(&page) {
                        return Err(ctl::CtlError::NotRouted { pid, secs: ROUTE_TIMEOUT, why: page.why_no_answer() }.into());
                    }
                }
                CtlAction::Stop => {
                    page.set_active(false);
                    if !routed(&page) {
                        // Not an error: the shims read the state, so sampling is off;
                        // calls only keep their detour through them.
                        say!(
                            "mtlab: process {} did not re-route its allocation calls within {ROUTE_TIMEOUT} s ({}): sampling is off, but calls still pass through mtlab's shims",
                            pid,
                            page.why_no_answer()
                        );
                    }
                }
                CtlAction::Interval { size } => page.set_interval(size),
                _ => {}
            }
            print_out(format!("{}\n", ctl::status_line(pid, &page)));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn cmd_demo(a: DemoArgs) -> Result<ExitCode, CliError> {
    let started = std::time::Instant::now();
    let workload = crate::native::path(crate::native::Part::MallocTest).map_err(RecordError::from)?;
    let args: Vec<OsString> = ["--threads", "2", "--size", "512", "--depth", "10", "--iterations", &a.iterations.to_string()]
        .iter()
        .map(OsString::from)
        .collect();
    let cfg = RecordConfig {
        output: a.output.clone(),
        stacks: Stacks::Fp,
        unwind: Unwind::Dwarf,
        sample: None,
        depth: 64,
        follow: true,
        free_stacks: false,
        time_sample: record::DEFAULT_TIME_SAMPLE,
        baseline: true,
        compact: None,
        live: None,
        live_push: None,
        flight: None,
        program: workload.clone().into_os_string(),
        args,
    };
    say!("mtlab demo 1/6: full heap trace of the built-in malloc-test workload (2 threads, 512-byte blocks, call depth 10)");
    let outcome = record::record(&cfg)?;
    if !outcome.status.success() {
        return Err(CliError::Other(format!("the demo workload failed: {}", outcome.status)));
    }
    let with_profile = AnalyzeOptions { profile: true, ..AnalyzeOptions::default() };
    let full = load_reports(&a.output, true, &with_profile, &Default::default(), false)?;
    emit(&report::document(&full), false, None, None)?;
    let compact_out = a.output.with_extension("compact.mtl");
    let c = crate::compact::compact_trace(&a.output, &compact_out, crate::trace::compact::DEFAULT_QUANTUM, false)?;
    print_out(format!(
        "without per-call timing (`mtlab compact`): {} → {} ({:.0}× smaller), the per-function, heap, site and leak figures above unchanged\n\n",
        report::human_bytes(c.bytes_before),
        report::human_bytes(c.bytes_after),
        c.shrink()
    ));

    say!("mtlab demo 2/6: the same workload under the sampling profiler (mean interval 64KiB)");
    let sampled_out = a.output.with_extension("sampled.mtl");
    let cfg = RecordConfig {
        output: sampled_out.clone(),
        sample: Some(SampleConfig { interval: 64 << 10, inactive: false, seed: 0, push: None }),
        baseline: false,
        ..cfg
    };
    record::record(&cfg)?;
    let sampled = load_reports(&sampled_out, true, &with_profile, &Default::default(), false)?;
    emit(&report::document(&sampled), false, None, None)?;
    let truth: f64 = full.processes.first().map(|p| p.functions["malloc"].mean_size * p.functions["malloc"].calls as f64).unwrap_or(0.0);
    if let Some(est) = sampled.processes.first().and_then(|p| p.profile.as_ref()).map(|p| &p.totals) {
        print_out(format!(
            "malloc bytes: {:.0} counted by the full trace; {:.0} [{:.0}, {:.0}] (95 % interval) estimated from {} samples ({:+.2} %)\n",
            truth,
            est.alloc_bytes.value,
            est.alloc_bytes.low,
            est.alloc_bytes.high,
            est.samples,
            (est.alloc_bytes.value / truth - 1.0) * 100.0
        ));
    }
    let (mut full, mut sampled) = (full, sampled);
    let mut sections = vec![
        ("1. The heap tracer: malloc-test, 2 threads, whole stacks".to_string(), html_document(&mut full)),
        ("2. The sampling heap profiler on the same workload".to_string(), html_document(&mut sampled)),
    ];
    if !a.trace_only {
        sections.extend(demo_studies(&a.store)?);
    }
    say!(
        "mtlab demo: traces kept in {}, {} and {}; try `mtlab report --json {}` or `mtlab report {} --flamegraph demo.svg`",
        a.output.display(),
        compact_out.display(),
        sampled_out.display(),
        crate::platform::process::shell_word(&a.output),
        crate::platform::process::shell_word(&sampled_out)
    );
    let mut views = Vec::new();
    for (title, doc) in sections {
        views.push(export::View::Note(format!("══ {title} ══")));
        views.extend(doc.views);
    }
    let extras = export::html::Extras { summary: report::summary::summary(&full), flames: root_flame_graph(&full), images: Vec::new() };
    write_html(&Document { views, data: serde_json::Value::Null }, &a.html, "mtlab demo: a tour on built-in workloads", &extras)?;
    say!("mtlab demo: done in {:.0} s; the tour's report: {}", started.elapsed().as_secs_f64(), a.html.display());
    Ok(ExitCode::SUCCESS)
}

/// The demo's study steps (3–6), each parsed from the command line a user
/// would type, run, stored and shown; returns their documents.
fn demo_studies(store: &study::StoreArgs) -> Result<Vec<(String, Document)>, CliError> {
    let mut out = Vec::new();
    let store_flags: Vec<String> = match (&store.no_store, &store.path.store) {
        (true, _) => vec!["--no-store".into()],
        (false, Some(p)) => vec!["--store".into(), p.display().to_string()],
        (false, None) => Vec::new(),
    };
    let parse = |line: &str| -> Result<Command, CliError> {
        let mut argv: Vec<String> = std::iter::once("mtlab".to_string()).chain(line.split_whitespace().map(str::to_string)).collect();
        argv.extend(store_flags.iter().cloned());
        Cli::try_parse_from(&argv).map(|c| c.command).map_err(|e| CliError::Other(format!("demo step `{line}`: {e}")))
    };
    let step = |n: usize, what: &str, line: &str| say!("mtlab demo {n}/6: {what} (`mtlab {line}`)");

    let line = "bench malloc --threads 1 --iterations 300000 --intervals 64KiB,512KiB --unwinders fp --coverage --reps 1";
    step(3, "what sampling costs at two intervals, and how much of the heap its stacks cover", line);
    if let Command::Bench(cmd) = parse(line)? {
        let (run, o) = study::bench_run(cmd)?;
        out.push(("3. What the sampling profiler costs, and its coverage curve".into(), study::finish_keep(run, &o)?));
    }

    let line = "threads all --reps 1";
    step(4, "the threads study's quick set: creation, context switches, message passing", line);
    if let Command::Threads(cmd) = parse(line)? {
        let (run, o) = threads::threads_run(cmd)?;
        out.push(("4. Threads: creation, context switches, message passing".into(), study::finish_keep(run, &o)?));
    }

    let installed: Vec<&str> =
        ["glibc", "jemalloc", "tcmalloc", "mimalloc"].into_iter().filter(|n| crate::studies::heap::allocators::resolve(n).is_ok()).collect();
    let line = format!("heap compare --workload threshold --allocators {} --reps 1", installed.join(","));
    step(5, "heap managers compared on a built-in workload (those installed)", &line);
    if let Command::Heap(heap_study::HeapCommand::Compare(a)) = parse(&line)? {
        let (run, o) = heap_study::compare_run(a)?;
        out.push(("5. Heap managers compared: storms of blocks around the mmap threshold".into(), study::finish_keep(run, &o)?));
    }

    // As root the receive processing is steered (RPS in mtlab's namespace);
    // otherwise loopback, where the sender's core does it.
    let root = crate::platform::process::is_root();
    // Counting a whole CPU needs root or a permissive perf_event_paranoid.
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").ok().and_then(|s| s.trim().parse::<i32>().ok()).unwrap_or(2);
    let counters = root || paranoid <= 0;
    let line = format!(
        "affinity --steer {} --reps 1 --seconds 1{}",
        if root { "rps" } else { "none" },
        if counters { "" } else { " --no-counters" }
    );
    step(6, "the affinity matrix of one TCP flow on the allowed CPUs", &line);
    if !root {
        say!("mtlab demo: not root, so the matrix runs on loopback (--steer none) instead of steering receive processing with RPS");
    }
    if !counters {
        say!("mtlab demo: per-CPU counters need root or kernel.perf_event_paranoid <= 0 (it is {paranoid}): the matrix runs without them");
    }
    if let Command::Affinity(a) = parse(&line)? {
        let (run, o) = affinity::matrix_run(a)?;
        out.push(("6. Affinity: one TCP flow for every (flow core, application core) pair".into(), study::finish_keep(run, &o)?));
    }
    Ok(out)
}
