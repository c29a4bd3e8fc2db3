//! A real OpenTelemetry Collector for the OTLP tests: built once per machine
//! by `.ci/otelcol/build.sh` (the Collector's own builder; cached under
//! `target/otelcol/`), started on 127.0.0.1 with the profiles feature gate,
//! its otlp receiver's HTTP and gRPC ports free for the test, writing what it
//! receives as OTLP/JSON lines (the contrib file exporter) that a test reads,
//! and stopped when dropped.

use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub struct Collector {
    child: Child,
    pub port: u16,
    pub grpc_port: u16,
    pub dir: tempfile::TempDir,
}

/// The Collector binary, built if it is not yet (under a lock: tests run in
/// parallel); None with the reason when it cannot be.
pub fn binary() -> Result<PathBuf, String> {
    let script = super::repo_root().join(".ci/otelcol/build.sh");
    let lock = super::repo_root().join("target/otelcol.lock");
    let _ = std::fs::create_dir_all(lock.parent().unwrap());
    let o = Command::new("flock")
        .arg(&lock)
        .arg(&script)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run flock {}: {e}", script.display()))?;
    if !o.status.success() {
        return Err(format!("building the OpenTelemetry Collector failed (needs Go and the Go module proxy):\n{}", String::from_utf8_lossy(&o.stderr)));
    }
    let path = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!("{} printed no binary", script.display()))
    }
}

/// A port nothing listens on now (bound, noted, closed).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Collector {
    /// A running Collector, or None (said with `skip`) when none can be built.
    pub fn start() -> Option<Collector> {
        let bin = match binary() {
            Ok(b) => b,
            Err(why) => {
                super::skip(&format!("(OTLP part): no OpenTelemetry Collector: {why}"));
                return None;
            }
        };
        let mut dir = tempfile::Builder::new().prefix("mtlab-otelcol-").tempdir().unwrap();
        for _ in 0..5 {
            let (port, grpc_port) = (free_port(), free_port());
            let config = format!(
                "receivers:\n  otlp:\n    protocols:\n      http:\n        endpoint: 127.0.0.1:{port}\n      grpc:\n        endpoint: 127.0.0.1:{grpc_port}\n\
                 exporters:\n  file/profiles:\n    path: {d}/profiles.json\n    flush_interval: 50ms\n\
                 \x20 file/metrics:\n    path: {d}/metrics.json\n    flush_interval: 50ms\n\
                 service:\n  telemetry:\n    metrics:\n      level: none\n\
                 \x20 pipelines:\n    profiles:\n      receivers: [otlp]\n      exporters: [file/profiles]\n\
                 \x20   metrics:\n      receivers: [otlp]\n      exporters: [file/metrics]\n",
                d = dir.path().display()
            );
            let cfg = dir.path().join("config.yaml");
            std::fs::write(&cfg, config).unwrap();
            let log = std::fs::File::create(dir.path().join("collector.log")).unwrap();
            let child = Command::new(&bin)
                .arg("--config")
                .arg(&cfg)
                .arg("--feature-gates=+service.profilesSupport")
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap();
            let mut c = Collector { child, port, grpc_port, dir };
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(30) {
                if c.log().contains("Everything is ready") {
                    return Some(c);
                }
                if c.child.try_wait().unwrap().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            // Port taken meanwhile, or a slow start: another try.
            let log = c.log();
            assert!(log.contains("address already in use") || c.child.try_wait().unwrap().is_none(), "the Collector did not start:\n{log}");
            dir = std::mem::replace(&mut c.dir, tempfile::tempdir().unwrap());
        }
        panic!("the Collector did not start on any of 5 ports");
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Its otlp receiver's gRPC endpoint.
    pub fn grpc_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.grpc_port)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("collector.log")).unwrap_or_default()
    }

    /// The requests of `signal` ("profiles", "metrics") written so far, once
    /// there are at least `n` (waiting up to 20 s for them).
    pub fn received(&self, signal: &str, n: usize) -> Vec<Value> {
        let path = self.dir.path().join(format!("{signal}.json"));
        let started = Instant::now();
        loop {
            let lines: Vec<Value> = std::fs::File::open(&path)
                .map(|f| std::io::BufReader::new(f).lines().map_while(Result::ok).filter(|l| !l.trim().is_empty()).filter_map(|l| serde_json::from_str(&l).ok()).collect())
                .unwrap_or_default();
            if lines.len() >= n || started.elapsed() > Duration::from_secs(20) {
                assert!(lines.len() >= n, "the Collector wrote {} {signal} requests, not {n}:\n{}", lines.len(), self.log());
                return lines;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
