//! The flight recorder's thread in `mtlab record`: feeds the ring, watches
//! the triggers, writes a window on each (`ROOT.flight-N`).
//!
//! The ring is fed by `Feed` (feed.rs) from the raw root trace below the
//! writer's watermark; a live consumer that already reads those bytes can
//! push them instead (`Recorder::start` with its own `Feed`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::control::{self, DumpRequests};
use super::feed::Feed;
use super::ring::Ring;
use super::triggers::{CgroupWatch, PressureWatch, PSI_MEMORY};
use super::FlightConfig;
use crate::platform::names;
use crate::trace::keys;

const POLL: Duration = Duration::from_millis(50);

/// What the recorder did, for `record`'s summary.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The windows written, with their trigger.
    pub written: Vec<(PathBuf, String)>,
    /// Triggers that could not be set up, windows that could not be written.
    pub warnings: Vec<String>,
}

struct Shared {
    ring: Mutex<Ring>,
    outcome: Mutex<Outcome>,
    root: PathBuf,
    keep_last_ns: u64,
    next: AtomicU32,
    /// The program's pid once it runs (0 before).
    pid: Arc<AtomicU32>,
    /// The raw root trace, beside which the root process's later images
    /// are traced (`root` under `--live` is the profile's name).
    trace_root: PathBuf,
    /// The root process's latest image's trace, once it has exec'd (kept:
    /// under `--live` the file goes when the image has been read).
    execd: Mutex<Option<PathBuf>>,
}

pub struct Recorder {
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    pid: Arc<AtomicU32>,
    thread: Option<JoinHandle<(Feed, Triggers)>>,
}

