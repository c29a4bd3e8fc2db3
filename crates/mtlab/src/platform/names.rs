//! Every name mtlab creates or reads that another local user can predict,
//! in one place: the code builds its names here, and the hostile-user test
//! (`tests/hostile_*.rs`) plant files, FIFOs and symlinks at them.
//! Keep the list complete: a new predictable name goes here first.

use std::path::{Path, PathBuf};

/// Where the preload library keeps a sampled process's control page
/// (the C side builds the same name in `native/preload/sampler.c`).
pub const CTL_PAGE_DIR: &str = "/dev/shm";
/// The prefix of a control page's file name; the pid follows.
pub const CTL_PAGE_PREFIX: &str = "mtlab-";

/// `/dev/shm/mtlab-PID`: the sampler's control page of process `pid`.
pub fn ctl_page(pid: u32) -> PathBuf {
    Path::new(CTL_PAGE_DIR).join(format!("{CTL_PAGE_PREFIX}{pid}"))
}

/// The prefix of a flight recorder's request page's name; the pid follows.
pub const FLIGHT_PAGE_PREFIX: &str = "mtlab-flight-";

/// `/dev/shm/mtlab-flight-PID`: where `mtlab record --keep-last` takes
/// `mtlab ctl PID dump` requests for program `pid` (`flight::control`).
pub fn flight_page(pid: u32) -> PathBuf {
    Path::new(CTL_PAGE_DIR).join(format!("{FLIGHT_PAGE_PREFIX}{pid}"))
}

/// The prefix of a live recorder's status page's name; the pid follows.
pub const LIVE_PAGE_PREFIX: &str = "mtlab-live-";

/// `/dev/shm/mtlab-live-PID`: where `mtlab record --live` says how far
/// behind its analysis of program `pid` is, for `mtlab ctl PID status`
/// (`live::status`).
pub fn live_page(pid: u32) -> PathBuf {
    Path::new(CTL_PAGE_DIR).join(format!("{LIVE_PAGE_PREFIX}{pid}"))
}

/// `ROOT.flight-N` beside the root trace: the N-th window a flight recorder
/// wrote (no child trace's name: `parse_child_suffix` refuses it).
pub fn flight_dump(root: &Path, n: u32) -> PathBuf {
    let mut name = root.as_os_str().to_owned();
    name.push(format!(".flight-{n}"));
    PathBuf::from(name)
}

/// `mtlab.PID.heap.pb.gz` in the current directory: where `ctl dump`
/// writes when no `-o` is given.
pub fn default_dump(pid: u32) -> PathBuf {
    PathBuf::from(format!("mtlab.{pid}.heap.pb.gz"))
}

/// The directory of the affinity study's journals (a tmpfs, cleared at boot).
pub const AFFINITY_JOURNALS: &str = "/run/mtlab/affinity";

/// `DIR/PID.json`: the affinity journal of run `pid`.
pub fn affinity_journal(dir: &Path, pid: u32) -> PathBuf {
    dir.join(format!("{pid}.json"))
}

/// `DIR/PID.tmp`: run `pid`'s next journal, before it replaces the last.
pub fn affinity_journal_temp(dir: &Path, pid: u32) -> PathBuf {
    dir.join(format!("{pid}.tmp"))
}

/// The pid of a journal or journal temp's file name (`PID.json`, `PID.tmp`),
/// with whether it is the journal; None for any other name.
pub fn affinity_journal_pid(file_name: &str) -> Option<(u32, bool)> {
    let (stem, ext) = file_name.split_once('.')?;
    let pid = canonical_number(stem)?;
    match ext {
        "json" => Some((pid, true)),
        "tmp" => Some((pid, false)),
        _ => None,
    }
}

/// The prefix of the affinity study's network namespaces (in /run/netns).
pub const AFFINITY_NETNS_PREFIX: &str = "mtlab-aff-";

/// `mtlab-aff-PID`: the network namespace of affinity run `pid`.
pub fn affinity_netns(pid: u32) -> String {
    format!("{AFFINITY_NETNS_PREFIX}{pid}")
}

