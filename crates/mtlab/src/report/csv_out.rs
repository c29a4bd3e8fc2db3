//! `--csv DIR`: every table and the time series as CSV files, one row per
//! process and item, each with the process's pid so runs can be joined.

use std::path::{Path, PathBuf};

use super::RunReport;
use crate::heap::analyze::SiteReport;
use crate::heap::model::HeapSnapshot;

#[derive(Debug, thiserror::Error)]
#[error("cannot write CSV file {path}: {source}")]
pub struct CsvError {
    path: PathBuf,
    source: csv::Error,
}

fn writer(dir: &Path, name: &str) -> Result<(csv::Writer<std::fs::File>, PathBuf), CsvError> {
    let path = dir.join(name);
    let w = csv::Writer::from_path(&path).map_err(|source| CsvError { path: path.clone(), source })?;
    Ok((w, path))
}

fn snapshot_row(pid: u32, what: &str, s: &HeapSnapshot) -> Vec<String> {
    vec![
        pid.to_string(),
        what.to_string(),
        s.live_objects.to_string(),
        s.live_bytes.to_string(),
        s.regions.to_string(),
        s.mapped_bytes.to_string(),
        s.brk_bytes.to_string(),
        s.mmap_regions.to_string(),
        s.mmap_bytes.to_string(),
        s.fragmentation.mean.to_string(),
        s.fragmentation.total.to_string(),
        s.utilization.to_string(),
    ]
}

fn site_row(pid: u32, table: &str, rank: usize, s: &SiteReport) -> Vec<String> {
    let top = s.frames.first();
    vec![
        pid.to_string(),
        table.to_string(),
        (rank + 1).to_string(),
        s.stack_id.to_string(),
        s.calls.to_string(),
        s.bytes.to_string(),
        s.live_objects.to_string(),
        s.live_bytes.to_string(),
        top.and_then(|f| f.function.clone()).unwrap_or_default(),
        top.and_then(|f| f.file.clone()).unwrap_or_default(),
        top.and_then(|f| f.line).map(|l| l.to_string()).unwrap_or_default(),
        s.frames.iter().map(|f| f.function.clone().unwrap_or_else(|| f.pc.clone())).collect::<Vec<_>>().join(";"),
    ]
}

/// Writes functions.csv, heap.csv, time_series.csv and sites.csv into `dir`.
pub fn write_csv(run: &RunReport, dir: &Path) -> Result<Vec<PathBuf>, CsvError> {
    std::fs::create_dir_all(dir).map_err(|e| CsvError { path: dir.to_path_buf(), source: e.into() })?;
    let mut written = Vec::new();
    let wrap = |path: &Path| {
        let path = path.to_path_buf();
        move |source| CsvError { path: path.clone(), source }
    };

    let (mut w, path) = writer(dir, "functions.csv")?;
    let e = wrap(&path);
    w.write_record(["pid", "function", "calls", "failed", "mean_size", "cycles_total", "cycles_mean", "cycles_stddev", "cycles_p50", "cycles_p99"]).map_err(&e)?;
    for p in &run.processes {
        for (name, f) in &p.functions {
            w.write_record([
                p.pid.to_string(),
                name.clone(),
                f.calls.to_string(),
                f.failed.to_string(),
                f.mean_size.to_string(),
                f.cycles.total.to_string(),
                f.cycles.mean.to_string(),
                f.cycles.stddev.to_string(),
                f.cycles.p50.to_string(),
                f.cycles.p99.to_string(),
            ])
            .map_err(&e)?;
        }
    }
    w.flush().map_err(|err| e(err.into()))?;
    written.push(path);

    let (mut w, path) = writer(dir, "heap.csv")?;
    let e = wrap(&path);
    w.write_record(["pid", "when", "live_objects", "live_bytes", "regions", "mapped_bytes", "brk_bytes", "mmap_regions", "mmap_bytes", "fragmentation_mean", "fragmentation_total", "utilization"]).map_err(&e)?;
    for p in &run.processes {
        w.write_record(snapshot_row(p.pid, "peak", &p.peak.heap)).map_err(&e)?;
        w.write_record(snapshot_row(p.pid, "end", &p.end)).map_err(&e)?;
    }
    w.flush().map_err(|err| e(err.into()))?;
    written.push(path);

    let (mut w, path) = writer(dir, "time_series.csv")?;
    let e = wrap(&path);
    w.write_record(["pid", "event", "ns", "live_bytes", "mapped_bytes", "fragmentation_total", "fragmentation_mean", "utilization", "malloc_mean_cycles"]).map_err(&e)?;
    for p in &run.processes {
        for t in &p.time_series {
            w.write_record([
                p.pid.to_string(),
                t.event.to_string(),
                t.ns.map(|n| n.to_string()).unwrap_or_default(),
                t.live_bytes.to_string(),
                t.mapped_bytes.to_string(),
                t.fragmentation_total.to_string(),
                t.fragmentation_mean.to_string(),
                t.utilization.to_string(),
                t.malloc_mean_cycles.map(|c| c.to_string()).unwrap_or_default(),
            ])
            .map_err(&e)?;
        }
    }
    w.flush().map_err(|err| e(err.into()))?;
    written.push(path);

    let (mut w, path) = writer(dir, "sites.csv")?;
    let e = wrap(&path);
    w.write_record(["pid", "table", "rank", "stack_id", "calls", "bytes", "live_objects", "live_bytes", "function", "file", "line", "stack"]).map_err(&e)?;
    for p in &run.processes {
        for (table, sites) in [("by_bytes", &p.top_sites.by_bytes), ("by_calls", &p.top_sites.by_calls), ("leaks", &p.leaks.top)] {
            for (i, s) in sites.iter().enumerate() {
                w.write_record(site_row(p.pid, table, i, s)).map_err(&e)?;
            }
        }
    }
    w.flush().map_err(|err| e(err.into()))?;
    written.push(path);
    Ok(written)
}
