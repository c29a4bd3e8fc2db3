//! 95 % intervals for sampled estimates: never below zero, honest with few
//! samples or none.
//!
//! A site's estimate is a weighted sum `y = Σ wᵢ` over its samples, each
//! sample standing for `wᵢ = 1/pᵢ` objects (or `sᵢ/pᵢ` bytes), with the
//! design's variance `v = Σ (1-pᵢ) wᵢ²`. With many samples `y ± 1.96√v` is
//! fine; with few it is not (the sum is skewed: an interval reaching below
//! zero, or `0 ± 0` for a site none of whose live blocks was sampled, which
//! never covers the truth). The gamma interval for weighted sums of rare
//! counts (Fay & Feuer, Statistics in Medicine 16, 1997) fixes both:
//!
//! - lower end: the 2.5 % quantile of a gamma distribution with mean `y` and
//!   variance `v` (0 when there is no sample);
//! - upper end: the 97.5 % quantile of a gamma with mean `y + w` and
//!   variance `v + w²`, where `w` is the weight one more sample would carry
//!   (the mean weight of the estimate's samples, or of the site's samples
//!   when this estimate has none).
//!
//! With no sample the interval is `[0, w · ln 40]`. For bytes of blocks much
//! smaller than the mean interval `I`, `w ≈ I` and this is exact: the
//! sampler misses all of `B` bytes with probability `exp(-B/I)`, so zero
//! samples are consistent with `B < I ln 40 ≈ 3.7 I` at the 97.5 % level (the
//! rule of three, two-sided). Calibrated by simulation (tests below) and by
//! real runs (`crates/mtlab/tests/sampler.rs`); figures in docs/metrics.md.

use statrs::distribution::{ContinuousCDF, Gamma, Normal};
use statrs::function::gamma::gamma_lr;

/// Two-sided 95 %: each end misses with probability 2.5 %.
const TAIL: f64 = 0.025;

/// Above this shape the quantile comes from the Wilson–Hilferty approximation,
/// not from statrs: its `inverse_cdf` searches the CDF, whose series takes
/// ~8√shape terms, and samples of blocks far larger than the interval are
/// nearly certain (`p = 1 − e^(−size/I)`), so their variance is tiny and the
/// shape `mean²/variance` huge: a 100 KiB block sampled at 4 KiB gives a shape
/// near 10¹⁰, and `mtlab report` on a linker's trace sampled at 4 KiB took 44 s,
/// all of it here. From this shape on the two agree to 1e-7 (test below).
const LARGE_SHAPE: f64 = 1e4;

/// The 95 % interval of an estimate `value` with design variance `variance`
/// made from `samples` samples; `next_weight` is the weight one more sample
/// would carry. Returns `(low, high)` with `0 ≤ low ≤ value ≤ high`.
pub fn gamma_interval(value: f64, variance: f64, samples: u64, next_weight: f64) -> (f64, f64) {
    let y = value.max(0.0);
    let v = variance.max(0.0);
    let w = if next_weight.is_finite() && next_weight > 0.0 { next_weight } else { 0.0 };
    let low = if samples == 0 || y == 0.0 {
        0.0
    } else if v == 0.0 {
        y // every sample was certain: nothing was missed
    } else {
        gamma_quantile(y, v, TAIL).min(y)
    };
    let high = if w == 0.0 && v == 0.0 { y } else { gamma_quantile(y + w, v + w * w, 1.0 - TAIL).max(y) };
    (low, high)
}

/// Above this many samples, being shown (at least one sample) says nothing
/// the count does not: `P(K ≥ 1)` is 1 − e^(−λ) with λ > 20 at the lower end.
const SHOWN_MAX_SAMPLES: u64 = 30;

/// The lower end of an interval for a row shown *because* it was sampled.
///
/// A profile lists the stacks with at least one sample; the gamma interval's
/// lower end is not conditioned on that, so on rows of few samples it lies
/// above the truth far more often than 2.5 %: an 8 192-byte block sampled
/// once at 512 KiB got [14 049, 2 935 402] B. Conditioned on `K ≥ 1`, one
/// sample is the least any shown row has and says nothing beyond what the
/// sample holds; `k` samples give the Poisson lower end `λc` with
/// `P(K ≥ k | K ≥ 1; λc) = 2.5 %` instead of `λu` with `P(K ≥ k; λu) = 2.5 %`.
/// The gamma lower end is scaled by `λc/λu` (1 for many samples), and never
/// falls below `seen`, what the samples themselves hold.
pub fn shown_low(low: f64, seen: f64, samples: u64) -> f64 {
    if samples == 0 || samples > SHOWN_MAX_SAMPLES {
        return low;
    }
    let k = samples as f64;
    let at_least_k = |l: f64| if l <= 0.0 { 0.0 } else { gamma_lr(k, l) };
    let shown = |l: f64| if l <= 0.0 { 0.0 } else { at_least_k(l) / -(-l).exp_m1() };
    let ratio = if samples == 1 { 0.0 } else { solve_increasing(&shown) / solve_increasing(&at_least_k) };
    (low * ratio).max(seen.min(low))
}

