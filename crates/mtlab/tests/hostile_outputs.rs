//! What another local user can do to mtlab's output files (issue #39, items
//! 2, 5 and 9): we are root, the attacker is user nobody (65534), and a
//! sticky directory every user can write (a temp dir chmod'ed 1777) stands
//! in for /tmp. The file to protect is root's own, in the lab's private
//! directory.

mod util;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use util::*;

/// A directory like /tmp: root's, mode 1777.
fn shared_dir() -> tempfile::TempDir {
    let d = tempfile::Builder::new().prefix("mtlab-hostile-").tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    d
}

/// Runs `script` with sh as user nobody; it must succeed.
fn as_nobody(script: &str) {
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--", "sh", "-c", script])
        .output()
        .unwrap();
    assert!(o.status.success(), "as nobody: {script}: {}", String::from_utf8_lossy(&o.stderr));
}

fn q(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', r"'\''"))
}

/// A root-only file with known bytes: what a planted link points at.
fn victim(lab: &Lab) -> PathBuf {
    let v = lab.path("root-only");
    std::fs::write(&v, b"root's secret, not to be touched\n").unwrap();
    std::fs::set_permissions(&v, std::fs::Permissions::from_mode(0o600)).unwrap();
    v
}

fn assert_untouched(v: &Path) {
    assert_eq!(std::fs::read(v).unwrap(), b"root's secret, not to be touched\n", "{} was written", v.display());
    assert_eq!(std::fs::metadata(v).unwrap().mode() & 0o7777, 0o600);
}

