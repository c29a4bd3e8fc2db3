//! `mtlab record`: run a program with the preload library and collect its
//! trace(s). The program's stdio, exit code and signals pass through
//! unchanged; everything mtlab says goes to stderr.

use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use crate::native::{self, Part};
use crate::platform::names;
use crate::platform::process::{find_in_path, holds_open};
use crate::trace::{self, keys, TraceError};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Stacks {
    /// A call stack for each call, captured as --unwind says (`fp`, this value's old name, still works).
    #[value(name = "on", alias = "fp")]
    Fp,
    /// Record no stacks.
    None,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Unwind {
    /// mtlab's own DWARF unwinder: whole stacks from .eh_frame, rules cached per return address.
    Dwarf,
    /// Frame pointers: fastest; stops early in code built without them.
    Fp,
    /// libgcc's DWARF unwinder (_Unwind_Backtrace).
    Libgcc,
    /// libunwind's DWARF unwinder (unw_backtrace), when libunwind is installed.
    Libunwind,
}

impl Unwind {
    pub fn name(self) -> &'static str {
        match self {
            Unwind::Dwarf => "dwarf",
            Unwind::Fp => "fp",
            Unwind::Libgcc => "libgcc",
            Unwind::Libunwind => "libunwind",
        }
    }
}

/// `record --time`'s default: one call in 32 timed. Timing is the TSC read
/// at the call's start (the stamp is the other read); a sample of 1/32 still
/// times hundreds of thousands of calls of a program that allocates millions.
pub const DEFAULT_TIME_SAMPLE: u64 = 32;

/// Sampling-profiler settings (`record --sample`).
#[derive(Debug, Clone)]
pub struct SampleConfig {
    /// Mean bytes between samples.
    pub interval: u64,
    /// Start with sampling switched off (`mtlab ctl PID start` turns it on).
    pub inactive: bool,
    /// Fixed seed for the sampler's random draws (0: from the clock).
    pub seed: u64,
    /// `--push-every`: the window profiles pushed over OTLP while it runs.
    pub push: Option<crate::otlp::periodic::Config>,
}

