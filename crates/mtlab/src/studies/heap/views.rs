//! What `mtlab heap compare` shows: the allocators side by side (time,
//! memory, fragmentation), their per-function cycle tables, and plots of
//! live and mapped bytes, fragmentation and utilization, and malloc cycles
//! against heap events, one line per allocator.

use super::{traced, untraced, Details, Objective, FUNCTIONS, SWEEP};
use crate::export::{Cell, Plot, PlotKind, Point, Scale, Series, Table, View};
use crate::study::{summary, Run};

/// The ways the program ran: allocators (compare) or settings (sweep).
fn variants(run: &Run) -> Vec<String> {
    let list = run.settings.get("variants").or_else(|| run.settings.get("allocators"));
    list.map(|s| s.split(',').map(String::from).collect()).unwrap_or_default()
}

/// The first column's heading.
fn label(run: &Run) -> &'static str {
    if run.study == SWEEP {
        "setting"
    } else {
        "allocator"
    }
}

fn bytes(run: &Run, config: &str, metric: &str) -> Cell {
    summary::median(run, config, metric).map(|b| Cell::Bytes(b as u64)).unwrap_or(Cell::Empty)
}

/// A peak RSS, or "≤ X" where it did not rise above what the child
/// inherited from mtlab (`child::own_rss_kib`).
fn peak_rss(run: &Run, config: &str) -> Cell {
    match (summary::median(run, config, "peak_rss"), summary::median(run, config, "rss_floor")) {
        (Some(p), Some(f)) if p <= f * 1.02 => Cell::text(format!("≤ {}", crate::units::human_bytes(f as u64))),
        (Some(p), _) => Cell::Bytes(p as u64),
        _ => Cell::Empty,
    }
}

fn side_by_side(run: &Run, names: &[String]) -> Table {
    let mut t = Table::new(
        "allocators",
        format!("{} (medians over the repetitions)", run.settings.get("command").map(String::as_str).unwrap_or("")),
        &[
            label(run),
            "wall s [interval]",
            "peak RSS",
            "traced × untraced",
            "peak live",
            "peak mapped",
            "end live",
            "end mapped",
            "fragmentation % (mean, at peak)",
            "utilization % (at peak)",
        ],
        1,
    );
    for a in names {
        let u = untraced(a);
        let tr = traced(a);
        let wall = run.measurement(&u, "wall_s").map(|m| crate::study::stats::summarize(&m.values));
        let ratio = summary::ratio(run, &tr, "wall_s", &u, "wall_s");
        t.push(vec![
            Cell::text(a),
            match wall {
                Some(s) => Cell::Estimate { value: s.median, low: s.median_ci.map(|i| i.low), high: s.median_ci.map(|i| i.high), decimals: 3 },
                None => Cell::Empty,
            },
            peak_rss(run, &u),
            match ratio {
                Some(r) => Cell::Estimate { value: r.ratio, low: r.interval.map(|i| i.low), high: r.interval.map(|i| i.high), decimals: 2 },
                None => Cell::Empty,
            },
            bytes(run, &tr, "peak_live_bytes"),
            bytes(run, &tr, "peak_mapped_bytes"),
            bytes(run, &tr, "end_live_bytes"),
            bytes(run, &tr, "end_mapped_bytes"),
            Cell::num(summary::median(run, &tr, "peak_fragmentation_mean").map(|f| f * 100.0), 1),
            Cell::num(summary::median(run, &tr, "peak_utilization").map(|f| f * 100.0), 1),
        ]);
    }
    t
}

