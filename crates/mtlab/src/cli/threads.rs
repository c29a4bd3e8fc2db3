//! `mtlab threads create|ctx|all`: flags turned into a validated
//! `ThreadsConfig`, then one call to the study.

use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::study::{finish, reps_help, study_progress, OutputArgs, RepeatArgs};
use super::CliError;
use crate::study::model::Run;
use crate::studies::threads::{self, preempt, ChatParams, CpuChoice, CreateParams, CtxParams, Libc, ThreadsConfig};
use crate::topo::{Placement, Topology};

const AFTER_HELP: &str = "\
CPU sets: `--cpus one` is the first CPU this process may use, `--cpus all` every one of them, or give a list \
(`0`, `0-3,6`); repeat --cpus to sweep several sets (default: one and all).

Thread libraries: glibc (NPTL) is built into mtlab; `musl` builds the workloads with musl-gcc (Debian: \
apt-get install musl-tools); any other libc's compiler wrapper can be given by path. The default is glibc, \
and musl when musl-gcc is installed.

Each cell runs as its own process for --ms milliseconds after a warm-up, repeated --reps times, interleaved \
with every other cell. Results are stored; compare two runs with `mtlab diff`.";

#[derive(Subcommand, Debug)]
pub enum ThreadsCommand {
    /// Thread creation: pthread_create + join (or a barrier for detached threads), µs per thread.
    #[command(after_help = AFTER_HELP, mut_arg("reps", reps_help(5)))]
    Create(CreateArgs),
    /// Context switches: a token round a ring of N threads, each walking a working set (lmbench lat_ctx).
    #[command(after_help = AFTER_HELP, mut_arg("reps", reps_help(5)))]
    Ctx(CtxArgs),
    /// Message passing: a Volanomark-shaped chat server on loopback TCP, a thread per connection or one epoll thread a side.
    #[command(after_help = AFTER_HELP, mut_arg("reps", reps_help(5)))]
    Chat(ChatArgs),
    /// The quick set of every workload, in well under a minute on 2 cores.
    #[command(after_help = AFTER_HELP, mut_arg("reps", reps_help(3)))]
    All(AllArgs),
}

/// What every threads command takes.
#[derive(Args, Debug)]
pub struct CommonArgs {
    /// Thread libraries: glibc, musl, or the path of a libc's compiler wrapper (default: glibc, and musl if installed).
    #[arg(long, value_delimiter = ',', value_name = "LIBC,...")]
    libc: Vec<String>,
    /// A CPU set to run on: one, all, or a list such as 0-3,6; repeat to sweep several (default: one and all).
    #[arg(long, value_name = "SET")]
    cpus: Vec<String>,
    /// Preemption models to sweep (none, voluntary, full) where the kernel can switch them at run time.
    #[arg(long, value_delimiter = ',', value_name = "MODEL,...", value_parser = clap::builder::PossibleValuesParser::new(preempt::MODELS))]
    preempt: Vec<String>,
    /// Milliseconds each trial measures, after the workload's own warm-up.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u32).range(1..=600_000))]
    ms: Option<u32>,
    #[command(flatten)]
    repeat: RepeatArgs,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Args, Debug)]
pub struct CreateArgs {
    /// How the creator waits: join (pthread_join), barrier (detached threads passing a barrier), or both.
    #[arg(long, value_delimiter = ',', default_value = "join", value_parser = ["join", "barrier"])]
    wait: Vec<String>,
    /// Thread stack sizes to sweep, e.g. 64KiB,8MiB (default: the libc's own); at least 64 KiB more than --touch.
    #[arg(long, value_delimiter = ',', value_parser = super::parse_size_arg)]
    stack: Vec<u64>,
    /// The new thread first touches this much of its stack; the time is shown on its own (e.g. 64KiB).
    #[arg(long, value_parser = super::parse_size_arg)]
    touch: Option<u64>,
    #[command(flatten)]
    common: CommonArgs,
}

