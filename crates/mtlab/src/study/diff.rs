//! `mtlab diff A B`: two runs of the same study compared measurement by
//! measurement. Runs are independent samples (taken at different times), so
//! the change is the Hodges–Lehmann ratio B / A with its Mann–Whitney
//! interval (`stats::independent_ratio`). A change is flagged when its
//! interval excludes "no change" **and** the estimate moved by at least the
//! threshold (default 2 %): significant and large enough to matter.
//!
//! Within a run, configurations are measured round by round, interleaved, so
//! a change of the host hits them all alike; two runs are not interleaved.
//! Their intervals hold each run's own spread, not how the host changed
//! between them (mtlab's own timings moved 30–37 % between identical runs
//! minutes apart on a shared host). So every flagged change of a time or a
//! rate is marked as such (`between_runs`) and the diff says why.

use serde::Serialize;
use serde_json::json;

use super::model::Run;
use super::stats::{self, Ratio};
use crate::export::{Cell, Document, Table, View};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Better,
    Worse,
    WithinNoise,
    /// Fewer than 3 values on a side: no interval at the level.
    TooFewValues,
}

#[derive(Debug, Clone, Serialize)]
pub struct Change {
    pub configuration: String,
    pub metric: String,
    pub unit: String,
    pub lower_is_better: bool,
    pub median_a: f64,
    pub median_b: f64,
    /// B over A.
    pub ratio: Ratio,
    pub verdict: Verdict,
    /// A flagged change of a time or rate: the host may have changed between
    /// the two runs, which their intervals do not hold.
    pub between_runs: bool,
}

/// Times and rates: what a change of the host (load, frequency) moves.
fn is_timed(unit: &str) -> bool {
    matches!(unit, "s" | "ms" | "us" | "µs" | "ns" | "cycles") || unit.ends_with("/s")
}

