//! `finish_trace`, which `mtlab record` runs on a trace while and after the
//! traced program runs: joins each thread's chunks, rewrites them in
//! columns (a thread's records one after the other: each runs on from the
//! predictions of the one before, threads in parallel) and compresses them
//! (on all cores once the program has ended).

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::ahead::Source;
use super::columns::{draws_after, runs_on, split_chained, Chain, Chains, LiveCount, RowChunk, Stamps, CHAIN_RECORDS, CHAIN_ROWS};
use super::draws::{Draws, Thread};
use super::error::TraceError;
use super::format::*;
use super::held::HeldWriter;
use super::keys;
use super::kv::kv_text;
use super::records::{next_record, parse_chunk_header, read_file_header, write_checked_events, write_record, Damage, RepeatedChunks};
use super::rewrite::{header_at_this_version, temp_beside, TempGuard};

/// zstd level `finish_trace` compresses EVENTS payloads with.
pub const FINISH_ZSTD_LEVEL: i32 = 3;

/// What `finish_trace` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FinishStats {
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub chunks_compressed: u64,
    /// Damage found (the records from there on were dropped).
    pub warnings: Vec<String>,
    /// Where `finish` spent its time (the part after the program ended).
    pub stages: FinishStages,
    /// Chains of a thread put in columns apart from its earlier records (on
    /// another core), and those of them written again after the earlier
    /// ones because the replay of the draws ahead did not match.
    pub chains_apart: u64,
    pub chains_redone: u64,
    /// The live blocks' count added up over the records put in columns, in
    /// file order (`columns::LiveCount`): where it stands, and the most it
    /// reached (RUNINFO `live_blocks_hint`).
    pub live_now: i64,
    pub live_most: i64,
}

impl FinishStats {
    /// The next record in file order moved the live blocks' count by `c`.
    fn count_live(&mut self, c: LiveCount) {
        self.live_most = self.live_most.max(self.live_now + c.rise);
        self.live_now += c.net;
    }
}

/// The time `Finisher::finish` spent on each stage, summed over its
/// threads (threads' columns and all compression run in parallel), and its wall
/// time from start to the rename.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FinishStages {
    /// Reading the records and joining each thread's chunks into groups.
    pub join: std::time::Duration,
    /// Rows rewritten in columns (`columns::split`).
    pub rewrite: std::time::Duration,
    /// zstd.
    pub compression: std::time::Duration,
    pub wall: std::time::Duration,
}

/// A unit of a batch's rewrite about to start, for a caller that paces the
/// rewrite (`Finisher::advance_paced`): a group's rows (bytes) put in
/// columns, or compressed. A batch is 16 MiB of rows, a group at most
/// `JOIN_MAX_BYTES`: between two groups is where a rewrite that shares a
/// busy CPU within a budget can wait, instead of overdrawing it by a whole
/// batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    Columns(usize),
    Compression(usize),
}

/// Called before each unit of work on one worker; the pace a caller sets.
pub type Pace<'a> = &'a mut (dyn FnMut(Work) + Send);

/// Uncompressed EVENTS payload bytes gathered before they are rewritten together, on all cores.
const FINISH_BATCH_BYTES: usize = 16 << 20;
/// Batches (of `FINISH_BATCH_BYTES`, each grouped as if alone) put in
/// columns together once the program has ended: a thread's chain is at
/// most `CHAIN_ROWS` of rows (8 records of `JOIN_MAX_BYTES`), and its chains
/// go to different cores only when several are at hand (64 MiB of rows held).
const FINISH_PARTS: usize = 4;
/// Row bytes joined into one chunk at most: the reader holds one such chunk
/// per thread in memory while merging threads by time (its columns, about
/// 0.4× the rows). Each is compressed alone: 4 MiB, not 1, so that each
/// record's streams are long enough for zstd to learn (`COLUMNS_LAYOUT`).
pub(crate) const JOIN_MAX_BYTES: usize = 4 << 20;

/// Time quantum of solo chunks' stamps (`RECORD_FLAG_SOLO`), in TSC ticks:
/// 2¹⁶, 25 µs at 2.6 GHz, where heaptrack stamps every 10 ms. No other
/// thread's event lies within a solo chunk, so rounding moves no event
/// across another thread's; what moves is when the report says an event
/// happened, by less than the quantum (docs/benchmarks.md, *Trace size*).
pub const SOLO_QUANTUM: u64 = 1 << 16;

/// A run of chunks of one thread, in time order, to become one record.
struct Group {
    /// Every member is solo: its stamps may be rounded.
    solo: bool,
    tid: u32,
    members: Vec<usize>,
    row_bytes: usize,
    first_tsc: u64,
    last_tsc: u64,
    n_events: u64,
}

/// Sorts a batch's chunks (in file order) into groups: a chunk joins its
/// thread's open group when it starts no earlier than the group ends, the
/// group stays under `JOIN_MAX_BYTES`, and no other thread's chunk written
/// since the group's first member could tie with it. The reader orders
/// events of equal time stamps by record position, and a joined group takes
/// its first member's position: a tie between this chunk and a chunk in
/// between would flip. A chunk in between cannot tie when it ended before
/// this one starts or starts after it ends; when it overlaps, both are
/// small (`TIE_CHECK_ROWS`) and no time stamp is in both, neither. The
/// second way matters since a thread's buffer is also written ~100 ms after
/// its first event: threads that call seldom write small chunks that
/// overlap each other's, one record each without it.
/// `group_chunks` of `batch`, whose first chunk is chunk `base` of the
/// rewrite's batch: the members name chunks by their place there.
fn group_chunks_at(batch: &[(ChunkHead, Vec<u8>)], base: usize) -> Vec<Group> {
    let mut groups = group_chunks_in(batch);
    for g in &mut groups {
        g.members.iter_mut().for_each(|m| *m += base);
    }
    groups
}

/// Row bytes of a chunk whose time stamps may be read to rule out ties.
const TIE_CHECK_ROWS: usize = 16 << 10;
/// Chunks written since a group's first member that a joining chunk is
/// checked against, at most: a group ends when its span is longer, so
/// that the check stays bounded.
const TIE_CHECK_SPAN: usize = 1024;

fn group_chunks_in(batch: &[(ChunkHead, Vec<u8>)]) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    let mut open: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
    let mut stamps = StampCache::default();
    for (i, (h, payload)) in batch.iter().enumerate() {
        let rows = payload.len() - EVENTS_HEADER as usize;
        if let Some(&g) = open.get(&h.tid) {
            let grp = &groups[g];
            if h.first_tsc >= grp.last_tsc
                && grp.row_bytes + rows <= JOIN_MAX_BYTES
                && grp.n_events + h.n_events as u64 <= u32::MAX as u64
                && no_tie_since(batch, &grp.members, i, &mut stamps)
            {
                let grp = &mut groups[g];
                grp.members.push(i);
                grp.row_bytes += rows;
                grp.last_tsc = h.last_tsc;
                grp.n_events += h.n_events as u64;
                grp.solo &= h.solo;
                continue;
            }
        }
        open.insert(h.tid, groups.len());
        groups.push(Group {
            solo: h.solo,
            tid: h.tid,
            members: vec![i],
            row_bytes: rows,
            first_tsc: h.first_tsc,
            last_tsc: h.last_tsc,
            n_events: h.n_events as u64,
        });
    }
    groups
}

