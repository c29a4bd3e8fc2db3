//! `mtlab record --pid`: attach to a running program, trace it, detach, and
//! leave it running as before. The program (native/tests/attach_phases.c)
//! waits for SIGUSR1 between phases, so the counts of what it allocated
//! while attached are known exactly; and every refusal.

mod util;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use util::*;

/// The program to attach to, running, with its stdout read line by line.
struct Target {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl Target {
    fn start(lab: &Lab, program: &std::path::Path, args: &[&str]) -> Target {
        let mut child = lab.command(program).args(args).stdout(Stdio::piped()).spawn().unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let mut t = Target { child, out };
        assert_eq!(t.line(), "ready");
        t
    }
    fn pid(&self) -> i32 {
        self.child.id() as i32
    }
    fn line(&mut self) -> String {
        let mut s = String::new();
        self.out.read_line(&mut s).unwrap();
        s.trim_end().to_string()
    }
    fn next_phase(&mut self) -> String {
        signal(self.pid(), libc::SIGUSR1);
        self.line()
    }
    fn maps(&self) -> String {
        std::fs::read_to_string(format!("/proc/{}/maps", self.pid())).unwrap()
    }
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: kill with a valid signal number on a pid this test started.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

/// `mtlab record --pid` running until it is sent SIGINT; returns once it said it attached.
fn attach(lab: &Lab, pid: i32, trace: &str, extra: &[&str]) -> (Child, BufReader<std::process::ChildStderr>) {
    let mut m = lab
        .command(MTLAB)
        .args(["record", "--pid", &pid.to_string(), "-o"])
        .arg(lab.path(trace))
        .args(extra)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(m.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    assert!(line.starts_with(&format!("mtlab: attached to process {pid}")), "mtlab said: {line}");
    (m, err)
}

/// Sends SIGINT to mtlab and returns what else it said; it must exit 0.
fn detach(mut m: Child, mut err: BufReader<std::process::ChildStderr>) -> String {
    signal(m.id() as i32, libc::SIGINT);
    let status = wait_within(&mut m, Duration::from_secs(30)).expect("mtlab detaches within 30 s");
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    assert!(status.success(), "mtlab record --pid failed: {status}\n{rest}");
    rest
}

fn finish(mut t: Target) -> String {
    let last = t.next_phase();
    let status = wait_within(&mut t.child, Duration::from_secs(10)).expect("the program ends");
    assert!(status.success(), "the program's exit changed: {status}");
    last
}

/// One attach between "ready" and phase 2: phase 1 traced, phase 2 not.
fn traced_phase(lab: &Lab, program: &std::path::Path, args: &[&str], trace: &str, extra: &[&str]) -> (Value, String) {
    let mut t = Target::start(lab, program, args);
    let (m, err) = attach(lab, t.pid(), trace, extra);
    assert!(t.maps().contains("libmtlab_attach.so"), "the library is loaded while attached");
    assert_eq!(t.next_phase(), "phase 1 done");
    let said = detach(m, err);
    assert!(said.contains("detached from process"), "{said}");
    assert!(!t.maps().contains("libmtlab_attach"), "the library is unloaded at detach:\n{said}\n{}", t.maps());
    // The program runs on with its own output: sum of 0..29.
    assert_eq!(finish(t), "phase 2 done 435");
    (lab.report(trace), said)
}

#[test]
fn full_trace_counts_exactly_what_was_allocated_while_attached() {
    let lab = Lab::new();
    let prog = lab.compile("attach_phases");
    let (r, _) = traced_phase(&lab, &prog, &[], "full.mtl", &["--full"]);
    assert_eq!(calls(&r, "malloc"), 100, "phase 1's mallocs, none of phase 2's or before the attach");
    assert_eq!(calls(&r, "calloc"), 10);
    assert_eq!(calls(&r, "free"), 70, "50 of phase 1's blocks and the 20 from before the attach");
    assert_eq!(u(&r["unknown_frees"]), 20, "the frees of blocks allocated before the attach");
    assert_eq!(u(&r["peak"]["live_objects"]), 100);
    assert_eq!(r["attached"]["ended_by"], "detach");
    let text = lab.command(MTLAB).arg("report").arg(lab.path("full.mtl")).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("attached to the running process: tracing started at"), "{text}");
    assert!(text.contains("frees of blocks allocated before the attach: 20"), "{text}");
}

/// The figures of a report that the full-trace attach and the live one must share.
fn attach_figures(r: &Value) -> Vec<(String, u64)> {
    let mut f: Vec<(String, u64)> = ["malloc", "calloc", "realloc", "free"].iter().map(|n| (n.to_string(), calls(r, n))).collect();
    f.push(("unknown_frees".into(), u(&r["unknown_frees"])));
    f.push(("peak.live_objects".into(), u(&r["peak"]["live_objects"])));
    f.push(("end.live_objects".into(), u(&r["end"]["live_objects"])));
    f.push(("end.live_bytes".into(), u(&r["end"]["live_bytes"])));
    f
}

/// `record --pid PID --live`: the attached process's full trace analysed
/// while attached into a live profile whose figures are the full-trace
/// attach's of the same program, exactly; the raw trace is gone after, and
/// the program runs on with its own output and exit code.
#[test]
fn live_attach_counts_what_the_full_trace_attach_counts() {
    let lab = Lab::new();
    let prog = lab.compile("attach_phases");
    for threads in ["0", "7"] {
        let (full, _) = traced_phase(&lab, &prog, &[threads], "full.mtl", &["--full"]);
        let profile = format!("t{threads}.live");
        let (live, said) = traced_phase(&lab, &prog, &[threads], &profile, &["--live", "--snapshot-every", "0.1"]);
        assert!(said.contains(&format!("wrote {}", lab.path(&profile).display())) && said.contains("live profile"), "{said}");
        // glibc's thread exits add free(NULL) calls, a varying number of
        // them (see the next test): with threads, free's calls are compared
        // by what they freed (the live blocks), the rest exactly. The peak
        // of concurrent threads depends on how the two runs interleaved
        // them: it is held to the bounds every interleaving keeps.
        let varies = |k: &str| threads != "0" && (k == "free" || k == "peak.live_objects");
        let same = |r: &Value| attach_figures(r).into_iter().filter(|(k, _)| !varies(k)).collect::<Vec<_>>();
        assert_eq!(same(&live), same(&full), "{threads} extra threads");
        if threads != "0" {
            // Each of the n threads mallocs 100 blocks, then frees 50 of them;
            // 10 callocs follow. At the least the last thread's 100 meet the
            // others' kept 50s; at the most all of them are live at once.
            let n: u64 = threads.parse::<u64>().unwrap() + 1;
            for (name, r) in [("live", &live), ("full", &full)] {
                let peak = u(&r["peak"]["live_objects"]);
                assert!((50 * (n - 1) + 100..=100 * n + 10).contains(&peak), "{name}: peak {peak} live objects with {n} threads");
            }
        }
        assert_eq!(live["attached"]["ended_by"], "detach");
        assert!(live["attached"]["at_ns"].as_u64().is_some_and(|t| t > 0), "when tracing began: {}", live["attached"]);
        assert!(!lab.path(&format!("{profile}.raw")).exists(), "the raw trace is released and removed");
        std::fs::remove_file(lab.path("full.mtl")).unwrap();
    }
    let live = lab.report("t0.live");
    assert_eq!(calls(&live, "malloc"), 100, "phase 1's mallocs, none of phase 2's or before the attach");
    assert_eq!(u(&live["unknown_frees"]), 20, "the frees of blocks allocated before the attach");
    let text = lab.command(MTLAB).arg("report").arg(lab.path("t0.live")).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("attached to the running process: tracing started at"), "{text}");
}

/// A long attach to a loop that allocates all the time: the raw trace is
/// released as it is analysed (its most on disk a fraction of what was
/// written), `mtlab ctl PID status` shows the lag while attached, `mtlab
/// ctl PID stop` detaches, and the loop runs on to its own end.
#[test]
fn live_attach_keeps_the_disk_bounded_and_ctl_stop_detaches() {
    let lab = Lab::new();
    let prog = lab.compile("attach_loop");
    let mut t = Target::start(&lab, &prog, &[]);
    let pid = t.pid();
    let (mut m, mut err) = attach(&lab, pid, "loop.live", &["--live", "--snapshot-every", "0.5"]);
    std::thread::sleep(Duration::from_millis(1500));
    let o = lab.command(MTLAB).args(["ctl", &pid.to_string(), "status"]).output().unwrap();
    assert_success(&o, "mtlab ctl PID status");
    let status = String::from_utf8_lossy(&o.stdout);
    assert!(status.contains(&format!("process {pid}: live analysis")) && status.contains("events analysed"), "{status}");
    std::thread::sleep(Duration::from_millis(2500));
    let o = lab.command(MTLAB).args(["ctl", &pid.to_string(), "stop"]).output().unwrap();
    assert_success(&o, "mtlab ctl PID stop");
    assert!(stderr(&o).contains("to detach"), "{}", stderr(&o));
    let status = wait_within(&mut m, Duration::from_secs(30)).expect("mtlab detaches at ctl stop");
    let mut said = String::new();
    err.read_to_string(&mut said).unwrap();
    assert!(status.success() && said.contains("detached from process"), "{said}");
    assert!(!t.maps().contains("libmtlab_attach"), "the library is unloaded at detach");
    std::thread::sleep(Duration::from_millis(100));
    signal(pid, libc::SIGUSR1);
    let last = t.line();
    assert!(last.starts_with("done "), "the loop's own end: {last}");
    assert!(wait_within(&mut t.child, Duration::from_secs(10)).expect("the loop ends").success());
    let o = lab.command(MTLAB).args(["report", "--json"]).arg(lab.path("loop.live")).output().unwrap();
    assert_success(&o, "mtlab report --json");
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    let (mallocs, frees) = (calls(&r, "malloc"), calls(&r, "free"));
    assert!(mallocs >= 50_000, "4 s of 100 mallocs every ~2 ms: {mallocs}");
    assert!(mallocs.abs_diff(frees) <= 1, "one block live at a time: {mallocs} mallocs, {frees} frees");
    let lag = &r["live_profile"]["lag"];
    let consumed = u(&lag["consumed_bytes"]);
    assert!(u(&lag["max_raw_disk_bytes"]) * 4 < consumed, "the raw trace is released as it is analysed: {lag}");
    assert!(!lab.path("loop.live.raw").exists());
}

#[test]
fn full_trace_of_threads_running_while_attached() {
    let lab = Lab::new();
    let prog = lab.compile("attach_phases");
    let (r, _) = traced_phase(&lab, &prog, &["7"], "threads.mtl", &["--full"]);
    assert_eq!(calls(&r, "malloc"), 800, "100 by each of 8 threads");
    // The program's own frees are 420; glibc's thread exit also calls
    // free(NULL) through its GLOB_DAT slot (2 per thread in glibc 2.36),
    // which the routed slot now shows as LD_PRELOAD does: calls, nothing freed.
    let frees = calls(&r, "free");
    assert!((420..=420 + 4 * 7).contains(&frees), "50 by each of 8 threads, the 20 from before, and glibc's: {frees}");
    assert_eq!(u(&r["unknown_frees"]), 20);
    assert_eq!(u(&r["end"]["live_objects"]), 800 - 400 + 10, "what phase 1 left live: each free freed one block");
}

#[test]
fn sampling_every_byte_samples_every_allocation_while_attached() {
    let lab = Lab::new();
    let prog = lab.compile("attach_phases");
    let (r, said) = traced_phase(&lab, &prog, &[], "sampled.mtl", &["--sample", "1"]);
    let p = &r["profile"];
    assert_eq!(u(&p["samples"]), 110, "100 mallocs and 10 callocs: {p}");
    assert_eq!(u(&p["sample_frees"]), 50, "frees of sampled blocks only (the 20 older ones were not sampled)");
    assert_eq!(f(&p["inuse_objects"]["value"]), 60.0);
    assert_eq!(f(&p["alloc_bytes"]["value"]), 110_000.0);
    // Its control page is gone with the detach.
    assert!(said.contains("mtlab's library unloaded"), "{said}");
}

/// A program built without -fPIC and -pie that takes malloc's address in
/// its code (as Debian's python3 is): its own PLT entry is malloc's canonical
/// address, the global lookup returns that entry, and its slots were left
/// unrouted (no call counted) until the real function was looked up past it.
#[test]
fn a_non_pie_program_with_canonical_plt_entries_is_routed() {
    let lab = Lab::new();
    let prog = lab.compile_as("attach_phases", "nopie_phases", &["-fno-pic", "-no-pie", "-DCANONICAL_PLT"]);
    let (r, _) = traced_phase(&lab, &prog, &[], "nopie.mtl", &["--full"]);
    assert_eq!(calls(&r, "malloc"), 100);
    assert_eq!(calls(&r, "calloc"), 10);
    assert_eq!(calls(&r, "free"), 70);
    assert_eq!(u(&r["unknown_frees"]), 20);
    let (r, _) = traced_phase(&lab, &prog, &["3"], "nopie_sampled.mtl", &["--sample", "1"]);
    assert_eq!(u(&r["profile"]["samples"]), 410, "100 mallocs by each of 4 threads and 10 callocs");
    assert_eq!(u(&r["profile"]["sample_frees"]), 200);
}

/// A program that mallocs while attached and then blocks, at detach, in a
/// frame whose unwritten local covers where that malloc's calls inside the
/// library wrote their return addresses (dead slots, never returned to).
/// With "keep" it blocks instead with malloc's address in a local, read from
/// its GOT slot while that was routed to the library's shim, and calls it
/// after the detach.
const DEAD_SLOTS_C: &str = r#"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static sigset_t usr1;

__attribute__((noinline)) static void *deep_malloc(size_t n) { return malloc(n); }

__attribute__((noinline)) static void wait_over_dead_slots(void) {
    volatile char unwritten[16384];
    (void)unwritten;
    int sig;
    sigwait(&usr1, &sig);
}

__attribute__((noinline)) static unsigned long wait_keeping_malloc(void) {
    void *(*volatile kept)(size_t) = malloc;
    int sig;
    sigwait(&usr1, &sig);
    unsigned char *p = kept(16);
    memset(p, 7, 16);
    unsigned long r = p[15];
    free(p);
    return r;
}

int main(int argc, char **argv) {
    int keep = argc > 1 && strcmp(argv[1], "keep") == 0;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, NULL);
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready\n");
    wait_over_dead_slots();
    void *p[100];
    for (int i = 0; i < 100; i++) p[i] = deep_malloc(100 + i);
    for (int i = 0; i < 100; i++) free(p[i]);
    printf("phase 1 done\n");
    unsigned long r = keep ? wait_keeping_malloc() : (wait_over_dead_slots(), 7);
    printf("phase 2 done %lu\n", r);
    return 0;
}
"#;

