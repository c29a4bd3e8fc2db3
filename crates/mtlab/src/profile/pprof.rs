//! Export of a [`ProfileData`] as a pprof profile: the gzip-compressed protocol buffer of
//! `github.com/google/pprof` (`proto/profile.proto`), readable by `go tool pprof`,
//! `pprof`, and the many viewers that accept it.
//!
//! Layout of the profile written here:
//!
//! * four sample types, in this order: `alloc_objects/count`, `alloc_space/bytes`,
//!   `inuse_objects/count`, `inuse_space/bytes`; the default is `inuse_space`;
//! * `period_type` `space/bytes` with `period` = the mean sampling interval in bytes
//!   (0 for a full trace);
//! * one `Location` per distinct pc, `address` = the pc as recorded (a return address),
//!   with one `Line` per frame, inlined frames first (innermost first, as pprof expects),
//!   and the `Mapping` holding the pc (looked up at `pc - 1`, as the symbolizer does);
//! * one `Function` per distinct (name, file); a frame whose function is unknown gets a
//!   function named like its display form (`module+0xoffset`, or `0xpc` outside every
//!   mapping), so that it stays recognizable in pprof's views;
//! * the values are the profile's (possibly fractional) estimates rounded to integers.
//!
//! The protobuf messages are hand-written [`prost`] structs (module [`proto`]) so that no
//! `protoc` or build script is needed.

use std::collections::HashMap;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use flate2::write::GzEncoder;
use flate2::Compression;
use prost::Message;

use super::data::{Bounds, ProfileData};
use crate::symbolize::{Frame, Mapping, Symbolizer};

/// Errors of the profile exporters (pprof, folded stacks, flame graphs).
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The output file could not be created.
    #[error("cannot create {}: {source}", path.display())]
    Create {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Writing (or flushing, or compressing into) the output file failed.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The flame graph renderer failed.
    #[error("cannot render the flame graph for {}: {source}", path.display())]
    Render {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Nothing to draw: no stack has a nonzero value of the kind asked for.
    #[error("cannot draw {}: the profile has no {what}", path.display())]
    Empty { path: PathBuf, what: String },
}

impl ExportError {
    pub(crate) fn create(path: &Path, source: io::Error) -> Self {
        ExportError::Create {
            path: path.to_path_buf(),
            source,
        }
    }
    pub(crate) fn write(path: &Path, source: io::Error) -> Self {
        ExportError::Write {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// The messages of pprof's `profile.proto` (package `perftools.profiles`), hand-written.
/// Field numbers and types follow the `.proto` file exactly; repeated scalars are packed
/// (the proto3 default).
pub mod proto {
    /// `perftools.profiles.Profile`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        /// Index 0 must be "".
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        #[prost(int64, tag = "7")]
        pub drop_frames: i64,
        #[prost(int64, tag = "8")]
        pub keep_frames: i64,
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        #[prost(int64, tag = "12")]
        pub period: i64,
        #[prost(int64, repeated, tag = "13")]
        pub comment: Vec<i64>,
        /// String index of the type of the preferred sample value.
        #[prost(int64, tag = "14")]
        pub default_sample_type: i64,
        #[prost(int64, tag = "15")]
        pub doc_url: i64,
    }

    /// `perftools.profiles.ValueType`: string indices of a type and its unit.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    /// `perftools.profiles.Sample`: `location_id[0]` is the leaf.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    /// `perftools.profiles.Label`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        #[prost(int64, tag = "1")]
        pub key: i64,
        #[prost(int64, tag = "2")]
        pub str: i64,
        #[prost(int64, tag = "3")]
        pub num: i64,
        #[prost(int64, tag = "4")]
        pub num_unit: i64,
    }

    /// `perftools.profiles.Mapping`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mapping {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub memory_start: u64,
        #[prost(uint64, tag = "3")]
        pub memory_limit: u64,
        #[prost(uint64, tag = "4")]
        pub file_offset: u64,
        #[prost(int64, tag = "5")]
        pub filename: i64,
        #[prost(int64, tag = "6")]
        pub build_id: i64,
        #[prost(bool, tag = "7")]
        pub has_functions: bool,
        #[prost(bool, tag = "8")]
        pub has_filenames: bool,
        #[prost(bool, tag = "9")]
        pub has_line_numbers: bool,
        #[prost(bool, tag = "10")]
        pub has_inline_frames: bool,
    }

    /// `perftools.profiles.Location`: `line[0]` is the innermost inlined frame.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        #[prost(uint64, tag = "3")]
        pub address: u64,
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
        #[prost(bool, tag = "5")]
        pub is_folded: bool,
    }

    /// `perftools.profiles.Line`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
        #[prost(int64, tag = "2")]
        pub line: i64,
        #[prost(int64, tag = "3")]
        pub column: i64,
    }

    /// `perftools.profiles.Function`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "2")]
        pub name: i64,
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        #[prost(int64, tag = "4")]
        pub filename: i64,
        #[prost(int64, tag = "5")]
        pub start_line: i64,
    }
}

