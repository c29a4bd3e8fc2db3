//! The shadow heap: live blocks by address, mapped regions, fragmentation
//! (`model`), replayed from a trace by `analysis::replay`.
//!
//! Live objects are kept by address in `live.rs`'s table — ordered open
//! addressing (each run sorted by hash), each key beside its value, the
//! blocks of a 32-byte span of address space at one home so that
//! neighbouring blocks share cache lines, four fifths full at most (seven
//! eighths once larger than a last-level cache) and grown in place by a
//! quarter (`platform::anon_table`: remapped, never copied),
//! in huge pages once large. The value is the whole block (size, site,
//! usable extra, packed; a block that does not pack is spilled to a map).
//! Every live block's start is also a bit in `starts.rs`'s sparse bitmap of
//! address space, which gives a region's last live block when its last one
//! is freed and the blocks a new region takes in; its leaves are found by
//! number in arrays over address space (`leaf_dir.rs`).
//!
//! A block's region is the one around its address; mapped regions live in a
//! slab indexed by start (`region_index.rs`: a sorted vector of slots while
//! at most 128, a BTreeMap after) behind a one-entry cache of the last lookup
//! (a gap between regions too; a newly mapped region goes in it) and a
//! 1024-entry cache by 128 KiB window of address space (each entry checked
//! against its slab slot on use); blocks in no known region are only
//! counted (their starts are in the bitmap).
//!
//! Fragmentation is incremental, in fixed point (exact in any order; a changed
//! region's ratio recomputed at the next snapshot, or carried unsettled by a
//! snapshot when it is the only one). The analysis's pass overlaps the misses
//! of several events with `platform::prefetch`.

pub(crate) mod live;
pub mod model;
mod leaf_dir;
mod region_index;
mod starts;