#[derive(Debug, Clone)]
pub struct RecordConfig {
    pub output: PathBuf,
    pub stacks: Stacks,
    pub unwind: Unwind,
    pub sample: Option<SampleConfig>,
    pub depth: u32,
    pub follow: bool,
    pub free_stacks: bool,
    /// Full trace: one call in `time_sample` timed on average (1: every call).
    pub time_sample: u64,
    pub baseline: bool,
    /// Compact the traces after the run, with this quantum (`trace::compact`);
    /// the flag: lean, with made-up heap addresses (`trace::lean`).
    pub compact: Option<(u64, bool)>,
    /// `--live --push-every`: the window profiles the live analysis
    /// publishes (`LiveConfig::publish`), pushed over OTLP while it runs.
    pub live_push: Option<crate::otlp::periodic::Config>,
    /// `--live`: the root trace analysed while the program runs, into a
    /// profile file (`output` is then the raw trace's path).
    pub live: Option<crate::live::LiveConfig>,
    /// Keep the last DURATION of the root's events and write them on triggers (`--keep-last`).
    pub flight: Option<crate::flight::FlightConfig>,
    pub program: OsString,
    pub args: Vec<OsString>,
}

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("cannot find program `{0}`: not a file and not found in PATH")]
    ProgramNotFound(String),
    #[error("`{0}` is not executable (check its permissions)")]
    NotExecutable(String),
    #[error("cannot write the trace to {path}: {source} (choose another place with -o)")]
    Unwritable { path: PathBuf, source: std::io::Error },
    #[error("{0}")]
    Output(String),
    #[error("cannot start `{program}`: {source}")]
    Spawn { program: String, source: std::io::Error },
    #[error("libunwind is not installed (libunwind.so.8 not found): install it (apt-get install libunwind8) or use --unwind dwarf (the default)")]
    NoLibunwind,
    #[error(
        "{program} is linked against musl (its loader is {interp}) and this mtlab was built without musl-gcc, so it \
         carries no library for musl: rebuild mtlab with musl-gcc installed (Debian: apt-get install musl-tools; or \
         MTLAB_MUSL_CC=PATH-OF-A-MUSL-GCC-WRAPPER cargo build --release)"
    )]
    NoMuslBuild { program: String, interp: String },
    #[error(transparent)]
    Unpack(#[from] native::UnpackError),
    #[error(transparent)]
    Trace(#[from] TraceError),
}

/// Whether `interp` (a program's PT_INTERP) is musl's dynamic loader.
fn is_musl_loader(interp: &str) -> bool {
    Path::new(interp).file_name().is_some_and(|n| n.to_string_lossy().starts_with("ld-musl-"))
}

/// Whether the program at `path` is linked against musl: its loader is musl's.
pub fn musl_linked(path: &Path) -> bool {
    crate::symbolize::elf_interpreter(path).is_some_and(|i| is_musl_loader(&i))
}

/// What happened, for the summary and the exit code.
#[derive(Debug)]
pub struct RecordOutcome {
    pub status: ExitStatus,
    /// The program that ran (resolved through PATH).
    pub program: PathBuf,
    pub traces: Vec<PathBuf>,
    pub wall: Duration,
    pub baseline_wall: Option<Duration>,
    pub bytes: u64,
    /// Traces that could not be finished, or damage found while finishing.
    pub warnings: Vec<String>,
    /// Why the root trace is missing although the library created it (it
    /// could not write even the header: a full disk); the empty file was removed.
    pub root_unwritten: Option<String>,
    /// What `--live` came to.
    pub live: Option<crate::live::LiveSummary>,
    /// The flight recorder's windows and what it had to say.
    pub flight: crate::flight::Outcome,
    /// `--push-every`: where the window profiles went, and how many.
    pub pushed: Option<(String, crate::otlp::periodic::PushStats)>,
    /// Where the time went (`record -v`), with the wall time from the
    /// program's end to the traces' being finished; None when the root
    /// trace was not finished here.
    pub stages: Option<(Stages, Duration)>,
}

/// `record -v`'s line: seconds of wall time for the program and for
/// everything after it, then the parts of the latter (the finish's stages
/// are thread time summed over its workers, so they can add up to more than
/// its wall time).
pub fn stages_line(st: &Stages, after: Duration) -> String {
    format!(
        "stages: program {:.3} s, after it {:.3} s: rewrite thread stop {:.3} s, finish {:.3} s (thread time: join {:.3} s, \
         columns {:.3} s, compression {:.3} s)",
        st.program.as_secs_f64(),
        after.as_secs_f64(),
        st.live_stop.as_secs_f64(),
        st.finish.wall.as_secs_f64(),
        st.finish.join.as_secs_f64(),
        st.finish.rewrite.as_secs_f64(),
        st.finish.compression.as_secs_f64()
    )
}

/// `record`'s stages for the root trace: the program, waiting for the
/// rewrite thread to stop at its end, and the rest of the rewrite.
#[derive(Debug, Clone, Copy)]
pub struct Stages {
    pub program: Duration,
    pub live_stop: Duration,
    pub finish: trace::FinishStages,
}

/// The ELF class and machine mtlab's preload library is built for (this
/// binary's own).
fn library_class_machine() -> (u8, object::elf::Machine) {
    let class = if cfg!(target_pointer_width = "64") { 64 } else { 32 };
    let machine = if cfg!(target_arch = "x86_64") {
        object::elf::EM_X86_64
    } else if cfg!(target_arch = "aarch64") {
        object::elf::EM_AARCH64
    } else if cfg!(target_arch = "x86") {
        object::elf::EM_386
    } else {
        object::elf::EM_NONE
    };
    (class, machine)
}

/// An ELF class and machine, for people: "32-bit x86 (i386)".
fn elf_kind(class: u8, machine: object::elf::Machine) -> String {
    let arch = match machine {
        object::elf::EM_386 => "x86 (i386)".to_string(),
        object::elf::EM_X86_64 if class == 32 => "x32".to_string(),
        object::elf::EM_X86_64 => "x86-64".to_string(),
        object::elf::EM_AARCH64 => "AArch64".to_string(),
        object::elf::EM_ARM => "ARM".to_string(),
        object::elf::EM_RISCV => "RISC-V".to_string(),
        m => format!("ELF machine {}", m.0),
    };
    format!("{class}-bit {arch}")
}

/// Why the preload library cannot be loaded into `program` at all: it is an
/// ELF file of another class or machine (a 32-bit program on x86-64). The
/// loader would refuse mtlab's library ("wrong ELF class") and print so on
/// the program's stderr; such a program is run without it.
pub fn foreign_program(program: &Path) -> Option<String> {
    foreign_kind(crate::symbolize::elf_class_machine(program)?, library_class_machine())
}

fn foreign_kind(program: (u8, object::elf::Machine), library: (u8, object::elf::Machine)) -> Option<String> {
    (program != library).then(|| {
        format!(
            "it is a {} program and mtlab's library is built for {}: the loader cannot load one into the other",
            elf_kind(program.0, program.1),
            elf_kind(library.0, library.1)
        )
    })
}

/// Why a program that ended by itself left no trace at all (mtlab's
/// library writes one at exit whenever it was loaded and exit ran).
pub fn why_no_trace(program: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    if let Some(why) = foreign_program(program) {
        return format!(
            "{} cannot be traced: {why}, so it ran untraced (as did any program it started)",
            program.display()
        );
    }
    if crate::symbolize::elf_has_interpreter(program) == Some(false) {
        return format!(
            "{} is statically linked: no dynamic loader runs, so mtlab's library is never loaded and its calls cannot be traced",
            program.display()
        );
    }
    if let Ok(m) = std::fs::metadata(program) {
        // SAFETY: geteuid and getegid have no preconditions.
        let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let setuid = m.mode() & 0o4000 != 0 && m.uid() != euid;
        let setgid = m.mode() & 0o2000 != 0 && m.gid() != egid;
        if setuid || setgid {
            return format!(
                "{} is set-{}-ID: the loader runs it in secure mode, which does not preload mtlab's library from its cache directory",
                program.display(),
                if setuid { "user" } else { "group" }
            );
        }
    }
    "mtlab's library did not write the file: it opens it as the program starts, so either the library was not loaded \
     (the program, or a wrapper it runs, cleared LD_PRELOAD before the traced image started) or the file could not be \
     created in the output directory by the program's user"
        .to_string()
}

impl RecordOutcome {
    /// The exit code mtlab itself should end with: the program's own.
    pub fn exit_code(&self) -> i32 {
        self.status.code().unwrap_or_else(|| 128 + self.status.signal().unwrap_or(0))
    }
}

/// Is the process that writes `t` (named ROOT.d/PID[.N], see `names::trace_family`) still alive and writing it?
fn still_running(root: &Path, t: &Path) -> bool {
    child_pid(root, t).is_some_and(|pid| holds_open(pid, t))
}

/// The pid that the child trace `t` of `root` is named after.
fn child_pid(root: &Path, t: &Path) -> Option<u32> {
    names::child_trace_suffix(root, t).and_then(|s| names::parse_child_suffix(&s)).and_then(|(pid, _)| u32::try_from(pid).ok())
}

/// The RUNINFO list of the child traces of `root` (`trace::family`).
fn child_traces(root: &Path, traces: &[PathBuf]) -> String {
    let entries: Vec<(String, String)> = traces
        .iter()
        .filter_map(|t| {
            let suffix = names::child_trace_suffix(root, t)?;
            // A file whose header cannot be read is still listed: it was there.
            let command = trace::read_header(t).map(|h| trace::family::command_name(&h.cmdline, &h.exe)).unwrap_or_default();
            Some((suffix, command))
        })
        .collect();
    trace::family::encode(&entries)
}

/// Finds PROGRAM as the shell would: a path if it has a slash, else in PATH.
pub fn resolve_program(program: &OsString) -> Result<PathBuf, RecordError> {
    let shown = program.to_string_lossy().to_string();
    let found = if shown.contains('/') {
        Some(PathBuf::from(program)).filter(|c| c.is_file())
    } else {
        find_in_path(program)
    };
    let found = found.ok_or_else(|| RecordError::ProgramNotFound(shown.clone()))?;
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&found).map(|m| m.permissions().mode()).unwrap_or(0);
    if mode & 0o111 == 0 {
        return Err(RecordError::NotExecutable(shown));
    }
    Ok(found)
}

/// Temporary files (`.NAME.WHAT-PID`, see trace::rewrite::temp_beside) that
/// an mtlab process killed before it could rename or remove them left beside
/// the traces of `root` (the root's, and its children's in `ROOT.d`): those
/// whose writer is no longer alive.
fn abandoned_temps(root: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (root.parent(), root.file_name()) else { return Vec::new() };
    let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
    let mut found = temps_in(dir, &format!(".{}.", name.to_string_lossy()));
    let tree = names::tree_dir(root);
    if std::fs::symlink_metadata(&tree).is_ok_and(|m| m.is_dir()) {
        found.extend(temps_in(&tree, "."));
    }
    found
}

/// This user's files in `dir` named `PREFIX…-PID` whose writer `PID` is gone.
fn temps_in(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let file = e.file_name().to_string_lossy().to_string();
            if !file.starts_with(prefix) {
                return false;
            }
            let writer = file.rsplit_once('-').and_then(|(_, pid)| pid.parse::<u32>().ok());
            // Only our own: another user's file of this shape is theirs to keep.
            writer.is_some_and(|pid| !crate::platform::process::pid_alive(pid)) && not_ours(&e.path(), None).is_none()
        })
        .map(|e| e.path())
        .collect()
}

/// The output's directory, held open while the program runs: the program
/// may rename or remove it, and then its trace went with it. Without this,
/// record found no file at the path and blamed a cleared LD_PRELOAD.
struct HeldDir {
    dir: PathBuf,
    file: std::fs::File,
    dev_ino: (u64, u64),
}

impl HeldDir {
    fn open(output: &Path) -> Option<HeldDir> {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let dir = output.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(&dir)
            .ok()?;
        let m = file.metadata().ok()?;
        Some(HeldDir { dir, file, dev_ino: (m.dev(), m.ino()) })
    }

