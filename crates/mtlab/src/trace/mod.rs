//! The trace file: format constants, decoding, encoding (docs/trace-format.md).
//!
//! Modules depend on modules above them in this list only (tests aside):
//! `format`, `event`, `error`, `kv`, `keys`, `family`, `fields` → `varint`, `records`
//! (the primitives readers and writers share) → `columns`, `maps`, `resync` → `decode`; then
//! the writer and the rewrites built on them: `encode`, `rewrite`, `finish`,
//! `compact`; `stacks` (the table of stacks a report keeps) on none.

pub mod columns;
pub mod compact;
pub mod decode;
pub mod encode;
pub mod error;
pub mod event;
pub mod family;
pub mod fields;
pub mod finish;
pub mod format;
pub mod keys;
pub mod kv;
mod maps;
pub mod records;
mod resync;
pub mod rewrite;
pub mod stacks;
pub mod varint;

pub use decode::{read_header, Header, ItemRef, Items, TraceFile};
pub use encode::{ChunkEncoder, TraceWriter};
pub use error::TraceError;
pub use event::{Event, EventKind, Func, Item};
pub use finish::{append_runinfo, finish_trace, FinishStats, Finisher};
pub use records::{ChunkInfo, EndRecord};
pub use stacks::{StackRef, StackTable};
