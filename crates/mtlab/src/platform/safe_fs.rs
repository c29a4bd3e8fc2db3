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
    fn a_trusted_dir_needs_every_component_private() {
        let d = tempfile::tempdir().unwrap();
        let mine = private_dir(&d.path().join("a/b")).unwrap();
        assert!(mine.ends_with("a/b"));
        std::fs::set_permissions(d.path().join("a"), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        let err = trusted_dir(&d.path().join("a/b")).unwrap_err();
        assert!(err.to_string().contains("can be written by other users"), "{err}");
    }
}