    /// Why no trace is at `output` when its directory was renamed or removed
    /// since the program started; None when it is still where it was.
    fn moved(&self, output: &Path) -> Option<String> {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::MetadataExt;
        let same = std::fs::metadata(&self.dir).is_ok_and(|m| (m.dev(), m.ino()) == self.dev_ino);
        if same {
            return None;
        }
        let shown = self.dir.display();
        let now = std::fs::read_link(format!("/proc/self/fd/{}", self.file.as_raw_fd())).ok()?;
        let now_s = now.to_string_lossy();
        if now_s.ends_with(" (deleted)") {
            return Some(format!(
                "its directory {shown} was removed while the program ran, and the trace with it"
            ));
        }
        let name = output.file_name().map(|n| now.join(n)).unwrap_or_else(|| now.clone());
        let moved_trace = name.exists().then(|| {
            format!(
                "; what was written is in {} (not finished: read it as written with `mtlab report {}`)",
                name.display(),
                crate::platform::process::shell_word(&name)
            )
        });
        Some(format!(
            "its directory {shown} was renamed to {} while the program ran{}",
            now.display(),
            moved_trace.unwrap_or_default()
        ))
    }
}

/// When a run's traces began, by the file system's own clock: the change
/// time of a file created then, so every file the run creates later has one
/// no earlier (the system clock can be a tick ahead of the file system's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct RunStart(i64, i64);

/// Why the entry at `p` is not a file of this user's run, if it is not: it
/// must be a regular file (no link followed), owned by this user, with no
/// other name (a hard link to a private file is owned by its owner), and —
/// given `since` — changed no earlier than the run's start.
fn not_ours(p: &Path, since: Option<RunStart>) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let m = match std::fs::symlink_metadata(p) {
        Ok(m) => m,
        Err(e) => return Some(format!("cannot look at it: {e}")),
    };
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if !m.file_type().is_file() {
        return Some("not a regular file (a link, FIFO or directory)".into());
    }
    if m.uid() != me {
        return Some(format!("it belongs to user {}, not to this user ({me})", m.uid()));
    }
    if m.nlink() != 1 {
        return Some(format!("it has {} names (a hard link)", m.nlink()));
    }
    if since.is_some_and(|s| RunStart(m.ctime(), m.ctime_nsec()) < s) {
        return Some("it was there before this run started".into());
    }
    None
}

/// Clears what an earlier run left at `path` and checks that a file can be
/// created there; returns when this run started. Names are never created
/// or truncated here: the library creates the trace itself (`O_EXCL`), and
/// whatever is left at a name another user can foresee is only removed when
/// it is this user's own regular file.
fn prepare_output(path: &Path) -> Result<RunStart, RecordError> {
    use std::os::unix::fs::MetadataExt;
    if let Some(why) = std::fs::symlink_metadata(path).ok().and_then(|_| not_ours(path, None)) {
        return Err(RecordError::Output(format!(
            "{} is already there and is not this user's trace to replace: {why}; remove it or choose another name with -o",
            path.display()
        )));
    }
    // Also what a killed earlier run left: its traces (the next run writes
    // the same names) and its half-written temporary files.
    for old in names::trace_family(path).into_iter().chain(abandoned_temps(path)) {
        if not_ours(&old, None).is_none() {
            let _ = std::fs::remove_file(old);
        }
    }
    let unwritable = |source| RecordError::Unwritable { path: path.to_path_buf(), source };
    let probe = crate::platform::names::temp_beside(path, "probe", std::process::id());
    if not_ours(&probe, None).is_none() {
        let _ = std::fs::remove_file(&probe);
    }
    let made = crate::platform::safe_fs::create_new(&probe, 0o600).map_err(unwritable)?;
    let m = made.metadata();
    let _ = std::fs::remove_file(&probe);
    let m = m.map_err(unwritable)?;
    Ok(RunStart(m.ctime(), m.ctime_nsec()))
}

/// The warning for a finished trace whose writer dropped events (its END
/// record's count), with the cause where the writer knows it (STATS): else
/// `record` would say "wrote" of a trace that misses most of the run when
/// the disk filled up.
pub(crate) fn dropped_warning(t: &Path) -> Option<String> {
    let tf = trace::TraceFile::open_without_maps(t).ok()?;
    let end = tf.end?;
    if end.events_dropped == 0 {
        return None;
    }
    let loss = trace::WriteLoss::from_stats(&tf.stats);
    Some(format!("{}: {}", t.display(), loss.dropped_text(end.events_dropped, end.events_written + end.events_dropped)))
}

/// Makes `ROOT.d`, where the traced program's descendants write their
/// traces (`names::tree_dir`), or takes the one an earlier run of this user
/// left; it is removed again when dropped if it stays empty (whichever way
/// the run ends: a program that could not start leaves nothing). A directory another user could write into is refused: what is
/// planted there is read back as this run's. Private (0700): a child that
/// changed its user asks `record` for its file (`broker.rs`).
fn prepare_tree_dir(root: &Path) -> Result<TreeDir, RecordError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let dir = names::tree_dir(root);
    let made = std::fs::DirBuilder::new().mode(0o700).create(&dir);
    if let Err(e) = made {
        if e.kind() != std::io::ErrorKind::AlreadyExists {
            return Err(RecordError::Unwritable { path: dir, source: e });
        }
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        let why = match std::fs::symlink_metadata(&dir) {
            Err(e) => Some(format!("cannot look at it: {e}")),
            Ok(m) if !m.file_type().is_dir() => Some("not a directory (a link or a file)".into()),
            Ok(m) if m.uid() != me => Some(format!("it belongs to user {}, not to this user ({me})", m.uid())),
            Ok(m) if m.mode() & 0o022 != 0 => Some(format!("others can write into it (mode {:o})", m.mode() & 0o777)),
            Ok(_) => None,
        };
        if let Some(why) = why {
            return Err(RecordError::Output(format!(
                "{} is already there and is not this user's directory of child traces: {why}; remove it or choose another name with -o",
                dir.display()
            )));
        }
    }
    Ok(TreeDir(dir))
}

/// `ROOT.d` while a run uses it; removed on drop when no descendant wrote a
/// trace into it, so a program that starts none leaves only its one trace.
struct TreeDir(PathBuf);

impl Drop for TreeDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// `prepare_output` for `record --pid` (attach/), which needs no run start.
pub(crate) fn prepare_attach_output(path: &Path) -> Result<(), RecordError> {
    crate::trace::rewrite::check_trace_output(path).map_err(RecordError::Output)?;
    prepare_output(path).map(|_| ())
}

/// The trace files of this run (`names::trace_family`), and a warning for each file
/// of that shape that is not one: another user's (planted there, or written
/// by a traced program that changed its user), a link, or older than the run.
fn run_family(root: &Path, start: RunStart) -> (Vec<PathBuf>, Vec<String>) {
    let mut warnings = Vec::new();
    let mut found = names::family_of(root, false);
    // A link at the root's name to nothing is no less planted.
    if std::fs::symlink_metadata(root).is_ok() && found.first().map(PathBuf::as_path) != Some(root) {
        found.insert(0, root.to_path_buf());
    }
    found.retain(|t| match not_ours(t, Some(start)) {
        None => true,
        Some(why) => {
            warnings.push(format!("{}: not taken as a trace of this run (not finished, listed or reported): {why}", t.display()));
            false
        }
    });
    (found, warnings)
}

