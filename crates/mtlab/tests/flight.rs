//! The flight recorder (`record --keep-last`), end to end: each trigger
//! writes a readable trace holding the last DURATION. flight_phases.c runs
//! phase A (NA mallocs of 1000 bytes from phase_a), sleeps GAP, then phase B
//! (frees A's blocks, NB mallocs of 3000 bytes from phase_b): a window of
//! 2 s written just after B holds B and nothing of A, and counts A's frees
//! as frees of blocks allocated before the window.

mod util;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use util::*;

const NA: u64 = 20_000;
const NB: u64 = 5_000;
const GAP_MS: &str = "3000";

fn phases_args<'a>(mode: &'a str, big_mb: &'a str) -> Vec<&'a str> {
    vec!["20000", "5000", GAP_MS, big_mb, mode, "ready", "stop"]
}

fn wait_for(path: &Path, limit: Duration) -> bool {
    let t = Instant::now();
    while t.elapsed() < limit {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// The pid of the program `mtlab record` (`rec`) runs.
fn program_pid(rec: &Child) -> u32 {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        let kids: Vec<u32> = std::fs::read_dir(format!("/proc/{}/task", rec.id()))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
            .flat_map(|c| c.split_whitespace().filter_map(|p| p.parse().ok()).collect::<Vec<u32>>())
            .collect();
        if let [one] = kids[..] {
            return one;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("mtlab record started no program");
}

/// The windows `record` wrote beside `trace`, in order.
fn windows(lab: &Lab, trace: &str) -> Vec<PathBuf> {
    lab.files_with_prefix(&format!("{trace}.flight-")).into_iter().map(|n| lab.path(&n)).collect()
}

/// A window that holds phase B and nothing of phase A.
fn assert_b_only(p: &Value, trigger: &str) {
    let w = &p["flight"];
    assert!(w["trigger"].as_str().unwrap().contains(trigger), "trigger {} is not {trigger}", w["trigger"]);
    assert_eq!(u(&w["keep_last_ns"]), 2_000_000_000);
    assert!(u(&w["end_ns"]) - u(&w["start_ns"]) <= 2_000_000_000 + 500_000_000, "{w}");
    assert!(u(&w["events_before"]) >= NA, "phase A's events are before the window: {w}");
    assert_eq!(site(p, "phase_a"), site_of(0, 0, 0, 0), "nothing of phase A is in the window");
    assert_eq!(site(p, "phase_b"), site_of(NB, NB * 3000, NB, NB * 3000));
    assert_eq!(u(&w["frees_before"]), NA, "phase B freed every block of phase A: {w}");
    assert_eq!(u(&p["unknown_frees"]), NA);
}

#[test]
fn ctl_dump_writes_the_last_duration() {
    let lab = Lab::new();
    let prog = lab.compile("flight_phases");
    let mut rec = lab.record_cmd("t.mtl", &["--keep-last", "2s"], &prog, &phases_args("wait", "0")).stderr(Stdio::piped()).spawn().unwrap();
    assert!(wait_for(&lab.path("ready"), Duration::from_secs(30)), "phase B did not end");
    // `$!` of the record works as the program's pid.
    let o = lab.command(MTLAB).args(["ctl", &rec.id().to_string(), "dump"]).output().unwrap();
    assert_success(&o, "mtlab ctl dump");
    let written = PathBuf::from(String::from_utf8(o.stdout).unwrap().trim());
    std::fs::write(lab.path("stop"), "").unwrap();
    let out = wait_within(&mut rec, Duration::from_secs(30)).expect("record ends");
    assert!(out.success());
    assert_eq!(windows(&lab, "t.mtl"), vec![written.clone()]);
    assert_b_only(&lab.report_path(&written), "mtlab ctl dump");
    // The text report says what the window is.
    let o = lab.command(MTLAB).arg("report").arg(&written).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("FLIGHT-RECORDER WINDOW: the last 2.000 s of the run, written on mtlab ctl dump"), "{text}");
    assert!(!text.contains("not allocated while traced"), "{text}");
    // The full trace of the same run holds both phases.
    let full = lab.report("t.mtl");
    assert_eq!(site(&full, "phase_a").calls, NA);
    assert_eq!(site(&full, "phase_b").calls, NB);
    assert!(full["flight"].is_null());
}

/// `ctl status` and the sampler's commands on a flight recorder without
/// --sample: they used to wait 3 s for a sampler page that never comes and
/// then say the process was not recorded at all.
#[test]
fn ctl_status_and_start_on_a_flight_recorder_say_what_it_is() {
    let lab = Lab::new();
    let prog = lab.compile("flight_phases");
    let mut rec = lab.record_cmd("t.mtl", &["--keep-last", "2s"], &prog, &phases_args("wait", "0")).stderr(Stdio::piped()).spawn().unwrap();
    assert!(wait_for(&lab.path("ready"), Duration::from_secs(30)), "phase B did not end");
    let pid = program_pid(&rec);
    // The program waits for `stop`: written whatever the checks find, so that a failure leaves nothing running.
    let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| for target in [rec.id(), pid] {
        let o = lab.command(MTLAB).args(["ctl", &target.to_string(), "status"]).output().unwrap();
        assert_success(&o, "mtlab ctl status");
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains(&format!("process {pid}: flight recorder")) && out.contains("keeps the last 2.000 s"), "{out}");
        assert!(!stderr(&o).contains("waited"), "{}", stderr(&o));
        for cmd in [&["start"][..], &["interval", "1MiB"][..]] {
            let o = lab.command(MTLAB).args(["ctl", &target.to_string()]).args(cmd).output().unwrap();
            assert!(!o.status.success(), "ctl {cmd:?} on a flight recorder is refused");
            let err = stderr(&o);
            assert!(err.contains("--keep-last` without --sample") && err.contains("dump"), "{err}");
        }
    }));
    std::fs::write(lab.path("stop"), "").unwrap();
    let ended = wait_within(&mut rec, Duration::from_secs(30));
    if let Err(e) = checked {
        std::panic::resume_unwind(e);
    }
    assert!(ended.expect("record ends").success());
    assert!(windows(&lab, "t.mtl").is_empty(), "status wrote no window");
}

