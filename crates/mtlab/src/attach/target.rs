//! What `/proc/PID` says about the process to attach to: its mappings, the
//! C library and loader it runs, and every reason it cannot be attached to
//! (each refusal says what to do instead).

use std::path::{Path, PathBuf};

/// One line of /proc/PID/maps.
#[derive(Debug, Clone, PartialEq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub perms: String,
    pub offset: u64,
    pub path: String,
}

pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.split_ascii_whitespace();
            let (range, perms, offset) = (f.next()?, f.next()?, f.next()?);
            let (_dev, _inode) = (f.next()?, f.next()?);
            let path = f.collect::<Vec<_>>().join(" ");
            let (a, b) = range.split_once('-')?;
            Some(Mapping {
                start: u64::from_str_radix(a, 16).ok()?,
                end: u64::from_str_radix(b, 16).ok()?,
                perms: perms.to_string(),
                offset: u64::from_str_radix(offset, 16).ok()?,
                path,
            })
        })
        .collect()
}

pub fn maps(pid: i32) -> std::io::Result<Vec<Mapping>> {
    Ok(parse_maps(&std::fs::read_to_string(format!("/proc/{pid}/maps"))?))
}

/// The load address of the object mapped from `path` (its mapping of file
/// offset 0) and its extent.
pub fn object_range(maps: &[Mapping], path: &str) -> Option<(u64, u64)> {
    let of: Vec<&Mapping> = maps.iter().filter(|m| m.path == path).collect();
    let base = of.iter().find(|m| m.offset == 0)?.start;
    Some((base, of.iter().map(|m| m.end).max()?))
}

/// Which C library a process runs, by the file its maps name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Libc {
    Glibc,
    Musl,
}

/// The mapped C library: its path (as the process sees it) and kind. musl's
/// C library is its dynamic loader (`ld-musl-*.so.1`, `libc.musl-*.so.1`),
/// which maps show by the file the loader's name links to: on Debian
/// `/usr/lib/x86_64-linux-musl/libc.so`, in a directory named for musl.
pub fn find_libc(maps: &[Mapping]) -> Option<(String, Libc)> {
    maps.iter().find_map(|m| {
        let path = Path::new(&m.path);
        let name = path.file_name()?.to_str()?;
        let in_musl_dir = path.parent().and_then(|d| d.file_name()).is_some_and(|d| d.to_string_lossy().contains("musl"));
        if name == "libc.so" && in_musl_dir {
            Some((m.path.clone(), Libc::Musl))
        } else if name.starts_with("libc.so") || (name.starts_with("libc-") && name.ends_with(".so")) {
            Some((m.path.clone(), Libc::Glibc))
        } else if name.starts_with("ld-musl-") || name.starts_with("libc.musl-") {
            Some((m.path.clone(), Libc::Musl))
        } else {
            None
        }
    })
}

/// A field of /proc/PID/status ("TracerPid", "Seccomp", "Uid": its first word).
pub fn status_field(status: &str, key: &str) -> Option<String> {
    status.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k == key).then(|| v.split_whitespace().next().unwrap_or("").to_string())
    })
}

/// A file of the process as the process sees it (its root may be a
/// container's): through /proc/PID/root.
pub fn in_root(pid: i32, path: &str) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/root{path}"))
}

/// The process's root directory as mtlab sees it, where it is not mtlab's
/// own ("/"): a chroot's, e.g. a container started with its own root.
fn root_here(pid: i32) -> Option<String> {
    let root = std::fs::read_link(format!("/proc/{pid}/root")).ok()?;
    let root = root.to_string_lossy().trim_end_matches('/').to_string();
    (!root.is_empty()).then_some(root)
}

/// A path as the process sees it, as its maps show it to mtlab: a file
/// under a chroot shows with the chroot's directory before it.
pub fn seen_here(pid: i32, path: &str) -> String {
    match root_here(pid) {
        Some(root) => format!("{root}{path}"),
        None => path.to_string(),
    }
}

/// A path from the process's maps as mtlab reads them, as the process sees
/// it (the inverse of `seen_here`).
pub fn seen_there(pid: i32, map_path: &str) -> String {
    match root_here(pid) {
        Some(root) => map_path.strip_prefix(&root).filter(|p| p.starts_with('/')).unwrap_or(map_path).to_string(),
        None => map_path.to_string(),
    }
}