/// TSC ticks per second, measured against the monotonic clock.
pub fn tsc_hz() -> u64 {
    let start = Instant::now();
    let t0 = crate::platform::tsc::now();
    std::thread::sleep(Duration::from_millis(20));
    let t1 = crate::platform::tsc::now();
    let ns = start.elapsed().as_nanos() as f64;
    ((t1.wrapping_sub(t0)) as f64 * 1e9 / ns) as u64
}

/// Runs `cmd` to its end; `on_start` is given its pid once it runs, and
/// `after_exit` runs once it has exited, before the terminal's signals are
/// mtlab's own again (it may `SignalGuard::finish_on_signal`).
fn run(
    mut cmd: Command,
    program: &str,
    on_start: impl FnOnce(u32),
    after_exit: impl FnOnce(&SignalGuard),
) -> Result<(ExitStatus, Duration), RecordError> {
    let start = Instant::now();
    let mut child = cmd.spawn().map_err(|source| RecordError::Spawn { program: program.to_string(), source })?;
    on_start(child.id());
    let guard = SignalGuard::new(child.id());
    let status = child.wait().map_err(|source| RecordError::Spawn { program: program.to_string(), source })?;
    let wall = start.elapsed();
    after_exit(&guard);
    Ok((status, wall))
}

/// A child that waits, between fork and exec, until `say(pid)` has run here.
struct Announced {
    /// This process's ends of the child's pipes, closed once spawn() returned,
    /// so the helper thread sees end-of-file if the child never wrote its pid.
    child_ends: Option<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)>,
    helper: std::thread::JoinHandle<()>,
}

impl Announced {
    fn finish(mut self) {
        self.child_ends = None;
        let _ = self.helper.join();
    }
}

/// Makes the child `cmd` spawns write its pid to a pipe and wait, before it
/// execs the program, for a byte on another; a helper thread reads the pid,
/// runs `say(pid)` and sends the byte. So whatever `say` writes comes before
/// anything of the program's. spawn() itself waits for the exec, so the
/// helper must be a thread of its own.
fn announce_before_exec(cmd: &mut Command, say: impl FnOnce(u32) + Send + 'static) -> Result<Announced, RecordError> {
    use std::io::{Read, Write};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let pipe = || -> Result<(OwnedFd, OwnedFd), RecordError> {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills two descriptors, owned by the OwnedFds from here on.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(RecordError::Spawn { program: "mtlab".into(), source: std::io::Error::last_os_error() });
        }
        // SAFETY: both descriptors were just opened and belong to nobody else.
        Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
    };
    let (pid_r, pid_w) = pipe()?;
    let (go_r, go_w) = pipe()?;
    let (pid_w_fd, go_r_fd) = (pid_w.as_raw_fd(), go_r.as_raw_fd());
    // SAFETY: between fork and exec the closure makes only async-signal-safe
    // calls (getpid, write, read) on descriptors that stay open until exec
    // closes them (O_CLOEXEC); it allocates nothing.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || {
            let pid = libc::getpid().to_ne_bytes();
            libc::write(pid_w_fd, pid.as_ptr().cast(), pid.len());
            let mut b = 0u8;
            // Any answer or end-of-file (mtlab's helper gone) lets it go on.
            while libc::read(go_r_fd, (&mut b as *mut u8).cast(), 1) < 0 && *libc::__errno_location() == libc::EINTR {}
            Ok(())
        });
    }
    let helper = std::thread::spawn(move || {
        let mut pid = [0u8; 4];
        if std::fs::File::from(pid_r).read_exact(&mut pid).is_ok() {
            say(i32::from_ne_bytes(pid) as u32);
        }
        let _ = std::fs::File::from(go_w).write_all(b"g");
    });
    Ok(Announced { child_ends: Some((pid_w, go_r)), helper })
}

/// The program being waited for, for the forwarding handler.
static CHILD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn forward(sig: libc::c_int) {
    let pid = CHILD.load(std::sync::atomic::Ordering::Relaxed);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(pid, sig) };
    }
}

/// While the program runs: like time(1), a ^C or ^\ from the terminal reaches
/// the program (same process group) and mtlab stays to finish the trace;
/// TERM and HUP sent to mtlab are passed on to the program, which would
/// otherwise be left running alone.
struct SignalGuard {
    old: [libc::sighandler_t; 4],
}

/// A signal came while `record --live` waited for the processes that
/// outlived the program (`SignalGuard::finish_on_signal`).
static FINISH_ASKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn finish_now(sig: libc::c_int) {
    if FINISH_ASKED.swap(true, std::sync::atomic::Ordering::SeqCst) {
        // A second one: the user wants mtlab gone now.
        // SAFETY: signal and raise are async-signal-safe.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
    }
}

const GUARDED: [libc::c_int; 4] = [libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGHUP];

impl SignalGuard {
    fn new(child: u32) -> Self {
        CHILD.store(child as i32, std::sync::atomic::Ordering::Relaxed);
        FINISH_ASKED.store(false, std::sync::atomic::Ordering::SeqCst);
        let handler = forward as extern "C" fn(libc::c_int) as libc::sighandler_t;
        // SAFETY: installing SIG_IGN or an async-signal-safe handler; restored on drop.
        unsafe {
            SignalGuard {
                old: [
                    libc::signal(libc::SIGINT, libc::SIG_IGN),
                    libc::signal(libc::SIGQUIT, libc::SIG_IGN),
                    libc::signal(libc::SIGTERM, handler),
                    libc::signal(libc::SIGHUP, handler),
                ],
            }
        }
    }
}

impl SignalGuard {
    /// The program has exited and `record` stays for what it left running:
    /// the first ^C, ^\, TERM or HUP now asks to finish (`finish_asked`),
    /// a second ends mtlab at once. A signal mtlab was started ignoring
    /// (`nohup`) stays ignored.
    fn finish_on_signal(&self) {
        let handler = finish_now as extern "C" fn(libc::c_int) as libc::sighandler_t;
        for (sig, old) in GUARDED.iter().zip(self.old) {
            if old != libc::SIG_IGN {
                // SAFETY: installs an async-signal-safe handler; drop restores the old one.
                unsafe { libc::signal(*sig, handler) };
            }
        }
    }
}

