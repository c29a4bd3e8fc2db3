//! The shadow heap: live blocks by address, mapped regions, fragmentation
//! (`model`), replayed from a trace by `analysis::replay`.

mod dheap;
pub(crate) mod live;
pub mod model;
pub(crate) mod prefetch;
mod region_index;
