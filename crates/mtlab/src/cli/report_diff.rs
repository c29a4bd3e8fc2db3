//! `mtlab report --diff BASE NEW`: both runs analysed with every site
//! symbolized, compared (`report::diff`), shown like a report (text, JSON,
//! CSV), with a pprof of the changes of each process pair and the HTML page
//! of every pair's differential flame graphs.

use std::path::{Path, PathBuf};
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

/// Where pair `index`'s pprof goes: OUT itself for the first pair (the
/// roots, or the first process `--comm` named), so a run of one process
/// writes the file named; every further pair beside it, named by its pids:
/// `OUT.pb.gz` → `OUT.BASEPID-NEWPID.pb.gz`.
fn pair_path(out: &Path, index: usize, p: &PairDiff) -> PathBuf {
    if index == 0 {
        return out.to_path_buf();
    }
    let name = out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let (stem, ext) = match name.find('.') {
        Some(dot) if dot > 0 => name.split_at(dot),
        _ => (name.as_str(), ""),
    };
    out.with_file_name(format!("{stem}.{}-{}{ext}", p.base.pid, p.new.pid))
}

/// At least one pair, or the reason there is nothing to write.
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
        first_pair(&d)?;
        for (i, p) in d.pairs.iter().enumerate() {
            let path = pair_path(out, i, p);
            diff::pprof::write(p, &path).map_err(crate::profile::export::ProfileExportError::from)?;
            say!(
                "mtlab: wrote {} (NEW − BASE of process {} → {}: read it with `go tool pprof -top {}`)",
                path.display(),
                p.base.pid,
                p.new.pid,
                path.display()
            );
        }
    }
    if let Some(path) = &a.html {
        first_pair(&d)?;
        let images: Vec<export::html::Image> = d
            .pairs
            .iter()
            .flat_map(|p| [false, true].map(|by_base| (p, by_base)))
            .filter_map(|(p, by_base)| {
                let svg = diff::flame::svg(p, a.flame_value, by_base)?;
                let sized = if by_base { "sized by BASE" } else { "sized by NEW" };
                let who = format!("process {} → {} ({})", p.base.pid, p.new.pid, p.new.command);
                Some(export::html::Image { title: format!("{who}: {}, {sized}", a.flame_value.description()), svg })
            })
            .collect();
        let title = format!("mtlab report --diff {} {}", base.display(), a.file.display());
        write_html(&diff::views::document(&d, usize::MAX), path, &title, &export::html::Extras { images, ..Default::default() })?;
    }
    Ok(ExitCode::SUCCESS)
}
