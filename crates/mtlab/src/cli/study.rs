//! The study commands' flags, turned into validated study configs; and the
//! commands that read the results store (`runs`, `diff`).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};

use super::run_ref::RunRef;
use super::{emit, parse_percent_or_zero, parse_size_arg, write_html, CliError};
use crate::export::{self, csv::CsvExporter, json::JsonExporter, Document};
use crate::record::Unwind;
use crate::store::{RunFilter, Store};
use crate::study::progress::Progress;
use crate::study::runner::RunnerOptions;
use crate::study::Run;
use crate::studies::{self, profiler_cost, tracer_cost};

fn seconds_arg(s: &str) -> Result<Duration, String> {
    let v: f64 = s.trim_end_matches('s').parse().map_err(|_| format!("`{s}` is not a number of seconds (e.g. 0.5)"))?;
    if !(0.0..=3600.0).contains(&v) {
        return Err(format!("`{s}`: give between 0 and 3600 seconds"));
    }
    Ok(Duration::from_secs_f64(v))
}

/// Where results go: the screen or files, and the results store.
#[derive(Args, Debug, Clone)]
pub struct OutputArgs {
    /// Print one JSON object (the run, every repetition, summaries) instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Also write every table, the summary and every repetition as CSV files into DIR.
    #[arg(long, value_name = "DIR")]
    pub csv: Option<PathBuf>,
    /// Also write every plot as an SVG file into DIR.
    #[arg(long, value_name = "DIR")]
    pub svg: Option<PathBuf>,
    /// Also write the run as one self-contained HTML page: tables (sortable), plots, the environment.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// No progress bar (it is shown only when stderr is a terminal anyway).
    #[arg(short, long)]
    pub quiet: bool,
    #[command(flatten)]
    pub store: StoreArgs,
    /// Also push the run as OTLP metrics to URL (one point per configuration and repetition;
    /// docs/otlp.md); without URL, $OTEL_EXPORTER_OTLP_ENDPOINT, else http://localhost:4318 (over gRPC :4317).
    #[arg(long, value_name = "URL", num_args = 0..=1, default_missing_value = "")]
    pub otlp_endpoint: Option<String>,
    /// With --otlp-endpoint: grpc, http/protobuf or http/json (default: $OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf).
    #[arg(long, value_name = "PROTOCOL", value_parser = super::otlp::parse_protocol, requires = "otlp_endpoint")]
    pub otlp_protocol: Option<crate::otlp::Protocol>,
}

/// `--otlp-endpoint` of a study or `runs export`, checked before any work.
fn metrics_target(flag: &Option<String>, protocol: Option<crate::otlp::Protocol>) -> Result<Option<crate::otlp::Target>, CliError> {
    flag.as_deref()
        .map(|f| crate::otlp::push::target(f, protocol, crate::otlp::Signal::Metrics, &crate::otlp::push::real_env).map_err(|e| crate::otlp::OtlpError::from(e).into()))
        .transpose()
}

/// Which results store: every command that reads or writes one takes this.
#[derive(Args, Debug, Clone)]
pub struct StorePath {
    /// Results store (default: $MTLAB_STORE, else $XDG_DATA_HOME/mtlab/runs.sqlite, else ~/.local/share/mtlab/runs.sqlite).
    #[arg(long, value_name = "PATH")]
    pub store: Option<PathBuf>,
}

impl StorePath {
    fn path(&self) -> PathBuf {
        self.store.clone().unwrap_or_else(Store::default_path)
    }

    /// Opens the store, creating it if needed (a study storing its run).
    fn create(&self) -> Result<Store, CliError> {
        let p = self.path();
        if self.store.is_none() && Store::is_default_location() {
            Store::create_default_dir(&p)?;
        }
        Ok(Store::open(&p)?)
    }

    /// Opens an existing store for reading (commands that only read).
    fn existing(&self) -> Result<Store, CliError> {
        let p = self.path();
        if !p.exists() {
            return Err(CliError::Other(format!(
                "no results store at {}: run a study first (e.g. `mtlab bench tracer`), or give --store PATH",
                p.display()
            )));
        }
        Ok(Store::open_read_only(&p)?)
    }
}

