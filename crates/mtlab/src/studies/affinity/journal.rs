//! Every system setting the affinity study changes, written down before it
//! is changed, and put back on every way out: a normal end, a failure, Ctrl-C,
//! SIGTERM or SIGHUP, and — for a run killed with SIGKILL — by the next run.
//!
//! The journal of a run lives in `/run/mtlab/affinity/PID.json` (a tmpfs,
//! cleared at boot like the settings themselves). A run starts by undoing the
//! journals of runs whose process is gone and by removing their namespaces.
//!
//! The next run acts on a journal as root, so a journal is believed only as
//! far as the study could have written it: the directory is root's and
//! writable by no one else (made 0700, checked whole), a journal is a
//! regular file of root's, and each entry must be a setting the study
//! changes — an RPS mask or an IRQ affinity, with a value of that form — or
//! a namespace of the study's naming. Anything else is refused and
//! reported, never applied.

use std::io::Write;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::net;
use crate::platform::interrupt::{on_interrupt, OnInterrupt};
use crate::platform::process::pid_alive;
use crate::platform::{names, safe_fs};
use crate::studies::StudyError;

/// Where journals live; a test may point it elsewhere.
pub const DIR: &str = names::AFFINITY_JOURNALS;

/// The most bytes of a journal read back: the study notes one entry per
/// receive interrupt of one device, and a namespace, a few KiB in all.
const MAX_JOURNAL: u64 = 1 << 20;

/// The longest old value of a setting accepted from a journal: a CPU mask
/// of 8192 CPUs in sysfs's 32-bit words is 2304 characters.
const MAX_SETTING: usize = 8192;

/// Where the settings the study changes live (tests use a copy elsewhere).
#[derive(Debug, Clone)]
pub struct Settings {
    /// Receive queues' RPS masks: `NET/IFACE/queues/rx-N/rps_cpus`.
    pub sys_class_net: PathBuf,
    /// Interrupt affinities: `IRQ/N/smp_affinity_list`.
    pub proc_irq: PathBuf,
}

impl Settings {
    pub fn system() -> Settings {
        Settings { sys_class_net: "/sys/class/net".into(), proc_irq: "/proc/irq".into() }
    }

    /// Which of the settings the study changes `path` is, if it is one.
    fn kind_of(&self, path: &Path) -> Option<Setting> {
        if let Some(rest) = exact_rest(path, &self.sys_class_net) {
            return match rest.as_slice() {
                [iface, "queues", rx, "rps_cpus"] if is_iface(iface) && rx.strip_prefix("rx-").is_some_and(is_number) => Some(Setting::Rps),
                _ => None,
            };
        }
        match exact_rest(path, &self.proc_irq)?.as_slice() {
            [n, "smp_affinity_list"] if is_number(n) => Some(Setting::Irq),
            _ => None,
        }
    }

    /// Why writing `old` into `path` is not a change the study takes back;
    /// None when it is.
    fn refusal(&self, path: &Path, old: &str) -> Option<String> {
        let Some(kind) = self.kind_of(path) else {
            return Some(format!(
                "{path:?} is not a file the study changes (only {}/IFACE/queues/rx-N/rps_cpus and {}/N/smp_affinity_list)",
                self.sys_class_net.display(),
                self.proc_irq.display()
            ));
        };
        let (form, allowed): (&str, fn(char) -> bool) = match kind {
            Setting::Rps => ("a CPU mask", |c| c.is_ascii_hexdigit() || c == ','),
            Setting::Irq => ("a CPU list", |c| c.is_ascii_digit() || c == ',' || c == '-'),
        };
        if old.is_empty() || old.len() > MAX_SETTING || !old.chars().all(allowed) {
            return Some(format!("the value {:?} for {} is not {form}", truncated(old), path.display()));
        }
        None
    }
}

/// The settings the study changes.
enum Setting {
    /// A receive queue's RPS mask (hex words).
    Rps,
    /// An interrupt's affinity (a CPU list).
    Irq,
}

