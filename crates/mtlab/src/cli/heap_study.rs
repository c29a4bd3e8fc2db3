//! `mtlab heap compare`: flags turned into a validated `HeapCompareConfig`,
//! then one call to the study.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::study::{finish, study_progress, OutputArgs, RepeatArgs};
use super::CliError;
use crate::studies::heap::{self, allocators, HeapCompareConfig};

#[derive(Subcommand, Debug)]
pub enum HeapCommand {
    /// One program under several heap managers: time, peak RSS, live and mapped bytes, fragmentation, per-call cycles.
    #[command(after_help = "\
Each allocator runs the program untraced (wall time, peak RSS) and under `mtlab record` (everything else), \
--reps times, interleaved round by round. Named allocators are found through the dynamic linker's cache \
(Debian: apt-get install libjemalloc2 libgoogle-perftools4 libtcmalloc-minimal4 libmimalloc2.0); any other by \
the path of its .so. The program must be dynamically linked and use the system's malloc for another to take \
its place. Results are stored; compare two runs with `mtlab diff`.")]
    Compare(CompareArgs),
}

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// Heap managers: glibc, jemalloc, tcmalloc, tcmalloc-minimal, mimalloc, or the path of a .so.
    #[arg(long, value_delimiter = ',', default_value = "glibc,jemalloc,tcmalloc,mimalloc", value_name = "ALLOCATOR,...")]
    allocators: Vec<String>,
    /// Directory for the traces (default: a temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    #[command(flatten)]
    repeat: RepeatArgs,
    #[command(flatten)]
    output: OutputArgs,
    /// The program to run, then its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "PROGRAM [ARGS]...")]
    command: Vec<OsString>,
}

pub fn heap(cmd: HeapCommand) -> Result<ExitCode, CliError> {
    let HeapCommand::Compare(a) = cmd;
    let program = PathBuf::from(&a.command[0]);
    if program.components().count() == 1 && crate::platform::process::find_in_path(&a.command[0]).is_none() {
        return Err(CliError::Other(format!("cannot find program `{}` in PATH", program.display())));
    }
    if program.components().count() > 1 && !program.is_file() {
        return Err(CliError::Other(format!("cannot find program `{}`: no such file", program.display())));
    }
    let mut list: Vec<allocators::Allocator> = Vec::new();
    for name in &a.allocators {
        let al = allocators::resolve(name)?;
        if !list.contains(&al) {
            list.push(al);
        }
    }
    let cfg = HeapCompareConfig { allocators: list, argv: a.command, runner: a.repeat.options(3), dir: a.dir };
    let progress = study_progress("heap compare", a.output.quiet);
    let run = heap::run(&cfg, &progress)?;
    finish(run, &a.output)
}
