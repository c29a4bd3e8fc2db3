//! The report's data model: what one pass over a process's trace finds
//! (`ProcessReport` and its parts), as `mtlab report` shows it and
//! docs/metrics.md describes its JSON. Plain data; the pass that fills it
//! is `analysis::pass`, the views that show it are in `report/`.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::heap::model::HeapSnapshot;
use crate::profile::sampled::{Estimate, SampledTotals};
use crate::trace::{keys, TraceFile};
pub use crate::study::stats::Interval;

/// One function's share of the allocations: `self_*` where it called the
/// allocator itself (bottom-up), `total_*` where it was anywhere on the
/// stack (top-down: itself and everything it called).
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct CallerReport {
    pub function: String,
    pub self_calls: u64,
    pub self_bytes: u64,
    pub total_calls: u64,
    pub total_bytes: u64,
}
/// The cycles of a function's calls (`analysis::functions`): of every call
/// under `record --time every`, else of the timed sample (`total` then
/// estimates all calls' total, `max` is the sample's).
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
#[serde(into = "CycleSummaryJson", from = "CycleSummaryJson")]
pub struct CycleSummary {
    pub total: u64,
    pub mean: f64,
    pub stddev: f64,
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
    /// Calls whose cycles were measured.
    pub timed: u64,
    /// 95 % intervals for all calls' figures when only a sample was timed.
    pub intervals: Option<CycleIntervals>,
}

impl CycleSummary {
    /// Whether any call was timed: without one, no cycle figure is known
    /// (the zeros are placeholders, written as `null`).
    pub fn measured(&self) -> bool {
        self.timed > 0
    }
}

/// `CycleSummary` as JSON: a function none of whose calls was timed (a rare
/// function under the default 1-in-32 sample, any function of a sampled
/// trace) has `null` figures, not a mean of 0 cycles.
#[derive(Serialize, serde::Deserialize)]
struct CycleSummaryJson {
    total: Option<u64>,
    mean: Option<f64>,
    stddev: Option<f64>,
    p50: Option<u64>,
    p99: Option<u64>,
    max: Option<u64>,
    timed: u64,
    intervals: Option<CycleIntervals>,
}

impl From<CycleSummary> for CycleSummaryJson {
    fn from(c: CycleSummary) -> CycleSummaryJson {
        let known = c.measured();
        CycleSummaryJson {
            total: known.then_some(c.total),
            mean: known.then_some(c.mean),
            stddev: known.then_some(c.stddev),
            p50: known.then_some(c.p50),
            p99: known.then_some(c.p99),
            max: known.then_some(c.max),
            timed: c.timed,
            intervals: c.intervals,
        }
    }
}

impl From<CycleSummaryJson> for CycleSummary {
    fn from(j: CycleSummaryJson) -> CycleSummary {
        CycleSummary {
            total: j.total.unwrap_or(0),
            mean: j.mean.unwrap_or(0.0),
            stddev: j.stddev.unwrap_or(0.0),
            p50: j.p50.unwrap_or(0),
            p99: j.p99.unwrap_or(0),
            max: j.max.unwrap_or(0),
            timed: j.timed,
            intervals: j.intervals,
        }
    }
}

