//! The awkward programs of native/tests (forks without fork handlers, a
//! longjmp out of malloc, exit from a signal handler, _exit, closing every
//! descriptor, library constructors, system calls that EINTR would break),
//! each run 20 times under `mtlab record` and `mtlab record --sample 4KiB`
//! while a loop of `mtlab ctl` requests runs against it: no run may hang,
//! crash, or end with another exit code or output than the program gives
//! untraced.

mod util;

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use util::*;

const RUNS: usize = 20;
const LIMIT: Duration = Duration::from_secs(30);

struct Program {
    path: std::path::PathBuf,
    args: Vec<String>,
    /// Its output names the tracer's state (close_all, fork_fd_reuse):
    /// compared between traced runs, not with the untraced run.
    tracer_aware: bool,
}

/// A pid printed by a program ("pid N", "child N") differs from run to run.
fn without_pids(out: &[u8]) -> String {
    let text = String::from_utf8_lossy(out);
    text.lines()
        .map(|l| match l.split_once(' ') {
            Some((w @ ("pid" | "child"), n)) if n.chars().all(|c| c.is_ascii_digit()) => format!("{w} N"),
            _ => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The result a run ended with: exit code (or signal) and output.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    code: Option<i32>,
    signal: Option<i32>,
    stdout: String,
}

/// Runs `cmd` with a deadline; None when it had to be killed (a hang).
/// With `ctl`, a loop of `mtlab ctl` requests runs against it meanwhile
/// (from `dir`), counting the ones answered.
fn run(mut cmd: Command, ctl: Option<(&std::path::Path, &Arc<AtomicU64>)>) -> Option<Outcome> {
    use std::os::unix::process::ExitStatusExt;
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let looper = ctl.map(|(dir, answered)| {
        let (dir, pid, done, answered) = (dir.to_path_buf(), child.id(), done.clone(), answered.clone());
        std::thread::spawn(move || ctl_loop(dir, pid, done, answered))
    });
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut out, &mut v);
        v
    });
    let status = wait_within(&mut child, LIMIT);
    done.store(true, Ordering::Relaxed);
    if let Some(l) = looper {
        l.join().unwrap();
    }
    let stdout = reader.join().unwrap();
    status.map(|s| Outcome { code: s.code(), signal: s.signal(), stdout: without_pids(&stdout) })
}