/// The process lives in another mount namespace than mtlab (a container).
pub fn other_mount_ns(pid: i32) -> bool {
    match (std::fs::read_link(format!("/proc/{pid}/ns/mnt")), std::fs::read_link("/proc/self/ns/mnt")) {
        (Ok(a), Ok(b)) => a != b,
        _ => false,
    }
}

/// The process opens files as another user than mtlab (root attaching to a
/// service's process): mtlab's cached library (in its user's home) and the
/// directory of `-o` may be closed to it.
pub fn other_user(pid: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    // SAFETY: geteuid cannot fail.
    fs_uid(&status).is_some_and(|uid| uid != unsafe { libc::geteuid() })
}

/// The file-system uid (the fourth of "Uid:"), the one the kernel checks
/// when the process opens a file.
fn fs_uid(status: &str) -> Option<u32> {
    let line = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// Why mtlab cannot attach, each with what to do.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum Refusal {
    #[error("no process {0} (check the pid: `ps -p {0}`)")]
    NoProcess(i32),
    #[error("process {0} is mtlab itself")]
    Itself(i32),
    #[error(
        "process {pid} belongs to user {uid}, not to you (uid {euid}): run mtlab as that user, or as root (CAP_SYS_PTRACE)"
    )]
    OtherUser { pid: i32, uid: u32, euid: u32 },
    #[error(
        "attaching is disabled on this machine (kernel.yama.ptrace_scope = 3) until the next reboot; start the program under `mtlab record -- PROGRAM` instead"
    )]
    ScopeNoAttach,
    #[error(
        "only root may attach here (kernel.yama.ptrace_scope = 2): run mtlab with sudo, or give it CAP_SYS_PTRACE (`setcap cap_sys_ptrace+ep $(which mtlab)`)"
    )]
    ScopeAdminOnly,
    #[error(
        "the kernel refused to attach to process {0} (kernel.yama.ptrace_scope = 1 lets a process attach only to its descendants): run mtlab with sudo, give it CAP_SYS_PTRACE, or `sysctl kernel.yama.ptrace_scope=0`"
    )]
    ScopeDescendants(i32),
    #[error("the kernel refused to attach to process {pid}: {why} (run mtlab as root, or with CAP_SYS_PTRACE)")]
    Denied { pid: i32, why: String },
    #[error(
        "process {pid} is already traced by process {tracer} ({name}): detach that debugger or tracer first (only one tracer at a time)"
    )]
    AlreadyTraced { pid: i32, tracer: i32, name: String },
    #[error(
        "process {0} is statically linked (no dynamic loader in it to load mtlab's library): restart it under `mtlab record -- PROGRAM` (a static program's own allocator is not seen either way)"
    )]
    Static(i32),
    #[error("process {pid} is a {kind} program and mtlab's library is {lib}: it cannot be loaded into it")]
    Foreign { pid: i32, kind: String, lib: String },
    #[error(
        "process {0} runs in seccomp strict mode (only read, write, exit and sigreturn are allowed): nothing can be loaded into it"
    )]
    SeccompStrict(i32),
    #[error(
        "process {0} has a seccomp filter: mtlab cannot check that it allows what the library needs (openat, pwrite64, mmap, mprotect, futex, clone3 for --sample's control thread); a filter that forbids one of them may kill the process. If you know it allows them (Docker's default profile does), pass --allow-seccomp"
    )]
    SeccompFilter(i32),
    #[error("process {0} has no C library mapped that mtlab knows (glibc or musl): nothing to call dlopen in")]
    NoLibc(i32),
    #[error(
        "process {pid} runs musl and this mtlab was built without musl-gcc, so it carries no library for musl: rebuild mtlab with musl-gcc installed (Debian: apt-get install musl-tools)"
    )]
    NoMuslBuild { pid: i32 },
    #[error(
        "process {pid} still has mtlab's library of an earlier attach loaded (musl never unloads one; with glibc, it was left inert when a thread held an address of it): it cannot start again in this process; restart the process to attach to it again"
    )]
    StillLoaded { pid: i32 },
}

