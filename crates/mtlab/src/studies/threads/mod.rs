//! `mtlab threads`: what thread creation, context switches and message
//! passing cost, by CPU set, placement, thread library and preemption model
//! (source 002: NPTL vs LinuxThreads with lmbench-derived workloads).
//!
//! Every (workload, libc, CPU set, parameters) cell is one configuration; all
//! run interleaved round by round. The workloads (native/threads/) print one
//! JSON line each; this module turns it into samples and checks that the
//! threads ran only where they were put (`sched_getcpu` in the workload).

pub mod libc;
pub mod preempt;
mod views;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

pub use libc::Libc;
pub use views::views;

use super::child::{self, measure};
use super::StudyError;
use crate::native::Part;
use crate::study::env::{allowed_cpus, cpu_list};
use crate::study::progress::Progress;
use crate::study::runner::{self, RunnerOptions, Sample};
use crate::study::{Configuration, Run};

pub const STUDY: &str = "threads";

/// Where a configuration's threads run.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuChoice {
    /// The process's CPU set.
    pub cpus: Vec<usize>,
    /// A placement class (`llc`): thread i of the ring runs on pin[i mod len].
    pub place: Option<(String, Vec<usize>)>,
}

impl CpuChoice {
    pub fn set(cpus: Vec<usize>) -> CpuChoice {
        CpuChoice { cpus, place: None }
    }

    /// The pair of CPUs a placement class names (`a == b` for `same`).
    pub fn placed(class: &str, a: usize, b: usize) -> CpuChoice {
        let mut cpus = vec![a, b];
        cpus.dedup();
        CpuChoice { cpus, place: Some((class.to_string(), vec![a, b])) }
    }

    /// How configuration names say where it ran: `cpus 0-1`, `place llc 0,1`.
    fn name_part(&self) -> String {
        match &self.place {
            Some((class, pin)) => format!("place {class} {}", cpu_list_ordered(pin)),
            None => format!("cpus {}", cpu_list(&self.cpus)),
        }
    }

    pub fn describe(&self) -> String {
        match &self.place {
            Some((class, pin)) => format!("--place {class} (CPUs {})", cpu_list_ordered(pin)),
            None => format!("--cpus {}", cpu_list(&self.cpus)),
        }
    }
}

#[derive(Debug, Clone)]
pub struct CreateParams {
    /// `join` and/or `barrier` (detached threads).
    pub waits: Vec<String>,
    /// Stack sizes in KiB; 0 is the libc's default.
    pub stacks_kib: Vec<u32>,
    pub touch_kib: u32,
}

#[derive(Debug, Clone)]
pub struct CtxParams {
    pub transports: Vec<String>,
    pub threads: Vec<u32>,
    pub ws_kib: Vec<u32>,
    /// Placement pairs to run besides the CPU sets (ring neighbours pinned).
    pub places: Vec<CpuChoice>,
    /// Run `perf bench sched pipe -T` beside the 2-thread pipe ring.
    pub perf: bool,
}

#[derive(Debug, Clone)]
pub struct ChatParams {
    /// `threads` (a thread per connection on each side) and/or `epoll` (one thread a side).
    pub modes: Vec<String>,
    pub rooms: u32,
    /// Users per room, swept.
    pub users: Vec<u32>,
    /// Messages each user sends at least; users keep sending until --ms has passed.
    pub messages: u32,
    pub size: u32,
    /// Run `perf bench sched messaging -t` (groups of 20 senders × 20 receivers) beside rooms of 20.
    pub perf: bool,
}

/// perf's messaging benchmark: each of 20 senders in a group writes every loop to each of 20 receivers.
const PERF_GROUP: u32 = 20;

#[derive(Debug, Clone)]
pub struct ThreadsConfig {
    pub create: Option<CreateParams>,
    pub ctx: Option<CtxParams>,
    pub chat: Option<ChatParams>,
    pub libcs: Vec<Libc>,
    pub cpu_sets: Vec<CpuChoice>,
    /// Preemption models to sweep (empty: the live one only).
    pub preempt: Vec<String>,
    /// Measured milliseconds per trial (after each workload's own warm-up).
    pub ms: u32,
    pub runner: RunnerOptions,
    /// Things the command line already decided to skip, said in the run.
    pub notes: Vec<String>,
}

