//! A live profile (`record --live`) read as a run's report: its processes'
//! report data as the recorder made it, cut to this report's options, with
//! the index made of them and the processes reported picked as for a trace.

use std::path::Path;

use super::index::{self, Facts};
use super::select::{SelectError, Selection};
use super::RunReport;
use crate::analysis::AnalyzeOptions;
use crate::live::file::{LiveProfile, ProfileFileError};

#[derive(Debug, thiserror::Error)]
pub enum LiveLoadError {
    #[error(transparent)]
    File(#[from] ProfileFileError),
    #[error(transparent)]
    Select(#[from] SelectError),
}

/// The profile's processes as `load::load` gives a trace's: the root's
/// descendants unless `children` is false, those `sel` picks in detail.
pub fn load(path: &Path, children: bool, opts: &AnalyzeOptions, sel: &Selection) -> Result<RunReport, LiveLoadError> {
    let mut p = LiveProfile::read(path)?;
    if !children {
        p.processes.truncate(1);
        p.process_status.truncate(1);
    }
    let mut notes = Vec::new();
    if opts.top > p.top {
        notes.push(format!("this profile keeps the top {} sites of each table (--top {} asked for more)", p.top, opts.top));
    }
    if opts.max_points != p.max_points {
        notes.push(format!("this profile's time series was made with at most {} points (--points does not change it)", p.max_points));
    }
    let mut processes = Vec::with_capacity(p.processes.len());
    for (mut r, data) in p.processes.into_iter().zip(p.profile_data.into_iter().chain(std::iter::repeat(None))) {
        if !opts.callers {
            r.callers.clear();
        }
        for list in [&mut r.top_sites.by_bytes, &mut r.top_sites.by_calls, &mut r.top_sites.at_peak, &mut r.top_sites.temporary, &mut r.leaks.top] {
            list.truncate(opts.top);
        }
        r.callers.truncate(opts.top);
        r.profile_data = if opts.profile { data } else { None };
        processes.push(r);
    }
    let mut index = index::rows_of(processes.iter().map(Facts::of).collect());
    sel.apply(&mut index, &path.display().to_string())?;
    for (row, r) in index.iter().zip(processes.iter_mut()) {
        r.exit = row.ending.exit_text();
    }
    let mut reported = index.iter().map(|row| row.reported);
    processes.retain(|_| reported.next().unwrap_or(false));
    let live = LiveStatus { snapshot: p.snapshot, state: p.state, written_ns: p.written_ns, lag: p.lag, processes: p.process_status, notes };
    Ok(RunReport { processes, index, missing: Vec::new(), untraced: None, frames: 0, execd_root_ended: None, profiles: Vec::new(), live: Some(live) })
}

/// Where a live profile's data stands (`report --json`: `live_profile`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct LiveStatus {
    pub snapshot: u64,
    pub state: crate::live::file::State,
    pub written_ns: u64,
    pub lag: crate::live::file::Lag,
    /// Where each process's figures stand, the root first.
    pub processes: Vec<crate::live::file::ProcessLive>,
    #[serde(skip)]
    pub notes: Vec<String>,
}

impl LiveStatus {
    /// What events analysed late mean for this profile's figures.
    pub fn late(&self) -> Option<String> {
        (self.lag.late_events > 0).then(|| crate::live::file::late_text(&self.lag))
    }

    /// The line the screen report starts with.
    pub fn text(&self) -> String {
        let when = chrono_free_age(self.written_ns);
        match self.state {
            crate::live::file::State::Running => format!(
                "live profile as of snapshot {} ({when}): the program was still running then, every figure is \"so far\"",
                self.snapshot
            ),
            crate::live::file::State::Ended => {
                format!("live profile, snapshot {} ({when}): the whole run, analysed while it ran", self.snapshot)
            }
        }
    }
}

/// The line under a process's heading: still running or ended, as of which snapshot.
pub fn process_text(s: &crate::live::file::ProcessLive) -> String {
    match s.state {
        crate::live::file::State::Running => format!("live: still running; its figures are as of snapshot {}", s.as_of_snapshot),
        crate::live::file::State::Ended => format!("live: ended; its final figures, in the profile since snapshot {}", s.as_of_snapshot),
    }
}

/// "written N s ago" from ns since the epoch.
fn chrono_free_age(written_ns: u64) -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    let s = now.saturating_sub(written_ns) as f64 / 1e9;
    format!("written {s:.0} s ago")
}
