//! Heap profiles: weighted call stacks, from a sampled trace (estimates) or a
//! full trace (exact), and what is computed and exported from them.

pub mod data;
pub mod interval;
pub mod merge;
pub mod sampled;
pub mod export;
pub mod pprof;
pub mod flame;
pub mod simulate;
pub mod speedscope;

pub use data::{ProfileData, StackSample};
pub use pprof::ExportError;
