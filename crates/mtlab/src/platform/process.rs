//! Other processes and programs, as the system sees them.

use std::ffi::OsStr;
use std::path::PathBuf;

/// `word` as one shell word, for the commands mtlab suggests: as it is when a
/// shell reads it back unchanged, else in single quotes (a `'` inside as
/// `'\''`), so that a path with spaces can be copied and pasted.
pub fn shell_word(word: impl AsRef<OsStr>) -> String {
    let s = word.as_ref().to_string_lossy();
    let plain = !s.is_empty()
        && !s.starts_with('~')
        && s.chars().all(|c| !c.is_whitespace() && !c.is_control() && !"'\"\\$`!*?[]{}()<>|&;#".contains(c));
    if plain {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// Does process `pid` exist? A process we may not signal (EPERM) exists
/// too: it belongs to another user. Pid 0 and pids beyond `pid_t` name no
/// single process and are never alive.
pub fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill with signal 0 sends nothing; it only checks that the
    // process exists and may be signalled.
    if unsafe { libc::kill(pid, 0) } == 0 {
        return true;
    }
    std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Whether process `pid` exists and has not ended: a zombie (exited, not
/// reaped yet by its parent) does not run.
pub fn pid_runs(pid: u32) -> bool {
    !matches!(state_at(&format!("/proc/{pid}/stat")).as_deref(), None | Some("Z") | Some("X"))
}

/// Whether thread `tid` of process `pid` goes on by itself: it runs or
/// waits for a CPU (state R), or waits inside the kernel for something
/// that does not depend on the program (state D: a write waiting for the
/// file's lock held by another writer), as opposed to asleep on something
/// (a pipe, a lock of the program), stopped, or gone.
pub fn thread_goes_on(pid: u32, tid: u32) -> bool {
    matches!(state_at(&format!("/proc/{pid}/task/{tid}/stat")).as_deref(), Some("R") | Some("D"))
}

/// The state letter of a `/proc/.../stat` file (None: unreadable).
fn state_at(path: &str) -> Option<String> {
    let stat = std::fs::read_to_string(path).ok()?;
    // The state follows the command name, which may hold spaces and ')'.
    stat.rfind(')').and_then(|i| stat[i + 1..].split_ascii_whitespace().next()).map(str::to_string)
}

/// The first file called `name` in the directories of `PATH`, as the shell
/// would find a command (executable or not: callers check what they need).
pub fn find_in_path(name: impl AsRef<OsStr>) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name.as_ref())).find(|p| p.is_file())
}

/// Whether this process runs as root (effective uid 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Whether process `pid` is alive and has `path` open: the writer of a
/// trace still at work (a pid reused by another process does not count).
pub fn holds_open(pid: u32, path: &std::path::Path) -> bool {
    let Ok(want) = std::fs::canonicalize(path) else { return false };
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    fds.flatten().any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target == want))
}

/// Which of the standard descriptors 0, 1, 2 were closed when mtlab started
/// (bit N for descriptor N). Rust's runtime opens /dev/null at every closed
/// one before `main`, so a program `mtlab record` runs would inherit
/// /dev/null where, run from the same shell without mtlab, it finds nothing:
/// its writes to a closed stdout would succeed instead of failing with
/// EBADF. Read before that, from `.init_array`.
static STD_FDS_CLOSED: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

extern "C" fn note_closed_std_fds() {
    let mut mask = 0u8;
    for fd in 0..3 {
        // SAFETY: F_GETFD only asks whether the descriptor is open.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
            mask |= 1 << fd;
        }
    }
    STD_FDS_CLOSED.store(mask, std::sync::atomic::Ordering::Relaxed);
}

#[used]
#[link_section = ".init_array"]
static NOTE_CLOSED_STD_FDS: extern "C" fn() = note_closed_std_fds;

/// The standard descriptors (0, 1, 2) that were closed when mtlab started.
pub fn std_fds_closed_at_start() -> Vec<i32> {
    let mask = STD_FDS_CLOSED.load(std::sync::atomic::Ordering::Relaxed);
    (0..3).filter(|fd| mask & (1 << fd) != 0).collect()
}

/// Copies `buf.len()` bytes at `addr` of process `pid`'s memory into `buf`
/// (`process_vm_readv`: the caller may trace `pid`, e.g. it is its parent
/// and the program did not make itself undumpable). A partial copy is an
/// error (`UnexpectedEof`).
pub fn read_memory(pid: u32, addr: u64, buf: &mut [u8]) -> std::io::Result<()> {
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: buf.len() };
    // SAFETY: one local iovec over `buf`, which lives across the call and
    // is written at most `buf.len()` bytes; the remote address is only read
    // by the kernel, which checks it against the other process's mappings.
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    match n {
        n if n < 0 => Err(std::io::Error::last_os_error()),
        n if n as usize == buf.len() => Ok(()),
        _ => Err(std::io::ErrorKind::UnexpectedEof.into()),
    }
}

