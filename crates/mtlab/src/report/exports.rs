//! The profile the exports are made of (`--pprof`, `--flamegraph`,
//! `--collapsed`, `--speedscope`, the HTML page's flame graph): one selected
//! process's, or with `--merge` the sum of all selected processes' — every
//! process without `--pid`/`--comm`, reported in detail or in the index only
//! (`select::export_pick` chooses and says which).

use super::select::{export_pick, ExportPick};
use super::RunReport;
use crate::heap::ProcessReport;
use crate::profile::export::ProfileExportError;
use crate::profile::merge::MergeError;
use crate::profile::ProfileData;
use crate::trace::TraceError;

#[derive(Debug, thiserror::Error)]
pub enum ExportsError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error(transparent)]
    Merge(#[from] MergeError),
    #[error(transparent)]
    Export(#[from] ProfileExportError),
}

/// A process's profile: estimated in the report's own decode pass (sampled
/// trace), or exact from a pass of its own over a full trace.
pub fn profile_of(p: &ProcessReport) -> Result<ProfileData, TraceError> {
    match &p.profile {
        Some(s) => Ok(s.data.clone()),
        None => crate::profile::export::profile_of(std::path::Path::new(&p.file)),
    }
}

/// The processes the exports take, the sentence that says which, and their
/// profile (summed when merged). None when no process is reported.
pub fn profile(run: &RunReport, merge: bool) -> Result<Option<(ExportPick, ProfileData)>, ExportsError> {
    let pick = export_pick(&run.index, merge);
    let mut parts = Vec::new();
    for &i in &pick.rows {
        let row = &run.index[i];
        // A process in the index only (a large tree's default report) has
        // no report kept: its profile is read from its trace.
        let data = match run.processes.iter().find(|p| p.file == row.file) {
            Some(p) => profile_of(p)?,
            None => crate::profile::export::profile_of(std::path::Path::new(&row.file))?,
        };
        parts.push((row.pid, data));
    }
    let data = match parts.len() {
        0 => return Ok(None),
        1 => parts.pop().map(|p| p.1).unwrap_or_default(),
        _ => crate::profile::merge::merge(parts)?,
    };
    Ok(Some((pick, data)))
}