fn functions(run: &Run, names: &[String]) -> Table {
    let mut t = Table::new(
        "functions",
        "allocator calls, traced (cycles of the real call, timed by mtlab; medians over the repetitions)",
        &[label(run), "function", "calls", "mean size", "mean cycles", "sd cycles", "p99 cycles", "total cycles"],
        2,
    );
    for a in names {
        let tr = traced(a);
        for f in FUNCTIONS {
            let m = |k: &str| summary::median(run, &tr, &format!("{f}.{k}"));
            let Some(calls) = m("calls") else { continue };
            t.push(vec![
                Cell::text(a),
                Cell::text(f),
                Cell::Int(calls as i64),
                Cell::num(m("mean_size"), 1),
                Cell::num(m("cycles_mean"), 1),
                Cell::num(m("cycles_sd"), 1),
                Cell::num(m("cycles_p99"), 0),
                Cell::num(m("cycles_total"), 0),
            ]);
        }
    }
    t
}

/// The calls that allocate (the work a program asks of the heap manager).
const ALLOCATING: [&str; 5] = ["malloc", "calloc", "realloc", "operator new", "operator new[]"];

/// Medians of `which` functions' calls in a variant's traced runs, summed.
fn calls_of(run: &Run, name: &str, which: &[&str]) -> Option<f64> {
    let tr = traced(name);
    let v: Vec<f64> = which.iter().filter_map(|f| summary::median(run, &tr, &format!("{f}.calls"))).collect();
    (!v.is_empty()).then(|| v.iter().sum())
}

/// Allocation calls differing by more than this fraction between variants:
/// they did different work (a program that runs for a fixed time, or sizes
/// its work by what it measures), so their totals are not comparable.
const WORK_DIFFERS: f64 = 0.05;

/// Per-operation figures beside the totals, and a warning when the variants
/// made different numbers of allocation calls: then a total (peak RSS, wall
/// time, cycles) compares different amounts of work, while a figure per call
/// still compares the heap managers. (Cycles per call are over every
/// function of the table, frees included.)
fn per_operation(run: &Run, names: &[String]) -> Vec<View> {
    let mut t = Table::new(
        "per-operation",
        "per allocation call (malloc, calloc, realloc, operator new and new[]), traced runs (medians): the figures to \
         compare when the allocators did different work",
        &[label(run), "allocation calls", "wall ns per call", "allocator cycles per call"],
        1,
    );
    let mut counts = Vec::new();
    for a in names {
        let tr = traced(a);
        let Some(calls) = calls_of(run, a, &ALLOCATING).filter(|&c| c > 0.0) else { continue };
        counts.push((a.as_str(), calls));
        let all = calls_of(run, a, &super::FUNCTIONS).unwrap_or(0.0);
        let cycles: f64 = super::FUNCTIONS.iter().filter_map(|f| summary::median(run, &tr, &format!("{f}.cycles_total"))).sum();
        t.push(vec![
            Cell::text(a),
            Cell::Int(calls as i64),
            Cell::num(summary::median(run, &tr, "wall_s").map(|w| w * 1e9 / calls), 1),
            Cell::num((all > 0.0 && cycles > 0.0).then(|| cycles / all), 1),
        ]);
    }
    let mut out = vec![View::Table(t)];
    let lo = counts.iter().min_by(|a, b| a.1.total_cmp(&b.1));
    let hi = counts.iter().max_by(|a, b| a.1.total_cmp(&b.1));
    if let (Some(lo), Some(hi)) = (lo, hi) {
        if hi.1 > lo.1 * (1.0 + WORK_DIFFERS) {
            out.push(View::Note(format!(
                "warning: the program did different work under each {}: {:.0} allocation calls under {} but {:.0} under {} \
                 (×{:.2}; a program that runs for a fixed time, or sizes its work by what it measures). Wall time, peak \
                 RSS, cycles and bytes above are totals of different work: compare the per-operation figures",
                label(run),
                lo.1,
                lo.0,
                hi.1,
                hi.0,
                hi.1 / lo.1
            )));
        }
    }
    out
}

