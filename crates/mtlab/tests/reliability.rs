//! Reliability of the tracer where processes change under it (issue #32):
//! daemons that drop privileges before forking their workers, signal
//! handlers that interrupt mtlab's own code, records killed half-way, full
//! disks, and the smaller corners.

mod util;

use util::*;

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
        let child = lab.path(&format!("{trace}.d/{pid}"));
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
/// no inodes left once the root trace, the children's directory and the
/// first child's trace exist (the rewrite during the run is off: its temp
/// file would take the first child's inode when it starts first) — the
/// processes that got none are counted and named, not passed over.
#[test]
fn processes_that_get_no_trace_file_are_counted_and_named() {
    let lab = Lab::new();
    let prog = lab.compile("fork_many");
    std::fs::create_dir(lab.path("d")).unwrap();
    let script = format!(
        "mount -t tmpfs -o size=4m,nr_inodes=4 tmpfs d\nMTLAB_LIVE_FINISH=off \"$MTLAB\" record -o d/f.mtl -- {} 20 10 > out 2> err || true\n",
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

/// No signal is delivered, but every sigaction() leaves the restorer's
/// address in a dead stack slot. Taken for a signal frame, it made the
/// allocator's nested call (glibc's reallocarray calls realloc) a handler's
/// call, recorded beside the outer one: the same block twice (found on
/// node, whose first operator new recorded its inner malloc too).
#[test]
fn a_stale_restorer_on_the_stack_is_not_taken_for_a_signal_frame() {
    let lab = Lab::new();
    let prog = lab.compile("stale_restorer");
    let o = lab.record_ok("r.mtl", &prog, &[]);
    let text = String::from_utf8_lossy(&o.stdout);
    let made: u64 = text.trim().strip_prefix("reallocarray ").and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{text}"));
    let r = lab.report("r.mtl");
    assert_eq!(calls(&r, "reallocarray"), made);
    assert_eq!(calls(&r, "realloc"), 0, "reallocarray's inner realloc recorded as a call of its own");
    assert_eq!(u(&r["overlapping_allocs"]), 0);
    assert_eq!(u(&r["signal_calls_untraced"]), 0);
}

/// Waits (up to 20 s) until no process runs `prog`.
fn wait_gone(prog: &std::path::Path) {
    for _ in 0..2000 {
        let running = std::fs::read_dir("/proc").unwrap().flatten().any(|e| std::fs::read_link(e.path().join("exe")).is_ok_and(|x| x == prog));
        if !running {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("{} still runs", prog.display());
}

/// `mtlab record` killed (SIGKILL) while it rewrote the trace during the run:
/// the program runs on to its end; nothing hidden is left beside the trace
/// (the rewrite's file had no name), and a report of the trace as the
/// library wrote it says its figures are unverified — and, when the rewrite
/// had released raw records from the file, that their events are missing.
#[test]
fn a_killed_record_leaves_no_hidden_file_and_its_raw_trace_is_called_unverified() {
    let lab = Lab::new();
    let prog = lab.compile("phased_mallocs");
    let mut rec = lab.record_cmd("k.mtl", &[], &prog, &["10", "20000"]).env("MTLAB_LIVE_FINISH", "always").spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(400));
    rec.kill().unwrap();
    rec.wait().unwrap();
    wait_gone(&prog);
    let hidden = lab.files_with_prefix(".k.mtl");
    assert_eq!(hidden, Vec::<String>::new(), "left beside the trace");
    let r = lab.report("k.mtl");
    assert_eq!(r["clean_end"], true, "the program ran to its end");
    let w = r["warnings"].to_string();
    assert!(w.contains("never finished by `mtlab record`") && w.contains("unverified"), "{w}");
    let mallocs = calls(&r, "malloc");
    assert!(mallocs <= 200_000, "{mallocs}");
    if mallocs < 200_000 {
        assert!(w.contains("were released from the file and are missing"), "{mallocs} mallocs read, yet: {w}");
    } else {
        assert!(!w.contains("released"), "{w}");
    }
    // A finished trace says nothing of the kind.
    lab.record_ok("f.mtl", &prog, &["1", "10"]);
    assert!(!lab.report("f.mtl")["warnings"].to_string().contains("unverified"));
}

/// A sampled run killed together with its `mtlab record` (both SIGKILL) left
/// its control page in /dev/shm for good: only a later run of the same
/// recording removed it. Now the next `mtlab record` of the user does. In a
/// private /dev/shm.
#[test]
fn a_control_page_left_by_a_killed_run_is_reclaimed_by_the_next_record() {
    let lab = Lab::new();
    let prog = lab.compile("phased_mallocs");
    let script = format!(
        "mount -t tmpfs -o mode=1777 tmpfs /dev/shm\n\
         \"$MTLAB\" record --sample 4KiB -o a.mtl -- {prog} 20 10000 2> /dev/null &\n\
         rec=$!\n\
         for i in $(seq 100); do ls /dev/shm | grep -q mtlab- && break; sleep 0.02; done\n\
         page=$(ls /dev/shm | grep mtlab-)\n\
         kill -9 $rec ${{page#mtlab-}}\n\
         wait $rec || true\n\
         sleep 0.1\n\
         ls /dev/shm > before\n\
         \"$MTLAB\" record --sample 4KiB -o b.mtl -- /bin/true 2> /dev/null\n\
         ls /dev/shm > after\n",
        prog = prog.display()
    );
    let Some(o) = in_private_mounts(&lab, &script) else { return };
    assert_success(&o, "unshare + two records");
    let before = std::fs::read_to_string(lab.path("before")).unwrap();
    let after = std::fs::read_to_string(lab.path("after")).unwrap();
    assert!(before.contains("mtlab-"), "the killed run's page: {before:?}");
    assert_eq!(after.trim(), "", "reclaimed by the next record");
}

/// A trace cut by a full disk, with no room left for record's rewrite
/// (another file holds part of the disk; no rewrite while the program runs):
/// its report still says how the program ended (the run's facts are added
/// to the trace as written).
#[test]
fn a_trace_cut_by_a_full_disk_keeps_the_exit_status() {
    let lab = Lab::new();
    // A one-thread program's trace rewrites into ~1 % of its rows (rounded
    // time stamps): 8 MiB of rows, with every call's cycles, so that the
    // rewrite needs more room than the one chunk the cut leaves.
    let prog = lab.compile("n_mallocs");
    std::fs::create_dir(lab.path("d")).unwrap();
    let script = format!(
        "mount -t tmpfs -o size=8m tmpfs d\nhead -c 100000 /dev/zero > d/fill\n\
         MTLAB_LIVE_FINISH=off \"$MTLAB\" record --time every -o d/t.mtl -- {} 1000000 48 0 2> err\n\
         \"$MTLAB\" report --json d/t.mtl > report.json\n",
        prog.display()
    );
    let Some(o) = in_private_mounts(&lab, &script) else { return };
    assert_success(&o, "unshare + record on a full disk");
    let err = std::fs::read_to_string(lab.path("err")).unwrap();
    assert!(err.contains("not finished (left as written; the exit status and run facts were added to it)"), "{err}");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(lab.path("report.json")).unwrap()).unwrap();
    assert_eq!(r["exit"], "exit code 0", "{err}");
    assert_eq!(r["clean_end"], true);
    assert!(r["warnings"].to_string().contains("unverified"));
}

/// A compact trace cut short (a full disk, a partial copy) lost its last
/// record, RUNINFO, which marked it compact: it read as exact and was
/// compacted again. The header says so too now.
#[test]
fn a_truncated_compact_trace_stays_compact() {
    let lab = Lab::new();
    let prog = lab.compile("n_mallocs");
    lab.record_ok("t.mtl", &prog, &["20000", "32", "0"]);
    let o = lab.command(MTLAB).args(["compact", "t.mtl", "-o", "c.mtl"]).output().unwrap();
    assert_success(&o, "mtlab compact");
    let c = lab.path("c.mtl");
    let len = std::fs::metadata(&c).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&c).unwrap().set_len(len * 3 / 4).unwrap();
    let o = lab.command(MTLAB).args(["compact", "c.mtl"]).output().unwrap();
    assert!(!o.status.success() && stderr(&o).contains("compact already"), "{}", stderr(&o));
    let r = lab.report("c.mtl");
    assert!(r["compact_quantum_ticks"].as_u64().is_some(), "reported as compact");
}

/// The results store on a read-only file system can still be listed (it is
/// opened read-only for reading), and a full disk is named as such, not as
/// "disk I/O error". In a private mount namespace.
#[test]
fn the_store_reads_from_a_read_only_file_system_and_names_a_full_disk() {
    let lab = Lab::new();
    let script = "mkdir s f\n\
         \"$MTLAB\" bench program --reps 1 --no-heaptrack -q --store s/runs.sqlite -- true > /dev/null 2>&1\n\
         mount --bind s s\nmount -o remount,bind,ro s s\n\
         \"$MTLAB\" runs --store s/runs.sqlite --json > list.json 2> list.err || true\n\
         mount -t tmpfs -o size=64k tmpfs f\nhead -c 40000 /dev/zero > f/fill\n\
         \"$MTLAB\" bench program --reps 1 --no-heaptrack -q --store f/runs.sqlite -- true > /dev/null 2> full.err || true\n";
    let Some(o) = in_private_mounts(&lab, script) else { return };
    assert_success(&o, "unshare + store on a read-only and a full file system");
    let err = std::fs::read_to_string(lab.path("list.err")).unwrap();
    let list: serde_json::Value = serde_json::from_slice(&std::fs::read(lab.path("list.json")).unwrap()).unwrap_or_else(|e| panic!("{e}: {err}"));
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list} {err}");
    let full = std::fs::read_to_string(lab.path("full.err")).unwrap();
    assert!(full.contains("is full") && !full.contains("disk I/O error"), "{full}");
}

