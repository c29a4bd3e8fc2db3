//! The native parts (preload library, C workloads) are compiled by build.rs
//! and embedded in the binary, so `mtlab` works from any directory with no
//! install step. On first use they are written to a per-version cache
//! directory, named by a hash of their bytes so stale copies are never used.
//!
//! The cache is `$XDG_CACHE_HOME/mtlab/VERSION-HASH/` (or `~/.cache/mtlab/…`,
//! the home directory from the password database when `HOME` is unset; never a
//! shared directory), its whole path checked on every use
//! (`platform::safe_fs`). The threads workloads' sources are embedded too,
//! built with another libc's compiler wrapper on demand (`build_with`, cached
//! by a hash of sources and compiler).

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::platform::safe_fs;

static PRELOAD: &[u8] = include_bytes!(env!("MTLAB_PRELOAD_SO"));
static ATTACH: &[u8] = include_bytes!(env!("MTLAB_ATTACH_SO"));
/// The same two built against musl (empty where mtlab was built without musl-gcc).
static PRELOAD_MUSL: &[u8] = include_bytes!(env!("MTLAB_PRELOAD_MUSL_SO"));
static ATTACH_MUSL: &[u8] = include_bytes!(env!("MTLAB_ATTACH_MUSL_SO"));
static MALLOC_TEST: &[u8] = include_bytes!(env!("MTLAB_MALLOC_TEST"));
static LATENCY_PIPELINE: &[u8] = include_bytes!(env!("MTLAB_LATENCY_PIPELINE"));
static SERVICE: &[u8] = include_bytes!(env!("MTLAB_SERVICE"));
static HEAP_WORKLOADS: &[u8] = include_bytes!(env!("MTLAB_HEAP_WORKLOADS"));
static HEAP_REPLAY: &[u8] = include_bytes!(env!("MTLAB_HEAP_REPLAY"));
static THREADS_CREATE: &[u8] = include_bytes!(env!("MTLAB_THREADS_CREATE"));
static THREADS_CTX: &[u8] = include_bytes!(env!("MTLAB_THREADS_CTX"));
static THREADS_CHAT: &[u8] = include_bytes!(env!("MTLAB_THREADS_CHAT"));

/// The threads workloads' sources, to build them against another libc
/// (`musl-gcc`, or any compiler wrapper) where the study runs.
static THREADS_SOURCES: &[(&str, &str)] = &[
    ("common.h", include_str!("../../../native/threads/common.h")),
    ("create.c", include_str!("../../../native/threads/create.c")),
    ("ctx.c", include_str!("../../../native/threads/ctx.c")),
    ("chat.c", include_str!("../../../native/threads/chat.c")),
];

#[derive(Debug, thiserror::Error)]
#[error("cannot unpack mtlab's native parts into {dir}: {source} (set XDG_CACHE_HOME to a writable directory)")]
pub struct UnpackError {
    dir: PathBuf,
    source: std::io::Error,
}

/// A native part carried inside the binary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Preload,
    /// The preload library built to be dlopen'ed into a running process (`record --pid`).
    Attach,
    /// The preload library built against musl, for musl-linked programs.
    PreloadMusl,
    /// The attach library built against musl.
    AttachMusl,
    MallocTest,
    LatencyPipeline,
    /// A long-running service's heap traffic at a steady rate (`record --live`'s workload).
    Service,
    /// The heap study's built-in workloads (`heap compare --workload`).
    HeapWorkloads,
    /// Re-executes a trace's heap calls (`heap replay`).
    HeapReplay,
    /// Thread creation cost (threads study), built against glibc.
    ThreadsCreate,
    /// Token-ring context switches (threads study), built against glibc.
    ThreadsCtx,
    /// Volanomark-shaped chat server and clients (threads study), built against glibc.
    ThreadsChat,
}

