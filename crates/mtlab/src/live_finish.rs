//! Rewriting the root trace while the traced program still runs.
//!
//! `mtlab record` rewrites every trace after the program has ended (join,
//! column layout, zstd: `trace::Finisher`). For a long program that is a
//! second or more of waiting at the end, and the raw rows (12–30× the
//! finished trace) sit on disk until then. So the root process gets a
//! watermark page (a memfd, layout in mtlab_trace.h): its writer publishes
//! the file offset below which every reserved byte is written, and a thread
//! here rewrites the records below it as the program goes, punching the raw
//! bytes it has taken out of the file (`Finisher::releasing`): on disk there
//! is the rewrite so far and the raw backlog, not the whole raw trace.
//!
//! How it shares the CPUs (`MTLAB_LIVE_FINISH`): `auto` (the default)
//! rewrites everything written after a 20 ms poll in which some CPU sat idle,
//! as SCHED_IDLE; after a poll in which none did, it still rewrites, at
//! normal priority but within a budget of its own CPU time per second that
//! grows with the raw backlog (`Budget`): at most 5 % of one CPU, so the
//! program is slowed by at most that much while the backlog stays bounded
//! on a host with some idle time. `idle` rewrites only after idle polls,
//! `always` at every poll at normal priority without a budget, `off` never
//! (all of it at the end).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::platform::shared_page::SharedPage;
use crate::trace::format::{PROGRESS_SLOTS_ONLY, WATERMARK_MAGIC, WATERMARK_OFF_MAGIC, WATERMARK_OFF_PROGRESS_WANTED, WATERMARK_SIZE};
use crate::trace::{Finisher, Source, Work};

/// When the thread rewrites (`MTLAB_LIVE_FINISH`).
#[derive(Clone, Copy, Debug, PartialEq)]
enum When {
    Auto,
    Idle,
    Always,
    Off,
}

impl When {
    fn from_env() -> When {
        match std::env::var("MTLAB_LIVE_FINISH") {
            Err(_) => When::Auto,
            Ok(v) => When::parse(&v).unwrap_or_else(|| {
                say!("mtlab: MTLAB_LIVE_FINISH={v:?} is not auto, idle, always or off; using auto");
                When::Auto
            }),
        }
    }

    fn parse(v: &str) -> Option<When> {
        match v {
            "auto" | "" => Some(When::Auto),
            "idle" => Some(When::Idle),
            "always" => Some(When::Always),
            "off" => Some(When::Off),
            _ => None,
        }
    }
}

/// How the rewrite during the run ended, for `record` to finish the trace.
pub enum Stopped {
    /// Nothing was rewritten (or the rewrite failed before it released any
    /// raw byte): the whole file is finished from the start.
    Nothing,
    /// The rewrite so far, for `Finisher::finish` to complete.
    Partial(Box<Finisher>),
    /// The rewrite failed after the raw bytes it held were punched out of
    /// the file: why, and how many bytes of the raw trace are lost.
    Lost { why: String, released: u64 },
}

/// The watermark memfd (until the program is spawned) and the thread.
pub struct LiveFinish {
    fd: Option<OwnedFd>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Stopped>>,
    /// The thread's id, for `stop` to lift its priority.
    tid: Arc<std::sync::atomic::AtomicI32>,
    page: Arc<SharedPage>,
}

