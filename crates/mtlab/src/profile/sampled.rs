//! Estimates from a sampled trace (`record --sample`).
//!
//! An allocation of `s` bytes made while the mean interval was `I` is sampled
//! with probability `p = 1 - exp(-s/I)` (a Poisson process over bytes). Each
//! sample therefore stands for `1/p` allocations and `s/p` bytes: summing
//! these weights gives unbiased estimates (Horvitz–Thompson), and summing
//! `(1-p)/p²` times the squared value estimates their variance
//! (docs/metrics.md, "Sampled profiles").

use rustc_hash::FxHashMap as HashMap;
use serde::Serialize;

use super::data::{Bounds, ProfileData, StackSample};
use super::interval::gamma_interval;
use crate::symbolize::{parse_all_maps, CodeRanges, Mapping};
use crate::trace::{Event, EventKind, Item, StackTable, TraceError, TraceFile};

/// Probability that an allocation of `size` bytes is sampled at mean interval `interval`.
pub fn sample_probability(size: u64, interval: u64) -> f64 {
    if interval == 0 {
        return 1.0;
    }
    -(-(size as f64) / interval as f64).exp_m1()
}

/// A weighted total, its design variance and its 95 % interval.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Estimate {
    pub value: f64,
    pub variance: f64,
    /// Samples behind the estimate; 0 means "not sampled": the value is 0
    /// but the interval is not (see `profile::interval`).
    pub samples: u64,
    /// The 95 % interval, `0 <= low <= value <= high` (set by `close`).
    pub low: f64,
    pub high: f64,
    /// The largest weight of one sample: what one more sample would carry.
    #[serde(skip)]
    pub max_weight: f64,
    /// What the samples themselves hold (their bytes, or one object each):
    /// there was at least this much, so the interval starts no lower.
    #[serde(skip)]
    pub seen: f64,
}

impl Estimate {
    fn add(&mut self, weight: f64, miss: f64, seen: f64) {
        self.value += weight;
        self.seen += seen;
        self.variance += miss * weight * weight;
        self.samples += 1;
        self.max_weight = self.max_weight.max(weight);
    }

    /// Sets the interval; `fallback_weight` stands for one sample's weight
    /// when this estimate has none (the site's, or the interval's).
    fn close(&mut self, fallback_weight: f64) {
        let w = if self.samples > 0 { self.max_weight } else { fallback_weight };
        (self.low, self.high) = gamma_interval(self.value, self.variance, self.samples, w);
        // A skewed interval on one or two samples fell below what they hold
        // ("2 [0, 8]" objects with one seen).
        self.low = self.low.max(self.seen.min(self.value));
    }

    /// The estimate of two disjoint parts together (two stacks shown as one
    /// row): values and variances add, and the interval is made again.
    pub fn plus(&self, o: &Estimate) -> Estimate {
        let mut e = Estimate {
            value: self.value + o.value,
            variance: self.variance + o.variance,
            samples: self.samples + o.samples,
            low: 0.0,
            high: 0.0,
            max_weight: self.max_weight.max(o.max_weight),
            seen: self.seen + o.seen,
        };
        if e.samples == 0 {
            // Neither was sampled: each bound says what could have hidden there.
            e.high = self.high + o.high;
        } else {
            e.close(e.max_weight);
        }
        e
    }

    pub fn bounds(&self) -> Bounds {
        Bounds { low: self.low, high: self.high, samples: self.samples }
    }

    pub fn not_sampled(&self) -> bool {
        self.samples == 0
    }

