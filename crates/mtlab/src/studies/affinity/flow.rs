//! The built-in TCP flow: a sender that sends with sendfile (zero copy, as
//! the source's) a 128 KiB file in memory, and a receiver that reads into a
//! 128 KiB buffer (iperf3's default read size), each pinned to its CPU: the
//! sender a thread of mtlab, the receiver a process of its own (mtlab again,
//! hidden subcommand `__affinity-receiver`), as iperf3's client and server are
//! two processes. The receiver may live in the study's network namespace.

use std::io::Read;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use super::net::Netns;
use crate::studies::StudyError;

/// Where the receiver listens and the sender connects.
pub struct Route<'a> {
    pub listen: Ipv4Addr,
    pub connect: Ipv4Addr,
    /// The receiver's namespace (None: this one).
    pub netns: Option<&'a Netns>,
}

/// What the receiver got, between its first and its last read.
#[derive(Debug, Clone, Copy)]
pub struct Delivered {
    pub bytes: u64,
    pub seconds: f64,
}

impl Delivered {
    pub fn gbps(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 * 8.0 / self.seconds / 1e9
        } else {
            0.0
        }
    }
}

const READ_SIZE: usize = 128 * 1024;
const PAGE: usize = 4096;
/// The file the sender sends, whole, over and over: one 128 KiB block, as
/// `iperf3 -Z` sends its buffer file (so the same pages stay cache-hot in both).
const SOURCE_SIZE: usize = 128 * 1024;
/// Longest wait for a connection or a read before the flow is called stuck.
const STUCK: Duration = Duration::from_secs(10);

/// The sender's data: a 128 KiB unlinked temporary file, made once per run.
pub struct Source {
    fd: OwnedFd,
}

impl Source {
    pub fn new() -> Result<Source, StudyError> {
        let err = |source| StudyError::Io { path: std::env::temp_dir(), source };
        // A file in the page cache of the temporary directory, as iperf3's:
        // splicing from it cost the sender less than from a memfd (shmem) here.
        let mut file = tempfile::tempfile().map_err(err)?;
        let block: Vec<u8> = (0..SOURCE_SIZE as u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
        std::io::Write::write_all(&mut file, &block).map_err(err)?;
        Ok(Source { fd: file.into() })
    }
}

/// Pins the calling thread to one CPU.
pub fn pin_thread(cpu: usize) -> std::io::Result<()> {
    crate::studies::child::pin_thread(&[cpu])
}

/// The receiver process's side: listens on `listen`, prints "port N", reads
/// one connection to its end and prints "delivered BYTES SECONDS".
pub fn receiver_main(listen: Ipv4Addr) -> Result<(), StudyError> {
    let fail = |e: String| StudyError::Output(format!("built-in flow receiver: {e}"));
    let listener = TcpListener::bind((listen, 0)).map_err(|e| fail(format!("cannot listen on {listen}: {e}")))?;
    let port = listener.local_addr().map_err(|e| fail(e.to_string()))?.port();
    // Its parent reads these lines; once the parent is gone (interrupted)
    // a failed write is no reason to panic.
    use std::io::Write as _;
    let say = |line: String| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}").and_then(|_| out.flush());
    };
    say(format!("port {port}"));
    let (conn, _) = accept(&listener, STUCK).map_err(fail)?;
    let d = read_flow(conn, None).map_err(fail)?;
    say(format!("delivered {} {}", d.bytes, d.seconds));
    Ok(())
}

/// Starts the receiver process on `app_cpu` (in the route's namespace);
/// returns it and its port.
fn spawn_receiver(route: &Route, app_cpu: usize) -> Result<(std::process::Child, std::io::Lines<std::io::BufReader<std::process::ChildStdout>>, u16), String> {
    use std::io::BufRead;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find mtlab's own binary: {e}"))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg(RECEIVER_COMMAND).arg(route.listen.to_string());
    cmd.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::inherit());
    crate::studies::child::pin_command(&mut cmd, &[app_cpu]);
    if let Some(ns) = route.netns {
        ns.put_command_in(&mut cmd);
    }
    let mut child = cmd.spawn().map_err(|e| format!("cannot start the receiver: {e}"))?;
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("piped")).lines();
    let port = lines.next().and_then(|l| l.ok()).and_then(|l| l.strip_prefix("port ").and_then(|p| p.trim().parse().ok()));
    match port {
        Some(p) => Ok((child, lines, p)),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            Err("the receiver did not start listening".into())
        }
    }
}

/// The hidden subcommand that runs `receiver_main`.
pub const RECEIVER_COMMAND: &str = "__affinity-receiver";