/// The sample types, in the order of every sample's values.
pub const SAMPLE_TYPES: [(&str, &str); 4] = [
    ("alloc_objects", "count"),
    ("alloc_space", "bytes"),
    ("inuse_objects", "count"),
    ("inuse_space", "bytes"),
];

/// The sample type pprof shows when none is asked for.
pub const DEFAULT_SAMPLE_TYPE: &str = "inuse_space";

/// Rounds an estimate to the nearest integer (saturating; NaN gives 0).
pub(crate) fn round_i64(x: f64) -> i64 {
    // `as` saturates and maps NaN to 0.
    x.round() as i64
}

/// A sampled stack's 95 % intervals as numeric labels (`alloc_space_low`,
/// `alloc_space_high`, …, shown by `pprof -tags`), and `inuse: not sampled`
/// when none of the stack's live blocks was sampled: its in-use values are
/// then 0 but could be up to the `_high` labels. `objects: interval
/// unreliable (mixed block sizes)` when the stack's samples mix block sizes,
/// so its `*_objects_*` labels are not to be trusted (its bytes are).
fn bound_labels(bounds: Option<&[Bounds; 4]>, strings: &mut Strings) -> Vec<proto::Label> {
    let Some(bounds) = bounds else { return Vec::new() };
    bound_label_values(bounds)
        .into_iter()
        .map(|(key, value)| {
            let key = strings.intern(&key);
            match value {
                LabelValue::Num(num, unit) => proto::Label { key, str: 0, num, num_unit: strings.intern(unit) },
                LabelValue::Str(v) => proto::Label { key, str: strings.intern(v), num: 0, num_unit: 0 },
            }
        })
        .collect()
}

