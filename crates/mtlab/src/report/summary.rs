//! What an HTML page of a report says first: the root process's peak live
//! and mapped bytes, what it leaked, its slowest allocation function, its
//! top site, how it ended, and every warning of the run.

use super::{human_bytes, RunReport};
use crate::export::html::Summary;

/// What a figure a sampled trace does not have says instead of a zero.
pub const NOT_MEASURED: &str = "— (not measured: a sampled trace has no exact heap; see its estimates)";

/// The summary of `run`: of its detailed process with the highest peak of
/// live bytes (a launcher's shim that exec'd the program is not the one a
/// person asks about), with the whole run's warnings; none without a process.
pub fn summary(run: &RunReport) -> Option<Summary> {
    let p = run.processes.iter().rev().max_by_key(|p| p.peak.heap.live_bytes)?;
    let mut items = Vec::new();
    let who = format!("process {} ({})", p.pid, p.cmdline.first().map(|c| c.rsplit('/').next().unwrap_or(c)).unwrap_or("?"));
    items.push(if run.index.len() > 1 {
        ("busiest process (highest peak live)".to_string(), format!("{who}, of {} traced processes", run.index.len()))
    } else {
        ("process".to_string(), who)
    });
    let peak = &p.peak.heap;
    if let Some(prof) = &p.profile {
        // A sampled trace has no exact heap: its zeros are no measurement.
        for what in ["peak live", "mapped at that peak", "leaked (live at the end)"] {
            items.push((what.into(), NOT_MEASURED.into()));
        }
        items.push(("in use at the end (estimated)".into(), super::views::estimate(&prof.totals.inuse_bytes, true)));
    } else {
        items.push(("peak live".into(), format!("{} in {} blocks", human_bytes(peak.live_bytes), peak.live_objects)));
        items.push(("mapped at that peak".into(), human_bytes(peak.mapped_bytes)));
        if p.program_mappings.calls > 0 {
            items.push(("the program's own mappings (beside the heap)".into(), format!("{} in {} mmap calls", human_bytes(p.program_mappings.bytes), p.program_mappings.calls)));
        }
        items.push(("leaked (live at the end)".into(), format!("{} in {} blocks", human_bytes(p.leaks.bytes), p.leaks.objects)));
    }
    if let Some(rss) = p.max_rss_bytes {
        items.push(("peak resident memory (the kernel's count, all of the process)".into(), human_bytes(rss)));
    }
    // A mean of a few calls (a startup calloc) says little: among the
    // functions called at least 1 % as often as the most called one.
    let most = p.functions.values().map(|f| f.calls).max().unwrap_or(0);
    let slowest = p.functions.iter().filter(|(_, f)| f.calls > 0 && f.calls * 100 >= most).max_by(|a, b| a.1.cycles.mean.total_cmp(&b.1.cycles.mean));
    if let Some((name, f)) = slowest.filter(|(_, f)| f.cycles.mean > 0.0) {
        let ns = if p.tsc_hz > 0 { format!(" ({:.0} ns)", f.cycles.mean * 1e9 / p.tsc_hz as f64) } else { String::new() };
        items.push(("slowest function (mean cycles)".into(), format!("{name}: {:.0} cycles{ns} over {} calls", f.cycles.mean, f.calls)));
    }
    if let Some(site) = p.top_sites.by_bytes.first() {
        let at = site.frames.first().map(super::views::frame_text).unwrap_or_else(|| "(no stack recorded)".into());
        items.push(("top site by bytes".into(), format!("{at}: {} in {} calls", human_bytes(site.bytes), site.calls)));
    }
    let ended = if p.running {
        "still running when read".to_string()
    } else {
        match (run.ending(p), &p.exit) {
            (_, Some(e)) => e.clone(),
            (Some(e), None) => e.text(),
            (None, None) => "unknown".into(),
        }
    };
    items.push(("how it ended".into(), ended));
    let mut warnings: Vec<String> = run.missing.iter().map(|m| m.message()).chain(run.untraced.iter().map(|u| u.message())).collect();
    for q in &run.processes {
        warnings.extend(q.warnings.iter().map(|w| if run.processes.len() > 1 { format!("process {}: {w}", q.pid) } else { w.clone() }));
    }
    Some(Summary { items, warnings })
}
