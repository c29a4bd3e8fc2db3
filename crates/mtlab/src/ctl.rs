//! `mtlab ctl PID ...`: switch a running process's sampler on and off,
//! change its interval, or dump its profile, through the control page the
//! preload library shares at /dev/shm/mtlab-PID (layout: mtlab_trace.h).
//!
//! The page's name is predictable and /dev/shm is writable by everyone: a
//! page is used only if the process maps that very file (device and inode,
//! not name), and nothing read from it is trusted to name a file.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::analysis::model::AllocatorReading;
use crate::platform::names;
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
    #[error("{path} is not the control page of process {pid}: {why}. A sampled process that finds at that name something it did not create keeps its page private (its trace's STATS say ctl_page_refused=1); only its signal reaches its sampler then: `kill -s RTMIN+7 {pid}` (or the MTLAB_SIGNAL it was started with) toggles sampling")]
    NotItsPage { pid: u32, path: PathBuf, why: String },
    #[error("process {pid} has no trace file open that its control page names ({hint}): {why}")]
    NoTrace { pid: u32, hint: PathBuf, why: String },
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
    /// The page file's owner: the user of the process that created it.
    owner: u32,
}

/// A file as the kernel names the files a process maps: device (major,
/// minor) and inode. Names are not compared: a name may be a link to, or
/// merely end like, another process's page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileId {
    major: u64,
    minor: u64,
    ino: u64,
}

impl FileId {
    fn of(m: &std::fs::Metadata) -> FileId {
        use std::os::unix::fs::MetadataExt;
        // glibc's encoding of dev_t (gnu_dev_major/minor).
        let dev = m.dev();
        FileId { major: ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff), minor: (dev & 0xff) | ((dev >> 12) & !0xff), ino: m.ino() }
    }

    /// The device and inode fields of a /proc/PID/maps line.
    fn of_maps_line(line: &str) -> Option<FileId> {
        let mut f = line.split_ascii_whitespace().skip(3);
        let (major, minor) = f.next()?.split_once(':')?;
        let ino = f.next()?.parse().ok()?;
        Some(FileId { major: u64::from_str_radix(major, 16).ok()?, minor: u64::from_str_radix(minor, 16).ok()?, ino })
    }
}

/// Does process `pid` map the file `id`? From /proc/PID/maps, which any
/// user who may control the process can read (/proc/PID/map_files needs
/// CAP_CHECKPOINT_RESTORE to follow), and which names the same device and inode.
fn maps_file(pid: u32, id: FileId) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map(|m| m.lines().any(|l| FileId::of_maps_line(l) == Some(id)))
        .unwrap_or(false)
}

fn is_ctl_header(magic: u64, version: u32) -> bool {
    magic == CTL_MAGIC && version == CTL_VERSION
}

/// The page's trace path field, NUL-terminated by the writer.
fn nul_terminated_path(field: &[u8]) -> PathBuf {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    PathBuf::from(String::from_utf8_lossy(&field[..end]).to_string())
}

/// Opens `path` for reading (and writing with `write`) without following a
/// symlink and without blocking on a FIFO.
fn open_no_follow(path: &Path, write: bool) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
}

/// The control page of an abandoned process that `remove_abandoned_pages`
/// may remove: this user's regular file of exactly a page (no link, FIFO or
/// device is opened, and nothing past a page is read), of one of `traces`,
/// that no live process `pid` maps.
fn abandoned_page(path: &Path, pid: u32, traces: Option<&[PathBuf]>) -> bool {
    use std::io::Read;
    let Ok(file) = crate::platform::safe_fs::open_owned_regular(path, false) else { return false };
    let Ok(m) = file.metadata() else { return false };
    let mut bytes = vec![0u8; CTL_SIZE as usize];
    if m.len() != CTL_SIZE as u64 || (&file).read_exact(&mut bytes).is_err() {
        return false;
    }
    let header = (u64::from_le_bytes(bytes[0..8].try_into().unwrap()), u32::from_le_bytes(bytes[8..12].try_into().unwrap()));
    if !is_ctl_header(header.0, header.1) {
        return false;
    }
    let trace = nul_terminated_path(&bytes[CTL_OFF_PATH as usize..]);
    traces.is_none_or(|t| t.contains(&trace)) && !(pid_alive(pid) && maps_file(pid, FileId::of(&m)))
}

