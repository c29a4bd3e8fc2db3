//! Creating and opening files where another local user may have planted
//! something first. mtlab often runs as root (the affinity study needs it),
//! and several of its names are predictable (`names`): every file it creates
//! there is created new (`O_EXCL`, no symlink followed), and every file it
//! reads or writes there must be a regular file owned by the caller.
//!
//! Directories whose contents mtlab trusts (the cache of native parts it
//! runs, the affinity journals it acts on) are checked whole: each component
//! of the canonical path is owned by root or the caller and writable by no one
//! else, so nobody can swap a component between the check and the use.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn denied(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, what)
}

/// Frees the file system blocks of `file` from `from` to `to` (its size
/// unchanged; the range reads as zeros): the raw trace's bytes once a
/// rewrite or an analysis holds them.
pub fn punch_hole(file: &File, from: u64, to: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: fallocate on a descriptor the caller owns, over a range of it;
    // failure changes nothing.
    let r = unsafe {
        libc::fallocate(file.as_raw_fd(), libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, from as libc::off_t, (to - from) as libc::off_t)
    };
    if r == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Creates `path` as a new file with `mode` (masked by the umask): fails if
/// anything — a file, a symlink, a FIFO — is already there.
pub fn create_new(path: &Path, mode: u32) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Opens an existing `path` for reading (and writing with `write`) only if it
/// is a regular file owned by the caller, not a symlink; a FIFO or device
/// does not block the open (`O_NONBLOCK`) and is refused after it.
pub fn open_owned_regular(path: &Path, write: bool) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let m = file.metadata()?;
    if !m.file_type().is_file() {
        return Err(denied(format!("{} is not a regular file", path.display())));
    }
    if m.uid() != euid() {
        return Err(denied(format!("{} belongs to user {}, not to this user", path.display(), m.uid())));
    }
    // SAFETY: clearing O_NONBLOCK on a descriptor this function owns.
    unsafe {
        use std::os::fd::AsRawFd;
        let fd = file.as_raw_fd();
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(fd, libc::F_SETFL, fl & !libc::O_NONBLOCK);
        }
    }
    Ok(file)
}

/// Reads at most `limit` bytes of an owned regular file (`open_owned_regular`).
pub fn read_owned_regular(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    open_owned_regular(path, false)?.take(limit).read_to_end(&mut out)?;
    Ok(out)
}

/// Why a directory entry `m` at `path` cannot be trusted, if it cannot: it
/// must be a directory (not a symlink) owned by root or the caller, and
/// writable by no one else — except a root-owned sticky directory such as
/// `/tmp`, where others cannot rename or remove what they do not own.
fn untrusted_dir(path: &Path, m: &std::fs::Metadata) -> Option<String> {
    let me = euid();
    if m.file_type().is_symlink() || !m.is_dir() {
        return Some(format!("{} is not a directory", path.display()));
    }
    if m.uid() != 0 && m.uid() != me {
        return Some(format!("{} belongs to user {}", path.display(), m.uid()));
    }
    let sticky_root = m.mode() & libc::S_ISVTX != 0 && m.uid() == 0;
    if m.mode() & 0o022 != 0 && !sticky_root {
        return Some(format!("{} can be written by other users", path.display()));
    }
    None
}

/// The canonical path of `dir` if every component of it is a directory that
/// no other user can change (see `untrusted_dir`); the last component must
/// be the caller's own. Use the returned path, not `dir`.
pub fn trusted_dir(dir: &Path) -> io::Result<PathBuf> {
    let canonical = std::fs::canonicalize(dir)?;
    let mut at = PathBuf::new();
    for c in canonical.components() {
        at.push(c);
        let m = std::fs::symlink_metadata(&at)?;
        if let Some(why) = untrusted_dir(&at, &m) {
            return Err(denied(why));
        }
    }
    let m = std::fs::symlink_metadata(&canonical)?;
    if m.uid() != euid() || m.mode() & 0o022 != 0 {
        return Err(denied(format!("{} is not this user's private directory", canonical.display())));
    }
    Ok(canonical)
}

/// Creates `dir` and any missing parents with mode 0700 (parents that exist
/// are left as they are), then checks it as `trusted_dir` does.
pub fn private_dir(dir: &Path) -> io::Result<PathBuf> {
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    trusted_dir(dir)
}

/// Whether the kernel's `fs.protected_symlinks`/`protected_fifos` rule
/// would let the caller use the entry `m` in the directory `dir` (many
/// containers switch those checks off): an entry in a sticky directory every
/// user can write (`/tmp`) only if it is the caller's or the directory
/// owner's.
fn usable_in(dir: &Path, m: &std::fs::Metadata) -> bool {
    let Ok(d) = std::fs::metadata(dir) else { return false };
    let shared = d.mode() & libc::S_ISVTX != 0 && d.mode() & 0o002 != 0;
    !shared || m.uid() == euid() || m.uid() == d.uid()
}

