//! `mtlab ctl PID dump` for a flight recorder: `mtlab record --keep-last`
//! makes a page at `names::flight_page(PID)` (PID: the program's), `ctl`
//! adds one to its request count and waits until the recorder has answered
//! that request with the path of the window it wrote, or why it could not.
//!
//! The page is the recorder's own file (0600, created new): `ctl` uses it
//! only when it is this user's regular file and the recorder whose pid it
//! holds is alive and is the program's parent; the path read back is only
//! printed.

use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::platform::names;
use crate::platform::shared_page::SharedPage;

const SIZE: usize = 4096;
const MAGIC: u64 = 0x5448_4749_4c46_544d; // "MTFLIGHT"
const OFF_MAGIC: u32 = 0;
const OFF_REQUESTS: u32 = 8;
/// The request answered last.
const OFF_ANSWERED: u32 = 16;
/// 1 when that answer is an error message rather than a path.
const OFF_FAILED: u32 = 24;
const OFF_RECORDER: u32 = 32;
/// Length of the answer's text, then the text (written before OFF_ANSWERED).
const OFF_TEXT_LEN: u32 = 40;
const OFF_TEXT: u32 = 64;

#[derive(Debug, thiserror::Error)]
pub enum FlightCtlError {
    #[error("process {0} is not recorded with `mtlab record --keep-last` (no {1})")]
    NotRecorded(u32, PathBuf),
    #[error("{path} is not the request page of a flight recorder of process {pid}: {why}")]
    NotItsPage { pid: u32, path: PathBuf, why: String },
    #[error("the flight recorder of process {pid} did not answer within {secs} s")]
    Timeout { pid: u32, secs: u64 },
    #[error("the flight recorder of process {pid} could not write its window: {why}")]
    Failed { pid: u32, why: String },
}

/// The recorder's side: the page, removed on drop.
pub struct DumpRequests {
    page: SharedPage,
    path: PathBuf,
}

impl DumpRequests {
    /// Makes the page for program `pid`. A page of this user's at the name
    /// whose recorder is gone is replaced; anything else there is an error.
    pub fn create(pid: u32) -> std::io::Result<DumpRequests> {
        let path = names::flight_page(pid);
        if let Ok(f) = crate::platform::safe_fs::open_owned_regular(&path, true) {
            let whole = f.metadata().is_ok_and(|m| m.len() >= SIZE as u64);
            let stale = !whole || SharedPage::map(&f, SIZE).map(|p| recorder_alive(&p).is_none()).unwrap_or(true);
            if stale {
                let _ = std::fs::remove_file(&path);
            }
        }
        // Read-write (a shared mapping needs both), new, no link followed.
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)?;
        // SAFETY: ftruncate on a descriptor this function owns.
        let sized = unsafe { libc::ftruncate(f.as_raw_fd(), SIZE as libc::off_t) } == 0;
        let page = match sized.then(|| SharedPage::map(&f, SIZE)) {
            Some(Ok(p)) => p,
            Some(Err(e)) => {
                let _ = std::fs::remove_file(&path);
                return Err(e);
            }
            None => {
                let e = std::io::Error::last_os_error();
                let _ = std::fs::remove_file(&path);
                return Err(e);
            }
        };
        page.u64_at(OFF_RECORDER).store(std::process::id() as u64, Ordering::Relaxed);
        page.u64_at(OFF_MAGIC).store(MAGIC, Ordering::Release);
        Ok(DumpRequests { page, path })
    }

    /// Requests not answered yet: (the newest request's number, how many).
    pub fn pending(&self) -> Option<u64> {
        let (asked, answered) = (self.page.u64_at(OFF_REQUESTS).load(Ordering::Acquire), self.page.u64_at(OFF_ANSWERED).load(Ordering::Acquire));
        (asked > answered).then_some(asked)
    }

    /// Answers every request up to `seq` with `result` (a path or why not).
    pub fn answer(&self, seq: u64, result: Result<&Path, &str>) {
        let text = match result {
            Ok(p) => p.to_string_lossy().into_owned(),
            Err(e) => e.to_string(),
        };
        let bytes = text.as_bytes();
        let n = bytes.len().min(SIZE - OFF_TEXT as usize);
        for (i, chunk) in bytes[..n].chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.page.u64_at(OFF_TEXT + 8 * i as u32).store(u64::from_le_bytes(w), Ordering::Relaxed);
        }
        self.page.u64_at(OFF_TEXT_LEN).store(n as u64, Ordering::Relaxed);
        self.page.u64_at(OFF_FAILED).store(result.is_err() as u64, Ordering::Relaxed);
        self.page.u64_at(OFF_ANSWERED).store(seq, Ordering::Release);
    }
}

