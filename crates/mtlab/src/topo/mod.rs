//! CPU topology from sysfs (`/sys/devices/system/{cpu,node}`): packages,
//! dies, cores, SMT siblings, caches and the CPUs sharing each, NUMA nodes;
//! limited to the CPUs that are online and that this process may use. Every
//! pair of CPUs gets a placement class, which the threads study pins ring
//! neighbours by and the affinity study groups its matrix by.
//!
//! Read from a root directory, so tests (and `mtlab topo --sysfs DIR`) can
//! use the recorded trees of other machines.
//!
//! `mod.rs` reads the tree and classes the pairs; `view.rs` makes `mtlab
//! topo`'s views. Recorded trees of other machines:
//! `crates/mtlab/tests/fixtures/sysfs/`.

mod view;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::study::env::{allowed_cpus, parse_cpu_list};

#[derive(Debug, thiserror::Error)]
pub enum TopoError {
    #[error("cannot read the CPU topology from {path}: {source} (give the directory that holds cpu/ and node/, e.g. /sys/devices/system)")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: `{text}` is not a CPU list: {why}")]
    BadList { path: PathBuf, text: String, why: String },
    #[error("{path}: `{text}` is not a number")]
    BadNumber { path: PathBuf, text: String },
    #[error("none of the online CPUs ({online}) is one this process may use")]
    NoCpus { online: String },
}

/// How close two CPUs are; the nearest class that applies wins.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    Same,
    Smt,
    Core,
    Llc,
    Package,
    Remote,
}

impl Placement {
    pub const ALL: [Placement; 6] = [Placement::Same, Placement::Smt, Placement::Core, Placement::Llc, Placement::Package, Placement::Remote];
    pub const NAMES: [&'static str; 6] = ["same", "smt", "core", "llc", "package", "remote"];

    pub fn name(self) -> &'static str {
        Placement::NAMES[self as usize]
    }

    pub fn parse(s: &str) -> Option<Placement> {
        Placement::NAMES.iter().position(|n| *n == s).map(|i| Placement::ALL[i])
    }

