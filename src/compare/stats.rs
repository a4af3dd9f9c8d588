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
        })
    }
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
    fn empty_or_nan_samples_are_refused() {
        assert!(mann_whitney(&[], &[1.0]).is_none());
        assert!(mann_whitney(&[1.0], &[f64::INFINITY]).is_none());
    }
}
