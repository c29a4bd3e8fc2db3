//! `mtlab ctl PID ...`: switch a running process's sampler on and off,
//! change its interval, or dump its profile, through the control page the
//! preload library shares at /dev/shm/mtlab-PID (layout: mtlab_trace.h).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::heap::analyze::AllocatorReading;
use crate::platform::process::pid_alive;
use crate::profile::export::{export_data, ExportRequest, ProfileExportError};
use crate::trace::decode::TraceFile;
use crate::platform::shared_page::SharedPage;
use crate::trace::format::*;

#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    #[error("there is no process {0} (see `ps`; `mtlab record --sample` runs the program with its own pid)")]
    NoProcess(u32),
    #[error("process {0} is not running under `mtlab record --sample` (no {1}); start it with `mtlab record --sample 512KiB [--inactive] -- PROGRAM`")]
    NoSampler(u32, PathBuf),
    #[error("process {0} is not the process that created {1} (it has ended; delete the file)")]
    Ended(u32, PathBuf),
    #[error("cannot use {path}: {source} (run mtlab ctl as the user who runs the program)")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{0} is not an mtlab control page (wrong magic or version)")]
    BadPage(PathBuf),
    #[error("process {pid} did not answer the dump request within {secs} s ({why})")]
    Timeout { pid: u32, secs: u64, why: String },
    #[error("process {pid} did not switch its allocation calls over to the sampler within {secs} s ({why}): sampling is on, but most allocation calls still bypass the sampler; record with MTLAB_GOT=0 in the environment to keep every call on mtlab's shims")]
    NotRouted { pid: u32, secs: u64, why: String },
}

/// The shared control page of one process.
pub struct CtlPage {
    page: SharedPage,
    pub path: PathBuf,
}

/// Does process `pid` have `path` mapped (is it the page's owner)?
fn maps_page(pid: u32, path: &std::path::Path) -> bool {
    let needle = path.to_string_lossy();
    std::fs::read_to_string(format!("/proc/{pid}/maps")).map(|m| m.lines().any(|l| l.ends_with(needle.as_ref()))).unwrap_or(false)
}

fn is_ctl_header(magic: u64, version: u32) -> bool {
    magic == CTL_MAGIC && version == CTL_VERSION
}

/// The page's trace path field, NUL-terminated by the writer.
fn nul_terminated_path(field: &[u8]) -> PathBuf {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    PathBuf::from(String::from_utf8_lossy(&field[..end]).to_string())
}

/// Removes the control pages (`/dev/shm/mtlab-PID`) that processes of one
/// recording left behind by dying without their exit code running (SIGKILL):
/// pages whose trace path is one of `traces` and whose process no longer maps
/// them. A page of a process still running, or of another recording, stays.
/// Returns how many were removed.
pub fn remove_abandoned_pages(traces: &[PathBuf]) -> usize {
    let Ok(dir) = std::fs::read_dir("/dev/shm") else { return 0 };
    let mut removed = 0;
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("mtlab-")).and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        let path = entry.path();
        let Ok(bytes) = std::fs::read(&path) else { continue };
        if bytes.len() < CTL_SIZE as usize
            || !is_ctl_header(
                u64::from_le_bytes(bytes[0..8].try_into().unwrap()),
                u32::from_le_bytes(bytes[8..12].try_into().unwrap()),
            )
        {
            continue;
        }
        let trace = nul_terminated_path(&bytes[CTL_OFF_PATH as usize..CTL_SIZE as usize]);
        if traces.contains(&trace) && !(pid_alive(pid) && maps_page(pid, &path)) && std::fs::remove_file(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}

