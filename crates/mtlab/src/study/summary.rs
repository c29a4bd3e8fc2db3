//! What every study run shows besides its own views: the environment, a
//! summary of each measurement (median with its interval, mean ± sd,
//! outliers, ratio to the configuration's baseline) and the raw repetitions.

use serde_json::json;

use super::model::{Measurement, Run};
use super::stats::{self, Ratio, Summary};
use crate::export::{Cell, Table, View};

/// The measurement's summary and, if its configuration has a baseline with
/// the same metric, the paired ratio to it.
pub struct Summarized<'a> {
    pub measurement: &'a Measurement,
    pub summary: Summary,
    pub ratio: Option<Ratio>,
}

pub fn summarize(run: &Run) -> Vec<Summarized<'_>> {
    run.measurements
        .iter()
        .map(|m| {
            let ratio = run
                .configuration(&m.configuration)
                .and_then(|c| c.baseline.as_deref())
                .filter(|b| *b != m.configuration)
                .and_then(|b| run.measurement(b, &m.metric))
                .map(|b| stats::paired_ratio(&m.values, &b.values));
            Summarized { measurement: m, summary: stats::summarize(&m.values), ratio }
        })
        .collect()
}

/// Paired ratio of one configuration's metric to another's (any two metrics).
pub fn ratio(run: &Run, config: &str, metric: &str, base_config: &str, base_metric: &str) -> Option<Ratio> {
    let a = run.measurement(config, metric)?;
    let b = run.measurement(base_config, base_metric)?;
    Some(stats::paired_ratio(&a.values, &b.values))
}

/// Median of one measurement.
pub fn median(run: &Run, config: &str, metric: &str) -> Option<f64> {
    run.measurement(config, metric).map(|m| stats::median(&m.values))
}

/// Decimals that show a value's precision without noise.
pub fn decimals_for(v: f64) -> u8 {
    let a = v.abs();
    if a >= 1000.0 {
        0
    } else if a >= 10.0 {
        1
    } else if a >= 0.1 {
        3
    } else {
        6
    }
}

/// The run's header lines: what, when, where.
pub fn header(run: &Run) -> Vec<View> {
    let e = &run.environment;
    let mut v = vec![View::Note(format!(
        "{}{} — {} (mtlab {}, {} s)",
        run.id.map(|i| format!("run {i}: ")).unwrap_or_default(),
        run.title,
        run.started,
        run.mtlab_version,
        format_args!("{:.1}", run.duration_s)
    ))];
    v.push(View::Note(format!(
        "machine: {}, {} CPU{} online (allowed {}), SMT {}, kernel {} ({}), governor {}, glibc {}{}{}",
        e.cpu_model.as_deref().unwrap_or("unknown CPU"),
        e.cpus_online,
        if e.cpus_online == 1 { "" } else { "s" },
        e.cpu_set,
        match e.smt {
            Some(true) => "on",
            Some(false) => "off",
            None => "unknown",
        },
        e.kernel,
        e.preemption.as_deref().map(|p| format!("preemption {p}")).unwrap_or_else(|| "preemption unknown".into()),
        e.governor.as_deref().unwrap_or("n/a"),
        e.libc,
        if e.virtualized == Some(true) { ", virtual machine" } else { "" },
        e.software.iter().map(|(k, v)| format!(", {k} {v}")).collect::<String>(),
    )));
    v
}

/// Every measurement: median [interval], mean ± sd, repetitions, outliers, ratio.
pub fn summary_table(run: &Run) -> Table {
    let mut t = Table::new(
        "summary",
        "all measurements (median [interval of the median], mean ± sample sd; ratio to baseline: median of per-round ratios)",
        &["configuration", "metric", "unit", "n", "median", "mean ± sd", "outliers", "× baseline"],
        3,
    );
    for s in summarize(run) {
        let m = s.measurement;
        let d = decimals_for(s.summary.median);
        let ci = s.summary.median_ci;
        t.push(vec![
            Cell::text(&m.configuration),
            Cell::text(&m.metric),
            Cell::text(&m.unit),
            Cell::Int(s.summary.n as i64),
            Cell::Estimate { value: s.summary.median, low: ci.map(|c| c.low), high: ci.map(|c| c.high), decimals: d },
            Cell::text(format!("{:.*} ± {:.*}", d as usize, s.summary.mean, d as usize, s.summary.stddev)),
            Cell::Int(s.summary.outliers.len() as i64),
            match s.ratio {
                Some(r) => Cell::Estimate {
                    value: r.ratio,
                    low: r.interval.map(|i| i.low),
                    high: r.interval.map(|i| i.high),
                    decimals: 3,
                },
                None => Cell::Empty,
            },
        ]);
    }
    t
}

/// The raw repetitions, one row each (CSV only).
pub fn measurements_table(run: &Run) -> Table {
    let mut t = Table::new(
        "measurements",
        "every repetition",
        &["run", "configuration", "parameters", "metric", "unit", "lower is better", "repetition", "value", "outlier"],
        6,
    )
    .data_only();
    for m in &run.measurements {
        let params = run
            .configuration(&m.configuration)
            .map(|c| c.params.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(";"))
            .unwrap_or_default();
        let outliers = stats::outliers(&m.values);
        for (i, v) in m.values.iter().enumerate() {
            t.push(vec![
                run.id.map(Cell::Int).unwrap_or(Cell::Empty),
                Cell::text(&m.configuration),
                Cell::text(&params),
                Cell::text(&m.metric),
                Cell::text(&m.unit),
                Cell::text(m.lower_is_better.to_string()),
                Cell::Int(i as i64),
                Cell::Num(*v, 6),
                Cell::text(outliers.contains(&i).to_string()),
            ]);
        }
    }
    t
}

