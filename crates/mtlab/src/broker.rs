//! Trace files `mtlab record` makes for traced processes that cannot make
//! their own (the C side: `native/preload/broker.c`).
//!
//! A daemon drops privileges (setuid) or chroots, then forks its workers: a
//! worker can no longer create `ROOT.d/PID` (its new user may not write in the
//! trace's directory; inside the jail the path is gone), and a file it did
//! create would be another user's, which `record` refuses as planted. So the
//! program gets one end of a socket pair; a process that needs its file sends
//! a request carrying a socket for the answer, the kernel attaches its pid,
//! and this side creates `ROOT.d/PID[.N]` for that pid — new (`O_EXCL`, no link
//! followed), 0600, owned by mtlab's user like every other trace of the run —
//! and sends the descriptor back. When it cannot, the process is counted and
//! named (`Untraced`), and the report says so.
//!
//! Only holders of the socket can ask — the traced tree — and each only for
//! names of its own pid, which the kernel vouches for.
//!
//! Under `record --live` the same socket carries each traced image's
//! watermark page (a memfd, `mtlab-page1`): nothing is answered, the page
//! and the sender's pid go to the live analysis (`Broker::start`'s `pages`).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The request's first bytes (broker.c's BROKER_MAGIC, with its NUL).
const MAGIC: &[u8] = b"mtlab-open1\0";
/// A watermark page's message (broker.c's PAGE_MAGIC, with its NUL).
const PAGE_MAGIC: &[u8] = b"mtlab-page1\0";
/// Pages one run takes at most: a tree that sends more is read at the end.
const MAX_PAGES: usize = 65536;

/// A traced image's watermark page (`record --live`): the sender's pid, as
/// the kernel gives it, and the memfd.
pub type Page = (u32, OwnedFd);
/// Files one run's broker makes at most: a program that asks for more is
/// counted, not served.
const MAX_FILES: usize = 65536;
/// Untraced processes named one by one (in RUNINFO and the JSON report);
/// the rest are only counted.
pub const MAX_NAMED: usize = 100;
/// Of those, named in a line of text.
const SHOWN: usize = 10;

/// A traced process that got no trace file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Untraced {
    pub pid: u32,
    /// Its command name when it asked (`/proc/PID/comm`), empty if unknown.
    pub command: String,
    /// Why: the error of creating its file (errno).
    pub errno: i32,
}

impl Untraced {
    /// The reason as a sentence fragment.
    pub fn reason(&self) -> String {
        io::Error::from_raw_os_error(self.errno).to_string()
    }
}

/// What the broker saw in a run.
#[derive(Debug, Default)]
pub struct Served {
    /// Files it made.
    pub files: usize,
    /// The first `MAX_NAMED` processes it could not give a file.
    pub untraced: Vec<Untraced>,
    /// All of them.
    pub untraced_count: u64,
}

/// The broker of one run: a thread answering the program's requests.
pub struct Broker {
    /// The program's end, inherited by it at `fd()`; closed in `stop`.
    theirs: Option<OwnedFd>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Served>,
}

fn last_err() -> io::Error {
    io::Error::last_os_error()
}

impl Broker {
    /// Starts the broker for the traces of `root`; the watermark pages the
    /// traced images send go to `pages` (none: they are closed).
    pub fn start(root: &Path, pages: Option<std::sync::mpsc::Sender<Page>>) -> io::Result<Broker> {
        let mut fds = [0; 2];
        // SAFETY: socketpair fills two descriptors, owned by OwnedFds below.
        if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) } != 0 {
            return Err(last_err());
        }
        // SAFETY: both were just opened and belong to nobody else.
        let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let one: libc::c_int = 1;
        // SAFETY: a valid socket and an int option of the right size.
        let r = unsafe {
            libc::setsockopt(
                ours.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PASSCRED,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(last_err());
        }
        let theirs = inheritable_high(theirs)?;
        let stop = Arc::new(AtomicBool::new(false));
        let root = root.to_path_buf();
        let flag = stop.clone();
        let thread = std::thread::Builder::new().name("mtlab-broker".into()).spawn(move || serve(ours, &root, &flag, pages))?;
        Ok(Broker { theirs: Some(theirs), stop, thread })
    }

    /// The descriptor number the program inherits (MTLAB_BROKER_FD).
    pub fn fd(&self) -> RawFd {
        self.theirs.as_ref().map_or(-1, |f| f.as_raw_fd())
    }

    /// Answers what is already asked, then stops: later requests fail at once
    /// (the socket is closed), and their processes stay untraced.
    pub fn stop(mut self) -> Served {
        self.theirs = None;
        self.stop.store(true, Ordering::Release);
        self.thread.join().unwrap_or_default()
    }
}