impl Part {
    fn file_name(self) -> &'static str {
        match self {
            Part::Preload => "libmtlab_preload.so",
            Part::Attach => "libmtlab_attach.so",
            // The same name as glibc's: LD_PRELOAD names one file, in a
            // directory each loader picks for itself (`preload_list`).
            Part::PreloadMusl => "libmtlab_preload.so",
            Part::AttachMusl => "libmtlab_attach_musl.so",
            Part::MallocTest => "mtlab-malloc-test",
            Part::LatencyPipeline => "mtlab-latency-pipeline",
            Part::Service => "mtlab-service",
            Part::HeapWorkloads => "mtlab-heap-workloads",
            Part::HeapReplay => "mtlab-heap-replay",
            Part::ThreadsCreate => "mtlab-threads-create",
            Part::ThreadsCtx => "mtlab-threads-ctx",
            Part::ThreadsChat => "mtlab-threads-chat",
        }
    }
    fn bytes(self) -> &'static [u8] {
        match self {
            Part::Preload => PRELOAD,
            Part::Attach => ATTACH,
            Part::PreloadMusl => PRELOAD_MUSL,
            Part::AttachMusl => ATTACH_MUSL,
            Part::MallocTest => MALLOC_TEST,
            Part::LatencyPipeline => LATENCY_PIPELINE,
            Part::Service => SERVICE,
            Part::HeapWorkloads => HEAP_WORKLOADS,
            Part::HeapReplay => HEAP_REPLAY,
            Part::ThreadsCreate => THREADS_CREATE,
            Part::ThreadsCtx => THREADS_CTX,
            Part::ThreadsChat => THREADS_CHAT,
        }
    }
}

/// A built-in workload as `mtlab workload NAME` runs it: the part, the
/// arguments that come first, and what it does.
pub struct Workload {
    pub name: &'static str,
    pub part: Part,
    pub leading_args: &'static [&'static str],
    pub about: &'static str,
}

pub const WORKLOADS: &[Workload] = &[
    Workload {
        name: "malloc-test",
        part: Part::MallocTest,
        leading_args: &[],
        about: "threads allocating and freeing blocks at a given call depth (the tracer benchmark's workload): --threads N --size BYTES --depth N --iterations N",
    },
    Workload {
        name: "latency-pipeline",
        part: Part::LatencyPipeline,
        leading_args: &[],
        about: "market data in, orders out through a pipeline of threads; prints tick-to-trade latency: --messages N --rate MSG_PER_S --mode threads|processes",
    },
    Workload {
        name: "service",
        part: Part::Service,
        leading_args: &[],
        about: "a service's heap traffic: a steady rate through 3 call paths, 1 block in 1000 leaked, for a time or until stopped (record --live, the flight recorder): --rate CALLS/s (default 1M/s) --duration TIME | --requests N",
    },
    Workload {
        name: "heap-small",
        part: Part::HeapWorkloads,
        leading_args: &["small"],
        about: "many small short-lived objects, 4 M allocations (heap study); optional SCALE 1-1000 multiplies the work",
    },
    Workload {
        name: "heap-xthread",
        part: Part::HeapWorkloads,
        leading_args: &["xthread"],
        about: "producer/consumer threads, every free another thread's block (heap study); optional SCALE 1-1000 multiplies the work",
    },
    Workload {
        name: "heap-threshold",
        part: Part::HeapWorkloads,
        leading_args: &["threshold"],
        about: "storms of large blocks around glibc's mmap threshold (heap study); optional SCALE 1-1000 multiplies the work",
    },
    Workload {
        name: "heap-phases",
        part: Part::HeapWorkloads,
        leading_args: &["phases"],
        about: "a tall peak of objects, all but every 16th freed, a second phase on top (heap study); optional SCALE 1-1000 multiplies the work",
    },
    Workload {
        name: "threads-create",
        part: Part::ThreadsCreate,
        leading_args: &[],
        about: "thread creation and wait, timed one at a time (threads study): --wait join|barrier --stack KiB --ms MS",
    },
    Workload {
        name: "threads-ctx",
        part: Part::ThreadsCtx,
        leading_args: &[],
        about: "a token passed around a ring of threads: context switch cost (threads study): --threads N --transport pipe|futex|eventfd|cond --ms MS",
    },
    Workload {
        name: "threads-chat",
        part: Part::ThreadsChat,
        leading_args: &[],
        about: "a chat server and its clients in rooms (threads study): --rooms R --users U --messages M --mode threads|epoll",
    },
];

