//! `mtlab profile simulate`: what a sampling heap profiler would have found.
//!
//! A full trace holds every allocation with its call stack and thread. Replaying
//! it through simulated samplers answers, without rerunning the program, the
//! question of source 000: at which sampling interval do the stacks a sampled
//! profile finds still *cover* (docs: DESIGN §3) at least 90 % of the bytes?
//!
//! Each simulated sampler follows the preload's rule exactly
//! (`native/preload/shims.c` SAMPLING_ALLOC and `sampler.c` mtlab_sample_alloc):
//! every thread starts with its countdown at 0, and each allocation of `size`
//! bytes does `countdown -= size`; while it stays positive nothing happens.
//! Otherwise, on the thread's first allocation the distance to the first sample
//! point is drawn from the start of this block (Exp with mean INTERVAL, at least
//! 1, truncated to an integer): if it lies beyond the block, the countdown is set
//! to `first - size` and the block is not sampled; in every other case the block
//! is sampled and a fresh distance is drawn (the overshoot is not carried over).
//!
//! Implementation: instead of decrementing every sampler's countdown on every
//! allocation, each thread keeps the bytes it has allocated so far (`pos`) and
//! each (thread, sampler) pair the absolute position of its next sample point
//! (`next`), so that `countdown == next - pos`. An allocation only advances `pos`
//! and compares it with the smallest `next` of the thread; the samplers are
//! scanned only when at least one of them samples. The cost per event is
//! therefore independent of the number of samplers except for the scans, whose
//! number is the total number of samples taken.
//!
//! Differences from the preload, all negligible: failed allocations (ptr 0) are
//! ignored (the preload subtracts their size without sampling, so the next
//! successful allocation of that thread is sampled); allocations the preload
//! makes for itself are not in the trace, and the preload gives their bytes
//! back to the countdown (they move no sample point and spend no draw, so a
//! thread's first allocation of the program's, the initial thread's included,
//! draws its distance from its own start as here); a thread id reused by the kernel
//! continues the old thread's countdowns. Each sampler draws from its own
//! xorshift64* generator (the preload's), seeded from the seed, the interval
//! value and the run index, so the row of an interval does not depend on which
//! other intervals are simulated.

use rustc_hash::FxHashMap as HashMap;
use serde::Serialize;

use crate::trace::{EventKind, Item, TraceError, TraceFile};

/// What to simulate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimulateOptions {
    /// Mean sampling intervals in bytes (0 is taken as 1).
    pub intervals: Vec<u64>,
    /// Independent simulated profiles per interval (0 is taken as 1).
    pub runs: u32,
    /// Seed of every sampler's generator; the same seed gives the same result.
    pub seed: u64,
}

impl Default for SimulateOptions {
    fn default() -> Self {
        SimulateOptions {
            intervals: DEFAULT_INTERVALS.to_vec(),
            runs: 20,
            seed: 1,
        }
    }
}

/// 64 KiB to 8 MiB, the range source 000 measured.
pub const DEFAULT_INTERVALS: [u64; 8] = [
    64 << 10,
    128 << 10,
    256 << 10,
    512 << 10,
    1 << 20,
    2 << 20,
    4 << 20,
    8 << 20,
];

/// The coverage criterion of source 000: the stacks found account for 90 % of the bytes.
pub const COVERAGE_THRESHOLD: f64 = 0.9;