fn compile_dead_slots(lab: &Lab) -> std::path::PathBuf {
    let src = lab.path("dead_slots.c");
    std::fs::write(&src, DEAD_SLOTS_C).unwrap();
    let out = lab.path("dead_slots");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let o = Command::new(&cc).args(["-O0", "-g", "-Wall", "-Wextra", "-o"]).arg(&out).arg(&src).output().unwrap();
    assert!(o.status.success(), "compiling dead_slots.c failed:\n{}", String::from_utf8_lossy(&o.stderr));
    out
}

/// Dead slots holding return addresses into the library, on the stack of a
/// thread blocked at detach, do not keep it loaded: only live frames count
/// (attach/quiet.rs, unwound with the CFI). Before, every word from the
/// stack pointer up counted, and the library stayed loaded, inert.
#[test]
fn dead_slots_of_the_library_on_a_blocked_stack_do_not_keep_it_loaded() {
    let lab = Lab::new();
    let prog = compile_dead_slots(&lab);
    let mut t = Target::start(&lab, &prog, &[]);
    let (m, err) = attach(&lab, t.pid(), "dead.mtl", &["--full"]);
    assert_eq!(t.next_phase(), "phase 1 done");
    let said = detach(m, err);
    assert!(!said.contains("stays loaded"), "{said}");
    assert!(!t.maps().contains("libmtlab_attach"), "the library is unloaded at detach:\n{said}\n{}", t.maps());
    assert_eq!(finish(t), "phase 2 done 7");
    let r = lab.report("dead.mtl");
    assert_eq!(calls(&r, "malloc"), 100);
    assert_eq!(calls(&r, "free"), 100);
}