/// `fd` at a high number (899 or the next free one), not close-on-exec, so
/// the program and the images it execs inherit it out of the way of their
/// own descriptors (the library's trace takes 900 or above).
fn inheritable_high(fd: OwnedFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD on a valid descriptor; the new one is owned below.
    let high = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD, 899) };
    if high >= 0 {
        // SAFETY: just made, owned by nobody else.
        return Ok(unsafe { OwnedFd::from_raw_fd(high) });
    }
    // The descriptor limit is below 899: where it is.
    // SAFETY: clearing FD_CLOEXEC on a descriptor this function owns.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, 0) } != 0 {
        return Err(last_err());
    }
    Ok(fd)
}

fn serve(ours: OwnedFd, root: &Path, stop: &AtomicBool, pages: Option<std::sync::mpsc::Sender<Page>>) -> Served {
    let mut served = Served::default();
    let mut pages_sent = 0usize;
    loop {
        let stopping = stop.load(Ordering::Acquire);
        let mut p = libc::pollfd { fd: ours.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut p, 1, if stopping { 0 } else { 50 }) };
        if ready < 0 && last_err().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        if ready <= 0 {
            if stopping {
                return served;
            }
            continue;
        }
        match receive(&ours) {
            Some(Message::Open(req)) => answer(req, root, &mut served),
            Some(Message::Page(pid, fd)) => {
                if let Some(tx) = pages.as_ref().filter(|_| pages_sent < MAX_PAGES) {
                    pages_sent += 1;
                    let _ = tx.send((pid, fd));
                }
            }
            None if p.revents & (libc::POLLHUP | libc::POLLERR) != 0 && stopping => return served,
            None => {}
        }
    }
}

/// One request: the asking process's pid (from the kernel), the socket for
/// the answer, and the error of its own attempt.
struct Request {
    pid: u32,
    reply: OwnedFd,
    own_errno: i32,
}

enum Message {
    Open(Request),
    Page(u32, OwnedFd),
}

fn receive(ours: &OwnedFd) -> Option<Message> {
    let mut data = [0u8; 64];
    // Room for a few descriptors (a request sends one; extra ones are closed)
    // and the credentials.
    let mut control = [0u64; 64];
    let mut iov = libc::iovec { iov_base: data.as_mut_ptr().cast(), iov_len: data.len() };
    // SAFETY: msghdr is plain data; zero is a valid start.
    let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
    m.msg_iov = &mut iov;
    m.msg_iovlen = 1;
    m.msg_control = control.as_mut_ptr().cast();
    m.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: m points at buffers that live through the call.
    let n = unsafe { libc::recvmsg(ours.as_raw_fd(), &mut m, libc::MSG_CMSG_CLOEXEC | libc::MSG_DONTWAIT) };
    if n <= 0 {
        return None;
    }
    let mut fds: Vec<OwnedFd> = Vec::new();
    let mut pid = None;
    // SAFETY: the CMSG macros walk the control buffer recvmsg filled, within msg_controllen.
    unsafe {
        let mut h = libc::CMSG_FIRSTHDR(&m);
        while !h.is_null() {
            let data_ptr = libc::CMSG_DATA(h);
            let len = (*h).cmsg_len as usize - (data_ptr as usize - h as usize);
            if (*h).cmsg_level == libc::SOL_SOCKET && (*h).cmsg_type == libc::SCM_RIGHTS {
                for i in 0..len / std::mem::size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned(data_ptr.cast::<RawFd>().add(i));
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            } else if (*h).cmsg_level == libc::SOL_SOCKET && (*h).cmsg_type == libc::SCM_CREDENTIALS {
                let cred = std::ptr::read_unaligned(data_ptr.cast::<libc::ucred>());
                pid = Some(cred.pid as u32);
            }
            h = libc::CMSG_NXTHDR(&m, h);
        }
    }
    let n = n as usize;
    let pid = pid.filter(|&p| p > 0)?;
    if fds.len() != 1 {
        return None;
    }
    if data[..n.min(data.len())] == *PAGE_MAGIC {
        return Some(Message::Page(pid, fds.pop()?));
    }
    if n < MAGIC.len() + 4 || &data[..MAGIC.len()] != MAGIC {
        return None;
    }
    let own_errno = i32::from_ne_bytes(data[MAGIC.len()..MAGIC.len() + 4].try_into().ok()?);
    Some(Message::Open(Request { pid, reply: fds.pop()?, own_errno }))
}

