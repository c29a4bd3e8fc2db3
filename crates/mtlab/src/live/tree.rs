//! Process trees under `record --live`: every traced image other than the
//! root's first (fork children, exec'd images: `ROOT.d/PID[.N]`) analysed
//! while it runs, each by a consumer of its own, on the live analysis's one
//! thread, into the same profile.
//!
//! Each such image makes a watermark page of its own (writer.c,
//! `mtlab_watermark_own`) and sends it over the broker's socket; the kernel
//! names the sender's pid, the page names the trace file (by inode) once it
//! is open. An image has ended when its END record is read, when its pid no
//! longer runs (killed, or a zombie), or when a later image of its pid sends
//! a page (it exec'd); its last records are then read and its final figures
//! kept. Its raw trace (its header and holes by then) is removed once its
//! pid has ended (kept with `--keep-raw`): a later image of the pid would
//! take a name freed earlier, and the family's order would be lost. An image that
//! could send no page (no memfd, a full socket) is analysed when the run
//! ends, from its finished trace (`add_children`), as before live trees.

use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::time::Duration;

use super::consume::{Consumer, Look};
use super::file::{Lag, LiveProfile, ProcessLive, ProfileFileError, State};
use super::progress::Progress;
use crate::analysis::{self, AnalyzeOptions, ProcessReport};
use crate::platform::names;
use crate::platform::shared_page::SharedPage;
use crate::profile::ProfileData;
use crate::trace::format::{
    WATERMARK_MAGIC, WATERMARK_OFF_FILE_DEV, WATERMARK_OFF_FILE_INO, WATERMARK_OFF_MAGIC, WATERMARK_OFF_START_TSC,
    WATERMARK_SIZE,
};
use crate::trace::{TraceError, TraceFile};

/// What adding the descendants came to.
#[derive(Debug, Default)]
pub struct TreeOutcome {
    /// Descendants' reports added to the profile.
    pub added: usize,
    /// One line per trace that could not be analysed or removed.
    pub warnings: Vec<String>,
}

/// The report options the last snapshot is made with (the root's, in `live::finish`).
pub fn last_snapshot_options() -> AnalyzeOptions {
    AnalyzeOptions { callers: true, profile: true, ..AnalyzeOptions::default() }
}

/// How long before a look an event must be stamped to be analysed (as the root's, `live::SETTLE`).
const SETTLE: Duration = Duration::from_millis(20);

/// The lag of `c`, whose writer has made `available` bytes complete, at
/// time stamp `now_tsc` (0: its end, nothing is behind in time).
pub fn lag(c: &Consumer, available: u64, now_tsc: u64) -> Lag {
    Lag {
        behind_bytes: available.saturating_sub(c.consumed()),
        max_behind_bytes: c.max_behind,
        consumed_bytes: c.consumed(),
        raw_disk_bytes: c.disk_bytes(),
        max_raw_disk_bytes: c.max_disk,
        late_events: c.late_events,
        late_bytes: c.late_bytes,
        // Every byte written analysed: a program that makes no calls is not "behind".
        behind_ns: if available > c.consumed() && now_tsc > 0 { c.behind_ns(now_tsc) } else { 0 },
        buffer_copies: c.copies,
        held_back_passed: c.forced,
    }
}

/// Analyses what `page`'s writer has made complete, up to the horizon its
/// per-buffer progress gives; returns the bytes complete (0: none yet).
pub fn advance_below(c: &mut Consumer, page: &SharedPage) -> Result<u64, TraceError> {
    // The progress before the watermark: a buffer's chunk it counts as
    // written is below the watermark read after it. And an event stamped
    // just before, not yet in its buffer, is waited for.
    let now = crate::platform::tsc::now();
    let progress = Progress::read(page);
    let available = page.u64_at(0).load(Ordering::Acquire);
    if available == 0 {
        return Ok(0);
    }
    let settle = c.tsc_hz().saturating_mul(SETTLE.as_millis() as u64) / 1000;
    c.advance(available, Some(&Look { progress: &progress, page, now, settle }))?;
    Ok(available)
}