/// malloc's address kept in a local across the detach (read while its GOT
/// slot was routed: a stub outside the library, put back by the end call)
/// does not keep the library loaded, and calling it after the unload works.
#[test]
fn malloc_kept_in_a_local_across_the_detach_works_after_the_unload() {
    let lab = Lab::new();
    let prog = compile_dead_slots(&lab);
    let mut t = Target::start(&lab, &prog, &["keep"]);
    let (m, err) = attach(&lab, t.pid(), "keep.mtl", &["--full"]);
    assert_eq!(t.next_phase(), "phase 1 done");
    let said = detach(m, err);
    assert!(!t.maps().contains("libmtlab_attach"), "the library is unloaded at detach:\n{said}\n{}", t.maps());
    assert_eq!(finish(t), "phase 2 done 7", "the kept function is called after the detach");
}

/// A musl-linked program: the musl build of the library is loaded (with
/// musl's own dlopen), and every count is the glibc build's above — full,
/// with threads, sampled, and non-PIE with canonical PLT entries. musl's
/// dlclose unloads nothing, so the library stays mapped, inert, and a second
/// attach is refused with what to do.
#[test]
fn a_musl_program_is_attached_to_with_the_counts_of_glibc() {
    let lab = Lab::new();
    let Some(prog) = lab.compile_musl("attach_phases", "musl_phases", &[]) else { return };
    let musl_phase = |args: &[&str], trace: &str, extra: &[&str]| -> Value {
        let mut t = Target::start(&lab, &prog, args);
        let (m, err) = attach(&lab, t.pid(), trace, extra);
        assert!(t.maps().contains("libmtlab_attach_musl.so"), "the musl build is loaded:\n{}", t.maps());
        assert_eq!(t.next_phase(), "phase 1 done");
        let said = detach(m, err);
        assert!(said.contains("musl never unloads a library"), "{said}");
        // A second attach is refused while the first one's library is there.
        let o = lab.command(MTLAB).args(["record", "--pid", &t.pid().to_string(), "-o"]).arg(lab.path("again.mtl")).output().unwrap();
        assert!(!o.status.success() && stderr(&o).contains("restart the process"), "{}", stderr(&o));
        assert_eq!(finish(t), "phase 2 done 435", "the program runs on with its own output");
        lab.report(trace)
    };
    let r = musl_phase(&[], "musl_full.mtl", &["--full"]);
    assert_eq!(r["allocator"], "musl");
    assert_eq!((calls(&r, "malloc"), calls(&r, "calloc"), calls(&r, "free")), (100, 10, 70));
    assert_eq!(u(&r["unknown_frees"]), 20);
    assert_eq!(u(&r["peak"]["live_objects"]), 100);
    let r = musl_phase(&["7"], "musl_threads.mtl", &["--full"]);
    assert_eq!((calls(&r, "malloc"), calls(&r, "free")), (800, 420));
    let r = musl_phase(&[], "musl_sampled.mtl", &["--sample", "1"]);
    assert_eq!((u(&r["profile"]["samples"]), u(&r["profile"]["sample_frees"])), (110, 50));

    let Some(nopie) = lab.compile_musl("attach_phases", "musl_nopie", &["-fno-pic", "-no-pie", "-DCANONICAL_PLT"]) else { return };
    let mut t = Target::start(&lab, &nopie, &["3"]);
    let (m, err) = attach(&lab, t.pid(), "musl_nopie.mtl", &["--sample", "1"]);
    assert_eq!(t.next_phase(), "phase 1 done");
    detach(m, err);
    assert_eq!(finish(t), "phase 2 done 435");
    let r = lab.report("musl_nopie.mtl");
    assert_eq!((u(&r["profile"]["samples"]), u(&r["profile"]["sample_frees"])), (410, 200));
}