#[derive(Args, Debug, Clone)]
pub struct StoreArgs {
    #[command(flatten)]
    pub path: StorePath,
    /// Do not keep this run in the results store.
    #[arg(long, conflicts_with = "store")]
    pub no_store: bool,
}

/// How configurations are repeated.
#[derive(Args, Debug, Clone)]
pub struct RepeatArgs {
    /// Rounds measured; each round runs every configuration once, interleaved (each command says its default).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub reps: Option<u32>,
    /// Rounds run first and discarded.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=100))]
    pub warmup: u32,
    /// Seconds each measurement lasts at least: shorter trials are repeated and averaged.
    #[arg(long, value_name = "SECONDS", default_value = "0", value_parser = seconds_arg)]
    pub min_time: Duration,
}

/// `--reps`'s help for a command whose default is `default` rounds
/// (`#[command(mut_arg("reps", reps_help(N)))]`): its own default, not every command's.
pub(super) fn reps_help(default: u32) -> impl FnOnce(clap::Arg) -> clap::Arg {
    move |a| a.help(format!("Rounds measured; each round runs every configuration once, interleaved [default: {default}]"))
}

impl RepeatArgs {
    pub(super) fn options(&self, default_reps: u32) -> RunnerOptions {
        RunnerOptions { warmup: self.warmup, reps: self.reps.unwrap_or(default_reps), min_duration: self.min_time }
    }
}

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Cost of tracing the malloc-test workload: untraced vs mtlab vs heaptrack.
    #[command(mut_arg("reps", reps_help(5)))]
    Tracer(TracerArgs),
    /// Wall-time cost of tracing any program: untraced vs mtlab vs heaptrack.
    #[command(mut_arg("reps", reps_help(3)))]
    Program(ProgramArgs),
    /// What heap profilers cost: mtlab's sampler, jemalloc's and tcmalloc's, by interval, threads and unwinder.
    #[command(mut_arg("reps", reps_help(3)))]
    Malloc(MallocArgs),
}

/// What both tracer-cost commands take.
#[derive(Args, Debug)]
pub struct TracerCommon {
    /// Skip heaptrack even if installed.
    #[arg(long)]
    no_heaptrack: bool,
    /// How `mtlab record` captures stacks, one configuration each (dwarf, fp, libgcc, libunwind); the first is "mtlab".
    #[arg(long, value_delimiter = ',', default_value = "dwarf")]
    unwinders: Vec<Unwind>,
    /// Also run `mtlab record --sample INTERVAL` (first unwinder), one configuration per interval, e.g. 512KiB,64KiB.
    #[arg(long, value_delimiter = ',', value_parser = parse_size_arg)]
    samples: Vec<u64>,
    /// Leave out the full-trace configurations (with --samples: the sampler's cost alone).
    #[arg(long, requires = "samples")]
    no_full: bool,
    /// Directory for the traces (default: a temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    #[command(flatten)]
    repeat: RepeatArgs,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Args, Debug)]
pub struct TracerArgs {
    /// Threads of the workload.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=1024))]
    threads: u32,
    /// Iterations (malloc+free pairs) per thread.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    iterations: u64,
    #[command(flatten)]
    common: TracerCommon,
}

#[derive(Args, Debug)]
pub struct ProgramArgs {
    /// Run heaptrack in record-only mode (`--raw`): its interpreter runs out
    /// of memory on some programs (cc1 with heaptrack 1.4).
    #[arg(long, conflicts_with = "no_heaptrack")]
    heaptrack_raw: bool,
    #[command(flatten)]
    common: TracerCommon,
    /// The program to run, then its arguments. Each run gets an empty stdin (every repetition must do the same
    /// work) and its output is kept for mtlab: give input as a file argument, not through a pipe or `<`.
    #[arg(required = true, trailing_var_arg = true, value_name = "PROGRAM [ARGS]...")]
    command: Vec<OsString>,
}

