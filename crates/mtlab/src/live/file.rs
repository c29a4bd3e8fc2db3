//! The profile file `record --live` writes (docs/trace-format.md, "Live
//! profile"): one JSON object, the report data of the traced process as of
//! the last snapshot, replaced whole at each snapshot (a new file renamed
//! over the old one), so a reader — or a recorder killed mid-write — never
//! leaves or sees half a snapshot.

use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::analysis::ProcessReport;
use crate::profile::ProfileData;

/// What the file starts with: how `mtlab report` tells a profile from a trace.
pub const MAGIC: &str = "{\"mtlab_live_profile\":";
/// The format's version (the value of `mtlab_live_profile`).
pub const VERSION: u32 = 1;

/// Where the recording stood when the snapshot was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// The program was still running: every figure is "so far".
    Running,
    /// The program has ended and every event was analysed: the figures
    /// are the whole run's, as `mtlab report` of the full trace gives them.
    Ended,
}

/// How far the analysis was behind the program when the snapshot was written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lag {
    /// Trace bytes the program had written that were not analysed yet.
    pub behind_bytes: u64,
    /// The most it ever was.
    pub max_behind_bytes: u64,
    /// Trace bytes analysed so far.
    pub consumed_bytes: u64,
    /// Raw trace bytes on disk (allocated blocks) at the snapshot.
    pub raw_disk_bytes: u64,
    /// The most they ever were.
    pub max_raw_disk_bytes: u64,
    /// Events of one thread that reached the file after later events of
    /// another had been analysed, and were replayed late: 0 while the
    /// writer's per-buffer progress says how far the file is complete
    /// (`live::progress`) and a quiet thread's buffer can be copied
    /// (`live::bufcopy`); else figures that depend on the order of
    /// threads' events (the peak) can differ from the full trace's, by at
    /// most `late_bytes`.
    pub late_events: u64,
    /// The live bytes the late events changed, summed (each taken
    /// positive): the most a peak or a time-series point can be off by.
    #[serde(default)]
    pub late_bytes: u64,
    /// How far behind the program's clock the analysis was: the time
    /// between the newest event analysed and the snapshot (ns).
    #[serde(default)]
    pub behind_ns: u64,
    /// Buffers of quiet threads copied from the process, so that the
    /// analysis did not wait for them.
    #[serde(default)]
    pub buffer_copies: u64,
    /// Times the analysis went on without a thread it could not copy, to
    /// keep the raw bytes waiting under the hold limit.
    #[serde(default)]
    pub held_back_passed: u64,
}

impl Lag {
    /// A process tree's lag: `root`'s and the other processes' summed
    /// (behind, consumed, late, copies, passes; the raw disk of the root
    /// and of those still running), `behind_ns` the most of them, and
    /// `max_raw_disk_bytes` the most the tree's raw traces took on disk at
    /// once (`disk_at_once`, sampled at each look; never below one
    /// process's own most).
    pub fn tree<'a>(root: Lag, others: impl IntoIterator<Item = &'a ProcessLive>, disk_at_once: u64) -> Lag {
        let mut t = root;
        t.max_raw_disk_bytes = t.max_raw_disk_bytes.max(disk_at_once);
        for p in others {
            let l = &p.lag;
            t.behind_bytes += l.behind_bytes;
            t.max_behind_bytes += l.max_behind_bytes;
            t.consumed_bytes += l.consumed_bytes;
            if p.state == State::Running {
                t.raw_disk_bytes += l.raw_disk_bytes;
            }
            t.max_raw_disk_bytes = t.max_raw_disk_bytes.max(l.max_raw_disk_bytes);
            t.late_events += l.late_events;
            t.late_bytes += l.late_bytes;
            t.behind_ns = t.behind_ns.max(l.behind_ns);
            t.buffer_copies += l.buffer_copies;
            t.held_back_passed += l.held_back_passed;
        }
        t
    }
}

/// What late events mean for the figures, in one sentence.
pub fn late_text(lag: &Lag) -> String {
    format!(
        "{} events reached the analysis after later ones (replayed late: their thread's buffer could not be \
         waited for or copied); calls, bytes and leaks per site are exact, the peak and the time series can be \
         off by at most the {} B of live bytes they moved",
        lag.late_events, lag.late_bytes
    )
}

/// Where one process's figures stand in a snapshot (`process_status`, one
/// per process of `processes`, in the same order).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessLive {
    pub pid: u32,
    /// Its trace, as the process's report names it.
    pub file: String,
    /// `running`: its figures are so far; `ended`: its final figures.
    pub state: State,
    /// The snapshot its figures are as of: this one while it runs, the
    /// first written after it ended once it has.
    pub as_of_snapshot: u64,
    /// Its own trace's lag (the top-level `lag` is the whole tree's, `Lag::tree`).
    pub lag: Lag,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LiveProfile {
    pub mtlab_live_profile: u32,
    /// 1 for the first snapshot; the last one is written when the program ends.
    pub snapshot: u64,
    pub state: State,
    /// When the snapshot was written (ns since the epoch).
    pub written_ns: u64,
    /// Seconds between snapshots (`--snapshot-every`).
    pub snapshot_every_s: f64,
    pub lag: Lag,
    /// The report options the data was made with.
    pub top: usize,
    pub max_points: usize,
    /// The traced processes, as `report --json` shows each: the root
    /// first, then its descendants analysed so far, in the family's order.
    pub processes: Vec<ProcessReport>,
    /// Where each process's figures stand (a profile of an older mtlab has none).
    #[serde(default)]
    pub process_status: Vec<ProcessLive>,
    /// Each process's whole exact profile (for `--pprof`, `--flamegraph`,
    /// …; only in the last snapshot).
    pub profile_data: Vec<Option<ProfileData>>,
}