/// Debian's python3 is such a program (non-PIE, its PLT entry malloc's
/// canonical address): the interpreter's mallocs of a known phase are seen.
#[test]
fn python3_mallocs_are_routed_while_attached() {
    let lab = Lab::new();
    // Debian's own build (a python3 earlier in PATH, e.g. pyenv's, is another program).
    let python = std::path::PathBuf::from("/usr/bin/python3");
    if !python.exists() {
        skip("/usr/bin/python3 not found (apt-get install python3)");
        return;
    }
    let script = test_source("attach_phases").with_extension("py");
    let mut t = Target::start(&lab, &python, &[script.to_str().unwrap()]);
    let (m, err) = attach(&lab, t.pid(), "python.mtl", &["--full"]);
    assert_eq!(t.next_phase(), "phase 1 done 0 0");
    detach(m, err);
    let mut t = t;
    assert_eq!(t.next_phase(), "phase 2 done");
    assert!(wait_within(&mut t.child, Duration::from_secs(10)).expect("python3 ends").success());
    let r = lab.report("python.mtl");
    // The phase's 20 000 and 5000, and the interpreter's own few calls
    // around it (the signal's return, the print): far fewer than 1000.
    let (mallocs, frees) = (calls(&r, "malloc"), calls(&r, "free"));
    assert!((20_000..21_000).contains(&mallocs), "mallocs {mallocs}");
    assert!((5_000..6_000).contains(&frees), "frees {frees}");
}