/// Says how sure the intervals are when there were too few repetitions for 95 %.
pub fn level_notes(run: &Run) -> Vec<View> {
    let Some(n) = run.measurements.iter().map(|m| m.values.len()).filter(|&n| n >= 1).min() else {
        return Vec::new();
    };
    if n == 1 {
        return vec![View::Note(
            "note: with 1 repetition each figure is a single measurement, with no interval; 6 or more repetitions give 95 % intervals of the median"
                .into(),
        )];
    }
    let mut out = Vec::new();
    if let Some(i) = stats::median_interval(&vec![0.0; n]).filter(|i| i.level < stats::LEVEL) {
        out.push(View::Note(format!(
            "note: with {n} repetitions an interval of a median is min..max and covers it with probability {} only; 6 or more repetitions give 95 %",
            i.label()
        )));
        if !i.conclusive() && run.configurations.iter().any(|c| c.baseline.is_some()) {
            out.push(View::Note(
                "note: so the intervals of ratios to a baseline are Student t intervals of the per-round log ratios at 95 % (they assume those are roughly normal); 5 or more repetitions give distribution-free ones".into(),
            ));
        }
    }
    out
}

/// Notes about outliers, so a reader knows which medians rest on disturbed
/// runs: one per measurement when there are few, one line when many (the
/// summary in CSV and JSON names them all).
pub fn outlier_notes(run: &Run) -> Vec<View> {
    const NAMED: usize = 5;
    let flagged: Vec<(String, Vec<usize>)> = summarize(run)
        .into_iter()
        .filter(|s| !s.summary.outliers.is_empty())
        .map(|s| (format!("{} / {}", s.measurement.configuration, s.measurement.metric), s.summary.outliers))
        .collect();
    if flagged.len() > NAMED {
        let reps: usize = flagged.iter().map(|(_, o)| o.len()).sum();
        return vec![View::Note(format!(
            "note: {} of {} measurements have outlying repetitions ({reps} values with modified z-score > 3.5 and > 1 % off the median); \
             medians are robust to them; `--json` or `--csv` lists them (summary: outliers)",
            flagged.len(),
            run.measurements.len()
        ))];
    }
    flagged
        .into_iter()
        .map(|(what, o)| {
            View::Note(format!(
                "note: {what}: repetition{} {} far from the others (modified z-score > 3.5); the median is robust to {}",
                if o.len() == 1 { "" } else { "s" },
                o.iter().map(|i| (i + 1).to_string()).collect::<Vec<_>>().join(", "),
                if o.len() == 1 { "it" } else { "them" }
            ))
        })
        .collect()
}

/// The run for programs: everything stored plus each measurement's summary.
pub fn data(run: &Run) -> serde_json::Value {
    let summaries: Vec<serde_json::Value> = summarize(run)
        .iter()
        .map(|s| {
            json!({
                "configuration": s.measurement.configuration,
                "metric": s.measurement.metric,
                "unit": s.measurement.unit,
                "summary": s.summary,
                "ratio_to_baseline": s.ratio,
            })
        })
        .collect();
    let mut v = serde_json::to_value(run).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("summaries".into(), json!(summaries));
        o.insert(
            "statistics".into(),
            json!({
                "stddev": "sample (n - 1)",
                "quantiles": "linear interpolation (type 7)",
                "median_interval": "order statistics (binomial), level as achieved",
                "ratio_to_baseline": "median of per-round ratios; order-statistic interval when it reaches 90 % (5 rounds or more), else a Student t interval of the log ratios at 95 %; each interval carries its level and method",
                "outliers": "modified z-score > 3.5",
                "level": stats::LEVEL,
            }),
        );
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::model::Configuration;

    pub fn two_config_run() -> Run {
        let mut r = Run::new("test", "two configurations");
        r.configurations = vec![Configuration::new("base"), Configuration::new("slow").baseline("base")];
        r.measurements = vec![
            Measurement { configuration: "base".into(), metric: "t".into(), unit: "s".into(), lower_is_better: true, values: vec![10.0, 11.0, 10.0, 12.0, 10.0] },
            Measurement { configuration: "slow".into(), metric: "t".into(), unit: "s".into(), lower_is_better: true, values: vec![12.0, 13.2, 12.0, 14.4, 30.0] },
        ];
        r
    }

    #[test]
    fn ratios_follow_the_baseline_and_outliers_are_named() {
        let r = two_config_run();
        let s = summarize(&r);
        assert!(s[0].ratio.is_none());
        // Per-round ratios 1.2, 1.2, 1.2, 1.2, 3.0: median 1.2.
        assert!((s[1].ratio.unwrap().ratio - 1.2).abs() < 1e-9);
        assert_eq!(s[1].summary.outliers, vec![4]);
        let notes = outlier_notes(&r);
        assert_eq!(notes.len(), 1);
        assert!(matches!(&notes[0], View::Note(n) if n.contains("slow / t: repetition 5")));
    }

    #[test]
    fn data_carries_the_run_and_its_summaries() {
        let v = data(&two_config_run());
        assert_eq!(v["study"], "test");
        assert_eq!(v["summaries"][1]["summary"]["median"], 13.2);
        assert!((v["summaries"][1]["ratio_to_baseline"]["ratio"].as_f64().unwrap() - 1.2).abs() < 1e-9);
        assert_eq!(v["measurements"][0]["values"].as_array().unwrap().len(), 5);
    }
}