#[derive(Debug, thiserror::Error)]
pub enum ProfileFileError {
    #[error("cannot write the live profile {path}: {source}")]
    Write { path: String, source: std::io::Error },
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path} is not a readable mtlab live profile ({why}): it may be from a newer mtlab; record it again with `mtlab record --live`")]
    Bad { path: String, why: String },
}

impl LiveProfile {
    /// Writes the profile to `path`: a new file beside it, renamed over it.
    pub fn write(&self, path: &Path) -> Result<(), ProfileFileError> {
        let err = |source| ProfileFileError::Write { path: path.display().to_string(), source };
        let mut out = crate::platform::safe_fs::replace(path, 0o644).map_err(err)?;
        // Written as it is made: the whole text in memory was as large as
        // the file (14 MB with the profile of python3's last snapshot).
        let mut buf = std::io::BufWriter::with_capacity(1 << 16, &mut out);
        // An io error comes back as itself (a full disk says so).
        serde_json::to_writer(&mut buf, self).map_err(|e| err(std::io::Error::from(e)))?;
        buf.flush().map_err(err)?;
        drop(buf);
        out.file().sync_data().map_err(err)?;
        out.commit().map_err(err)
    }

    /// The descendants (after the root) put in the family's order, the
    /// order `mtlab report` lists a run's traces in: by pid, then image.
    pub fn sort_family(&mut self) {
        let Some(root) = self.processes.first().map(|r| std::path::PathBuf::from(&r.file)) else { return };
        let n = self.processes.len();
        let order = |r: &ProcessReport| {
            crate::platform::names::child_trace_suffix(&root, Path::new(&r.file))
                .and_then(|s| crate::platform::names::parse_child_suffix(&s))
                .unwrap_or((u64::MAX, u64::MAX))
        };
        let mut idx: Vec<usize> = (1..n).collect();
        idx.sort_by_key(|&i| order(&self.processes[i]));
        let mut procs: Vec<Option<ProcessReport>> = std::mem::take(&mut self.processes).into_iter().map(Some).collect();
        let mut data: Vec<Option<Option<ProfileData>>> = std::mem::take(&mut self.profile_data).into_iter().map(Some).collect();
        data.resize(n, Some(None));
        let mut status: Vec<Option<ProcessLive>> = std::mem::take(&mut self.process_status).into_iter().map(Some).collect();
        status.resize(n, None);
        for i in std::iter::once(0).chain(idx) {
            self.processes.extend(procs[i].take());
            self.profile_data.push(data[i].take().flatten());
            self.process_status.extend(status[i].take());
        }
    }

    pub fn read(path: &Path) -> Result<LiveProfile, ProfileFileError> {
        let text = std::fs::read(path).map_err(|source| ProfileFileError::Read { path: path.display().to_string(), source })?;
        let p: LiveProfile = serde_json::from_slice(&text)
            .map_err(|e| ProfileFileError::Bad { path: path.display().to_string(), why: e.to_string() })?;
        if p.mtlab_live_profile != VERSION {
            return Err(ProfileFileError::Bad { path: path.display().to_string(), why: format!("format version {}", p.mtlab_live_profile) });
        }
        Ok(p)
    }
}

/// Whether the file at `path` is a live profile (by its first bytes).
pub fn is_profile(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; MAGIC.len()];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head)).is_ok() && head == MAGIC.as_bytes()
}

#[cfg(test)]
mod tree_lag_tests {
    use super::*;

    #[test]
    fn a_trees_lag_sums_its_processes_and_keeps_the_most_disk_at_once() {
        let l = |n: u64| Lag { behind_bytes: n, max_behind_bytes: 2 * n, consumed_bytes: 3 * n, raw_disk_bytes: 4 * n, max_raw_disk_bytes: 5 * n, late_events: n, late_bytes: 7 * n, behind_ns: 8 * n, buffer_copies: n, held_back_passed: n };
        let p = |state, lag| ProcessLive { pid: 1, file: String::new(), state, as_of_snapshot: 1, lag };
        let others = [p(State::Running, l(10)), p(State::Ended, l(100))];
        let t = Lag::tree(l(1), &others, 300);
        assert_eq!((t.behind_bytes, t.max_behind_bytes, t.consumed_bytes), (111, 222, 333));
        assert_eq!(t.raw_disk_bytes, 4 + 40, "an ended process's raw trace is not on disk any more");
        assert_eq!(t.max_raw_disk_bytes, 500, "never below one process's own most");
        assert_eq!((t.late_events, t.late_bytes, t.behind_ns, t.buffer_copies, t.held_back_passed), (111, 777, 800, 111, 111));
        assert_eq!(Lag::tree(l(1), &others[..1], 999).max_raw_disk_bytes, 999);
        assert_eq!(Lag::tree(l(1), [], 0), l(1), "one process: its own lag");
    }
}