impl Drop for DumpRequests {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The recorder's pid when it is alive.
fn recorder_alive(page: &SharedPage) -> Option<u32> {
    if page.u64_at(OFF_MAGIC).load(Ordering::Acquire) != MAGIC {
        return None;
    }
    let pid = page.u64_at(OFF_RECORDER).load(Ordering::Relaxed) as u32;
    crate::platform::process::pid_alive(pid).then_some(pid)
}

/// The parent of `pid`, from /proc/PID/stat.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

/// The program `mtlab ctl PID` means when it has a flight recorder: PID
/// itself, or the one child of PID (a `mtlab record`, `$!`) that has one.
pub fn recorded_pid(pid: u32) -> Option<u32> {
    let has = |p: u32| std::fs::symlink_metadata(names::flight_page(p)).is_ok();
    if has(pid) {
        return Some(pid);
    }
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut found: Vec<u32> = tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| c.split_whitespace().filter_map(|p| p.parse::<u32>().ok()).collect::<Vec<_>>())
        .filter(|&c| has(c))
        .collect();
    found.dedup();
    match found[..] {
        [one] => Some(one),
        _ => None,
    }
}

/// `mtlab ctl PID dump` to the flight recorder of program `pid`: the path
/// of the window it wrote.
pub fn request_dump(pid: u32, timeout: Duration) -> Result<PathBuf, FlightCtlError> {
    let path = names::flight_page(pid);
    let not_its = |why: String| FlightCtlError::NotItsPage { pid, path: path.clone(), why };
    let f = match crate::platform::safe_fs::open_owned_regular(&path, true) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(FlightCtlError::NotRecorded(pid, path)),
        Err(e) => return Err(not_its(e.to_string())),
    };
    if f.metadata().map(|m| m.len()).unwrap_or(0) < SIZE as u64 {
        return Err(not_its("it is shorter than a page".into()));
    }
    let page = SharedPage::map(&f, SIZE).map_err(|e| not_its(e.to_string()))?;
    let recorder = recorder_alive(&page).ok_or_else(|| not_its("the recorder that made it has ended (delete the file)".into()))?;
    if parent_of(pid) != Some(recorder) {
        return Err(not_its(format!("process {pid} is not a child of the recorder {recorder}")));
    }
    let seq = page.u64_at(OFF_REQUESTS).fetch_add(1, Ordering::AcqRel) + 1;
    let start = Instant::now();
    while page.u64_at(OFF_ANSWERED).load(Ordering::Acquire) < seq {
        if start.elapsed() > timeout {
            return Err(FlightCtlError::Timeout { pid, secs: timeout.as_secs() });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let n = (page.u64_at(OFF_TEXT_LEN).load(Ordering::Relaxed) as usize).min(SIZE - OFF_TEXT as usize);
    let text = String::from_utf8_lossy(&page.bytes_from(OFF_TEXT)[..n]).into_owned();
    if page.u64_at(OFF_FAILED).load(Ordering::Relaxed) != 0 {
        return Err(FlightCtlError::Failed { pid, why: text });
    }
    Ok(PathBuf::from(text))
}
