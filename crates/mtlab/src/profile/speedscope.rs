//! The heap profile in speedscope's file format
//! (https://www.speedscope.app/file-format-schema.json), so a trace opens in
//! a viewer people already use: `speedscope FILE`, or the web app, which reads
//! the file locally. Chosen over the Firefox Profiler's format because this
//! one is documented by a schema and has one plain shape for weighted stacks;
//! four profiles in one file: allocated and in-use bytes and objects.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{json, Value};

use super::data::ProfileData;
use super::flame::FlameValue;
use super::pprof::ExportError;
use crate::symbolize::Symbolizer;

/// Frames shared by the profiles: index by (name, file, line).
#[derive(Default)]
struct Frames {
    index: HashMap<(String, Option<String>, Option<u32>), usize>,
    list: Vec<Value>,
}

impl Frames {
    fn id(&mut self, name: String, file: Option<String>, line: Option<u32>) -> usize {
        let key = (name, file, line);
        if let Some(&i) = self.index.get(&key) {
            return i;
        }
        let mut f = json!({ "name": key.0 });
        if let Some(file) = &key.1 {
            f["file"] = json!(file);
        }
        if let Some(line) = key.2 {
            f["line"] = json!(line);
        }
        self.list.push(f);
        self.index.insert(key, self.list.len() - 1);
        self.list.len() - 1
    }
}

/// The document: one "sampled" profile per value, stacks outermost first,
/// each stack weighted by its (estimated or exact) value.
pub fn document(profile: &ProfileData, symbolizer: &mut Symbolizer, name: &str) -> Value {
    let mut frames = Frames::default();
    // Each pc's frames (inlined ones too), outermost first.
    let mut of_pc: HashMap<u64, Vec<usize>> = HashMap::new();
    let stacks: Vec<Vec<usize>> = profile
        .samples
        .iter()
        .map(|s| {
            let mut stack = Vec::new();
            for &pc in s.pcs.iter().rev() {
                let ids = of_pc.entry(pc).or_insert_with(|| {
                    symbolizer.symbolize(pc).iter().rev().map(|f| frames.id(f.name_or_location(), f.file.clone(), f.line)).collect()
                });
                stack.extend(ids.iter().copied());
            }
            if stack.is_empty() {
                stack.push(frames.id(super::flame::EMPTY_STACK.to_string(), None, None));
            }
            stack
        })
        .collect();
    let values = [FlameValue::AllocBytes, FlameValue::InuseBytes, FlameValue::AllocObjects, FlameValue::InuseObjects];
    let profiles: Vec<Value> = values
        .iter()
        .map(|&v| {
            let (mut samples, mut weights) = (Vec::new(), Vec::new());
            for (s, stack) in profile.samples.iter().zip(&stacks) {
                let w = v.of(s).round();
                if w > 0.0 {
                    samples.push(stack.clone());
                    weights.push(w as u64);
                }
            }
            let total: u64 = weights.iter().sum();
            json!({
                "type": "sampled",
                "name": format!("{name}: {}", v.description()),
                "unit": if v.unit() == "bytes" { "bytes" } else { "none" },
                "startValue": 0,
                "endValue": total,
                "samples": samples,
                "weights": weights,
            })
        })
        .collect();
    json!({
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "shared": { "frames": frames.list },
        "profiles": profiles,
        "name": name,
        "activeProfileIndex": 0,
        "exporter": format!("mtlab {}", env!("CARGO_PKG_VERSION")),
    })
}

/// Writes the document to `out`.
pub fn write_speedscope(profile: &ProfileData, symbolizer: &mut Symbolizer, name: &str, out: &Path) -> Result<(), ExportError> {
    let doc = document(profile, symbolizer, name);
    let bytes = serde_json::to_vec(&doc).map_err(|e| ExportError::write(out, std::io::Error::other(e)))?;
    crate::platform::safe_fs::write_replacing(out, &bytes, 0o666).map_err(|e| ExportError::write(out, e))
}