fn parent_of(path: &Path) -> &Path {
    path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// A file the user named, being written: a new file beside it (created new,
/// see `create_new`) that `commit` renames over the name. So a symlink or a
/// hard link someone left at the name is replaced, never written through,
/// and a reader never sees half a file. A device or FIFO at the name
/// (`/dev/null`, `/dev/stdout`) is written in place instead.
pub struct Replacement {
    file: File,
    /// The temp file and the name it is renamed to; None when written in place.
    rename: Option<(PathBuf, PathBuf)>,
}

/// Starts writing `dst` (see `Replacement`); a new file gets `mode` (masked
/// by the umask). A symlink or FIFO another user owns in a shared sticky
/// directory is refused rather than followed.
pub fn replace(dst: &Path, mode: u32) -> io::Result<Replacement> {
    replace_at(dst, mode, 8)
}

fn replace_at(dst: &Path, mode: u32, links_left: u32) -> io::Result<Replacement> {
    let m = match std::fs::symlink_metadata(dst) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return replacement_beside(dst, mode),
        Err(e) => return Err(e),
        Ok(m) => m,
    };
    let ft = m.file_type();
    if ft.is_file() {
        return replacement_beside(dst, mode);
    }
    if ft.is_dir() {
        return Err(io::Error::new(io::ErrorKind::IsADirectory, format!("{} is a directory", dst.display())));
    }
    if !usable_in(parent_of(dst), &m) {
        let what = if ft.is_symlink() { "a symbolic link" } else { "a special file" };
        return Err(denied(format!(
            "{} is {what} of user {} in a directory every user can write: not used (someone may have planted it); \
             remove it or give another name",
            dst.display(),
            m.uid()
        )));
    }
    if ft.is_symlink() {
        if links_left == 0 {
            return Err(io::Error::from_raw_os_error(libc::ELOOP));
        }
        let target = std::fs::read_link(dst)?;
        return replace_at(&parent_of(dst).join(target), mode, links_left - 1);
    }
    let file = OpenOptions::new().write(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(dst)?;
    Ok(Replacement { file, rename: None })
}

fn replacement_beside(dst: &Path, mode: u32) -> io::Result<Replacement> {
    let pid = std::process::id();
    let mut last = None;
    // Another user may have taken a predictable name: try a few.
    for k in 0..8 {
        let tmp = crate::platform::names::temp_beside(dst, &format!("out{k}"), pid);
        if open_owned_regular(&tmp, false).is_ok() {
            let _ = std::fs::remove_file(&tmp); // our own, left by a killed run of this pid
        }
        match create_new(&tmp, mode) {
            Ok(file) => return Ok(Replacement { file, rename: Some((tmp, dst.to_path_buf())) }),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.expect("tried at least once"))
}

impl Replacement {
    /// The file being written.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Puts the written file in place.
    pub fn commit(mut self) -> io::Result<()> {
        match self.rename.take() {
            Some((tmp, dst)) => std::fs::rename(&tmp, &dst).inspect_err(|_| {
                let _ = std::fs::remove_file(&tmp);
            }),
            None => Ok(()),
        }
    }
}

impl io::Write for Replacement {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl Drop for Replacement {
    fn drop(&mut self) {
        if let Some((tmp, _)) = self.rename.take() {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// Writes `bytes` to `dst` whole (see `Replacement`).
pub fn write_replacing(dst: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    use std::io::Write;
    let mut r = replace(dst, mode)?;
    r.write_all(bytes)?;
    r.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_new_refuses_anything_already_there() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("victim");
        std::fs::write(&target, b"keep").unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(create_new(&link, 0o600).is_err(), "a symlink is not followed");
        assert!(create_new(&target, 0o600).is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        let fresh = d.path().join("fresh");
        create_new(&fresh, 0o600).unwrap();
        assert_eq!(std::fs::metadata(&fresh).unwrap().mode() & 0o077, 0);
    }

    #[test]
    fn owned_regular_refuses_links_fifos_and_devices() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("f");
        std::fs::write(&file, b"abc").unwrap();
        assert_eq!(read_owned_regular(&file, 2).unwrap(), b"ab");
        let link = d.path().join("l");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        assert!(read_owned_regular(&link, 10).is_err());
        let fifo = d.path().join("p");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: c is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // Would block forever without O_NONBLOCK (no writer).
        assert!(read_owned_regular(&fifo, 10).is_err());
    }

    #[test]
    fn a_replacement_never_writes_through_a_planted_name() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        // A hard link at the name: replaced, the other name keeps its bytes.
        let hard = d.path().join("hard");
        std::fs::hard_link(&victim, &hard).unwrap();
        write_replacing(&hard, b"new", 0o600).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert_eq!(std::fs::read(&hard).unwrap(), b"new");
        assert_eq!(std::fs::metadata(&hard).unwrap().mode() & 0o777, 0o600);
        // Our own link is followed: its target is what the user meant.
        let mine = d.path().join("mine");
        std::os::unix::fs::symlink("hard", &mine).unwrap();
        write_replacing(&mine, b"again", 0o600).unwrap();
        assert_eq!(std::fs::read(&hard).unwrap(), b"again");
        assert!(std::fs::symlink_metadata(&mine).unwrap().file_type().is_symlink());
        // A device is written in place.
        write_replacing(Path::new("/dev/null"), b"x", 0o600).unwrap();
        assert!(!std::fs::symlink_metadata("/dev/null").unwrap().is_file());
        // Another user's link in a sticky directory everyone can write: refused.
        if euid() == 0 {
            let planted = d.path().join("planted");
            std::os::unix::fs::symlink(&victim, &planted).unwrap();
            std::os::unix::fs::lchown(&planted, Some(65534), Some(65534)).unwrap();
            let err = write_replacing(&planted, b"evil", 0o600).unwrap_err();
            assert!(err.to_string().contains("someone may have planted it"), "{err}");
            assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        }
        let left: Vec<_> = std::fs::read_dir(d.path()).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().starts_with('.')).collect();
        assert!(left.is_empty(), "no temp file left: {left:?}");
    }

    #[test]
    fn a_trusted_dir_needs_every_component_private() {
        let d = tempfile::tempdir().unwrap();
        let mine = private_dir(&d.path().join("a/b")).unwrap();
        assert!(mine.ends_with("a/b"));
        std::fs::set_permissions(d.path().join("a"), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        let err = trusted_dir(&d.path().join("a/b")).unwrap_err();
        assert!(err.to_string().contains("can be written by other users"), "{err}");
    }
}
