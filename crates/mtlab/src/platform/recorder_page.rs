//! A page `mtlab record` shares with `mtlab ctl` about the program it runs
//! (`/dev/shm/mtlab-flight-PID`, `/dev/shm/mtlab-live-PID`): the recorder's
//! own file (0600, created new, no link followed), which `ctl` uses only
//! when it is this user's regular file, carries the page's magic, and the
//! recorder whose pid it holds is alive and is the program's parent (or an ancestor).

use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::Ordering;

use super::shared_page::SharedPage;

/// Where a page keeps its magic and its recorder's pid.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    pub size: usize,
    pub magic: u64,
    pub off_magic: u32,
    pub off_recorder: u32,
}

/// Why `ctl` does not use a page.
#[derive(Debug)]
pub enum OpenError {
    /// There is none, or its recorder has ended: the program is not recorded that way.
    Missing,
    NotIts(String),
}

/// Makes the page at `path` for this recorder. A page of this user's at
/// the name whose recorder is gone is replaced; anything else there is an error.
pub fn create(path: &Path, l: &Layout) -> std::io::Result<SharedPage> {
    create_filled(path, l, |_| {})
}

/// `create`, with `fill` writing the page's own fields before its magic
/// makes it visible to `ctl`.
pub fn create_filled(path: &Path, l: &Layout, fill: impl FnOnce(&SharedPage)) -> std::io::Result<SharedPage> {
    if let Ok(f) = super::safe_fs::open_owned_regular(path, true) {
        let whole = f.metadata().is_ok_and(|m| m.len() >= l.size as u64);
        let stale = !whole || SharedPage::map(&f, l.size).map(|p| recorder_alive(&p, l).is_none()).unwrap_or(true);
        if stale {
            let _ = std::fs::remove_file(path);
        }
    }
    // Read-write (a shared mapping needs both), new, no link followed.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    // SAFETY: ftruncate on a descriptor this function owns.
    let sized = unsafe { libc::ftruncate(f.as_raw_fd(), l.size as libc::off_t) } == 0;
    let page = match sized.then(|| SharedPage::map(&f, l.size)) {
        Some(Ok(p)) => p,
        Some(Err(e)) => {
            let _ = std::fs::remove_file(path);
            return Err(e);
        }
        None => {
            let e = std::io::Error::last_os_error();
            let _ = std::fs::remove_file(path);
            return Err(e);
        }
    };
    page.u64_at(l.off_recorder).store(std::process::id() as u64, Ordering::Relaxed);
    fill(&page);
    page.u64_at(l.off_magic).store(l.magic, Ordering::Release);
    Ok(page)
}

/// The page at `path` of the recorder of program `pid`, checked.
pub fn open(pid: u32, path: &Path, l: &Layout) -> Result<SharedPage, OpenError> {
    let f = match super::safe_fs::open_owned_regular(path, true) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(OpenError::Missing),
        Err(e) => return Err(OpenError::NotIts(e.to_string())),
    };
    if f.metadata().map(|m| m.len()).unwrap_or(0) < l.size as u64 {
        return Err(OpenError::NotIts("it is shorter than a page".into()));
    }
    let page = SharedPage::map(&f, l.size).map_err(|e| OpenError::NotIts(e.to_string()))?;
    // A page whose recorder has ended is as good as none: a recorder killed
    // outright leaves its page behind, and its pid may be reused since by a
    // program recorded another way (the next recorder of that pid replaces it).
    let recorder = recorder_alive(&page, l).ok_or(OpenError::Missing)?;
    if !descends_from(pid, recorder) && !attached(pid) {
        return Err(OpenError::NotIts(format!("process {pid} is neither a descendant of the recorder {recorder} nor attached to by mtlab")));
    }
    Ok(page)
}

/// The recorder's pid when it is alive.
fn recorder_alive(page: &SharedPage, l: &Layout) -> Option<u32> {
    if page.u64_at(l.off_magic).load(Ordering::Acquire) != l.magic {
        return None;
    }
    let pid = page.u64_at(l.off_recorder).load(Ordering::Relaxed) as u32;
    super::process::pid_alive(pid).then_some(pid)
}

/// `record --pid PID` is attached to `pid`: its library is in the process's
/// maps (the recorder is then not the process's parent).
pub fn attached(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| m.lines().any(|l| l.contains("/libmtlab_attach") || l.contains("/mtlab-attach-")))
}

/// Whether `pid` is `ancestor`'s child, or a child's child and so on: a
/// process that outlived the program `record --live` ran is its child
/// (record is their subreaper) or below one that is.
fn descends_from(pid: u32, ancestor: u32) -> bool {
    let mut at = pid;
    for _ in 0..64 {
        match parent_of(at) {
            Some(p) if p == ancestor => return true,
            Some(p) if p > 1 => at = p,
            _ => return false,
        }
    }
    false
}

/// The parent of `pid`, from /proc/PID/stat.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

/// The program `mtlab ctl PID` means when `page_of(program)` exists: PID
/// itself, or the one child of PID (a `mtlab record`, `$!`) that has one.
pub fn recorded_pid(pid: u32, page_of: impl Fn(u32) -> std::path::PathBuf) -> Option<u32> {
    pid_or_child_with(pid, |p| std::fs::symlink_metadata(page_of(p)).is_ok())
}

/// PID when `has(PID)`; else the one child of PID for which `has` holds
/// (what `$!` names after `mtlab record … &` is the recorder, not the program).
pub fn pid_or_child_with(pid: u32, has: impl Fn(u32) -> bool) -> Option<u32> {
    if has(pid) {
        return Some(pid);
    }
    let found: Vec<u32> = super::process::children_of(pid).into_iter().filter(|&c| has(c)).collect();
    match found[..] {
        [one] => Some(one),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Layout = Layout { size: 4096, magic: 0x6d74_6c61_6274_6573, off_magic: 0, off_recorder: 8 };

    #[test]
    fn a_page_whose_recorder_has_ended_reads_as_none() {
        let dir = std::env::temp_dir().join(format!("mtlab-recorder-page-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let path = dir.join("page");
        let page = create(&path, &L).unwrap();
        // Our own page: alive, but this test is not the program's parent.
        assert!(matches!(open(1, &path, &L), Err(OpenError::NotIts(_))));
        // The recorder gone (a reaped child's pid): as if there were no page.
        let gone = std::process::Command::new("true").spawn().unwrap();
        let gone_pid = gone.id();
        gone.wait_with_output().unwrap();
        page.u64_at(L.off_recorder).store(gone_pid as u64, Ordering::Relaxed);
        assert!(matches!(open(1, &path, &L), Err(OpenError::Missing)));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