#[derive(Args, Debug)]
pub struct MallocArgs {
    /// Thread counts to run, e.g. 1,2.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    threads: Vec<u32>,
    /// Block size of the malloc-test workload.
    #[arg(long, default_value = "512", value_parser = parse_size_arg)]
    size: u64,
    /// Call depth at which malloc is called.
    #[arg(long, default_value_t = 10)]
    depth: u32,
    /// malloc/free pairs per thread.
    #[arg(long, default_value_t = 3_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    iterations: u64,
    /// Touch (write) every block, as a real program would.
    #[arg(long)]
    touch: bool,
    /// Sampling intervals to sweep.
    #[arg(long, value_delimiter = ',', default_value = "64KiB,128KiB,256KiB,512KiB,1MiB,2MiB", value_parser = parse_size_arg)]
    intervals: Vec<u64>,
    /// mtlab unwinders to sweep (dwarf, fp, libgcc, libunwind).
    #[arg(long, value_delimiter = ',', default_value = "fp,libgcc")]
    unwinders: Vec<Unwind>,
    /// Allocators for mtlab's configurations: glibc, jemalloc, tcmalloc, mimalloc or a path to a .so.
    #[arg(long = "allocator", default_value = "glibc")]
    allocators: Vec<String>,
    /// Leave out jemalloc's profiler even if libjemalloc is installed.
    #[arg(long)]
    no_jemalloc: bool,
    /// Leave out tcmalloc's sampler even if libtcmalloc is installed.
    #[arg(long)]
    no_tcmalloc: bool,
    /// Also run the latency pipeline under the same configurations.
    #[arg(long)]
    pipeline: bool,
    /// Messages per pipeline run.
    #[arg(long, default_value_t = 40_000)]
    pipeline_messages: u64,
    /// Pipeline messages per second (its three stages share this machine's cores).
    #[arg(long, default_value_t = 20_000)]
    pipeline_rate: u64,
    /// Join with the coverage curve (a sampler simulated on a full trace of
    /// the realistic workload) and recommend an interval.
    #[arg(long)]
    coverage: bool,
    /// Directory for traces (default: a temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    #[command(flatten)]
    repeat: RepeatArgs,
    #[command(flatten)]
    output: OutputArgs,
}

impl MallocArgs {
    fn config(&self) -> profiler_cost::ProfilerCostConfig {
        let mut intervals = self.intervals.clone();
        intervals.sort_unstable();
        intervals.dedup();
        profiler_cost::ProfilerCostConfig {
            threads: self.threads.clone(),
            size: self.size,
            depth: self.depth,
            iterations: self.iterations,
            touch: self.touch,
            intervals,
            unwinders: self.unwinders.clone(),
            allocators: self.allocators.clone(),
            jemalloc: !self.no_jemalloc && profiler_cost::allocator_library("jemalloc").is_some(),
            tcmalloc: !self.no_tcmalloc && profiler_cost::allocator_library("tcmalloc").is_some(),
            pipeline: self.pipeline.then_some(profiler_cost::Pipeline { messages: self.pipeline_messages, rate: self.pipeline_rate }),
            coverage: self.coverage,
            runner: self.repeat.options(3),
            dir: self.dir.clone(),
        }
    }
}

/// The tracer-cost study's config, for the malloc-test or any program.
fn tracer_config(
    target: tracer_cost::Target,
    raw: bool,
    common: &TracerCommon,
    default_reps: u32,
) -> tracer_cost::TracerCostConfig {
    use tracer_cost::Heaptrack;
    let repeat = &common.repeat;
    tracer_cost::TracerCostConfig {
        target,
        heaptrack: match (common.no_heaptrack, raw) {
            (true, _) => Heaptrack::Off,
            (_, true) => Heaptrack::Raw,
            _ => Heaptrack::Default,
        },
        // `mtlab report` is timed as often as the rounds, and at least 3 times.
        report_runs: repeat.reps.unwrap_or(default_reps).max(3),
        unwinders: common.unwinders.clone(),
        samples: {
            let mut s = common.samples.clone();
            s.sort_unstable_by(|a, b| b.cmp(a));
            s.dedup();
            s
        },
        full: !common.no_full,
        runner: repeat.options(default_reps),
        dir: common.dir.clone(),
    }
}

