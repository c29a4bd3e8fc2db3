//! `mtlab record --pid PID`: trace a process that is already running, then
//! leave it running as it was.
//!
//! Attach: every thread is stopped with ptrace (seize + interrupt); one that
//! is in a safe place (blocked in a system call that no allocator or loader
//! lock is held around, or running the program's own code) is chosen, the
//! others run on, and on it `dlopen(libmtlab_attach.so)` and then
//! `mtlab_attach_begin(settings)` are called (native/preload/attach.c: the
//! GOT slots of every loaded module are routed to the shims). Detach: the
//! same, calling `mtlab_attach_end()` (slots put back, trace finished), then
//! `dlclose` once no thread holds an address of the library in its registers
//! or in a live frame of its stack (quiet.rs: unwound with the CFI of the
//! process's files, unwind.rs; every stack word where that fails). The trace is finished here, with RUNINFO saying when
//! tracing started and how it ended. With `--push-every` (sampling), each
//! window's profile is pushed over OTLP while attached (`otlp::periodic`,
//! reading the process through its control page as `mtlab ctl dump` does).

mod ptrace;
mod quiet;
pub mod steps;
pub mod target;
mod symbols;
mod unwind;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::native::{self, Part};
use crate::record::{SampleConfig, Stacks, Unwind};
use crate::trace::keys;
use ptrace::{CallError, Tracee, DATA};
use steps::Steps;
pub use target::Refusal;
use target::{Libc, Mapping};

#[derive(Debug, Clone)]
pub struct AttachConfig {
    pub pid: i32,
    pub output: PathBuf,
    /// None: a full trace.
    pub sample: Option<SampleConfig>,
    pub stacks: Stacks,
    pub unwind: Unwind,
    pub depth: u32,
    pub free_stacks: bool,
    /// Detach after this long (else at Ctrl-C, SIGTERM, or when the process ends).
    pub duration: Option<Duration>,
    /// Attach even though the process has a seccomp filter.
    pub allow_seccomp: bool,
    /// `--live`: the full trace analysed while attached into this profile,
    /// the raw trace released as it is read (`sample` is None).
    pub live: Option<crate::live::LiveConfig>,
}

#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error("cannot attach to process {pid}: {what}")]
    Failed { pid: i32, what: String },
    #[error(transparent)]
    Record(#[from] crate::record::RecordError),
    #[error(transparent)]
    Unpack(#[from] native::UnpackError),
    #[error(transparent)]
    Live(#[from] crate::live::LiveError),
}

/// How the session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// mtlab detached; the process runs on.
    Detached,
    /// The process ended while traced (its trace was finished by its exit).
    Exited,
}

impl Ended {
    fn name(self) -> &'static str {
        match self {
            Ended::Detached => "detach",
            Ended::Exited => "exit",
        }
    }
}

#[derive(Debug)]
pub struct AttachOutcome {
    pub trace: Option<PathBuf>,
    pub ended: Ended,
    /// From the start of tracing to its end.
    pub traced_for: Duration,
    /// The longest any thread of the process was stopped at attach, and at detach.
    pub stopped_at_attach: Duration,
    pub attach_steps: AttachSteps,
    pub stopped_at_detach: Option<Duration>,
    /// Where the stop at detach went (the end call's stop, then the unload's).
    pub detach_steps: DetachSteps,
    /// The library was unloaded at detach (else it stays loaded, inert).
    pub unloaded: bool,
    /// `--push-every`: where to, and how the window pushes went.
    pub pushed: Option<(String, crate::otlp::periodic::PushStats)>,
    /// `--live`: what the live analysis came to.
    pub live: Option<crate::live::LiveSummary>,
    pub warnings: Vec<String>,
}

const CALL_LIMIT: Duration = Duration::from_secs(10);
const RTLD_NOW: u64 = 2;

/// System calls a thread may be blocked in while no allocator or loader lock
/// is held around them by libc (futex is not among them: a contended arena
/// lock waits there; nor mmap, brk, munmap: an allocator growing its heap).
const SAFE_SYSCALLS: &[u64] = &[
    0,   // read
    7,   // poll
    23,  // select
    34,  // pause
    35,  // nanosleep
    43,  // accept
    45,  // recvfrom
    47,  // recvmsg
    61,  // wait4
    128, // rt_sigtimedwait
    130, // rt_sigsuspend
    230, // clock_nanosleep
    232, // epoll_wait
    247, // waitid
    270, // pselect6
    271, // ppoll
    281, // epoll_pwait
    288, // accept4
    441, // epoll_pwait2
];

fn failed(pid: i32, what: impl Into<String>) -> AttachError {
    AttachError::Failed { pid, what: what.into() }
}

