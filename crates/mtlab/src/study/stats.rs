//! Statistics for repetitions: the one place mtlab defines them.
//!
//! - Standard deviation is the **sample** standard deviation (divisor n − 1);
//!   a single value has σ = 0.
//! - Quantiles interpolate linearly between order statistics (Hyndman–Fan
//!   type 7, as R's and NumPy's defaults).
//! - The confidence interval of a median is distribution-free: the pair of
//!   order statistics the binomial(n, ½) distribution puts around it. With
//!   few repetitions the nominal level cannot always be reached (n = 5 gives
//!   at most 93.75 % from min and max): the interval then is the widest one,
//!   and its true level is reported, never rounded up.
//! - The ratio of two configurations measured in the same rounds (paired) is
//!   the median of the per-round ratios, with the same order-statistic
//!   interval when that reaches [`FINDING_LEVEL`] (5 rounds or more); with
//!   fewer (3 rounds give min..max, 75 %), a Student t interval of the log
//!   ratios at [`LEVEL`], its critical value computed for n − 1 degrees of
//!   freedom (it assumes roughly log-normal round ratios).
//! - Every interval carries its level and method, and is labelled with them
//!   (`Interval::label`): "75 %", "95 % t". A finding is stated only from an
//!   interval of at least [`FINDING_LEVEL`].
//! - The ratio of two independent samples (two runs, `mtlab diff`) is the
//!   Hodges–Lehmann estimate on the log scale: the median of all pairwise
//!   log(a_i / b_j), with the exact Mann–Whitney interval. It is
//!   distribution-free for a change of scale and works from 3 + 3 values up.
//! - Outliers: modified z-score (Iglewicz–Hoaglin) above 3.5, with the median
//!   absolute deviation scaled by 1.4826 (the mean absolute deviation × 1.2533
//!   when more than half the values are equal), and more than 1 % off the median.

use serde::Serialize;

/// The level confidence intervals aim at.
pub const LEVEL: f64 = 0.95;

/// The least level an interval needs before a view states a finding from it.
pub const FINDING_LEVEL: f64 = 0.90;

/// Sorted copy without NaNs.
fn sorted(values: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    v.sort_by(f64::total_cmp);
    v
}

pub fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.iter().sum::<f64>() / values.len() as f64
}

/// Sample standard deviation (n − 1); 0 for one value, NaN for none.
pub fn stddev(values: &[f64]) -> f64 {
    match values.len() {
        0 => f64::NAN,
        1 => 0.0,
        n => {
            let m = mean(values);
            (values.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1) as f64).sqrt()
        }
    }
}

/// Sample standard deviation (n − 1) from a count, a sum and a sum of
/// squares, for streams kept as running sums (per-function cycles).
pub fn stddev_from_sums(n: u64, sum: f64, sum_sq: f64) -> f64 {
    match n {
        0 => f64::NAN,
        1 => 0.0,
        n => ((sum_sq - sum * sum / n as f64) / (n - 1) as f64).max(0.0).sqrt(),
    }
}

/// Running mean and sample standard deviation (Welford), for streams too
/// long to keep. Gives the same figures as [`mean`] and [`stddev`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Welford {
    n: u64,
    mean: f64,
    m2: f64,
}

impl Welford {
    pub fn push(&mut self, x: f64) {
        self.n += 1;
        let d = x - self.mean;
        self.mean += d / self.n as f64;
        self.m2 += d * (x - self.mean);
    }
    pub fn count(&self) -> u64 {
        self.n
    }
    pub fn mean(&self) -> f64 {
        if self.n == 0 {
            f64::NAN
        } else {
            self.mean
        }
    }
    /// Sample standard deviation (n − 1), as [`stddev`].
    pub fn stddev(&self) -> f64 {
        match self.n {
            0 => f64::NAN,
            1 => 0.0,
            n => (self.m2 / (n - 1) as f64).sqrt(),
        }
    }
}

/// Quantile `p` in [0, 1] of sorted values (type 7).
fn quantile_sorted(v: &[f64], p: f64) -> f64 {
    match v.len() {
        0 => f64::NAN,
        1 => v[0],
        n => {
            let h = (n - 1) as f64 * p.clamp(0.0, 1.0);
            let lo = h.floor() as usize;
            let hi = (lo + 1).min(n - 1);
            v[lo] + (h - lo as f64) * (v[hi] - v[lo])
        }
    }
}