/// Makes this process the reaper of its orphaned descendants
/// (`PR_SET_CHILD_SUBREAPER`): a process the program started and left
/// behind (a daemon) becomes this process's child instead of init's, so
/// its parent stays the recorder while it runs, and its end is this
/// process's to reap (`Reaper`). `on: false` undoes it.
pub fn set_child_subreaper(on: bool) -> std::io::Result<()> {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes one integer and no pointer.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, libc::c_ulong::from(on), 0, 0, 0) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The children of process `pid`, from `/proc/PID/task/*/children`.
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    let mut out: Vec<u32> = tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| c.split_whitespace().filter_map(|p| p.parse().ok()).collect::<Vec<u32>>())
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// A thread that reaps, every `REAP_EVERY`, the children of this process
/// that ended, but for the one `keep` names (the program, whose exit
/// status its own `wait` takes): the orphans a subreaper adopts. Only the
/// zombies are waited for, each by its pid, so a child that runs is never
/// waited on here. While it lives, no other thread of mtlab may start
/// children of its own.
pub struct Reaper {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

const REAP_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

impl Reaper {
    pub fn start(keep: u32) -> Reaper {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("mtlab-reaper".into())
            .spawn(move || loop {
                reap_ended(keep);
                if stopped.load(Ordering::Acquire) {
                    return;
                }
                std::thread::sleep(REAP_EVERY);
            })
            .ok();
        Reaper { stop, thread }
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reaps the children but `keep` that have ended (zombies).
fn reap_ended(keep: u32) {
    for pid in children_of(std::process::id()).into_iter().filter(|&p| p != keep && !pid_runs(p)) {
        let Ok(pid) = libc::pid_t::try_from(pid) else { continue };
        let mut status = 0;
        // SAFETY: waitpid of one pid, WNOHANG: it does not block, and fills `status`.
        unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zombie_does_not_run_and_this_process_does() {
        assert!(pid_runs(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Not reaped yet: a zombie once it has exited.
        let start = std::time::Instant::now();
        while pid_runs(pid) && start.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!pid_runs(pid), "an exited, unreaped child is a zombie");
        assert!(pid_alive(pid), "kill(0) still finds the zombie");
        child.wait().unwrap();
        assert!(!pid_runs(pid));
    }

    #[test]
    fn a_thread_asleep_does_not_go_on_and_a_spinning_one_does() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{mpsc, Arc};
        let me = std::process::id();
        // SAFETY: gettid has no preconditions.
        let gettid = || unsafe { libc::gettid() } as u32;
        let (wake, asleep) = mpsc::channel::<()>();
        let (tid_tx, tids) = mpsc::channel::<(bool, u32)>();
        let spin_tx = tid_tx.clone();
        let sleeper = std::thread::spawn(move || {
            let _ = tid_tx.send((false, gettid()));
            let _ = asleep.recv();
        });
        let stop = Arc::new(AtomicBool::new(false));
        let spinning = Arc::clone(&stop);
        let spinner = std::thread::spawn(move || {
            let _ = spin_tx.send((true, gettid()));
            while !spinning.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        let two = [tids.recv().unwrap(), tids.recv().unwrap()];
        std::thread::sleep(std::time::Duration::from_millis(50));
        let seen: Vec<(bool, bool)> = two.iter().map(|&(spins, tid)| (spins, thread_goes_on(me, tid))).collect();
        let _ = wake.send(());
        stop.store(true, Ordering::Relaxed);
        sleeper.join().unwrap();
        spinner.join().unwrap();
        assert!(seen.iter().all(|&(spins, runnable)| spins == runnable), "(spins, goes on): {seen:?}");
        assert!(!thread_goes_on(me, u32::MAX - 1), "no such thread");
    }

    #[test]
    fn shell_words_are_quoted_only_when_a_shell_would_split_or_expand_them() {
        assert_eq!(shell_word("/tmp/w/t.mtl"), "/tmp/w/t.mtl");
        assert_eq!(shell_word("ünï/räce.mtl"), "ünï/räce.mtl");
        assert_eq!(shell_word("/tmp/sp ace/t.mtl"), "'/tmp/sp ace/t.mtl'");
        assert_eq!(shell_word("it's$x"), "'it'\\''s$x'");
        assert_eq!(shell_word("a*b"), "'a*b'");
        assert_eq!(shell_word(""), "''");
    }

    #[test]
    fn this_process_is_alive_and_pid_0_is_not() {
        assert!(pid_alive(std::process::id()));
        assert!(!pid_alive(0));
        assert!(!pid_alive(u32::MAX));
    }

    #[test]
    fn init_is_alive_though_not_ours_to_signal() {
        // Unprivileged, signalling pid 1 fails with EPERM; it still exists.
        assert!(pid_alive(1));
    }

    #[test]
    fn sh_is_in_path() {
        assert!(find_in_path("sh").is_some_and(|p| p.is_file()));
        assert!(find_in_path("surely-no-such-program-mtlab").is_none());
    }
}
