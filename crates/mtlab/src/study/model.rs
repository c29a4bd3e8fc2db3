//! The result model every study shares: one run of a study, the machine it
//! ran on, its configurations and every repetition of every measurement.
//!
//! Only raw values are kept; every summary (medians, intervals, ratios,
//! outliers) is derived by `study::stats` when a run is shown, so a stored run
//! can be summarised again with better statistics later.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One run of one study.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// Assigned by the results store; `None` until stored.
    pub id: Option<i64>,
    /// The study's name, e.g. `bench-tracer`, `bench-program`, `bench-malloc`.
    pub study: String,
    /// One line saying what was measured.
    pub title: String,
    /// When the run started, RFC 3339 in UTC (e.g. `2026-11-23T21:30:00Z`).
    pub started: String,
    /// Wall seconds the whole run took.
    pub duration_s: f64,
    pub mtlab_version: String,
    /// mtlab's own command line, exactly as given.
    pub command_line: Vec<String>,
    pub environment: Environment,
    /// Study-wide settings (workload arguments, repetitions, ...), by name.
    pub settings: BTreeMap<String, String>,
    pub configurations: Vec<Configuration>,
    pub measurements: Vec<Measurement>,
    /// Study-specific results that are not repetitions of a metric (e.g. a
    /// coverage curve); `null` when there are none.
    #[serde(default)]
    pub details: serde_json::Value,
    /// Things the reader must know to trust the numbers (skipped parts, limits of this machine).
    #[serde(default)]
    pub notes: Vec<String>,
}

/// The machine and software a run measured. Fields that could not be read are `None`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    pub host: String,
    /// `uname -r`.
    pub kernel: String,
    /// `uname -v` (build string; carries PREEMPT/PREEMPT_RT/PREEMPT_DYNAMIC).
    pub kernel_version: String,
    /// none, voluntary, full or rt, from sysfs/debugfs where readable, else from the build string.
    pub preemption: Option<String>,
    pub cpu_model: Option<String>,
    /// Logical CPUs online.
    pub cpus_online: u32,
    /// Whether SMT (hyper-threading) is active.
    pub smt: Option<bool>,
    /// The CPUs this process may run on, as a list (`0-3,6`).
    pub cpu_set: String,
    /// cpufreq governor of the first allowed CPU.
    pub governor: Option<String>,
    /// glibc's version (`gnu_get_libc_version`).
    pub libc: String,
    /// Versions of other software the run used, by name (e.g. `jemalloc`, `heaptrack`).
    #[serde(default)]
    pub software: BTreeMap<String, String>,
    /// Set when the run was taken inside a virtual machine (`hypervisor` CPU flag).
    pub virtualized: Option<bool>,
}

/// One configuration: a named set of parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Configuration {
    /// Unique within the run, stable across runs of the same study and
    /// settings: `mtlab diff` pairs configurations of two runs by it.
    pub name: String,
    pub params: BTreeMap<String, String>,
    /// The configuration this one is compared with (by name): ratios
    /// are this one's values over the baseline's, repetition by repetition.
    pub baseline: Option<String>,
}

/// Every repetition of one metric in one configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// The configuration's name.
    pub configuration: String,
    /// e.g. `cycles_per_op`, `wall_s`, `malloc_cycles`.
    pub metric: String,
    /// e.g. `cycles`, `s`, `bytes`, `ns`.
    pub unit: String,
    pub lower_is_better: bool,
    /// One value per repetition, in the order the repetitions ran.
    /// Repetition i of every configuration ran in the same round, so values at
    /// the same index are paired (drift of the machine hit them alike).
    pub values: Vec<f64>,
}

impl Run {
    /// A run about to be measured: the environment is read now.
    pub fn new(study: &str, title: impl Into<String>) -> Run {
        Run {
            id: None,
            study: study.to_string(),
            title: title.into(),
            started: super::env::now_rfc3339(),
            duration_s: 0.0,
            mtlab_version: env!("CARGO_PKG_VERSION").to_string(),
            command_line: std::env::args().collect(),
            environment: Environment::read(),
            settings: BTreeMap::new(),
            configurations: Vec::new(),
            measurements: Vec::new(),
            details: serde_json::Value::Null,
            notes: Vec::new(),
        }
    }

    pub fn configuration(&self, name: &str) -> Option<&Configuration> {
        self.configurations.iter().find(|c| c.name == name)
    }

    pub fn measurement(&self, configuration: &str, metric: &str) -> Option<&Measurement> {
        self.measurements.iter().find(|m| m.configuration == configuration && m.metric == metric)
    }

    /// The metrics of this run, in first-seen order.
    pub fn metrics(&self) -> Vec<&str> {
        let mut v: Vec<&str> = Vec::new();
        for m in &self.measurements {
            if !v.contains(&m.metric.as_str()) {
                v.push(&m.metric);
            }
        }
        v
    }
}

impl Configuration {
    pub fn new(name: impl Into<String>) -> Configuration {
        Configuration { name: name.into(), params: BTreeMap::new(), baseline: None }
    }

    pub fn param(mut self, key: &str, value: impl ToString) -> Configuration {
        self.params.insert(key.to_string(), value.to_string());
        self
    }

    pub fn baseline(mut self, name: impl Into<String>) -> Configuration {
        self.baseline = Some(name.into());
        self
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.params.get(key).map(String::as_str)
    }
}