impl CtlPage {
    pub fn open(pid: u32) -> Result<CtlPage, CtlError> {
        let path = PathBuf::from(format!("/dev/shm/mtlab-{pid}"));
        if !pid_alive(pid) && !path.exists() {
            return Err(CtlError::NoProcess(pid));
        }
        let file = match std::fs::OpenOptions::new().read(true).write(true).open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(CtlError::NoSampler(pid, path)),
            Err(source) => return Err(CtlError::Io { path, source }),
        };
        // A page left by a process that died (and whose pid was reused) must
        // not make us signal an unrelated process: the live process must map it.
        if !pid_alive(pid) || !maps_page(pid, &path) {
            return Err(CtlError::Ended(pid, path));
        }
        let len = file.metadata().map_err(|source| CtlError::Io { path: path.clone(), source })?.len();
        if len < CTL_SIZE as u64 {
            return Err(CtlError::BadPage(path));
        }
        let page = match SharedPage::map(&file, CTL_SIZE as usize) {
            Ok(page) => CtlPage { page, path },
            Err(source) => return Err(CtlError::Io { path, source }),
        };
        if !is_ctl_header(page.u64_at(0).load(Ordering::Relaxed), page.u32_at(8).load(Ordering::Relaxed)) {
            return Err(CtlError::BadPage(page.path.clone()));
        }
        Ok(page)
    }

    fn u32_at(&self, off: u32) -> &AtomicU32 {
        self.page.u32_at(off)
    }

    fn u64_at(&self, off: u32) -> &AtomicU64 {
        self.page.u64_at(off)
    }

    pub fn state(&self) -> u32 {
        self.u32_at(CTL_OFF_STATE).load(Ordering::Acquire)
    }
    pub fn active(&self) -> bool {
        self.state() & CTL_ACTIVE != 0
    }
    pub fn set_active(&self, on: bool) {
        if on {
            self.u32_at(CTL_OFF_STATE).fetch_or(CTL_ACTIVE, Ordering::AcqRel);
        } else {
            self.u32_at(CTL_OFF_STATE).fetch_and(!CTL_ACTIVE, Ordering::AcqRel);
        }
    }
    pub fn interval(&self) -> u64 {
        self.u64_at(CTL_OFF_INTERVAL).load(Ordering::Relaxed)
    }
    pub fn set_interval(&self, bytes: u64) {
        self.u64_at(CTL_OFF_INTERVAL).store(bytes, Ordering::Release);
    }
    pub fn samples(&self) -> u64 {
        self.u64_at(CTL_OFF_SAMPLES).load(Ordering::Relaxed)
    }
    pub fn signal(&self) -> u32 {
        self.u32_at(CTL_OFF_SIGNAL).load(Ordering::Relaxed)
    }
    /// `CTL_ROUTE_*` bits of the process's last GOT routing (0: not routing).
    pub fn routed(&self) -> u32 {
        self.u32_at(CTL_OFF_ROUTED).load(Ordering::Acquire)
    }

    /// How the process is woken: its control thread (a futex on the page,
    /// no signal: the program's system calls are never interrupted), or the
    /// signal where that thread could not start. Waits up to `timeout` for a
    /// process still setting the page up (None: it never finished).
    fn wake_mode(&self, timeout: Duration) -> Option<u32> {
        let start = Instant::now();
        loop {
            match self.u32_at(CTL_OFF_WAKE).load(Ordering::Acquire) {
                0 if start.elapsed() < timeout => std::thread::sleep(Duration::from_millis(2)),
                0 => return None,
                mode => return Some(mode),
            }
        }
    }

    /// Tells the process to act on the page (`value`: the signal's marker,
    /// used only when it has no control thread). False if it is not set up.
    fn wake(&self, pid: u32, value: u32, timeout: Duration) -> bool {
        match self.wake_mode(timeout) {
            Some(CTL_WAKE_FUTEX) => {
                let word = self.u32_at(CTL_OFF_CTL_SEQ);
                word.fetch_add(1, Ordering::AcqRel);
                // SAFETY: FUTEX_WAKE on a 4-aligned word of a shared mapping
                // of the page file; it only wakes waiters on that word.
                unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX, 0, 0, 0) };
                true
            }
            Some(_) => {
                let value = libc::sigval { sival_ptr: value as usize as *mut libc::c_void };
                // SAFETY: queuing a signal to the process that maps the page
                // (checked in open()), whose handler is installed (wake is set).
                unsafe { libc::sigqueue(pid as libc::pid_t, self.signal() as libc::c_int, value) };
                true
            }
            None => false,
        }
    }

    /// Why a request may go unanswered, for messages.
    pub fn why_no_answer(&self) -> String {
        match self.u32_at(CTL_OFF_WAKE).load(Ordering::Acquire) {
            CTL_WAKE_FUTEX => "its mtlab-ctl thread did not answer: is the process stopped?".to_string(),
            CTL_WAKE_SIGNAL => format!("it has no mtlab-ctl thread; is signal {} blocked or handled by the program?", self.signal()),
            _ => "it has not finished setting up its sampler".to_string(),
        }
    }

    /// After `set_active`: a process that routes its GOT slots (calls of the
    /// modules loaded at startup go straight to the real allocator while
    /// sampling is off) never enters mtlab's code by itself, so it is asked
    /// to route them for the new state. Waits until it has; false if it did
    /// not within `timeout`.
    pub fn apply_routing(&self, pid: u32, timeout: Duration) -> bool {
        if self.routed() & CTL_ROUTE_ON == 0 && self.wake_mode(timeout).is_some() {
            return true; // every call passes through the shims, which read the state
        }
        if !self.wake(pid, CTL_APPLY_VALUE, timeout) {
            return false;
        }
        let start = Instant::now();
        loop {
            if (self.routed() & CTL_ROUTE_ALLOC != 0) == self.active() {
                return true;
            }
            if start.elapsed() > timeout {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    pub fn trace_path(&self) -> PathBuf {
        nul_terminated_path(self.page.bytes_from(CTL_OFF_PATH))
    }

    /// Asks the process to flush all its buffers; waits until it has.
    /// Returns the dump's number.
    pub fn request_dump(&self, pid: u32, timeout: Duration) -> Result<u64, CtlError> {
        let seq = self.u64_at(CTL_OFF_DUMP_SEQ).fetch_add(1, Ordering::AcqRel) + 1;
        // As a signal, queued with a marker value: the handler dumps, and
        // never toggles sampling (a plain `kill -s RTMIN+7` does).
        let timed_out = || CtlError::Timeout { pid, secs: timeout.as_secs(), why: self.why_no_answer() };
        if !self.wake(pid, CTL_DUMP_VALUE, timeout) {
            return Err(timed_out());
        }
        let start = Instant::now();
        while self.u64_at(CTL_OFF_DUMP_DONE).load(Ordering::Acquire) < seq {
            if start.elapsed() > timeout {
                return Err(timed_out());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(seq)
    }

    /// After dump `seq`: waits until the process has written the heap
    /// manager's own figures (its control thread reads them at once; without
    /// it, its next sampled allocation does, since a signal handler may not).
    /// False if it did not within `timeout`.
    pub fn wait_allocator_reading(&self, seq: u64, timeout: Duration) -> bool {
        let start = Instant::now();
        while self.u64_at(CTL_OFF_STATS_DONE).load(Ordering::Acquire) < seq {
            if start.elapsed() > timeout {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }
}

pub fn status_line(pid: u32, page: &CtlPage) -> String {
    format!(
        "process {pid}: sampling {}, interval {}, {} samples so far, trace {} (signal {} toggles)",
        if page.active() { "on" } else { "off" },
        crate::units::format_size(page.interval()),
        page.samples(),
        page.trace_path().display(),
        page.signal()
    )
}

/// The process `mtlab ctl PID` means: PID itself when it has a control
/// page; otherwise, when PID is a `mtlab record` (what `$!` gives after
/// `mtlab record … &`), the one child of it that has one.
pub fn traced_pid(pid: u32) -> u32 {
    let has_page = |p: u32| std::path::Path::new(&format!("/dev/shm/mtlab-{p}")).exists();
    if has_page(pid) {
        return pid;
    }
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return pid };
    let mut found: Vec<u32> = tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| c.split_whitespace().filter_map(|p| p.parse::<u32>().ok()).collect::<Vec<_>>())
        .filter(|&c| has_page(c))
        .collect();
    found.dedup();
    match found[..] {
        [one] => one,
        _ => pid,
    }
}

/// Where `ctl dump` writes by default.
pub fn default_dump_path(pid: u32) -> PathBuf {
    crate::platform::names::default_dump(pid)
}

/// How long `ctl dump` waits for the heap manager's figures after the flush:
/// a program that allocates nothing meanwhile (idle) should not hold it up.
const READING_WAIT: Duration = Duration::from_secs(2);

/// What `mtlab ctl dump` found.
pub struct Dump {
    pub trace: PathBuf,
    /// The heap manager's figures read for this dump, with mtlab's estimate
    /// then; None if the process did not read them within `READING_WAIT`.
    pub reading: Option<AllocatorReading>,
    pub allocator: String,
}

#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error(transparent)]
    Ctl(#[from] CtlError),
    #[error(transparent)]
    Export(#[from] ProfileExportError),
}

/// Flushes the process's buffers, waits (briefly) for the heap manager's own
/// figures, and writes the profile so far to `pprof`.
pub fn dump(pid: u32, pprof: &Path, timeout: Duration) -> Result<Dump, DumpError> {
    let page = CtlPage::open(pid)?;
    let seq = page.request_dump(pid, timeout)?;
    let read = page.wait_allocator_reading(seq, READING_WAIT.min(timeout));
    let path = page.trace_path();
    let trace = TraceFile::open(&path).map_err(ProfileExportError::from)?;
    let readings = AllocatorReading::all_of(&trace);
    let profile = crate::profile::sampled::read_sampled(&trace, AllocatorReading::tscs(&readings)).map_err(ProfileExportError::from)?;
    let req = ExportRequest { pprof: Some(pprof.to_path_buf()), ..Default::default() };
    export_data(&profile.data, &req).map_err(ProfileExportError::from)?;
    let reading = if read {
        AllocatorReading::with_estimates(readings, &profile.inuse_at_checkpoints).into_iter().find(|r| r.dump == seq)
    } else {
        None
    };
    Ok(Dump { trace: path, reading, allocator: trace.header.allocator.clone() })
}

/// The lines `ctl dump` prints about the heap manager's own figures.
pub fn reading_lines(d: &Dump) -> String {
    let Some(r) = &d.reading else {
        return format!(
            "the heap manager's own figures were not read within {} s: they are read at the program's next sampled allocation, and `mtlab report` shows them",
            READING_WAIT.as_secs()
        );
    };
    crate::report::views::allocator_reading_text(r, &d.allocator)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_process_and_an_unsampled_one_are_told_apart() {
        // Above the largest pid_max Linux allows: no such process.
        let e = CtlPage::open(4_194_305).err().unwrap();
        assert!(matches!(e, CtlError::NoProcess(4_194_305)), "{e}");
        assert!(e.to_string().starts_with("there is no process 4194305"), "{e}");
        // This test process exists but was not started by `mtlab record --sample`.
        let e = CtlPage::open(std::process::id()).err().unwrap();
        assert!(matches!(e, CtlError::NoSampler(..)), "{e}");
    }
}
