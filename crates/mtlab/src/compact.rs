//! `mtlab compact` and `record --compact`: a trace rewritten without
//! per-call timing (`trace::compact`), keeping the heap's exact peak.
//!
//! Compaction keeps every cross-thread order that the shadow heap needs to
//! replay the same blocks, but independent events of different threads in
//! one quantum replay in an order of their own, which can move the moment
//! and height of the live-bytes peak. So the peak is measured on the exact
//! trace first and stored with the compact one; `mtlab report` shows it.
//!
//! With `lean` (`mtlab compact --lean`, `record --compact=lean`) the heap
//! addresses are made up as well (`trace::lean`): the peak measured here,
//! on the real addresses, keeps its fragmentation and utilization.
//!
//! A trace still being written is refused.

use std::path::Path;

use crate::analysis::{self, AnalyzeOptions};
use crate::platform::process::holds_open;
use rustc_hash::FxHashSet as HashSet;

use crate::trace::compact::{compact_into, refuse_compact, CompactError, CompactStats};
use crate::trace::lean::{kept_stack, Lean};
use crate::trace::keys::{CHILD_TRACES, COMPACT_PEAK};
use crate::trace::TraceFile;

/// Compacts `src` into `dst` (which may be `src`) with time stamps rounded
/// to `quantum` ticks; `lean`: with made-up heap addresses.
pub fn compact_trace(src: &Path, dst: &Path, quantum: u64, lean: bool) -> Result<CompactStats, CompactError> {
    let trace = TraceFile::open(src)?;
    let pid = trace.header.pid;
    if trace.end.is_none() && holds_open(pid, src) {
        // Its writer may still be appending: a rewrite would lose what comes next.
        return Err(CompactError::StillWriting { path: src.to_path_buf(), pid });
    }
    refuse_compact(&trace, lean)?;
    // A lean trace's stacks are those of the events other than frees: this
    // pass finds them, and the rewrite reads the trace once more, not twice.
    let mut keep = HashSet::default();
    let exact = if lean {
        analysis::analyze_seeing(&trace, &AnalyzeOptions::for_index(), |ev| keep.extend(kept_stack(ev)))?
    } else {
        analysis::analyze(&trace, &AnalyzeOptions::for_index())?
    };
    let mut extra = vec![(COMPACT_PEAK.to_string(), serde_json::to_string(&exact.peak).expect("a peak serializes"))];
    // A copy elsewhere (-o) holds the root alone: listing no child traces,
    // or its report would call every child missing, "deleted or moved".
    if dst != src && trace.runinfo_get(CHILD_TRACES).is_some_and(|v| !v.is_empty()) {
        extra.push((CHILD_TRACES.to_string(), String::new()));
    }
    compact_into(&trace, dst, quantum, &extra, lean.then(|| Lean::keeping(keep)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::compact::CompactError;
    use crate::trace::TraceWriter;

    /// A trace without END whose process is alive and holds it open (this
    /// test's own) may still grow: it is left alone.
    #[test]
    fn a_trace_still_being_written_is_refused_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("t.mtl");
        let pid = std::process::id().to_string();
        TraceWriter::create(&src, [("pid", pid.as_str())]).unwrap().finish().unwrap();
        let before = std::fs::read(&src).unwrap();
        let _held = std::fs::File::open(&src).unwrap();
        let e = compact_trace(&src, &src, 1 << 16, false).unwrap_err();
        assert!(matches!(e, CompactError::StillWriting { .. }), "{e}");
        assert!(e.to_string().contains("still being written"), "{e}");
        assert_eq!(std::fs::read(&src).unwrap(), before);
    }

    /// A lean trace is made from a full trace only: compacting a lean one
    /// (lean or not) has nothing to do, and a compact one cannot be made
    /// lean; each refusal names the case and leaves the file as it was.
    #[test]
    fn lean_is_made_from_a_full_trace_only() {
        let dir = tempfile::tempdir().unwrap();
        let [src, plain, lean] = ["t.mtl", "c.mtl", "l.mtl"].map(|n| dir.path().join(n));
        TraceWriter::create(&src, [("pid", "1")]).unwrap().finish().unwrap();
        compact_trace(&src, &plain, 1 << 16, false).unwrap();
        compact_trace(&src, &lean, 1 << 16, true).unwrap();
        let open = |p: &Path| TraceFile::open(p).unwrap();
        assert!(open(&lean).is_lean() && !open(&plain).is_lean() && !open(&src).is_lean());
        let before = std::fs::read(&lean).unwrap();
        for again in [false, true] {
            let e = compact_trace(&lean, &lean, 1 << 16, again).unwrap_err();
            assert!(matches!(e, CompactError::AlreadyLean { .. }), "{e}");
        }
        assert_eq!(std::fs::read(&lean).unwrap(), before);
        let e = compact_trace(&plain, &plain, 1 << 16, true).unwrap_err();
        assert!(matches!(e, CompactError::LeanOfCompact { .. }) && e.to_string().contains("from the full trace"), "{e}");
        let e = compact_trace(&plain, &plain, 1 << 16, false).unwrap_err();
        assert!(matches!(e, CompactError::AlreadyCompact { .. }), "{e}");
    }
}
