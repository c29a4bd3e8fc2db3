//! Per-function call statistics: counts, sizes and the distribution of
//! cycles spent in the real call (mean, standard deviation, percentiles).

use hdrhistogram::Histogram;
use serde::Serialize;

pub struct FuncStats {
    pub calls: u64,
    pub failed: u64,
    /// Sum of requested bytes (allocations), lengths (mmap family) or freed sizes.
    pub bytes: u128,
    sized_calls: u64,
    sum: u128,
    sum_sq: f64,
    hist: Histogram<u64>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CycleSummary {
    pub total: u64,
    pub mean: f64,
    pub stddev: f64,
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
}

impl Default for FuncStats {
    fn default() -> Self {
        FuncStats {
            calls: 0,
            failed: 0,
            bytes: 0,
            sized_calls: 0,
            sum: 0,
            sum_sq: 0.0,
            // 2 significant digits: p50/p99 within 1 %, a few KiB per function.
            hist: Histogram::new(2).expect("valid precision"),
        }
    }
}

impl FuncStats {
    #[inline]
    pub fn add(&mut self, cycles: u64, size: Option<u64>, failed: bool) {
        self.calls += 1;
        self.failed += failed as u64;
        if let Some(s) = size {
            self.bytes += s as u128;
            self.sized_calls += 1;
        }
        self.sum += cycles as u128;
        self.sum_sq += (cycles as f64) * (cycles as f64);
        // record(), not saturating_record(): the histogram auto-resizes only
        // on record(); saturating_record() clamps to its initial range (a few
        // hundred), which made max/p99 wrong for any slower call.
        if self.hist.record(cycles).is_err() {
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

    pub fn cycles(&self) -> CycleSummary {
        let n = self.calls.max(1) as f64;
        let mean = self.sum as f64 / n;
        let var = (self.sum_sq / n - mean * mean).max(0.0);
        CycleSummary {
            total: self.sum.min(u64::MAX as u128) as u64,
            mean,
            stddev: var.sqrt(),
            p50: self.hist.value_at_quantile(0.5),
            p99: self.hist.value_at_quantile(0.99),
            max: self.hist.max(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_known_values() {
        let mut s = FuncStats::default();
        for c in 1..=100u64 {
            s.add(c, Some(10), false);
        }
        let c = s.cycles();
        assert_eq!(c.total, 5050);
        assert_eq!(c.mean, 50.5);
        assert!((c.stddev - 28.866).abs() < 0.01);
        assert_eq!(c.p50, 50);
        assert_eq!(c.p99, 99);
        assert_eq!(s.mean_size(), 10.0);
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