/// Checks a CPU list against the CPUs this process may use.
pub fn check_cpus(cpus: &[usize], what: &str) -> Result<(), StudyError> {
    let allowed = allowed_cpus();
    if cpus.is_empty() {
        return Err(StudyError::Config(format!("{what}: the CPU set is empty")));
    }
    let outside: Vec<usize> = cpus.iter().copied().filter(|c| !allowed.contains(c)).collect();
    if !outside.is_empty() {
        return Err(StudyError::Config(format!(
            "{what}: CPU {} {} not one this process may use (allowed: {}; offline, or excluded by the affinity mask or cgroup cpuset)",
            cpu_list(&outside),
            if outside.len() == 1 { "is" } else { "are" },
            cpu_list(&allowed)
        )));
    }
    Ok(())
}

/// One planned cell.
#[derive(Debug, Clone)]
enum Cell {
    Create { libc: usize, cpus: CpuChoice, wait: String, stack_kib: u32 },
    Ctx { libc: usize, cpus: CpuChoice, transport: String, threads: u32, ws_kib: u32 },
    /// `perf bench sched pipe -T`: the reference for the 2-thread pipe ring.
    Perf { cpus: CpuChoice },
    Chat { libc: usize, cpus: CpuChoice, mode: String, rooms: u32, users: u32 },
    /// `perf bench sched messaging -t`: groups shaped like rooms of 20.
    PerfMessaging { cpus: CpuChoice, groups: u32 },
}

#[derive(Debug, Clone)]
struct Planned {
    cell: Cell,
    preempt: Option<String>,
}

impl Planned {
    fn name(&self, libcs: &[Libc]) -> String {
        let base = match &self.cell {
            Cell::Create { libc, cpus, wait, stack_kib } => {
                let stack = if *stack_kib == 0 { String::new() } else { format!(" stack {stack_kib}KiB") };
                format!("create {} {} {wait}{stack}", libcs[*libc].name(), cpus.name_part())
            }
            Cell::Ctx { libc, cpus, transport, threads, ws_kib } => {
                format!("ctx {} {} {transport} {threads}T {ws_kib}KiB", libcs[*libc].name(), cpus.name_part())
            }
            Cell::Perf { cpus } => format!("perf sched pipe {}", cpus.name_part()),
            Cell::Chat { libc, cpus, mode, rooms, users } => {
                format!("chat {} {} {mode} {rooms}x{users}", libcs[*libc].name(), cpus.name_part())
            }
            Cell::PerfMessaging { cpus, groups } => format!("perf sched messaging {} {groups}x{PERF_GROUP}", cpus.name_part()),
        };
        match &self.preempt {
            Some(p) => format!("{base} preempt {p}"),
            None => base,
        }
    }

    fn configuration(&self, libcs: &[Libc]) -> Configuration {
        let mut c = Configuration::new(self.name(libcs));
        let (workload, libc, cpus) = match &self.cell {
            Cell::Create { libc, cpus, wait, stack_kib } => {
                c = c.param("wait", wait).param("stack_kib", stack_kib);
                ("create", Some(*libc), cpus)
            }
            Cell::Ctx { libc, cpus, transport, threads, ws_kib } => {
                c = c.param("transport", transport).param("threads", threads).param("ws_kib", ws_kib);
                ("ctx", Some(*libc), cpus)
            }
            Cell::Perf { cpus } => {
                c = c.param("transport", "pipe").param("threads", 2).param("ws_kib", 0);
                ("perf", None, cpus)
            }
            Cell::Chat { libc, cpus, mode, rooms, users } => {
                c = c.param("mode", mode).param("rooms", rooms).param("users", users);
                ("chat", Some(*libc), cpus)
            }
            Cell::PerfMessaging { cpus, groups } => {
                c = c.param("rooms", groups).param("users", PERF_GROUP);
                ("perf-messaging", None, cpus)
            }
        };
        c = c.param("workload", workload).param("cpus", cpu_list(&cpus.cpus)).param("cpu_count", cpus.cpus.len());
        if let Some((class, pin)) = &cpus.place {
            c = c.param("place", class).param("pin", cpu_list_ordered(pin));
        }
        if let Some(l) = libc {
            c = c.param("libc", libcs[l].name());
            // Another libc is compared with glibc in the same cell.
            if l != 0 && libcs[0] == Libc::Glibc {
                let mut base = self.clone();
                match &mut base.cell {
                    Cell::Create { libc, .. } | Cell::Ctx { libc, .. } | Cell::Chat { libc, .. } => *libc = 0,
                    Cell::Perf { .. } | Cell::PerfMessaging { .. } => {}
                }
                c = c.baseline(base.name(libcs));
            }
        }
        if let Some(p) = &self.preempt {
            c = c.param("preempt", p);
        }
        c
    }
}

