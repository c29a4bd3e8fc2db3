//! `mtlab report --diff BASE NEW`: two runs of a program compared, process
//! by process (`pair`: roots together, the others by command and order),
//! site by site (`sites`: matched by their symbolized frames, never by
//! address), with the totals beside (peak, mapped, leaks, temporaries,
//! per-function calls and cycles).
//!
//! The diff reads only the analysis's model — each process's every site
//! (`AnalyzeOptions::sites`) or, for a process known by a profile only (a
//! sampled trace), that profile's stacks — never a file format, so any
//! source of a `ProcessReport` or a `ProfileData` compares the same way.
//!
//! Processes of a run are taken root first, then by pid (the order they
//! started, but for a pid that wrapped around).
//!
//! - `views.rs`: the screen's tables and notes, CSV's raw tables, the JSON
//!   of docs/metrics.md (*report --diff*).
//! - `pprof.rs`: NEW − BASE as one pprof profile, read by `go tool pprof`
//!   the way its `-diff_base` reads two.
//! - `flame.rs`: the differential flame graphs of the page (`--html`).

pub mod flame;
pub mod pair;
pub mod pprof;
pub mod sites;
pub mod views;

use serde::Serialize;

use super::RunReport;
use crate::analysis::ProcessReport;
use pair::{pair, Proc};
use sites::{match_sites, KeyBy, SiteChange, SiteTable};

/// One figure of a process in both runs.
#[derive(Debug, Clone, Serialize)]
pub struct TotalChange {
    /// The JSON key (`peak_live_bytes`, …).
    pub key: &'static str,
    pub base: Option<f64>,
    pub new: Option<f64>,
    pub bytes: bool,
}

impl TotalChange {
    pub fn change(&self) -> Option<f64> {
        Some(self.new? - self.base?)
    }
}

/// One allocator function's calls and cycles per call in both runs.
#[derive(Debug, Clone, Serialize)]
pub struct FunctionChange {
    pub function: String,
    pub base_calls: u64,
    pub new_calls: u64,
    /// None (`null`) on a side where no call of the function was timed.
    pub base_mean_cycles: Option<f64>,
    pub new_mean_cycles: Option<f64>,
    pub base_p50_cycles: Option<u64>,
    pub new_p50_cycles: Option<u64>,
    pub base_p99_cycles: Option<u64>,
    pub new_p99_cycles: Option<u64>,
}

/// A side of a pair.
#[derive(Debug, Clone, Serialize)]
pub struct Side {
    pub pid: u32,
    pub command: String,
    pub cmdline: Vec<String>,
    pub file: String,
    /// Its figures are estimates (a sampled trace).
    pub estimated: bool,
}

impl Side {
    fn of(p: &ProcessReport, estimated: bool) -> Side {
        Side {
            pid: p.pid,
            command: crate::trace::family::command_name(&p.cmdline, &p.exe),
            cmdline: p.cmdline.clone(),
            file: p.file.clone(),
            estimated,
        }
    }
}

/// Two processes compared.
#[derive(Debug)]
pub struct PairDiff {
    pub base: Side,
    pub new: Side,
    pub totals: Vec<TotalChange>,
    pub functions: Vec<FunctionChange>,
    /// Every site: those whose figures changed first, the largest change of
    /// bytes first; then the unchanged.
    pub sites: Vec<SiteChange>,
    pub sites_unchanged: usize,
    pub sites_in_both: usize,
    pub sites_only_base: usize,
    pub sites_only_new: usize,
    /// Sites with no function name in any frame (matched by module and
    /// offset only: a rebuild of that module moves them).
    pub sites_unnamed: usize,
}

impl PairDiff {
    /// The sites whose figures changed, the largest change of bytes first.
    pub fn changed(&self) -> &[SiteChange] {
        &self.sites[..self.sites.len() - self.sites_unchanged]
    }
}

/// The comparison of two runs.
#[derive(Debug)]
pub struct RunDiff {
    pub base_file: String,
    pub new_file: String,
    pub key_by: KeyBy,
    pub pairs: Vec<PairDiff>,
    /// Processes reported in one run with no partner in the other.
    pub only_base: Vec<Side>,
    pub only_new: Vec<Side>,
    pub warnings: Vec<String>,
}

/// The process-level figures of a process, by JSON key: exact heap figures
/// only for a full trace (a sampled one has estimates of allocation only).
fn totals_of(p: &ProcessReport, t: &SiteTable) -> Vec<(&'static str, Option<f64>, bool)> {
    let exact = p.profile.is_none();
    let sum = |f: fn(&sites::Figures) -> u64| Some(t.sites.values().map(f).sum::<u64>() as f64);
    let heap = |v: u64| exact.then_some(v as f64);
    vec![
        ("allocation_calls", sum(|f| f.calls), false),
        ("allocated_bytes", sum(|f| f.bytes), true),
        ("peak_live_bytes", heap(p.peak.heap.live_bytes), true),
        ("peak_mapped_bytes", heap(p.peak.heap.mapped_bytes), true),
        ("end_mapped_bytes", heap(p.end.mapped_bytes), true),
        ("leaked_objects", sum(|f| f.leaked_objects), false),
        ("leaked_bytes", sum(|f| f.leaked_bytes), true),
        ("temporary_allocations", heap(p.temporary.calls), false),
        ("program_mapped_bytes", heap(p.program_mappings.bytes), true),
        ("events", Some(p.events as f64), false),
    ]
}