/// Mapped space split three ways, at the peak of live bytes and at exit.
fn space(run: &Run, names: &[String]) -> Table {
    let mut t = Table::new(
        "space",
        "mapped space split three ways: requested by the program, allocator overhead (usable minus requested size, glibc's \
         8-byte chunk headers), free space in the mapping (medians)",
        &[label(run), "requested (peak)", "overhead (peak)", "free (peak)", "requested (end)", "overhead (end)", "free (end)"],
        1,
    );
    for a in names {
        let tr = traced(a);
        let b = |k: &str| bytes(run, &tr, k);
        t.push(vec![
            Cell::text(a),
            b("peak_live_bytes"),
            b("peak_overhead_bytes"),
            b("peak_free_bytes"),
            b("end_live_bytes"),
            b("end_overhead_bytes"),
            b("end_free_bytes"),
        ]);
    }
    t
}

/// mtlab's figures at exit beside the heap manager's own.
fn validation(run: &Run, names: &[String]) -> Table {
    let mut t = Table::new(
        "validation",
        "at exit, since tracing started: the heap manager's own figures beside mtlab's (glibc: mallinfo2, live usable bytes + 8-byte chunk headers; jemalloc: stats.allocated, stats.mapped + retained; tcmalloc: current allocated bytes, heap size; mimalloc: committed bytes)",
        &[label(run), "in use (its own)", "in use (mtlab)", "difference", "mapped (its own)", "mapped (mtlab)", "difference"],
        1,
    );
    for a in names {
        let tr = traced(a);
        let m = |k: &str| summary::median(run, &tr, k);
        // In bytes and percent: a few KiB of thread caches is a large
        // percentage of a heap that is nearly empty at exit.
        let diff = |ours: Option<f64>, theirs: Option<f64>| match (ours, theirs) {
            (Some(o), Some(t)) if t > 0.0 => {
                let d = o - t;
                let sign = if d < 0.0 { "-" } else { "+" };
                Cell::text(format!("{sign}{} ({:+.1} %)", crate::units::human_bytes(d.abs() as u64), (o / t - 1.0) * 100.0))
            }
            _ => Cell::Empty,
        };
        let b = |v: Option<f64>| v.map(|v| Cell::Bytes(v as u64)).unwrap_or(Cell::Empty);
        let (theirs_in, ours_in) = (m("allocator_in_use_bytes"), m("mtlab_in_use_bytes"));
        let (theirs_map, ours_map) = (m("allocator_mapped_bytes"), m("end_mapped_bytes"));
        if theirs_in.is_none() && theirs_map.is_none() {
            continue;
        }
        t.push(vec![
            Cell::text(a),
            b(theirs_in),
            b(theirs_in.and(ours_in)),
            diff(ours_in, theirs_in),
            b(theirs_map),
            b(ours_map),
            diff(ours_map, theirs_map),
        ]);
    }
    t
}

fn line(name: &str, title: &str, y: &str, series: Vec<Series>) -> View {
    line_over(name, title, "heap events", y, series)
}

fn line_over(name: &str, title: &str, x: &str, y: &str, series: Vec<Series>) -> View {
    View::Plot(Plot {
        name: name.into(),
        title: title.into(),
        x_label: x.into(),
        y_label: y.into(),
        kind: PlotKind::Line { x_scale: Scale::Linear, series },
    })
}