pub fn quantile(values: &[f64], p: f64) -> f64 {
    quantile_sorted(&sorted(values), p)
}

pub fn median(values: &[f64]) -> f64 {
    quantile(values, 0.5)
}

/// How an interval was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// Order statistics (binomial) or Mann–Whitney: distribution-free, level exact.
    OrderStatistics,
    /// Student t on the values (or their logs): level as computed for n − 1 degrees of freedom.
    StudentT,
}

/// A confidence interval and the level it truly has.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct Interval {
    pub low: f64,
    pub high: f64,
    /// The interval's coverage probability (≥ [`LEVEL`] when enough values).
    pub level: f64,
    pub method: Method,
}

impl Interval {
    pub fn contains(&self, x: f64) -> bool {
        self.low <= x && x <= self.high
    }

    /// Its level as a reader should see it: "75 %", "93.8 %", "95 % t".
    pub fn label(&self) -> String {
        let pct = self.level * 100.0;
        let num = if (pct - pct.round()).abs() < 0.05 { format!("{pct:.0}") } else { format!("{pct:.1}") };
        match self.method {
            Method::OrderStatistics => format!("{num} %"),
            Method::StudentT => format!("{num} % t"),
        }
    }

    /// Whether a finding may rest on it: level at least [`FINDING_LEVEL`].
    pub fn conclusive(&self) -> bool {
        self.level >= FINDING_LEVEL - 1e-12
    }
}

/// The distinct labels of some intervals, for a table's title ("75 %; 95 % t").
pub fn labels<'a>(intervals: impl IntoIterator<Item = &'a Interval>) -> String {
    let mut v: Vec<String> = intervals.into_iter().map(Interval::label).collect();
    v.sort();
    v.dedup();
    v.join("; ")
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, 9 terms: ~15 digits).
fn ln_gamma(x: f64) -> f64 {
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let t = x + 7.5;
    let a = C.iter().enumerate().skip(1).fold(C[0], |a, (i, c)| a + c / (x + i as f64));
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// The regularized incomplete beta function I_x(a, b) (continued fraction, Lentz).
fn inc_beta(x: f64, a: f64, b: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    // The fraction converges fast below (a + 1) / (a + b + 2); above, by symmetry.
    if x > (a + 1.0) / (a + b + 2.0) {
        return 1.0 - inc_beta(1.0 - x, b, a);
    }
    let front = (ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln()).exp() / a;
    let tiny = 1e-300;
    let (mut c, mut d) = (1.0, 1.0 - (a + b) * x / (a + 1.0));
    d = if d.abs() < tiny { tiny } else { d };
    d = 1.0 / d;
    let mut f = d;
    for m in 1..300 {
        let m = m as f64;
        for num in [m * (b - m) * x / ((a + 2.0 * m - 1.0) * (a + 2.0 * m)), -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1.0))] {
            d = 1.0 + num * d;
            d = if d.abs() < tiny { tiny } else { d };
            c = 1.0 + num / c;
            c = if c.abs() < tiny { tiny } else { c };
            d = 1.0 / d;
            f *= c * d;
        }
        if (c * d - 1.0).abs() < 1e-15 {
            break;
        }
    }
    front * f
}

/// P(T ≤ t) for Student's t with `df` degrees of freedom.
fn t_cdf(t: f64, df: f64) -> f64 {
    let tail = 0.5 * inc_beta(df / (df + t * t), df / 2.0, 0.5);
    if t >= 0.0 {
        1.0 - tail
    } else {
        tail
    }
}

