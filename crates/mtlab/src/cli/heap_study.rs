//! `mtlab heap compare|sweep`: flags turned into a validated config, then
//! one call to the study.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::study::{finish, reps_help, study_progress, OutputArgs, RepeatArgs};
use super::CliError;
use crate::study::model::Run;
use crate::studies::heap::{self, allocators, tunables, HeapCompareConfig, HeapReplayConfig, HeapSweepConfig, Objective};

#[derive(Subcommand, Debug)]
pub enum HeapCommand {
    /// One program under several heap managers: time, peak RSS, live and mapped bytes, fragmentation, per-call cycles.
    #[command(mut_arg("reps", reps_help(3)))]
    #[command(after_help = "\
Each allocator runs the program untraced (wall time, peak RSS) and under `mtlab record` (everything else), \
--reps times, interleaved round by round. Named allocators are found through the dynamic linker's cache \
(Debian: apt-get install libjemalloc2 libgoogle-perftools4 libtcmalloc-minimal4 libmimalloc2.0); any other by \
the path of its .so. The program must be dynamically linked and use the system's malloc for another to take \
its place. Results are stored; compare two runs with `mtlab diff`.")]
    Compare(CompareArgs),
    /// One tunable of one heap manager set to each of several values, the rest fixed: the same tables and plots, and the best value.
    #[command(mut_arg("reps", reps_help(3)))]
    #[command(after_help = "\
Tunables: glibc's by short name (GLIBC_TUNABLES glibc.malloc.NAME): top_pad, mmap_threshold, trim_threshold, \
arena_max, arena_test, tcache_count; jemalloc.KEY (a MALLOC_CONF key: narenas, dirty_decay_ms, muzzy_decay_ms, \
tcache_max, ...); tcmalloc.NAME (TCMALLOC_NAME, e.g. tcmalloc.release_rate); mimalloc.NAME (MIMALLOC_NAME, e.g. \
mimalloc.purge_delay); env.VAR (any environment variable, under --allocator). Sizes may be written 64KiB. \
A value glibc's loader does not take as given, or that jemalloc complains about, is left out and said so.\n\n\
The best value is the one with the least --objective (peak-mapped, end-mapped, peak-rss, wall) among those whose \
malloc p99 cycles are within 10 % of the best p99; --objective malloc-p99 takes the least p99.")]
    Sweep(SweepArgs),
    /// A recorded full trace's heap calls re-executed under each heap manager, without the original program.
    #[command(mut_arg("reps", reps_help(3)))]
    #[command(after_help = "\
Each traced thread's calls run in their recorded order on a thread of their own; a free of a block another \
thread allocated waits until that allocation has been replayed. The replay program allocates nothing of its own, \
so its trace holds the replayed calls alone: under glibc its live bytes follow the recorded curve exactly. \
Only the root process of a trace family is replayed.")]
    Replay(ReplayArgs),
}

#[derive(Args, Debug)]
pub struct ReplayArgs {
    #[command(flatten)]
    allocators: AllocatorsArg,
    /// Directory for the ops file and the traces (default: a temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    #[command(flatten)]
    repeat: RepeatArgs,
    #[command(flatten)]
    output: OutputArgs,
    /// The trace to replay (a full trace from `mtlab record`).
    trace: PathBuf,
}

#[derive(Args, Debug)]
pub struct SweepArgs {
    /// The tunable and its values, e.g. top_pad=0,64KiB,1MiB or jemalloc.dirty_decay_ms=0,1000,10000.
    #[arg(long = "set", value_name = "NAME=V1,V2,...")]
    set: String,
    /// The heap manager for env.VAR tunables (the others name their own): glibc, jemalloc, ..., or a .so path.
    #[arg(long)]
    allocator: Option<String>,
    /// What the best value minimizes.
    #[arg(long, default_value = "peak-mapped", value_parser = clap::builder::PossibleValuesParser::new(Objective::NAMES))]
    objective: String,
    #[command(flatten)]
    common: CommonArgs,
}

/// What runs: a built-in workload, or a program (one of them: a missing
/// one is named with both choices).
#[derive(Args, Debug)]
#[group(required = true, multiple = false)]
pub struct Target {
    /// A built-in workload instead of a program: small, xthread, threshold or phases, with an optional scale (phases:2).
    #[arg(long, value_name = "NAME[:SCALE]")]
    workload: Option<String>,
    /// The program to run, then its arguments. Each run gets an empty stdin (every repetition must do the same
    /// work) and its output is kept for mtlab: give input as a file argument, not through a pipe or `<`.
    #[arg(trailing_var_arg = true, value_name = "PROGRAM [ARGS]...")]
    command: Vec<OsString>,
}

/// The heap managers compare and replay run under.
#[derive(Args, Debug)]
pub struct AllocatorsArg {
    /// Heap managers: glibc, jemalloc, tcmalloc, tcmalloc-minimal, mimalloc, or the path of a .so.
    #[arg(long, value_delimiter = ',', default_value = "glibc,jemalloc,tcmalloc,mimalloc", value_name = "ALLOCATOR,...")]
    allocators: Vec<String>,
}

