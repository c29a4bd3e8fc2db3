//! `mtlab affinity`: flags turned into a validated `AffinityConfig`, then one
//! call to the study.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::builder::PossibleValuesParser;
use clap::Args;

use super::study::{finish, study_progress, OutputArgs, RepeatArgs};
use super::CliError;
use crate::study::model::Run;
use crate::studies::affinity::{self, flow, journal, AffinityConfig, Generator, Steer};
use crate::study::env::allowed_cpus;
use crate::topo::Topology;

pub const LONG_ABOUT: &str = "\
Run one TCP flow for every (flow core, application core) pair and measure the throughput the receiver gets, \
with counters per gigabyte on both cores; group the cells by placement class (see `mtlab topo`) and recommend \
a placement.

The flow core does the receive protocol processing (softirq); the application core runs the receiving \
program. With --steer rps (as root) mtlab puts the receiver in a network namespace of its own behind a veth \
pair, addressed from 198.18.0.0/15, and sets the receiving veth's RPS mask to the flow core; the sender runs on \
--sender-cpu. With --steer none the flow uses loopback, where packets are processed by the CPU that sends them, \
so the sender runs on the flow core. With --steer irq --dev DEV (as root) every receive interrupt of a real NIC \
is pointed at the flow core, the receiver listens on DEV's address, and the sender runs on another machine: \
`mtlab affinity --send-to ADDR:PORT` there. Every setting mtlab changes is put back when the run ends, fails or \
is interrupted; leftovers of a killed run are removed by the next one. With rps and none no traffic leaves the \
machine.

--apply FLOW,APP|best --dev DEV makes a placement stay (RPS masks, or interrupt affinity with --steer irq) and \
prints the commands that undo it.

Counters: busy and softirq time and NET_RX softirqs per CPU (from /proc), context switches and migrations \
(perf software events), and instructions, cycles, LLC references and misses (and L2 ones where the PMU names them) where the CPU offers hardware \
counters (not in most virtual machines: the run says so). All include kernel time.";

#[derive(Args, Debug)]
pub struct AffinityArgs {
    /// CPUs that do the receive processing (the matrix's rows): a list such as 0-3,6, one or all (default: all this process may use).
    #[arg(long, value_name = "LIST")]
    flow_cpus: Option<String>,
    /// CPUs the receiving application runs on (the matrix's columns): a list, one or all (default: all).
    #[arg(long, value_name = "LIST")]
    app_cpus: Option<String>,
    /// How the flow core is made to do the receive processing: rps (root; an RPS mask on mtlab's own veth),
    /// irq (root; a real NIC's receive interrupts, --dev, with the sender on another machine) or none (loopback).
    #[arg(long, default_value = "rps", value_parser = PossibleValuesParser::new(Steer::NAMES))]
    steer: String,
    /// The receiving NIC for --steer irq; the receiver listens on its first IPv4 address.
    #[arg(long, value_name = "DEV")]
    dev: Option<String>,
    /// The port the receiver listens on for the remote sender (--steer irq).
    #[arg(long, default_value_t = 5201)]
    port: u16,
    /// Be the sender of a --steer irq run on another machine: send to ADDR:PORT (the address it prints), flow after flow, until Ctrl-C.
    #[arg(long, value_name = "ADDR:PORT", conflicts_with_all = ["flow_cpus", "app_cpus", "steer", "dev", "generator", "no_counters"])]
    send_to: Option<std::net::SocketAddr>,
    /// The CPU the sender runs on with --steer rps or --send-to (default for rps: the last CPU this process may use).
    #[arg(long, value_name = "CPU")]
    sender_cpu: Option<usize>,
    /// builtin (sendfile sender, 128 KiB reads), iperf3 (its zero-copy client), or both: builtin,iperf3 compares them cell by cell.
    #[arg(long, value_delimiter = ',', default_value = "builtin", value_name = "GENERATOR,...", value_parser = PossibleValuesParser::new(Generator::NAMES))]
    generator: Vec<String>,
    /// Seconds each flow runs.
    #[arg(long, default_value_t = 2.0, value_parser = parse_seconds)]
    seconds: f64,
    /// Make a placement stay on --dev: FLOW,APP (at once, no matrix) or best (after the matrix). Sets the RPS mask of the
    /// device's receive queues (or, with --steer irq, its receive interrupts' affinity) to the flow core; prints how to undo it.
    #[arg(long, value_name = "FLOW,APP|best", value_parser = parse_apply)]
    apply: Option<Apply>,
    /// Throughput only: no per-CPU counters (they need root or kernel.perf_event_paranoid <= 0).
    #[arg(long)]
    no_counters: bool,
    #[command(flatten)]
    repeat: RepeatArgs,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Debug, Clone, Copy)]
enum Apply {
    Best,
    Pair(usize, usize),
}

fn parse_apply(s: &str) -> Result<Apply, String> {
    if s == "best" {
        return Ok(Apply::Best);
    }
    let pair = s.split_once(',').and_then(|(f, a)| Some((f.trim().parse().ok()?, a.trim().parse().ok()?)));
    pair.map(|(f, a)| Apply::Pair(f, a)).ok_or_else(|| format!("`{s}`: give FLOW,APP (two CPU numbers, e.g. 2,3) or best"))
}

