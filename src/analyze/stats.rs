//! Pure statistics over a run's per-write findings: the spread of repeated writes of one size
//! (median, min, max and a distribution-free 95% interval for the median), and the size model (a
//! least-squares line of delay against value size). No I/O: unit-tested on synthetic data.
//!
//! # The interval for the median
//! With `n` repeats the interval is `[x(k), x(n-k+1)]` of the sorted values, with `k` the
//! largest rank whose coverage `P(k <= B <= n-k)`, `B ~ Binomial(n, 1/2)`, is at least 95%
//! (the sign-test, or order-statistic, interval). It assumes only independent repeats of one
//! continuous distribution, not normality, which suits latencies with long tails. Its coverage
//! comes in steps: it is reported (`ci_coverage`) beside the bounds. With `n = 5` no interval
//! reaches 95%: the widest, `[min, max]`, covers 93.75%, and that is what is given (and said).
//! Below 5 repeats there is no interval.

use serde::{Deserialize, Serialize};

use crate::analyze::findings::WriteSummary;
use crate::record::WriteOp;

/// Nominal level of the interval for the median.
pub const CI_LEVEL: f64 = 0.95;
/// Fewest repeats for which an interval is given.
pub const CI_MIN_N: usize = 5;

/// Median, extremes and the interval for the median of a set of repeats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// Number of values.
    pub n: usize,
    /// Median (mean of the two middle values for an even count).
    pub median: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Lower bound of the order-statistic interval for the median (empty below 5 values).
    pub ci95_low: Option<f64>,
    /// Upper bound of the same.
    pub ci95_high: Option<f64>,
    /// The interval's exact coverage, e.g. 0.9375 for 5 values, 0.9688 for 6.
    pub ci_coverage: Option<f64>,
}

/// The spread of `values` (order irrelevant); `None` when empty or when a value is not finite.
pub fn spread(values: &[f64]) -> Option<Spread> {
    if values.is_empty() || values.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let median = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    };
    let ci = median_interval_ranks(n).map(|(k, coverage)| (sorted[k - 1], sorted[n - k], coverage));
    Some(Spread {
        n,
        median,
        min: sorted[0],
        max: sorted[n - 1],
        ci95_low: ci.map(|c| c.0),
        ci95_high: ci.map(|c| c.1),
        ci_coverage: ci.map(|c| c.2),
    })
}

/// The 1-based lower rank `k` of the order-statistic interval `[x(k), x(n-k+1)]` for the median
/// and its coverage: the largest `k` with coverage >= 95%, or `k = 1` (the range) when even that
/// falls short (n = 5). `None` below [`CI_MIN_N`].
pub fn median_interval_ranks(n: usize) -> Option<(usize, f64)> {
    if n < CI_MIN_N {
        return None;
    }
    // Coverage of rank k is 1 - 2 P(B <= k - 1), B ~ Binomial(n, 1/2). The binomial terms are
    // built in log space so that a large n does not underflow.
    let ln2n = n as f64 * std::f64::consts::LN_2;
    let mut ln_choose = 0.0_f64; // ln C(n, k - 1)
    let mut cdf = 0.0_f64; // P(B <= k - 1)
    let mut best = None;
    for k in 1..=n / 2 {
        let i = k - 1;
        cdf += (ln_choose - ln2n).exp();
        let coverage = 1.0 - 2.0 * cdf;
        if coverage < CI_LEVEL {
            break;
        }
        best = Some((k, coverage));
        ln_choose += ((n - i) as f64).ln() - ((i + 1) as f64).ln();
    }
    Some(best.unwrap_or((1, 1.0 - 2.0 * (-ln2n).exp())))
}

/// A least-squares line `y = slope * x + intercept`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LinearFit {
    /// Points fitted.
    pub n: usize,
    /// Slope, y units per x unit.
    pub slope: f64,
    /// Value at x = 0.
    pub intercept: f64,
    /// Coefficient of determination, 1 - SS_res / SS_tot; empty when every y is the same.
    pub r2: Option<f64>,
}

