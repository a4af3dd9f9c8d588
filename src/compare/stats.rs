//! Small-sample statistics for comparing two sets of repeats: the median and range of each, and
//! the Mann-Whitney U test (exact for small samples, normal approximation beyond).
//!
//! Why Mann-Whitney: latency samples are skewed with a heavy right tail (one host hiccup can
//! triple a value), so a test on means (t-test) is dragged by the one outlier, and a bootstrap
//! over 5 values has only 126 distinct resamples and intervals that are too narrow. The rank test
//! makes no assumption on the shape, is exact at 5 vs 5 (all 252 ways to split ten values), and
//! asks the question a regression check asks: does the candidate tend to give larger values than
//! the baseline?

use serde::Serialize;

/// Median, range and count of one sample.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    /// Values in the sample.
    pub n: usize,
    /// Median (mean of the middle two when `n` is even).
    pub median: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Values at or below this were only known to be at most this (head-of-line delay under
    /// one probe interval: a write no probe overlapped, or a probe delay finer than the probes
    /// resolve), and were set to it: a median or bound equal to it reads "under" it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub censored_at_ms: Option<f64>,
}

impl Spread {
    /// The spread of `values`; `None` when there are none (or one is not finite). The same
    /// median, min and max as the run's own per-size table ([`crate::analyze::stats::spread`]).
    pub fn of(values: &[f64]) -> Option<Spread> {
        crate::analyze::stats::spread(values).map(|s| Spread {
            n: s.n,
            median: s.median,
            min: s.min,
            max: s.max,
            censored_at_ms: None,
        })
    }

    /// The spread of values censored at `at` (see [`censor`]).
    pub fn of_censored(values: &[f64], at: f64) -> Option<Spread> {
        Spread::of(values).map(|s| Spread {
            censored_at_ms: Some(at),
            ..s
        })
    }
}

/// Values known only down to `at`: each value below it, and each missing one, becomes `at`
/// (a left-censored sample with one detection limit, whose censored values are ties at the
/// bottom for a rank method: Helsel, *Statistics for Censored Environmental Data*, 2nd ed.,
/// 2012, ch. 9). For head-of-line delay `at` is one aggregate probe interval: a write no probe
/// overlapped had no probe inside its window, so it held the server for less than that, and a
/// probe delay below it is finer than the probes resolve.
pub fn censor(values: &[Option<f64>], at: f64) -> Vec<f64> {
    values.iter().map(|v| v.unwrap_or(at).max(at)).collect()
}

/// The outcome of a Mann-Whitney U test of a candidate sample against a baseline sample.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MannWhitney {
    /// Pairs (baseline, candidate) in which the candidate is larger, ties counted one half:
    /// from 0 (every candidate value smaller) to `n_baseline * n_candidate`.
    pub u_candidate_larger: f64,
    /// One-sided p-value for "the candidate tends to be larger" (slower).
    pub p_larger: f64,
    /// One-sided p-value for "the candidate tends to be smaller" (faster).
    pub p_smaller: f64,
    /// True when the p-values come from the exact permutation distribution, false when from
    /// the normal approximation (large samples).
    pub exact: bool,
}

/// Largest combined sample for which the exact distribution is computed (beyond it the normal
/// approximation with tie correction is within a few 0.1 % of it).
pub const EXACT_MAX_TOTAL: usize = 100;

