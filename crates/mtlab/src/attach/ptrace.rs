//! The process's threads stopped with ptrace (seize + interrupt: no signal is
//! sent, so the program's own handlers and its parent's waits see nothing),
//! and function calls made on one of them: registers saved, a call frame
//! built below the red zone whose return address is 0, the thread resumed
//! until it faults there, registers put back. x86-64 only.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

const PTRACE_EVENT_STOP: i32 = 128;
/// The x86-64 System V red zone: the interrupted code may keep data there.
const RED_ZONE: u64 = 128;

/// A stopped thread: its registers as the stop found them, and a signal that
/// arrived for it while it was being stopped (delivered again at detach).
#[derive(Debug)]
pub struct Stopped {
    pub regs: libc::user_regs_struct,
    pending_signal: i32,
}

/// The seized threads of one process.
pub struct Tracee {
    pid: i32,
    mem: File,
    pub threads: BTreeMap<i32, Stopped>,
    /// How many threads stop_all held stopped at once.
    held: usize,
}

fn ptrace(req: libc::c_uint, tid: i32, addr: usize, data: usize) -> io::Result<libc::c_long> {
    // SAFETY: every request used here takes integer arguments or a pointer to
    // a `user_regs_struct` that the caller owns for the call's duration.
    let r = unsafe { libc::ptrace(req, tid, addr, data) };
    if r == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// The next wait status of `tid`, waiting at most `limit`; None on timeout.
fn wait_status(tid: i32, limit: Duration) -> io::Result<Option<i32>> {
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes the status into a local.
        let r = unsafe { libc::waitpid(tid, &mut status, libc::__WALL | libc::WNOHANG) };
        if r == tid {
            return Ok(Some(status));
        }
        if r == -1 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
        if start.elapsed() > limit {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Seizes `tid` and asks it to stop; false if it ended meanwhile.
fn seize(tid: i32) -> io::Result<bool> {
    match ptrace(libc::PTRACE_SEIZE, tid, 0, 0) {
        Ok(_) => {}
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(false),
        Err(e) => return Err(e),
    }
    let _ = ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0);
    Ok(true)
}

/// The system call thread `tid` is blocked in, as /proc says without
/// stopping it; None while it runs (or is not in a system call).
pub fn blocked_in(pid: i32, tid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?;
    parse_syscall(&text)
}

/// The number on a /proc/PID/syscall line: "running", "-1 SP PC" (blocked
/// outside a system call) or "NR ARGS… SP PC".
fn parse_syscall(text: &str) -> Option<u64> {
    text.split_whitespace().next()?.parse::<i64>().ok().filter(|&n| n >= 0).map(|n| n as u64)
}

pub fn task_ids(pid: i32) -> io::Result<Vec<i32>> {
    let mut v: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    v.sort_unstable();
    Ok(v)
}

fn get_regs(tid: i32) -> io::Result<libc::user_regs_struct> {
    // SAFETY: user_regs_struct is plain integers; all-zero is a valid value.
    let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
    ptrace(libc::PTRACE_GETREGS, tid, 0, &mut regs as *mut _ as usize)?;
    Ok(regs)
}

fn set_regs(tid: i32, regs: &libc::user_regs_struct) -> io::Result<()> {
    ptrace(libc::PTRACE_SETREGS, tid, 0, regs as *const _ as usize).map(|_| ())
}

/// Why a call made in the target did not come back as expected.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("the thread ended during the call")]
    Exited,
    #[error("the call did not return within {0:?}")]
    Timeout(Duration),
    #[error("the call faulted at {rip:#x} (signal {sig})")]
    Fault { sig: i32, rip: u64 },
    #[error("{0}")]
    Io(#[from] io::Error),
}

impl Tracee {
    /// Seizes and stops every thread of `pid` (threads started meanwhile
    /// too: the task list is read until it holds no new thread).
    pub fn stop_all(pid: i32) -> io::Result<Tracee> {
        let mut t = Tracee::open(pid)?;
        let mut seized: Vec<i32> = Vec::new();
        loop {
            let mut new = 0;
            for tid in task_ids(pid)? {
                if seized.contains(&tid) {
                    continue;
                }
                match seize(tid) {
                    Ok(true) => {}
                    Ok(false) => continue, // ended meanwhile
                    Err(e) => {
                        t.release_seized(&seized);
                        return Err(e);
                    }
                }
                seized.push(tid);
                new += 1;
            }
            if new == 0 {
                break;
            }
        }
        t.wait_stops(&seized)?;
        Ok(t)
    }

    /// Seizes and stops thread `tid` of `pid` alone: the others run on.
    pub fn stop_one(pid: i32, tid: i32) -> io::Result<Tracee> {
        let mut t = Tracee::open(pid)?;
        if !seize(tid)? {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        t.wait_stops(&[tid])?;
        Ok(t)
    }

    fn open(pid: i32) -> io::Result<Tracee> {
        let mem = File::options().read(true).write(true).open(format!("/proc/{pid}/mem"))?;
        Ok(Tracee { pid, mem, threads: BTreeMap::new(), held: 0 })
    }

    /// Waits for each seized thread's interrupt stop and keeps its registers.
    fn wait_stops(&mut self, seized: &[i32]) -> io::Result<()> {
        for &tid in seized {
            let mut pending_signal = 0;
            loop {
                let Some(status) = wait_status(tid, Duration::from_secs(5))? else {
                    self.release_seized(seized);
                    return Err(io::Error::new(io::ErrorKind::TimedOut, format!("thread {tid} did not stop within 5 s")));
                };
                if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
                    break; // gone
                }
                if !libc::WIFSTOPPED(status) {
                    continue;
                }
                let sig = libc::WSTOPSIG(status);
                if status >> 16 == PTRACE_EVENT_STOP {
                    if let Ok(regs) = get_regs(tid) {
                        self.threads.insert(tid, Stopped { regs, pending_signal });
                    } // else: gone
                    break;
                }
                // A signal for the thread arrived first: kept for detach;
                // the interrupt's stop follows once it is resumed.
                pending_signal = sig;
                let _ = ptrace(libc::PTRACE_CONT, tid, 0, 0);
            }
        }
        self.held = self.threads.len();
        Ok(())
    }

    fn release_seized(&self, seized: &[i32]) {
        for &tid in seized {
            let _ = ptrace(libc::PTRACE_DETACH, tid, 0, 0);
        }
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// How many threads were stopped at once (before any was let go).
    pub fn stopped_count(&self) -> usize {
        self.held
    }

    /// Lets one thread go (it runs on unchanged, its pending signal delivered).
    pub fn release(&mut self, tid: i32) {
        if let Some(s) = self.threads.remove(&tid) {
            let _ = set_regs(tid, &s.regs);
            let _ = ptrace(libc::PTRACE_DETACH, tid, 0, s.pending_signal as usize);
        }
    }

    /// Lets every thread but `keep` go.
    pub fn release_others(&mut self, keep: i32) {
        let others: Vec<i32> = self.threads.keys().copied().filter(|&t| t != keep).collect();
        for tid in others {
            self.release(tid);
        }
    }

    pub fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        self.mem.read_exact_at(buf, addr)
    }

    pub fn read_u64s(&self, addr: u64, n: usize) -> io::Result<Vec<u64>> {
        let mut b = vec![0u8; n * 8];
        self.read(addr, &mut b)?;
        Ok(b.chunks_exact(8).map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes"))).collect())
    }

    fn write(&self, addr: u64, data: &[u8]) -> io::Result<()> {
        self.mem.write_all_at(data, addr)
    }

    /// Calls `func(args...)` on stopped thread `tid` and returns its rax. The
    /// thread's registers are put back afterwards, so it resumes where it was
    /// (an interrupted system call restarts). `data` is copied below the
    /// red zone first; `args` may refer to it through `DATA` (its address).
    pub fn call(&mut self, tid: i32, func: u64, args: &[u64], data: &[u8], limit: Duration) -> Result<u64, CallError> {
        let saved = self.threads.get(&tid).ok_or(CallError::Exited)?.regs;
        let mut sp = saved.rsp - RED_ZONE - 256;
        sp = (sp - data.len() as u64) & !15;
        let data_at = sp;
        self.write(data_at, data)?;
        sp -= 8; // the return address: rsp ≡ 8 (mod 16) at the callee's entry
        self.write(sp, &0u64.to_ne_bytes())?;
        let mut regs = saved;
        regs.rsp = sp;
        regs.rip = func;
        let args: Vec<u64> = args.iter().map(|&a| if a == DATA { data_at } else { a }).collect();
        regs.rdi = args.first().copied().unwrap_or(0);
        regs.rsi = args.get(1).copied().unwrap_or(0);
        regs.rdx = args.get(2).copied().unwrap_or(0);
        regs.rax = 0;
        // Not inside a system call any more: the kernel must not restart one
        // at our rip (it does so again when `saved` is put back).
        regs.orig_rax = u64::MAX;
        set_regs(tid, &regs)?;
        ptrace(libc::PTRACE_CONT, tid, 0, 0)?;
        let start = Instant::now();
        let result = loop {
            let left = limit.saturating_sub(start.elapsed());
            let Some(status) = wait_status(tid, left)? else {
                return Err(CallError::Timeout(limit));
            };
            if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
                self.threads.remove(&tid);
                return Err(CallError::Exited);
            }
            if !libc::WIFSTOPPED(status) {
                continue;
            }
            let sig = libc::WSTOPSIG(status);
            if status >> 16 != 0 {
                // An event stop (a group stop): go on.
                ptrace(libc::PTRACE_CONT, tid, 0, 0)?;
                continue;
            }
            let now = get_regs(tid)?;
            if sig == libc::SIGSEGV && now.rip == 0 {
                break now.rax;
            }
            if sig == libc::SIGSEGV || sig == libc::SIGBUS || sig == libc::SIGILL || sig == libc::SIGFPE {
                // Put the thread back as it was; the fault is not delivered.
                set_regs(tid, &saved)?;
                return Err(CallError::Fault { sig, rip: now.rip });
            }
            // The program's own signal: kept for later, not delivered into
            // the injected call.
            if let Some(s) = self.threads.get_mut(&tid) {
                s.pending_signal = sig;
            }
            ptrace(libc::PTRACE_CONT, tid, 0, 0)?;
        };
        set_regs(tid, &saved)?;
        Ok(result)
    }

    /// Every thread's general registers (for the unload check).
    pub fn regs(&self) -> impl Iterator<Item = (i32, &libc::user_regs_struct)> {
        self.threads.iter().map(|(t, s)| (*t, &s.regs))
    }
}

/// In `call`'s arguments: the address the data was copied to.
pub const DATA: u64 = u64::MAX - 1;

impl Drop for Tracee {
    fn drop(&mut self) {
        let all: Vec<i32> = self.threads.keys().copied().collect();
        for tid in all {
            self.release(tid);
        }
    }
}

/// The general registers as a list (for the unload check: a thread holding
/// an address of the library in any of them may still jump there).
pub fn register_values(r: &libc::user_regs_struct) -> [u64; 17] {
    [
        r.rip, r.rsp, r.rbp, r.rax, r.rbx, r.rcx, r.rdx, r.rsi, r.rdi, r.r8, r.r9, r.r10, r.r11, r.r12, r.r13, r.r14, r.r15,
    ]
}

/// The thread the injected calls run on, given the highest CPU weight (nice
/// -20) for as long as this lives, and its own nice value back after. On a
/// busy machine a thread of ordinary weight gets a CPU for a slice now and
/// then, and the calls' many short steps (system calls, page faults) each
/// wait for one: that wait was most of the stop at attach under load. Needs
/// CAP_SYS_NICE; without it nothing changes.
pub struct Boost {
    tid: i32,
    nice: Option<i32>,
}

impl Boost {
    pub fn new(tid: i32) -> Boost {
        let nice = nice_of(tid).filter(|&n| n > -20 && set_nice(tid, -20));
        Boost { tid, nice }
    }
}

impl Drop for Boost {
    fn drop(&mut self) {
        if let Some(n) = self.nice {
            set_nice(self.tid, n);
        }
    }
}

/// A thread's nice value (from /proc: getpriority's -1 is ambiguous).
fn nice_of(tid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{tid}/stat")).ok()?;
    // Field 19, counted after the command name's closing parenthesis (field 2).
    stat.rsplit_once(')')?.1.split_whitespace().nth(16)?.parse().ok()
}

fn set_nice(tid: i32, nice: i32) -> bool {
    // SAFETY: setpriority takes integers; PRIO_PROCESS with a thread id sets that thread's nice value.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_syscall_line_gives_the_blocking_call() {
        assert_eq!(parse_syscall("running\n"), None);
        assert_eq!(parse_syscall("-1 0x7ffc 0x7f00\n"), None);
        assert_eq!(parse_syscall("7 0x5581 0x1 0xffffffff 0x0 0x0 0x0 0x7ffd 0x7f12\n"), Some(7));
        // This thread, blocked in nanosleep (35) or clock_nanosleep (230) while another reads it.
        let me = std::process::id() as i32;
        let (tx, rx) = std::sync::mpsc::channel();
        let sleeper = std::thread::spawn(move || {
            // SAFETY: gettid takes no arguments.
            tx.send(unsafe { libc::gettid() }).unwrap();
            std::thread::sleep(Duration::from_millis(300));
        });
        let tid = rx.recv().unwrap();
        let seen = (0..100).find_map(|_| {
            std::thread::sleep(Duration::from_millis(2));
            blocked_in(me, tid)
        });
        assert!(matches!(seen, Some(35) | Some(230)), "{seen:?}");
        sleeper.join().unwrap();
    }
}
