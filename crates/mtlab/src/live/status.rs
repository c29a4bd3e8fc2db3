//! How far behind the live analysis is, for `mtlab ctl PID status`: a page
//! the recorder makes at `/dev/shm/mtlab-live-PID` (PID: the program's;
//! `platform::recorder_page` checks it) and rewrites at every look (50 ms),
//! under a sequence number (odd while it writes). Once the program has
//! exited, each traced process that outlived it has a page of its own
//! (`live_page(ITS PID)`, marked outlived), and `mtlab ctl PID stop`
//! counts a request on it: the recorder then finishes.

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use crate::platform::names;
use crate::platform::recorder_page::{self, Layout, OpenError};
use crate::platform::shared_page::SharedPage;

const SIZE: usize = 4096;
const MAGIC: u64 = 0x4741_4c45_5649_4c4d; // "MLIVELAG"
const OFF_MAGIC: u32 = 0;
const OFF_RECORDER: u32 = 8;
const OFF_SEQ: u32 = 16;
/// `mtlab ctl PID stop`'s requests, counted: nonzero asks the recorder to
/// finish now (an attached process's to detach; one analysing a process
/// that outlived the program to stop waiting for it).
const OFF_STOP: u32 = 24;
/// The figures of `Now`, in its order, one u64 each.
const OFF_FIGURES: u32 = 32;
/// 1: the page is of a process that outlived the program, which the
/// recorder analyses until it ends or `ctl stop` asks it to finish.
const OFF_OUTLIVED: u32 = OFF_FIGURES + 8 * 8;
const LAYOUT: Layout = Layout { size: SIZE, magic: MAGIC, off_magic: OFF_MAGIC, off_recorder: OFF_RECORDER };

/// Where the live analysis of a running program stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Now {
    /// Trace bytes written and not analysed yet, and the most that ever was.
    pub behind_bytes: u64,
    pub max_behind_bytes: u64,
    /// The newest event analysed, behind the program's clock (ns).
    pub behind_ns: u64,
    /// Events analysed so far.
    pub events: u64,
    /// Trace bytes analysed so far.
    pub consumed_bytes: u64,
    /// The raw trace's blocks on disk now.
    pub raw_disk_bytes: u64,
    pub late_events: u64,
    pub late_bytes: u64,
}

impl Now {
    /// A consumer's lag and the events it analysed.
    pub fn of(l: &super::file::Lag, events: u64) -> Now {
        Now {
            behind_bytes: l.behind_bytes,
            max_behind_bytes: l.max_behind_bytes,
            behind_ns: l.behind_ns,
            events,
            consumed_bytes: l.consumed_bytes,
            raw_disk_bytes: l.raw_disk_bytes,
            late_events: l.late_events,
            late_bytes: l.late_bytes,
        }
    }

    fn words(&self) -> [u64; 8] {
        [
            self.behind_bytes,
            self.max_behind_bytes,
            self.behind_ns,
            self.events,
            self.consumed_bytes,
            self.raw_disk_bytes,
            self.late_events,
            self.late_bytes,
        ]
    }

    fn of_words(w: [u64; 8]) -> Now {
        Now {
            behind_bytes: w[0],
            max_behind_bytes: w[1],
            behind_ns: w[2],
            events: w[3],
            consumed_bytes: w[4],
            raw_disk_bytes: w[5],
            late_events: w[6],
            late_bytes: w[7],
        }
    }

    /// `mtlab ctl PID status`'s line.
    pub fn line(&self, pid: u32) -> String {
        let b = crate::units::human_bytes;
        let mut s = format!(
            "process {pid}: live analysis {} behind ({:.1} s of the program's time; at most {} so far), {} events analysed \
             ({} of trace), raw trace on disk {}",
            b(self.behind_bytes),
            self.behind_ns as f64 / 1e9,
            b(self.max_behind_bytes),
            self.events,
            b(self.consumed_bytes),
            b(self.raw_disk_bytes),
        );
        if self.late_events > 0 {
            s.push_str(&format!(", {} events analysed late (peak within {})", self.late_events, b(self.late_bytes)));
        } else {
            s.push_str(", 0 late events");
        }
        s
    }
}

/// The recorder's side: the page, removed on drop.
pub struct StatusPage {
    page: SharedPage,
    path: PathBuf,
}

impl StatusPage {
    pub fn create(pid: u32) -> std::io::Result<StatusPage> {
        let path = names::live_page(pid);
        let page = recorder_page::create(&path, &LAYOUT)?;
        Ok(StatusPage { page, path })
    }

    /// The page of a process that outlived the program (`ctl stop` finishes the recording).
    pub fn create_outlived(pid: u32) -> std::io::Result<StatusPage> {
        let page = StatusPage::create(pid)?;
        page.page.u64_at(OFF_OUTLIVED).store(1, Ordering::Release);
        Ok(page)
    }

    /// `mtlab ctl PID stop` asked the recorder to finish.
    pub fn stop_requested(&self) -> bool {
        self.page.u64_at(OFF_STOP).load(Ordering::Acquire) > 0
    }

