//! How an affinity run is shown: the throughput matrix (median and spread of
//! every cell), heat maps of throughput and of each counter per GB with the
//! package and shared-cache boundaries drawn, a summary per placement class,
//! the built-in flow against iperf3, and the recommended placement with its
//! reason in numbers.

use crate::export::{Boundary, Cell, Plot, PlotKind, Table, View};
use crate::study::{stats, summary, Configuration, Run};
use crate::topo::Placement;

/// One measured cell of the matrix.
struct MatrixCell<'a> {
    conf: &'a Configuration,
    flow: usize,
    app: usize,
    class: &'a str,
    generator: &'a str,
}

fn cells(run: &Run) -> Vec<MatrixCell<'_>> {
    run.configurations
        .iter()
        .filter_map(|c| {
            Some(MatrixCell {
                conf: c,
                flow: c.get("flow_cpu")?.parse().ok()?,
                app: c.get("app_cpu")?.parse().ok()?,
                class: c.get("class")?,
                generator: c.get("generator").unwrap_or("builtin"),
            })
        })
        .collect()
}

fn values<'a>(run: &'a Run, c: &MatrixCell, metric: &str) -> &'a [f64] {
    run.measurement(&c.conf.name, metric).map_or(&[], |m| &m.values)
}

fn sorted_unique(v: impl Iterator<Item = usize>) -> Vec<usize> {
    let mut v: Vec<usize> = v.collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Lines between neighbouring CPUs of an axis whose package (strong) or
/// last-level cache (light) differ, from the run's details.
fn boundaries(run: &Run, axis: &[usize]) -> Vec<Boundary> {
    let group = |cpu: usize| {
        run.details["cpus"].as_array().and_then(|a| a.iter().find(|x| x["cpu"] == cpu)).map(|x| (x["package"].clone(), x["llc"].clone()))
    };
    axis.windows(2)
        .enumerate()
        .filter_map(|(i, w)| match (group(w[0]), group(w[1])) {
            (Some((p0, _)), Some((p1, _))) if p0 != p1 => Some(Boundary { after: i, strong: true }),
            (Some((_, l0)), Some((_, l1))) if l0 != l1 => Some(Boundary { after: i, strong: false }),
            _ => None,
        })
        .collect()
}

/// The generators of the run, the built-in one first.
fn generators<'a>(cs: &[MatrixCell<'a>]) -> Vec<&'a str> {
    let mut g: Vec<&str> = cs.iter().map(|c| c.generator).collect();
    g.sort_by_key(|x| (*x != "builtin", *x));
    g.dedup();
    g
}

fn heatmap(run: &Run, cs: &[MatrixCell], generator: &str, metric: &str, title: String, higher_is_better: bool) -> Option<Plot> {
    let mine: Vec<&MatrixCell> = cs.iter().filter(|c| c.generator == generator).collect();
    let rows = sorted_unique(mine.iter().map(|c| c.flow));
    let cols = sorted_unique(mine.iter().map(|c| c.app));
    let mut any = false;
    let grid: Vec<Vec<Option<f64>>> = rows
        .iter()
        .map(|&f| {
            cols.iter()
                .map(|&a| {
                    let c = mine.iter().find(|c| c.flow == f && c.app == a)?;
                    let v = values(run, c, metric);
                    any |= !v.is_empty();
                    (!v.is_empty()).then(|| stats::median(v))
                })
                .collect()
        })
        .collect();
    if !any {
        return None;
    }
    let suffix = if generator == "builtin" { String::new() } else { format!("-{generator}") };
    Some(Plot {
        name: format!("affinity-{}{suffix}", metric.replace('_', "-")),
        title,
        x_label: "application core".into(),
        y_label: "flow core (receive processing)".into(),
        kind: PlotKind::Heatmap {
            rows: rows.iter().map(|r| r.to_string()).collect(),
            columns: cols.iter().map(|c| c.to_string()).collect(),
            values: grid,
            higher_is_better,
            row_boundaries: boundaries(run, &rows),
            column_boundaries: boundaries(run, &cols),
        },
    })
}