/// Coverage of the simulated profiles at one interval, over `runs` runs.
///
/// Standard deviations are sample standard deviations (n − 1; 0 for one run).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct CoveragePoint {
    /// Mean sampling interval in bytes.
    pub interval: u64,
    /// Bytes allocated by the stacks found / all bytes allocated.
    pub coverage_mean: f64,
    pub coverage_stddev: f64,
    pub coverage_min: f64,
    pub coverage_max: f64,
    /// `max(0, coverage_mean − 2 × coverage_stddev)`: a pessimistic coverage, below
    /// which about one profile in 40 falls if coverage were normally distributed.
    pub coverage_low: f64,
    /// Distinct call stacks found (stack id 0, "no stack", is never counted).
    pub stacks_found_mean: f64,
    pub stacks_found_stddev: f64,
    pub stacks_found_min: u64,
    pub stacks_found_max: u64,
    /// `stacks_found_mean / distinct_stacks` (0 when the trace has no stacks).
    pub stacks_found_fraction: f64,
    /// Σ p(sᵢ) over the allocations, p(s) = 1 − exp(−s/interval): the samples
    /// the sampler takes on average (at most one per allocation; bytes ÷
    /// interval counted a 1-byte interval's 22 M samples from 1 238 calls).
    pub samples_expected: f64,
    /// Samples the simulated profilers took, on average.
    pub samples_mean: f64,
}

/// The result of [`simulate`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Simulation {
    /// Bytes of all successful allocations (malloc family and realloc's new size).
    pub total_bytes: u64,
    pub total_allocations: u64,
    /// Distinct non-zero stack ids that allocated.
    pub distinct_stacks: u64,
    /// Bytes allocated with stack id 0 (no stack recorded): no profile can
    /// attribute them, so coverage can be at most `1 − unattributed_bytes / total_bytes`.
    pub unattributed_bytes: u64,
    /// Threads that allocated.
    pub threads: u64,
    /// Runs per interval.
    pub runs: u32,
    pub seed: u64,
    /// One per requested interval, in the order given.
    pub points: Vec<CoveragePoint>,
    /// Problems the decoder met (damaged chunks are skipped).
    pub warnings: Vec<String>,
}

/// The largest interval whose **mean** coverage is at least `threshold`
/// (a fraction, e.g. [`COVERAGE_THRESHOLD`]); `None` when none is.
///
/// This is the paper's rule (coverage of a typical profile). For a guarantee
/// that holds for nearly every profile, use [`recommend_safe`], which asks the
/// same of `coverage_low` (mean − 2σ); `CoveragePoint::coverage_low` and
/// `coverage_min` are reported for every interval either way.
pub fn recommend(points: &[CoveragePoint], threshold: f64) -> Option<u64> {
    points
        .iter()
        .filter(|p| p.coverage_mean >= threshold)
        .map(|p| p.interval)
        .max()
}

/// The largest interval whose `coverage_low` (mean − 2 standard deviations) is
/// at least `threshold`; `None` when none is.
pub fn recommend_safe(points: &[CoveragePoint], threshold: f64) -> Option<u64> {
    points
        .iter()
        .filter(|p| p.coverage_low >= threshold)
        .map(|p| p.interval)
        .max()
}

/// Replays `trace` once through `intervals × runs` simulated samplers.
pub fn simulate(trace: &TraceFile, opts: &SimulateOptions) -> Result<Simulation, TraceError> {
    simulate_with_progress(trace, opts, &mut |_| {})
}

/// How often (in events) [`simulate_with_progress`] reports.
pub const PROGRESS_EVERY: u64 = 1 << 20;

/// [`simulate`], calling `progress(events decoded so far)` every
/// [`PROGRESS_EVERY`] events and once at the end.
pub fn simulate_with_progress(
    trace: &TraceFile,
    opts: &SimulateOptions,
    progress: &mut dyn FnMut(u64),
) -> Result<Simulation, TraceError> {
    let raw = replay(trace, opts, progress)?;
    Ok(summarize(&raw, opts))
}

// ---------------------------------------------------------------------------
// The generator: the preload's xorshift64* and exponential draw.

#[inline]
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The initial generator state of one sampler (never 0).
fn sampler_seed(seed: u64, interval: u64, run: u32) -> u64 {
    let a = splitmix64(seed);
    let b = splitmix64(a ^ interval.wrapping_mul(0xd6e8_feb8_6659_fd93));
    splitmix64(b ^ (run as u64).wrapping_mul(0xa076_1d64_78bd_642f)) | 1
}

