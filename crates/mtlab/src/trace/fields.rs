//! What the values of an event mean, and the one interface the decoder reads
//! them through, whether a chunk holds rows or columns: both layouts sit
//! below the decoder, so neither has to know about the other.

/// What a value of an event means: rows interleave them, the column
/// layout gives each meaning its stream(s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    /// Time-stamp delta.
    Time,
    /// Cycles in the real call.
    Cycles,
    Stack,
    /// Sizes, lengths, element counts.
    Size,
    /// Usable-size extra.
    Extra,
    /// Alignments, protections, flags, return codes (raw varint values).
    Misc,
    /// A value of a STACK_DEF (id, depth, frame deltas).
    Def,
    /// An address a call returned as newly allocated.
    NewPtr,
    /// An address a call gave back.
    OldPtr,
    /// Any other address (mappings, program breaks).
    Addr,
}

impl Field {
    /// Addresses are deltas in rows, absolute once read.
    #[inline(always)]
    pub(crate) fn is_address(self) -> bool {
        matches!(self, Field::NewPtr | Field::OldPtr | Field::Addr)
    }
}

/// Where the fields of a chunk's events come from: its row bytes, read in
/// order (`decode::RowFields`), or its column layout (`columns::ColumnFields`).
/// Each read names what the value means, which is what the column layout
/// sorts by; rows ignore the meaning (but for addresses: deltas).
pub(crate) trait Fields {
    /// The next item's kind-and-flags byte; `None` at the end of the chunk.
    fn kind(&mut self, buf: &[u8]) -> Result<Option<u8>, DecErr>;
    /// The next value meaning `what` (addresses absolute).
    fn value(&mut self, buf: &[u8], what: Field) -> Result<u64, DecErr>;
    /// Upper bound of STACK_DEF frames still readable (to refuse absurd depths).
    fn def_room(&self, buf: &[u8]) -> u64;
    /// Where decoding stands, for messages.
    fn position(&self) -> usize;
    /// At the end of the chunk: was every value used?
    fn check_end(&self) -> Result<(), DecErr> {
        Ok(())
    }
}

/// Why a chunk's bytes do not decode.
#[derive(Debug)]
pub(crate) enum DecErr {
    Eof,
    Columns(&'static str),
    VarintOverflow,
    UnknownKind(u8),
    StackIdTooLarge(u64),
    StackTooDeep(u64),
}

impl std::fmt::Display for DecErr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecErr::Eof => write!(f, "an event runs past the end of the chunk"),
            DecErr::Columns(why) => write!(f, "bad column layout: {why}"),
            DecErr::VarintOverflow => write!(f, "a varint is longer than 10 bytes or overflows 64 bits"),
            DecErr::UnknownKind(k) => write!(f, "unknown event kind {k}"),
            DecErr::StackIdTooLarge(id) => write!(f, "stack id {id} does not fit 32 bits"),
            DecErr::StackTooDeep(d) => write!(f, "a STACK_DEF of depth {d} is longer than the chunk"),
        }
    }
}