/// Flow core × app core, each cell `median (min–max)` in Gb/s.
fn matrix_table(run: &Run, cs: &[MatrixCell], generator: &str) -> Table {
    let mine: Vec<&MatrixCell> = cs.iter().filter(|c| c.generator == generator).collect();
    let rows = sorted_unique(mine.iter().map(|c| c.flow));
    let cols = sorted_unique(mine.iter().map(|c| c.app));
    let headers: Vec<String> = std::iter::once("flow core".to_string()).chain(cols.iter().map(|c| format!("app {c}"))).collect();
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    let gen = if generator == "builtin" { String::new() } else { format!(", {generator}") };
    let mut t = Table::new(
        &format!("matrix{}", if generator == "builtin" { String::new() } else { format!("-{generator}") }),
        format!("Throughput, Gb/s: median (min–max) of the repetitions{gen}"),
        &headers,
        1,
    )
    .screen_only();
    for &f in &rows {
        let mut row = vec![Cell::text(f.to_string())];
        for &a in &cols {
            row.push(match mine.iter().find(|c| c.flow == f && c.app == a) {
                Some(c) if !values(run, c, "gbps").is_empty() => {
                    let s = stats::summarize(values(run, c, "gbps"));
                    Cell::text(format!("{:.1} ({:.1}–{:.1})", s.median, s.min, s.max))
                }
                _ => Cell::Empty,
            });
        }
        t.push(row);
    }
    t
}

/// Counter metrics of the run (`flow_busy_ms_per_gb`, ...), in first-seen
/// order; none when the host's background load would dominate them.
fn counter_metrics(run: &Run) -> Vec<&str> {
    if background(run).is_some_and(|b| b.share >= DOMINATES) {
        return Vec::new();
    }
    run.metrics().into_iter().filter(|m| m.ends_with("_per_gb")).collect()
}

/// Above this share of a cell's busy time per GB, the host's background load
/// dominates the counters and their view is refused; above [`WARN_SHARE`] it is named.
const DOMINATES: f64 = 0.5;
const WARN_SHARE: f64 = 0.1;

/// The worst cell for background load: how much of its busy time per GB
/// the host's other work could account for.
struct Background {
    /// Up to this share of the busy ms per GB may be other work (at most 1).
    share: f64,
    cell: String,
    role: &'static str,
    /// How busy that CPU was with other work while no flow ran (%).
    pct: f64,
}

/// Other work that kept a CPU busy `pct` % of the time would add up to
/// pct/100 × 1000 ms per second of flow, and a second of flow at `gbps`
/// carries gbps / 8 GB: an upper bound (the flow takes some of that time).
fn background(run: &Run) -> Option<Background> {
    let mut worst: Option<Background> = None;
    for c in cells(run) {
        for role in ["flow", "app"] {
            let (Some(pct), Some(gbps), Some(busy)) = (
                summary::median(run, &c.conf.name, &format!("{role}_background_busy_pct")),
                summary::median(run, &c.conf.name, "gbps"),
                summary::median(run, &c.conf.name, &format!("{role}_busy_ms_per_gb")),
            ) else {
                continue;
            };
            if gbps <= 0.0 || busy <= 0.0 {
                continue;
            }
            let share = (pct / 100.0 * 1000.0 / (gbps / 8.0) / busy).min(1.0);
            if worst.as_ref().is_none_or(|w| share > w.share) {
                worst = Some(Background { share, cell: c.conf.name.clone(), role, pct });
            }
        }
    }
    worst
}

/// What the host's own load does to the counters, in words.
fn background_notes(run: &Run) -> Vec<String> {
    let Some(b) = background(run) else { return Vec::new() };
    let what = format!(
        "the host's other work kept the {} core of `{}` {:.0} % busy while no flow ran (median of the checks before each flow): up to {:.0} % of its busy ms per GB may be that work, not the flow",
        b.role,
        b.cell,
        b.pct,
        b.share * 100.0
    );
    if b.share >= DOMINATES {
        vec![format!(
            "warning: counters per GB are not shown: {what}. Per-CPU counters count every process on the CPU; run the study on an idle host (or idle CPUs: --flow-cpus, --app-cpus)"
        )]
    } else if b.share >= WARN_SHARE {
        vec![format!("warning: {what}; the counters per GB overstate the flow's cost by as much")]
    } else {
        Vec::new()
    }
}

/// `flow_busy_ms_per_gb` → `busy ms per GB on the flow core`.
fn describe_metric(metric: &str) -> String {
    let (role, rest) = metric.split_once('_').unwrap_or(("", metric));
    let what = rest.trim_end_matches("_per_gb").replace('_', " ");
    format!("{what} per GB on the {role} core")
}

