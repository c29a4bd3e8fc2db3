//! The report's raw tables for `--csv DIR`: functions, heap, time series and
//! sites of a full trace, the estimates of a sampled one; one row per process
//! and item, each keyed by the process's pid and trace file (a pid that
//! exec'd has a trace, and rows, per image) so runs can be joined. Numbers
//! are written as they are, not as people read them.

use super::RunReport;
use crate::export::{Cell, Table};
use crate::analysis::model::{FrameReport, SampledSummary, SiteReport};
use crate::heap::model::HeapSnapshot;
use crate::analysis::ProcessReport;
use crate::profile::sampled::Estimate;

fn int(v: u64) -> Cell {
    Cell::Int(v as i64)
}

fn num(v: f64) -> Cell {
    Cell::Num(v, 6)
}

/// The columns every row starts with: which process, and which image of it
/// (its trace file: JSON's and processes.csv's `file`; `file` in sites.csv is
/// a frame's source file).
const KEY: [&str; 2] = ["pid", "trace"];

fn key(p: &ProcessReport) -> Vec<Cell> {
    vec![int(p.pid as u64), Cell::text(&p.file)]
}

fn snapshot_row(p: &ProcessReport, what: &str, s: &HeapSnapshot) -> Vec<Cell> {
    // A lean trace's made-up addresses give no figure here: empty, not invented.
    let real = p.has_address_figures(what == "peak");
    let addr = |x: f64| if real { num(x) } else { Cell::Empty };
    let mut row = key(p);
    row.extend([
        Cell::text(what),
        int(s.live_objects),
        int(s.live_bytes),
        int(s.regions),
        int(s.mapped_bytes),
        int(s.brk_bytes),
        int(s.mmap_regions),
        int(s.mmap_bytes),
        addr(s.fragmentation.mean),
        addr(s.fragmentation.total),
        addr(s.utilization),
    ]);
    row
}

/// A stack's columns: its innermost frame's function, file and line, and
/// every frame's function (`module+OFFSET` without one), innermost first.
const STACK_COLUMNS: [&str; 4] = ["function", "file", "line", "stack"];

fn stack_cells(frames: &[FrameReport]) -> [Cell; 4] {
    let top = frames.first();
    [
        Cell::text(top.and_then(|f| f.function.clone()).unwrap_or_default()),
        Cell::text(top.and_then(|f| f.file.clone()).unwrap_or_default()),
        top.and_then(|f| f.line).map(|l| int(l as u64)).unwrap_or(Cell::Empty),
        Cell::text(frames.iter().map(|f| f.function.clone().unwrap_or_else(|| format!("{}+{}", f.module, f.offset))).collect::<Vec<_>>().join(";")),
    ]
}

fn site_row(p: &ProcessReport, table: &str, rank: usize, s: &SiteReport) -> Vec<Cell> {
    let mut row = key(p);
    row.extend([
        Cell::text(table),
        int(rank as u64 + 1),
        int(s.stack_id as u64),
        int(s.calls),
        int(s.bytes),
        int(s.live_objects),
        int(s.live_bytes),
        s.peak_live_objects.map(int).unwrap_or(Cell::Empty),
        s.peak_live_bytes.map(int).unwrap_or(Cell::Empty),
        int(s.temporary),
    ]);
    row.extend(stack_cells(&s.frames));
    row
}

/// The four estimates of a sampled profile or stack, each as value, low and high.
const ESTIMATES: [&str; 4] = ["alloc_bytes", "alloc_objects", "inuse_bytes", "inuse_objects"];

fn estimate_columns() -> Vec<String> {
    ESTIMATES.iter().flat_map(|e| [e.to_string(), format!("{e}_low"), format!("{e}_high")]).collect()
}

fn estimate_cells(estimates: [&Estimate; 4], row: &mut Vec<Cell>) {
    for e in estimates {
        row.extend([num(e.value), num(e.low), num(e.high)]);
    }
}

fn header<'a>(first: &[&'a str], estimates: &'a [String], last: &[&'a str]) -> Vec<&'a str> {
    first.iter().copied().chain(estimates.iter().map(String::as_str)).chain(last.iter().copied()).collect()
}

/// sampled.csv and sampled_sites.csv: a sampled trace's estimates, as the
/// text report and JSON `profile` give them (a sampled trace measures no
/// cycles, heap shape or exact counts, so it has no rows in the other tables).
fn sampled_tables(run: &RunReport) -> [Table; 2] {
    let estimates = estimate_columns();
    let mut totals = Table::new(
        "sampled",
        "",
        &header(&[&KEY[..], &["samples", "sample_frees", "inuse_samples"]].concat(), &estimates, &["intervals", "unwind", "started_inactive"]),
        2,
    );
    let mut sites = Table::new("sampled_sites", "", &header(&[&KEY[..], &["rank", "stack_id", "samples", "inuse_samples"]].concat(), &estimates, &STACK_COLUMNS), 2);
    for p in &run.processes {
        let Some(SampledSummary { totals: t, unwind, started_inactive, top, .. }) = &p.profile else { continue };
        let mut row = key(p);
        row.extend([int(t.samples), int(t.sample_frees), int(t.inuse_bytes.samples)]);
        estimate_cells([&t.alloc_bytes, &t.alloc_objects, &t.inuse_bytes, &t.inuse_objects], &mut row);
        row.extend([
            Cell::text(t.intervals.iter().map(u64::to_string).collect::<Vec<_>>().join(";")),
            Cell::text(unwind),
            Cell::text(if *started_inactive { "yes" } else { "no" }),
        ]);
        totals.push(row);
        for (i, s) in top.iter().enumerate() {
            let mut row = key(p);
            row.extend([int(i as u64 + 1), int(s.stack_id as u64), int(s.samples), int(s.inuse_bytes.samples)]);
            estimate_cells([&s.alloc_bytes, &s.alloc_objects, &s.inuse_bytes, &s.inuse_objects], &mut row);
            row.extend(stack_cells(&s.frames));
            sites.push(row);
        }
    }
    [totals, sites]
}

