//! What `mtlab report` shows of each process, as views: header and notes,
//! the per-function, heap, site and leak tables. Exporters draw them.

use super::gaps::{self, Figure};
use super::{human_bytes, RunReport};
use crate::export::{Cell, Table, View};
use crate::analysis::model::{AllocatorReading, Interval, SiteReport};
use crate::heap::model::HeapSnapshot;
use crate::analysis::ProcessReport;

/// A table for the screen: CSV gets the raw figures from `report::csv_out`.
fn table(name: &str, title: &str, header: &[&str], numeric_from: usize) -> Table {
    Table::new(name, title, header, numeric_from).screen_only()
}

/// Whether the process made no heap call at all, only system calls that map
/// memory (or none).
fn no_heap_calls(p: &ProcessReport) -> bool {
    p.functions.iter().all(|(name, f)| f.calls == 0 || matches!(name.as_str(), "mmap" | "mmap64" | "munmap" | "mremap" | "brk" | "sbrk"))
}

fn functions(p: &ProcessReport) -> Table {
    let sampled = p.functions.values().any(|f| f.cycles.timed < f.calls);
    let title = if sampled {
        "per function (cycles of the real call, TSC; ns at the TSC's rate) — cycles of a random sample of the calls \
         (`timed`), in brackets 95 % intervals for all calls (--json gives each interval's level)"
    } else {
        "per function (cycles of the real call, TSC; ns at the TSC's rate)"
    };
    let mut t = table(
        "functions",
        title,
        &["function", "calls", "failed", "timed", "mean size", "cycles total", "mean", "stddev", "p50", "p99", "mean ns", "p99 ns"],
        1,
    );
    let ns = |cycles: f64| if p.tsc_hz > 0 { Cell::Num(cycles * 1e9 / p.tsc_hz as f64, 1) } else { Cell::Empty };
    let est = |value: f64, i: Option<&Interval>, decimals: u8| match i {
        Some(i) => Cell::Estimate { value, low: Some(i.low), high: Some(i.high), decimals },
        None if decimals == 0 => Cell::Int(value as i64),
        None => Cell::Num(value, decimals),
    };
    for (name, f) in p.functions.iter().filter(|(_, f)| f.calls > 0) {
        let (c, ci) = (&f.cycles, f.cycles.intervals.as_ref());
        let mut row = vec![Cell::text(name), Cell::Int(f.calls as i64), Cell::Int(f.failed as i64), Cell::Int(c.timed as i64), Cell::Num(f.mean_size, 1)];
        if c.measured() {
            row.extend([
                est(c.total as f64, ci.map(|i| &i.total), 0),
                est(c.mean, ci.map(|i| &i.mean), 1),
                est(c.stddev, ci.map(|i| &i.stddev), 1),
                est(c.p50 as f64, ci.map(|i| &i.p50), 0),
                est(c.p99 as f64, ci.map(|i| &i.p99), 0),
                ns(c.mean),
                ns(c.p99 as f64),
            ]);
        } else {
            // No call of it was timed: its cycles are unknown, not 0.
            row.extend(std::iter::repeat_n(Cell::Empty, 7));
        }
        t.push(row);
    }
    t
}

/// `report --threads`: each thread's allocations, and the blocks it
/// allocated that are live at the end.
fn threads(threads: &[crate::analysis::model::ThreadReport]) -> Table {
    let mut t = table("threads", "by allocating thread (live: the blocks it allocated, at the end)", &["thread id", "calls", "bytes", "live blocks", "live bytes"], 1);
    for th in threads {
        t.push(vec![Cell::Int(th.tid.into()), Cell::Int(th.calls as i64), Cell::Bytes(th.bytes), Cell::Int(th.live_objects as i64), Cell::Bytes(th.live_bytes)]);
    }
    t
}

/// `report --threads` of a sampled trace: each thread's estimates with their 95 % intervals.
fn sampled_threads(threads: &[crate::profile::sampled::SampledThread]) -> Table {
    let mut t = table(
        "sampled_threads",
        "by allocating thread, estimated (in use: the blocks it allocated, at the end; [low, high]: 95 % interval)",
        &["thread id", "samples", "allocated bytes", "allocated objects", "in-use bytes", "in-use objects"],
        1,
    );
    for th in threads {
        t.push(vec![
            Cell::Int(th.tid.into()),
            Cell::Int(th.samples as i64),
            Cell::text(estimate(&th.alloc_bytes, true)),
            Cell::text(estimate(&th.alloc_objects, false)),
            Cell::text(estimate(&th.inuse_bytes, true)),
            Cell::text(estimate(&th.inuse_objects, false)),
        ]);
    }
    t
}

