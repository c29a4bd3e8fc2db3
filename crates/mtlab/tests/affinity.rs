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
    assert_eq!(o.status.code(), Some(128 + libc::SIGTERM), "{}", stderr(&o));
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
    refused(lab.command(MTLAB).args(["affinity", "--steer", "irq"]), "invalid value 'irq'");
    refused(lab.command(MTLAB).args(["affinity", "--steer", "none", "--generator", "iperf3", "--seconds", "0.5"]), "iperf3 takes whole seconds");
    let mut no_iperf = lab.command(MTLAB);
    no_iperf.args(["affinity", "--steer", "none", "--generator", "iperf3", "--no-store"]).env("PATH", "/nonexistent");
    refused(&mut no_iperf, "iperf3 is not installed (Debian: apt-get install iperf3)");
    refused(&mut as_nobody(&lab, &["affinity", "--no-store"]), "run as root (sudo), or use --steer none");
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