fn death(mode: &str, sig: i32, name: &str) {
    let lab = Lab::new();
    let prog = lab.compile("flight_phases");
    let o = lab.record_cmd("t.mtl", &["--keep-last", "2s"], &prog, &phases_args(mode, "0")).output().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(o.status.signal(), Some(sig), "record ends as the program did: {}", stderr(&o));
    let w = windows(&lab, "t.mtl");
    assert_eq!(w.len(), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("flight recorder wrote"), "{}", stderr(&o));
    assert_b_only(&lab.report_path(&w[0]), &format!("signal {sig} ({name})"));
}

/// A root process that execs (a wrapper script's `exec PROGRAM`): the ring
/// holds the first program's events only, and the window and `record` say
/// so, naming the later program's trace. Before, the window of `sh -c 'exec
/// PROG'` held sh's few calls as "the last 2 s of the run" and said nothing.
#[test]
fn a_window_of_a_process_that_execd_says_whose_events_it_lacks() {
    let lab = Lab::new();
    let prog = lab.compile("flight_phases");
    for live in [false, true] {
        let trace = if live { "t.live" } else { "t.mtl" };
        let script = format!("exec {} {}", prog.display(), phases_args("segv", "0").join(" "));
        // 10 s: bash's calls, seconds before the death, stay in the window.
        let extra: &[&str] = if live { &["--live", "--keep-last", "10s"] } else { &["--keep-last", "10s"] };
        // bash allocates before it execs (dash may not: then no window, and
        // a warning that says why).
        let o = lab.record_cmd(trace, extra, "bash", &["-c", &script]).output().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(o.status.signal(), Some(libc::SIGSEGV), "{}", stderr(&o));
        let w = windows(&lab, trace);
        assert_eq!(w.len(), 1, "{}", stderr(&o));
        let p = lab.report_path(&w[0]);
        let execd = p["flight"]["execd"].as_str().unwrap_or_else(|| panic!("live {live}: {}", p["flight"]));
        assert!(execd.contains(&format!("{trace}{}.d/", if live { ".raw" } else { "" })), "{execd}");
        assert_eq!(site(&p, "phase_b").calls, 0, "the exec'd program's events are not in the window");
        assert!(stderr(&o).contains("flight recorder: the program exec'd another"), "{}", stderr(&o));
        let text = lab.command(MTLAB).arg("report").arg(&w[0]).output().unwrap();
        assert!(String::from_utf8_lossy(&text.stdout).contains("the process had exec'd another program by then"));
    }
}

