//! How `mtlab topo` shows a topology: the tree, the caches, and each CPU
//! pair's placement class.

use serde_json::json;

use super::{Placement, Topology};
use crate::export::{Cell, Document, Table, View};
use crate::study::env::cpu_list;

/// Above this many CPUs the pair matrix is too wide to read; JSON keeps every pair.
const MATRIX_MAX: usize = 32;

pub fn document(t: &Topology) -> Document {
    let mut views = vec![View::Note(format!(
        "CPU topology of {} ({} CPU{}: {})",
        t.source.display(),
        t.cpus.len(),
        if t.cpus.len() == 1 { "" } else { "s" },
        cpu_list(&t.cpus())
    ))];
    if !t.excluded.is_empty() {
        views.push(View::Note(format!(
            "CPUs {} are online but outside this process's affinity mask or cgroup: left out",
            cpu_list(&t.excluded)
        )));
    }
    views.extend(tree(t).into_iter().map(View::Note));
    let mut cpus = Table::new("cpus", "CPUs", &["CPU", "package", "die", "core", "SMT siblings", "NUMA node"], 1).text_column(4);
    for c in &t.cpus {
        cpus.push(vec![
            Cell::Int(c.id as i64),
            Cell::Int(c.package as i64),
            Cell::Int(c.die as i64),
            Cell::Int(c.core as i64),
            Cell::text(cpu_list(&c.smt_siblings)),
            c.node.map(|n| Cell::Int(n as i64)).unwrap_or(Cell::Empty),
        ]);
    }
    views.push(View::Table(cpus));
    let mut caches = Table::new("caches", "caches", &["level", "type", "size", "shared by CPUs"], 2).text_column(3);
    for c in &t.caches {
        caches.push(vec![
            Cell::text(format!("L{}", c.level)),
            Cell::text(&c.kind),
            Cell::text(c.size.clone().unwrap_or_default()),
            Cell::text(cpu_list(&c.shared_by)),
        ]);
    }
    if !t.caches.is_empty() {
        views.push(View::Table(caches));
    } else {
        views.push(View::Note("no cache information (no cpu/cpuN/cache directories)".into()));
    }
    let ids = t.cpus();
    if ids.len() <= MATRIX_MAX {
        let header: Vec<String> = std::iter::once("CPU".to_string()).chain(ids.iter().map(|c| c.to_string())).collect();
        let cols: Vec<&str> = header.iter().map(String::as_str).collect();
        let mut m = Table::new("placement", "placement class of each CPU pair", &cols, 1);
        for i in 1..cols.len() {
            m = m.text_column(i);
        }
        for &a in &ids {
            let mut row = vec![Cell::Int(a as i64)];
            row.extend(ids.iter().map(|&b| Cell::text(t.class(a, b).name())));
            m.push(row);
        }
        views.push(View::Table(m));
    } else {
        views.push(View::Note(format!("{} CPUs: the pair matrix is left out here (--json has every pair)", ids.len())));
    }
    for p in Placement::ALL {
        views.push(View::Note(match t.pair(p) {
            Some((a, b)) => format!("{:<8} e.g. CPUs {a},{b}: {}", p.name(), p.describe()),
            None => format!("{:<8} none here: {}", p.name(), p.describe()),
        }));
    }
    let pairs: Vec<serde_json::Value> = ids
        .iter()
        .flat_map(|&a| ids.iter().filter(move |&&b| b > a).map(move |&b| (a, b)))
        .map(|(a, b)| json!({"a": a, "b": b, "class": t.class(a, b)}))
        .collect();
    let examples: serde_json::Map<String, serde_json::Value> =
        Placement::ALL.iter().map(|p| (p.name().to_string(), json!(t.pair(*p)))).collect();
    let mut data = serde_json::to_value(t).unwrap_or_default();
    if let Some(o) = data.as_object_mut() {
        o.insert("pairs".into(), json!(pairs));
        o.insert("example_pairs".into(), json!(examples));
    }
    Document { views, data }
}

/// package → die → core → CPUs, with the caches each level shares.
fn tree(t: &Topology) -> Vec<String> {
    let mut out = Vec::new();
    let mut packages: Vec<u32> = t.cpus.iter().map(|c| c.package).collect();
    packages.dedup();
    packages.sort_unstable();
    packages.dedup();
    for p in packages {
        let in_p: Vec<usize> = t.cpus.iter().filter(|c| c.package == p).map(|c| c.id).collect();
        let nodes: Vec<String> = t.nodes.iter().filter(|(_, c)| c.iter().any(|x| in_p.contains(x))).map(|(n, _)| n.to_string()).collect();
        out.push(format!(
            "package {p}: CPUs {}{}{}",
            cpu_list(&in_p),
            if nodes.is_empty() { String::new() } else { format!(", NUMA node {}", nodes.join(",")) },
            shared_caches(t, &in_p, 3)
        ));
        let mut cores: Vec<(u32, u32)> = t.cpus.iter().filter(|c| c.package == p).map(|c| (c.die, c.core)).collect();
        cores.sort_unstable();
        cores.dedup();
        for (die, core) in cores {
            let cpus: Vec<usize> = t.cpus.iter().filter(|c| c.package == p && c.die == die && c.core == core).map(|c| c.id).collect();
            out.push(format!("  die {die} core {core}: CPU {}{}", cpu_list(&cpus), shared_caches(t, &cpus, 1)));
        }
    }
    out
}

/// Caches of at least `min_level` whose sharers include `cpus[0]`, said once per cache.
fn shared_caches(t: &Topology, cpus: &[usize], min_level: u32) -> String {
    let Some(&first) = cpus.first() else { return String::new() };
    let parts: Vec<String> = t
        .caches
        .iter()
        .filter(|c| c.level >= min_level && c.shared_by.contains(&first) && (min_level >= 3 || c.level < 3))
        .map(|c| {
            let kind = match c.kind.as_str() {
                "Data" => "d",
                "Instruction" => "i",
                _ => "",
            };
            format!("L{}{kind} {} (CPUs {})", c.level, c.size.as_deref().unwrap_or("?"), cpu_list(&c.shared_by))
        })
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("; {}", parts.join(", "))
    }
}