impl LiveFinish {
    /// Sets up the page and starts the thread, which waits for the trace
    /// at `root` to appear. None when the system offers no memfd: then the
    /// whole rewrite happens at the end, as before.
    ///
    /// With `page_needed` (a flight recorder reads the watermark too) the
    /// page is made even when `MTLAB_LIVE_FINISH=off`; the thread then only
    /// waits. With `release`, the raw bytes rewritten are punched out of
    /// the file; without, the raw file stays whole for another reader
    /// (the flight recorder, `mtlab ctl dump` of a sampled run).
    pub fn new(root: PathBuf, page_needed: bool, release: bool) -> Option<LiveFinish> {
        let when = When::from_env();
        if when == When::Off && !page_needed {
            return None;
        }
        let (fd, page) = watermark_page()?;
        // Each buffer's progress, for `record`'s copies of quiet threads'
        // buffers (`salvage`), kept for a death by a signal.
        page.u64_at(WATERMARK_OFF_PROGRESS_WANTED).store(PROGRESS_SLOTS_ONLY, Ordering::Release);
        let stop = Arc::new(AtomicBool::new(false));
        let tid = Arc::new(std::sync::atomic::AtomicI32::new(0));
        let watermark = Arc::clone(&page);
        let thread = {
            let (page, stop, tid) = (Arc::clone(&page), Arc::clone(&stop), Arc::clone(&tid));
            std::thread::Builder::new()
                .name("mtlab-finish".into())
                .spawn(move || {
                    // SAFETY: gettid has no preconditions.
                    tid.store(unsafe { libc::gettid() }, Ordering::Release);
                    rewrite_while_running(root, &page, &stop, when, release)
                })
                .ok()?
        };
        Some(LiveFinish { fd: Some(fd), stop, thread: Some(thread), page: watermark, tid })
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

    /// The watermark page, which the program's writer publishes its
    /// buffers' progress in.
    pub fn page(&self) -> Arc<SharedPage> {
        Arc::clone(&self.page)
    }

    /// After the spawn: the program has its copy.
    pub fn spawned(&mut self) {
        self.fd = None;
    }

    /// Stops the thread once the program has ended; returns the rewrite
    /// so far, for `Finisher::finish` to complete.
    pub fn stop(mut self) -> Stopped {
        self.stop.store(true, Ordering::Release);
        // The program has ended: the step the thread is on is now what
        // `record` waits for, and as SCHED_IDLE on a loaded host it could
        // take many seconds (17 s measured at load 21). Normal priority.
        let tid = self.tid.load(Ordering::Acquire);
        if tid > 0 {
            let param = libc::sched_param { sched_priority: 0 };
            // SAFETY: sched_setscheduler and setpriority on a thread of this
            // process (joined below, so its id is not reused before), with a
            // parameter that lives across the call; failure leaves it as it was.
            unsafe {
                libc::sched_setscheduler(tid, libc::SCHED_OTHER, &param);
                libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 0);
            }
        }
        let joined = self.thread.take().map(|t| t.join());
        match joined {
            Some(Ok(s)) => s,
            Some(Err(_)) => Stopped::Lost { why: "the rewrite thread panicked".into(), released: 0 },
            None => Stopped::Nothing,
        }
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

/// How often the thread looks at the watermark.
const POLL: Duration = Duration::from_millis(20);
/// Raw bytes taken per step while the program runs: the thread checks
/// `stop` and its budget between steps, so the program's end waits for at
/// most one step (and the batch it completes) on one core.
const STEP: u64 = 4 << 20;
/// Raw bytes read ahead into memory at most (`take_ahead`): beyond it the
/// backlog stays on disk. What the finish holds at the end anyway (four
/// 16 MiB batches).
const AHEAD_MAX: usize = 64 << 20;
/// Raw bytes read ahead between two punches.
const AHEAD_PUNCH_STEP: u64 = 256 << 10;

fn rewrite_while_running(root: PathBuf, page: &SharedPage, stop: &AtomicBool, when: When, release: bool) -> Stopped {
    let ahead = Ahead { done: AtomicBool::new(false), cpu_ns: AtomicU64::new(0), log: std::env::var_os("MTLAB_LIVE_FINISH_LOG").map(PathBuf::from) };
    std::thread::scope(|scope| {
        // Whatever way the rewrite ends, the thread reading ahead ends before the scope waits for it.
        struct Done<'a>(&'a AtomicBool);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Release);
            }
        }
        let _done = Done(&ahead.done);
        rewrite_loop(root, page, stop, when, release, &mut |src| {
            let ahead = &ahead;
            let _ = std::thread::Builder::new().name("mtlab-ahead".into()).spawn_scoped(scope, move || take_ahead(&src, page, ahead));
        }, &ahead.cpu_ns)
    })
}