/// Whether a signal asked `record` to finish now (`SignalGuard::finish_on_signal`).
fn finish_asked() -> bool {
    FINISH_ASKED.load(std::sync::atomic::Ordering::SeqCst)
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        // SAFETY: restores the handlers saved in new().
        unsafe {
            for (sig, old) in GUARDED.iter().zip(self.old) {
                libc::signal(*sig, old);
            }
        }
        CHILD.store(0, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A new open of this process's stdin when it is a regular file, at the
/// same offset (reading it does not move the traced run's); None for a
/// pipe, a terminal, nothing, or a file that cannot be opened again.
fn stdin_file_copy() -> Option<std::fs::File> {
    use std::io::Seek;
    let meta = std::fs::metadata("/proc/self/fd/0").ok()?;
    if !meta.is_file() {
        return None;
    }
    let mut f = std::fs::File::open("/proc/self/fd/0").ok()?;
    // From where the traced run will start reading (`{ read x; mtlab record …; } < f`).
    // SAFETY: lseek on descriptor 0 with SEEK_CUR only reads its offset.
    let at = unsafe { libc::lseek(0, 0, libc::SEEK_CUR) };
    if at > 0 {
        f.seek(std::io::SeekFrom::Start(at as u64)).ok()?;
    }
    Some(f)
}

/// Can this process load `lib` (e.g. "libunwind.so.8")?
pub fn library_available(lib: &str) -> bool {
    let name = std::ffi::CString::new(lib).expect("no NUL in library names");
    // SAFETY: dlopen with a valid C string; the handle is closed right away.
    unsafe {
        let h = libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL);
        if h.is_null() {
            return false;
        }
        libc::dlclose(h);
    }
    true
}

pub fn record(cfg: &RecordConfig) -> Result<RecordOutcome, RecordError> {
    if cfg.unwind == Unwind::Libunwind && cfg.stacks != Stacks::None && !library_available("libunwind.so.8") {
        return Err(RecordError::NoLibunwind);
    }
    let program = resolve_program(&cfg.program)?;
    let shown = cfg.program.to_string_lossy().to_string();
    let output = std::path::absolute(&cfg.output).map_err(|source| RecordError::Unwritable { path: cfg.output.clone(), source })?;
    crate::trace::rewrite::check_trace_output(&output).map_err(RecordError::Output)?;
    let run_start = prepare_output(&output)?;
    let _tree_dir = if cfg.follow { Some(prepare_tree_dir(&output)?) } else { None };
    // Control pages left by a sampled run killed together with its record.
    crate::ctl::remove_dead_pages();
    let out_dir = HeldDir::open(&output);
    if let Some(interp) = crate::symbolize::elf_interpreter(&program).filter(|i| is_musl_loader(i)) {
        if !native::carries(Part::PreloadMusl) {
            return Err(RecordError::NoMuslBuild { program: program.display().to_string(), interp });
        }
    }
    let preload = native::preload_list()?;

    // The untraced run's output goes nowhere: the program's output is the
    // traced run's, once. It reads stdin only when stdin is a regular file
    // (its own open of it, from the start); a pipe or terminal goes to the
    // traced run, and the baseline then reads nothing (said in the report).
    let mut baseline_stdin_empty = false;
    let baseline_wall = if cfg.baseline {
        let mut cmd = Command::new(&program);
        cmd.arg0(&cfg.program).args(&cfg.args).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
        match stdin_file_copy() {
            Some(f) => {
                cmd.stdin(f);
                say!("mtlab: baseline run of {shown} (untraced, its output discarded)");
            }
            None => {
                cmd.stdin(std::process::Stdio::null());
                baseline_stdin_empty = true;
                say!("mtlab: baseline run of {shown} (untraced, its output discarded, stdin from /dev/null)");
            }
        }
        Some(run(cmd, &shown, |_| {}, |_| {})?.1)
    } else {
        None
    };

    let mut cmd = Command::new(&program);
    // argv[0] as the user typed it, as a shell passes it: programs print it in
    // their messages ("grep: FILE: No such file or directory", not
    // "/usr/bin/grep: ...") and some act on it.
    cmd.arg0(&cfg.program).args(&cfg.args);
    // A program the library cannot be loaded into (a 32-bit one) runs without
    // it: the loader would print its refusal on the program's own stderr.
    let foreign = foreign_program(&program).is_some();
    if !foreign && preload.to_string_lossy().contains([' ', ':', '\t', '\n']) {
        // The loader splits LD_PRELOAD at spaces and colons: the program
        // would run untraced and its missing trace be blamed on it.
        return Err(RecordError::Output(format!(
            "mtlab's library is unpacked at {}, whose path has a space or colon that LD_PRELOAD cannot carry; \
             point XDG_CACHE_HOME at a directory of your own whose path has neither",
            preload.display()
        )));
    }
    if !foreign {
        let mut ld_preload = preload.as_os_str().to_owned();
        if let Some(existing) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
            ld_preload.push(":");
            ld_preload.push(existing);
        }
        cmd.env("LD_PRELOAD", ld_preload);
    }
    cmd.env("MTLAB_OUT", &output)
        .env("MTLAB_PARENT", std::process::id().to_string())
        .env("MTLAB_STACKS", if cfg.stacks == Stacks::Fp { "fp" } else { "none" })
        .env("MTLAB_DEPTH", cfg.depth.to_string())
        .env("MTLAB_FOLLOW", if cfg.follow { "1" } else { "0" })
        .env("MTLAB_FREE_STACKS", if cfg.free_stacks { "1" } else { "0" })
        .env("MTLAB_UNWIND", cfg.unwind.name())
        .env("MTLAB_TSC_HZ", tsc_hz().to_string());
    match &cfg.sample {
        Some(s) => {
            cmd.env("MTLAB_SAMPLE", s.interval.to_string())
                .env("MTLAB_INACTIVE", if s.inactive { "1" } else { "0" })
                .env("MTLAB_SAMPLE_SEED", s.seed.to_string());
        }
        None => {
            cmd.env_remove("MTLAB_SAMPLE").env("MTLAB_TIME_SAMPLE", cfg.time_sample.max(1).to_string());
        }
    }
    // A standard descriptor closed where mtlab was started is closed for the
    // program too (Rust's runtime had put /dev/null there): untraced, its
    // writes to a closed stdout fail, and they must under mtlab as well.
    let closed = crate::platform::process::std_fds_closed_at_start();
    if !closed.is_empty() {
        // SAFETY: between fork and exec the closure makes only close calls,
        // which are async-signal-safe, and allocates nothing (`closed` is
        // moved in whole).
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(move || {
                for &fd in &closed {
                    libc::close(fd);
                }
                Ok(())
            });
        }
    }
    // With --live and --keep-last the flight recorder's ring gets what the
    // live consumer reads (which it then releases): started first.
    let flight_of_live = match (&cfg.live, &cfg.flight) {
        (Some(l), Some(f)) if !foreign => {
            Some(crate::flight::Recorder::start(f, &l.profile, &output, crate::flight::Feed::pushed_by_caller(), tsc_hz()))
        }
        _ => None,
    };
    // With --live the other images' watermark pages come over the broker's
    // socket to the live analysis.
    let (page_tx, page_rx) = match (&cfg.live, cfg.follow && !foreign) {
        (Some(_), true) => {
            let (tx, rx) = std::sync::mpsc::channel();
            (Some(tx), Some(rx))
        }
        _ => (None, None),
    };
    // With --live the root trace is analysed while the program runs; else
    // it is rewritten while the program runs, as far as it is written.
    let mut analysed = match &cfg.live {
        Some(l) => {
            // A profile that cannot be written is refused before the program runs.
            drop(crate::platform::safe_fs::replace(&l.profile, 0o644).map_err(|source| RecordError::Unwritable { path: l.profile.clone(), source })?);
            let sink = flight_of_live.as_ref().map(|f| Box::new(f.pusher()) as Box<dyn crate::live::RawSink>);
            Some(crate::live::Live::start(output.clone(), l.clone(), sink, page_rx).ok_or_else(|| {
                RecordError::Output("--live needs a memfd for the trace's watermark, and this system gave none".into())
            })?)
        }
        None => None,
    };
    // The raw bytes rewritten are released from the file unless another
    // reader wants the raw trace while the program runs: the flight
    // recorder, `mtlab ctl dump` of a sampled run.
    let release = cfg.flight.is_none() && cfg.sample.is_none();
    let mut live = if cfg.live.is_some() { None } else { crate::live_finish::LiveFinish::new(output.clone(), cfg.flight.is_some(), release) };
    if page_tx.is_some() {
        cmd.env("MTLAB_LIVE", "1");
    } else {
        cmd.env_remove("MTLAB_LIVE");
    }
    if let Some(fd) = live.as_ref().and_then(|l| l.fd()).or_else(|| analysed.as_ref().and_then(|l| l.fd())) {
        cmd.env("MTLAB_WATERMARK_FD", fd.to_string());
    }
    // The flight recorder reads the root trace below the same watermark.
    let flight = match (&cfg.flight, &live) {
        _ if flight_of_live.is_some() => flight_of_live,
        (Some(f), Some(l)) if !foreign => {
            let feed = crate::flight::Feed::new(output.clone(), Box::new(l.watermark()));
            Some(crate::flight::Recorder::start(f, &output, &output, feed, tsc_hz()))
        }
        (Some(_), _) => {
            return Err(RecordError::Output(
                "--keep-last needs a memfd for the writer's watermark (memfd_create failed) and a program mtlab's library \
                 loads into"
                    .into(),
            ))
        }
        _ => None,
    };
    // Trace files for the processes that cannot make their own (a daemon's
    // workers after setuid or chroot): made here, named if they cannot be.
    let broker = if cfg.follow && !foreign { crate::broker::Broker::start(&output, page_tx).ok() } else { None };
    if let Some(b) = &broker {
        cmd.env("MTLAB_BROKER_FD", b.fd().to_string());
    } else {
        cmd.env_remove("MTLAB_BROKER_FD");
    }
    // `mtlab ctl` wants the program's pid; a shell's `$!` is this process's.
    // Said before the program runs: written while it runs, the line landed
    // inside a line of the program's own stderr (tests/corpus.rs).
    let program_pid = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let seen_pid = program_pid.clone();
    let pusher = match cfg.sample.as_ref().and_then(|s| s.push.clone()) {
        Some(push) if !foreign => Some(start_pusher(push, program_pid.clone(), &output, &program, cfg)),
        _ => None,
    };
    let live_pusher = match (&cfg.live_push, cfg.live.as_ref().and_then(|l| l.publish.clone())) {
        (Some(push), Some(publish)) => Some(start_live_pusher(push.clone(), publish, program_pid.clone(), &program, cfg)),
        _ => None,
    };
    let announced = match cfg.sample {
        Some(_) if !foreign => Some(announce_before_exec(&mut cmd, move |pid| {
            use std::io::Write;
            seen_pid.store(pid, std::sync::atomic::Ordering::Release);
            let line = format!("mtlab: sampling process {pid}: `mtlab ctl {pid} status|start|stop|dump` controls it\n");
            let _ = std::io::stderr().write_all(line.as_bytes());
        })?),
        _ => None,
    };
    // `record --live` waits for the traced processes the program leaves
    // running (a daemon), as their subreaper: they stay its descendants
    // (`mtlab ctl PID` finds their recorder) and their ends are its to reap.
    let outliving = cfg.live.is_some() && cfg.follow && !foreign;
    let subreaper = outliving && crate::platform::process::set_child_subreaper(true).is_ok();
    let reaper = std::cell::RefCell::new(None);
    // Copies of quiet threads' buffers, kept for a death by a signal.
    let salvage = std::cell::RefCell::new(None);
    let ran = run(
        cmd,
        &shown,
        |pid| {
            program_pid.store(pid, std::sync::atomic::Ordering::Release);
            if let Some(f) = &flight {
                f.spawned(pid);
            }
            if let Some(l) = &analysed {
                l.started(pid);
            }
            if subreaper {
                *reaper.borrow_mut() = Some(crate::platform::process::Reaper::start(pid));
            }
            if let Some(l) = live.as_ref().filter(|_| !foreign) {
                *salvage.borrow_mut() = crate::salvage::Salvage::start(l.page(), pid);
            }
        },
        |guard| {
            if let Some(l) = analysed.as_ref().filter(|_| outliving) {
                guard.finish_on_signal();
                l.outlived(finish_asked);
            }
        },
    );
    drop(reaper.take());
    if subreaper {
        let _ = crate::platform::process::set_child_subreaper(false);
    }
    if let Some(a) = announced {
        a.finish();
    }
    if let Some(l) = live.as_mut() {
        l.spawned();
    }
    if let Some(l) = analysed.as_mut() {
        l.spawned();
    }
    let pushed = pusher.map(|(url, p)| (url, p.finish()));
    let program_end = Instant::now();
    let stopped = live.map(|l| l.stop());
    let live_stop = program_end.elapsed();
    let (mut root_finisher, mut root_lost) = match stopped {
        Some(crate::live_finish::Stopped::Partial(f)) => (Some(*f), None),
        Some(crate::live_finish::Stopped::Lost { why, released }) => (None, Some((why, released))),
        _ => (None, None),
    };
    let served = broker.map(|b| b.stop()).unwrap_or_default();
    let (status, wall) = ran?;
    let salvage_copies = salvage.into_inner().map(|s| s.stop()).unwrap_or_default();
    // Before the root is finished: the ring takes the rest of the raw file.
    // Fed by the live consumer, it stops once that has read the rest (below).
    let (flight, flight_after_live) = match flight {
        Some(f) if cfg.live.is_some() => (crate::flight::Outcome::default(), Some(f)),
        f => (f.map(|f| f.stop(status.signal())).unwrap_or_default(), None),
    };

    let (mut traces, mut warnings) = run_family(&output, run_start);
    // A file the library created but could not write even the header to (a
    // full disk) is no trace: readers would call it "not an mtlab trace".
    let mut root_unwritten = None;
    traces.retain(|t| {
        let empty = std::fs::metadata(t).is_ok_and(|m| m.len() == 0);
        if !empty || (*t != output && still_running(&output, t)) {
            return true;
        }
        let why = format!(
            "mtlab's library created {} but could not write even its header: {}; the empty file was removed",
            t.display(),
            why_unwritten(t)
        );
        let _ = std::fs::remove_file(t);
        if *t == output {
            root_unwritten = Some(why);
        } else {
            warnings.push(why);
        }
        false
    });
    if traces.is_empty() && root_unwritten.is_none() {
        root_unwritten = out_dir.and_then(|d| d.moved(&output));
    }
    if cfg.sample.is_some() {
        // A process killed outright (SIGKILL) cannot remove its control page.
        crate::ctl::remove_abandoned_pages(&traces);
    }
    let mut runinfo = vec![(keys::WALL_NS.to_string(), wall.as_nanos().to_string())];
    // Killed by a signal, the program wrote none of its buffers: the
    // copies of the quiet ones go into its raw trace before it is finished.
    if status.signal().is_some() && !salvage_copies.is_empty() && traces.first() == Some(&output) {
        match crate::salvage::append(&output, &salvage_copies) {
            Ok(n) => {
                runinfo.push((keys::SALVAGED_EVENTS.into(), n.events.to_string()));
                runinfo.push((keys::SALVAGED_THREADS.into(), n.threads.to_string()));
                warnings.push(crate::salvage::note(n));
            }
            Err(e) => warnings.push(format!(
                "{}: the events its quiet threads still held at the kill, copied from them while it ran, could not be \
                 added to it: {e}",
                output.display()
            )),
        }
    }
    match (status.code(), status.signal()) {
        (Some(code), _) => runinfo.push((keys::EXIT_CODE.into(), code.to_string())),
        (None, Some(sig)) => runinfo.push((keys::SIGNAL.into(), sig.to_string())),
        _ => {}
    }
    if let Some(b) = baseline_wall {
        runinfo.push((keys::BASELINE_WALL_NS.into(), b.as_nanos().to_string()));
        if baseline_stdin_empty {
            runinfo.push((keys::BASELINE_STDIN_EMPTY.into(), "1".into()));
        }
    }
    if cfg.sample.as_ref().is_some_and(|s| s.inactive) {
        runinfo.push((keys::SAMPLE_STARTED_INACTIVE.into(), "1".into()));
    }
    if cfg.follow {
        runinfo.push((keys::CHILD_TRACES.into(), child_traces(&output, &traces)));
    }
    if served.untraced_count > 0 {
        runinfo.push((keys::UNTRACED_COUNT.into(), served.untraced_count.to_string()));
        runinfo.push((keys::UNTRACED.into(), crate::broker::encode(&served.untraced)));
        warnings.push(crate::broker::summary(&served.untraced, served.untraced_count));
    }
    let live_summary = match analysed {
        Some(l) => Some(l.finish(runinfo.clone()).map_err(|e| RecordError::Output(e.to_string()))?),
        None => None,
    };
    // After the live analysis's last profile: the last window is the run's end.
    let pushed = pushed.or_else(|| live_pusher.map(|(url, p)| (url, p.finish())));
    let flight = match flight_after_live {
        Some(f) => f.stop(status.signal()),
        None => flight,
    };
    let keep_raw = cfg.live.as_ref().is_none_or(|l| l.keep_raw);
    // Descendants read live are in the profile already; their traces, once
    // analysed, were removed (unless --keep-raw).
    let (seen_live, covered_live) = live_summary.as_ref().map(|s| (s.seen.clone(), s.covered.clone())).unwrap_or_default();
    if !keep_raw {
        traces.retain(|t| !covered_live.contains(t));
    }
    let mut bytes = 0;
    let mut stages = None;
    // With --live, the descendants' finished traces go into the profile after the root's.
    let mut finished_children = Vec::new();
    for (i, t) in traces.iter().enumerate() {
        let root = i == 0 && *t == output;
        if root && !keep_raw {
            // Analysed into the profile, its blocks released: what is left
            // of the raw trace is its header and the holes.
            if let Err(e) = std::fs::remove_file(t) {
                warnings.push(format!("{}: the raw trace could not be removed: {e}", t.display()));
            }
            continue;
        }
        if !root && still_running(&output, t) {
            // A descendant outlived the program: its file is still being
            // written and must not be replaced under it. Without --live,
            // record does not wait for it: a build that leaves a server
            // behind (a compiler cache, an agent) would never end.
            // Under --live it was waited for, and the live analysis said why it still runs.
            if !seen_live.contains(t) {
                warnings.push(format!(
                    "{}: its process {} outlived the program and still runs; its trace is left as written (uncompressed) \
                     and grows until it ends (then `mtlab report` reads it as written); `record --live` analyses such \
                     processes until they end",
                    t.display(),
                    child_pid(&output, t).map_or_else(|| "?".to_string(), |p| p.to_string())
                ));
            }
            continue;
        }
        let info: &[(String, String)] = if root { &runinfo } else { &[] };
        if let Some((why, released)) = root_lost.take().filter(|_| root) {
            // The rewrite failed after it had released raw records: the file
            // cannot be finished from the start any more.
            let kept = match trace::append_runinfo(t, info) {
                Ok(()) => "the exit status and run facts were added to it",
                Err(_) => "nor could the exit status be added",
            };
            bytes += std::fs::metadata(t).map(|m| m.len()).unwrap_or(0);
            warnings.push(format!(
                "{}: the rewrite while the program ran failed ({why}) after it had released {released} bytes of raw \
                 records from the file: those events are lost, the rest is left as written ({kept})",
                t.display()
            ));
            continue;
        }
        let finished = match root_finisher.take().filter(|_| root) {
            Some(f) => f.finish(info),
            None => trace::finish_trace(t, info),
        };
        if let (true, Ok(stats)) = (root, &finished) {
            stages = Some(Stages { program: wall, live_stop, finish: stats.stages });
        }
        match finished {
            Ok(stats) => {
                if !root && !seen_live.contains(t) {
                    finished_children.push(t.clone());
                }
                warnings.extend(stats.warnings.into_iter().map(|w| format!("{}: {w}", t.display())));
                warnings.extend(dropped_warning(t));
                match cfg.compact.map(|(q, lean)| crate::compact::compact_trace(t, t, q, lean)) {
                    None => bytes += stats.bytes_after,
                    Some(Ok(c)) => bytes += c.bytes_after,
                    Some(Err(e)) => {
                        bytes += stats.bytes_after;
                        warnings.push(format!("{}: not compacted: {e}", t.display()));
                    }
                }
            }
            Err(e) => {
                // No room for the rewrite (a full disk): the run's facts —
                // exit status, child list, untraced processes — still go
                // into the trace as written, one small record at its end.
                let kept = if info.is_empty() { String::new() } else {
                    match trace::append_runinfo(t, info) {
                        Ok(()) => "; the exit status and run facts were added to it".to_string(),
                        Err(e2) => format!("; nor could the exit status be added: {e2}"),
                    }
                };
                bytes += std::fs::metadata(t).map(|m| m.len()).unwrap_or(0);
                warnings.push(format!("{}: not finished (left as written{kept}): {e}", t.display()));
                warnings.extend(dropped_warning(t));
            }
        }
    }
    let mut live_summary = live_summary;
    if let (Some(l), Some(s)) = (&cfg.live, live_summary.as_mut().filter(|s| s.complete)) {
        match crate::live::tree::add_children(&l.profile, &finished_children, l.keep_raw) {
            Ok(t) => {
                s.warnings.extend(t.warnings);
                if !l.keep_raw {
                    traces.retain(|t| !finished_children.contains(t));
                }
            }
            Err(e) => s.warnings.push(format!("the descendants' traces are not in the live profile (left as written): {e}")),
        }
    }
    // Only when the tail is in fact missing: a Go program that ends through
    // the C library's exit (cgo's C.exit) writes its END like any other.
    let no_end = || trace::TraceFile::open_without_maps(&output).map_or(true, |tf| tf.end.is_none());
    if !traces.is_empty() && crate::symbolize::elf_is_go(&program) == Some(true) && no_end() {
        warnings.push(GO_EXIT.replace("{}", &program.display().to_string()));
    }
    let stages = stages.map(|s| (s, program_end.elapsed()));
    Ok(RecordOutcome { status, program, traces, wall, baseline_wall, bytes, warnings, root_unwritten, live: live_summary, flight, pushed, stages })
}

