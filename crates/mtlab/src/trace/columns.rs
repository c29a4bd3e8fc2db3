//! The column layout of finished EVENTS chunks (record flag `COLUMNS`).
//!
//! The traced program writes events as rows: kind byte, time delta, cycles,
//! stack id, then the kind's own fields, all varints (docs/trace-format.md).
//! Rows interleave values of very different statistics, which a
//! general-purpose compressor handles poorly. After the program has ended,
//! `finish_trace` joins consecutive chunks of a thread and rewrites them in
//! columns before zstd:
//! - every kind of value gets its own stream (kinds, time deltas, cycles,
//!   stack ids, sizes, …);
//! - time deltas and cycles are split into a multiple of the counter's step
//!   and a remainder: a virtual machine's TSC often advances in steps of tens
//!   of ticks, so nearly every remainder is 0;
//! - a block's address is coded by where it was last seen: an allocation's
//!   result as its rank among recently freed addresses (allocators reuse
//!   them), a freed address as its rank among recent allocation results;
//!   only misses store the address (as a delta).
//!
//! [`ColumnFields`] reads the columns back for the decoder, which decodes
//! rows and columns with the same code (`fields::Fields`); the round trip
//! is tested to give the same events.
//!
//! Layout (before zstd): byte [`COLUMNS_LAYOUT`]; varints `time_step`,
//! `cycles_step`; then the byte length of each of the layout's streams
//! ([`MAX_STREAMS`] in layout 2)
//! as varints; then the streams, in [`Stream`] order.

use super::fields::{DecErr, Field, Fields};
use super::format::*;
use super::cycle_groups::{has_form, Gather, Hand, Put};
use super::draws::{is_drawn, Draws, Replay, Thread};
use super::predict::{Predictor, Streams, OPT_TIMESKIP};
use super::varint::{put_svarint, put_varint, varint, zigzag};

/// First byte of a column-layout body: the layout's own version. Layout 2
/// (version 4 traces) added the predictions of `predict`; layout 3 (version
/// 5) codes the cycles of the timed calls by the gaps between them
/// (`Stream::CyclesSkip`); layout 4 (version 6) carries the predictions
/// from one record of a thread to its next (a *chain*, restarted every
/// [`CHAIN_RECORDS`] records), codes frees of blocks allocated earlier in
/// the chain by their allocation's number, sizes against their call site's
/// last one, and time deltas of 0 by their runs; layout 5 (version 7)
/// replays the preload library's timing draws (`draws`) and codes which
/// calls were timed by where they depart from the replay; layout 6
/// (version 8) codes each event's stack by its rank among the stacks that
/// followed the thread's previous event's stack, the runs of time deltas 0
/// against the previous run, and the allocation and free misses' address
/// deltas in units of 16 bytes (`predict`); layout 7 (version 9) guesses
/// an allocation after the end of the last one carved fresh (the heap's
/// top) and at its class's end plus the gap; layout 8 (version 10) keeps
/// sampled timing's cycles per function, sorted, within groups of a
/// record's items (`cycle_groups`). Layouts 1 to 7 are still read.
pub const COLUMNS_LAYOUT: u8 = 8;

/// Records of a thread whose predictions run on from one to the next: a
/// record that cannot be read takes at most the rest of its chain with it.
pub const CHAIN_RECORDS: u64 = 32;

/// Row bytes after which the writer starts a thread's next record on a
/// chain of its own, whatever its length in records: what a damaged
/// record can take with it, and the rows the finish can put in columns
/// apart, whether the records are 1 MiB (32 of them, the most) or 4 MiB.
/// Readers do not depend on it: each record says its place in its chain.
pub const CHAIN_ROWS: u64 = 32 << 20;

/// A thread's predictions carried from one of its records to the next
/// (layout 4), and the record's place in its chain (0: it starts one).
pub struct Chain {
    pos: u64,
    pred: Predictor,
    /// Writer side (layout 5): where the thread's timing draws stand.
    draws: Thread,
    /// Writer side: the row bytes of the chain's records so far.
    rows: u64,
    /// Writer side: the live blocks' count over the last record.
    live: LiveCount,
}

/// Writer side: how one record's events move the number of live blocks —
/// allocations (a new pointer not null) less releases (an old pointer not
/// null) — by its end (`net`), and the most they added at any event within
/// it (`rise`, at least 0). The finish adds them up in file order into a
/// reader's hint of the most blocks live at once (RUNINFO
/// `live_blocks_hint`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveCount {
    pub net: i64,
    pub rise: i64,
}

impl LiveCount {
    #[inline(always)]
    fn count(&mut self, f: Field, v: u64) {
        match f {
            Field::NewPtr if v != 0 => {
                self.net += 1;
                self.rise = self.rise.max(self.net);
            }
            Field::OldPtr if v != 0 => self.net -= 1,
            _ => {}
        }
    }
}

/// Whether a thread's next record runs on from a chain whose last record
/// has place `pos` and whose records hold `rows` row bytes (writer side).
pub(crate) fn runs_on(pos: u64, rows: u64) -> bool {
    pos + 1 < CHAIN_RECORDS && rows < CHAIN_ROWS
}

/// The writer's chain of each thread, by thread id (`finish_trace`): a
/// thread not seen before starts with its timing draws not yet seeded.
pub struct Chains {
    time_sample: u64,
    by_tid: std::collections::HashMap<u32, Option<Chain>>,
}

impl Chains {
    /// For a trace whose header says `time_sample` (`trace::Header`).
    pub fn new(time_sample: u64) -> Chains {
        Chains { time_sample, by_tid: Default::default() }
    }

    /// The thread's chain, to write its next record with.
    pub fn take(&mut self, tid: u32) -> Option<Chain> {
        match self.by_tid.remove(&tid) {
            Some(c) => c,
            // A placeholder that starts a chain (its layout is none the
            // writer writes) with the thread's draws from their start.
            None => Some(Chain::restart(Thread::first(self.time_sample, tid))),
        }
    }

    /// The thread's chain after its record was written (None after an
    /// error: its next record starts a chain, and its draws are lost).
    pub fn put(&mut self, tid: u32, chain: Option<Chain>) {
        self.by_tid.insert(tid, chain);
    }

    /// A record of the thread was kept as it was: its next record starts
    /// a chain, and its draws are lost (that record's calls drew too).
    pub fn remove(&mut self, tid: &u32) {
        self.by_tid.insert(*tid, None);
    }

    /// `remove` for every thread seen so far.
    pub fn clear(&mut self) {
        self.by_tid.values_mut().for_each(|c| *c = None);
    }
}

impl Chain {
    /// The record's place in its chain.
    pub fn pos(&self) -> u64 {
        self.pos
    }

    /// A placeholder (its layout is none the writer writes) whose thread's
    /// next record starts a chain, with the thread's draws at `draws`.
    pub(crate) fn restart(draws: Thread) -> Chain {
        Chain { pos: 0, pred: Predictor::new(1), draws, rows: 0, live: LiveCount::default() }
    }

    /// How the chain's last record moved the live blocks' count.
    pub(crate) fn live(&self) -> LiveCount {
        self.live
    }

    /// Whether the thread's next record (written by `split_chained`) runs
    /// on from this chain's predictions rather than starting a chain.
    pub(crate) fn runs_on(&self) -> bool {
        self.pred.layout() == COLUMNS_LAYOUT && runs_on(self.pos, self.rows)
    }

    /// The row bytes of the chain's records so far (writer side).
    pub(crate) fn rows(&self) -> u64 {
        self.rows
    }

    /// Where the thread's timing draws stand after the record.
    pub(crate) fn draws(&self) -> Thread {
        self.draws
    }
}

/// Where a thread's timing draws stand after `split_chained` wrote a record
/// of `chunks` that started from `thread`, or the error it met: the draws
/// alone, replayed without the predictions (a walk over the rows), so that
/// the rewrite can start a later chain of the thread on another core
/// (`finish`). Its caller checks the result against the chain that
/// `split_chained` leaves.
pub(crate) fn draws_after(chunks: &[RowChunk], thread: Thread) -> Result<Thread, ColumnError> {
    let mut want_stamp = thread.wants_stamp();
    let (mut stamp, mut first_drawn) = (chunks.first().map_or(0, |c| c.first_tsc), None);
    let mut drawn = false;
    if want_stamp {
        walk_rows(chunks, |t| {
            match t {
                Token::Kind(b) => drawn = is_drawn(b & KIND_MASK),
                Token::Value(Field::Time, v) => {
                    stamp = stamp.wrapping_add(v);
                    if drawn {
                        first_drawn = Some(stamp);
                        want_stamp = false;
                    }
                }
                _ => {}
            }
            want_stamp
        })?;
    }
    let mut replay = Replay::new(thread.start(first_drawn));
    let mut kind = 0u8;
    walk_rows(chunks, |t| {
        match t {
            Token::Kind(b) if b & KIND_MASK != EV_STACK_DEF => kind = b & KIND_MASK,
            Token::Value(Field::Cycles, v) => {
                replay.call(kind, v != 0);
            }
            _ => {}
        }
        true
    })?;
    Ok(replay.end(thread))
}

/// The streams a chunk's values are sorted into, in layout order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Stream {
    /// Kind-and-flags bytes, one per item.
    Kind = 0,
    /// Time deltas divided by the time step (rounded).
    Time,
    /// Time deltas' remainders (zigzag).
    TimeRest,
    /// Cycles divided by the cycles step (rounded).
    Cycles,
    /// Cycles' remainders (zigzag).
    CyclesRest,
    Stack,
    /// Sizes, lengths and element counts.
    Size,
    /// Allocation results: how each was predicted (`predict`).
    AllocRank,
    /// Freed addresses: how each was predicted (`predict`).
    FreeRank,
    /// Layout 1: addresses not predicted; layout 2: other addresses
    /// (mappings, breaks); deltas to the previous address (zigzag).
    PtrDelta,
    /// Usable-size extras (layout 2: residuals of the predicted rounding).
    Extra,
    /// Alignments, protections, flags, return codes, sampling fields.
    Misc,
    /// Stack definitions: id, depth, frame deltas.
    Defs,
    /// Layout 2: allocation results not predicted, as deltas to the end of
    /// the previous allocation (zigzag).
    AllocDelta,
    /// Layout 2: freed addresses not among recent allocations, as deltas to
    /// the previous such free (zigzag).
    FreeDelta,
    /// Layout 3: for each event whose cycles are not 0, the events of cycles
    /// 0 (not timed) before it since the previous one; then, when the body
    /// ends with such events, their number. `Cycles` and `CyclesRest` then
    /// hold only the cycles that are not 0: with one call in 32 timed, a
    /// byte per event of mostly zeros cost zstd seven times what the gaps do.
    CyclesSkip,
    /// Layout 4: for each freed block allocated earlier in the chain (not
    /// among the recent allocations), its allocation's number minus one
    /// more than the previous such block's (zigzag): a program that frees
    /// in the order it allocated writes runs of 0.
    FreeSeq,
    /// Layout 4: as `CyclesSkip`, for time deltas: the deltas of 0 before
    /// each that is not (rounded stamps are mostly 0).
    TimeSkip,
}