/// A library dlopen'ed after the attach: its slots are routed before dlopen
/// returns, and restored at the detach (the program calls it again after).
#[test]
fn a_library_loaded_while_attached_is_routed() {
    let lab = Lab::new();
    let lib = lab.compile_shared("attach_dlopen_lib");
    let prog = lab.compile("attach_dlopen");
    let mut t = Target::start(&lab, &prog, &[lib.to_str().unwrap()]);
    let (m, err) = attach(&lab, t.pid(), "dlopen.mtl", &["--full"]);
    assert_eq!(t.next_phase(), "phase 1 done 780");
    detach(m, err);
    assert_eq!(finish(t), "phase 2 done 780");
    let r = lab.report("dlopen.mtl");
    assert_eq!(calls(&r, "malloc"), 40, "the library's mallocs: {r}");
    assert_eq!(calls(&r, "free"), 15);
    assert_eq!(u(&r["peak"]["live_objects"]), 40, "all 40 live before the 15 frees");
}

/// Calls that reach malloc and free through GLOB_DAT slots (glibc's own,
/// from strdup, fopen, getline, fclose; a -fno-plt program's own): seen
/// while attached exactly as under LD_PRELOAD, where the shims are in the
/// global scope. The same phase under `mtlab record` once and three times
/// gives LD_PRELOAD's count for one phase; the program's known behaviour
/// (native/tests/attach_glob.c) says 63 and 63.
#[test]
fn calls_through_glob_dat_slots_are_seen_while_attached() {
    let lab = Lab::new();
    for (name, flags) in [("glob_plt", &[][..]), ("glob_noplt", &["-fno-plt"][..])] {
        let prog = lab.compile_as("attach_glob", name, flags);
        let file = lab.path(&format!("{name}.txt"));
        let file = file.to_str().unwrap();
        let preloaded = |reps: &str| {
            let trace = format!("{name}_{reps}.mtl");
            let o = lab.record_cmd(&trace, &[], &prog, &[file, reps]).output().unwrap();
            assert_success(&o, "mtlab record");
            let r = lab.report(&trace);
            (calls(&r, "malloc"), calls(&r, "free"))
        };
        let (once, thrice) = (preloaded("1"), preloaded("3"));
        let per_phase = ((thrice.0 - once.0) / 2, (thrice.1 - once.1) / 2);
        assert_eq!(per_phase, (63, 63), "{name} under LD_PRELOAD: one phase's mallocs and frees");

        let mut t = Target::start(&lab, &prog, &[file]);
        let (m, err) = attach(&lab, t.pid(), &format!("{name}.mtl"), &["--full"]);
        assert_eq!(t.next_phase(), "phase 1 done");
        let said = detach(m, err);
        assert!(said.contains("mtlab's library unloaded"), "{said}");
        assert!(t.maps().contains("/memfd:mtlab-stubs"), "the stubs stay: pointers read meanwhile lead there");
        assert_eq!(finish(t), "phase 2 done 4380", "{name} runs on with its own output");
        let r = lab.report(&format!("{name}.mtl"));
        assert_eq!((calls(&r, "malloc"), calls(&r, "free")), per_phase, "{name} attached: the phase's calls, as preloaded");
        assert_eq!(u(&r["unknown_frees"]), 0);
    }
}