/// The thread of `record --sample --push-every`: its source reads the
/// sampled program (`pid` once it runs) through its control page, and the
/// root trace as left once it ended.
fn start_pusher(
    push: crate::otlp::periodic::Config,
    pid: std::sync::Arc<std::sync::atomic::AtomicU32>,
    output: &Path,
    program: &Path,
    cfg: &RecordConfig,
) -> (String, crate::otlp::periodic::Pusher) {
    use crate::otlp::periodic::{Pusher, Snapshot};
    let output = output.to_path_buf();
    let exe = program.to_string_lossy().into_owned();
    let args: Vec<String> = std::iter::once(&cfg.program).chain(&cfg.args).map(|a| a.to_string_lossy().into_owned()).collect();
    let url = push.target.url.clone();
    let source = Box::new(move |ended: bool| {
        let pid = pid.load(std::sync::atomic::Ordering::Acquire);
        if pid == 0 {
            return Err("the program had not started".to_string());
        }
        let (profile, allocator) = crate::ctl::profile_so_far(pid, &output, ended, Duration::from_secs(5)).map_err(|e| e.to_string())?;
        let process = crate::otlp::ProcessInfo { pid, exe: exe.clone(), args: args.clone() };
        Ok(Snapshot { profile, process, allocator: Some(allocator).filter(|a| !a.is_empty()) })
    });
    (url, Pusher::start(push, source))
}