/// Whether chunk `i` can join the group of `members` without a tie with a
/// chunk of another thread written between the group's first member and it.
fn no_tie_since(batch: &[(ChunkHead, Vec<u8>)], members: &[usize], i: usize, stamps: &mut StampCache) -> bool {
    let first = members[0];
    let h = &batch[i].0;
    let overlapping = |j: usize| {
        let o = &batch[j].0;
        o.tid != h.tid && o.last_tsc >= h.first_tsc && o.first_tsc <= h.last_tsc
    };
    let last = *members.last().expect("groups have members");
    // Without a member joined by the stamp check, it is enough that what
    // was written since the last member ended before this chunk starts:
    // what came before that ended before the last member started. This
    // keeps a group that spans many chunks cheap.
    if !stamps.joined_by_stamps.contains(&first) && batch[last + 1..i].iter().all(|(o, _)| o.last_tsc < h.first_tsc) {
        return true;
    }
    if i - first > TIE_CHECK_SPAN {
        return false;
    }
    if !stamps.read(batch, i) {
        return false;
    }
    for j in (first + 1..i).filter(|&j| overlapping(j)) {
        if !stamps.read(batch, j) || shares_a_value(stamps.get(i), stamps.get(j)) {
            return false;
        }
    }
    stamps.joined_by_stamps.insert(first);
    true
}

/// Two sorted lists have a value in common.
fn shares_a_value(a: &[u64], b: &[u64]) -> bool {
    let (mut x, mut y) = (0, 0);
    while x < a.len() && y < b.len() {
        match a[x].cmp(&b[y]) {
            std::cmp::Ordering::Less => x += 1,
            std::cmp::Ordering::Greater => y += 1,
            std::cmp::Ordering::Equal => return true,
        }
    }
    false
}

/// The sorted time stamps of a batch's small chunks, read once each.
#[derive(Default)]
struct StampCache {
    stamps: std::collections::HashMap<usize, Option<Vec<u64>>>,
    /// Groups (by first member) that took a member by the stamp check.
    joined_by_stamps: std::collections::HashSet<usize>,
}

impl StampCache {
    /// Reads chunk `i`'s stamps, as the reader will see them, unless read
    /// already; whether it has them (not: too large, or its rows cannot be
    /// read).
    fn read(&mut self, batch: &[(ChunkHead, Vec<u8>)], i: usize) -> bool {
        self.stamps
            .entry(i)
            .or_insert_with(|| {
                let (h, payload) = &batch[i];
                let rows = &payload[EVENTS_HEADER as usize..];
                if rows.len() > TIE_CHECK_ROWS {
                    return None;
                }
                let items = super::decode::decode_chunk(super::decode::RowFields::default(), rows, h.first_tsc, h.tid).ok()?;
                let mut s: Vec<u64> = items
                    .into_iter()
                    .filter_map(|it| match it {
                        super::Item::Event(e) => Some(e.tsc),
                        super::Item::Stack { .. } => None,
                    })
                    .collect();
                s.sort_unstable();
                Some(s)
            })
            .is_some()
    }

    /// The sorted stamps of a chunk `read` has found.
    fn get(&self, i: usize) -> &[u64] {
        self.stamps[&i].as_deref().expect("read, and readable")
    }
}

/// The fields of a chunk header `finish_trace` needs.
#[derive(Debug, Clone, Copy)]
struct ChunkHead {
    /// Flushed while the process had one thread (`RECORD_FLAG_SOLO`).
    solo: bool,
    tid: u32,
    n_events: u32,
    first_tsc: u64,
    last_tsc: u64,
}

/// One record to write: a chunk header and its (flagged) body.
struct Rewritten {
    head: [u8; EVENTS_HEADER as usize],
    flags: u16,
    body: Vec<u8>,
}

/// A group's rows in columns, for the thread's next record in the file
/// after `chain`'s (None when the rows cannot be read as columns: an
/// unknown kind; the thread's next group then starts a chain).
fn split_group(g: &Group, batch: &[(ChunkHead, Vec<u8>)], chain: &mut Option<Chain>) -> GroupColumns {
    let stamps = if g.solo { Stamps::Rounded(SOLO_QUANTUM) } else { Stamps::Exact };
    let cols = split_chained(&group_rows(g, batch), stamps, chain).ok()?;
    Some((cols, chain.as_ref().map_or_else(LiveCount::default, Chain::live)))
}

fn group_rows<'a>(g: &Group, batch: &'a [(ChunkHead, Vec<u8>)]) -> Vec<RowChunk<'a>> {
    let head = EVENTS_HEADER as usize;
    g.members.iter().map(|&i| RowChunk { first_tsc: batch[i].0.first_tsc, rows: &batch[i].1[head..] }).collect()
}

/// A run of a thread's groups (by their place in its list) that starts a
/// chain, or runs on from the thread's chain before the batch (the first):
/// runs are put in columns each on its own core.
struct Run {
    thread: usize,
    from: usize,
    to: usize,
    /// The chain the run's first group is written after (None: after an
    /// error, so it starts a chain with its draws unknown).
    start: Option<Chain>,
    /// The draws `start` was planned with (None: no chain), to check the
    /// previous run's end against.
    planned: Option<Thread>,
    /// Row bytes, to hand the longest runs out first.
    bytes: usize,
}

/// Cuts a thread's groups into runs where a chain starts: each chain is
/// written from fresh predictions and the timing draws, which `draws_after`
/// replays ahead on the rows alone. The replay stops where no chain can
/// start any more (the rest is one run: a cut missed costs parallelism,
/// never bytes).
fn plan_runs(thread: usize, members: &[usize], groups: &[Group], batch: &[(ChunkHead, Vec<u8>)], first: Option<Chain>) -> Vec<Run> {
    // The chain after each group as far as the runs need it: whether the
    // next record runs on, its place, its rows, the draws (None: after an
    // error).
    let mut state = first.as_ref().map(|c| (c.runs_on(), c.pos(), c.rows(), c.draws()));
    let bytes = |from: usize, to: usize| members[from..to].iter().map(|&g| groups[g].row_bytes).sum::<usize>();
    let mut runs = vec![Run { thread, from: 0, to: members.len(), start: first, planned: None, bytes: 0 }];
    // Rows of the groups from this one to the last, the last left out.
    let mut rows_ahead = bytes(0, members.len().saturating_sub(1)) as u64;
    for (j, &g) in members.iter().enumerate() {
        let (pos, rows) = match state {
            Some((true, p, r, _)) => (p + 1, r),
            _ => (0, 0),
        };
        if pos == 0 && j > 0 {
            runs.last_mut().expect("a run").to = j;
            let planned = state.map(|s| s.3);
            runs.push(Run { thread, from: j, to: members.len(), start: planned.map(Chain::restart), planned, bytes: 0 });
        }
        // The next chain starts past the last group: nothing more to cut.
        let rest = members.len() - j;
        if rest <= (CHAIN_RECORDS - pos) as usize && rows + rows_ahead < CHAIN_ROWS {
            break;
        }
        if j + 1 < members.len() {
            rows_ahead -= groups[g].row_bytes as u64;
        }
        let draws = state.map_or(Thread::At(Draws::Unknown), |s| s.3);
        let rows = rows + groups[g].row_bytes as u64;
        state = draws_after(&group_rows(&groups[g], batch), draws).ok().map(|d| (runs_on(pos, rows), pos, rows, d));
    }
    for r in &mut runs {
        r.bytes = bytes(r.from, r.to);
    }
    runs
}