#[inline]
fn rng_next(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// Bytes to the next sample point, as the preload's `draw`: Exp(mean `interval`),
/// at least 1, at most 4e18, truncated.
#[inline]
fn draw(state: &mut u64, interval: f64) -> u64 {
    let u = ((rng_next(state) >> 11) as f64 + 0.5) * (1.0 / 9_007_199_254_740_992.0);
    let v = -u.ln() * interval;
    if v < 1.0 {
        1
    } else if v > 4e18 {
        4_000_000_000_000_000_000
    } else {
        v as u64
    }
}

// ---------------------------------------------------------------------------
// The pass over the trace.

/// Per-sampler outcomes and per-stack truth, before statistics.
#[derive(Debug, Clone, PartialEq)]
struct Raw {
    /// Dense stack index → stack id.
    stack_ids: Vec<u32>,
    stack_bytes: Vec<u64>,
    stack_calls: Vec<u64>,
    total_bytes: u64,
    total_allocations: u64,
    /// (size, allocations of that size).
    sizes: Vec<(u64, u64)>,
    threads: u64,
    /// Per sampler (interval index × runs + run): samples taken.
    samples: Vec<u64>,
    /// Per sampler: bitset over dense stack indices.
    found: Vec<Vec<u64>>,
    warnings: Vec<String>,
}

/// Stack ids below this are mapped through a flat table (the preload's ids are
/// below 2^20 + 1); larger ones through a hash map.
const DIRECT_IDS: u32 = 1 << 22;
const NONE: u32 = u32::MAX;
/// Sizes are clamped here so positions cannot overflow.
const MAX_SIZE: u64 = 1 << 48;

struct StackIndex {
    direct: Vec<u32>,
    other: HashMap<u32, u32>,
    ids: Vec<u32>,
}

impl StackIndex {
    #[inline]
    fn get(&mut self, id: u32) -> usize {
        if id < DIRECT_IDS {
            let i = id as usize;
            if i >= self.direct.len() {
                self.direct.resize((i + 1).next_power_of_two().min(DIRECT_IDS as usize), NONE);
            }
            let slot = &mut self.direct[i];
            if *slot == NONE {
                *slot = self.ids.len() as u32;
                self.ids.push(id);
            }
            *slot as usize
        } else {
            let n = self.ids.len() as u32;
            let k = *self.other.entry(id).or_insert(n);
            if k == n {
                self.ids.push(id);
            }
            k as usize
        }
    }
}

/// The simulated samplers: flat per-sampler and per-(thread, sampler) state.
struct Samplers {
    n: usize,
    interval: Vec<f64>,
    rng: Vec<u64>,
    samples: Vec<u64>,
    found: Vec<Vec<u64>>,
    /// Thread-major: `next[t * n + s]` is sampler s's next sample point in thread t's bytes.
    next: Vec<u64>,
    /// Per thread: bytes allocated so far.
    pos: Vec<u64>,
    /// Per thread: the smallest `next` of the thread.
    min_next: Vec<u64>,
}

impl Samplers {
    fn new(opts: &SimulateOptions) -> Samplers {
        let runs = opts.runs.max(1);
        let mut interval = Vec::new();
        let mut rng = Vec::new();
        for &iv in &opts.intervals {
            let iv = iv.max(1);
            for r in 0..runs {
                interval.push(iv as f64);
                rng.push(sampler_seed(opts.seed, iv, r));
            }
        }
        let n = interval.len();
        Samplers {
            n,
            interval,
            rng,
            samples: vec![0; n],
            found: vec![Vec::new(); n],
            next: Vec::new(),
            pos: Vec::new(),
            min_next: Vec::new(),
        }
    }

    /// A thread's first successful allocation: every sampler draws the
    /// distance to its first sample point from the start of this block.
    fn add_thread(&mut self) -> usize {
        let t = self.pos.len();
        let mut m = u64::MAX;
        for s in 0..self.n {
            let d = draw(&mut self.rng[s], self.interval[s]);
            self.next.push(d);
            m = m.min(d);
        }
        self.pos.push(0);
        self.min_next.push(m);
        t
    }

    /// `size` bytes allocated by thread `t` with dense stack index `k`.
    #[inline]
    fn alloc(&mut self, t: usize, size: u64, k: usize) {
        let p = self.pos[t] + size;
        self.pos[t] = p;
        if p >= self.min_next[t] {
            self.scan(t, p, k);
        }
    }

    #[cold]
    #[inline(never)]
    fn scan(&mut self, t: usize, p: u64, k: usize) {
        let n = self.n;
        let row = &mut self.next[t * n..(t + 1) * n];
        let (word, bit) = (k / 64, 1u64 << (k % 64));
        let mut m = u64::MAX;
        for (s, next) in row.iter_mut().enumerate() {
            if *next <= p {
                // countdown - size <= 0: this block is sampled, a fresh distance drawn.
                self.samples[s] += 1;
                let f = &mut self.found[s];
                if f.len() <= word {
                    f.resize(word + 1, 0);
                }
                f[word] |= bit;
                *next = p + draw(&mut self.rng[s], self.interval[s]);
            }
            m = m.min(*next);
        }
        self.min_next[t] = m;
    }
}

fn replay(trace: &TraceFile, opts: &SimulateOptions, progress: &mut dyn FnMut(u64)) -> Result<Raw, TraceError> {
    let mut sm = Samplers::new(opts);
    let mut stacks = StackIndex {
        direct: Vec::new(),
        other: HashMap::default(),
        ids: Vec::new(),
    };
    let mut stack_bytes: Vec<u64> = Vec::new();
    let mut stack_calls: Vec<u64> = Vec::new();
    let mut tids: HashMap<u32, u32> = HashMap::default();
    let (mut last_tid, mut last_t) = (u32::MAX, usize::MAX);
    let (mut total_bytes, mut total_allocations) = (0u64, 0u64);
    // Allocations by size, for the expected sample counts: small sizes in a
    // flat table (an increment per call), the rest in a map.
    const SMALL: u64 = 1 << 16;
    let mut small_sizes = vec![0u64; SMALL as usize];
    let mut large_sizes: HashMap<u64, u64> = HashMap::default();
    let mut items = trace.items()?;
    let mut events = 0u64;
    for item in items.by_ref() {
        let ev = match item {
            Item::Event(ev) => ev,
            Item::Stack { .. } => continue,
        };
        events += 1;
        if events.is_multiple_of(PROGRESS_EVERY) {
            progress(events);
        }
        let size = match ev.kind {
            EventKind::Alloc { size, ptr, .. } | EventKind::Realloc { size, ptr, .. } if ptr != 0 => size,
            _ => continue,
        };
        let size = size.min(MAX_SIZE);
        let k = stacks.get(ev.stack);
        if k == stack_bytes.len() {
            stack_bytes.push(0);
            stack_calls.push(0);
        }
        stack_bytes[k] += size;
        stack_calls[k] += 1;
        total_bytes += size;
        total_allocations += 1;
        if size < SMALL {
            small_sizes[size as usize] += 1;
        } else {
            *large_sizes.entry(size).or_default() += 1;
        }
        let t = if ev.tid == last_tid {
            last_t
        } else {
            let t = match tids.get(&ev.tid) {
                Some(&t) => t as usize,
                None => {
                    let t = sm.add_thread();
                    tids.insert(ev.tid, t as u32);
                    t
                }
            };
            last_tid = ev.tid;
            last_t = t;
            t
        };
        sm.alloc(t, size, k);
    }
    progress(events);
    let sizes = (0..SMALL).zip(small_sizes).filter(|&(_, n)| n > 0).chain(large_sizes).collect();
    Ok(Raw {
        stack_ids: stacks.ids,
        stack_bytes,
        stack_calls,
        total_bytes,
        total_allocations,
        sizes,
        threads: tids.len() as u64,
        samples: sm.samples,
        found: sm.found,
        warnings: trace.warnings.iter().chain(items.warnings()).cloned().collect(),
    })
}

// ---------------------------------------------------------------------------
// Statistics.

/// Mean, sample standard deviation, min, max.
fn stats(v: &[f64]) -> (f64, f64, f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0, 0.0, 0.0);
    }
    let min = v.iter().cloned().fold(f64::INFINITY, f64::min);
    let max = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    (crate::study::stats::mean(v), crate::study::stats::stddev(v), min, max)
}

