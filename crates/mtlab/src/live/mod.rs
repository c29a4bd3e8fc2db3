//! `mtlab record --live`: the root process's trace analysed while the
//! program runs, on one thread of `record`, into a profile file.
//!
//! - `consume`: the consumer: the raw trace's complete records (below the
//!   writer's watermark, `live_finish::watermark_page`) read in batches, the
//!   chunks merged by time (`trace::Items`, kept across batches) and fed to
//!   one `analysis::pass::Pass` up to the horizon; the bytes read handed to
//!   an optional `RawSink` (`Consumer::advance`, the one place every raw
//!   byte passes), then punched out of the file before they are replayed
//!   (the chunks are held in memory), so the raw file's disk use is what
//!   the consumer has not read yet.
//! - `spool`: the raw file read ahead into memory every `FILL_EVERY` events
//!   of a long replay and released from disk, so that a burst the analysis
//!   cannot keep up with waits in memory, not on disk.
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
//! When the program exits while traced processes it started still run (a
//! daemon: `sh -c 'service &'`), `record` waits for them (it is their
//! subreaper, `Live::outlived`): they are analysed, and snapshots written,
//! until they end or the user finishes the recording (Ctrl-C, `mtlab ctl
//! PID stop`); the profile then says which still ran.
//!
//! The program is never waited for: its writes go to the file as without
//! `--live`; an analysis that falls behind leaves more of the file on disk
//! (said on stderr, counted in the profile's `lag`), and loses nothing.

pub mod bufcopy;
pub mod consume;
pub mod file;
pub mod progress;
pub mod status;
mod spool;
pub mod tree;

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::analysis::AnalyzeOptions;
use crate::platform::shared_page::SharedPage;
use consume::{Consumer, Look};
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

/// Bytes behind the program at which the recorder says it cannot keep up;
/// it says so again when the lag has grown this many times since, at most
/// once per `SAY_EVERY`, and says when it is back under `CAUGHT_UP`.
const BEHIND_WARN: u64 = 16 << 20;
const BEHIND_GROWTH: u64 = 4;
const SAY_EVERY: Duration = Duration::from_secs(10);
const CAUGHT_UP: u64 = 1 << 20;
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

/// The processes that outlived the program, as the live thread sees them.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outliving {
    /// The program runs, or its exit is not looked at yet.
    NotYet,
    /// These traced processes still run; the recording waits for them.
    Waiting(Vec<u32>),
    /// None runs any more, or the user asked to finish now.
    Over,
}

/// What `record` and the live thread share once the program has exited.
#[derive(Debug)]
struct AfterExit {
    /// The program has exited (its exit status is taken).
    exited: AtomicBool,
    /// Finish now, whatever still runs (Ctrl-C).
    stop: AtomicBool,
    outliving: Mutex<Outliving>,
}

impl AfterExit {
    fn set(&self, o: Outliving) {
        *self.outliving.lock().unwrap_or_else(|e| e.into_inner()) = o;
    }