/// Streams of a layout-1 body.
const N_STREAMS_V1: usize = 13;
/// Streams of a layout-2 body.
const N_STREAMS_V2: usize = 15;
/// Streams of a layout-3 body.
const N_STREAMS_V3: usize = 16;
/// Streams of a layout-4 body (the most any layout has).
pub const MAX_STREAMS: usize = 18;

fn n_streams(layout: u8) -> Option<usize> {
    match layout {
        1 => Some(N_STREAMS_V1),
        2 => Some(N_STREAMS_V2),
        3 => Some(N_STREAMS_V3),
        4..=8 => Some(MAX_STREAMS),
        _ => None,
    }
}

/// A kind's own fields, in row order (after time, cycles, stack).
fn fields(kind: u8) -> Option<&'static [Field]> {
    use Field::*;
    Some(match kind {
        EV_MALLOC | EV_VALLOC | EV_PVALLOC => &[Size, NewPtr, Extra],
        EV_FREE | EV_SAMPLE_FREE => &[OldPtr],
        EV_BRK_SEEN => &[Addr],
        EV_CALLOC => &[Size, Size, NewPtr, Extra],
        EV_REALLOC => &[OldPtr, Size, NewPtr, Extra],
        EV_REALLOCARRAY => &[OldPtr, Size, Size, NewPtr, Extra],
        EV_POSIX_MEMALIGN => &[Misc, Size, NewPtr, Misc, Extra],
        EV_ALIGNED_ALLOC | EV_MEMALIGN => &[Misc, Size, NewPtr, Extra],
        EV_MMAP | EV_MMAP64 => &[Addr, Size, Misc, Misc, Misc, Misc, Addr],
        EV_MUNMAP => &[Addr, Size, Misc],
        EV_MREMAP => &[Addr, Size, Size, Misc, Addr],
        EV_BRK => &[Addr, Misc, Addr],
        EV_SBRK => &[Misc, Addr, Addr],
        EV_ARENA_HEAP => &[Addr, Size],
        EV_SAMPLE => &[Misc, Size, NewPtr, Misc],
        EV_NEW => &[Misc, Misc, Size, NewPtr, Extra],
        EV_DELETE => &[Misc, OldPtr],
        EV_USABLE_SIZE => &[Addr, Size],
        _ => return None,
    })
}

/// Why chunks could not be put into columns, or columns read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ColumnError {
    #[error("a varint runs past the end of its data")]
    Truncated,
    #[error("unknown event kind {0}")]
    UnknownKind(u8),
    #[error("bad column layout: {0}")]
    BadLayout(&'static str),
    /// Rows the decoder would refuse: such chunks are not joined (their
    /// damage must stay confined to themselves).
    #[error("rows the decoder refuses: {0}")]
    Undecodable(&'static str),
}

// ---------------------------------------------------------------------------
// Varints over slices.

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(b: &'a [u8]) -> Self {
        Reader { b, pos: 0 }
    }
    fn at_end(&self) -> bool {
        self.pos >= self.b.len()
    }
    #[inline(always)]
    fn byte(&mut self) -> Result<u8, ColumnError> {
        let x = *self.b.get(self.pos).ok_or(ColumnError::Truncated)?;
        self.pos += 1;
        Ok(x)
    }
    /// The decoder's own varint reading, so that rows are refused here
    /// exactly when the decoder would refuse them.
    #[inline(always)]
    fn v(&mut self) -> Result<u64, ColumnError> {
        varint(self.b, &mut self.pos).map_err(|e| match e {
            DecErr::Eof => ColumnError::Truncated,
            _ => ColumnError::Undecodable("a varint overflows 64 bits"),
        })
    }
    #[inline(always)]
    fn sv(&mut self) -> Result<i64, ColumnError> {
        let u = self.v()?;
        Ok(((u >> 1) as i64) ^ -((u & 1) as i64))
    }
}

// ---------------------------------------------------------------------------
// Steps of the time counter.

/// The largest step in 2..=64 that at least 90 % of the first 1024
/// non-zero `values` are multiples of, or 1.
fn detect_step(values: &[u64]) -> u64 {
    let sample: Vec<u64> = values.iter().copied().filter(|&v| v != 0).take(1024).collect();
    if sample.len() < 16 {
        return 1;
    }
    let allowed = sample.len() / 10;
    (2..=64u64)
        .rev()
        .find(|&q| {
            // Most candidates fail within a few values: stop counting then.
            let mut misses = 0;
            for &v in &sample {
                misses += usize::from(v % q != 0);
                if misses > allowed {
                    return false;
                }
            }
            true
        })
        .unwrap_or(1)
}

/// Division by a step, by multiplication: this runs twice per event.
#[derive(Clone, Copy)]
struct Divisor {
    q: u64,
    /// ⌊(2⁶⁴−1)/q⌋ + 1: (v·m) >> 64 is ⌊v/q⌋ exactly for v < 2⁴⁰ and q ≤ 64.
    m: u64,
}

impl Divisor {
    fn new(q: u64) -> Divisor {
        Divisor { q, m: if q <= 1 { 0 } else { u64::MAX / q + 1 } }
    }
    #[inline(always)]
    fn div(self, v: u64) -> u64 {
        if self.q <= 1 {
            v
        } else if v < 1 << 40 && self.q <= 64 {
            ((v as u128 * self.m as u128) >> 64) as u64
        } else {
            v / self.q
        }
    }
}

fn put_stepped(v: u64, d: Divisor, main: &mut Vec<u8>, rest: &mut Vec<u8>) {
    let (quot, r) = stepped(v, d);
    put_varint(main, quot);
    put_svarint(rest, r);
}

/// `v` rounded to the nearest multiple of the step, in steps, and what is
/// left over.
#[inline(always)]
fn stepped(v: u64, d: Divisor) -> (u64, i64) {
    let q = d.q;
    let lower = d.div(v);
    let quot = lower + u64::from(q > 1 && v - lower * q >= q.div_ceil(2));
    (quot, v.wrapping_sub(quot.wrapping_mul(q)) as i64)
}

/// Layout 8's sorted cycles: `v` in steps as the rise from the value
/// before it in its block (`prev`, in steps; the rounding to steps keeps
/// the order), the rest as `put_stepped`'s.
#[inline(always)]
fn put_stepped_after(v: u64, d: Divisor, prev: &mut u64, main: &mut Vec<u8>, rest: &mut Vec<u8>) {
    let (quot, r) = stepped(v, d);
    put_varint(main, quot.wrapping_sub(*prev));
    *prev = quot;
    put_svarint(rest, r);
}

/// Whether a record of `layout` whose timing draws start at `started` holds
/// its cycles sorted per function within groups (`cycle_groups`): layout 8
/// under sampled timing.
fn sorts_cycles(layout: u8, started: &Draws) -> bool {
    layout >= 8 && matches!(started, Draws::Replay { .. })
}

#[inline(always)]
fn from_stepped(q: u64, quot: u64, rest: u64) -> u64 {
    quot.wrapping_mul(q).wrapping_add(zigzag(rest) as u64)
}

// ---------------------------------------------------------------------------
// Rows → columns.

/// One row chunk to be joined: its first TSC (the base of its time deltas)
/// and its event bytes.
pub struct RowChunk<'a> {
    pub first_tsc: u64,
    pub rows: &'a [u8],
}

enum Token {
    Kind(u8),
    Value(Field, u64),
}

/// Walks row chunks of one thread, in time order, handing `on` each value
/// with absolute addresses and time deltas that run on across chunk
/// borders; stops early when `on` returns false.
#[inline(always)]
fn walk_rows(chunks: &[RowChunk], mut on: impl FnMut(Token) -> bool) -> Result<(), ColumnError> {
    let mut tsc: Option<u64> = None;
    macro_rules! emit {
        ($t:expr) => {
            if !on($t) {
                return Ok(());
            }
        };
    }
    for c in chunks {
        let mut r = Reader::new(c.rows);
        let mut chunk_tsc = c.first_tsc;
        let mut ptr = 0u64;
        while !r.at_end() {
            let b = r.byte()?;
            emit!(Token::Kind(b));
            let kind = b & KIND_MASK;
            if kind == EV_STACK_DEF {
                let id = r.v()?;
                if id > u32::MAX as u64 {
                    return Err(ColumnError::Undecodable("a stack id does not fit 32 bits"));
                }
                emit!(Token::Value(Field::Def, id));
                let depth = r.v()?;
                emit!(Token::Value(Field::Def, depth));
                if depth > c.rows.len() as u64 {
                    return Err(ColumnError::Truncated);
                }
                for _ in 0..depth {
                    emit!(Token::Value(Field::Def, r.v()?));
                }
                continue;
            }
            let own = fields(kind).ok_or(ColumnError::UnknownKind(kind))?;
            chunk_tsc = chunk_tsc.wrapping_add(r.v()?);
            // The delta from the previous event of the thread, whichever chunk it was in.
            let prev = tsc.unwrap_or(chunks[0].first_tsc);
            emit!(Token::Value(Field::Time, chunk_tsc.wrapping_sub(prev)));
            tsc = Some(chunk_tsc);
            emit!(Token::Value(Field::Cycles, r.v()?));
            let stack = r.v()?;
            if stack > u32::MAX as u64 {
                return Err(ColumnError::Undecodable("a stack id does not fit 32 bits"));
            }
            emit!(Token::Value(Field::Stack, stack));
            for (n, &f) in own.iter().enumerate() {
                let v = match f {
                    f if f.is_address() => {
                        ptr = ptr.wrapping_add(r.sv()? as u64);
                        ptr
                    }
                    _ => r.v()?,
                };
                // The first field of these names the call: the decoder refuses what names none.
                use crate::trace::Func;
                match kind {
                    EV_SAMPLE if n == 0 && Func::from_sample_func(v).is_none() => {
                        return Err(ColumnError::Undecodable("a SAMPLE names no allocation function"));
                    }
                    EV_NEW if n == 0 && Func::from_new_form(v).is_none() => {
                        return Err(ColumnError::Undecodable("a NEW names no form of operator new"));
                    }
                    EV_DELETE if n == 0 && Func::from_delete_form(v).is_none() => {
                        return Err(ColumnError::Undecodable("a DELETE names no form of operator delete"));
                    }
                    _ => {}
                }
                emit!(Token::Value(f, v));
            }
        }
    }
    Ok(())
}

/// Rewrites the row chunks of one thread (in time order, each chunk's
/// events starting at its `first_tsc`) as one column-layout body, whose
/// time deltas start at `chunks[0].first_tsc`.
pub fn split(chunks: &[RowChunk]) -> Result<Vec<u8>, ColumnError> {
    split_with_time_step(chunks, None)
}