/// Ordinary least squares of `y` on `x`. `None` with fewer than two distinct x values.
pub fn linear_fit(points: &[(f64, f64)]) -> Option<LinearFit> {
    let n = points.len();
    if n < 2 || points.iter().any(|(x, y)| !x.is_finite() || !y.is_finite()) {
        return None;
    }
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n as f64;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n as f64;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    if sxx <= f64::EPSILON * mean_x.abs().max(1.0) {
        return None;
    }
    let slope = sxy / sxx;
    let intercept = mean_y - slope * mean_x;
    let ss_tot: f64 = points.iter().map(|p| (p.1 - mean_y).powi(2)).sum();
    let ss_res: f64 = points
        .iter()
        .map(|p| (p.1 - (slope * p.0 + intercept)).powi(2))
        .sum();
    let r2 = (ss_tot > 0.0).then(|| 1.0 - ss_res / ss_tot);
    Some(LinearFit {
        n,
        slope,
        intercept,
        r2,
    })
}

/// The spread of repeated writes of one operation and size (`by_size` in run.json).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SizeSpread {
    /// `set`, `overwrite`, `delete` or `inject`.
    pub op: WriteOp,
    /// Value size, bytes.
    pub size_bytes: u64,
    /// Successful writes of this op and size.
    pub writes: usize,
    /// Spread of their `set_ms`.
    pub set_ms: Spread,
    /// Spread of their `hol_delay_ms` (over the writes some probe overlapped; empty if none).
    pub hol_delay_ms: Option<Spread>,
    /// A collection's elements (its size as the tables show it; none for a string).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elements: Option<u64>,
}

/// Groups the successful writes by op and size (in first-seen order) and gives each group's
/// spread.
pub fn by_size(writes: &[WriteSummary]) -> Vec<SizeSpread> {
    let mut groups: Vec<((WriteOp, u64), Vec<&WriteSummary>)> = Vec::new();
    for write in writes.iter().filter(|w| w.ok) {
        let key = (write.op, write.size_bytes);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push(write),
            None => groups.push((key, vec![write])),
        }
    }
    groups
        .into_iter()
        .filter_map(|((op, size_bytes), members)| {
            let set: Vec<f64> = members.iter().map(|w| w.set_ms).collect();
            let hol: Vec<f64> = members.iter().filter_map(|w| w.hol_delay_ms).collect();
            Some(SizeSpread {
                op,
                size_bytes,
                writes: members.len(),
                set_ms: spread(&set)?,
                hol_delay_ms: spread(&hol),
                elements: members
                    .first()
                    .filter(|w| w.value_type.as_deref().is_some_and(|t| t != "string"))
                    .and_then(|w| w.elements),
            })
        })
        .collect()
}

/// The size model of a sweep (`size_model` in run.json): least-squares lines of the head-of-line
/// delay and of the writer's own time against the value size in MiB, over the successful `set`
/// writes (fresh keys).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SizeModel {
    /// Head-of-line delay per MiB of value, ms.
    pub hol_ms_per_mib: f64,
    /// Head-of-line delay at size 0, ms.
    pub hol_intercept_ms: f64,
    /// R² of the delay line (empty when every delay was the same).
    pub hol_r2: Option<f64>,
    /// The writer's own time per MiB, ms.
    pub set_ms_per_mib: f64,
    /// The writer's own time at size 0, ms.
    pub set_intercept_ms: f64,
    /// R² of that line.
    pub set_r2: Option<f64>,
    /// Writes fitted (for the delay line: those some probe overlapped).
    pub writes: usize,
    /// Smallest size fitted, bytes.
    pub min_size_bytes: u64,
    /// Largest size fitted, bytes.
    pub max_size_bytes: u64,
}

