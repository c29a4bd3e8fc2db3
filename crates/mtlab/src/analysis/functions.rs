//! The per-function aggregator: for each intercepted function its calls,
//! failures, sizes and the distribution of cycles spent in the real call
//! (mean, standard deviation, percentiles). A full trace times a random
//! sample of the calls by default (`record --time`): counts and bytes are of
//! every call, the cycle figures of the timed ones, with 95 % intervals for
//! what they say of all calls.

use hdrhistogram::Histogram;

use super::model::{CycleIntervals, CycleSummary};
use crate::study::stats::{self, Interval, Method};
use super::step::Step;
use crate::trace::{Event, Func};

/// Every function's statistics, fed each event.
pub struct Functions {
    stats: Vec<FuncStats>,
}

impl Default for Functions {
    fn default() -> Self {
        Functions { stats: Func::ALL.iter().map(|_| FuncStats::default()).collect() }
    }
}

impl Functions {
    /// Counts `ev`'s call, as the replay read it (`Step::call`).
    #[inline(always)]
    pub fn on_event(&mut self, ev: &Event, step: &Step) {
        if let Some(c) = step.call {
            self.stats[c.func.index()].add(ev.cycles, c.size, c.failed);
        }
    }

    /// The statistics of `func`.
    pub fn of(&self, func: Func) -> &FuncStats {
        &self.stats[func.index()]
    }
}

pub struct FuncStats {
    pub calls: u64,
    pub failed: u64,
    /// Calls whose real call was timed (all of them under `--time every`).
    pub timed: u64,
    /// Sum of requested bytes (allocations), lengths (mmap family) or freed sizes.
    pub bytes: u128,
    sized_calls: u64,
    sum: u128,
    sum_sq: f64,
    /// Exact counts of calls that took fewer than `SMALL` cycles (nearly all
    /// of them): an array increment per call instead of a histogram record.
    /// Empty until the first such call: most of the 16 functions are never
    /// called, and a tree of short processes paid 128 KiB of zeroed pages each.
    small: Vec<u64>,
    /// Calls of `SMALL` cycles or more.
    hist: Histogram<u64>,
}

const SMALL: usize = 1024;

impl Default for FuncStats {
    fn default() -> Self {
        FuncStats {
            calls: 0,
            failed: 0,
            timed: 0,
            bytes: 0,
            sized_calls: 0,
            sum: 0,
            sum_sq: 0.0,
            small: Vec::new(),
            // 2 significant digits: p50/p99 within 1 %, a few KiB per function.
            hist: Histogram::new(2).expect("valid precision"),
        }
    }
}

impl FuncStats {
    /// One call; `cycles` is [`crate::trace::UNTIMED`] when it was not timed.
    #[inline]
    pub fn add(&mut self, cycles: u64, size: Option<u64>, failed: bool) {
        self.calls += 1;
        self.failed += failed as u64;
        // A failed call allocated nothing: malloc(SIZE_MAX) made the mean
        // size of a thousand 24-byte mallocs 1.8e16.
        if let (Some(s), false) = (size, failed) {
            self.bytes += s as u128;
            self.sized_calls += 1;
        }
        if cycles == crate::trace::UNTIMED {
            return;
        }
        self.timed += 1;
        self.sum += cycles as u128;
        self.sum_sq += (cycles as f64) * (cycles as f64);
        if let Some(n) = self.small.get_mut(cycles as usize) {
            *n += 1;
        } else {
            self.add_rare(cycles);
        }
    }

    /// A call of `SMALL` cycles or more, or the first below while `small` is empty.
    #[cold]
    fn add_rare(&mut self, cycles: u64) {
        if cycles < SMALL as u64 {
            self.small = vec![0; SMALL];
            self.small[cycles as usize] += 1;
        } else if self.hist.record(cycles).is_err() {
            // record(), not saturating_record(): the histogram auto-resizes
            // only on record(); saturating_record() clamps to its initial
            // range, which made max/p99 wrong for any slower call.
            self.hist.saturating_record(cycles);
        }
    }

    pub fn mean_size(&self) -> f64 {
        if self.sized_calls == 0 {
            0.0
        } else {
            self.bytes as f64 / self.sized_calls as f64
        }
    }

    /// The nearest-rank quantile: the smallest value with at least
    /// ⌈q·n⌉ timed calls at or below it (above `SMALL`, to the histogram's 1 %).
    fn quantile(&self, q: f64) -> u64 {
        let n = self.timed;
        if n == 0 {
            return 0;
        }
        self.at_rank(((q * n as f64).ceil() as u64).clamp(1, n))
    }