/// Mann-Whitney U test of `candidate` against `baseline`. `None` when either sample is empty
/// or holds a value that is not finite.
///
/// The exact p-values count, among all ways to split the pooled values into groups of the
/// two sizes, those whose rank sum is at least (or at most) as extreme as observed; ties get
/// their mid-rank, so the test stays exact with ties.
pub fn mann_whitney(baseline: &[f64], candidate: &[f64]) -> Option<MannWhitney> {
    let (n1, n2) = (baseline.len(), candidate.len());
    if n1 == 0 || n2 == 0 || baseline.iter().chain(candidate).any(|v| !v.is_finite()) {
        return None;
    }
    let n = n1 + n2;
    // Pool, sort, give mid-ranks; ranks are doubled so mid-ranks stay integers.
    let mut pooled: Vec<(f64, bool)> = baseline
        .iter()
        .map(|&v| (v, false))
        .chain(candidate.iter().map(|&v| (v, true)))
        .collect();
    pooled.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut doubled_ranks = vec![0usize; n];
    let mut tie_sizes = Vec::new();
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && pooled[j + 1].0 == pooled[i].0 {
            j += 1;
        }
        // Ranks i+1 ..= j+1 share their mean; doubled: (i+1)+(j+1).
        for rank in &mut doubled_ranks[i..=j] {
            *rank = i + j + 2;
        }
        tie_sizes.push(j - i + 1);
        i = j + 1;
    }
    let observed: usize = pooled
        .iter()
        .zip(&doubled_ranks)
        .filter(|((_, is_candidate), _)| *is_candidate)
        .map(|(_, &rank)| rank)
        .sum();
    // U counts pairs with the candidate larger: rank sum minus its least value n2(n2+1)/2.
    let u = observed as f64 / 2.0 - (n2 * (n2 + 1)) as f64 / 2.0;

    if n <= EXACT_MAX_TOTAL {
        let (at_least, at_most) = exact_tails(&doubled_ranks, n2, observed);
        return Some(MannWhitney {
            u_candidate_larger: u,
            p_larger: at_least,
            p_smaller: at_most,
            exact: true,
        });
    }
    let (n1f, n2f, nf) = (n1 as f64, n2 as f64, n as f64);
    let mean = n1f * n2f / 2.0;
    let ties: f64 = tie_sizes
        .iter()
        .map(|&t| {
            let t = t as f64;
            t * t * t - t
        })
        .sum();
    let variance = n1f * n2f / 12.0 * ((nf + 1.0) - ties / (nf * (nf - 1.0)));
    if variance <= 0.0 {
        // Every value equal: no evidence either way.
        return Some(MannWhitney {
            u_candidate_larger: u,
            p_larger: 1.0,
            p_smaller: 1.0,
            exact: false,
        });
    }
    let sd = variance.sqrt();
    Some(MannWhitney {
        u_candidate_larger: u,
        p_larger: normal_upper_tail((u - mean - 0.5) / sd),
        p_smaller: normal_upper_tail((mean - u - 0.5) / sd),
        exact: false,
    })
}

/// P(rank sum ≥ observed) and P(rank sum ≤ observed) over all subsets of `k` of the pooled
/// values, by counting subsets per rank sum (dynamic programming over the doubled ranks).
fn exact_tails(doubled_ranks: &[usize], k: usize, observed: usize) -> (f64, f64) {
    let max_sum: usize = doubled_ranks.iter().sum();
    // ways[j][s]: subsets of j of the values seen so far whose doubled ranks sum to s. Counts
    // reach C(100, 50) ≈ 1e29 at the largest size: f64 keeps their ratios to 1e-15.
    let mut ways = vec![vec![0.0_f64; max_sum + 1]; k + 1];
    ways[0][0] = 1.0;
    for (seen, &rank) in doubled_ranks.iter().enumerate() {
        for j in (1..=k.min(seen + 1)).rev() {
            let (lower, upper) = ways.split_at_mut(j);
            let from = &lower[j - 1];
            let to = &mut upper[0];
            for s in (rank..=max_sum).rev() {
                to[s] += from[s - rank];
            }
        }
    }
    let dist = &ways[k];
    let total: f64 = dist.iter().sum();
    let at_least: f64 = dist[observed.min(max_sum)..].iter().sum();
    let at_most: f64 = dist[..=observed.min(max_sum)].iter().sum();
    ((at_least / total).min(1.0), (at_most / total).min(1.0))
}

