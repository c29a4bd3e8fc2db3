//! `mtlab diff A B`: two runs of the same study compared measurement by
//! measurement. Runs are independent samples (taken at different times), so
//! the change is the Hodges–Lehmann ratio B / A with its Mann–Whitney
//! interval (`stats::independent_ratio`). A change is flagged when its
//! interval excludes "no change" **and** the estimate moved by at least the
//! threshold (default 2 %): significant and large enough to matter.

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
}

impl Change {
    /// How the verdict reads for this unit: faster/slower for times and rates.
    pub fn word(&self) -> &'static str {
        let timed = matches!(self.unit.as_str(), "s" | "ms" | "us" | "µs" | "ns" | "cycles") || self.unit.ends_with("/s");
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
    Ok(Diff { study: a.study.clone(), run_a: a.id, run_b: b.id, threshold, changes, only_in_a, only_in_b, warnings })
}

/// The diff for the exporters: one table, warnings and a verdict count.
pub fn document(d: &Diff) -> Document {
    let a = d.run_a.map(|i| i.to_string()).unwrap_or_else(|| "A".into());
    let b = d.run_b.map(|i| i.to_string()).unwrap_or_else(|| "B".into());
    let mut views = vec![View::Note(format!(
        "{} runs {a} → {b}: change = Hodges–Lehmann ratio {b}/{a} with its 95 % Mann–Whitney interval; flagged when the interval excludes no change and the change is at least {:.1} %",
        d.study,
        d.threshold * 100.0
    ))];
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
            Cell::text(c.word()),
        ]);
    }
    views.push(View::Table(t));
    let count = |v: Verdict| d.changes.iter().filter(|c| c.verdict == v).count();
    views.push(View::Note(format!(
        "{} better, {} worse, {} within noise, {} with too few repetitions to judge",
        count(Verdict::Better),
        count(Verdict::Worse),
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