    /// The `rank`-th smallest timed call's cycles (1-based).
    fn at_rank(&self, rank: u64) -> u64 {
        let mut seen = 0u64;
        for (v, &c) in self.small.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return v as u64;
            }
        }
        for it in self.hist.iter_recorded() {
            seen += it.count_since_last_iteration();
            if seen >= rank {
                return self.hist.highest_equivalent(it.value_iterated_to());
            }
        }
        self.hist.max()
    }

    /// Every timed call's cycles with its count (above `SMALL`, each
    /// histogram bucket at its middle value).
    fn timed_values(&self) -> impl Iterator<Item = (f64, u64)> + '_ {
        let small = self.small.iter().enumerate().filter(|(_, &c)| c > 0).map(|(v, &c)| (v as f64, c));
        let rare = self.hist.iter_recorded().map(|it| {
            (self.hist.median_equivalent(it.value_iterated_to()) as f64, it.count_since_last_iteration())
        });
        small.chain(rare)
    }

    pub fn cycles(&self) -> CycleSummary {
        let n = self.timed.max(1) as f64;
        let mean = self.sum as f64 / n;
        let stddev = stats::stddev_from_sums(self.timed, self.sum as f64, self.sum_sq);
        let stddev = if stddev.is_nan() { 0.0 } else { stddev };
        // A sample's total is its mean times every call.
        let total = if self.timed == self.calls { self.sum as f64 } else { (mean * self.calls as f64).round() };
        CycleSummary {
            total: total.min(u64::MAX as f64) as u64,
            mean,
            stddev,
            p50: self.quantile(0.5),
            p99: self.quantile(0.99),
            max: if self.hist.is_empty() {
                self.small.iter().rposition(|&n| n > 0).unwrap_or(0) as u64
            } else {
                self.hist.max()
            },
            timed: self.timed,
            intervals: self.intervals(mean, stddev),
        }
    }

    /// 95 % intervals of what the timed sample says of all calls; None when
    /// every call was timed (the figures are exact) or fewer than 2 were.
    ///
    /// The timed calls are a simple random sample of the calls, so: the
    /// mean's is Student's t with the finite-population correction; the
    /// quantiles' are distribution-free (order statistics of the sample,
    /// [`stats::quantile_ranks`]); the standard deviation's is the delta
    /// method on the sample variance, whose variance comes from the fourth
    /// central moment (no normality assumed: call cycles are heavy-tailed).
    fn intervals(&self, mean: f64, sd: f64) -> Option<CycleIntervals> {
        let (n, big_n) = (self.timed, self.calls);
        if n < 2 || n >= big_n {
            return None;
        }
        let (nf, fpc) = (n as f64, ((big_n - n) as f64 / (big_n - 1) as f64).sqrt());
        let t = stats::t_quantile(0.5 + stats::LEVEL / 2.0, nf - 1.0);
        let around = |mid: f64, se: f64| Interval {
            low: (mid - t * se * fpc).max(0.0),
            high: mid + t * se * fpc,
            level: stats::LEVEL,
            method: Method::StudentT,
        };
        let mean_ci = around(mean, sd / nf.sqrt());
        let m4 = self.timed_values().map(|(v, c)| (v - mean).powi(4) * c as f64).sum::<f64>() / nf;
        let var_s2 = ((m4 - (nf - 3.0) / (nf - 1.0) * sd.powi(4)) / nf).max(0.0);
        let stddev = around(sd, if sd > 0.0 { var_s2.sqrt() / (2.0 * sd) } else { 0.0 });
        let quantile = |q: f64| {
            let (lo, hi, level) = stats::quantile_ranks(n, q)?;
            Some(Interval {
                low: self.at_rank(lo) as f64,
                high: self.at_rank(hi) as f64,
                level,
                method: Method::OrderStatistics,
            })
        };
        let scale = big_n as f64;
        Some(CycleIntervals {
            total: Interval { low: mean_ci.low * scale, high: mean_ci.high * scale, ..mean_ci },
            mean: mean_ci,
            stddev,
            p50: quantile(0.5)?,
            p99: quantile(0.99)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Xorshift;

    #[test]
    fn each_call_counts_for_its_function_and_a_free_for_the_size_it_freed() {
        use crate::analysis::replay::Replay;
        use crate::trace::event::FLAG_FAILED;
        use crate::trace::{EventKind, Header, StackTable};
        let ev = |kind, cycles, flags| Event { tsc: 0, tid: 1, cycles, stack: 0, flags, kind };
        let mut replay = Replay::new(&Header { page_size: 4096, ..Header::default() });
        let mut f = Functions::default();
        let events = [
            ev(EventKind::Alloc { func: Func::Malloc, size: 48, ptr: 0x1000, usable: 56, align: 0 }, 30, 0),
            ev(EventKind::Alloc { func: Func::Malloc, size: 1 << 40, ptr: 0, usable: 0, align: 0 }, 90, FLAG_FAILED),
            ev(EventKind::Free { func: Func::Free, ptr: 0x1000 }, 20, 0),
            ev(EventKind::Free { func: Func::Free, ptr: 0x2000 }, 10, 0),
            ev(EventKind::BrkSeen { brk: 0x5000 }, 0, 0),
        ];
        for e in &events {
            let step = replay.event(e, &StackTable::default(), 0);
            f.on_event(e, &step);
        }
        let m = f.of(Func::Malloc);
        assert_eq!((m.calls, m.failed, m.mean_size()), (2, 1, 48.0));
        let free = f.of(Func::Free);
        assert_eq!((free.calls, free.failed, free.bytes), (2, 0, 48), "an unknown free is a call of no size");
        assert_eq!(f.of(Func::Brk).calls, 0, "BRK_SEEN is no call");
    }

    #[test]
    fn a_sample_of_timed_calls_counts_every_call_and_bounds_all_calls_figures() {
        // 200 000 calls of cycles 20 + i % 1000 (every value equally often, a
        // flat population: mean 519.5, p50 519, p99 1009), one in 32 timed
        // by a fixed pseudo-random draw.
        let mut rng = Xorshift::new(0x9e37_79b9_7f4a_7c15);
        let (mut all, mut s) = (FuncStats::default(), FuncStats::default());
        for i in 0..200_000u64 {
            let seed = rng.next_u64();
            let c = 20 + i % 1000;
            all.add(c, Some(64), false);
            s.add(if seed.is_multiple_of(32) { c } else { crate::trace::UNTIMED }, Some(64), false);
        }
        assert_eq!((s.calls, s.bytes, s.mean_size()), (200_000, 200_000 * 64, 64.0), "counts and bytes are of every call");
        assert!((5_500..7_000).contains(&s.timed), "timed {}", s.timed);
        let (exact, est) = (all.cycles(), s.cycles());
        assert_eq!((exact.timed, exact.intervals), (200_000, None), "every call timed: exact, no intervals");
        let ci = est.intervals.expect("a sample has intervals");
        assert!(ci.mean.contains(exact.mean), "mean {} in {:?}", exact.mean, ci.mean);
        assert!(ci.total.contains(exact.total as f64), "total {} in {:?}", exact.total, ci.total);
        assert!(ci.stddev.contains(exact.stddev), "stddev {} in {:?}", exact.stddev, ci.stddev);
        assert!(ci.p50.contains(exact.p50 as f64), "p50 {} in {:?}", exact.p50, ci.p50);
        assert!(ci.p99.contains(exact.p99 as f64), "p99 {} in {:?}", exact.p99, ci.p99);
        // Narrow enough to say something: the mean within ±3 %.
        assert!(ci.mean.high - ci.mean.low < 0.06 * exact.mean, "{:?}", ci.mean);
        // One timed call of many: no interval can be made.
        let mut one = FuncStats::default();
        one.add(50, None, false);
        one.add(crate::trace::UNTIMED, None, false);
        assert_eq!((one.calls, one.cycles().timed, one.cycles().intervals), (2, 1, None));
    }

    #[test]
    fn summary_of_known_values() {
        let mut s = FuncStats::default();
        for c in 1..=100u64 {
            s.add(c, Some(10), false);
        }
        let c = s.cycles();
        assert_eq!(c.total, 5050);
        assert_eq!(c.mean, 50.5);
        // Sample standard deviation of 1..=100: sqrt(841.67).
        assert!((c.stddev - 29.011).abs() < 0.01);
        assert_eq!(c.p50, 50);
        assert_eq!(c.p99, 99);
        assert_eq!(s.mean_size(), 10.0);
    }

    #[test]
    fn failed_calls_count_as_calls_but_not_in_the_mean_size() {
        let mut s = FuncStats::default();
        for _ in 0..1000 {
            s.add(50, Some(24), false);
        }
        s.add(50, Some(u64::MAX), true);
        assert_eq!((s.calls, s.failed), (1001, 1));
        assert_eq!(s.mean_size(), 24.0);
    }

    #[test]
    fn quantiles_span_exact_and_histogram_ranges() {
        let mut s = FuncStats::default();
        // 98 fast calls, 2 slow ones: p50 exact; p99 (the 99th of 100) and
        // max from the histogram.
        for _ in 0..98 {
            s.add(26, None, false);
        }
        s.add(5000, None, false);
        s.add(7000, None, false);
        let c = s.cycles();
        assert_eq!(c.p50, 26);
        assert!((4950..=5050).contains(&c.p99), "p99 {}", c.p99);
        assert!((6930..=7070).contains(&c.max), "max {}", c.max);
        // Only fast calls: max is exact.
        let mut f = FuncStats::default();
        f.add(3, None, false);
        f.add(1023, None, false);
        assert_eq!((f.cycles().max, f.cycles().p50, f.cycles().p99), (1023, 3, 1023));
        assert_eq!(FuncStats::default().cycles().p99, 0);
    }

    #[test]
    fn the_exact_counts_start_at_the_first_fast_call_whenever_it_comes() {
        let mut s = FuncStats::default();
        s.add(5000, None, false);
        assert!(s.small.is_empty(), "no fast call yet");
        s.add(7, None, false);
        s.add(7, None, false);
        assert_eq!(s.small[7], 2);
        assert_eq!((s.cycles().p50, s.calls), (7, 3));
    }

    #[test]
    fn large_values_are_not_clamped() {
        let mut s = FuncStats::default();
        for c in [10u64, 20, 1_000_000] {
            s.add(c, None, false);
        }
        let c = s.cycles();
        assert!(c.max >= 990_000 && c.max <= 1_010_000, "max {}", c.max);
        assert!(c.p99 >= 990_000, "p99 {}", c.p99);
        assert!(c.mean <= c.max as f64);
    }
}
