//! Process trees under `record --live`: the traces of the root's
//! descendants (forked children, exec'd images: `FILE.d/PID[.N]`) analysed
//! into the same profile file, after the root's, each with the analysis
//! `mtlab report` gives a finished trace; their raw traces are then removed
//! (kept with `--keep-raw`). A descendant's trace has no watermark of its
//! own, so it is analysed once `record` has finished it (when the run
//! ends), not while it runs: until then it stays on disk as written.

use std::path::{Path, PathBuf};

use crate::analysis::{self, AnalyzeOptions};
use crate::live::file::{LiveProfile, ProfileFileError};
use crate::trace::TraceFile;

/// What adding the descendants came to.
#[derive(Debug, Default)]
pub struct TreeOutcome {
    /// Descendants' reports added to the profile.
    pub added: usize,
    /// One line per trace that could not be analysed or removed.
    pub warnings: Vec<String>,
}

/// The report options the last snapshot is made with (the root's, in `live::finish`).
pub fn last_snapshot_options() -> AnalyzeOptions {
    AnalyzeOptions { callers: true, profile: true, ..AnalyzeOptions::default() }
}

/// Adds the reports of `children` (finished traces, in the family's order,
/// the order `mtlab report` lists them in) to the profile at `profile`,
/// which already holds the root's last snapshot; removes their traces
/// unless `keep_raw`.
pub fn add_children(profile: &Path, children: &[PathBuf], keep_raw: bool) -> Result<TreeOutcome, ProfileFileError> {
    let mut out = TreeOutcome::default();
    if children.is_empty() {
        return Ok(out);
    }
    let mut p = LiveProfile::read(profile)?;
    let opts = last_snapshot_options();
    let mut analysed = Vec::new();
    for child in children {
        match TraceFile::open(child).and_then(|t| analysis::analyze(&t, &opts)) {
            Ok(mut r) => {
                let data = r.profile_data.take();
                p.processes.push(r);
                p.profile_data.push(data);
                analysed.push(child);
            }
            Err(e) => out.warnings.push(format!("{}: not in the live profile, left as written: {e}", child.display())),
        }
    }
    out.added = analysed.len();
    p.write(profile)?;
    if !keep_raw {
        for child in analysed {
            if let Err(e) = std::fs::remove_file(child) {
                out.warnings.push(format!("{}: analysed into the profile, but could not be removed: {e}", child.display()));
            }
        }
    }
    Ok(out)
}