#[test]
fn default_is_sampling_and_the_exit_ends_the_session() {
    let lab = Lab::new();
    let prog = lab.compile("attach_phases");
    let mut t = Target::start(&lab, &prog, &[]);
    let pid = t.pid();
    let (m, err) = attach(&lab, pid, "exit.mtl", &[]);
    assert_eq!(t.next_phase(), "phase 1 done");
    assert_eq!(finish(t), "phase 2 done 435", "traced through its exit");
    let mut m = m;
    let status = wait_within(&mut m, Duration::from_secs(10)).expect("mtlab ends with the process");
    let mut said = String::new();
    BufReader::new(err.into_inner()).read_to_string(&mut said).unwrap();
    assert!(status.success(), "{said}");
    assert!(said.contains(&format!("process {pid} ended after")), "{said}");
    let r = lab.report("exit.mtl");
    assert_eq!(r["attached"]["ended_by"], "exit");
    assert!(r["clean_end"].as_bool().unwrap(), "the exit finished the trace");
    // Sampled (at 512 KiB: the 140 KB allocated may give no sample), not traced call by call.
    assert!(r["profile"].is_object(), "a sampled trace by default: {r}");
}

fn refused(lab: &Lab, pid: i32, extra: &[&str]) -> String {
    let o = lab.command(MTLAB).args(["record", "--pid", &pid.to_string(), "-o"]).arg(lab.path("no.mtl")).args(extra).output().unwrap();
    assert!(!o.status.success(), "mtlab attached where it must refuse");
    assert!(!lab.path("no.mtl").exists());
    stderr(&o)
}

#[test]
fn refusals_say_what_to_do() {
    let lab = Lab::new();
    // No such process.
    let err = refused(&lab, 999_999_999, &[]);
    assert!(err.contains("no process 999999999"), "{err}");

    // The flight recorder does not attach: refused, not ignored.
    let err = refused(&lab, std::process::id() as i32, &["--keep-last", "10s"]);
    assert!(err.contains("--keep-last does not attach") && err.contains("--live") && err.contains("record --keep-last DURATION -- PROGRAM"), "{err}");
    // --live analyses the full trace: a sampling interval with it is refused.
    let err = refused(&lab, std::process::id() as i32, &["--live", "--sample", "4096"]);
    assert!(err.contains("--live with --pid analyses the full trace") && err.contains("leave out --sample"), "{err}");

    // A static program.
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let stat = lab.path("static_phases");
    let ok = Command::new(&cc).args(["-static", "-pthread", "-o"]).arg(&stat).arg(test_source("attach_phases")).status().unwrap();
    if ok.success() {
        let mut t = Target::start(&lab, &stat, &[]);
        let err = refused(&lab, t.pid(), &[]);
        assert!(err.contains("statically linked") && err.contains("mtlab record -- PROGRAM"), "{err}");
        assert_eq!(finish_untraced(&mut t), "phase 2 done 435");
    } else {
        skip("no static libc to build a static program");
    }

    // A 32-bit program.
    let m32 = lab.path("phases32");
    let ok = Command::new(&cc).args(["-m32", "-pthread", "-o"]).arg(&m32).arg(test_source("attach_phases")).status().unwrap();
    if ok.success() {
        let mut t = Target::start(&lab, &m32, &[]);
        let err = refused(&lab, t.pid(), &[]);
        assert!(err.contains("32-bit") && err.contains("cannot be loaded"), "{err}");
        assert_eq!(finish_untraced(&mut t), "phase 2 done 435");
    } else {
        skip("no 32-bit toolchain (gcc-multilib)");
    }

    // A seccomp filter, unless --allow-seccomp.
    let prog = lab.compile("attach_phases");
    let mut t = Target::start(&lab, &prog, &["0", "seccomp"]);
    let err = refused(&lab, t.pid(), &[]);
    assert!(err.contains("seccomp filter") && err.contains("--allow-seccomp"), "{err}");
    let (m, e) = attach(&lab, t.pid(), "seccomp.mtl", &["--allow-seccomp", "--full"]);
    assert_eq!(t.next_phase(), "phase 1 done");
    detach(m, e);
    assert_eq!(finish(t), "phase 2 done 435");
    assert_eq!(calls(&lab.report("seccomp.mtl"), "malloc"), 100);

    // Already traced (strace holds it).
    let mut t = Target::start(&lab, &prog, &[]);
    match Command::new("strace").args(["-qq", "-o", "/dev/null", "-p", &t.pid().to_string()]).stderr(Stdio::null()).spawn() {
        Ok(mut strace) => {
            let traced = (0..500).any(|_| {
                std::thread::sleep(Duration::from_millis(10));
                let s = std::fs::read_to_string(format!("/proc/{}/status", t.pid())).unwrap();
                !s.contains("TracerPid:\t0\n")
            });
            assert!(traced, "strace attached");
            let err = refused(&lab, t.pid(), &[]);
            assert!(err.contains("already traced by process") && err.contains("strace"), "{err}");
            strace.kill().unwrap();
            strace.wait().unwrap();
        }
        Err(e) => skip(&format!("strace not found ({e}): apt-get install strace")),
    }
    assert_eq!(finish_untraced(&mut t), "phase 2 done 435");

    // Another user's process, as that user cannot attach to root's.
    if is_root() {
        let t = Target::start(&lab, &prog, &[]);
        let o = Command::new("setpriv")
            .args(["--reuid", &NOBODY.to_string(), "--regid", &NOBODY.to_string(), "--clear-groups"])
            .arg(MTLAB)
            .args(["record", "--pid", &t.pid().to_string(), "-o", "/tmp/never.mtl"])
            .output()
            .unwrap();
        let err = stderr(&o);
        assert!(!o.status.success(), "{err}");
        assert!(err.contains("belongs to user 0") && err.contains("CAP_SYS_PTRACE"), "{err}");
        let mut t = t;
        assert_eq!(finish_untraced(&mut t), "phase 2 done 435");
    } else {
        skip("the other-user refusal needs root (to run as nobody)");
    }
}