/// The components of `path` after `root`, when `path` is exactly `root`
/// followed by plain names (no `..`, `.`, or doubled or trailing slash).
fn exact_rest<'a>(path: &'a Path, root: &Path) -> Option<Vec<&'a str>> {
    let rest = path.strip_prefix(root).ok()?;
    let names: Vec<&str> = rest
        .components()
        .map(|c| match c {
            Component::Normal(n) => n.to_str(),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let rebuilt = names.iter().fold(root.to_path_buf(), |p, n| p.join(n));
    (rebuilt.as_os_str() == path.as_os_str()).then_some(names)
}

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.len() <= 10 && s.bytes().all(|b| b.is_ascii_digit())
}

/// A name the kernel accepts for a network device (`dev_valid_name`).
fn is_iface(s: &str) -> bool {
    !s.is_empty() && s.len() < 16 && s != "." && s != ".." && !s.chars().any(|c| c == '/' || c == ':' || c.is_whitespace())
}

/// At most 60 characters of `s`, for a message.
fn truncated(s: &str) -> String {
    s.chars().take(60).collect()
}

/// One change and how to take it back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Undo {
    /// A sysfs or procfs file (RPS mask, IRQ affinity) and its old content.
    File { path: PathBuf, old: String },
    /// A network namespace mtlab created; deleting it removes its veth pair.
    Netns { name: String },
}

