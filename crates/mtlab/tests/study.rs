//! End-to-end tests of the study framework through the real binary: runs
//! land in the results store, `mtlab runs` lists, shows and exports them,
//! and `mtlab diff` flags a planted slowdown but not a rerun.

mod util;

use std::process::Output;

use serde_json::Value;
use util::*;

fn run_ok(lab: &Lab, args: &[&str]) -> Output {
    let o = lab.command(MTLAB).args(args).output().unwrap();
    assert_success(&o, &format!("mtlab {}", args.join(" ")));
    o
}

/// `bench program` on `sleep SECONDS`, untraced and under mtlab; returns the run id.
fn sleep_run(lab: &Lab, seconds: &str) -> i64 {
    // Ten rounds: one disturbed round (other tests share the cores) cannot move the interval.
    let v = lab.mtlab_json(&["bench", "program", "--reps", "10", "--no-heaptrack", "-q", "--", "sleep", seconds]);
    v["id"].as_i64().expect("stored run has an id")
}

fn change<'a>(d: &'a Value, config: &str, metric: &str) -> &'a Value {
    d["changes"].as_array().unwrap().iter().find(|c| c["configuration"] == config && c["metric"] == metric).unwrap()
}

#[test]
fn diff_flags_a_planted_slowdown_and_not_a_rerun() {
    let lab = Lab::new();
    let a = sleep_run(&lab, "0.1");
    let rerun = sleep_run(&lab, "0.1");
    let slow = sleep_run(&lab, "0.12");
    // Other tests load both cores while this one runs: judge changes of 10 % and more.
    let d = lab.mtlab_json(&["diff", &a.to_string(), &slow.to_string(), "--threshold", "10%"]);
    let c = change(&d, "untraced", "wall_s");
    assert_eq!(c["verdict"], "worse", "{c}");
    assert!((f(&c["ratio"]["ratio"]) - 1.2).abs() < 0.08, "{c}");
    assert!(d["warnings"].as_array().unwrap().iter().any(|w| w.as_str().unwrap().contains("sleep 0.12")), "{d}");
    let d = lab.mtlab_json(&["diff", &a.to_string(), &rerun.to_string(), "--threshold", "10%"]);
    let c = change(&d, "untraced", "wall_s");
    assert_eq!(c["verdict"], "within_noise", "{c}");
    // Counting figures do not move at all between reruns.
    assert_eq!(change(&d, "mtlab report", "events")["verdict"], "within_noise");
    // --fail-on-regression turns a regression into exit status 3.
    let o = lab.command(MTLAB).args(["diff", &a.to_string(), &slow.to_string(), "--threshold", "10%", "--fail-on-regression"]).output().unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("slower"), "{text}");
}

#[test]
fn runs_are_listed_shown_and_exported_as_they_were_measured() {
    let lab = Lab::new();
    let fresh = lab.mtlab_json(&["bench", "program", "--reps", "2", "--no-heaptrack", "-q", "--", "true"]);
    let id = fresh["id"].as_i64().unwrap();
    let list = lab.mtlab_json(&["runs"]);
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["id"], id);
    assert_eq!(list[0]["study"], "bench-program");
    let shown = lab.mtlab_json(&["runs", "show", &id.to_string()]);
    assert_eq!(shown["measurements"], fresh["measurements"]);
    assert_eq!(shown["environment"], fresh["environment"]);
    assert_eq!(shown["summaries"], fresh["summaries"]);
    let exported = lab.mtlab_json(&["runs", "export", &id.to_string()]);
    assert_eq!(exported, shown);
    run_ok(&lab, &["runs", "export", &id.to_string(), "--csv", "out"]);
    let csv = std::fs::read_to_string(lab.path("out/measurements.csv")).unwrap();
    let wall_rows = csv.lines().filter(|l| l.contains(",untraced,") && l.contains(",wall_s,")).count();
    assert_eq!(wall_rows, 2, "{csv}");
    let text = String::from_utf8_lossy(&run_ok(&lab, &["runs", "show", &id.to_string()]).stdout).to_string();
    assert!(text.contains(&format!("run {id}: tracer overhead on a program")), "{text}");
    assert!(text.contains("× untraced"), "{text}");
    // A filter that matches nothing says so.
    let o = run_ok(&lab, &["runs", "--study", "threads"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("no runs of study threads"));
}

#[test]
fn bad_ids_and_mismatched_studies_are_clear_errors() {
    let lab = Lab::new();
    let o = lab.command(MTLAB).args(["runs", "show", "1"]).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no results store"), "{}", stderr(&o));
    let prog = lab.mtlab_json(&["bench", "program", "--reps", "1", "--no-heaptrack", "-q", "--", "true"]);
    let o = lab.command(MTLAB).args(["runs", "show", "99"]).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("99") && stderr(&o).contains("mtlab runs"), "{}", stderr(&o));
    let tracer = lab.mtlab_json(&["bench", "tracer", "--iterations", "100", "--reps", "1", "--no-heaptrack", "-q"]);
    let (a, b) = (prog["id"].to_string(), tracer["id"].to_string());
    let o = lab.command(MTLAB).args(["diff", &a, &b]).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("same study"), "{}", stderr(&o));
}

