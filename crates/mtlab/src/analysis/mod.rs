//! The analysis of a trace: one pass that decodes each event once and hands
//! it to a set of aggregators, and the report's data model they fill
//! (`model`: `ProcessReport`, docs/metrics.md).
//!
//! - `pass`: the pass (`Pass::stack`, `Pass::event`, fed item by item;
//!   `feed` drives it over a whole trace, the decoder running `AHEAD`
//!   events in front so that, once the live-block table or the site tables
//!   outgrow a last-level cache (8 MiB), each event's table slots are
//!   prefetched when it is decoded and, 8 events later, a free's slab entry
//!   and site counters through its (by then cached) table slot, so that the
//!   misses of several events overlap).
//! - `pipe`: on a trace of 64 Ki events or more, with more than one CPU
//!   allowed and unless `MTLAB_REPORT_THREADS=1`, the decoder runs on a
//!   thread of its own (`pass::feed_piped`) and hands the pass batches of
//!   4 096 events through a queue of two, in the order decoded: the report
//!   is the same to the byte. `record --live` keeps its pass on one thread
//!   (`feed`, fed as the trace grows).
//! - `replay`: the shadow heap aggregator, first: each event replayed into
//!   `heap::model::ShadowHeap` (live and mapped bytes, fragmentation,
//!   utilization, the peak — a new peak keeps the heap's raw counters,
//!   divided out when the report is made); each allocation's stack gets its
//!   site, which the heap keeps with the block; what the event did reaches
//!   the others as a `Step` (`step`: the call, and the block freed,
//!   replaced, allocated, by site).
//! - `functions`: per-function calls, failures, sizes and cycle percentiles.
//! - `sites`: calls, bytes, live blocks now and at the peak, temporary
//!   allocations, by site (an open-addressing table of (stack id, index)
//!   pairs; each ranking's top sites selected, not sorted); the callers and
//!   the exact profile behind pprof, the flame graph and speedscope are
//!   read from it, with no decode of their own.
//! - `series`: the time series.
//! - `symbols`: frames of the sites shown, how whole the stacks are.
//! - `finish`: the `ProcessReport` made of the aggregators.
//!
//! Files depend on those before them only: `model` → `step` → `symbols` →
//! `sites` → `replay` → `functions`, `series` → `pipe` → `pass` → `finish`.
//!
//! A sampled trace's estimates (`profile::sampled::SampledPass`) are made in
//! the same decode pass. A report asks only for what its outputs need:
//! callers with `callers`, the exact profile with `profile`, no symbols
//! and one time-series point for a process in the index only.

pub mod finish;
pub mod functions;
pub mod model;
pub mod pass;
pub mod pipe;
pub mod replay;
pub mod series;
pub mod sites;
pub mod step;
pub mod symbols;
pub mod threads;

pub use model::ProcessReport;
pub use symbols::stack_quality_of;

use crate::profile::sampled::SampledPass;
use crate::symbolize::{parse_all_maps, CodeRanges};
use crate::trace::{keys, Event, TraceError, TraceFile};
use model::AllocatorReading;
use pass::{feed, feed_piped, Pass};

#[derive(Clone, Debug)]
pub struct AnalyzeOptions {
    /// Most points in the time series.
    pub max_points: usize,
    /// Sites listed in each top table.
    pub top: usize,
    /// Also the functions by allocation in them and below them (symbolizes
    /// every stack, not only the top sites').
    pub callers: bool,
    /// Also the whole profile of a full trace (`ProcessReport::profile_data`),
    /// for the exports; a sampled trace's estimated one is always made.
    pub profile: bool,
    /// Also every site, symbolized (`ProcessReport::all_sites`), for
    /// `report --diff`, which matches two traces' sites by their frames.
    pub sites: bool,
    /// Also each thread's figures, of the process and of each stack of the
    /// profile (`ProcessReport::threads`, `StackSample::threads`), for a
    /// full trace: `report --threads`, the OTLP exports.
    pub threads: bool,
}

impl Default for AnalyzeOptions {
    fn default() -> Self {
        AnalyzeOptions { max_points: 200, top: 10, callers: false, profile: false, sites: false, threads: false }
    }
}

impl AnalyzeOptions {
    /// What a process only listed in the index needs (`analyze_for_index`).
    pub fn for_index() -> AnalyzeOptions {
        AnalyzeOptions { max_points: 1, top: 0, callers: false, profile: false, sites: false, threads: false }
    }
}

pub fn analyze(trace: &TraceFile, opts: &AnalyzeOptions) -> Result<ProcessReport, TraceError> {
    analyze_with(trace, opts, true)
}

/// The same pass for a process only listed in `mtlab report`'s process
/// index: events, peak, end, how it ended are whole; nothing is symbolized —
/// no site tables, no stack quality (its `truncated_call_fraction` is 0), no
/// per-function table, a time series of one point, no maps in a sampled
/// profile unless `profile` asks for the profile. On a tree of hundreds of
/// small processes the symbolizing and ranking of sites cost more than
/// replaying their heaps.
pub fn analyze_for_index(trace: &TraceFile, profile: bool) -> Result<ProcessReport, TraceError> {
    analyze_with(trace, &AnalyzeOptions { profile, ..AnalyzeOptions::for_index() }, false)
}