/// The thread that reads the raw records ahead of the rewrite: its end,
/// the CPU time it spent (ns, counted against the rewrite's budget), and
/// `MTLAB_LIVE_FINISH_LOG`, a file it writes where the rewrite stands at
/// every poll to.
struct Ahead {
    done: AtomicBool,
    cpu_ns: AtomicU64,
    log: Option<PathBuf>,
}

/// Every poll: reads the records written since into memory (up to
/// `AHEAD_MAX` held) and punches them out of the file, so that the disk
/// holds no raw backlog while the rewrite is busy with a batch. Cheap (a
/// copy of ~15 MB/s at most, and a few `fallocate`s); at normal priority,
/// counted against the budget on a busy host. An error stops it: the
/// rewrite then reads the file itself, and meets the error there.
fn take_ahead(src: &Source, page: &SharedPage, ahead: &Ahead) {
    let mut prio = Priority::Idle;
    prio.set(Priority::Normal);
    let t0 = Instant::now();
    let mut log = ahead.log.as_ref().and_then(|p| std::fs::File::create(p).ok()).map(std::io::BufWriter::new);
    while !ahead.done.load(Ordering::Acquire) {
        std::thread::sleep(POLL);
        let cpu = thread_cpu();
        let written = page.u64_at(0).load(Ordering::Acquire);
        if src.fill(written, AHEAD_MAX).is_err() || src.punch(AHEAD_PUNCH_STEP).is_err() {
            return;
        }
        ahead.cpu_ns.fetch_add(thread_cpu().saturating_sub(cpu).as_nanos() as u64, Ordering::Relaxed);
        if let Some(w) = log.as_mut() {
            use std::io::Write;
            let p = src.progress();
            let _ = writeln!(
                w,
                "{} written={written} taken={} released={} ahead={} batch={} rewritten={}",
                t0.elapsed().as_millis(),
                p.taken,
                p.released,
                p.ahead,
                p.batch,
                p.written
            );
        }
    }
}

fn rewrite_loop(
    root: PathBuf,
    page: &SharedPage,
    stop: &AtomicBool,
    when: When,
    release: bool,
    read_ahead: &mut dyn FnMut(std::sync::Arc<Source>),
    ahead_cpu_ns: &AtomicU64,
) -> Stopped {
    let mut finisher: Option<Finisher> = None;
    let mut pacer = Pacer::new(stop, ahead_cpu_ns);
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(POLL);
        // SCHED_IDLE alone does not keep this thread off a busy CPU: woken
        // with work, it is still picked for a whole scheduler tick now and
        // then, taken from the program (2 threads on 2 CPUs: ~4 cycles of
        // malloc-test's ~130 per call). So after a poll interval in which
        // some CPU sat idle it takes all there is; after one in which none
        // did, only what its budget allows (`auto`), or nothing (`idle`).
        let was_idle = pacer.idle.was_idle();
        pacer.budget.refill(Instant::now(), BUCKET_MAX);
        pacer.charge_ahead();
        if when == When::Off || (!was_idle && when == When::Idle) {
            continue;
        }
        let written = page.u64_at(0).load(Ordering::Acquire);
        if written == 0 {
            continue;
        }
        if finisher.is_none() {
            match start_finisher(&root, written, release) {
                Some(f) => {
                    if release {
                        read_ahead(f.read_ahead());
                    }
                    finisher = Some(f)
                }
                None => continue,
            }
        }
        let Some(f) = finisher.as_mut() else { continue };
        let budgeted = when == When::Auto && !was_idle;
        // `always` asks for the rewrite whatever the load: as SCHED_IDLE it
        // would get no CPU on a host with none idle.
        pacer.prio.set(if budgeted || when == When::Always { Priority::Normal } else { Priority::Idle });
        pacer.budget.set_backlog(written.saturating_sub(f.taken()), backlog_target(f));
        pacer.budgeted = budgeted;
        pacer.charge();
        while f.taken() < written && !stop.load(Ordering::Acquire) && (!pacer.budgeted || pacer.budget.left()) {
            let to = written.min(f.taken() + STEP);
            let step = f.advance_paced(to, &mut |w| pacer.before(w));
            pacer.charge();
            if let Err(e) = step {
                let released = f.released();
                // Dropping it removes its temp file; with nothing released
                // the end does it all from the file.
                return match released {
                    0 => Stopped::Nothing,
                    _ => Stopped::Lost { why: e.to_string(), released },
                };
            }
            if f.taken() < to {
                break; // the next record is not all there yet
            }
        }
    }
    pacer.prio.set(Priority::Idle);
    match finisher {
        Some(f) => Stopped::Partial(Box::new(f)),
        None => Stopped::Nothing,
    }
}