/// A group's columns and how its events moved the live blocks' count
/// (None: rows that are no columns).
type GroupColumns = Option<(Vec<u8>, LiveCount)>;

/// A run's groups' columns, and the chain after its last.
type RunDone = (Vec<GroupColumns>, Option<Chain>);

/// Whether the chain a run ended with is the one the next run was started
/// after (`plan_runs`' replay agrees with `split_chained`).
fn same_start(end: &Option<Chain>, planned: Option<Thread>) -> bool {
    match (end, planned) {
        (None, None) => true,
        (Some(e), Some(p)) => !e.runs_on() && e.draws() == p,
        _ => false,
    }
}

/// Compresses one group: its columns when it has them (even where they do
/// not shrink: the thread's next record may run on from its predictions),
/// else each chunk as it is, or as it was when that does not shrink.
fn compress_group(
    comp: &mut zstd::bulk::Compressor<'_>,
    g: &Group,
    cols: Option<&[u8]>,
    batch: &[(ChunkHead, Vec<u8>)],
) -> io::Result<Vec<Rewritten>> {
    let head = EVENTS_HEADER as usize;
    if let Some(cols) = cols {
        return Ok(vec![Rewritten {
            head: super::records::chunk_header(g.tid, g.n_events as u32, g.first_tsc, g.last_tsc),
            flags: RECORD_FLAG_ZSTD | RECORD_FLAG_COLUMNS,
            body: comp.compress(cols)?,
        }]);
    }
    let mut out = Vec::with_capacity(g.members.len());
    for &i in &g.members {
        let payload = &batch[i].1;
        let body = &payload[head..];
        let c = if body.is_empty() { None } else { Some(comp.compress(body)?) };
        let mut h = [0u8; EVENTS_HEADER as usize];
        h.copy_from_slice(&payload[..head]);
        out.push(match c {
            Some(c) if c.len() < body.len() => Rewritten { head: h, flags: RECORD_FLAG_ZSTD, body: c },
            _ => Rewritten { head: h, flags: 0, body: body.to_vec() },
        });
    }
    Ok(out)
}

/// Runs `job(i)` for i in 0..n on `workers` threads (this one alone when
/// 1) and returns the results in order, with the time the jobs took summed.
fn parallel<T: Send>(
    n: usize,
    workers: usize,
    job: impl Fn(usize) -> io::Result<T> + Sync,
) -> io::Result<(Vec<T>, std::time::Duration)> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<T>>> = (0..n).map(|_| std::sync::Mutex::new(None)).collect();
    let work = || -> io::Result<std::time::Duration> {
        let t = std::time::Instant::now();
        loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if i >= n {
                return Ok(t.elapsed());
            }
            let r = job(i)?;
            *results[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
        }
    };
    let spent: Vec<std::time::Duration> = if workers <= 1 || n <= 1 {
        vec![work()?]
    } else {
        std::thread::scope(|scope| -> io::Result<Vec<std::time::Duration>> {
            let jobs: Vec<_> = (0..workers.min(n)).map(|_| scope.spawn(work)).collect();
            jobs.into_iter().map(|j| j.join().map_err(|_| io::Error::other("a rewriting thread panicked"))?).collect()
        })?
    };
    let results = results.into_iter().map(|r| r.into_inner().unwrap_or_else(|e| e.into_inner()).expect("every job ran"));
    Ok((results.collect(), spent.into_iter().sum()))
}

/// Rewrites the EVENTS payloads in `batch` on `workers` threads (all cores
/// once the program has ended; one, this thread, while it runs) and writes
/// the records in order: each thread's groups put in columns one after the
/// other (its predictions run on, `chains`), threads in parallel; then
/// every group compressed in parallel. Returns the bytes written and
/// empties the batch.
fn write_compressed_batch(
    batch: &mut Vec<(ChunkHead, Vec<u8>)>,
    cuts: &[usize],
    chains: &mut Chains,
    out: &mut impl Write,
    stats: &mut FinishStats,
    workers: usize,
    pace: Pace<'_>,
) -> io::Result<u64> {
    if batch.is_empty() {
        return Ok(0);
    }
    let t = std::time::Instant::now();
    // Each part of the batch grouped alone, as if written on its own.
    let mut groups = Vec::new();
    let mut from = 0;
    for &to in cuts.iter().chain(std::iter::once(&batch.len())) {
        groups.extend(group_chunks_at(&batch[from..to], from));
        from = to;
    }
    stats.stages.join += t.elapsed();
    let batch_ref: &[(ChunkHead, Vec<u8>)] = batch;
    // Each thread's groups, in file order, with its chain so far.
    let mut threads: Vec<(u32, Vec<usize>)> = Vec::new();
    let mut at: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
    for (i, g) in groups.iter().enumerate() {
        let t = *at.entry(g.tid).or_insert_with(|| {
            threads.push((g.tid, Vec::new()));
            threads.len() - 1
        });
        threads[t].1.push(i);
    }
    // One worker runs the jobs in order on this thread: the pace is called
    // between them (with several, nobody paces: the program has ended).
    let pace = std::sync::Mutex::new(pace);
    let pace_before = |w: Work| {
        if workers <= 1 {
            (*pace.lock().unwrap_or_else(|e| e.into_inner()))(w);
        }
    };
    let split = split_threads(&threads, &groups, batch_ref, chains, stats, workers, &pace_before)?;
    let mut cols = Vec::with_capacity(split.len());
    for c in split {
        // In file order: the live count runs on from the record before.
        cols.push(c.map(|(c, live)| {
            stats.count_live(live);
            c
        }));
    }
    let (results, spent) = parallel(groups.len(), workers, |i| {
        pace_before(Work::Compression(groups[i].row_bytes));
        thread_local! {
            static COMP: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> = const { std::cell::RefCell::new(None) };
        }
        COMP.with(|c| {
            let mut c = c.borrow_mut();
            let comp = match c.as_mut() {
                Some(comp) => comp,
                None => c.insert(zstd::bulk::Compressor::new(FINISH_ZSTD_LEVEL)?),
            };
            compress_group(comp, &groups[i], cols[i].as_deref(), batch_ref)
        })
    })?;
    stats.stages.compression += spent;
    let mut written = 0u64;
    for recs in results {
        for rec in recs {
            if rec.flags & RECORD_FLAG_ZSTD != 0 {
                stats.chunks_compressed += 1;
            }
            written += write_checked_events(out, rec.flags, &rec.head, &rec.body)?;
        }
    }
    batch.clear();
    Ok(written)
}

