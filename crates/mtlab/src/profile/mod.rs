//! Heap profiles: weighted call stacks, from a sampled trace (estimates) or a
//! full trace (exact), and what is computed and exported from them.
//!
//! - `sampled.rs`: estimates from a sampled trace (`SampledPass`, fed by the
//!   analysis's own decode pass).
//! - `interval.rs`: the 95 % interval of an estimate (gamma interval with the
//!   design variance; the "not sampled" bound), and its calibration by
//!   simulation.
//! - `simulate.rs`: `mtlab profile simulate`: the sampler replayed offline over
//!   a full trace → coverage curve.
//! - `data.rs`: the profile every exporter reads (`ProfileData`); a full
//!   trace's exact one is the analysis's site table (`analysis::sites`).
//! - `pprof.rs` (prost), `flame.rs` (inferno), `speedscope.rs`, `export.rs`:
//!   pprof, flame graph, folded-stack and speedscope exports.
//! - `merge.rs`: several processes' profiles as one (`report --merge`): each
//!   process's addresses moved to a range of its own so that every stack is
//!   symbolized in its own process.

pub mod data;
pub mod interval;
pub mod merge;
pub mod sampled;
pub mod export;
pub mod pprof;
pub mod flame;
pub mod simulate;
pub mod speedscope;

pub use data::{ProfileData, StackSample, ThreadShare};
pub use pprof::ExportError;
