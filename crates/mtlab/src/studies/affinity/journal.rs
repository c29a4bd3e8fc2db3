//! Every system setting the affinity study changes, written down before it
//! is changed, and put back on every way out: a normal end, a failure, Ctrl-C,
//! SIGTERM or SIGHUP, and — for a run killed with SIGKILL — by the next run.
//!
//! The journal of a run lives in `/run/mtlab/affinity/PID.json` (a tmpfs,
//! cleared at boot like the settings themselves). A run starts by undoing the
//! journals of runs whose process is gone and by removing their namespaces.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::net;
use crate::platform::interrupt::{on_interrupt, OnInterrupt};
use crate::platform::process::pid_alive;
use crate::studies::StudyError;

/// Where journals live; a test may point it elsewhere.
pub const DIR: &str = "/run/mtlab/affinity";

/// One change and how to take it back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Undo {
    /// A sysfs or procfs file (RPS mask, IRQ affinity) and its old content.
    File { path: PathBuf, old: String },
    /// A network namespace mtlab created; deleting it removes its veth pair.
    Netns { name: String },
}

impl Undo {
    fn apply(&self) -> Result<(), String> {
        match self {
            Undo::File { path, old } => std::fs::write(path, old).map_err(|e| format!("{}: {e}", path.display())),
            Undo::Netns { name } => net::delete_netns(name),
        }
    }