fn plots(details: &Details) -> Vec<View> {
    let pts = |a: &str, f: &dyn Fn(&super::SeriesPoint) -> Option<f64>| -> Vec<Point> {
        details.series[a]
            .iter()
            .filter_map(|p| f(p).map(|y| Point { x: p.event as f64, y, low: None, high: None }))
            .collect()
    };
    // The same memory against the program's time (where the trace has it).
    let over_time: Vec<Series> = details
        .series
        .iter()
        .flat_map(|(a, s)| {
            let at = |f: &dyn Fn(&super::SeriesPoint) -> u64| -> Vec<Point> {
                s.iter().filter_map(|p| p.seconds.map(|t| Point { x: t, y: f(p) as f64 / 1048576.0, low: None, high: None })).collect()
            };
            [
                Series { name: format!("{a} live"), points: at(&|p| p.live_bytes) },
                Series { name: format!("{a} mapped"), points: at(&|p| p.mapped_bytes) },
            ]
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    let mut memory = Vec::new();
    let mut frag = Vec::new();
    let mut cycles = Vec::new();
    let mut split = Vec::new();
    for a in details.series.keys() {
        memory.push(Series { name: format!("{a} live"), points: pts(a, &|p| Some(p.live_bytes as f64 / 1048576.0)) });
        memory.push(Series { name: format!("{a} mapped"), points: pts(a, &|p| Some(p.mapped_bytes as f64 / 1048576.0)) });
        frag.push(Series { name: format!("{a} fragmentation"), points: pts(a, &|p| Some(p.fragmentation_mean * 100.0)) });
        frag.push(Series { name: format!("{a} utilization"), points: pts(a, &|p| Some(p.utilization * 100.0)) });
        cycles.push(Series { name: a.clone(), points: pts(a, &|p| p.malloc_mean_cycles) });
        split.push(Series { name: format!("{a} overhead"), points: pts(a, &|p| Some(p.overhead_bytes as f64 / 1048576.0)) });
        split.push(Series { name: format!("{a} free"), points: pts(a, &|p| Some(p.free_bytes as f64 / 1048576.0)) });
    }
    let mut out = vec![
        line("heap-compare-memory", "live and mapped bytes against heap events", "MiB", memory),
        line("heap-compare-fragmentation", "fragmentation (mean) and utilization against heap events", "%", frag),
        line("heap-compare-malloc-cycles", "mean malloc cycles per window of events", "cycles", cycles),
        line("heap-compare-space", "allocator overhead and free space against heap events", "MiB", split),
    ];
    if !over_time.is_empty() {
        out.push(line_over("heap-compare-memory-time", "live and mapped bytes against time (traced run)", "seconds", "MiB", over_time));
    }
    out
}

/// A sweep's answer: the value that minimizes the objective among those
/// whose malloc p99 is within 10 % of the best p99 (for the p99 objective
/// itself: the least p99).
fn best(run: &Run, names: &[String]) -> Option<View> {
    let objective = Objective::parse(run.settings.get("objective")?)?;
    let p99 = |n: &str| summary::median(run, &traced(n), "malloc.cycles_p99");
    let best_p99 = names.iter().filter_map(|n| p99(n)).fold(f64::INFINITY, f64::min);
    let eligible = |n: &&String| objective == Objective::MallocP99 || p99(n).is_none_or(|p| p <= best_p99 * 1.10);
    let value = |n: &str| {
        let (config, metric) = objective.metric(n);
        summary::median(run, &config, metric)
    };
    let (name, v) = names.iter().filter(eligible).filter_map(|n| value(n).map(|v| (n, v))).min_by(|a, b| a.1.total_cmp(&b.1))?;
    let shown = if objective == Objective::Wall { format!("{v:.3} s") } else if objective == Objective::MallocP99 { format!("{v:.0} cycles") } else { crate::units::human_bytes(v as u64) };
    let guard = if objective == Objective::MallocP99 { String::new() } else { format!(", among the settings whose malloc p99 is within 10 % of the best ({best_p99:.0} cycles)") };
    Some(View::Note(format!("best under `--objective {}`: {name} ({shown}){guard}", objective.name())))
}

pub fn views(run: &Run) -> Vec<View> {
    let names = variants(run);
    let mut v = vec![
        View::Table(side_by_side(run, &names)),
        View::Table(functions(run, &names)),
        View::Table(space(run, &names)),
        View::Table(validation(run, &names)),
    ];
    v.extend(per_operation(run, &names));
    v.extend(best(run, &names));
    v.push(View::Note(
        "wall s and peak RSS: the program untraced (peak RSS \"≤ X\": no higher than what a child inherits from mtlab \
         until it execs, so not measurable here); traced × untraced: the program's own wall time under mtlab record \
         over the untraced one, paired by round"
            .into(),
    ));
    if let Ok(d) = serde_json::from_value::<Details>(run.details.clone()) {
        if !d.series.is_empty() {
            v.extend(plots(&d));
        }
    }
    v
}