/// Puts each thread's groups (`threads`: in file order) in columns, after
/// the thread's chain in `chains`, which then holds the chain after its
/// last group; returns each group's columns (None: rows that are no
/// columns). With several workers a thread's chains go to different cores.
fn split_threads(
    threads: &[(u32, Vec<usize>)],
    groups: &[Group],
    batch: &[(ChunkHead, Vec<u8>)],
    chains: &mut Chains,
    stats: &mut FinishStats,
    workers: usize,
    pace: &(dyn Fn(Work) + Sync),
) -> io::Result<Vec<GroupColumns>> {
    let t = std::time::Instant::now();
    let mut runs: Vec<Run> = Vec::new();
    for (t, (tid, members)) in threads.iter().enumerate() {
        let first = chains.take(*tid);
        if workers > 1 {
            runs.extend(plan_runs(t, members, groups, batch, first));
        } else {
            runs.push(Run { thread: t, from: 0, to: members.len(), start: first, planned: None, bytes: 0 });
        }
    }
    let planned = t.elapsed();
    stats.chains_apart += (runs.len() - threads.len()) as u64;
    // The longest first, so that no core is left with one at the end.
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by_key(|&r| std::cmp::Reverse(runs[r].bytes));
    let starts: Vec<std::sync::Mutex<Option<Chain>>> =
        runs.iter_mut().map(|r| std::sync::Mutex::new(r.start.take())).collect();
    let (split, spent) = parallel(runs.len(), workers, |k| {
        let r = &runs[order[k]];
        let mut chain = starts[order[k]].lock().unwrap_or_else(|e| e.into_inner()).take();
        let cols = threads[r.thread].1[r.from..r.to]
            .iter()
            .map(|&g| {
                pace(Work::Columns(groups[g].row_bytes));
                split_group(&groups[g], batch, &mut chain)
            })
            .collect::<Vec<_>>();
        Ok((cols, chain))
    })?;
    let mut done: Vec<Option<RunDone>> = (0..runs.len()).map(|_| None).collect();
    for (k, r) in split.into_iter().enumerate() {
        done[order[k]] = Some(r);
    }
    // Runs of a thread follow each other in `runs`; the first that did not
    // start where its predecessor ended (never, unless the replay and
    // `split_chained` disagree) is written again after it, with the rest.
    let mut cols: Vec<GroupColumns> = vec![None; groups.len()];
    let t = std::time::Instant::now();
    let mut r = 0;
    while r < runs.len() {
        let thread = runs[r].thread;
        let (mut c, mut chain) = done[r].take().expect("every run ran");
        let mut to = runs[r].to;
        r += 1;
        while r < runs.len() && runs[r].thread == thread {
            let (next, end) = done[r].take().expect("every run ran");
            if same_start(&chain, runs[r].planned) {
                c.extend(next);
                chain = end;
                to = runs[r].to;
            } else {
                stats.chains_redone += 1;
                let members = &threads[thread].1;
                c.extend(members[to..].iter().map(|&g| split_group(&groups[g], batch, &mut chain)));
                to = members.len();
                while r < runs.len() && runs[r].thread == thread {
                    r += 1;
                }
                break;
            }
            r += 1;
        }
        debug_assert_eq!(to, threads[thread].1.len());
        for (&g, c) in threads[thread].1.iter().zip(c) {
            cols[g] = c;
        }
        chains.put(threads[thread].0, chain);
    }
    stats.stages.rewrite += spent + planned + t.elapsed();
    Ok(cols)
}