/// Waits up to `wait` for a connection.
fn accept(listener: &TcpListener, wait: Duration) -> Result<(TcpStream, std::net::SocketAddr), String> {
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let start = Instant::now();
    loop {
        match listener.accept() {
            Ok(c) => {
                c.0.set_nonblocking(false).map_err(|e| e.to_string())?;
                return Ok(c);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && start.elapsed() < wait => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(format!("no connection from the sender within {} s: {e}", wait.as_secs())),
        }
    }
}

/// Reads until the sender closes, or until `until` (then closes the connection).
fn read_flow(mut conn: TcpStream, until: Option<Instant>) -> Result<Delivered, String> {
    conn.set_read_timeout(Some(STUCK)).map_err(|e| e.to_string())?;
    // Page-aligned, as iperf3's mmap'd buffer: copies into a buffer 16 bytes
    // off a page (malloc's header) ran at less than half the speed here.
    let mut raw = vec![0u8; READ_SIZE + PAGE];
    let at = raw.as_ptr().align_offset(PAGE);
    let buf = &mut raw[at..at + READ_SIZE];
    let (mut first, mut last, mut bytes) = (None, Instant::now(), 0u64);
    loop {
        let n = conn.read(buf).map_err(|e| format!("receiving: {e}"))?;
        if n == 0 {
            break;
        }
        let now = Instant::now();
        // Bytes of the first read arrived before the clock started.
        if first.is_none() {
            first = Some(now);
        } else {
            bytes += n as u64;
        }
        last = now;
        if until.is_some_and(|u| now >= u) {
            let _ = conn.shutdown(std::net::Shutdown::Both);
            break;
        }
    }
    let seconds = first.map_or(0.0, |f| (last - f).as_secs_f64());
    Ok(Delivered { bytes, seconds })
}

/// A listening socket that outlives the cells, for a sender on another machine.
pub struct Inbound {
    listener: TcpListener,
    pub addr: std::net::SocketAddr,
}

impl Inbound {
    pub fn bind(addr: Ipv4Addr, port: u16) -> Result<Inbound, StudyError> {
        let listener = TcpListener::bind((addr, port)).map_err(|source| StudyError::Io { path: format!("{addr}:{port}").into(), source })?;
        let addr = listener.local_addr().map_err(|source| StudyError::Io { path: format!("{addr}:{port}").into(), source })?;
        Ok(Inbound { listener, addr })
    }
}

/// One flow from a sender elsewhere (`mtlab affinity --send-to`): the next
/// connection, read on `app_cpu` for `seconds`, then closed. Also returns
/// the sender's address.
pub fn receive_remote(inbound: &Inbound, app_cpu: usize, seconds: f64, wait: Duration) -> Result<(Delivered, std::net::SocketAddr), StudyError> {
    let fail = |e: String| StudyError::Output(format!("flow from a remote sender: {e}"));
    std::thread::scope(|s| {
        s.spawn(|| {
            pin_thread(app_cpu).map_err(|e| format!("cannot pin the receiver to CPU {app_cpu}: {e}"))?;
            let (conn, peer) = accept(&inbound.listener, wait)?;
            let d = read_flow(conn, Some(Instant::now() + Duration::from_secs_f64(seconds)))?;
            Ok((d, peer))
        })
        .join()
        .unwrap_or_else(|_| Err("the receiver panicked".into()))
        .map_err(fail)
    })
}

/// The sender side of `--steer irq`: connects to `to`, sends until the
/// receiver closes the connection, and connects again, until `stop` is set.
/// Reports each finished flow's bytes through `on_flow`.
pub fn send_forever(source: &Source, to: std::net::SocketAddr, stop: &std::sync::atomic::AtomicBool, mut on_flow: impl FnMut(u64)) -> Result<(), StudyError> {
    use std::sync::atomic::Ordering;
    while !stop.load(Ordering::Relaxed) {
        let sock = match TcpStream::connect_timeout(&to, Duration::from_secs(1)) {
            Ok(s) => s,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
        };
        let sent = send_on(source, &sock, None, stop).map_err(|e| StudyError::Output(format!("sending to {to}: {e}")))?;
        on_flow(sent);
    }
    Ok(())
}

fn send(source: &Source, to: (Ipv4Addr, u16), sender_cpu: usize, seconds: f64) -> Result<(), String> {
    pin_thread(sender_cpu).map_err(|e| format!("cannot pin the sender to CPU {sender_cpu}: {e}"))?;
    let sock = TcpStream::connect_timeout(&to.into(), STUCK).map_err(|e| format!("cannot connect to {}:{}: {e}", to.0, to.1))?;
    let never = std::sync::atomic::AtomicBool::new(false);
    send_on(source, &sock, Some(Instant::now() + Duration::from_secs_f64(seconds)), &never)?;
    sock.shutdown(std::net::Shutdown::Write).map_err(|e| format!("shutdown: {e}"))
}

/// Sends the source over and over until `deadline`, `stop`, or the receiver
/// closing the connection (a normal end without a deadline); returns the bytes sent.
fn send_on(source: &Source, sock: &TcpStream, deadline: Option<Instant>, stop: &std::sync::atomic::AtomicBool) -> Result<u64, String> {
    // Non-blocking sends, waiting in poll when the socket is full: iperf3's
    // way, which kept the receiver fed better than blocking sendfile here.
    sock.set_nonblocking(true).map_err(|e| e.to_string())?;
    let mut off: libc::off_t = 0;
    let mut sent = 0u64;
    let mut pfd = libc::pollfd { fd: sock.as_raw_fd(), events: libc::POLLOUT, revents: 0 };
    while deadline.is_none_or(|d| Instant::now() < d) && !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let left = SOURCE_SIZE - off as usize;
        // SAFETY: both descriptors are open for the whole call; off points to a live off_t.
        let n = unsafe { libc::sendfile(sock.as_raw_fd(), source.fd.as_raw_fd(), &mut off, left) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            match e.kind() {
                std::io::ErrorKind::Interrupted => continue,
                std::io::ErrorKind::WouldBlock => {
                    // SAFETY: pfd is a valid pollfd for the duration of the call.
                    unsafe { libc::poll(&mut pfd, 1, 100) };
                    continue;
                }
                std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset if deadline.is_none() => break,
                _ => return Err(format!("sendfile: {e}")),
            }
        }
        sent += n as u64;
        if off as usize >= SOURCE_SIZE {
            off = 0;
        }
    }
    sock.set_nonblocking(false).map_err(|e| e.to_string())?;
    Ok(sent)
}