/// A label's value: a number with its unit, or a string.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum LabelValue {
    Num(i64, &'static str),
    Str(&'static str),
}

/// The labels [`bound_labels`] makes of `bounds`, as (key, value): the OTLP
/// export writes the same as attributes.
pub(crate) fn bound_label_values(bounds: &[Bounds; 4]) -> Vec<(String, LabelValue)> {
    let mut out = Vec::new();
    for ((kind, unit), b) in SAMPLE_TYPES.iter().zip(bounds) {
        for (end, x) in [("low", b.low), ("high", b.high)] {
            out.push((format!("{kind}_{end}"), LabelValue::Num(round_i64(x), unit)));
        }
    }
    if bounds[3].samples == 0 {
        out.push(("inuse".to_string(), LabelValue::Str("not sampled")));
    }
    if bounds.iter().any(|b| b.unreliable) {
        out.push(("objects".to_string(), LabelValue::Str(MIXED_SIZES_LABEL)));
    }
    out
}

/// The `objects` label of a stack whose object intervals are not trustworthy.
pub const MIXED_SIZES_LABEL: &str = "interval unreliable (mixed block sizes)";

/// The string table under construction: "" is index 0.
pub(crate) struct Strings {
    pub(crate) table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    pub(crate) fn new() -> Self {
        let mut s = Strings {
            table: Vec::new(),
            index: HashMap::new(),
        };
        s.intern("");
        s
    }

    pub(crate) fn intern(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// The name pprof shows for a frame: the function, or for an unresolved frame the same
/// `module+0xoffset` / `0xpc` form as [`Frame::display`].
fn frame_function_name(f: &Frame) -> String {
    f.name_or_location()
}

/// The pprof id of mapping `m`, added to `mappings` when new.
fn mapping_id_of(m: Mapping, mappings: &mut Vec<proto::Mapping>, ids: &mut HashMap<Mapping, u64>, strings: &mut Strings) -> u64 {
    if let Some(&id) = ids.get(&m) {
        return id;
    }
    let id = mappings.len() as u64 + 1;
    let filename = match m.file_path() {
        Some(p) => p.to_string(),
        None => m.path.clone(),
    };
    mappings.push(proto::Mapping {
        id,
        memory_start: m.start,
        memory_limit: m.end,
        file_offset: m.offset,
        filename: strings.intern(&filename),
        ..Default::default()
    });
    ids.insert(m, id);
    id
}

/// Builds the pprof message (not yet encoded) for `profile`.
pub fn to_pprof_profile(profile: &ProfileData, symbolizer: &mut Symbolizer) -> proto::Profile {
    let mut strings = Strings::new();
    let sample_type: Vec<proto::ValueType> = SAMPLE_TYPES
        .iter()
        .map(|(t, u)| proto::ValueType {
            r#type: strings.intern(t),
            unit: strings.intern(u),
        })
        .collect();
    let default_sample_type = strings.intern(DEFAULT_SAMPLE_TYPE);
    let period_type = proto::ValueType {
        r#type: strings.intern("space"),
        unit: strings.intern("bytes"),
    };

    let mut mappings: Vec<proto::Mapping> = Vec::new();
    let mut mapping_ids: HashMap<Mapping, u64> = HashMap::new();
    let mut locations: Vec<proto::Location> = Vec::new();
    let mut location_ids: HashMap<u64, u64> = HashMap::new();
    let mut functions: Vec<proto::Function> = Vec::new();
    let mut function_ids: HashMap<(String, String), u64> = HashMap::new();
    let mut samples = Vec::with_capacity(profile.samples.len());
    // pprof takes mapping 1 for the main binary ("File:" in `go tool pprof`):
    // the program's own code (its first file in the maps), not the library
    // the first sample happened to pass through.
    let program = profile.maps.iter().find_map(|m| m.file_path().map(str::to_string));
    if let Some(text) = profile.maps.iter().find(|m| m.is_executable() && m.file_path().map(str::to_string) == program) {
        if let Some(m) = symbolizer.module_of(text.start).cloned() {
            mapping_id_of(m, &mut mappings, &mut mapping_ids, &mut strings);
        }
    }

    for s in &profile.samples {
        let mut location_id = Vec::with_capacity(s.pcs.len());
        for &pc in &s.pcs {
            if let Some(&id) = location_ids.get(&pc) {
                location_id.push(id);
                continue;
            }
            // The mapping: the one the symbolizer used (it resolves overlapping snapshots
            // of the maps, the newest winning), looked up at `pc - 1` like the frames.
            let mapping_id = match symbolizer.module_of(pc.wrapping_sub(1)).cloned() {
                None => 0,
                Some(m) => mapping_id_of(m, &mut mappings, &mut mapping_ids, &mut strings),
            };
            let frames = symbolizer.symbolize(pc);
            let mut lines = Vec::with_capacity(frames.len());
            for f in &frames {
                let name = frame_function_name(f);
                let file = f.file.clone().unwrap_or_default();
                let key = (name, file);
                let function_id = match function_ids.get(&key) {
                    Some(&id) => id,
                    None => {
                        let id = functions.len() as u64 + 1;
                        let name = strings.intern(&key.0);
                        functions.push(proto::Function {
                            id,
                            name,
                            system_name: name,
                            filename: strings.intern(&key.1),
                            start_line: 0,
                        });
                        function_ids.insert(key, id);
                        id
                    }
                };
                lines.push(proto::Line {
                    function_id,
                    line: f.line.map_or(0, i64::from),
                    column: 0,
                });
            }
            if mapping_id != 0 {
                let m = &mut mappings[mapping_id as usize - 1];
                let resolved = frames.iter().any(|f| f.function.is_some());
                m.has_functions |= resolved;
                m.has_filenames |= frames.iter().any(|f| f.file.is_some());
                m.has_line_numbers |= frames.iter().any(|f| f.line.is_some());
                // Line numbers come from DWARF, which is also where inlining is resolved.
                m.has_inline_frames |= frames.iter().any(|f| f.line.is_some() || f.inlined);
            }
            let id = locations.len() as u64 + 1;
            locations.push(proto::Location {
                id,
                mapping_id,
                address: pc,
                line: lines,
                is_folded: false,
            });
            location_ids.insert(pc, id);
            location_id.push(id);
        }
        samples.push(proto::Sample {
            location_id,
            value: vec![
                round_i64(s.alloc_objects),
                round_i64(s.alloc_bytes),
                round_i64(s.inuse_objects),
                round_i64(s.inuse_bytes),
            ],
            label: bound_labels(s.bounds.as_ref(), &mut strings),
        });
    }

    proto::Profile {
        sample_type,
        sample: samples,
        mapping: mappings,
        location: locations,
        function: functions,
        string_table: strings.table,
        drop_frames: 0,
        keep_frames: 0,
        time_nanos: i64::try_from(profile.start_ns).unwrap_or(i64::MAX),
        duration_nanos: i64::try_from(profile.duration_ns).unwrap_or(i64::MAX),
        period_type: Some(period_type),
        period: i64::try_from(profile.period_bytes).unwrap_or(i64::MAX),
        comment: Vec::new(),
        default_sample_type,
        doc_url: 0,
    }
}

/// The encoded pprof protobuf of `profile`, uncompressed.
pub fn to_pprof_bytes(profile: &ProfileData, symbolizer: &mut Symbolizer) -> Vec<u8> {
    to_pprof_profile(profile, symbolizer).encode_to_vec()
}

/// Writes `profile` to `out` as a gzip-compressed pprof protobuf (what `go tool pprof`
/// reads; name it `*.pb.gz`).
pub fn write_pprof(
    profile: &ProfileData,
    symbolizer: &mut Symbolizer,
    out: &Path,
) -> Result<(), ExportError> {
    write_gzipped(&to_pprof_bytes(profile, symbolizer), out)
}

/// Writes an encoded pprof message to `out`, gzip-compressed.
pub(crate) fn write_gzipped(bytes: &[u8], out: &Path) -> Result<(), ExportError> {
    // Private, as the trace it comes from (its mappings' addresses undo
    // ASLR); written beside and renamed, so a link left at the name (`ctl
    // dump`'s default name is predictable) is not followed.
    let file = crate::platform::safe_fs::replace(out, 0o600).map_err(|e| ExportError::create(out, e))?;
    let mut gz = GzEncoder::new(BufWriter::new(file), Compression::default());
    gz.write_all(bytes)
        .map_err(|e| ExportError::write(out, e))?;
    let file = gz
        .finish()
        .map_err(|e| ExportError::write(out, e))?
        .into_inner()
        .map_err(|e| ExportError::write(out, e.into_error()))?;
    file.file().sync_all().map_err(|e| ExportError::write(out, e))?;
    file.commit().map_err(|e| ExportError::write(out, e))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::profile::data::StackSample;
    use crate::symbolize::parse_maps;
    use std::io::Read;
    use std::process::Command;

    /// Two distinct functions of the test binary whose pcs the test profiles use.
    #[inline(never)]
    pub(crate) fn mtlab_test_leaf_alpha(x: u64) -> u64 {
        std::hint::black_box(x.wrapping_mul(0x9e37_79b9_7f4a_7c15)) ^ 0x1111
    }

    #[inline(never)]
    pub(crate) fn mtlab_test_root_beta(x: u64) -> u64 {
        std::hint::black_box(mtlab_test_leaf_alpha(x ^ 0x2222).rotate_left(7)) + 3
    }

    /// pcs "inside" the two functions: return-address style (start + 1, so that the
    /// symbolizer's `pc - 1` lookup lands on the function's first byte).
    pub(crate) fn test_pcs() -> (u64, u64) {
        let leaf = mtlab_test_leaf_alpha as fn(u64) -> u64 as usize as u64 + 1;
        let root = mtlab_test_root_beta as fn(u64) -> u64 as usize as u64 + 1;
        assert_ne!(leaf, root);
        (leaf, root)
    }

    pub(crate) fn self_maps() -> Vec<Mapping> {
        parse_maps(&std::fs::read_to_string("/proc/self/maps").unwrap())
    }

    /// leaf <- root: 3 MiB in 3 objects (1 MiB live); root alone: 1 MiB in 1 object.
    fn test_profile() -> (ProfileData, u64, u64) {
        let (leaf, root) = test_pcs();
        let profile = ProfileData {
            samples: vec![
                StackSample {
                    pcs: vec![leaf, root],
                    alloc_objects: 3.0,
                    alloc_bytes: 3145728.4,
                    inuse_objects: 1.0,
                    inuse_bytes: 1048576.0,
                    bounds: None,
                    threads: Vec::new(),
                },
                StackSample {
                    pcs: vec![root],
                    alloc_objects: 1.2,
                    alloc_bytes: 1048575.6,
                    inuse_objects: 0.4,
                    inuse_bytes: 0.0,
                    bounds: Some([
                        Bounds { low: 0.2, high: 5.1, samples: 1, unreliable: true },
                        Bounds { low: 20000.0, high: 4e6, samples: 1, unreliable: false },
                        Bounds { low: 0.0, high: 3.5, samples: 0, unreliable: true },
                        Bounds { low: 0.0, high: 1.9e6, samples: 0, unreliable: false },
                    ]),
                    threads: Vec::new(),
                },
            ],
            maps: self_maps(),
            period_bytes: 524288,
            start_ns: 1_700_000_000_000_000_000,
            duration_ns: 2_500_000_000,
        };
        (profile, leaf, root)
    }

    #[test]
    fn profile_pprof_roundtrip_and_go_tool() {
        let (profile, leaf, root) = test_profile();
        let mut sym = Symbolizer::new(&profile.maps);
        let leaf_frames = sym.symbolize(leaf);
        let leaf_name = leaf_frames
            .last()
            .unwrap()
            .function
            .clone()
            .unwrap_or_default();
        assert!(
            leaf_name.contains("mtlab_test_leaf_alpha"),
            "{leaf_frames:#?}"
        );

        // Decode the uncompressed bytes back.
        let bytes = to_pprof_bytes(&profile, &mut sym);
        let p = proto::Profile::decode(&bytes[..]).unwrap();
        let st = &p.string_table;
        assert_eq!(st[0], "");
        let types: Vec<(&str, &str)> = p
            .sample_type
            .iter()
            .map(|v| (st[v.r#type as usize].as_str(), st[v.unit as usize].as_str()))
            .collect();
        assert_eq!(types, SAMPLE_TYPES.to_vec());
        assert_eq!(st[p.default_sample_type as usize], "inuse_space");
        let pt = p.period_type.as_ref().unwrap();
        assert_eq!(
            (
                st[pt.r#type as usize].as_str(),
                st[pt.unit as usize].as_str()
            ),
            ("space", "bytes")
        );
        assert_eq!(p.period, 524288);
        assert_eq!(p.time_nanos, 1_700_000_000_000_000_000);
        assert_eq!(p.duration_nanos, 2_500_000_000);
        assert_eq!(p.sample.len(), 2);
        assert_eq!(p.sample[0].value, vec![3, 3145728, 1, 1048576]);
        assert_eq!(p.sample[1].value, vec![1, 1048576, 0, 0]);
        // Exact figures carry no labels; estimates carry their intervals, and
        // an in-use value with no sample behind it says so.
        assert!(p.sample[0].label.is_empty());
        let labels: Vec<(String, String, i64, String)> = p.sample[1]
            .label
            .iter()
            .map(|l| (st[l.key as usize].clone(), st[l.str as usize].clone(), l.num, st[l.num_unit as usize].clone()))
            .collect();
        assert_eq!(labels.len(), 10, "{labels:?}");
        // Object intervals on a stack of mixed block sizes say they are not to be trusted.
        assert!(labels.contains(&("objects".into(), MIXED_SIZES_LABEL.into(), 0, "".into())), "{labels:?}");
        assert!(labels.contains(&("alloc_space_low".into(), "".into(), 20000, "bytes".into())), "{labels:?}");
        assert!(labels.contains(&("inuse_space_high".into(), "".into(), 1_900_000, "bytes".into())), "{labels:?}");
        assert!(labels.contains(&("inuse_objects_high".into(), "".into(), 4, "count".into())), "{labels:?}");
        assert!(labels.contains(&("inuse".into(), "not sampled".into(), 0, "".into())), "{labels:?}");
        // Each distinct string once.
        let mut uniq = st.clone();
        uniq.sort();
        uniq.dedup();
        assert_eq!(uniq.len(), st.len());

        // One location per distinct pc, leaf first in the sample.
        assert_eq!(p.location.len(), 2);
        let loc = |id: u64| p.location.iter().find(|l| l.id == id).unwrap();
        assert_eq!(loc(p.sample[0].location_id[0]).address, leaf);
        assert_eq!(loc(p.sample[0].location_id[1]).address, root);
        assert_eq!(p.sample[1].location_id, vec![p.sample[0].location_id[1]]);
        let exe = std::env::current_exe().unwrap();
        let exe = std::fs::canonicalize(exe).unwrap();
        for l in &p.location {
            assert_ne!(l.mapping_id, 0);
            let m = &p.mapping[l.mapping_id as usize - 1];
            assert_eq!(m.id, l.mapping_id);
            assert!(m.memory_start < l.address && l.address <= m.memory_limit);
            assert_eq!(st[m.filename as usize], exe.to_str().unwrap());
            assert!(m.has_functions);
            assert!(!l.line.is_empty());
            // The outermost line is the real function; its name is the frame's.
            let f = &p.function[l.line.last().unwrap().function_id as usize - 1];
            let name = &st[f.name as usize];
            let want = if l.address == leaf {
                "mtlab_test_leaf_alpha"
            } else {
                "mtlab_test_root_beta"
            };
            assert!(name.contains(want), "{name}");
        }
        // Functions deduplicated by (name, file).
        let mut keys: Vec<(i64, i64)> = p.function.iter().map(|f| (f.name, f.filename)).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), p.function.len());

        // The gzip file holds the same bytes.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("heap.pb.gz");
        write_pprof(&profile, &mut sym, &path).unwrap();
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap())
            .read_to_end(&mut raw)
            .unwrap();
        assert_eq!(raw, bytes);

        // go tool pprof reads it.
        let go = ["/usr/local/go/bin/go", "go"].into_iter().find(|g| {
            Command::new(g)
                .arg("version")
                .output()
                .is_ok_and(|o| o.status.success())
        });
        let Some(go) = go else {
            say!("NOTE: `go` not found: skipping the `go tool pprof` check");
            return;
        };
        let run = |index: &str| -> String {
            let out = Command::new(go)
                .args(["tool", "pprof", "-top", &format!("-sample_index={index}")])
                .arg(&path)
                .env("PPROF_BINARY_PATH", dir.path())
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(
                out.status.success(),
                "go tool pprof failed: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            say!("go tool pprof -top -sample_index={index}:\n{stdout}");
            stdout
        };
        let top = run("alloc_space");
        assert!(top.contains("Type: alloc_space"), "{top}");
        assert!(
            top.contains("accounting for 4MB, 100% of 4MB total"),
            "{top}"
        );
        let line_of = |text: &str, name: &str| -> String {
            text.lines()
                .find(|l| l.contains(name))
                .unwrap_or_else(|| panic!("{name} missing:\n{text}"))
                .to_string()
        };
        let l = line_of(&top, "mtlab_test_leaf_alpha");
        assert!(
            l.trim_start()
                .starts_with("3MB 75.00% 75.00%        3MB 75.00%"),
            "{l}"
        );
        let l = line_of(&top, "mtlab_test_root_beta");
        assert!(
            l.trim_start()
                .starts_with("1MB 25.00%   100%        4MB   100%"),
            "{l}"
        );

        let top = run("alloc_objects");
        assert!(top.contains("accounting for 4, 100% of 4 total"), "{top}");
        let l = line_of(&top, "mtlab_test_leaf_alpha");
        assert!(l.trim_start().starts_with("3 75.00%"), "{l}");

        // The default sample type is inuse_space.
        let out = Command::new(go)
            .args(["tool", "pprof", "-top"])
            .arg(&path)
            .output()
            .unwrap();
        let top = String::from_utf8_lossy(&out.stdout);
        assert!(top.contains("Type: inuse_space"), "{top}");
        assert!(top.contains("of 1MB total"), "{top}");
    }

    #[test]
    fn profile_pprof_unknown_frames_and_errors() {
        let maps = parse_maps(
            "10000-20000 r-xp 00000000 08:01 5 /nonexistent/lib.so\n\
             30000-31000 r-xp 00000000 00:00 0 [vdso]\n",
        );
        let profile = ProfileData {
            samples: vec![StackSample {
                pcs: vec![0x10010, 0x30020, 0x5],
                alloc_objects: 1.0,
                alloc_bytes: f64::NAN,
                inuse_objects: 1e30,
                inuse_bytes: -2.6,
                bounds: None,
                threads: Vec::new(),
            }],
            maps: maps.clone(),
            ..Default::default()
        };
        let mut sym = Symbolizer::new(&maps);
        let p = proto::Profile::decode(&to_pprof_bytes(&profile, &mut sym)[..]).unwrap();
        assert_eq!(p.sample[0].value, vec![1, 0, i64::MAX, -3]);
        let st = &p.string_table;
        let names: Vec<&str> = p
            .location
            .iter()
            .map(|l| st[p.function[l.line[0].function_id as usize - 1].name as usize].as_str())
            .collect();
        assert_eq!(names, ["lib.so+0x10", "[vdso]+0x20", "0x5"]);
        assert_eq!(p.mapping.len(), 2);
        assert!(p.mapping.iter().all(|m| !m.has_functions));
        assert_eq!(st[p.mapping[0].filename as usize], "/nonexistent/lib.so");
        assert_eq!(p.location[2].mapping_id, 0);

        let err =
            write_pprof(&profile, &mut sym, Path::new("/nonexistent/dir/x.pb.gz")).unwrap_err();
        assert!(matches!(err, ExportError::Create { .. }));
        assert!(
            err.to_string().contains("/nonexistent/dir/x.pb.gz"),
            "{err}"
        );
    }
}
