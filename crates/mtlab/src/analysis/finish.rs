//! The report made of a pass's aggregators: the site tables ranked and
//! symbolized, the callers, the exact profile, the peak, the end, and what
//! the trace's header, RUNINFO and STATS say about how the run went.

use super::model::{
    AllocatorReading, AllocatorStats, FlightWindow, FunctionReport, LeakReport, PeakReport, ProcessReport, SampledSite, SampledSummary,
    SiteReport, Slowdown, SpaceSplit, TemporaryReport, ThreadReport, TopSites,
};
use super::pass::Pass;
use super::sites::{callers, top_by, SiteAcc};
use super::symbols::{recorded_until, stack_quality, Symbols};
use super::AnalyzeOptions;
use crate::profile::sampled::SampledProfile;
use crate::profile::ProfileData;
use crate::symbolize::Mapping;
use crate::trace::{keys, Func, Items, TraceFile};

/// What the decoder met: its warnings and counts, over one `Items` or
/// (`record --live`) several, one per batch of chunks.
#[derive(Debug, Clone, Default)]
pub struct Decoded {
    pub warnings: Vec<String>,
    /// Events decoded.
    pub events: u64,
    /// Chunks whose events did not match their checksum.
    pub chunks_damaged: u64,
}

impl Decoded {
    /// Adds what `items` met.
    pub fn add(&mut self, items: &Items) {
        self.warnings.extend(items.warnings().iter().cloned());
        self.events += items.events_decoded();
        self.chunks_damaged += items.chunks_damaged().0;
    }
}

/// What the report is made of beside the pass.
pub struct Inputs<'a> {
    pub trace: &'a TraceFile,
    pub opts: &'a AnalyzeOptions,
    /// Site tables, functions and stacks are shown (not a process in the index only).
    pub symbolize: bool,
    pub maps: Vec<Mapping>,
    /// What the decoder met.
    pub decoded: &'a Decoded,
    /// A sampled trace's estimates, made in the same pass.
    pub sampled: Option<SampledProfile>,
    pub readings: Vec<AllocatorReading>,
}