/// #32 item 7: a thread made by the clone system call without CLONE_SETTLS
/// shares its creator's thread storage, and its frames lie outside the stack
/// that storage knows: its calls were all "(no stack recorded)". Now they are
/// traced with their stacks under each unwinder (and in sampling mode), and
/// counted, since they are written under the creator's thread.
#[test]
fn a_thread_made_by_raw_clone_without_tls_gets_its_stacks_and_is_counted() {
    let lab = Lab::new();
    let prog = lab.compile("raw_clone");
    for unwind in ["dwarf", "fp", "libgcc"] {
        let trace = format!("c-{unwind}.mtl");
        let o = lab.record_cmd(&trace, &["--unwind", unwind], &prog, &["3000", "700", "48"]).output().unwrap();
        assert_success(&o, "raw_clone");
        let r = lab.report(&trace);
        assert_eq!(u(&r["functions"]["malloc"]["calls"]), 3700, "{unwind}");
        assert_eq!(site(&r, "clone_worker").calls, 3000, "{unwind}: the clone thread's calls under its own function");
        assert_eq!(site(&r, "parent_work").calls, 700, "{unwind}");
        assert_eq!(site(&r, "(no stack recorded)").calls + site(&r, "").calls, 0, "{unwind}");
        // The thread's calls whose stack was taken: its 3000 mallocs (frees have none).
        assert_eq!(u(&r["shared_tls_calls"]), 3000, "{unwind}");
    }
    let text = lab.command(MTLAB).args(["report", "c-dwarf.mtl"]).output().unwrap();
    assert!(String::from_utf8_lossy(&text.stdout).contains("3000 allocation(s) came from threads made by the clone system call"));
    // Sampling: the thread's samples carry its function too.
    let o = lab.record_cmd("c-s.mtl", &["--sample", "4096", "--sample-seed", "3"], &prog, &["3000", "700", "48"]).output().unwrap();
    assert_success(&o, "raw_clone sampled");
    let r = lab.report("c-s.mtl");
    let sampled = r["profile"].to_string();
    assert!(sampled.contains("clone_worker"), "{sampled}");
}