/// `split` with the time step given instead of detected: a compact trace
/// (`trace::compact`) rounds its time stamps to a step far above 64.
pub fn split_with_time_step(chunks: &[RowChunk], time_step: Option<u64>) -> Result<Vec<u8>, ColumnError> {
    split_layout(chunks, time_step, COLUMNS_LAYOUT)
}

/// `split`, with each time stamp rounded down to a multiple of `quantum`
/// ticks counted from `chunks[0].first_tsc` (the time step is then
/// `quantum`): for chunks that no other thread's event falls within
/// (`RECORD_FLAG_SOLO`), where stamps order nothing across threads.
pub fn split_rounded(chunks: &[RowChunk], quantum: u64) -> Result<Vec<u8>, ColumnError> {
    split_inner(chunks, Some(quantum), COLUMNS_LAYOUT, true, &mut None)
}

/// `split_with_time_step` in a given layout (1 to 6): the tests write the
/// previous layouts to check that they are still read.
pub fn split_layout(chunks: &[RowChunk], time_step: Option<u64>, layout: u8) -> Result<Vec<u8>, ColumnError> {
    split_inner(chunks, time_step, layout, false, &mut None)
}

/// How a record's time stamps are written (`split_chained`).
#[derive(Debug, Clone, Copy)]
pub enum Stamps {
    /// As they are, with the time step detected.
    Exact,
    /// As they are, with this time step (a compact trace's quantum).
    Step(u64),
    /// Rounded down to multiples of this quantum (`split_rounded`).
    Rounded(u64),
}

/// `split` for the next record of a thread whose previous record was
/// written with `chain` (None: it starts a chain): the predictions run on
/// from there, unless the chain is [`CHAIN_RECORDS`] records or [`CHAIN_ROWS`] row bytes long. Afterwards
/// `chain` holds this record's (None after an error: the next record
/// starts a chain). The record must follow the previous one of its thread
/// in the file with no other record of the thread in between.
pub fn split_chained(chunks: &[RowChunk], stamps: Stamps, chain: &mut Option<Chain>) -> Result<Vec<u8>, ColumnError> {
    match stamps {
        Stamps::Exact => split_inner(chunks, None, COLUMNS_LAYOUT, false, chain),
        Stamps::Step(q) => split_inner(chunks, Some(q), COLUMNS_LAYOUT, false, chain),
        Stamps::Rounded(q) => split_inner(chunks, Some(q), COLUMNS_LAYOUT, true, chain),
    }
}

fn split_inner(
    chunks: &[RowChunk],
    time_step: Option<u64>,
    layout: u8,
    round: bool,
    chain: &mut Option<Chain>,
) -> Result<Vec<u8>, ColumnError> {
    let n_streams = n_streams(layout).ok_or(ColumnError::BadLayout("unknown layout version"))?;
    // Taken now: after an error the next record starts a chain.
    let (pos, mut pred, thread, chain_rows) = match chain.take() {
        Some(c) if layout >= 4 && c.pred.layout() == layout && runs_on(c.pos, c.rows) => (c.pos + 1, c.pred, c.draws, c.rows),
        Some(c) => (0, Predictor::for_writer(layout), c.draws, 0),
        None => (0, Predictor::for_writer(layout), Thread::At(Draws::Unknown), 0),
    };
    let chain_rows = chain_rows + chunks.iter().map(|c| c.rows.len() as u64).sum::<u64>();
    // The steps are judged on the first values (`detect_step` looks at 1024);
    // an unseeded thread's draws on its first allocator call's stamp.
    let (mut times, mut cycles) = (Vec::with_capacity(1024), Vec::with_capacity(1024));
    let mut want_stamp = layout >= 5 && thread.wants_stamp();
    let (mut stamp, mut first_drawn) = (chunks.first().map_or(0, |c| c.first_tsc), None);
    let mut drawn = false;
    walk_rows(chunks, |t| {
        match t {
            Token::Kind(b) => drawn = is_drawn(b & KIND_MASK),
            Token::Value(Field::Time, v) => {
                stamp = stamp.wrapping_add(v);
                if want_stamp && drawn {
                    first_drawn = Some(stamp);
                    want_stamp = false;
                }
                if v != 0 && times.len() < 1024 {
                    times.push(v)
                }
            }
            Token::Value(Field::Cycles, v) if v != 0 && cycles.len() < 1024 => cycles.push(v),
            _ => {}
        }
        times.len() < 1024 || cycles.len() < 1024 || want_stamp
    })?;
    let mut replay = Replay::new(if layout >= 5 { thread.start(first_drawn) } else { Draws::Unknown });
    let started = replay.started;
    let (tq, cq) = (time_step.unwrap_or_else(|| detect_step(&times)).max(1), detect_step(&cycles));
    let (td, cd) = (Divisor::new(tq), Divisor::new(cq));
    // Rounding down by a power of two (the finish's `SOLO_QUANTUM`) is a
    // mask: the division was 7 % of the column driver's own samples on
    // cc1's trace.
    let round_mask = tq.is_power_of_two().then(|| !(tq - 1));

    let rows: usize = chunks.iter().map(|c| c.rows.len()).sum();
    let mut s: Streams = Default::default();
    for st in s.iter_mut().take(n_streams) {
        st.reserve(rows / 8);
    }
    // Rounding: the true and the rounded stamp, as offsets from the first.
    let (mut true_t, mut rounded_t) = (0u64, 0u64);
    // Layout 3: events of cycles 0 since the last that was not; layout 4:
    // the same for time deltas.
    let (mut zeros, mut time_zeros) = (0u64, 0u64);
    // Layout 4: the current event's kind byte, written at its stack.
    let mut kind = 0u8;
    // Layout 6: runs of time deltas 0 against the previous run.
    let mut time_runs = RunCoder { delta: pred.on(OPT_TIMESKIP), prev: 0 };
    // Layout 5: the events since the last whose timing departed from the
    // replay of the draws.
    let mut kept = 0u64;
    // Layout 8, under sampled timing: each function's cycles sorted within
    // groups of the record's items (`cycle_groups`), each coded against the
    // one before it.
    let sorted = sorts_cycles(layout, &started);
    let mut groups = Gather::default();
    let mut prev_cycles = 0u64;
    let mut live = LiveCount::default();
    macro_rules! put_group {
        () => {
            |p: Put| {
                let (a, b) = s.split_at_mut(Stream::CyclesRest as usize);
                let (main, rest) = (&mut a[Stream::Cycles as usize], &mut b[0]);
                match p {
                    Put::Key(k, n) => {
                        put_varint(main, k as u64);
                        put_varint(main, n as u64);
                        prev_cycles = 0;
                    }
                    Put::Value(v) => put_stepped_after(v, cd, &mut prev_cycles, main, rest),
                    Put::End => put_varint(main, 0),
                }
            }
        };
    }
    // Inlined into each of `walk_rows`' call sites, where the token's kind
    // and field are known: called, it was a fifth of the finish's time in
    // its prologue and the dispatch on the token.
    walk_rows(chunks, #[inline(always)] |t| {
        match t {
            Token::Kind(b) => {
                pred.event();
                if sorted {
                    groups.event(put_group!());
                }
                if layout < 4 {
                    s[Stream::Kind as usize].push(b)
                } else if b & KIND_MASK == EV_STACK_DEF {
                    // Layout 4: a STACK_DEF is stack 0; an event's kind byte
                    // waits for its stack.
                    put_varint(&mut s[Stream::Stack as usize], 0);
                    s[Stream::Kind as usize].push(b ^ EV_STACK_DEF);
                } else {
                    kind = b;
                }
            }
            Token::Value(f, v) => match f {
                Field::Time => {
                    let v = if round {
                        true_t = true_t.wrapping_add(v);
                        let r = match round_mask {
                            Some(m) => true_t & m,
                            None => true_t - true_t % tq,
                        };
                        let d = r.wrapping_sub(rounded_t);
                        rounded_t = r;
                        d
                    } else {
                        v
                    };
                    if layout >= 4 {
                        if v == 0 {
                            time_zeros += 1;
                            return true;
                        }
                        time_runs.put(time_zeros, &mut s[Stream::TimeSkip as usize]);
                        time_zeros = 0;
                    }
                    let (a, b) = s.split_at_mut(Stream::TimeRest as usize);
                    put_stepped(v, td, &mut a[Stream::Time as usize], &mut b[0]);
                }
                Field::Cycles if layout >= 5 => {
                    let timed = v != 0;
                    if replay.call(kind & KIND_MASK, timed) {
                        kept += 1;
                    } else {
                        put_varint(&mut s[Stream::CyclesSkip as usize], kept);
                        kept = 0;
                    }
                    if timed && sorted {
                        groups.timed(kind & KIND_MASK, v);
                    } else if timed {
                        let (a, b) = s.split_at_mut(Stream::CyclesRest as usize);
                        put_stepped(v, cd, &mut a[Stream::Cycles as usize], &mut b[0]);
                    }
                }
                Field::Cycles if layout >= 3 && v == 0 => zeros += 1,
                Field::Cycles => {
                    if layout >= 3 {
                        put_varint(&mut s[Stream::CyclesSkip as usize], zeros);
                        zeros = 0;
                    }
                    let (a, b) = s.split_at_mut(Stream::CyclesRest as usize);
                    put_stepped(v, cd, &mut a[Stream::Cycles as usize], &mut b[0]);
                }
                Field::Stack if layout >= 4 => {
                    put_varint(&mut s[Stream::Stack as usize], pred.put_stack(v));
                    let code = pred.put_kind_at_site(kind);
                    s[Stream::Kind as usize].push(code);
                }
                Field::Stack => {
                    pred.site(v);
                    put_varint(&mut s[Stream::Stack as usize], v)
                }
                Field::Def => put_varint(&mut s[Stream::Defs as usize], v),
                Field::Size => pred.put_size(v, &mut s),
                Field::Extra => pred.put_extra(v, &mut s),
                Field::Misc => {
                    if sorted {
                        groups.misc(v);
                    }
                    put_varint(&mut s[Stream::Misc as usize], v)
                }
                Field::NewPtr | Field::OldPtr | Field::Addr => {
                    live.count(f, v);
                    pred.put(f, v, &mut s)
                }
            },
        }
        true
    })?;
    if sorted {
        groups.flush(put_group!());
    }
    if zeros > 0 || kept > 0 {
        put_varint(&mut s[Stream::CyclesSkip as usize], zeros + kept);
    }
    if time_zeros > 0 {
        time_runs.put(time_zeros, &mut s[Stream::TimeSkip as usize]);
    }
    let total: usize = s.iter().map(Vec::len).sum();
    let mut out = Vec::with_capacity(total + 3 + 3 * 10 + n_streams * 5);
    out.push(layout);
    if layout >= 4 {
        put_varint(&mut out, pos);
        *chain = Some(Chain { pos, pred, draws: replay.end(thread), rows: chain_rows, live });
    }
    put_varint(&mut out, tq);
    put_varint(&mut out, cq);
    if layout >= 5 {
        started.put(&mut out);
    }
    for st in &s[..n_streams] {
        put_varint(&mut out, st.len() as u64);
    }
    for st in &s[..n_streams] {
        out.extend_from_slice(st);
    }
    Ok(out)
}