/// One traced image other than the root's first.
struct Member {
    pid: u32,
    page: SharedPage,
    /// Its trace, once the page names it and it is found.
    path: Option<PathBuf>,
    consumer: Option<Consumer>,
    /// The bytes its writer had made complete at the last look.
    available: u64,
    /// A later image of its pid sent a page: this one exec'd.
    superseded: bool,
    /// Its final figures, once it ended (then `consumer` is gone).
    done: Option<Done>,
    /// Its raw trace is to be removed once its pid has ended.
    remove: bool,
}

struct Done {
    report: ProcessReport,
    data: Option<ProfileData>,
    lag: Lag,
    /// The first snapshot written after it ended (0: none yet).
    as_of: u64,
}

/// The images of the tree under analysis, and those that ended.
pub struct Tree {
    root: PathBuf,
    pages: Receiver<crate::live::Page>,
    keep_raw: bool,
    max_points: usize,
    members: Vec<Member>,
    warnings: Vec<String>,
    /// The most the running images' raw traces took on disk at once.
    pub max_disk: u64,
    /// What they take at the last poll.
    pub disk: u64,
}

/// One process of a snapshot: its report, its exact profile (final figures
/// only), and where it stands.
pub struct Snap {
    pub report: ProcessReport,
    pub data: Option<ProfileData>,
    pub status: ProcessLive,
}

impl Tree {
    pub fn new(root: PathBuf, pages: Receiver<crate::live::Page>, keep_raw: bool, max_points: usize) -> Tree {
        Tree { root, pages, keep_raw, max_points, members: Vec::new(), warnings: Vec::new(), max_disk: 0, disk: 0 }
    }

    /// Takes the pages sent since the last look, then analyses each running
    /// image as far as it is written; an image that ended is read to its end.
    pub fn poll(&mut self) {
        while let Ok((pid, fd)) = self.pages.try_recv() {
            self.arrived(pid, fd);
        }
        for i in 0..self.members.len() {
            if self.members[i].done.is_none() {
                if let Err(e) = self.step(i) {
                    let m = &mut self.members[i];
                    let name = m.path.as_ref().map_or_else(|| format!("process {}", m.pid), |p| p.display().to_string());
                    self.warnings.push(format!("{name}: its live analysis stopped ({e}); its trace is read when the run ends"));
                    m.consumer = None;
                    m.path = None;
                    m.superseded = true;
                }
            }
        }
        self.remove_ended(false);
        let disk: u64 = self.members.iter().filter_map(|m| m.consumer.as_ref()).map(Consumer::disk_bytes).sum();
        self.max_disk = self.max_disk.max(disk);
        self.disk = disk;
        // A page that never named a file, of an image that is gone: nothing to read.
        self.members.retain(|m| m.done.is_some() || m.consumer.is_some() || (!m.superseded && running(m.pid)));
    }

    fn arrived(&mut self, pid: u32, fd: OwnedFd) {
        // Only a memfd of the page's size with its magic: a process of the
        // tree may send anything over the socket.
        let Ok(dup) = fd.try_clone() else { return };
        let size_ok = std::fs::File::from(dup).metadata().is_ok_and(|m| m.len() == u64::from(WATERMARK_SIZE) && m.nlink() == 0);
        let Some(page) = size_ok.then(|| SharedPage::map(&fd, WATERMARK_SIZE as usize).ok()).flatten() else { return };
        if page.u64_at(WATERMARK_OFF_MAGIC).load(Ordering::Acquire) != WATERMARK_MAGIC {
            return;
        }
        // The pid's earlier image exec'd this one.
        for m in self.members.iter_mut().filter(|m| m.pid == pid && m.done.is_none()) {
            m.superseded = true;
        }
        self.members.push(Member { pid, page, path: None, consumer: None, available: 0, superseded: false, done: None, remove: false });
    }

    fn step(&mut self, i: usize) -> Result<(), TraceError> {
        let (root, keep_raw, max_points) = (self.root.clone(), self.keep_raw, self.max_points);
        let m = &mut self.members[i];
        // Looked at before the file is read: an image seen gone has written everything.
        let gone = m.superseded || !running(m.pid);
        if m.consumer.is_none() {
            let Some(path) = named_file(&root, m.pid, &m.page) else { return Ok(()) };
            m.consumer = Some(Consumer::new(&path, keep_raw, max_points, None)?);
            m.path = Some(path);
        }
        let (Some(c), Some(path)) = (m.consumer.as_mut(), m.path.clone()) else { return Ok(()) };
        if !gone && !c.saw_end() {
            m.available = advance_below(c, &m.page)?.max(m.available);
            if !c.saw_end() {
                return Ok(());
            }
        }
        self.end_of(i, &path)
    }