/// The checks made before any ptrace call, from what /proc shows.
pub struct Facts {
    pub pid: i32,
    pub exists: bool,
    pub uid: Option<u32>,
    pub euid: u32,
    pub privileged: bool,
    pub tracer: i32,
    pub tracer_name: String,
    pub seccomp: u32,
    pub scope: Option<u32>,
    pub is_descendant: bool,
}

pub fn refusal_before_ptrace(f: &Facts, allow_seccomp: bool) -> Option<Refusal> {
    if !f.exists {
        return Some(Refusal::NoProcess(f.pid));
    }
    if f.pid as u32 == std::process::id() {
        return Some(Refusal::Itself(f.pid));
    }
    if let Some(uid) = f.uid.filter(|&u| u != f.euid && !f.privileged) {
        return Some(Refusal::OtherUser { pid: f.pid, uid, euid: f.euid });
    }
    match f.scope {
        Some(3) => return Some(Refusal::ScopeNoAttach),
        Some(2) if !f.privileged => return Some(Refusal::ScopeAdminOnly),
        Some(1) if !f.privileged && !f.is_descendant => return Some(Refusal::ScopeDescendants(f.pid)),
        _ => {}
    }
    if f.tracer != 0 {
        return Some(Refusal::AlreadyTraced { pid: f.pid, tracer: f.tracer, name: f.tracer_name.clone() });
    }
    match f.seccomp {
        1 => return Some(Refusal::SeccompStrict(f.pid)),
        2 if !allow_seccomp => return Some(Refusal::SeccompFilter(f.pid)),
        _ => {}
    }
    None
}

/// Has this process CAP_SYS_PTRACE in its effective set?
pub fn has_cap_sys_ptrace() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status_field(&status, "CapEff")
        .and_then(|h| u64::from_str_radix(&h, 16).ok())
        .is_some_and(|caps| caps & (1 << 19) != 0)
}

/// Is `pid` a descendant of this process (what ptrace_scope 1 allows)?
fn is_descendant(pid: i32) -> bool {
    let me = std::process::id() as i32;
    let mut p = pid;
    for _ in 0..64 {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else { return false };
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        let Some(after) = stat.rsplit_once(')').map(|(_, a)| a) else { return false };
        let Some(ppid) = after.split_whitespace().nth(1).and_then(|s| s.parse::<i32>().ok()) else { return false };
        if ppid == me {
            return true;
        }
        if ppid <= 1 {
            return false;
        }
        p = ppid;
    }
    false
}