pub fn bench(cmd: BenchCommand) -> Result<ExitCode, CliError> {
    let (run, output) = bench_run(cmd)?;
    finish(run, &output)
}

/// Runs a `bench` command's study; the run is not yet stored or shown.
pub fn bench_run(cmd: BenchCommand) -> Result<(Run, OutputArgs), CliError> {
    use tracer_cost::Target;
    let (run, output) = match cmd {
        BenchCommand::Tracer(a) => {
            let target = Target::MallocTest { threads: a.threads, iterations: a.iterations };
            let cfg = tracer_config(target, false, &a.common, 5);
            let progress = study_progress("bench tracer", a.common.output.quiet);
            (tracer_cost::run(&cfg, &progress)?, a.common.output)
        }
        BenchCommand::Program(a) => {
            let cfg = tracer_config(Target::Program(a.command), a.heaptrack_raw, &a.common, 3);
            let progress = study_progress("bench program", a.common.output.quiet);
            (tracer_cost::run(&cfg, &progress)?, a.common.output)
        }
        BenchCommand::Malloc(a) => {
            let progress = study_progress("bench malloc", a.output.quiet);
            (profiler_cost::run(&a.config(), &progress)?, a.output)
        }
    };
    Ok((run, output))
}

pub(super) fn study_progress(prefix: &str, quiet: bool) -> Progress {
    let p = Progress::new(0, quiet);
    p.set_prefix(prefix);
    p
}

/// A finished study run: stored (so its id shows), then shown. A store that
/// fails does not lose the results: they are shown first, then the error.
pub fn finish(run: Run, out: &OutputArgs) -> Result<ExitCode, CliError> {
    finish_keep(run, out).map(|_| ExitCode::SUCCESS)
}

/// `finish`, giving back the document shown (for `mtlab demo`'s page).
pub fn finish_keep(mut run: Run, out: &OutputArgs) -> Result<Document, CliError> {
    let target = metrics_target(&out.otlp_endpoint, out.otlp_protocol)?;
    let stored = if out.store.no_store {
        None
    } else {
        let r = out.store.path.create().and_then(|mut s| Ok((s.insert(&run)?, s.path().to_path_buf())));
        if let Ok((id, _)) = &r {
            run.id = Some(*id);
        }
        Some(r)
    };
    let doc = studies::document(&run);
    emit(&doc, out.json, out.csv.as_ref(), out.svg.as_ref())?;
    if let Some(path) = &out.html {
        write_html(&doc, path, &run_title(&run), &Default::default())?;
    }
    if let Some(t) = &target {
        super::otlp::run_exports(&run, Some(t), [(&None, false), (&None, true)])?;
    }
    match stored {
        Some(Ok((id, path))) => {
            say!("mtlab: stored as run {id} in {}; show it again with `mtlab runs show {id}`", path.display());
            Ok(doc)
        }
        Some(Err(e)) => Err(CliError::Other(format!("{e}\nthe results above were not stored (use --store PATH, or --no-store)"))),
        None => Ok(doc),
    }
}

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct RunsArgs {
    #[command(subcommand)]
    action: Option<RunsAction>,
    #[command(flatten)]
    list: ListArgs,
}

#[derive(Args, Debug)]
struct ListArgs {
    /// Only runs of this study (e.g. bench-malloc).
    #[arg(long)]
    study: Option<String>,
    /// At most this many runs, newest first.
    #[arg(long, default_value_t = 20)]
    limit: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    store: StorePath,
}

#[derive(Subcommand, Debug)]
enum RunsAction {
    /// List stored runs, newest first (the default).
    List(ListArgs),
    /// Show one run as it was shown when it ran.
    Show(ShowArgs),
    /// Write one run as JSON (stdout) or CSV files.
    Export(ExportArgs),
}