fn functions_of(b: &ProcessReport, n: &ProcessReport) -> Vec<FunctionChange> {
    let mut out = Vec::new();
    for (name, bf) in &b.functions {
        let Some(nf) = n.functions.get(name) else { continue };
        if bf.calls == 0 && nf.calls == 0 {
            continue;
        }
        out.push(FunctionChange {
            function: name.clone(),
            base_calls: bf.calls,
            new_calls: nf.calls,
            base_mean_cycles: bf.cycles.measured().then_some(bf.cycles.mean),
            new_mean_cycles: nf.cycles.measured().then_some(nf.cycles.mean),
            base_p50_cycles: bf.cycles.measured().then_some(bf.cycles.p50),
            new_p50_cycles: nf.cycles.measured().then_some(nf.cycles.p50),
            base_p99_cycles: bf.cycles.measured().then_some(bf.cycles.p99),
            new_p99_cycles: nf.cycles.measured().then_some(nf.cycles.p99),
        });
    }
    out
}

pub fn compare_processes(b: &ProcessReport, n: &ProcessReport, by: KeyBy) -> PairDiff {
    let (bt, nt) = (SiteTable::of_process(b, by), SiteTable::of_process(n, by));
    let m = match_sites(&bt, &nt);
    let totals = totals_of(b, &bt)
        .into_iter()
        .zip(totals_of(n, &nt))
        .map(|((key, base, bytes), (_, new, _))| TotalChange { key, base, new, bytes })
        .collect();
    PairDiff {
        base: Side::of(b, bt.estimated),
        new: Side::of(n, nt.estimated),
        totals,
        functions: functions_of(b, n),
        sites: m.sites,
        sites_unchanged: m.unchanged,
        sites_in_both: m.both,
        sites_only_base: m.only_base,
        sites_only_new: m.only_new,
        sites_unnamed: bt.unnamed.max(nt.unnamed),
    }
}

/// Compares the processes reported in detail in two runs.
pub fn compare(base: &RunReport, new: &RunReport, by: KeyBy) -> RunDiff {
    // The root first, then the others in the order they started (by pid:
    // not the index's order, which is the screen's), as indices of `processes`.
    let order = |r: &RunReport| -> Vec<usize> {
        let mut o: Vec<usize> = (0..r.processes.len()).collect();
        o.sort_by_key(|&i| (!r.is_root(&r.processes[i]), r.processes[i].pid));
        o
    };
    let (bo, no) = (order(base), order(new));
    let procs = |r: &RunReport, o: &[usize]| -> Vec<Proc> {
        o.iter()
            .map(|&i| &r.processes[i])
            .map(|p| Proc { pid: p.pid, command: crate::trace::family::command_name(&p.cmdline, &p.exe) })
            .collect()
    };
    let (bp, np) = (procs(base, &bo), procs(new, &no));
    let mut pairing = pair(&bp, &np);
    for (i, j) in pairing.pairs.iter_mut() {
        (*i, *j) = (bo[*i], no[*j]);
    }
    pairing.only_base.iter_mut().for_each(|i| *i = bo[*i]);
    pairing.only_new.iter_mut().for_each(|j| *j = no[*j]);
    let mut warnings = Vec::new();
    let pairs: Vec<PairDiff> = pairing
        .pairs
        .iter()
        .map(|&(i, j)| compare_processes(&base.processes[i], &new.processes[j], by))
        .collect();
    if let Some(root) = pairs.first().filter(|p| p.base.command != p.new.command) {
        // Another name is often the same program rebuilt (`prog-v2`); few
        // sites in common say it is not.
        let all = root.sites_in_both + root.sites_only_base + root.sites_only_new;
        if root.sites_in_both * 2 < all {
            warnings.push(format!(
                "BASE ran `{}` and NEW ran `{}`, which have only {} of {all} sites in common: different programs?",
                root.base.command, root.new.command, root.sites_in_both
            ));
        }
    }
    for p in &pairs {
        if p.base.estimated != p.new.estimated {
            warnings.push(format!(
                "process {} of BASE and {} of NEW: one is a sampled trace (estimates), the other a full trace (exact \
                 figures): changes smaller than the estimates' intervals mean nothing",
                p.base.pid, p.new.pid
            ));
        }
        if p.sites_in_both == 0 && (p.sites_only_base > 0 || p.sites_only_new > 0) {
            warnings.push(format!(
                "process {} of BASE and {} of NEW have no site in common: stacks without symbols (a stripped program) match only \
                 by module offset, which a rebuild moves; with lines moved by an edit, try --diff-by functions",
                p.base.pid, p.new.pid
            ));
        }
    }
    let side = |r: &RunReport, i: usize| {
        let p = &r.processes[i];
        Side::of(p, p.profile.is_some())
    };
    RunDiff {
        base_file: base.index.first().map(|r| r.file.clone()).unwrap_or_default(),
        new_file: new.index.first().map(|r| r.file.clone()).unwrap_or_default(),
        key_by: by,
        only_base: pairing.only_base.iter().map(|&i| side(base, i)).collect(),
        only_new: pairing.only_new.iter().map(|&i| side(new, i)).collect(),
        pairs,
        warnings,
    }
}