/// The values of a layout-5 body's CYCLES_SKIP stream: one for each event
/// whose timing departs from the replay of the draws, and at most one more
/// (the record's last run); in earlier layouts, one for each timed call.
pub fn timing_runs(cols: &[u8]) -> Result<usize, ColumnError> {
    let f = ColumnFields::new(cols)?;
    let (mut at, end) = (f.at[Stream::CyclesSkip as usize], f.end[Stream::CyclesSkip as usize]);
    let mut n = 0;
    while at < end {
        varint(cols, &mut at).map_err(|_| ColumnError::Truncated)?;
        n += 1;
    }
    Ok(n)
}

// ---------------------------------------------------------------------------
// Reading columns.

/// The items of a column-layout body of thread `tid` whose time deltas start
/// at `first_tsc`, as the decoder reads them (`split`'s inverse).
pub fn decode_columns(cols: &[u8], first_tsc: u64, tid: u32) -> Result<Vec<super::Item>, String> {
    decode_columns_chained(cols, first_tsc, tid, &mut None)
}

/// `decode_columns` for the next record of a thread whose previous record
/// was read with `chain` (`split_chained`'s inverse); `chain` then holds
/// this record's, or None after an error.
pub fn decode_columns_chained(
    cols: &[u8],
    first_tsc: u64,
    tid: u32,
    chain: &mut Option<Chain>,
) -> Result<Vec<super::Item>, String> {
    let mut f = ColumnFields::new(cols).map_err(|e| e.to_string())?;
    f.resume(chain.take())?;
    let mut padded = Vec::with_capacity(cols.len() + ColumnFields::PADDING);
    padded.extend_from_slice(cols);
    padded.extend_from_slice(&[0; ColumnFields::PADDING]);
    let items = super::decode::decode_chunk_with(&mut f, &padded, first_tsc, tid).map_err(|e| e.to_string())?;
    *chain = f.into_chain();
    Ok(items)
}

/// Writer side of a run stream: each run as it is, or (layout 6, time
/// deltas) as the difference to the previous run (zigzag).
struct RunCoder {
    delta: bool,
    prev: u64,
}

impl RunCoder {
    #[inline(always)]
    fn put(&mut self, run: u64, out: &mut Vec<u8>) {
        if self.delta {
            put_svarint(out, run.wrapping_sub(self.prev) as i64);
            self.prev = run;
        } else {
            put_varint(out, run);
        }
    }
}

/// A field coded by runs of 0: before each value that is not 0, a run
/// stream holds how many 0s came since the previous one.
struct ZeroRuns {
    on: bool,
    /// Runs coded against the previous one (`RunCoder`), which is `prev`.
    delta: bool,
    prev: u64,
    /// 0s still to hand out before the next coded value, once `read` (the
    /// run before it has been read).
    left: u64,
    read: bool,
}

impl ZeroRuns {
    fn new(on: bool, delta: bool) -> ZeroRuns {
        ZeroRuns { on, delta, prev: 0, left: 0, read: false }
    }

    /// Whether the field's next value is a 0 of a run (else it is coded),
    /// reading the run stream at `at` when a run starts.
    #[inline(always)]
    fn next_is_zero(&mut self, buf: &[u8], at: &mut usize) -> Result<bool, DecErr> {
        if !self.on {
            return Ok(false);
        }
        if !self.read {
            self.left = varint(buf, at)?;
            if self.delta {
                self.left = self.prev.wrapping_add(zigzag(self.left) as u64);
                self.prev = self.left;
            }
            self.read = true;
        }
        if self.left > 0 {
            self.left -= 1;
            return Ok(true);
        }
        self.read = false;
        Ok(false)
    }
}

/// Reads a column-layout chunk's fields for the decoder (`fields::Fields`).
pub(crate) struct ColumnFields {
    /// Read position and end of each stream in the chunk's bytes.
    at: [usize; MAX_STREAMS],
    end: [usize; MAX_STREAMS],
    time_step: u64,
    cycles_step: u64,
    pred: Predictor,
    /// Layout 3: cycles are coded by runs of 0 (`Stream::CyclesSkip`);
    /// layout 4: time deltas too (`Stream::TimeSkip`).
    cycle_zeros: ZeroRuns,
    time_zeros: ZeroRuns,
    /// Layout 4: the record's place in its thread's chain (0: it starts one).
    chain_pos: u64,
    /// Layout 5: the replay of the timing draws, and the current event's kind.
    draws: Option<Draws>,
    kind: u8,
    /// Layout 8 under sampled timing (`sorts_cycles`): the current group's
    /// cycles per function, handed to its timed calls.
    sorted_cycles: bool,
    hand: Hand,
    /// Layout 4: each item's stack comes before its kind byte, which is
    /// coded against its stack's (`Predictor::kind_at_site`); the current
    /// event's stack.
    kind_by_site: bool,
    stack: u64,
    /// Layout 4: a cursor in the FreeSeq stream running ahead of the decode
    /// (`far_ahead`), and the number of the far free it stands after. A far
    /// free reads its block's ring entry, allocated long before: on threads
    /// freeing at random that was a cache miss each (a tenth of eight
    /// threads' report), now loading while the events before it decode.
    far_at: Option<usize>,
    far_prev: u64,
}

/// Far frees whose ring entries are loading ahead of the one decoded.
const FAR_AHEAD: usize = 8;

impl ColumnFields {
    /// Takes over the predictions of the thread's previous record, which a
    /// record at a place above 0 in its chain needs: refused when there is
    /// none or it was at another place than the one before this.
    pub fn resume(&mut self, prev: Option<Chain>) -> Result<(), String> {
        if self.chain_pos == 0 {
            return Ok(());
        }
        match prev {
            Some(c) if c.pos + 1 == self.chain_pos && c.pred.layout() == self.pred.layout() => {
                self.pred = c.pred;
                Ok(())
            }
            _ => Err(format!(
                "its predictions run on from the previous record of its thread (place {} of its chain), which could not be read",
                self.chain_pos
            )),
        }
    }

    /// After the record's last event: its predictions, for the thread's
    /// next record (layout 4; None before it).
    pub fn into_chain(self) -> Option<Chain> {
        (self.pred.layout() >= 4).then_some(Chain { pos: self.chain_pos, pred: self.pred, draws: Thread::At(Draws::Unknown), rows: 0, live: LiveCount::default() })
    }

    /// Checks the layout header of `buf` (the decompressed body).
    pub fn new(buf: &[u8]) -> Result<ColumnFields, ColumnError> {
        let mut h = Reader::new(buf);
        let layout = h.byte()?;
        let n_streams = n_streams(layout).ok_or(ColumnError::BadLayout("unknown layout version"))?;
        let chain_pos = if layout >= 4 { h.v()? } else { 0 };
        let (time_step, cycles_step) = (h.v()?, h.v()?);
        let draws = if layout >= 5 { Some(Draws::get(buf, &mut h.pos).map_err(ColumnError::BadLayout)?) } else { None };
        let mut lens = [0usize; MAX_STREAMS];
        for l in lens.iter_mut().take(n_streams) {
            *l = usize::try_from(h.v()?).map_err(|_| ColumnError::BadLayout("stream too long"))?;
        }
        let mut pos = h.pos;
        if lens.iter().try_fold(0usize, |a, &l| a.checked_add(l)) != Some(buf.len() - pos) {
            return Err(ColumnError::BadLayout("stream lengths do not add up to the body"));
        }
        // A layout's missing streams are empty, at the end of the body.
        let (mut at, mut end) = ([0usize; MAX_STREAMS], [0usize; MAX_STREAMS]);
        for i in 0..MAX_STREAMS {
            at[i] = pos;
            pos += lens[i];
            end[i] = pos;
        }
        // A record past its chain's start reads with the predictions of its
        // thread's previous record (`resume`): tables made here, and zeroed,
        // for each such record, were thrown away at once.
        let pred = if layout >= 4 && chain_pos > 0 { Predictor::awaiting(layout) } else { Predictor::new(layout) };
        Ok(ColumnFields {
            at,
            end,
            time_step,
            cycles_step,
            cycle_zeros: ZeroRuns::new(layout >= 3, false),
            time_zeros: ZeroRuns::new(layout >= 4, pred.on(OPT_TIMESKIP)),
            pred,
            chain_pos,
            sorted_cycles: draws.as_ref().is_some_and(|d| sorts_cycles(layout, d)),
            hand: Hand::default(),
            draws,
            kind: 0,
            kind_by_site: layout >= 4,
            stack: 0,
            far_at: None,
            far_prev: 0,
        })
    }

    /// Layout 8: a timed call's cycles from its group's blocks of its
    /// function, read at the group's first timed call.
    fn cycles_from_group(&mut self, buf: &[u8]) -> Result<u64, DecErr> {
        if !self.hand.loaded() {
            let (c, r) = (Stream::Cycles as usize, Stream::CyclesRest as usize);
            let (at, step) = (std::cell::RefCell::new(&mut self.at), self.cycles_step);
            let mut prev = 0u64;
            let next = || varint(buf, &mut at.borrow_mut()[c]);
            let value = |first: bool| {
                let mut at = at.borrow_mut();
                prev = if first { 0 } else { prev };
                prev = prev.wrapping_add(varint(buf, &mut at[c])?);
                Ok(from_stepped(step, prev, varint(buf, &mut at[r])?))
            };
            self.hand.load(next, value, DecErr::Columns)?;
        }
        // An operator new's or delete's form is its first misc field, not
        // read yet.
        let form = if has_form(self.kind) {
            let mut at = self.at[Stream::Misc as usize];
            Some(varint(buf, &mut at)?)
        } else {
            None
        };
        self.hand.take(self.kind, form).ok_or(DecErr::Columns("a timed call has no cycles left in its group's block"))
    }

    /// A far free is about to be decoded (its number next in the FreeSeq
    /// stream): the ring entries of the next [`FAR_AHEAD`] far frees start
    /// loading, one more each time (all of them at the record's first).
    #[inline(always)]
    fn far_ahead(&mut self, buf: &[u8]) {
        let i = Stream::FreeSeq as usize;
        let (mut at, n) = match self.far_at {
            Some(at) => (at, 1),
            None => {
                self.far_prev = self.pred.prev_far();
                (self.at[i], FAR_AHEAD + 1)
            }
        };
        for _ in 0..n {
            if at >= self.end[i] {
                break;
            }
            match varint(buf, &mut at) {
                Ok(code) => self.far_prev = self.pred.prefetch_far(self.far_prev, code),
                // Damage the decode will report when it gets there.
                Err(_) => at = self.end[i],
            }
        }
        self.far_at = Some(at);
    }