/// The program's two phases without mtlab: it runs as it would have.
fn finish_untraced(t: &mut Target) -> String {
    assert_eq!(t.next_phase(), "phase 1 done");
    let last = t.next_phase();
    let status = wait_within(&mut t.child, Duration::from_secs(10)).expect("the program ends");
    assert!(status.success());
    last
}

/// A process in its own mount and PID namespace (what a container is), with
/// its own /tmp: the library reaches it through /proc/PID/root, the trace is
/// written in its /tmp and brought out.
#[test]
fn attach_into_another_mount_and_pid_namespace() {
    if !is_root() {
        skip("unshare --mount --pid needs root");
        return;
    }
    let lab = Lab::new();
    let full = attach_in_namespace(&lab, "ns.mtl", &["--full"]);
    // --live: the process's watermark page is opened from the host through
    // /proc/PID/fd (its own /proc could not reach mtlab's), its trace read
    // in its /tmp through /proc/PID/root, and removed from there after.
    let live = attach_in_namespace(&lab, "ns.live", &["--live", "--snapshot-every", "0.1"]);
    assert_eq!(attach_figures(&live), attach_figures(&full));
    assert_eq!(u(&live["pid"]), 1, "its own view of its pid");
}

/// A service's process runs as a user of its own and root attaches to it
/// (`sudo mtlab record --pid`, postgres's backends): mtlab's cached library
/// and -o's directory are closed to that user (here both in the lab, 0700),
/// so the library is copied into the process's /tmp and the trace brought
/// out from there, as for a container. It failed with "its dlopen of mtlab's
/// library failed: ... Permission denied".
#[test]
fn root_attaches_to_a_process_of_another_user() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    if !is_root() {
        skip("attaching to another user's process needs root");
        return;
    }
    let lab = Lab::new();
    let prog = lab.compile("attach_phases");
    let open = tempfile::Builder::new().prefix("mtlab-e2e-other-").tempdir().unwrap();
    std::fs::set_permissions(open.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let there = open.path().join("attach_phases");
    std::fs::copy(&prog, &there).unwrap();
    let cache = lab.path("cache");
    std::fs::create_dir(&cache).unwrap();
    let mut figures = vec![];
    for (trace, extra) in [("other.mtl", &["--full"][..]), ("other.live", &["--live", "--snapshot-every", "0.1"][..])] {
        let mut child = Command::new(&there).uid(65534).gid(65534).current_dir(open.path()).stdin(Stdio::null()).stdout(Stdio::piped()).spawn().unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let mut t = Target { child, out };
        assert_eq!(t.line(), "ready");
        let pid = t.pid();
        let mut m = lab
            .command(MTLAB)
            .env("XDG_CACHE_HOME", &cache)
            .args(["record", "--pid", &pid.to_string(), "-o"])
            .arg(lab.path(trace))
            .args(extra)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(m.stderr.take().unwrap());
        let mut line = String::new();
        err.read_line(&mut line).unwrap();
        if !line.starts_with(&format!("mtlab: attached to process {pid}")) {
            let _ = t.child.kill();
            let _ = t.child.wait();
            panic!("mtlab said: {line}");
        }
        assert_eq!(t.next_phase(), "phase 1 done");
        let said = detach(m, err);
        let left: Vec<_> = std::fs::read_dir("/tmp").unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).filter(|n| n.starts_with("mtlab-attach-") && n.contains(&format!("-{pid}."))).collect();
        assert!(left.is_empty(), "nothing left in /tmp: {left:?}");
        assert_eq!(finish(t), "phase 2 done 435", "the program runs on with its own output");
        let r = lab.report(trace);
        assert_eq!(calls(&r, "malloc"), 100);
        assert_eq!(calls(&r, "free"), 70);
        assert_eq!(r["attached"]["ended_by"], "detach", "{said}");
        figures.push(attach_figures(&r));
    }
    assert_eq!(figures[0], figures[1], "the live attach counts what the full one counts");
}