/// All repetitions of every cell of one class and generator.
fn class_values(run: &Run, cs: &[MatrixCell], class: &str, generator: &str, metric: &str) -> Vec<f64> {
    cs.iter().filter(|c| c.class == class && c.generator == generator).flat_map(|c| values(run, c, metric).iter().copied()).collect()
}

fn classes<'a>(cs: &[MatrixCell<'a>]) -> Vec<&'a str> {
    let mut v: Vec<&str> = cs.iter().map(|c| c.class).collect();
    v.sort_by_key(|c| Placement::parse(c));
    v.dedup();
    v
}

fn class_table(run: &Run, cs: &[MatrixCell], generator: &str) -> Table {
    let counters: Vec<&str> =
        counter_metrics(run).into_iter().filter(|m| ["flow_busy_ms_per_gb", "app_busy_ms_per_gb", "flow_softirq_ms_per_gb"].contains(m)).collect();
    let mut headers = vec!["class", "cells", "median Gb/s", "spread Gb/s"];
    let names: Vec<String> = counters.iter().map(|m| describe_metric(m)).collect();
    headers.extend(names.iter().map(String::as_str));
    let mut t = Table::new("classes", "By placement class (every repetition of every cell)", &headers, 1).text_column(3);
    for class in classes(cs) {
        let v = class_values(run, cs, class, generator, "gbps");
        if v.is_empty() {
            continue;
        }
        let s = stats::summarize(&v);
        let n = cs.iter().filter(|c| c.class == class && c.generator == generator).count();
        let mut row = vec![
            Cell::text(class),
            Cell::Int(n as i64),
            Cell::num(Some(s.median), 1),
            Cell::text(format!("{:.1}–{:.1}", s.min, s.max)),
        ];
        for m in &counters {
            let cv = class_values(run, cs, class, generator, m);
            row.push(if cv.is_empty() { Cell::Empty } else { Cell::num(Some(stats::median(&cv)), 1) });
        }
        t.push(row);
    }
    t
}

/// The class with the highest median throughput and its best cell.
struct Best<'a, 'r> {
    class: &'a str,
    values: Vec<f64>,
    pair: &'r MatrixCell<'a>,
    /// Every other class with its values.
    others: Vec<(&'a str, Vec<f64>)>,
}

fn best<'a, 'r>(run: &Run, cs: &'r [MatrixCell<'a>], generator: &str) -> Option<Best<'a, 'r>> {
    let mut ranked: Vec<(&str, Vec<f64>)> =
        classes(cs).into_iter().map(|c| (c, class_values(run, cs, c, generator, "gbps"))).filter(|(_, v)| !v.is_empty()).collect();
    let i = (0..ranked.len()).max_by(|&a, &b| stats::median(&ranked[a].1).total_cmp(&stats::median(&ranked[b].1)))?;
    let (class, values) = ranked.remove(i);
    let pair = cs
        .iter()
        .filter(|c| c.class == class && c.generator == generator)
        .max_by(|a, b| stats::median(values_of(run, a)).total_cmp(&stats::median(values_of(run, b))))?;
    Some(Best { class, values, pair, others: ranked })
}

fn values_of<'r>(run: &'r Run, c: &MatrixCell) -> &'r [f64] {
    values(run, c, "gbps")
}

/// The recommended cell of a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BestPair {
    pub flow: usize,
    pub app: usize,
    /// Its class is faster beyond the spread than every other class measured.
    pub clear: bool,
}

/// The best cell of the class with the highest median throughput.
pub fn best_pair(run: &Run) -> Option<BestPair> {
    let cs = cells(run);
    let main = generators(&cs).first().copied()?;
    let b = best(run, &cs, main)?;
    let clear = b.others.iter().all(|(_, v)| stats::independent_ratio(&b.values, v).interval.is_some_and(|i| i.conclusive() && i.low > 1.0));
    Some(BestPair { flow: b.pair.flow, app: b.pair.app, clear })
}