/// Fewest distinct sizes a line of the size model is fitted from. A line through two sizes
/// passes through both means exactly, so its R² is 1 whatever the data and its slope is only
/// the difference of two (noisy) medians: a third size is the first that can show the line is
/// wrong.
pub const SIZE_MODEL_MIN_SIZES: usize = 3;

/// Distinct sizes among the successful `set` writes: what the size model is fitted over.
pub fn set_sizes(writes: &[WriteSummary]) -> usize {
    let mut sizes: Vec<u64> = writes
        .iter()
        .filter(|w| w.ok && w.op == WriteOp::Set)
        .map(|w| w.size_bytes)
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes.len()
}

/// Fits the size model; `None` unless both lines have points at [`SIZE_MODEL_MIN_SIZES`]
/// distinct sizes or more (the delay line counts only the writes some probe overlapped).
pub fn size_model(writes: &[WriteSummary]) -> Option<SizeModel> {
    let sets: Vec<&WriteSummary> = writes
        .iter()
        .filter(|w| w.ok && w.op == WriteOp::Set)
        .collect();
    let mib = |w: &WriteSummary| w.size_bytes as f64 / (1024.0 * 1024.0);
    let enough = |points: &[(f64, f64)]| {
        let mut xs: Vec<f64> = points.iter().map(|p| p.0).collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        xs.len() >= SIZE_MODEL_MIN_SIZES
    };
    let set_points: Vec<(f64, f64)> = sets.iter().map(|w| (mib(w), w.set_ms)).collect();
    let hol_points: Vec<(f64, f64)> = sets
        .iter()
        .filter_map(|w| Some((mib(w), w.hol_delay_ms?)))
        .collect();
    if !enough(&set_points) || !enough(&hol_points) {
        return None;
    }
    let set_fit = linear_fit(&set_points)?;
    let hol_fit = linear_fit(&hol_points)?;
    Some(SizeModel {
        hol_ms_per_mib: hol_fit.slope,
        hol_intercept_ms: hol_fit.intercept,
        hol_r2: hol_fit.r2,
        set_ms_per_mib: set_fit.slope,
        set_intercept_ms: set_fit.intercept,
        set_r2: set_fit.r2,
        writes: sets.len(),
        min_size_bytes: sets.iter().map(|w| w.size_bytes).min().unwrap_or(0),
        max_size_bytes: sets.iter().map(|w| w.size_bytes).max().unwrap_or(0),
    })
}

/// A prediction of the size model for one size.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Prediction {
    /// The size asked about, bytes.
    pub size_bytes: u64,
    /// Predicted head-of-line delay, ms (the line's value, never below 0).
    pub hol_delay_ms: f64,
    /// Predicted writer's time, ms (never below 0).
    pub set_ms: f64,
    /// True when the size lies outside the measured range: the line is extended past its data.
    pub extrapolated: bool,
}