/// Rewrites the trace at `path` after the traced program has ended: joins
/// consecutive EVENTS chunks of each thread, rewrites them in columns and
/// compresses them (zstd level 3; see `columns`), copies other records
/// Appends a RUNINFO record with `runinfo` to the trace `path` as it is, not
/// rewritten: where the rewrite could not be made (no room for it), the run's
/// facts are kept. Only this user's regular file; nothing else is changed.
pub fn append_runinfo(path: &Path, runinfo: &[(String, String)]) -> Result<(), TraceError> {
    use std::io::Seek;
    let mut f = crate::platform::safe_fs::open_owned_regular(path, true).map_err(TraceError::io(path))?;
    f.seek(std::io::SeekFrom::End(0)).map_err(TraceError::io(path))?;
    let text = kv_text(runinfo.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let mut rec = Vec::with_capacity(text.len() + 8);
    write_record(&mut rec, REC_RUNINFO, 0, &[text.as_bytes()]).map_err(TraceError::io(path))?;
    f.write_all(&rec).map_err(TraceError::io(path))
}

/// verbatim, stops at the first damaged record, and appends a RUNINFO
/// record with `runinfo`. The rewrite goes to a temp file in the same
/// directory that then replaces `path`.
pub fn finish_trace(path: &Path, runinfo: &[(String, String)]) -> Result<FinishStats, TraceError> {
    let file_len = fs::symlink_metadata(path).map_err(TraceError::io(path))?.len();
    Finisher::start(path, file_len)?.finish(runinfo)
}

/// `finish_trace` in steps: `mtlab record` can rewrite the part of the trace
/// the program has finished writing while the program still runs
/// (`advance`), and the rest after it has ended (`finish`).
pub struct Finisher {
    path: PathBuf,
    /// The raw trace, and its records read ahead into memory (`read_ahead`).
    src: Arc<Source>,
    tmp_path: PathBuf,
    guard: TempGuard,
    out: HeldWriter,
    /// Output bytes `run` may hold in memory while the disk is full before
    /// it stops taking records (while the program runs; none once it ended).
    hold_limit: Option<usize>,
    stats: FinishStats,
    batch: Vec<(ChunkHead, Vec<u8>)>,
    /// Where each full batch within `batch` ends (`FINISH_PARTS`).
    cuts: Vec<usize>,
    batch_bytes: usize,
    /// Each thread's predictions, from its last record written.
    chains: Chains,
    n_chunks: usize,
    repeated: RepeatedChunks,
    /// Where the next record starts in the source.
    off: u64,
    /// Where the records start, and where `advance` had got to when
    /// `finish` began.
    header_end: u64,
    advanced_to: u64,
    written: u64,
    /// Threads that rewrite a batch: all cores once the program has ended
    /// (`cores`).
    workers: usize,
    cores: usize,
}

/// Bytes taken between two punches of the source (`releasing`): one
/// `fallocate` per MiB read.
const RELEASE_STEP: u64 = 1 << 20;
/// Output `advance` may hold in memory while the disk has no room for it.
const HOLD_WHILE_RUNNING: usize = 64 << 20;

/// What one step of the rewrite did with a record.
enum Next {
    Done,
    /// The next record is not (yet) all there, or is damaged.
    Stop(Damage),
}

impl Finisher {
    /// Starts rewriting `path`, whose first `available` bytes are written
    /// (the whole file once the program has ended).
    pub fn start(path: &Path, available: u64) -> Result<Finisher, TraceError> {
        // No link followed, and only this user's file: the rewrite is
        // renamed over `path`, so reading a file that a link planted there
        // points at would copy it to where the link was.
        let src = crate::platform::safe_fs::open_owned_regular(path, false).map_err(TraceError::io(path))?;
        let (_version, text, header_end) = read_file_header(&src, path, available)?;
        let (tmp, tmp_path, guard) = temp_beside(path, "finish")?;
        let mut out = HeldWriter::new(tmp, 0);
        let head = header_at_this_version(&src, path, header_end)?;
        out.write_all(&head).map_err(|e| TraceError::Io { path: tmp_path.clone(), source: e })?;
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).clamp(1, 8);
        Ok(Finisher {
            path: path.to_path_buf(),
            src: Arc::new(Source::new(src, path, header_end)),
            tmp_path,
            guard,
            out,
            hold_limit: Some(HOLD_WHILE_RUNNING),
            stats: FinishStats::default(),
            batch: Vec::new(),
            cuts: Vec::new(),
            batch_bytes: 0,
            chains: Chains::new(super::decode::Header::parse(&text).0.time_sample),
            n_chunks: 0,
            repeated: RepeatedChunks::default(),
            off: header_end,
            header_end,
            advanced_to: header_end,
            written: header_end,
            workers: cores,
            cores,
        })
    }

    /// From now on, the source's records are punched out of it (whole
    /// blocks, its header kept) once this rewrite holds them, so that the
    /// raw trace and its rewrite are not both on disk. The source is then
    /// no longer a readable trace: if the rewrite fails, what it held is
    /// lost (`released` says how much).
    pub fn releasing(&mut self) -> Result<(), TraceError> {
        self.src.releasing(self.header_end)
    }

    /// The source, for a thread that reads its records ahead into memory
    /// and punches them out while this rewrite is busy (`Source::fill`,
    /// `Source::punch`; only once `releasing`).
    pub fn read_ahead(&self) -> Arc<Source> {
        Arc::clone(&self.src)
    }

    /// Rewrite each batch on this thread only (while the program runs, so as
    /// not to take more than one core from it); `finish` uses all cores.
    pub fn one_worker(&mut self) {
        self.workers = 1;
    }

    /// Where the source is read up to: every byte before it is this
    /// rewrite's (written, or in the batch held in memory).
    pub fn taken(&self) -> u64 {
        self.off
    }

    /// Bytes of the rewrite so far (written, or buffered to be).
    pub fn rewritten(&self) -> u64 {
        self.written
    }

    /// The rewrite so far, as a reader of its file would find it if
    /// `mtlab record` were killed now.
    #[cfg(test)]
    pub(crate) fn output_so_far(&self) -> Vec<u8> {
        self.out.contents().expect("the rewrite so far")
    }

    /// The source's bytes punched out so far (its records from the header's
    /// end on).
    pub fn released(&self) -> u64 {
        self.src.released()
    }

    /// Punches the source's taken records out (`releasing`): from the block
    /// the last punch ended in (its taken part was zeroed, now the whole
    /// block goes) to the end of the last record taken, so the file reads
    /// as its header, zeros where the taken records were (damage a reader
    /// resyncs after) and the records not taken yet. A file system that
    /// cannot punch holes keeps them: the raw trace then stays whole, as
    /// without `releasing`.
    fn release_taken(&mut self, min_step: u64) -> Result<(), TraceError> {
        self.src.taken(self.off, self.written, self.batch.is_empty());
        if self.src.punch(min_step)? && self.out.waiting_for_room() {
            // The blocks just freed may be what the held output needs.
            self.out.try_write().map_err(self.tmp_err())?;
        }
        self.stats.warnings.extend(self.src.take_warning());
        Ok(())
    }

    fn tmp_err(&self) -> impl FnOnce(io::Error) -> TraceError + '_ {
        move |e| TraceError::Io { path: self.tmp_path.clone(), source: e }
    }

    /// Rewrites the records that end within the first `available` bytes.
    /// A record that runs past them, or does not parse, is left for
    /// `finish`, which judges it on the whole file.
    pub fn advance(&mut self, available: u64) -> Result<(), TraceError> {
        self.advance_paced(available, &mut |_| {})
    }

    /// `advance`, calling `pace` before each group's columns and each
    /// group's compression (on one worker, `one_worker`): it may wait there,
    /// so that a caller within a CPU budget is never overdrawn by more than
    /// one group's work. The bytes written do not depend on it.
    pub fn advance_paced(&mut self, available: u64, pace: Pace<'_>) -> Result<(), TraceError> {
        self.run(available, pace)?;
        self.release_taken(0)?;
        self.advanced_to = self.off;
        Ok(())
    }

    fn run(&mut self, available: u64, pace: Pace<'_>) -> Result<Next, TraceError> {
        let path = self.path.clone();
        loop {
            if self.hold_limit.is_some_and(|m| self.out.held() > m) && !self.out.try_write().map_err(self.tmp_err())? {
                // The disk is full and stays so: what is not taken waits
                // for `finish`, which takes it all (its punches free room).
                return Ok(Next::Done);
            }
            let rec = match next_record(&*self.src, self.off, available).map_err(TraceError::io(&path))? {
                Ok(Some(r)) => r,
                Ok(None) => return Ok(Next::Done),
                Err(d) => return Ok(Next::Stop(d)),
            };
            if rec.ty == REC_EVENTS && rec.flags & RECORD_FLAG_ZSTD == 0 {
                let t = std::time::Instant::now();
                let mut payload = vec![0u8; rec.payload_len as usize];
                self.src.read_exact_at(&mut payload, rec.payload_offset()).map_err(TraceError::io(&path))?;
                self.stats.stages.join += t.elapsed();
                let info = match parse_chunk_header(&rec, &payload) {
                    Ok(info) => info,
                    Err(d) => return Ok(Next::Stop(d)),
                };
                if self.repeated.is_repeat(&info) {
                    self.off = rec.end();
                    continue;
                }
                self.n_chunks += 1;
                self.batch_bytes += payload.len();
                let head = ChunkHead {
                    solo: rec.flags & RECORD_FLAG_SOLO != 0,
                    tid: info.tid,
                    n_events: info.n_events,
                    first_tsc: info.first_tsc,
                    last_tsc: info.last_tsc,
                };
                self.batch.push((head, payload));
                if self.batch_bytes >= FINISH_BATCH_BYTES {
                    if self.workers > 1 && self.cuts.len() + 1 < FINISH_PARTS {
                        self.cuts.push(self.batch.len());
                        self.batch_bytes = 0;
                    } else {
                        self.flush_batch(pace)?;
                    }
                }
                self.off = rec.end();
                self.release_taken(RELEASE_STEP)?;
                continue;
            } else if rec.ty == REC_EVENTS && rec.flags & RECORD_FLAG_CRC == 0 {
                // Compressed already (a trace finished by an mtlab before
                // checksums): kept as it is, with checksums added.
                self.flush_batch(pace)?;
                let mut payload = vec![0u8; rec.payload_len as usize];
                self.src.read_exact_at(&mut payload, rec.payload_offset()).map_err(TraceError::io(&path))?;
                match parse_chunk_header(&rec, &payload) {
                    // The thread's next record written here starts a chain.
                    Ok(info) => self.chains.remove(&info.tid),
                    Err(d) => return Ok(Next::Stop(d)),
                };
                let (head, body) = payload.split_at(EVENTS_HEADER as usize);
                self.written += write_checked_events(&mut self.out, rec.flags, head, body).map_err(self.tmp_err())?;
            } else {
                self.flush_batch(pace)?;
                if rec.ty == REC_EVENTS {
                    // A finished record kept as it is: its thread's next
                    // record written here starts a chain of its own.
                    let mut head = [0u8; 4];
                    if rec.payload_len >= 4 && self.src.read_exact_at(&mut head, rec.payload_offset()).is_ok() {
                        self.chains.remove(&u32::from_le_bytes(head));
                    } else {
                        self.chains.clear();
                    }
                }
                // Verbatim, header included (from memory where it was read ahead).
                let mut whole = vec![0u8; (rec.end() - rec.offset) as usize];
                self.src.read_exact_at(&mut whole, rec.offset).map_err(TraceError::io(&path))?;
                self.out.write_all(&whole).map_err(self.tmp_err())?;
                self.written += whole.len() as u64;
            }
            self.off = rec.end();
        }
    }

    fn flush_batch(&mut self, pace: Pace<'_>) -> Result<(), TraceError> {
        let mut batch = std::mem::take(&mut self.batch);
        let n = write_compressed_batch(&mut batch, &self.cuts, &mut self.chains, &mut self.out, &mut self.stats, self.workers, pace);
        self.batch = batch;
        self.cuts.clear();
        self.written += n.map_err(self.tmp_err())?;
        self.batch_bytes = 0;
        Ok(())
    }

    /// Rewrites the rest of the (now complete) file, appends RUNINFO with
    /// `runinfo`, and replaces the trace with the rewrite.
    pub fn finish(mut self, runinfo: &[(String, String)]) -> Result<FinishStats, TraceError> {
        let start = std::time::Instant::now();
        // The stages of the part done after the program ended.
        self.stats.stages = FinishStages::default();
        self.hold_limit = None;
        // The program has ended: all cores (`one_worker` held it to one).
        self.workers = self.cores;
        let path = self.path.clone();
        let meta = self.src.file().metadata().map_err(TraceError::io(&path))?;
        self.stats.bytes_before = meta.len();
        let live = self.advanced_to - self.header_end;
        if let Next::Stop(d) = self.run(meta.len(), &mut |_| {})? {
            self.stats.warnings.push(d.message(self.n_chunks));
        }
        self.stats.warnings.extend(self.repeated.warning());
        self.flush_batch(&mut |_| {})?;
        // Everything is taken: the raw records still on disk go before the
        // output is written out, for a disk the program filled has room
        // only for what was punched.
        self.release_taken(0)?;

        // RUNINFO, with the damage found here: the records after it are gone
        // from the rewritten file, so the report must still be able to say so.
        let live = live.to_string();
        let most = self.stats.live_most.to_string();
        let text = kv_text(
            runinfo
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .chain(self.stats.warnings.iter().map(|w| (keys::FINISH_WARNING, w.as_str())))
                .chain(std::iter::once((keys::REWRITTEN_WHILE_RUNNING, live.as_str())).filter(|_| live != "0"))
                .chain(std::iter::once((keys::LIVE_BLOCKS_HINT, most.as_str())).filter(|_| self.stats.live_most > 0)),
        );
        self.written += write_record(&mut self.out, REC_RUNINFO, 0, &[text.as_bytes()]).map_err(self.tmp_err())?;

        drop(self.src);
        let tmp_path = self.tmp_path.clone();
        let out = self.out.into_file().map_err(|e| TraceError::Io { path: tmp_path, source: e })?;
        self.guard.install(out, Some(meta.permissions()), false, &path)?;
        self.stats.bytes_after = self.written;
        self.stats.stages.wall = start.elapsed();
        Ok(self.stats)
    }
}

