//! Helpers for the end-to-end tests: compile a test program from
//! native/tests/, record it with the built `mtlab`, read `mtlab report --json`.
//!
//! Every test works in its own temporary directory (also the working
//! directory of every command it runs), so tests can run in parallel.

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

pub mod collector;

pub const MTLAB: &str = env!("CARGO_BIN_EXE_mtlab");

/// A part of a test that cannot run here. Under `CI=true` that is a failure
/// (CI installs everything the tests need); elsewhere it is said and skipped.
/// Said on stderr itself, not through `eprintln!`, which the test harness
/// captures: a plain `cargo test` shows the line among the test names.
pub fn skip(why: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("would be SKIPPED, but CI=true and CI installs what the tests need: {why}");
    }
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED {why}");
}

/// Bytes as mtlab's reports and pages round them (1024-based, one decimal):
/// `human_bytes` in units.rs.
pub fn human(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut v, mut i) = (b as f64, 0);
    while v >= 1024.0 && i < units.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 { format!("{b} B") } else { format!("{v:.1} {}", units[i]) }
}

/// `--top` for every report: large enough that the site tables are complete
/// for the test programs (checked in [`site`]).
pub const TOP: usize = 1000;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

pub fn test_source(name: &str) -> PathBuf {
    repo_root().join("native/tests").join(format!("{name}.c"))
}

/// 1-based number of the first line of native/tests/NAME.c containing `needle`.
pub fn source_line(name: &str, needle: &str) -> u64 {
    let text = std::fs::read_to_string(test_source(name)).unwrap();
    let idx = text.lines().position(|l| l.contains(needle)).unwrap_or_else(|| panic!("{needle:?} not in {name}.c"));
    idx as u64 + 1
}

pub struct Lab {
    pub dir: tempfile::TempDir,
}

impl Default for Lab {
    fn default() -> Self {
        Self::new()
    }
}

impl Lab {
    pub fn new() -> Lab {
        Lab { dir: tempfile::Builder::new().prefix("mtlab-e2e-").tempdir().unwrap() }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Compiles native/tests/NAME.c into the lab as NAME.
    pub fn compile(&self, name: &str) -> PathBuf {
        self.compile_as(name, name, &[])
    }

    /// Compiles native/tests/NAME.c into the lab as OUT, with EXTRA after the usual flags.
    pub fn compile_as(&self, name: &str, out: &str, extra: &[&str]) -> PathBuf {
        let out = self.path(out);
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let o = Command::new(&cc)
            .args(["-O0", "-g", "-fno-omit-frame-pointer", "-pthread", "-Wall", "-Wextra"])
            .args(extra)
            .arg("-o")
            .arg(&out)
            .arg(test_source(name))
            .output()
            .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
        assert!(o.status.success(), "compiling {name}.c failed:\n{}", String::from_utf8_lossy(&o.stderr));
        out
    }

    /// Compiles native/tests/NAME.c with musl-gcc into the lab as OUT, with
    /// EXTRA after the usual flags; None (said as SKIPPED, a failure under
    /// CI) where musl-gcc is not installed. musl-gcc has no kernel headers
    /// of its own: the system's are offered after musl's, as build.rs does.
    pub fn compile_musl(&self, name: &str, out: &str, extra: &[&str]) -> Option<PathBuf> {
        let Some(musl_gcc) = find_in_path("musl-gcc") else {
            skip("(musl part): musl-gcc is not installed (.ci/run installs musl-tools)");
            return None;
        };
        let headers = self.path("musl-kernel-headers");
        if !headers.exists() {
            std::fs::create_dir(&headers).unwrap();
            let asm = ["/usr/include/x86_64-linux-gnu/asm", "/usr/include/asm"].into_iter().find(|p| Path::new(p).is_dir()).unwrap();
            for (link, target) in [("linux", "/usr/include/linux"), ("asm", asm), ("asm-generic", "/usr/include/asm-generic")] {
                std::os::unix::fs::symlink(target, headers.join(link)).unwrap();
            }
        }
        let out = self.path(out);
        let o = Command::new(&musl_gcc)
            .args(["-O0", "-g", "-fno-omit-frame-pointer", "-pthread", "-Wall", "-Wextra", "-idirafter"])
            .arg(&headers)
            .args(extra)
            .arg("-o")
            .arg(&out)
            .arg(test_source(name))
            .output()
            .unwrap();
        assert!(o.status.success(), "musl-gcc {name}.c failed:\n{}", String::from_utf8_lossy(&o.stderr));
        Some(out)
    }

    /// Compiles native/tests/LIB.c as the shared library libLIB.so in the lab.
    pub fn compile_shared(&self, lib: &str) -> PathBuf {
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let so = self.path(&format!("lib{lib}.so"));
        let o = Command::new(&cc)
            .args(["-O0", "-g", "-fPIC", "-shared", "-o"])
            .arg(&so)
            .arg(test_source(lib))
            .output()
            .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
        assert!(o.status.success(), "compiling {lib} failed:\n{}", String::from_utf8_lossy(&o.stderr));
        so
    }

    /// Compiles native/tests/LIB.c as the shared library libLIB.so and
    /// native/tests/NAME.c linked to it (found through its run path), as NAME.
    pub fn compile_linked(&self, name: &str, lib: &str) -> PathBuf {
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let build = |args: &mut Command, what: &str| {
            let o = args.output().unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
            assert!(o.status.success(), "compiling {what} failed:\n{}", String::from_utf8_lossy(&o.stderr));
        };
        self.compile_shared(lib);
        let out = self.path(name);
        let dir = self.dir.path();
        build(
            Command::new(&cc)
                .args(["-O0", "-g", "-fno-omit-frame-pointer", "-o"])
                .arg(&out)
                .arg(test_source(name))
                .arg(format!("-L{}", dir.display()))
                .arg(format!("-l{lib}"))
                .arg(format!("-Wl,-rpath,{}", dir.display())),
            name,
        );
        out
    }

    /// A command run in the lab directory with stdin closed; study runs go
    /// to the lab's own results store, never the user's.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(program);
        c.current_dir(self.dir.path()).stdin(Stdio::null()).env("MTLAB_STORE", self.store());
        c
    }

