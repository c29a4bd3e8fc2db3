//! Running one measured child process: its output, wall time and peak RSS
//! (from wait4, so only this child and its waited-for descendants count).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::StudyError;
use crate::platform::interrupt::{hurry, interrupted, on_interrupt, OnInterrupt};

pub struct Measured {
    pub stdout: String,
    pub wall: Duration,
    pub max_rss_kib: u64,
}

/// Runs `cmd` to completion; a non-zero exit is an error carrying its stderr.
pub fn measure(mut cmd: Command, what: &str) -> Result<Measured, StudyError> {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).stdin(Stdio::null());
    // A process group of its own, which an interrupt can stop whole: the
    // child may be `mtlab record` or heaptrack's script, and the program
    // they run must not outlive the study either.
    cmd.process_group(0);
    // Interrupted: the child's group is told to stop too (a traced child's
    // `mtlab record` also passes TERM on to its program), not left running.
    // Registered before the child exists: an interrupt already running its
    // actions holds them, and registering after the spawn waited for it to
    // end with the new child unsupervised.
    let child_pid = std::sync::Arc::new(std::sync::atomic::AtomicI32::new(0));
    let action_pid = child_pid.clone();
    let on_interrupted = on_interrupt(move || {
        let pid = action_pid.load(std::sync::atomic::Ordering::SeqCst);
        if pid <= 0 {
            return; // not spawned yet: the spawner sees `interrupted()` and stops it
        }
        // SAFETY: kill and waitid on our own child's pid, not reaped while
        // this guard lives (see below); `info` is a zeroed struct to fill.
        unsafe {
            libc::kill(-pid, libc::SIGTERM);
            // A few seconds to end (a traced child's record finishes its
            // trace) before the work directory it writes into is removed;
            // then, or at a second Ctrl-C, its group is killed: a program
            // that ignores TERM must not outlive the study that started it.
            // The child is not reaped while this guard lives (WNOWAIT), so
            // its pid, the group's id, cannot have been reused.
            let exited = || {
                let mut info: libc::siginfo_t = std::mem::zeroed();
                let r = libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT);
                r != 0 || info.si_pid() != 0
            };
            for _ in 0..300 {
                if exited() || hurry() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            libc::kill(-pid, libc::SIGKILL);
        }
    });
    let start = Instant::now();
    let mut child = cmd.spawn().map_err(|source| StudyError::Spawn { what: what.into(), source })?;
    let pid = child.id() as libc::pid_t;
    child_pid.store(pid, std::sync::atomic::Ordering::SeqCst);
    if interrupted() {
        // The actions may have read no pid: this child is stopped here.
        // SAFETY: kill on the group of our own child, just spawned.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
    let (mut o, mut e) = (child.stdout.take(), child.stderr.take());
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(e) = e.as_mut() {
            let _ = e.read_to_string(&mut s);
        }
        s
    });
    let mut stdout = String::new();
    if let Some(o) = o.as_mut() {
        let _ = o.read_to_string(&mut stdout);
    }
    let stderr = err_reader.join().unwrap_or_default();
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // Ended but not reaped: the interrupt action may still signal the pid
    // until the guard is dropped, and only then may the pid be reused.
    // SAFETY: waitid on our own child with WNOWAIT; `info` is ours to fill.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOWAIT);
    }
    drop(on_interrupted);
    // SAFETY: pid is our own child, not yet reaped (std's Child is dropped
    // without wait; its Drop does not reap); status and usage are valid pointers.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let wall = start.elapsed();
    drop(child);
    if r < 0 {
        return Err(StudyError::Spawn { what: what.into(), source: std::io::Error::last_os_error() });
    }
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
        let how = if libc::WIFEXITED(status) {
            format!("exit code {}", libc::WEXITSTATUS(status))
        } else {
            format!("signal {}", libc::WTERMSIG(status))
        };
        return Err(StudyError::Failed { what: what.into(), status: how, stderr });
    }
    Ok(Measured { stdout, wall, max_rss_kib: usage.ru_maxrss as u64 })
}

