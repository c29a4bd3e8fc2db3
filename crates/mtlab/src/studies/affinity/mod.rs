//! `mtlab affinity`: one high-throughput TCP flow for every (flow core, app
//! core) pair — the flow core does the receive protocol processing, the app
//! core runs the receiving application — with throughput and per-gigabyte
//! counters, grouped by placement class, and a recommended placement
//! (source 004: the 144-run matrix of a 40 Gb/s NIC).
//!
//! Where receive processing runs is steered (`Steer`): by the RPS mask of a
//! veth in the study's own network namespace, or, on loopback, by pinning the
//! sender (loopback processes packets where they are sent). Every change to
//! the system goes through `journal`, which restores it on every way out.

pub mod apply;
pub mod counters;
pub mod flow;
pub mod iperf;
pub mod irq;
pub mod journal;
pub mod net;
pub mod preflight;
mod views;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;

pub use views::{best_pair, views};

use super::StudyError;
use crate::study::env::cpu_list;
use crate::study::progress::Progress;
use crate::study::runner::{self, RunnerOptions, Sample};
use crate::study::{Configuration, Run};
use crate::topo::Topology;

pub const STUDY: &str = "affinity";

/// How the flow core is made to do the receive processing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Steer {
    /// The receiver in mtlab's namespace behind a veth whose RPS mask is the flow core (root).
    Rps,
    /// A real NIC (`dev`): its receive interrupts point at the flow core; the
    /// sender runs on another machine (`mtlab affinity --send-to`).
    Irq,
    /// Loopback: packets are processed where they are sent, so the sender runs on the flow core.
    None,
}

impl Steer {
    pub const NAMES: [&'static str; 3] = ["rps", "irq", "none"];

    pub fn name(self) -> &'static str {
        match self {
            Steer::Rps => "rps",
            Steer::Irq => "irq",
            Steer::None => "none",
        }
    }

