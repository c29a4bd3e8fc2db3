//! A heap profile as an OTLP profiles request (`profiles/v1development`,
//! proto v1.10.0): made from the pprof message `profile::pprof` builds, so
//! the stacks, locations, functions, mappings and per-stack labels are the
//! pprof export's own, symbolized once.
//!
//! Layout (OTLP keeps one sample type per `Profile`):
//! * one `ResourceProfiles` (the process), one `ScopeProfiles` (mtlab), and
//!   in it four `Profile`s, in pprof's order: `alloc_objects/count`,
//!   `alloc_space/bytes`, `inuse_objects/count`, `inuse_space/bytes`; each
//!   with the pprof profile's time, duration, `period_type` `space/bytes`
//!   and `period` (the mean sampling interval; 0 for a full trace);
//! * every table in the request's one `ProfilesDictionary`, index 0 being
//!   the empty entry OTLP requires: index i > 0 of the mapping, location and
//!   function tables is pprof's id i, and strings keep pprof's indices;
//! * a profile's samples are the stacks whose value of its type is not 0,
//!   each with one value; a stack's attributes are its pprof labels (the
//!   95 % interval of a sampled trace: `alloc_space_low`, …, `inuse: not
//!   sampled`, `objects: interval unreliable …`) and `allocator`.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::profiles::v1development as otlp;
use opentelemetry_proto::tonic::resource::v1::Resource;

use crate::profile::pprof::{bound_label_values, proto as pprof, round_i64, LabelValue};
use crate::profile::ProfileData;

/// The instrumentation scope every request names.
pub fn scope() -> InstrumentationScope {
    InstrumentationScope { name: "mtlab".into(), version: env!("CARGO_PKG_VERSION").into(), ..Default::default() }
}

/// The dictionary's attribute table: each distinct (key, value, unit) once.
struct Attributes {
    table: Vec<otlp::KeyValueAndUnit>,
    index: HashMap<(i32, String, i32), i32>,
}

impl Attributes {
    fn new() -> Self {
        Attributes { table: vec![otlp::KeyValueAndUnit::default()], index: HashMap::new() }
    }

    fn intern(&mut self, key: i32, value: any_value::Value, unit: i32) -> i32 {
        let id = (key, format!("{value:?}"), unit);
        if let Some(&i) = self.index.get(&id) {
            return i;
        }
        let i = self.table.len() as i32;
        self.table.push(otlp::KeyValueAndUnit { key_strindex: key, value: Some(AnyValue { value: Some(value) }), unit_strindex: unit });
        self.index.insert(id, i);
        i
    }
}

/// A string index of pprof (i64) as OTLP's (i32); a table that large would
/// not be sent anyway.
fn idx(i: i64) -> i32 {
    i32::try_from(i).unwrap_or(0)
}

/// 16 random bytes: a profile id (all zeros is invalid).
fn profile_id() -> Vec<u8> {
    let mut id = Vec::with_capacity(16);
    for _ in 0..2 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
        id.extend_from_slice(&(h.finish() | 1).to_le_bytes());
    }
    id
}

