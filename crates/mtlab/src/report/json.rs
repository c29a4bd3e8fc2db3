//! `--json`: one JSON object. Its top level is the root process's report
//! (the keys of docs/metrics.md), with the other processes under `children`.

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
    root
}
