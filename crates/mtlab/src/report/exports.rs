//! The profile the exports are made of (`--pprof`, `--flamegraph`,
//! `--collapsed`, `--speedscope`, the HTML page's flame graph): one selected
//! process's, or with `--merge` the sum of all selected processes' — every
//! process without `--pid`/`--comm`, reported in detail or in the index only
//! (`select::export_pick` chooses and says which). Each was made in its
//! process's one analysis pass (`load` asks for it), not read again.

use super::select::{export_pick, ExportPick};
use super::RunReport;
use crate::analysis::{self, ProcessReport};
use crate::profile::export::ProfileExportError;
use crate::profile::merge::MergeError;
use crate::profile::ProfileData;
use crate::trace::{TraceError, TraceFile};

#[derive(Debug, thiserror::Error)]
pub enum ExportsError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error(transparent)]
    Merge(#[from] MergeError),
    #[error(transparent)]
    Export(#[from] ProfileExportError),
}

/// A process's profile: the one its analysis made, else (a report made
/// without `AnalyzeOptions::profile`) one analysis of its trace for it.
pub fn profile_of(p: &ProcessReport) -> Result<ProfileData, TraceError> {
    match &p.profile_data {
        Some(d) => Ok(d.clone()),
        None => profile_of_file(&p.file),
    }
}

/// The profile of the process traced in `file`, from an analysis of its own.
fn profile_of_file(file: &str) -> Result<ProfileData, TraceError> {
    let trace = TraceFile::open(std::path::Path::new(file))?;
    Ok(analysis::analyze_for_index(&trace, true)?.profile_data.unwrap_or_default())
}

/// The processes the exports take, the sentence that says which, and their
/// profile (summed when merged), taken out of `run`. None when no process is
/// reported.
pub fn profile(run: &mut RunReport, merge: bool) -> Result<Option<(ExportPick, ProfileData)>, ExportsError> {
    let pick = export_pick(&run.index, merge);
    let mut parts = Vec::new();
    for &i in &pick.rows {
        let row = &run.index[i];
        let made = match run.processes.iter_mut().find(|p| p.file == row.file) {
            Some(p) => p.profile_data.take(),
            None => run.profiles.iter().position(|(f, _)| *f == row.file).map(|at| run.profiles.swap_remove(at).1),
        };
        // A process the plan did not foresee among the exported (a trace
        // that failed to read moved the pick): its profile is read now.
        let data = match made {
            Some(d) => d,
            None => profile_of_file(&row.file)?,
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