impl Change {
    /// How the verdict reads for this unit: faster/slower for times and rates.
    pub fn word(&self) -> &'static str {
        let timed = is_timed(&self.unit);
        match (self.verdict, timed) {
            (Verdict::Better, true) => "faster",
            (Verdict::Worse, true) => "slower",
            (Verdict::Better, false) => "better",
            (Verdict::Worse, false) => "worse",
            (Verdict::WithinNoise, _) => "within noise",
            (Verdict::TooFewValues, _) => "too few repetitions",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Diff {
    pub study: String,
    pub run_a: Option<i64>,
    pub run_b: Option<i64>,
    pub started_a: String,
    pub started_b: String,
    pub threshold: f64,
    pub changes: Vec<Change>,
    /// Configuration/metric pairs measured in one run only.
    pub only_in_a: Vec<String>,
    pub only_in_b: Vec<String>,
    /// Differences in settings or machine that may explain a change.
    pub warnings: Vec<String>,
}

impl Diff {
    pub fn regressions(&self) -> usize {
        self.changes.iter().filter(|c| c.verdict == Verdict::Worse).count()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    #[error("run {a} is a `{sa}` run and run {b} a `{sb}` run: diff compares two runs of the same study (list them with `mtlab runs --study {sa}`)")]
    DifferentStudies { a: String, sa: String, b: String, sb: String },
}

fn verdict(r: &Ratio, lower_is_better: bool, threshold: f64) -> Verdict {
    let Some(i) = r.interval else { return Verdict::TooFewValues };
    let moved = (r.ratio - 1.0).abs() >= threshold;
    if i.contains(1.0) || !moved {
        return Verdict::WithinNoise;
    }
    if (r.ratio < 1.0) == lower_is_better {
        Verdict::Better
    } else {
        Verdict::Worse
    }
}

fn id(r: &Run) -> String {
    r.id.map(|i| i.to_string()).unwrap_or_else(|| "(unstored)".into())
}

pub fn diff(a: &Run, b: &Run, threshold: f64) -> Result<Diff, DiffError> {
    if a.study != b.study {
        return Err(DiffError::DifferentStudies { a: id(a), sa: a.study.clone(), b: id(b), sb: b.study.clone() });
    }
    let mut changes = Vec::new();
    let mut only_in_a = Vec::new();
    for ma in &a.measurements {
        let Some(mb) = b.measurement(&ma.configuration, &ma.metric) else {
            only_in_a.push(format!("{} / {}", ma.configuration, ma.metric));
            continue;
        };
        let ratio = stats::independent_ratio(&mb.values, &ma.values);
        let (median_a, median_b) = (stats::median(&ma.values), stats::median(&mb.values));
        // A ratio needs positive values; a count that stayed at zero did not change.
        let verdict = if ratio.ratio.is_nan() && median_a == median_b && ma.values.len().min(mb.values.len()) >= 3 {
            Verdict::WithinNoise
        } else {
            verdict(&ratio, ma.lower_is_better, threshold)
        };
        changes.push(Change {
            configuration: ma.configuration.clone(),
            metric: ma.metric.clone(),
            unit: ma.unit.clone(),
            lower_is_better: ma.lower_is_better,
            median_a,
            median_b,
            between_runs: matches!(verdict, Verdict::Better | Verdict::Worse) && is_timed(&ma.unit),
            verdict,
            ratio,
        });
    }
    let only_in_b = b
        .measurements
        .iter()
        .filter(|m| a.measurement(&m.configuration, &m.metric).is_none())
        .map(|m| format!("{} / {}", m.configuration, m.metric))
        .collect();
    let mut warnings = Vec::new();
    for (k, va) in &a.settings {
        match b.settings.get(k) {
            Some(vb) if vb != va => warnings.push(format!("setting {k}: {va} in run {} but {vb} in run {}", id(a), id(b))),
            None => warnings.push(format!("setting {k} is {va} in run {} and absent in run {}", id(a), id(b))),
            _ => {}
        }
    }
    let (ea, eb) = (&a.environment, &b.environment);
    let machine = [
        ("host", ea.host.clone(), eb.host.clone()),
        ("kernel", ea.kernel.clone(), eb.kernel.clone()),
        ("CPU", ea.cpu_model.clone().unwrap_or_default(), eb.cpu_model.clone().unwrap_or_default()),
        ("allowed CPUs", ea.cpu_set.clone(), eb.cpu_set.clone()),
        ("glibc", ea.libc.clone(), eb.libc.clone()),
        ("mtlab", a.mtlab_version.clone(), b.mtlab_version.clone()),
    ];
    for (what, x, y) in machine {
        if x != y {
            warnings.push(format!("{what} differs: {x} in run {} vs {y} in run {}", id(a), id(b)));
        }
    }
    Ok(Diff {
        study: a.study.clone(),
        run_a: a.id,
        run_b: b.id,
        started_a: a.started.clone(),
        started_b: b.started.clone(),
        threshold,
        changes,
        only_in_a,
        only_in_b,
        warnings,
    })
}

/// Minutes from one RFC 3339 UTC time to another (`2026-11-23T21:30:00Z`), if both parse.
fn minutes_between(a: &str, b: &str) -> Option<f64> {
    let secs = |t: &str| -> Option<f64> {
        let (date, time) = t.trim_end_matches('Z').split_once('T')?;
        let d: Vec<i64> = date.split('-').map(|x| x.parse().ok()).collect::<Option<_>>()?;
        let h: Vec<f64> = time.split(':').map(|x| x.parse().ok()).collect::<Option<_>>()?;
        let (&[y, m, day], &[hh, mm, ss]) = (d.as_slice(), h.as_slice()) else { return None };
        // Days from the civil date (Howard Hinnant's algorithm).
        let y = if m <= 2 { y - 1 } else { y };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day - 1;
        let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy;
        Some(days as f64 * 86_400.0 + hh * 3600.0 + mm * 60.0 + ss)
    };
    Some((secs(b)? - secs(a)?) / 60.0)
}

/// The diff for the exporters: one table, warnings and a verdict count.
pub fn document(d: &Diff) -> Document {
    let a = d.run_a.map(|i| i.to_string()).unwrap_or_else(|| "A".into());
    let b = d.run_b.map(|i| i.to_string()).unwrap_or_else(|| "B".into());
    let mut views = vec![View::Note(format!(
        "{} runs {a} → {b}: change = Hodges–Lehmann ratio {b}/{a} with its Mann–Whitney interval (95 % or more; \
         none below 3 repetitions a side); flagged when the interval excludes no change and the change is at least {:.1} %",
        d.study,
        d.threshold * 100.0
    ))];
    let gap = minutes_between(&d.started_a, &d.started_b).map(|m| format!(", {:.0} min apart", m.abs())).unwrap_or_default();
    views.push(View::Note(format!(
        "note: runs {a} and {b} are two separate runs (started {} and {}{gap}), not interleaved: the intervals hold each run's own spread, \
         not how the host changed between them, so a change of a time or rate may be the host's (other load, CPU frequency) — \
         those are marked \"between runs\"; confirm one by running both sides again, in the other order, or compare ratios to a \
         baseline measured in the same run",
        d.started_a, d.started_b
    )));
    let mut t = Table::new(
        "diff",
        "",
        &["configuration", "metric", "unit", &format!("median {a}"), &format!("median {b}"), "change [interval]", "verdict"],
        3,
    );
    for c in &d.changes {
        let dec = super::summary::decimals_for(c.median_a);
        let pct = |x: f64| (x - 1.0) * 100.0;
        t.push(vec![
            Cell::text(&c.configuration),
            Cell::text(&c.metric),
            Cell::text(&c.unit),
            Cell::num(Some(c.median_a), dec),
            Cell::num(Some(c.median_b), dec),
            match c.ratio.interval {
                // No ratio: values at zero (a count that stayed 0 is no change).
                _ if c.ratio.ratio.is_nan() => Cell::text(if c.median_a == c.median_b { "none" } else { "-" }),
                Some(i) => Cell::text(format!("{:+.1} % [{:+.1}, {:+.1}]", pct(c.ratio.ratio), pct(i.low), pct(i.high))),
                None => Cell::text(format!("{:+.1} %", pct(c.ratio.ratio))),
            },
            Cell::text(if c.between_runs { format!("{} (between runs)", c.word()) } else { c.word().to_string() }),
        ]);
    }
    views.push(View::Table(t));
    let count = |v: Verdict| d.changes.iter().filter(|c| c.verdict == v).count();
    let timed = |v: Verdict| d.changes.iter().filter(|c| c.verdict == v && c.between_runs).count();
    let of_which = |v: Verdict| match timed(v) {
        0 => String::new(),
        n => format!(" ({n} of them times or rates, which the host may have moved)"),
    };
    views.push(View::Note(format!(
        "{} better{}, {} worse{}, {} within noise, {} with too few repetitions to judge",
        count(Verdict::Better),
        of_which(Verdict::Better),
        count(Verdict::Worse),
        of_which(Verdict::Worse),
        count(Verdict::WithinNoise),
        count(Verdict::TooFewValues)
    )));
    for only in &d.only_in_a {
        views.push(View::Note(format!("only in run {a}: {only}")));
    }
    for only in &d.only_in_b {
        views.push(View::Note(format!("only in run {b}: {only}")));
    }
    for w in &d.warnings {
        views.push(View::Note(format!("warning: {w}")));
    }
    Document { views, data: json!(d) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::model::{Configuration, Measurement};

    fn run(id: i64, values: &[f64]) -> Run {
        let mut r = Run::new("bench-program", "t");
        r.id = Some(id);
        r.configurations = vec![Configuration::new("untraced")];
        r.measurements = vec![Measurement {
            configuration: "untraced".into(),
            metric: "wall_s".into(),
            unit: "s".into(),
            lower_is_better: true,
            values: values.to_vec(),
        }];
        r
    }

    #[test]
    fn a_planted_slowdown_is_flagged_and_a_rerun_is_not() {
        let a = run(1, &[0.100, 0.101, 0.099, 0.102, 0.100]);
        let same = run(2, &[0.101, 0.100, 0.100, 0.099, 0.102]);
        let slow = run(3, &[0.120, 0.121, 0.119, 0.122, 0.121]);
        let d = diff(&a, &slow, 0.02).unwrap();
        assert_eq!(d.changes[0].verdict, Verdict::Worse);
        assert_eq!(d.changes[0].word(), "slower");
        assert!((d.changes[0].ratio.ratio - 1.2).abs() < 0.02);
        assert_eq!(d.regressions(), 1);
        let d = diff(&a, &same, 0.02).unwrap();
        assert_eq!(d.changes[0].verdict, Verdict::WithinNoise);
        let d = diff(&slow, &a, 0.02).unwrap();
        assert_eq!(d.changes[0].word(), "faster");
    }

    #[test]
    fn changes_of_times_between_separate_runs_are_marked_as_such() {
        // Identical runs minutes apart; mtlab's report took 30 % less in the second.
        let mut a = run(1, &[0.100, 0.101, 0.099, 0.102, 0.100]);
        let mut b = run(2, &[0.070, 0.071, 0.069, 0.072, 0.070]);
        a.started = "2026-11-25T10:00:00Z".into();
        b.started = "2026-11-25T10:07:30Z".into();
        for (r, n) in [(&mut a, 1000.0), (&mut b, 1100.0)] {
            r.measurements.push(Measurement { configuration: "untraced".into(), metric: "bytes".into(), unit: "B".into(), lower_is_better: true, values: vec![n; 5] });
        }
        let d = diff(&a, &b, 0.02).unwrap();
        assert_eq!(d.changes[0].verdict, Verdict::Better);
        assert!(d.changes[0].between_runs);
        // A count is no time: the host does not move it.
        assert_eq!(d.changes[1].verdict, Verdict::Worse);
        assert!(!d.changes[1].between_runs);
        let doc = document(&d);
        let notes: Vec<&String> = doc.views.iter().filter_map(|v| if let View::Note(n) = v { Some(n) } else { None }).collect();
        assert!(notes.iter().any(|n| n.contains("not interleaved") && n.contains("8 min apart")), "{notes:?}");
        assert!(notes.iter().any(|n| n.contains("1 better (1 of them times or rates")), "{notes:?}");
        let View::Table(t) = doc.views.iter().find(|v| matches!(v, View::Table(_))).unwrap() else { unreachable!() };
        assert_eq!(t.rows[0][6], Cell::text("faster (between runs)"));
        assert_eq!(t.rows[1][6], Cell::text("worse"));
        assert_eq!(minutes_between("2026-12-31T23:59:00Z", "2027-01-01T00:01:00Z"), Some(2.0));
    }

    #[test]
    fn small_significant_changes_stay_within_the_threshold() {
        // 1 % apart, tight: significant but under 2 %.
        let a = run(1, &[100.0, 100.1, 99.9, 100.0, 100.05]);
        let b = run(2, &[101.0, 101.1, 100.9, 101.0, 101.05]);
        assert_eq!(diff(&a, &b, 0.02).unwrap().changes[0].verdict, Verdict::WithinNoise);
        assert_eq!(diff(&a, &b, 0.005).unwrap().changes[0].verdict, Verdict::Worse);
    }

    #[test]
    fn different_studies_are_refused_and_missing_pairs_listed() {
        let a = run(1, &[1.0, 1.0, 1.0]);
        let mut b = run(2, &[1.0, 1.0, 1.0]);
        b.study = "bench-malloc".into();
        assert!(diff(&a, &b, 0.02).is_err());
        b.study = a.study.clone();
        b.measurements[0].metric = "cycles".into();
        let d = diff(&a, &b, 0.02).unwrap();
        assert_eq!(d.only_in_a, ["untraced / wall_s"]);
        assert_eq!(d.only_in_b, ["untraced / cycles"]);
        assert!(diff(&run(1, &[1.0, 2.0]), &run(2, &[1.0, 2.0]), 0.02).unwrap().changes[0].verdict == Verdict::TooFewValues);
        // A count that stayed at zero has no ratio but did not change.
        assert_eq!(diff(&run(1, &[0.0; 3]), &run(2, &[0.0; 3]), 0.02).unwrap().changes[0].verdict, Verdict::WithinNoise);
    }
}