/// `a,b` in the given order (a ring's pins are ordered, so not compacted).
fn cpu_list_ordered(cpus: &[usize]) -> String {
    cpus.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",")
}

fn plan(cfg: &ThreadsConfig, preempts: &[Option<String>]) -> Vec<Planned> {
    let mut cells = Vec::new();
    if let Some(p) = &cfg.create {
        for libc in 0..cfg.libcs.len() {
            for cpus in &cfg.cpu_sets {
                for wait in &p.waits {
                    for &stack_kib in &p.stacks_kib {
                        cells.push(Cell::Create { libc, cpus: cpus.clone(), wait: wait.clone(), stack_kib });
                    }
                }
            }
        }
    }
    if let Some(p) = &cfg.ctx {
        let places = cfg.cpu_sets.iter().chain(&p.places);
        for cpus in places {
            if p.perf && p.threads.contains(&2) && p.transports.iter().any(|t| t == "pipe") && p.ws_kib.contains(&0) {
                cells.push(Cell::Perf { cpus: cpus.clone() });
            }
            for libc in 0..cfg.libcs.len() {
                for transport in &p.transports {
                    for &ws_kib in &p.ws_kib {
                        for &threads in &p.threads {
                            cells.push(Cell::Ctx { libc, cpus: cpus.clone(), transport: transport.clone(), threads, ws_kib });
                        }
                    }
                }
            }
        }
    }
    if let Some(p) = &cfg.chat {
        for cpus in &cfg.cpu_sets {
            if p.perf && p.users.contains(&PERF_GROUP) {
                cells.push(Cell::PerfMessaging { cpus: cpus.clone(), groups: p.rooms });
            }
            for libc in 0..cfg.libcs.len() {
                for mode in &p.modes {
                    for &users in &p.users {
                        cells.push(Cell::Chat { libc, cpus: cpus.clone(), mode: mode.clone(), rooms: p.rooms, users });
                    }
                }
            }
        }
    }
    let mut out = Vec::new();
    for preempt in preempts {
        out.extend(cells.iter().map(|c| Planned { cell: c.clone(), preempt: preempt.clone() }));
    }
    out
}