/// The built-in workload called `name`.
pub fn workload(name: &str) -> Option<&'static Workload> {
    WORKLOADS.iter().find(|w| w.name == name)
}

fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf29ce484222325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x100000001b3))
}

/// Where the native parts are unpacked: `$XDG_CACHE_HOME/mtlab`, else
/// `~/.cache/mtlab` with the home directory from `$HOME` or, when that is
/// unset (a systemd unit, a cron job), from the password database. Never a
/// shared directory such as /tmp: mtlab runs what it finds there, often as
/// root.
fn cache_root() -> Result<PathBuf, UnpackError> {
    let absolute = |v: std::ffi::OsString| Some(PathBuf::from(v)).filter(|p| p.is_absolute());
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").and_then(absolute) {
        return Ok(dir.join("mtlab"));
    }
    let home = std::env::var_os("HOME").and_then(absolute).or_else(passwd_home);
    home.map(|h| h.join(".cache/mtlab")).ok_or_else(|| UnpackError {
        dir: PathBuf::from("~/.cache/mtlab"),
        source: std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "neither HOME nor XDG_CACHE_HOME is set and this user has no home directory",
        ),
    })
}

/// The caller's home directory from the password database.
fn passwd_home() -> Option<PathBuf> {
    let mut buf = vec![0 as libc::c_char; 16384];
    let mut pw = std::mem::MaybeUninit::<libc::passwd>::uninit();
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call and buf's length is passed;
    // on success `out` points into `pw`, whose strings live in `buf`.
    let rc = unsafe { libc::getpwuid_r(libc::geteuid(), pw.as_mut_ptr(), buf.as_mut_ptr(), buf.len(), &mut out) };
    if rc != 0 || out.is_null() {
        return None;
    }
    // SAFETY: getpwuid_r succeeded, so pw_dir is a NUL-terminated string in buf.
    let dir = unsafe { std::ffi::CStr::from_ptr((*out).pw_dir) };
    let dir = PathBuf::from(std::ffi::OsStr::from_bytes(dir.to_bytes()));
    Some(dir).filter(|d| d.is_absolute())
}

/// The cache directory `name` under the cache root, created 0700 when new,
/// and checked on every use: each component of it owned by root or the
/// caller and writable by no one else (`safe_fs::trusted_dir`), so no other
/// user can swap what the loader opens after the check. Its canonical path.
fn cache_dir(name: &str) -> Result<PathBuf, UnpackError> {
    let dir = cache_root()?.join(name);
    safe_fs::private_dir(&dir).map_err(|source| UnpackError { dir, source })
}

/// Does `target` hold exactly `bytes`, as a regular file of the caller's?
fn holds(target: &Path, bytes: &[u8]) -> bool {
    safe_fs::read_owned_regular(target, bytes.len() as u64 + 1).is_ok_and(|b| b == bytes)
}

/// Whether this binary carries `part` (the musl builds need musl-gcc where
/// mtlab was built).
pub fn carries(part: Part) -> bool {
    !part.bytes().is_empty()
}

/// The value for LD_PRELOAD that loads mtlab's library into every process of
/// a traced tree, each one's own libc build: glibc's loader expands
/// `$PLATFORM` in it (to the kernel's AT_PLATFORM, `x86_64`, or on glibc
/// 2.26–2.36 on some CPUs `haswell` or `xeon_phi`), musl's takes it
/// literally. So `DIR/$PLATFORM/libmtlab_preload.so` is the glibc build for
/// glibc's loader and the musl build, in a directory named `$PLATFORM`, for
/// musl's: a glibc shell running a musl program (or the other way round)
/// gets each one traced, where one library for both would stop the other
/// libc's loader (it cannot load the library's C library: exit 127).
/// Without the musl build, the glibc library's own path, as before.
pub fn preload_list() -> Result<PathBuf, UnpackError> {
    if !carries(Part::PreloadMusl) {
        return path(Part::Preload);
    }
    let mut key = PRELOAD.to_vec();
    key.extend_from_slice(PRELOAD_MUSL);
    let dir = cache_dir(&format!("{}-{:016x}", env!("CARGO_PKG_VERSION"), fnv1a(&key)))?;
    let glibc = Part::Preload;
    let platform = std::env::consts::ARCH;
    let names = [platform, "haswell", "xeon_phi"];
    for (sub, part) in names.iter().map(|n| (*n, glibc)).chain([("$PLATFORM", Part::PreloadMusl)]) {
        let d = safe_fs::private_dir(&dir.join(sub)).map_err(|source| UnpackError { dir: dir.join(sub), source })?;
        let target = d.join(part.file_name());
        if !holds(&target, part.bytes()) {
            write_atomically(&d, &target, part.bytes()).map_err(|source| UnpackError { dir: d.clone(), source })?;
        }
    }
    Ok(dir.join("$PLATFORM").join(glibc.file_name()))
}