impl SizeModel {
    /// The line's values at `size_bytes`.
    pub fn predict(&self, size_bytes: u64) -> Prediction {
        let mib = size_bytes as f64 / (1024.0 * 1024.0);
        Prediction {
            size_bytes,
            hol_delay_ms: (self.hol_ms_per_mib * mib + self.hol_intercept_ms).max(0.0),
            set_ms: (self.set_ms_per_mib * mib + self.set_intercept_ms).max(0.0),
            extrapolated: size_bytes < self.min_size_bytes || size_bytes > self.max_size_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(op: WriteOp, size_bytes: u64, set_ms: f64, hol: Option<f64>) -> WriteSummary {
        WriteSummary::seen_once(1, op, size_bytes, set_ms, hol)
    }

    #[test]
    fn spread_of_odd_and_even_counts() {
        let s = spread(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.n, s.median, s.min, s.max), (3, 2.0, 1.0, 3.0));
        assert_eq!(s.ci95_low, None);
        let s = spread(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(s.median, 2.5);
        assert!(spread(&[]).is_none());
        assert!(spread(&[1.0, f64::NAN]).is_none());
    }

    #[test]
    fn median_interval_ranks_match_binomial_tables() {
        // Known sign-test intervals: n=5 range only (93.75%), n=6 range (96.88%), n=8 k=1
        // (99.2%) since k=2 gives 93.0%; n=9 k=2 (96.1%); n=20 k=6 (95.86%).
        let (k, c) = median_interval_ranks(5).unwrap();
        assert_eq!(k, 1);
        assert!((c - 0.9375).abs() < 1e-12);
        let (k, c) = median_interval_ranks(6).unwrap();
        assert_eq!(k, 1);
        assert!((c - 0.96875).abs() < 1e-12);
        assert_eq!(median_interval_ranks(8).unwrap().0, 1);
        let (k, c) = median_interval_ranks(9).unwrap();
        assert_eq!(k, 2);
        assert!((c - 0.9609375).abs() < 1e-12);
        let (k, c) = median_interval_ranks(20).unwrap();
        assert_eq!(k, 6);
        assert!((c - 0.958610534667968).abs() < 1e-9, "{c}");
        assert!(median_interval_ranks(4).is_none());
        // Large n: no underflow, the interval narrows to about n/2 -+ 0.98 sqrt(n).
        let (k, c) = median_interval_ranks(10_000).unwrap();
        assert!((0.95..0.96).contains(&c), "{c}");
        assert!((4_890..=4_910).contains(&k), "{k}");
    }

    #[test]
    fn spread_interval_uses_the_order_statistics() {
        let values: Vec<f64> = (1..=9).map(f64::from).collect();
        let s = spread(&values).unwrap();
        assert_eq!(s.median, 5.0);
        assert_eq!((s.ci95_low, s.ci95_high), (Some(2.0), Some(8.0)));
        let five = spread(&[5.0, 1.0, 4.0, 2.0, 3.0]).unwrap();
        assert_eq!((five.ci95_low, five.ci95_high), (Some(1.0), Some(5.0)));
        assert_eq!(five.ci_coverage, Some(0.9375));
    }

    #[test]
    fn fit_recovers_a_known_line() {
        // y = 0.07 x + 1.5, exactly.
        let points: Vec<(f64, f64)> = [1.0, 64.0, 128.0, 512.0]
            .iter()
            .map(|&x| (x, 0.07 * x + 1.5))
            .collect();
        let fit = linear_fit(&points).unwrap();
        assert!((fit.slope - 0.07).abs() < 1e-12);
        assert!((fit.intercept - 1.5).abs() < 1e-9);
        assert!((fit.r2.unwrap() - 1.0).abs() < 1e-12);
        assert!(linear_fit(&[(1.0, 2.0), (1.0, 3.0)]).is_none());
        assert!(linear_fit(&[(1.0, 2.0)]).is_none());
        // Flat data: slope 0, R² undefined.
        let flat = linear_fit(&[(1.0, 2.0), (2.0, 2.0)]).unwrap();
        assert_eq!(flat.slope, 0.0);
        assert_eq!(flat.r2, None);
    }

    #[test]
    fn fit_on_noisy_data_keeps_the_slope_and_reports_r2() {
        // y = 2 x + 10 with deterministic noise of +-3 that sums to zero per pair of sizes.
        let mut points = Vec::new();
        for x in [8.0, 16.0, 32.0, 64.0] {
            points.push((x, 2.0 * x + 10.0 + 3.0));
            points.push((x, 2.0 * x + 10.0 - 3.0));
        }
        let fit = linear_fit(&points).unwrap();
        assert!((fit.slope - 2.0).abs() < 1e-9, "{}", fit.slope);
        assert!((fit.intercept - 10.0).abs() < 1e-9);
        let r2 = fit.r2.unwrap();
        // SS_res = 8 * 9 = 72; SS_tot = 4 * sum((2x - 2*mean)^2)*2/4... just bound it.
        assert!(r2 > 0.99 && r2 < 1.0, "{r2}");
    }

    #[test]
    fn size_model_fits_set_writes_only() {
        let mib = 1u64 << 20;
        let mut writes = Vec::new();
        for size in [1, 16, 64, 128] {
            let x = size as f64;
            writes.push(summary(
                WriteOp::Set,
                size * mib,
                1.1 * x + 0.4,
                Some(0.08 * x + 0.2),
            ));
            // Deletions follow another law and must not pull the line.
            writes.push(summary(WriteOp::Delete, size * mib, 50.0, Some(40.0)));
        }
        let mut failed = summary(WriteOp::Set, 256 * mib, 1.0, Some(1.0));
        failed.ok = false;
        writes.push(failed);
        let model = size_model(&writes).unwrap();
        assert!((model.hol_ms_per_mib - 0.08).abs() < 1e-9);
        assert!((model.hol_intercept_ms - 0.2).abs() < 1e-9);
        assert!((model.set_ms_per_mib - 1.1).abs() < 1e-9);
        assert!((model.set_intercept_ms - 0.4).abs() < 1e-9);
        assert!((model.hol_r2.unwrap() - 1.0).abs() < 1e-9);
        assert_eq!(model.writes, 4);
        assert_eq!(model.max_size_bytes, 128 * mib);
        let p = model.predict(1 << 30);
        assert!((p.hol_delay_ms - (0.08 * 1024.0 + 0.2)).abs() < 1e-9);
        assert!(p.extrapolated);
        assert!(!model.predict(32 * mib).extrapolated);
        // One size only: no model.
        assert!(size_model(&writes[..1]).is_none());
    }

    #[test]
    fn size_model_needs_three_sizes_on_each_line() {
        let mib = 1u64 << 20;
        let set = |size: u64, hol: Option<f64>| summary(WriteOp::Set, size * mib, size as f64, hol);
        // Two sizes, many repeats: a line through two means fits exactly and tells nothing.
        let two: Vec<WriteSummary> = [16, 16, 16, 64, 64, 64]
            .into_iter()
            .map(|s| set(s, Some(8.0)))
            .collect();
        assert!(size_model(&two).is_none());
        assert_eq!(set_sizes(&two), 2);
        // Three sizes, but only two of them with a delay: the delay line has two sizes.
        let mut three = two.clone();
        three.push(set(128, None));
        assert_eq!(set_sizes(&three), 3);
        assert!(size_model(&three).is_none());
        three.push(set(128, Some(9.0)));
        let model = size_model(&three).unwrap();
        assert_eq!(model.writes, 8);
        assert_eq!(SIZE_MODEL_MIN_SIZES, 3);
    }

    #[test]
    fn by_size_groups_op_and_size_in_order() {
        let mib = 1u64 << 20;
        let mut writes = Vec::new();
        for (i, ms) in [10.0, 12.0, 11.0, 30.0, 9.0].into_iter().enumerate() {
            writes.push(summary(WriteOp::Set, 64 * mib, ms, Some(ms / 10.0)));
            writes.push(summary(WriteOp::Delete, 64 * mib, 5.0, None));
            if i < 2 {
                writes.push(summary(WriteOp::Set, mib, 1.0, Some(0.1)));
            }
        }
        let groups = by_size(&writes);
        assert_eq!(groups.len(), 3);
        assert_eq!(
            (groups[0].op, groups[0].size_bytes),
            (WriteOp::Set, 64 * mib)
        );
        assert_eq!(groups[0].writes, 5);
        assert_eq!(groups[0].set_ms.median, 11.0);
        assert_eq!(groups[0].set_ms.max, 30.0);
        assert_eq!(groups[0].set_ms.ci95_low, Some(9.0));
        assert!((groups[0].hol_delay_ms.as_ref().unwrap().median - 1.1).abs() < 1e-12);
        assert_eq!(groups[1].op, WriteOp::Delete);
        assert!(groups[1].hol_delay_ms.is_none());
        assert_eq!(groups[2].writes, 2);
        assert!(groups[2].set_ms.ci95_low.is_none());
    }
}