    /// What a person types to undo it by hand.
    pub fn command(&self) -> String {
        match self {
            Undo::File { path, old } => format!("echo {} > {}", old.trim(), path.display()),
            Undo::Netns { name } => format!("ip netns delete {name}"),
        }
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Entries {
    undo: Vec<Undo>,
}

struct Active {
    path: PathBuf,
    entries: Entries,
}

/// The journal of this run, reachable from the signal thread.
static ACTIVE: Mutex<Option<Active>> = Mutex::new(None);

/// Holds this run's journal; dropping it undoes every change.
pub struct Journal {
    /// Undoes the journal if mtlab is interrupted meanwhile.
    _interrupted: OnInterrupt,
}

/// What the sweep of a killed run's leftovers did, for the run's notes.
#[derive(Debug, Default)]
pub struct Swept {
    pub restored: Vec<String>,
    pub failed: Vec<String>,
}

impl Journal {
    /// Sweeps leftovers of dead runs, then starts this run's journal.
    pub fn begin(dir: &Path) -> Result<(Journal, Swept), StudyError> {
        std::fs::create_dir_all(dir).map_err(|source| StudyError::Io { path: dir.to_path_buf(), source })?;
        let swept = sweep(dir);
        let path = dir.join(format!("{}.json", std::process::id()));
        let mut active = ACTIVE.lock().unwrap_or_else(|p| p.into_inner());
        if active.is_some() {
            return Err(StudyError::Config("an affinity run is already active in this process".into()));
        }
        *active = Some(Active { path: path.clone(), entries: Entries::default() });
        persist(active.as_ref().expect("just set"))?;
        drop(active);
        Ok((Journal { _interrupted: on_interrupt(undo_active) }, swept))
    }

    /// Writes `new` into `path` after noting its old content.
    pub fn write_file(&self, path: &Path, new: &str) -> Result<(), StudyError> {
        let old = std::fs::read_to_string(path).map_err(|source| StudyError::Io { path: path.to_path_buf(), source })?;
        self.note(Undo::File { path: path.to_path_buf(), old: old.trim().to_string() })?;
        std::fs::write(path, new).map_err(|source| StudyError::Io { path: path.to_path_buf(), source })
    }

    /// Notes a change about to be made (first, so a kill in between leaves a record).
    pub fn note(&self, undo: Undo) -> Result<(), StudyError> {
        let mut active = ACTIVE.lock().unwrap_or_else(|p| p.into_inner());
        let a = active.as_mut().expect("a Journal exists only while active");
        // A file changed twice keeps its first (original) content.
        let known = a.entries.undo.iter().any(|u| match (u, &undo) {
            (Undo::File { path: p, .. }, Undo::File { path: q, .. }) => p == q,
            (x, y) => x == y,
        });
        if !known {
            a.entries.undo.push(undo);
            persist(a)?;
        }
        Ok(())
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        let mut active = ACTIVE.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(a) = active.take() {
            for f in undo_all(&a.entries) {
                say!("mtlab: could not restore {f}");
            }
            let _ = std::fs::remove_file(&a.path);
        }
    }
}

fn persist(a: &Active) -> Result<(), StudyError> {
    let json = serde_json::to_vec_pretty(&a.entries).expect("journal entries serialize");
    let tmp = a.path.with_extension("tmp");
    std::fs::write(&tmp, json)
        .and_then(|_| std::fs::rename(&tmp, &a.path))
        .map_err(|source| StudyError::Io { path: a.path.clone(), source })
}

/// Undoes in reverse order; returns what failed.
fn undo_all(e: &Entries) -> Vec<String> {
    e.undo.iter().rev().filter_map(|u| u.apply().err()).collect()
}

/// Undoes the journals of runs whose process is gone, and removes namespaces
/// of such runs that no journal names (killed between create and note).
fn sweep(dir: &Path) -> Swept {
    let mut swept = Swept::default();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for f in rd.flatten() {
            let path = f.path();
            let Some(pid) = path.file_stem().and_then(|s| s.to_str()).and_then(|s| s.parse::<u32>().ok()) else { continue };
            if pid_alive(pid) {
                continue;
            }
            let entries: Entries = std::fs::read(&path).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
            for u in entries.undo.iter().rev() {
                match u.apply() {
                    Ok(()) => swept.restored.push(u.command()),
                    Err(e) => swept.failed.push(e),
                }
            }
            let _ = std::fs::remove_file(&path);
        }
    }
    for (name, pid) in net::mtlab_namespaces() {
        if !pid_alive(pid) {
            match net::delete_netns(&name) {
                Ok(()) => swept.restored.push(format!("ip netns delete {name}")),
                Err(e) => swept.failed.push(e),
            }
        }
    }
    swept
}

/// On SIGINT, SIGTERM or SIGHUP (`platform::interrupt` exits afterwards).
fn undo_active() {
    let mut active = ACTIVE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(a) = active.take() {
        let failed = undo_all(&a.entries);
        let _ = std::fs::remove_file(&a.path);
        let restored = a.entries.undo.len() - failed.len();
        say!("\nmtlab: interrupted; restored {restored} setting{}", if restored == 1 { "" } else { "s" });
        for f in failed {
            say!("mtlab: could not restore {f}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_runs_journal_is_undone_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let setting = dir.path().join("rps_cpus");
        std::fs::write(&setting, "2\n").unwrap();
        // A pid no process has: above the kernel's pid_max limit.
        let dead = dir.path().join("99999999.json");
        let e = Entries { undo: vec![Undo::File { path: setting.clone(), old: "0".into() }] };
        std::fs::write(&dead, serde_json::to_vec(&e).unwrap()).unwrap();
        let s = sweep(dir.path());
        assert_eq!(std::fs::read_to_string(&setting).unwrap(), "0");
        assert!(!dead.exists());
        assert_eq!(s.restored.len(), 1, "{s:?}");
    }

    #[test]
    fn changes_are_undone_on_drop_and_the_first_content_wins() {
        let dir = tempfile::tempdir().unwrap();
        let setting = dir.path().join("smp_affinity_list");
        std::fs::write(&setting, "0-1\n").unwrap();
        let (j, _) = Journal::begin(dir.path()).unwrap();
        j.write_file(&setting, "1").unwrap();
        j.write_file(&setting, "0").unwrap();
        let journal = dir.path().join(format!("{}.json", std::process::id()));
        let kept: Entries = serde_json::from_slice(&std::fs::read(&journal).unwrap()).unwrap();
        assert_eq!(kept.undo, vec![Undo::File { path: setting.clone(), old: "0-1".into() }]);
        drop(j);
        assert_eq!(std::fs::read_to_string(&setting).unwrap(), "0-1");
        assert!(!journal.exists());
    }
}
