//! The one runner: warm-up, repetitions interleaved across configurations,
//! a minimum duration per measurement, and every value kept.
//!
//! Round r runs repetition r of every configuration, in the order the study
//! listed them, so drift of a shared machine (another tenant, thermal state)
//! hits every configuration alike and values at the same index are paired.

use std::time::{Duration, Instant};

use super::model::{Configuration, Measurement, Run};
use super::progress::Progress;

/// How a study's configurations are repeated.
#[derive(Debug, Clone)]
pub struct RunnerOptions {
    /// Rounds run first and thrown away (caches, page cache, CPU frequency).
    pub warmup: u32,
    /// Rounds measured.
    pub reps: u32,
    /// A trial shorter than this is run again and its values averaged, so one
    /// measurement lasts at least this long (0: one trial per measurement).
    pub min_duration: Duration,
}

impl Default for RunnerOptions {
    fn default() -> Self {
        RunnerOptions { warmup: 0, reps: 5, min_duration: Duration::ZERO }
    }
}

/// One value a trial measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub metric: String,
    pub unit: String,
    pub lower_is_better: bool,
    pub value: f64,
}

impl Sample {
    /// A value where less is better (time, cycles, bytes).
    pub fn cost(metric: &str, unit: &str, value: f64) -> Sample {
        Sample { metric: metric.into(), unit: unit.into(), lower_is_better: true, value }
    }
    /// A value where more is better (throughput).
    pub fn gain(metric: &str, unit: &str, value: f64) -> Sample {
        Sample { metric: metric.into(), unit: unit.into(), lower_is_better: false, value }
    }
}

/// Which trial the study is asked to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Warmup(u32),
    Rep(u32),
}

/// Runs every configuration of `run` (appended to before the call) and
/// appends one measurement per (configuration, metric). `trial` measures one
/// configuration once. A metric missing from some repetitions is an error of
/// the study, reported rather than misaligned.
pub fn run_all<E: From<RunnerError>>(
    run: &mut Run,
    configs: &[Configuration],
    opts: &RunnerOptions,
    progress: &Progress,
    mut trial: impl FnMut(&Configuration, Phase) -> Result<Vec<Sample>, E>,
) -> Result<(), E> {
    let mut per_config: Vec<Vec<Vec<Sample>>> = vec![Vec::new(); configs.len()];
    let rounds = opts.warmup + opts.reps;
    for round in 0..rounds {
        for (i, cfg) in configs.iter().enumerate() {
            let phase = if round < opts.warmup { Phase::Warmup(round) } else { Phase::Rep(round - opts.warmup) };
            progress.set_message(match phase {
                Phase::Warmup(w) => format!("warm-up {}/{}: {}", w + 1, opts.warmup, cfg.name),
                Phase::Rep(r) => format!("repetition {}/{}: {}", r + 1, opts.reps, cfg.name),
            });
            let samples = timed_trial(cfg, phase, opts.min_duration, &mut trial)?;
            if let Phase::Rep(_) = phase {
                per_config[i].push(samples);
            }
            progress.inc();
        }
    }
    for (cfg, reps) in configs.iter().zip(per_config) {
        run.measurements.extend(collect(cfg, reps)?);
    }
    run.configurations.extend(configs.iter().cloned());
    Ok(())
}

/// One measurement: the trial, repeated until `min` has passed, values averaged.
fn timed_trial<E>(
    cfg: &Configuration,
    phase: Phase,
    min: Duration,
    trial: &mut impl FnMut(&Configuration, Phase) -> Result<Vec<Sample>, E>,
) -> Result<Vec<Sample>, E> {
    let start = Instant::now();
    let mut first = trial(cfg, phase)?;
    let mut n = 1.0;
    while start.elapsed() < min {
        let more = trial(cfg, phase)?;
        for (acc, s) in first.iter_mut().zip(more) {
            acc.value += s.value;
        }
        n += 1.0;
    }
    for s in &mut first {
        s.value /= n;
    }
    Ok(first)
}