    pub fn publish(&self, now: &Now) {
        let seq = self.page.u64_at(OFF_SEQ);
        let s = seq.load(Ordering::Relaxed);
        seq.store(s + 1, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Release);
        for (i, w) in now.words().into_iter().enumerate() {
            self.page.u64_at(OFF_FIGURES + 8 * i as u32).store(w, Ordering::Relaxed);
        }
        seq.store(s + 2, Ordering::Release);
    }
}

impl Drop for StatusPage {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// `mtlab ctl PID stop` asked the recorder attached to `pid` (this one:
/// the page is read only while it exists) to detach.
pub fn detach_wanted(pid: u32) -> bool {
    recorder_page::open(pid, &names::live_page(pid), &LAYOUT).is_ok_and(|p| p.u64_at(OFF_STOP).load(Ordering::Acquire) != 0)
}

/// `mtlab ctl PID stop` of a process `record --pid PID --live` is attached
/// to: asks its recorder to detach. Ok(false): no such recorder.
pub fn request_detach(pid: u32) -> Result<bool, String> {
    if !recorder_page::attached(pid) {
        return Ok(false);
    }
    match recorder_page::open(pid, &names::live_page(pid), &LAYOUT) {
        Ok(page) => {
            page.u64_at(OFF_STOP).store(1, Ordering::Release);
            Ok(true)
        }
        Err(OpenError::Missing) => Ok(false),
        Err(OpenError::NotIts(why)) => Err(format!("{} is not the live recorder's page of process {pid}: {why}", names::live_page(pid).display())),
    }
}

/// The program `mtlab ctl PID` means when it is recorded with `--live`.
pub fn recorded_pid(pid: u32) -> Option<u32> {
    recorder_page::recorded_pid(pid, names::live_page)
}

/// Where the live analysis of program `pid` stands; None: it is not
/// recorded with `--live` (or its page is not its recorder's: why).
pub fn read(pid: u32) -> Result<Option<Now>, String> {
    let page = match recorder_page::open(pid, &names::live_page(pid), &LAYOUT) {
        Ok(p) => p,
        Err(OpenError::Missing) => return Ok(None),
        Err(OpenError::NotIts(why)) => return Err(format!("{} is not the live recorder's page of process {pid}: {why}", names::live_page(pid).display())),
    };
    let seq = page.u64_at(OFF_SEQ);
    for _ in 0..1000 {
        let s1 = seq.load(Ordering::Acquire);
        if s1 % 2 == 0 {
            let mut w = [0u64; 8];
            for (i, x) in w.iter_mut().enumerate() {
                *x = page.u64_at(OFF_FIGURES + 8 * i as u32).load(Ordering::Relaxed);
            }
            std::sync::atomic::fence(Ordering::Acquire);
            if seq.load(Ordering::Relaxed) == s1 {
                return Ok(Some(Now::of_words(w)));
            }
        }
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    Err(format!("the live recorder of process {pid} kept rewriting its page"))
}

/// `mtlab ctl PID stop` under `record --live`, once the program has
/// exited and processes it started still run: PID is one of them, or the
/// recorder itself (`$!`), whose children they are. Asks their recorder to
/// finish; returns its pid, or None when PID names no such process.
pub fn request_stop(pid: u32) -> Result<Option<u32>, String> {
    let candidates = std::iter::once(pid).chain(crate::platform::process::children_of(pid));
    for p in candidates {
        let page = match recorder_page::open(p, &names::live_page(p), &LAYOUT) {
            Ok(page) => page,
            Err(OpenError::Missing) => continue,
            Err(OpenError::NotIts(why)) => return Err(format!("{} is not the live recorder's page of process {p}: {why}", names::live_page(p).display())),
        };
        if page.u64_at(OFF_OUTLIVED).load(Ordering::Acquire) != 1 {
            continue;
        }
        page.u64_at(OFF_STOP).fetch_add(1, Ordering::AcqRel);
        return Ok(Some(page.u64_at(OFF_RECORDER).load(Ordering::Relaxed) as u32));
    }
    Ok(None)
}

/// Whether `pid`'s recording under `record --live` goes on while the program runs:
/// a page of its own that is not of a process that outlived the program.
pub fn program_runs(pid: u32) -> bool {
    recorder_page::open(pid, &names::live_page(pid), &LAYOUT).is_ok_and(|p| p.u64_at(OFF_OUTLIVED).load(Ordering::Acquire) == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_round_trip_through_the_words_in_order() {
        let n = Now { behind_bytes: 1, max_behind_bytes: 2, behind_ns: 3, events: 4, consumed_bytes: 5, raw_disk_bytes: 6, late_events: 7, late_bytes: 8 };
        assert_eq!(Now::of_words(n.words()), n);
        assert!(n.line(9).contains("7 events analysed late"));
        assert!(Now::default().line(9).contains("0 late events"));
    }
}