/// functions.csv, heap.csv, time_series.csv, sites.csv and callers.csv of
/// the full traces; sampled.csv and sampled_sites.csv of the sampled ones.
pub fn tables(run: &RunReport) -> Vec<Table> {
    let mut out = Vec::new();
    if run.processes.iter().any(|p| p.profile.is_none()) {
        out.extend(exact_tables(run));
    }
    if run.processes.iter().any(|p| p.profile.is_some()) {
        out.extend(sampled_tables(run));
    }
    out.into_iter().map(Table::data_only).collect()
}

/// The tables of the full traces' exact figures.
fn exact_tables(run: &RunReport) -> Vec<Table> {
    let mut functions = Table::new(
        "functions",
        "",
        &header(&KEY, &[], &["function", "calls", "failed", "mean_size", "cycles_total", "cycles_mean", "cycles_stddev", "cycles_p50", "cycles_p99", "cycles_timed"]),
        3,
    );
    let mut heap = Table::new(
        "heap",
        "",
        &header(
            &KEY,
            &[],
            &["when", "live_objects", "live_bytes", "regions", "mapped_bytes", "brk_bytes", "mmap_regions", "mmap_bytes", "fragmentation_mean", "fragmentation_total", "utilization"],
        ),
        3,
    );
    let mut series = Table::new(
        "time_series",
        "",
        &header(&KEY, &[], &["event", "ns", "live_bytes", "mapped_bytes", "fragmentation_total", "fragmentation_mean", "utilization", "malloc_mean_cycles"]),
        2,
    );
    let mut sites = Table::new(
        "sites",
        "",
        &header(
            &[&KEY[..], &["table", "rank", "stack_id", "calls", "bytes", "live_objects", "live_bytes", "peak_live_objects", "peak_live_bytes", "temporary"]].concat(),
            &[],
            &STACK_COLUMNS,
        ),
        3,
    );
    let mut callers =
        Table::new("callers", "", &header(&KEY, &[], &["function", "total_bytes", "total_calls", "self_bytes", "self_calls"]), 3);
    for p in run.processes.iter().filter(|p| p.profile.is_none()) {
        for c in &p.callers {
            let mut row = key(p);
            row.extend([Cell::text(&c.function), int(c.total_bytes), int(c.total_calls), int(c.self_bytes), int(c.self_calls)]);
            callers.push(row);
        }
        for (name, f) in &p.functions {
            let mut row = key(p);
            let c = &f.cycles;
            row.extend([Cell::text(name), int(f.calls), int(f.failed), num(f.mean_size)]);
            // A function none of whose calls was timed has no cycle figures.
            row.extend(match c.measured() {
                true => [int(c.total), num(c.mean), num(c.stddev), int(c.p50), int(c.p99)],
                false => std::array::from_fn(|_| Cell::Empty),
            });
            row.push(int(c.timed));
            functions.push(row);
        }
        heap.push(snapshot_row(p, "peak", &p.peak.heap));
        heap.push(snapshot_row(p, "end", &p.end));
        let real = p.has_address_figures(false);
        let addr = |x: f64| if real { num(x) } else { Cell::Empty };
        for t in &p.time_series {
            let mut row = key(p);
            row.extend([
                int(t.event),
                t.ns.map(int).unwrap_or(Cell::Empty),
                int(t.live_bytes),
                int(t.mapped_bytes),
                addr(t.fragmentation_total),
                addr(t.fragmentation_mean),
                addr(t.utilization),
                t.malloc_mean_cycles.map(num).unwrap_or(Cell::Empty),
            ]);
            series.push(row);
        }
        let lists = [
            ("by_bytes", &p.top_sites.by_bytes),
            ("by_calls", &p.top_sites.by_calls),
            ("at_peak", &p.top_sites.at_peak),
            ("temporary", &p.top_sites.temporary),
            ("leaks", &p.leaks.top),
        ];
        for (table, list) in lists {
            for (i, s) in list.iter().enumerate() {
                sites.push(site_row(p, table, i, s));
            }
        }
    }
    let mut out = vec![functions, heap, series, sites];
    if !callers.rows.is_empty() {
        out.push(callers);
    }
    out
}