#[test]
fn death_by_sigsegv_writes_the_window() {
    death("segv", libc::SIGSEGV, "SIGSEGV");
}

#[test]
fn death_by_sigabrt_writes_the_window() {
    death("abort", libc::SIGABRT, "SIGABRT");
}

#[test]
fn a_clean_exit_writes_no_window() {
    let lab = Lab::new();
    let prog = lab.compile("flight_phases");
    let o = lab.record_cmd("t.mtl", &["--keep-last", "2s"], &prog, &["100", "100", "0", "0", "exit", "ready", "stop"]).output().unwrap();
    assert_success(&o, "record --keep-last");
    assert!(windows(&lab, "t.mtl").is_empty());
}

#[test]
fn bad_durations_and_thresholds_are_refused() {
    let lab = Lab::new();
    for (args, says) in [
        (vec!["--keep-last", "0s"], "must be positive"),
        (vec!["--keep-last=-3s"], "keep-last"),
        (vec!["--keep-last", "10 parsecs"], "unknown unit"),
        (vec!["--keep-last", "1s", "--pressure", "most avg10>2"], "some|full"),
        (vec!["--pressure", "some avg10>2"], "--keep-last"),
    ] {
        let o = lab.record_cmd("t.mtl", &args, "true", &[]).output().unwrap();
        assert!(!o.status.success(), "{args:?}");
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
        assert!(!lab.path("t.mtl").exists(), "{args:?}: nothing run");
    }
}

#[test]
fn memory_pressure_writes_a_window() {
    // PSI here is rarely above a real threshold on demand: `>=0` holds from
    // the first poll, so the window is written as soon as there is an event
    // (the edge logic is tested on the real file's format in the unit tests).
    let lab = Lab::new();
    if std::fs::read_to_string("/proc/pressure/memory").is_err() {
        return skip("no /proc/pressure/memory in this kernel");
    }
    let prog = lab.compile("flight_phases");
    let o = lab
        .record_cmd("t.mtl", &["--keep-last", "2s", "--pressure", "some avg10>=0"], &prog, &["20000", "100", "500", "0", "exit", "ready", "stop"])
        .output()
        .unwrap();
    assert_success(&o, "record --pressure");
    let w = windows(&lab, "t.mtl");
    assert_eq!(w.len(), 1, "one crossing, one window: {}", stderr(&o));
    let p = lab.report_path(&w[0]);
    assert!(p["flight"]["trigger"].as_str().unwrap().starts_with("memory pressure (some memory avg10="), "{}", p["flight"]);
    assert!(site(&p, "phase_a").calls > 0, "written during phase A");
}