    fn get(&self) -> Outliving {
        self.outliving.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The watermark descriptor (until the program is spawned) and the consumer thread.
pub struct Live {
    fd: Option<OwnedFd>,
    end: Arc<RunFacts>,
    ended: Arc<AtomicBool>,
    /// The program's pid, once it is spawned (0 before).
    pid: Arc<AtomicU32>,
    after: Arc<AfterExit>,
    thread: Option<JoinHandle<Result<LiveSummary, LiveError>>>,
}

impl Live {
    /// Starts the consumer of the raw trace at `raw`, which the program will
    /// create, and of the other images' traces whose pages arrive on
    /// `pages`; None when the system offers no memfd for the watermark.
    pub fn start(raw: PathBuf, cfg: LiveConfig, sink: Option<Box<dyn RawSink>>, pages: Option<Receiver<Page>>) -> Option<Live> {
        let (fd, page) = crate::live_finish::watermark_page()?;
        // The writer's per-buffer progress: only this reader uses it.
        page.u64_at(crate::trace::format::WATERMARK_OFF_PROGRESS_WANTED).store(crate::trace::format::PROGRESS_HORIZON, Ordering::Release);
        Live::run(raw, cfg, sink, pages, Some(fd), page)
    }

    /// `record --pid PID --live`: the consumer of the trace at `raw` that
    /// the attached process `pid` writes below the watermark page it made
    /// itself (opened by the caller through /proc/PID/fd), for `pid`.
    pub fn attached(raw: PathBuf, cfg: LiveConfig, page: SharedPage, pid: u32) -> Option<Live> {
        let live = Live::run(raw, cfg, None, None, None, Arc::new(page))?;
        live.started(pid);
        Some(live)
    }

    fn run(
        raw: PathBuf,
        cfg: LiveConfig,
        sink: Option<Box<dyn RawSink>>,
        pages: Option<Receiver<Page>>,
        fd: Option<OwnedFd>,
        page: Arc<SharedPage>,
    ) -> Option<Live> {
        let end = Arc::new(Mutex::new(None));
        let ended = Arc::new(AtomicBool::new(false));
        let pid = Arc::new(AtomicU32::new(0));
        let after = Arc::new(AfterExit { exited: AtomicBool::new(false), stop: AtomicBool::new(false), outliving: Mutex::new(Outliving::NotYet) });
        let thread = {
            let (end, ended, pid, after) = (Arc::clone(&end), Arc::clone(&ended), Arc::clone(&pid), Arc::clone(&after));
            std::thread::Builder::new()
                .name("mtlab-live".into())
                .spawn(move || {
                    consume_while_running(raw, cfg, sink, pages, &page, Program { end: &end, ended: &ended, pid: &pid, after: &after })
                })
                .ok()?
        };
        Some(Live { fd, end, ended, pid, after, thread: Some(thread) })
    }

    /// The descriptor to pass in MTLAB_WATERMARK_FD.
    pub fn fd(&self) -> Option<RawFd> {
        self.fd.as_ref().map(|f| f.as_raw_fd())
    }

    /// The program runs as `pid`: `mtlab ctl PID status` can find the lag.
    pub fn started(&self, pid: u32) {
        self.pid.store(pid, Ordering::Release);
    }

    /// The program has exited: returns once no traced process it started
    /// still runs (they are analysed meanwhile, and the profile's snapshots
    /// go on), or once `interrupted()` (polled) or `mtlab ctl PID stop`
    /// asks to finish now.
    pub fn outlived(&self, interrupted: impl Fn() -> bool) {
        self.after.exited.store(true, Ordering::Release);
        loop {
            if self.after.get() == Outliving::Over || self.thread.as_ref().is_none_or(|t| t.is_finished()) {
                return;
            }
            if interrupted() {
                self.after.stop.store(true, Ordering::Release);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
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

/// What `record` tells the live thread about the program: its pid once it
/// runs (for the lag page), that it has ended, and its end's RUNINFO.
struct Program<'a> {
    end: &'a RunFacts,
    ended: &'a AtomicBool,
    pid: &'a AtomicU32,
    after: &'a AfterExit,
}

fn consume_while_running(
    raw: PathBuf,
    cfg: LiveConfig,
    sink: Option<Box<dyn RawSink>>,
    pages: Option<Receiver<Page>>,
    page: &SharedPage,
    program: Program,
) -> Result<LiveSummary, LiveError> {
    let Program { end, ended, pid, after } = program;
    // After the program exited: the pages of the processes that outlived it (`ctl PID status|stop`).
    let mut outlived: Option<std::collections::BTreeMap<u32, status::StatusPage>> = None;
    // The first snapshot written after the program exited: its figures are final from there on.
    let mut root_ended_as_of: Option<u64> = None;
    let snap_opts = AnalyzeOptions { callers: false, profile: false, ..AnalyzeOptions::default() };
    let mut tree = pages.map(|p| tree::Tree::new(raw.clone(), p, cfg.keep_raw, snap_opts.max_points));
    let mut consumer: Option<Consumer> = None;
    let mut sink = sink;
    let mut summary = LiveSummary::default();
    let mut last_snapshot = Instant::now();
    let mut last_publish = Instant::now();
    let mut behind_said = BehindSaid::default();
    let mut said_unwritable = false;
    let mut status: Option<status::StatusPage> = None;
    // Test only: the analysis slowed to about this many raw trace bytes a
    // second (it sleeps after each batch for as long as the batch would
    // take at that pace), so that a test can make it fall behind a small program.
    let pace = std::env::var("MTLAB_LIVE_TEST_PACE").ok().and_then(|v| v.parse::<u64>().ok()).filter(|&p| p > 0);
    let lag = tree::lag;
    // The most raw trace the whole tree held on disk at once (the profile's top-level lag).
    let mut disk_at_once = 0u64;
    loop {
        let done = ended.load(Ordering::Acquire);
        if consumer.is_none() && raw.exists() {
            consumer = Some(Consumer::new(&raw, cfg.keep_raw, snap_opts.max_points, sink.take())?);
        }
        if done {
            let runinfo = end.lock().unwrap_or_else(|e| e.into_inner()).take();
            let (Some(c), Some(runinfo)) = (consumer.as_mut(), runinfo) else { return Ok(summary) };
            let len = std::fs::metadata(&raw).map(|m| m.len()).unwrap_or(0);
            c.advance(len, None)?;
            if let Some(t) = tree.as_mut() {
                t.finish();
            }
            let opts = tree::last_snapshot_options();
            if let Some(mut p) = c.report(&opts, &runinfo, true) {
                // Said at the end, as `record` does of a full trace: the profile misses these calls.
                if let Some(d) = p.events_dropped.filter(|&d| d > 0) {
                    summary.warnings.push(format!("the program's trace: {}", p.write_loss.dropped_text(d, p.events + d)));
                }
                let data = p.profile_data.take();
                if let Some(pb) = &cfg.publish {
                    pb.put(&p, data.as_ref(), true);
                }
                summary.lag = lag(c, len, 0);
                let n = summary.snapshots + 1;
                let children = tree.as_mut().map(|t| t.snapshot(&opts, n)).unwrap_or_default();
                match write(&cfg, &opts, n, (State::Ended, State::Ended, root_ended_as_of.unwrap_or(n)), (summary.lag, disk_at_once), (p, data), children) {
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
        if outlived.is_none() && after.exited.load(Ordering::Acquire) {
            // The program has exited: its trace is read to its end, and
            // what it left running is waited for.
            status = None;
            if let Some(c) = consumer.as_mut() {
                c.advance(std::fs::metadata(&raw).map(|m| m.len()).unwrap_or(0), None)?;
            }
            if let Some(t) = tree.as_mut() {
                t.poll();
            }
            let pids = tree.as_ref().map(tree::Tree::running_pids).unwrap_or_default();
            if pids.is_empty() {
                after.set(Outliving::Over);
            } else {
                say!("{}", outlived_line(&pids));
                after.set(Outliving::Waiting(pids));
            }
            outlived = Some(Default::default());
        }
        if let (Some(pages), Some(t)) = (outlived.as_mut(), tree.as_mut()) {
            if after.get() == Outliving::Over {
                pages.clear();
                std::thread::sleep(POLL);
                continue;
            }
            std::thread::sleep(POLL);
            t.poll();
            let pids = t.running_pids();
            pages.retain(|p, _| pids.contains(p));
            for &p in &pids {
                if let std::collections::btree_map::Entry::Vacant(e) = pages.entry(p) {
                    if let Ok(page) = status::StatusPage::create_outlived(p) {
                        e.insert(page);
                    }
                }
                if let (Some(page), Some(now)) = (pages.get(&p), t.status_of(p)) {
                    page.publish(&now);
                }
            }
            disk_at_once = disk_at_once.max(consumer.as_ref().map_or(0, Consumer::disk_bytes) + t.disk);
            let asked = after.stop.load(Ordering::Acquire) || pages.values().any(status::StatusPage::stop_requested);
            if pids.is_empty() || asked {
                pages.clear();
                after.set(Outliving::Over);
                continue;
            }
            after.set(Outliving::Waiting(pids));
            if last_snapshot.elapsed() >= cfg.snapshot_every {
                last_snapshot = Instant::now();
                let Some(c) = consumer.as_mut() else { continue };
                if let Some(p) = c.report(&snap_opts, &[], false) {
                    let n = summary.snapshots + 1;
                    let children = t.snapshot(&snap_opts, n);
                    let l = lag(c, c.consumed(), 0);
                    let as_of = *root_ended_as_of.get_or_insert(n);
                    match write(&cfg, &snap_opts, n, (State::Running, State::Ended, as_of), (l, disk_at_once), (p, None), children) {
                        Ok(()) => summary.snapshots += 1,
                        Err(e) if !said_unwritable => {
                            said_unwritable = true;
                            say!("mtlab: {e}; the analysis goes on and the next snapshot tries again");
                        }
                        Err(_) => {}
                    }
                }
            }
            continue;
        }
        if outlived.is_some() {
            // No tree: nothing but the program was traced.
            std::thread::sleep(POLL);
            continue;
        }
        std::thread::sleep(POLL);
        if status.is_none() {
            status = Some(pid.load(Ordering::Acquire)).filter(|&p| p != 0).and_then(|p| status::StatusPage::create(p).ok());
        }
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
        let before = c.consumed();
        // Said before the batch too: a long one is a lag ctl should see while it lasts.
        publish(status.as_ref(), c, lag(c, available, now));
        behind_said.look(available.saturating_sub(before), c.max_behind.max(available.saturating_sub(before)));
        c.advance(available, Some(&Look { progress: &progress, page, now, settle }))?;
        disk_at_once = disk_at_once.max(c.disk_bytes() + tree.as_ref().map_or(0, |t| t.disk));
        if let Some(p) = pace {
            std::thread::sleep(Duration::from_secs_f64((c.consumed() - before) as f64 / p as f64));
        }
        let behind = page.u64_at(0).load(Ordering::Acquire).saturating_sub(c.consumed());
        c.max_behind = c.max_behind.max(behind);
        behind_said.look(behind, c.max_behind);
        publish(status.as_ref(), c, lag(c, c.consumed() + behind, crate::platform::tsc::now()));
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
                match write(&cfg, &snap_opts, n, (State::Running, State::Running, n), (lag(c, available, now), disk_at_once), (p, None), children) {
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

/// The lag for `mtlab ctl PID status`.
fn publish(page: Option<&status::StatusPage>, c: &Consumer, l: Lag) {
    if let Some(page) = page {
        page.publish(&status::Now::of(&l, c.events()));
    }
}

/// What the recorder has said on stderr about falling behind.
#[derive(Debug, Default)]
struct BehindSaid {
    /// The lag when it last said it was behind (None: not behind).
    at: Option<u64>,
    when: Option<Instant>,
}

impl BehindSaid {
    fn look(&mut self, behind: u64, max: u64) {
        let h = crate::units::human_bytes;
        let quiet = self.when.is_some_and(|t| t.elapsed() < SAY_EVERY);
        match self.at {
            None if behind >= BEHIND_WARN && !quiet => say!(
                "mtlab: the live analysis is {} behind the program (it allocates faster than one core analyses): \
                 nothing is lost, the raw trace holds the rest on disk until it is reached",
                h(behind)
            ),
            Some(at) if behind >= at.saturating_mul(BEHIND_GROWTH) && !quiet => {
                say!("mtlab: the live analysis is now {} behind the program (was {}): the raw trace on disk grows with it", h(behind), h(at))
            }
            Some(_) if behind < CAUGHT_UP => {
                say!("mtlab: the live analysis has caught up with the program ({} behind; at most {})", h(behind), h(max));
                self.at = None;
                return;
            }
            _ => return,
        }
        self.at = Some(behind);
        self.when = Some(Instant::now());
    }
}

/// What stderr says once when the program has exited and `pids` still run.
fn outlived_line(pids: &[u32]) -> String {
    let list = pids.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
    let (n, them, they) = match pids.len() {
        1 => ("1 traced process still runs".to_string(), "it", "it ends"),
        n => (format!("{n} traced processes still run"), "them", "they end"),
    };
    let first = pids.first().copied().unwrap_or(0);
    format!("mtlab: the program exited; {n} ({list}); analysing {them} until {they} — Ctrl-C or `mtlab ctl {first} stop` to finish now")
}

/// Writes snapshot number `snapshot`: the whole recording's state and the
/// root's (ended while processes it started still run).
fn write(
    cfg: &LiveConfig,
    opts: &AnalyzeOptions,
    snapshot: u64,
    (state, root_state, root_as_of): (State, State, u64),
    (lag, disk_at_once): (Lag, u64),
    (p, data): (crate::analysis::ProcessReport, Option<crate::profile::ProfileData>),
    children: Vec<tree::Snap>,
) -> Result<(), ProfileFileError> {
    let root = ProcessLive { pid: p.pid, file: p.file.clone(), state: root_state, as_of_snapshot: root_as_of, lag };
    let mut process_status = vec![root];
    let mut processes = vec![p];
    let mut profile_data = vec![data];
    for c in children {
        process_status.push(c.status);
        processes.push(c.report);
        profile_data.push(c.data);
    }
    // The top-level lag is the tree's; each process keeps its own in process_status.
    let lag = Lag::tree(lag, &process_status[1..], disk_at_once);
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
