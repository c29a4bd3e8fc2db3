//! The study framework: one result model, one runner, one statistics module.
//! Studies (`crate::studies`) describe configurations and how to measure one
//! repetition; everything else — repetition, interleaving, statistics,
//! storing, exporting, diffing — happens here and in `crate::export`.
//!
//! - `model.rs`: the result model (run, environment, configurations, every
//!   repetition).
//! - `env.rs`: reading the environment.
//! - `runner.rs`: warm-up, interleaved rounds, minimum duration.
//! - `stats.rs`: the one statistics module (definitions in its header).
//! - `summary.rs`: the views every run shows (header, summary with intervals
//!   and ratios to baseline, outliers, raw repetitions; the JSON data).
//! - `diff.rs`: `mtlab diff`; `progress.rs`: the one progress bar.

pub mod diff;
pub mod env;
pub mod model;
pub mod progress;
pub mod runner;
pub mod stats;
pub mod summary;

pub use model::{Configuration, Environment, Measurement, Run};