#[cfg(test)]
mod finish_speed {
    /// `MTLAB_FINISH_TRACE=FILE [MTLAB_FINISH_OUT=OUT] cargo test --release --lib finish_speed -- --ignored --nocapture`:
    /// times finish_trace on a copy of an unfinished trace (a child's
    /// `FILE.d/PID`, copied before `record` finishes it), and keeps the
    /// finished copy at OUT: two builds' outputs of one raw trace compare
    /// byte for byte.
    #[test]
    #[ignore]
    fn finish_speed() {
        let Ok(src) = std::env::var("MTLAB_FINISH_TRACE") else { return };
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.mtl");
        std::fs::copy(&src, &p).unwrap();
        let t = std::time::Instant::now();
        let st = super::finish_trace(&p, &[]).unwrap();
        say!(
            "finish: {:.3} s, {} -> {} bytes; columns {:.3} s, compression {:.3} s of thread time",
            t.elapsed().as_secs_f64(),
            st.bytes_before,
            st.bytes_after,
            st.stages.rewrite.as_secs_f64(),
            st.stages.compression.as_secs_f64()
        );
        if let Ok(out) = std::env::var("MTLAB_FINISH_OUT") {
            std::fs::copy(&p, out).unwrap();
        }
    }

    /// `MTLAB_FINISH_TRACE=FILE cargo test --release --lib finish_speed -- --ignored --nocapture`
    /// also finishes two copies of the unfinished trace, one in one go and
    /// one as `mtlab record` does while the program runs (4 MiB steps, with
    /// the watermark 8 MiB ahead, while another thread reads ahead and
    /// punches every millisecond), and compares them up to RUNINFO.
    #[test]
    #[ignore]
    fn finish_with_read_ahead_writes_the_bytes_of_a_finish_in_one_go() {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        use super::tests::{one_finished_and_a_finisher, same_before_runinfo, INFO};
        let Ok(src) = std::env::var("MTLAB_FINISH_TRACE") else { return };
        let dir = tempfile::tempdir().unwrap();
        let (one, two, len, mut f) = one_finished_and_a_finisher(dir.path(), src.as_ref());
        let ahead = f.read_ahead();
        let (done, written, most) = (AtomicBool::new(false), AtomicU64::new(f.header_end), AtomicU64::new(0));
        std::thread::scope(|s| {
            s.spawn(|| {
                while !done.load(Ordering::Acquire) {
                    ahead.fill(written.load(Ordering::Acquire), 64 << 20).unwrap();
                    ahead.punch(256 << 10).unwrap();
                    most.fetch_max(ahead.progress().ahead, Ordering::Relaxed);
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            });
            let mut at = f.header_end;
            while at < len {
                written.store((at + (8 << 20)).min(len), Ordering::Release);
                at = (at + (4 << 20)).min(len);
                f.advance(at).unwrap();
            }
            done.store(true, Ordering::Release);
        });
        drop(ahead);
        let released = f.released();
        f.finish(INFO).unwrap();
        say!("read ahead: at most {} bytes held, {released} released of {len}", most.load(Ordering::Relaxed));
        assert!(same_before_runinfo(&one, &two), "the rewrites differ before RUNINFO");
    }
}

#[cfg(test)]
mod tests {
    use crate::trace::draws::tests::preload_timed;
    use crate::trace::encode::TraceWriter;
    use crate::trace::{Event, EventKind, Func, Item};
    use crate::testutil::Xorshift;
    use std::path::PathBuf;

