//! How a threads run is shown: one table and plot per workload, the check
//! against perf bench, the timer's cost, and the source's qualitative
//! results restated with this run's numbers.

use std::collections::BTreeSet;

use crate::export::{Bar, Cell, Plot, PlotKind, Point, Scale, Series, Table, View};
use crate::study::{stats, summary, Configuration, Run};

/// Agreement with perf bench the study promises.
const FIDELITY: f64 = 0.10;

fn estimate(run: &Run, c: &Configuration, metric: &str) -> Cell {
    match run.measurement(&c.name, metric) {
        Some(m) => {
            let s = stats::summarize(&m.values);
            Cell::Estimate {
                value: s.median,
                low: s.median_ci.map(|i| i.low),
                high: s.median_ci.map(|i| i.high),
                decimals: summary::decimals_for(s.median),
            }
        }
        None => Cell::Empty,
    }
}

fn median(run: &Run, c: &Configuration, metric: &str) -> Cell {
    let v = summary::median(run, &c.name, metric);
    Cell::num(v, v.map_or(0, summary::decimals_for))
}

/// min–max of the repetitions: the spread of a cell.
fn spread(run: &Run, c: &Configuration, metric: &str) -> Cell {
    match run.measurement(&c.name, metric) {
        Some(m) if m.values.len() > 1 => {
            let s = stats::summarize(&m.values);
            let d = summary::decimals_for(s.median) as usize;
            Cell::text(format!("{:.d$}–{:.d$}", s.min, s.max))
        }
        _ => Cell::Empty,
    }
}

/// This configuration over its baseline (another libc over glibc).
fn vs_baseline(run: &Run, c: &Configuration, metric: &str) -> Cell {
    let Some(base) = c.baseline.as_deref() else { return Cell::Empty };
    match summary::ratio(run, &c.name, metric, base, metric) {
        Some(r) => Cell::Estimate { value: r.ratio, low: r.interval.map(|i| i.low), high: r.interval.map(|i| i.high), decimals: 2 },
        None => Cell::Empty,
    }
}

fn of<'a>(run: &'a Run, workload: &str) -> Vec<&'a Configuration> {
    run.configurations.iter().filter(|c| c.get("workload") == Some(workload)).collect()
}

fn p<'a>(c: &'a Configuration, key: &str) -> &'a str {
    c.get(key).unwrap_or("")
}

/// Where a configuration ran: its CPU set, or its placement class and pair.
fn where_(c: &Configuration) -> String {
    match (c.get("place"), c.get("pin")) {
        (Some(class), Some(pin)) => format!("{class} ({pin})"),
        _ => p(c, "cpus").to_string(),
    }
}

fn preempt_col(c: &Configuration) -> Cell {
    c.get("preempt").map(Cell::text).unwrap_or(Cell::Empty)
}

pub fn views(run: &Run) -> Vec<View> {
    let mut v = Vec::new();
    let sweep = run.configurations.iter().any(|c| c.get("preempt").is_some());
    v.extend(create_views(run, sweep));
    v.extend(ctx_views(run, sweep));
    v.extend(fidelity_views(run));
    v.extend(chat_views(run, sweep));
    v.extend(timer_notes(run));
    v.extend(findings(run));
    v
}