/// Applies (flow, app) to `dev` and says what changed and how to undo it.
fn apply_pair(steer: Steer, dev: &str, flow: usize, app: usize) -> Result<(), CliError> {
    crate::studies::threads::check_cpus(&[flow, app], "--apply")?;
    let a = affinity::apply::apply(steer, std::path::Path::new("/sys/class/net"), dev, flow, app)?;
    let (what, n) = (if steer == Steer::Irq { "affinity of receive interrupt" } else { "RPS mask of receive queue" }, a.undo.len());
    say!("mtlab: applied to {dev}: the {what}{} ({n}) set to CPU {flow}, the flow core", if n == 1 { "" } else { "s" });
    say!("  run the application on CPU {}: taskset -c {} PROGRAM (or sched_setaffinity in the program)", a.app_cpu, a.app_cpu);
    say!("  to undo: {}", a.undo.iter().map(|u| u.command()).collect::<Vec<_>>().join("; "));
    Ok(())
}

fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.trim_end_matches('s').parse::<f64>() {
        Ok(v) if (0.1..=3600.0).contains(&v) => Ok(v),
        _ => Err(format!("`{s}`: give seconds from 0.1 to 3600 (e.g. 2)")),
    }
}

fn cpus(spec: Option<&str>, flag: &str) -> Result<Vec<usize>, CliError> {
    super::cpu_set_arg(spec.unwrap_or("all"), flag)
}

/// `--send-to`: the remote sender of a `--steer irq` run.
fn send_to(to: std::net::SocketAddr, cpu: Option<usize>) -> Result<ExitCode, CliError> {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    if let Some(c) = cpu {
        crate::studies::threads::check_cpus(&[c], "--sender-cpu")?;
        flow::pin_thread(c).map_err(|e| CliError::Other(format!("--sender-cpu {c}: {e}")))?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).map_err(|e| CliError::Other(format!("cannot catch signals: {e}")))?;
    }
    say!("mtlab: sending to {to}, flow after flow, until Ctrl-C");
    let source = flow::Source::new()?;
    let mut n = 0;
    flow::send_forever(&source, to, &stop, |bytes| {
        // A connection the receiver dropped unread (its run had ended) is no flow.
        if bytes == 0 {
            return;
        }
        n += 1;
        say!("mtlab: flow {n}: {:.2} GB sent", bytes as f64 / 1e9);
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Runs the matrix of `cfg`; the run is not yet stored or shown.
fn matrix(a: &AffinityArgs, cfg: AffinityConfig) -> Result<Run, CliError> {
    let progress = study_progress("affinity", a.output.quiet);
    Ok(affinity::run(&cfg, &progress)?)
}

/// `mtlab affinity`'s matrix as `mtlab demo` runs it: (run, output flags).
pub fn matrix_run(a: AffinityArgs) -> Result<(Run, OutputArgs), CliError> {
    let steer = Steer::parse(&a.steer).expect("clap checked --steer");
    let cfg = config(&a, steer)?;
    let run = matrix(&a, cfg)?;
    Ok((run, a.output))
}

/// The study's configuration from the flags.
fn config(a: &AffinityArgs, steer: Steer) -> Result<AffinityConfig, CliError> {
    let mut generators: Vec<Generator> = Vec::new();
    for g in &a.generator {
        let g = Generator::parse(g).expect("clap checked --generator");
        if !generators.contains(&g) {
            generators.push(g);
        }
    }
    let allowed = allowed_cpus();
    Ok(AffinityConfig {
        flow_cpus: cpus(a.flow_cpus.as_deref(), "--flow-cpus")?,
        app_cpus: cpus(a.app_cpus.as_deref(), "--app-cpus")?,
        sender_cpu: a.sender_cpu.or(allowed.last().copied()).unwrap_or(0),
        steer,
        dev: if steer == Steer::Irq { a.dev.clone() } else { None },
        port: a.port,
        generators,
        seconds: a.seconds,
        counters: !a.no_counters,
        runner: a.repeat.options(3),
        topology: Topology::read()?,
        journal_dir: PathBuf::from(journal::DIR),
    })
}

pub fn affinity(a: AffinityArgs) -> Result<ExitCode, CliError> {
    if let Some(to) = a.send_to {
        return send_to(to, a.sender_cpu);
    }
    let steer = Steer::parse(&a.steer).expect("clap checked --steer");
    if steer == Steer::None && a.sender_cpu.is_some() {
        return Err(CliError::Other("--sender-cpu has no meaning with --steer none: on loopback the sender runs on the flow core".into()));
    }
    if steer == Steer::Irq && a.sender_cpu.is_some() {
        return Err(CliError::Other("--sender-cpu has no meaning with --steer irq: the sender runs on another machine (give it to `mtlab affinity --send-to` there)".into()));
    }
    if steer != Steer::Irq && a.dev.is_some() && a.apply.is_none() {
        return Err(CliError::Other("--dev is for --steer irq or --apply (rps measures on mtlab's own veth, none on loopback)".into()));
    }
    if a.apply.is_some() && a.dev.is_none() {
        return Err(CliError::Other("--apply needs the device to steer: --dev DEV (see `ip link`)".into()));
    }
    if let (Some(Apply::Pair(flow, app)), Some(dev)) = (a.apply, &a.dev) {
        apply_pair(steer, dev, flow, app)?;
        return Ok(ExitCode::SUCCESS);
    }
    let cfg = config(&a, steer)?;
    let run = matrix(&a, cfg)?;
    let best = affinity::best_pair(&run);
    let code = finish(run, &a.output)?;
    if let (Some(Apply::Best), Some(dev)) = (a.apply, &a.dev) {
        let b = best.ok_or_else(|| CliError::Other("--apply best: the matrix has no measured cell to apply".into()))?;
        if !b.clear {
            say!("mtlab: note: the best pair's class is not faster beyond the spread than every other class (see above); applied anyway");
        }
        apply_pair(steer, dev, b.flow, b.app)?;
    }
    Ok(code)
}
