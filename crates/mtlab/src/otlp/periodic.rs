//! Periodic pushes from a running recording (`record --sample … --push-every
//! 60s`): every period, the profile so far is read (`Source`), the window's
//! profile made from it — what was allocated since the last push, what is
//! in use now — and pushed on this module's own thread. A push that fails
//! is tried again with doubling waits while the window lasts, then dropped
//! and counted; the program is never waited on (only the flush a dump asks
//! of it, as `mtlab ctl dump` does).
//!
//! A source is anything that gives the cumulative profile: `record` reads
//! the sampled process through its control page now; a live recorder can
//! hand its own.

use std::collections::HashMap;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::push::{Retry, Target};
use super::resource::ProcessInfo;
use crate::profile::{ProfileData, StackSample};

/// The cumulative profile of the recorded process so far, and what the
/// resource says of it. `last` is true for the read after the program ended.
pub type Source = Box<dyn FnMut(bool) -> Result<Snapshot, String> + Send>;

/// What a source read.
pub struct Snapshot {
    pub profile: ProfileData,
    pub process: ProcessInfo,
    pub allocator: Option<String>,
}

/// How the pushes went.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PushStats {
    pub pushed: u64,
    /// Windows given up on after their tries (failed reads included).
    pub dropped: u64,
    pub last_error: Option<String>,
}

impl PushStats {
    /// The line `record` prints at the end.
    pub fn summary(&self, url: &str) -> String {
        let mut s = format!("pushed {} window profile{} to {url}", self.pushed, if self.pushed == 1 { "" } else { "s" });
        if self.dropped > 0 {
            s.push_str(&format!("; {} failed and were dropped (last: {})", self.dropped, self.last_error.as_deref().unwrap_or("?")));
        }
        s
    }
}

/// The settings of the pushes.
#[derive(Debug, Clone)]
pub struct Config {
    pub target: Target,
    pub every: Duration,
    pub service: Option<String>,
}

/// The pushing thread; [`Pusher::finish`] makes the last window's push and
/// returns the counts.
pub struct Pusher {
    stop: mpsc::Sender<()>,
    /// The thread, or why none could be started (nothing is pushed; counted).
    handle: Result<JoinHandle<PushStats>, String>,
}

impl Pusher {
    pub fn start(cfg: Config, source: Source) -> Pusher {
        let (stop, stopped) = mpsc::channel();
        let handle = std::thread::Builder::new().name("mtlab-otlp-push".into()).spawn(move || run(cfg, source, stopped)).map_err(|e| e.to_string());
        Pusher { stop, handle }
    }

    /// After the program ended: the last window pushed, then the counts.
    pub fn finish(self) -> PushStats {
        let _ = self.stop.send(());
        match self.handle {
            Ok(h) => h.join().unwrap_or_default(),
            Err(e) => PushStats { pushed: 0, dropped: 1, last_error: Some(format!("no thread to push from: {e}")) },
        }
    }
}

/// The window's profile: allocations since `prev` (per stack), in-use as now.
/// Intervals are left out: a sampled estimate's interval is not one of a
/// difference of two estimates.
pub fn window(cur: &ProfileData, prev: &HashMap<Vec<u64>, (f64, f64)>, since_ns: u64, now_ns: u64) -> ProfileData {
    let samples = cur
        .samples
        .iter()
        .map(|s| {
            let (objects, bytes) = prev.get(&s.pcs).copied().unwrap_or_default();
            StackSample {
                pcs: s.pcs.clone(),
                alloc_objects: (s.alloc_objects - objects).max(0.0),
                alloc_bytes: (s.alloc_bytes - bytes).max(0.0),
                inuse_objects: s.inuse_objects,
                inuse_bytes: s.inuse_bytes,
                bounds: None,
                threads: Vec::new(),
            }
        })
        .filter(|s| s.alloc_bytes > 0.0 || s.inuse_bytes > 0.0)
        .collect();
    ProfileData { samples, maps: cur.maps.clone(), period_bytes: cur.period_bytes, start_ns: since_ns, duration_ns: now_ns.saturating_sub(since_ns) }
}

fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

