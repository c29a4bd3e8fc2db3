//! NEW − BASE as one pprof profile: each matched site a sample whose values
//! are NEW's figures less BASE's (negative where they fell), as `go tool
//! pprof -diff_base BASE NEW` makes of two profiles — so `go tool pprof
//! -top FILE` lists the largest changes. Locations are symbolic (function,
//! file and line; no address), the frames the diff matched on: two builds'
//! sites fall on one location.
//!
//! Sample types, in this order: `alloc_objects/count`, `alloc_space/bytes`,
//! `inuse_objects/count` and `inuse_space/bytes` (live at the end: the
//! leaks), `peak_inuse_space/bytes` (live at the heap's peak; 0 where a
//! side has no peak), `temporary_objects/count`. The default is
//! `alloc_space`.

use std::collections::HashMap;
use std::path::Path;

use prost::Message;

use super::sites::{KeyFrame, SiteChange};
use super::PairDiff;
use crate::profile::pprof::{proto, write_gzipped, ExportError, Strings};

const SAMPLE_TYPES: [(&str, &str); 6] = [
    ("alloc_objects", "count"),
    ("alloc_space", "bytes"),
    ("inuse_objects", "count"),
    ("inuse_space", "bytes"),
    ("peak_inuse_space", "bytes"),
    ("temporary_objects", "count"),
];

fn values(c: &SiteChange) -> Vec<i64> {
    vec![c.calls(), c.bytes(), c.leaked_objects(), c.leaked_bytes(), c.peak_bytes().unwrap_or(0), c.temporary().unwrap_or(0)]
}

/// The profile of the changes of `p`'s sites.
pub fn diff_profile(p: &PairDiff) -> proto::Profile {
    let mut strings = Strings::new();
    let sample_type = SAMPLE_TYPES
        .iter()
        .map(|(t, u)| proto::ValueType { r#type: strings.intern(t), unit: strings.intern(u) })
        .collect();
    let default_sample_type = strings.intern("alloc_space");
    let mut functions: Vec<proto::Function> = Vec::new();
    let mut function_ids: HashMap<(String, String), u64> = HashMap::new();
    let mut locations: Vec<proto::Location> = Vec::new();
    let mut location_ids: HashMap<&KeyFrame, u64> = HashMap::new();
    let mut samples = Vec::with_capacity(p.changed().len());
    for c in p.changed() {
        let mut location_id = Vec::with_capacity(c.frames.len());
        for f in &c.frames {
            if let Some(&id) = location_ids.get(f) {
                location_id.push(id);
                continue;
            }
            let name = f.function.clone().or_else(|| f.location.clone()).unwrap_or_default();
            let file = f.file.clone().unwrap_or_default();
            let next = functions.len() as u64 + 1;
            let function_id = *function_ids.entry((name.clone(), file.clone())).or_insert_with(|| {
                let n = strings.intern(&name);
                functions.push(proto::Function { id: next, name: n, system_name: n, filename: strings.intern(&file), start_line: 0 });
                next
            });
            let id = locations.len() as u64 + 1;
            locations.push(proto::Location {
                id,
                mapping_id: 0,
                address: 0,
                line: vec![proto::Line { function_id, line: f.line.map_or(0, i64::from), column: 0 }],
                is_folded: false,
            });
            location_ids.insert(f, id);
            location_id.push(id);
        }
        samples.push(proto::Sample { location_id, value: values(c), label: Vec::new() });
    }
    proto::Profile {
        sample_type,
        sample: samples,
        location: locations,
        function: functions,
        string_table: strings.table,
        default_sample_type,
        ..Default::default()
    }
}

/// Writes `diff_profile(p)` to `out`, gzip-compressed.
pub fn write(p: &PairDiff, out: &Path) -> Result<(), ExportError> {
    write_gzipped(&diff_profile(p).encode_to_vec(), out)
}