/// The pid of a namespace the affinity study named, None for any other name.
pub fn affinity_netns_pid(name: &str) -> Option<u32> {
    canonical_number(name.strip_prefix(AFFINITY_NETNS_PREFIX)?)
}

/// A decimal number written as mtlab writes one (no sign, no leading zero).
fn canonical_number(s: &str) -> Option<u32> {
    let n: u32 = s.parse().ok()?;
    (n.to_string() == s).then_some(n)
}

/// `ROOT.d`: the directory beside the root trace that holds the traces of
/// the processes the traced program started, so that a tree of a hundred
/// processes leaves two entries where it ran, not a hundred. `record` makes
/// it before the program starts (0700: a child that changed its user asks
/// `record` for its file, `broker.rs`) and removes it when it stays empty.
pub fn tree_dir(root: &Path) -> PathBuf {
    let mut name = root.as_os_str().to_owned();
    name.push(".d");
    PathBuf::from(name)
}

/// `ROOT.d/PID` (`.N` for the N-th image of one pid): the trace of a process
/// the traced program started (the C side builds the same names in
/// `native/preload/writer.c`, `trace_name`). Below: the same family read
/// back (`child_trace_suffix`, `parse_child_suffix`, `trace_family`), which
/// also reads the layout before `ROOT.d` (`ROOT.PID[.N]` beside the root).
pub fn child_trace(root: &Path, pid: u32, generation: u32) -> PathBuf {
    let name = if generation > 0 { format!("{pid}.{generation}") } else { pid.to_string() };
    tree_dir(root).join(name)
}

/// The `PID[.N]` of a child trace's name (`ROOT.d/PID[.N]`, or `ROOT.PID[.N]`
/// beside `root` as earlier versions wrote them), as it stands, if the name
/// is spelt as one is.
pub fn child_trace_suffix(root: &Path, child: &Path) -> Option<String> {
    let file = child.file_name()?.to_string_lossy();
    let in_tree_dir = child.parent().and_then(Path::file_name) == tree_dir(root).file_name();
    if in_tree_dir {
        return Some(file.into_owned());
    }
    let prefix = format!("{}.", root.file_name()?.to_string_lossy());
    file.strip_prefix(&prefix).map(str::to_string)
}

/// (pid, N) of a child trace's suffix `PID` or `PID.N` (N 0 for `PID`):
/// None when it is not one.
pub fn parse_child_suffix(suffix: &str) -> Option<(u64, u64)> {
    let mut parts = suffix.split('.');
    let pid: u64 = parts.next()?.parse().ok()?;
    let generation: u64 = match parts.next() {
        Some(g) => g.parse().ok()?,
        None => 0,
    };
    parts.next().is_none().then_some((pid, generation))
}

/// The child trace `SUFFIX` of `root`, spelt as `trace_family` spells the
/// files it finds (`./` before a root without a directory): `ROOT.d/SUFFIX`,
/// or `ROOT.SUFFIX` where only that earlier layout's file is there.
pub fn child_trace_at(root: &Path, suffix: &str) -> PathBuf {
    let mut dir_name = root.file_name().unwrap_or_default().to_os_string();
    dir_name.push(".d");
    let mut old_name = root.file_name().unwrap_or_default().to_os_string();
    old_name.push(".");
    old_name.push(suffix);
    let dir = match root.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let new = dir.join(dir_name).join(suffix);
    let old = dir.join(old_name);
    if std::fs::symlink_metadata(&new).is_err() && std::fs::symlink_metadata(&old).is_ok() {
        old
    } else {
        new
    }
}

/// Trace files written by a run whose root trace is `root`: the root first,
/// then `ROOT.d/PID` and `ROOT.d/PID.N` in pid order (docs/trace-format.md);
/// a family of the earlier layout (`ROOT.PID[.N]` beside the root) too.
pub fn trace_family(root: &Path) -> Vec<PathBuf> {
    family_of(root, true)
}

