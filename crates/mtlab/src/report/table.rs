//! Terminal output of `mtlab report`: one section per process.

use std::fmt::Write;

use comfy_table::{presets::UTF8_FULL_CONDENSED, CellAlignment, Table};

use super::{human_bytes, RunReport};
use crate::heap::analyze::SiteReport;
use crate::heap::model::HeapSnapshot;
use crate::heap::ProcessReport;

fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED).set_header(header.to_vec());
    t
}

fn right_align(t: &mut Table, from: usize) {
    for i in from..t.column_count() {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
}

fn functions(p: &ProcessReport) -> Table {
    let mut t = table(&["function", "calls", "failed", "mean size", "cycles total", "mean", "stddev", "p50", "p99"]);
    for (name, f) in p.functions.iter().filter(|(_, f)| f.calls > 0) {
        t.add_row(vec![
            name.clone(),
            f.calls.to_string(),
            f.failed.to_string(),
            format!("{:.1}", f.mean_size),
            f.cycles.total.to_string(),
            format!("{:.1}", f.cycles.mean),
            format!("{:.1}", f.cycles.stddev),
            f.cycles.p50.to_string(),
            f.cycles.p99.to_string(),
        ]);
    }
    right_align(&mut t, 1);
    t
}

/// A row of the heap table: its label and how it shows a snapshot.
type HeapRow = (&'static str, fn(&HeapSnapshot) -> String);

fn heap(peak: &HeapSnapshot, end: &HeapSnapshot) -> Table {
    let mut t = table(&["heap", "at peak", "at end"]);
    let rows: [HeapRow; 10] = [
        ("live objects", |s| s.live_objects.to_string()),
        ("live bytes", |s| format!("{} ({})", s.live_bytes, human_bytes(s.live_bytes))),
        ("mapped regions", |s| s.regions.to_string()),
        ("mapped bytes", |s| format!("{} ({})", s.mapped_bytes, human_bytes(s.mapped_bytes))),
        ("  brk heap bytes", |s| s.brk_bytes.to_string()),
        ("  mmap'd regions / bytes", |s| format!("{} / {}", s.mmap_regions, s.mmap_bytes)),
        ("fragmentation mean", |s| format!("{:.4}", s.fragmentation.mean)),
        ("fragmentation total", |s| format!("{:.4}", s.fragmentation.total)),
        ("utilization", |s| format!("{:.4}", s.utilization)),
        ("live bytes outside known regions", |s| s.unplaced_bytes.to_string()),
    ];
    for (name, f) in rows {
        t.add_row(vec![name.to_string(), f(peak), f(end)]);
    }
    right_align(&mut t, 1);
    t
}

fn frame_line(s: &SiteReport, depth: usize) -> String {
    s.frames
        .iter()
        .take(depth)
        .map(|f| {
            let name = f.function.clone().unwrap_or_else(|| format!("{}+{}", f.module, f.pc));
            match (&f.file, f.line) {
                (Some(file), Some(line)) => {
                    let short = file.rsplit('/').next().unwrap_or(file);
                    format!("{name} ({short}:{line})")
                }
                _ => name,
            }
        })
        .collect::<Vec<_>>()
        .join(" ← ")
}

fn sites(sites: &[SiteReport], live: bool) -> Table {
    let mut t = if live {
        table(&["#", "live objects", "live bytes", "stack (innermost first)"])
    } else {
        table(&["#", "calls", "bytes", "stack (innermost first)"])
    };
    for (i, s) in sites.iter().enumerate() {
        let (a, b) = if live { (s.live_objects, s.live_bytes) } else { (s.calls, s.bytes) };
        let stack = if s.frames.is_empty() { "(no stack recorded)".to_string() } else { frame_line(s, 4) };
        t.add_row(vec![(i + 1).to_string(), a.to_string(), b.to_string(), stack]);
    }
    right_align(&mut t, 0);
    if let Some(c) = t.column_mut(3) {
        c.set_cell_alignment(CellAlignment::Left);
    }
    t
}

fn estimate(e: &crate::profile::sampled::Estimate, bytes: bool) -> String {
    let v = e.value.max(0.0);
    let ci = e.ci95();
    if bytes {
        format!("{} ± {}", human_bytes(v as u64), human_bytes(ci as u64))
    } else {
        format!("{:.0} ± {:.0}", v, ci)
    }
}

fn sampled(summary: &crate::heap::analyze::SampledSummary) -> String {
    let p = &summary.totals;
    let intervals: Vec<String> = p.intervals.iter().map(|&i| crate::units::format_size(i)).collect();
    let mut out = format!(
        "sampled profile: {} samples at mean interval {} (unwinder {}), {} sampled blocks freed\n\
         estimated allocated: {} in {} objects; in use at the end: {} in {} objects (± = 95 % confidence)\n",
        p.samples,
        if intervals.is_empty() { "-".to_string() } else { intervals.join(", ") },
        summary.unwind,
        p.sample_frees,
        estimate(&p.alloc_bytes, true),
        estimate(&p.alloc_objects, false),
        estimate(&p.inuse_bytes, true),
        estimate(&p.inuse_objects, false),
    );
    let mut t = table(&["#", "samples", "allocated bytes", "allocated objects", "in-use bytes", "stack (innermost first)"]);
    for (i, s) in summary.top.iter().enumerate() {
        let site = SiteReport {
            stack_id: s.stack_id,
            calls: 0,
            bytes: 0,
            live_objects: 0,
            live_bytes: 0,
            frames: s.frames.clone(),
        };
        t.add_row(vec![
            (i + 1).to_string(),
            s.samples.to_string(),
            estimate(&s.alloc_bytes, true),
            estimate(&s.alloc_objects, false),
            estimate(&s.inuse_bytes, true),
            if s.frames.is_empty() { "(no stack recorded)".to_string() } else { frame_line(&site, 4) },
        ]);
    }
    right_align(&mut t, 0);
    if let Some(c) = t.column_mut(5) {
        c.set_cell_alignment(CellAlignment::Left);
    }
    out.push_str(&format!("\ntop stacks by estimated allocated bytes\n{t}\n"));
    out
}

pub fn render(run: &RunReport) -> String {
    let mut out = String::new();
    for (i, p) in run.processes.iter().enumerate() {
        let role = if i == 0 { "process" } else { "child process" };
        let _ = writeln!(out, "══ {role} {} — {} ══", p.pid, p.cmdline.join(" "));
        let _ = writeln!(out, "trace: {}", p.file);
        let dur = p.duration_ns.map(|n| format!("{:.3} s", n as f64 / 1e9)).unwrap_or_else(|| "unknown".into());
        match &p.profile {
            Some(prof) => {
                let _ = writeln!(out, "allocator: {} ({}), samples: {}, traced time: {dur}", p.allocator, p.allocator_path, prof.totals.samples);
            }
            None => {
                let _ = writeln!(out, "allocator: {} ({}), events: {}, traced time: {dur}", p.allocator, p.allocator_path, p.events);
            }
        }
        if let Some(e) = &p.exit {
            let _ = writeln!(out, "program ended with {e}");
        }
        if let Some(profile) = &p.profile {
            let _ = writeln!(out, "\n{}", sampled(profile));
        } else {
            let _ = writeln!(out, "\nper function (cycles of the real call, TSC)\n{}", functions(p));
            let _ = writeln!(out, "\n{}", heap(&p.peak.heap, &p.end));
        }
        if !p.top_sites.by_bytes.is_empty() {
            let _ = writeln!(out, "\ntop allocation sites by bytes\n{}", sites(&p.top_sites.by_bytes, false));
            let _ = writeln!(out, "\ntop allocation sites by calls\n{}", sites(&p.top_sites.by_calls, false));
        }
        if p.profile.is_none() {
            let _ = writeln!(out, "\nnot freed at exit: {} objects, {} bytes", p.leaks.objects, p.leaks.bytes);
        }
        if !p.leaks.top.is_empty() {
            let _ = writeln!(out, "{}", sites(&p.leaks.top, true));
        }
        match p.events_dropped {
            Some(0) => {
                let _ = writeln!(out, "events dropped: 0");
            }
            Some(d) => {
                let _ = writeln!(
                    out,
                    "events dropped: {d} — the trace could not be written in full (disk full, file size limit, or no \
                     memory for a buffer): the heap figures above miss these calls (a dropped free leaves its block \
                     counted as live)"
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "events dropped: unknown — no END record: the process did not end through exit (abort, fatal signal, \
                     _exit or exec), or its trace could not be completed (disk full); events after its last flush are missing"
                );
            }
        }
        if p.unknown_frees > 0 {
            let _ = writeln!(out, "frees of addresses not allocated while traced: {}", p.unknown_frees);
        }
        if let Some(s) = &p.slowdown {
            let _ = writeln!(
                out,
                "instrumentation slowdown: {:.2}× ({:.3} s traced vs {:.3} s untraced, wall time)",
                s.ratio,
                s.traced_wall_ns as f64 / 1e9,
                s.baseline_wall_ns as f64 / 1e9
            );
        }
        if let Some(q) = p.compact_quantum_ticks {
            let _ = writeln!(
                out,
                "note: compact trace (`mtlab compact`): time stamps rounded to {q} ticks; each function's cycles are kept \
                 as a distribution, so the figures above are exact but no call keeps its own cycles; the time series \
                 replays threads' independent events within a quantum in an order of its own"
            );
        }
        if let Some(note) = &p.stacks.note {
            let _ = writeln!(out, "note: {note}");
        }
        for w in &p.warnings {
            let _ = writeln!(out, "warning: {w}");
        }
        out.push('\n');
    }
    out
}
