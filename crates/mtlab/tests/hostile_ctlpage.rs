//! Another local user (`nobody`) against the sampler's control page,
//! `/dev/shm/mtlab-PID`: a name anyone can predict, in a directory anyone
//! can write. Each test runs as root in its own mount namespace with a
//! private tmpfs on /dev/shm (and its own pid namespace, where pids are
//! small and known), so what it plants reaches no other run on the machine.

mod util;

use std::os::unix::fs::MetadataExt;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use util::*;

/// Runs `script` with sh in a new mount and pid namespace whose /dev/shm is
/// a private tmpfs (mode 1777, as the real one), with `$MTLAB` and `$LAB`
/// set; everything in it is killed after `limit`. None (said, skipped) where
/// namespaces cannot be made (not root, no CAP_SYS_ADMIN).
fn in_private_shm(lab: &Lab, script: &str, limit: Duration) -> Option<Output> {
    let probe = Command::new("unshare").args(["-m", "-p", "-f", "--mount-proc", "sh", "-c", "mount -t tmpfs tmpfs /dev/shm"]).output();
    if !probe.as_ref().is_ok_and(|o| o.status.success()) {
        skip("hostile_ctlpage: needs root and `unshare -m -p` with a tmpfs mount (a private /dev/shm)");
        return None;
    }
    let full = format!("mount -t tmpfs -o mode=1777 tmpfs /dev/shm || exit 90\n{script}");
    let mut child = Command::new("unshare")
        .args(["-m", "-p", "-f", "--mount-proc", "--kill-child", "sh", "-c", &full])
        .env("MTLAB", MTLAB)
        .env("LAB", lab.dir.path())
        .current_dir(lab.dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if wait_within(&mut child, limit).is_none() {
        let _ = child.kill();
        let o = child.wait_with_output().unwrap();
        panic!("the namespace's script did not end within {limit:?}:\n{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    }
    Some(child.wait_with_output().unwrap())
}

fn read(lab: &Lab, name: &str) -> String {
    std::fs::read_to_string(lab.path(name)).unwrap_or_else(|e| panic!("{name}: {e}")).trim().to_string()
}

/// The lab, traversable by nobody (its files keep their own modes).
fn open_lab() -> Lab {
    let lab = Lab::new();
    std::fs::set_permissions(lab.dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    lab
}

/// Starts `mtlab record --sample` of a shell that writes its pid to
/// $LAB/pid and waits for $LAB/go; waits for the pid, as $pid.
const START_SAMPLED: &str = r#"
"$MTLAB" record --sample 16KiB -o "$LAB/t.mtl" -- sh -c 'echo $$ > "$LAB/pid.tmp"; mv "$LAB/pid.tmp" "$LAB/pid"; while [ ! -e "$LAB/go" ]; do sleep 0.05; done' > "$LAB/record.out" 2> "$LAB/record.err" &
rec=$!
n=0; while [ ! -e "$LAB/pid" ] && [ $n -lt 600 ]; do sleep 0.05; n=$((n+1)); done
pid=$(cat "$LAB/pid")
"#;

/// Lets the sampled shell end; its record's exit code to $LAB/record.rc.
const FINISH_SAMPLED: &str = r#"
touch "$LAB/go"
wait $rec; echo $? > "$LAB/record.rc"
"#;

/// Item 3: nobody plants, at every name the next pids' pages will have, a
/// symlink to a file of root's, or a file of its own that it can write. The
/// sampled program (root's) must neither write through the link nor take
/// nobody's file as its page (nobody would then set its interval, switch it
/// on and off, and name the trace `ctl dump` reads); `ctl` says why it cannot
/// reach the program, and the trace says the page was refused.
#[test]
fn a_link_or_file_planted_at_the_page_name_is_never_used() {
    for kind in ["link", "file"] {
        let lab = open_lab();
        let victim = lab.path("victim");
        std::fs::write(&victim, "root's own file\n").unwrap();
        // One process plants them all (perl is part of every Debian-like
        // base system): a fork per name would use up the very pids planted for.
        let plant = format!(
            r#"
setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups -- perl -e '
for my $i (2..600) {{
    my $at = "/dev/shm/mtlab-$i";
    if ("{kind}" eq "link") {{ symlink("$ENV{{LAB}}/victim", $at) or die "$at: $!" }}
    else {{ open(my $f, ">", $at) or die "$at: $!"; print $f "nobody\n"; close $f; chmod(0666, $at) }}
}}' || exit 91
"#
        );
        let script = format!(
            r#"{plant}{START_SAMPLED}
"$MTLAB" ctl "$pid" status > "$LAB/ctl.out" 2> "$LAB/ctl.err"; echo $? > "$LAB/ctl.rc"
{FINISH_SAMPLED}
cp -a /dev/shm "$LAB/shm"
"#
        );
        let Some(o) = in_private_shm(&lab, &script, Duration::from_secs(120)) else { return };
        assert!(o.status.success(), "{kind}: the namespace's script: {}", stderr(&o));
        assert_eq!(read(&lab, "record.rc"), "0", "{kind}: mtlab record: {}", read(&lab, "record.err"));
        let pid: u32 = read(&lab, "pid").parse().unwrap();

        let now = std::fs::read(&victim).unwrap();
        assert!(now == b"root's own file\n", "{kind}: the link's target was changed: {} bytes {:?}...", now.len(), String::from_utf8_lossy(&now[..now.len().min(40)]));
        // Every planted name is as nobody left it: none was truncated into a
        // page, or removed at exit as the program's own page.
        for i in 2..=600 {
            let at = lab.path(&format!("shm/mtlab-{i}"));
            let m = std::fs::symlink_metadata(&at).unwrap_or_else(|e| panic!("{kind}: {} is gone: {e}", at.display()));
            if kind == "link" {
                assert!(m.file_type().is_symlink(), "{kind}: {} is still the link", at.display());
            } else {
                assert_eq!(std::fs::read_to_string(&at).unwrap(), "nobody\n", "{kind}: {} was used as a page", at.display());
            }
        }

        let ctl_err = read(&lab, "ctl.err");
        assert_ne!(read(&lab, "ctl.rc"), "0", "{kind}: ctl cannot reach the program: {}", read(&lab, "ctl.out"));
        assert!(
            ctl_err.contains(&format!("is not the control page of process {pid}")) && ctl_err.contains("ctl_page_refused=1"),
            "{kind}: ctl says why: {ctl_err}"
        );
        let trace = std::fs::read(lab.path("t.mtl")).unwrap();
        assert!(trace.windows(18).any(|w| w == b"ctl_page_refused=1"), "{kind}: the trace's STATS say the page was refused");
        let r = lab.report("t.mtl");
        let root = processes(&r).into_iter().find(|p| u(&p["pid"]) == pid as u64).expect("the sampled shell's report");
        assert_eq!(root["ctl_page_refused"], true, "{kind}");
    }
}

/// Item 4: after the run, `mtlab record --sample` removes pages its
/// processes left behind (killed outright). It must not read a FIFO (no
/// writer: it would wait forever) or a link to /dev/zero (endless: it grew
/// to the OOM killer) that nobody put among them.
#[test]
fn a_fifo_or_endless_file_among_the_pages_does_not_hang_or_bloat_record() {
    let lab = open_lab();
    let script = format!(
        r#"
run() {{
    # 1 GiB of address space: reading /dev/zero whole ends in an abort, not the OOM killer.
    (ulimit -v 1048576; timeout -s KILL 20 "$MTLAB" record --sample 16KiB -o "$LAB/$1.mtl" -- true > "$LAB/$1.out" 2> "$LAB/$1.err"; echo $? > "$LAB/$1.rc")
}}
setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups -- mkfifo /dev/shm/mtlab-999999 || exit 91
run fifo
rm /dev/shm/mtlab-999999
setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups -- ln -s /dev/zero /dev/shm/mtlab-999998 || exit 91
run zero
ls -la /dev/shm > "$LAB/shm.txt"
"#
    );
    let started = std::time::Instant::now();
    let Some(o) = in_private_shm(&lab, &script, Duration::from_secs(90)) else { return };
    assert!(o.status.success(), "the namespace's script: {}", stderr(&o));
    for case in ["fifo", "zero"] {
        assert_eq!(read(&lab, &format!("{case}.rc")), "0", "{case}: mtlab record (137: killed after 20 s): {}", read(&lab, &format!("{case}.err")));
    }
    assert!(started.elapsed() < Duration::from_secs(30), "both runs end promptly: {:?}", started.elapsed());
    assert!(read(&lab, "shm.txt").contains("mtlab-999998 -> /dev/zero"), "nobody's link is not ours to remove");
}

/// Item 7: nobody's process A names its page by a link to root's sampled
/// process V's page, and maps a file whose name ends like A's page name.
/// `mtlab ctl A stop` (by root, who trusts it acts on A) must be refused,
/// and V's sampling stays on.
#[test]
fn ctl_refuses_a_page_name_linked_to_another_process_page() {
    let lab = open_lab();
    // Any shared library will do for the loader to map it under the name.
    let so = lab.path("empty.so");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc).args(["-shared", "-fPIC", "-x", "c", "/dev/null", "-o"]).arg(&so).output().unwrap();
    assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
    let att = lab.path("att");
    std::fs::create_dir(&att).unwrap();
    std::fs::set_permissions(&att, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let script = format!(
        r#"{START_SAMPLED}
setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups -- sh -c '
mkdir -p "$LAB/att/dev/shm"
cp "$LAB/empty.so" "$LAB/att/dev/shm/mtlab-$$"
ln -s /dev/shm/mtlab-'"$pid"' /dev/shm/mtlab-$$
echo $$ > "$LAB/att/apid"
LD_PRELOAD="$LAB/att/dev/shm/mtlab-$$" exec sleep 60' &
n=0; while ! grep -qs "att/dev/shm/mtlab-" /proc/$(cat "$LAB/att/apid" 2>/dev/null || echo 0)/maps && [ $n -lt 600 ]; do sleep 0.05; n=$((n+1)); done
apid=$(cat "$LAB/att/apid")
"$MTLAB" ctl "$apid" stop > "$LAB/ctl.out" 2> "$LAB/ctl.err"; echo $? > "$LAB/ctl.rc"
"$MTLAB" ctl "$pid" status > "$LAB/victim.out" 2> "$LAB/victim.err"
kill $apid
{FINISH_SAMPLED}
"#
    );
    let Some(o) = in_private_shm(&lab, &script, Duration::from_secs(120)) else { return };
    assert!(o.status.success(), "the namespace's script: {}", stderr(&o));
    assert_eq!(read(&lab, "record.rc"), "0", "mtlab record: {}", read(&lab, "record.err"));
    let apid = read(&lab, "att/apid");
    let ctl_err = read(&lab, "ctl.err");
    assert_ne!(read(&lab, "ctl.rc"), "0", "ctl {apid} stop is refused: {}", read(&lab, "ctl.out"));
    assert!(
        ctl_err.contains(&format!("is not the control page of process {apid}")) && ctl_err.contains("symbolic link"),
        "ctl says why: {ctl_err}"
    );
    let victim = read(&lab, "victim.out");
    assert!(victim.contains("sampling on"), "the victim's sampling was not touched: {victim} {}", read(&lab, "victim.err"));
    let m = std::fs::metadata(lab.path("att/apid")).unwrap();
    assert_eq!(m.uid(), NOBODY, "the attacker's process ran as nobody");
}