/// Item 2: a link planted at the -o name between record's clean-up and its
/// test-create made root truncate whatever it pointed at. The planter makes
/// and removes a link at the name as fast as it can while record runs again
/// and again (the old code lost that race in about one run of four).
#[test]
fn record_never_truncates_through_a_link_planted_at_its_output_name() {
    if !is_root() {
        return skip("the hostile-user tests run as root (CI does)");
    }
    let lab = Lab::new();
    let prog = lab.compile("n_mallocs");
    let v = victim(&lab);
    let shared = shared_dir();
    let out = shared.path().join("t.mtl");
    let planter_src = lab.path("planter.c");
    std::fs::write(
        &planter_src,
        "#include <unistd.h>\nint main(int c, char **v) { (void)c; for (;;) { symlink(v[1], v[2]); unlink(v[2]); } }\n",
    )
    .unwrap();
    let planter = lab.path("planter");
    assert!(Command::new("cc").arg("-o").arg(&planter).arg(&planter_src).status().unwrap().success());
    std::fs::set_permissions(lab.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut plant = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(&planter)
        .arg(&v)
        .arg(&out)
        .spawn()
        .unwrap();
    let mut outcomes = Vec::new();
    for _ in 0..20 {
        let o = lab.command(MTLAB).arg("record").arg("-o").arg(&out).arg("--").arg(&prog).args(["10", "16", "0"]).output().unwrap();
        outcomes.push((o.status.code(), stderr(&o)));
    }
    plant.kill().unwrap();
    plant.wait().unwrap();
    std::fs::set_permissions(lab.dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_untouched(&v);
    for (code, err) in &outcomes {
        assert!(!err.contains("panicked"), "{err}");
        // Either the run went through or it said why not, naming the file.
        assert!(*code == Some(0) || err.contains("t.mtl"), "{code:?}: {err}");
    }
    assert!(outcomes.iter().any(|(c, _)| *c == Some(0)), "some runs succeed: {outcomes:?}");
}

/// A sampled program that holds its blocks until a line on stdin
/// (native/tests/s_hold.c), run by `mtlab record` in `cwd`.
struct Held {
    child: std::process::Child,
    pid: u32,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl Held {
    fn start(lab: &Lab, prog: &Path, out: &Path, extra: &[&str], cwd: &Path) -> Held {
        let mut child = lab
            .command(MTLAB)
            .current_dir(cwd)
            .arg("record")
            .args(extra)
            .arg("-o")
            .arg(out)
            .arg("--")
            .arg(prog)
            .args(["100", "64"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().unwrap().unwrap();
        let pid = first.strip_prefix("pid ").unwrap_or_else(|| panic!("{first}")).trim().parse().unwrap();
        assert_eq!(lines.next().unwrap().unwrap(), "held");
        Held { child, pid, lines }
    }

    /// Lets the program end; mtlab's stderr.
    fn finish(mut self) -> String {
        self.child.stdin.take().unwrap().write_all(b"stop\n").unwrap();
        for _ in self.lines.by_ref() {}
        let mut err = String::new();
        std::io::Read::read_to_string(self.child.stderr.as_mut().unwrap(), &mut err).unwrap();
        let status = wait_within(&mut self.child, Duration::from_secs(60)).expect("record ends");
        assert!(status.success(), "{err}");
        err
    }
}

/// Item 2: `ctl dump` writes `mtlab.PID.heap.pb.gz` in the current
/// directory by default, a name anyone can foresee; it wrote through a link
/// planted there.
#[test]
fn ctl_dump_never_writes_through_a_link_planted_at_its_default_name() {
    if !is_root() {
        return skip("the hostile-user tests run as root (CI does)");
    }
    let lab = Lab::new();
    let prog = lab.compile("s_hold");
    let v = victim(&lab);
    let shared = shared_dir();
    let run = Held::start(&lab, &prog, &lab.path("s.mtl"), &["--sample", "4KiB"], lab.dir.path());
    let name = shared.path().join(format!("mtlab.{}.heap.pb.gz", run.pid));
    as_nobody(&format!("ln -s {} {}", q(&v), q(&name)));
    let o = lab.command(MTLAB).current_dir(shared.path()).args(["ctl", &run.pid.to_string(), "dump"]).output().unwrap();
    run.finish();
    assert_untouched(&v);
    assert!(std::fs::symlink_metadata(&name).unwrap().file_type().is_symlink(), "the planted link is left alone");
    assert!(!o.status.success(), "the dump is refused: {}", stderr(&o));
    assert!(stderr(&o).contains(&name.file_name().unwrap().to_string_lossy().to_string()), "names the file: {}", stderr(&o));

    // A name of one's own is written (private: the profile holds addresses).
    let own = lab.path("own.pb.gz");
    let run = Held::start(&lab, &prog, &lab.path("s2.mtl"), &["--sample", "4KiB"], lab.dir.path());
    let o = lab.command(MTLAB).args(["ctl", &run.pid.to_string(), "dump", "-o"]).arg(&own).output().unwrap();
    run.finish();
    assert_success(&o, "ctl dump -o");
    assert_eq!(std::fs::metadata(&own).unwrap().mode() & 0o777, 0o600);
}

fn owner_mode(p: &Path) -> (u32, u32) {
    let m = std::fs::symlink_metadata(p).unwrap();
    (m.uid(), m.mode() & 0o7777)
}

/// Item 5: files planted beside the traces joined root's family. Record
/// deleted other users' files by name pattern, finished planted ones as
/// root (copying their set-id mode onto a root-owned file), followed a
/// planted link (copying root's private trace into the shared directory),
/// and listed a forged trace as a child process of the run.
#[test]
fn files_planted_beside_the_traces_do_not_join_the_run() {
    if !is_root() {
        return skip("the hostile-user tests run as root (CI does)");
    }
    let lab = Lab::new();
    let prog = lab.compile("s_hold");
    let shared = shared_dir();
    let d = shared.path();
    let out = d.join("t.mtl");
    // A real trace to forge children from, and root's private one to steal.
    let real = lab.path("real.mtl");
    let o = lab.command(MTLAB).arg("record").arg("-o").arg(&real).arg("--").arg(lab.compile("n_mallocs")).args(["10", "16", "0"]).output().unwrap();
    assert_success(&o, "record");
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o644)).unwrap();
    let stolen = std::fs::read(&real).unwrap();
    let forged = d.join("forged");
    std::fs::write(&forged, &stolen).unwrap();
    std::os::unix::fs::chown(&forged, Some(NOBODY), Some(NOBODY)).unwrap();

    // Before the run: other users' files of the family's shapes.
    let dead_temp = d.join(".t.mtl.foo-4294967294");
    as_nobody(&format!(
        "cd {} && echo mine > t.mtl.5 && echo mine > t.mtl.5.2 && echo mine > {}",
        q(d),
        q(dead_temp.file_name().unwrap().as_ref())
    ));
    let run = Held::start(&lab, &prog, &out, &[], lab.dir.path());
    // During the run, after record's clean-up: a set-id file, a link to
    // root's private trace, and a forged trace.
    as_nobody(&format!(
        "cd {d} && cp {f} t.mtl.6 && chmod 4755 t.mtl.6 && ln -s {real} t.mtl.7 && cp {f} t.mtl.8",
        d = q(d),
        f = q(&forged),
        real = q(&real)
    ));
    let err = run.finish();

    for name in ["t.mtl.5", "t.mtl.5.2", ".t.mtl.foo-4294967294"] {
        let p = d.join(name);
        assert_eq!(std::fs::read(&p).unwrap_or_default(), b"mine\n", "{name} is left alone (not deleted)");
        assert_eq!(owner_mode(&p).0, NOBODY, "{name}");
    }
    assert_eq!(owner_mode(&d.join("t.mtl.6")), (NOBODY, 0o4755), "the set-id file is not finished as root");
    assert!(std::fs::symlink_metadata(d.join("t.mtl.7")).unwrap().file_type().is_symlink(), "the link is not followed and replaced");
    assert_eq!(std::fs::read(&real).unwrap(), stolen, "root's trace is unchanged");
    assert_eq!(owner_mode(&d.join("t.mtl.8")).0, NOBODY, "the forged trace is not finished");
    for entry in std::fs::read_dir(d).unwrap().flatten() {
        let m = std::fs::symlink_metadata(entry.path()).unwrap();
        assert!(!(m.uid() == 0 && m.mode() & 0o6000 != 0), "a root-owned set-id file: {}", entry.path().display());
    }
    for name in ["t.mtl.6", "t.mtl.7", "t.mtl.8"] {
        assert!(err.contains(&format!("{name}: not taken as a trace of this run")), "record names {name}: {err}");
    }
    // Our own trace: private, and alone in the report.
    assert_eq!(owner_mode(&out), (0, 0o600));
    let r = lab.report_path(&out);
    assert_eq!(r["processes_index"].as_array().map(Vec::len), Some(1), "no forged child: {}", r["processes_index"]);
    assert!(r["children"].as_array().is_none_or(|c| c.is_empty()), "{}", r["children"]);
}

/// Item 9: traces (the root's and its children's) and a new results store
/// are 0600 whatever the umask; a store whose directory is missing is
/// refused, not made; an allocator path LD_PRELOAD would split is refused
/// with the reason, not blamed on the program.
#[test]
fn traces_and_the_store_are_private_and_unusable_paths_are_refused() {
    let lab = Lab::new();
    let prog = lab.compile("fork");
    let o = lab
        .command("sh")
        .arg("-c")
        .arg(format!("umask 022; exec {MTLAB} record -o f.mtl -- {} 10 10", q(&prog)))
        .output()
        .unwrap();
    assert_success(&o, "record fork");
    let files = lab.family("f.mtl");
    assert_eq!(files.len(), 2, "the root's and the child's trace: {files:?}");
    for f in &files {
        assert_eq!(std::fs::metadata(lab.path(f)).unwrap().mode() & 0o777, 0o600, "{f}");
    }
    assert_eq!(std::fs::metadata(lab.path("f.mtl.d")).unwrap().mode() & 0o777, 0o700, "the children's directory");

    let bench = |store: &Path| {
        lab.command("sh")
            .arg("-c")
            .arg(format!("umask 022; exec {MTLAB} bench program --reps 1 --warmup 0 --no-heaptrack -q --store {} -- true", q(store)))
            .output()
            .unwrap()
    };
    let store = lab.path("runs.sqlite");
    let o = bench(&store);
    assert_success(&o, "bench program --store");
    assert_eq!(std::fs::metadata(&store).unwrap().mode() & 0o777, 0o600, "the new store");
    let missing = lab.path("no/such/dir/runs.sqlite");
    let o = bench(&missing);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("does not exist; create it first"), "{}", stderr(&o));
    assert!(!lab.path("no").exists(), "no directory made for a mistyped --store");

    let spaced = lab.path("my libs");
    std::fs::create_dir(&spaced).unwrap();
    let lib = spaced.join("libc.so.6");
    let libc = ["/lib/x86_64-linux-gnu/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6", "/lib64/libc.so.6"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("the C library");
    std::fs::copy(libc, &lib).unwrap();
    let o = lab
        .command(MTLAB)
        .args(["heap", "compare", "--reps", "1", "--warmup", "0", "-q", "--no-store", "--allocators"])
        .arg(format!("glibc,{}", lib.display()))
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains(&lib.display().to_string()) && e.contains("LD_PRELOAD cannot carry") && e.contains("ln -s"), "{e}");
}

/// Every predictable name a `record` of a forking program may touch in the
/// output's directory (`names::record_names`, the list the code builds its
/// names from), planted by nobody as a link to a root-only file for the
/// next 300 pids before the run: nothing is written through any of them,
/// none is removed, and the run still writes its own traces.
#[test]
fn links_at_every_predictable_name_of_a_record_are_never_followed() {
    if !is_root() {
        return skip("the hostile-user tests run as root (CI does)");
    }
    let lab = Lab::new();
    let prog = lab.compile("fork");
    let shared = shared_dir();
    let d = shared.path();
    let out = d.join("t.mtl");
    let v = victim(&lab);
    let first = std::process::id();
    let mut names: Vec<PathBuf> = Vec::new();
    for pid in first..first + 300 {
        // The control page lives in the machine's /dev/shm: tests/hostile_ctlpage.rs plants there, in a namespace.
        let page = mtlab::platform::names::ctl_page(pid);
        // The children's directory planted is refused outright (below).
        let tree = mtlab::platform::names::tree_dir(&out);
        names.extend(mtlab::platform::names::record_names(&out, pid, pid).into_iter().filter(|n| *n != out && *n != page && *n != tree));
    }
    names.sort();
    names.dedup();
    let script: String = names.iter().map(|n| format!("ln -s {} {}\n", q(&v), q(n))).collect();
    as_nobody(&script);
    let o = lab.command(MTLAB).arg("record").arg("-o").arg(&out).arg("--").arg(&prog).args(["3", "4"]).output().unwrap();
    assert_success(&o, "record of a forking program among planted links");
    assert_untouched(&v);
    for n in &names {
        let m = std::fs::symlink_metadata(n).unwrap_or_else(|e| panic!("{} was removed: {e}", n.display()));
        assert!(m.file_type().is_symlink() && m.uid() == NOBODY, "{} was replaced", n.display());
    }
    assert_eq!(owner_mode(&out), (0, 0o600));
    let r = lab.report_path(&out);
    assert!(u(&r["events"]) > 0, "the root trace was written");
    let tree = mtlab::platform::names::tree_dir(&out);
    let m = std::fs::symlink_metadata(&tree).expect("the children's directory");
    assert!(m.is_dir() && m.uid() == 0 && m.mode() & 0o777 == 0o700, "ROOT.d: root's, private: {:o}", m.mode());

    // The children's directory itself planted as a link by another user:
    // refused before the program runs, nothing written through it.
    let out2 = d.join("u.mtl");
    let tree2 = mtlab::platform::names::tree_dir(&out2);
    as_nobody(&format!("ln -s {} {}", q(d), q(&tree2)));
    let o = lab.command(MTLAB).arg("record").arg("-o").arg(&out2).arg("--").arg(&prog).args(["3", "4"]).output().unwrap();
    assert!(!o.status.success(), "record over a planted ROOT.d");
    let e = stderr(&o);
    assert!(e.contains("is not this user's directory of child traces") && e.contains("remove it or choose another name with -o"), "{e}");
    assert!(std::fs::symlink_metadata(&tree2).unwrap().file_type().is_symlink(), "the link is left alone");
    assert!(std::fs::symlink_metadata(&out2).is_err(), "no trace written");
}