/// The process runs (exists and is not a zombie).
fn running(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    let state = stat.rsplit_once(')').and_then(|(_, a)| a.split_whitespace().next()).unwrap_or("X");
    !matches!(state, "Z" | "X" | "x")
}

/// Where the process and mtlab see the library and the trace.
struct Paths {
    lib_in_target: String,
    out_in_target: String,
    out_here: PathBuf,
    /// Where the trace ends up (out_here, or moved there from the process's root).
    out_final: PathBuf,
    /// Files made in the process's root for it (another mount namespace), removed at the end.
    copies: Vec<PathBuf>,
    /// The library's build for the process's C library (glibc's or musl's).
    part: Part,
}

/// What the checks found: the executable, its maps, its C library's path, and
/// the build of mtlab's library for that C library.
fn checks(cfg: &AttachConfig) -> Result<(PathBuf, Vec<Mapping>, String, Part), AttachError> {
    let pid = cfg.pid;
    if let Some(r) = target::refusal_before_ptrace(&target::facts(pid), cfg.allow_seccomp) {
        return Err(r.into());
    }
    let exe = PathBuf::from(format!("/proc/{pid}/exe"));
    let data = std::fs::read(&exe).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => AttachError::Refused(Refusal::NoProcess(pid)),
        _ => failed(pid, format!("cannot read its executable: {e} (run mtlab as the process's user or as root)")),
    })?;
    if let Some(kind) = crate::record::foreign_program(&exe) {
        return Err(Refusal::Foreign { pid, kind, lib: "64-bit x86-64".into() }.into());
    }
    if symbols::is_dynamic(&data) == Some(false) {
        return Err(Refusal::Static(pid).into());
    }
    let maps = target::maps(pid).map_err(|e| failed(pid, format!("cannot read its maps: {e}")))?;
    let (libc_path, mut kind) = target::find_libc(&maps).ok_or(Refusal::NoLibc(pid))?;
    // The program's loader says it too, whatever its C library's file is called.
    if crate::record::musl_linked(&exe) {
        kind = Libc::Musl;
    }
    // The library's own name, or its copy's in a container's /tmp (`place`).
    let ours = |n: &std::ffi::OsStr| n.to_string_lossy().starts_with("libmtlab_attach") || n.to_string_lossy().starts_with("mtlab-attach-");
    if maps.iter().any(|m| Path::new(&m.path).file_name().is_some_and(ours)) {
        return Err(Refusal::StillLoaded { pid }.into());
    }
    let part = match kind {
        Libc::Glibc => Part::Attach,
        Libc::Musl if native::carries(Part::AttachMusl) => Part::AttachMusl,
        Libc::Musl => return Err(Refusal::NoMuslBuild { pid }.into()),
    };
    Ok((exe, maps, libc_path, part))
}

/// The library and the trace where the process can reach them: mtlab's own
/// paths in the same mount namespace, as the same user; else (a container,
/// or a service's process running as its own user, whom mtlab's cache in
/// root's home and `-o`'s directory may be closed to) a copy of the library
/// and the trace in the process's /tmp, reached from here through
/// /proc/PID/root.
fn place(cfg: &AttachConfig, output: &Path, part: Part) -> Result<Paths, AttachError> {
    let lib = native::path(part)?;
    if !target::other_mount_ns(cfg.pid) && !target::other_user(cfg.pid) {
        return Ok(Paths {
            lib_in_target: lib.to_string_lossy().into_owned(),
            out_in_target: output.to_string_lossy().into_owned(),
            out_here: output.to_path_buf(),
            out_final: output.to_path_buf(),
            copies: vec![],
            part,
        });
    }
    let tag = format!("{}-{}", std::process::id(), cfg.pid);
    let lib_in_target = format!("/tmp/mtlab-attach-{tag}.so");
    let out_in_target = format!("/tmp/mtlab-attach-{tag}.mtl");
    let lib_here = target::in_root(cfg.pid, &lib_in_target);
    let out_here = target::in_root(cfg.pid, &out_in_target);
    let _ = std::fs::remove_file(&out_here);
    let copy = std::fs::read(&lib).and_then(|bytes| {
        let mut f = crate::platform::safe_fs::create_new(&lib_here, 0o644)?;
        std::io::Write::write_all(&mut f, &bytes)
    });
    copy.map_err(|e| failed(cfg.pid, format!("cannot put mtlab's library into its root as {}: {e}", lib_here.display())))?;
    Ok(Paths { lib_in_target, out_in_target, out_here, out_final: output.to_path_buf(), copies: vec![lib_here], part })
}