/// The `p` quantile of Student's t with `df` degrees of freedom (p in (½, 1)).
pub fn t_quantile(p: f64, df: f64) -> f64 {
    let (mut lo, mut hi) = (0.0, 1.0);
    while t_cdf(hi, df) < p {
        hi *= 2.0;
    }
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if t_cdf(mid, df) < p {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// Student t interval of the mean of `values` at `level`; None below two values.
pub fn t_interval(values: &[f64], level: f64) -> Option<Interval> {
    let v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.len() < 2 {
        return None;
    }
    let n = v.len() as f64;
    let half = t_quantile(0.5 + level / 2.0, n - 1.0) * stddev(&v) / n.sqrt();
    let m = mean(&v);
    Some(Interval { low: m - half, high: m + half, level, method: Method::StudentT })
}

/// log of the binomial coefficient, exact enough for n up to thousands.
fn ln_choose(n: u64, k: u64) -> f64 {
    (1..=k).map(|i| ((n - k + i) as f64 / i as f64).ln()).sum()
}

/// P(X ≤ k) for X ~ binomial(n, ½).
fn binom_half_cdf(n: u64, k: u64) -> f64 {
    (0..=k.min(n)).map(|i| (ln_choose(n, i) - n as f64 * std::f64::consts::LN_2).exp()).sum()
}

/// Distribution-free interval for the median of `values` (order statistics).
pub fn median_interval(values: &[f64]) -> Option<Interval> {
    let v = sorted(values);
    let n = v.len() as u64;
    if n < 2 {
        return None;
    }
    // The interval [x_(k+1), x_(n−k)] covers the median with probability
    // 1 − 2·P(X ≤ k); take the largest k that still reaches LEVEL (k = 0 is
    // min..max, the widest there is).
    let mut k = 0;
    while k + 1 < n / 2 && 1.0 - 2.0 * binom_half_cdf(n, k + 1) >= LEVEL {
        k += 1;
    }
    let level = 1.0 - 2.0 * binom_half_cdf(n, k);
    Some(Interval { low: v[k as usize], high: v[(n - 1 - k) as usize], level, method: Method::OrderStatistics })
}

/// P(B ≤ k) for B ~ binomial(n, p).
fn binom_cdf(n: u64, p: f64, k: i64) -> f64 {
    if k < 0 {
        0.0
    } else if k as u64 >= n {
        1.0
    } else {
        inc_beta(1.0 - p, (n - k as u64) as f64, k as f64 + 1.0)
    }
}

/// Distribution-free interval for the `q` quantile of a population from a
/// random sample of `n` of its values: the 1-based ranks `(lo, hi)` of the
/// sample's order statistics that bound it, and the interval's level. Below
/// n·q·(1 − q) = 100 the ranks are widened from the normal approximation
/// until the exact binomial level reaches [`LEVEL`] (or widening adds no
/// coverage: the p99 of 38 values reaches 32 % at most), and that level is
/// returned; above, the normal approximation's ranks at
/// [`LEVEL`] (the binomial's fraction no longer converges in few steps, and
/// the approximation is then good to well under a percent). None below 2.
pub fn quantile_ranks(n: u64, q: f64) -> Option<(u64, u64, f64)> {
    if n < 2 || !(0.0..=1.0).contains(&q) {
        return None;
    }
    let z = 1.959_963_984_540_054;
    let (nf, sd) = (n as f64, (n as f64 * q * (1.0 - q)).sqrt());
    let mut lo = ((nf * q - z * sd).floor() as i64).clamp(1, n as i64);
    let mut hi = ((nf * q + z * sd).ceil() as i64 + 1).clamp(1, n as i64);
    if nf * q * (1.0 - q) >= 100.0 {
        return Some((lo as u64, hi as u64, LEVEL));
    }
    // [x_(lo), x_(hi)] covers the quantile when lo ≤ B < hi, B ~ binomial(n, q).
    let level = |lo: i64, hi: i64| binom_cdf(n, q, hi - 1) - binom_cdf(n, q, lo - 1);
    // Widen on the side that adds more coverage, until the level is reached
    // or neither side adds any (an extreme quantile of a small sample: its
    // level stays below LEVEL and is reported as it is).
    loop {
        let now = level(lo, hi);
        if now >= LEVEL {
            break;
        }
        let down = if lo > 1 { level(lo - 1, hi) - now } else { 0.0 };
        let up = if hi < n as i64 { level(lo, hi + 1) - now } else { 0.0 };
        if down.max(up) < 1e-9 {
            break;
        }
        if down >= up {
            lo -= 1;
        } else {
            hi += 1;
        }
    }
    Some((lo as u64, hi as u64, level(lo, hi).min(1.0)))
}

/// Summary of one measurement's repetitions.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub n: usize,
    pub median: f64,
    pub mean: f64,
    pub stddev: f64,
    pub min: f64,
    pub max: f64,
    pub q1: f64,
    pub q3: f64,
    /// Interval of the median; `None` below two values.
    pub median_ci: Option<Interval>,
    /// Indices of the repetitions flagged as outliers.
    pub outliers: Vec<usize>,
}

pub fn summarize(values: &[f64]) -> Summary {
    let v = sorted(values);
    Summary {
        n: v.len(),
        median: quantile_sorted(&v, 0.5),
        mean: mean(&v),
        stddev: stddev(&v),
        min: v.first().copied().unwrap_or(f64::NAN),
        max: v.last().copied().unwrap_or(f64::NAN),
        q1: quantile_sorted(&v, 0.25),
        q3: quantile_sorted(&v, 0.75),
        median_ci: median_interval(&v),
        outliers: outliers(values),
    }
}

/// Repetitions whose modified z-score exceeds 3.5 (Iglewicz–Hoaglin) and
/// that lie more than 1 % from the median. Needs 5 values.
pub fn outliers(values: &[f64]) -> Vec<usize> {
    if values.len() < 5 {
        return Vec::new();
    }
    let med = median(values);
    let dev: Vec<f64> = values.iter().map(|x| (x - med).abs()).collect();
    // With more than half the values equal the MAD is 0; the mean absolute
    // deviation (scaled by 1.2533 to match σ) takes over, as Iglewicz and Hoaglin suggest.
    let mad = median(&dev) * 1.4826;
    let scale = if mad > 0.0 { mad } else { mean(&dev) * 1.253314 };
    values
        .iter()
        .enumerate()
        // A deviation under 1 % of the median is no outlier however tight the
        // rest are (peak RSS, trace sizes: nearly constant metrics).
        .filter(|(_, x)| {
            let d = (*x - med).abs();
            scale > 0.0 && d / scale > 3.5 && d > 0.01 * med.abs()
        })
        .map(|(i, _)| i)
        .collect()
}

/// A ratio of two configurations with its interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Ratio {
    pub ratio: f64,
    pub interval: Option<Interval>,
}

