//! Rewriting the root trace while the traced program still runs.
//!
//! `mtlab record` rewrites every trace after the program has ended (join,
//! column layout, zstd: `trace::Finisher`). For a long program that is a
//! second or more of waiting at the end, while one core sat idle during the
//! run. So the root process gets a watermark page (a memfd, layout in
//! mtlab_trace.h): its writer publishes the file offset below which every
//! reserved byte is written, and a low-priority thread here rewrites the
//! records below it as the program goes. What is left is done at the end.
//!
//! `MTLAB_LIVE_FINISH` chooses when: `idle` (the default) rewrites only
//! after a poll in which some CPU sat idle, `always` at every poll (a
//! shorter wait at the end, some CPU taken from a program that keeps every
//! CPU busy), `off` never (all of it at the end).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::trace::format::{WATERMARK_MAGIC, WATERMARK_OFF_MAGIC, WATERMARK_SIZE};
use crate::platform::shared_page::SharedPage;
use crate::trace::Finisher;

/// When the thread rewrites (`MTLAB_LIVE_FINISH`).
#[derive(Clone, Copy, Debug, PartialEq)]
enum When {
    Idle,
    Always,
    Off,
}

impl When {
    fn from_env() -> When {
        match std::env::var("MTLAB_LIVE_FINISH") {
            Err(_) => When::Idle,
            Ok(v) => When::parse(&v).unwrap_or_else(|| {
                say!("mtlab: MTLAB_LIVE_FINISH={v:?} is not idle, always or off; using idle");
                When::Idle
            }),
        }
    }

    fn parse(v: &str) -> Option<When> {
        match v {
            "idle" | "" => Some(When::Idle),
            "always" => Some(When::Always),
            "off" => Some(When::Off),
            _ => None,
        }
    }
}

/// The watermark memfd (until the program is spawned) and the thread.
pub struct LiveFinish {
    fd: Option<OwnedFd>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Option<Finisher>>>,
    page: Arc<SharedPage>,
}

impl LiveFinish {
    /// Sets up the page and starts the thread, which waits for the trace
    /// at `root` to appear. None when the system offers no memfd: then the
    /// whole rewrite happens at the end, as before.
    ///
    /// With `page_needed` (a flight recorder reads the watermark too) the
    /// page is made even when `MTLAB_LIVE_FINISH=off`; the thread then only
    /// waits.
    pub fn new(root: PathBuf, page_needed: bool) -> Option<LiveFinish> {
        let when = When::from_env();
        if when == When::Off && !page_needed {
            return None;
        }
        let (fd, page) = watermark_page()?;
        let stop = Arc::new(AtomicBool::new(false));
        let watermark = Arc::clone(&page);
        let thread = {
            let (page, stop) = (Arc::clone(&page), Arc::clone(&stop));
            std::thread::Builder::new()
                .name("mtlab-finish".into())
                .spawn(move || rewrite_while_running(root, &page, &stop, when))
                .ok()?
        };
        Some(LiveFinish { fd: Some(fd), stop, thread: Some(thread), page: watermark })
    }

    /// The descriptor to pass in MTLAB_WATERMARK_FD.
    pub fn fd(&self) -> Option<RawFd> {
        self.fd.as_ref().map(|f| f.as_raw_fd())
    }

    /// Reads the watermark: the file offset below which the program's
    /// writer has written every byte it reserved (0 before it started).
    pub fn watermark(&self) -> impl Fn() -> u64 + Send + 'static {
        let page = Arc::clone(&self.page);
        move || page.u64_at(0).load(Ordering::Acquire)
    }

    /// After the spawn: the program has its copy.
    pub fn spawned(&mut self) {
        self.fd = None;
    }

    /// Stops the thread once the program has ended; returns the rewrite
    /// so far, for `Finisher::finish` to complete (None: start over).
    pub fn stop(mut self) -> Option<Finisher> {
        self.stop.store(true, Ordering::Release);
        self.thread.take().and_then(|t| t.join().ok()).flatten()
    }
}