/// A service stopped with SIGTERM while idle: a killed process writes none
/// of its threads' buffers, and this trace had none of the worker's 300
/// mallocs nor the main thread's last 500 (and nothing said so). `record`
/// copies quiet threads' buffers while the program runs and adds them to
/// the trace of a program killed by a signal: every call is in it, once —
/// the main thread's first buffer, copied and then written by the thread
/// itself, is not added twice.
#[test]
fn a_program_killed_while_idle_keeps_the_events_its_quiet_threads_buffered() {
    use std::io::BufRead;
    let lab = Lab::new();
    let prog = lab.compile("quiet_then_killed");
    let mut rec = lab.record_cmd("q.mtl", &[], &prog, &[]).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    std::io::BufReader::new(rec.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    // Two looks of `record`'s at the quiet buffers (every 120 ms), with room for a loaded host.
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let pid = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .find(|e| std::fs::read_link(e.path().join("exe")).is_ok_and(|x| x == prog))
        .map(|e| e.file_name().into_string().unwrap())
        .expect("the program runs");
    assert!(lab.command("kill").args(["-TERM", &pid]).status().unwrap().success());
    let o = rec.wait_with_output().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(o.status.signal(), Some(15), "the program's death passed on: {}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("of 2 threads that had gone quiet were copied"), "{err}");
    let r = lab.report("q.mtl");
    assert_eq!(calls(&r, "malloc"), 1800, "main 1000 + 500, worker 300");
    assert_eq!(u(&r["end"]["live_objects"]), 1800 + calls(&r, "calloc"), "nothing freed");
    let salvaged = u(&r["salvaged_events"]);
    assert!((800..1800).contains(&salvaged), "the worker's 300 and the main thread's last 500 at least, not its first 1 000: {salvaged}");
    let text = lab.command(MTLAB).args(["report", "q.mtl"]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains(&format!("but for {salvaged} events of quiet threads")), "{text}");
}