    pub fn parse(s: &str) -> Option<Steer> {
        match s {
            "rps" => Some(Steer::Rps),
            "irq" => Some(Steer::Irq),
            "none" => Some(Steer::None),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generator {
    Builtin,
    Iperf3,
}

impl Generator {
    pub const NAMES: [&'static str; 2] = ["builtin", "iperf3"];

    pub fn name(self) -> &'static str {
        match self {
            Generator::Builtin => "builtin",
            Generator::Iperf3 => "iperf3",
        }
    }

    pub fn parse(s: &str) -> Option<Generator> {
        match s {
            "builtin" => Some(Generator::Builtin),
            "iperf3" => Some(Generator::Iperf3),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct AffinityConfig {
    pub flow_cpus: Vec<usize>,
    pub app_cpus: Vec<usize>,
    /// Where the sender runs under `rps` (under `none` it runs on the flow core).
    pub sender_cpu: usize,
    pub steer: Steer,
    /// The NIC of `--steer irq`.
    pub dev: Option<String>,
    /// Where the receiver listens for the remote sender under `--steer irq`.
    pub port: u16,
    pub generators: Vec<Generator>,
    /// Length of one flow.
    pub seconds: f64,
    /// Count events per CPU (off: throughput only).
    pub counters: bool,
    pub runner: RunnerOptions,
    pub topology: Topology,
    /// Where the journal of changed settings lives.
    pub journal_dir: PathBuf,
}

/// One planned cell of the matrix.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Cell {
    flow: usize,
    app: usize,
    generator: Generator,
}

impl Cell {
    fn name(&self) -> String {
        let base = format!("flow {} app {}", self.flow, self.app);
        match self.generator {
            Generator::Builtin => base,
            Generator::Iperf3 => format!("{base} iperf3"),
        }
    }
}

fn plan(cfg: &AffinityConfig) -> Vec<Cell> {
    let mut cells = Vec::new();
    for &generator in &cfg.generators {
        for &flow in &cfg.flow_cpus {
            for &app in &cfg.app_cpus {
                cells.push(Cell { flow, app, generator });
            }
        }
    }
    cells
}

/// Where the sender runs for a cell, as configurations record it.
fn sender_of(cfg: &AffinityConfig, c: &Cell) -> String {
    match cfg.steer {
        Steer::Rps => cfg.sender_cpu.to_string(),
        Steer::Irq => "remote".into(),
        Steer::None => c.flow.to_string(),
    }
}

fn configuration(cfg: &AffinityConfig, c: &Cell) -> Configuration {
    let sender = sender_of(cfg, c);
    let mut conf = Configuration::new(c.name())
        .param("flow_cpu", c.flow)
        .param("app_cpu", c.app)
        .param("sender_cpu", sender)
        .param("class", cfg.topology.class(c.flow, c.app).name())
        .param("generator", c.generator.name());
    // The built-in flow is judged against iperf3 at the same pinning.
    if c.generator == Generator::Builtin && cfg.generators.contains(&Generator::Iperf3) {
        conf = conf.baseline(Cell { generator: Generator::Iperf3, ..*c }.name());
    }
    conf
}

/// Per CPU of the matrix: its package and last-level cache, for the heat maps' boundaries.
fn groups(topo: &Topology, cpus: &[usize]) -> serde_json::Value {
    let llc = |cpu: usize| {
        topo.caches
            .iter()
            .filter(|c| c.kind != "Instruction" && c.shared_by.contains(&cpu))
            .max_by_key(|c| c.level)
            .map(|c| cpu_list(&c.shared_by))
    };
    let package = |cpu: usize| topo.cpus.iter().find(|c| c.id == cpu).map(|c| c.package);
    serde_json::Value::Array(cpus.iter().map(|&c| serde_json::json!({"cpu": c, "package": package(c), "llc": llc(c)})).collect())
}

/// Length of the unmeasured flow that starts every run.
const PRIMER_SECONDS: f64 = 0.5;

/// Gigabytes as the per-GB counters use them (10^9 bytes).
const GB: f64 = 1e9;

/// How long the host's own load is watched before each flow (with counters):
/// per-CPU counters count every process on the CPU, so busy time per GB is
/// only the flow's when the CPU is otherwise idle. /proc/stat counts in 10 ms
/// ticks: 200 ms tells load to 5 %.
const QUIET: std::time::Duration = std::time::Duration::from_millis(200);

/// How the flow reaches the receiver.
enum Wire {
    Loopback,
    /// The study's namespace and veth pair; the receiving veth's RPS mask is the flow core.
    Veth(net::Netns),
    /// A real NIC whose receive interrupts are pointed at the flow core; the sender is remote.
    Nic { irqs: Vec<irq::Irq>, inbound: flow::Inbound, local_sender: bool },
}

/// How long a cell waits for the remote sender to connect.
const REMOTE_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

struct Lab<'a> {
    cfg: &'a AffinityConfig,
    wire: Wire,
    journal: Option<&'a journal::Journal>,
    source: flow::Source,
    iperf3: Option<PathBuf>,
    counters: Option<counters::CpuCounters>,
    kinds: Vec<counters::Kind>,
}

impl Lab<'_> {
    fn route(&self) -> flow::Route<'_> {
        match &self.wire {
            Wire::Veth(ns) => flow::Route { listen: ns.ns_addr, connect: ns.ns_addr, netns: Some(ns) },
            _ => flow::Route { listen: Ipv4Addr::LOCALHOST, connect: Ipv4Addr::LOCALHOST, netns: None },
        }
    }

    fn sender_for(&self, c: &Cell) -> usize {
        match self.cfg.steer {
            Steer::Rps => self.cfg.sender_cpu,
            Steer::Irq | Steer::None => c.flow,
        }
    }

    /// Puts the flow's receive processing on `flow`.
    fn steer(&self, flow: usize) -> Result<(), StudyError> {
        match &self.wire {
            Wire::Loopback => Ok(()),
            Wire::Veth(ns) => ns.set_rps(flow),
            Wire::Nic { irqs, .. } => irq::steer(self.journal.expect("irq steering keeps a journal"), irqs, flow),
        }
    }

    fn flow(&mut self, c: &Cell) -> Result<flow::Delivered, StudyError> {
        if let Wire::Nic { inbound, local_sender, .. } = &mut self.wire {
            let (d, peer) = flow::receive_remote(inbound, c.app, self.cfg.seconds, REMOTE_WAIT)?;
            *local_sender |= peer.ip().is_loopback() || peer.ip() == inbound.addr.ip();
            return Ok(d);
        }
        let route = self.route();
        let sender = self.sender_for(c);
        match c.generator {
            Generator::Builtin => flow::run(&route, &self.source, c.app, sender, self.cfg.seconds),
            Generator::Iperf3 => iperf::run(self.iperf3.as_deref().expect("iperf3 cells only with iperf3"), &route, c.app, sender, self.cfg.seconds),
        }
    }

    fn trial(&mut self, c: &Cell) -> Result<Vec<Sample>, StudyError> {
        self.steer(c.flow)?;
        // Before (so between) flows: what else keeps these CPUs busy.
        let background = match self.counters {
            Some(_) => Some(counters::background_busy(&[c.flow, c.app], QUIET)?),
            None => None,
        };
        let before = match &mut self.counters {
            Some(k) => Some(k.snapshot()?),
            None => None,
        };
        let got = self.flow(c)?;
        let mut s = vec![Sample::gain("gbps", "Gb/s", got.gbps())];
        if let Some(bg) = &background {
            for (role, cpu) in [("flow", c.flow), ("app", c.app)] {
                s.push(Sample::cost(&format!("{role}_background_busy_pct"), "%", bg[&cpu] * 100.0));
            }
        }
        if let (Some(k), Some(before)) = (&mut self.counters, before) {
            let d = counters::delta(&before, &k.snapshot()?);
            let gb = (got.bytes as f64 / GB).max(f64::MIN_POSITIVE);
            for (role, cpu) in [("flow", c.flow), ("app", c.app)] {
                for kind in &self.kinds {
                    let v = d.get(&(cpu, kind.name)).copied().unwrap_or(0.0);
                    s.push(Sample::cost(&format!("{role}_{}_per_gb", kind.name), &format!("{}/GB", kind.unit), v / gb));
                }
            }
        }
        Ok(s)
    }
}

/// Refuses what cannot work before anything is changed.
fn check(cfg: &AffinityConfig) -> Result<(), StudyError> {
    for (cpus, what) in [(&cfg.flow_cpus, "--flow-cpus"), (&cfg.app_cpus, "--app-cpus")] {
        super::threads::check_cpus(cpus, what)?;
    }
    match cfg.steer {
        Steer::Rps => {
            super::threads::check_cpus(&[cfg.sender_cpu], "--sender-cpu")?;
            if !crate::platform::process::is_root() {
                return Err(StudyError::Config(
                    "--steer rps makes a network namespace, a veth pair and RPS masks: run as root (sudo), or use --steer none (loopback, no privileges)"
                        .into(),
                ));
            }
        }
        Steer::Irq => {
            if cfg.dev.is_none() {
                return Err(StudyError::Config("--steer irq needs the receiving NIC: --dev DEV (see `ip link`)".into()));
            }
            if cfg.generators != [Generator::Builtin] {
                return Err(StudyError::Config(
                    "--steer irq takes the built-in generator only: its sender runs on another machine (`mtlab affinity --send-to ADDR:PORT`)".into(),
                ));
            }
            if !crate::platform::process::is_root() {
                return Err(StudyError::Config("--steer irq sets interrupt affinities in /proc/irq: run as root (sudo)".into()));
            }
        }
        Steer::None => {}
    }
    if cfg.seconds < 0.1 {
        return Err(StudyError::Config("--seconds: a flow needs at least 0.1 s".into()));
    }
    if cfg.generators.contains(&Generator::Iperf3) && (cfg.seconds.fract() != 0.0 || cfg.seconds < 1.0) {
        return Err(StudyError::Config(format!(
            "--seconds {}: iperf3 takes whole seconds (its -t reads an integer, and 0 means forever); give 1, 2, …",
            cfg.seconds
        )));
    }
    Ok(())
}

fn ethtool_k(dev: &str) -> Option<String> {
    std::process::Command::new("ethtool").args(["-k", dev]).output().ok().filter(|o| o.status.success()).map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
}

/// The journal (for the steerings that change settings), with notes on what the sweep of killed runs did.
fn begin_journal(cfg: &AffinityConfig, run: &mut Run) -> Result<Option<journal::Journal>, StudyError> {
    if cfg.steer == Steer::None {
        // Loopback changes nothing, so it needs no journal (nor root to keep one).
        return Ok(None);
    }
    let (journal, swept) = journal::Journal::begin(&cfg.journal_dir)?;
    if !swept.restored.is_empty() {
        run.notes.push(format!("removed leftovers of an earlier run that was killed: {}", swept.restored.join("; ")));
    }
    for f in &swept.failed {
        run.notes.push(format!("could not remove a leftover of an earlier run: {f}"));
    }
    Ok(Some(journal))
}

pub fn run(cfg: &AffinityConfig, progress: &Progress) -> Result<Run, StudyError> {
    let started = std::time::Instant::now();
    check(cfg)?;
    let iperf3 = match cfg.generators.contains(&Generator::Iperf3) {
        true => Some(iperf::find()?),
        false => None,
    };
    let mut run = Run::new(STUDY, "throughput of one TCP flow by flow core and application core");
    if let Some((_, v)) = &iperf3 {
        run.environment.software.insert("iperf3".into(), v.clone());
    }
    let mut all_cpus: Vec<usize> = cfg.flow_cpus.iter().chain(&cfg.app_cpus).copied().collect();
    all_cpus.sort_unstable();
    all_cpus.dedup();
    progress.set_message("opening counters");
    let counters = match cfg.counters {
        true => Some(counters::CpuCounters::open(&all_cpus)?),
        false => None,
    };
    let kinds = counters.as_ref().map(|c| c.kinds()).unwrap_or_default();
    if let Some(c) = &counters {
        run.notes.extend(c.notes.iter().cloned());
    }
    progress.set_message("setting up the network");
    let journal = begin_journal(cfg, &mut run)?;
    let (wire, features) = match cfg.steer {
        Steer::Rps => {
            let ns = net::Netns::create(journal.as_ref().expect("rps keeps a journal"))?;
            let f = ns.features();
            (Wire::Veth(ns), f)
        }
        Steer::Irq => {
            let dev = cfg.dev.as_deref().expect("checked");
            let interrupts = std::fs::read_to_string("/proc/interrupts").map_err(|source| StudyError::Io { path: "/proc/interrupts".into(), source })?;
            let irqs = irq::receive_irqs(std::path::Path::new("/sys/class/net"), &interrupts, dev)?;
            let inbound = flow::Inbound::bind(irq::address(dev)?, cfg.port)?;
            run.settings.insert("device".into(), dev.into());
            run.settings.insert("irqs".into(), irqs.iter().map(|i| format!("{} ({})", i.number, i.name)).collect::<Vec<_>>().join(", "));
            progress.println(format!(
                "mtlab: waiting for the sender: run `mtlab affinity --send-to {}` on the sending machine (each cell waits up to {} s)",
                inbound.addr,
                REMOTE_WAIT.as_secs()
            ));
            (Wire::Nic { irqs, inbound, local_sender: false }, ethtool_k(dev))
        }
        Steer::None => (Wire::Loopback, ethtool_k("lo")),
    };
    run.notes.extend(preflight::check(&run.environment, cfg.steer == Steer::Irq, features.as_deref(), std::path::Path::new("/")));
    if let Some(dev) = cfg.dev.as_deref() {
        run.notes.extend(preflight::rps_on_device(std::path::Path::new("/sys/class/net"), dev));
    }
    let s = &mut run.settings;
    s.insert("steer".into(), cfg.steer.name().into());
    s.insert("seconds per flow".into(), cfg.seconds.to_string());
    s.insert("repetitions".into(), cfg.runner.reps.to_string());
    s.insert("warm-up".into(), cfg.runner.warmup.to_string());
    s.insert("flow cpus".into(), cpu_list(&cfg.flow_cpus));
    s.insert("app cpus".into(), cpu_list(&cfg.app_cpus));
    s.insert("generators".into(), cfg.generators.iter().map(|g| g.name()).collect::<Vec<_>>().join(","));
    s.insert("counters".into(), if cfg.counters { "on" } else { "off" }.into());
    match cfg.steer {
        Steer::Rps => {
            s.insert("sender cpu".into(), cfg.sender_cpu.to_string());
            if all_cpus.contains(&cfg.sender_cpu) {
                run.notes.push(format!(
                    "the sender runs on CPU {}, which is also a flow or app core of the matrix: cells using it share it with the sender \
                     (on a larger machine give --sender-cpu outside the matrix)",
                    cfg.sender_cpu
                ));
            }
        }
        Steer::Irq => {}
        Steer::None => {
            run.notes.push("steer none (loopback): receive processing runs where the packets are sent, so the sender runs on the flow core".into());
        }
    }
    run.details = serde_json::json!({ "cpus": groups(&cfg.topology, &all_cpus) });
    let mut lab = Lab { cfg, wire, journal: journal.as_ref(), source: flow::Source::new()?, iperf3: iperf3.map(|(p, _)| p), counters, kinds };
    let cells = plan(cfg);
    let configs: Vec<Configuration> = cells.iter().map(|c| configuration(cfg, c)).collect();
    let by_name: BTreeMap<&str, Cell> = configs.iter().map(|c| c.name.as_str()).zip(cells.iter().copied()).collect();
    // One short unmeasured flow first: the first flow on a new veth and
    // socket path runs well below the rest (seen at half speed here).
    if let Some(first) = cells.first().filter(|_| !matches!(lab.wire, Wire::Nic { .. })) {
        progress.set_message("priming the flow");
        lab.steer(first.flow)?;
        flow::run(&lab.route(), &lab.source, first.app, lab.sender_for(first), PRIMER_SECONDS)?;
    }
    progress.inc_length((cfg.runner.warmup + cfg.runner.reps) as u64 * configs.len() as u64);
    runner::run_all(&mut run, &configs, &cfg.runner, progress, |c, _| lab.trial(&by_name[c.name.as_str()]))?;
    if let Wire::Nic { local_sender: true, .. } = lab.wire {
        run.notes.push(format!(
            "the sender ran on this host: its flow went over loopback, not through {}, so the interrupt steering had no packets to steer; run the sender on another machine",
            cfg.dev.as_deref().unwrap_or("the device")
        ));
    }
    drop(lab);
    drop(journal);
    run.duration_s = started.elapsed().as_secs_f64();
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn fixture(name: &str) -> Topology {
        Topology::from_root(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs").join(name), None).unwrap()
    }

    fn cfg(topology: Topology) -> AffinityConfig {
        let cpus = topology.cpus();
        AffinityConfig {
            flow_cpus: cpus.clone(),
            app_cpus: cpus,
            sender_cpu: 0,
            steer: Steer::Rps,
            dev: None,
            port: 5201,
            generators: vec![Generator::Builtin],
            seconds: 2.0,
            counters: true,
            runner: RunnerOptions::default(),
            topology,
            journal_dir: PathBuf::from(journal::DIR),
        }
    }

    #[test]
    fn the_two_socket_matrix_has_the_sources_144_cells_in_three_classes() {
        let c = cfg(fixture("2s-6c"));
        let cells = plan(&c);
        assert_eq!(cells.len(), 144);
        let mut by_class: BTreeMap<String, usize> = BTreeMap::new();
        for cell in &cells {
            *by_class.entry(configuration(&c, cell).get("class").unwrap().to_string()).or_default() += 1;
        }
        // Same core: the diagonal; same socket: 2 × 6 × 5; different sockets: 2 × 6 × 6.
        assert_eq!(by_class, BTreeMap::from([("same".into(), 12), ("llc".into(), 60), ("remote".into(), 72)]));
        let g = groups(&c.topology, &c.topology.cpus());
        assert_eq!(g[0]["package"], 0);
        assert_eq!(g[6]["package"], 1);
        assert_eq!(g[0]["llc"], "0-5");
        assert_eq!(g[11]["llc"], "6-11");
    }

    /// The source's figure: 144 cells on 2 sockets × 6 cores, same core ≈ 20 Gb/s,
    /// different sockets ≈ 28, same socket ≈ 39.
    #[test]
    fn the_two_socket_heat_map_is_laid_out_like_the_sources_figure() {
        use crate::export::{Boundary, PlotKind, View};
        let c = cfg(fixture("2s-6c"));
        let mut run = Run::new(STUDY, "simulated");
        run.environment = Default::default();
        run.details = serde_json::json!({ "cpus": groups(&c.topology, &c.topology.cpus()) });
        for cell in plan(&c) {
            let conf = configuration(&c, &cell);
            let gbps = match conf.get("class") {
                Some("same") => 20.0,
                Some("remote") => 28.0,
                _ => 39.0,
            };
            run.measurements.push(crate::study::Measurement {
                configuration: conf.name.clone(),
                metric: "gbps".into(),
                unit: "Gb/s".into(),
                lower_is_better: false,
                values: vec![gbps - 0.5, gbps, gbps + 0.5],
            });
            run.configurations.push(conf);
        }
        let v = views(&run);
        let heat = v
            .iter()
            .find_map(|x| match x {
                View::Plot(p) if p.name == "affinity-gbps" => Some(p),
                _ => None,
            })
            .unwrap();
        let PlotKind::Heatmap { rows, columns, values, row_boundaries, column_boundaries, .. } = &heat.kind else { panic!() };
        assert_eq!(rows.len(), 12);
        assert_eq!(columns.len(), 12);
        // One strong line between the sockets, on both axes; no cache line inside a socket.
        assert_eq!(row_boundaries, &vec![Boundary { after: 5, strong: true }]);
        assert_eq!(column_boundaries, &vec![Boundary { after: 5, strong: true }]);
        // The diagonal is the slowest, the off-socket quadrants in between.
        assert_eq!(values[3][3], Some(20.0));
        assert_eq!(values[0][11], Some(28.0));
        assert_eq!(values[7][9], Some(39.0));
        let notes: Vec<&String> = v.iter().filter_map(|x| if let View::Note(n) = x { Some(n) } else { None }).collect();
        assert!(notes[0].starts_with("recommended placement: llc"), "{notes:?}");
        assert!(notes[1].contains("same (20.0 Gb/s)") && notes[1].contains("remote (28.0 Gb/s)"), "{notes:?}");
    }

    #[test]
    fn both_generators_pair_each_builtin_cell_with_iperf3() {
        let mut c = cfg(fixture("1cpu"));
        c.generators = vec![Generator::Builtin, Generator::Iperf3];
        let confs: Vec<Configuration> = plan(&c).iter().map(|x| configuration(&c, x)).collect();
        let names: Vec<&str> = confs.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(names, ["flow 0 app 0", "flow 0 app 0 iperf3"]);
        assert_eq!(confs[0].baseline.as_deref(), Some("flow 0 app 0 iperf3"));
        assert_eq!(confs[1].baseline, None);
        assert_eq!(confs[0].get("class"), Some("same"));
    }

    #[test]
    fn the_sender_follows_the_flow_core_on_loopback() {
        let mut c = cfg(fixture("2s-6c"));
        c.steer = Steer::None;
        c.sender_cpu = 11;
        let conf = configuration(&c, &Cell { flow: 3, app: 4, generator: Generator::Builtin });
        assert_eq!(conf.get("sender_cpu"), Some("3"));
    }
}
