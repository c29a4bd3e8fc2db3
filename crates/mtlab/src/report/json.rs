//! `--json`: one JSON object. Its top level is the first process reported
//! (the root, unless `--pid`/`--comm` left it out; the keys of
//! docs/metrics.md), the other reported processes under `children`, every
//! traced process under `processes_index` and the child traces that could not
//! be read under `missing_traces`, the processes that got no trace file under
//! `untraced_processes`.

use serde_json::Value;

use super::RunReport;

pub fn to_json(run: &RunReport) -> Value {
    let mut iter = run.processes.iter();
    let mut root = match iter.next() {
        Some(p) => serde_json::to_value(p).expect("reports serialize"),
        None => serde_json::json!({}),
    };
    let children: Vec<Value> = iter.map(|p| serde_json::to_value(p).expect("reports serialize")).collect();
    root["children"] = Value::Array(children);
    root["processes_index"] = serde_json::to_value(&run.index).expect("index rows serialize");
    root["missing_traces"] = serde_json::to_value(&run.missing).expect("missing traces serialize");
    if let Some(l) = &run.live {
        root["live_profile"] = serde_json::to_value(l).expect("live status serializes");
    }
    root["untraced_processes"] = run.untraced.as_ref().map_or(serde_json::json!({"count": 0, "named": []}), |u| u.to_json());
    root
}