    /// The lab's results store.
    pub fn store(&self) -> PathBuf {
        self.path("runs.sqlite")
    }

    /// `mtlab ARGS --json` (before any `--`), which must succeed, parsed.
    pub fn mtlab_json(&self, args: &[&str]) -> Value {
        let split = args.iter().position(|a| *a == "--").unwrap_or(args.len());
        let o = self.command(MTLAB).args(&args[..split]).arg("--json").args(&args[split..]).output().unwrap();
        assert_success(&o, &format!("mtlab {}", args.join(" ")));
        let v: Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("mtlab {} --json: {e}\n{}", args.join(" "), String::from_utf8_lossy(&o.stdout)));
        assert_metrics_documented(&v);
        v
    }

    /// `mtlab record [extra] -o TRACE -- PROGRAM ARGS...`
    pub fn record_cmd(&self, trace: &str, extra: &[&str], program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Command {
        let mut c = self.command(MTLAB);
        c.arg("record").args(extra).arg("-o").arg(self.path(trace)).arg("--").arg(program).args(args);
        c
    }

    pub fn record(&self, trace: &str, program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Output {
        self.record_cmd(trace, &[], program, args).output().unwrap()
    }

    /// Records and asserts that the program exited 0.
    pub fn record_ok(&self, trace: &str, program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Output {
        let o = self.record(trace, program, args);
        assert_success(&o, "mtlab record");
        o
    }

    /// `mtlab report --json --top TOP FILE`, checked for success, parsed,
    /// and checked against the invariants of [`sanity`].
    pub fn report(&self, trace: &str) -> Value {
        self.report_path(&self.path(trace))
    }

    pub fn report_path(&self, trace: &Path) -> Value {
        let o = self.command(MTLAB).args(["report", "--json", "--top", &TOP.to_string()]).arg(trace).output().unwrap();
        assert_success(&o, "mtlab report --json");
        let v: Value = serde_json::from_slice(&o.stdout).expect("report --json prints JSON");
        for p in processes(&v) {
            sanity(p);
        }
        v
    }

    /// A run's trace files as `record -o ROOT` writes them: `ROOT`, then
    /// `ROOT.d/NAME` for every file in `ROOT.d` (the descendants'), sorted;
    /// and nothing else in the lab starts with ROOT but `ROOT.d`.
    pub fn family(&self, root: &str) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        let beside = self.files_with_prefix(root);
        assert!(beside.iter().all(|n| n == root || *n == format!("{root}.d")), "only ROOT and ROOT.d: {beside:?}");
        if beside.iter().any(|n| n == root) {
            v.push(root.to_string());
        }
        let tree = self.dir.path().join(format!("{root}.d"));
        let mut children: Vec<String> = std::fs::read_dir(&tree)
            .into_iter()
            .flatten()
            .map(|e| format!("{root}.d/{}", e.unwrap().file_name().to_string_lossy()))
            .collect();
        children.sort();
        v.extend(children);
        v
    }

    /// Names of the files in the lab starting with `prefix`, sorted.
    pub fn files_with_prefix(&self, prefix: &str) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .filter(|n| n.starts_with(prefix))
            .collect();
        v.sort();
        v
    }
}