/// The smallest one-sided p-value the exact test can give with these sample sizes: one split in
/// C(n1 + n2, n1). With 5 vs 5 it is 1/252 ≈ 0.004, so a significance level below that can
/// never be reached however large the slowdown.
pub fn smallest_one_sided_p(n_baseline: usize, n_candidate: usize) -> f64 {
    let (n, k) = (n_baseline + n_candidate, n_baseline.min(n_candidate));
    let mut splits = 1.0_f64;
    for i in 0..k {
        splits = splits * (n - i) as f64 / (i + 1) as f64;
    }
    1.0 / splits
}

/// Most repeats per run the compare ever suggests; past it, more repeats are not the answer.
pub const MAX_REPEATS_SUGGESTED: usize = 1000;

/// The fewest repeats per run (the same number in both runs) with which the exact test can
/// reach `alpha` at all: 5 for 0.01 (1/252), 3 for 0.05 (1/20), 2 for 0.2 (1/6).
pub fn repeats_to_reach(alpha: f64) -> usize {
    (1..=MAX_REPEATS_SUGGESTED)
        .find(|&n| smallest_one_sided_p(n, n) <= alpha)
        .unwrap_or(MAX_REPEATS_SUGGESTED)
}

/// Repeats per run with which a separation like the one observed would reach `alpha`, or
/// `None` when no number up to [`MAX_REPEATS_SUGGESTED`] would (including a separation of one
/// half or less: no direction at all).
///
/// `separation` is the share of (baseline, candidate) pairs ordered the way the medians moved,
/// ties counted one half (U / (n1 n2), the "common-language effect size"). With n repeats in
/// each run U has mean n²/2 and standard deviation √(n²(2n+1)/12) under no difference, so the
/// observed share gives z = (separation − ½) n² / √(n²(2n+1)/12). An estimate: it assumes
/// more repeats would keep the separation seen in these few.
pub fn repeats_for_separation(separation: f64, alpha: f64) -> Option<usize> {
    if !(separation > 0.5 && separation <= 1.0) {
        return None;
    }
    (repeats_to_reach(alpha)..=MAX_REPEATS_SUGGESTED).find(|&n| {
        let n = n as f64;
        let z = (separation - 0.5) * n * n / (n * n * (2.0 * n + 1.0) / 12.0).sqrt();
        normal_upper_tail(z) <= alpha
    })
}

/// Counts of the Mann-Whitney U statistic under "no difference", without ties: `counts[u]` is
/// the number of the C(n1 + n2, n1) ways to split n1 + n2 distinct values into the two groups
/// that give U = u: the coefficients of the Gaussian binomial [n1 + n2 choose n2]_q (Mann &
/// Whitney 1947), built as the product of (1 − q^(n1+i)) / (1 − q^i) for i = 1..=n2. Every
/// partial product is itself a Gaussian binomial, so the coefficients stay below C(100, 50) ≈
/// 1e29 (times 2 between the two steps) and i128 keeps them exact, the tail counts of 1, 2, 4
/// that set a bound included.
fn null_u_counts(n1: usize, n2: usize) -> Vec<i128> {
    let mut counts = vec![0_i128; n1 * n2 + 1];
    counts[0] = 1;
    for i in 1..=n2 {
        let m = n1 + i;
        for k in (m..counts.len()).rev() {
            counts[k] -= counts[k - m];
        }
        for k in i..counts.len() {
            counts[k] += counts[k - i];
        }
    }
    counts
}

/// The 1-based rank `k` such that the k-th smallest of the n1 n2 pairwise differences
/// (candidate - baseline) is a one-sided lower confidence bound of the shift at level at least
/// 1 - `alpha` (and the k-th largest an upper one): k - 1 is the largest u with
/// P(U <= u) <= alpha under no difference (Hollander, Wolfe & Chicken, *Nonparametric
/// Statistical Methods*, 3rd ed., 2014, §4.3; Lehmann, *Nonparametrics*, 1975, §2.6). `None`
/// when even U = 0 is more likely than `alpha`: too few values for any bound at that level (4 vs
/// 4 at 0.01). Exact up to [`EXACT_MAX_TOTAL`] values in all, the normal approximation with
/// continuity correction beyond.
pub fn bound_rank(n1: usize, n2: usize, alpha: f64) -> Option<usize> {
    bound_ranks(n1, n2, &[alpha])[0]
}

