//! `--json`: one JSON object. Its top level is the first process reported
//! (the root, unless `--pid`/`--comm` left it out; the keys of
//! docs/metrics.md), the other reported processes under `children`, every
//! traced process under `processes_index` and the child traces that could not
//! be read under `missing_traces`, the processes that got no trace file under
//! `untraced_processes`.

use serde_json::Value;

use super::RunReport;
use crate::analysis::ProcessReport;

/// The keys of a full trace's exact figures, which a sampled trace does not
/// measure (docs/metrics.md, *Which fields a sampled report has*): `null` in
/// its JSON, so that no zero reads as "no leaks" or "no calls".
const NOT_IN_A_SAMPLED_TRACE: [&str; 10] =
    ["events", "functions", "peak", "end", "space_peak", "space_end", "temporary", "leaks", "top_sites", "time_series"];

/// A heap snapshot's figures that come from block addresses, as JSON
/// pointers below it: made up in a lean trace
/// (`ProcessReport::has_address_figures`).
const SNAPSHOT_FROM_ADDRESSES: [&str; 4] = ["/fragmentation/mean", "/fragmentation/total", "/utilization", "/unplaced_bytes"];
/// The same for a time series point.
const POINT_FROM_ADDRESSES: [&str; 3] = ["fragmentation_total", "fragmentation_mean", "utilization"];

/// Sets the figures of the snapshot at `at` (a JSON pointer) to `null`.
fn null_snapshot(v: &mut Value, at: &str) {
    for key in SNAPSHOT_FROM_ADDRESSES {
        if let Some(x) = v.pointer_mut(&format!("{at}{key}")) {
            *x = Value::Null;
        }
    }
}

/// One process's object: the model as it is, with the figures a sampled
/// trace, or a lean one, does not have set to `null`.
fn process_json(p: &ProcessReport) -> Value {
    let mut v = serde_json::to_value(p).expect("reports serialize");
    if p.profile.is_some() {
        for key in NOT_IN_A_SAMPLED_TRACE {
            v[key] = Value::Null;
        }
    }
    if !p.has_address_figures(false) {
        null_snapshot(&mut v, "/end");
        if let Some(points) = v.get_mut("time_series").and_then(Value::as_array_mut) {
            for point in points {
                for key in POINT_FROM_ADDRESSES {
                    point[key] = Value::Null;
                }
            }
        }
    }
    if !p.has_address_figures(true) {
        // The peak's snapshot is flattened into it.
        null_snapshot(&mut v, "/peak");
    }
    v
}

pub fn to_json(run: &RunReport) -> Value {
    let mut iter = run.processes.iter();
    let mut root = match iter.next() {
        Some(p) => process_json(p),
        None => serde_json::json!({}),
    };
    let children: Vec<Value> = iter.map(process_json).collect();
    root["children"] = Value::Array(children);
    root["processes_index"] = serde_json::to_value(&run.index).expect("index rows serialize");
    root["missing_traces"] = serde_json::to_value(&run.missing).expect("missing traces serialize");
    if let Some(l) = &run.live {
        root["live_profile"] = serde_json::to_value(l).expect("live status serializes");
    }
    root["untraced_processes"] = run.untraced.as_ref().map_or(serde_json::json!({"count": 0, "named": []}), |u| u.to_json());
    root
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Event, EventKind, Func, Item, TraceFile, TraceWriter};

    /// The same run compacted plainly and lean: the lean one's figures from
    /// addresses are null at the end and over time, its peak (measured on
    /// the real addresses) keeps them, and every other figure is the same.
    #[test]
    fn a_lean_trace_has_null_where_addresses_would_speak() {
        let dir = tempfile::tempdir().unwrap();
        let [src, plain, lean] = ["t.mtl", "c.mtl", "l.mtl"].map(|n| dir.path().join(n));
        let ev = |tsc: u64, kind| Event { tid: 1, tsc, cycles: 30, stack: 0, flags: 0, kind };
        let malloc = |tsc, ptr| ev(tsc, EventKind::Alloc { func: Func::Malloc, size: 40, align: 0, ptr, usable: 40 });
        let mut items: Vec<Item> = (0..6).map(|i| Item::Event(malloc(1000 + i, 0x5000 + 0x100 * i))).collect();
        items.push(Item::Event(ev(2000, EventKind::Free { func: Func::Free, ptr: 0x5200 })));
        let mut w = TraceWriter::create(&src, [("pid", "1"), ("tsc_hz", "1000000000"), ("page_size", "4096")]).unwrap();
        w.events_chunk(1, &items).unwrap();
        w.finish().unwrap();
        crate::compact::compact_trace(&src, &plain, 1 << 16, false).unwrap();
        crate::compact::compact_trace(&src, &lean, 1 << 16, true).unwrap();
        let report = |p: &std::path::Path| {
            let r = crate::analysis::analyze(&TraceFile::open(p).unwrap(), &Default::default()).unwrap();
            (process_json(&r), r)
        };
        let ((c, _), (l, mut lr)) = (report(&plain), report(&lean));
        assert_eq!((c["compact_lean"].clone(), l["compact_lean"].clone()), (false.into(), true.into()));
        assert!(c["end"]["utilization"].is_number() && c["end"]["fragmentation"]["mean"].is_number());
        for key in SNAPSHOT_FROM_ADDRESSES {
            assert!(l.pointer(&format!("/end{key}")).unwrap().is_null(), "end{key}");
        }
        assert_eq!(c["peak"], l["peak"], "the peak was measured before compaction");
        assert!(!l["time_series"].as_array().unwrap().is_empty());
        for point in l["time_series"].as_array().unwrap() {
            assert!(POINT_FROM_ADDRESSES.iter().all(|k| point[k].is_null()) && point["live_bytes"].is_number());
        }
        assert_eq!((c["end"]["live_bytes"].clone(), l["end"]["live_bytes"].clone()), (200.into(), 200.into()));
        // A peak replayed from the made-up addresses (none stored) has none either.
        lr.peak_before_compaction = false;
        let l = process_json(&lr);
        assert!(l["peak"]["utilization"].is_null() && l["peak"]["live_bytes"] == 240);
    }
}
