//! The trace file: format constants, decoding, encoding (docs/trace-format.md).
//!
//! Modules depend on modules above them in this list only (tests aside):
//! `format`, `event`, `error`, `kv`, `keys`, `family`, `fields` → `varint`, `records`
//! (the primitives readers and writers share) → `columns`, `maps`, `resync` → `decode`; then
//! the writer and the rewrites built on them: `encode`, `rewrite`, `held`, `finish`,
//! `lean`, `compact`; `stacks` (the table of stacks a report keeps) on none.
//!
//! - `format.rs`: constants mirrored from the C header, checked by a test;
//!   `event.rs`: decoded types; `error.rs`: `TraceError`.
//! - `kv.rs`: the `key=value` text of header, RUNINFO and STATS; `keys.rs`:
//!   every RUNINFO and STATS key: what it means, who writes it.
//! - `fields.rs`: what an event's values mean; the `Fields` trait the decoder
//!   reads rows and columns through.
//! - `family.rs`: the list of child traces `mtlab record` keeps in the root's
//!   RUNINFO (the names themselves: `platform::names`).
//! - `varint.rs`: the varint codec; `records.rs`: record headers: scanning,
//!   checking, writing; chunk header and its checksums; END.
//! - `resync.rs`: after damage in a checksummed file: the next intact record.
//! - `far_index.rs`: the column writer's index of allocations past the
//!   recent list (address → number), one cache line a lookup.
//! - `ring.rs`: layout 4's ring of allocation numbers (address and usable
//!   size packed in a word), which `predict` names far frees by.
//! - `columns.rs`: the column layout of finished chunks: streams by field
//!   meaning, TSC-step splitting, address ranks.
//! - `decode.rs`: header, index pass, time-ordered merge of thread chunks in
//!   bounded memory, damage handling; `Items::next_ref` lends each event where
//!   it was decoded — the analysis pass reads it there, the `Iterator` copies
//!   it out; zstd contexts are kept per thread across traces.
//! - `encode.rs`: a Rust writer, for tests and `compact`; `rewrite.rs`: what
//!   both rewrites share: the temp file beside the trace, `copy_record`,
//!   `install` over it.
//! - `finish.rs`: `finish_trace`/`Finisher`: the post-run join, column rewrite
//!   (each thread's records in turn, its predictions carried from one to the
//!   next) and compression (on all cores); `held.rs`: its output, held in memory
//!   while the disk is full (the raw records it holds are punched out already).
//! - `stacks.rs`: the stacks a report keeps: frames end to end in blocks of 8
//!   MiB that never move (huge pages after the first), definitions appended;
//!   distinct ids and redefinitions from a bitset; the index by id (a hash map,
//!   from 256 K stacks an array) built only when a lookup misses the last 8
//!   definitions.
//! - `compact.rs`: compact traces: time stamps rounded to a quantum but kept in
//!   cross-thread order where threads touch the same block, region or break;
//!   cycles sorted per function within a chunk.
//! - `lean.rs`: a lean compact trace's made-up addresses (bump arenas, a free
//!   naming a live block of its kind) and dropped free stacks.

mod ahead;
pub mod columns;
pub mod compact;
mod cycle_groups;
pub mod decode;
mod draws;
pub mod encode;
pub mod error;
pub mod event;
mod far_index;
pub mod family;
pub mod fields;
pub mod finish;
pub mod format;
mod held;
pub mod lean;
mod predict;
mod ring;
pub mod keys;
pub mod kv;
mod maps;
pub mod records;
mod resync;
pub mod rewrite;
pub mod stacks;
pub mod varint;

pub use maps::MapsKept;
pub use decode::{read_header, Header, ItemRef, Items, NewChunk, TraceFile};
pub use encode::{ChunkEncoder, TraceWriter};
pub use error::TraceError;
pub use event::{Event, EventKind, Func, Item, UNTIMED};
pub use ahead::{Progress, Source};
pub use finish::{append_runinfo, finish_trace, FinishStages, FinishStats, Finisher, Work, SOLO_QUANTUM};
pub use records::{ChunkInfo, EndRecord, WriteLoss};
pub use stacks::{StackRef, StackTable};