/// `trace_family`; with `regular_only` false, also the entries of the
/// children's names that are no regular files (links, FIFOs), which the
/// library never writes.
pub fn family_of(root: &Path, regular_only: bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if root.exists() {
        out.push(root.to_path_buf());
    }
    let (Some(dir), Some(_)) = (root.parent(), root.file_name()) else { return out };
    let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
    let tree = dir.join(tree_dir(root).file_name().unwrap_or_default());
    // The directory itself is only read when it is one (a link planted at
    // its name is not followed: `record` refuses to run over it).
    let tree_entries = std::fs::symlink_metadata(&tree)
        .ok()
        .filter(|m| m.is_dir())
        .and_then(|_| std::fs::read_dir(&tree).ok())
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((parse_child_suffix(&e.file_name().to_string_lossy())?, e)));
    let beside = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((parse_child_suffix(&child_trace_suffix(root, Path::new(&e.file_name()))?)?, e)));
    let mut children: Vec<(u64, u64, PathBuf)> = tree_entries
        .chain(beside)
        .filter_map(|((pid, generation), e)| {
            // A link, FIFO or directory is no trace the library wrote (it
            // creates regular files only); following one reads what it points at.
            if regular_only && !e.file_type().is_ok_and(|t| t.is_file()) {
                return None;
            }
            Some((pid, generation, e.path()))
        })
        .collect();
    children.sort();
    out.extend(children.into_iter().map(|(_, _, p)| p));
    out
}

/// `.NAME.WHAT-PID` beside `dst`: a temporary file mtlab process `pid`
/// writes before renaming it to `dst` (WHAT: `finish`, `compact` a trace;
/// `out0`…`out7` an output file, `safe_fs::replace`), or `probe`, the file
/// `record` creates and removes to learn that it can write there.
pub fn temp_beside(dst: &Path, what: &str, pid: u32) -> PathBuf {
    let dir = match dst.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = dst.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "trace".into());
    dir.join(format!(".{name}.{what}-{pid}"))
}

/// Every predictable name a run of `mtlab record -o ROOT` by process
/// `mtlab_pid` of program `program_pid` may touch, for the hostile-user test.
pub fn record_names(root: &Path, mtlab_pid: u32, program_pid: u32) -> Vec<PathBuf> {
    vec![
        root.to_path_buf(),
        // The children's traces are inside it, where only this user can write.
        tree_dir(root),
        temp_beside(root, "finish", mtlab_pid),
        temp_beside(root, "compact", mtlab_pid),
        temp_beside(root, "probe", mtlab_pid),
        ctl_page(program_pid),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_trace_is_named_and_read_back_by_its_suffix() {
        let root = Path::new("/tmp/x/t.mtl");
        assert_eq!(child_trace(root, 42, 0), Path::new("/tmp/x/t.mtl.d/42"));
        assert_eq!(child_trace(root, 42, 1), Path::new("/tmp/x/t.mtl.d/42.1"));
        assert_eq!(child_trace_suffix(root, &child_trace(root, 42, 1)).as_deref(), Some("42.1"));
        assert_eq!(child_trace_suffix(root, Path::new("/tmp/x/t.mtl.42.1")).as_deref(), Some("42.1"), "the earlier layout");
        assert_eq!(child_trace_suffix(root, Path::new("/tmp/x/u.mtl.42")), None);
        assert_eq!(child_trace_suffix(root, Path::new("/tmp/x/u.mtl.d/42")), None);
        assert_eq!(parse_child_suffix("42.1"), Some((42, 1)));
        assert_eq!(parse_child_suffix("42"), Some((42, 0)));
        for bad in ["", "x", "42.", "42.x", "42.1.2", "-1"] {
            assert_eq!(parse_child_suffix(bad), None, "{bad}");
        }
        assert_eq!(child_trace_at(root, "42.1"), Path::new("/tmp/x/t.mtl.d/42.1"));
        assert_eq!(child_trace_at(Path::new("t.mtl"), "42"), Path::new("./t.mtl.d/42"));
    }
}