/// The λ where an increasing `f` (0 at 0, 1 at infinity) reaches TAIL, by bisection.
fn solve_increasing(f: &dyn Fn(f64) -> f64) -> f64 {
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    while f(hi) < TAIL {
        hi *= 2.0;
    }
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if f(mid) < TAIL {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// The `q` quantile of the gamma distribution with the given mean and variance.
fn gamma_quantile(mean: f64, variance: f64, q: f64) -> f64 {
    let shape = mean * mean / variance;
    let rate = mean / variance;
    if shape.is_finite() && shape > LARGE_SHAPE {
        return wilson_hilferty(mean, shape, q);
    }
    match Gamma::new(shape, rate) {
        Ok(g) => g.inverse_cdf(q),
        // Degenerate (zero variance or an overflowing shape): the mean itself.
        Err(_) => mean,
    }
}

/// The `q` quantile of a gamma with this mean and shape by Wilson and
/// Hilferty's cube-root normal approximation (relative error O(shape^-3/2)).
fn wilson_hilferty(mean: f64, shape: f64, q: f64) -> f64 {
    let z = Normal::standard().inverse_cdf(q);
    let c = 1.0 / (9.0 * shape);
    mean * (1.0 - c + z * c.sqrt()).powi(3)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::profile::sampled::sample_probability;

    #[test]
    fn no_sample_gives_the_rule_of_three() {
        let i = 512.0 * 1024.0;
        let (lo, hi) = gamma_interval(0.0, 0.0, 0, i);
        assert_eq!(lo, 0.0);
        // exp(-B/I) = 2.5 % at B = I ln 40.
        assert!((hi / (i * 40f64.ln()) - 1.0).abs() < 1e-6, "{hi}");
    }

    #[test]
    fn bounds_respect_zero_and_the_estimate() {
        // One sample of weight 1000 (p = 0.001): the normal interval would be 1000 ± 1959.
        let (lo, hi) = gamma_interval(1000.0, 0.999 * 1e6, 1, 1000.0);
        assert!(lo > 0.0 && lo < 1000.0 && hi > 3000.0, "{lo} {hi}");
        // Certain samples: exact below, one more sample's worth above.
        let (lo, hi) = gamma_interval(5.0, 0.0, 5, 1.0);
        assert_eq!(lo, 5.0);
        assert!(hi > 5.0 && hi < 12.0, "{hi}");
        // Many samples: close to the normal interval.
        let (y, v) = (1e6, 1e8);
        let (lo, hi) = gamma_interval(y, v, 10_000, 100.0);
        assert!((lo - (y - 1.96 * 1e4)).abs() < 0.01 * 1.96e4, "{lo}");
        assert!((hi - (y + 1.96 * 1e4)).abs() < 0.03 * 1.96e4, "{hi}");
    }

    #[test]
    fn large_shapes_take_the_cube_root_normal_approximation() {
        // Where it takes over, it agrees with statrs's search of the exact CDF.
        for shape in [LARGE_SHAPE / 2.0, LARGE_SHAPE, 2.0 * LARGE_SHAPE] {
            let mean = 123_456.0;
            let g = Gamma::new(shape, shape / mean).unwrap();
            for q in [TAIL, 1.0 - TAIL] {
                let (exact, approx) = (g.inverse_cdf(q), wilson_hilferty(mean, shape, q));
                assert!((approx / exact - 1.0).abs() < 1e-7, "shape {shape}, q {q}: statrs {exact}, Wilson-Hilferty {approx}");
            }
        }
        // A 100 KiB block sampled at a mean interval of 4 KiB: p = 1 - e^-25,
        // the variance (1 - p) w^2 = 0.15, the shape ~7e10. The interval is the
        // normal one (statrs took seconds for each end of it).
        let (size, interval): (f64, f64) = (100.0 * 1024.0, 4096.0);
        let p = -(-size / interval).exp_m1();
        let (y, v) = (size / p, (1.0 - p) * (size / p) * (size / p));
        let (lo, hi) = gamma_interval(y, v, 1, y);
        assert!(lo < y && y - lo < 1.97 * v.sqrt() && y - lo > 1.95 * v.sqrt(), "{y} {v} {lo}");
        // The upper end adds one more sample's weight (mean 2y, variance ~y^2):
        // shape 4, scale y/2, whose 97.5 % quantile is 8.7673 (chi-square, 8
        // degrees of freedom: 17.5345 / 2) times y/2, by statrs (a small shape).
        assert!((hi / y - 4.3836).abs() < 1e-3, "{hi} = {} y", hi / y);
    }

    /// Splitmix64: the tests' own reproducible stream in [0, 1) (also the
    /// estimator's calibration tests', in sampled.rs).
    pub(crate) struct Rng(pub(crate) u64);
    impl Rng {
        pub(crate) fn unit(&mut self) -> f64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// One site: `count` blocks of each size, sampled as the sampler does.
    /// Returns how often the 95 % intervals of bytes and objects covered the
    /// truth in `trials` runs.
    fn coverage(blocks: &[(u64, u64)], interval: u64, trials: usize, rng: &mut Rng) -> (f64, f64) {
        let truth_b: f64 = blocks.iter().map(|&(s, n)| (s * n) as f64).sum();
        let truth_o: f64 = blocks.iter().map(|&(_, n)| n as f64).sum();
        let (mut cb, mut co) = (0, 0);
        for _ in 0..trials {
            let (mut yb, mut vb, mut yo, mut vo, mut k) = (0.0, 0.0, 0.0, 0.0, 0u64);
            let (mut mb, mut mo) = (0.0f64, 0.0f64);
            for &(s, n) in blocks {
                let p = sample_probability(s, interval);
                for _ in 0..n {
                    if rng.unit() < p {
                        let (wb, wo) = (s as f64 / p, 1.0 / p);
                        yb += wb;
                        vb += (1.0 - p) * wb * wb;
                        yo += wo;
                        vo += (1.0 - p) * wo * wo;
                        k += 1;
                        mb = mb.max(wb);
                        mo = mo.max(wo);
                    }
                }
            }
            // No sample: the weights a sample of the site's smallest block would carry.
            let s0 = blocks.iter().map(|b| b.0).min().unwrap();
            let p0 = sample_probability(s0, interval);
            let (nb, no) = if k > 0 { (mb, mo) } else { (s0 as f64 / p0, 1.0 / p0) };
            let (lo, hi) = gamma_interval(yb, vb, k, nb);
            cb += (lo <= truth_b && truth_b <= hi) as usize;
            let (lo, hi) = gamma_interval(yo, vo, k, no);
            co += (lo <= truth_o && truth_o <= hi) as usize;
        }
        (cb as f64 / trials as f64, co as f64 / trials as f64)
    }

    #[test]
    fn intervals_cover_the_truth_in_every_regime() {
        let mut rng = Rng(42);
        let k = 1024;
        // (blocks, interval): from "almost never sampled" to "many samples",
        // one size and mixed sizes, blocks far smaller and larger than I.
        let cases: &[(&[(u64, u64)], u64)] = &[
            (&[(32, 100)], 512 * k),
            (&[(12 * k, 34)], 2048 * k),
            (&[(1000, 2000)], 512 * k),
            (&[(64, 20_000)], 64 * k),
            (&[(10_000, 500)], 64 * k),
            (&[(16, 5000), (256, 500), (4096, 50)], 512 * k),
            (&[(16, 5000), (256, 500), (4096, 50)], 64 * k),
            (&[(100_000, 50)], 64 * k),
            (&[(48, 300), (1 << 20, 3)], 512 * k),
        ];
        let trials = 4000;
        let mut report = String::new();
        for (blocks, interval) in cases {
            let (b, o) = coverage(blocks, *interval, trials, &mut rng);
            report += &format!("{blocks:?} at {interval}: bytes {:.1} %, objects {:.1} %\n", b * 100.0, o * 100.0);
            // Never below nominal by more than noise (sd 0.34 % at 4000 trials) —
            // but for objects at a site mixing block sizes, see below.
            let mixed = blocks.len() > 1;
            assert!(b >= 0.93 && (mixed || o >= 0.93), "{report}");
        }
        say!("{report}");
    }
}