/// What a trial needs besides its cell.
struct Lab {
    exes: BTreeMap<(usize, &'static str), PathBuf>,
    perf: Option<PathBuf>,
    ticks_per_ns: f64,
    ms: u32,
    touch_kib: u32,
    chat: Option<ChatParams>,
}

impl Lab {
    fn trial(&self, p: &Planned, name: &str) -> Result<Vec<Sample>, StudyError> {
        match &p.cell {
            Cell::Create { libc, cpus, wait, stack_kib } => {
                let mut c = self.workload(*libc, "create", cpus);
                c.args(["--wait", wait]);
                if *stack_kib > 0 {
                    c.arg("--stack").arg(stack_kib.to_string());
                }
                if self.touch_kib > 0 {
                    c.arg("--touch").arg(self.touch_kib.to_string());
                }
                let v = self.result(c, "create", name, cpus)?;
                let f = |k: &str| child::field(&v, &[k], name);
                let mut s = vec![
                    Sample::cost("create_join_us", "µs", f("p50_us")?),
                    Sample::cost("create_join_p99_us", "µs", f("p99_us")?),
                    Sample::cost("create_join_mean_us", "µs", f("mean_us")?),
                    Sample::cost("create_only_us", "µs", f("create_p50_us")?),
                    Sample::cost("timer_ticks", "ticks", f("timer_ticks")?),
                ];
                if self.touch_kib > 0 {
                    s.push(Sample::cost("first_touch_us", "µs", f("touch_p50_us")?));
                }
                Ok(s)
            }
            Cell::Ctx { libc, cpus, transport, threads, ws_kib } => {
                let mut c = self.workload(*libc, "ctx", cpus);
                c.args(["--transport", transport]).arg("--threads").arg(threads.to_string()).arg("--ws").arg(ws_kib.to_string());
                if let Some((_, pin)) = &cpus.place {
                    c.arg("--pin").arg(cpu_list_ordered(pin));
                }
                let v = self.result(c, "ctx", name, cpus)?;
                let f = |k: &str| child::field(&v, &[k], name);
                Ok(vec![
                    Sample::cost("switch_ns", "ns", f("switch_ns")?),
                    Sample::cost("loop_ns", "ns", f("loop_ns")?),
                    Sample::cost("overhead_ns", "ns", f("overhead_ns")?),
                    Sample::cost("handoff_p50_ns", "ns", f("handoff_p50_ns")?),
                    Sample::cost("handoff_p99_ns", "ns", f("handoff_p99_ns")?),
                    // Counted by the receivers, not derived from the lap count:
                    // equals the ring size when the token really visits every thread.
                    Sample::gain("handoffs_per_lap", "hand-offs", f("handoffs")? / f("laps")?),
                    Sample::cost("timer_ticks", "ticks", f("timer_ticks")?),
                ])
            }
            Cell::Perf { cpus } => {
                let perf = self.perf.as_ref().expect("perf cells are planned only when perf runs");
                // About as many hand-offs as the ring makes in --ms on one CPU (~3 µs each).
                let loops = (self.ms as u64 * 150).max(2000);
                let mut c = Command::new(perf);
                c.args(["bench", "sched", "pipe", "-T", "-l"]).arg(loops.to_string());
                child::pin_command(&mut c, &cpus.cpus);
                let m = measure(c, name)?;
                let us = perf_usecs_per_op(&m.stdout)
                    .ok_or_else(|| StudyError::Output(format!("{name}: no `usecs/op` line in perf's output:\n{}", m.stdout)))?;
                // perf's op is a round trip: two hand-offs.
                Ok(vec![Sample::cost("loop_ns", "ns", us * 1000.0 / 2.0)])
            }
            Cell::Chat { libc, cpus, mode, rooms, users } => {
                let chat = self.chat.as_ref().expect("chat cells only with chat parameters");
                let mut c = Command::new(&self.exes[&(*libc, "chat")]);
                c.arg("--cpus").arg(cpu_list(&cpus.cpus)).arg("--ticks-per-ns").arg(format!("{:.6}", self.ticks_per_ns));
                c.args(["--mode", mode]).arg("--rooms").arg(rooms.to_string()).arg("--users").arg(users.to_string());
                c.arg("--messages").arg(chat.messages.to_string()).arg("--size").arg(chat.size.to_string());
                c.arg("--ms").arg(self.ms.to_string());
                let v = self.result(c, "chat", name, cpus)?;
                let f = |k: &str| child::field(&v, &[k], name);
                Ok(vec![
                    Sample::gain("msgs_per_s", "messages/s", f("msgs_per_s")?),
                    Sample::cost("latency_p50_us", "µs", f("latency_p50_us")?),
                    Sample::cost("latency_p99_us", "µs", f("latency_p99_us")?),
                    Sample::cost("latency_mean_us", "µs", f("latency_mean_us")?),
                    Sample::cost("threads_created", "threads", f("threads")?),
                    Sample::cost("timer_ticks", "ticks", f("timer_ticks")?),
                ])
            }
            Cell::PerfMessaging { cpus, groups } => {
                let perf = self.perf.as_ref().expect("perf cells are planned only when perf runs");
                // About --ms of work at perf's usual 400 000 messages/s.
                let loops = (self.ms / groups).max(10);
                let mut c = Command::new(perf);
                c.args(["bench", "sched", "messaging", "-t", "-g"]).arg(groups.to_string()).arg("-l").arg(loops.to_string());
                child::pin_command(&mut c, &cpus.cpus);
                let m = measure(c, name)?;
                let secs = perf_total_seconds(&m.stdout)
                    .ok_or_else(|| StudyError::Output(format!("{name}: no `Total time` line in perf's output:\n{}", m.stdout)))?;
                let messages = *groups as f64 * (PERF_GROUP * PERF_GROUP) as f64 * loops as f64;
                Ok(vec![Sample::gain("msgs_per_s", "messages/s", messages / secs)])
            }
        }
    }