    /// Thread 1: 100 chunks that overlap in time, so that none is joined to
    /// the one before and each is a record (four chains in one batch),
    /// timed one call in 32 as the preload library draws it; thread 2:
    /// timed at random, so that its replay is given up (its draws Unknown).
    fn trace(path: &std::path::Path) {
        let header = [("pid", "7"), ("start_tsc", "1000"), ("tsc_hz", "2000000000"), ("page_size", "4096"), ("time_sample", "32")];
        let mut w = TraceWriter::create(path, header).unwrap();
        let (per, chunks) = (60u64, 100u64);
        let timed = preload_timed((per * chunks) as usize, 32, 5000, 1);
        let mut rng = Xorshift::new(0x9e37_79b9_7f4a_7c15);
        for k in 0..chunks {
            for tid in [1u32, 2] {
                let items: Vec<Item> = (0..per)
                    .map(|i| {
                        let n = k * per + i;
                        let drawn = rng.next_u64();
                        let t = if tid == 1 { timed[n as usize] } else { drawn.is_multiple_of(7) };
                        // Chunk k's last events come after chunk k + 1's first.
                        let tsc = 5000 + k * 1000 + i * 30 + tid as u64;
                        let ptr = 0x10_0000 + (tid as u64) * 0x1000_0000 + (n / 2) * 64;
                        let kind = if n % 2 == 0 {
                            EventKind::Alloc { func: Func::Malloc, size: 24 + n % 3 * 8, align: 0, ptr, usable: 40 }
                        } else {
                            EventKind::Free { func: Func::Free, ptr }
                        };
                        let cycles = if t { 40 + n % 50 } else { crate::trace::UNTIMED };
                        Item::Event(Event { tid, tsc, cycles, stack: (n % 5) as u32, flags: 0, kind })
                    })
                    .collect();
                w.events_chunk(tid, &items).unwrap();
            }
        }
        w.finish().unwrap();
    }

    fn allocated(path: &std::path::Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).unwrap().blocks() * 512
    }

    /// The RUNINFO the traces compared are finished with.
    pub(super) const INFO: &[(String, String)] = &[];

    /// `src` copied twice into `dir`: the first copy finished in one go;
    /// its length, and a Finisher releasing the second on one worker, as
    /// `mtlab record` makes it while the program runs.
    pub(super) fn one_finished_and_a_finisher(dir: &std::path::Path, src: &std::path::Path) -> (PathBuf, PathBuf, u64, super::Finisher) {
        let (one, two) = (dir.join("one.mtl"), dir.join("two.mtl"));
        std::fs::copy(src, &one).unwrap();
        std::fs::copy(src, &two).unwrap();
        let len = std::fs::metadata(&two).unwrap().len();
        super::finish_trace(&one, INFO).unwrap();
        let mut f = super::Finisher::start(&two, len).unwrap();
        f.one_worker();
        f.releasing().unwrap();
        (one, two, len, f)
    }

    /// A batch of small chunks of threads 1 and 2, alternating in the file:
    /// thread 1's chunk k spans [k·1000 + 1, k·1000 + 901], thread 2's
    /// [k·1000 + 502, k·1000 + 1402], so each overlaps the other thread's
    /// chunk written between it and its thread's previous one. `tie`:
    /// thread 2's chunk 3 ends at a stamp of thread 1's chunk 4, written
    /// after it.
    fn small_overlapping_chunks(tie: bool) -> Vec<(super::ChunkHead, Vec<u8>)> {
        let mut batch = Vec::new();
        for k in 0..6u64 {
            for tid in [1u32, 2] {
                let mut enc = crate::trace::encode::ChunkEncoder::new(tid);
                for i in 0..10u64 {
                    let mut tsc = k * 1000 + i * 100 + if tid == 1 { 1 } else { 502 };
                    if tie && tid == 2 && k == 3 && i == 9 {
                        tsc = 4401; // a stamp of thread 1's chunk 4
                    }
                    let ptr = 0x10_0000 + tid as u64 * 0x100_0000 + (k * 10 + i) * 64;
                    let kind = EventKind::Alloc { func: Func::Malloc, size: 24, align: 0, ptr, usable: 24 };
                    enc.event(&Event { tid, tsc, cycles: crate::trace::UNTIMED, stack: 0, flags: 0, kind });
                }
                let payload = enc.payload();
                let head = super::ChunkHead {
                    solo: false,
                    tid,
                    n_events: 10,
                    first_tsc: u64::from_le_bytes(payload[8..16].try_into().unwrap()),
                    last_tsc: u64::from_le_bytes(payload[16..24].try_into().unwrap()),
                };
                batch.push((head, payload));
            }
        }
        batch
    }

    /// One thread: 300 blocks allocated, 100 of them freed (with frees of
    /// NULL and failed allocations between, which move nothing, and
    /// reallocs, which move a block), 150 more allocated, then all freed:
    /// at most 350 live at once, whichever records the finish makes of the
    /// chunks. Without heap calls, no hint.
    #[test]
    fn the_finish_hints_the_most_blocks_live_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.mtl");
        let header = [("pid", "7"), ("start_tsc", "1000"), ("tsc_hz", "2000000000"), ("page_size", "4096")];
        let mut w = TraceWriter::create(&path, header).unwrap();
        let mut tsc = 5000u64;
        let mut ev = |kind: EventKind| {
            tsc += 10;
            Item::Event(Event { tid: 1, tsc, cycles: crate::trace::UNTIMED, stack: 1, flags: 0, kind })
        };
        let block = |n: u64| 0x10_0000 + n * 64;
        let malloc = |ptr: u64| EventKind::Alloc { func: Func::Malloc, size: 24, align: 0, ptr, usable: 40 };
        let free = |ptr: u64| EventKind::Free { func: Func::Free, ptr };
        let mut live: Vec<u64> = Vec::new();
        let a: Vec<Item> = (0..300).map(|n| { live.push(block(n)); ev(malloc(block(n))) }).collect();
        w.events_chunk(1, &a).unwrap();
        let mut b: Vec<Item> = live.drain(..100).map(|p| ev(free(p))).collect();
        b.extend((0..5).map(|_| ev(free(0))));
        b.extend((0..5).map(|_| ev(malloc(0))));
        for (i, p) in live.iter_mut().take(10).enumerate() {
            let moved = block(10_000 + i as u64);
            b.push(ev(EventKind::Realloc { func: Func::Realloc, old: *p, size: 100, ptr: moved, usable: 104 }));
            *p = moved;
        }
        w.events_chunk(1, &b).unwrap();
        let mut c: Vec<Item> = (300..450).map(|n| { live.push(block(n)); ev(malloc(block(n))) }).collect();
        c.extend(live.drain(..).map(|p| ev(free(p))));
        w.events_chunk(1, &c).unwrap();
        w.finish().unwrap();
        super::finish_trace(&path, &[]).unwrap();
        let tf = crate::trace::TraceFile::open(&path).unwrap();
        assert_eq!(tf.runinfo_get(crate::trace::keys::LIVE_BLOCKS_HINT), Some("350"));

