//! `mtlab record --live`: the root process's trace analysed while the
//! program runs, on one thread of `record`, into a profile file.
//!
//! - `consume`: the consumer: the raw trace's complete records (below the
//!   writer's watermark, `live_finish::watermark_page`) read in batches, the
//!   chunks merged by time (`trace::Items`, kept across batches) and fed to
//!   one `analysis::pass::Pass` up to the horizon; the bytes read handed to
//!   an optional `RawSink` (`Consumer::advance`, the one place every raw
//!   byte passes), then punched out of the file, so the raw file's disk use
//!   is what the analysis has not reached yet.
//! - `progress`: the horizon: the time before which every thread's events
//!   are in the file, from the per-buffer progress the writer publishes, so
//!   that several threads' events are analysed in the whole trace's order.
//! - `tree`: the root's descendants (fork children, exec'd images), each
//!   read below a watermark page of its own by a consumer of its own on the
//!   same thread, into the same profile; an image without a page is
//!   analysed from its finished trace when the run ends.
//! - `file`: the profile file: the report data (`ProcessReport`) as of the
//!   last snapshot, replaced whole at each one, and its state and lag.
//!
//! The program is never waited for: its writes go to the file as without
//! `--live`; an analysis that falls behind leaves more of the file on disk
//! (said on stderr, counted in the profile's `lag`), and loses nothing.

pub mod consume;
pub mod file;
pub mod progress;
pub mod tree;

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::mpsc::Receiver;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::analysis::AnalyzeOptions;
use crate::platform::shared_page::SharedPage;
use consume::Consumer;
use progress::Progress;
pub use consume::RawSink;
use file::{Lag, LiveProfile, ProcessLive, ProfileFileError, State};

/// A traced image's watermark page (`record --live`, a process other than
/// the root's first): its pid, as the kernel named the sender, and the memfd.
pub type Page = (u32, OwnedFd);

/// What `record --live` was asked for.
#[derive(Debug, Clone)]
pub struct LiveConfig {
    /// The profile file.
    pub profile: PathBuf,
    pub snapshot_every: Duration,
    /// Keep the raw trace (not released as it is analysed) and finish it as
    /// `record` does: the same run both ways, for comparing.
    pub keep_raw: bool,
    /// `record --live --push-every`: the whole profile so far, published
    /// here for the OTLP pusher every so often, and the last at the end.
    pub publish: Option<Publish>,
}

/// Where the live analysis hands its profile to the OTLP pusher, and how often.
#[derive(Debug, Clone)]
pub struct Publish {
    pub every: Duration,
    pub slot: Arc<Mutex<Option<Published>>>,
}

/// The cumulative profile of the run so far (exact, a full trace's), and its heap manager.
#[derive(Debug, Clone)]
pub struct Published {
    pub profile: crate::profile::ProfileData,
    pub allocator: String,
    /// The run has ended: this is the whole run's.
    pub last: bool,
}

impl Publish {
    fn put(&self, p: &crate::analysis::ProcessReport, data: Option<&crate::profile::ProfileData>, last: bool) {
        if let Some(profile) = data {
            *self.slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(Published { profile: profile.clone(), allocator: p.allocator.clone(), last });
        }
    }
}

/// Bytes behind the program at which the recorder says it cannot keep up.
const BEHIND_WARN: u64 = 64 << 20;
/// How often the consumer looks at the watermark.
const POLL: Duration = Duration::from_millis(50);
/// How long before the consumer's look an event must be stamped to be
/// analysed: a call stamped at its start reaches its buffer when it returns.
const SETTLE: Duration = Duration::from_millis(20);

