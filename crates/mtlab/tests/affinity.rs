//! End-to-end tests of `mtlab affinity` through the real binary, as root (as
//! CI runs): the matrix is complete and really steered, nothing the study
//! changed outlives it — not even when it is killed — and bad input is
//! refused with a clear message.

mod util;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;
use util::*;

/// Runs that make namespaces go one at a time: a run sweeps the leftovers of
/// dead runs, which would race with the test that kills one on purpose.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

fn allowed() -> Vec<usize> {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let list = s.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap().trim().to_string();
    let mut v = Vec::new();
    for part in list.split(',') {
        match part.split_once('-') {
            Some((a, b)) => v.extend(a.parse::<usize>().unwrap()..=b.parse().unwrap()),
            None => v.push(part.parse().unwrap()),
        }
    }
    v
}

fn netns_of(pid: u32) -> std::path::PathBuf {
    Path::new("/run/netns").join(format!("mtlab-aff-{pid}"))
}

fn journal_of(pid: u32) -> std::path::PathBuf {
    Path::new("/run/mtlab/affinity").join(format!("{pid}.json"))
}

fn median_of(run: &Value, config: &str, metric: &str) -> f64 {
    let m = run["measurements"].as_array().unwrap().iter().find(|m| m["configuration"] == config && m["metric"] == metric);
    let mut v: Vec<f64> = m.unwrap_or_else(|| panic!("no {metric} for {config}"))["values"].as_array().unwrap().iter().map(f).collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Starts a long run and waits until its namespace exists.
fn start_long_run(lab: &Lab) -> Child {
    let mut child = lab
        .command(MTLAB)
        .args(["affinity", "--reps", "3", "--seconds", "5", "--no-store", "-q"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !netns_of(child.id()).exists() {
        assert!(child.try_wait().unwrap().is_none(), "the run ended before making its namespace");
        assert!(start.elapsed() < Duration::from_secs(20), "no namespace after 20 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Into the flows, with an RPS mask set.
    std::thread::sleep(Duration::from_millis(1500));
    child
}

#[test]
fn an_rps_matrix_measures_every_pair_steers_it_and_leaves_nothing_behind() {
    let _one = serial();
    let lab = Lab::new();
    let o = lab.command(MTLAB).args(["affinity", "--reps", "2", "--seconds", "0.4", "--json", "-q"]).output().unwrap();
    assert_success(&o, "mtlab affinity");
    let run: Value = serde_json::from_slice(&o.stdout).unwrap();
    let cpus = allowed();
    let configs = run["configurations"].as_array().unwrap();
    assert_eq!(configs.len(), cpus.len() * cpus.len());
    let sender: usize = run["settings"]["sender cpu"].as_str().unwrap().parse().unwrap();
    assert_eq!(sender, *cpus.last().unwrap());
    for c in configs {
        let name = c["name"].as_str().unwrap();
        let (flow, app): (usize, usize) = (c["params"]["flow_cpu"].as_str().unwrap().parse().unwrap(), c["params"]["app_cpu"].as_str().unwrap().parse().unwrap());
        assert_eq!(name, format!("flow {flow} app {app}"));
        assert_eq!(c["params"]["class"] == "same", flow == app, "{name}");
        let gbps = median_of(&run, name, "gbps");
        assert!(gbps > 0.1 && gbps < 1000.0, "{name}: {gbps} Gb/s");
        for m in ["flow_busy_ms_per_gb", "app_busy_ms_per_gb", "flow_net_rx_per_gb", "app_context_switches_per_gb"] {
            let v = median_of(&run, name, m);
            assert!(v.is_finite() && v >= 0.0, "{name} {m} = {v}");
        }
        // A flow core that neither sends nor receives sees NET_RX softirqs only
        // because the RPS mask sent it the packets: ~one per 64 KiB packet.
        if flow != app && flow != sender {
            let rx = median_of(&run, name, "flow_net_rx_per_gb");
            assert!(rx > 1000.0, "{name}: {rx} NET_RX softirqs per GB on the flow core: packets were not steered to it");
        }
    }
    let notes: Vec<&str> = run["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    assert!(notes.iter().any(|n| n.contains("hardware counter") || n.contains("GRO")), "{notes:?}");
    // Its pid is gone, so are its namespace and journal (no leftover of any run).
    let leftovers: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.starts_with("mtlab-aff-")).collect())
        .unwrap_or_default();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let journals = std::fs::read_dir("/run/mtlab/affinity").map(|rd| rd.count()).unwrap_or(0);
    assert_eq!(journals, 0);
}

#[test]
fn sigterm_midway_restores_everything_and_exits_as_the_signal() {
    let _one = serial();
    let lab = Lab::new();
    let child = start_long_run(&lab);
    let pid = child.id();
    assert!(journal_of(pid).exists());
    // SAFETY: kill on our own child.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let o = child.wait_with_output().unwrap();
    // It dies of the signal (after putting everything back), as a shell expects.
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(o.status.signal(), Some(libc::SIGTERM), "{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    assert!(stderr(&o).contains("interrupted; restored"), "{}", stderr(&o));
    assert!(!netns_of(pid).exists());
    assert!(!journal_of(pid).exists());
}

#[test]
fn a_run_killed_with_sigkill_is_cleaned_up_by_the_next() {
    let _one = serial();
    let lab = Lab::new();
    let mut child = start_long_run(&lab);
    let pid = child.id();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(netns_of(pid).exists(), "SIGKILL leaves the namespace until the next run");
    let cpu = allowed()[0].to_string();
    let run = lab.mtlab_json(&["affinity", "--flow-cpus", &cpu, "--app-cpus", &cpu, "--reps", "1", "--seconds", "0.2", "--no-counters", "-q"]);
    assert!(!netns_of(pid).exists());
    assert!(!journal_of(pid).exists());
    let notes = run["notes"].to_string();
    assert!(notes.contains(&format!("ip netns delete mtlab-aff-{pid}")), "{notes}");
}

#[test]
fn the_builtin_flow_is_paired_with_iperf3() {
    let lab = Lab::new();
    let cpu = allowed()[0].to_string();
    let run = lab.mtlab_json(&[
        "affinity", "--steer", "none", "--flow-cpus", &cpu, "--app-cpus", &cpu, "--generator", "builtin,iperf3", "--reps", "2", "--seconds", "1",
        "--no-counters", "-q",
    ]);
    let name = format!("flow {cpu} app {cpu}");
    let c = run["configurations"].as_array().unwrap().iter().find(|c| c["name"] == name.as_str()).unwrap();
    assert_eq!(c["baseline"], format!("{name} iperf3"));
    for n in [name.clone(), format!("{name} iperf3")] {
        let g = median_of(&run, &n, "gbps");
        assert!(g > 0.1, "{n}: {g} Gb/s");
    }
    assert!(run["environment"]["software"]["iperf3"].is_string());
}

fn refused(cmd: &mut Command, want: &str) {
    let o = cmd.output().unwrap();
    assert!(!o.status.success(), "succeeded: {cmd:?}");
    let e = stderr(&o);
    assert!(e.contains(want), "want `{want}` in:\n{e}");
}

/// `mtlab ARGS` as the unprivileged user nobody.
fn as_nobody(lab: &Lab, args: &[&str]) -> Command {
    let mut c = lab.command("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", MTLAB]).args(args).current_dir("/");
    c
}

#[test]
fn bad_input_is_refused_with_what_to_do() {
    let lab = Lab::new();
    refused(lab.command(MTLAB).args(["affinity", "--flow-cpus", "4096", "--steer", "none"]), "not one this process may use");
    refused(lab.command(MTLAB).args(["affinity", "--steer", "none", "--sender-cpu", "0"]), "no meaning with --steer none");
    refused(lab.command(MTLAB).args(["affinity", "--seconds", "0"]), "give seconds from 0.1");
    refused(lab.command(MTLAB).args(["affinity", "--steer", "irq"]), "--steer irq needs the receiving NIC: --dev DEV");
    refused(lab.command(MTLAB).args(["affinity", "--steer", "ring"]), "invalid value 'ring'");
    refused(lab.command(MTLAB).args(["affinity", "--steer", "irq", "--dev", "lo", "--sender-cpu", "0"]), "the sender runs on another machine");
    refused(lab.command(MTLAB).args(["affinity", "--steer", "none", "--generator", "iperf3", "--seconds", "0.5"]), "iperf3 takes whole seconds");
    let mut no_iperf = lab.command(MTLAB);
    no_iperf.args(["affinity", "--steer", "none", "--generator", "iperf3", "--no-store"]).env("PATH", "/nonexistent");
    refused(&mut no_iperf, "iperf3 is not installed (Debian: apt-get install iperf3)");
    refused(&mut as_nobody(&lab, &["affinity", "--no-store"]), "run as root (sudo), or use --steer none");
    refused(&mut as_nobody(&lab, &["affinity", "--steer", "irq", "--dev", "lo", "--no-store"]), "/proc/irq: run as root");
    let paranoid: i32 = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").unwrap().trim().parse().unwrap();
    let mut counted = as_nobody(&lab, &["affinity", "--steer", "none", "--reps", "1", "--seconds", "0.2", "--no-store", "-q"]);
    if paranoid > 0 {
        refused(&mut counted, "kernel.perf_event_paranoid is");
    } else {
        assert_success(&counted.output().unwrap(), "counters as nobody with perf_event_paranoid <= 0");
    }
    // Without counters an unprivileged user runs the loopback matrix.
    let cpu = allowed()[0].to_string();
    let o = as_nobody(&lab, &["affinity", "--steer", "none", "--flow-cpus", &cpu, "--app-cpus", &cpu, "--reps", "1", "--seconds", "0.2", "--no-counters", "--no-store", "-q"])
        .output()
        .unwrap();
    assert_success(&o, "loopback matrix as nobody");
    assert!(String::from_utf8_lossy(&o.stdout).contains("Throughput, Gb/s"));
}

/// A veth pair of this test's own, removed when dropped.
struct Veth(String);

impl Veth {
    fn new(tag: &str) -> Veth {
        let name = format!("mtt{tag}{}", std::process::id() % 100_000);
        let o = Command::new("ip").args(["link", "add", &name, "type", "veth", "peer", "name", &format!("{name}p")]).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        Veth(name)
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.0]).output();
    }
}

#[test]
fn apply_sets_the_devices_mask_and_says_how_to_undo_it() {
    let lab = Lab::new();
    let veth = Veth::new("a");
    let cpus = allowed();
    let (flow, app) = (*cpus.last().unwrap(), cpus[0]);
    let mask_file = format!("/sys/class/net/{}/queues/rx-0/rps_cpus", veth.0);
    let before = std::fs::read_to_string(&mask_file).unwrap();
    let o = lab.command(MTLAB).args(["affinity", "--apply", &format!("{flow},{app}"), "--dev", &veth.0]).output().unwrap();
    assert_success(&o, "mtlab affinity --apply");
    let mask = u64::from_str_radix(std::fs::read_to_string(&mask_file).unwrap().trim().replace(',', "").as_str(), 16).unwrap();
    assert_eq!(mask, 1 << flow);
    let e = stderr(&o);
    assert!(e.contains(&format!("taskset -c {app}")), "{e}");
    let undo = e.lines().find_map(|l| l.trim().strip_prefix("to undo: ")).unwrap_or_else(|| panic!("no undo line in:\n{e}"));
    assert!(Command::new("sh").args(["-c", undo]).status().unwrap().success());
    assert_eq!(std::fs::read_to_string(&mask_file).unwrap(), before);
    // A virtual device has no interrupts to steer; an unknown one is named.
    refused(lab.command(MTLAB).args(["affinity", "--steer", "irq", "--dev", &veth.0, "--apply", "0,0"]), "virtual device with no interrupts");
    refused(lab.command(MTLAB).args(["affinity", "--apply", "0,0", "--dev", "nosuchdev0"]), "--dev nosuchdev0: no such network device");
    refused(lab.command(MTLAB).args(["affinity", "--apply", "best"]), "--apply needs the device");
}

/// A NIC with interrupts of its own and an IPv4 address, if this machine has one.
fn real_nic() -> Option<(String, String)> {
    let rd = std::fs::read_dir("/sys/class/net").ok()?;
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !e.path().join("device").exists() {
            continue;
        }
        let o = Command::new("ip").args(["-4", "-o", "addr", "show", "dev", &name]).output().ok()?;
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        if let Some(addr) = text.split_whitespace().skip_while(|w| *w != "inet").nth(1) {
            return Some((name, addr.split('/').next()?.to_string()));
        }
    }
    None
}

#[test]
fn irq_steering_takes_a_remote_sender_and_puts_the_interrupts_back() {
    let _one = serial();
    let lab = Lab::new();
    let Some((dev, addr)) = real_nic() else {
        // No NIC here: the study must say so, not pretend.
        refused(lab.command(MTLAB).args(["affinity", "--steer", "irq", "--dev", "lo"]), "virtual device");
        return;
    };
    let affinities = || -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir("/proc/irq")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path().join("smp_affinity_list")).ok().map(|a| format!("{:?} {a}", e.file_name())))
            .collect();
        v.sort();
        v
    };
    let before = affinities();
    let cpu = allowed()[0].to_string();
    let port = (20_000 + std::process::id() % 20_000).to_string();
    let receiver = lab
        .command(MTLAB)
        .args(["affinity", "--steer", "irq", "--dev", &dev, "--port", &port, "--flow-cpus", &cpu, "--app-cpus", &cpu, "--reps", "2", "--seconds", "0.3", "--json", "-q"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let sender = lab.command(MTLAB).args(["affinity", "--send-to", &format!("{addr}:{port}")]).stderr(Stdio::piped()).spawn().unwrap();
    let o = receiver.wait_with_output().unwrap();
    // SAFETY: kill on our own child.
    unsafe { libc::kill(sender.id() as i32, libc::SIGINT) };
    let sent = sender.wait_with_output().unwrap();
    assert!(sent.status.success(), "{}", stderr(&sent));
    // Flows are counted one by one (at least the two cells, maybe one cut short at the end).
    assert!(stderr(&sent).contains("flow 1:") && stderr(&sent).contains("flow 2:"), "{}", stderr(&sent));
    assert_success(&o, "mtlab affinity --steer irq");
    let run: Value = serde_json::from_slice(&o.stdout).unwrap();
    let name = format!("flow {cpu} app {cpu}");
    assert!(median_of(&run, &name, "gbps") > 0.1);
    assert!(run["notes"].to_string().contains("the sender ran on this host"), "{}", run["notes"]);
    assert!(stderr(&o).contains(&format!("--send-to {addr}:{port}")), "{}", stderr(&o));
    assert_eq!(affinities(), before, "interrupt affinities were not put back");
}

/// Per-CPU counters count every process on the CPU: with another process
/// spinning on the flow and application core, busy ms per GB would be its
/// work. The study measures that load before each flow and refuses the
/// counter view rather than show it as the flow's cost.
#[test]
fn counters_per_gb_are_refused_when_other_work_keeps_the_cpu_busy() {
    let lab = Lab::new();
    let cpu = allowed()[0].to_string();
    let mut spinner = Command::new("taskset").args(["-c", &cpu, "sh", "-c", "while :; do :; done"]).spawn().unwrap();
    let o = lab
        .command(MTLAB)
        .args(["affinity", "--steer", "none", "--flow-cpus", &cpu, "--app-cpus", &cpu, "--reps", "2", "--seconds", "0.5", "--no-store"])
        .output()
        .unwrap();
    spinner.kill().unwrap();
    spinner.wait().unwrap();
    assert_success(&o, "mtlab affinity");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("counters per GB are not shown"), "{text}");
    assert!(text.contains("busy while no flow ran"), "{text}");
    assert!(!text.contains("CPU time per GB"), "{text}");
}