/// Removes the control pages (`/dev/shm/mtlab-PID`) that processes of one
/// recording left behind by dying without their exit code running (SIGKILL):
/// pages whose trace path is one of `traces` and whose process no longer maps
/// them. A page of a process still running, or of another recording, stays,
/// and so does anything another user put there. Returns how many were removed.
pub fn remove_abandoned_pages(traces: &[PathBuf]) -> usize {
    remove_pages(Some(traces))
}

/// Removes the control pages of this user that no live process maps, of any
/// recording: those a run left when it and its `mtlab record` were both
/// killed (SIGKILL), which no later run of that recording would remove.
/// Called when `mtlab record` starts. Pages of other users, and anything
/// that is not a control page, stay.
pub fn remove_dead_pages() -> usize {
    remove_pages(None)
}

fn remove_pages(traces: Option<&[PathBuf]>) -> usize {
    let Ok(dir) = std::fs::read_dir(names::CTL_PAGE_DIR) else { return 0 };
    let mut removed = 0;
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(names::CTL_PAGE_PREFIX)).and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        // (Only this user's files pass: in the sticky directory, no one else
        // can put another file at the name between the check and the removal.)
        let path = entry.path();
        if path != names::ctl_page(pid) {
            continue; // ("mtlab-007": no process's page)
        }
        if abandoned_page(&path, pid, traces) && std::fs::remove_file(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// The control page file of process `pid`, checked to be the one it maps.
fn page_file_of(pid: u32) -> Result<(std::fs::File, std::fs::Metadata, PathBuf), CtlError> {
    let path = names::ctl_page(pid);
    if !pid_alive(pid) && std::fs::symlink_metadata(&path).is_err() {
        return Err(CtlError::NoProcess(pid));
    }
    let not_its = |path: PathBuf, why: String| CtlError::NotItsPage { pid, path, why };
    let file = match open_no_follow(&path, true) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(CtlError::NoSampler(pid, path)),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(not_its(path, "it is a symbolic link".into())),
        Err(source) => return Err(CtlError::Io { path, source }),
    };
    let m = file.metadata().map_err(|source| CtlError::Io { path: path.clone(), source })?;
    if !m.file_type().is_file() {
        return Err(not_its(path, "it is not a regular file".into()));
    }
    // A page left by a process that died (and whose pid was reused), or a
    // file someone else put at the name, must not make us act on or signal
    // an unrelated process: the live process must map this very file.
    if !pid_alive(pid) {
        return Err(CtlError::Ended(pid, path));
    }
    if !maps_file(pid, FileId::of(&m)) {
        use std::os::unix::fs::MetadataExt;
        let why = format!("process {pid} does not map it (the file belongs to user {})", m.uid());
        return Err(not_its(path, why));
    }
    Ok((file, m, path))
}

/// How long a control page whose header is still 0 (its process between
/// sizing the file and writing it) is waited for.
const HEADER_WAIT: Duration = Duration::from_secs(2);