/// The thread of `record --live --push-every`: its source takes the profile
/// the live analysis published last (`live::Publish`); the last window waits
/// (up to a few seconds) for the one of the whole run.
fn start_live_pusher(
    push: crate::otlp::periodic::Config,
    publish: crate::live::Publish,
    pid: std::sync::Arc<std::sync::atomic::AtomicU32>,
    program: &Path,
    cfg: &RecordConfig,
) -> (String, crate::otlp::periodic::Pusher) {
    use crate::otlp::periodic::{Pusher, Snapshot};
    let exe = program.to_string_lossy().into_owned();
    let args: Vec<String> = std::iter::once(&cfg.program).chain(&cfg.args).map(|a| a.to_string_lossy().into_owned()).collect();
    let url = push.target.url.clone();
    let source = Box::new(move |ended: bool| {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let got = publish.slot.lock().unwrap_or_else(|e| e.into_inner()).clone();
            match got {
                Some(p) if p.last || !ended => {
                    let process = crate::otlp::ProcessInfo { pid: pid.load(std::sync::atomic::Ordering::Acquire), exe: exe.clone(), args: args.clone() };
                    return Ok(Snapshot { profile: p.profile, process, allocator: Some(p.allocator).filter(|a| !a.is_empty()) });
                }
                _ if !ended => return Err("the live analysis has no profile yet".to_string()),
                _ if std::time::Instant::now() >= deadline => return Err("the live analysis did not finish its last profile in 10 s".to_string()),
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    });
    (url, Pusher::start(push, source))
}

/// Why nothing could be written to the trace file `t`: its file system is
/// full now, or (the space came back since) a write failed then.
fn why_unwritten(t: &Path) -> String {
    let dir = t.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let full = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).ok().and_then(|c| {
        let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
        // SAFETY: c is a valid NUL-terminated path and st is writable memory of the right type.
        (unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) } == 0).then(|| {
            // SAFETY: statvfs succeeded and filled st.
            let st = unsafe { st.assume_init() };
            st.f_bavail == 0
        })
    });
    if full == Some(true) {
        format!("the file system holding {} is full (No space left on device)", dir.display())
    } else {
        "its writes failed (the disk was full then, or a file size limit was below a header's size)".to_string()
    }
}