/// This process's resident set now, in KiB (0 if unreadable). A child
/// started now reports at least this much as its peak RSS: until it execs
/// it runs on this process's memory, and the kernel keeps that high-water
/// mark across exec. Peak-RSS figures at or below it only say "no more than".
pub fn own_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("VmRSS:").map(|v| v.trim().trim_end_matches("kB").trim().parse().ok())))
        .flatten()
        .unwrap_or(0)
}

/// The kernel's CPU set of `cpus` (CPUs beyond CPU_SETSIZE are left out).
pub fn cpu_set(cpus: &[usize]) -> libc::cpu_set_t {
    // SAFETY: a cpu_set_t of zeroes is the empty set the CPU_SET calls fill.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
        // SAFETY: c is below CPU_SETSIZE, so the bit lies inside `set`.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    set
}

/// Runs the calling thread only on `cpus`.
pub fn pin_thread(cpus: &[usize]) -> std::io::Result<()> {
    if cpus.iter().any(|&c| c >= libc::CPU_SETSIZE as usize) {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    let set = cpu_set(cpus);
    // SAFETY: sched_setaffinity(0) reads `set` and changes the calling thread only.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Makes `cmd`'s process run only on `cpus` (as `taskset -c` would).
pub fn pin_command(cmd: &mut Command, cpus: &[usize]) {
    use std::os::unix::process::CommandExt;
    let set = cpu_set(cpus);
    // SAFETY: between fork and exec the closure only calls sched_setaffinity,
    // which is async-signal-safe, on a set copied into the closure.
    unsafe {
        cmd.pre_exec(move || {
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The workload's JSON result line (`{"workload":"NAME",...}`) from its stdout.
pub fn json_line(stdout: &str, workload: &str) -> Option<serde_json::Value> {
    stdout
        .lines()
        .filter(|l| l.starts_with("{\"workload\""))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["workload"] == workload)
}

/// A number from a workload's result line, or an error naming it.
pub fn field(v: &serde_json::Value, path: &[&str], what: &str) -> Result<f64, StudyError> {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_f64().ok_or_else(|| StudyError::Output(format!("{what}: the workload's result has no `{}`", path.join("."))))
}

/// A directory for a study's files: the one given, or a temporary one kept alive by the guard.
pub fn work_dir(dir: Option<&std::path::Path>) -> Result<(std::path::PathBuf, Option<WorkDir>), StudyError> {
    match dir {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(|source| StudyError::Io { path: d.to_path_buf(), source })?;
            Ok((d.to_path_buf(), None))
        }
        None => {
            let t = tempfile::Builder::new()
                .prefix("mtlab-study")
                .tempdir()
                .map_err(|source| StudyError::Io { path: std::env::temp_dir(), source })?;
            let path = t.path().to_path_buf();
            let removed = path.clone();
            // A run's traces can be gigabytes: an interrupted run takes them along.
            let interrupted = on_interrupt(move || {
                if std::fs::remove_dir_all(&removed).is_ok() {
                    say!("\nmtlab: interrupted; removed the run's temporary files ({})", removed.display());
                }
            });
            Ok((path, Some(WorkDir { _dir: t, _interrupted: interrupted })))
        }
    }
}

/// Says so when input was given to mtlab (a file or a pipe on stdin): a
/// study's runs of the program read an empty stdin, so that every
/// repetition does the same work; `sort < big.txt` sorted nothing, silently.
pub fn say_if_stdin_is_not_passed_on() {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::metadata("/proc/self/fd/0") else { return };
    let t = meta.file_type();
    let null = t.is_char_device() && std::fs::canonicalize("/proc/self/fd/0").is_ok_and(|p| p == std::path::Path::new("/dev/null"));
    if t.is_file() || t.is_fifo() || (t.is_char_device() && !null && !std::io::IsTerminal::is_terminal(&std::io::stdin())) {
        say!("mtlab: note: the program's runs read an empty stdin, not mtlab's: give its input as a file argument");
    }
}

/// A temporary work directory, removed when dropped or when mtlab is interrupted.
pub struct WorkDir {
    _dir: tempfile::TempDir,
    _interrupted: OnInterrupt,
}