/// Ratio of paired repetitions (same rounds): the median of a_i / b_i, with
/// the order-statistic interval when it reaches [`FINDING_LEVEL`], else a t
/// interval of the log ratios at [`LEVEL`] (too few rounds for the first).
pub fn paired_ratio(a: &[f64], b: &[f64]) -> Ratio {
    let r: Vec<f64> = a.iter().zip(b).filter(|(_, b)| **b != 0.0).map(|(a, b)| a / b).collect();
    let interval = match median_interval(&r) {
        Some(i) if i.conclusive() => Some(i),
        _ if r.iter().all(|x| *x > 0.0) => {
            let logs: Vec<f64> = r.iter().map(|x| x.ln()).collect();
            t_interval(&logs, LEVEL).map(|i| Interval { low: i.low.exp(), high: i.high.exp(), ..i })
        }
        other => other,
    };
    Ratio { ratio: median(&r), interval }
}

/// Number of (a_i, b_j) pairs with a_i < b_j counted by the Mann–Whitney
/// distribution: `counts[u]` = number of orderings giving U = u (no ties),
/// for sample sizes m and n. Exact, by the usual recursion.
fn mann_whitney_counts(m: usize, n: usize) -> Vec<f64> {
    // f[i][j][u]: built incrementally over (i, j) with a 2-D table of vectors.
    let max_u = m * n;
    let mut table: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); n + 1]; m + 1];
    for i in 0..=m {
        for j in 0..=n {
            let mut f = vec![0.0; i * j + 1];
            if i == 0 || j == 0 {
                f[0] = 1.0;
            } else {
                // The largest value is from sample a (adds j to U) or from b.
                for (u, x) in table[i - 1][j].iter().enumerate() {
                    f[u + j] += x;
                }
                for (u, x) in table[i][j - 1].iter().enumerate() {
                    f[u] += x;
                }
            }
            table[i][j] = f;
        }
    }
    let mut out = std::mem::take(&mut table[m][n]);
    out.resize(max_u + 1, 0.0);
    out
}

