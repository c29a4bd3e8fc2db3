//! The profile every exporter (pprof, flame graph, folded stacks) reads.

use crate::symbolize::Mapping;

/// One call stack with its (estimated or exact) totals.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StackSample {
    /// Program counters (return addresses), innermost first.
    pub pcs: Vec<u64>,
    pub alloc_objects: f64,
    pub alloc_bytes: f64,
    pub inuse_objects: f64,
    pub inuse_bytes: f64,
    /// For a sampled profile: each value's 95 % interval, in the order above
    /// (None: exact figures from a full trace).
    pub bounds: Option<[Bounds; 4]>,
    /// The figures above split by the allocating thread, when the analysis
    /// asked (`AnalyzeOptions::threads`): exact of a full trace, estimates
    /// with their intervals of a sampled one; empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub threads: Vec<ThreadShare>,
}

/// One thread's part of a stack's figures (in-use: the blocks it allocated).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ThreadShare {
    pub tid: u32,
    pub alloc_objects: f64,
    pub alloc_bytes: f64,
    pub inuse_objects: f64,
    pub inuse_bytes: f64,
    /// A sampled trace's 95 % intervals of the four, in [`StackSample`]'s order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bounds: Option<[Bounds; 4]>,
}

/// An estimated value's 95 % interval and the samples behind it (0: "not sampled").
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Bounds {
    pub low: f64,
    pub high: f64,
    pub samples: u64,
    /// An object count on a stack whose samples mix block sizes: the
    /// interval is not trustworthy (`Estimate::mixed_sizes`).
    pub unreliable: bool,
}

/// A heap profile of one process.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct ProfileData {
    pub samples: Vec<StackSample>,
    /// The process's memory maps, for symbolization.
    pub maps: Vec<Mapping>,
    /// Mean sampling interval in bytes (0: every allocation recorded).
    pub period_bytes: u64,
    /// When the profile starts (ns since the epoch) and how long it covers.
    pub start_ns: u64,
    pub duration_ns: u64,
}

impl ProfileData {
    /// A symbolizer of this profile's maps that names no frame from a module
    /// file changed since the recording ended (as the report's tables).
    pub fn symbolizer(&self) -> crate::symbolize::Symbolizer {
        let until = if self.start_ns == 0 { 0 } else { self.start_ns.saturating_add(self.duration_ns) };
        crate::symbolize::Symbolizer::new(&self.maps).recorded_until(until)
    }
}