#[derive(Args, Debug)]
struct ShowArgs {
    /// The run: its id (see `mtlab runs`), `last` (the newest stored run) or `last~N` (N runs before it).
    id: RunRef,
    #[arg(long)]
    json: bool,
    /// Also write its tables as CSV files into DIR.
    #[arg(long, value_name = "DIR")]
    csv: Option<PathBuf>,
    /// Also write its plots as SVG files into DIR.
    #[arg(long, value_name = "DIR")]
    svg: Option<PathBuf>,
    /// Also write the run as one self-contained HTML page.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    #[command(flatten)]
    store: StorePath,
}

#[derive(Args, Debug)]
struct ExportArgs {
    /// The run: its id (see `mtlab runs`), `last` (the newest stored run) or `last~N` (N runs before it).
    id: RunRef,
    /// Print the run as one JSON object.
    #[arg(long, required_unless_present_any = ["csv", "otlp", "otlp_json", "otlp_endpoint"], conflicts_with = "csv")]
    json: bool,
    /// Write its tables, summary and every repetition as CSV files into DIR.
    #[arg(long, value_name = "DIR")]
    csv: Option<PathBuf>,
    /// Write the run as an OTLP metrics request (protobuf) to FILE (docs/otlp.md).
    #[arg(long, value_name = "FILE")]
    otlp: Option<PathBuf>,
    /// Write the run as an OTLP metrics request in OTLP/JSON to FILE.
    #[arg(long, value_name = "FILE")]
    otlp_json: Option<PathBuf>,
    /// Push the run as OTLP metrics to URL; without URL, $OTEL_EXPORTER_OTLP_ENDPOINT, else http://localhost:4318 (over gRPC :4317).
    #[arg(long, value_name = "URL", num_args = 0..=1, default_missing_value = "")]
    otlp_endpoint: Option<String>,
    /// With --otlp-endpoint: grpc, http/protobuf or http/json (default: $OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf).
    #[arg(long, value_name = "PROTOCOL", value_parser = super::otlp::parse_protocol, requires = "otlp_endpoint")]
    otlp_protocol: Option<crate::otlp::Protocol>,
    #[command(flatten)]
    store: StorePath,
}