fn run(cfg: Config, mut source: Source, stopped: mpsc::Receiver<()>) -> PushStats {
    let mut stats = PushStats::default();
    let mut prev: HashMap<Vec<u64>, (f64, f64)> = HashMap::new();
    let mut since = now_ns();
    loop {
        let last = match stopped.recv_timeout(cfg.every) {
            Err(RecvTimeoutError::Timeout) => false,
            Ok(()) | Err(RecvTimeoutError::Disconnected) => true,
        };
        let started = Instant::now();
        // Tries fit in the window (the last one: a few seconds), so pushes never pile up.
        let budget = if last { Duration::from_secs(3) } else { cfg.every / 2 };
        match source(last) {
            Err(e) => {
                stats.dropped += 1;
                stats.last_error = Some(e);
            }
            Ok(snap) => {
                let now = now_ns();
                let data = window(&snap.profile, &prev, since, now);
                prev = snap.profile.samples.iter().map(|s| (s.pcs.clone(), (s.alloc_objects, s.alloc_bytes))).collect();
                since = now;
                let mut warnings = Vec::new();
                let resource = super::resource::resource(&snap.process, cfg.service.as_deref(), &super::push::real_env, &mut warnings);
                let mut sym = data.symbolizer();
                let pprof = crate::profile::pprof::to_pprof_profile(&data, &mut sym);
                let req = super::profiles::request(&pprof, &data, resource, snap.allocator.as_deref());
                let retry = Retry { tries: tries_within(budget.saturating_sub(started.elapsed()), cfg.target.timeout), first_wait: Duration::from_millis(500) };
                match super::push_profiles(&cfg.target, &req, retry) {
                    Ok(_) => stats.pushed += 1,
                    Err(e) => {
                        stats.dropped += 1;
                        stats.last_error = Some(e.to_string());
                    }
                }
            }
        }
        if last {
            return stats;
        }
    }
}

/// Tries whose waits (0.5, 1, 2, … s) and time-outs fit in `budget`; at least one.
fn tries_within(budget: Duration, timeout: Duration) -> u32 {
    let mut spent = timeout;
    let mut wait = Duration::from_millis(500);
    let mut tries = 1;
    while tries < 8 && spent + wait + timeout <= budget {
        spent += wait + timeout;
        wait *= 2;
        tries += 1;
    }
    tries
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(pcs: &[u64], alloc: f64, inuse: f64) -> StackSample {
        StackSample { pcs: pcs.to_vec(), alloc_objects: alloc / 100.0, alloc_bytes: alloc, inuse_objects: inuse / 100.0, inuse_bytes: inuse, bounds: None, threads: Vec::new() }
    }

    #[test]
    fn a_window_holds_what_was_allocated_in_it_and_what_is_in_use_now() {
        let first = ProfileData { samples: vec![sample(&[1, 2], 1000.0, 500.0), sample(&[3], 200.0, 0.0)], ..Default::default() };
        let w = window(&first, &HashMap::new(), 10, 30);
        assert_eq!(w.samples, first.samples);
        assert_eq!((w.start_ns, w.duration_ns), (10, 20));
        let prev = first.samples.iter().map(|s| (s.pcs.clone(), (s.alloc_objects, s.alloc_bytes))).collect();
        let second = ProfileData { samples: vec![sample(&[1, 2], 1600.0, 100.0), sample(&[3], 200.0, 0.0), sample(&[4], 50.0, 50.0)], ..Default::default() };
        let w = window(&second, &prev, 30, 90);
        // [3] allocated nothing in the window and holds nothing: left out.
        assert_eq!(w.samples, vec![sample(&[1, 2], 600.0, 100.0), sample(&[4], 50.0, 50.0)]);
    }

    #[test]
    fn tries_fit_the_window() {
        assert_eq!(tries_within(Duration::from_secs(1), Duration::from_secs(10)), 1);
        // 10 + (0.5 + 10) + (1 + 10) = 31.5 s ≤ 30 s? no: two tries.
        assert_eq!(tries_within(Duration::from_secs(30), Duration::from_secs(10)), 2);
        assert_eq!(tries_within(Duration::from_secs(30), Duration::from_secs(1)), 6);
    }

    #[test]
    fn a_failing_source_and_a_closed_port_are_counted_not_waited_on() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let target = super::super::push::target(&format!("http://127.0.0.1:{port}"), None, super::super::Signal::Profiles, &|_| None).unwrap();
        let mut calls = 0;
        let source: Source = Box::new(move |_| {
            calls += 1;
            if calls == 1 {
                Err("no profile yet".into())
            } else {
                Ok(Snapshot { profile: ProfileData { samples: vec![sample(&[1], 10.0, 10.0)], ..Default::default() }, process: ProcessInfo::default(), allocator: None })
            }
        });
        let p = Pusher::start(Config { target, every: Duration::from_millis(100), service: None }, source);
        std::thread::sleep(Duration::from_millis(350));
        let started = Instant::now();
        let stats = p.finish();
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
        assert_eq!(stats.pushed, 0);
        assert!(stats.dropped >= 3, "{stats:?}");
        assert!(stats.last_error.as_deref().unwrap_or("").contains(&format!("127.0.0.1:{port}")), "{stats:?}");
    }
}