impl CtlPage {
    pub fn open(pid: u32) -> Result<CtlPage, CtlError> {
        use std::os::unix::fs::MetadataExt;
        let (file, m, path) = page_file_of(pid)?;
        if m.len() < CTL_SIZE as u64 {
            return Err(CtlError::BadPage(path));
        }
        let page = match SharedPage::map(&file, CTL_SIZE as usize) {
            Ok(page) => CtlPage { page, path, owner: m.uid() },
            Err(source) => return Err(CtlError::Io { path, source }),
        };
        // The process sizes and maps its page before it writes the header:
        // a page still all 0 there is waited for (briefly), any other
        // header is not a control page.
        let deadline = Instant::now() + HEADER_WAIT;
        loop {
            let (magic, version) = (page.u64_at(0).load(Ordering::Acquire), page.u32_at(8).load(Ordering::Acquire));
            if is_ctl_header(magic, version) {
                return Ok(page);
            }
            if magic != 0 || version != 0 || Instant::now() >= deadline {
                return Err(CtlError::BadPage(page.path.clone()));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
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
    /// The trace path the page names: written by the process, so only a
    /// hint (`trace_of` finds the file among the process's descriptors).
    fn trace_hint(&self) -> PathBuf {
        nul_terminated_path(self.page.bytes_from(CTL_OFF_PATH))
    }

    /// The trace file process `pid` writes, never taken on the page's word
    /// (whoever can write the page could name any file): one of the
    /// process's open descriptors, a regular file owned by the page's owner,
    /// the very file the page's path names. Returned pinned (an `O_PATH`
    /// descriptor, so nothing is opened that could act on a device or FIFO)
    /// with the name the kernel gives it.
    pub fn trace_of(&self, pid: u32) -> Result<Trace, CtlError> {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let hint = self.trace_hint();
        let no_trace = |why: String| CtlError::NoTrace { pid, hint: hint.clone(), why };
        let named = std::fs::metadata(&hint).map_err(|e| no_trace(format!("cannot look at it: {e}")))?;
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_err(|e| no_trace(format!("cannot list its descriptors: {e}")))?;
        for fd in fds.flatten() {
            let Ok(pinned) = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_PATH | libc::O_CLOEXEC).open(fd.path()) else {
                continue;
            };
            let Ok(m) = pinned.metadata() else { continue };
            if m.file_type().is_file() && m.uid() == self.owner && FileId::of(&m) == FileId::of(&named) {
                let name = std::fs::read_link(fd.path()).unwrap_or(hint.clone());
                return Ok(Trace { name, pinned });
            }
        }
        Err(no_trace(format!("none of its open files is that file owned by user {}", self.owner)))
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

/// A trace file a process has open, pinned by an `O_PATH` descriptor.
pub struct Trace {
    /// The file's name (as the kernel gives it), for messages.
    pub name: PathBuf,
    pinned: std::fs::File,
}

impl Trace {
    /// A path that opens this very file as long as `self` lives, whatever
    /// is done to its name meanwhile.
    fn path(&self) -> PathBuf {
        use std::os::fd::AsRawFd;
        PathBuf::from(format!("/proc/self/fd/{}", self.pinned.as_raw_fd()))
    }
}

pub fn status_line(pid: u32, page: &CtlPage) -> String {
    let trace = match page.trace_of(pid) {
        Ok(t) => t.name.display().to_string(),
        Err(_) => "not open yet".to_string(),
    };
    format!(
        "process {pid}: sampling {}, interval {}, {} samples so far, trace {trace} (signal {} toggles)",
        if page.active() { "on" } else { "off" },
        crate::units::format_size(page.interval()),
        page.samples(),
        page.signal()
    )
}

/// The process `mtlab ctl PID` means: PID itself when it has a control
/// page; otherwise, when PID is a `mtlab record` (what `$!` gives after
/// `mtlab record … &`), the one child of it that has one.
pub fn traced_pid(pid: u32) -> u32 {
    crate::platform::recorder_page::pid_or_child_with(pid, |p| page_file_of(p).is_ok()).unwrap_or(pid)
}

/// How long `mtlab ctl` waits for a process that is starting (`mtlab record
/// --sample … &` run just before) to make its control page.
pub const STARTING_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// [`traced_pid`], waiting up to `wait` while `pid` is alive and neither it
/// nor a child of it has a control page yet (the sampler makes it when the
/// program starts); with how long it waited.
pub fn traced_pid_waiting(pid: u32, wait: std::time::Duration) -> (u32, std::time::Duration) {
    let started = std::time::Instant::now();
    loop {
        let found = traced_pid(pid);
        if page_file_of(found).is_ok() || !pid_alive(pid) || started.elapsed() >= wait {
            return (found, started.elapsed());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Where `ctl dump` writes by default.
pub fn default_dump_path(pid: u32) -> PathBuf {
    crate::platform::names::default_dump(pid)
}

/// How long `ctl dump` waits for the heap manager's figures after the flush:
/// a program that allocates nothing meanwhile (idle) should not hold it up.
pub const READING_WAIT: Duration = Duration::from_secs(2);

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
    let file = page.trace_of(pid)?;
    let (trace, readings, profile) = read_so_far(&file.path())?;
    let req = ExportRequest { pprof: Some(pprof.to_path_buf()), ..Default::default() };
    export_data(&profile.data, &req).map_err(ProfileExportError::from)?;
    let reading = if read {
        AllocatorReading::with_estimates(readings, &profile.inuse_at_checkpoints).into_iter().find(|r| r.dump == seq)
    } else {
        None
    };
    Ok(Dump { trace: file.name, reading, allocator: trace.header.allocator.clone() })
}

/// A sampled trace as written so far: the trace, the heap manager's
/// readings in it, and the profile.
fn read_so_far(path: &Path) -> Result<(TraceFile, Vec<AllocatorReading>, crate::profile::sampled::SampledProfile), ProfileExportError> {
    let trace = TraceFile::open(path)?;
    let readings = AllocatorReading::all_of(&trace);
    let profile = crate::profile::sampled::read_sampled(&trace, AllocatorReading::tscs(&readings))?;
    Ok((trace, readings, profile))
}

/// The profile of sampled process `pid` so far (its buffers flushed first,
/// as `dump` does), and its heap manager's name; with `ended`, the process
/// is gone and `trace` is read as it was left.
pub fn profile_so_far(pid: u32, trace: &Path, ended: bool, timeout: Duration) -> Result<(crate::profile::ProfileData, String), DumpError> {
    if !ended {
        let page = CtlPage::open(pid)?;
        page.request_dump(pid, timeout)?;
    }
    let (trace, _, profile) = read_so_far(trace)?;
    Ok((profile.data, trace.header.allocator.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Held by the tests that look at (or make) this test process's page.
    static OWN_PID_PAGE: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn a_missing_process_and_an_unsampled_one_are_told_apart() {
        let _own = OWN_PID_PAGE.lock().unwrap_or_else(|e| e.into_inner());
        // Above the largest pid_max Linux allows: no such process.
        let e = CtlPage::open(4_194_305).err().unwrap();
        assert!(matches!(e, CtlError::NoProcess(4_194_305)), "{e}");
        assert!(e.to_string().starts_with("there is no process 4194305"), "{e}");
        // This test process exists but was not started by `mtlab record --sample`.
        let e = CtlPage::open(std::process::id()).err().unwrap();
        assert!(matches!(e, CtlError::NoSampler(..)), "{e}");
    }

    #[test]
    fn a_mapped_file_is_known_by_device_and_inode_not_by_name() {
        let d = tempfile::tempdir().unwrap();
        let mapped = d.path().join("dev/shm/mtlab-1");
        std::fs::create_dir_all(mapped.parent().unwrap()).unwrap();
        std::fs::write(&mapped, vec![0u8; 4096]).unwrap();
        let other = d.path().join("mtlab-1");
        std::fs::write(&other, vec![0u8; 4096]).unwrap();
        let file = std::fs::OpenOptions::new().read(true).write(true).open(&mapped).unwrap();
        let _page = SharedPage::map(&file, 4096).unwrap();
        let me = std::process::id();
        assert!(maps_file(me, FileId::of(&std::fs::metadata(&mapped).unwrap())));
        // Its name ends like this file's: not the same file.
        assert!(!maps_file(me, FileId::of(&std::fs::metadata(&other).unwrap())));
        let line = "7f00-7f01 rw-s 00000000 00:1a 12345    /dev/shm/mtlab-9 (deleted)";
        assert_eq!(FileId::of_maps_line(line), Some(FileId { major: 0, minor: 0x1a, ino: 12345 }));
    }

    /// A control page of this test process at its real name (the pid is
    /// ours alone), naming `trace`; removed on drop.
    struct OwnPage {
        path: PathBuf,
        _map: SharedPage,
    }

    impl OwnPage {
        fn new(trace: &Path) -> OwnPage {
            let path = names::ctl_page(std::process::id());
            let mut bytes = vec![0u8; CTL_SIZE as usize];
            bytes[0..8].copy_from_slice(&CTL_MAGIC.to_le_bytes());
            bytes[8..12].copy_from_slice(&CTL_VERSION.to_le_bytes());
            let name = trace.as_os_str().as_encoded_bytes();
            bytes[CTL_OFF_PATH as usize..][..name.len()].copy_from_slice(name);
            use std::os::unix::fs::OpenOptionsExt;
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)
                .unwrap();
            std::io::Write::write_all(&mut &file, &bytes).unwrap();
            OwnPage { _map: SharedPage::map(&file, CTL_SIZE as usize).unwrap(), path }
        }
    }

    impl Drop for OwnPage {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    /// The process writes its page's header after it has sized and mapped
    /// the file: `open` in between waits for it, and refuses a header that
    /// stays 0 or is another's.
    #[test]
    fn a_page_whose_header_is_still_being_written_is_waited_for() {
        let d = tempfile::tempdir().unwrap();
        let trace = d.path().join("t.mtl");
        let _own_pid = OWN_PID_PAGE.lock().unwrap_or_else(|e| e.into_inner());
        let own = OwnPage::new(&trace);
        let me = std::process::id();
        own._map.u32_at(8).store(0, Ordering::Release);
        own._map.u64_at(0).store(0, Ordering::Release);
        let e = CtlPage::open(me).err().unwrap();
        assert!(matches!(e, CtlError::BadPage(_)), "a header that stays 0: {e}");
        let started = Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(50));
                own._map.u32_at(8).store(CTL_VERSION, Ordering::Release);
                own._map.u64_at(0).store(CTL_MAGIC, Ordering::Release);
            });
            assert!(CtlPage::open(me).is_ok(), "the header written 50 ms later");
        });
        assert!(started.elapsed() < HEADER_WAIT);
        own._map.u64_at(0).store(CTL_MAGIC ^ 1, Ordering::Release);
        let started = Instant::now();
        assert!(matches!(CtlPage::open(me), Err(CtlError::BadPage(_))));
        assert!(started.elapsed() < Duration::from_millis(500), "a wrong magic is refused at once");
        drop(own);
    }

    #[test]
    fn the_trace_is_a_file_the_process_has_open_never_just_a_name_on_the_page() {
        let d = tempfile::tempdir().unwrap();
        let trace = d.path().join("t.mtl");
        std::fs::write(&trace, b"MTLABTR\0").unwrap();
        let _own_pid = OWN_PID_PAGE.lock().unwrap_or_else(|e| e.into_inner());
        let own = OwnPage::new(&trace);
        let me = std::process::id();
        let page = CtlPage::open(me).unwrap();
        assert_eq!(traced_pid(me), me);
        // The page names the file, but the process does not have it open:
        // whoever wrote the page could have named any file.
        let e = page.trace_of(me).err().unwrap();
        assert!(matches!(e, CtlError::NoTrace { .. }), "{e}");
        let held = std::fs::File::open(&trace).unwrap();
        let t = page.trace_of(me).unwrap();
        assert_eq!(t.name, trace.canonicalize().unwrap());
        assert_eq!(std::fs::read(t.path()).unwrap(), b"MTLABTR\0");
        // Open, but another user's file (not the page owner's): refused.
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            std::os::unix::fs::chown(&trace, Some(65534), None).unwrap();
            assert!(page.trace_of(me).is_err(), "a file of user 65534 is not the trace of root's process");
        }
        drop(held);
        drop(own);
    }
}
