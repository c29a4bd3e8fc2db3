//! The study framework: one result model, one runner, one statistics module.
//! Studies (`crate::studies`) describe configurations and how to measure one
//! repetition; everything else — repetition, interleaving, statistics,
//! storing, exporting, diffing — happens here and in `crate::export`.

pub mod diff;
pub mod env;
pub mod model;
pub mod progress;
pub mod runner;
pub mod stats;
pub mod summary;

pub use model::{Configuration, Environment, Measurement, Run};