/// A cgroup with a memory controller whose limit the program exceeds: its
/// events (v2 memory.events oom/oom_kill, or on a hybrid host the v1
/// controller's failcnt and oom_kill) write the window, and the OOM kill
/// ends the program.
#[test]
fn a_cgroup_memory_limit_writes_the_window_before_the_oom_kill() {
    if !is_root() {
        return skip("making a cgroup needs root");
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mount = |pred: &dyn Fn(&str, &str) -> bool| {
        mountinfo.lines().find_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let mut r = right.split_whitespace();
            let (fs, _, opts) = (r.next()?, r.next()?, r.next().unwrap_or(""));
            let at = PathBuf::from(left.split_whitespace().nth(4)?);
            pred(fs, opts).then_some(at)
        })
    };
    let v2 = mount(&|fs, _| fs == "cgroup2")
        .filter(|m| std::fs::read_to_string(m.join("cgroup.controllers")).is_ok_and(|c| c.split_whitespace().any(|x| x == "memory")));
    let v1 = mount(&|fs, opts| fs == "cgroup" && opts.split(',').any(|o| o == "memory"));
    let (root, limit_file) = match (v2, v1) {
        (Some(m), _) => (m, "memory.max"),
        (None, Some(m)) => (m, "memory.limit_in_bytes"),
        _ => return skip("no cgroup memory controller mounted (neither cgroup v2 with memory nor a v1 memory hierarchy)"),
    };
    let lab = Lab::new();
    let prog = lab.compile("flight_phases");
    let group = root.join(format!("mtlab-flight-test-{}", std::process::id()));
    std::fs::create_dir(&group).unwrap();
    struct Rm(PathBuf);
    impl Drop for Rm {
        fn drop(&mut self) {
            // The group can go once its processes have.
            for _ in 0..100 {
                if std::fs::remove_dir(&self.0).is_ok() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    let _rm = Rm(group.clone());
    let mut rec = lab.record_cmd("t.mtl", &["--keep-last", "2s"], &prog, &phases_args("exit", "64")).stderr(Stdio::piped()).spawn().unwrap();
    // During phase A's gap: the program moves to the group (what it
    // allocated so far stays charged where it was), limited to 4 MiB more.
    let pid = program_pid(&rec);
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(group.join("cgroup.procs"), pid.to_string()).unwrap();
    std::fs::write(group.join(limit_file), (4u64 << 20).to_string()).unwrap();
    let status = wait_within(&mut rec, Duration::from_secs(60)).expect("record ends");
    let mut err = String::new();
    std::io::Read::read_to_string(rec.stderr.as_mut().unwrap(), &mut err).unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "the OOM killer ended the program: {err}");
    let w = windows(&lab, "t.mtl");
    assert!(!w.is_empty(), "{err}");
    assert!(w.len() >= 2, "one window on the cgroup's event, one on the kill: {err}");
    for path in &w[..w.len() - 1] {
        let p = lab.report_path(path);
        let trigger = p["flight"]["trigger"].as_str().unwrap();
        assert!(trigger.starts_with("cgroup memory event ("), "{trigger}");
        assert!(trigger.contains(&group.display().to_string()), "{trigger}");
        assert_eq!(site(&p, "phase_a").calls, 0, "{trigger}");
    }
    // The last one is of the kill.
    let last = lab.report_path(w.last().unwrap());
    let trigger = last["flight"]["trigger"].as_str().unwrap();
    assert!(trigger.starts_with("signal 9 (SIGKILL) (the OOM killer: ") && trigger.contains("oom_kill 0 → 1"), "{trigger}");
    // What phase B's thread still buffered died with it (SIGKILL): only A's absence is certain.
    assert_eq!(site(&last, "phase_a").calls, 0, "{trigger}");
}

/// With `--live` the ring is fed by the live consumer (which releases the
/// raw bytes once read): the window, named after the profile, holds phase B
/// only, and the profile the whole run.
#[test]
fn with_live_the_ring_gets_what_the_live_consumer_reads() {
    let lab = Lab::new();
    let prog = lab.compile("flight_phases");
    let o = lab.record_cmd("t.live", &["--live", "--keep-last", "2s"], &prog, &phases_args("abort", "0")).output().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(o.status.signal(), Some(libc::SIGABRT), "record ends as the program did: {}", stderr(&o));
    let w = windows(&lab, "t.live");
    assert_eq!(w.len(), 1, "{}", stderr(&o));
    assert_b_only(&lab.report_path(&w[0]), "signal 6 (SIGABRT)");
    let p = lab.report("t.live");
    assert_eq!(site(&p, "phase_a").calls, NA, "the profile holds the whole run");
    assert_eq!(site(&p, "phase_b").calls, NB);
}