fn create_views(run: &Run, sweep: bool) -> Vec<View> {
    let cs = of(run, "create");
    if cs.is_empty() {
        return vec![];
    }
    let touch = cs.iter().any(|c| run.measurement(&c.name, "first_touch_us").is_some());
    let mut cols = vec!["libc", "CPUs", "wait", "stack", "preempt", "create+join µs p50 [interval]", "spread", "p99", "create only", "first touch", "× glibc"];
    if !touch {
        cols.retain(|c| *c != "first touch");
    }
    let mut t = cell_table(
        "create",
        "thread creation: pthread_create of a thread that returns at once, and the wait for it (µs)",
        &cols,
        if sweep { 5 } else { 4 },
        sweep,
    );
    for c in &cs {
        let stack = p(c, "stack_kib");
        let mut row = vec![
            Cell::text(p(c, "libc")),
            Cell::text(where_(c)),
            Cell::text(p(c, "wait")),
            Cell::text(if stack == "0" { "default".to_string() } else { format!("{stack} KiB") }),
        ];
        if sweep {
            row.push(preempt_col(c));
        }
        row.extend([
            estimate(run, c, "create_join_us"),
            spread(run, c, "create_join_us"),
            median(run, c, "create_join_p99_us"),
            median(run, c, "create_only_us"),
        ]);
        if touch {
            row.push(median(run, c, "first_touch_us"));
        }
        row.push(vs_baseline(run, c, "create_join_us"));
        t.push(row);
    }
    let mut out = vec![View::Table(text_columns(t, &["spread"]))];
    // The source's figure: creation cost per CPU set, one bar per libc.
    let groups: Vec<String> = dedup(cs.iter().map(|c| where_(c)));
    let series_names: Vec<String> = dedup(cs.iter().map(|c| series_name(c, &["libc", "wait", "stack_kib", "preempt"])));
    let series = series_names
        .iter()
        .map(|s| {
            let bars = groups
                .iter()
                .map(|g| {
                    cs.iter().find(|c| &where_(c) == g && &series_name(c, &["libc", "wait", "stack_kib", "preempt"]) == s).and_then(|c| {
                        run.measurement(&c.name, "create_join_us").map(|m| {
                            let st = stats::summarize(&m.values);
                            Bar { value: st.median, low: st.median_ci.map(|i| i.low), high: st.median_ci.map(|i| i.high) }
                        })
                    })
                })
                .collect();
            (s.clone(), bars)
        })
        .collect();
    out.push(View::Plot(Plot {
        name: "threads-create".into(),
        title: "thread creation cost by CPU set and thread library".into(),
        x_label: "CPU set".into(),
        y_label: "create+join µs (median p50; whisker: interval)".into(),
        kind: PlotKind::GroupedBars { groups, series },
    }));
    out
}

/// A workload's table; the preempt column only when the run swept the model.
fn cell_table(name: &str, title: &str, columns: &[&str], numeric_from: usize, sweep: bool) -> Table {
    let cols: Vec<&str> = columns.iter().copied().filter(|c| sweep || *c != "preempt").collect();
    Table::new(name, title, &cols, numeric_from)
}

/// Marks the named columns as text (they sit among numbers), and drops
/// columns no row fills (e.g. "× glibc" when glibc is the only libc).
fn text_columns(mut t: Table, names: &[&str]) -> Table {
    let mut i = t.columns.len();
    while i > 0 {
        i -= 1;
        if !t.rows.is_empty() && t.rows.iter().all(|r| matches!(r.get(i), Some(Cell::Empty) | None)) {
            t.columns.remove(i);
            for r in &mut t.rows {
                if i < r.len() {
                    r.remove(i);
                }
            }
            if i < t.numeric_from {
                t.numeric_from -= 1;
            }
        }
    }
    for n in names {
        if let Some(i) = t.columns.iter().position(|c| c == n) {
            t = t.text_column(i);
        }
    }
    t
}