pub fn facts(pid: i32) -> Facts {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok();
    let s = status.as_deref().unwrap_or("");
    let tracer: i32 = status_field(s, "TracerPid").and_then(|v| v.parse().ok()).unwrap_or(0);
    let tracer_name = if tracer != 0 {
        std::fs::read_to_string(format!("/proc/{tracer}/comm")).map(|c| c.trim().to_string()).unwrap_or_default()
    } else {
        String::new()
    };
    Facts {
        pid,
        exists: status.is_some(),
        uid: status_field(s, "Uid").and_then(|v| v.parse().ok()),
        // SAFETY: geteuid cannot fail.
        euid: unsafe { libc::geteuid() },
        privileged: has_cap_sys_ptrace(),
        tracer,
        tracer_name,
        seccomp: status_field(s, "Seccomp").and_then(|v| v.parse().ok()).unwrap_or(0),
        scope: std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").ok().and_then(|v| v.trim().parse().ok()),
        is_descendant: is_descendant(pid),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok_facts() -> Facts {
        Facts {
            pid: 4242,
            exists: true,
            uid: Some(1000),
            euid: 1000,
            privileged: false,
            tracer: 0,
            tracer_name: String::new(),
            seccomp: 0,
            scope: Some(0),
            is_descendant: false,
        }
    }

    #[test]
    fn refusals_follow_the_facts() {
        assert_eq!(refusal_before_ptrace(&ok_facts(), false), None);
        let f = Facts { exists: false, ..ok_facts() };
        assert_eq!(refusal_before_ptrace(&f, false), Some(Refusal::NoProcess(4242)));
        let f = Facts { uid: Some(0), ..ok_facts() };
        assert_eq!(refusal_before_ptrace(&f, false), Some(Refusal::OtherUser { pid: 4242, uid: 0, euid: 1000 }));
        let f = Facts { uid: Some(0), privileged: true, ..ok_facts() };
        assert_eq!(refusal_before_ptrace(&f, false), None, "CAP_SYS_PTRACE may attach to anyone");
        let f = Facts { scope: Some(3), privileged: true, ..ok_facts() };
        assert_eq!(refusal_before_ptrace(&f, false), Some(Refusal::ScopeNoAttach));
        let f = Facts { scope: Some(2), ..ok_facts() };
        assert_eq!(refusal_before_ptrace(&f, false), Some(Refusal::ScopeAdminOnly));
        let f = Facts { scope: Some(2), privileged: true, ..ok_facts() };
        assert_eq!(refusal_before_ptrace(&f, false), None);
        let f = Facts { scope: Some(1), ..ok_facts() };
        assert_eq!(refusal_before_ptrace(&f, false), Some(Refusal::ScopeDescendants(4242)));
        let f = Facts { scope: Some(1), is_descendant: true, ..ok_facts() };
        assert_eq!(refusal_before_ptrace(&f, false), None);
        let f = Facts { tracer: 77, tracer_name: "gdb".into(), ..ok_facts() };
        assert!(matches!(refusal_before_ptrace(&f, false), Some(Refusal::AlreadyTraced { tracer: 77, .. })));
        let f = Facts { seccomp: 1, ..ok_facts() };
        assert_eq!(refusal_before_ptrace(&f, true), Some(Refusal::SeccompStrict(4242)));
        let f = Facts { seccomp: 2, ..ok_facts() };
        assert_eq!(refusal_before_ptrace(&f, false), Some(Refusal::SeccompFilter(4242)));
        assert_eq!(refusal_before_ptrace(&f, true), None);
    }

    #[test]
    fn maps_lines_parse_and_libc_is_found() {
        let text = "7f00-7f10 r--p 00000000 08:01 12 /usr/lib/x86_64-linux-gnu/libc.so.6\n\
                    7f10-7f20 r-xp 00010000 08:01 12 /usr/lib/x86_64-linux-gnu/libc.so.6\n\
                    7ffc-7ffd rw-p 00000000 00:00 0 [stack]\n\
                    8000-9000 r-xp 00000000 08:01 13 /opt/my app/lib x.so\n";
        let m = parse_maps(text);
        assert_eq!(m.len(), 4);
        assert_eq!(m[3].path, "/opt/my app/lib x.so");
        assert_eq!(find_libc(&m), Some(("/usr/lib/x86_64-linux-gnu/libc.so.6".into(), Libc::Glibc)));
        assert_eq!(object_range(&m, "/usr/lib/x86_64-linux-gnu/libc.so.6"), Some((0x7f00, 0x7f20)));
        let musl = parse_maps("1000-2000 r-xp 00000000 08:01 1 /lib/ld-musl-x86_64.so.1\n");
        assert_eq!(find_libc(&musl).map(|l| l.1), Some(Libc::Musl));
        // Debian's musl: the loader's name links to libc.so in musl's own directory.
        let debian = parse_maps("1000-2000 r-xp 00000000 08:01 1 /usr/lib/x86_64-linux-musl/libc.so\n");
        assert_eq!(find_libc(&debian), Some(("/usr/lib/x86_64-linux-musl/libc.so".into(), Libc::Musl)));
    }

    #[test]
    fn status_fields_are_read() {
        let s = "Name:\tcat\nUid:\t1000\t1000\t1000\t1000\nTracerPid:\t0\nSeccomp:\t2\n";
        assert_eq!(status_field(s, "Uid").as_deref(), Some("1000"));
        assert_eq!(status_field(s, "Seccomp").as_deref(), Some("2"));
        assert_eq!(status_field(s, "Nope"), None);
        assert_eq!(fs_uid("Uid:\t0\t0\t0\t104\n"), Some(104), "the file-system uid, not the real one");
        assert_eq!(fs_uid("Name:\tcat\n"), None);
    }
}