#[derive(Args, Debug)]
pub struct CtxArgs {
    /// How the token passes: pipe (lmbench's), futex, eventfd, cond (mutex + condition variable).
    #[arg(long, value_delimiter = ',', default_value = "pipe", value_parser = ["pipe", "futex", "eventfd", "cond"])]
    transport: Vec<String>,
    /// Threads in the ring.
    #[arg(long, value_delimiter = ',', default_value = "2,4,8,16", value_parser = clap::value_parser!(u32).range(2..=100_000))]
    threads: Vec<u32>,
    /// Working set each thread sums on every turn, e.g. 0,16KiB,64KiB.
    #[arg(long, value_delimiter = ',', default_value = "0,16KiB,64KiB", value_parser = parse_working_set)]
    ws: Vec<u32>,
    /// Also run the ring with neighbours pinned to a pair of CPUs of each placement class:
    /// same, smt, core, llc, package, remote (see `mtlab topo`); classes this machine lacks are skipped with a note.
    #[arg(long, value_delimiter = ',', value_name = "CLASS,...", value_parser = clap::builder::PossibleValuesParser::new(Placement::NAMES))]
    place: Vec<String>,
    /// Do not run perf bench sched pipe beside the 2-thread pipe ring.
    #[arg(long)]
    no_perf: bool,
    #[command(flatten)]
    common: CommonArgs,
}

/// One CPU pair per requested placement class, from this machine's topology.
fn placements(classes: &[String], notes: &mut Vec<String>) -> Result<Vec<CpuChoice>, CliError> {
    if classes.is_empty() {
        return Ok(Vec::new());
    }
    let topo = Topology::read()?;
    let mut out = Vec::new();
    for name in classes {
        let class = Placement::parse(name).expect("clap checked the class name");
        match topo.pair(class) {
            Some((a, b)) => out.push(CpuChoice::placed(name, a, b)),
            None => notes.push(format!(
                "--place {name} skipped: no two CPUs this process may use ({}) are {} (see `mtlab topo`)",
                crate::study::env::cpu_list(&topo.cpus()),
                class.describe()
            )),
        }
    }
    Ok(out)
}

#[derive(Args, Debug)]
pub struct ChatArgs {
    /// threads (a thread per connection on each side, the original's shape), epoll (one thread a side), or both.
    #[arg(long, value_delimiter = ',', default_value = "threads,epoll", value_parser = ["threads", "epoll"])]
    mode: Vec<String>,
    /// Chat rooms.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    rooms: u32,
    /// Users per room, swept (the original: 10 rooms × 20 users).
    #[arg(long, value_delimiter = ',', default_value = "5,10,20", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    users: Vec<u32>,
    /// Messages each user sends at least (users keep sending until --ms has passed); each goes to every user of its room.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100_000_000))]
    messages: u32,
    /// Bytes per message, 24 to 1MiB (e.g. 100 or 4KiB).
    #[arg(long, default_value = "100", value_parser = parse_message_size)]
    size: u32,
    /// Do not run perf bench sched messaging -t beside rooms of 20 users.
    #[arg(long)]
    no_perf: bool,
    #[command(flatten)]
    common: CommonArgs,
}

#[derive(Args, Debug)]
pub struct AllArgs {
    #[command(flatten)]
    common: CommonArgs,
}

/// A working set in KiB: 0, or a size that is a whole number of KiB.
fn parse_working_set(s: &str) -> Result<u32, String> {
    if s.trim() == "0" {
        return Ok(0);
    }
    let b = super::parse_size_arg(s)?;
    if !b.is_multiple_of(1024) || b / 1024 > 1 << 20 {
        return Err(format!("`{s}`: give whole KiB up to 1GiB (e.g. 16KiB)"));
    }
    Ok((b / 1024) as u32)
}

/// A message size: a size as people write it, 24 bytes to 1 MiB.
fn parse_message_size(s: &str) -> Result<u32, String> {
    match super::parse_size_arg(s)? {
        b @ 24..=1_048_576 => Ok(b as u32),
        _ => Err(format!("`{s}`: give 24 bytes to 1MiB (e.g. 100 or 4KiB)")),
    }
}

/// Stack the create workload keeps for a thread's own frames (native/threads/create.c).
const THREAD_FRAMES_KIB: u32 = 64;

fn kib(bytes: u64, what: &str) -> Result<u32, CliError> {
    if !bytes.is_multiple_of(1024) || bytes < 16 * 1024 || bytes / 1024 > 1 << 20 {
        return Err(CliError::Other(format!("{what}: give whole KiB from 16KiB to 1GiB")));
    }
    Ok((bytes / 1024) as u32)
}


