//! A run's traces read for the report: the root file, then the child traces
//! beside it. A child trace that cannot be read, and one that `mtlab record`
//! listed when the run ended but that is gone now, are named rather than
//! passed over: a report that quietly misses a process looks complete.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::index::{self, Ending, Facts, IndexRow};
use super::select::{export_pick, SelectError, Selection};
use super::RunReport;
use crate::analysis::{self, AnalyzeOptions, ProcessReport};
use crate::trace::{family, keys, TraceError, TraceFile};
use crate::platform::names;
use crate::platform::process::shell_word;

/// A child trace the report could not use.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct MissingTrace {
    pub file: String,
    /// From the file's name (`ROOT.d/PID[.N]`).
    pub pid: Option<u32>,
    /// From the root trace's list of child traces, when it has one.
    pub command: Option<String>,
    pub reason: String,
}

impl MissingTrace {
    /// One line for stderr and the text report.
    pub fn message(&self) -> String {
        let who = match (self.pid, self.command.as_deref().filter(|c| !c.is_empty())) {
            (Some(pid), Some(cmd)) => format!("child {pid} ({cmd})"),
            (Some(pid), None) => format!("child {pid}"),
            _ => "a child".to_string(),
        };
        format!("trace of {who} is missing: {}: {}", self.file, self.reason)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{} does not exist; write a trace with `mtlab record -o {} -- PROGRAM`", .0.display(), shell_word(.0))]
    NoTrace(PathBuf),
    #[error("{} does not exist: the root process wrote no trace, but {} of its descendants did; report one of them, e.g. `mtlab report {}`", root.display(), children.len(), shell_word(&children[0]))]
    NoRootTrace { root: PathBuf, children: Vec<PathBuf> },
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error(transparent)]
    Select(#[from] SelectError),
}

/// The report of a run: the root trace and (with `children`) the child
/// traces beside it, every one in the index, those `sel` picks reported in
/// detail. The root trace must be readable; a child's failure is a
/// `MissingTrace`, not an error.
///
/// Which processes are reported in detail is known before their traces are
/// decoded — by pid and command from their headers, or for a large tree by
/// their chunks' event counts, which the analysis's count (the index's)
/// can fall short of (records that are no calls, damage, a sampled trace's
/// frees) — and checked after: a process the exact counts put among the
/// busiest that was only indexed is analysed again, in detail.
///
/// With `opts.profile` the processes the profile exports take (as
/// `select::export_pick` would pick them with `merge`) keep their whole
/// profile, made in the same pass (`RunReport::profile_of`).
pub fn load(file: &Path, children: bool, opts: &AnalyzeOptions, sel: &Selection, merge: bool) -> Result<RunReport, LoadError> {
    if !file.exists() {
        let children = names::trace_family(file);
        if children.is_empty() {
            return Err(LoadError::NoTrace(file.to_path_buf()));
        }
        return Err(LoadError::NoRootTrace { root: file.to_path_buf(), children });
    }
    let root = TraceFile::open(file)?;
    let listed = root.runinfo_get(keys::CHILD_TRACES).map(family::decode);
    let untraced = Untraced::of(&root);
    let mut traces = vec![root];
    let mut missing = Vec::new();
    let suffix = |f: &Path| names::child_trace_suffix(file, f);
    let command_of = |s: Option<&str>| {
        let s = s?;
        listed.as_ref()?.iter().find(|l| l.suffix == s).map(|l| l.command.clone())
    };
    let unreadable = |f: &Path, e: TraceError| {
        let s = suffix(f);
        MissingTrace {
            file: f.display().to_string(),
            pid: s.as_deref().and_then(family::suffix_pid),
            command: command_of(s.as_deref())
                .or_else(|| crate::trace::read_header(f).ok().map(|h| family::command_name(&h.cmdline, &h.exe))),
            reason: format!("unreadable: {e}"),
        }
    };
    if children {
        let found: Vec<PathBuf> = names::trace_family(file).into_iter().skip(1).collect();
        let owner = std::fs::metadata(file).ok().map(|m| std::os::unix::fs::MetadataExt::uid(&m));
        for f in &found {
            if let Some(reason) = not_of_this_run(f, owner, listed.as_deref(), suffix(f).as_deref()) {
                let s = suffix(f);
                missing.push(MissingTrace {
                    file: f.display().to_string(),
                    pid: s.as_deref().and_then(family::suffix_pid),
                    command: None,
                    reason,
                });
                continue;
            }
            // Without their maps (most of a small process's metadata): only
            // the processes reported in detail read them, when analysed.
            match TraceFile::open_without_maps(f) {
                Ok(t) => traces.push(t),
                Err(e) => missing.push(unreadable(f, e)),
            }
        }
        // A set, not a scan of `found` per listed trace: on a tree of a thousand
        // processes the scan took longer than reading all their traces.
        let found_suffixes: std::collections::HashSet<String> = found.iter().filter_map(|f| suffix(f)).collect();
        for l in listed.iter().flatten() {
            if found_suffixes.contains(&l.suffix) {
                continue;
            }
            missing.push(MissingTrace {
                file: names::child_trace_at(file, &l.suffix).display().to_string(),
                pid: Some(l.pid),
                command: Some(l.command.clone()),
                reason: "mtlab record found it among the root trace's children when the run ended; it is not there now (deleted or moved)"
                    .into(),
            });
        }
    }
    // The plan, from what the index pass read: a pid or name that matches
    // nothing is an error before any trace is decoded.
    let mut planned: Vec<IndexRow> = traces.iter().map(planned_row).collect();
    let file_name = file.display().to_string();
    sel.apply(&mut planned, &file_name)?;
    // The processes whose profile the exports will want, by file.
    let exported: HashSet<String> = match opts.profile {
        true => export_pick(&planned, merge).rows.iter().map(|&i| planned[i].file.clone()).collect(),
        false => HashSet::new(),
    };
    let opts_for = |file: &str| AnalyzeOptions { profile: exported.contains(file), ..opts.clone() };
    let mut analysed: Vec<(Facts, Option<ProcessReport>)> = Vec::with_capacity(traces.len());
    let mut profiles = Vec::new();
    for (i, (t, plan)) in traces.into_iter().zip(&planned).enumerate() {
        let o = opts_for(&plan.file);
        // The root was opened whole; a child reported in detail, or whose
        // profile is exported, reads its maps now.
        let report = match (plan.reported, i) {
            (true, 0) => analysis::analyze(&t, &o),
            (true, _) => TraceFile::open(&t.path).and_then(|whole| analysis::analyze(&whole, &o)),
            (false, 0) => analysis::analyze_for_index(&t, o.profile),
            (false, _) if o.profile => TraceFile::open(&t.path).and_then(|whole| analysis::analyze_for_index(&whole, true)),
            (false, _) => analysis::analyze_for_index(&t, false),
        };
        match report {
            Ok(mut p) => {
                if !plan.reported && o.profile {
                    profiles.extend(p.profile_data.take().map(|d| (p.file.clone(), d)));
                }
                analysed.push((Facts::of(&p), plan.reported.then_some(p)))
            }
            Err(e) if i == 0 => return Err(e.into()),
            Err(e) => missing.push(unreadable(&t.path, e)),
        }
    }
    let (facts, mut reports): (Vec<Facts>, Vec<Option<ProcessReport>>) = analysed.into_iter().unzip();
    let mut index = index::rows_of(facts);
    let mut execd_root_ended = None;
    let root_pid = index.first().map(|r| r.pid);
    let later_image_listed = listed.iter().flatten().any(|l| Some(l.pid) == root_pid);
    if later_image_listed && !index.iter().skip(1).any(|r| Some(r.pid) == root_pid) {
        // Without the root pid's later image (--no-children, or its trace is
        // gone) the index cannot see it, but the root's list names it: the
        // root trace's image exec'd, and the status is the last image's.
        if let Some(root) = index.first_mut().filter(|r| r.ending.exit_text().is_some()) {
            execd_root_ended = root.ending.exit_text();
            root.ending = Ending::Execd;
        }
    }
    sel.apply(&mut index, &file_name)?;
    let mut dropped = Vec::new();
    reconcile(&index, &mut reports, |row| analysis::analyze(&TraceFile::open(&row.file)?, &opts_for(&row.file)), |p| dropped.push(p))?;
    profiles.extend(dropped.into_iter().filter_map(|mut p: ProcessReport| Some((p.file.clone(), p.profile_data.take()?))));
    // The root trace's RUNINFO holds how the root pid ended, so every
    // analysis of it gives the root trace that status; it belongs to the
    // pid's last image, the one that exited (the index's ending), and an
    // image that exec'd ended by exec.
    for (row, report) in index.iter().zip(reports.iter_mut()) {
        if let Some(p) = report {
            p.exit = row.ending.exit_text();
        }
    }
    Ok(RunReport { processes: reports.into_iter().flatten().collect(), index, missing, untraced, frames: 0, execd_root_ended, profiles, live: None })
}

/// The processes of the run that got no trace file at all (RUNINFO
/// `untraced_count`, `untraced`: `mtlab record` could not make one for them).
#[derive(Debug, Clone)]
pub struct Untraced {
    pub count: u64,
    /// The first of them (at most `broker::MAX_NAMED`).
    pub named: Vec<crate::broker::Untraced>,
}

impl Untraced {
    fn of(root: &TraceFile) -> Option<Untraced> {
        let count = root.runinfo_get(keys::UNTRACED_COUNT)?.parse().ok().filter(|&c: &u64| c > 0)?;
        let named = root.runinfo_get(keys::UNTRACED).map(crate::broker::decode).unwrap_or_default();
        Some(Untraced { count, named })
    }