/// [`bound_rank`] at several levels, from one null distribution.
pub fn bound_ranks(n1: usize, n2: usize, alphas: &[f64]) -> Vec<Option<usize>> {
    let valid = |alpha: f64| n1 > 0 && n2 > 0 && alpha > 0.0 && alpha < 1.0;
    let ks: Vec<usize> = if n1 + n2 <= EXACT_MAX_TOTAL && n1 > 0 && n2 > 0 {
        let counts = null_u_counts(n1, n2);
        let total = counts.iter().sum::<i128>() as f64;
        alphas
            .iter()
            .map(|&alpha| {
                let mut cumulative = 0_i128;
                let mut k = 0;
                for (u, &ways) in counts.iter().enumerate() {
                    cumulative += ways;
                    if cumulative as f64 / total > alpha * (1.0 + 1e-12) {
                        break;
                    }
                    k = u + 1;
                }
                k
            })
            .collect()
    } else {
        let (a, b) = (n1 as f64, n2 as f64);
        let sd = (a * b * (a + b + 1.0) / 12.0).sqrt();
        alphas
            .iter()
            .map(|&alpha| {
                let u = (a * b / 2.0 - 0.5 - normal_upper_quantile(alpha) * sd).floor();
                if u < 0.0 { 0 } else { u as usize + 1 }
            })
            .collect()
    };
    alphas
        .iter()
        .zip(ks)
        .map(|(&alpha, k)| (valid(alpha) && k >= 1).then_some(k.min(n1 * n2)))
        .collect()
}

/// z with P(Z > z) = p, by bisection on [`normal_upper_tail`] (to 1e-10: ample for a rank).
fn normal_upper_quantile(p: f64) -> f64 {
    let (mut low, mut high) = (-40.0_f64, 40.0_f64);
    for _ in 0..200 {
        let mid = (low + high) / 2.0;
        if normal_upper_tail(mid) > p {
            low = mid;
        } else {
            high = mid;
        }
        if high - low < 1e-10 {
            break;
        }
    }
    (low + high) / 2.0
}

/// How the candidate differs from the baseline: a point estimate and one-sided confidence
/// bounds at two levels, all on one scale (ms of difference, or a ratio).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    /// The Hodges-Lehmann estimate: the median of every pairwise candidate - baseline
    /// difference (or candidate / baseline ratio).
    pub estimate: f64,
    /// One-sided lower bound at 1 - alpha: the smallest slowdown the repeats are consistent
    /// with at that confidence. `None` when there are too few repeats for one.
    pub low: Option<f64>,
    /// One-sided upper bound at 1 - alpha (`low` and `high` together: a two-sided interval at
    /// 1 - 2 alpha).
    pub high: Option<f64>,
    /// One-sided lower bound at the weaker level 1 - `possible_alpha`: past the threshold, a
    /// slowdown is possible, though not shown.
    pub low_possible: Option<f64>,
}

/// The scale a shift is measured on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// candidate - baseline, in the values' unit.
    Difference,
    /// candidate / baseline (on the log scale, so a shift of the logs: a proportional change).
    Ratio,
}