/// Attaches to attach_phases in its own mount and PID namespace for phase 1; its report.
fn attach_in_namespace(lab: &Lab, trace: &str, extra: &[&str]) -> Value {
    let prog = lab.compile("attach_phases");
    let mut cmd = lab.command("unshare");
    // The program opened before its /tmp (where the lab is) is hidden by a new one.
    cmd.args(["--fork", "--pid", "--mount", "--", "sh", "-c", "exec 3<\"$0\"; mount -t tmpfs none /tmp && exec /proc/self/fd/3"]);
    cmd.arg(&prog);
    let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    let mut t = Target { child, out };
    assert_eq!(t.line(), "ready");
    // The program is unshare's child: pid 1 in its namespace.
    let inner = unshares_child(&t);
    assert!(!std::fs::read_dir(format!("/proc/{inner}/root/tmp")).unwrap().any(|e| e.unwrap().file_name() == "mtlab-e2e"));
    let (m, err) = attach(lab, inner, trace, extra);
    signal(inner, libc::SIGUSR1);
    assert_eq!(t.line(), "phase 1 done");
    detach(m, err);
    assert!(std::fs::read_dir(format!("/proc/{inner}/root/tmp")).unwrap().next().is_none(), "nothing left in its /tmp");
    signal(inner, libc::SIGUSR1);
    assert_eq!(t.line(), "phase 2 done 435");
    assert!(wait_within(&mut t.child, Duration::from_secs(10)).expect("it ends").success());
    let r = lab.report(trace);
    assert_eq!(calls(&r, "malloc"), 100);
    assert_eq!(calls(&r, "free"), 70);
    assert_eq!(u(&r["pid"]), 1, "its own view of its pid");
    assert_eq!(u(&r["attached"]["pid"]), inner as u64, "and the one mtlab attached to");
    r
}

/// A musl-linked program in a container as Alpine's are: its own mount and
/// PID namespace, and a root directory holding only musl's loader (which is
/// its C library), the program and an empty /tmp. Attached from the host:
/// the musl build of the library is copied into its /tmp through
/// /proc/PID/root, the counts are exact, and the program runs on after the
/// detach with its own output.
#[test]
fn a_musl_program_in_a_container_of_its_own() {
    let lab = Lab::new();
    let Some(prog) = lab.compile_musl("attach_phases", "musl_ct", &[]) else { return };
    let root = lab.path("musl_root");
    std::fs::create_dir_all(root.join("lib")).unwrap();
    std::fs::create_dir_all(root.join("tmp")).unwrap();
    // The loader the program names, as a file of its own in the new root.
    let loader = "/lib/ld-musl-x86_64.so.1";
    std::fs::copy(std::fs::canonicalize(loader).unwrap(), root.join(&loader[1..])).unwrap();
    std::fs::copy(&prog, root.join("phases")).unwrap();
    let mut child = match lab
        .command("unshare")
        .args(["--fork", "--pid", "--mount", "--root"])
        .arg(&root)
        .arg("/phases")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            skip(&format!("cannot run unshare ({e}): apt-get install util-linux"));
            return;
        }
    };
    let out = BufReader::new(child.stdout.take().unwrap());
    let mut t = Target { child, out };
    let first = t.line();
    if first != "ready" {
        let status = wait_within(&mut t.child, Duration::from_secs(10));
        let mut why = String::new();
        t.child.stderr.take().unwrap().read_to_string(&mut why).unwrap();
        assert!(why.contains("Operation not permitted"), "the program in its own root did not start ({status:?}): {first} {why}");
        skip(&format!("unshare --pid --mount --root is not permitted here: {}", why.trim()));
        return;
    }
    let inner = unshares_child(&t);
    let (m, err) = attach(&lab, inner, "musl_ct.mtl", &["--full"]);
    let maps = std::fs::read_to_string(format!("/proc/{inner}/maps")).unwrap();
    assert!(maps.contains("/tmp/mtlab-attach-"), "the library's copy in its /tmp is loaded:\n{maps}");
    signal(inner, libc::SIGUSR1);
    assert_eq!(t.line(), "phase 1 done");
    let said = detach(m, err);
    assert!(said.contains("musl never unloads a library"), "{said}");
    assert!(std::fs::read_dir(root.join("tmp")).unwrap().next().is_none(), "nothing left in its /tmp");
    signal(inner, libc::SIGUSR1);
    assert_eq!(t.line(), "phase 2 done 435", "it runs on with its own output");
    assert!(wait_within(&mut t.child, Duration::from_secs(10)).expect("it ends").success());
    let r = lab.report("musl_ct.mtl");
    assert_eq!(r["allocator"], "musl");
    assert_eq!((calls(&r, "malloc"), calls(&r, "calloc"), calls(&r, "free")), (100, 10, 70));
    assert_eq!(u(&r["unknown_frees"]), 20);
    assert_eq!(u(&r["pid"]), 1, "its own view of its pid");
    assert_eq!(u(&r["attached"]["pid"]), inner as u64);
}

/// The program `unshare --fork` started: its one child (pid 1 in its namespace).
fn unshares_child(t: &Target) -> i32 {
    std::fs::read_to_string(format!("/proc/{}/task/{}/children", t.pid(), t.pid()))
        .unwrap()
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .expect("unshare's child")
}