impl Recorder {
    /// Starts the thread for the windows `root.flight-N` of the raw root
    /// trace `trace_root`, fed by `feed`.
    pub fn start(cfg: &FlightConfig, root: &Path, trace_root: &Path, mut feed: Feed, tsc_hz: u64) -> Recorder {
        let pid = Arc::new(AtomicU32::new(0));
        let shared = Arc::new(Shared {
            ring: Mutex::new(Ring::new(cfg.keep_last_ns, cfg.max_bytes, tsc_hz)),
            outcome: Mutex::new(Outcome::default()),
            root: root.to_path_buf(),
            keep_last_ns: cfg.keep_last_ns,
            next: AtomicU32::new(1),
            pid: Arc::clone(&pid),
            trace_root: trace_root.to_path_buf(),
            execd: Mutex::new(None),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let pressure = cfg.pressure;
        let about = control::About { keep_last_ns: cfg.keep_last_ns, sampled: cfg.sampled };
        let thread = {
            let (shared, stop, pid) = (Arc::clone(&shared), Arc::clone(&stop), Arc::clone(&pid));
            std::thread::Builder::new()
                .name("mtlab-flight".into())
                .spawn(move || {
                    let mut t = Triggers::default();
                    while !stop.load(Ordering::Acquire) {
                        std::thread::sleep(POLL);
                        if !t.ready {
                            t.set_up(&shared, pid.load(Ordering::Acquire), pressure, about);
                        }
                        feed.step(&mut lock(&shared.ring));
                        note_exec(&shared);
                        t.poll(&shared);
                    }
                    (feed, t)
                })
                .expect("a thread for the flight recorder")
        };
        Recorder { shared, stop, pid, thread: Some(thread) }
    }

    /// A handle that pushes raw trace bytes into the ring, for a recorder
    /// started with [`Feed::pushed_by_caller`].
    pub fn pusher(&self) -> Pusher {
        Pusher(Arc::clone(&self.shared))
    }

    /// The program runs as `pid`: `ctl` and the cgroup trigger can find it.
    pub fn spawned(&self, pid: u32) {
        self.pid.store(pid, Ordering::Release);
    }

    /// After the program ended: feeds the rest of its trace, writes a last
    /// window if it died of a signal (`signal`) or of the OOM killer.
    pub fn stop(mut self, signal: Option<i32>) -> Outcome {
        self.stop.store(true, Ordering::Release);
        let (mut event, mut oom_kill) = (None, None);
        if let Some((mut feed, mut t)) = self.thread.take().and_then(|t| t.join().ok()) {
            feed.finish(&mut lock(&self.shared.ring));
            // The OOM killer's SIGKILL: the cgroup says why.
            if let Some(c) = t.cgroup.as_mut() {
                event = c.poll();
                oom_kill = c.oom_kill.clone();
            }
        }
        let why = match signal {
            Some(sig) => {
                let by_oom = oom_kill.filter(|_| sig == libc::SIGKILL).map(|k| format!(" (the OOM killer: {k})")).unwrap_or_default();
                Some(format!("signal {sig} ({}){by_oom}", signal_name(sig)))
            }
            None => event,
        };
        if let Some(why) = why {
            let _ = write_window(&self.shared, &why);
        }
        std::mem::take(&mut *lock(&self.shared.outcome))
    }
}

/// Pushes the raw trace's bytes, in file order from its start, into a
/// recorder's ring (`record --live` hands it what its consumer reads).
pub struct Pusher(Arc<Shared>);

impl Pusher {
    pub fn push(&self, bytes: &[u8]) {
        lock(&self.0.ring).push(bytes);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Default)]
struct Triggers {
    ready: bool,
    requests: Option<DumpRequests>,
    cgroup: Option<CgroupWatch>,
    pressure: Option<PressureWatch>,
}

impl Triggers {
    fn set_up(&mut self, shared: &Shared, pid: u32, pressure: Option<super::triggers::Pressure>, about: control::About) {
        if pid == 0 {
            return;
        }
        self.ready = true;
        let warn = |w: String| lock(&shared.outcome).warnings.push(w);
        match DumpRequests::create(pid, about) {
            Ok(r) => self.requests = Some(r),
            Err(e) => warn(format!(
                "flight recorder: cannot make {} ({e}): `mtlab ctl {pid} dump` will not reach it",
                names::flight_page(pid).display()
            )),
        }
        match CgroupWatch::new(pid) {
            Ok(c) => self.cgroup = Some(c),
            Err(e) => warn(format!("flight recorder: {e}")),
        }
        if let Some(p) = pressure {
            match PressureWatch::new(p, Path::new(PSI_MEMORY)) {
                Ok(w) => self.pressure = Some(w),
                Err(e) => warn(format!("flight recorder: {e}")),
            }
        }
    }

    fn poll(&mut self, shared: &Shared) {
        if let Some(r) = &self.requests {
            if let Some(seq) = r.pending() {
                match write_window(shared, "mtlab ctl dump") {
                    Ok(p) => r.answer(seq, Ok(&p)),
                    Err(e) => r.answer(seq, Err(&e)),
                }
            }
        }
        if let Some(why) = self.cgroup.as_mut().and_then(CgroupWatch::poll) {
            let _ = write_window(shared, &why);
        }
        if let Some(w) = self.pressure.as_mut() {
            if let Some(why) = w.poll() {
                if lock(&shared.ring).window(crate::platform::tsc::now()).is_none() {
                    // No event written yet: fire again at the next poll.
                    w.rearm();
                } else {
                    let _ = write_window(shared, &why);
                }
            }
        }
    }
}

/// The trace of the root process's latest image when it has exec'd (the
/// ring holds the root trace, its first image's): `ROOT.d/PID`, then
/// `ROOT.d/PID.N` for its later images.
fn latest_image(shared: &Shared) -> Option<PathBuf> {
    let pid = shared.pid.load(Ordering::Acquire);
    if pid == 0 {
        return None;
    }
    (0..).map(|n| names::child_trace(&shared.trace_root, pid, n)).take_while(|p| p.exists()).last()
}

/// Notes (once, with a warning) that the root process has exec'd.
fn note_exec(shared: &Shared) {
    let Some(t) = latest_image(shared) else { return };
    let mut execd = lock(&shared.execd);
    if execd.is_none() {
        lock(&shared.outcome).warnings.push(format!(
            "flight recorder: the program exec'd another (traced as {}): windows hold the events of the first program \
             the process ran only",
            t.display()
        ));
    }
    *execd = Some(t);
}

/// Writes the ring as the next `ROOT.flight-N`; its path, or why not.
fn write_window(shared: &Shared, trigger: &str) -> Result<PathBuf, String> {
    note_exec(shared);
    let execd = lock(&shared.execd).clone();
    let mut ring = lock(&shared.ring);
    let r = (|| {
        let window = ring.window(crate::platform::tsc::now()).ok_or_else(|| match &execd {
            Some(t) => format!(
                "the first program the process ran (the one the flight recorder keeps) has no event in the window: it \
                 exec'd another (traced as {})",
                t.display()
            ),
            None => "no event has been written to the trace yet".to_string(),
        })?;
        let header = ring.header().ok_or("the trace has no header yet")?;
        let hz = ring.tsc_hz() as u128;
        let ns = |tsc: u64| (tsc.saturating_sub(header.start_tsc) as u128 * 1_000_000_000 / hz.max(1)) as u64;
        let runinfo = |before: u64| -> Vec<(String, String)> {
            [
            (keys::FLIGHT_KEEP_LAST_NS, shared.keep_last_ns.to_string()),
            (keys::FLIGHT_TRIGGER, trigger.to_string()),
            (keys::FLIGHT_START_NS, ns(window.start_tsc).to_string()),
            (keys::FLIGHT_END_NS, ns(window.end_tsc).to_string()),
            (keys::FLIGHT_EVENTS_BEFORE, before.to_string()),
            ]
            .into_iter()
            .chain(execd.iter().map(|t| (keys::FLIGHT_EXECD, t.display().to_string())))
            .map(|(k, v)| (k.to_string(), v))
            .collect()
        };
        // The next free name: an earlier run's windows are kept.
        let path = loop {
            let p = names::flight_dump(&shared.root, shared.next.fetch_add(1, Ordering::Relaxed));
            if std::fs::symlink_metadata(&p).is_err() {
                break p;
            }
        };
        ring.write_trace(&path, runinfo).map_err(|e| e.to_string())?;
        Ok::<_, String>(path)
    })();
    let mut out = lock(&shared.outcome);
    match &r {
        Ok(p) => out.written.push((p.clone(), trigger.to_string())),
        Err(e) => out.warnings.push(format!("flight recorder: no window written on {trigger}: {e}")),
    }
    r
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGKILL => "SIGKILL",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        _ => "another signal",
    }
}
