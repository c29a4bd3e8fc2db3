//! What one event was and did, as the replay hands it to the aggregators:
//! the vocabulary of the pass (`Step`, the blocks by site, the call).

use crate::trace::Func;

/// A block as the aggregators see it: its allocation site, requested size
/// and address.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Block {
    pub site: u32,
    pub size: u64,
    pub addr: u64,
}

/// An event as a call of an intercepted function.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Call {
    pub func: Func,
    /// Bytes asked for (allocations), mapped or unmapped (the mmap family),
    /// moved (sbrk) or freed (a free of a live block; None for a free of
    /// nothing live, and for brk).
    pub size: Option<u64>,
    pub failed: bool,
}

/// What one event was (`call`) and did to the shadow heap, in the order it
/// happened: the block it freed, a live block its allocation replaced, the
/// block it allocated, and whether live bytes reached a new peak with it.
/// The aggregators read the event through it, so that its kind is matched
/// once (a match per aggregator cost the pass 3 % more instructions).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Step {
    /// None: no call (BRK_SEEN, ARENA_HEAP, a sample).
    pub call: Option<Call>,
    /// The live block a free (or a realloc, of its old block) ended.
    pub freed: Option<Block>,
    /// A live block at the address an allocation returned: its free was
    /// not seen (counted in `overlapping_allocs`).
    pub replaced: Option<Block>,
    pub allocated: Option<Block>,
    /// Live bytes are higher than ever after this event.
    pub peak: bool,
    /// The event counts as a call (`events`, the time series): every call
    /// but a failed mmap or mremap.
    pub counted: bool,
}