/// Largest k such that P(U < k) ≤ (1 − LEVEL) / 2, and the level that k gives;
/// exact up to 30 values a side, normal approximation beyond.
fn mann_whitney_k(m: usize, n: usize) -> (usize, f64) {
    let total = m * n;
    let alpha_half = (1.0 - LEVEL) / 2.0;
    if m <= 30 && n <= 30 {
        let counts = mann_whitney_counts(m, n);
        let all: f64 = counts.iter().sum();
        let mut cdf = 0.0; // P(U ≤ k − 1)
        let mut k = 0;
        while k < total / 2 {
            let next = cdf + counts[k] / all;
            if next > alpha_half {
                break;
            }
            cdf = next;
            k += 1;
        }
        (k, 1.0 - 2.0 * cdf)
    } else {
        let mu = total as f64 / 2.0;
        let sigma = ((m * n * (m + n + 1)) as f64 / 12.0).sqrt();
        let k = (mu - 1.959964 * sigma).floor().max(0.0) as usize;
        (k, LEVEL)
    }
}

/// Ratio of two independent samples: Hodges–Lehmann on logs with the
/// Mann–Whitney interval. Values must be positive; others are ignored.
pub fn independent_ratio(a: &[f64], b: &[f64]) -> Ratio {
    let la: Vec<f64> = a.iter().filter(|x| **x > 0.0).map(|x| x.ln()).collect();
    let lb: Vec<f64> = b.iter().filter(|x| **x > 0.0).map(|x| x.ln()).collect();
    if la.is_empty() || lb.is_empty() {
        return Ratio { ratio: f64::NAN, interval: None };
    }
    let mut d: Vec<f64> = la.iter().flat_map(|x| lb.iter().map(move |y| x - y)).collect();
    d.sort_by(f64::total_cmp);
    let ratio = quantile_sorted(&d, 0.5).exp();
    let (k, level) = mann_whitney_k(la.len(), lb.len());
    // k = 0 means even the extremes do not reach the level: no interval.
    let interval = (k > 0).then(|| Interval { low: d[k - 1].exp(), high: d[d.len() - k].exp(), level, method: Method::OrderStatistics });
    Ratio { ratio, interval }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Xorshift;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * (1.0 + b.abs())
    }

    #[test]
    fn sample_standard_deviation_and_welford_agree() {
        let v = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0];
        // Σ(x − 5)² = 32; 32 / 7.
        assert!(close(stddev(&v), (32.0f64 / 7.0).sqrt()));
        let mut w = Welford::default();
        v.iter().for_each(|x| w.push(*x));
        assert!(close(w.mean(), 5.0));
        assert!(close(w.stddev(), stddev(&v)));
        assert_eq!(stddev(&[3.0]), 0.0);
        let (sum, sq) = v.iter().fold((0.0, 0.0), |(s, q), x| (s + x, q + x * x));
        assert!(close(stddev_from_sums(v.len() as u64, sum, sq), stddev(&v)));
        assert!(stddev(&[]).is_nan());
    }

    #[test]
    fn quantiles_are_type_7() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert!(close(median(&v), 2.5));
        assert!(close(quantile(&v, 0.25), 1.75));
        assert!(close(quantile(&v, 0.0), 1.0));
        assert!(close(quantile(&v, 1.0), 4.0));
        assert!(close(median(&[5.0, 1.0, 3.0]), 3.0));
    }

    #[test]
    fn median_interval_levels_are_exact() {
        // n = 5: only min..max, 1 − 2/32 = 93.75 %.
        let i = median_interval(&[5.0, 1.0, 4.0, 2.0, 3.0]).unwrap();
        assert_eq!((i.low, i.high), (1.0, 5.0));
        assert!(close(i.level, 0.9375));
        // n = 6: min..max reaches 1 − 2/64 = 96.9 %.
        let i = median_interval(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        assert_eq!((i.low, i.high), (1.0, 6.0));
        assert!(close(i.level, 1.0 - 2.0 / 64.0));
        // n = 11: x(2)..x(10), 1 − 2·12/2048 = 98.8 %; x(3)..x(9) would be 93.5 %.
        let v: Vec<f64> = (1..=11).map(f64::from).collect();
        let i = median_interval(&v).unwrap();
        assert_eq!((i.low, i.high), (2.0, 10.0));
        assert!(close(i.level, 1.0 - 2.0 * 12.0 / 2048.0));
        assert!(median_interval(&[1.0]).is_none());
    }

    /// Uniform values in [0, 1) from a fixed seed (xorshift), for simulations.
    fn uniforms(seed: u64) -> impl FnMut() -> f64 {
        let mut rng = Xorshift::new(seed);
        move || (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    #[test]
    fn median_interval_covers_at_its_level_in_simulation() {
        // Exponential samples, true median ln 2; coverage over 4000 trials.
        let mut uniform = uniforms(0x1234_5678_9abc_def0);
        for n in [7usize, 11] {
            let (mut hit, trials) = (0, 4000);
            let mut level = 0.0;
            for _ in 0..trials {
                let v: Vec<f64> = (0..n).map(|_| -(1.0 - uniform()).ln()).collect();
                let i = median_interval(&v).unwrap();
                level = i.level;
                hit += i.contains(std::f64::consts::LN_2) as u32;
            }
            let cov = hit as f64 / trials as f64;
            assert!((cov - level).abs() < 0.02, "n={n}: coverage {cov} vs level {level}");
        }
    }

    #[test]
    fn quantile_ranks_cover_at_their_level() {
        // The median of 11: the same ranks as median_interval's (2 and 10).
        let (lo, hi, level) = quantile_ranks(11, 0.5).unwrap();
        assert_eq!((lo, hi), (2, 10));
        assert!(close(level, 1.0 - 2.0 * 12.0 / 2048.0), "{level}");
        // p99 of exponential samples: coverage in simulation close to the level.
        let mut uniform = uniforms(0x0bad_cafe_1234_5678);
        let truth = -(0.01f64).ln();
        for n in [500usize, 20_000] {
            let (mut hit, trials) = (0, 400);
            let (lo, hi, level) = quantile_ranks(n as u64, 0.99).unwrap();
            for _ in 0..trials {
                let mut v: Vec<f64> = (0..n).map(|_| -(1.0 - uniform()).ln()).collect();
                v.sort_by(f64::total_cmp);
                hit += (v[lo as usize - 1] <= truth && truth <= v[hi as usize - 1]) as u32;
            }
            let cov = hit as f64 / trials as f64;
            assert!(level >= LEVEL - 1e-9 && (cov - level).abs() < 0.04, "n={n}: coverage {cov} vs level {level}");
        }
        assert!(quantile_ranks(1, 0.5).is_none());
    }

    #[test]
    fn outliers_by_modified_z_score() {
        assert_eq!(outliers(&[10.0, 10.2, 9.9, 10.1, 30.0]), vec![4]);
        assert!(outliers(&[10.0, 10.2, 9.9, 10.1, 10.05]).is_empty());
        // Far in z-score but within 1 % of the median: not worth a note.
        assert!(outliers(&[1000.0, 1000.0, 1000.0, 1000.0, 1005.0]).is_empty());
        // Too few values to tell.
        assert!(outliers(&[1.0, 100.0]).is_empty());
        // Zero MAD: a value far from the rest is flagged.
        assert_eq!(outliers(&[5.0, 5.0, 5.0, 5.0, 9.0]), vec![4]);
    }

    #[test]
    fn paired_ratio_is_the_median_of_round_ratios() {
        let r = paired_ratio(&[25.0, 12.0, 30.0], &[20.0, 10.0, 20.0]);
        assert!(close(r.ratio, 1.25));
        let i = r.interval.unwrap();
        // Three rounds: a t interval of the logs, not min..max (75 %).
        assert_eq!(i.method, Method::StudentT);
        assert!(i.low < 1.2 && i.high > 1.5, "{i:?}");
    }

    #[test]
    fn t_quantiles_match_the_tables() {
        for (p, df, want) in [(0.975, 1.0, 12.706205), (0.975, 2.0, 4.302653), (0.975, 4.0, 2.776445), (0.95, 10.0, 1.812461), (0.975, 100.0, 1.983972)] {
            let t = t_quantile(p, df);
            assert!((t - want).abs() < 1e-5, "t({p}, {df}) = {t}, tables say {want}");
        }
    }

    #[test]
    fn three_rounds_give_a_labelled_t_interval_not_a_75_percent_min_max() {
        // Before: min..max of 3 ratios, 75 % (then shown as "95 %").
        let r = paired_ratio(&[1.10, 1.20, 1.15], &[1.0, 1.0, 1.0]);
        let i = r.interval.unwrap();
        assert_eq!(i.method, Method::StudentT);
        assert!(close(i.level, LEVEL));
        assert_eq!(i.label(), "95 % t");
        assert!(i.conclusive());
        // Wider than min..max, centred on the geometric mean of the ratios.
        assert!(i.low < 1.10 && i.high > 1.20, "{i:?}");
        let gm = ((1.10f64.ln() + 1.20f64.ln() + 1.15f64.ln()) / 3.0).exp();
        assert!(close(i.low * i.high, gm * gm));
        // Five rounds: the order-statistic interval, 93.75 %, labelled so.
        let r = paired_ratio(&[1.1, 1.2, 1.15, 1.3, 1.0], &[1.0; 5]);
        let i = r.interval.unwrap();
        assert_eq!((i.method, i.label()), (Method::OrderStatistics, "93.8 %".to_string()));
        let three = median_interval(&[1.0, 2.0, 3.0]).unwrap();
        assert_eq!(three.label(), "75 %");
        assert!(!three.conclusive());
        assert_eq!(labels([&three, &i, &three]), "75 %; 93.8 %");
    }

    #[test]
    fn t_intervals_cover_at_their_level_in_simulation() {
        // Normal samples (Box–Muller) of 3: coverage near 95 %.
        let mut rng = Xorshift::new(0x9e37_79b9_7f4a_7c15);
        let mut uniform = || ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        let (mut hit, trials) = (0, 4000);
        for _ in 0..trials {
            let v: Vec<f64> = (0..3).map(|_| (-2.0 * uniform().ln()).sqrt() * (2.0 * std::f64::consts::PI * uniform()).cos()).collect();
            hit += t_interval(&v, LEVEL).unwrap().contains(0.0) as u32;
        }
        let cov = hit as f64 / trials as f64;
        assert!((cov - LEVEL).abs() < 0.02, "coverage {cov}");
    }

    #[test]
    fn mann_whitney_distribution_is_exact() {
        // m = n = 2: U ∈ {0,1,2,2,3,4} over 6 orderings.
        assert_eq!(mann_whitney_counts(2, 2), vec![1.0, 1.0, 2.0, 1.0, 1.0]);
        // m = n = 5: 252 orderings; P(U ≤ 2) = 4/252 ≤ 2.5 % < P(U ≤ 3) = 7/252: k = 3.
        let c = mann_whitney_counts(5, 5);
        assert_eq!(c.iter().sum::<f64>(), 252.0);
        let (k, level) = mann_whitney_k(5, 5);
        assert_eq!(k, 3);
        assert!(close(level, 1.0 - 2.0 * 4.0 / 252.0));
    }

    #[test]
    fn independent_ratio_finds_a_planted_change_and_no_change() {
        let a = [100.0, 101.0, 99.0, 100.5, 99.5];
        let slow: Vec<f64> = a.iter().map(|x| x * 1.2).collect();
        let r = independent_ratio(&slow, &a);
        assert!((r.ratio - 1.2).abs() < 0.01, "{r:?}");
        assert!(r.interval.unwrap().low > 1.1);
        let same = [100.2, 99.8, 100.9, 99.1, 100.0];
        let r = independent_ratio(&same, &a);
        assert!(r.interval.unwrap().contains(1.0), "{r:?}");
        // Two values a side cannot reach 95 %: no interval.
        assert!(independent_ratio(&[1.0, 2.0], &[1.0, 2.0]).interval.is_none());
    }
}