/// Confidence intervals of a timed sample's figures for all of the calls.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct CycleIntervals {
    pub total: Interval,
    pub mean: Interval,
    pub stddev: Interval,
    pub p50: Interval,
    pub p99: Interval,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct FunctionReport {
    pub calls: u64,
    pub failed: u64,
    pub mean_size: f64,
    pub cycles: CycleSummary,
}
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct PeakReport {
    #[serde(flatten)]
    pub heap: HeapSnapshot,
    /// Index of the event at which live bytes peaked.
    pub at_event: u64,
    pub at_ns: Option<u64>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct SeriesPoint {
    pub event: u64,
    pub ns: Option<u64>,
    pub live_bytes: u64,
    pub mapped_bytes: u64,
    pub fragmentation_total: f64,
    pub fragmentation_mean: f64,
    pub utilization: f64,
    /// Mean cycles of the malloc calls since the previous point.
    pub malloc_mean_cycles: Option<f64>,
    /// The space split at this point (`SpaceSplit`): allocator overhead and free space.
    pub overhead_bytes: u64,
    pub free_bytes: u64,
}

/// Mapped space split three ways: what the program asked for, what the
/// allocator adds to each live block (usable minus requested size, and glibc's
/// 8-byte chunk header), and free space inside the mapping (fragmentation
/// and the allocator's reserve).
#[derive(Debug, Clone, Copy, Default, Serialize, serde::Deserialize)]
pub struct SpaceSplit {
    pub requested_bytes: u64,
    pub overhead_bytes: u64,
    pub free_bytes: u64,
}

impl SpaceSplit {
    /// Bytes of header each live block carries under `allocator`, beyond its usable size.
    pub fn header_bytes(allocator: &str) -> u64 {
        if allocator == "glibc" {
            8
        } else {
            0
        }
    }

    pub fn of(s: &HeapSnapshot, header: u64) -> SpaceSplit {
        let overhead = s.live_usable_bytes.saturating_sub(s.live_bytes) + header * s.live_objects;
        SpaceSplit {
            requested_bytes: s.live_bytes,
            overhead_bytes: overhead,
            free_bytes: s.mapped_bytes.saturating_sub(s.live_bytes + overhead),
        }
    }
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct FrameReport {
    pub pc: String,
    pub function: Option<String>,
    pub file: Option<String>,
    pub line: Option<u32>,
    pub module: String,
    /// Where the pc lies in `module`, as `addr2line -e FILE` takes it (the ELF
    /// address, or the file offset when the ELF could not be read).
    pub offset: String,
}

impl FrameReport {
    pub fn of(f: crate::symbolize::Frame) -> FrameReport {
        FrameReport {
            pc: format!("{:#x}", f.pc),
            function: f.function,
            file: f.file,
            line: f.line,
            module: f.module,
            offset: format!("{:#x}", f.offset),
        }
    }
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct SiteReport {
    pub stack_id: u32,
    pub calls: u64,
    pub bytes: u64,
    /// Live at the end of the trace.
    pub live_objects: u64,
    pub live_bytes: u64,
    /// Live when the heap's live bytes peaked (`peak`); null for a compact
    /// trace (its peak was measured before compaction, its replay order
    /// within a quantum is its own).
    pub peak_live_objects: Option<u64>,
    pub peak_live_bytes: Option<u64>,
    /// Allocations freed with no other allocation of their thread in between.
    pub temporary: u64,
    pub frames: Vec<FrameReport>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct TopSites {
    pub by_bytes: Vec<SiteReport>,
    pub by_calls: Vec<SiteReport>,
    /// By live bytes at the peak; empty for a compact trace (its replay
    /// order within a quantum is its own, so its peak was measured before).
    pub at_peak: Vec<SiteReport>,
    /// By temporary allocations, sites with none left out.
    pub temporary: Vec<SiteReport>,
}

/// Allocations freed with no other allocation of their thread in between
/// (heaptrack's "temporary allocations", per thread).
#[derive(Debug, Clone, Copy, Default, Serialize, serde::Deserialize)]
pub struct TemporaryReport {
    pub calls: u64,
    /// All allocation calls (malloc, calloc, realloc, the memalign family).
    pub of_calls: u64,
    pub fraction: f64,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct LeakReport {
    pub objects: u64,
    pub bytes: u64,
    pub top: Vec<SiteReport>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct StackQuality {
    /// Which unwinder made the stacks: dwarf, fp, libgcc, libunwind (none: no stacks).
    pub mode: String,
    pub distinct: u64,
    /// Share of allocation calls whose stack stops before main or a thread start.
    pub truncated_call_fraction: f64,
    pub note: Option<String>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Slowdown {
    pub baseline_wall_ns: u64,
    pub traced_wall_ns: u64,
    pub ratio: f64,
    /// The untraced run read an empty stdin (the traced one a pipe or terminal).
    pub baseline_stdin_empty: bool,
}

/// A flight recorder's window (`record --keep-last`): the trace holds the
/// last `keep_last_ns` of events before a trigger, not the whole run.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct FlightWindow {
    /// The DURATION asked for.
    pub keep_last_ns: u64,
    /// What made mtlab write it: `ctl dump`, a signal, a cgroup memory
    /// event, memory pressure (RUNINFO `flight_trigger`).
    pub trigger: String,
    /// The first and the last event the window holds, in ns since tracing started.
    pub start_ns: u64,
    pub end_ns: u64,
    /// Events of the run before the window, not in the trace.
    pub events_before: u64,
    /// Frees (and reallocs) of blocks allocated before the window: the
    /// report's unknown frees, which in a window are expected.
    pub frees_before: u64,
    /// The root process had exec'd when the window was written: the trace
    /// of its latest image, whose events are not in the window.
    #[serde(default)]
    pub execd: Option<String>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct ProgramMappings {
    pub calls: u64,
    pub bytes: u64,
}

/// The heap manager's own figures at exit (STATS), beside mtlab's.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct AllocatorStats {
    pub source: String,
    pub in_use_bytes: Option<u64>,
    /// Of those, the bytes already in use when tracing started.
    pub in_use_at_start_bytes: Option<u64>,
    pub mapped_bytes: Option<u64>,
    /// Of those, the bytes already mapped when tracing started.
    pub mapped_at_start_bytes: Option<u64>,
    /// mtlab's figure comparable with `in_use_bytes`: live usable bytes, and
    /// for glibc the 8-byte chunk header of each live block.
    pub mtlab_in_use_bytes: u64,
    pub mtlab_mapped_bytes: u64,
}

impl AllocatorStats {
    /// The heap manager's in-use bytes that mtlab could have seen: at exit,
    /// less those in use when tracing started.
    pub fn traced_in_use_bytes(&self) -> Option<u64> {
        Some(self.in_use_bytes?.saturating_sub(self.in_use_at_start_bytes.unwrap_or(0)))
    }

    /// The same for mapped bytes: what was mapped while mtlab watched.
    pub fn traced_mapped_bytes(&self) -> Option<u64> {
        Some(self.mapped_bytes?.saturating_sub(self.mapped_at_start_bytes.unwrap_or(0)))
    }

    /// The exit figures as a reading beside a sampled trace's in-use
    /// estimate (a sampled trace has no exact in-use or mapped bytes).
    pub fn as_reading(&self, at_ns: Option<u64>, estimate: Estimate) -> AllocatorReading {
        AllocatorReading {
            dump: 0,
            at_ns,
            source: Some(self.source.clone()),
            in_use_bytes: self.in_use_bytes,
            in_use_at_start_bytes: self.in_use_at_start_bytes,
            mapped_bytes: self.mapped_bytes,
            mapped_at_start_bytes: self.mapped_at_start_bytes,
            mtlab_in_use_bytes: Some(estimate),
            tsc: 0,
        }
    }

    pub(crate) fn read(trace: &TraceFile, allocator: &str, end: &HeapSnapshot) -> Option<AllocatorStats> {
        let get = |k: &str| trace.stats.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
        let num = |k: &str| get(k).and_then(|v| v.parse::<u64>().ok());
        let headers = if allocator == "glibc" { 8 * end.live_objects } else { 0 };
        Some(AllocatorStats {
            source: get(keys::ALLOCATOR_STATS)?.to_string(),
            in_use_bytes: num(keys::ALLOCATOR_IN_USE_BYTES),
            in_use_at_start_bytes: num(keys::ALLOCATOR_IN_USE_AT_START_BYTES),
            mapped_bytes: num(keys::ALLOCATOR_MAPPED_BYTES),
            mapped_at_start_bytes: num(keys::ALLOCATOR_MAPPED_AT_START_BYTES),
            mtlab_in_use_bytes: end.live_usable_bytes + headers,
            mtlab_mapped_bytes: end.mapped_bytes,
        })
    }
}

/// The heap manager's own figures read after a `mtlab ctl dump` (an
/// ALLOCSTATS record), beside mtlab's estimate of the bytes in use then.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct AllocatorReading {
    /// Which dump asked for it (1 for the first `ctl dump` of the process).
    pub dump: u64,
    pub at_ns: Option<u64>,
    /// None: the heap manager keeps no figures mtlab can read.
    pub source: Option<String>,
    pub in_use_bytes: Option<u64>,
    pub in_use_at_start_bytes: Option<u64>,
    pub mapped_bytes: Option<u64>,
    pub mapped_at_start_bytes: Option<u64>,
    /// A sampled trace's estimate of the bytes in use at that moment
    /// (requested bytes of blocks allocated while sampling was on).
    pub mtlab_in_use_bytes: Option<Estimate>,
    #[serde(skip)]
    pub tsc: u64,
}

impl AllocatorReading {
    /// What was handed out while mtlab watched: in use now less in use when tracing started.
    pub fn traced_in_use_bytes(&self) -> Option<u64> {
        Some(self.in_use_bytes?.saturating_sub(self.in_use_at_start_bytes.unwrap_or(0)))
    }

    /// Every reading of `trace`, in time order, without mtlab's estimates
    /// (`with_estimates` adds them).
    pub fn all_of(trace: &TraceFile) -> Vec<AllocatorReading> {
        let mut list: Vec<AllocatorReading> = trace
            .allocator_readings
            .iter()
            .filter_map(|kv| {
                let get = |k: &str| kv.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
                let num = |k: &str| get(k).and_then(|v| v.parse::<u64>().ok());
                let tsc = num(keys::READING_TSC)?;
                Some(AllocatorReading {
                    dump: num(keys::READING_DUMP).unwrap_or(0),
                    at_ns: trace.header.ns_since_start(tsc),
                    source: get(keys::ALLOCATOR_STATS).map(str::to_string),
                    in_use_bytes: num(keys::ALLOCATOR_IN_USE_BYTES),
                    in_use_at_start_bytes: num(keys::ALLOCATOR_IN_USE_AT_START_BYTES),
                    mapped_bytes: num(keys::ALLOCATOR_MAPPED_BYTES),
                    mapped_at_start_bytes: num(keys::ALLOCATOR_MAPPED_AT_START_BYTES),
                    mtlab_in_use_bytes: None,
                    tsc,
                })
            })
            .collect();
        list.sort_by_key(|r| r.tsc);
        list
    }

    /// The times a sampled pass should estimate the bytes in use at.
    pub fn tscs(list: &[AllocatorReading]) -> Vec<u64> {
        list.iter().map(|r| r.tsc).collect()
    }

    /// Sets mtlab's estimates (`SampledProfile::inuse_at_checkpoints`, in the same order).
    pub fn with_estimates(mut list: Vec<AllocatorReading>, estimates: &[Estimate]) -> Vec<AllocatorReading> {
        for (r, e) in list.iter_mut().zip(estimates) {
            r.mtlab_in_use_bytes = Some(*e);
        }
        list
    }
}

/// A trace of a process that was already running (`record --pid`).
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct Attached {
    /// The pid mtlab attached to (in its own PID namespace; the trace's `pid`
    /// is the process's own view, e.g. 1 in a container).
    pub pid: u32,
    /// When tracing started, nanoseconds since the Unix epoch.
    pub at_ns: u64,
    /// "detach" (the process ran on) or "exit" (it ended while traced).
    pub ended_by: String,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct ProcessReport {
    pub file: String,
    pub pid: u32,
    pub ppid: u32,
    pub cmdline: Vec<String>,
    /// The executable (`/proc/self/exe` when tracing started).
    pub exe: String,
    pub allocator: String,
    pub allocator_path: String,
    pub duration_ns: Option<u64>,
    /// The TSC's ticks per second: per-call cycles in ns (0: unknown).
    pub tsc_hz: u64,
    pub events: u64,
    pub functions: BTreeMap<String, FunctionReport>,
    pub peak: PeakReport,
    pub end: HeapSnapshot,
    /// Mapped space split three ways at the peak and at the end.
    pub space_peak: SpaceSplit,
    pub space_end: SpaceSplit,
    pub time_series: Vec<SeriesPoint>,
    pub top_sites: TopSites,
    pub temporary: TemporaryReport,
    /// Functions by allocated bytes, self and total (`report --callers`; empty otherwise).
    pub callers: Vec<CallerReport>,
    pub leaks: LeakReport,
    /// Events the preload library could not write; None when the process did
    /// not end through exit (no END record), so the count is unknown.
    pub events_dropped: Option<u64>,
    pub chunks_dropped: Option<u64>,
    /// Where the writer knows why it dropped events (STATS): JSON keys
    /// `write_failed_at` and `size_limited`.
    #[serde(flatten)]
    pub write_loss: crate::trace::WriteLoss,
    /// Records of the file found damaged (their checksum did not match) and
    /// skipped; their events are counted in `events_dropped`.
    pub chunks_damaged: u64,
    /// Times the trace was opened again by path after the program closed or
    /// replaced mtlab's descriptor (STATS `trace_reopened`; 0 when unknown).
    pub trace_reopened: u64,
    /// The process was made by a raw fork or clone system call, which runs
    /// no fork handler (STATS `forked_without_handlers`): the events of its
    /// first buffer were dropped (counted in `events_dropped`).
    pub forked_without_handlers: bool,
    /// Tracing stopped, the trace finished, before the program installed a
    /// seccomp filter that would have failed or killed mtlab's writes
    /// (STATS `stopped_by_seccomp`): what the program did after it is not in
    /// the trace.
    pub stopped_by_seccomp: bool,
    /// Something the process did not create was at its control page's name
    /// (STATS `ctl_page_refused`): it kept its page private, so `mtlab ctl`
    /// could not reach it (only its signal could).
    pub ctl_page_refused: bool,
    /// Guards left raised by a longjmp out of mtlab's code or out of an
    /// allocator call, found and cleared (STATS `guards_reset`).
    pub guards_reset: u64,
    /// Allocator calls of signal handlers that interrupted mtlab's own code,
    /// not in the trace (STATS `signal_calls_untraced`; 0 when unknown).
    pub signal_calls_untraced: u64,
    /// Calls with a stack (allocations, or samples) of threads made by
    /// `clone` without thread storage of their own,
    /// traced under the thread whose storage they share (STATS
    /// `shared_tls_calls`; 0 when unknown).
    pub shared_tls_calls: u64,
    /// The heap manager's own figures at exit, where it has them.
    pub allocator_stats: Option<AllocatorStats>,
    /// Its figures read after each `mtlab ctl dump` (sampled traces).
    pub allocator_readings: Vec<AllocatorReading>,
    pub stacks_overflowed: Option<u64>,
    pub clean_end: bool,
    /// The process that writes the trace is still running (no END yet, and
    /// it holds the file open): every figure is "so far".
    pub running: bool,
    pub unknown_frees: u64,
    /// Traced by `record --pid` from the attach on (None: from the start).
    pub attached: Option<Attached>,
    pub overlapping_allocs: u64,
    /// Set for a flight recorder's window (`record --keep-last`).
    pub flight: Option<FlightWindow>,
    pub program_mappings: ProgramMappings,
    /// The kernel's peak resident set of the process (`getrusage` at its
    /// exit, STATS `max_rss_kib`): everything it held — heap, its own
    /// mappings, code, stacks and mtlab's buffers — beside which the heap's
    /// figures read as the part they are. None without STATS (no clean exit).
    #[serde(default)]
    pub max_rss_bytes: Option<u64>,
    pub stacks: StackQuality,
    pub slowdown: Option<Slowdown>,
    /// Set for a compact trace (`mtlab compact`): the rounding of its time
    /// stamps in TSC ticks. Its calls keep no cycles of their own, so the
    /// time series has no per-window malloc cycles.
    pub compact_quantum_ticks: Option<u64>,
    /// A lean compact trace (`mtlab compact --lean`): its heap addresses are
    /// made up, so the figures derived from them (`has_address_figures`)
    /// are not its own.
    #[serde(default)]
    pub compact_lean: bool,
    /// The peak was measured on the exact trace before compaction
    /// (RUNINFO `compact_peak`), on the real addresses.
    #[serde(skip)]
    pub peak_before_compaction: bool,
    pub exit: Option<String>,
    /// Killed by a signal: events of its threads' unwritten buffers that
    /// `record` had copied from the process while it ran (RUNINFO
    /// `salvaged_events`).
    pub salvaged_events: Option<u64>,
    /// Present for sampled traces (`record --sample`): the estimates.
    pub profile: Option<SampledSummary>,
    /// The whole profile, for the exports (`report --pprof`, `--flamegraph`,
    /// …) without decoding the trace again: a sampled trace's estimates, or
    /// a full trace's exact figures when `AnalyzeOptions::profile` asked.
    #[serde(skip)]
    pub profile_data: Option<crate::profile::ProfileData>,
    /// Every site of a full trace, symbolized, in the order they were met,
    /// when `AnalyzeOptions::sites` asked (`report --diff`); empty otherwise.
    #[serde(skip)]
    pub all_sites: Vec<SiteReport>,
    /// Each thread's allocations and the blocks it allocated still live at
    /// the end, by tid, when `AnalyzeOptions::threads` asked (`report
    /// --threads`, the OTLP exports) of a full trace; empty otherwise (a
    /// sampled trace's estimates are `SampledSummary::threads`).
    #[serde(default)]
    pub threads: Vec<ThreadReport>,
    pub warnings: Vec<String>,
}

impl ProcessReport {
    /// Whether the heap's figures derived from block addresses —
    /// fragmentation, utilization, live bytes outside known regions — are
    /// real at the peak (`at_peak`) or at the end and over time: not in a
    /// lean trace, whose addresses are made up, except at a peak measured
    /// before compaction.
    pub fn has_address_figures(&self, at_peak: bool) -> bool {
        !self.compact_lean || (at_peak && self.peak_before_compaction)
    }
}

/// One thread's figures (`ProcessReport::threads`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct ThreadReport {
    /// The kernel's thread id.
    pub tid: u32,
    pub calls: u64,
    pub bytes: u64,
    /// Blocks it allocated that were still live at the end, whichever thread freed the others.
    pub live_objects: u64,
    pub live_bytes: u64,
}

/// One stack of a sampled profile, with 95 % intervals.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct SampledSite {
    pub stack_id: u32,
    pub samples: u64,
    pub alloc_bytes: Estimate,
    pub alloc_objects: Estimate,
    pub inuse_bytes: Estimate,
    pub inuse_objects: Estimate,
    pub frames: Vec<FrameReport>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct SampledSummary {
    #[serde(flatten)]
    pub totals: SampledTotals,
    pub unwind: String,
    /// Recorded with --inactive: the sampler started switched off (how long
    /// it was on, if ever, the trace does not say).
    pub started_inactive: bool,
    pub top: Vec<SampledSite>,
    /// Each thread's estimates, by tid, with `report --threads` (and the
    /// OTLP exports); empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub threads: Vec<crate::profile::sampled::SampledThread>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn space_splits_into_requested_overhead_and_free() {
        // 10 blocks of 100 B usable as 104, in 4 KiB mapped.
        let s = HeapSnapshot { live_objects: 10, live_bytes: 1000, live_usable_bytes: 1040, mapped_bytes: 4096, ..Default::default() };
        let glibc = SpaceSplit::of(&s, SpaceSplit::header_bytes("glibc"));
        assert_eq!((glibc.requested_bytes, glibc.overhead_bytes, glibc.free_bytes), (1000, 40 + 80, 4096 - 1120));
        let other = SpaceSplit::of(&s, SpaceSplit::header_bytes("jemalloc"));
        assert_eq!((other.overhead_bytes, other.free_bytes), (40, 4096 - 1040));
        // Live bytes in no known mapping: no negative free space.
        let over = HeapSnapshot { mapped_bytes: 0, ..s };
        assert_eq!(SpaceSplit::of(&over, 8).free_bytes, 0);
    }
}