/// (bytes covered, stacks found) of one sampler.
fn sampler_outcome(raw: &Raw, s: usize) -> (u64, u64) {
    let (mut bytes, mut stacks) = (0u64, 0u64);
    for (w, &word) in raw.found[s].iter().enumerate() {
        let mut bits = word;
        while bits != 0 {
            let k = w * 64 + bits.trailing_zeros() as usize;
            bits &= bits - 1;
            if raw.stack_ids[k] != 0 {
                bytes += raw.stack_bytes[k];
                stacks += 1;
            }
        }
    }
    (bytes, stacks)
}

fn summarize(raw: &Raw, opts: &SimulateOptions) -> Simulation {
    let runs = opts.runs.max(1) as usize;
    let distinct_stacks = raw.stack_ids.iter().filter(|&&id| id != 0).count() as u64;
    let unattributed_bytes = raw
        .stack_ids
        .iter()
        .zip(&raw.stack_bytes)
        .filter(|(&id, _)| id == 0)
        .map(|(_, &b)| b)
        .sum();
    let points = opts
        .intervals
        .iter()
        .enumerate()
        .map(|(i, &interval)| {
            let interval = interval.max(1);
            let mut cov = Vec::with_capacity(runs);
            let mut found = Vec::with_capacity(runs);
            let mut samples = Vec::with_capacity(runs);
            for s in i * runs..(i + 1) * runs {
                let (bytes, stacks) = sampler_outcome(raw, s);
                cov.push(if raw.total_bytes == 0 { 0.0 } else { bytes as f64 / raw.total_bytes as f64 });
                found.push(stacks as f64);
                samples.push(raw.samples[s] as f64);
            }
            let (coverage_mean, coverage_stddev, coverage_min, coverage_max) = stats(&cov);
            let (stacks_found_mean, stacks_found_stddev, fmin, fmax) = stats(&found);
            CoveragePoint {
                interval,
                coverage_mean,
                coverage_stddev,
                coverage_min,
                coverage_max,
                coverage_low: (coverage_mean - 2.0 * coverage_stddev).max(0.0),
                stacks_found_mean,
                stacks_found_stddev,
                stacks_found_min: fmin as u64,
                stacks_found_max: fmax as u64,
                stacks_found_fraction: if distinct_stacks == 0 {
                    0.0
                } else {
                    stacks_found_mean / distinct_stacks as f64
                },
                samples_expected: raw.sizes.iter().map(|&(s, n)| n as f64 * -(-(s as f64) / interval as f64).exp_m1()).sum(),
                samples_mean: stats(&samples).0,
            }
        })
        .collect();
    Simulation {
        total_bytes: raw.total_bytes,
        total_allocations: raw.total_allocations,
        distinct_stacks,
        unattributed_bytes,
        threads: raw.threads,
        runs: runs as u32,
        seed: opts.seed,
        points,
        warnings: raw.warnings.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::encode::{ChunkEncoder, TraceWriter};
    use crate::trace::{Event, Func};
    use std::path::Path;

    fn header() -> Vec<(&'static str, &'static str)> {
        vec![("pid", "4242"), ("ppid", "1"), ("stacks", "fp"), ("max_depth", "64"), ("tsc_hz", "1000000000")]
    }

    /// (tid, stack, size, ptr) allocations in this order; one chunk per thread.
    fn write_trace(path: &Path, allocs: &[(u32, u32, u64, u64)]) -> TraceFile {
        let mut w = TraceWriter::create(path, header()).unwrap();
        let mut chunks: Vec<ChunkEncoder> = Vec::new();
        let mut defined = std::collections::BTreeSet::new();
        for (i, &(tid, stack, size, ptr)) in allocs.iter().enumerate() {
            let c = match chunks.iter().position(|c| c.tid() == tid) {
                Some(j) => &mut chunks[j],
                None => {
                    chunks.push(ChunkEncoder::new(tid));
                    chunks.last_mut().unwrap()
                }
            };
            if stack != 0 && defined.insert(stack) {
                c.stack(stack, &[0x40_1000 + stack as u64, 0x40_0000]);
            }
            let kind = if i % 7 == 3 {
                EventKind::Realloc { func: Func::Realloc, old: 0, size, ptr, usable: size }
            } else {
                EventKind::Alloc { func: Func::Malloc, size, align: 0, ptr, usable: size }
            };
            c.event(&Event { tid, tsc: 1000 + i as u64 * 10, cycles: 5, stack, flags: 0, kind });
            // A free in between must not count.
            c.event(&Event { tid, tsc: 1001 + i as u64 * 10, cycles: 5, stack: 0, flags: 0, kind: EventKind::Free { func: Func::Free, ptr } });
        }
        for c in &chunks {
            w.chunk(c).unwrap();
        }
        w.finish().unwrap();
        TraceFile::open(path).unwrap()
    }

    /// Stack 1: 10 000 × 100 bytes (over two threads); stack 2: 10 × 100 bytes.
    fn two_stacks(path: &Path) -> TraceFile {
        let mut v = Vec::new();
        for i in 0..10_000u64 {
            v.push((10 + (i % 2) as u32, 1, 100, 0x1000 + i * 128));
            if i % 1000 == 500 {
                v.push((10, 2, 100, 0x10_0000 + i * 128));
            }
        }
        write_trace(path, &v)
    }

    fn opts(intervals: &[u64], runs: u32, seed: u64) -> SimulateOptions {
        SimulateOptions { intervals: intervals.to_vec(), runs, seed }
    }

    #[test]
    fn one_byte_interval_finds_everything() {
        let dir = tempfile::tempdir().unwrap();
        let t = two_stacks(&dir.path().join("t.mtl"));
        let sim = simulate(&t, &opts(&[1], 5, 1)).unwrap();
        assert_eq!(sim.total_bytes, 1_001_000);
        assert_eq!(sim.total_allocations, 10_010);
        assert_eq!(sim.distinct_stacks, 2);
        assert_eq!(sim.threads, 2);
        assert_eq!(sim.unattributed_bytes, 0);
        let p = &sim.points[0];
        assert!((p.samples_expected - 10_010.0).abs() < 1e-6, "one sample per call at most: {p:?}");
        assert_eq!(p.coverage_mean, 1.0);
        assert_eq!(p.coverage_min, 1.0);
        assert_eq!(p.coverage_stddev, 0.0);
        assert_eq!(p.stacks_found_mean, 2.0);
        assert_eq!(p.stacks_found_fraction, 1.0);
        // A draw at mean 1 byte never exceeds 38, so every 100-byte block is sampled.
        assert_eq!(p.samples_mean, 10_010.0);
        assert_eq!(recommend(&sim.points, 0.9), Some(1));
    }

    #[test]
    fn huge_interval_covers_almost_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let t = two_stacks(&dir.path().join("t.mtl"));
        let sim = simulate(&t, &opts(&[1 << 30], 200, 3)).unwrap();
        let p = &sim.points[0];
        // P(any sample in a run) ≈ 1 MB / 1 GiB ≈ 0.001.
        assert!(p.coverage_mean < 0.03, "{p:?}");
        assert!(p.samples_mean < 0.03, "{p:?}");
        assert_eq!(recommend(&sim.points, 0.9), None);
    }

    #[test]
    fn ten_kib_always_finds_the_big_stack_and_the_small_one_at_its_probability() {
        let dir = tempfile::tempdir().unwrap();
        let t = two_stacks(&dir.path().join("t.mtl"));
        let runs = 400;
        let sim = simulate(&t, &opts(&[10 << 10], runs, 7)).unwrap();
        let p = &sim.points[0];
        // Stack 1 holds 1 MB: missing it needs ~100 expected samples to all fail.
        assert_eq!(p.stacks_found_min, 1);
        assert!(p.coverage_min >= 1_000_000.0 / 1_001_000.0, "{p:?}");
        let p2 = 1.0 - (-1000.0f64 / 10240.0).exp();
        let got = p.stacks_found_mean - 1.0;
        let sigma = (p2 * (1.0 - p2) / runs as f64).sqrt();
        assert!((got - p2).abs() < 4.0 * sigma, "stack 2 found in {got} of runs, expected {p2} ± {sigma}");
        // Coverage follows: 1 MB always, plus 1 KB when stack 2 is found.
        let want_cov = (1_000_000.0 + 1000.0 * got) / 1_001_000.0;
        assert!((p.coverage_mean - want_cov).abs() < 1e-12);
        let each = 1.0 - (-100.0f64 / 10240.0).exp();
        assert!((p.samples_expected - 10_010.0 * each).abs() < 1e-6, "{p:?}");
        assert!((p.samples_mean / p.samples_expected - 1.0).abs() < 0.03, "{p:?}");
        assert!(p.coverage_low <= p.coverage_mean && p.coverage_max <= 1.0);
    }

    #[test]
    fn same_seed_same_result_other_seed_other_result() {
        let dir = tempfile::tempdir().unwrap();
        let t = two_stacks(&dir.path().join("t.mtl"));
        let a = simulate(&t, &opts(&[4 << 10, 10 << 10, 64 << 10], 20, 11)).unwrap();
        let b = simulate(&t, &opts(&[4 << 10, 10 << 10, 64 << 10], 20, 11)).unwrap();
        assert_eq!(serde_json::to_string(&a).unwrap(), serde_json::to_string(&b).unwrap());
        let c = simulate(&t, &opts(&[4 << 10, 10 << 10, 64 << 10], 20, 12)).unwrap();
        assert_ne!(a.points, c.points);
        // An interval's row does not depend on the other intervals simulated.
        let d = simulate(&t, &opts(&[10 << 10], 20, 11)).unwrap();
        assert_eq!(d.points[0], a.points[1]);
    }

    #[test]
    fn stack_zero_and_failed_allocations() {
        let dir = tempfile::tempdir().unwrap();
        let mut v = Vec::new();
        for i in 0..100u64 {
            v.push((1, 5, 300, 0x1000 + i * 512)); // 30 000 bytes with a stack
            v.push((1, 0, 100, 0x9_0000 + i * 512)); // 10 000 bytes without
            v.push((1, 6, 1 << 40, 0)); // failed: not counted
        }
        let t = write_trace(&dir.path().join("z.mtl"), &v);
        let sim = simulate(&t, &opts(&[1], 2, 1)).unwrap();
        assert_eq!(sim.total_bytes, 40_000);
        assert_eq!(sim.total_allocations, 200);
        assert_eq!(sim.distinct_stacks, 1);
        assert_eq!(sim.unattributed_bytes, 10_000);
        assert_eq!(sim.points[0].coverage_mean, 0.75);
        assert_eq!(sim.points[0].stacks_found_mean, 1.0);
    }

    #[test]
    fn empty_trace() {
        let dir = tempfile::tempdir().unwrap();
        let t = write_trace(&dir.path().join("e.mtl"), &[]);
        let sim = simulate(&t, &SimulateOptions::default()).unwrap();
        assert_eq!(sim.total_bytes, 0);
        assert_eq!(sim.points.len(), 8);
        assert!(sim.points.iter().all(|p| p.coverage_mean == 0.0 && p.samples_mean == 0.0));
        assert_eq!(recommend(&sim.points, 0.9), None);
    }

    /// The preload's rule, written as the C does it: one countdown per
    /// (sampler, thread), starting at 0, decremented by every allocation.
    fn reference(allocs: &[(u32, u32, u64, u64)], o: &SimulateOptions) -> (Vec<u64>, Vec<Vec<u32>>) {
        let mut samples = Vec::new();
        let mut found = Vec::new();
        for &iv in &o.intervals {
            for r in 0..o.runs {
                let mut rng = sampler_seed(o.seed, iv, r);
                let mut cd: Vec<(u32, i64, bool)> = Vec::new(); // (tid, countdown, init)
                let mut n = 0u64;
                let mut f = std::collections::BTreeSet::new();
                for &(tid, stack, size, ptr) in allocs {
                    if ptr == 0 {
                        continue;
                    }
                    // Threads in order of first allocation, as the trace merge yields them here.
                    let j = match cd.iter().position(|c| c.0 == tid) {
                        Some(j) => j,
                        None => {
                            cd.push((tid, 0, false));
                            cd.len() - 1
                        }
                    };
                    let c = &mut cd[j];
                    c.1 -= size as i64;
                    if c.1 > 0 {
                        continue;
                    }
                    if !c.2 {
                        c.2 = true;
                        let first = draw(&mut rng, iv as f64) as i64;
                        if first > size as i64 {
                            c.1 = first - size as i64;
                            continue;
                        }
                    }
                    c.1 = draw(&mut rng, iv as f64) as i64;
                    n += 1;
                    f.insert(stack);
                }
                samples.push(n);
                found.push(f.into_iter().collect());
            }
        }
        (samples, found)
    }

    #[test]
    fn matches_the_preload_countdown_rule_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let mut x = 0x1234_5678_9abc_def1u64;
        let mut v = Vec::new();
        for i in 0..20_000u64 {
            let r = rng_next(&mut x);
            let tid = 100 + (r % 3) as u32;
            let stack = 1 + ((r >> 8) % 300) as u32;
            let size = match (r >> 20) % 10 {
                0 => 0,
                1 => 5000 + (r >> 32) % 100_000,
                _ => 1 + (r >> 32) % 200,
            };
            let ptr = if (r >> 40).is_multiple_of(97) { 0 } else { 0x1000 + i * 64 };
            v.push((tid, stack, size, ptr));
        }
        let t = write_trace(&dir.path().join("r.mtl"), &v);
        let o = opts(&[1, 64, 1000, 4096, 100_000], 3, 5);
        // The trace merge keeps this order: one event per tsc, increasing.
        let raw = replay(&t, &o, &mut |_| {}).unwrap();
        let (samples, found) = reference(&v, &o);
        assert_eq!(raw.samples, samples);
        for (s, want) in found.iter().enumerate() {
            let mut got: Vec<u32> = Vec::new();
            for (w, &word) in raw.found[s].iter().enumerate() {
                for b in 0..64 {
                    if word >> b & 1 == 1 {
                        got.push(raw.stack_ids[w * 64 + b]);
                    }
                }
            }
            got.sort();
            assert_eq!(&got, want, "sampler {s}");
        }
        assert!(samples.iter().all(|&n| n > 0));
    }

    fn point(interval: u64, mean: f64, sd: f64) -> CoveragePoint {
        CoveragePoint {
            interval,
            coverage_mean: mean,
            coverage_stddev: sd,
            coverage_min: mean - sd,
            coverage_max: mean + sd,
            coverage_low: (mean - 2.0 * sd).max(0.0),
            stacks_found_mean: 0.0,
            stacks_found_stddev: 0.0,
            stacks_found_min: 0,
            stacks_found_max: 0,
            stacks_found_fraction: 0.0,
            samples_expected: 0.0,
            samples_mean: 0.0,
        }
    }

    #[test]
    fn recommendation_rules() {
        let pts = [point(1 << 20, 0.97, 0.01), point(4 << 20, 0.85, 0.05), point(2 << 20, 0.92, 0.02)];
        assert_eq!(recommend(&pts, 0.9), Some(2 << 20));
        assert_eq!(recommend_safe(&pts, 0.9), Some(1 << 20));
        assert_eq!(recommend(&pts, 0.8), Some(4 << 20));
        assert_eq!(recommend(&pts, 0.99), None);
        assert_eq!(recommend_safe(&pts, 0.99), None);
        assert_eq!(recommend(&[], 0.9), None);
    }
}
