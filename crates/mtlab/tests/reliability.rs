//! Reliability of the tracer where processes change under it (issue #32):
//! daemons that drop privileges before forking their workers, signal
//! handlers that interrupt mtlab's own code, records killed half-way, full
//! disks, and the smaller corners.

mod util;

use util::*;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// "worker PID mallocs M" from the program's stdout.
fn worker_line(stdout: &[u8]) -> (u64, u64) {
    let text = String::from_utf8_lossy(stdout);
    let line = text.lines().find(|l| l.starts_with("worker ")).unwrap_or_else(|| panic!("no worker line in {text:?}"));
    let w: Vec<&str> = line.split(' ').collect();
    (w[1].parse().unwrap(), w[3].parse().unwrap())
}

/// The daemon pattern: drop privileges (or chroot), then fork a worker. The
/// worker can no longer create its trace beside the root's (user nobody may
/// not write in the 0700 lab directory; inside the jail the path is gone), so
/// `mtlab record` makes it: the worker's calls are all there, as many as it
/// counted itself, in a file of mtlab's user that joins the run's family.
#[test]
fn workers_forked_after_setuid_or_chroot_are_traced() {
    if !is_root() {
        return skip("dropping privileges needs root (CI runs as root)");
    }
    let lab = Lab::new();
    let prog = lab.compile("drop_priv");
    let jail = lab.path("jail");
    std::fs::create_dir(&jail).unwrap();
    let n = 100_000u64;
    for mode in ["setuid", "chroot"] {
        let trace = format!("{mode}.mtl");
        let o = lab.record_cmd(&trace, &[], &prog, &[mode, &n.to_string(), "fork"]).env("DROP_ROOT", &jail).output().unwrap();
        assert_success(&o, &format!("drop_priv {mode} fork"));
        let (pid, made) = worker_line(&o.stdout);
        assert_eq!(made, n, "{mode}: the worker's own count");
        assert!(stderr(&o).contains("(2 trace files"), "{mode}: {}", stderr(&o));
        assert!(!stderr(&o).contains("not traced"), "{mode}: {}", stderr(&o));
        let child = lab.path(&format!("{trace}.{pid}"));
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(&child).unwrap_or_else(|e| panic!("{mode}: {}: {e}", child.display()));
        assert_eq!((m.uid(), m.mode() & 0o777), (0, 0o600), "{mode}: mtlab's user's, private");
        let r = lab.report(&trace);
        let w = processes(&r).into_iter().find(|p| u(&p["pid"]) == pid).unwrap_or_else(|| panic!("{mode}: worker {pid} in {r}"));
        strict(w);
        assert_eq!(w["clean_end"], true, "{mode}");
        assert_eq!(site(w, "after_drop").calls, made, "{mode}: every malloc the worker made");
        assert_eq!(calls(w, "free"), made, "{mode}");
    }
}

/// Runs `script` as root in a private mount namespace (`unshare -m`), where
/// it may mount a tmpfs that no other process sees; None (skipped) where
/// that is not possible. `$MTLAB` is mtlab, the working directory the lab.
fn in_private_mounts(lab: &Lab, script: &str) -> Option<std::process::Output> {
    if !is_root() {
        skip("a private tmpfs needs root and unshare -m");
        return None;
    }
    let full = format!("set -e\n{script}");
    match lab.command("unshare").args(["-m", "sh", "-c", &full]).env("MTLAB", MTLAB).output() {
        Ok(o) if !stderr(&o).contains("unshare:") => Some(o),
        other => {
            skip(&format!("no unshare -m here: {other:?}"));
            None
        }
    }
}

/// Pids a fork_many run printed ("child PID I").
fn forked_pids(stdout: &[u8]) -> Vec<u64> {
    String::from_utf8_lossy(stdout).lines().filter_map(|l| l.strip_prefix("child ")?.split(' ').next()?.parse().ok()).collect()
}

/// Where no trace file can be made for a process — here the file system has
/// no inodes left once the root trace and the first child's exist — the
/// processes that got none are counted and named, not passed over.
#[test]
fn processes_that_get_no_trace_file_are_counted_and_named() {
    let lab = Lab::new();
    let prog = lab.compile("fork_many");
    std::fs::create_dir(lab.path("d")).unwrap();
    let script = format!(
        "mount -t tmpfs -o size=4m,nr_inodes=3 tmpfs d\n\"$MTLAB\" record -o d/f.mtl -- {} 20 10 > out 2> err || true\n",
        prog.display()
    );
    let Some(o) = in_private_mounts(&lab, &script) else { return };
    assert_success(&o, "unshare + record");
    let out = std::fs::read(lab.path("out")).unwrap();
    let err = std::fs::read_to_string(lab.path("err")).unwrap();
    let pids = forked_pids(&out);
    assert_eq!(pids.len(), 20, "{err}");
    let line = err.lines().find(|l| l.contains("were not traced")).unwrap_or_else(|| panic!("no untraced warning: {err}"));
    // The root's trace and one child's fit: the other 19 children have none.
    assert!(line.contains("19 process(es) of the run were not traced"), "{line}");
    assert!(line.contains("No space left on device"), "{line}");
    let named = pids.iter().filter(|p| line.contains(&format!(" {p} (fork_many)"))).count();
    assert_eq!(named, 10, "the first ten are named in the line: {line}");
}

/// A SIGPROF handler that allocates while the traced loop runs: every one of
/// its mallocs is either in the trace or counted as untraced (it interrupted
/// mtlab's own code), so together they are the handler's own count — before,
/// most were missing and nothing said so. Its calls that interrupted the heap
/// manager's call mtlab was timing are traced.
#[test]
fn a_signal_handlers_allocations_are_traced_or_counted() {
    let lab = Lab::new();
    let prog = lab.compile_linked("sig_alloc", "sig_hook");
    // Depth 1: the handler's site is one, whatever it interrupted.
    let o = lab.record_cmd("s.mtl", &["--depth", "1"], &prog, &["200000"]).output().unwrap();
    assert_success(&o, "sig_alloc");
    let text = String::from_utf8_lossy(&o.stdout);
    let made: u64 = text.trim().strip_prefix("handler mallocs ").and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{text}"));
    let r = lab.report("s.mtl");
    let traced = site(&r, "in_handler").calls;
    let untraced = u(&r["signal_calls_untraced"]);
    assert_eq!(untraced % 2, 0, "a handler's malloc and free share their fate");
    assert_eq!(traced + untraced / 2, made, "traced {traced}, untraced {untraced}, made {made}");
    assert!(traced > made / 2, "most of the handler's calls interrupted the heap manager and are traced: {traced} of {made}");
    assert!(untraced > 0, "some interrupted mtlab's own code: {made} handler calls");
    let text = lab.command(MTLAB).args(["report", "s.mtl"]).output().unwrap();
    assert!(String::from_utf8_lossy(&text.stdout).contains("allocator call(s) made by signal handlers are not in the trace"));
}