    pub fn describe(self) -> &'static str {
        match self {
            Placement::Same => "the same logical CPU",
            Placement::Smt => "SMT siblings: two hardware threads of one physical core",
            Placement::Core => "different cores that share an L2 cache (a core cluster)",
            Placement::Llc => "different cores that share the last-level cache but no L2",
            Placement::Package => "the same package (socket) with no shared cache, e.g. two core complexes",
            Placement::Remote => "different packages (sockets)",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cpu {
    pub id: usize,
    pub package: u32,
    pub die: u32,
    pub core: u32,
    /// Hardware threads of this CPU's core, itself included.
    pub smt_siblings: Vec<usize>,
    pub node: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cache {
    pub level: u32,
    /// Data, Instruction or Unified.
    pub kind: String,
    /// As sysfs writes it (`32K`).
    pub size: Option<String>,
    /// Every CPU sharing it, allowed or not.
    pub shared_by: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Topology {
    /// Where it was read from.
    pub source: PathBuf,
    /// Online and allowed, by id.
    pub cpus: Vec<Cpu>,
    /// Online CPUs this process may not use.
    pub excluded: Vec<usize>,
    /// Distinct caches seen from the allowed CPUs, by level.
    pub caches: Vec<Cache>,
    /// NUMA nodes with their allowed CPUs.
    pub nodes: Vec<(u32, Vec<usize>)>,
}

fn read(path: &Path) -> Result<String, TopoError> {
    std::fs::read_to_string(path).map(|s| s.trim().to_string()).map_err(|source| TopoError::Read { path: path.to_path_buf(), source })
}

fn read_opt(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

fn list(path: &Path, text: &str) -> Result<Vec<usize>, TopoError> {
    parse_cpu_list(text).map_err(|why| TopoError::BadList { path: path.to_path_buf(), text: text.to_string(), why })
}

fn number(path: &Path) -> Result<Option<u32>, TopoError> {
    match read_opt(path) {
        None => Ok(None),
        // -1: the kernel does not know (some virtual machines' die_id).
        Some(t) if t == "-1" => Ok(None),
        Some(t) => t.parse().map(Some).map_err(|_| TopoError::BadNumber { path: path.to_path_buf(), text: t }),
    }
}

impl Topology {
    /// This machine, limited to the CPUs this process may use.
    pub fn read() -> Result<Topology, TopoError> {
        Topology::from_root(Path::new("/sys/devices/system"), Some(&allowed_cpus()))
    }

    /// The tree under `root` (holding `cpu/` and `node/`); `allowed` limits
    /// it (None: every online CPU).
    pub fn from_root(root: &Path, allowed: Option<&[usize]>) -> Result<Topology, TopoError> {
        let online_path = root.join("cpu/online");
        let online = list(&online_path, &read(&online_path)?)?;
        let (cpus_ok, excluded): (Vec<usize>, Vec<usize>) = online.iter().partition(|c| allowed.is_none_or(|a| a.contains(c)));
        if cpus_ok.is_empty() {
            return Err(TopoError::NoCpus { online: crate::study::env::cpu_list(&online) });
        }
        let nodes_all = read_nodes(root)?;
        let mut cpus = Vec::new();
        let mut caches: Vec<Cache> = Vec::new();
        for &id in &cpus_ok {
            let dir = root.join(format!("cpu/cpu{id}"));
            let t = dir.join("topology");
            let siblings_path = t.join("thread_siblings_list");
            let smt_siblings = match read_opt(&siblings_path) {
                Some(s) => list(&siblings_path, &s)?,
                None => vec![id],
            };
            cpus.push(Cpu {
                id,
                package: number(&t.join("physical_package_id"))?.unwrap_or(0),
                die: number(&t.join("die_id"))?.unwrap_or(0),
                core: number(&t.join("core_id"))?.unwrap_or(id as u32),
                smt_siblings,
                node: nodes_all.iter().find(|(_, c)| c.contains(&id)).map(|(n, _)| *n),
            });
            for k in 0.. {
                let idx = dir.join(format!("cache/index{k}"));
                if !idx.exists() {
                    break;
                }
                let shared_path = idx.join("shared_cpu_list");
                let Some(shared) = read_opt(&shared_path) else { continue };
                let cache = Cache {
                    level: number(&idx.join("level"))?.unwrap_or(0),
                    kind: read_opt(&idx.join("type")).unwrap_or_else(|| "Unified".into()),
                    // sysfs says "32K": shown as every other size is ("32KiB").
                    size: read_opt(&idx.join("size")).map(|s| crate::units::parse_size(&s).map(crate::units::format_size).unwrap_or(s)),
                    shared_by: list(&shared_path, &shared)?,
                };
                if !caches.contains(&cache) {
                    caches.push(cache);
                }
            }
        }
        caches.sort_by(|a, b| (a.level, &a.kind, &a.shared_by).cmp(&(b.level, &b.kind, &b.shared_by)));
        let nodes = nodes_all
            .into_iter()
            .map(|(n, c)| (n, c.into_iter().filter(|x| cpus_ok.contains(x)).collect::<Vec<_>>()))
            .filter(|(_, c)| !c.is_empty())
            .collect();
        Ok(Topology { source: root.to_path_buf(), cpus, excluded, caches, nodes })
    }

    /// The CPUs, allowed and online, sorted.
    pub fn cpus(&self) -> Vec<usize> {
        self.cpus.iter().map(|c| c.id).collect()
    }

    fn cpu(&self, id: usize) -> Option<&Cpu> {
        self.cpus.iter().find(|c| c.id == id)
    }

    /// The placement class of two CPUs (both must be in `cpus()`; an
    /// unknown CPU counts as remote).
    pub fn class(&self, a: usize, b: usize) -> Placement {
        if a == b {
            return Placement::Same;
        }
        let (Some(x), Some(y)) = (self.cpu(a), self.cpu(b)) else { return Placement::Remote };
        if x.smt_siblings.contains(&b) || (x.package == y.package && x.die == y.die && x.core == y.core) {
            return Placement::Smt;
        }
        let shared = |pred: &dyn Fn(&Cache) -> bool| self.caches.iter().any(|c| pred(c) && c.shared_by.contains(&a) && c.shared_by.contains(&b));
        if shared(&|c| c.level == 2 && c.kind != "Instruction") {
            return Placement::Core;
        }
        if shared(&|c| c.level >= 3) {
            return Placement::Llc;
        }
        if x.package == y.package {
            return Placement::Package;
        }
        Placement::Remote
    }

    /// The first pair of allowed CPUs in `class` (`(c, c)` for `same`).
    pub fn pair(&self, class: Placement) -> Option<(usize, usize)> {
        let ids = self.cpus();
        ids.iter().flat_map(|&a| ids.iter().filter(move |&&b| b >= a).map(move |&b| (a, b))).find(|&(a, b)| self.class(a, b) == class)
    }

    /// The views of `mtlab topo`.
    pub fn document(&self) -> crate::export::Document {
        view::document(self)
    }
}

/// NUMA nodes and their CPUs (none when the machine has no node directory).
fn read_nodes(root: &Path) -> Result<Vec<(u32, Vec<usize>)>, TopoError> {
    let Ok(entries) = std::fs::read_dir(root.join("node")) else { return Ok(Vec::new()) };
    let mut nodes = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(n) = name.strip_prefix("node").and_then(|n| n.parse::<u32>().ok()) else { continue };
        let p = e.path().join("cpulist");
        if let Some(text) = read_opt(&p) {
            nodes.push((n, list(&p, &text)?));
        }
    }
    nodes.sort();
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Topology {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs").join(name);
        Topology::from_root(&root, None).unwrap()
    }

    #[test]
    fn two_sockets_of_six_cores() {
        let t = fixture("2s-6c");
        assert_eq!(t.cpus().len(), 12);
        assert_eq!(t.class(0, 0), Placement::Same);
        assert_eq!(t.class(0, 1), Placement::Llc);
        assert_eq!(t.class(0, 6), Placement::Remote);
        assert_eq!(t.class(7, 11), Placement::Llc);
        assert_eq!(t.pair(Placement::Remote), Some((0, 6)));
        assert_eq!(t.pair(Placement::Smt), None);
        assert_eq!(t.nodes, vec![(0, vec![0, 1, 2, 3, 4, 5]), (1, vec![6, 7, 8, 9, 10, 11])]);
        // Restricted to CPUs 6-11: one socket left, nothing remote.
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/2s-6c");
        let t = Topology::from_root(&root, Some(&[6, 7, 8, 9, 10, 11])).unwrap();
        assert_eq!(t.excluded, vec![0, 1, 2, 3, 4, 5]);
        assert_eq!(t.pair(Placement::Remote), None);
        assert_eq!(t.pair(Placement::Llc), Some((6, 7)));
    }

    #[test]
    fn smt_siblings_and_private_l2() {
        let t = fixture("1s-4c-smt");
        assert_eq!(t.cpus().len(), 8);
        // Linux numbers the second hardware thread of core k as CPU k+4.
        assert_eq!(t.class(0, 4), Placement::Smt);
        assert_eq!(t.class(0, 1), Placement::Llc);
        assert_eq!(t.pair(Placement::Smt), Some((0, 4)));
        assert_eq!(t.pair(Placement::Core), None);
    }

    #[test]
    fn core_complexes_with_their_own_l3() {
        let t = fixture("amd-2ccx");
        assert_eq!(t.class(0, 3), Placement::Llc);
        assert_eq!(t.class(0, 4), Placement::Package);
        assert_eq!(t.pair(Placement::Package), Some((0, 4)));
    }

    #[test]
    fn a_one_cpu_container_without_caches() {
        let t = fixture("1cpu");
        assert_eq!(t.cpus(), vec![0]);
        assert!(t.caches.is_empty());
        assert_eq!(t.pair(Placement::Same), Some((0, 0)));
        assert_eq!(t.pair(Placement::Llc), None);
    }

    #[test]
    fn l2_clusters_are_core_class() {
        let t = fixture("cluster-l2");
        assert_eq!(t.class(0, 1), Placement::Core);
        assert_eq!(t.class(0, 2), Placement::Llc);
    }

    #[test]
    fn this_machine_reads() {
        let t = Topology::read().unwrap();
        assert_eq!(t.cpus(), allowed_cpus());
        for &a in &t.cpus() {
            assert_eq!(t.class(a, a), Placement::Same);
        }
    }

    #[test]
    fn a_missing_root_says_what_to_give() {
        let e = Topology::from_root(Path::new("/nonexistent"), None).unwrap_err().to_string();
        assert!(e.contains("cpu/ and node/"), "{e}");
    }

    #[test]
    fn names_round_trip() {
        for p in Placement::ALL {
            assert_eq!(Placement::parse(p.name()), Some(p));
        }
        assert_eq!(Placement::parse("numa"), None);
    }
}