/// Path of `part` on disk, writing it there first if needed.
pub fn path(part: Part) -> Result<PathBuf, UnpackError> {
    let bytes = part.bytes();
    let dir = cache_dir(&format!("{}-{:016x}", env!("CARGO_PKG_VERSION"), fnv1a(bytes)))?;
    let target = dir.join(part.file_name());
    // The whole content is compared, not just the length: a cached copy is
    // used only if it is exactly what this binary carries.
    if holds(&target, bytes) {
        return Ok(target);
    }
    write_atomically(&dir, &target, bytes).map_err(|source| UnpackError { dir: dir.clone(), source })?;
    Ok(target)
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Unpack(#[from] UnpackError),
    #[error("cannot run the compiler {compiler}: {source}")]
    Spawn { compiler: PathBuf, source: std::io::Error },
    #[error("{compiler} could not build the {workload} workload:\n{stderr}")]
    Failed { compiler: PathBuf, workload: String, stderr: String },
}

impl Part {
    /// The workload's source file among the embedded sources, for parts that
    /// can be rebuilt against another libc.
    fn source(self) -> Option<&'static str> {
        match self {
            Part::ThreadsCreate => Some("create.c"),
            Part::ThreadsCtx => Some("ctx.c"),
            Part::ThreadsChat => Some("chat.c"),
            _ => None,
        }
    }
}

/// `part` built by `compiler` (e.g. musl-gcc) from the embedded sources,
/// cached like the embedded parts: by a hash of the sources, the compiler's
/// path and what it says of its version, so a changed toolchain rebuilds.
pub fn build_with(compiler: &Path, part: Part) -> Result<PathBuf, BuildError> {
    let source = part.source().expect("only workloads with embedded sources are rebuilt");
    let version = std::process::Command::new(compiler)
        .arg("-v")
        .output()
        .map_err(|source| BuildError::Spawn { compiler: compiler.to_path_buf(), source })?;
    let mut key = compiler.as_os_str().as_encoded_bytes().to_vec();
    key.extend_from_slice(&version.stderr);
    for (name, text) in THREADS_SOURCES {
        key.extend_from_slice(name.as_bytes());
        key.extend_from_slice(text.as_bytes());
    }
    let dir = cache_dir(&format!("{}-build-{:016x}", env!("CARGO_PKG_VERSION"), fnv1a(&key)))?;
    let target = dir.join(part.file_name());
    // Only this user could have put it there (cache_dir checked the whole path).
    if safe_fs::open_owned_regular(&target, false).is_ok() {
        return Ok(target);
    }
    let unpack = |source| UnpackError { dir: dir.clone(), source };
    let src = safe_fs::private_dir(&dir.join("src")).map_err(unpack)?;
    for (name, text) in THREADS_SOURCES {
        std::fs::write(src.join(name), text).map_err(unpack)?;
    }
    // Built under a temporary name and renamed: a concurrent study never runs a half-written binary.
    let tmp = dir.join(format!(".{}.{}", part.file_name(), std::process::id()));
    let out = std::process::Command::new(compiler)
        .args(["-O2", "-g", "-pthread", "-o"])
        .arg(&tmp)
        .arg(src.join(source))
        .output()
        .map_err(|source| BuildError::Spawn { compiler: compiler.to_path_buf(), source })?;
    // A "compiler" that exits 0 without writing the program (`--libc /bin/true`) failed too.
    if !out.status.success() || !tmp.is_file() {
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        return Err(BuildError::Failed {
            compiler: compiler.to_path_buf(),
            workload: source.trim_end_matches(".c").to_string(),
            stderr: if stderr.is_empty() && out.status.success() {
                "it exited with status 0 but wrote no program: is it a C compiler?".to_string()
            } else {
                stderr
            },
        });
    }
    std::fs::rename(&tmp, &target).map_err(unpack)?;
    Ok(target)
}