/// The best class, how it compares with each other class (ratio of medians,
/// with the interval of the ratio, labelled with its true level), and the CPU time behind it.
fn recommendation(run: &Run, cs: &[MatrixCell], generator: &str) -> Vec<String> {
    let Some(b) = best(run, cs, generator) else { return Vec::new() };
    let desc = Placement::parse(b.class).map_or("", |p| p.describe());
    if b.others.is_empty() {
        return vec![format!(
            "only one placement class was measured ({}: {desc}); with more CPUs in --flow-cpus/--app-cpus the matrix can compare classes",
            b.class
        )];
    }
    let (mut apart, mut close) = (Vec::new(), Vec::new());
    for (class, v) in &b.others {
        let r = stats::independent_ratio(&b.values, v);
        let iv = r.interval.map_or(" (too few repetitions for an interval)".to_string(), |i| format!(" ({} interval {:.2}–{:.2})", i.label(), i.low, i.high));
        let text = format!("{:.2}× {class} ({:.1} Gb/s){iv}", stats::median(&b.values) / stats::median(v), stats::median(v));
        if r.interval.is_some_and(|i| i.conclusive() && i.low > 1.0) {
            apart.push(text);
        } else {
            close.push(text);
        }
    }
    let cell = format!(
        "flow core {}, application core {} at {:.1} Gb/s (median); class median {:.1} Gb/s",
        b.pair.flow,
        b.pair.app,
        stats::median(values_of(run, b.pair)),
        stats::median(&b.values)
    );
    let mut out = Vec::new();
    if apart.is_empty() {
        out.push(format!("no placement class is faster beyond the spread; the highest median is {} ({desc}): {cell}", b.class));
    } else {
        out.push(format!("recommended placement: {} ({desc}) — best pair {cell}", b.class));
        out.push(format!("  faster beyond the spread than: {}", apart.join("; ")));
    }
    if !close.is_empty() {
        out.push(format!("  not told apart beyond the spread from: {} — more --reps or longer --seconds may separate them", close.join("; ")));
    }
    if counter_metrics(run).contains(&"flow_busy_ms_per_gb") {
        let all = std::iter::once((b.class, &b.values)).chain(b.others.iter().map(|(c, v)| (*c, v)));
        let parts: Vec<String> = all
            .map(|(c, _)| (c, class_values(run, cs, c, generator, "flow_busy_ms_per_gb"), class_values(run, cs, c, generator, "app_busy_ms_per_gb")))
            .filter(|(_, f, a)| !f.is_empty() && !a.is_empty())
            .map(|(c, f, a)| format!("{c} {:.1} + {:.1}", stats::median(&f), stats::median(&a)))
            .collect();
        out.push(format!("  CPU time per GB (flow core + application core, ms): {}", parts.join("; ")));
    }
    out
}

/// The built-in flow over iperf3 at the same pinning, cell by cell.
fn generator_table(run: &Run, cs: &[MatrixCell]) -> Option<Table> {
    let pairs: Vec<&MatrixCell> = cs.iter().filter(|c| c.conf.baseline.is_some()).collect();
    if pairs.is_empty() {
        return None;
    }
    let ratios: Vec<_> = pairs.iter().filter_map(|c| summary::ratio(run, &c.conf.name, "gbps", c.conf.baseline.as_deref()?, "gbps")).collect();
    let levels = stats::labels(ratios.iter().filter_map(|r| r.interval.as_ref()));
    let mut t = Table::new(
        "generators",
        format!(
            "Built-in flow against iperf3 at the same pinning (ratio of paired repetitions{})",
            if levels.is_empty() { String::new() } else { format!(", {levels} interval") }
        ),
        &["flow core", "app core", "class", "built-in Gb/s", "iperf3 Gb/s", "built-in / iperf3"],
        3,
    );
    for c in pairs {
        let base = c.conf.baseline.as_deref().expect("filtered");
        let r = summary::ratio(run, &c.conf.name, "gbps", base, "gbps");
        t.push(vec![
            Cell::Int(c.flow as i64),
            Cell::Int(c.app as i64),
            Cell::text(c.class),
            Cell::num(summary::median(run, &c.conf.name, "gbps"), 1),
            Cell::num(summary::median(run, base, "gbps"), 1),
            match r {
                Some(r) => Cell::Estimate { value: r.ratio, low: r.interval.map(|i| i.low), high: r.interval.map(|i| i.high), decimals: 3 },
                None => Cell::Empty,
            },
        ]);
    }
    Some(t)
}