fn answer(req: Request, root: &Path, served: &mut Served) {
    let made = if served.files >= MAX_FILES { Err(libc::EMFILE) } else { create_for(root, req.pid) };
    match made {
        Ok((file, path)) => {
            served.files += 1;
            if send_file(&req.reply, &file, &path).is_err() {
                // It gave up waiting: the empty file goes.
                let _ = std::fs::remove_file(&path);
            }
        }
        Err(errno) => {
            // Its own attempt's error says more than ours when ours only
            // repeats a refusal it had already met.
            let errno = if req.own_errno > 0 && errno == libc::EEXIST { req.own_errno } else { errno };
            served.untraced_count += 1;
            if served.untraced.len() < MAX_NAMED {
                let command = std::fs::read_to_string(format!("/proc/{}/comm", req.pid)).unwrap_or_default().trim_end().to_string();
                served.untraced.push(Untraced { pid: req.pid, command, errno });
            }
        }
    }
}

/// Creates `ROOT.d/PID`, or `ROOT.d/PID.N` when an earlier image of the pid
/// has that name, as the library itself names them.
fn create_for(root: &Path, pid: u32) -> Result<(std::fs::File, PathBuf), i32> {
    for k in 0..1000u32 {
        let path = crate::platform::names::child_trace(root, pid, k);
        match crate::platform::safe_fs::create_new(&path, 0o600) {
            Ok(f) => return Ok((f, path)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e.raw_os_error().unwrap_or(libc::EIO)),
        }
    }
    Err(libc::EEXIST)
}

fn send_file(reply: &OwnedFd, file: &std::fs::File, path: &Path) -> io::Result<()> {
    let name = path.as_os_str().as_encoded_bytes();
    let mut iov = libc::iovec { iov_base: name.as_ptr() as *mut libc::c_void, iov_len: name.len() };
    let mut control = [0u64; 4];
    // SAFETY: msghdr is plain data; zero is a valid start.
    let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
    m.msg_iov = &mut iov;
    m.msg_iovlen = 1;
    m.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is a pure computation.
    m.msg_controllen = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    // SAFETY: the control buffer holds one header with one descriptor
    // (msg_controllen was set to its space above); sendmsg reads the buffers only.
    let sent = unsafe {
        let h = libc::CMSG_FIRSTHDR(&m);
        (*h).cmsg_level = libc::SOL_SOCKET;
        (*h).cmsg_type = libc::SCM_RIGHTS;
        (*h).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(h).cast::<RawFd>(), file.as_raw_fd());
        libc::sendmsg(reply.as_raw_fd(), &m, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT)
    };
    if sent < 0 {
        return Err(last_err());
    }
    Ok(())
}

/// The processes of a run that got no trace file, in one line: the `named`
/// ones, of `count` in all.
pub fn summary(named: &[Untraced], count: u64) -> String {
    let shown: Vec<String> = named
        .iter()
        .take(SHOWN)
        .map(|u| {
            let cmd = if u.command.is_empty() { String::new() } else { format!(" ({})", u.command) };
            format!("{}{cmd}: {}", u.pid, u.reason())
        })
        .collect();
    let more = count.saturating_sub(shown.len() as u64);
    let more = if more > 0 { format!("; and {more} more") } else { String::new() };
    format!(
        "{count} process(es) of the run were not traced — no trace file could be made for them, so their calls are in \
         no trace: {}{more}",
        shown.join("; ")
    )
}

/// The RUNINFO value of the untraced processes (`keys::UNTRACED`): entries
/// `PID:ERRNO:COMMAND` separated by `/` (a command's `/` becomes `_`).
pub fn encode(list: &[Untraced]) -> String {
    list.iter().map(|u| format!("{}:{}:{}", u.pid, u.errno, u.command.replace('/', "_"))).collect::<Vec<_>>().join("/")
}

/// The entries of a RUNINFO value; those that do not parse are left out.
pub fn decode(value: &str) -> Vec<Untraced> {
    value
        .split('/')
        .filter_map(|e| {
            let mut parts = e.splitn(3, ':');
            let pid = parts.next()?.parse().ok()?;
            let errno = parts.next()?.parse().ok()?;
            Some(Untraced { pid, errno, command: parts.next()?.to_string() })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untraced_list_round_trips() {
        let list = vec![
            Untraced { pid: 12, command: "worker:1".into(), errno: libc::EACCES },
            Untraced { pid: 13, command: "a/b".into(), errno: libc::ENOSPC },
        ];
        let back = decode(&encode(&list));
        assert_eq!(back[0], list[0]);
        assert_eq!(back[1].command, "a_b");
        assert!(decode("x:y/7").is_empty());
    }

    #[test]
    fn a_file_is_made_for_the_asking_pid_only_and_never_over_another() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("t.mtl");
        std::fs::create_dir(dir.path().join("t.mtl.d")).unwrap();
        std::fs::write(dir.path().join("t.mtl.d/42"), b"x").unwrap();
        let (_, path) = create_for(&root, 42).unwrap();
        assert_eq!(path, dir.path().join("t.mtl.d/42.1"));
        assert_eq!(std::fs::read(dir.path().join("t.mtl.d/42")).unwrap(), b"x");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    }
}