fn start_finisher(root: &std::path::Path, written: u64, release: bool) -> Option<Finisher> {
    let mut f = Finisher::start(root, written).ok()?;
    f.one_worker();
    if release {
        // A file that cannot be opened for writing is rewritten all the same, whole.
        let _ = f.releasing();
    }
    Some(f)
}

/// The raw backlog (written, not yet rewritten) the budget aims to stay
/// under: a quarter of the rewrite so far, so that the disk holds at most
/// ~1.25× the finished trace (and at least 1 MiB, for the trace's start).
fn backlog_target(f: &Finisher) -> u64 {
    (f.rewritten() / 4).max(1 << 20)
}

/// Paces the rewrite within its budget while no CPU is idle: the thread's
/// CPU time (and the read-ahead's) is spent from the budget, and before
/// each group's columns or compression (`Finisher::advance_paced`) it waits
/// until the budget holds what that work is expected to cost, from the cost
/// per row byte of the work of that kind before. A 16 MiB batch, once
/// begun, then no longer overdraws the budget by its whole cost (measured:
/// the program 8 % slower with no CPU idle, docs/benchmarks.md), only by
/// the error of the estimate.
struct Pacer<'a> {
    budget: Budget,
    /// This poll's rewrite works within the budget.
    budgeted: bool,
    stop: &'a AtomicBool,
    ahead_cpu_ns: &'a AtomicU64,
    /// Whether a CPU sat idle, looked at every poll and while waiting: an
    /// idle CPU ends the wait, and the rest goes at SCHED_IDLE (`prio`).
    idle: IdleCpu,
    prio: Priority,
    /// The thread's CPU time when it was last charged.
    mark: Duration,
    /// The work begun at the last `before` (none between steps), and the
    /// CPU seconds per row byte of each kind so far (columns, compression).
    doing: Option<Work>,
    per_byte: [f64; 2],
}

/// CPU seconds per row byte assumed before the first of each kind is
/// measured (columns, compression): about what a loaded 2-CPU host took
/// (columns ~38 ns a byte at load 7, docs/benchmarks.md; zstd-3 on the
/// columns less).
const PER_BYTE_START: [f64; 2] = [40e-9, 10e-9];