/// The values of `keys` that vary within the run, as a legend entry.
fn series_name(c: &Configuration, keys: &[&str]) -> String {
    keys.iter()
        .filter_map(|k| c.get(k).map(|v| (k, v)))
        .filter(|(k, v)| !(**k == "stack_kib" && *v == "0"))
        .map(|(k, v)| match *k {
            "stack_kib" => format!("stack {v} KiB"),
            "ws_kib" => format!("{v} KiB"),
            "preempt" => format!("preempt {v}"),
            _ => v.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn dedup(it: impl Iterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in it {
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

fn ctx_views(run: &Run, sweep: bool) -> Vec<View> {
    let cs = of(run, "ctx");
    if cs.is_empty() {
        return vec![];
    }
    let mut t = cell_table(
        "ctx",
        "context switches: a token round a ring of threads, each walking its working set (lmbench's switch = ring − overhead; ns)",
        &[
            "libc", "CPUs", "transport", "threads", "working set", "preempt", "switch ns [interval]", "spread", "ring ns/hand-off", "overhead",
            "hand-off p50", "hand-off p99", "× glibc",
        ],
        3,
        sweep,
    );
    for c in &cs {
        let mut row = vec![
            Cell::text(p(c, "libc")),
            Cell::text(where_(c)),
            Cell::text(p(c, "transport")),
            Cell::Int(p(c, "threads").parse().unwrap_or(0)),
            Cell::text(format!("{} KiB", p(c, "ws_kib"))),
        ];
        if sweep {
            row.push(preempt_col(c));
        }
        row.extend([
            estimate(run, c, "switch_ns"),
            spread(run, c, "switch_ns"),
            median(run, c, "loop_ns"),
            median(run, c, "overhead_ns"),
            median(run, c, "handoff_p50_ns"),
            median(run, c, "handoff_p99_ns"),
            vs_baseline(run, c, "switch_ns"),
        ]);
        t.push(row);
    }
    let mut out = vec![View::Table(text_columns(t, &["working set", "spread"]))];
    // The source's figure: switch cost against threads, one line per working set.
    let panels = dedup(cs.iter().map(|c| format!("{} {} {}", p(c, "libc"), where_(c), p(c, "transport"))));
    for panel in panels {
        let members: Vec<&&Configuration> =
            cs.iter().filter(|c| format!("{} {} {}", p(c, "libc"), where_(c), p(c, "transport")) == panel).collect();
        let threads: BTreeSet<u32> = members.iter().filter_map(|c| p(c, "threads").parse().ok()).collect();
        if threads.len() < 2 {
            continue;
        }
        let lines = dedup(members.iter().map(|c| series_name(c, &["ws_kib", "preempt"])));
        let series = lines
            .iter()
            .map(|l| Series {
                name: format!("working set {l}"),
                points: members
                    .iter()
                    .filter(|c| &series_name(c, &["ws_kib", "preempt"]) == l)
                    .filter_map(|c| {
                        let m = run.measurement(&c.name, "switch_ns")?;
                        let s = stats::summarize(&m.values);
                        Some(Point {
                            x: p(c, "threads").parse().ok()?,
                            y: s.median,
                            low: s.median_ci.map(|i| i.low),
                            high: s.median_ci.map(|i| i.high),
                        })
                    })
                    .collect(),
            })
            .collect();
        out.push(View::Plot(Plot {
            name: format!("threads-ctx-{}", panel.replace([' ', ',', '(', ')'], "-").replace("--", "-").trim_end_matches('-')),
            title: format!("context switch cost: {panel}"),
            x_label: "threads in the ring".into(),
            y_label: "ns per switch (median; bar: interval)".into(),
            kind: PlotKind::Line { x_scale: Scale::Log2, series },
        }));
    }
    out
}

/// mtlab's 2-thread pipe ring against perf bench sched pipe -T on the same CPUs.
fn fidelity_views(run: &Run) -> Vec<View> {
    let perfs = of(run, "perf");
    if perfs.is_empty() {
        return vec![];
    }
    let mut t = Table::new(
        "fidelity",
        format!("2 threads passing a token over pipes: mtlab ctx vs perf bench sched pipe -T (µs per round trip; agreement within ±{:.0} %)", FIDELITY * 100.0),
        &["CPUs", "libc", "mtlab µs", "perf µs", "mtlab / perf [interval]", "agrees"],
        2,
    );
    let (mut noisy, mut levels) = (false, Vec::new());
    for pc in &perfs {
        for c in of(run, "ctx").into_iter().filter(|c| {
            p(c, "cpus") == p(pc, "cpus")
                && c.get("pin") == pc.get("pin")
                && p(c, "transport") == "pipe"
                && p(c, "threads") == "2"
                && p(c, "ws_kib") == "0"
                && c.get("preempt") == pc.get("preempt")
        }) {
            let (Some(a), Some(b)) = (summary::median(run, &c.name, "loop_ns"), summary::median(run, &pc.name, "loop_ns")) else { continue };
            let paired = summary::ratio(run, &c.name, "loop_ns", &pc.name, "loop_ns");
            let iv = paired.and_then(|r| r.interval);
            let verdict = agreement(a / b, paired);
            noisy |= verdict == Agreement::TooNoisy;
            t.push(vec![
                Cell::text(where_(c)),
                Cell::text(p(c, "libc")),
                Cell::Num(2.0 * a / 1000.0, 2),
                Cell::Num(2.0 * b / 1000.0, 2),
                // The ratio of the two medians printed beside it; the interval is the paired rounds'.
                Cell::Estimate { value: a / b, low: iv.map(|i| i.low), high: iv.map(|i| i.high), decimals: 3 },
                Cell::text(verdict.word()),
            ]);
            levels.extend(iv);
        }
    }
    if !levels.is_empty() {
        t.title = format!("{}; intervals: {}", t.title, stats::labels(&levels));
    }
    let mut out = vec![View::Table(t.text_column(5))];
    if noisy {
        out.push(View::Note(format!(
            "note: agreement with perf bench is not judged where the host was too noisy: the rounds' ratios disagree with the ratio of the medians by more than {0:.0} %, \
             or their interval is wider than the ±{0:.0} % band; run on an idle host, or with more --reps",
            FIDELITY * 100.0
        )));
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Agreement {
    Yes,
    No,
    TooNoisy,
}

impl Agreement {
    fn word(self) -> &'static str {
        match self {
            Agreement::Yes => "yes",
            Agreement::No => "no",
            Agreement::TooNoisy => "too noisy to judge",
        }
    }
}

/// Whether mtlab agrees with perf within ±FIDELITY, judged on the ratio of
/// the medians the table prints; unless the rounds say the host was too noisy
/// for that ratio to mean anything: no interval, an interval wider than the
/// band, or round ratios whose median is far from the medians' ratio. An
/// interval wholly outside the band is a "no" however noisy.
fn agreement(of_medians: f64, paired: Option<stats::Ratio>) -> Agreement {
    let band = (1.0 - FIDELITY, 1.0 + FIDELITY);
    let Some(r) = paired else { return Agreement::TooNoisy };
    if let Some(i) = r.interval {
        if i.conclusive() && (i.low > band.1 || i.high < band.0) {
            return Agreement::No;
        }
    }
    let wide = r.interval.is_none_or(|i| i.high / i.low > band.1 / band.0);
    let inconsistent = (r.ratio / of_medians - 1.0).abs() > FIDELITY;
    if wide || inconsistent {
        Agreement::TooNoisy
    } else if (of_medians - 1.0).abs() <= FIDELITY {
        Agreement::Yes
    } else {
        Agreement::No
    }
}

fn chat_views(run: &Run, sweep: bool) -> Vec<View> {
    let cs = of(run, "chat");
    if cs.is_empty() {
        return vec![];
    }
    let mut t = cell_table(
        "chat",
        "message passing: a chat server on loopback TCP, every message broadcast to its room (Volanomark's shape)",
        &["libc", "CPUs", "mode", "rooms × users", "threads", "preempt", "messages/s [interval]", "spread", "latency p50 µs", "p99 µs", "× glibc"],
        4,
        sweep,
    );
    for c in &cs {
        let mut row = vec![
            Cell::text(p(c, "libc")),
            Cell::text(where_(c)),
            Cell::text(p(c, "mode")),
            Cell::text(format!("{} × {}", p(c, "rooms"), p(c, "users"))),
            summary::median(run, &c.name, "threads_created").map(|t| Cell::Int(t as i64)).unwrap_or(Cell::Empty),
        ];
        if sweep {
            row.push(preempt_col(c));
        }
        row.extend([
            estimate(run, c, "msgs_per_s"),
            spread(run, c, "msgs_per_s"),
            median(run, c, "latency_p50_us"),
            median(run, c, "latency_p99_us"),
            vs_baseline(run, c, "msgs_per_s"),
        ]);
        t.push(row);
    }
    let mut out = vec![View::Table(text_columns(t, &["spread"]))];
    // perf bench sched messaging -t: the same shape (groups of 20 senders × 20 receivers).
    let perfs = of(run, "perf-messaging");
    if !perfs.is_empty() {
        let mut pt = Table::new(
            "chat-vs-perf",
            "rooms of 20 users vs perf bench sched messaging -t (groups of 20 sender and 20 receiver threads): messages delivered per second",
            &["CPUs", "rooms / groups", "perf messages/s", "libc", "mode", "chat messages/s", "chat / perf"],
            2,
        );
        for pc in &perfs {
            let Some(theirs) = summary::median(run, &pc.name, "msgs_per_s") else { continue };
            for c in cs.iter().filter(|c| p(c, "cpus") == p(pc, "cpus") && p(c, "users") == "20" && c.get("preempt") == pc.get("preempt")) {
                let Some(ours) = summary::median(run, &c.name, "msgs_per_s") else { continue };
                pt.push(vec![
                    Cell::text(where_(c)),
                    Cell::text(p(pc, "rooms")),
                    Cell::Num(theirs, 0),
                    Cell::text(p(c, "libc")),
                    Cell::text(p(c, "mode")),
                    Cell::Num(ours, 0),
                    Cell::Ratio(ours / theirs),
                ]);
            }
        }
        out.push(View::Table(text_columns(pt, &["libc", "mode"])));
        out.push(View::Note(
            "chat vs perf messaging: both pass ~100-byte messages between a thread per endpoint through the kernel; perf's senders write \
             without waiting (socket pairs, no TCP, one direction), chat's users wait for their own message to come back and the server \
             copies every message to each member, so the two agree in shape (how throughput moves with CPUs and libc), not in level"
                .into(),
        ));
    }
    // Throughput against users per room, one line per libc, mode and CPU set.
    let lines = dedup(cs.iter().map(|c| format!("{} {} {}", p(c, "libc"), p(c, "mode"), where_(c))));
    let users: BTreeSet<u32> = cs.iter().filter_map(|c| p(c, "users").parse().ok()).collect();
    if users.len() > 1 {
        let series = lines
            .iter()
            .map(|l| Series {
                name: l.clone(),
                points: cs
                    .iter()
                    .filter(|c| &format!("{} {} {}", p(c, "libc"), p(c, "mode"), where_(c)) == l && c.get("preempt").is_none())
                    .filter_map(|c| {
                        let m = run.measurement(&c.name, "msgs_per_s")?;
                        let s = stats::summarize(&m.values);
                        Some(Point { x: p(c, "users").parse().ok()?, y: s.median, low: s.median_ci.map(|i| i.low), high: s.median_ci.map(|i| i.high) })
                    })
                    .collect(),
            })
            .collect();
        out.push(View::Plot(Plot {
            name: "threads-chat".into(),
            title: "chat throughput against users per room".into(),
            x_label: "users per room".into(),
            y_label: "messages delivered per second (median; bar: interval)".into(),
            kind: PlotKind::Line { x_scale: Scale::Linear, series },
        }));
    }
    out
}

fn timer_notes(run: &Run) -> Vec<View> {
    let all: Vec<f64> = run.measurements.iter().filter(|m| m.metric == "timer_ticks").flat_map(|m| m.values.iter().copied()).collect();
    if all.is_empty() {
        return vec![];
    }
    let ticks = stats::median(&all);
    let ghz: Option<f64> = run.settings.get("tsc ticks per ns").and_then(|v| v.parse().ok());
    let verdict = if ticks < 30.0 { "under the 30-tick budget" } else { "over the 30-tick budget this study aims for: the hand-off and create times carry its noise" };
    vec![View::Note(format!(
        "timer: one read of the time-stamp counter costs {ticks:.0} ticks{} (median of back-to-back reads), {verdict}; it is subtracted from every timed interval",
        ghz.map(|g| format!(" = {:.1} ns at {g:.3} ticks/ns", ticks / g)).unwrap_or_default()
    ))]
}

/// The source's qualitative results, restated with this run's numbers.
fn findings(run: &Run) -> Vec<View> {
    let mut out = Vec::new();
    // Creation on one CPU vs on several (the source: faster on one CPU).
    let creates = of(run, "create");
    for one in creates.iter().filter(|c| p(c, "cpu_count") == "1") {
        for many in creates.iter().filter(|m| {
            p(m, "cpu_count").parse::<usize>().unwrap_or(0) > 1
                && ["libc", "wait", "stack_kib", "preempt"].iter().all(|k| m.get(k) == one.get(k))
        }) {
            if let Some(r) = summary::ratio(run, &one.name, "create_join_us", &many.name, "create_join_us") {
                // Judged by the interval, not the point: a ratio whose interval holds 1,
                // or whose level is under 90 %, is no finding.
                let (finding, verdict) = match r.interval {
                    Some(i) if !i.conclusive() => (false, "too few repetitions for a 90 % interval"),
                    Some(i) if i.high < 1.0 => (true, "faster on one CPU, as the source found"),
                    Some(i) if i.low > 1.0 => (true, "slower on one CPU, unlike the source"),
                    Some(_) => (false, "no clear difference at this many repetitions"),
                    None => (false, "too few repetitions to tell"),
                };
                out.push(View::Note(format!(
                    "{}: {} create+{} on CPU {} costs {:.2}× its cost on CPUs {}{} ({verdict})",
                    if finding { "finding" } else { "no finding" },
                    p(one, "libc"),
                    p(one, "wait"),
                    p(one, "cpus"),
                    r.ratio,
                    p(many, "cpus"),
                    r.interval.map(|i| format!(" [{:.2}, {:.2}] ({} interval)", i.low, i.high, i.label())).unwrap_or_default(),
                )));
            }
        }
    }
    // Switch cost against the working set, at each ring size.
    let ctxs = of(run, "ctx");
    let cells = dedup(ctxs.iter().map(|c| format!("{}|{}|{}|{}|{}", p(c, "libc"), where_(c), p(c, "transport"), p(c, "threads"), p(c, "preempt"))));
    for cell in cells {
        let mut members: Vec<(f64, f64, &str)> = ctxs
            .iter()
            .filter(|c| format!("{}|{}|{}|{}|{}", p(c, "libc"), where_(c), p(c, "transport"), p(c, "threads"), p(c, "preempt")) == cell)
            .filter_map(|c| Some((p(c, "ws_kib").parse().ok()?, summary::median(run, &c.name, "switch_ns")?, c.name.as_str())))
            .collect();
        members.sort_by(|a, b| a.0.total_cmp(&b.0));
        if let (Some(lo), Some(hi)) = (members.first(), members.last()) {
            if members.len() > 1 && hi.0 > lo.0 {
                let parts: Vec<&str> = cell.split('|').collect();
                // A finding only when the larger working set's switch is dearer beyond
                // an interval of at least 90 % (paired rounds); else the figures, unjudged.
                let r = summary::ratio(run, hi.2, "switch_ns", lo.2, "switch_ns");
                let iv = r.and_then(|r| r.interval);
                let (head, tail) = match iv {
                    Some(i) if i.conclusive() && (i.low > 1.0 || i.high < 1.0) => {
                        ("finding", format!(", ratio [{:.2}, {:.2}] ({} interval)", i.low, i.high, i.label()))
                    }
                    Some(i) if i.conclusive() => ("no finding", format!("; the ratio's interval [{:.2}, {:.2}] ({}) holds 1", i.low, i.high, i.label())),
                    Some(i) => ("no finding", format!("; only a {} interval at this many repetitions", i.label())),
                    None => ("no finding", "; too few repetitions for an interval".to_string()),
                };
                out.push(View::Note(format!(
                    "{head}: {} {} {} threads on {}: a switch costs {:.0} ns with {:.0} KiB working sets and {:.0} ns with {:.0} KiB ({:+.1} ns per KiB{tail})",
                    parts[0],
                    parts[2],
                    parts[3],
                    parts[1],
                    lo.1,
                    lo.0,
                    hi.1,
                    hi.0,
                    (hi.1 - lo.1) / (hi.0 - lo.0)
                )));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::Measurement;

    fn create_run(one: [f64; 3], many: [f64; 3]) -> Run {
        let mut r = Run::new(super::super::STUDY, "test");
        for (name, cpus, n, v) in [("one", "0", "1", one), ("many", "0-1", "2", many)] {
            r.configurations.push(
                Configuration::new(name).param("workload", "create").param("libc", "glibc").param("wait", "join").param("cpus", cpus).param("cpu_count", n),
            );
            r.measurements.push(Measurement { configuration: name.into(), metric: "create_join_us".into(), unit: "µs".into(), lower_is_better: true, values: v.to_vec() });
        }
        r
    }

    fn notes(run: &Run) -> Vec<String> {
        findings(run).into_iter().filter_map(|v| if let View::Note(n) = v { Some(n) } else { None }).collect()
    }

    fn fidelity_run(ours: [f64; 3], perf: [f64; 3]) -> Run {
        let mut r = Run::new(super::super::STUDY, "test");
        for (name, workload, v) in [("ctx", "ctx", ours), ("perf", "perf", perf)] {
            r.configurations.push(
                Configuration::new(name)
                    .param("workload", workload)
                    .param("libc", "glibc")
                    .param("cpus", "0")
                    .param("transport", "pipe")
                    .param("threads", 2)
                    .param("ws_kib", 0),
            );
            r.measurements.push(Measurement { configuration: name.into(), metric: "loop_ns".into(), unit: "ns".into(), lower_is_better: true, values: v.to_vec() });
        }
        r
    }

    fn fidelity_row(run: &Run) -> (Vec<Cell>, Vec<View>) {
        let v = fidelity_views(run);
        let View::Table(t) = &v[0] else { panic!() };
        (t.rows[0].clone(), v)
    }

    #[test]
    fn agreement_with_perf_is_judged_on_the_figures_printed_beside_it() {
        // The row: medians 14.02 vs 17.83 µs, but round ratios 0.79, 1.01, 1.01
        // (median 1.012): it said "1.012, yes".
        let (row, v) = fidelity_row(&fidelity_run([7010.0, 5000.0, 9000.0], [8915.0, 4940.0, 8893.0]));
        assert_eq!(row[2], Cell::Num(14.02, 2));
        let Cell::Estimate { value, .. } = row[4] else { panic!("{row:?}") };
        assert!((value - 7010.0 / 8893.0).abs() < 1e-9, "{value}");
        assert_eq!(row[5], Cell::text("too noisy to judge"));
        assert!(v.iter().any(|x| matches!(x, View::Note(n) if n.contains("too noisy"))));
        // Steady rounds 3 % apart: yes; 30 % apart: no.
        let (row, v) = fidelity_row(&fidelity_run([3090.0, 3100.0, 3110.0], [3000.0, 3010.0, 3020.0]));
        assert_eq!(row[5], Cell::text("yes"));
        assert_eq!(v.len(), 1);
        let (row, _) = fidelity_row(&fidelity_run([3900.0, 3910.0, 3920.0], [3000.0, 3010.0, 3020.0]));
        assert_eq!(row[5], Cell::text("no"));
    }

    #[test]
    fn a_finding_needs_an_interval_of_90_percent_that_excludes_no_change() {
        // Round ratios 0.80, 0.85, 0.98: min..max (75 %) excluded 1 and made a "finding";
        // the 95 % t interval holds 1.
        let n = notes(&create_run([8.0, 8.5, 9.8], [10.0, 10.0, 10.0]));
        assert_eq!(n.len(), 1, "{n:?}");
        assert!(n[0].starts_with("no finding:") && n[0].contains("95 % t interval"), "{n:?}");
        // A clear, steady difference is a finding, with its level.
        let n = notes(&create_run([5.0, 5.1, 4.9], [10.0, 10.0, 10.0]));
        assert!(n[0].starts_with("finding:") && n[0].contains("faster on one CPU") && n[0].contains("(95 % t interval)"), "{n:?}");
    }
}