    /// Bytes the decoder appends after a column-layout body, so that reads
    /// need no per-stream end check: a damaged stream can at worst run into
    /// the next one, which `check_end` reports at the end of the chunk.
    pub const PADDING: usize = 16;

    #[inline(always)]
    fn v(&mut self, buf: &[u8], s: Stream) -> Result<u64, DecErr> {
        varint(buf, &mut self.at[s as usize])
    }
}

impl Fields for ColumnFields {
    #[inline(always)]
    fn kind(&mut self, buf: &[u8]) -> Result<Option<u8>, DecErr> {
        let i = Stream::Kind as usize;
        if self.at[i] >= self.end[i] {
            return Ok(None);
        }
        self.at[i] += 1;
        self.pred.event();
        if self.sorted_cycles {
            self.hand.event();
        }
        let code = buf[self.at[i] - 1];
        if !self.kind_by_site {
            return Ok(Some(code));
        }
        // Layout 4: the item's stack first (0: a STACK_DEF), then its kind
        // byte against the one last seen at that stack.
        match self.v(buf, Stream::Stack)? {
            0 => Ok(Some(code ^ EV_STACK_DEF)),
            s => {
                self.stack = self.pred.get_stack(s)?;
                let k = self.pred.kind_at_site(code);
                self.kind = k & KIND_MASK;
                Ok(Some(k))
            }
        }
    }
    #[inline(always)]
    fn value(&mut self, buf: &[u8], what: Field) -> Result<u64, DecErr> {
        match what {
            Field::Time => {
                if self.time_zeros.next_is_zero(buf, &mut self.at[Stream::TimeSkip as usize])? {
                    return Ok(0);
                }
                let (q, r) = (self.v(buf, Stream::Time)?, self.v(buf, Stream::TimeRest)?);
                Ok(from_stepped(self.time_step, q, r))
            }
            Field::Cycles if self.draws.is_some() => {
                let draws = self.draws.as_mut().expect("layout 5");
                let (predicted, due) = draws.predict(self.kind);
                // A run of events as the replay predicts them, then one that departs.
                let kept = self.cycle_zeros.next_is_zero(buf, &mut self.at[Stream::CyclesSkip as usize])?;
                let timed = predicted == kept;
                draws.settle(due, timed, self.kind);
                if !timed {
                    return Ok(0);
                }
                if self.sorted_cycles {
                    return self.cycles_from_group(buf);
                }
                let (q, r) = (self.v(buf, Stream::Cycles)?, self.v(buf, Stream::CyclesRest)?);
                Ok(from_stepped(self.cycles_step, q, r))
            }
            Field::Cycles => {
                if self.cycle_zeros.next_is_zero(buf, &mut self.at[Stream::CyclesSkip as usize])? {
                    return Ok(0);
                }
                let (q, r) = (self.v(buf, Stream::Cycles)?, self.v(buf, Stream::CyclesRest)?);
                Ok(from_stepped(self.cycles_step, q, r))
            }
            Field::Stack if self.kind_by_site => Ok(self.stack),
            Field::Stack => {
                let v = self.v(buf, Stream::Stack)?;
                self.pred.site(v);
                Ok(v)
            }
            Field::Size => {
                let code = self.v(buf, Stream::Size)?;
                Ok(self.pred.get_size(code))
            }
            Field::Extra => {
                let code = self.v(buf, Stream::Extra)?;
                Ok(self.pred.get_extra(code))
            }
            Field::Misc => self.v(buf, Stream::Misc),
            Field::Def => self.v(buf, Stream::Defs),
            Field::NewPtr | Field::OldPtr | Field::Addr => {
                let code = match what {
                    Field::NewPtr => self.v(buf, Stream::AllocRank)?,
                    Field::OldPtr => {
                        let code = self.v(buf, Stream::FreeRank)?;
                        if self.pred.is_far(code) {
                            self.far_ahead(buf);
                        }
                        code
                    }
                    _ => 0,
                };
                let at = &mut self.at;
                self.pred.get(what, code, |s| varint(buf, &mut at[s as usize]))
            }
        }
    }
    fn def_room(&self, _buf: &[u8]) -> u64 {
        let i = Stream::Defs as usize;
        self.end[i].saturating_sub(self.at[i]) as u64
    }
    fn check_end(&self) -> Result<(), DecErr> {
        if self.at == self.end {
            Ok(())
        } else {
            Err(DecErr::Columns("a stream holds more or fewer values than the events use"))
        }
    }
    fn position(&self) -> usize {
        self.at[Stream::Kind as usize]
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::trace::decode::tests::every_kind;
    use crate::trace::decode::{decode_chunk, RowFields};
    use crate::trace::encode::ChunkEncoder;
    use crate::trace::{Event, EventKind, Func, Item};
    use crate::testutil::Xorshift;

    fn from_rows(rows: &[u8], first_tsc: u64) -> Vec<Item> {
        decode_chunk(RowFields::default(), rows, first_tsc, 1).unwrap()
    }

    fn from_cols(cols: &[u8], first_tsc: u64) -> Result<Vec<Item>, String> {
        decode_columns(cols, first_tsc, 1)
    }

    /// `items` with each event's cycles set apart: the events with timed
    /// calls' cycles as 1, and each function's cycles sorted — what a
    /// layout 8 record under sampled timing keeps (`cycle_groups`).
    pub(crate) fn cycles_apart(items: &[Item]) -> (Vec<Item>, std::collections::BTreeMap<String, Vec<u64>>) {
        let mut by_func: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
        let items = items
            .iter()
            .map(|i| match i {
                Item::Event(e) if e.cycles != 0 && e.cycles != crate::trace::UNTIMED => {
                    by_func.entry(format!("{:?}", e.kind.func())).or_default().push(e.cycles);
                    Item::Event(Event { cycles: 1, ..e.clone() })
                }
                i => i.clone(),
            })
            .collect();
        by_func.values_mut().for_each(|v| v.sort_unstable());
        (items, by_func)
    }

    /// Round trip in the previous layouts too (still read), and the current one.
    fn roundtrip_one(rows: &[u8], first_tsc: u64) -> Vec<u8> {
        let want = from_rows(rows, first_tsc);
        assert!(!want.is_empty());
        for layout in [1, 2, 3, 4, 5, 6, 7] {
            let old = split_layout(&[RowChunk { first_tsc, rows }], None, layout).unwrap();
            assert_eq!(from_cols(&old, first_tsc).unwrap(), want, "layout {layout}");
        }
        let cols = split(&[RowChunk { first_tsc, rows }]).unwrap();
        assert_eq!(from_cols(&cols, first_tsc).unwrap(), want);
        cols
    }

    fn malloc(tsc: u64, ptr: u64) -> Event {
        let kind = EventKind::Alloc { func: Func::Malloc, size: 40, align: 0, ptr, usable: 40 };
        Event { tid: 1, tsc, cycles: 52, stack: 1, flags: 0, kind }
    }

    fn free(tsc: u64, ptr: u64) -> Event {
        Event { tid: 1, tsc, cycles: 26, stack: 2, flags: 0, kind: EventKind::Free { func: Func::Free, ptr } }
    }

    #[test]
    fn every_kind_round_trips() {
        let mut enc = ChunkEncoder::new(1);
        for item in every_kind(1, 1000) {
            enc.item(&item);
        }
        roundtrip_one(enc.body(), 1000);
    }

    #[test]
    fn addresses_are_predicted_and_misses_kept() {
        // malloc a, b; free b; malloc → b again (reuse); free a; free 0xdead (never allocated).
        let (a, b) = (0x5555_0000_1000u64, 0x5555_0000_2000u64);
        let mut enc = ChunkEncoder::new(1);
        for e in [malloc(100, a), malloc(126, b), free(152, b), malloc(178, b), free(204, a), free(230, 0xdead)] {
            enc.event(&e);
        }
        let cols = roundtrip_one(enc.body(), 100);
        // Layout: version, place in the chain, steps (1: too few values to
        // find one), the timing draws (0: none replayed), then lengths: AllocRank holds 0 (miss), 0 (miss: b is
        // not at a's end), 2 (rank 0 among frees) and FreeRank 3 (b:
        // newest), 4 (a: second newest then), 0 (miss, whose delta
        // FreeDelta holds).
        let mut h = Reader::new(&cols);
        assert_eq!(h.byte().unwrap(), COLUMNS_LAYOUT);
        assert_eq!((h.v().unwrap(), h.v().unwrap(), h.v().unwrap(), h.v().unwrap()), (0, 1, 1, 0));
        let lens: Vec<usize> = (0..MAX_STREAMS).map(|_| h.v().unwrap() as usize).collect();
        let stream = |s: Stream| {
            let start = h.pos + lens[..s as usize].iter().sum::<usize>();
            &cols[start..start + lens[s as usize]]
        };
        assert_eq!(stream(Stream::AllocRank), &[0, 0, 2]);
        assert_eq!(stream(Stream::FreeRank), &[3, 4, 0]);
        // The miss's delta (layout 6): 0xdea units of 16 (zigzag, then a
        // flag: low bits follow), and the low bits 0xd.
        let mut dead = Vec::new();
        put_varint(&mut dead, (0xdea << 2) | 1);
        put_varint(&mut dead, 0xd);
        assert_eq!(stream(Stream::FreeDelta), &dead[..]);
    }

    /// The body's stream `which` of a current-layout body.
    fn stream_of(cols: &[u8], which: Stream) -> Vec<u8> {
        stream_of_layout(cols, which, COLUMNS_LAYOUT)
    }

    fn stream_of_layout(cols: &[u8], which: Stream, layout: u8) -> Vec<u8> {
        assert_eq!(cols[0], layout);
        let f = ColumnFields::new(cols).unwrap();
        cols[f.at[which as usize]..f.end[which as usize]].to_vec()
    }

    /// glibc's way with python3's objects: blocks carved from the top one
    /// after the other, while blocks handed out again from its bins come
    /// between them. Each round: A (its class alternating), B right after
    /// it (which teaches the gap: glibc's 8-byte header), a freed block
    /// handed out again, C (B's class), and another handed out again.
    #[test]
    fn an_allocation_at_the_top_is_guessed_after_blocks_handed_out_again() {
        let spare = 0x7fff_0000_1000u64;
        let mut top = 0x5555_0000_0010u64;
        let mut enc = ChunkEncoder::new(1);
        let mut t = 100;
        let n = 400usize;
        let alloc = |t: u64, size: u64, ptr: u64| {
            let usable = ((size + 8).div_ceil(16) * 16 - 8).max(24);
            Event { kind: EventKind::Alloc { func: Func::Malloc, size, align: 0, ptr, usable }, ..malloc(t, ptr) }
        };
        let mut carve = |size: u64| {
            let p = top;
            top += ((size + 8).div_ceil(16) * 16 - 8).max(24) + 8;
            p
        };
        for i in 0..n {
            let (a, b) = (carve(if i % 2 == 0 { 55 } else { 200 }), carve(100));
            let c = carve(100);
            for e in [alloc(t, if i % 2 == 0 { 55 } else { 200 }, a), alloc(t, 100, b), free(t, spare), alloc(t, 24, spare), alloc(t, 100, c), free(t, spare), alloc(t, 24, spare)] {
                enc.event(&e);
                t += 1;
            }
        }
        let cols = roundtrip_one(enc.body(), 100);
        let codes = stream_of(&cols, Stream::AllocRank);
        let misses = |s: &[u8]| s.iter().filter(|&&b| b != 0).count();
        // Layout 7: A at the top's end, C at its class's end, plus the gap;
        // B is the previous allocation's end plus the gap (a miss by 0).
        assert!(codes.iter().filter(|&&c| c == 82).count() >= n - 2, "A at the top");
        assert!(codes.iter().filter(|&&c| c == 1).count() >= n - 2, "C at its class's end");
        // Only the first A (from nothing) and the first B (before the gap
        // was learned) cost a delta's bytes.
        let deltas = stream_of(&cols, Stream::AllocDelta);
        assert!(misses(&deltas) <= 12, "{:?}", &deltas[..deltas.len().min(40)]);
        // Layout 6 guessed A and C at the end of the block handed out just
        // before them, or at the class's end without the gap: misses, coded
        // by their distance.
        let old = split_layout(&[RowChunk { first_tsc: 100, rows: enc.body() }], None, 6).unwrap();
        let f = ColumnFields::new(&old).unwrap();
        assert!(misses(&old[f.at[Stream::AllocDelta as usize]..f.end[Stream::AllocDelta as usize]]) >= 2 * n);
    }

    #[test]
    fn a_chain_restarts_once_its_records_hold_chain_rows() {
        // Records of a little less than a seventh of CHAIN_ROWS: seven hold
        // less, eight more, so the ninth starts a chain, well before
        // CHAIN_RECORDS records.
        let mut enc = ChunkEncoder::new(1);
        let mut i = 0u64;
        while (enc.body().len() as u64) < CHAIN_ROWS / 7 - 100_000 {
            enc.event(&malloc(100 + 26 * i, 0x1000 + 64 * i));
            i += 1;
        }
        let rows = [RowChunk { first_tsc: 100, rows: enc.body() }];
        let mut chain = None;
        let places: Vec<u64> = (0..9)
            .map(|_| {
                split_chained(&rows, Stamps::Exact, &mut chain).unwrap();
                chain.as_ref().unwrap().pos()
            })
            .collect();
        assert_eq!(places, [0, 1, 2, 3, 4, 5, 6, 7, 0]);
    }

    #[test]
    fn untimed_calls_cost_a_gap_not_a_value() {
        // Cycles 0 (not timed) on all but the 3rd and 7th of 9 events: the
        // gaps before them (2, 3) and the 2 zeros at the end, and only the
        // two values in CYCLES.
        let mut enc = ChunkEncoder::new(1);
        for i in 0..9u64 {
            let mut e = malloc(100 + 26 * i, 0x1000 + 64 * i);
            e.cycles = match i {
                2 => 52,
                6 => 78,
                _ => 0,
            };
            enc.event(&e);
        }
        let cols = roundtrip_one(enc.body(), 100);
        assert_eq!(stream_of(&cols, Stream::CyclesSkip), [2, 3, 2]);
        assert_eq!(stream_of(&cols, Stream::Cycles), [52, 78]);
        // None at the end: no trailing gap.
        let mut enc = ChunkEncoder::new(1);
        for i in 0..3u64 {
            enc.event(&malloc(100 + 26 * i, 0x1000 + 64 * i));
        }
        let cols = roundtrip_one(enc.body(), 100);
        assert_eq!(stream_of(&cols, Stream::CyclesSkip), [0, 0, 0]);
    }

    #[test]
    fn replayed_draws_leave_one_run_and_a_departure_stays_exact() {
        // A thread's calls timed as the preload library chooses them, its
        // generator seeded from the first call's stamp (100) and id (1).
        let timed = crate::trace::draws::tests::preload_timed(3000, 32, 100, 1);
        let events: Vec<Event> = (0..3000u64)
            .map(|i| Event { cycles: if timed[i as usize] { 52 + i } else { 0 }, ..malloc(100 + 26 * i, 0x1000 + 64 * i) })
            .collect();
        let write = |events: &[Event]| {
            let mut enc = ChunkEncoder::new(1);
            events.iter().for_each(|e| enc.event(e));
            let rows = enc.body().to_vec();
            let mut chains = Chains::new(32);
            let mut chain = chains.take(1);
            let cols = split_chained(&[RowChunk { first_tsc: 100, rows: &rows }], Stamps::Exact, &mut chain).unwrap();
            // Each function's cycles sorted within the record: the events
            // and the timing exact, the cycles as a distribution.
            assert_eq!(cycles_apart(&from_cols(&cols, 100).unwrap()), cycles_apart(&from_rows(&rows, 100)), "round trip");
            cols
        };
        let cols = write(&events);
        assert_eq!(stream_of(&cols, Stream::CyclesSkip), [0xb8, 0x17], "one run of the 3000 events, as predicted");
        let n_timed = timed.iter().filter(|&&t| t).count();
        assert!(n_timed > 50, "{n_timed} calls timed");
        // A call timed where the replay says not: stored, and exact.
        let mut departed = events.clone();
        departed[1000].cycles = if departed[1000].cycles == 0 { 7 } else { 0 };
        let cols = write(&departed);
        assert!(stream_of(&cols, Stream::CyclesSkip).len() > 2);
        // Without the seed (a thread whose first record was lost), the
        // gaps are stored as before: one run per timed call.
        let mut enc = ChunkEncoder::new(1);
        events.iter().for_each(|e| enc.event(e));
        let cols = roundtrip_one(enc.body(), 100);
        assert!(stream_of(&cols, Stream::CyclesSkip).len() >= n_timed);
    }

    #[test]
    fn sampled_cycles_come_back_per_function_and_group() {
        // Three groups' worth of one thread's calls, timed as the preload
        // library draws them: malloc, operator new and new[] (one kind
        // byte, two functions) and free, each function's cycles rising
        // through the record in its own range.
        use crate::trace::cycle_groups::GROUP_EVENTS;
        let n = 3 * GROUP_EVENTS as u64 - 100;
        let timed = crate::trace::draws::tests::preload_timed(n as usize, 32, 100, 1);
        let events: Vec<Event> = (0..n)
            .map(|i| {
                let base = malloc(100 + 26 * i, 0x1000 + 64 * i);
                let (func, range) = [(Func::Malloc, 0), (Func::New, 10_000), (Func::NewArray, 20_000), (Func::Free, 30_000)][i as usize % 4];
                let kind = match (func, base.kind) {
                    (Func::Free, _) => EventKind::Free { func, ptr: 0x1000 + 64 * (i - 1) },
                    (_, EventKind::Alloc { size, align, ptr, usable, .. }) => EventKind::Alloc { func, size, align, ptr, usable },
                    _ => unreachable!(),
                };
                Event { cycles: if timed[i as usize] { 1 + range + i / 100 } else { 0 }, kind, ..base }
            })
            .collect();
        let mut enc = ChunkEncoder::new(1);
        events.iter().for_each(|e| enc.event(e));
        let rows = enc.body().to_vec();
        let mut chain = Chains::new(32).take(1);
        let cols = split_chained(&[RowChunk { first_tsc: 100, rows: &rows }], Stamps::Exact, &mut chain).unwrap();
        let (back, want) = (from_cols(&cols, 100).unwrap(), from_rows(&rows, 100));
        assert_eq!(back.len(), want.len());
        // Each group's calls of each function hold the group's own values
        // of that function: never another function's, never another
        // group's; and every call's timing is as it was.
        let g = GROUP_EVENTS as usize;
        for (b, w) in back.chunks(g).zip(want.chunks(g)) {
            assert_eq!(cycles_apart(b), cycles_apart(w));
        }
        // The values do move: a call's own value is not what comes back.
        let moved = back.iter().zip(&want).filter(|(b, w)| b != w).count();
        assert!(moved > 1000, "{moved} calls got another value of their function");
        // And the sorted blocks compress to a fraction of the same values
        // in event order (layout 7).
        let zst = |c: &[u8]| zstd::bulk::compress(&stream_of_layout(c, Stream::Cycles, c[0]), 3).unwrap().len();
        let in_order = split_layout(&[RowChunk { first_tsc: 100, rows: &rows }], None, 7).unwrap();
        let (sorted, unsorted) = (zst(&cols), zst(&in_order));
        assert!(sorted * 3 < unsorted, "{sorted} bytes sorted, {unsorted} in event order");
    }

    #[test]
    fn chained_records_name_earlier_blocks_by_number_and_restart() {
        // 36 records of one thread: each allocates 300 blocks and frees, in
        // order, the 300 the record before allocated — too far back for the
        // recent allocations (256).
        let block = |r: u64, j: u64| 0x5555_0000_0000 + (r * 300 + j) * 48;
        let (mut wchain, mut rchain) = (None, None);
        for r in 0..CHAIN_RECORDS + 4 {
            let first = 1000 + r * 100_000;
            let mut enc = ChunkEncoder::new(1);
            for j in 0..300 {
                enc.event(&malloc(first + j * 52, block(r, j)));
                if r > 0 {
                    enc.event(&free(first + j * 52 + 26, block(r - 1, j)));
                }
            }
            let rows = enc.body();
            let cols = split_chained(&[RowChunk { first_tsc: first, rows }], Stamps::Exact, &mut wchain).unwrap();
            let pos = r % CHAIN_RECORDS;
            assert_eq!(wchain.as_ref().unwrap().pos(), pos);
            if pos > 0 {
                // Not readable alone, nor after another place of the chain.
                assert!(decode_columns(&cols, first, 1).is_err());
                let mut wrong = Some(Chain { pos: pos + 1, pred: Predictor::new(COLUMNS_LAYOUT), draws: Thread::At(Draws::Unknown), rows: 0, live: LiveCount::default() });
                assert!(decode_columns_chained(&cols, first, 1, &mut wrong).is_err());
            }
            let back = decode_columns_chained(&cols, first, 1, &mut rchain).unwrap();
            assert_eq!(back, from_rows(rows, first), "record {r}");
            let (seqs, misses) = (stream_of(&cols, Stream::FreeSeq), stream_of(&cols, Stream::FreeDelta));
            if r == 0 {
                assert!(seqs.is_empty() && misses.is_empty());
            } else if pos == 0 {
                // A new chain knows no earlier block: the frees are misses.
                assert!(seqs.is_empty() && !misses.is_empty(), "record {r}");
            } else {
                // Each block freed is the one after the block freed before.
                assert_eq!(seqs, vec![0u8; 300], "record {r}");
                assert!(misses.is_empty(), "record {r}");
            }
        }
    }

    /// Two records of one thread (a chain's first and second): each
    /// allocates 300 blocks; the second frees the first's, in order, each
    /// named by its number (a far free: too far back for the recent
    /// allocations).
    fn far_free_records() -> Vec<(u64, Vec<u8>)> {
        let block = |r: u64, j: u64| 0x5555_0000_0000 + (r * 300 + j) * 48;
        let mut wchain = None;
        (0..2u64)
            .map(|r| {
                let first = 1000 + r * 100_000;
                let mut enc = ChunkEncoder::new(1);
                for j in 0..300 {
                    enc.event(&malloc(first + j * 52, block(r, j)));
                    if r > 0 {
                        enc.event(&free(first + j * 52 + 26, block(0, j)));
                    }
                }
                (first, split_chained(&[RowChunk { first_tsc: first, rows: enc.body() }], Stamps::Exact, &mut wchain).unwrap())
            })
            .collect()
    }

    /// `ColumnFields` after reading `cols` to its end with the predictions
    /// `prev` (None: the record starts a chain).
    fn read_to_end(cols: &[u8], first: u64, prev: Option<Chain>) -> Result<ColumnFields, String> {
        let mut f = ColumnFields::new(cols).map_err(|e| e.to_string())?;
        f.resume(prev)?;
        let mut padded = cols.to_vec();
        padded.extend_from_slice(&[0; ColumnFields::PADDING]);
        crate::trace::decode::decode_chunk_with(&mut f, &padded, first, 1).map_err(|e| e.to_string())?;
        Ok(f)
    }

    #[test]
    fn the_far_frees_read_ahead_are_the_ones_decoded() {
        let recs = far_free_records();
        let chain = read_to_end(&recs[0].1, recs[0].0, None).unwrap().into_chain();
        let f = read_to_end(&recs[1].1, recs[1].0, chain).unwrap();
        // The cursor ahead read the whole FreeSeq stream, and the numbers it
        // prefetched ended where the decode's did: its slots were the decode's.
        let i = Stream::FreeSeq as usize;
        assert_eq!(stream_of(&recs[1].1, Stream::FreeSeq), vec![0u8; 300], "each free a far free");
        assert_eq!(f.far_at, Some(f.end[i]));
        assert_eq!(f.far_prev, f.pred.prev_far());
        assert_eq!(f.far_prev, 299);
    }

    #[test]
    fn a_damaged_far_free_stream_is_an_error_not_a_panic() {
        let recs = far_free_records();
        let (first, cols) = &recs[1];
        let f = ColumnFields::new(cols).unwrap();
        let seq = f.at[Stream::FreeSeq as usize]..f.end[Stream::FreeSeq as usize];
        assert_eq!(seq.len(), 300);
        let mut failed = 0;
        for at in seq {
            for x in [0x01, 0x40, 0x80, 0xff] {
                let mut c = cols.clone();
                c[at] ^= x;
                let chain = read_to_end(&recs[0].1, recs[0].0, None).unwrap().into_chain();
                failed += read_to_end(&c, *first, chain).is_err() as usize;
            }
        }
        assert!(failed > 0, "some damage is seen");
    }

    #[test]
    fn sizes_and_idle_time_cost_little() {
        // A call site's size repeated: 0 in SIZE; time deltas of 0 coded by
        // their runs.
        let mut enc = ChunkEncoder::new(1);
        for i in 0..10u64 {
            let mut e = malloc(1000 + if i < 6 { 0 } else { 26 * i }, 0x1000 + 64 * i);
            e.stack = 1 + (i % 2) as u32;
            enc.event(&e);
        }
        let cols = roundtrip_one(enc.body(), 1000);
        // Sizes 40 at two sites: above the guess 0 at first (the size itself), then 0.
        assert_eq!(stream_of(&cols, Stream::Size), [40, 40, 0, 0, 0, 0, 0, 0, 0, 0]);
        // Six stamps equal to the first (deltas 0), then four that are not:
        // runs 6, 0, 0, 0, each against the previous (zigzag): +6, -6, 0, 0.
        assert_eq!(stream_of(&cols, Stream::TimeSkip), [12, 11, 0, 0]);
    }

    #[test]
    fn a_repeated_sequence_of_stacks_costs_its_rank() {
        // Stacks 5, 9, 7, 9, 5, 9 and one new each time (100 + i), over
        // and over: 9 is followed by 7, 5 and the new one in turn, so its
        // list holds them at ranks below 3; 5 and 7 are followed by 9 alone.
        let mut enc = ChunkEncoder::new(1);
        let mut want = Vec::new();
        for i in 0..210u64 {
            let mut e = malloc(1000 + 26 * i, 0x1000 + 64 * i);
            e.stack = if i % 7 == 6 { 100 + i as u32 } else { [5, 9, 7, 9][(i % 7 % 4) as usize] };
            want.push(e.stack);
            enc.event(&e);
        }
        let cols = roundtrip_one(enc.body(), 1000);
        let s = stream_of(&cols, Stream::Stack);
        let mut r = Reader::new(&s);
        let codes: Vec<u64> = std::iter::from_fn(|| (!r.at_end()).then(|| r.v().unwrap())).collect();
        assert_eq!(codes.len(), 210);
        let escape = 1 + crate::trace::predict::STACK_MTF as u64;
        for (i, (&c, &st)) in codes.iter().zip(&want).enumerate() {
            match i % 7 {
                // New: the escape and the id.
                6 => assert_eq!(c, escape + u64::from(st), "event {i}"),
                // After a new stack (no list yet): the escape and the id.
                0 if i > 0 => assert_eq!(c, escape + 5, "event {i}"),
                // After 5 or 7: 9, rank 0.
                1 | 3 if i >= 7 => assert_eq!(c, 1, "event {i}"),
                // After 9: 7 or 5, rank 2 (behind the new one and the other).
                2 | 4 if i >= 14 => assert_eq!(c, 3, "event {i}"),
                _ => {}
            }
        }
    }

    #[test]
    fn rounded_stamps_fall_to_their_quantum_and_keep_everything_else() {
        let mut enc = ChunkEncoder::new(1);
        let stamps = [1000u64, 1003, 1100, 1356, 1357, 2000, 70_000];
        for (i, &t) in stamps.iter().enumerate() {
            enc.event(&malloc(t, 0x1000 + 64 * i as u64));
        }
        let rows = enc.body();
        let cols = split_rounded(&[RowChunk { first_tsc: 1000, rows }], 256).unwrap();
        let got = from_cols(&cols, 1000).unwrap();
        let mut want = from_rows(rows, 1000);
        for it in &mut want {
            if let Item::Event(e) = it {
                e.tsc = 1000 + (e.tsc - 1000) / 256 * 256;
            }
        }
        assert_eq!(got, want);
        let tsc: Vec<u64> = got.iter().filter_map(|i| if let Item::Event(e) = i { Some(e.tsc) } else { None }).collect();
        assert_eq!(tsc, [1000, 1000, 1000, 1256, 1256, 1768, 69_864]);
        // Every remainder 0: the time step is the quantum.
        assert!(stream_of(&cols, Stream::TimeRest).iter().all(|&b| b == 0));
    }

    #[test]
    fn chunks_of_a_thread_join_into_one() {
        // Two chunks as the C writer makes them: each starts its time deltas
        // at its own first_tsc and its address chain at 0.
        let mk = |t0: u64, ptrs: &[u64]| {
            let mut enc = ChunkEncoder::new(1);
            for (i, &p) in ptrs.iter().enumerate() {
                enc.event(&malloc(t0 + 13 * i as u64, p));
            }
            enc
        };
        let a = mk(1000, &[0x10, 0x20, 0x30]);
        let b = mk(5000, &[0x40, 0x50]);
        let chunks = [RowChunk { first_tsc: 1000, rows: a.body() }, RowChunk { first_tsc: 5000, rows: b.body() }];
        let cols = split(&chunks).unwrap();
        let mut want = from_rows(a.body(), 1000);
        want.extend(from_rows(b.body(), 5000));
        assert_eq!(want.len(), 5);
        assert_eq!(from_cols(&cols, 1000).unwrap(), want);
    }

    #[test]
    fn division_by_multiplication_is_exact() {
        for q in (2..=64u64).chain([100, 1 << 16]) {
            let d = Divisor::new(q);
            let mut rng = Xorshift::new(0x1234_5678_9abc_def1);
            for v in (0..5000u64).chain([(1 << 40) - 1, 1 << 40, u64::MAX, u64::MAX - 1]) {
                assert_eq!(d.div(v), v / q, "{v} / {q}");
                let r = rng.next_u64() >> 24; // below 2^40
                assert_eq!(d.div(r), r / q, "{r} / {q}");
            }
        }
    }

    #[test]
    fn steps_are_found_and_values_kept_exactly() {
        let vals: Vec<u64> = (1..1000u64).map(|i| i * 26 + u64::from(i % 50 == 0)).collect();
        assert_eq!(detect_step(&vals), 26);
        assert_eq!(detect_step(&(1..1000u64).collect::<Vec<_>>()), 1);
        for q in [1, 2, 26, 64] {
            for v in [0, 1, 12, 13, 14, 25, 26, 27, u64::MAX, u64::MAX - 12, 1 << 63] {
                let (mut m, mut r) = (Vec::new(), Vec::new());
                put_stepped(v, Divisor::new(q), &mut m, &mut r);
                let (quot, rest) = (Reader::new(&m).v().unwrap(), Reader::new(&r).v().unwrap());
                assert_eq!(from_stepped(q, quot, rest), v, "q {q} v {v}");
            }
        }
    }

    #[test]
    fn a_long_run_with_a_step_round_trips() {
        // Enough events for the step to be found, with reuse, misses and
        // off-step times, across three chunks.
        let mut chunks = Vec::new();
        let mut t = 10_000u64;
        let mut live: Vec<u64> = Vec::new();
        let mut rng = Xorshift::new(12345);
        for c in 0..3 {
            let mut enc = ChunkEncoder::new(1);
            let first = t;
            for i in 0..2000u64 {
                let x = rng.next_u64();
                t += 26 * (x % 40) + u64::from(i % 97 == 0);
                if x.is_multiple_of(3) && !live.is_empty() {
                    let p = live.swap_remove((x as usize / 3) % live.len());
                    enc.event(&free(t, p));
                } else {
                    let p = 0x4000_0000 + (x % 5000) * 16 + c;
                    live.push(p);
                    enc.event(&malloc(t, p));
                }
            }
            chunks.push((first, enc));
        }
        let rows: Vec<RowChunk> = chunks.iter().map(|(f, e)| RowChunk { first_tsc: *f, rows: e.body() }).collect();
        let cols = split(&rows).unwrap();
        assert_eq!((cols[1], cols[2], cols[3]), (0, 26, 26), "steps found");
        let want: Vec<Item> = chunks.iter().flat_map(|(f, e)| from_rows(e.body(), *f)).collect();
        assert_eq!(from_cols(&cols, chunks[0].0).unwrap(), want);
        // Compressed, the columns are smaller than the rows.
        let all_rows: Vec<u8> = rows.iter().flat_map(|r| r.rows.iter().copied()).collect();
        let z = |b: &[u8]| zstd::bulk::compress(b, 3).unwrap().len();
        assert!(z(&cols) < z(&all_rows), "{} vs {}", z(&cols), z(&all_rows));
    }

    #[test]
    fn random_mixes_of_every_kind_round_trip_across_chunks() {
        // Random events of every kind, with pointers drawn from a small pool
        // (so ranks, misses, reuse, realloc in place and 0 all occur), time
        // on and off a step, split over chunks of random sizes.
        let kinds = every_kind(1, 0);
        let mut rnd = Xorshift::new(0x9e37_79b9_7f4a_7c15);
        for round in 0..40 {
            let mut chunks = Vec::new();
            let mut t = 1_000 + round;
            for _ in 0..1 + rnd.below(5) {
                let mut enc = ChunkEncoder::new(1);
                let first = t;
                for _ in 0..rnd.below(400) {
                    t += if rnd.below(10) == 0 { rnd.below(1000) } else { 26 * rnd.below(50) };
                    let pool = |r: u64| if r == 0 { 0 } else { 0x5000_0000 + 16 * r };
                    let mut item = kinds[rnd.below(kinds.len() as u64) as usize].clone();
                    if let Item::Event(e) = &mut item {
                        e.tsc = t;
                        e.cycles = if rnd.below(4) == 0 { rnd.below(5000) } else { 26 * rnd.below(20) };
                        e.stack = rnd.below(30) as u32;
                        match &mut e.kind {
                            EventKind::Alloc { ptr, .. } => *ptr = pool(rnd.below(64)),
                            EventKind::Free { ptr, .. } | EventKind::SampleFree { ptr } => *ptr = pool(rnd.below(64)),
                            EventKind::Realloc { old, ptr, .. } => {
                                *old = pool(rnd.below(64));
                                *ptr = if rnd.below(3) == 0 { *old } else { pool(rnd.below(64)) };
                            }
                            EventKind::Sample { ptr, .. } => *ptr = pool(rnd.below(64)),
                            _ => {}
                        }
                    }
                    enc.item(&item);
                }
                chunks.push((first, enc));
            }
            let rows: Vec<RowChunk> = chunks.iter().map(|(f, e)| RowChunk { first_tsc: *f, rows: e.body() }).collect();
            let cols = split(&rows).unwrap();
            let want: Vec<Item> = chunks.iter().flat_map(|(f, e)| from_rows(e.body(), *f)).collect();
            assert_eq!(from_cols(&cols, chunks[0].0).unwrap(), want, "round {round}");
        }
    }

    #[test]
    fn damaged_columns_are_errors_not_panics() {
        let mut enc = ChunkEncoder::new(1);
        for item in every_kind(1, 1000) {
            enc.item(&item);
        }
        let cols = split(&[RowChunk { first_tsc: 1000, rows: enc.body() }]).unwrap();
        for cut in 0..cols.len() {
            assert!(from_cols(&cols[..cut], 1000).is_err(), "cut at {cut}");
        }
        let mut bad = cols.clone();
        bad[0] = 9;
        assert!(from_cols(&bad, 1000).is_err());
        // Every single-byte corruption either fails or decodes to something: never panics.
        for i in 1..cols.len() {
            for x in [0x01, 0x55, 0x80, 0xff] {
                let mut c = cols.clone();
                c[i] ^= x;
                let _ = from_cols(&c, 1000);
            }
        }
    }
}

#[cfg(test)]
mod recode_sizes {
    //! `MTLAB_RECODE=TRACE [MTLAB_RECODE_LAYOUT=3] cargo test --release --lib
    //! recode_sizes -- --ignored --nocapture`: a finished trace's events
    //! rewritten in a layout as `finish_trace` joins them (`JOIN_MAX_BYTES` of rows a
    //! record, a single thread's stamps rounded as solo chunks are), each
    //! record compressed; prints the bytes, each stream's share (compressed
    //! alone, record by record), and checks the round trip.
    use super::*;
    use crate::trace::encode::ChunkEncoder;
    use crate::trace::{Item, TraceFile, UNTIMED};