/// What both heap commands take besides their own flags.
#[derive(Args, Debug)]
pub struct CommonArgs {
    /// Directory for the traces (default: a temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    #[command(flatten)]
    repeat: RepeatArgs,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    target: Target,
}

/// The built-in workloads (native/heap/workloads.c).
const WORKLOADS: [&str; 4] = ["small", "xthread", "threshold", "phases"];

impl Target {
    /// The command line to run, checked.
    fn argv(self) -> Result<Vec<OsString>, CliError> {
        let Some(w) = self.workload else {
            check_program(&self.command)?;
            return Ok(self.command);
        };
        let (name, scale) = w.split_once(':').unwrap_or((&w, "1"));
        if !WORKLOADS.contains(&name) {
            return Err(CliError::Other(format!("--workload {name}: use one of {}", WORKLOADS.join(", "))));
        }
        if !scale.parse::<u32>().is_ok_and(|s| (1..=1000).contains(&s)) {
            return Err(CliError::Other(format!("--workload {w}: the scale must be a whole number from 1 to 1000")));
        }
        let exe = crate::native::path(crate::native::Part::HeapWorkloads).map_err(crate::studies::StudyError::from)?;
        Ok(vec![exe.into_os_string(), name.into(), scale.into()])
    }
}

#[derive(Args, Debug)]
pub struct CompareArgs {
    #[command(flatten)]
    allocators: AllocatorsArg,
    #[command(flatten)]
    common: CommonArgs,
}

pub fn heap(cmd: HeapCommand) -> Result<ExitCode, CliError> {
    match cmd {
        HeapCommand::Compare(a) => {
            let (run, output) = compare_run(a)?;
            finish(run, &output)
        }
        HeapCommand::Sweep(a) => sweep(a),
        HeapCommand::Replay(a) => replay(a),
    }
}

fn resolve_all(names: &[String]) -> Result<Vec<allocators::Allocator>, CliError> {
    let mut list: Vec<allocators::Allocator> = Vec::new();
    for name in names {
        let al = allocators::resolve(name)?;
        if !list.contains(&al) {
            list.push(al);
        }
    }
    Ok(list)
}

fn replay(a: ReplayArgs) -> Result<ExitCode, CliError> {
    if !a.trace.is_file() {
        let what = if a.trace.exists() { "is not a trace file (a directory or device)" } else { "does not exist" };
        return Err(CliError::Other(format!(
            "{} {what}; give a trace written by `mtlab record -o FILE -- PROGRAM`",
            a.trace.display()
        )));
    }
    let cfg = HeapReplayConfig { trace: a.trace, allocators: resolve_all(&a.allocators.allocators)?, runner: a.repeat.options(3), dir: a.dir };
    let progress = study_progress("heap replay", a.output.quiet);
    let run = heap::replay(&cfg, &progress)?;
    finish(run, &a.output)
}

fn check_program(command: &[OsString]) -> Result<(), CliError> {
    let program = PathBuf::from(&command[0]);
    if program.components().count() == 1 && crate::platform::process::find_in_path(&command[0]).is_none() {
        return Err(CliError::Other(format!("cannot find program `{}` in PATH", program.display())));
    }
    if program.components().count() > 1 && !program.is_file() {
        return Err(CliError::Other(format!("cannot find program `{}`: no such file", program.display())));
    }
    Ok(())
}

fn sweep(a: SweepArgs) -> Result<ExitCode, CliError> {
    let argv = a.common.target.argv()?;
    let Some((name, given)) = a.set.split_once('=') else {
        return Err(CliError::Other(format!("--set {}: write NAME=V1,V2,... (e.g. top_pad=0,64KiB)", a.set)));
    };
    let mut values: Vec<String> = Vec::new();
    for v in given.split(',').map(str::trim).filter(|v| !v.is_empty()) {
        // A value given twice would be one configuration measured twice under one name.
        if !values.iter().any(|w| w == v) {
            values.push(v.to_string());
        }
    }
    if values.is_empty() {
        return Err(CliError::Other(format!("--set {name}=: give one value or more")));
    }
    let (tunable, owner) = tunables::resolve(name)?;
    let allocator = tunables::allocator_for(owner, a.allocator.as_deref())?;
    let cfg = HeapSweepConfig {
        tunable_name: name.to_string(),
        tunable,
        values,
        allocator,
        objective: Objective::parse(&a.objective).expect("clap checked --objective"),
        argv,
        runner: a.common.repeat.options(3),
        dir: a.common.dir,
    };
    let progress = study_progress("heap sweep", a.common.output.quiet);
    let run = heap::sweep(&cfg, &progress)?;
    finish(run, &a.common.output)
}

/// Runs `heap compare`; the run is not yet stored or shown.
pub fn compare_run(a: CompareArgs) -> Result<(Run, OutputArgs), CliError> {
    let argv = a.common.target.argv()?;
    let list = resolve_all(&a.allocators.allocators)?;
    let cfg = HeapCompareConfig { allocators: list, argv, runner: a.common.repeat.options(3), dir: a.common.dir };
    let progress = study_progress("heap compare", a.common.output.quiet);
    let run = heap::run(&cfg, &progress)?;
    Ok((run, a.common.output))
}