        let quiet = dir.path().join("q.mtl");
        let mut w = TraceWriter::create(&quiet, header).unwrap();
        w.events_chunk(1, &[Item::Event(Event { tid: 1, tsc: 5000, cycles: crate::trace::UNTIMED, stack: 1, flags: 0, kind: free(0) })]).unwrap();
        w.finish().unwrap();
        super::finish_trace(&quiet, &[]).unwrap();
        let tf = crate::trace::TraceFile::open(&quiet).unwrap();
        assert_eq!(tf.runinfo_get(crate::trace::keys::LIVE_BLOCKS_HINT), None);
    }

    /// Threads that call seldom write small chunks (a buffer is written
    /// ~100 ms after its first event) that overlap each other's in time: the
    /// old rule (what was written in between ended before) joined none of
    /// them; with distinct stamps each thread's chunks are one group, and a
    /// stamp both threads have keeps the chunk that would flip apart.
    #[test]
    fn small_chunks_that_overlap_other_threads_are_joined_unless_a_stamp_ties() {
        let batch = small_overlapping_chunks(false);
        let groups = super::group_chunks_in(&batch);
        assert_eq!(groups.len(), 2, "one group a thread");
        assert_eq!(groups.iter().map(|g| g.members.len()).collect::<Vec<_>>(), vec![6, 6]);
        let batch = small_overlapping_chunks(true);
        let groups = super::group_chunks_in(&batch);
        // Thread 1's chunk 4 (index 8) would move before thread 2's chunk 3
        // (index 7), which holds its first stamp: it starts a group; the
        // chunk with the tie itself (index 7) has no later tie.
        let of = |tid: u32| groups.iter().filter(|g| g.tid == tid).map(|g| g.members.clone()).collect::<Vec<_>>();
        assert_eq!(of(1), vec![vec![0, 2, 4, 6], vec![8, 10]]);
        assert_eq!(of(2), vec![vec![1, 3, 5, 7, 9, 11]]);
    }

    /// Whether two finished traces are the same but for their last RUNINFO
    /// (whose `rewritten_while_running` differs).
    pub(super) fn same_before_runinfo(a: &std::path::Path, b: &std::path::Path) -> bool {
        let cut = |p: &std::path::Path| {
            let f = std::fs::File::open(p).unwrap();
            let len = f.metadata().unwrap().len();
            let (_, _, mut off) = super::read_file_header(&f, p, len).unwrap();
            let mut last = None;
            while let Ok(Some(r)) = super::next_record(&f, off, len).unwrap() {
                last = Some((off, r.ty));
                off = r.end();
            }
            let (at, ty) = last.expect("records");
            assert_eq!(ty, super::REC_RUNINFO, "{}: the last record is RUNINFO", p.display());
            std::fs::read(p).unwrap()[..at as usize].to_vec()
        };
        cut(a) == cut(b)
    }

    /// While the rewrite is busy (between two `advance`s), the records
    /// written since are read ahead into memory and punched out of the file
    /// (`Source::fill`, `punch`): the raw file then holds its header and a
    /// block or two, and the rewrite, reading them from memory, writes the
    /// bytes of a finish in one go.
    #[test]
    fn records_read_ahead_are_punched_at_once_and_rewritten_from_memory_to_the_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let raw = dir.path().join("raw.mtl");
        trace(&raw);
        let (one, two, len, mut f) = one_finished_and_a_finisher(dir.path(), &raw);
        f.advance(len / 3).unwrap();
        let before = allocated(&two);
        assert!(before > len / 2, "{before} bytes allocated of {len}: the rest not taken yet");
        let src = f.read_ahead();
        assert!(src.fill(len, 64 << 20).unwrap() > len / 2);
        src.punch(0).unwrap();
        assert_eq!(f.released(), len - f.header_end, "every record released");
        let left = allocated(&two);
        assert!(left <= f.header_end + 3 * 4096, "{left} bytes still allocated of {len}");
        f.advance(len).unwrap();
        assert_eq!(f.taken(), len);
        assert_eq!(src.progress().ahead, 0, "what was read ahead was taken and dropped");
        drop(src);
        f.finish(INFO).unwrap();
        assert!(same_before_runinfo(&one, &two), "the rewrites differ before RUNINFO");
    }

    /// The pace of the rewrite during the run is called before every
    /// group's columns and compression, not once per batch (where a budget
    /// can only be checked before a whole batch's work), and does not
    /// change the bytes.
    #[test]
    fn a_paced_rewrite_is_called_before_each_groups_work_and_writes_the_same_bytes() {
        use super::Work;
        let dir = tempfile::tempdir().unwrap();
        let raw = dir.path().join("raw.mtl");
        trace(&raw);
        // A MAPS record after the events: the batch before it is written
        // by `advance`, not left for `finish`.
        let mut bytes = std::fs::read(&raw).unwrap();
        super::write_record(&mut bytes, super::REC_MAPS, 0, &[b"00400000-00401000 r-xp 00000000 00:00 0 /bin/x\n"]).unwrap();
        std::fs::write(&raw, &bytes).unwrap();
        let (one, two, len, mut f) = one_finished_and_a_finisher(dir.path(), &raw);
        let mut seen = Vec::new();
        for at in [len / 3, len] {
            f.advance_paced(at, &mut |w| seen.push(w)).unwrap();
        }
        let stats = f.finish(INFO).unwrap();
        assert!(same_before_runinfo(&one, &two), "the rewrites differ before RUNINFO");
        let cols: Vec<usize> = seen.iter().filter_map(|w| if let Work::Columns(b) = w { Some(*b) } else { None }).collect();
        let comp: Vec<usize> = seen.iter().filter_map(|w| if let Work::Compression(b) = w { Some(*b) } else { None }).collect();
        // Thread 1's 100 chunks overlap and stay records of their own;
        // thread 2's too: 200 groups of 60 events' rows each.
        assert_eq!(cols.len(), 200, "{seen:?}");
        assert_eq!(comp.len(), 200);
        assert_eq!(stats.chunks_compressed, 200);
        assert!(cols.iter().all(|&b| b > 0 && b < 64 << 10), "{cols:?}");
        assert_eq!(cols.iter().sum::<usize>(), comp.iter().sum::<usize>());
    }

    #[test]
    fn a_threads_chains_put_in_columns_on_several_cores_write_the_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let (one, two) = (dir.path().join("one.mtl"), dir.path().join("two.mtl"));
        trace(&one);
        std::fs::copy(&one, &two).unwrap();
        let finish = |p: &std::path::Path, workers: usize| {
            let len = std::fs::metadata(p).unwrap().len();
            let mut f = super::Finisher::start(p, len).unwrap();
            f.cores = workers;
            f.finish(&[]).unwrap()
        };
        let (a, b) = (finish(&one, 1), finish(&two, 2));
        assert_eq!(a.chains_apart, 0);
        // Thread 1's chains start at its records 32, 64 and 96, and so do
        // thread 2's: each is put in columns apart, after the replay.
        assert_eq!(b.chains_apart, 6, "{b:?}");
        assert_eq!(b.chains_redone, 0, "the replay of the draws ahead matched the rewrite's: {b:?}");
        assert!(std::fs::read(&one).unwrap() == std::fs::read(&two).unwrap(), "the rewrites differ");
    }
}