/// Runs one flow of `seconds`: receiver on `app_cpu`, sender on `sender_cpu`.
pub fn run(route: &Route, source: &Source, app_cpu: usize, sender_cpu: usize, seconds: f64) -> Result<Delivered, StudyError> {
    let fail = |e: String| StudyError::Output(format!("built-in flow: {e}"));
    let (mut receiver, mut lines, port) = spawn_receiver(route, app_cpu).map_err(fail)?;
    let sent = std::thread::scope(|s| {
        s.spawn(move || send(source, (route.connect, port), sender_cpu, seconds)).join().unwrap_or_else(|_| Err("the sender panicked".into()))
    });
    if let Err(e) = sent {
        let _ = receiver.kill();
        let _ = receiver.wait();
        return Err(fail(e));
    }
    let result = lines.next().and_then(|l| l.ok()).unwrap_or_default();
    let status = receiver.wait().map_err(|e| fail(format!("the receiver: {e}")))?;
    let mut f = result.strip_prefix("delivered ").unwrap_or("").split_whitespace();
    match (f.next().and_then(|b| b.parse().ok()), f.next().and_then(|s| s.parse().ok())) {
        (Some(bytes), Some(seconds)) if status.success() => Ok(Delivered { bytes, seconds }),
        _ => Err(fail(format!("the receiver ended with {status} and no result"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remote_sender_reconnects_for_every_flow() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let src = Source::new().unwrap();
        let inbound = Inbound::bind(Ipv4Addr::LOCALHOST, 0).unwrap();
        let cpu = crate::study::env::allowed_cpus()[0];
        let stop = AtomicBool::new(false);
        let mut flows = Vec::new();
        let mut got = Vec::new();
        std::thread::scope(|s| {
            let sender = s.spawn(|| send_forever(&src, inbound.addr, &stop, |b| flows.push(b)));
            for _ in 0..2 {
                got.push(receive_remote(&inbound, cpu, 0.2, Duration::from_secs(10)));
            }
            // Stopped before any assertion, so a failure cannot leave the sender running.
            stop.store(true, Ordering::Relaxed);
            sender.join().unwrap().unwrap();
        });
        for g in got {
            let (d, peer) = g.unwrap();
            // The clock starts at the first read, a little after the 0.2 s began.
            assert!(d.bytes > 1 << 20 && d.seconds > 0.15 && d.seconds < 1.0, "{d:?}");
            assert!(peer.ip().is_loopback());
        }
        // Two flows ended by the receiver; a third may have started before the stop.
        assert!(flows.len() >= 2, "{flows:?}");
        assert!(flows[0] > 1 << 20);
    }
}