pub fn runs(a: RunsArgs) -> Result<ExitCode, CliError> {
    match a.action.unwrap_or(RunsAction::List(a.list)) {
        RunsAction::List(l) => {
            let store = l.store.existing()?;
            let runs = store.list(&RunFilter { study: l.study.clone(), limit: Some(l.limit) })?;
            let mut t = export::Table::new("runs", "", &["id", "started", "study", "title", "host", "seconds", "configurations", "measurements"], 5);
            for r in &runs {
                t.push(vec![
                    export::Cell::text(r.id.to_string()),
                    export::Cell::text(&r.started),
                    export::Cell::text(&r.study),
                    export::Cell::text(&r.title),
                    export::Cell::text(&r.host),
                    export::Cell::Num(r.duration_s, 1),
                    export::Cell::Int(r.configurations as i64),
                    export::Cell::Int(r.measurements as i64),
                ]);
            }
            let mut views = Vec::new();
            if runs.is_empty() {
                views.push(export::View::Note(format!(
                    "no runs{} in {}",
                    l.study.as_deref().map(|s| format!(" of study {s}")).unwrap_or_default(),
                    store.path().display()
                )));
            } else {
                views.push(export::View::Table(t));
            }
            let doc = Document { views, data: serde_json::to_value(&runs).unwrap_or_default() };
            emit(&doc, l.json, None, None)?;
        }
        RunsAction::Show(s) => {
            let store = s.store.existing()?;
            let run = store.get(s.id.resolve(&store)?)?;
            let doc = studies::document(&run);
            emit(&doc, s.json, s.csv.as_ref(), s.svg.as_ref())?;
            if let Some(path) = &s.html {
                write_html(&doc, path, &run_title(&run), &Default::default())?;
            }
        }
        RunsAction::Export(e) => {
            let target = metrics_target(&e.otlp_endpoint, e.otlp_protocol)?;
            let store = e.store.existing()?;
            let run = store.get(e.id.resolve(&store)?)?;
            if e.json || e.csv.is_some() {
                emit_export(&studies::document(&run), e.json, e.csv.as_ref())?;
            }
            if e.otlp.is_some() || e.otlp_json.is_some() || target.is_some() {
                super::otlp::run_exports(&run, target.as_ref(), [(&e.otlp, false), (&e.otlp_json, true)])?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A page title for a study run.
fn run_title(run: &crate::study::model::Run) -> String {
    match run.id {
        Some(id) => format!("mtlab run {id}: {}", run.title),
        None => format!("mtlab: {}", run.title),
    }
}

/// `runs export`: JSON on stdout, or CSV files only (no tables on screen).
fn emit_export(doc: &Document, json: bool, csv: Option<&PathBuf>) -> Result<(), CliError> {
    if json {
        export::print(&JsonExporter, doc)?;
    }
    if let Some(dir) = csv {
        let files = export::write_files(&CsvExporter, doc, dir)?;
        say!("mtlab: wrote {} CSV files into {}", files.len(), dir.display());
    }
    Ok(())
}

#[derive(Args, Debug)]
pub struct DiffArgs {
    /// The earlier run: its id (see `mtlab runs`), `last` (the newest stored run) or `last~N` (N runs before it).
    run_a: RunRef,
    /// The later run: its id, `last` or `last~N`.
    run_b: RunRef,
    /// Smallest change flagged, in percent, even when significant (0: every significant change).
    #[arg(long, default_value = "2%", value_parser = parse_percent_or_zero)]
    threshold: f64,
    /// Exit with status 3 when any measurement got worse (for CI).
    #[arg(long)]
    fail_on_regression: bool,
    #[arg(long)]
    json: bool,
    /// Also write the comparison as CSV into DIR.
    #[arg(long, value_name = "DIR")]
    csv: Option<PathBuf>,
    /// Also write the comparison as one self-contained HTML page.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    #[command(flatten)]
    store: StorePath,
}

pub fn diff(a: DiffArgs) -> Result<ExitCode, CliError> {
    let store = a.store.existing()?;
    let (ida, idb) = (a.run_a.resolve(&store)?, a.run_b.resolve(&store)?);
    let (ra, rb) = (store.get(ida)?, store.get(idb)?);
    let d = crate::study::diff::diff(&ra, &rb, a.threshold / 100.0)?;
    let doc = crate::study::diff::document(&d);
    emit(&doc, a.json, a.csv.as_ref(), None)?;
    if let Some(path) = &a.html {
        write_html(&doc, path, &format!("mtlab diff {ida} {idb}: {}", ra.title), &Default::default())?;
    }
    if a.fail_on_regression && d.regressions() > 0 {
        return Ok(ExitCode::from(3));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// `--reps`'s help of the command at `path` (`["bench", "tracer"]`).
    fn reps_help(path: &[&str]) -> String {
        let mut cmd = super::super::Cli::command();
        cmd.build();
        let mut at = &cmd;
        for name in path {
            at = at.find_subcommand(name).unwrap_or_else(|| panic!("no subcommand {name}"));
        }
        let reps = at.get_arguments().find(|a| a.get_id() == "reps").expect("a --reps option");
        reps.get_help().map(|h| h.to_string()).unwrap_or_default()
    }

    #[test]
    fn reps_help_says_this_commands_default_only() {
        for (path, default) in [
            (&["bench", "tracer"][..], 5),
            (&["bench", "program"], 3),
            (&["bench", "malloc"], 3),
            (&["threads", "create"], 5),
            (&["threads", "all"], 3),
            (&["affinity"], 3),
            (&["heap", "compare"], 3),
            (&["heap", "sweep"], 3),
        ] {
            let help = reps_help(path);
            assert!(help.ends_with(&format!("[default: {default}]")), "{path:?}: {help}");
            assert_eq!(help.matches("default").count(), 1, "{path:?}: one default, this command's: {help}");
        }
    }
}
