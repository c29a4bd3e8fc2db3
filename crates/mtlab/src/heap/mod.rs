//! The shadow heap: live blocks by address, mapped regions, fragmentation
//! (`model`), replayed from a trace by `analysis::replay`.
//!
//! Live objects are kept by address in `live.rs`'s table — open addressing,
//! each key beside its value, backward-shift removal, a 64-byte span of address
//! space mapped to one group of 8 slots so that neighbouring blocks share cache
//! lines (larger groups made long runs of packed 8-byte blocks, which each
//! removal walks), doubling at any size (at most half full) with each new page first
//! touched by a write, in huge pages once large. A block's region is the one
//! around its address; mapped regions live in a slab indexed by start
//! (`region_index.rs`: a sorted vector of slots while at most 128, a BTreeMap
//! after) behind a one-entry cache of the last lookup (a gap between regions
//! too; a newly mapped region goes in it) and a 1024-entry cache by 128 KiB
//! window of address space (each entry checked against its slab slot on use);
//! blocks in no known region are in a list whose entries go stale with the
//! slab's generations.
//!
//! Fragmentation is incremental, in fixed point (exact in any order; a changed
//! region's ratio recomputed at the next snapshot, or carried unsettled by a
//! snapshot when it is the only one). The table holds each block's slab slot
//! and site, the slab its size, usable extra and generation; each region's last
//! live end comes from a lazy max-heap (`dheap.rs`, four children a node) whose
//! stale entries are told by the slab's generation, stale pending entries
//! dropped before they join it; a freed region's buffers are reused by the
//! next. `prefetch.rs`: the hint the analysis's pass uses to overlap the misses
//! of several events.

mod dheap;
pub(crate) mod live;
pub mod model;
pub(crate) mod prefetch;
mod region_index;