/// `mtlab ctl` requests against the traced program until `done`; counts the
/// ones it answered.
fn ctl_loop(lab_dir: std::path::PathBuf, pid: u32, done: Arc<AtomicBool>, answered: Arc<AtomicU64>) {
    let actions: [&[&str]; 3] = [&["dump", "-o", "d.pb.gz", "--timeout", "2"], &["stop"], &["start"]];
    let mut i = 0;
    while !done.load(Ordering::Relaxed) {
        let o = Command::new(MTLAB)
            .arg("ctl")
            .arg(pid.to_string())
            .args(actions[i % 3])
            .current_dir(&lab_dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        if o.success() {
            answered.fetch_add(1, Ordering::Relaxed);
        }
        i += 1;
    }
}

#[test]
fn awkward_programs_under_record_and_ctl_never_hang_crash_or_change() {
    let lab = Lab::new();
    let p = |path, args: &[&str], tracer_aware| Program { path, args: args.iter().map(|s| s.to_string()).collect(), tracer_aware };
    let programs = [
        p(lab.compile("raw_fork"), &["_Fork", "2000"], false),
        p(lab.compile("raw_fork"), &["clone", "20000"], false),
        p(lab.compile("exit_early"), &[], false),
        p(lab.compile("s_exit_in_handler"), &[], false),
        p(lab.compile("s_eintr"), &["40"], false),
        p(lab.compile("thread_exit"), &["500", "300", "_exit"], false),
        p(lab.compile("fork_exec"), &["30", "25"], false),
        p(lab.compile_linked("jump_out", "jump_hook"), &["2000"], false),
        p(lab.compile_linked("ctor_main", "ctor_lib"), &[], false),
        p(lab.compile("close_all"), &["2000"], true),
        p(lab.compile("fork_fd_reuse"), &[], true),
    ];
    let (mut hangs, mut crashes, mut changed, mut runs) = (Vec::new(), Vec::new(), Vec::new(), 0);
    let answered = Arc::new(AtomicU64::new(0));
    for prog in &programs {
        let name = prog.path.file_name().unwrap().to_string_lossy().to_string();
        let what = format!("{name} {}", prog.args.join(" "));
        let mut plain = lab.command(&prog.path);
        plain.args(&prog.args);
        let untraced = run(plain, None).unwrap_or_else(|| panic!("{what} hangs without mtlab"));
        for mode in [&[][..], &["--sample", "4KiB"][..]] {
            let mut first: Option<Outcome> = None;
            for i in 0..RUNS {
                runs += 1;
                let label = format!("{what} [{}] run {i}", if mode.is_empty() { "record" } else { "record --sample 4KiB" });
                let mut cmd = lab.record_cmd(&format!("s-{name}-{}-{i}.mtl", mode.len()), mode, &prog.path, &[]);
                cmd.args(&prog.args);
                // The loop targets `mtlab record`'s pid, which ctl maps to the traced program.
                let outcome = run(cmd, Some((&lab.path(""), &answered)));
                let Some(o) = outcome else {
                    hangs.push(label);
                    continue;
                };
                if o.signal.is_some() {
                    crashes.push(format!("{label}: {o:?}"));
                    continue;
                }
                let reference = if prog.tracer_aware { first.get_or_insert_with(|| o.clone()).clone() } else { untraced.clone() };
                let same = if prog.tracer_aware { o.code == untraced.code && o == reference } else { o == reference };
                if !same {
                    changed.push(format!("{label}: {o:?}, expected {reference:?}"));
                }
            }
        }
        eprintln!("{what}: {} runs done", 2 * RUNS);
    }
    eprintln!(
        "stress: {} programs x 2 modes x {RUNS} runs = {runs}: {} hangs, {} crashes, {} changed results; {} ctl requests answered",
        programs.len(),
        hangs.len(),
        crashes.len(),
        changed.len(),
        answered.load(Ordering::Relaxed)
    );
    assert!(hangs.is_empty(), "hung: {hangs:#?}");
    assert!(crashes.is_empty(), "crashed: {crashes:#?}");
    assert!(changed.is_empty(), "changed: {changed:#?}");
    assert!(answered.load(Ordering::Relaxed) > 0, "the ctl loop never reached a sampled program");
}

/// A flush interrupted after its write — by a signal handler that calls
/// exit() or jumps out, or by an asynchronous cancel — once left its chunk in
/// the buffer for the next flush to write again: thousands of calls counted
/// twice, with `overlapping_allocs` ≈ `unknown_frees` and a clean end (about
/// 1 run in 8 for exit and cancel, every long run for the jumps). Each mode
/// is run until such a repeat was certain to show (40 short runs; 3 runs of
/// thousands of jumps): no chunk may be read twice, and what the jumps out
/// of mtlab's own code lose is at most one event each (`guards_reset`).
#[test]
fn interrupted_flushes_write_each_chunk_once() {
    let lab = Lab::new();
    let prog = lab.compile("flush_interrupt");
    for (mode, ms, runs) in [("exit", "30", 40), ("cancel", "30", 40), ("longjmp", "300", 3)] {
        for run in 0..runs {
            let o = lab.record_ok("f.mtl", &prog, &[mode, ms]);
            let pairs: u64 = String::from_utf8_lossy(&o.stdout)
                .trim()
                .strip_prefix("pairs ")
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{mode}: no pair count in {:?}", String::from_utf8_lossy(&o.stdout)));
            let v = lab.report("f.mtl");
            let what = format!("{mode} run {run}");
            for w in v["warnings"].as_array().unwrap() {
                assert!(!w.as_str().unwrap().contains("appeared twice"), "{what}: {w}");
            }
            assert!(!stderr(&o).contains("appeared twice"), "{what}: {}", stderr(&o));
            let jumps = u(&v["guards_reset"]);
            assert!(u(&v["unknown_frees"]) <= jumps, "{what}: {} unknown frees, {jumps} jumps", v["unknown_frees"]);
            assert!(u(&v["overlapping_allocs"]) <= jumps, "{what}: {} overlapping, {jumps} jumps", v["overlapping_allocs"]);
            let mallocs = calls(&v, "malloc");
            assert!(mallocs + jumps >= pairs && mallocs <= pairs + jumps + 16, "{what}: {mallocs} mallocs traced, {pairs} pairs made (and a few of the C library's)");
        }
    }
}