/// The Hodges-Lehmann estimate of the shift from `baseline` to `candidate` and its
/// distribution-free confidence bounds, the order statistics of the pairwise differences that
/// invert the Mann-Whitney test (Moses's interval; Hollander, Wolfe & Chicken 2014, §4.3; for
/// a ratio, of the differences of the logs: Bauer, JASA 67, 1972). `None` when a sample is
/// empty or holds a value that is not finite, or (ratio) one that is not above 0.
///
/// Why this and not a bootstrap of the ratio of medians: the bound is exact at these sizes
/// (its coverage is that of the rank test, whatever the shape of the distribution), while a
/// percentile bootstrap over 5 values has 126 distinct resamples and undercovers; and unlike a
/// t interval one host hiccup moves it by one order statistic, not by its size. With ties (as
/// censored values are) the closed interval's coverage is at least the nominal one.
pub fn shift_interval(
    baseline: &[f64],
    candidate: &[f64],
    scale: Scale,
    alpha: f64,
    possible_alpha: f64,
) -> Option<Interval> {
    let bad = |v: &f64| !v.is_finite() || (scale == Scale::Ratio && *v <= 0.0);
    if baseline.is_empty() || candidate.is_empty() || baseline.iter().chain(candidate).any(bad) {
        return None;
    }
    let to_scale = |v: f64| if scale == Scale::Ratio { v.ln() } else { v };
    let back = |v: f64| if scale == Scale::Ratio { v.exp() } else { v };
    let mut pairs: Vec<f64> = candidate
        .iter()
        .flat_map(|&c| baseline.iter().map(move |&b| to_scale(c) - to_scale(b)))
        .collect();
    pairs.sort_by(f64::total_cmp);
    let n = pairs.len();
    let estimate = back((pairs[(n - 1) / 2] + pairs[n / 2]) / 2.0);
    let ranks = bound_ranks(baseline.len(), candidate.len(), &[alpha, possible_alpha]);
    Some(Interval {
        estimate,
        low: ranks[0].map(|k| back(pairs[k - 1])),
        high: ranks[0].map(|k| back(pairs[n - k])),
        low_possible: ranks[1].map(|k| back(pairs[k - 1])),
    })
}

/// Repeats per run (the same in both) with which a lower bound now at `low` would reach
/// `threshold`, if the estimate stayed where it is and the bound's distance from it shrank as
/// 1/√n (as every such interval does). `None` when the estimate itself is not past the
/// threshold (no number of repeats would show it) or more than [`MAX_REPEATS_SUGGESTED`] would
/// be needed. On the scale the bound is on (log of a ratio: pass the logs).
pub fn repeats_for_bound(
    n_baseline: usize,
    n_candidate: usize,
    estimate: f64,
    low: f64,
    threshold: f64,
    alpha: f64,
) -> Option<usize> {
    let (width, margin) = (estimate - low, estimate - threshold);
    if margin.is_nan() || margin <= 0.0 || !width.is_finite() || n_baseline == 0 || n_candidate == 0
    {
        return None;
    }
    // The width goes with sqrt(1/n1 + 1/n2); with n in each run, sqrt(2/n).
    let per_run = 2.0 / (1.0 / n_baseline as f64 + 1.0 / n_candidate as f64);
    let needed = (per_run * (width / margin).powi(2)).ceil();
    let needed = (needed as usize).max(repeats_to_reach(alpha));
    (needed <= MAX_REPEATS_SUGGESTED).then_some(needed)
}

/// P(Z > z) for a standard normal Z.
fn normal_upper_tail(z: f64) -> f64 {
    0.5 * erfc(z / std::f64::consts::SQRT_2)
}