/// What the live recording came to.
#[derive(Debug, Default)]
pub struct LiveSummary {
    pub snapshots: u64,
    pub lag: Lag,
    pub warnings: Vec<String>,
    /// The last snapshot is the whole run's.
    pub complete: bool,
    /// Descendants' traces read live (`tree`): not to be added again at the end.
    pub seen: Vec<PathBuf>,
    /// Of those, the ones whose final figures are in the profile.
    pub covered: Vec<PathBuf>,
    /// The most their raw traces took on disk at once.
    pub descendants_max_raw_disk: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error(transparent)]
    File(#[from] ProfileFileError),
    #[error(transparent)]
    Trace(#[from] crate::trace::TraceError),
}

/// The run's facts (RUNINFO), handed to the consumer once the program has ended.
type RunFacts = Mutex<Option<Vec<(String, String)>>>;

/// The watermark descriptor (until the program is spawned) and the consumer thread.
pub struct Live {
    fd: Option<OwnedFd>,
    end: Arc<RunFacts>,
    ended: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<LiveSummary, LiveError>>>,
}

impl Live {
    /// Starts the consumer of the raw trace at `raw`, which the program will
    /// create, and of the other images' traces whose pages arrive on
    /// `pages`; None when the system offers no memfd for the watermark.
    pub fn start(raw: PathBuf, cfg: LiveConfig, sink: Option<Box<dyn RawSink>>, pages: Option<Receiver<Page>>) -> Option<Live> {
        let (fd, page) = crate::live_finish::watermark_page()?;
        // The writer's per-buffer progress: only this reader uses it.
        page.u64_at(crate::trace::format::WATERMARK_OFF_PROGRESS_WANTED).store(1, Ordering::Release);
        let end = Arc::new(Mutex::new(None));
        let ended = Arc::new(AtomicBool::new(false));
        let thread = {
            let (end, ended) = (Arc::clone(&end), Arc::clone(&ended));
            std::thread::Builder::new()
                .name("mtlab-live".into())
                .spawn(move || consume_while_running(raw, cfg, sink, pages, &page, &end, &ended))
                .ok()?
        };
        Some(Live { fd: Some(fd), end, ended, thread: Some(thread) })
    }

    /// The descriptor to pass in MTLAB_WATERMARK_FD.
    pub fn fd(&self) -> Option<RawFd> {
        self.fd.as_ref().map(|f| f.as_raw_fd())
    }

    /// After the spawn: the program has its copy.
    pub fn spawned(&mut self) {
        self.fd = None;
    }

    /// The program has ended with the run's facts `runinfo` (as the trace's
    /// RUNINFO gets them): the rest of the trace is analysed and the last
    /// snapshot written.
    pub fn finish(mut self, runinfo: Vec<(String, String)>) -> Result<LiveSummary, LiveError> {
        *self.end.lock().unwrap_or_else(|e| e.into_inner()) = Some(runinfo);
        self.ended.store(true, Ordering::Release);
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            _ => Ok(LiveSummary::default()),
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        // A record that failed before `finish`: the thread stops without a last snapshot.
        self.ended.store(true, Ordering::Release);
    }
}

fn now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

fn consume_while_running(
    raw: PathBuf,
    cfg: LiveConfig,
    sink: Option<Box<dyn RawSink>>,
    pages: Option<Receiver<Page>>,
    page: &SharedPage,
    end: &RunFacts,
    ended: &AtomicBool,
) -> Result<LiveSummary, LiveError> {
    let snap_opts = AnalyzeOptions { callers: false, profile: false, ..AnalyzeOptions::default() };
    let mut tree = pages.map(|p| tree::Tree::new(raw.clone(), p, cfg.keep_raw, snap_opts.max_points));
    let mut consumer: Option<Consumer> = None;
    let mut sink = sink;
    let mut summary = LiveSummary::default();
    let mut last_snapshot = Instant::now();
    let mut last_publish = Instant::now();
    let mut said_behind = false;
    let mut said_unwritable = false;
    let lag = tree::lag;
    loop {
        let done = ended.load(Ordering::Acquire);
        if consumer.is_none() && raw.exists() {
            consumer = Some(Consumer::new(&raw, cfg.keep_raw, snap_opts.max_points, sink.take())?);
        }
        if done {
            let runinfo = end.lock().unwrap_or_else(|e| e.into_inner()).take();
            let (Some(c), Some(runinfo)) = (consumer.as_mut(), runinfo) else { return Ok(summary) };
            let len = std::fs::metadata(&raw).map(|m| m.len()).unwrap_or(0);
            c.advance(len, true, |_| u64::MAX)?;
            if let Some(t) = tree.as_mut() {
                t.finish();
            }
            let opts = tree::last_snapshot_options();
            if let Some(mut p) = c.report(&opts, &runinfo, true) {
                let data = p.profile_data.take();
                if let Some(pb) = &cfg.publish {
                    pb.put(&p, data.as_ref(), true);
                }
                summary.lag = lag(c, len);
                let n = summary.snapshots + 1;
                let children = tree.as_mut().map(|t| t.snapshot(&opts, n)).unwrap_or_default();
                match write(&cfg, &opts, n, State::Ended, summary.lag, (p, data), children) {
                    Ok(()) => {
                        summary.snapshots += 1;
                        summary.complete = true;
                    }
                    Err(e) => summary.warnings.push(format!("{e}; the profile holds {} snapshot(s) of the run so far", summary.snapshots)),
                }
            }
            summary.warnings.extend(c.warnings().iter().cloned());
            if let Some(t) = tree.as_mut() {
                summary.warnings.extend(t.take_warnings());
                summary.seen = t.seen();
                summary.covered = t.covered();
                summary.descendants_max_raw_disk = t.max_disk;
            }
            return Ok(summary);
        }
        std::thread::sleep(POLL);
        if let Some(t) = tree.as_mut() {
            t.poll();
        }
        let Some(c) = consumer.as_mut() else { continue };
        // The progress before the watermark: a buffer's chunk it counts as
        // written is below the watermark read after it. And an event
        // stamped just before, not yet in its buffer, is waited for.
        let now = crate::platform::tsc::now();
        let progress = Progress::read(page);
        let available = page.u64_at(0).load(Ordering::Acquire);
        if available == 0 {
            continue;
        }
        let settle = c.tsc_hz().saturating_mul(SETTLE.as_millis() as u64) / 1000;
        c.advance(available, false, |read| {
            progress.horizon(read).unwrap_or(u64::MAX).min(now.saturating_sub(settle))
        })?;
        let behind = available.saturating_sub(c.consumed());
        if behind >= BEHIND_WARN && !said_behind {
            said_behind = true;
            say!(
                "mtlab: the live analysis is {} behind the program (it allocates faster than one core analyses): \
                 nothing is lost, the raw trace holds the rest on disk until it is reached",
                crate::units::human_bytes(behind)
            );
        }
        // The pusher's profile: a report of its own, with the profile, on its own clock.
        if let Some(pb) = cfg.publish.as_ref().filter(|pb| last_publish.elapsed() >= pb.every) {
            last_publish = Instant::now();
            let opts = AnalyzeOptions { profile: true, ..snap_opts };
            if let Some(mut p) = c.report(&opts, &[], false) {
                let data = p.profile_data.take();
                pb.put(&p, data.as_ref(), false);
            }
        }
        if last_snapshot.elapsed() >= cfg.snapshot_every {
            last_snapshot = Instant::now();
            if let Some(p) = c.report(&snap_opts, &[], false) {
                let n = summary.snapshots + 1;
                let children = tree.as_mut().map(|t| t.snapshot(&snap_opts, n)).unwrap_or_default();
                // A snapshot that cannot be written (a full disk) is said
                // once and tried again at the next; the analysis goes on.
                match write(&cfg, &snap_opts, n, State::Running, lag(c, available), (p, None), children) {
                    Ok(()) => summary.snapshots += 1,
                    Err(e) if !said_unwritable => {
                        said_unwritable = true;
                        say!("mtlab: {e}; the analysis goes on and the next snapshot tries again");
                    }
                    Err(_) => {}
                }
            }
        }
    }
}

fn write(
    cfg: &LiveConfig,
    opts: &AnalyzeOptions,
    snapshot: u64,
    state: State,
    lag: Lag,
    (p, data): (crate::analysis::ProcessReport, Option<crate::profile::ProfileData>),
    children: Vec<tree::Snap>,
) -> Result<(), ProfileFileError> {
    let root = ProcessLive { pid: p.pid, file: p.file.clone(), state, as_of_snapshot: snapshot, lag };
    let mut process_status = vec![root];
    let mut processes = vec![p];
    let mut profile_data = vec![data];
    for c in children {
        process_status.push(c.status);
        processes.push(c.report);
        profile_data.push(c.data);
    }
    LiveProfile {
        mtlab_live_profile: file::VERSION,
        snapshot,
        state,
        written_ns: now_ns(),
        snapshot_every_s: cfg.snapshot_every.as_secs_f64(),
        lag,
        top: opts.top,
        max_points: opts.max_points,
        processes,
        process_status,
        profile_data,
    }
    .write(&cfg.profile)
}