fn analyze_with(trace: &TraceFile, opts: &AnalyzeOptions, symbolize: bool) -> Result<ProcessReport, TraceError> {
    analyze_run(trace, opts, symbolize, pipe::wanted(trace).then_some(pipe::BATCH), |_| {})
}

/// `analyze`, also handing each event to `seen` (`mtlab compact --lean`
/// learns its stacks in this pass instead of reading the trace again).
pub fn analyze_seeing(trace: &TraceFile, opts: &AnalyzeOptions, seen: impl FnMut(&Event)) -> Result<ProcessReport, TraceError> {
    analyze_run(trace, opts, true, pipe::wanted(trace).then_some(pipe::BATCH), seen)
}

/// The most blocks live at once, as the finish estimated it (RUNINFO
/// `live_blocks_hint`), for a trace whose heap is replayed: never more
/// than the trace's events, so that a damaged value cannot ask for more
/// memory than the blocks could take.
fn live_blocks_hint(trace: &TraceFile) -> Option<usize> {
    if trace.header.sample_interval != 0 {
        return None;
    }
    let hint: u64 = trace.runinfo_get(keys::LIVE_BLOCKS_HINT)?.parse().ok()?;
    let events: u64 = trace.chunks.iter().map(|c| u64::from(c.n_events)).sum();
    usize::try_from(hint.min(events)).ok()
}

/// The pass, its decoder on a thread of its own handing over batches of
/// `piped` events when that is Some (and the thread can be started).
fn analyze_run(
    trace: &TraceFile,
    opts: &AnalyzeOptions,
    symbolize: bool,
    piped: Option<usize>,
    mut seen: impl FnMut(&Event),
) -> Result<ProcessReport, TraceError> {
    let compact = trace.compact_quantum().is_some_and(|q| q.parse::<u64>().is_ok());
    let mut pass = Pass::new(&trace.header, opts.max_points, compact);
    if let Some(n) = live_blocks_hint(trace) {
        pass.replay.heap.reserve_blocks(n);
    }
    if opts.threads && trace.header.sample_interval == 0 {
        pass.threads = Some(Default::default());
    }
    // A sampled trace's profile is estimated in this same decode pass.
    let readings = AllocatorReading::all_of(trace);
    let mut sampled = (trace.header.sample_interval > 0).then(|| {
        let s = SampledPass::with_checkpoints(AllocatorReading::tscs(&readings));
        if opts.threads {
            s.split_by_thread()
        } else {
            s
        }
    });
    let mut items = trace.items()?;
    // Without symbols or a profile no stack is shown: no maps to read (their
    // parse cost an index-only process as much as its heap's replay), stacks
    // kept whole.
    let maps = if symbolize || opts.profile { parse_all_maps(&trace.maps) } else { Vec::new() };
    let code = CodeRanges::new(&maps);
    // Two monomorphized loops: a full trace's loop carries no test for the
    // sampled pass (it cost ~20 instructions an event, 6 % of the report).
    let fed = piped.is_some_and(|batch| match &mut sampled {
        Some(s) => feed_piped(&mut items, &mut pass, &code, batch, |ev, _| {
            s.event(ev);
            seen(ev)
        }),
        None => feed_piped(&mut items, &mut pass, &code, batch, |ev, _| seen(ev)),
    });
    if !fed {
        match &mut sampled {
            Some(s) => feed(&mut items, &mut pass, &code, |ev, _| {
                s.event(ev);
                seen(ev)
            }),
            None => feed(&mut items, &mut pass, &code, |ev, _| seen(ev)),
        }
    }
    pass.end_series();
    pass.replay.release();
    let sampled = sampled.map(|s| s.finish(trace, &pass.stacks, maps.clone()));
    let mut decoded = finish::Decoded::default();
    decoded.add(&items);
    // The decoder's buffers go before the sites are symbolized (2 MiB of
    // the report's peak on python3 with 2.8 M live blocks).
    drop(items);
    Ok(finish::report(&pass, finish::Inputs { trace, opts, symbolize, maps, decoded: &decoded, sampled, readings }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The report of a trace whose threads' events interleave is the same,
    /// to the byte, with the decoder on a thread of its own as on the
    /// calling thread; with and without the profile and the threads split,
    /// and for a process of the index.
    #[test]
    fn the_piped_pass_reports_what_the_one_thread_pass_does() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.mtl");
        pipe::tests::threads_trace(&path);
        let trace = TraceFile::open(&path).unwrap();
        let full = AnalyzeOptions { max_points: 50, callers: true, profile: true, sites: true, threads: true, ..Default::default() };
        for (opts, symbolize) in [(AnalyzeOptions::default(), true), (full, true), (AnalyzeOptions::for_index(), false)] {
            let one = serde_json::to_string(&analyze_run(&trace, &opts, symbolize, None, |_| {}).unwrap()).unwrap();
            // Batches of a few events: stack definitions and the switch to
            // prefetching fall at batch boundaries.
            for batch in [1, 7, 64, pipe::BATCH] {
                let two = serde_json::to_string(&analyze_run(&trace, &opts, symbolize, Some(batch), |_| {}).unwrap()).unwrap();
                assert_eq!(one, two, "batch {batch}, {opts:?}");
            }
        }
        let r = analyze_run(&trace, &AnalyzeOptions::default(), true, Some(64), |_| {}).unwrap();
        assert!(r.events > 1000, "{}", r.events);
    }
}