fn write_atomically(dir: &Path, target: &Path, bytes: &[u8]) -> std::io::Result<()> {
    // Unique per process and per call: two threads (or tests) unpacking the
    // same part must not rename each other's half-written file away.
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{}.{}.{n}", target.file_name().unwrap().to_string_lossy(), std::process::id()));
    let mut f = safe_fs::create_new(&tmp, 0o700)?;
    f.write_all(bytes)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o755))?;
    drop(f);
    std::fs::rename(&tmp, target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_unpack_and_preload_is_elf() {
        let p = path(Part::Preload).unwrap();
        let head = std::fs::read(&p).unwrap();
        assert_eq!(&head[..4], b"\x7fELF");
        assert_eq!(path(Part::Preload).unwrap(), p, "second call reuses the cached copy");
    }

    /// The dynamic symbols an ELF file needs (undefined, not weak), or defines.
    fn dynamic_symbols(elf: &[u8], defined: bool) -> std::collections::BTreeSet<String> {
        use object::{Object, ObjectSymbol};
        let file = object::File::parse(elf).unwrap();
        file.dynamic_symbols()
            .filter(|s| if defined { !s.is_undefined() } else { s.is_undefined() && !s.is_weak() })
            .filter_map(|s| s.name().ok().map(str::to_string))
            .filter(|n| !n.is_empty())
            .collect()
    }

    /// musl's loader refuses a library that needs a symbol its libc lacks
    /// (glibc-only ones such as `_dl_find_object`, `dladdr1`, `mallinfo2`):
    /// the program would not start at all. Both musl builds need nothing
    /// else than what musl's libc exports.
    #[test]
    fn the_musl_builds_need_only_what_musls_libc_exports() {
        let libc = ["/lib/ld-musl-x86_64.so.1", "/usr/lib/x86_64-linux-musl/libc.so"].into_iter().find_map(|p| std::fs::read(p).ok());
        let (Some(libc), true) = (libc, carries(Part::PreloadMusl)) else {
            let why = "musl's libc or mtlab's musl build is missing (Debian: apt-get install musl-tools, then rebuild)";
            assert!(std::env::var("CI").as_deref() != Ok("true"), "would be SKIPPED, but CI=true: {why}");
            eprintln!("SKIPPED {why}");
            return;
        };
        let exported = dynamic_symbols(&libc, true);
        for part in [Part::PreloadMusl, Part::AttachMusl] {
            let missing: Vec<String> = dynamic_symbols(part.bytes(), false).difference(&exported).cloned().collect();
            assert!(missing.is_empty(), "{part:?} needs symbols musl's libc does not export: {missing:?}");
        }
        // The glibc build does need glibc-only ones: the check can fail.
        assert!(!dynamic_symbols(PRELOAD, false).is_subset(&exported));
    }

    /// The preload library's thread-local block is exactly one page, so a
    /// traced program's thread stacks keep their offsets within pages (see
    /// `struct mtlab_tls` in native/preload/internal.h).
    #[test]
    fn preload_thread_local_block_is_one_page() {
        let elf = std::fs::read(path(Part::Preload).unwrap()).unwrap();
        let u16_at = |o: usize| u16::from_le_bytes(elf[o..o + 2].try_into().unwrap()) as usize;
        let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap());
        assert_eq!(elf[4], 2, "64-bit ELF");
        let (phoff, phentsize, phnum) = (u64_at(0x20) as usize, u16_at(0x36), u16_at(0x38));
        const PT_TLS: u32 = 7;
        let tls: Vec<u64> = (0..phnum)
            .map(|i| phoff + i * phentsize)
            .filter(|&h| u32::from_le_bytes(elf[h..h + 4].try_into().unwrap()) == PT_TLS)
            .map(|h| u64_at(h + 0x28)) // p_memsz
            .collect();
        assert_eq!(tls, vec![4096]);
    }
}
