//! Security issue, item 1: the cache of native parts mtlab runs (the preload
//! library, the workloads, workloads built with another libc) is never in a
//! shared directory, and is checked whole on every use, so that another
//! local user cannot make root's mtlab run their code. The attacker is user
//! `nobody`; these tests run as root and skip otherwise.

mod util;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use util::*;

fn chown(path: &Path, uid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid)).unwrap();
}

/// A shared directory like /tmp: world-writable and sticky, owned by root.
fn shared_tmp(lab: &Lab) -> std::path::PathBuf {
    let tmp = lab.path("tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
    tmp
}

/// With neither HOME nor XDG_CACHE_HOME set (a systemd unit, a cron job),
/// the parts go under the home directory of the password database, never
/// under $TMPDIR where another user may have made `mtlab-0` first.
#[test]
fn without_home_the_cache_is_not_in_a_shared_directory() {
    if !is_root() {
        return skip("hostile-user tests need root");
    }
    let lab = Lab::new();
    let tmp = shared_tmp(&lab);
    // What the old fallback used: $TMPDIR/mtlab-UID, planted by nobody.
    let planted = tmp.join("mtlab-0");
    std::fs::create_dir(&planted).unwrap();
    chown(&planted, NOBODY);
    let o = Command::new(MTLAB)
        .args(["workload", "--path", "malloc-test"])
        .env_remove("HOME")
        .env_remove("XDG_CACHE_HOME")
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    assert_success(&o, "mtlab workload --path without HOME");
    let path = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(!path.starts_with(tmp.to_str().unwrap()), "the cache fell back to $TMPDIR: {path}");
    assert!(path.starts_with("/root/.cache/mtlab/"), "root's home from the password database: {path}");
    assert_eq!(std::fs::read_dir(&planted).unwrap().count(), 0, "nothing written into the planted directory");
}

/// A cache directory another user can change (a component writable by
/// others, or owned by another user) is refused with a message that says
/// what to do, and nothing in it is run.
#[test]
fn a_cache_another_user_can_change_is_refused() {
    if !is_root() {
        return skip("hostile-user tests need root");
    }
    let lab = Lab::new();
    let open = lab.path("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let theirs = lab.path("theirs");
    std::fs::create_dir(&theirs).unwrap();
    chown(&theirs, NOBODY);
    for cache in [open.join("cache"), theirs.clone()] {
        let o = Command::new(MTLAB).args(["workload", "--path", "malloc-test"]).env("XDG_CACHE_HOME", &cache).output().unwrap();
        assert!(!o.status.success(), "{} was used: {}", cache.display(), String::from_utf8_lossy(&o.stdout));
        let err = stderr(&o);
        assert!(err.contains("XDG_CACHE_HOME"), "the message says what to do: {err}");
        assert!(err.contains("other users") || err.contains("belongs to user"), "and why: {err}");
    }
}

/// A workload built with another libc's compiler (`threads --libc PATH`) is
/// used from the cache only when it is the caller's own file: one planted by
/// another user at its name (its directory made writable to plant it) is
/// never run.
#[test]
fn a_planted_workload_in_the_cache_is_never_run() {
    if !is_root() {
        return skip("hostile-user tests need root");
    }
    let lab = Lab::new();
    let cache = lab.path("cache");
    let marker = lab.path("pwned");
    let run = |what: &str| {
        let o = Command::new(MTLAB)
            .args(["threads", "create", "--libc", "/usr/bin/cc", "--cpus", "one", "--reps", "1", "--ms", "20", "--no-store", "-q"])
            .env("XDG_CACHE_HOME", &cache)
            .current_dir(lab.dir.path())
            .output()
            .unwrap();
        assert!(!marker.exists(), "{what}: the planted program ran");
        o
    };
    let first = run("first run");
    assert_success(&first, "threads create with --libc /usr/bin/cc");
    let built: Vec<_> = walk(&cache).into_iter().filter(|p| p.ends_with("mtlab-threads-create")).collect();
    assert_eq!(built.len(), 1, "one workload built: {built:?}");
    let workload = &built[0];
    // nobody's program at the workload's name (as if the directory had been theirs to write).
    std::fs::remove_file(workload).unwrap();
    std::fs::write(workload, format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
    std::fs::set_permissions(workload, std::fs::Permissions::from_mode(0o755)).unwrap();
    chown(workload, NOBODY);
    let second = run("planted file");
    assert_success(&second, "threads create after the plant");
    assert_eq!(std::fs::metadata(workload).unwrap().uid(), 0, "rebuilt as root's own");
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