/// The complementary error function, to about 1.2e-7 relative accuracy (the Chebyshev fit of
/// Numerical Recipes, 3rd ed., §6.2): ample for a p-value.
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let value = t * poly.exp();
    if x >= 0.0 { value } else { 2.0 - value }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_needed() {
        assert_eq!(repeats_to_reach(0.01), 5);
        assert_eq!(repeats_to_reach(0.02), 4);
        assert_eq!(repeats_to_reach(0.05), 3);
        assert_eq!(repeats_to_reach(0.2), 2);
        assert_eq!(repeats_to_reach(0.5), 1);
        // Complete separation needs no more than the test's own floor.
        assert_eq!(repeats_for_separation(1.0, 0.01), Some(5));
        // 20 of 25 pairs ordered: about 11 repeats per run at 0.01.
        assert_eq!(repeats_for_separation(0.8, 0.01), Some(11));
        assert_eq!(repeats_for_separation(0.5, 0.01), None);
        assert_eq!(repeats_for_separation(0.3, 0.01), None);
        assert_eq!(repeats_for_separation(f64::NAN, 0.01), None);
        // A hair past one half: thousands would be needed, past what is worth suggesting.
        assert_eq!(repeats_for_separation(0.51, 0.01), None);
    }

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn spread_of_odd_and_even_samples() {
        let s = Spread::of(&[3.0, 1.0, 2.0, 10.0, 4.0]).unwrap();
        assert_eq!((s.n, s.median, s.min, s.max), (5, 3.0, 1.0, 10.0));
        assert_eq!(Spread::of(&[4.0, 1.0, 2.0, 3.0]).unwrap().median, 2.5);
        assert!(Spread::of(&[]).is_none());
        assert!(Spread::of(&[1.0, f64::NAN]).is_none());
    }

    #[test]
    fn complete_separation_at_5_vs_5_gives_1_in_252() {
        let base = [1.0, 2.0, 3.0, 4.0, 5.0];
        let cand = [6.0, 7.0, 8.0, 9.0, 10.0];
        let mw = mann_whitney(&base, &cand).unwrap();
        assert!(mw.exact);
        assert_eq!(mw.u_candidate_larger, 25.0);
        assert!(close(mw.p_larger, 1.0 / 252.0, 1e-12), "{mw:?}");
        assert!(close(mw.p_smaller, 1.0, 1e-12));
        let reverse = mann_whitney(&cand, &base).unwrap();
        assert!(close(reverse.p_smaller, 1.0 / 252.0, 1e-12));
        assert_eq!(reverse.u_candidate_larger, 0.0);
        assert!(close(smallest_one_sided_p(5, 5), 1.0 / 252.0, 1e-15));
    }

    #[test]
    fn exact_tail_counts_match_the_table() {
        // One inversion (U = 24): splits with U >= 24 are U = 25 (1) and U = 24 (1): 2/252.
        let mw = mann_whitney(&[1.0, 2.0, 3.0, 4.0, 6.0], &[5.0, 7.0, 8.0, 9.0, 10.0]).unwrap();
        assert_eq!(mw.u_candidate_larger, 24.0);
        assert!(close(mw.p_larger, 2.0 / 252.0, 1e-12), "{mw:?}");
        // The null frequencies of U for 5 vs 5 from the top are 1, 1, 2, 3, 5, 7, 9, ...
        // (Mann & Whitney 1947): U >= 21 has 12 of 252 splits, U >= 19 has 28.
        let mw = mann_whitney(&[1.0, 2.0, 3.0, 6.5, 7.5], &[4.0, 5.0, 8.0, 9.0, 10.0]).unwrap();
        assert_eq!(mw.u_candidate_larger, 21.0);
        assert!(close(mw.p_larger, 12.0 / 252.0, 1e-12), "{mw:?}");
        let mw = mann_whitney(&[1.0, 2.0, 4.5, 6.5, 7.5], &[3.0, 4.0, 5.0, 8.0, 9.0]).unwrap();
        assert_eq!(mw.u_candidate_larger, 17.0);
        // U >= 17: 1+1+2+3+5+7+9+11+14 = 53.
        assert!(close(mw.p_larger, 53.0 / 252.0, 1e-12), "{mw:?}");
    }

    #[test]
    fn identical_samples_give_no_evidence() {
        let a = [2.0, 2.0, 2.0];
        let mw = mann_whitney(&a, &a).unwrap();
        assert_eq!(mw.u_candidate_larger, 4.5);
        assert!(close(mw.p_larger, 1.0, 1e-12) && close(mw.p_smaller, 1.0, 1e-12));
    }

    #[test]
    fn ties_use_mid_ranks_and_stay_exact() {
        // Pooled 1,2,2,3: base {1,2}, cand {2,3}. Doubled ranks 2,5,5,8; candidate sum 13.
        // Subsets of 2: sums 7,7,10,10,13,13 -> P(>=13) = 2/6.
        let mw = mann_whitney(&[1.0, 2.0], &[2.0, 3.0]).unwrap();
        assert_eq!(mw.u_candidate_larger, 3.5);
        assert!(close(mw.p_larger, 2.0 / 6.0, 1e-12), "{mw:?}");
        assert!(close(mw.p_smaller, 1.0, 1e-12));
    }

    #[test]
    fn the_normal_approximation_agrees_with_the_exact_test() {
        // 60 vs 60 with a shift: exact is not used; compare with an exact 50 vs 50 of the
        // same pattern for order of magnitude, and check symmetry and bounds.
        let base: Vec<f64> = (0..60).map(|i| i as f64).collect();
        let cand: Vec<f64> = (0..60).map(|i| i as f64 + 10.5).collect();
        let mw = mann_whitney(&base, &cand).unwrap();
        assert!(!mw.exact);
        assert!(mw.p_larger < 0.05 && mw.p_larger > 1e-4, "{mw:?}");
        assert!(mw.p_smaller > 0.95);
        // At 50 vs 50 (exact) the same shift gives a p within a factor 2.
        let b50: Vec<f64> = (0..50).map(|i| i as f64).collect();
        let c50: Vec<f64> = (0..50).map(|i| i as f64 + 10.5).collect();
        let exact = mann_whitney(&b50, &c50).unwrap();
        assert!(exact.exact);
        assert!(exact.p_larger > 0.0 && exact.p_larger < 0.1, "{exact:?}");
        assert!(close(erfc(0.0), 1.0, 1e-7));
        assert!(close(normal_upper_tail(1.959_964), 0.025, 1e-6));
        assert!(close(normal_upper_tail(-1.959_964), 0.975, 1e-6));
    }

    #[test]
    fn bound_ranks_match_the_exact_null_distribution() {
        // U for 5 vs 5 from the bottom: 1, 1, 2, 3, 5, 7, 9, ... of 252 (Mann & Whitney 1947).
        let counts = null_u_counts(5, 5);
        assert_eq!(&counts[..7], &[1, 1, 2, 3, 5, 7, 9]);
        assert_eq!(counts.iter().sum::<i128>(), 252);
        // Symmetric, and exact at the largest size: C(100, 50) in all, one way to get U = 0.
        assert_eq!(counts, counts.iter().rev().copied().collect::<Vec<_>>());
        let largest = null_u_counts(50, 50);
        assert_eq!(
            largest.iter().sum::<i128>(),
            100_891_344_545_564_193_334_812_497_256
        );
        assert_eq!(
            (largest[0], largest[1], largest[2], largest[2500]),
            (1, 1, 2, 1)
        );
        assert!(largest.iter().all(|&c| c > 0));
        // Unequal sizes: 2 vs 3 has C(5, 2) = 10 splits, U from 0 to 6: 1 1 2 2 2 1 1.
        assert_eq!(null_u_counts(2, 3), vec![1, 1, 2, 2, 2, 1, 1]);
        // P(U <= 1) = 2/252 <= 0.01 < P(U <= 2) = 4/252: the 2nd smallest pairwise difference.
        assert_eq!(bound_rank(5, 5, 0.01), Some(2));
        // P(U <= 4) = 12/252 = 0.048 <= 0.05; P(U <= 5) = 19/252 = 0.075 <= 0.1 < 28/252.
        assert_eq!(bound_rank(5, 5, 0.05), Some(5));
        assert_eq!(bound_rank(5, 5, 0.1), Some(6));
        // 4 vs 4: P(U = 0) = 1/70 > 0.01: no bound; 3 vs 3 at 0.05: 1/20, just.
        assert_eq!(bound_rank(4, 4, 0.01), None);
        assert_eq!(bound_rank(3, 3, 0.05), Some(1));
        assert_eq!(bound_rank(1, 1, 0.4), None);
        assert_eq!(bound_rank(0, 3, 0.1), None);
        // The normal approximation past 100 values continues the exact ranks closely.
        let (exact, approx) = (bound_rank(50, 50, 0.01), bound_rank(50, 51, 0.01));
        let (exact, approx) = (exact.unwrap() as f64, approx.unwrap() as f64);
        assert!(
            (approx - exact * 51.0 / 50.0).abs() <= 15.0,
            "{exact} {approx}"
        );
        assert!(close(normal_upper_quantile(0.025), 1.959_964, 1e-5));
    }

    #[test]
    fn the_shift_interval_is_order_statistics_of_the_pairwise_differences() {
        let base = [40.0, 42.0, 41.0, 43.0, 39.0];
        let cand = [55.0, 52.0, 58.0, 51.0, 60.0];
        let d = shift_interval(&base, &cand, Scale::Difference, 0.01, 0.1).unwrap();
        // Pairwise differences 8, 9, 9, 10, 10, 11, ... 20, 21 (51 - 43 up to 60 - 39): the 2nd
        // smallest is 9, the 2nd largest 20, the 6th smallest 11.
        assert_eq!(
            (d.low, d.high, d.low_possible),
            (Some(9.0), Some(20.0), Some(11.0))
        );
        assert_eq!(d.estimate, 14.0);
        let r = shift_interval(&base, &cand, Scale::Ratio, 0.01, 0.1).unwrap();
        assert!(close(r.low.unwrap(), 52.0 / 43.0, 1e-12), "{r:?}");
        // The 2nd largest pairwise ratio: 60/40 (after 60/39).
        assert!(close(r.high.unwrap(), 60.0 / 40.0, 1e-12), "{r:?}");
        // The same sample twice: the estimate is no change, the bounds either side.
        let same = shift_interval(&base, &base, Scale::Ratio, 0.01, 0.1).unwrap();
        assert!(close(same.estimate, 1.0, 1e-12));
        assert!(same.low.unwrap() < 1.0 && same.high.unwrap() > 1.0);
        // Too few values for a bound; values not above 0 have no ratio.
        let few = shift_interval(&[1.0, 2.0], &[3.0, 4.0], Scale::Difference, 0.01, 0.1).unwrap();
        assert_eq!((few.low, few.high, few.estimate), (None, None, 2.0));
        assert!(shift_interval(&[0.0, 1.0], &[1.0], Scale::Ratio, 0.01, 0.1).is_none());
        assert!(shift_interval(&[], &[1.0], Scale::Difference, 0.01, 0.1).is_none());
    }

    #[test]
    fn repeats_for_a_bound_grow_with_the_width_over_the_margin() {
        // Bound 1 below the estimate, threshold 0.5 below it: (1/0.5)^2 x 5 = 20 per run.
        assert_eq!(repeats_for_bound(5, 5, 2.0, 1.0, 1.5, 0.01), Some(20));
        // Never fewer than the test's own floor.
        assert_eq!(repeats_for_bound(5, 5, 2.0, 1.9, 1.0, 0.01), Some(5));
        // The estimate itself not past the threshold: no number of repeats would show it.
        assert_eq!(repeats_for_bound(5, 5, 1.0, 0.5, 1.0, 0.01), None);
        assert_eq!(repeats_for_bound(5, 5, 1.0, 0.5, 1.2, 0.01), None);
        // Past what is worth suggesting.
        assert_eq!(repeats_for_bound(5, 5, 1.01, 0.0, 1.0, 0.01), None);
    }

    #[test]
    fn empty_or_nan_samples_are_refused() {
        assert!(mann_whitney(&[], &[1.0]).is_none());
        assert!(mann_whitney(&[1.0], &[f64::INFINITY]).is_none());
    }
}