impl Undo {
    /// Why an entry read from a journal is not one the study writes.
    fn refusal(&self, settings: &Settings) -> Option<String> {
        match self {
            Undo::File { path, old } => settings.refusal(path, old),
            Undo::Netns { name } if names::affinity_netns_pid(name).is_some() => None,
            Undo::Netns { name } => {
                Some(format!("the namespace {:?} is not one the study makes (they are named {}PID)", truncated(name), names::AFFINITY_NETNS_PREFIX))
            }
        }
    }

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
    /// Where the next journal is written before it replaces `path`.
    temp: PathBuf,
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
        let dir = journal_dir(dir)?;
        let swept = sweep(&dir, &Settings::system());
        let pid = std::process::id();
        let mut active = ACTIVE.lock().unwrap_or_else(|p| p.into_inner());
        if active.is_some() {
            return Err(StudyError::Config("an affinity run is already active in this process".into()));
        }
        let (path, temp) = (names::affinity_journal(&dir, pid), names::affinity_journal_temp(&dir, pid));
        *active = Some(Active { path, temp, entries: Entries::default() });
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

/// The journal directory, made 0700 if missing, and refused unless root
/// alone can change it (and every directory above it).
fn journal_dir(dir: &Path) -> Result<PathBuf, StudyError> {
    safe_fs::private_dir(dir).map_err(|e| {
        StudyError::Config(format!(
            "cannot keep the affinity journal in {}: {e}. The next run restores settings from it as root, so it must be a directory \
             only root can change: check who made it, then `chmod 700` it or remove it (when no affinity run is active)",
            dir.display()
        ))
    })
}

fn persist(a: &Active) -> Result<(), StudyError> {
    let json = serde_json::to_vec_pretty(&a.entries).expect("journal entries serialize");
    let io = |source| StudyError::Io { path: a.path.clone(), source };
    // A temp left by a killed run that had this pid is stale.
    let _ = std::fs::remove_file(&a.temp);
    let mut f = safe_fs::create_new(&a.temp, 0o600).map_err(io)?;
    f.write_all(&json).and_then(|()| f.sync_data()).map_err(io)?;
    std::fs::rename(&a.temp, &a.path).map_err(io)
}

/// A journal's entries, if it is a regular file of this user's of a sane size.
fn read_journal(path: &Path) -> Result<Entries, String> {
    let bytes = safe_fs::read_owned_regular(path, MAX_JOURNAL + 1).map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_JOURNAL {
        return Err(format!("larger than the {} KiB a journal takes", MAX_JOURNAL >> 10));
    }
    serde_json::from_slice(&bytes).map_err(|e| format!("not a journal ({e})"))
}

/// Undoes in reverse order; returns what failed.
fn undo_all(e: &Entries) -> Vec<String> {
    e.undo.iter().rev().filter_map(|u| u.apply().err()).collect()
}

/// Undoes the journals of runs whose process is gone, and removes namespaces
/// of such runs that no journal names (killed between create and note).
/// A journal that is not root's own regular file is left as it is, and an
/// entry the study never writes is skipped; both are reported.
fn sweep(dir: &Path, settings: &Settings) -> Swept {
    let mut swept = Swept::default();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for f in rd.flatten() {
            let path = f.path();
            let Some((pid, journal)) = f.file_name().to_str().and_then(names::affinity_journal_pid) else { continue };
            if pid_alive(pid) {
                continue;
            }
            if !journal {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            let entries = match read_journal(&path) {
                Ok(e) => e,
                Err(why) => {
                    swept.failed.push(format!("{}: {why}; not applied (look at it, then remove it)", path.display()));
                    continue;
                }
            };
            for u in entries.undo.iter().rev() {
                if let Some(why) = u.refusal(settings) {
                    swept.failed.push(format!("{}: refused an entry the study never writes: {why}", path.display()));
                    continue;
                }
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
    use std::os::unix::fs::PermissionsExt;

    /// A pid no process has: above the kernel's pid_max limit.
    const DEAD: u32 = 99_999_999;

    /// Settings files under `root` as the system has them: an RPS mask and an IRQ affinity.
    fn fake_settings(root: &Path) -> (Settings, PathBuf, PathBuf) {
        let settings = Settings { sys_class_net: root.join("net"), proc_irq: root.join("irq") };
        let rps = settings.sys_class_net.join("eth9/queues/rx-0/rps_cpus");
        let irq = settings.proc_irq.join("38/smp_affinity_list");
        for (f, v) in [(&rps, "00000002\n"), (&irq, "1\n")] {
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, v).unwrap();
        }
        (settings, rps, irq)
    }

    fn plant(dir: &Path, undo: Vec<Undo>) -> PathBuf {
        let path = names::affinity_journal(dir, DEAD);
        std::fs::write(&path, serde_json::to_vec(&Entries { undo }).unwrap()).unwrap();
        path
    }

    #[test]
    fn a_dead_runs_journal_is_undone_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let (settings, rps, irq) = fake_settings(dir.path());
        let dead = plant(
            dir.path(),
            vec![Undo::File { path: rps.clone(), old: "00000000".into() }, Undo::File { path: irq.clone(), old: "0-3".into() }],
        );
        let s = sweep(dir.path(), &settings);
        assert_eq!(std::fs::read_to_string(&rps).unwrap(), "00000000");
        assert_eq!(std::fs::read_to_string(&irq).unwrap(), "0-3");
        assert!(!dead.exists());
        assert_eq!((s.restored.len(), s.failed.len()), (2, 0), "{s:?}");
    }

    #[test]
    fn a_journal_planted_by_another_user_is_not_applied() {
        let dir = tempfile::tempdir().unwrap();
        let (settings, rps, _) = fake_settings(dir.path());
        let planted = plant(dir.path(), vec![Undo::File { path: rps.clone(), old: "ffffffff".into() }]);
        std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).unwrap();
        let s = sweep(dir.path(), &settings);
        assert_eq!(std::fs::read_to_string(&rps).unwrap(), "00000002\n", "not applied");
        assert!(s.restored.is_empty(), "{s:?}");
        assert!(s.failed.len() == 1 && s.failed[0].contains("belongs to user 65534") && s.failed[0].contains("not applied"), "{s:?}");
        assert!(planted.exists(), "left for a person to look at");
    }

    #[test]
    fn entries_the_study_never_writes_are_refused_and_the_rest_applied() {
        let dir = tempfile::tempdir().unwrap();
        let (settings, rps, irq) = fake_settings(dir.path());
        // Stands in for /etc/passwd: a file the study never writes.
        let victim = dir.path().join("passwd");
        std::fs::write(&victim, "root:x:0:0::/root:/bin/bash\n").unwrap();
        let queue_dir = settings.sys_class_net.join("eth9/queues/rx-0");
        let hostile = [
            Undo::File { path: victim.clone(), old: "root::0:0::/root:/bin/sh".into() },
            Undo::File { path: queue_dir.join("../../../../passwd"), old: "0".into() },
            Undo::File { path: settings.proc_irq.join("38/../../passwd/smp_affinity_list"), old: "0".into() },
            Undo::File { path: settings.sys_class_net.join("eth9/queues/tx-0/rps_cpus"), old: "0".into() },
            Undo::File { path: PathBuf::from(format!("{}/38//smp_affinity_list", settings.proc_irq.display())), old: "0".into() },
            Undo::File { path: irq.clone(), old: "0\nroot::0:0".into() },
            Undo::Netns { name: "production".into() },
            Undo::Netns { name: "mtlab-aff-12; reboot".into() },
        ];
        let mut undo = vec![Undo::File { path: rps.clone(), old: "00000001".into() }];
        undo.extend(hostile.iter().cloned());
        let journal = plant(dir.path(), undo);
        let s = sweep(dir.path(), &settings);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root:x:0:0::/root:/bin/bash\n");
        assert_eq!(std::fs::read_to_string(&irq).unwrap(), "1\n");
        assert_eq!(std::fs::read_to_string(&rps).unwrap(), "00000001", "the entry of the study's own form is applied");
        assert_eq!(s.restored.len(), 1, "{s:?}");
        assert_eq!(s.failed.len(), hostile.len(), "{s:?}");
        assert!(s.failed.iter().all(|f| f.contains("refused an entry the study never writes")), "{s:?}");
        assert!(!journal.exists());
    }

    #[test]
    fn a_directory_others_can_write_is_refused() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("affinity");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = journal_dir(&dir).unwrap_err().to_string();
        assert!(e.contains("can be written by other users") && e.contains("chmod 700"), "{e}");
    }