fn settings(cfg: &AttachConfig, out: &str) -> String {
    let mut s = format!(
        "MTLAB_OUT={out}\nMTLAB_STACKS={}\nMTLAB_DEPTH={}\nMTLAB_FOLLOW=0\nMTLAB_FREE_STACKS={}\nMTLAB_UNWIND={}\nMTLAB_TSC_HZ={}\n",
        if cfg.stacks == Stacks::Fp { "fp" } else { "none" },
        cfg.depth,
        u8::from(cfg.free_stacks),
        cfg.unwind.name(),
        crate::record::tsc_hz()
    );
    if cfg.live.is_some() {
        s += "MTLAB_LIVE=1\n";
    }
    if let Some(sm) = &cfg.sample {
        s += &format!("MTLAB_SAMPLE={}\nMTLAB_INACTIVE={}\nMTLAB_SAMPLE_SEED={}\n", sm.interval, u8::from(sm.inactive), sm.seed);
    }
    s
}

fn exe_ranges(pid: i32, maps: &[Mapping]) -> Vec<(u64, u64)> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
    let exe = exe.trim_end_matches(" (deleted)");
    maps.iter().filter(|m| m.path == exe && m.perms.contains('x')).map(|m| (m.start, m.end)).collect()
}

/// A thread where calls into the loader and the allocator cannot wait on a
/// lock the thread itself holds: the main thread first.
fn safe_thread(t: &Tracee, exe: &[(u64, u64)], avoid: &[(u64, u64)]) -> Option<i32> {
    let inside = |r: &[(u64, u64)], a: u64| r.iter().any(|&(lo, hi)| a >= lo && a < hi);
    let mut order: Vec<i32> = t.threads.keys().copied().collect();
    order.sort_by_key(|&tid| tid != t.pid());
    order.into_iter().find(|tid| {
        let r = &t.threads[tid].regs;
        if inside(avoid, r.rip) {
            return false;
        }
        let in_syscall = (r.orig_rax as i64) >= 0;
        (in_syscall && SAFE_SYSCALLS.contains(&r.orig_rax)) || (!in_syscall && inside(exe, r.rip))
    })
}

fn stop_error(pid: i32, e: std::io::Error) -> AttachError {
    match e.raw_os_error() {
        Some(libc::EPERM) => AttachError::Refused(Refusal::Denied { pid, why: e.to_string() }),
        Some(libc::ESRCH) | Some(libc::ENOENT) => AttachError::Refused(Refusal::NoProcess(pid)),
        _ => failed(pid, format!("cannot stop it: {e}")),
    }
}

/// A thread that /proc shows blocked in one of SAFE_SYSCALLS (the main
/// thread first), read without stopping anything.
fn quiet_thread(pid: i32) -> Option<i32> {
    let mut tids = ptrace::task_ids(pid).ok()?;
    tids.sort_by_key(|&tid| tid != pid);
    tids.into_iter().find(|&tid| ptrace::blocked_in(pid, tid).is_some_and(|nr| SAFE_SYSCALLS.contains(&nr)))
}

