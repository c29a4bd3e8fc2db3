//! `mtlab ctl PID dump` for a flight recorder: `mtlab record --keep-last`
//! makes a page at `names::flight_page(PID)` (PID: the program's), `ctl`
//! adds one to its request count and waits until the recorder has answered
//! that request with the path of the window it wrote, or why it could not.
//!
//! The page is the recorder's own file (0600, created new): `ctl` uses it
//! only when it is this user's regular file and the recorder whose pid it
//! holds is alive and is the program's parent; the path read back is only
//! printed.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::platform::names;
use crate::platform::recorder_page::{self, Layout, OpenError};
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
/// The window's length in ns, and 1 when the program also samples: written
/// once at creation, for `ctl PID status` and to know whether `ctl`'s other
/// commands have a sampler to reach.
const OFF_KEEP_LAST: u32 = 48;
const OFF_SAMPLED: u32 = 56;
const OFF_TEXT: u32 = 64;
const LAYOUT: Layout = Layout { size: SIZE, magic: MAGIC, off_magic: OFF_MAGIC, off_recorder: OFF_RECORDER };

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

/// What the page tells `ctl` about the recording besides answering dumps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct About {
    pub keep_last_ns: u64,
    pub sampled: bool,
}

/// The recorder's side: the page, removed on drop.
pub struct DumpRequests {
    page: SharedPage,
    path: PathBuf,
}

impl DumpRequests {
    /// Makes the page for program `pid`. A page of this user's at the name
    /// whose recorder is gone is replaced; anything else there is an error.
    pub fn create(pid: u32, about: About) -> std::io::Result<DumpRequests> {
        let path = names::flight_page(pid);
        let page = recorder_page::create_filled(&path, &LAYOUT, |p| {
            p.u64_at(OFF_KEEP_LAST).store(about.keep_last_ns, Ordering::Relaxed);
            p.u64_at(OFF_SAMPLED).store(about.sampled as u64, Ordering::Relaxed);
        })?;
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

/// The program `mtlab ctl PID` means when it has a flight recorder: PID
/// itself, or the one child of PID (a `mtlab record`, `$!`) that has one.
pub fn recorded_pid(pid: u32) -> Option<u32> {
    recorder_page::recorded_pid(pid, names::flight_page)
}

fn open(pid: u32) -> Result<SharedPage, FlightCtlError> {
    let path = names::flight_page(pid);
    recorder_page::open(pid, &path, &LAYOUT).map_err(|e| match e {
        OpenError::Missing => FlightCtlError::NotRecorded(pid, path.clone()),
        OpenError::NotIts(why) => FlightCtlError::NotItsPage { pid, path: path.clone(), why },
    })
}

/// What the flight recorder of program `pid` says of its recording.
pub fn about(pid: u32) -> Result<About, FlightCtlError> {
    let page = open(pid)?;
    let sampled = page.u64_at(OFF_SAMPLED).load(Ordering::Relaxed) != 0;
    Ok(About { keep_last_ns: page.u64_at(OFF_KEEP_LAST).load(Ordering::Relaxed), sampled })
}

/// `mtlab ctl PID dump` to the flight recorder of program `pid`: the path
/// of the window it wrote.
pub fn request_dump(pid: u32, timeout: Duration) -> Result<PathBuf, FlightCtlError> {
    let page = open(pid)?;
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