/// The first executable file called `name` in PATH.
pub fn find_in_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(name)).find(|p| p.is_file())
}

/// Waits for `child` at most `limit`; kills it and returns None after that (a hang).
pub fn wait_within(child: &mut std::process::Child, limit: std::time::Duration) -> Option<std::process::ExitStatus> {
    let start = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

pub fn assert_success(o: &Output, what: &str) {
    assert!(
        o.status.success(),
        "{what} failed: {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

/// The program's own stderr from a `mtlab record` run: mtlab only ever adds
/// whole lines starting with "mtlab:" after the program ended.
pub fn program_stderr(o: &Output) -> String {
    let s = stderr(o);
    let mut lines: Vec<&str> = s.split_inclusive('\n').collect();
    while lines.last().is_some_and(|l| l.starts_with("mtlab:")) {
        lines.pop();
    }
    lines.concat()
}

/// Feeds `input` to a command's stdin and collects its output.
pub fn run_with_stdin(mut cmd: Command, input: &[u8]) -> Output {
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

/// The root process and all children of a JSON report.
pub fn processes(v: &Value) -> Vec<&Value> {
    let mut out = vec![v];
    if let Some(children) = v["children"].as_array() {
        out.extend(children.iter());
    }
    out
}

pub fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an unsigned number: {v}"))
}

pub fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

pub fn calls(p: &Value, func: &str) -> u64 {
    u(&p["functions"][func]["calls"])
}

pub fn failed(p: &Value, func: &str) -> u64 {
    u(&p["functions"][func]["failed"])
}

pub fn mean_size(p: &Value, func: &str) -> f64 {
    f(&p["functions"][func]["mean_size"])
}

/// Total of the sizes behind `mean_size` (mean × calls), rounded: exact for
/// the integer totals of the test programs.
pub fn total_size(p: &Value, func: &str) -> u64 {
    (mean_size(p, func) * calls(p, func) as f64).round() as u64
}

/// `calls(p) - calls(base)` for every function, as (name, delta) pairs with a
/// non-zero delta, sorted by name.
pub fn call_deltas(p: &Value, base: &Value) -> Vec<(String, i64)> {
    let funcs = p["functions"].as_object().unwrap();
    let mut out: Vec<(String, i64)> = funcs
        .keys()
        .map(|k| (k.clone(), calls(p, k) as i64 - calls(base, k) as i64))
        .filter(|(_, d)| *d != 0)
        .collect();
    out.sort();
    out
}

pub fn deltas(list: &[(&str, i64)]) -> Vec<(String, i64)> {
    let mut v: Vec<(String, i64)> = list.iter().map(|(k, d)| (k.to_string(), *d)).collect();
    v.sort();
    v
}

pub fn live_bytes_end(p: &Value) -> u64 {
    u(&p["end"]["live_bytes"])
}

pub fn live_bytes_peak(p: &Value) -> u64 {
    u(&p["peak"]["live_bytes"])
}

/// Sum over the allocation sites whose innermost frame is `function`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Site {
    pub calls: u64,
    pub bytes: u64,
    pub live_objects: u64,
    pub live_bytes: u64,
}

pub fn site(p: &Value, function: &str) -> Site {
    let sites = p["top_sites"]["by_calls"].as_array().unwrap();
    assert!(sites.len() < TOP, "site table may be cut at --top {TOP}: raise TOP");
    let mut s = Site::default();
    for site in sites {
        if site["frames"][0]["function"].as_str() == Some(function) {
            s.calls += u(&site["calls"]);
            s.bytes += u(&site["bytes"]);
            s.live_objects += u(&site["live_objects"]);
            s.live_bytes += u(&site["live_bytes"]);
        }
    }
    s
}

pub fn site_of(calls: u64, bytes: u64, live_objects: u64, live_bytes: u64) -> Site {
    Site { calls, bytes, live_objects, live_bytes }
}

fn check_unit(what: &str, x: f64) {
    assert!((0.0..=1.0).contains(&x), "{what} = {x} is outside [0, 1]");
}

/// A lean trace's report (`mtlab compact --lean`): its figures from block addresses are null.
pub fn is_lean(p: &Value) -> bool {
    p["compact_lean"].as_bool() == Some(true)
}

/// The figures of a snapshot that come from block addresses.
pub const FROM_ADDRESSES: [&str; 4] = ["/fragmentation/total", "/fragmentation/mean", "/utilization", "/unplaced_bytes"];

/// `addresses`: the snapshot's figures from block addresses are real
/// (else they must be null: a lean trace's).
fn check_snapshot(what: &str, s: &Value, addresses: bool) {
    if !addresses {
        for key in FROM_ADDRESSES {
            assert!(s.pointer(key).is_some_and(Value::is_null), "{what}{key} is {:?}, not null", s.pointer(key));
        }
    } else {
        check_unit(&format!("{what}.fragmentation.total"), f(&s["fragmentation"]["total"]));
        check_unit(&format!("{what}.fragmentation.mean"), f(&s["fragmentation"]["mean"]));
        check_unit(&format!("{what}.utilization"), f(&s["utilization"]));
        assert!(u(&s["unplaced_bytes"]) <= u(&s["live_bytes"]), "{what}: more unplaced than live bytes");
    }
    assert!(u(&s["live_usable_bytes"]) >= u(&s["live_bytes"]), "{what}: usable bytes below requested bytes");
    assert_eq!(u(&s["mapped_bytes"]), u(&s["brk_bytes"]) + u(&s["mmap_bytes"]), "{what}: mapped != brk + mmap");
    assert!(u(&s["mmap_regions"]) <= u(&s["regions"]), "{what}: regions");
}

/// Invariants every process report must satisfy, whatever the program.
pub fn sanity(p: &Value) {
    let who = format!("process {} {:?}", p["pid"], p["cmdline"]);
    if !p["profile"].is_null() {
        // A sampled trace: its estimates are in `profile`, and what it does not measure is null, not zero.
        for key in ["events", "functions", "peak", "end", "space_peak", "space_end", "temporary", "leaks", "top_sites", "time_series"] {
            assert!(p[key].is_null(), "{who}: a sampled trace's {key} is {}", p[key]);
        }
        return;
    }
    let funcs = p["functions"].as_object().unwrap();
    let mut sum_calls = 0;
    for (name, fr) in funcs {
        let c = u(&fr["calls"]);
        sum_calls += c;
        assert!(u(&fr["failed"]) <= c, "{who}: {name} failed > calls");
        let cy = &fr["cycles"];
        assert!(u(&cy["timed"]) <= c, "{who}: {name} more calls timed than made");
        if u(&cy["timed"]) > 0 {
            let (p50, p99, max, mean) = (u(&cy["p50"]), u(&cy["p99"]), u(&cy["max"]), f(&cy["mean"]));
            assert!(p50 <= p99 && p99 <= max, "{who}: {name} cycles p50 {p50} p99 {p99} max {max}");
            assert!(mean <= max as f64 * 1.01 + 1.0, "{who}: {name} mean cycles {mean} above max {max}");
        }
    }
    assert_eq!(u(&p["events"]), sum_calls, "{who}: events != sum of calls");
    let lean = is_lean(p);
    check_snapshot(&format!("{who} end"), &p["end"], !lean);
    // A lean trace's peak has them when it was measured before compaction.
    check_snapshot(&format!("{who} peak"), &p["peak"], !lean || !p["peak"]["utilization"].is_null());
    assert!(live_bytes_peak(p) >= live_bytes_end(p), "{who}: peak below end");
    assert!(u(&p["peak"]["at_event"]) <= u(&p["events"]), "{who}: peak after the last event");
    assert_eq!(u(&p["leaks"]["bytes"]), live_bytes_end(p), "{who}: leaks.bytes");
    assert_eq!(u(&p["leaks"]["objects"]), u(&p["end"]["live_objects"]), "{who}: leaks.objects");
    let mut last_event = 0;
    let mut last_ns = 0;
    for (i, pt) in p["time_series"].as_array().unwrap().iter().enumerate() {
        let what = format!("{who} time_series[{i}]");
        for key in ["fragmentation_total", "fragmentation_mean", "utilization"] {
            match lean {
                true => assert!(pt[key].is_null(), "{what}.{key} is {}, not null", pt[key]),
                false => check_unit(&format!("{what}.{key}"), f(&pt[key])),
            }
        }
        let ev = u(&pt["event"]);
        assert!(ev >= last_event && ev <= u(&p["events"]), "{what}: event {ev}");
        last_event = ev;
        if let Some(ns) = pt["ns"].as_u64() {
            assert!(ns >= last_ns, "{what}: time goes back ({ns} < {last_ns})");
            last_ns = ns;
        }
    }
    if let Some(d) = p["duration_ns"].as_u64() {
        assert!(last_ns <= d, "{who}: a point at {last_ns} ns is after the duration {d} ns");
    }
    let clean = p["clean_end"].as_bool().unwrap();
    assert_eq!(clean, !p["events_dropped"].is_null(), "{who}: events_dropped is known exactly when the end is clean");
}

/// Asserts the invariants that hold for the test programs (glibc malloc,
/// every block freed was allocated while traced).
pub fn strict(p: &Value) {
    let who = format!("process {} {:?}", p["pid"], p["cmdline"]);
    assert_eq!(p["allocator"], "glibc", "{who}");
    assert_eq!(u(&p["unknown_frees"]), 0, "{who}: unknown frees");
    assert_eq!(u(&p["overlapping_allocs"]), 0, "{who}: overlapping allocations");
    if !is_lean(p) {
        assert_eq!(u(&p["end"]["unplaced_bytes"]), 0, "{who}: live bytes outside every known region");
    }
    assert!(p["warnings"].as_array().unwrap().is_empty(), "{who}: warnings {}", p["warnings"]);
    if p["clean_end"].as_bool().unwrap() {
        assert_eq!(u(&p["events_dropped"]), 0, "{who}: events dropped");
        assert_eq!(u(&p["chunks_dropped"]), 0, "{who}: chunks dropped");
        assert_eq!(u(&p["stacks_overflowed"]), 0, "{who}: stacks overflowed");
    }
}

/// One record of a trace file, from its raw bytes (docs/trace-format.md).
#[derive(Debug, Clone, Copy)]
pub struct RawRecord {
    pub offset: u64,
    pub end: u64,
    pub ty: u16,
    pub flags: u16,
}

/// The records of a complete trace file, in file order.
pub fn raw_records(bytes: &[u8]) -> Vec<RawRecord> {
    assert_eq!(&bytes[..8], b"MTLABTR\0");
    let text_len = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as u64;
    let mut off = 16 + text_len;
    let mut out = Vec::new();
    while off < bytes.len() as u64 {
        let o = off as usize;
        let len = u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap()) as u64;
        let ty = u16::from_le_bytes(bytes[o + 4..o + 6].try_into().unwrap());
        let flags = u16::from_le_bytes(bytes[o + 6..o + 8].try_into().unwrap());
        let end = off + 8 + len;
        assert!(end <= bytes.len() as u64, "complete trace has a record past its end");
        out.push(RawRecord { offset: off, end, ty, flags });
        off = end;
    }
    out
}

/// The other local user of the hostile-user tests (`tests/hostile_*.rs`).
pub const NOBODY: u32 = 65534;

/// Whether the tests run as root (the hostile-user tests need it; CI does).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Every metric of a study run's JSON (`measurements[].metric`) is named in
/// docs/metrics.md in backticks (per-function metrics of the heap study as
/// `F.NAME`), so that the docs cannot fall behind the studies.
pub fn assert_metrics_documented(v: &Value) {
    let Some(measurements) = v["measurements"].as_array() else { return };
    let doc = std::fs::read_to_string(repo_root().join("docs/metrics.md")).unwrap();
    let spans: std::collections::BTreeSet<&str> = doc.split('`').skip(1).step_by(2).collect();
    let documented = |m: &str| spans.contains(m) || m.rsplit_once('.').is_some_and(|(_, rest)| spans.contains(format!("F.{rest}").as_str()));
    let mut missing: Vec<&str> = measurements.iter().filter_map(|m| m["metric"].as_str()).filter(|m| !documented(m)).collect();
    missing.sort_unstable();
    missing.dedup();
    assert!(missing.is_empty(), "{} run: metrics not documented in docs/metrics.md: {missing:?}", v["study"]);
}

/// A 1 MiB tmpfs mounted in the lab, unmounted when dropped; None (and a
/// note on stderr) where this process may not mount: only root may, and not
/// in a container without CAP_SYS_ADMIN.
pub struct SmallDisk(pub std::path::PathBuf);

impl SmallDisk {
    pub fn mount(lab: &Lab) -> Option<SmallDisk> {
        let dir = lab.path("small");
        std::fs::create_dir(&dir).unwrap();
        let o = std::process::Command::new("mount").args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"]).arg(&dir).output();
        match o {
            Ok(o) if o.status.success() => Some(SmallDisk(dir)),
            other => {
                skip(&format!("cannot mount a 1 MiB tmpfs here (needs root with CAP_SYS_ADMIN): {other:?}"));
                None
            }
        }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}
