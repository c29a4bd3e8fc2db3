//! What both rewrites of a trace (`finish`, `compact`) share: the temp file
//! beside the trace, the header at this version, verbatim record copies, and
//! the install over the original.

use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::error::TraceError;
use super::format::*;
use super::records::RecHdr;

/// Removes the temp file unless disarmed; `unnamed`: it has no name yet
/// (`O_TMPFILE`), and gets `.0` only at the install.
pub(crate) struct TempGuard(pub(crate) Option<PathBuf>, bool);

/// Creates the temp file a rewrite of `dst` is written to before it is
/// renamed over it, in the same directory (so the rename stays within one
/// file system): unnamed (`O_TMPFILE`) where the file system allows it, so
/// that a killed mtlab leaves nothing behind — the live rewrite of a long
/// run's trace takes as long as the run —, else `.NAME.WHAT-PID`, removed
/// again unless the guard is disarmed. The path returned is that name either
/// way (where the file gets its name at the install).
pub(crate) fn temp_beside(dst: &Path, what: &str) -> Result<(File, PathBuf, TempGuard), TraceError> {
    let tmp_path = crate::platform::names::temp_beside(dst, what, std::process::id());
    // Our own leftover of an earlier call only (a pid is reused): another
    // user's file or link at this name makes the create below fail.
    if crate::platform::safe_fs::open_owned_regular(&tmp_path, false).is_ok() {
        let _ = fs::remove_file(&tmp_path);
    }
    if let Some(tmp) = unnamed_beside(dst) {
        return Ok((tmp, tmp_path.clone(), TempGuard(Some(tmp_path), true)));
    }
    let tmp = crate::platform::safe_fs::create_new(&tmp_path, 0o600).map_err(TraceError::io(&tmp_path))?;
    let guard = TempGuard(Some(tmp_path.clone()), false);
    Ok((tmp, tmp_path, guard))
}

/// An unnamed file (`O_TMPFILE`, 0600) in `dst`'s directory; None where the
/// kernel or file system has none.
fn unnamed_beside(dst: &Path) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = dst.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    fs::OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
        .open(dir)
        .ok()
}

/// Gives the unnamed `file` the name `path` (new: nothing there is replaced
/// or followed).
fn link_unnamed(file: &File, path: &Path) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let from = std::ffi::CString::new(format!("/proc/self/fd/{}", file.as_raw_fd())).expect("no NUL");
    let to = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: two NUL-terminated paths that live through the call.
    let r = unsafe { libc::linkat(libc::AT_FDCWD, from.as_ptr(), libc::AT_FDCWD, to.as_ptr(), libc::AT_SYMLINK_FOLLOW) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Checks that a trace can be written at `path`: nothing there, or a
/// regular file (replaced whole: a trace is written beside it, then renamed
/// over it). Anything else is refused: writing `-o /dev/null` as root once
/// replaced the device with a regular file, a FIFO or `/dev/stdout` got no
/// bytes, and a symbolic link would be replaced — or, followed, would put
/// the children's `FILE.d/PID` traces beside its target, where a report of
/// the link does not look.
pub fn check_trace_output(path: &Path) -> Result<(), String> {
    let meta = match fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("cannot look at {}: {e}", path.display())),
        Ok(m) => m,
    };
    if meta.is_file() {
        return Ok(());
    }
    let what = if meta.file_type().is_symlink() {
        match fs::read_link(path) {
            Ok(target) => format!("a symbolic link (to {}): give the file's own path", target.display()),
            Err(_) => "a symbolic link: give the file's own path".to_string(),
        }
    } else if meta.is_dir() {
        "a directory: give a file name such as trace.mtl".to_string()
    } else {
        "not a regular file (a device, FIFO or socket): give a file name such as trace.mtl".to_string()
    };
    Err(format!("{} is {what}; a trace is a file mtlab writes and renames into place", path.display()))
}

/// The file header of `src` (its first `header_end` bytes), verbatim but
/// for the version: rewritten records use this version's layouts, which
/// readers of older versions do not know.
pub(crate) fn header_at_this_version(src: &File, path: &Path, header_end: u64) -> Result<Vec<u8>, TraceError> {
    let mut head = vec![0u8; header_end as usize];
    src.read_exact_at(&mut head, 0).map_err(TraceError::io(path))?;
    let version = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
    if version < TRACE_VERSION {
        head[8..12].copy_from_slice(&TRACE_VERSION.to_le_bytes());
    }
    Ok(head)
}

/// Copies record `rec` of the trace `src` (at `src_path`), header
/// included, to `out` (at `out_path`); its size in the file.
pub(crate) fn copy_record(
    src: &mut File,
    src_path: &Path,
    rec: &RecHdr,
    out: &mut impl Write,
    out_path: &Path,
) -> Result<u64, TraceError> {
    src.seek(SeekFrom::Start(rec.offset)).map_err(TraceError::io(src_path))?;
    let n = RECORD_HEADER as u64 + rec.payload_len as u64;
    let copied = io::copy(&mut src.take(n), out).map_err(TraceError::io(out_path))?;
    if copied != n {
        let e = io::Error::new(io::ErrorKind::UnexpectedEof, "the trace shrank while being rewritten");
        return Err(TraceError::io(src_path)(e));
    }
    Ok(n)
}

impl TempGuard {
    /// Replaces `dst` with the finished rewrite in `file` (this guard's temp
    /// file, all written): given the read and write bits of `perms`, synced to
    /// disk when `durable`, renamed.
    pub(crate) fn install(
        mut self,
        file: File,
        perms: Option<fs::Permissions>,
        durable: bool,
        dst: &Path,
    ) -> Result<(), TraceError> {
        let tmp_path = self.0.clone().expect("an armed guard");
        if let Some(p) = perms {
            // The original's read and write bits only: no set-id, sticky or
            // execute bit is carried over to a file this process owns.
            use std::os::unix::fs::PermissionsExt;
            let _ = file.set_permissions(fs::Permissions::from_mode(p.mode() & 0o666));
        }
        if durable {
            file.sync_data().map_err(TraceError::io(&tmp_path))?;
        }
        if self.1 {
            // Named only now, for the rename: for microseconds, not the run.
            if crate::platform::safe_fs::open_owned_regular(&tmp_path, false).is_ok() {
                let _ = fs::remove_file(&tmp_path);
            }
            link_unnamed(&file, &tmp_path).map_err(TraceError::io(&tmp_path))?;
        }
        drop(file);
        fs::rename(&tmp_path, dst).map_err(TraceError::io(dst))?;
        self.0 = None;
        Ok(())
    }
}

impl Drop for TempGuard {
    fn drop(&mut self) {
        // An unnamed file goes with its last descriptor; after a failed
        // install its name may exist (linked, not renamed).
        if let Some(p) = self.0.take() {
            if !self.1 || crate::platform::safe_fs::open_owned_regular(&p, false).is_ok() {
                let _ = fs::remove_file(p);
            }
        }
    }
}

