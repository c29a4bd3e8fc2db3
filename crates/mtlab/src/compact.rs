//! `mtlab compact` and `record --compact`: a trace rewritten without
//! per-call timing (`trace::compact`), keeping the heap's exact peak.
//!
//! Compaction keeps every cross-thread order that the shadow heap needs to
//! replay the same blocks, but independent events of different threads in
//! one quantum replay in an order of their own, which can move the moment
//! and height of the live-bytes peak. So the peak is measured on the exact
//! trace first and stored with the compact one; `mtlab report` shows it.

use std::path::Path;

use crate::heap::{self, AnalyzeOptions};
use crate::trace::compact::{compact, CompactError, CompactStats};
use crate::trace::TraceFile;

/// RUNINFO key of the peak measured before compaction (PeakReport as JSON).
pub const PEAK_KEY: &str = "compact_peak";

/// Compacts `src` into `dst` (which may be `src`) with time stamps rounded
/// to `quantum` ticks.
pub fn compact_trace(src: &Path, dst: &Path, quantum: u64) -> Result<CompactStats, CompactError> {
    let trace = TraceFile::open(src)?;
    let mut extra = Vec::new();
    if trace.runinfo_get(crate::trace::compact::RUNINFO_KEY).is_none() {
        let exact = heap::analyze(&trace, &AnalyzeOptions { max_points: 1, top: 0 })?;
        extra.push((PEAK_KEY.to_string(), serde_json::to_string(&exact.peak).expect("a peak serializes")));
    }
    compact(src, dst, quantum, &extra)
}
