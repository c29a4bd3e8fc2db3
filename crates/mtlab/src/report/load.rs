//! A run's traces read for the report: the root file, then the child traces
//! beside it. A child trace that cannot be read, and one that `mtlab record`
//! listed when the run ended but that is gone now, are named rather than
//! passed over: a report that quietly misses a process looks complete.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::heap::{self, AnalyzeOptions, ProcessReport};
use crate::trace::{family, keys, TraceError, TraceFile};

/// A child trace the report could not use.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct MissingTrace {
    pub file: String,
    /// From the file's name (`ROOT.PID[.N]`).
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
    #[error("{} does not exist; write a trace with `mtlab record -o {} -- PROGRAM`", .0.display(), .0.display())]
    NoTrace(PathBuf),
    #[error("{} does not exist: the root process wrote no trace, but {} of its descendants did; report one of them, e.g. `mtlab report {}`", root.display(), children.len(), children[0].display())]
    NoRootTrace { root: PathBuf, children: Vec<PathBuf> },
    #[error(transparent)]
    Trace(#[from] TraceError),
}

/// The reports of a run's processes, root first, and the child traces that
/// could not be used. The root trace must be readable; a child's failure is
/// a `MissingTrace`, not an error.
pub fn load(file: &Path, children: bool, opts: &AnalyzeOptions) -> Result<(Vec<ProcessReport>, Vec<MissingTrace>), LoadError> {
    if !file.exists() {
        let children = crate::record::trace_family(file);
        if children.is_empty() {
            return Err(LoadError::NoTrace(file.to_path_buf()));
        }
        return Err(LoadError::NoRootTrace { root: file.to_path_buf(), children });
    }
    let root = TraceFile::open(file)?;
    let listed = root.runinfo_get(keys::CHILD_TRACES).map(family::decode);
    let mut processes = vec![heap::analyze(&root, opts)?];
    drop(root);
    let mut missing = Vec::new();
    if !children {
        return Ok((processes, missing));
    }
    let found: Vec<PathBuf> = crate::record::trace_family(file).into_iter().skip(1).collect();
    let suffix = |f: &Path| child_suffix(file, f);
    let command_of = |s: Option<&str>| {
        let s = s?;
        listed.as_ref()?.iter().find(|l| l.suffix == s).map(|l| l.command.clone())
    };
    for f in &found {
        let analyzed = TraceFile::open(f).and_then(|t| heap::analyze(&t, opts));
        match analyzed {
            Ok(p) => processes.push(p),
            Err(e) => {
                let s = suffix(f);
                missing.push(MissingTrace {
                    file: f.display().to_string(),
                    pid: s.as_deref().and_then(family::suffix_pid),
                    command: command_of(s.as_deref())
                        .or_else(|| crate::trace::read_header(f).ok().map(|h| family::command_name(&h.cmdline, &h.exe))),
                    reason: format!("unreadable: {e}"),
                });
            }
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
            file: sibling(file, &l.suffix).display().to_string(),
            pid: Some(l.pid),
            command: Some(l.command.clone()),
            reason: "mtlab record found it beside the root trace when the run ended; it is not there now (deleted or moved)"
                .into(),
        });
    }
    Ok((processes, missing))
}

/// `PID[.N]` of a child trace `ROOT.PID[.N]`.
fn child_suffix(root: &Path, child: &Path) -> Option<String> {
    let prefix = format!("{}.", root.file_name()?.to_string_lossy());
    child.file_name()?.to_string_lossy().strip_prefix(&prefix).map(str::to_string)
}

/// `ROOT.SUFFIX` beside `root`, spelt as `record::trace_family` spells the
/// files it finds (`./` for a root without a directory).
fn sibling(root: &Path, suffix: &str) -> PathBuf {
    let mut name = root.file_name().unwrap_or_default().to_os_string();
    name.push(".");
    name.push(suffix);
    match root.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.join(name),
        _ => Path::new(".").join(name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_trace_is_named_by_its_suffix() {
        let root = Path::new("/tmp/x/t.mtl");
        assert_eq!(child_suffix(root, Path::new("/tmp/x/t.mtl.42.1")).as_deref(), Some("42.1"));
        assert_eq!(child_suffix(root, Path::new("/tmp/x/u.mtl.42")), None);
        assert_eq!(sibling(root, "42.1"), Path::new("/tmp/x/t.mtl.42.1"));
        assert_eq!(sibling(Path::new("t.mtl"), "42"), Path::new("./t.mtl.42"));
        let m = MissingTrace { file: "t.mtl.42".into(), pid: Some(42), command: Some("cc1".into()), reason: "gone".into() };
        assert_eq!(m.message(), "trace of child 42 (cc1) is missing: t.mtl.42: gone");
    }
}