    /// The image has ended: its last records read, its final figures kept,
    /// its raw trace to be removed (unless `--keep-raw`).
    fn end_of(&mut self, i: usize, path: &Path) -> Result<(), TraceError> {
        let m = &mut self.members[i];
        let Some(mut c) = m.consumer.take() else { return Ok(()) };
        if c.file_removed() {
            // Its writer removed it (an image that wrote no event before it
            // exec'd; the next image may have its name now): no trace, no process.
            m.path = None;
            return Ok(());
        }
        let len = std::fs::metadata(path).map(|md| md.len()).unwrap_or(0);
        c.advance(len, None)?;
        let Some(mut report) = c.report(&last_snapshot_options(), &[], true) else {
            // Not even a header: nothing of it goes into the profile.
            return Ok(());
        };
        let data = report.profile_data.take();
        let lag = lag(&c, len, 0);
        self.warnings.extend(c.warnings().iter().map(|w| format!("{}: {w}", path.display())));
        drop(c);
        let m = &mut self.members[i];
        m.done = Some(Done { report, data, lag, as_of: 0 });
        m.remove = !self.keep_raw;
        Ok(())
    }

    /// Removes the raw traces of ended images whose pid has ended too (all
    /// of them once the run has ended: `all`).
    fn remove_ended(&mut self, all: bool) {
        for m in self.members.iter_mut().filter(|m| m.remove && (all || !running(m.pid))) {
            m.remove = false;
            let Some(path) = &m.path else { continue };
            if let Err(e) = std::fs::remove_file(path) {
                self.warnings.push(format!("{}: analysed into the profile, but could not be removed: {e}", path.display()));
            }
        }
    }

    /// Every image with a trace, as of now: the ended ones' final figures,
    /// the running ones' so far (made with `opts`), in the order `mtlab
    /// report` lists a family's traces. `snapshot` is the number the
    /// snapshot they go into will have.
    pub fn snapshot(&mut self, opts: &AnalyzeOptions, snapshot: u64) -> Vec<Snap> {
        let mut out: Vec<(Option<(u64, u64)>, Snap)> = Vec::new();
        for m in &mut self.members {
            let Some(path) = m.path.clone() else { continue };
            let order = names::child_trace_suffix(&self.root, &path).and_then(|s| names::parse_child_suffix(&s));
            let file = path.display().to_string();
            let snap = match (&mut m.done, &mut m.consumer) {
                (Some(d), _) => {
                    if d.as_of == 0 {
                        d.as_of = snapshot;
                    }
                    let status = ProcessLive { pid: m.pid, file, state: State::Ended, as_of_snapshot: d.as_of, lag: d.lag };
                    Snap { report: d.report.clone(), data: d.data.clone(), status }
                }
                (None, Some(c)) => {
                    let Some(report) = c.report(opts, &[], false) else { continue };
                    let status = ProcessLive { pid: m.pid, file, state: State::Running, as_of_snapshot: snapshot, lag: lag(c, m.available, crate::platform::tsc::now()) };
                    Snap { report, data: None, status }
                }
                _ => continue,
            };
            out.push((order, snap));
        }
        // Stable: two names that do not parse keep their arrival order.
        out.sort_by_key(|(order, _)| order.unwrap_or((u64::MAX, u64::MAX)));
        out.into_iter().map(|(_, s)| s).collect()
    }

    /// The recording ends: each image still under analysis is read to its
    /// end if it is gone; one that still runs (it outlived the program, and
    /// the user finished the recording without waiting for it: Ctrl-C,
    /// `mtlab ctl PID stop`) keeps its figures so far, and its trace stays on disk.
    pub fn finish(&mut self) {
        self.poll();
        for i in 0..self.members.len() {
            let m = &self.members[i];
            if m.done.is_some() || m.consumer.is_none() {
                continue;
            }
            let path = m.path.clone().expect("a consumer has its path");
            if running(m.pid) && !m.superseded {
                self.warnings.push(format!(
                    "{}: its process {} still runs; the profile holds its figures as of the recording's end, and its \
                     trace stays on disk (without the part analysed, when not --keep-raw), written to until it ends",
                    path.display(),
                    m.pid
                ));
                continue;
            }
            if let Err(e) = self.end_of(i, &path) {
                self.warnings.push(format!("{}: not in the live profile: {e}", path.display()));
            }
        }
        self.remove_ended(true);
    }