pub fn report(pass: &Pass, inp: Inputs<'_>) -> ProcessReport {
    let Inputs { trace, opts, symbolize, maps, decoded, sampled, readings } = inp;
    let compact_quantum = trace.compact_quantum().and_then(|q| q.parse::<u64>().ok());
    let mut warnings = trace.warnings.clone();
    if trace.header.version < crate::trace::format::FIRST_REWRITTEN_VERSION {
        warnings.push(RAW_TRACE.to_string());
    }
    // Damage that `mtlab record` found (and cut off) when it finished the file.
    warnings.extend(trace.runinfo.iter().filter(|(k, _)| k == keys::FINISH_WARNING).map(|(_, v)| format!("when recorded: {v}")));
    warnings.extend(decoded.warnings.iter().cloned());
    let stat = |key: &str| trace.stats.iter().find(|(k, _)| k == key).and_then(|(_, v)| v.parse::<u64>().ok());
    let unnamed = stat(keys::SAMPLES_THREADS_UNNAMED);
    if let Some(n @ 1..) = unnamed {
        warnings.push(format!(
            "{n} thread(s) did not start through pthread_create (or started while 256 creations were in flight): \
             with --sample-seed their samples need not repeat from run to run"
        ));
    }
    let last_tsc = pass.last_tsc;

    let mut symbols = Symbols::new(&maps, recorded_until(trace, last_tsc));
    let top = opts.top;
    let gen = pass.sites.peak_gen();
    let index = &pass.replay.sites;
    let counters = |id: u32, acc: &SiteAcc, frames: Vec<_>| SiteReport {
        stack_id: id,
        calls: acc.calls,
        bytes: acc.bytes,
        live_objects: acc.live_objects,
        live_bytes: acc.live_bytes,
        peak_live_objects: compact_quantum.is_none().then(|| acc.at_peak(gen).0),
        peak_live_bytes: compact_quantum.is_none().then(|| acc.at_peak(gen).1),
        temporary: acc.temporary,
        frames,
    };
    let site_report = |i: usize, id: u32, acc: &SiteAcc, symbols: &mut Symbols| {
        counters(id, acc, index.frames_of(i, &pass.stacks).map(|pcs| symbols.site_frames(id, pcs)).unwrap_or_default())
    };
    let sites: Vec<(u32, SiteAcc)> = pass.sites.all(index);
    let report = |i: usize, symbols: &mut Symbols| site_report(i, sites[i].0, &sites[i].1, symbols);
    let by_bytes = top_by(&sites, top, |_| true, |a| a.bytes).into_iter().map(|i| report(i, &mut symbols)).collect();
    let by_calls = top_by(&sites, top, |_| true, |a| a.calls).into_iter().map(|i| report(i, &mut symbols)).collect();
    let at_peak = if compact_quantum.is_some() {
        Vec::new()
    } else {
        top_by(&sites, top, |a| a.at_peak(gen).0 > 0, |a| a.at_peak(gen).1).into_iter().map(|i| report(i, &mut symbols)).collect()
    };
    let temporary_top =
        top_by(&sites, top, |a| a.temporary > 0, |a| a.temporary).into_iter().map(|i| report(i, &mut symbols)).collect();
    let callers = if opts.callers {
        let list: Vec<(&[u64], u64, u64)> =
            index.with_frames(&pass.stacks).map(|(i, pcs)| (pcs, sites[i].1.calls, sites[i].1.bytes)).collect();
        callers(&list, &mut symbols, top)
    } else {
        Vec::new()
    };
    // Every site for `report --diff`: each one's frames made once, not kept
    // in the top tables' cache (a cc1 trace has 57 K sites).
    let all_sites = if symbolize && opts.sites {
        (0..sites.len())
            .map(|i| counters(sites[i].0, &sites[i].1, index.frames_of(i, &pass.stacks).map(|pcs| symbols.frames(pcs)).unwrap_or_default()))
            .collect()
    } else {
        Vec::new()
    };
    let leak_top =
        top_by(&sites, top, |a| a.live_objects > 0, |a| a.live_bytes).into_iter().map(|i| report(i, &mut symbols)).collect();

    let end = pass.replay.now();
    // Threads' independent events within one quantum of a compact trace
    // replay in an order of their own, which can move the peak: the one
    // measured on the exact trace before compaction is the truth
    // (`crate::compact`).
    let given: Option<PeakReport> = compact_quantum
        .and_then(|_| trace.runinfo_get(keys::COMPACT_PEAK))
        .and_then(|j| serde_json::from_str(j).ok());
    let peak_before_compaction = given.is_some();
    let peak = given.unwrap_or_else(|| pass.replay.peak(|t| pass.ns(t)));
    // Each function's cycle percentiles: shown only in a detailed report.
    let functions = Func::ALL
        .iter()
        .filter(|_| symbolize)
        .map(|&f| {
            let s = pass.functions.of(f);
            (f.name().to_string(), FunctionReport { calls: s.calls, failed: s.failed, mean_size: s.mean_size(), cycles: s.cycles() })
        })
        .collect();
    let run = |k: &str| trace.runinfo.iter().find(|(key, _)| key == k).and_then(|(_, v)| v.parse::<u64>().ok());
    let slowdown = match (run(keys::BASELINE_WALL_NS), run(keys::WALL_NS)) {
        (Some(b), Some(t)) if b > 0 => Some(Slowdown {
            baseline_wall_ns: b,
            traced_wall_ns: t,
            ratio: t as f64 / b as f64,
            baseline_stdin_empty: run(keys::BASELINE_STDIN_EMPTY) == Some(1),
        }),
        _ => None,
    };
    let allocator_readings = match &sampled {
        Some(p) => AllocatorReading::with_estimates(readings, &p.inuse_at_checkpoints),
        None => readings,
    };
    let distinct = pass.stacks.len() as u64;
    let stacks = match &sampled {
        _ if !symbolize => stack_quality(trace, std::iter::empty(), distinct, "allocation calls", &mut symbols),
        // A sampled trace's allocations are its samples.
        Some(p) => stack_quality(trace, p.stacks.iter().map(|s| (&s.pcs[..], s.samples)), distinct, "sampled allocations", &mut symbols),
        None => stack_quality(
            trace,
            index.with_frames(&pass.stacks).map(|(i, pcs)| (pcs, sites[i].1.calls)),
            distinct,
            "allocation calls",
            &mut symbols,
        ),
    };
    let (profile, profile_data) = match sampled {
        Some(p) => {
            let top = p
                .stacks
                .iter()
                .take(top)
                .map(|s| SampledSite {
                    stack_id: s.stack_id,
                    samples: s.samples,
                    alloc_bytes: s.alloc_bytes,
                    alloc_objects: s.alloc_objects,
                    inuse_bytes: s.inuse_bytes,
                    inuse_objects: s.inuse_objects,
                    frames: symbols.frames(&s.pcs),
                })
                .collect();
            let summary = SampledSummary {
                totals: p.totals,
                unwind: trace.header.unwind.clone(),
                started_inactive: trace.runinfo_get(keys::SAMPLE_STARTED_INACTIVE) == Some("1"),
                top,
                threads: p.threads,
            };
            (Some(summary), Some(p.data))
        }
        None => {
            // The exact profile is the site table by stack: no decode of its own.
            let exact = opts.profile.then(|| ProfileData {
                samples: pass.sites.profile(index, &pass.stacks, pass.threads.as_ref()),
                maps: maps.clone(),
                period_bytes: 0,
                start_ns: trace.header.start_ns,
                duration_ns: pass.ns(last_tsc).unwrap_or(0),
            });
            (None, exact)
        }
    };
    for path in symbols.sym.replaced_modules() {
        warnings.push(format!(
            "{path} is not the file the program ran (another file has its path now: rebuilt, upgraded, or \
             another machine's): its frames are shown as {}+OFFSET, not named from the new file",
            path.rsplit('/').next().unwrap_or(&path)
        ));
    }
    let exit = run(keys::EXIT_CODE).map(|c| format!("exit code {c}")).or_else(|| run(keys::SIGNAL).map(|s| format!("killed by signal {s}")));
    let salvaged_events = run(keys::SALVAGED_EVENTS);
    let duration_ns = trace.end.as_ref().and_then(|e| pass.ns(e.end_tsc)).or_else(|| pass.ns(last_tsc));
    let heap = &pass.replay.heap;
    ProcessReport {
        file: trace.path.display().to_string(),
        pid: trace.header.pid,
        ppid: trace.header.ppid,
        cmdline: trace.header.cmdline.clone(),
        exe: trace.header.exe.clone(),
        allocator: trace.header.allocator.clone(),
        allocator_path: trace.header.allocator_path.clone(),
        duration_ns,
        tsc_hz: trace.header.tsc_hz,
        events: pass.events,
        functions,
        space_peak: SpaceSplit::of(&peak.heap, SpaceSplit::header_bytes(&trace.header.allocator)),
        space_end: SpaceSplit::of(&end, SpaceSplit::header_bytes(&trace.header.allocator)),
        peak,
        end,
        time_series: pass.series.points().to_vec(),
        top_sites: TopSites { by_bytes, by_calls, at_peak, temporary: temporary_top },
        callers,
        temporary: {
            let allocs = pass.sites.calls();
            let temporary = pass.sites.temporary();
            TemporaryReport {
                calls: temporary,
                of_calls: allocs,
                fraction: if allocs > 0 { temporary as f64 / allocs as f64 } else { 0.0 },
            }
        },
        leaks: LeakReport { objects: end.live_objects, bytes: end.live_bytes, top: leak_top },
        // Events the writer counted as written that the file does not hold
        // (cut away when the disk filled, or in a damaged chunk) are lost too.
        events_dropped: trace.end.as_ref().map(|e| e.events_dropped + e.events_written.saturating_sub(decoded.events)),
        chunks_dropped: trace.end.as_ref().map(|e| e.chunks_dropped),
        write_loss: crate::trace::WriteLoss::from_stats(&trace.stats),
        chunks_damaged: trace.records_damaged + decoded.chunks_damaged,
        trace_reopened: stat(keys::TRACE_REOPENED).unwrap_or(0),
        forked_without_handlers: stat(keys::FORKED_WITHOUT_HANDLERS).unwrap_or(0) > 0,
        stopped_by_seccomp: stat(keys::STOPPED_BY_SECCOMP).unwrap_or(0) > 0,
        ctl_page_refused: stat(keys::CTL_PAGE_REFUSED).unwrap_or(0) > 0,
        guards_reset: stat(keys::GUARDS_RESET).unwrap_or(0),
        signal_calls_untraced: stat(keys::SIGNAL_CALLS_UNTRACED).unwrap_or(0),
        shared_tls_calls: stat(keys::SHARED_TLS_CALLS).unwrap_or(0),
        allocator_stats: AllocatorStats::read(trace, &trace.header.allocator, &end),
        allocator_readings,
        stacks_overflowed: trace.end.as_ref().map(|e| e.stacks_overflowed),
        clean_end: trace.end.is_some(),
        running: trace.end.is_none() && crate::platform::process::holds_open(trace.header.pid, &trace.path),
        unknown_frees: heap.unknown_frees,
        attached: trace.runinfo_get(keys::ATTACHED_PID).map(|pid| crate::analysis::model::Attached {
            pid: pid.parse().unwrap_or(0),
            at_ns: trace.runinfo_get(keys::ATTACHED_AT_NS).and_then(|v| v.parse().ok()).unwrap_or(0),
            ended_by: trace.runinfo_get(keys::ATTACH_ENDED_BY).unwrap_or("").to_string(),
        }),
        overlapping_allocs: heap.overlapping_allocs,
        flight: flight_window(trace, heap.unknown_frees),
        program_mappings: pass.replay.program_maps.clone(),
        max_rss_bytes: stat(keys::MAX_RSS_KIB).map(|kib| kib * 1024),
        stacks,
        slowdown,
        compact_quantum_ticks: compact_quantum,
        compact_lean: compact_quantum.is_some() && trace.is_lean(),
        peak_before_compaction,
        exit,
        salvaged_events,
        profile,
        profile_data,
        all_sites,
        threads: pass.threads.as_ref().map_or_else(Vec::new, |t| {
            t.totals()
                .into_iter()
                .map(|(tid, c)| ThreadReport { tid, calls: c.calls, bytes: c.bytes, live_objects: c.live_objects, live_bytes: c.live_bytes })
                .collect()
        }),
        warnings,
    }
}

/// The window a flight recorder's trace holds, from its RUNINFO.
fn flight_window(trace: &TraceFile, unknown_frees: u64) -> Option<FlightWindow> {
    let num = |key: &str| trace.runinfo_get(key).and_then(|v| v.parse::<u64>().ok());
    Some(FlightWindow {
        keep_last_ns: num(keys::FLIGHT_KEEP_LAST_NS)?,
        trigger: trace.runinfo_get(keys::FLIGHT_TRIGGER).unwrap_or("unknown").to_string(),
        start_ns: num(keys::FLIGHT_START_NS).unwrap_or(0),
        end_ns: num(keys::FLIGHT_END_NS).unwrap_or(0),
        events_before: num(keys::FLIGHT_EVENTS_BEFORE).unwrap_or(0),
        frees_before: unknown_frees,
        execd: trace.runinfo_get(keys::FLIGHT_EXECD).map(str::to_string),
    })
}

/// What a trace not finished by `mtlab record` lacks (version 2: as the
/// preload library writes it).
pub const RAW_TRACE: &str = "this trace is as the preload library wrote it, never finished by `mtlab record` (record was \
     killed, the disk had no room for the rewrite, or it is still being written): its events carry no checksums, so \
     damage to them cannot be found — the figures above are unverified";