    /// One line for the text report.
    pub fn message(&self) -> String {
        crate::broker::summary(&self.named, self.count)
    }

    pub fn to_json(&self) -> serde_json::Value {
        let named: Vec<serde_json::Value> = self
            .named
            .iter()
            .map(|u| serde_json::json!({"pid": u.pid, "command": u.command, "reason": u.reason()}))
            .collect();
        serde_json::json!({"count": self.count, "named": named})
    }
}

/// Makes the detailed reports those of the rows reported: `detail` analyses
/// a row's process that was only indexed; a report no longer wanted is
/// handed to `dropped`.
fn reconcile<T, E>(
    rows: &[IndexRow],
    reports: &mut [Option<T>],
    mut detail: impl FnMut(&IndexRow) -> Result<T, E>,
    mut dropped: impl FnMut(T),
) -> Result<(), E> {
    for (row, report) in rows.iter().zip(reports.iter_mut()) {
        if !row.reported {
            if let Some(r) = report.take() {
                dropped(r);
            }
        } else if report.is_none() {
            *report = Some(detail(row)?);
        }
    }
    Ok(())
}

/// A process's row as the index pass of its trace tells it: its events are
/// its chunks' count (every record, calls or not).
fn planned_row(t: &TraceFile) -> IndexRow {
    IndexRow {
        pid: t.header.pid,
        ppid: t.header.ppid,
        command: family::command_name(&t.header.cmdline, &t.header.exe),
        cmdline: t.header.cmdline.clone(),
        exe: t.header.exe.clone(),
        file: t.path.display().to_string(),
        events: t.chunks.iter().map(|c| c.n_events as u64).sum(),
        peak_live_bytes: None,
        ending: Ending::NoEnd,
        reported: true,
        selected: true,
    }
}

/// Why the file `f` beside the root trace is not read as one of its run's
/// child traces, if it is not: it belongs to another user than the root
/// trace (`owner`), or the root trace lists its children (`listed`) and
/// not this one. A file someone else put there would add a forged process.
fn not_of_this_run(f: &Path, owner: Option<u32>, listed: Option<&[family::ListedTrace]>, suffix: Option<&str>) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::symlink_metadata(f).ok()?.uid();
    if owner.is_some_and(|o| o != uid) {
        return Some(format!(
            "it belongs to user {uid} and the root trace to user {}: not read (written by someone else, or by a \
             traced program that changed its user)",
            owner.unwrap_or_default()
        ));
    }
    if listed.is_some_and(|l| !l.iter().any(|l| Some(l.suffix.as_str()) == suffix)) {
        return Some("mtlab record did not list it when the run ended (it was written later, or by someone else): not read".into());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exact_counts_decide_which_processes_are_detailed() {
        // Planned by chunk counts (which count records that are no calls):
        // the root and 101; the analyses' counts put 102 among the busiest.
        let row = |pid: u32, events: u64| IndexRow {
            pid,
            ppid: 1,
            command: "cc1".into(),
            cmdline: vec!["cc1".into()],
            exe: "/usr/bin/cc1".into(),
            file: format!("t.mtl.{pid}"),
            events,
            peak_live_bytes: Some(0),
            ending: Ending::Exited,
            reported: true,
            selected: true,
        };
        let mut rows: Vec<IndexRow> = vec![row(100, 1), row(101, 5), row(102, 6)];
        // Two detailed at most (`Selection::apply` takes DETAILED).
        let chosen = crate::report::select::busiest(rows.iter().map(|r| r.events), 2);
        for (r, c) in rows.iter_mut().zip(chosen) {
            r.reported = c;
        }
        assert_eq!(rows.iter().map(|r| r.reported).collect::<Vec<_>>(), [true, false, true]);
        let mut reports = vec![Some("root"), Some("101 in detail"), None];
        let mut analysed = Vec::new();
        let mut dropped = Vec::new();
        reconcile(
            &rows,
            &mut reports,
            |r| {
                analysed.push(r.pid);
                Ok::<_, ()>("102 again, in detail")
            },
            |r| dropped.push(r),
        )
        .unwrap();
        assert_eq!(reports, [Some("root"), None, Some("102 again, in detail")]);
        assert_eq!(dropped, ["101 in detail"]);
        assert_eq!(analysed, [102], "only the one missing is analysed again");
    }

    #[test]
    fn a_missing_trace_says_whose_it_was() {
        let m = MissingTrace { file: "t.mtl.42".into(), pid: Some(42), command: Some("cc1".into()), reason: "gone".into() };
        assert_eq!(m.message(), "trace of child 42 (cc1) is missing: t.mtl.42: gone");
    }
}