    const NAMES: [&str; MAX_STREAMS] = [
        "kind", "time", "time_rest", "cycles", "cycles_rest", "stack", "size", "alloc_code", "free_code", "ptr_delta",
        "extra", "misc", "stack_defs", "alloc_delta", "free_delta", "cycles_skip", "free_seq", "time_skip",
    ];

    #[test]
    #[ignore]
    fn recode_sizes() {
        let Ok(path) = std::env::var("MTLAB_RECODE") else { return };
        let layout: u8 = std::env::var("MTLAB_RECODE_LAYOUT").ok().and_then(|v| v.parse().ok()).unwrap_or(COLUMNS_LAYOUT);
        // Layout 6's codings to use (`predict::OPT_*` bits; all by default).
        if let Some(o) = std::env::var("MTLAB_RECODE_OPTS").ok().and_then(|v| v.parse().ok()) {
            crate::trace::predict::OPTS.with(|c| c.set(o));
        }
        let t = TraceFile::open(&path).unwrap();
        let mut per_thread: std::collections::BTreeMap<u32, Vec<Item>> = Default::default();
        let mut stacks = Vec::new();
        for item in t.items().unwrap() {
            match item {
                Item::Event(mut e) => {
                    if e.cycles == UNTIMED {
                        e.cycles = 0;
                    }
                    let v = per_thread.entry(e.tid).or_default();
                    v.append(&mut stacks);
                    v.push(Item::Event(e));
                }
                s => stacks.push(s),
            }
        }
        let solo = per_thread.len() == 1;
        let (mut total, mut records) = (0usize, 0usize);
        let mut per_stream = [0usize; MAX_STREAMS];
        // Across records: each record with its thread's previous one as a
        // zstd dictionary (whole body, and stream by stream), and a thread's
        // bodies as one frame (the most a larger window could find).
        let (mut with_prev, mut one_frame) = (0usize, 0usize);
        let mut per_stream_prev = [0usize; MAX_STREAMS];
        let mut comp = zstd::bulk::Compressor::new(3).unwrap();
        let t0 = std::time::Instant::now();
        for (tid, items) in &per_thread {
            // Row chunks of about 64 KiB, joined up to 1 MiB of rows.
            let mut encs: Vec<(u64, ChunkEncoder)> = Vec::new();
            for it in items {
                if encs.last().is_none_or(|(_, e)| e.body().len() >= 64 << 10) {
                    encs.push((0, ChunkEncoder::new(*tid)));
                }
                let (t0, e) = encs.last_mut().unwrap();
                if let Item::Event(ev) = it {
                    if e.n_events() == 0 {
                        *t0 = ev.tsc;
                    }
                }
                e.item(it);
            }
            let mut groups: Vec<Vec<usize>> = Vec::new();
            let mut bytes = 0;
            for (i, (_, e)) in encs.iter().enumerate() {
                if groups.is_empty() || bytes + e.body().len() > crate::trace::finish::JOIN_MAX_BYTES {
                    groups.push(Vec::new());
                    bytes = 0;
                }
                bytes += e.body().len();
                groups.last_mut().unwrap().push(i);
            }
            let (mut wchain, mut rchain) = (None, None);
            let mut prev: Option<Vec<u8>> = None;
            let mut all = Vec::new();
            for g in groups {
                let rows: Vec<RowChunk> = g.iter().map(|&i| RowChunk { first_tsc: encs[i].0, rows: encs[i].1.body() }).collect();
                let (tq, round) = if solo { (Some(1 << 16), true) } else { (None, false) };
                let cols = split_inner(&rows, tq, layout, round, &mut wchain).unwrap();
                total += comp.compress(&cols).unwrap().len();
                records += 1;
                all.extend_from_slice(&cols);
                with_prev += match &prev {
                    Some(p) => zstd::bulk::Compressor::with_dictionary(3, p).unwrap().compress(&cols).unwrap().len(),
                    None => comp.compress(&cols).unwrap().len(),
                };
                // Each stream alone.
                let f = ColumnFields::new(&cols).unwrap();
                let pf = prev.as_ref().map(|p| ColumnFields::new(p).unwrap());
                for (i, n) in per_stream.iter_mut().enumerate() {
                    let part = &cols[f.at[i]..f.end[i]];
                    if !part.is_empty() {
                        *n += comp.compress(part).unwrap().len();
                        let pp = match (&prev, &pf) {
                            (Some(p), Some(pf)) if pf.end[i] > pf.at[i] => Some(&p[pf.at[i]..pf.end[i]]),
                            _ => None,
                        };
                        per_stream_prev[i] += match pp {
                            Some(pp) => zstd::bulk::Compressor::with_dictionary(3, pp).unwrap().compress(part).unwrap().len(),
                            None => comp.compress(part).unwrap().len(),
                        };
                    }
                }
                prev = Some(cols.clone());
                let back = decode_columns_chained(&cols, rows[0].first_tsc, *tid, &mut rchain).unwrap();
                let mut want = Vec::new();
                for r in &rows {
                    want.extend(crate::trace::decode::decode_chunk(crate::trace::decode::RowFields::default(), r.rows, r.first_tsc, *tid).unwrap());
                }
                let no_time = |v: Vec<Item>| -> Vec<Item> {
                    v.into_iter()
                        .map(|i| match i {
                            Item::Event(mut e) if solo => {
                                e.tsc = 0;
                                Item::Event(e)
                            }
                            i => i,
                        })
                        .collect()
                };
                assert!(no_time(back) == no_time(want), "round trip");
            }
            let mut big = zstd::bulk::Compressor::new(3).unwrap();
            big.set_parameter(zstd::zstd_safe::CParameter::WindowLog(27)).unwrap();
            one_frame += big.compress(&all).unwrap().len();
        }
        say!("  with the previous record as dictionary: {with_prev} bytes; each thread one frame (window 2^27): {one_frame} bytes");
        say!("{path}: layout {layout}, {} threads, {records} records: {total} bytes ({:.1} s)", per_thread.len(), t0.elapsed().as_secs_f64());
        for (i, n) in per_stream.iter().enumerate() {
            if *n > 0 {
                say!("  {:<12} {:>10} {:>10}", NAMES[i], n, per_stream_prev[i]);
            }
        }
    }
}