impl CommonArgs {
    fn config(&self, default_reps: u32, default_ms: u32) -> Result<ThreadsConfig, CliError> {
        let mut notes = Vec::new();
        let libcs = if self.libc.is_empty() {
            let mut v = vec![Libc::Glibc];
            match Libc::resolve("musl") {
                Ok(m) => v.push(m),
                Err(_) => notes.push("musl left out: musl-gcc is not installed (Debian: apt-get install musl-tools)".into()),
            }
            v
        } else {
            let mut v: Vec<Libc> = Vec::new();
            for spec in &self.libc {
                let l = Libc::resolve(spec)?;
                if !v.contains(&l) {
                    v.push(l);
                }
            }
            v
        };
        let specs: Vec<&str> = if self.cpus.is_empty() { vec!["one", "all"] } else { self.cpus.iter().map(String::as_str).collect() };
        let mut cpu_sets: Vec<CpuChoice> = Vec::new();
        for s in specs {
            let c = CpuChoice::set(super::cpu_set_arg(s, "--cpus")?);
            if !cpu_sets.contains(&c) {
                cpu_sets.push(c);
            }
        }
        let mut preempt = self.preempt.clone();
        preempt.dedup();
        Ok(ThreadsConfig {
            create: None,
            ctx: None,
            chat: None,
            libcs,
            cpu_sets,
            preempt,
            ms: self.ms.unwrap_or(default_ms),
            runner: self.repeat.options(default_reps),
            notes,
        })
    }
}

pub fn threads(cmd: ThreadsCommand) -> Result<ExitCode, CliError> {
    let (run, output) = threads_run(cmd)?;
    finish(run, &output)
}

/// Runs a `threads` command's study; the run is not yet stored or shown.
pub fn threads_run(cmd: ThreadsCommand) -> Result<(Run, OutputArgs), CliError> {
    let (cfg, common, what) = match &cmd {
        ThreadsCommand::Create(a) => {
            let mut cfg = a.common.config(5, 200)?;
            let touch_kib = match a.touch {
                Some(t) if t.is_multiple_of(1024) && t / 1024 <= 1 << 20 => (t / 1024) as u32,
                Some(_) => return Err(CliError::Other("--touch: give whole KiB up to 1GiB (e.g. 64KiB)".into())),
                None => 0,
            };
            let mut stacks = Vec::new();
            for &s in &a.stack {
                let k = kib(s, "--stack")?;
                // The workload keeps 64 KiB for the thread's own frames beside what it touches.
                if k < touch_kib + THREAD_FRAMES_KIB {
                    return Err(CliError::Other(format!(
                        "--stack {}KiB: a thread needs {THREAD_FRAMES_KIB} KiB of stack for its own frames besides \
                         --touch ({touch_kib} KiB): give at least {}KiB",
                        k,
                        touch_kib + THREAD_FRAMES_KIB
                    )));
                }
                stacks.push(k);
            }
            if stacks.is_empty() {
                stacks.push(0);
            }
            cfg.create = Some(CreateParams { waits: a.wait.clone(), stacks_kib: stacks, touch_kib });
            (cfg, &a.common, "threads create")
        }
        ThreadsCommand::Ctx(a) => {
            let mut cfg = a.common.config(5, 200)?;
            let places = placements(&a.place, &mut cfg.notes)?;
            cfg.ctx = Some(CtxParams {
                transports: a.transport.clone(),
                threads: a.threads.clone(),
                ws_kib: a.ws.clone(),
                places,
                perf: !a.no_perf,
            });
            (cfg, &a.common, "threads ctx")
        }
        ThreadsCommand::Chat(a) => {
            let mut cfg = a.common.config(5, 200)?;
            if (a.rooms as u64) * a.users.iter().copied().max().unwrap_or(1) as u64 > 200_000 {
                return Err(CliError::Other("--rooms × --users: at most 200000 connections".into()));
            }
            cfg.chat = Some(ChatParams {
                modes: a.mode.clone(),
                rooms: a.rooms,
                users: a.users.clone(),
                messages: a.messages,
                size: a.size,
                perf: !a.no_perf,
            });
            (cfg, &a.common, "threads chat")
        }
        ThreadsCommand::All(a) => {
            let mut cfg = a.common.config(3, 100)?;
            cfg.create = Some(CreateParams { waits: vec!["join".into()], stacks_kib: vec![0], touch_kib: 0 });
            cfg.ctx = Some(CtxParams {
                transports: vec!["pipe".into()],
                threads: vec![2, 8],
                ws_kib: vec![0, 64],
                places: Vec::new(),
                perf: true,
            });
            cfg.chat = Some(ChatParams {
                modes: vec!["threads".into(), "epoll".into()],
                rooms: 4,
                users: vec![5, 20],
                messages: 10,
                size: 100,
                perf: true,
            });
            (cfg, &a.common, "threads all")
        }
    };
    let progress = study_progress(what, common.output.quiet);
    let run = threads::run(&cfg, &progress)?;
    Ok((run, common.output.clone()))
}
