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

/// One process's object: the model as it is, with the figures a sampled
/// trace does not have set to `null`.
fn process_json(p: &ProcessReport) -> Value {
    let mut v = serde_json::to_value(p).expect("reports serialize");
    if p.profile.is_some() {
        for key in NOT_IN_A_SAMPLED_TRACE {
            v[key] = Value::Null;
        }
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