/// A new watermark page: the descriptor to pass to the program
/// (MTLAB_WATERMARK_FD) and the page, whose first word the root process's
/// writer sets to the offset below which its trace is complete. None when
/// the system offers no memfd.
pub fn watermark_page() -> Option<(OwnedFd, Arc<SharedPage>)> {
    // SAFETY: memfd_create with a valid name; the descriptor is owned
    // below. Not close-on-exec: the traced program inherits it.
    let raw = unsafe { libc::memfd_create(c"mtlab-watermark".as_ptr(), 0) };
    if raw < 0 {
        return None;
    }
    // SAFETY: `raw` is a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: ftruncate on our own descriptor.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), WATERMARK_SIZE as libc::off_t) } != 0 {
        return None;
    }
    let page = Arc::new(SharedPage::map(&fd, WATERMARK_SIZE as usize).ok()?);
    page.u64_at(WATERMARK_OFF_MAGIC).store(WATERMARK_MAGIC, Ordering::Release);
    Some((fd, page))
}

fn rewrite_while_running(root: PathBuf, page: &SharedPage, stop: &AtomicBool, when: When) -> Option<Finisher> {
    // The program's threads come first: this thread only uses idle time.
    // SCHED_IDLE never preempts them on wake-up, which nice 19 still does;
    // nice 19 is the fallback where the policy is refused.
    let idle = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler and setpriority on this thread's own id,
    // with a parameter that lives across the call.
    unsafe {
        if libc::sched_setscheduler(0, libc::SCHED_IDLE, &idle) != 0 {
            libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 19);
        }
    }
    let mut finisher: Option<Finisher> = None;
    let mut idle = IdleCpu::new();
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(20));
        // SCHED_IDLE alone does not keep this thread off a busy CPU: woken
        // with work, it is still picked for a whole scheduler tick now and
        // then, taken from the program (2 threads on 2 CPUs: ~4 cycles of
        // malloc-test's ~130 per call). So it works only after a poll
        // interval in which some CPU sat idle; what it leaves, the end does.
        if when == When::Off || (!idle.was_idle() && when == When::Idle) {
            continue;
        }
        let written = page.u64_at(0).load(Ordering::Acquire);
        if written == 0 {
            continue;
        }
        if finisher.is_none() {
            finisher = Finisher::start(&root, written).ok();
        }
        if let Some(f) = finisher.as_mut() {
            if f.advance(written).is_err() {
                // Dropping it removes its temp file; the end does it all.
                return None;
            }
        }
    }
    finisher
}

/// Whether any CPU sat idle since the last call, from the idle and iowait
/// times of /proc/stat's `cpu` line (in USER_HZ ticks: 10 ms). Unknown
/// (no /proc) counts as idle, as before this check.
struct IdleCpu {
    last: Option<u64>,
}

impl IdleCpu {
    fn new() -> IdleCpu {
        IdleCpu { last: idle_ticks() }
    }

    fn was_idle(&mut self) -> bool {
        let now = idle_ticks();
        let idle = match (self.last, now) {
            (Some(a), Some(b)) => b > a,
            _ => true,
        };
        self.last = now;
        idle
    }
}

fn idle_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse_idle_ticks(&stat)
}

/// idle + iowait of the first (`cpu`, all CPUs) line.
fn parse_idle_ticks(stat: &str) -> Option<u64> {
    let line = stat.lines().next()?;
    let mut f = line.split_ascii_whitespace();
    if f.next()? != "cpu" {
        return None;
    }
    let v: Vec<u64> = f.take(5).map(|x| x.parse().ok()).collect::<Option<_>>()?;
    Some(v.get(3)? + v.get(4)?)
}

#[cfg(test)]
mod tests {
    use super::{parse_idle_ticks, When};

    #[test]
    fn live_finish_modes_parse() {
        assert_eq!(When::parse("idle"), Some(When::Idle));
        assert_eq!(When::parse(""), Some(When::Idle));
        assert_eq!(When::parse("always"), Some(When::Always));
        assert_eq!(When::parse("off"), Some(When::Off));
        assert_eq!(When::parse("sometimes"), None);
    }

    #[test]
    fn idle_ticks_are_idle_plus_iowait_of_the_cpu_line() {
        let stat = "cpu  701986 11907 62760 197180 943 0 712 166 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        assert_eq!(parse_idle_ticks(stat), Some(197180 + 943));
        assert_eq!(parse_idle_ticks("cpu0 1 2 3 4 5\n"), None);
        assert_eq!(parse_idle_ticks(""), None);
    }
}