#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    #[error("study error: configuration `{config}` measured `{metric}` in {got} of {reps} repetitions")]
    Ragged { config: String, metric: String, got: usize, reps: usize },
}

/// Turns a configuration's repetitions (each a list of samples) into measurements.
fn collect(cfg: &Configuration, reps: Vec<Vec<Sample>>) -> Result<Vec<Measurement>, RunnerError> {
    let mut out: Vec<Measurement> = Vec::new();
    let n = reps.len();
    for samples in reps {
        for s in samples {
            match out.iter_mut().find(|m| m.metric == s.metric) {
                Some(m) => m.values.push(s.value),
                None => out.push(Measurement {
                    configuration: cfg.name.clone(),
                    metric: s.metric,
                    unit: s.unit,
                    lower_is_better: s.lower_is_better,
                    values: vec![s.value],
                }),
            }
        }
    }
    if let Some(m) = out.iter().find(|m| m.values.len() != n) {
        return Err(RunnerError::Ragged { config: cfg.name.clone(), metric: m.metric.clone(), got: m.values.len(), reps: n });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_run() -> Run {
        let mut r = Run::new("test", "runner test");
        r.environment = Default::default();
        r
    }

    #[test]
    fn rounds_interleave_configurations_after_warm_up() {
        let configs = vec![Configuration::new("a"), Configuration::new("b").baseline("a")];
        let mut order = Vec::new();
        let mut run = test_run();
        let opts = RunnerOptions { warmup: 1, reps: 3, min_duration: Duration::ZERO };
        let mut k = 0.0;
        run_all::<RunnerError>(&mut run, &configs, &opts, &Progress::hidden(), |c, p| {
            order.push((c.name.clone(), p));
            k += 1.0;
            Ok(vec![Sample::cost("t", "s", k)])
        })
        .unwrap();
        let names: Vec<&str> = order.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a", "b", "a", "b", "a", "b", "a", "b"]);
        assert_eq!(order[0].1, Phase::Warmup(0));
        assert_eq!(order[2].1, Phase::Rep(0));
        // Warm-up values (1, 2) are dropped; a got 3, 5, 7 and b 4, 6, 8.
        assert_eq!(run.measurement("a", "t").unwrap().values, vec![3.0, 5.0, 7.0]);
        assert_eq!(run.measurement("b", "t").unwrap().values, vec![4.0, 6.0, 8.0]);
        assert_eq!(run.configurations.len(), 2);
    }

    #[test]
    fn short_trials_repeat_until_the_minimum_duration() {
        let configs = vec![Configuration::new("a")];
        let mut run = test_run();
        let opts = RunnerOptions { warmup: 0, reps: 1, min_duration: Duration::from_millis(30) };
        let mut calls = 0u32;
        run_all::<RunnerError>(&mut run, &configs, &opts, &Progress::hidden(), |_, _| {
            calls += 1;
            std::thread::sleep(Duration::from_millis(10));
            Ok(vec![Sample::cost("t", "s", calls as f64)])
        })
        .unwrap();
        assert!(calls >= 3, "{calls}");
        // The mean of 1..=calls.
        let want = (calls as f64 + 1.0) / 2.0;
        assert_eq!(run.measurement("a", "t").unwrap().values, vec![want]);
    }

    #[test]
    fn a_metric_missing_from_a_repetition_is_an_error() {
        let configs = vec![Configuration::new("a")];
        let mut run = test_run();
        let mut i = 0;
        let r = run_all::<RunnerError>(&mut run, &configs, &RunnerOptions { reps: 2, ..Default::default() }, &Progress::hidden(), |_, _| {
            i += 1;
            Ok(if i == 1 { vec![Sample::cost("t", "s", 1.0), Sample::cost("u", "s", 1.0)] } else { vec![Sample::cost("t", "s", 1.0)] })
        });
        assert!(matches!(r, Err(RunnerError::Ragged { .. })));
    }
}