#[test]
fn concurrent_runs_share_one_store() {
    let lab = Lab::new();
    let spawn = || {
        lab.command(MTLAB)
            .args(["bench", "program", "--reps", "1", "--no-heaptrack", "-q", "--", "true"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let children: Vec<_> = (0..4).map(|_| spawn()).collect();
    for c in children {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let list = lab.mtlab_json(&["runs"]);
    let mut ids: Vec<i64> = list.as_array().unwrap().iter().map(|r| r["id"].as_i64().unwrap()).collect();
    ids.sort_unstable();
    assert_eq!(ids, [1, 2, 3, 4]);
    for id in ids {
        let r = lab.mtlab_json(&["runs", "show", &id.to_string()]);
        assert_eq!(r["measurements"][0]["values"].as_array().unwrap().len(), 1);
    }
}

#[test]
fn an_unusable_store_keeps_the_results_on_screen_and_fails() {
    let lab = Lab::new();
    std::fs::write(lab.path("not-a-db"), b"this is not an SQLite database, just text long enough to have a header.....").unwrap();
    let o = lab
        .command(MTLAB)
        .args(["bench", "program", "--reps", "1", "--no-heaptrack", "-q", "--store", "not-a-db", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stdout).contains("× untraced"), "results not shown");
    assert!(stderr(&o).contains("not-a-db") && stderr(&o).contains("--no-store"), "{}", stderr(&o));
}

/// `bench program` on a program that ignores SIGTERM, interrupted with
/// SIGINT (twice when `twice`): returns how long mtlab took to die after the
/// first signal, after checking it died of SIGINT and took the program along.
fn interrupt_a_stubborn_program(twice: bool) -> std::time::Duration {
    use std::os::unix::process::ExitStatusExt;
    use std::time::{Duration, Instant};
    let lab = Lab::new();
    let pid_file = lab.path("pid");
    // Under `mtlab record` only (the untraced run ends at once): the measured
    // child is then record, and the program is its child. `trap '' TERM`
    // makes TERM ignored, which exec keeps: sleep ignores it too.
    let script = format!(
        "case \"$LD_PRELOAD\" in *mtlab*) echo $$ > {}; trap '' TERM; exec sleep 60;; esac",
        pid_file.display()
    );
    let mut cmd = lab.command(MTLAB);
    cmd.args(["bench", "program", "--reps", "1", "--no-heaptrack", "-q", "--", "sh", "-c", &script])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    // A test run started in the background by a non-interactive shell
    // (`nohup … &`) inherits SIGINT ignored, and so would mtlab: the
    // Ctrl-C this test sends would never arrive.
    // SAFETY: signal() is async-signal-safe; between fork and exec.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let program: i32 = loop {
        if let Some(p) = std::fs::read_to_string(&pid_file).ok().and_then(|s| s.trim().parse().ok()) {
            break p;
        }
        assert!(Instant::now() < deadline, "the program never started");
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    // SAFETY: kill on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    if twice {
        std::thread::sleep(Duration::from_millis(200));
        // SAFETY: as above.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    }
    let status = wait_within(&mut child, Duration::from_secs(30)).expect("mtlab did not end");
    let took = start.elapsed();
    assert_eq!(status.signal(), Some(libc::SIGINT));
    // The program is gone (or a zombie waiting for init), not running on alone.
    // A /proc entry that is gone means reaped; a zombie (Z) awaits reaping.
    // A killed process may still be tearing itself down (state D with
    // PF_EXITING) for a moment after mtlab is gone: give that a second.
    let dying_deadline = Instant::now() + Duration::from_secs(2);
    let running = |state: &Option<String>| {
        state.as_deref().is_some_and(|s| s.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
    };
    let mut state = std::fs::read_to_string(format!("/proc/{program}/stat")).ok();
    while running(&state) && Instant::now() < dying_deadline {
        std::thread::sleep(Duration::from_millis(20));
        state = std::fs::read_to_string(format!("/proc/{program}/stat")).ok();
    }
    assert!(!running(&state), "the measured program outlived mtlab: {state:?}");
    took
}

#[test]
fn an_interrupted_study_kills_a_program_that_ignores_sigterm() {
    // One Ctrl-C: the program is given 3 s to finish, then killed.
    let took = interrupt_a_stubborn_program(false);
    assert!(took >= std::time::Duration::from_millis(2900), "{took:?}");
}

#[test]
fn a_second_ctrl_c_does_not_wait_for_the_program() {
    let took = interrupt_a_stubborn_program(true);
    assert!(took < std::time::Duration::from_millis(2900), "a second Ctrl-C still waited: {took:?}");
}