    /// Whether `x` lies in the 95 % interval.
    pub fn covers(&self, x: f64) -> bool {
        self.low <= x && x <= self.high
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SampledStack {
    pub stack_id: u32,
    #[serde(skip)]
    pub pcs: Vec<u64>,
    pub samples: u64,
    pub alloc_bytes: Estimate,
    pub alloc_objects: Estimate,
    pub inuse_samples: u64,
    pub inuse_bytes: Estimate,
    pub inuse_objects: Estimate,
}

/// A sampled profile's totals, as reported (JSON keys at the profile's top level).
#[derive(Debug, Clone, Serialize)]
pub struct SampledTotals {
    /// Intervals seen in the samples (more than one if changed at run time).
    pub intervals: Vec<u64>,
    pub samples: u64,
    pub sample_frees: u64,
    pub alloc_bytes: Estimate,
    pub alloc_objects: Estimate,
    pub inuse_bytes: Estimate,
    pub inuse_objects: Estimate,
}

#[derive(Debug, Clone, Serialize)]
pub struct SampledProfile {
    #[serde(flatten)]
    pub totals: SampledTotals,
    pub stacks: Vec<SampledStack>,
    #[serde(skip)]
    pub data: ProfileData,
    /// The in-use estimate at each checkpoint (`SampledPass::with_checkpoints`).
    #[serde(skip)]
    pub inuse_at_checkpoints: Vec<Estimate>,
}

struct Live {
    stack: u32,
    bytes: f64,
    objects: f64,
    /// 1 - p: scales the squared weights into variances.
    weight: f64,
}

/// Adds one sample of `size` bytes at interval `interval` to the byte and
/// object estimates: weights `s/p` and `1/p`, variances `(1-p)(s/p)^2` and `(1-p)/p^2`.
fn add_sample(bytes: &mut Estimate, objects: &mut Estimate, size: u64, interval: u64) -> (f64, f64, f64) {
    let p = sample_probability(size, interval).max(f64::MIN_POSITIVE);
    let (b, o) = (size as f64 / p, 1.0 / p);
    bytes.add(b, 1.0 - p, size as f64);
    objects.add(o, 1.0 - p, 1.0);
    (b, o, 1.0 - p)
}

/// Counts a sample still live at the end towards the in-use estimates.
fn add_live(s: &mut SampledStack, l: &Live) {
    s.inuse_samples += 1;
    s.inuse_bytes.add(l.bytes, l.weight, l.bytes * (1.0 - l.weight));
    s.inuse_objects.add(l.objects, l.weight, 1.0);
}

/// Sets a stack's intervals: in-use estimates with no live sample take the
/// weights of the stack's allocation samples.
fn close_stack(s: &mut SampledStack, bytes_fallback: f64, objects_fallback: f64) {
    let (b, o) = if s.alloc_bytes.samples > 0 {
        (s.alloc_bytes.max_weight, s.alloc_objects.max_weight)
    } else {
        (bytes_fallback, objects_fallback)
    };
    s.alloc_bytes.close(b);
    s.alloc_objects.close(o);
    s.inuse_bytes.close(b);
    s.inuse_objects.close(o);
}

/// The sampled profile's share of a pass over a trace: fed every event by
/// whoever decodes the trace (`read_sampled`, or the heap analysis's own
/// pass), so a report needs one decode for both.
pub struct SampledPass {
    per: HashMap<u32, SampledStack>,
    live: HashMap<u64, Live>,
    intervals: Vec<u64>,
    samples: u64,
    frees: u64,
    total: SampledStack,
    first_tsc: u64,
    last_tsc: u64,
    /// Times (TSC, ascending) at which the in-use estimate is wanted (the
    /// heap manager's readings after `mtlab ctl dump`), and the estimates
    /// taken there so far.
    checkpoints: Vec<u64>,
    inuse_at: Vec<Estimate>,
}

impl Default for SampledPass {
    fn default() -> Self {
        SampledPass {
            per: HashMap::default(),
            live: HashMap::default(),
            intervals: Vec::new(),
            samples: 0,
            frees: 0,
            total: empty_stack(0),
            first_tsc: u64::MAX,
            last_tsc: 0,
            checkpoints: Vec::new(),
            inuse_at: Vec::new(),
        }
    }
}

fn empty_stack(stack_id: u32) -> SampledStack {
    SampledStack {
        stack_id,
        pcs: Vec::new(),
        samples: 0,
        alloc_bytes: Estimate::default(),
        alloc_objects: Estimate::default(),
        inuse_samples: 0,
        inuse_bytes: Estimate::default(),
        inuse_objects: Estimate::default(),
    }
}

impl SampledPass {
    /// A pass that also estimates the bytes in use at each of `tscs`.
    pub fn with_checkpoints(mut tscs: Vec<u64>) -> Self {
        tscs.sort_unstable();
        SampledPass { checkpoints: tscs, ..SampledPass::default() }
    }

    /// The estimate of bytes in use now, from the samples still live.
    fn inuse_now(&self, fallback_interval: u64) -> Estimate {
        let mut e = Estimate::default();
        for l in self.live.values() {
            e.add(l.bytes, l.weight, l.bytes * (1.0 - l.weight));
        }
        e.close(fallback_interval.max(1) as f64);
        e
    }

    fn take_checkpoints_before(&mut self, tsc: u64) {
        while self.inuse_at.len() < self.checkpoints.len() && self.checkpoints[self.inuse_at.len()] < tsc {
            let interval = self.intervals.iter().copied().max().unwrap_or(1);
            self.inuse_at.push(self.inuse_now(interval));
        }
    }

    pub fn event(&mut self, ev: &Event) {
        if self.inuse_at.len() < self.checkpoints.len() {
            self.take_checkpoints_before(ev.tsc);
        }
        match ev.kind {
            EventKind::Sample { size, ptr, interval, .. } if ptr != 0 => {
                self.samples += 1;
                self.first_tsc = self.first_tsc.min(ev.tsc);
                self.last_tsc = self.last_tsc.max(ev.tsc);
                if !self.intervals.contains(&interval) {
                    self.intervals.push(interval);
                }
                // A new stack starts from zero (not from the running total).
                let s = self.per.entry(ev.stack).or_insert_with(|| empty_stack(ev.stack));
                s.samples += 1;
                let (b, o, q) = add_sample(&mut s.alloc_bytes, &mut s.alloc_objects, size, interval);
                add_sample(&mut self.total.alloc_bytes, &mut self.total.alloc_objects, size, interval);
                self.live.insert(ptr, Live { stack: ev.stack, bytes: b, objects: o, weight: q });
            }
            EventKind::SampleFree { ptr } => {
                self.frees += 1;
                self.live.remove(&ptr);
            }
            _ => {}
        }
    }

    /// The profile, once every event of `trace` has been fed; `stacks` are
    /// the trace's stack definitions, `maps` its mappings (`parse_all_maps`).
    pub fn finish(mut self, trace: &TraceFile, stacks: &StackTable, maps: Vec<Mapping>) -> SampledProfile {
        self.take_checkpoints_before(u64::MAX);
        let SampledPass { mut per, live, intervals, samples, frees, mut total, first_tsc, last_tsc, checkpoints: _, inuse_at } = self;
        for l in live.values() {
            add_live(&mut total, l);
            if let Some(s) = per.get_mut(&l.stack) {
                add_live(s, l);
            }
        }
        // With no sample at all: the weights of a one-byte block, which for
        // bytes is the exact zero-sample bound (`profile::interval`).
        let interval = intervals.iter().copied().max().unwrap_or(trace.header.sample_interval).max(1) as f64;
        close_stack(&mut total, interval, interval);
        let mut list: Vec<SampledStack> = per
            .into_values()
            .map(|mut s| {
                s.pcs = stacks.get(s.stack_id).map(<[u64]>::to_vec).unwrap_or_default();
                close_stack(&mut s, interval, interval);
                s
            })
            .collect();
        list.sort_by(|a, b| b.alloc_bytes.value.total_cmp(&a.alloc_bytes.value).then(a.stack_id.cmp(&b.stack_id)));
        let data = ProfileData {
            samples: list
                .iter()
                .map(|s| StackSample {
                    pcs: s.pcs.clone(),
                    alloc_objects: s.alloc_objects.value,
                    alloc_bytes: s.alloc_bytes.value,
                    inuse_objects: s.inuse_objects.value,
                    inuse_bytes: s.inuse_bytes.value,
                    bounds: Some([&s.alloc_objects, &s.alloc_bytes, &s.inuse_objects, &s.inuse_bytes].map(Estimate::bounds)),
                })
                .collect(),
            maps,
            period_bytes: intervals.first().copied().unwrap_or(trace.header.sample_interval),
            start_ns: trace.header.start_ns,
            duration_ns: if first_tsc <= last_tsc { trace.header.ns_since_start(last_tsc).unwrap_or(0) } else { 0 },
        };
        SampledProfile {
            totals: SampledTotals {
                intervals,
                samples,
                sample_frees: frees,
                alloc_bytes: total.alloc_bytes,
                alloc_objects: total.alloc_objects,
                inuse_bytes: total.inuse_bytes,
                inuse_objects: total.inuse_objects,
            },
            stacks: list,
            data,
            inuse_at_checkpoints: inuse_at,
        }
    }
}

/// The sampled profile of `trace`, with the in-use estimate at each of `checkpoints` (TSC).
pub fn read_sampled(trace: &TraceFile, checkpoints: Vec<u64>) -> Result<SampledProfile, TraceError> {
    let mut stacks = StackTable::default();
    let mut pass = SampledPass::with_checkpoints(checkpoints);
    let maps = parse_all_maps(&trace.maps);
    let code = CodeRanges::new(&maps);
    for item in trace.items()? {
        match item {
            Item::Stack { id, pcs } => {
                stacks.insert(id, &code.cut(pcs));
            }
            Item::Event(ev) => pass.event(&ev),
        }
    }
    Ok(pass.finish(trace, &stacks, maps))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probability_and_weights() {
        assert_eq!(sample_probability(10, 0), 1.0);
        let p = sample_probability(512, 512 << 10);
        assert!((p - (1.0 - (-512.0f64 / 524288.0).exp())).abs() < 1e-15);
        let mut b = Estimate::default();
        let mut o = Estimate::default();
        let (bw, ow, q) = add_sample(&mut b, &mut o, 512, 512 << 10);
        assert_eq!((b.samples, o.samples), (1, 1));
        assert!((bw - 512.0 / p).abs() < 1e-6);
        assert!((ow - 1.0 / p).abs() < 1e-9);
        assert!((q - (1.0 - p)).abs() < 1e-15);
        assert!((b.variance - (1.0 - p) * bw * bw).abs() < 1e-3);
        // A block far larger than the interval is sampled almost surely: weight ~ its size.
        let p_big = sample_probability(64 << 20, 512 << 10);
        assert!(p_big > 0.999_999);
    }

    #[test]
    fn two_estimates_add_as_one_of_both_parts() {
        let (mut b1, mut o1, mut b2, mut o2) = Default::default();
        for _ in 0..3 {
            add_sample(&mut b1, &mut o1, 100, 4096);
        }
        add_sample(&mut b2, &mut o2, 5000, 4096);
        let (mut both_b, mut both_o) = (Estimate::default(), Estimate::default());
        for _ in 0..3 {
            add_sample(&mut both_b, &mut both_o, 100, 4096);
        }
        add_sample(&mut both_b, &mut both_o, 5000, 4096);
        for e in [&mut b1, &mut b2, &mut both_b] {
            e.close(0.0);
        }
        let sum = b1.plus(&b2);
        assert!((sum.value - both_b.value).abs() < 1e-6 && (sum.variance - both_b.variance).abs() < 1e-3);
        assert_eq!((sum.samples, sum.low, sum.high), (both_b.samples, both_b.low, both_b.high));
        let (mut n1, mut n2) = (Estimate::default(), Estimate::default());
        n1.close(4096.0);
        n2.close(4096.0);
        let none = n1.plus(&n2);
        assert_eq!((none.samples, none.value, none.high), (0, 0.0, n1.high + n2.high));
        let _ = (o1, o2, both_o);
    }

    #[test]
    fn an_interval_starts_no_lower_than_what_its_samples_hold() {
        // One 288-byte block sampled at 4 KiB: weight ~ 14.7 objects; the
        // skewed gamma interval of one sample reaches below one object.
        let (mut b, mut o) = (Estimate::default(), Estimate::default());
        add_sample(&mut b, &mut o, 288, 4096);
        b.close(0.0);
        o.close(0.0);
        assert!(o.low >= 1.0 && o.low <= o.value, "{o:?}");
        assert!(b.low >= 288.0 && b.low <= b.value, "{b:?}");
        assert!(o.high >= o.value && b.high >= b.value);
    }
}