/// The OTLP request for pprof profile `p`, of the process `resource`
/// describes; `allocator` (the heap manager's name, if known) goes on every
/// sample. `data` is the profile `p` was made from (its samples in `p`'s
/// order): a stack it splits by thread becomes one sample per thread, with
/// the thread's values and `thread.id`.
pub fn request(p: &pprof::Profile, data: &ProfileData, resource: Resource, allocator: Option<&str>) -> ExportProfilesServiceRequest {
    let mut strings = p.string_table.clone();
    if strings.is_empty() {
        strings.push(String::new());
    }
    let mut index: HashMap<String, i32> = HashMap::new();
    for (i, x) in strings.iter().enumerate().rev() {
        index.insert(x.clone(), i as i32);
    }
    let mut intern = |s: &str| -> i32 {
        *index.entry(s.to_string()).or_insert_with(|| {
            strings.push(s.to_string());
            strings.len() as i32 - 1
        })
    };
    let mut attrs = Attributes::new();
    let allocator_attr = allocator.map(|a| attrs.intern(intern("allocator"), any_value::Value::StringValue(a.to_string()), 0));
    let thread_key = intern("thread.id");

    let mut mapping_table = vec![otlp::Mapping::default()];
    mapping_table.extend(p.mapping.iter().map(|m| otlp::Mapping {
        memory_start: m.memory_start,
        memory_limit: m.memory_limit,
        file_offset: m.file_offset,
        filename_strindex: idx(m.filename),
        attribute_indices: Vec::new(),
    }));
    let mut function_table = vec![otlp::Function::default()];
    function_table.extend(p.function.iter().map(|f| otlp::Function {
        name_strindex: idx(f.name),
        system_name_strindex: idx(f.system_name),
        filename_strindex: idx(f.filename),
        start_line: f.start_line,
    }));
    let mut location_table = vec![otlp::Location::default()];
    location_table.extend(p.location.iter().map(|l| otlp::Location {
        mapping_index: i32::try_from(l.mapping_id).unwrap_or(0),
        address: l.address,
        lines: l
            .line
            .iter()
            .map(|x| otlp::Line { function_index: i32::try_from(x.function_id).unwrap_or(0), line: x.line, column: x.column })
            .collect(),
        attribute_indices: Vec::new(),
    }));

    // One stack per sample (pprof has one sample per distinct stack), and its attributes.
    let mut stack_table = vec![otlp::Stack::default()];
    let mut sample_attrs = Vec::with_capacity(p.sample.len());
    for s in &p.sample {
        stack_table.push(otlp::Stack { location_indices: s.location_id.iter().map(|&id| i32::try_from(id).unwrap_or(0)).collect() });
        let mut a: Vec<i32> = s
            .label
            .iter()
            .map(|l| {
                let value = if l.str != 0 { any_value::Value::StringValue(p.string_table[l.str as usize].clone()) } else { any_value::Value::IntValue(l.num) };
                attrs.intern(idx(l.key), value, idx(l.num_unit))
            })
            .collect();
        a.extend(allocator_attr);
        sample_attrs.push(a);
    }

    // Each thread's part of a stack: the stack's attributes, or (a sampled
    // trace's) its own intervals in their place; then `thread.id`.
    let thread_sample_attrs: Vec<Vec<Vec<i32>>> = (0..p.sample.len())
        .map(|i| {
            let threads = data.samples.get(i).map(|d| &d.threads[..]).unwrap_or_default();
            threads
                .iter()
                .map(|t| {
                    let mut a = match &t.bounds {
                        None => sample_attrs[i].clone(),
                        Some(b) => {
                            let mut a: Vec<i32> = bound_label_values(b)
                                .into_iter()
                                .map(|(key, value)| match value {
                                    LabelValue::Num(n, unit) => attrs.intern(intern(&key), any_value::Value::IntValue(n), intern(unit)),
                                    LabelValue::Str(v) => attrs.intern(intern(&key), any_value::Value::StringValue(v.to_string()), 0),
                                })
                                .collect();
                            a.extend(allocator_attr);
                            a
                        }
                    };
                    a.push(attrs.intern(thread_key, any_value::Value::IntValue(t.tid.into()), 0));
                    a
                })
                .collect()
        })
        .collect();
    let period_type = p.period_type.as_ref().map(|t| otlp::ValueType { type_strindex: idx(t.r#type), unit_strindex: idx(t.unit) });
    let profiles = p
        .sample_type
        .iter()
        .enumerate()
        .map(|(k, t)| otlp::Profile {
            sample_type: Some(otlp::ValueType { type_strindex: idx(t.r#type), unit_strindex: idx(t.unit) }),
            samples: p
                .sample
                .iter()
                .enumerate()
                .filter(|(_, s)| s.value.get(k).is_some_and(|&v| v != 0))
                .flat_map(|(i, s)| {
                    let sample = |attribute_indices: Vec<i32>, v: i64| otlp::Sample {
                        stack_index: i as i32 + 1,
                        attribute_indices,
                        link_index: 0,
                        values: vec![v],
                        timestamps_unix_nano: Vec::new(),
                    };
                    match data.samples.get(i).map(|d| &d.threads[..]).unwrap_or_default() {
                        [] => vec![sample(sample_attrs[i].clone(), s.value[k])],
                        threads => threads
                            .iter()
                            .zip(&thread_sample_attrs[i])
                            .filter_map(|(t, a)| {
                                let v = round_i64([t.alloc_objects, t.alloc_bytes, t.inuse_objects, t.inuse_bytes][k.min(3)]);
                                (v != 0).then(|| sample(a.clone(), v))
                            })
                            .collect(),
                    }
                })
                .collect(),
            time_unix_nano: u64::try_from(p.time_nanos).unwrap_or(0),
            duration_nano: u64::try_from(p.duration_nanos).unwrap_or(0),
            period_type,
            period: p.period,
            profile_id: profile_id(),
            ..Default::default()
        })
        .collect();

    ExportProfilesServiceRequest {
        resource_profiles: vec![otlp::ResourceProfiles {
            resource: Some(resource),
            scope_profiles: vec![otlp::ScopeProfiles { scope: Some(scope()), profiles, schema_url: String::new() }],
            schema_url: String::new(),
        }],
        dictionary: Some(otlp::ProfilesDictionary {
            mapping_table,
            location_table,
            function_table,
            link_table: vec![otlp::Link::default()],
            string_table: strings,
            attribute_table: attrs.table,
            stack_table,
        }),
    }
}

/// A resource attribute with a string value.
pub fn kv_str(key: &str, value: &str) -> KeyValue {
    KeyValue { key: key.into(), value: Some(AnyValue { value: Some(any_value::Value::StringValue(value.into())) }), ..Default::default() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::data::{Bounds, ProfileData, StackSample};
    use crate::profile::pprof::tests::{self_maps, test_pcs};
    use crate::profile::pprof::to_pprof_profile;

    fn string_of(d: &otlp::ProfilesDictionary, i: i32) -> &str {
        &d.string_table[i as usize]
    }

    #[test]
    fn four_profiles_share_one_dictionary_and_keep_pprof_values() {
        let (leaf, root) = test_pcs();
        let bounds = [
            Bounds { low: 1.0, high: 5.0, samples: 2, unreliable: false },
            Bounds { low: 20000.0, high: 4e6, samples: 2, unreliable: false },
            Bounds { low: 0.0, high: 3.0, samples: 0, unreliable: false },
            Bounds { low: 0.0, high: 1.9e6, samples: 0, unreliable: false },
        ];
        let data = ProfileData {
            samples: vec![
                StackSample { pcs: vec![leaf, root], alloc_objects: 3.0, alloc_bytes: 3000.0, inuse_objects: 1.0, inuse_bytes: 1000.0, bounds: None, threads: Vec::new() },
                StackSample { pcs: vec![root], alloc_objects: 2.0, alloc_bytes: 700.0, inuse_objects: 0.0, inuse_bytes: 0.0, bounds: Some(bounds), threads: Vec::new() },
            ],
            maps: self_maps(),
            period_bytes: 4096,
            start_ns: 1_700_000_000_000_000_000,
            duration_ns: 5_000_000,
        };
        // Not `data.symbolizer()`: it names no frame of a file changed after the (made-up) recording.
        let mut sym = crate::symbolize::Symbolizer::new(&data.maps);
        let p = to_pprof_profile(&data, &mut sym);
        let req = request(&p, &data, Resource::default(), Some("glibc"));
        let d = req.dictionary.as_ref().unwrap();
        // Index 0 of every table is the empty entry.
        assert_eq!(d.string_table[0], "");
        assert_eq!(d.mapping_table[0], otlp::Mapping::default());
        assert_eq!(d.location_table[0], otlp::Location::default());
        assert_eq!(d.function_table[0], otlp::Function::default());
        assert_eq!(d.stack_table[0], otlp::Stack::default());
        assert_eq!(d.attribute_table[0], otlp::KeyValueAndUnit::default());
        let profiles = &req.resource_profiles[0].scope_profiles[0].profiles;
        let types: Vec<(&str, &str)> = profiles
            .iter()
            .map(|x| {
                let t = x.sample_type.as_ref().unwrap();
                (string_of(d, t.type_strindex), string_of(d, t.unit_strindex))
            })
            .collect();
        assert_eq!(types, crate::profile::pprof::SAMPLE_TYPES.to_vec());
        let values: Vec<Vec<i64>> = profiles.iter().map(|x| x.samples.iter().map(|s| s.values[0]).collect()).collect();
        // Zero values are left out: the second stack has no in-use objects or bytes.
        assert_eq!(values, vec![vec![3, 2], vec![3000, 700], vec![1], vec![1000]]);
        for x in profiles {
            assert_eq!(x.period, 4096);
            assert_eq!(x.time_unix_nano, 1_700_000_000_000_000_000);
            assert_eq!(x.duration_nano, 5_000_000);
            assert_eq!(x.profile_id.len(), 16);
            assert_ne!(x.profile_id, vec![0; 16]);
        }
        // The leaf stack: its leaf location resolves to the leaf function.
        let s = &profiles[1].samples[0];
        let stack = &d.stack_table[s.stack_index as usize];
        let locs: Vec<u64> = stack.location_indices.iter().map(|&i| d.location_table[i as usize].address).collect();
        assert_eq!(locs, vec![leaf, root]);
        let leaf_loc = &d.location_table[stack.location_indices[0] as usize];
        let f = &d.function_table[leaf_loc.lines.last().unwrap().function_index as usize];
        assert!(string_of(d, f.name_strindex).contains("mtlab_test_leaf_alpha"));
        assert_ne!(leaf_loc.mapping_index, 0);
        // Attributes: allocator on both; the interval labels on the sampled one only.
        let attr = |i: i32| {
            let a = &d.attribute_table[i as usize];
            (string_of(d, a.key_strindex).to_string(), a.value.clone().unwrap().value.unwrap(), string_of(d, a.unit_strindex).to_string())
        };
        let first: Vec<_> = s.attribute_indices.iter().map(|&i| attr(i)).collect();
        assert_eq!(first, vec![("allocator".into(), any_value::Value::StringValue("glibc".into()), String::new())]);
        let second: Vec<_> = profiles[1].samples[1].attribute_indices.iter().map(|&i| attr(i)).collect();
        assert!(second.contains(&("alloc_space_low".into(), any_value::Value::IntValue(20000), "bytes".into())), "{second:?}");
        assert!(second.contains(&("inuse_space_high".into(), any_value::Value::IntValue(1_900_000), "bytes".into())), "{second:?}");
        assert!(second.contains(&("inuse".into(), any_value::Value::StringValue("not sampled".into()), String::new())), "{second:?}");
        assert!(second.contains(&("allocator".into(), any_value::Value::StringValue("glibc".into()), String::new())), "{second:?}");
        // The encoded request decodes back to itself.
        use prost::Message;
        let bytes = req.encode_to_vec();
        assert_eq!(ExportProfilesServiceRequest::decode(&bytes[..]).unwrap(), req);
    }

    #[test]
    fn a_stack_split_by_thread_is_one_sample_per_thread_with_its_id() {
        let (leaf, root) = test_pcs();
        let share = |tid, objects: f64, inuse: f64| crate::profile::ThreadShare { tid, alloc_objects: objects, alloc_bytes: objects * 100.0, inuse_objects: inuse, inuse_bytes: inuse * 100.0, bounds: None };
        let data = ProfileData {
            samples: vec![StackSample {
                pcs: vec![leaf, root],
                alloc_objects: 3.0,
                alloc_bytes: 300.0,
                inuse_objects: 1.0,
                inuse_bytes: 100.0,
                bounds: None,
                threads: vec![share(7, 1.0, 1.0), share(9, 2.0, 0.0)],
            }],
            maps: self_maps(),
            ..Default::default()
        };
        let p = to_pprof_profile(&data, &mut crate::symbolize::Symbolizer::new(&data.maps));
        let req = request(&p, &data, Resource::default(), None);
        let d = req.dictionary.as_ref().unwrap();
        let profiles = &req.resource_profiles[0].scope_profiles[0].profiles;
        let by_thread = |k: usize| -> Vec<(i64, i64)> {
            profiles[k]
                .samples
                .iter()
                .map(|s| {
                    assert_eq!(s.stack_index, 1, "every thread's sample is the one stack");
                    let tid = s.attribute_indices.iter().map(|&i| &d.attribute_table[i as usize]).find(|a| string_of(d, a.key_strindex) == "thread.id");
                    match tid.and_then(|a| a.value.clone()).and_then(|v| v.value) {
                        Some(any_value::Value::IntValue(t)) => (t, s.values[0]),
                        other => panic!("no thread.id: {other:?}"),
                    }
                })
                .collect()
        };
        assert_eq!(by_thread(0), vec![(7, 1), (9, 2)]);
        assert_eq!(by_thread(1), vec![(7, 100), (9, 200)]);
        // Thread 9 holds nothing at the end: no in-use sample of its own.
        assert_eq!(by_thread(2), vec![(7, 1)]);
        assert_eq!(by_thread(3), vec![(7, 100)]);
    }
}