    fn workload(&self, libc: usize, which: &'static str, cpus: &CpuChoice) -> Command {
        let mut c = Command::new(&self.exes[&(libc, which)]);
        c.arg("--cpus").arg(cpu_list(&cpus.cpus));
        c.arg("--ms").arg(self.ms.to_string());
        c.arg("--ticks-per-ns").arg(format!("{:.6}", self.ticks_per_ns));
        c
    }

    /// The workload's result line, after checking it ran only on its CPUs.
    fn result(&self, c: Command, workload: &str, name: &str, cpus: &CpuChoice) -> Result<serde_json::Value, StudyError> {
        let m = measure(c, name)?;
        let v = child::json_line(&m.stdout, workload)
            .ok_or_else(|| StudyError::Output(format!("{name}: no result line in the workload's output")))?;
        let seen = v["cpus_seen"].as_str().unwrap_or("");
        let seen_cpus = crate::study::env::parse_cpu_list(seen)
            .map_err(|e| StudyError::Output(format!("{name}: the workload's cpus_seen `{seen}`: {e}")))?;
        if let Some(c) = seen_cpus.iter().find(|c| !cpus.cpus.contains(c)) {
            return Err(StudyError::Output(format!(
                "{name}: a thread ran on CPU {c}, outside its set {} (sched_getcpu saw {seen})",
                cpu_list(&cpus.cpus)
            )));
        }
        Ok(v)
    }
}

/// `      6.287152 usecs/op` from `perf bench sched pipe`.
fn perf_usecs_per_op(out: &str) -> Option<f64> {
    out.lines().find(|l| l.contains("usecs/op")).and_then(|l| l.split_whitespace().next()).and_then(|v| v.parse().ok())
}

/// `     Total time: 0.125 [sec]` from `perf bench sched messaging`.
fn perf_total_seconds(out: &str) -> Option<f64> {
    let l = out.lines().find(|l| l.contains("Total time:"))?;
    l.split_whitespace().nth(2)?.parse().ok().filter(|s: &f64| *s > 0.0)
}

/// perf, if `perf bench sched pipe` runs here (Debian's perf is a wrapper
/// that fails when no perf matches the running kernel).
fn find_perf() -> Result<PathBuf, String> {
    let perf = crate::platform::process::find_in_path("perf").ok_or("perf is not installed (Debian: apt-get install linux-perf)")?;
    let out = Command::new(&perf).args(["bench", "sched", "pipe", "-T", "-l", "10"]).output().map_err(|e| format!("cannot run perf: {e}"))?;
    if out.status.success() && perf_usecs_per_op(&String::from_utf8_lossy(&out.stdout)).is_some() {
        Ok(perf)
    } else {
        Err(format!("`perf bench sched pipe` does not run here: {}", String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Time-stamp counter ticks per nanosecond, measured once for every trial.
fn ticks_per_ns() -> f64 {
    let (t0, i0) = (crate::platform::tsc::now(), std::time::Instant::now());
    std::thread::sleep(std::time::Duration::from_millis(50));
    let (t1, i1) = (crate::platform::tsc::now(), std::time::Instant::now());
    (t1 - t0) as f64 / (i1 - i0).as_nanos() as f64
}

pub fn run(cfg: &ThreadsConfig, progress: &Progress) -> Result<Run, StudyError> {
    let started = std::time::Instant::now();
    let mut run = Run::new(STUDY, "thread creation, context switches and message passing");
    run.notes.extend(cfg.notes.iter().cloned());
    for c in cfg.cpu_sets.iter().chain(cfg.ctx.iter().flat_map(|p| &p.places)) {
        check_cpus(&c.cpus, &c.describe())?;
    }
    let mut exes = BTreeMap::new();
    for (i, libc) in cfg.libcs.iter().enumerate() {
        progress.set_message(format!("preparing the {} workloads", libc.name()));
        if cfg.create.is_some() {
            exes.insert((i, "create"), libc.workload(Part::ThreadsCreate)?);
        }
        if cfg.ctx.is_some() {
            exes.insert((i, "ctx"), libc.workload(Part::ThreadsCtx)?);
        }
        if cfg.chat.is_some() {
            exes.insert((i, "chat"), libc.workload(Part::ThreadsChat)?);
        }
        if let Some(v) = libc.version() {
            run.environment.software.insert(libc.name().to_string(), v);
        }
    }
    let wants_perf = cfg.ctx.as_ref().is_some_and(|p| p.perf) || cfg.chat.as_ref().is_some_and(|p| p.perf);
    let perf = match wants_perf {
        true => match find_perf() {
            Ok(perf) => {
                if let Some(v) = crate::study::env::package_version("linux-perf") {
                    run.environment.software.insert("perf".into(), v);
                }
                Some(perf)
            }
            Err(why) => {
                run.notes.push(format!("{why}: the comparison with perf bench is skipped"));
                None
            }
        },
        false => None,
    };
    let mut switch = None;
    let preempts: Vec<Option<String>> = if cfg.preempt.is_empty() {
        vec![None]
    } else {
        match preempt::Switch::open() {
            Ok(s) => {
                let v = cfg.preempt.iter().map(|p| Some(p.clone())).collect();
                switch = Some(s);
                v
            }
            Err(why) => {
                run.notes.push(format!(
                    "--preempt {}: this kernel does not let the preemption model be switched at run time ({why}); measured with the live model only ({})",
                    cfg.preempt.join(","),
                    run.environment.preemption.as_deref().unwrap_or("unknown")
                ));
                vec![None]
            }
        }
    };
    let mut planned = plan(cfg, &preempts);
    if perf.is_none() {
        planned.retain(|p| !matches!(p.cell, Cell::Perf { .. } | Cell::PerfMessaging { .. }));
    }
    let s = &mut run.settings;
    s.insert("measured ms per trial".into(), cfg.ms.to_string());
    s.insert("repetitions".into(), cfg.runner.reps.to_string());
    s.insert("warm-up".into(), cfg.runner.warmup.to_string());
    s.insert("libcs".into(), cfg.libcs.iter().map(Libc::name).collect::<Vec<_>>().join(","));
    if let Some(p) = &cfg.create {
        s.insert("create touch KiB".into(), p.touch_kib.to_string());
    }
    if let Some(p) = &cfg.chat {
        s.insert("chat messages per user".into(), p.messages.to_string());
        s.insert("chat message bytes".into(), p.size.to_string());
    }
    let lab = Lab {
        exes,
        perf,
        ticks_per_ns: ticks_per_ns(),
        ms: cfg.ms,
        touch_kib: cfg.create.as_ref().map_or(0, |p| p.touch_kib),
        chat: cfg.chat.clone(),
    };
    run.settings.insert("tsc ticks per ns".into(), format!("{:.4}", lab.ticks_per_ns));
    let configs: Vec<Configuration> = planned.iter().map(|p| p.configuration(&cfg.libcs)).collect();
    let by_name: BTreeMap<&str, &Planned> = configs.iter().map(|c| c.name.as_str()).zip(&planned).collect();
    progress.inc_length((cfg.runner.warmup + cfg.runner.reps) as u64 * configs.len() as u64);
    runner::run_all(&mut run, &configs, &cfg.runner, progress, |c, _| {
        let p = by_name[c.name.as_str()];
        if let (Some(sw), Some(model)) = (switch.as_mut(), &p.preempt) {
            sw.set(model)?;
        }
        lab.trial(p, &c.name)
    })?;
    drop(switch);
    run.duration_s = started.elapsed().as_secs_f64();
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> ThreadsConfig {
        ThreadsConfig {
            create: Some(CreateParams { waits: vec!["join".into()], stacks_kib: vec![0], touch_kib: 0 }),
            ctx: Some(CtxParams {
                transports: vec!["pipe".into()],
                threads: vec![2, 8],
                ws_kib: vec![0, 64],
                places: vec![],
                perf: true,
            }),
            chat: Some(ChatParams { modes: vec!["threads".into(), "epoll".into()], rooms: 2, users: vec![5, 20], messages: 10, size: 100, perf: true }),
            libcs: vec![Libc::Glibc, Libc::Wrapper { name: "musl".into(), compiler: "/usr/bin/musl-gcc".into() }],
            cpu_sets: vec![CpuChoice::set(vec![0]), CpuChoice::set(vec![0, 1])],
            preempt: vec![],
            ms: 10,
            runner: RunnerOptions::default(),
            notes: vec![],
        }
    }

    #[test]
    fn the_plan_crosses_every_parameter_and_names_are_unique() {
        let c = cfg();
        let p = plan(&c, &[None]);
        // create: 2 libcs × 2 sets; ctx: 2 sets × (1 perf + 2 libcs × 2 ws × 2 threads);
        // chat: 2 sets × (1 perf for rooms of 20 + 2 libcs × 2 modes × 2 user counts)
        assert_eq!(p.len(), 4 + 2 * (1 + 8) + 2 * (1 + 8));
        let names: std::collections::BTreeSet<String> = p.iter().map(|x| x.name(&c.libcs)).collect();
        assert_eq!(names.len(), p.len());
        assert!(names.contains("ctx musl cpus 0-1 pipe 8T 64KiB"));
        assert!(names.contains("perf sched pipe cpus 0"));
        assert!(names.contains("chat musl cpus 0-1 epoll 2x20"));
        assert!(names.contains("perf sched messaging cpus 0 2x20"));
        let musl = p.iter().map(|x| x.configuration(&c.libcs)).find(|c| c.name == "create musl cpus 0 join").unwrap();
        assert_eq!(musl.baseline.as_deref(), Some("create glibc cpus 0 join"));
        assert_eq!(musl.get("cpu_count"), Some("1"));
    }

    #[test]
    fn a_preemption_sweep_repeats_every_cell() {
        let c = cfg();
        let p = plan(&c, &[Some("none".into()), Some("full".into())]);
        assert_eq!(p.len(), 2 * 40);
        assert!(p.iter().any(|x| x.name(&c.libcs) == "create glibc cpus 0 join preempt none"));
    }

    #[test]
    fn perf_output_is_read() {
        let out = "# Running 'sched/pipe' benchmark:\n# Executed 20000 pipe operations between two threads\n\n     Total time: 0.125 [sec]\n\n       6.287152 usecs/op\n         159054 ops/sec\n";
        assert_eq!(perf_usecs_per_op(out), Some(6.287152));
        assert_eq!(perf_usecs_per_op("nothing"), None);
        let out = "# 20 sender and receiver threads per group\n# 2 groups == 80 threads run\n\n     Total time: 0.050 [sec]\n";
        assert_eq!(perf_total_seconds(out), Some(0.05));
        assert_eq!(perf_total_seconds("     Total time: 0.000 [sec]"), None);
    }

    #[test]
    fn cpus_outside_the_allowed_set_are_refused() {
        let e = check_cpus(&[100_000], "--cpus 100000").unwrap_err().to_string();
        assert!(e.contains("not one this process may use"), "{e}");
        assert!(check_cpus(&[], "--cpus ''").unwrap_err().to_string().contains("empty"));
        assert!(check_cpus(&allowed_cpus()[..1], "--cpus 0").is_ok());
    }
}