/// What a Go program's trace misses, and why ({} is the program).
const GO_EXIT: &str = "{} is a Go program: Go ends its process with the exit_group system call, never through the C \
     library's exit, so mtlab's exit flush does not run — the events each thread had not written yet (up to 64 KiB of \
     them per thread) and the END record are missing, and the report's live blocks at the end are not leaks";

/// `record --live --keep-last`: the live consumer's reads feed the flight ring.
impl crate::live::RawSink for crate::flight::Pusher {
    fn consumed(&mut self, bytes: &[u8], _first_tsc: u64, _last_tsc: u64) {
        self.push(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporary_files_of_dead_writers_are_found_and_others_kept() {
        let dir = tempfile::tempdir().unwrap();
        let me = std::process::id();
        let dead = u32::MAX - 1; // beyond any pid_max
        for name in [
            format!(".t.mtl.finish-{dead}"),
            format!(".t.mtl.4242.compact-{dead}"),
            format!(".t.mtl.finish-{me}"),
            format!(".other.mtl.finish-{dead}"),
            "t.mtl".to_string(),
        ] {
            std::fs::write(dir.path().join(name), b"x").unwrap();
        }
        let mut found: Vec<String> =
            abandoned_temps(&dir.path().join("t.mtl")).iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        found.sort();
        assert_eq!(found, [format!(".t.mtl.4242.compact-{dead}"), format!(".t.mtl.finish-{dead}")]);
    }

    #[test]
    fn family_lists_root_then_children_in_pid_order() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("t.mtl");
        std::fs::create_dir(dir.path().join("t.mtl.d")).unwrap();
        for name in ["t.mtl", "t.mtl.d/20", "t.mtl.d/3", "t.mtl.d/3.1", "t.mtl.d/x", "t.mtl.d/3.1.2", "other", "t.mtl.7"] {
            std::fs::write(dir.path().join(name), b"").unwrap();
        }
        let names: Vec<String> = names::trace_family(&root)
            .iter()
            .map(|p| p.strip_prefix(dir.path()).unwrap().to_string_lossy().to_string())
            .collect();
        // The layout before ROOT.d (t.mtl.7 beside the root) is read too.
        assert_eq!(names, ["t.mtl", "t.mtl.d/3", "t.mtl.d/3.1", "t.mtl.7", "t.mtl.d/20"]);
    }

    #[test]
    fn a_program_of_another_class_or_machine_is_foreign() {
        let x86_64 = (64, object::elf::EM_X86_64);
        assert_eq!(foreign_kind(x86_64, x86_64), None);
        let why = foreign_kind((32, object::elf::EM_386), x86_64).unwrap();
        assert_eq!(
            why,
            "it is a 32-bit x86 (i386) program and mtlab's library is built for 64-bit x86-64: \
             the loader cannot load one into the other"
        );
        assert!(foreign_kind((32, object::elf::EM_X86_64), x86_64).unwrap().contains("32-bit x32 program"));
        assert!(foreign_kind((64, object::elf::EM_AARCH64), x86_64).unwrap().contains("64-bit AArch64 program"));
        // This test binary itself is of the library's kind.
        let me = std::env::current_exe().unwrap();
        assert_eq!(foreign_program(&me), None);
    }

    #[test]
    fn missing_program_is_a_clear_error() {
        let err = resolve_program(&OsString::from("no-such-program-mtlab")).unwrap_err();
        assert!(err.to_string().contains("cannot find program `no-such-program-mtlab`"));
    }

    #[test]
    fn tsc_frequency_is_plausible() {
        let hz = tsc_hz();
        assert!((100_000_000..20_000_000_000).contains(&hz), "{hz}");
    }
}