/// A row of the heap table: its label, whether it comes from block
/// addresses, and how it shows a snapshot.
type HeapRow = (&'static str, bool, fn(&HeapSnapshot) -> String);

/// Where a lean trace has no figure (`ProcessReport::has_address_figures`).
pub const NOT_IN_A_LEAN_TRACE: &str = "not in a lean trace";

fn heap(p: &ProcessReport) -> Table {
    let mut t = table("heap", "", &["heap", "at peak", "at end"], 1);
    let rows: [HeapRow; 10] = [
        ("live objects", false, |s| s.live_objects.to_string()),
        ("live bytes", false, |s| format!("{} ({})", s.live_bytes, human_bytes(s.live_bytes))),
        ("mapped regions", false, |s| s.regions.to_string()),
        ("mapped bytes", false, |s| format!("{} ({})", s.mapped_bytes, human_bytes(s.mapped_bytes))),
        ("  brk heap bytes", false, |s| s.brk_bytes.to_string()),
        ("  mmap'd regions / bytes", false, |s| format!("{} / {}", s.mmap_regions, s.mmap_bytes)),
        ("fragmentation mean", true, |s| format!("{:.4}", s.fragmentation.mean)),
        ("fragmentation total", true, |s| format!("{:.4}", s.fragmentation.total)),
        ("utilization", true, |s| format!("{:.4}", s.utilization)),
        ("live bytes outside known regions", true, |s| s.unplaced_bytes.to_string()),
    ];
    let cell = |s: &HeapSnapshot, at_peak: bool, from_addresses: bool, f: fn(&HeapSnapshot) -> String| {
        Cell::text(if from_addresses && !p.has_address_figures(at_peak) { NOT_IN_A_LEAN_TRACE.to_string() } else { f(s) })
    };
    for (name, from_addresses, f) in rows {
        t.push(vec![Cell::text(name), cell(&p.peak.heap, true, from_addresses, f), cell(&p.end, false, from_addresses, f)]);
    }
    t
}

/// One frame for the screen: `function (file.c:12)`, or `module+OFFSET`
/// (what addr2line takes) for a frame without a symbol.
pub(super) fn frame_text(f: &crate::analysis::model::FrameReport) -> String {
    let name = f.function.clone().unwrap_or_else(|| format!("{}+{}", f.module, f.offset));
    match (&f.file, f.line) {
        (Some(file), Some(line)) => {
            let short = file.rsplit('/').next().unwrap_or(file);
            format!("{name} ({short}:{line})")
        }
        _ => name,
    }
}

pub const ARROW: &str = " ← ";

/// The first frames of a stack, `depth` of them, or with `depth` 0 as many as
/// fit in `width` columns (at least one).
fn frame_line(s: &SiteReport, depth: usize, width: usize) -> String {
    let mut line = String::new();
    for (i, f) in s.frames.iter().enumerate() {
        let text = frame_text(f);
        if depth > 0 && i >= depth {
            break;
        }
        if depth == 0 && i > 0 && line.chars().count() + ARROW.len() + text.chars().count() > width {
            break;
        }
        if i > 0 {
            line.push_str(ARROW);
        }
        line.push_str(&text);
    }
    line
}

/// Columns the stack column may take: the terminal's width less the others.
pub fn stack_width(other_columns: usize) -> usize {
    let cols = crate::export::text::terminal_columns().unwrap_or(160);
    cols.saturating_sub(other_columns).max(40)
}

/// What a site table counts per site.
#[derive(Clone, Copy, PartialEq)]
enum SiteCount {
    /// Calls and bytes allocated.
    Allocated,
    /// Objects and bytes live at the end.
    Live,
    /// Objects and bytes live at the peak.
    AtPeak,
    /// Temporary allocations, of all calls.
    Temporary,
}

/// Says what a row of several stacks counts: the stacks of the table only.
fn merged_rows_note(ranked: usize, how: &str) -> View {
    View::Note(format!(
        "a row of several stacks sums those, of the {ranked} stacks this table ranks, whose shown frames are \
         equal{how}; --frames N shows more frames, --top N ranks more stacks"
    ))
}

/// Sites as rows; sites whose shown frames are equal are merged into one row
/// that says how many distinct stacks it holds (JSON keeps every stack).
fn sites(name: &str, title: &str, sites: &[SiteReport], count: SiteCount, depth: usize) -> Vec<View> {
    let header: &[&str] = match count {
        SiteCount::Allocated => &["#", "calls", "bytes", "stacks", "stack (innermost first)"],
        SiteCount::Live => &["#", "live objects", "live bytes", "stacks", "stack (innermost first)"],
        SiteCount::AtPeak => &["#", "live objects at peak", "live bytes at peak", "stacks", "stack (innermost first)"],
        SiteCount::Temporary => &["#", "temporary", "of calls", "stacks", "stack (innermost first)"],
    };
    let width = stack_width(48);
    let mut rows: Vec<(String, u64, u64, usize)> = Vec::new();
    for s in sites {
        let (a, b) = match count {
            SiteCount::Allocated => (s.calls, s.bytes),
            SiteCount::Live => (s.live_objects, s.live_bytes),
            SiteCount::AtPeak => (s.peak_live_objects.unwrap_or(0), s.peak_live_bytes.unwrap_or(0)),
            SiteCount::Temporary => (s.temporary, s.calls),
        };
        let stack = if s.frames.is_empty() { "(no stack recorded)".to_string() } else { frame_line(s, depth, width) };
        match rows.iter_mut().find(|r| r.0 == stack) {
            Some(r) => {
                r.1 += a;
                r.2 += b;
                r.3 += 1;
            }
            None => rows.push((stack, a, b, 1)),
        }
    }
    // A merged row ranks by its sums (stable: equal sums keep the ranking's order).
    match count {
        SiteCount::Allocated if name.ends_with("by_calls") => rows.sort_by_key(|r| std::cmp::Reverse(r.1)),
        SiteCount::Temporary => rows.sort_by_key(|r| std::cmp::Reverse(r.1)),
        _ => rows.sort_by_key(|r| std::cmp::Reverse(r.2)),
    }
    let merged = rows.iter().any(|r| r.3 > 1);
    let mut t = table(name, title, header, 0).text_column(4);
    for (i, (stack, a, b, n)) in rows.into_iter().enumerate() {
        let b = if count == SiteCount::Temporary { Cell::Int(b as i64) } else { Cell::Bytes(b) };
        t.push(vec![Cell::Int(i as i64 + 1), Cell::Int(a as i64), b, Cell::Int(n as i64), Cell::text(stack)]);
    }
    let mut out = vec![View::Table(t)];
    if merged {
        out.push(merged_rows_note(sites.len(), ""));
    }
    out
}

/// An estimate with its 95 % interval: "66.0 KiB [12.0 KiB, 310.4 KiB]", or
/// "not sampled (< 1.8 MiB)" when no sample stands behind it; an object
/// count whose interval is not trustworthy (mixed block sizes) is marked
/// with [`UNRELIABLE_MARK`].
pub fn estimate(e: &crate::profile::sampled::Estimate, bytes: bool) -> String {
    let f = |x: f64| if bytes { human_bytes(x.round() as u64) } else { format!("{:.0}", x) };
    let mark = if e.mixed_sizes { UNRELIABLE_MARK } else { "" };
    if e.not_sampled() {
        format!("not sampled (< {}){mark}", f(e.high))
    } else {
        format!("{} [{}, {}]{mark}", f(e.value), f(e.low), f(e.high))
    }
}

/// Marks an object count whose interval is not trustworthy; [`UNRELIABLE_NOTE`] says why.
pub const UNRELIABLE_MARK: &str = " †";
pub const UNRELIABLE_NOTE: &str = "† the samples behind this object count mix block sizes (the largest more than twice the \
     smallest): smaller blocks may have gone unsampled behind them, so its interval is not trustworthy (in \
     simulations of such stacks it covered the truth in 83-99 % of runs, not 95 %); the bytes beside it are";
/// Said under sampled rows of few samples, whose low ends are conditioned on being listed.
pub const SHOWN_NOTE: &str = "a stack is listed because it was sampled, so each row's low end is conditioned on \
     that: a row of one sample starts at what that sample holds (a block sampled once says nothing more; \
     unconditioned, an 8 KiB block sampled once at 512 KiB got a low end of 14 KiB)";

/// `tail_lost`: the process ended without an END record (not still running):
/// samples its threads still buffered then are not in the trace.
fn sampled(summary: &crate::analysis::model::SampledSummary, depth: usize, tail_lost: bool) -> Vec<View> {
    let width = stack_width(80);
    let p = &summary.totals;
    let intervals: Vec<String> = p.intervals.iter().map(|&i| crate::units::format_size(i)).collect();
    let inuse = if p.inuse_bytes.not_sampled() {
        format!("not sampled (< {}, < {:.0} objects)", human_bytes(p.inuse_bytes.high.round() as u64), p.inuse_objects.high)
    } else {
        format!("{} in {} objects", estimate(&p.inuse_bytes, true), estimate(&p.inuse_objects, false))
    };
    if p.samples == 0 && summary.started_inactive {
        // Bounds from zero samples assume the sampler was on all along.
        return vec![View::Note(format!(
            "sampled profile: no sample — the sampler started switched off (--inactive) and took none; \
             if `mtlab ctl PID start` never switched it on, nothing was sampled and no estimate or bound applies \
             (unwinder {})",
            summary.unwind
        ))];
    }
    let unreliable = p.alloc_objects.mixed_sizes || p.inuse_objects.mixed_sizes;
    let mut out = vec![View::Note(format!(
        "sampled profile: {} samples at mean interval {} (unwinder {}), {} sampled blocks freed\n\
         estimated allocated: {} in {} objects; in use at the end: {inuse} ([low, high]: 95 % interval){}{}",
        p.samples,
        if intervals.is_empty() { "-".to_string() } else { intervals.join(", ") },
        summary.unwind,
        p.sample_frees,
        estimate(&p.alloc_bytes, true),
        estimate(&p.alloc_objects, false),
        if tail_lost {
            "\nthese estimates are of the samples the trace holds: the process ended without writing what its \
             threads still buffered (no END record, see `events dropped` below), so what it allocated can be more \
             than their high ends"
        } else {
            ""
        },
        if unreliable { format!("\n{UNRELIABLE_NOTE}") } else { String::new() },
    ))];
    // Stacks whose shown frames are equal share a row, as in a full trace's
    // site tables: their estimates add (`Estimate::plus`).
    struct Row {
        stack: String,
        stacks: usize,
        samples: u64,
        alloc_bytes: crate::profile::sampled::Estimate,
        alloc_objects: crate::profile::sampled::Estimate,
        inuse_bytes: crate::profile::sampled::Estimate,
    }
    let mut rows: Vec<Row> = Vec::new();
    for s in &summary.top {
        let site = SiteReport {
            stack_id: s.stack_id,
            calls: 0,
            bytes: 0,
            live_objects: 0,
            live_bytes: 0,
            peak_live_objects: None,
            peak_live_bytes: None,
            temporary: 0,
            frames: s.frames.clone(),
        };
        let stack = if s.frames.is_empty() { "(no stack recorded)".to_string() } else { frame_line(&site, depth, width) };
        match rows.iter_mut().find(|r| r.stack == stack) {
            Some(r) => {
                r.stacks += 1;
                r.samples += s.samples;
                r.alloc_bytes = r.alloc_bytes.plus(&s.alloc_bytes);
                r.alloc_objects = r.alloc_objects.plus(&s.alloc_objects);
                r.inuse_bytes = r.inuse_bytes.plus(&s.inuse_bytes);
            }
            None => rows.push(Row {
                stack,
                stacks: 1,
                samples: s.samples,
                alloc_bytes: s.alloc_bytes,
                alloc_objects: s.alloc_objects,
                inuse_bytes: s.inuse_bytes,
            }),
        }
    }
    rows.sort_by(|a, b| b.alloc_bytes.value.total_cmp(&a.alloc_bytes.value));
    let merged = rows.iter().any(|r| r.stacks > 1);
    let mut t = table(
        "sampled_sites",
        "top stacks by estimated allocated bytes",
        &["#", "samples", "allocated bytes", "allocated objects", "in-use bytes", "stacks", "stack (innermost first)"],
        0,
    )
    .text_column(6);
    for (i, r) in rows.iter().enumerate() {
        t.push(vec![
            Cell::Int(i as i64 + 1),
            Cell::Int(r.samples as i64),
            Cell::text(estimate(&r.alloc_bytes, true)),
            Cell::text(estimate(&r.alloc_objects, false)),
            Cell::text(estimate(&r.inuse_bytes, true)),
            Cell::Int(r.stacks as i64),
            Cell::text(&r.stack),
        ]);
    }
    out.push(View::Table(t));
    if merged {
        out.push(merged_rows_note(summary.top.len(), " (their estimates add; the interval is the sum's)"));
    }
    if rows.iter().any(|r| r.alloc_objects.mixed_sizes) && !unreliable {
        out.push(View::Note(UNRELIABLE_NOTE.to_string()));
    }
    if rows.iter().any(|r| r.samples <= 5) {
        out.push(View::Note(SHOWN_NOTE.to_string()));
    }
    out
}

/// Every process of the run, root first.
pub fn views(run: &RunReport) -> Vec<View> {
    views_for(run, false)
}

/// Each process's views; for a page (`page`), its memory plot ends them and
/// no character sparkline stands beside it.
pub fn views_for(run: &RunReport, page: bool) -> Vec<View> {
    let mut out: Vec<View> = Vec::new();
    if let Some(l) = &run.live {
        out.push(View::Note(l.text()));
        out.extend(l.late().map(View::Note));
        out.extend(l.notes.iter().cloned().map(View::Note));
    }
    for p in &run.processes {
        let mut note = |s: String| out.push(View::Note(s));
        // An image the root's pid exec'd is the root process still, not a child.
        let root_pid = run.index.first().map(|r| r.pid);
        let role = if run.is_root(p) {
            "process"
        } else if Some(p.pid) == root_pid {
            "process (image after exec)"
        } else {
            "child process"
        };
        note(format!("══ {role} {} — {} ══", p.pid, p.cmdline.join(" ")));
        // A live profile's raw trace is released as it is analysed: naming it as if it were there sends
        // the reader looking for a file that --keep-raw alone keeps.
        if run.live.is_some() && !std::path::Path::new(&p.file).exists() {
            note(format!("trace: {} (not kept: analysed while the program ran; `record --live --keep-raw` keeps it)", p.file));
        } else {
            note(format!("trace: {}", p.file));
        }
        if let Some(s) = run.live.as_ref().and_then(|l| l.processes.iter().find(|s| s.file == p.file)) {
            note(super::live::process_text(s));
        }
        let dur = p.duration_ns.map(|n| format!("{:.3} s", n as f64 / 1e9)).unwrap_or_else(|| "unknown".into());
        let count = match &p.profile {
            Some(prof) => format!("samples: {}", prof.totals.samples),
            None => format!("events: {}", p.events),
        };
        note(format!("allocator: {} ({}), {count}, traced time: {dur}", p.allocator, p.allocator_path));
        // First, before any figure they qualify (a damaged trace's figures stop at the damage).
        for w in &p.warnings {
            note(format!("warning: {w}"));
        }
        let execd = run.ending(p) == Some(super::index::Ending::Execd);
        if let Some(w) = &p.flight {
            note(flight_note(w));
        }
        if p.running {
            note(format!("process {} is still running: every figure below is as far as its trace is written now", p.pid));
        } else if execd {
            note(match (&run.execd_root_ended, run.is_root(p)) {
                (Some(e), true) => format!(
                    "program exec'd another program, whose trace {}; the process ended with {e}",
                    if run.missing.iter().any(|m| m.pid == Some(p.pid)) {
                        "is missing (see below)"
                    } else {
                        "is not read here (--no-children)"
                    }
                ),
                _ => "program exec'd another program: its image's trace follows, and how the process ended is told there"
                    .into(),
            });
        } else if let Some(e) = &p.exit {
            note(match e.strip_prefix("killed by signal ").and_then(|n| n.parse::<u64>().ok()) {
                // A full trace: what its threads had not written died with it.
                Some(sig) if p.profile.is_none() => format!(
                    "program was killed by signal {sig}{}: the calls its threads had not written yet died with it{}",
                    signal_name(sig),
                    match p.salvaged_events {
                        Some(n) => format!(
                            ", but for {n} events of quiet threads `mtlab record` had copied from it while it ran \
                             (a thread's calls after its last copy are missing)"
                        ),
                        None => " (a thread writes its calls 64 KiB at a time, or at its next call once they are ~100 ms old)".into(),
                    }
                ),
                Some(sig) => format!("program was killed by signal {sig}{}", signal_name(sig)),
                None => format!("program ended with {e}"),
            });
        }
        note(String::new());
        match &p.profile {
            Some(profile) => {
                // An exec writes every thread's buffer first: only an end without exit loses samples.
                out.extend(sampled(profile, run.frames, !p.clean_end && !p.running && !execd && p.flight.is_none()));
                if !profile.threads.is_empty() {
                    out.push(View::Table(sampled_threads(&profile.threads)));
                }
            }
            None => {
                out.push(View::Table(functions(p)));
                out.push(View::Table(heap(p)));
                let split = |s: &crate::analysis::model::SpaceSplit| {
                    format!(
                        "requested {}, allocator overhead {}, free {}",
                        human_bytes(s.requested_bytes),
                        human_bytes(s.overhead_bytes),
                        human_bytes(s.free_bytes)
                    )
                };
                out.push(View::Note(format!(
                    "mapped space at peak: {}; at end: {} (overhead: usable minus requested size, and chunk headers)",
                    split(&p.space_peak),
                    split(&p.space_end)
                )));
                if p.program_mappings.calls > 0 && no_heap_calls(p) {
                    // rustc (its own jemalloc) reads as an empty heap and "allocator: glibc": say why.
                    out.push(View::Note(
                        "no call of the heap manager's functions (malloc, free, operator new, …) was seen in this process: \
                         it made none, or it allocates through an allocator linked into it (rustc's jemalloc, Go's \
                         runtime), which mtlab's library cannot see; what it mapped itself is on the next line"
                            .to_string(),
                    ));
                }
                if p.program_mappings.calls > 0 {
                    // Not heap, but the program's memory all the same (python3's pymalloc arenas):
                    // without this line the heap's peak reads as all the program used.
                    out.push(View::Note(format!(
                        "beside the heap: the program's own mappings (mmap outside the heap manager, e.g. python3's pymalloc arenas): \
                         {} calls, {} mapped in all; not in the heap's live and mapped bytes above",
                        p.program_mappings.calls,
                        human_bytes(p.program_mappings.bytes)
                    )));
                }
                if let Some(rss) = p.max_rss_bytes {
                    out.push(View::Note(format!(
                        "the process's peak resident memory, as the kernel counts it at exit: {} (heap, the program's own \
                         mappings, code, stacks, and mtlab's own buffers; the heap figures above are the part the heap manager holds)",
                        human_bytes(rss)
                    )));
                }
                let live: Vec<u64> = p.time_series.iter().map(|t| t.live_bytes).collect();
                let mapped: Vec<u64> = p.time_series.iter().map(|t| t.mapped_bytes).collect();
                if live.len() >= 2 && !page {
                    let over = if p.time_series.iter().all(|t| t.ns.is_some()) { "time" } else { "heap events" };
                    let top = mapped.iter().chain(&live).copied().max().unwrap_or(0);
                    out.push(View::Note(format!(
                        "over {over} (one scale, 0 to {}):\n  live   {}\n  mapped {}",
                        human_bytes(top),
                        sparkline(&live, top, 64),
                        sparkline(&mapped, top, 64)
                    )));
                }
            }
        }
        if !p.top_sites.by_bytes.is_empty() {
            out.extend(sites("sites_by_bytes", "top allocation sites by bytes", &p.top_sites.by_bytes, SiteCount::Allocated, run.frames));
            out.extend(sites("sites_by_calls", "top allocation sites by calls", &p.top_sites.by_calls, SiteCount::Allocated, run.frames));
            if !p.callers.is_empty() {
                let mut t = table(
                    "callers",
                    "functions by allocated bytes: self (it called the allocator), total (anywhere on the stack)",
                    &["function", "total bytes", "total calls", "self bytes", "self calls"],
                    1,
                );
                for c in &p.callers {
                    t.push(vec![
                        Cell::text(&c.function),
                        Cell::Bytes(c.total_bytes),
                        Cell::Int(c.total_calls as i64),
                        Cell::Bytes(c.self_bytes),
                        Cell::Int(c.self_calls as i64),
                    ]);
                }
                out.push(View::Table(t));
            }
            if !p.top_sites.at_peak.is_empty() {
                let at = p.peak.at_ns.map(|ns| format!(" at {:.3} s", ns as f64 / 1e9)).unwrap_or_default();
                let title = format!("top allocation sites at the peak ({} live{at})", human_bytes(p.peak.heap.live_bytes));
                out.extend(sites("sites_at_peak", &title, &p.top_sites.at_peak, SiteCount::AtPeak, run.frames));
            }
            out.push(View::Note(format!(
                "temporary allocations (freed with no other allocation of their thread in between): {} of {} allocation calls ({:.1} %)",
                p.temporary.calls,
                p.temporary.of_calls,
                p.temporary.fraction * 100.0
            )));
            if !p.top_sites.temporary.is_empty() {
                out.extend(sites("sites_temporary", "top sites by temporary allocations", &p.top_sites.temporary, SiteCount::Temporary, run.frames));
            }
            if !p.threads.is_empty() {
                out.push(View::Table(threads(&p.threads)));
            }
        }
        let mut note = |s: String| out.push(View::Note(s));
        if p.profile.is_none() {
            if p.flight.is_some() {
                note(format!(
                    "live at the window's end, of the blocks allocated in it: {} objects, {} bytes",
                    p.leaks.objects, p.leaks.bytes
                ));
            } else if p.running {
                note(format!("live so far (the process is still running): {} objects, {} bytes", p.leaks.objects, p.leaks.bytes));
            } else if p.clean_end {
                note(format!("not freed at exit: {} objects, {} bytes", p.leaks.objects, p.leaks.bytes));
            } else if execd {
                note(format!(
                    "live when it exec'd: {} objects, {} bytes — exec replaced the program without running its exit \
                     handlers, so this is not what it leaked; events other threads still buffered then are missing",
                    p.leaks.objects, p.leaks.bytes
                ));
            } else {
                // Killed (abort, a fatal signal): what its thread buffers held at the end never reached the file.
                note(format!(
                    "live at the last event written: {} objects, {} bytes — the program did not end through exit \
                     ({}): events still buffered when it died are missing (at most each thread's last ~100 ms of calls, \
                     and those a thread made before it went quiet; abort() writes its own thread's first), so this is \
                     not what it leaked",
                    p.leaks.objects,
                    p.leaks.bytes,
                    p.exit.as_deref().unwrap_or("how it ended is unknown")
                ));
            }
        }
        if !p.leaks.top.is_empty() {
            out.extend(sites("leaks", "", &p.leaks.top, SiteCount::Live, run.frames));
        }
        let loss_cause = p.write_loss.cause();
        let mut note = |s: String| out.push(View::Note(s));
        note(match p.events_dropped {
            Some(0) => "events dropped: 0".into(),
            Some(d) if loss_cause.is_some() => format!(
                "events dropped: {d} — {}; the heap figures above miss these calls (a dropped free leaves its block \
                 counted as live)",
                loss_cause.unwrap_or_default()
            ),
            Some(d) => format!(
                "events dropped: {d} — calls mtlab saw but could not write: the disk was full or the file size limit \
                 reached, no memory for a buffer, threads still allocating after the exit flush or after an exec \
                 that failed, or (see below) the \
                 first buffer of a process made without fork handlers; the heap figures above miss these calls (a \
                 dropped free leaves its block counted as live)"
            ),
            None if p.running => "events dropped: not known until the process ends".into(),
            None if execd => "events dropped: unknown — no END record: the process exec'd another program (its \
                image's trace follows); calls other threads made while it exec'd are missing"
                .into(),
            None if p.exit.as_deref().is_some_and(|e| e.starts_with("exit code")) => "events dropped: unknown — no END \
                record: the process made the exit_group system call itself instead of calling exit (as every Go \
                program does), exec'd a program that wrote no trace of its own (statically linked, or run without \
                LD_PRELOAD), or its trace could not be completed (disk full); events after its last flush are missing"
                .into(),
            None => "events dropped: unknown — no END record: the process did not end through exit or _exit (abort, \
                     fatal signal, killed, or exec), or its trace could not be completed (disk full); events after its \
                     last flush are missing"
                .into(),
        });
        if let (Some(a), Some(prof)) = (&p.allocator_stats, &p.profile) {
            // A sampled trace knows the bytes in use only as an estimate, and no mapped bytes.
            let at_exit = a.as_reading(p.duration_ns, prof.totals.inuse_bytes);
            note(format!("at exit: {}", allocator_reading_text(&at_exit, &p.allocator).replace('\n', "; ")));
        } else if let Some(a) = &p.allocator_stats {
            let side = |theirs: Option<u64>, ours: u64| match theirs {
                Some(t) if t > 0 => format!(
                    "{} (mtlab: {}, {:+.2} %)",
                    human_bytes(t),
                    human_bytes(ours),
                    (ours as f64 / t as f64 - 1.0) * 100.0
                ),
                _ => "not kept by it".into(),
            };
            let before = |b: Option<u64>| match b {
                Some(b) if b > 0 => format!(" ({} more before tracing started)", human_bytes(b)),
                _ => String::new(),
            };
            // A gap without its reason reads as mtlab being wrong: say what each side counts.
            let why = |what: &str, figure: Figure, theirs: Option<u64>, ours: u64| {
                theirs
                    .and_then(|t| gaps::reason(figure, &p.allocator, t, ours))
                    .map(|r| format!("\n  {what} differs: {r}"))
                    .unwrap_or_default()
            };
            note(format!(
                "the heap manager's own view at exit ({}), since tracing started: in use {}{}; mapped {}{}{}{}",
                a.source,
                side(a.traced_in_use_bytes(), a.mtlab_in_use_bytes),
                before(a.in_use_at_start_bytes),
                side(a.traced_mapped_bytes(), a.mtlab_mapped_bytes),
                before(a.mapped_at_start_bytes),
                why("in use", Figure::InUse, a.traced_in_use_bytes(), a.mtlab_in_use_bytes),
                why("mapped", Figure::Mapped, a.traced_mapped_bytes(), a.mtlab_mapped_bytes),
            ));
        }
        for r in &p.allocator_readings {
            let at = r.at_ns.map(|ns| format!(" at {:.3} s", ns as f64 / 1e9)).unwrap_or_default();
            note(format!("dump {}{at}: {}", r.dump, allocator_reading_text(r, &p.allocator).replace('\n', "; ")));
        }
        if let Some(n) = p.stacks_overflowed.filter(|&n| n > 0) {
            note(format!(
                "{n} call(s) got no stack: mtlab's table of distinct stacks (2^20 per process) was full, so they are \
                 counted under \"(no stack recorded)\" in the site tables; --depth N with a smaller N makes fewer \
                 distinct stacks"
            ));
        }
        if p.trace_reopened > 0 {
            note(format!(
                "the program closed or replaced mtlab's trace descriptor: the trace was opened again by path {} time(s) \
                 and writing went on",
                p.trace_reopened
            ));
        }
        if p.guards_reset > 0 {
            note(format!(
                "{} time(s) a thread left mtlab's code or an allocator call by longjmp (a signal handler jumping out): the \
                 interrupted call is not in the trace; tracing went on from the thread's next call",
                p.guards_reset
            ));
        }
        if p.signal_calls_untraced > 0 {
            note(format!(
                "{} allocator call(s) made by signal handlers are not in the trace: each interrupted mtlab's own code \
                 (an event being written, a buffer being flushed), where recording it would have corrupted the \
                 interrupted event; handlers' calls that interrupted the program or the heap manager are traced",
                p.signal_calls_untraced
            ));
        }
        if p.shared_tls_calls > 0 {
            note(format!(
                "{} allocation(s) came from threads made by the clone system call without thread storage of their \
                 own (no CLONE_SETTLS): they are traced, with their stacks, but counted under the thread whose storage \
                 they share (the one that created them), so per-thread figures merge the two",
                p.shared_tls_calls
            ));
        }
        if p.stopped_by_seccomp {
            note(
                "tracing stopped when the program installed a seccomp filter under which mtlab could not go on writing \
                 its trace (its writes would have failed or killed the program): the trace was finished there, and what \
                 the program did after it is not in the trace"
                    .to_string(),
            );
        }
        if p.ctl_page_refused {
            note(format!(
                "something this process did not create (another user's file, a link) was at its control page's name \
                 {}: it kept its page private, so `mtlab ctl` could not reach it, only its signal",
                crate::platform::names::ctl_page(p.pid).display()
            ));
        }
        if p.forked_without_handlers {
            note(
                "this process was made by a raw fork or clone system call, which runs no fork handler: mtlab noticed at \
                 its first write, and the events of that first buffer (the parent's last ones mixed with its own first \
                 ones) were dropped"
                    .to_string(),
            );
        }
        if p.chunks_damaged > 0 {
            note(format!(
                "DAMAGED TRACE: {} chunk(s) could not be read — cut short (the file ends inside them) or not matching \
                 their checksums (changed after they were written) — and were skipped: the figures above miss their \
                 events; the warnings below say where",
                p.chunks_damaged
            ));
        }
        match &p.attached {
            Some(a) => {
                note(format!(
                    "attached to the running process{}: tracing started at {} and ended by {}; blocks allocated \
                     before it are not in the figures, and their frees are counted apart",
                    if a.pid != p.pid { format!(" (pid {} outside its PID namespace)", a.pid) } else { String::new() },
                    crate::units::rfc3339((a.at_ns / 1_000_000_000) as i64),
                    if a.ended_by == "exit" { "its exit" } else { "mtlab's detach (the process ran on)" }
                ));
                if p.unknown_frees > 0 {
                    note(format!("frees of blocks allocated before the attach: {}", p.unknown_frees));
                }
            }
            None if p.unknown_frees > 0 && p.flight.is_none() => {
                note(format!("frees of addresses not allocated while traced: {}", p.unknown_frees));
            }
            None => {}
        }
        if let Some(s) = &p.slowdown {
            note(format!(
                "instrumentation slowdown: {:.2}× ({:.3} s traced vs {:.3} s untraced, wall time){}",
                s.ratio,
                s.traced_wall_ns as f64 / 1e9,
                s.baseline_wall_ns as f64 / 1e9,
                if s.baseline_stdin_empty {
                    " — the untraced run read an empty stdin (the traced one's could not be read twice: a pipe, a \
                     terminal, or a file not readable again): for a program that reads stdin this compares different \
                     work; give the input as a file (< FILE) or argument"
                } else {
                    ""
                }
            ));
        }
        if let Some(q) = p.compact_quantum_ticks {
            note(format!(
                "note: compact trace (`mtlab compact`): time stamps rounded to {q} ticks; each function's cycles are kept \
                 as a distribution, so the figures above are exact but no call keeps its own cycles; the time series \
                 replays threads' independent events within a quantum in an order of its own; dropped: the sites live \
                 at the peak (no top sites at the peak, no site's live objects or bytes at the peak), which that order \
                 decides, and the time series' malloc cycles"
            ));
        }
        if p.compact_lean {
            note(format!(
                "note: lean trace (`mtlab compact --lean`): heap addresses made up (a free names the latest live block \
                 of its kind, not its own) and frees keep no stack; exact still: counts, bytes, sites, temporary \
                 allocations, leaks, live and mapped bytes and the peak{}; {NOT_IN_A_LEAN_TRACE}: fragmentation, \
                 utilization and live bytes outside known regions{}, and where each block lay",
                if p.peak_before_compaction { " (measured on the real addresses before compaction, with all its figures)" } else { "" },
                if p.peak_before_compaction { " at the end and over time" } else { "" },
            ));
        }
        if let Some(n) = &p.stacks.note {
            note(format!("note: {n}"));
        }
        if page {
            out.extend(memory_plot(p).map(View::Plot));
        }
        out.push(View::Note(String::new()));
    }
    out
}

/// What a flight recorder's window is, in two sentences: it is not the
/// whole run, and its frees of earlier blocks are expected.
fn flight_note(w: &crate::analysis::model::FlightWindow) -> String {
    let s = |ns: u64| format!("{:.3} s", ns as f64 / 1e9);
    let execd = match &w.execd {
        Some(t) => format!(
            "; the process had exec'd another program by then (traced as {t}), whose events are not in this window: \
             the flight recorder keeps the first program the process ran"
        ),
        None => String::new(),
    };
    format!(
        "FLIGHT-RECORDER WINDOW: the last {} of the run, written on {}: events from {} to {} after tracing \
         started ({} earlier events are not in it); {} frees were of blocks allocated before the window (not \
         errors), and every figure below is of the window only{}",
        s(w.keep_last_ns),
        w.trigger,
        s(w.start_ns),
        s(w.end_ns),
        w.events_before,
        w.frees_before,
        execd
    )
}

/// The heap manager's own figures read after a `mtlab ctl dump`, beside
/// mtlab's estimate then (also printed by `mtlab ctl dump`); two lines.
pub fn allocator_reading_text(r: &AllocatorReading, allocator: &str) -> String {
    let Some(source) = &r.source else {
        return format!("the heap manager ({allocator}) keeps no figures mtlab can read");
    };
    let mut parts = Vec::new();
    match r.in_use_bytes {
        Some(b) => parts.push(match r.traced_in_use_bytes() {
            Some(t) => format!("{} in use ({} since tracing started)", human_bytes(b), human_bytes(t)),
            None => format!("{} in use", human_bytes(b)),
        }),
        None => parts.push("no count of bytes in use".to_string()),
    }
    if let Some(m) = r.mapped_bytes {
        parts.push(format!("{} mapped", human_bytes(m)));
    }
    let mut out = format!("the heap manager's own figures ({source}): {}", parts.join(", "));
    if let Some(e) = &r.mtlab_in_use_bytes {
        out += &format!(
            "\nmtlab's estimate of the bytes in use (blocks allocated while sampling was on): {} [{}, {}]",
            human_bytes(e.value as u64),
            human_bytes(e.low as u64),
            human_bytes(e.high as u64)
        );
        if let Some(t) = r.traced_in_use_bytes().filter(|&t| t > 0) {
            let inside = if e.covers(t as f64) { "inside" } else { "outside" };
            out += &format!(
                ", {:+.1} % of the heap manager's (its figure is {inside} the 95 % interval)",
                (e.value - t as f64) / t as f64 * 100.0
            );
        }
    }
    out
}

/// " (Aborted)": the description libc gives a signal number, if any.
fn signal_name(sig: u64) -> String {
    // SAFETY: strsignal returns a pointer to a static or thread-local string (never freed by us), or NULL.
    let p = unsafe { libc::strsignal(sig as libc::c_int) };
    if p.is_null() {
        return String::new();
    }
    // SAFETY: p is a NUL-terminated string owned by libc, read at once.
    let text = unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned();
    if text.starts_with("Unknown signal") || text.starts_with("Real-time signal") {
        return String::new();
    }
    format!(" ({text})")
}


/// A process's live and mapped bytes against time (or heap events when the
/// trace has no clock), for the HTML report; None with fewer than 2 points.
pub fn memory_plot(p: &ProcessReport) -> Option<crate::export::Plot> {
    use crate::export::{Plot, PlotKind, Point, Scale, Series};
    if p.time_series.len() < 2 {
        return None;
    }
    let timed = p.time_series.iter().all(|s| s.ns.is_some());
    let x = |s: &crate::analysis::model::SeriesPoint| if timed { s.ns.unwrap_or(0) as f64 / 1e9 } else { s.event as f64 };
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let line = |name: &str, y: &dyn Fn(&crate::analysis::model::SeriesPoint) -> f64| Series {
        name: name.to_string(),
        points: p.time_series.iter().map(|s| Point { x: x(s), y: y(s), low: None, high: None }).collect(),
    };
    Some(Plot {
        name: format!("memory-{}", p.pid),
        title: format!("process {}: live and mapped bytes", p.pid),
        x_label: if timed { "seconds since tracing started".into() } else { "heap events".into() },
        y_label: "MiB".into(),
        kind: PlotKind::Line {
            x_scale: Scale::Linear,
            series: vec![line("live", &|s| mib(s.live_bytes)), line("mapped", &|s| mib(s.mapped_bytes))],
        },
    })
}

/// `values` as a line of block characters, at most `width` wide, each
/// character the largest value of its stretch, scaled so `top` is a full block.
pub fn sparkline(values: &[u64], top: u64, width: usize) -> String {
    const BLOCKS: [char; 9] = [' ', '▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    if values.is_empty() || width == 0 {
        return String::new();
    }
    let n = values.len().min(width);
    (0..n)
        .map(|i| {
            let (a, b) = (i * values.len() / n, ((i + 1) * values.len() / n).max(i * values.len() / n + 1));
            let v = values[a..b].iter().copied().max().unwrap_or(0);
            let level = if top == 0 { 0 } else { ((v as f64 / top as f64) * 8.0).ceil() as usize };
            BLOCKS[level.min(8)]
        })
        .collect()
}

#[cfg(test)]
mod sparkline_tests {
    use super::sparkline;

    #[test]
    fn a_sparkline_keeps_each_stretchs_largest_value_on_one_scale() {
        assert_eq!(sparkline(&[0, 1, 2, 3, 4, 5, 6, 7, 8], 8, 64), " ▁▂▃▄▅▆▇█");
        // Two values a character: the larger of each pair shows.
        assert_eq!(sparkline(&[8, 0, 0, 4, 0, 0], 8, 3), "█▄ ");
        assert_eq!(sparkline(&[5, 5], 0, 4), "  ");
        assert_eq!(sparkline(&[], 8, 4), "");
    }
}

