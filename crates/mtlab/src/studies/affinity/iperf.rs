//! iperf3 as the flow's generator: a one-off server (`-s -1`) pinned to the
//! application CPU, inside the study's namespace when there is one, and a
//! zero-copy client (`-Z`, sendfile) pinned to the sender's CPU. The
//! receiver's figure is iperf3's own `sum_received`.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::flow::{Delivered, Route};
use crate::studies::child;
use crate::studies::StudyError;

/// iperf3 if installed, with its version.
pub fn find() -> Result<(PathBuf, String), StudyError> {
    let path = crate::platform::process::find_in_path("iperf3")
        .ok_or_else(|| StudyError::Config("--generator iperf3: iperf3 is not installed (Debian: apt-get install iperf3)".into()))?;
    let out = Command::new(&path).arg("--version").output().map_err(|source| StudyError::Spawn { what: "iperf3 --version".into(), source })?;
    let version = String::from_utf8_lossy(&out.stdout).split_whitespace().nth(1).unwrap_or("unknown").to_string();
    Ok((path, version))
}

/// A TCP port nobody listens on in this namespace (the study's own namespace has none in use).
fn free_port() -> Result<u16, StudyError> {
    let l = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|source| StudyError::Io { path: "127.0.0.1:0".into(), source })?;
    Ok(l.local_addr().map_err(|source| StudyError::Io { path: "127.0.0.1:0".into(), source })?.port())
}

/// Whether process `pid` (seen in its own namespace) has a TCP socket listening on `port`.
fn listening(pid: u32, port: u16) -> bool {
    let want = format!(":{port:04X}");
    // Columns: sl, local_address (HEXIP:HEXPORT), rem_address, st (0A is LISTEN).
    let listens = |l: &str| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 3 && f[1].ends_with(&want) && f[3] == "0A"
    };
    ["tcp", "tcp6"]
        .iter()
        .any(|t| std::fs::read_to_string(format!("/proc/{pid}/net/{t}")).is_ok_and(|s| s.lines().skip(1).any(listens)))
}

/// Runs one iperf3 test of `seconds`; server on `app_cpu`, client on `sender_cpu`.
pub fn run(iperf3: &Path, route: &Route, app_cpu: usize, sender_cpu: usize, seconds: f64) -> Result<Delivered, StudyError> {
    let port = if route.netns.is_some() { 5201 } else { free_port()? };
    let mut server = match route.netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", &ns.name]).arg(iperf3);
            c
        }
        None => Command::new(iperf3),
    };
    server.args(["-s", "-1", "-p", &port.to_string(), "-B", &route.listen.to_string()]);
    server.stdout(Stdio::null()).stderr(Stdio::piped()).stdin(Stdio::null());
    child::pin_command(&mut server, &[app_cpu]);
    let mut server = server.spawn().map_err(|source| StudyError::Spawn { what: "iperf3 -s".into(), source })?;
    // `ip netns exec` execs iperf3 in place, so the pid is the server's.
    let start = Instant::now();
    while !listening(server.id(), port) {
        if start.elapsed() > Duration::from_secs(10) || server.try_wait().ok().flatten().is_some() {
            let _ = server.kill();
            let out = server.wait_with_output().map(|o| String::from_utf8_lossy(&o.stderr).into_owned()).unwrap_or_default();
            return Err(StudyError::Output(format!("the iperf3 server did not start listening on port {port}: {}", out.trim())));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut client = Command::new(iperf3);
    client.args(["-c", &route.connect.to_string(), "-p", &port.to_string(), "-Z", "-J"]).arg("-t").arg(format!("{}", seconds.round() as u64));
    child::pin_command(&mut client, &[sender_cpu]);
    let out = child::measure(client, "iperf3 -c");
    // The one-off server ends with its test; one that does not is stopped.
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = server.kill();
    let _ = server.wait();
    let out = out?;
    parse(&out.stdout)
}

/// The receiver's bytes and seconds from iperf3's JSON.
fn parse(json: &str) -> Result<Delivered, StudyError> {
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| StudyError::Output(format!("iperf3's output is not JSON ({e}): {}", json.trim())))?;
    if let Some(e) = v["error"].as_str() {
        return Err(StudyError::Output(format!("iperf3: {e}")));
    }
    let r = &v["end"]["sum_received"];
    match (r["bytes"].as_f64(), r["seconds"].as_f64()) {
        (Some(bytes), Some(seconds)) if seconds > 0.0 => Ok(Delivered { bytes: bytes as u64, seconds }),
        _ => Err(StudyError::Output("iperf3's JSON has no end.sum_received bytes and seconds".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_receivers_sum_is_read() {
        let d = parse(r#"{"end":{"sum_received":{"start":0,"end":2.0,"seconds":2.0,"bytes":5000000000,"bits_per_second":2e10}}}"#).unwrap();
        assert_eq!(d.bytes, 5_000_000_000);
        assert!((d.gbps() - 20.0).abs() < 1e-9);
        let e = parse(r#"{"start":{},"error":"unable to connect to server"}"#).unwrap_err().to_string();
        assert!(e.contains("unable to connect"), "{e}");
        assert!(parse("garbage").is_err());
    }
}