    /// Run by `the_directory_is_made_0700_even_under_umask_000` in a child
    /// whose umask is 000 (a umask is per process: setting it here would
    /// change the files of the tests running beside).
    #[test]
    #[ignore = "run in a child by the_directory_is_made_0700_even_under_umask_000"]
    fn make_the_journal_directory() {
        let Some(dir) = std::env::var_os("MTLAB_TEST_JOURNAL_DIR") else { return };
        // SAFETY: umask only sets this process's mask (set back at once).
        let mask = unsafe { libc::umask(0) };
        assert_eq!(mask, 0, "the parent test gives this child umask 000");
        journal_dir(Path::new(&dir)).unwrap();
    }

    #[test]
    fn the_directory_is_made_0700_even_under_umask_000() {
        use std::os::unix::process::CommandExt;
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("run/mtlab/affinity");
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "studies::affinity::journal::tests::make_the_journal_directory", "--include-ignored", "--test-threads=1"]);
        cmd.env("MTLAB_TEST_JOURNAL_DIR", &dir);
        // SAFETY: between fork and exec the closure only calls umask, a system call.
        unsafe {
            cmd.pre_exec(|| {
                libc::umask(0);
                Ok(())
            });
        }
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && stdout.contains("1 passed"), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
        for d in [dir.as_path(), dir.parent().unwrap(), dir.parent().unwrap().parent().unwrap()] {
            let mode = std::fs::metadata(d).unwrap().permissions().mode() & 0o7777;
            assert_eq!(mode, 0o700, "{} is {mode:o}", d.display());
        }
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

    #[test]
    fn the_study_names_its_own_namespaces_and_journals() {
        assert_eq!(names::affinity_netns_pid(&names::affinity_netns(4242)), Some(4242));
        for foreign in ["mtlab-aff-", "mtlab-aff-0123", "mtlab-aff-12x", "mtlab-aff-+5", "other-1"] {
            assert_eq!(names::affinity_netns_pid(foreign), None, "{foreign}");
        }
        assert_eq!(names::affinity_journal_pid("17.json"), Some((17, true)));
        assert_eq!(names::affinity_journal_pid("17.tmp"), Some((17, false)));
        assert_eq!(names::affinity_journal_pid("17.json.bak"), None);
    }
}
