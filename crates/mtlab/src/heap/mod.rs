//! The heap study's analysis: a shadow heap replayed from a trace.

pub mod analyze;
mod dheap;
pub(crate) mod live;
pub mod model;
mod prefetch;
mod region_index;
pub mod stats;

pub use analyze::{analyze, analyze_for_index, AnalyzeOptions, ProcessReport};