impl<'a> Pacer<'a> {
    fn new(stop: &'a AtomicBool, ahead_cpu_ns: &'a AtomicU64) -> Pacer<'a> {
        let mut prio = Priority::Normal;
        prio.set(Priority::Idle);
        Pacer {
            budget: Budget::new(Instant::now()),
            budgeted: false,
            stop,
            ahead_cpu_ns,
            idle: IdleCpu::new(),
            prio,
            mark: thread_cpu(),
            doing: None,
            per_byte: PER_BYTE_START,
        }
    }

    /// Spends the thread's CPU time since the last charge (while budgeted)
    /// and ends the work begun.
    fn charge(&mut self) -> Duration {
        let now = thread_cpu();
        let spent = now.saturating_sub(self.mark);
        self.mark = now;
        if self.budgeted {
            self.budget.spend(spent);
        }
        if let Some(w) = self.doing.take() {
            let (k, bytes) = kind(w);
            if bytes > 0 {
                self.per_byte[k] = learn(self.per_byte[k], spent.as_secs_f64() / bytes as f64);
            }
        }
        spent
    }

    fn charge_ahead(&mut self) {
        self.budget.spend(Duration::from_nanos(self.ahead_cpu_ns.swap(0, Ordering::Relaxed)));
    }

    /// Before `w`: waits (while budgeted and the program runs) until the
    /// budget holds its expected cost.
    fn before(&mut self, w: Work) {
        self.charge();
        if self.budgeted {
            let (k, bytes) = kind(w);
            let need = self.per_byte[k] * bytes as f64;
            loop {
                self.budget.refill(Instant::now(), BUCKET_MAX.max(need));
                self.charge_ahead();
                if self.stop.load(Ordering::Acquire) {
                    break;
                }
                let Some(wait) = self.budget.wait_for(need) else { break };
                std::thread::sleep(wait.min(POLL));
                if self.idle.was_idle() {
                    self.budgeted = false;
                    self.prio.set(Priority::Idle);
                    break;
                }
            }
            self.mark = thread_cpu();
        }
        self.doing = Some(w);
    }
}

/// The kind of a unit of work (0: columns, 1: compression) and its row bytes.
fn kind(w: Work) -> (usize, usize) {
    match w {
        Work::Columns(b) => (0, b),
        Work::Compression(b) => (1, b),
    }
}

/// The cost per byte after one more measured: the mean of the two, so that
/// one unit slowed by the host's load does not set the estimate alone.
fn learn(was: f64, measured: f64) -> f64 {
    (was + measured) / 2.0
}

/// The thread's CPU time on a busy host: a share of one CPU per second of
/// wall time, from `SHARE_MIN` with no backlog up to `SHARE_MAX` when the
/// backlog is `SHARE_MAX / SHARE_MIN` times its target. A bucket, that
/// holds at most `BUCKET_MAX` or what the next unit of work needs
/// (`Pacer`): what the work costs more than expected is owed, and paid
/// back before the next.
struct Budget {
    at: Instant,
    /// Seconds of CPU time the thread may still use (negative: overdrawn).
    left: f64,
    share: f64,
}

const SHARE_MIN: f64 = 0.01;
const SHARE_MAX: f64 = 0.05;
/// The most the bucket holds: what it saved while there was nothing to do
/// is not spent at once.
const BUCKET_MAX: f64 = 0.05;

impl Budget {
    fn new(now: Instant) -> Budget {
        Budget { at: now, left: 0.0, share: SHARE_MIN }
    }

    fn set_backlog(&mut self, backlog: u64, target: u64) {
        self.share = share_for(backlog, target);
    }

    /// Adds the share of the time since the last refill, up to `most`
    /// seconds held (at least what it held).
    fn refill(&mut self, now: Instant, most: f64) {
        let dt = now.duration_since(self.at).as_secs_f64();
        self.at = now;
        self.left = (self.left + dt * self.share).min(most.max(self.left));
    }

    fn left(&self) -> bool {
        self.left > 0.0
    }

    /// How long until the bucket holds `need` seconds (None: it does).
    fn wait_for(&self, need: f64) -> Option<Duration> {
        (self.left < need).then(|| Duration::from_secs_f64((need - self.left) / self.share))
    }

    fn spend(&mut self, cpu: Duration) {
        self.left -= cpu.as_secs_f64();
    }
}

/// The share of one CPU the rewrite may take with `backlog` raw bytes
/// waiting against a target of `target`.
fn share_for(backlog: u64, target: u64) -> f64 {
    (SHARE_MIN * backlog as f64 / target.max(1) as f64).clamp(SHARE_MIN, SHARE_MAX)
}

/// This thread's CPU time.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec, which lives across the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The thread's scheduling: SCHED_IDLE when it uses idle CPUs (it never
/// preempts the program's threads on wake-up, which nice 19 still does),
/// normal when it spends its budget on a busy host.
#[derive(Clone, Copy, PartialEq)]
enum Priority {
    Idle,
    Normal,
}

