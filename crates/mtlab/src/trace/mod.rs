//! The trace file: format constants, decoding, encoding (docs/trace-format.md).

pub mod columns;
pub mod compact;
pub mod decode;
pub mod encode;
pub mod event;
pub mod format;

pub use decode::{ChunkInfo, EndRecord, Header, Items, TraceError, TraceFile};
pub use encode::{finish_trace, ChunkEncoder, FinishStats, Finisher, TraceWriter};
pub use event::{Event, EventKind, Func, Item};