    /// The traced processes still running, other than the root's first
    /// image (after the program exited: those that outlived it), by pid.
    pub fn running_pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self.members.iter().filter(|m| m.done.is_none() && !m.superseded && running(m.pid)).map(|m| m.pid).collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Where the analysis of the running image of `pid` stands, for `mtlab ctl PID status`.
    pub fn status_of(&self, pid: u32) -> Option<super::status::Now> {
        let m = self.members.iter().find(|m| m.pid == pid && m.done.is_none() && !m.superseded)?;
        let c = m.consumer.as_ref()?;
        Some(super::status::Now::of(&lag(c, m.available, crate::platform::tsc::now()), c.events()))
    }

    /// The traces whose final figures are in the profile (`finish` first).
    pub fn covered(&self) -> Vec<PathBuf> {
        self.members.iter().filter(|m| m.done.is_some()).filter_map(|m| m.path.clone()).collect()
    }

    /// The traces read live, ended or not: not to be added again at the end.
    pub fn seen(&self) -> Vec<PathBuf> {
        self.members.iter().filter_map(|m| m.path.clone()).collect()
    }

    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }
}

/// Whether `pid` exists and is no zombie: a process that exited but was not
/// reaped yet has written everything it will.
fn running(pid: u32) -> bool {
    crate::platform::process::pid_runs(pid)
}

/// The trace `page` names among `ROOT.d/PID[.N]`: by device and inode, and
/// by the header's start (an inode number a removed file freed may be
/// reused at once, by the next image of the same pid).
fn named_file(root: &Path, pid: u32, page: &SharedPage) -> Option<PathBuf> {
    let ino = page.u64_at(WATERMARK_OFF_FILE_INO).load(Ordering::Acquire);
    if ino == 0 {
        return None;
    }
    let dev = page.u64_at(WATERMARK_OFF_FILE_DEV).load(Ordering::Relaxed);
    let start = page.u64_at(WATERMARK_OFF_START_TSC).load(Ordering::Relaxed);
    let started = |p: &Path| crate::trace::read_header(p).is_ok_and(|h| h.start_tsc == start);
    for generation in 0..1000u32 {
        let path = names::child_trace(root, pid, generation);
        match std::fs::symlink_metadata(&path) {
            Ok(md) if md.ino() == ino && md.dev() == dev && md.file_type().is_file() && started(&path) => return Some(path),
            Ok(_) => continue,
            Err(_) => return None,
        }
    }
    None
}

/// Adds the reports of `children` (finished traces, in the family's order,
/// the order `mtlab report` lists them in) to the profile at `profile`,
/// which already holds the root's last snapshot and the images analysed
/// live; removes their traces unless `keep_raw`. These are the images that
/// got no watermark page of their own.
pub fn add_children(profile: &Path, children: &[PathBuf], keep_raw: bool) -> Result<TreeOutcome, ProfileFileError> {
    let mut out = TreeOutcome::default();
    if children.is_empty() {
        return Ok(out);
    }
    let mut p = LiveProfile::read(profile)?;
    let opts = last_snapshot_options();
    let mut analysed = Vec::new();
    for child in children {
        match TraceFile::open(child).and_then(|t| analysis::analyze(&t, &opts)) {
            Ok(mut r) => {
                let data = r.profile_data.take();
                p.process_status.push(ProcessLive {
                    pid: r.pid,
                    file: r.file.clone(),
                    state: State::Ended,
                    as_of_snapshot: p.snapshot,
                    lag: Lag::default(),
                });
                p.processes.push(r);
                p.profile_data.push(data);
                analysed.push(child);
            }
            Err(e) => out.warnings.push(format!("{}: not in the live profile, left as written: {e}", child.display())),
        }
    }
    out.added = analysed.len();
    p.sort_family();
    p.write(profile)?;
    if !keep_raw {
        for child in analysed {
            if let Err(e) = std::fs::remove_file(child) {
                out.warnings.push(format!("{}: analysed into the profile, but could not be removed: {e}", child.display()));
            }
        }
    }
    Ok(out)
}