impl Priority {
    fn set(&mut self, want: Priority) {
        if *self == want {
            return;
        }
        let param = libc::sched_param { sched_priority: 0 };
        let policy = if want == Priority::Idle { libc::SCHED_IDLE } else { libc::SCHED_OTHER };
        // SAFETY: sched_setscheduler on this thread, with a parameter that
        // lives across the call.
        let ok = unsafe { libc::sched_setscheduler(0, policy, &param) } == 0;
        if ok {
            *self = want;
        } else if want == Priority::Idle {
            // Where the policy is refused: nice 19, for good (it cannot be lowered again unprivileged).
            // SAFETY: setpriority on this thread's own id.
            unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 19) };
            *self = want;
        }
        // Back to normal refused (leaving SCHED_IDLE needs RLIMIT_NICE or
        // CAP_SYS_NICE): the budget is then spent at idle priority.
    }
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
    use super::{learn, parse_idle_ticks, share_for, Budget, When, BUCKET_MAX, SHARE_MAX, SHARE_MIN};
    use std::time::{Duration, Instant};

    /// Units of work of 150 ms of CPU each (a 4 MiB group's columns on a
    /// loaded host, three times what the bucket holds) within a budget of
    /// `SHARE_MAX`, for 20 s: the most the CPU spent ran ahead of the share
    /// earned, when each unit waits for the budget to hold its cost, and
    /// when it starts as soon as the budget is not overdrawn (the check
    /// before a step, which a 16 MiB batch once begun overdrew).
    fn overdraw(wait_for_cost: bool) -> f64 {
        let start = Instant::now();
        let mut b = Budget::new(start);
        b.set_backlog(u64::MAX, 1);
        let (cost, mut t, mut spent, mut most) = (0.150, start, 0.0f64, 0.0f64);
        while t < start + Duration::from_secs(20) {
            b.refill(t, BUCKET_MAX.max(cost));
            let wait = if wait_for_cost {
                b.wait_for(cost)
            } else {
                (!b.left()).then(|| Duration::from_secs_f64(-b.left / b.share + 1e-3))
            };
            if let Some(w) = wait {
                t += w;
                continue;
            }
            b.spend(Duration::from_secs_f64(cost));
            spent += cost;
            most = most.max(spent - SHARE_MAX * (t - start).as_secs_f64());
            t += Duration::from_secs_f64(cost);
        }
        assert!(spent > SHARE_MAX * 20.0 - 2.0 * cost, "the work went on: {spent} s of CPU");
        most
    }

    #[test]
    fn work_waits_for_the_budget_to_hold_its_cost_so_the_budget_is_never_overdrawn() {
        assert!(overdraw(true) <= 1e-9, "{}", overdraw(true));
        assert!(overdraw(false) >= 0.1, "the check before each unit alone overdraws by about a unit: {}", overdraw(false));
    }

    #[test]
    fn the_cost_per_byte_follows_what_was_measured() {
        let mut c = 40e-9;
        for _ in 0..20 {
            c = learn(c, 10e-9);
        }
        assert!((c - 10e-9).abs() < 1e-12);
        assert!((learn(40e-9, 20e-9) - 30e-9).abs() < 1e-15);
    }

    #[test]
    fn the_budget_grows_with_the_backlog_up_to_its_cap() {
        let t = 1 << 20;
        assert_eq!(share_for(0, t), SHARE_MIN);
        assert_eq!(share_for(t, t), SHARE_MIN);
        assert!((share_for(3 * t, t) - 3.0 * SHARE_MIN).abs() < 1e-12);
        assert_eq!(share_for(100 * t, t), SHARE_MAX);
    }

    #[test]
    fn live_finish_modes_parse() {
        assert_eq!(When::parse("auto"), Some(When::Auto));
        assert_eq!(When::parse("idle"), Some(When::Idle));
        assert_eq!(When::parse(""), Some(When::Auto));
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