/// Every cell's medians, for CSV and JSON readers.
fn cells_table(run: &Run, cs: &[MatrixCell]) -> Table {
    let metrics: Vec<&str> = std::iter::once("gbps").chain(counter_metrics(run)).collect();
    let mut headers = vec!["flow core", "app core", "class", "generator"];
    headers.extend(metrics.iter().copied());
    let mut t = Table::new("cells", "Every cell (medians)", &headers, 4).data_only();
    for c in cs {
        let mut row = vec![Cell::Int(c.flow as i64), Cell::Int(c.app as i64), Cell::text(c.class), Cell::text(c.generator)];
        row.extend(metrics.iter().map(|m| Cell::num(summary::median(run, &c.conf.name, m), 3)));
        t.push(row);
    }
    t
}

pub fn views(run: &Run) -> Vec<View> {
    let cs = cells(run);
    let mut v = Vec::new();
    let gens = generators(&cs);
    let main = gens.first().copied().unwrap_or("builtin");
    for g in &gens {
        v.push(View::Table(matrix_table(run, &cs, g)));
    }
    v.push(View::Table(class_table(run, &cs, main)));
    if let Some(t) = generator_table(run, &cs) {
        v.push(View::Table(t));
    }
    v.extend(recommendation(run, &cs, main).into_iter().map(View::Note));
    v.extend(background_notes(run).into_iter().map(View::Note));
    v.push(View::Table(cells_table(run, &cs)));
    for g in &gens {
        let title = format!("Throughput (Gb/s){}", if *g == "builtin" { String::new() } else { format!(", {g}") });
        v.extend(heatmap(run, &cs, g, "gbps", title, true).map(View::Plot));
    }
    for m in counter_metrics(run) {
        let unit = run.measurements.iter().find(|x| x.metric == m).map_or(String::new(), |x| x.unit.clone());
        v.extend(heatmap(run, &cs, main, m, format!("{} ({unit})", describe_metric(m)), false).map(View::Plot));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::Measurement;

    /// A 2×2 run: same-core cells at ~10 Gb/s, cross cells at ~15.
    fn run() -> Run {
        let mut r = Run::new(super::super::STUDY, "test");
        r.environment = Default::default();
        r.details = serde_json::json!({"cpus": [{"cpu": 0, "package": 0, "llc": "0-1"}, {"cpu": 1, "package": 0, "llc": "0-1"}]});
        for (f, a, base) in [(0, 0, 10.0), (0, 1, 15.0), (1, 0, 14.0), (1, 1, 9.0)] {
            let class = if f == a { "same" } else { "llc" };
            let name = format!("flow {f} app {a}");
            r.configurations.push(
                Configuration::new(&name).param("flow_cpu", f).param("app_cpu", a).param("class", class).param("generator", "builtin"),
            );
            let gbps = vec![base, base + 0.2, base - 0.2];
            r.measurements.push(Measurement { configuration: name.clone(), metric: "gbps".into(), unit: "Gb/s".into(), lower_is_better: false, values: gbps });
            r.measurements.push(Measurement {
                configuration: name.clone(),
                metric: "flow_busy_ms_per_gb".into(),
                unit: "ms/GB".into(),
                lower_is_better: true,
                values: vec![100.0 / base; 3],
            });
            r.measurements.push(Measurement {
                configuration: name,
                metric: "flow_background_busy_pct".into(),
                unit: "%".into(),
                lower_is_better: true,
                values: vec![0.0; 3],
            });
        }
        r
    }

    #[test]
    fn the_faster_class_is_recommended_with_its_numbers() {
        let r = run();
        let cs = cells(&r);
        let rec = recommendation(&r, &cs, "builtin");
        assert!(rec[0].starts_with("recommended placement: llc"), "{rec:?}");
        assert!(rec[0].contains("flow core 0, application core 1 at 15.0 Gb/s"), "{rec:?}");
        assert!(rec[1].contains("faster beyond the spread than") && rec[1].contains("1.53× same (9.5 Gb/s)"), "{rec:?}");
        assert_eq!(best_pair(&r), Some(BestPair { flow: 0, app: 1, clear: true }));
        let t = class_table(&r, &cs, "builtin");
        assert_eq!(t.rows.len(), 2);
        assert_eq!(t.rows[0][0], Cell::text("same"));
        assert_eq!(t.rows[1][2], Cell::Num(14.5, 1));
    }

    #[test]
    fn without_a_class_faster_beyond_the_spread_nothing_is_recommended() {
        let mut r = run();
        // Overlapping classes: same 10 ± 6, llc 11 ± 6.
        for m in r.measurements.iter_mut().filter(|m| m.metric == "gbps") {
            let c = m.values[0];
            m.values = vec![c - 6.0, c, c + 6.0];
        }
        let cs = cells(&r);
        let rec = recommendation(&r, &cs, "builtin");
        assert!(rec[0].starts_with("no placement class is faster beyond the spread; the highest median is llc"), "{rec:?}");
        assert!(rec[1].contains("not told apart"), "{rec:?}");
        assert!(!best_pair(&r).unwrap().clear);
    }

    #[test]
    fn intervals_are_labelled_with_the_level_they_have() {
        let mut r = run();
        // iperf3 beside the built-in flow at one pinning, 3 paired rounds.
        r.configurations[1] = r.configurations[1].clone().baseline("iperf 0 1");
        r.configurations.push(Configuration::new("iperf 0 1").param("flow_cpu", 0).param("app_cpu", 1).param("class", "llc").param("generator", "iperf3"));
        r.measurements.push(Measurement { configuration: "iperf 0 1".into(), metric: "gbps".into(), unit: "Gb/s".into(), lower_is_better: false, values: vec![14.0, 14.4, 13.9] });
        let cs = cells(&r);
        let t = generator_table(&r, &cs).unwrap();
        // 3 rounds: a t interval at 95 %, said so (it was min..max, 75 %, titled "95 %").
        assert!(t.title.contains("95 % t interval"), "{}", t.title);
        // The recommendation names each interval's own level.
        let rec = recommendation(&r, &cs, "builtin").join("\n");
        assert!(!rec.contains("(95 % interval"), "{rec}");
        assert!(rec.contains("too few repetitions for an interval") || rec.contains("% interval "), "{rec}");
    }

    #[test]
    fn background_load_that_would_dominate_the_counters_refuses_their_view() {
        let mut r = run();
        assert!(background_notes(&r).is_empty());
        assert!(counter_metrics(&r).contains(&"flow_busy_ms_per_gb"));
        // 15 Gb/s = 1.875 GB/s; 10 ms/GB of flow work. 1 % background: 5.3 ms/GB, over half.
        // A CPU 100 % busy with others' work: all of it.
        let set = |r: &mut Run, pct: f64| {
            for m in r.measurements.iter_mut().filter(|m| m.metric == "flow_background_busy_pct") {
                m.values = vec![pct; 3];
            }
        };
        set(&mut r, 100.0);
        let n = background_notes(&r);
        assert!(n[0].starts_with("warning: counters per GB are not shown") && n[0].contains("100 % busy"), "{n:?}");
        assert!(counter_metrics(&r).is_empty());
        let rec = recommendation(&r, &cells(&r), "builtin").join("\n");
        assert!(!rec.contains("CPU time per GB"), "{rec}");
        // A little load is named, and the counters stay.
        set(&mut r, 0.3);
        let n = background_notes(&r);
        assert!(n.len() == 1 && n[0].starts_with("warning: the host's other work") && n[0].contains("overstate"), "{n:?}");
        assert!(!counter_metrics(&r).is_empty());
    }

    #[test]
    fn the_matrix_reads_like_the_heat_map() {
        let r = run();
        let cs = cells(&r);
        let t = matrix_table(&r, &cs, "builtin");
        assert_eq!(t.columns, vec!["flow core", "app 0", "app 1"]);
        assert_eq!(t.rows[0][2], Cell::text("15.0 (14.8–15.2)"));
        let p = heatmap(&r, &cs, "builtin", "gbps", "t".into(), true).unwrap();
        let PlotKind::Heatmap { values, row_boundaries, .. } = p.kind else { panic!() };
        assert_eq!(values[1][0], Some(14.0));
        // One package, one LLC: no boundary.
        assert!(row_boundaries.is_empty());
        assert_eq!(describe_metric("flow_busy_ms_per_gb"), "busy ms per GB on the flow core");
    }

    #[test]
    fn package_boundaries_are_strong_and_cache_boundaries_light() {
        let mut r = run();
        r.details = serde_json::json!({"cpus": [
            {"cpu": 0, "package": 0, "llc": "0-1"}, {"cpu": 1, "package": 0, "llc": "0-1"},
            {"cpu": 2, "package": 0, "llc": "2-3"}, {"cpu": 6, "package": 1, "llc": "6-7"}]});
        let b = boundaries(&r, &[0, 1, 2, 6]);
        assert_eq!(b, vec![Boundary { after: 1, strong: false }, Boundary { after: 2, strong: true }]);
    }
}