/// Stops the process and returns it with one safe thread chosen, the others
/// running again. A thread /proc already shows blocked in a safe system call
/// is stopped alone (the others are never stopped: with busy threads, stopping
/// them all until one is chosen was a third of the stop at attach); else every
/// thread is stopped and one chosen from their registers. Retries for up to
/// ~2 s while every thread is busy elsewhere. The chosen thread has nice -20
/// while the returned Boost lives: given before the stop where the thread is
/// known, so that on a busy machine it gets a CPU at once to take the stop.
fn stop_for_call(pid: i32, avoid: &[(u64, u64)]) -> Result<(Tracee, i32, Instant, ptrace::Boost), AttachError> {
    for attempt in 0.. {
        let maps = target::maps(pid).map_err(|e| failed(pid, format!("cannot read its maps: {e}")))?;
        let exe = exe_ranges(pid, &maps);
        if let Some(tid) = quiet_thread(pid) {
            let boost = ptrace::Boost::new(tid);
            let stopped_at = Instant::now();
            match Tracee::stop_one(pid, tid) {
                // Still there after the stop (it may have woken meanwhile).
                Ok(t) if safe_thread(&t, &exe, avoid) == Some(tid) => return Ok((t, tid, stopped_at, boost)),
                Ok(_) | Err(_) if !running(pid) => return Err(Refusal::NoProcess(pid).into()),
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EPERM) => return Err(stop_error(pid, e)),
                Err(_) => {} // the thread ended meanwhile: stop them all below
            }
        }
        let stopped_at = Instant::now();
        let mut t = Tracee::stop_all(pid).map_err(|e| stop_error(pid, e))?;
        if t.threads.is_empty() {
            return Err(Refusal::NoProcess(pid).into());
        }
        if let Some(tid) = safe_thread(&t, &exe, avoid) {
            t.release_others(tid);
            return Ok((t, tid, stopped_at, ptrace::Boost::new(tid)));
        }
        drop(t);
        if attempt == 400 {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Err(failed(
        pid,
        "for 2 s no thread was in a place where the library can be loaded safely (blocked in a system call such as poll, read or a sleep, or running the program's own code); try again when it is less busy",
    ))
}

fn call(t: &mut Tracee, tid: i32, what: &str, func: u64, args: &[u64], data: &[u8]) -> Result<u64, AttachError> {
    t.call(tid, func, args, data, CALL_LIMIT).map_err(|e| {
        let pid = t.pid();
        match e {
            CallError::Timeout(_) => failed(pid, format!("{what} in the process did not return in {CALL_LIMIT:?}; the process was left stopped at that call")),
            e => failed(pid, format!("{what} in the process failed: {e}")),
        }
    })
}

fn c_string(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

/// Reads a NUL-terminated string of the process (dlerror's message).
fn read_c_string(t: &Tracee, addr: u64) -> String {
    let mut buf = vec![0u8; 512];
    if addr == 0 || t.read(addr, &mut buf).is_err() {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

struct Loaded {
    /// musl's dlclose unloads nothing (by design): the library stays, inert.
    unloadable: bool,
    handle: u64,
    lib_path: String,
    dlclose: u64,
    end: u64,
    /// `mtlab_attach_marks` in the process, if the library has it.
    marks: Option<u64>,
    /// `--live`: the descriptor of the watermark page the process made.
    page_fd: Option<i32>,
}

/// Where the stop at attach went: what makes it long under load.
#[derive(Debug, Clone, Default)]
pub struct AttachSteps {
    /// Threads stopped at once while one was chosen (1: one /proc showed
    /// blocked in a safe system call was stopped alone).
    pub threads: usize,
    /// From the first stop request until one thread was chosen and the others let go.
    pub all_stopped: Duration,
    /// The injected dlopen of the library, on the chosen thread.
    pub dlopen: Duration,
    /// mtlab_attach_begin (GOT scan and routing, trace file, control thread).
    pub begin: Duration,
    /// Every step while the chosen thread was stopped, as mtlab timed them.
    pub outside: Steps,
    /// The steps inside mtlab_attach_begin, as the library timed them.
    pub inside: Steps,
}

/// Where the stop at detach went.
#[derive(Debug, Clone, Default)]
pub struct DetachSteps {
    /// The end call's stop, step by step, as mtlab timed them.
    pub end: Steps,
    /// The steps inside mtlab_attach_end, as the library timed them.
    pub inside: Steps,
    /// The last unload attempt's stop (every thread), step by step.
    pub unload: Steps,
}

/// The library's step marks, read after a call (empty if unreadable).
fn read_marks(t: &Tracee, at: Option<u64>) -> Vec<u64> {
    at.and_then(|a| t.read_u64s(a, steps::MARKS).ok()).unwrap_or_default()
}

/// Where the library was loaded: glibc's dlopen handle is its `link_map`,
/// musl's its `struct dso`, and both begin with the load address (the
/// library's first segment is at 0). Checked by its ELF magic there; else
/// from the maps.
fn loaded_at(t: &Tracee, handle: u64, lib_path: &str) -> Option<u64> {
    let mut word = [0u8; 8];
    let mut magic = [0u8; 4];
    if t.read(handle, &mut word).is_ok() {
        let base = u64::from_ne_bytes(word);
        if base != 0 && base & 0xfff == 0 && t.read(base, &mut magic).is_ok() && magic == *b"\x7fELF" {
            return Some(base);
        }
    }
    let maps = target::maps(t.pid()).ok()?;
    target::object_range(&maps, &target::seen_here(t.pid(), lib_path)).map(|(base, _)| base)
}

/// Loads the library and starts tracing; returns how long the chosen thread was stopped, and where that went.
/// Everything that needs no stopped thread (the ELF files' symbols, the C
/// library's address, the settings with the TSC's rate, which takes 20 ms to
/// measure) is done before the stop.
fn load_and_begin(cfg: &AttachConfig, libc_path: &str, paths: &Paths) -> Result<(Loaded, Duration, AttachSteps), AttachError> {
    let pid = cfg.pid;
    let libc_file = std::fs::read(target::in_root(pid, &target::seen_there(pid, libc_path)))
        .map_err(|e| failed(pid, format!("cannot read its C library {libc_path}: {e}")))?;
    let offs = symbols::exported(&libc_file, &["dlopen", "dlclose", "dlerror"]).map_err(|e| failed(pid, e))?;
    let [Some(dlopen), Some(dlclose), Some(dlerror)] = offs[..] else {
        return Err(failed(pid, format!("its C library {libc_path} exports no dlopen (glibc before 2.34 is not supported)")));
    };
    let lib_file = std::fs::read(native::path(paths.part)?).map_err(|e| failed(pid, e.to_string()))?;
    let entry = symbols::exported(&lib_file, &["mtlab_attach_begin", "mtlab_attach_end", "mtlab_attach_marks", "mtlab_attach_watermark_fd"]).map_err(|e| failed(pid, e))?;
    let [Some(begin_off), Some(end_off), marks_off, page_fd_off] = entry[..] else { return Err(failed(pid, "mtlab's library lacks its entry points")) };
    let maps = target::maps(pid).map_err(|e| failed(pid, e.to_string()))?;
    let (libc_base, _) = target::object_range(&maps, libc_path).ok_or_else(|| failed(pid, "its C library is not in its maps"))?;
    let text = settings(cfg, &paths.out_in_target);

    let (mut t, tid, stopped_at, boost) = stop_for_call(pid, &[])?;
    let mut steps = AttachSteps { threads: t.stopped_count(), all_stopped: stopped_at.elapsed(), ..AttachSteps::default() };
    steps.outside.0.push(("choosing a thread", steps.all_stopped));
    let mut clock = Instant::now();
    let handle = call(&mut t, tid, "dlopen", libc_base + dlopen, &[DATA, RTLD_NOW], &c_string(&paths.lib_in_target))?;
    if handle == 0 {
        let msg = call(&mut t, tid, "dlerror", libc_base + dlerror, &[], &[]).map(|p| read_c_string(&t, p)).unwrap_or_default();
        return Err(failed(pid, format!("its dlopen of mtlab's library failed: {msg}")));
    }
    steps.outside.lap(&mut clock, "dlopen");
    let lib_base = loaded_at(&t, handle, &paths.lib_in_target)
        .ok_or_else(|| failed(pid, format!("{} is not in its maps after dlopen", paths.lib_in_target)))?;
    steps.outside.lap(&mut clock, "the library's address");
    steps.dlopen = steps.outside.get("dlopen") + steps.outside.get("the library's address");
    let r = call(&mut t, tid, "mtlab_attach_begin", lib_base + begin_off, &[DATA], &c_string(&text))?;
    let loaded = Loaded {
        unloadable: paths.part != Part::AttachMusl,
        handle,
        lib_path: paths.lib_in_target.clone(),
        dlclose: libc_base + dlclose,
        end: lib_base + end_off,
        marks: marks_off.map(|o| lib_base + o),
        page_fd: None,
    };
    let mut loaded = loaded;
    let taken = if r as i32 == 0 && paths.out_here != paths.out_final && target::other_user(pid) { take_over(&paths.out_here) } else { Ok(()) };
    if let Err(e) = taken {
        let _ = call(&mut t, tid, "mtlab_attach_end", loaded.end, &[], &[]);
        let _ = call(&mut t, tid, "dlclose", loaded.dlclose, &[handle], &[]);
        return Err(failed(pid, format!("cannot take over the trace it made, {}: {e}", paths.out_here.display())));
    }
    if r as i32 != 0 {
        let _ = call(&mut t, tid, "mtlab_attach_end", loaded.end, &[], &[]);
        let _ = call(&mut t, tid, "dlclose", loaded.dlclose, &[handle], &[]);
        return Err(failed(pid, format!("mtlab's library could not start tracing (it cannot create {}?)", paths.out_in_target)));
    }
    steps.outside.lap(&mut clock, "mtlab_attach_begin");
    steps.begin = steps.outside.get("mtlab_attach_begin");
    steps.inside = Steps::from_marks(&read_marks(&t, loaded.marks), false);
    if cfg.live.is_some() {
        let mut word = [0u8; 4];
        loaded.page_fd = page_fd_off.filter(|&o| t.read(lib_base + o, &mut word).is_ok()).map(|_| i32::from_ne_bytes(word)).filter(|&fd| fd >= 0);
    }
    clock = Instant::now(); // reading the marks is not part of the stop's work
    drop(boost);
    drop(t);
    steps.outside.lap(&mut clock, "letting it go");
    Ok((loaded, stopped_at.elapsed(), steps))
}

/// Ranges of the library's executable mappings.
fn lib_code(pid: i32, lib_path: &str) -> Vec<(u64, u64)> {
    let here = target::seen_here(pid, lib_path);
    target::maps(pid)
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.path == here && m.perms.contains('x'))
        .map(|m| (m.start, m.end))
        .collect()
}

/// What the stopped thread(s) of `t` hold of the library that they may still
/// use: nothing once none can return or jump into it after it is unloaded.
fn still_held(t: &Tracee, maps: &[Mapping], lib: &quiet::Library, cfi: &mut unwind::CfiFiles) -> Option<(i32, quiet::Held)> {
    t.regs().find_map(|(tid, r)| {
        let stack = maps.iter().find(|m| r.rsp >= m.start && r.rsp < m.end).map(|m| t.read_u64s(r.rsp, ((m.end - r.rsp) / 8) as usize));
        let stack = match stack {
            None => None,
            Some(Ok(words)) => Some(unwind::Stack { lo: r.rsp, words }),
            Some(Err(_)) => return Some((tid, quiet::Held::Unreadable { rsp: r.rsp })),
        };
        quiet::held(r, stack.as_ref(), lib, &mut |pc| cfi.rules(maps, pc)).map(|h| (tid, h))
    })
}

/// Ends tracing and unloads the library; returns the longest stop, where it went, and whether it was unloaded.
fn end_and_unload(pid: i32, loaded: &Loaded, warnings: &mut Vec<String>) -> Result<(Duration, DetachSteps, bool), AttachError> {
    let code = lib_code(pid, &loaded.lib_path);
    let mut steps = DetachSteps::default();
    let (mut t, tid, stopped_at, boost) = stop_for_call(pid, &code)?;
    steps.end.0.push(("choosing a thread", stopped_at.elapsed()));
    let mut clock = Instant::now();
    call(&mut t, tid, "mtlab_attach_end", loaded.end, &[], &[])?;
    steps.end.lap(&mut clock, "mtlab_attach_end");
    steps.inside = Steps::from_marks(&read_marks(&t, loaded.marks), true);
    clock = Instant::now();
    drop(boost);
    drop(t);
    steps.end.lap(&mut clock, "letting it go");
    let mut longest = stopped_at.elapsed();
    if !loaded.unloadable {
        warnings.push(format!(
            "mtlab's library stays loaded in process {pid}: musl never unloads a library (its dlclose does nothing); it does \
             nothing more, and the process cannot be attached to again until it restarts"
        ));
        return Ok((longest, steps, false));
    }
    let lib = quiet::Library::new(code.clone());
    let mut cfi = unwind::CfiFiles::new(pid);
    let mut last_held = None;
    for _ in 0..100 {
        let maps = target::maps(pid).map_err(|e| failed(pid, e.to_string()))?;
        let mut unload = Steps::default();
        let (held, slowest) = held_by_any(pid, &maps, &lib, &mut cfi)?;
        unload.0.push(("the longest stop of one thread for its check", slowest));
        longest = longest.max(slowest);
        if held.is_none() {
            let (mut t, tid, stopped_at, boost) = stop_for_call(pid, &code)?;
            let mut clock = Instant::now();
            unload.0.push(("choosing a thread", clock - stopped_at));
            let r = call(&mut t, tid, "dlclose", loaded.dlclose, &[loaded.handle], &[])?;
            unload.lap(&mut clock, "dlclose");
            drop(boost);
            drop(t);
            unload.lap(&mut clock, "letting it go");
            longest = longest.max(stopped_at.elapsed());
            steps.unload = unload;
            let gone = lib_code(pid, &loaded.lib_path).is_empty();
            if r != 0 || !gone {
                warnings.push(format!("mtlab's library stays loaded in process {pid} (dlclose returned {r}); it does nothing more"));
            }
            return Ok((longest, steps, gone));
        }
        steps.unload = unload;
        last_held = held;
        std::thread::sleep(Duration::from_millis(5));
    }
    let last = last_held.map(|(tid, held)| format!(" (last, thread {tid}: {held})")).unwrap_or_default();
    warnings.push(format!(
        "mtlab's library stays loaded in process {pid}: for 0.5 s some thread still held an address of it{last}; it does nothing more"
    ));
    Ok((longest, steps, false))
}

/// The unload check thread by thread, each stopped alone for its own check
/// (returns what the first thread found holding the library holds, and the
/// longest of those stops). Checking
/// them one after the other is as good as all at once: once the end call
/// has put every slot and stub word back, ended the control thread and put
/// the signal disposition back, nothing enters the library's code again,
/// so a thread found outside it stays outside.
fn held_by_any(pid: i32, maps: &[Mapping], lib: &quiet::Library, cfi: &mut unwind::CfiFiles) -> Result<(Option<(i32, quiet::Held)>, Duration), AttachError> {
    let mut slowest = Duration::ZERO;
    for tid in ptrace::task_ids(pid).map_err(|e| stop_error(pid, e))? {
        let started = Instant::now();
        let t = match Tracee::stop_one(pid, tid) {
            Ok(t) => t,
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => continue, // ended meanwhile
            Err(e) => return Err(failed(pid, format!("cannot stop it again: {e}"))),
        };
        let held = still_held(&t, maps, lib, cfi);
        drop(t);
        slowest = slowest.max(started.elapsed());
        if held.is_some() {
            return Ok((held, slowest));
        }
    }
    Ok((None, slowest))
}

/// Attaches, traces until the duration ends, Ctrl-C or SIGTERM, or the
/// process's exit, detaches, and finishes the trace.
pub fn record_attached(cfg: &AttachConfig) -> Result<AttachOutcome, AttachError> {
    let pid = cfg.pid;
    let (_exe, _maps, libc_path, part) = checks(cfg)?;
    let output = std::path::absolute(&cfg.output).map_err(|e| failed(pid, e.to_string()))?;
    crate::record::prepare_attach_output(&output)?;
    let paths = place(cfg, &output, part)?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).map_err(|e| failed(pid, format!("cannot catch signals: {e}")))?;
    }
    let begun = load_and_begin(cfg, &libc_path, &paths);
    let (loaded, stopped_at_attach, attach_steps) = match begun {
        Ok(x) => x,
        Err(e) => {
            cleanup(&paths);
            return Err(e);
        }
    };
    let started = Instant::now();
    let start_ns = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let live = match cfg.live.as_ref().map(|l| start_live(pid, &loaded, &paths, l)) {
        None => None,
        Some(Ok(live)) => Some(live),
        Some(Err(e)) => {
            let _ = end_and_unload(pid, &loaded, &mut Vec::new());
            let _ = std::fs::remove_file(&paths.out_here);
            cleanup(&paths);
            return Err(e);
        }
    };
    let pusher = cfg.sample.as_ref().and_then(|s| s.push.clone()).map(|push| start_pusher(push, pid, &paths.out_here));
    say!(
        "mtlab: attached to process {pid} ({}); tracing until {}",
        match (&cfg.sample, &cfg.live) {
            (Some(_), _) => "sampling".to_string(),
            (None, Some(l)) => format!("full trace analysed live into {}", l.profile.display()),
            (None, None) => "full trace".to_string(),
        },
        match (cfg.duration, cfg.live.is_some()) {
            (Some(d), false) => format!("{:.1} s have passed, Ctrl-C or the process's exit", d.as_secs_f64()),
            (Some(d), true) => format!("{:.1} s have passed, Ctrl-C, `mtlab ctl {pid} stop` or the process's exit", d.as_secs_f64()),
            (None, false) => "Ctrl-C or the process's exit".into(),
            (None, true) => format!("Ctrl-C, `mtlab ctl {pid} stop` or the process's exit"),
        }
    );
    let mut ended = Ended::Detached;
    loop {
        if !running(pid) {
            ended = Ended::Exited;
            break;
        }
        // `mtlab ctl PID stop`: through the live analysis's status page.
        let ctl_stop = live.is_some() && crate::live::status::detach_wanted(pid as u32);
        if ctl_stop || stop.load(Ordering::Relaxed) || cfg.duration.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut warnings = Vec::new();
    let mut stopped_at_detach = None;
    let mut detach_steps = DetachSteps::default();
    let mut unloaded = false;
    if ended == Ended::Detached {
        match end_and_unload(pid, &loaded, &mut warnings) {
            Ok((d, st, u)) => {
                stopped_at_detach = Some(d);
                detach_steps = st;
                unloaded = u;
            }
            Err(_) if !running(pid) => ended = Ended::Exited,
            Err(e) => {
                cleanup(&paths);
                return Err(e);
            }
        }
    }
    let traced_for = started.elapsed();
    // The last window: read from the trace as the detach (or the exit) left it.
    let pushed = pusher.map(|(url, p)| (url, p.finish()));
    let runinfo = runinfo(pid, ended, start_ns, traced_for);
    let (trace, live) = match live {
        None => (finish(&paths, &runinfo, &mut warnings), None),
        Some(l) => {
            let keep_raw = cfg.live.as_ref().is_some_and(|c| c.keep_raw);
            let summary = l.finish(runinfo.clone());
            // Analysed into the profile (its blocks released as it went):
            // what is left of the raw trace is its header and the holes.
            let trace = match keep_raw {
                true => finish(&paths, &runinfo, &mut warnings),
                false => {
                    let _ = std::fs::remove_file(&paths.out_here);
                    None
                }
            };
            match summary {
                Ok(s) => (trace, Some(s)),
                Err(e) => {
                    cleanup(&paths);
                    return Err(e.into());
                }
            }
        }
    };
    cleanup(&paths);
    Ok(AttachOutcome { trace, ended, traced_for, stopped_at_attach, attach_steps, stopped_at_detach, detach_steps, unloaded, pushed, live, warnings })
}

/// `--live`: the watermark page the process made, opened through
/// /proc/PID/fd (mtlab is its tracer, so it may, in whatever namespace the
/// process runs), and the live consumer of its trace started on it.
fn start_live(pid: i32, loaded: &Loaded, paths: &Paths, cfg: &crate::live::LiveConfig) -> Result<crate::live::Live, AttachError> {
    use crate::trace::format::{WATERMARK_MAGIC, WATERMARK_OFF_MAGIC, WATERMARK_SIZE};
    let no_page = |why: String| failed(pid, format!("--live needs the watermark page the process makes for it, and {why}; record without --live (--full) instead"));
    let fd = loaded.page_fd.ok_or_else(|| no_page("it made none (its system gave it no memfd)".into()))?;
    let at = format!("/proc/{pid}/fd/{fd}");
    let file = std::fs::OpenOptions::new().read(true).write(true).open(&at).map_err(|e| no_page(format!("{at} cannot be opened: {e}")))?;
    let page = crate::platform::shared_page::SharedPage::map(&file, WATERMARK_SIZE as usize).map_err(|e| no_page(format!("{at} cannot be mapped: {e}")))?;
    if page.u64_at(WATERMARK_OFF_MAGIC).load(Ordering::Acquire) != WATERMARK_MAGIC {
        return Err(no_page(format!("{at} is not that page")));
    }
    crate::live::Live::attached(paths.out_here.clone(), cfg.clone(), page, pid as u32)
        .ok_or_else(|| failed(pid, "cannot start the live analysis's thread"))
}

/// The trace's RUNINFO: when tracing started and how it ended.
fn runinfo(pid: i32, ended: Ended, start_ns: u128, traced_for: Duration) -> Vec<(String, String)> {
    vec![
        (keys::WALL_NS.to_string(), traced_for.as_nanos().to_string()),
        (keys::ATTACHED_PID.to_string(), pid.to_string()),
        (keys::ATTACHED_AT_NS.to_string(), start_ns.to_string()),
        (keys::ATTACH_ENDED_BY.to_string(), ended.name().to_string()),
    ]
}

/// The pushing thread of an attached, sampled process: its source reads the
/// process through its control page while attached, and the trace as left
/// once detached.
fn start_pusher(push: crate::otlp::periodic::Config, pid: i32, trace: &Path) -> (String, crate::otlp::periodic::Pusher) {
    use crate::otlp::periodic::{Pusher, Snapshot};
    let trace = trace.to_path_buf();
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).map(|p| p.to_string_lossy().trim_end_matches(" (deleted)").to_string()).unwrap_or_default();
    let args: Vec<String> = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| b.split(|&c| c == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect())
        .unwrap_or_default();
    let url = push.target.url.clone();
    let source = Box::new(move |ended: bool| {
        let (profile, allocator) = crate::ctl::profile_so_far(pid as u32, &trace, ended, Duration::from_secs(5)).map_err(|e| e.to_string())?;
        let process = crate::otlp::ProcessInfo { pid: pid as u32, exe: exe.clone(), args: args.clone() };
        Ok(Snapshot { profile, process, allocator: Some(allocator).filter(|a| !a.is_empty()) })
    });
    (url, Pusher::start(push, source))
}

fn finish(paths: &Paths, runinfo: &[(String, String)], warnings: &mut Vec<String>) -> Option<PathBuf> {
    let here = &paths.out_here;
    if std::fs::symlink_metadata(here).is_err() {
        warnings.push(format!("the process wrote no trace to {}", paths.out_in_target));
        return None;
    }
    if let Err(e) = crate::trace::finish_trace(here, runinfo) {
        warnings.push(format!("{}: not finished (left as written): {e}", here.display()));
    }
    warnings.extend(crate::record::dropped_warning(here));
    if *here == paths.out_final {
        return Some(here.clone());
    }
    // Written in the process's root (a container's /tmp): brought out.
    match std::fs::copy(here, &paths.out_final) {
        Ok(_) => {
            let _ = std::fs::remove_file(here);
            Some(paths.out_final.clone())
        }
        Err(e) => {
            warnings.push(format!("cannot copy {} to {}: {e}; the trace stays there", here.display(), paths.out_final.display()));
            Some(here.clone())
        }
    }
}

/// The trace in the process's /tmp made mtlab's own: a process of another
/// user created it, and reading and finishing it open only this user's
/// files. The process writes on through the descriptor it holds.
fn take_over(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let f = match std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC).open(path) {
        // Not made yet (the musl build opens it at its first write): left as it comes.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        r => r?,
    };
    let m = f.metadata()?;
    if !m.file_type().is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    // SAFETY: geteuid and getegid cannot fail.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    if m.uid() == uid {
        return Ok(());
    }
    std::os::unix::fs::fchown(&f, Some(uid), Some(gid))
}

fn cleanup(paths: &Paths) {
    for c in &paths.copies {
        let _ = std::fs::remove_file(c);
    }
}
