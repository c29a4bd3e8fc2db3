//! `mtlab report --diff BASE NEW`: both runs analysed with every site
//! symbolized, compared (`report::diff`), shown like a report (text, JSON,
//! CSV), with the first pair's pprof of the changes and the HTML page of
//! differential flame graphs.

use std::path::Path;
use std::process::ExitCode;

use super::{emit, load_reports, write_html, CliError, ReportArgs};
use crate::analysis::AnalyzeOptions;
use crate::export;
use crate::report::diff::{self, sites::KeyBy, PairDiff};
use crate::report::{select::Selection, RunReport};

/// What a path given as BASE or NEW is, when it is no trace: a run id of the
/// results store, the store itself, a missing file.
fn not_a_trace(which: &str, path: &Path) -> Option<String> {
    let shown = path.display();
    let hint = "`report --diff` compares two traces of `mtlab record`; study runs are compared with `mtlab diff RUN_A RUN_B`";
    if !path.exists() {
        let text = path.to_string_lossy();
        if !text.is_empty() && text.chars().all(|c| c.is_ascii_digit()) {
            return Some(format!("{which} `{shown}` is no file; it looks like a run id of the results store: {hint}"));
        }
        return None; // the loader says where traces come from
    }
    let mut head = [0u8; 16];
    let read = std::fs::File::open(path).and_then(|mut f| std::io::Read::read(&mut f, &mut head)).unwrap_or(0);
    (read >= 15 && head.starts_with(b"SQLite format 3")).then(|| format!("{which} {shown} is a results store (SQLite), not a trace: {hint}"))
}

fn load(which: &str, path: &Path, children: bool, sel: &Selection) -> Result<RunReport, CliError> {
    if let Some(msg) = not_a_trace(which, path) {
        return Err(CliError::Other(msg));
    }
    let opts = AnalyzeOptions { max_points: 1, top: 0, callers: false, profile: false, sites: true, threads: false };
    load_reports(path, children, &opts, sel, false).map_err(|e| CliError::Other(format!("{which} ({}): {e}", path.display())))
}

/// The pair the single-file outputs (pprof, the page's flame graphs) are of:
/// the first (the roots, or the first process `--comm` named).
fn first_pair(d: &diff::RunDiff) -> Result<&PairDiff, CliError> {
    d.pairs.first().ok_or_else(|| CliError::Other("no process of BASE pairs with one of NEW: nothing to write".into()))
}

pub(super) fn cmd_report_diff(a: &ReportArgs, base: &Path, by: KeyBy) -> Result<ExitCode, CliError> {
    let sel = Selection { pids: Vec::new(), comms: a.comm.clone(), all_processes: a.comm.is_empty() };
    let b = load("BASE", base, !a.no_children, &sel)?;
    let n = load("NEW", &a.file, !a.no_children, &sel)?;
    let d = diff::compare(&b, &n, by);
    for w in &d.warnings {
        say!("mtlab: warning: {w}");
    }
    let doc = diff::views::document(&d, a.top);
    emit(&doc, a.json, a.csv.as_ref(), None)?;
    if let Some(out) = &a.pprof {
        let p = first_pair(&d)?;
        diff::pprof::write(p, out).map_err(crate::profile::export::ProfileExportError::from)?;
        say!(
            "mtlab: wrote {} (NEW − BASE of process {} → {}: read it with `go tool pprof -top {}`)",
            out.display(),
            p.base.pid,
            p.new.pid,
            out.display()
        );
    }
    if let Some(path) = &a.html {
        let p = first_pair(&d)?;
        let images: Vec<export::html::Image> = [false, true]
            .into_iter()
            .filter_map(|by_base| {
                let svg = diff::flame::svg(p, a.flame_value, by_base)?;
                let sized = if by_base { "sized by BASE" } else { "sized by NEW" };
                Some(export::html::Image { title: format!("process {} → {}: {}, {sized}", p.base.pid, p.new.pid, a.flame_value.description()), svg })
            })
            .collect();
        let title = format!("mtlab report --diff {} {}", base.display(), a.file.display());
        write_html(&diff::views::document(&d, usize::MAX), path, &title, &export::html::Extras { images, ..Default::default() })?;
    }
    Ok(ExitCode::SUCCESS)
}
