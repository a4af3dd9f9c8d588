//! The judgement of one metric of one (size, op): baseline repeats and candidate repeats in, a
//! verdict out, from the one-sided question a regression gate asks: *is the candidate worse by
//! at least the threshold?*
//!
//! # The rule
//! The slowdown is estimated twice, as a ratio (candidate / baseline) and as a difference in
//! ms, each by its Hodges-Lehmann estimate with distribution-free one-sided confidence bounds
//! ([`stats::shift_interval`]). "Worse by at least the threshold" means both: ratio ≥
//! `threshold` and difference ≥ `min_diff_ms` (the difference a probe can resolve).
//! - **regression:** both lower bounds at confidence 1 − `alpha` are at or past their
//!   thresholds: the whole one-sided interval is beyond them. Each bound is an exact level-α
//!   test of "not worse by that much", and a claim that needs both is still a level-α test
//!   (an intersection-union test, Berger, *Technometrics* 24, 1982), so an A/A pair is called a
//!   regression with probability at most `alpha`, far less with the threshold's margin.
//! - **inconclusive** (a *possible* regression): not shown at 1 − `alpha`, but both lower bounds
//!   at the weaker 1 − `possible_alpha` are past the thresholds: the repeats lean towards a
//!   slowdown past the threshold without showing it. The verdict says how many repeats per run
//!   would (if the estimate held).
//! - **no regression** otherwise: the repeats do not show a slowdown past the threshold even at
//!   1 − `possible_alpha`. An improvement, significant or not, is never inconclusive.
//!   **Improvement** is the part of it where the upper bounds at 1 − `alpha` are below
//!   1 / `threshold` and −`min_diff_ms`: faster, shown.
//!
//! Why two levels: at 5 repeats on a shared host the spread of a run is often ±30%, so a
//! two-sided interval at any useful confidence reaches past ×1.2 in most A/A pairs, and "no
//! regression only when the whole interval is below the threshold" would call most of them
//! inconclusive (measured: benchmarks/compare_verdicts.sh). What a gate can promise at that
//! spread is to flag what is shown (exit 1), to flag what is leaning that way (exit 3), and to
//! let the rest pass: "no regression" then means "no slowdown past the threshold was seen", not
//! "a slowdown past it is ruled out"; the interval in the table says how large a slowdown the
//! repeats still allow.
//!
//! Too few repeats for a bound at `alpha` at all (4 vs 4 at 0.01) leave the interval unbounded
//! on both sides, so every verdict but inconclusive would be a guess: such a metric is
//! inconclusive whatever its figures, with the repeats that can decide.

use serde::Serialize;

use super::stats::{
    self, Interval, Scale, Spread, mann_whitney, repeats_for_bound, repeats_to_reach,
    smallest_one_sided_p,
};

/// When a difference counts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Rules {
    /// "Worse" means at least this many times the baseline (and an improvement at most 1/this).
    /// Default 1.2.
    pub threshold: f64,
    /// One-sided error of a regression call: a regression needs the (1 − alpha) lower bounds
    /// past the thresholds. Default 0.01.
    pub alpha: f64,
    /// Smallest difference that counts, ms. Default 1.
    pub min_diff_ms: f64,
    /// A metric not shown to regress is inconclusive when its (1 − possible_alpha) lower bounds
    /// are past the thresholds. At least `alpha`; default 0.1.
    pub possible_alpha: f64,
}

/// Default `--threshold`.
pub const DEFAULT_THRESHOLD: f64 = 1.2;
/// Default `--alpha`.
pub const DEFAULT_ALPHA: f64 = 0.01;
/// Default `--min-diff-ms`: the tool's stated accuracy for a stall (about 1 ms at the default
/// probe rate), so smaller differences are not resolved.
pub const DEFAULT_MIN_DIFF_MS: f64 = 1.0;
/// Default `--possible-alpha`: the level at which a slowdown past the threshold is "possible".
/// 0.1 was chosen on 20 real A/A pairs on a busy 2-core host (benchmarks/compare_verdicts.sh):
/// at 0.2 three of them came out inconclusive, at 0.1 one.
pub const DEFAULT_POSSIBLE_ALPHA: f64 = 0.1;

impl Default for Rules {
    fn default() -> Self {
        Rules {
            threshold: DEFAULT_THRESHOLD,
            alpha: DEFAULT_ALPHA,
            min_diff_ms: DEFAULT_MIN_DIFF_MS,
            possible_alpha: DEFAULT_POSSIBLE_ALPHA,
        }
    }
}

impl Rules {
    /// `99%`: the confidence of a regression call's bounds.
    pub fn confidence_label(&self) -> String {
        percent(1.0 - self.alpha)
    }

    /// `90%`: the confidence of a possible regression's bounds.
    pub fn possible_label(&self) -> String {
        percent(1.0 - self.possible_alpha)
    }
}

fn percent(share: f64) -> String {
    let pct = share * 100.0;
    if (pct - pct.round()).abs() < 1e-9 {
        format!("{pct:.0}%")
    } else {
        format!("{pct:.1}%")
    }
}

/// The outcome for one metric or one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Slower past the threshold, shown at 1 − alpha.
    Regression,
    /// Faster past the threshold, shown at 1 − alpha (no regression).
    Improvement,
    /// No regression: no slowdown past the threshold seen, even at 1 − possible_alpha.
    NoChange,
    /// A possible regression: a slowdown past the threshold seen at 1 − possible_alpha, not
    /// shown at 1 − alpha; or too few repeats for any bound at alpha.
    Inconclusive,
    /// Not judged: the runs measured this metric differently (different probe engines), or
    /// one has no value for it.
    NotComparable,
}

impl Verdict {
    /// `regression`, `improvement`, `no regression`, `inconclusive`, `not comparable`.
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Regression => "regression",
            Verdict::Improvement => "improvement",
            Verdict::NoChange => "no regression",
            Verdict::Inconclusive => "inconclusive",
            Verdict::NotComparable => "not comparable",
        }
    }
}

/// Baseline vs candidate for one metric of one (size, op).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricComparison {
    /// `hol_delay_ms` or `set_ms`.
    pub metric: &'static str,
    /// The baseline's repeats (none when it has no value for this metric).
    pub baseline_ms: Option<Spread>,
    /// The candidate's repeats.
    pub candidate_ms: Option<Spread>,
    /// Candidate median / baseline median (empty when the baseline median is not above 0).
    pub ratio: Option<f64>,
    /// Candidate median − baseline median, ms.
    pub diff_ms: Option<f64>,
    /// The ratio candidate / baseline: Hodges-Lehmann estimate and one-sided bounds (empty
    /// when a value is not above 0).
    pub ratio_ci: Option<Interval>,
    /// The difference candidate − baseline, ms: estimate and bounds.
    pub diff_ci_ms: Option<Interval>,
    /// Mann-Whitney one-sided p for "candidate slower".
    pub p_slower: Option<f64>,
    /// Mann-Whitney one-sided p for "candidate faster".
    pub p_faster: Option<f64>,
    /// The smallest difference that counted for this metric, ms.
    pub min_diff_ms: f64,
    /// The outcome.
    pub verdict: Verdict,
    /// Why, in a few words.
    pub reason: String,
    /// Inconclusive only: repeats per run (the same in both) that would let the bounds decide;
    /// empty when no number up to 1000 would (or for any other verdict).
    pub repeats_needed: Option<usize>,
}

impl MetricComparison {
    /// The p-value in the direction the medians moved.
    pub fn p_in_direction(&self) -> Option<f64> {
        match self.diff_ms {
            Some(d) if d < 0.0 => self.p_faster,
            _ => self.p_slower,
        }
    }

    fn empty(
        metric: &'static str,
        baseline_ms: Option<Spread>,
        candidate_ms: Option<Spread>,
    ) -> Self {
        MetricComparison {
            metric,
            baseline_ms,
            candidate_ms,
            ratio: None,
            diff_ms: None,
            ratio_ci: None,
            diff_ci_ms: None,
            p_slower: None,
            p_faster: None,
            min_diff_ms: 0.0,
            verdict: Verdict::NotComparable,
            reason: String::new(),
            repeats_needed: None,
        }
    }
}

/// One metric the runs measured differently: each run's values, but no ratio, test or verdict,
/// so nothing downstream can read a judgement into it. `why` says what differed.
pub fn not_comparable(
    metric: &'static str,
    baseline_ms: Option<Spread>,
    candidate_ms: Option<Spread>,
    min_diff_ms: f64,
    why: String,
) -> MetricComparison {
    MetricComparison {
        min_diff_ms,
        reason: why,
        ..MetricComparison::empty(metric, baseline_ms, candidate_ms)
    }
}

/// `x1.23` (a ratio) or `+4.50 ms` (a difference).
fn show(value: f64, scale: Scale) -> String {
    match scale {
        Scale::Ratio => format!("x{value:.2}"),
        Scale::Difference => format!("{value:+.2} ms"),
    }
}

/// `value` beside the `threshold` it fell short of, with a third decimal when two would show
/// them equal (`x1.197 < x1.20`, not `x1.20 < x1.20`).
fn show_short_of(value: f64, threshold: f64, scale: Scale) -> String {
    let shown = show(value, scale);
    if shown.trim_start_matches('+') != show(threshold, scale).trim_start_matches('+') {
        return shown;
    }
    match scale {
        Scale::Ratio => format!("x{value:.3}"),
        Scale::Difference => format!("{value:+.3} ms"),
    }
}

/// Applies the rule to one metric. `censored_at` marks the spreads of values censored there
/// (head-of-line delay, see [`stats::censor`]); the values are passed censored already.
pub fn compare_metric(
    metric: &'static str,
    baseline: &[f64],
    candidate: &[f64],
    rules: Rules,
    min_diff_ms: f64,
    censored_at: Option<f64>,
) -> MetricComparison {
    let spread = |values: &[f64]| match censored_at {
        Some(at) => Spread::of_censored(values, at),
        None => Spread::of(values),
    };
    let mut result = MetricComparison {
        min_diff_ms,
        ..MetricComparison::empty(metric, spread(baseline), spread(candidate))
    };
    let (Some(base), Some(cand)) = (result.baseline_ms, result.candidate_ms) else {
        result.reason = format!(
            "no {metric} values in the {}",
            if result.baseline_ms.is_none() {
                "baseline"
            } else {
                "candidate"
            }
        );
        return result;
    };
    result.diff_ms = Some(cand.median - base.median);
    result.ratio = (base.median > 0.0).then(|| cand.median / base.median);
    if let Some(mw) = mann_whitney(baseline, candidate) {
        result.p_slower = Some(mw.p_larger);
        result.p_faster = Some(mw.p_smaller);
    }
    let interval = |scale| {
        stats::shift_interval(
            baseline,
            candidate,
            scale,
            rules.alpha,
            rules.possible_alpha,
        )
    };
    result.ratio_ci = interval(Scale::Ratio);
    result.diff_ci_ms = interval(Scale::Difference);
    let Some(diff_ci) = result.diff_ci_ms else {
        result.reason = "no test possible".into();
        return result;
    };
    // Too few repeats for a bound at alpha: the interval is unbounded both ways.
    if smallest_one_sided_p(base.n, cand.n) > rules.alpha {
        let needed = repeats_to_reach(rules.alpha);
        result.verdict = Verdict::Inconclusive;
        result.repeats_needed = Some(needed);
        result.reason = format!(
            "{} vs {} repeats cannot reach p <= {}; {needed} per run can",
            base.n, cand.n, rules.alpha
        );
        return result;
    }

    // The conditions, each on its own scale: (scale, interval, threshold of "slower", of
    // "faster").
    // Without a ratio (a value not above 0) the difference alone decides.
    let mut conditions = vec![(Scale::Difference, diff_ci, min_diff_ms, -min_diff_ms)];
    if let Some(ratio_ci) = result.ratio_ci {
        conditions.insert(
            0,
            (
                Scale::Ratio,
                ratio_ci,
                rules.threshold,
                1.0 / rules.threshold,
            ),
        );
    }
    let past = |bound: Option<f64>, at: f64| bound.is_some_and(|b| b >= at);
    let regression = conditions
        .iter()
        .all(|(_, ci, slower, _)| past(ci.low, *slower));
    let improvement = conditions
        .iter()
        .all(|(_, ci, _, faster)| ci.high.is_some_and(|h| h <= *faster));
    let possible = conditions
        .iter()
        .all(|(_, ci, slower, _)| past(ci.low_possible, *slower));
    let confidence = rules.confidence_label();
    let bounds = |pick: &dyn Fn(&Interval) -> Option<f64>| -> String {
        conditions
            .iter()
            .filter_map(|(scale, ci, _, _)| pick(ci).map(|b| show(b, *scale)))
            .collect::<Vec<_>>()
            .join(" and ")
    };
    if regression {
        result.verdict = Verdict::Regression;
        result.reason = format!("slower by at least {} ({confidence})", bounds(&|ci| ci.low));
    } else if improvement {
        result.verdict = Verdict::Improvement;
        result.reason = format!(
            "faster by at least {} ({confidence})",
            bounds(&|ci| ci.high)
        );
    } else if possible {
        result.verdict = Verdict::Inconclusive;
        // Each condition not shown at alpha: the repeats with which its bound would be.
        let needed: Option<Vec<usize>> = conditions
            .iter()
            .filter(|(_, ci, slower, _)| !past(ci.low, *slower))
            .map(|(scale, ci, slower, _)| {
                let to = |v: f64| if *scale == Scale::Ratio { v.ln() } else { v };
                let low = ci.low?;
                repeats_for_bound(
                    base.n,
                    cand.n,
                    to(ci.estimate),
                    to(low),
                    to(*slower),
                    rules.alpha,
                )
            })
            .collect();
        result.repeats_needed = needed.and_then(|n| n.into_iter().max());
        result.reason = format!(
            "possibly slower: at least {} at {}, only {} at {confidence}; {}",
            bounds(&|ci| ci.low_possible),
            rules.possible_label(),
            bounds(&|ci| ci.low),
            match result.repeats_needed {
                Some(n) => format!("about {n} per run could tell"),
                None => "more repeats would hardly tell".to_string(),
            }
        );
    } else {
        result.verdict = Verdict::NoChange;
        // The first condition whose weaker bound falls short of its threshold.
        result.reason = conditions
            .iter()
            .find(|(_, ci, slower, _)| !past(ci.low_possible, *slower))
            .map(|(scale, ci, slower, _)| {
                format!(
                    "{} bound {} < {}",
                    rules.possible_label(),
                    ci.low_possible
                        .map_or("-".into(), |b| show_short_of(b, *slower, *scale)),
                    show(*slower, *scale).trim_start_matches('+')
                )
            })
            .unwrap_or_default();
    }
    result
}

/// A row's verdict from its metrics': a regression when either regressed; else inconclusive
/// when either is; else an improvement when either improved; a metric not comparable does not
/// count.
pub fn combine(verdicts: &[Verdict]) -> Verdict {
    if verdicts.contains(&Verdict::Regression) {
        Verdict::Regression
    } else if verdicts.contains(&Verdict::Inconclusive) {
        Verdict::Inconclusive
    } else if verdicts.contains(&Verdict::Improvement) {
        Verdict::Improvement
    } else if verdicts.iter().all(|&v| v == Verdict::NotComparable) {
        Verdict::NotComparable
    } else {
        Verdict::NoChange
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: [f64; 5] = [40.0, 42.0, 41.0, 43.0, 39.0];

    fn judge(base: &[f64], cand: &[f64]) -> MetricComparison {
        compare_metric("x", base, cand, Rules::default(), 1.0, None)
    }

    #[test]
    fn each_condition_alone_is_not_enough() {
        // Separated but only 10% slower: the ratio's bound is below the threshold.
        let small = judge(&BASE, &[44.0, 45.0, 46.0, 44.5, 45.5]);
        assert_eq!(small.verdict, Verdict::NoChange);
        assert!(small.reason.contains("< x1.20"), "{}", small.reason);
        assert_eq!(small.repeats_needed, None);
        // 1.5x in median but one low candidate: past the threshold at 90%, not at 99%: a
        // possible regression, with an estimate of the repeats needed.
        let noisy = judge(&BASE, &[62.0, 60.0, 38.0, 61.0, 63.0]);
        assert_eq!(noisy.verdict, Verdict::Inconclusive, "{noisy:?}");
        assert!(
            noisy.reason.starts_with("possibly slower"),
            "{}",
            noisy.reason
        );
        let ci = noisy.ratio_ci.unwrap();
        assert!(
            ci.low.unwrap() < 1.2 && ci.low_possible.unwrap() >= 1.2,
            "{ci:?}"
        );
        assert_eq!(noisy.repeats_needed, Some(28), "{}", noisy.reason);
        // 2x, separated, but a tiny absolute difference (0.3 ms vs 0.6 ms).
        let tiny = judge(
            &[0.30, 0.31, 0.29, 0.32, 0.28],
            &[0.60, 0.61, 0.62, 0.59, 0.63],
        );
        assert_eq!(tiny.verdict, Verdict::NoChange);
        assert!(tiny.reason.contains("< 1.00 ms"), "{}", tiny.reason);
        // Too few repeats for any bound at alpha: inconclusive however large the change, and
        // however small (1 vs 1 with a 0.12x move, or the same figure twice).
        let few = judge(&[40.0, 41.0], &[80.0, 81.0]);
        assert_eq!(few.verdict, Verdict::Inconclusive);
        assert!(few.reason.contains("cannot reach"), "{}", few.reason);
        assert_eq!(few.repeats_needed, Some(5));
        for (b, c) in [(40.0, 4.8), (40.0, 40.0)] {
            let one = judge(&[b], &[c]);
            assert_eq!(one.verdict, Verdict::Inconclusive, "{one:?}");
        }
        let loose = Rules {
            alpha: 0.05,
            ..Rules::default()
        };
        let one = compare_metric("x", &[1.0], &[9.0], loose, 1.0, None);
        assert_eq!(one.repeats_needed, Some(3));
        // No value on a side: not judged, neither "no regression" nor inconclusive.
        let none = judge(&[], &[1.0, 2.0]);
        assert_eq!(none.verdict, Verdict::NotComparable);
        assert!(
            none.reason.contains("no x values in the baseline"),
            "{}",
            none.reason
        );
    }

    /// The A/A pair of issue 22: the candidate looks faster (x0.69 set_ms of a 32M SET) with
    /// repeats that overlap; it was called inconclusive, which failed a regression gate.
    #[test]
    fn an_improvement_significant_or_not_is_never_inconclusive() {
        let base = [50.3, 19.9, 213.1, 57.4, 29.3];
        let cand = [27.3, 44.0, 28.0, 28.9, 37.2];
        let m = judge(&base, &cand);
        assert_eq!(m.verdict, Verdict::NoChange, "{m:?}");
        assert!(m.ratio_ci.unwrap().estimate < 1.0);
        // Shown faster: an improvement.
        let m = judge(&BASE, &BASE.map(|v| v * 0.5));
        assert_eq!(m.verdict, Verdict::Improvement, "{m:?}");
        assert!(
            m.reason.starts_with("faster by at least x0."),
            "{}",
            m.reason
        );
    }

    /// Shown slower: the whole one-sided interval past both thresholds.
    #[test]
    fn a_regression_needs_both_bounds_past_their_thresholds() {
        let m = judge(&BASE, &[55.0, 52.0, 58.0, 51.0, 60.0]);
        assert_eq!(m.verdict, Verdict::Regression, "{m:?}");
        let (ratio, diff) = (m.ratio_ci.unwrap(), m.diff_ci_ms.unwrap());
        // 5 vs 5 at 0.01: the 2nd smallest of the 25 pairwise ratios, 52/43.
        assert!(
            (ratio.low.unwrap() - 52.0 / 43.0).abs() < 1e-12,
            "{ratio:?}"
        );
        assert_eq!(diff.low, Some(9.0));
        assert!(
            m.reason.contains("x1.21 and +9.00 ms (99%)"),
            "{}",
            m.reason
        );
        // The same at a threshold past the bound: possible, not shown.
        let strict = Rules {
            threshold: 1.25,
            ..Rules::default()
        };
        let m = compare_metric(
            "x",
            &BASE,
            &[55.0, 52.0, 58.0, 51.0, 60.0],
            strict,
            1.0,
            None,
        );
        assert_eq!(m.verdict, Verdict::Inconclusive, "{m:?}");
        assert!(m.repeats_needed.is_some_and(|n| n > 5), "{m:?}");
    }

    #[test]
    fn a_zero_baseline_is_judged_on_the_difference() {
        let m = judge(&[0.0, -0.1, 0.0, 0.1, -0.2], &[5.0, 6.0, 5.5, 7.0, 6.5]);
        assert_eq!((m.ratio, m.ratio_ci), (None, None));
        assert_eq!(m.verdict, Verdict::Regression);
    }

    #[test]
    fn confidence_labels() {
        let rules = Rules::default();
        assert_eq!(rules.confidence_label(), "99%");
        assert_eq!(rules.possible_label(), "90%");
        assert_eq!(percent(0.995), "99.5%");
        assert_eq!(show_short_of(1.197, 1.2, Scale::Ratio), "x1.197");
        assert_eq!(show_short_of(1.1, 1.2, Scale::Ratio), "x1.10");
        assert_eq!(show_short_of(0.996, 1.0, Scale::Difference), "+0.996 ms");
    }
}

/// The rule's two promises on synthetic repeats, drawn from a skewed distribution with a long
/// right tail like blocking times (a floor plus an exponential: one repeat in twenty is
/// ~3 spreads above the floor): an A/A pair is never a regression and rarely inconclusive; a
/// slowdown well past the threshold, at enough repeats, is always a regression. The seed is
/// fixed so that a failure is reproducible (a regression call on an A/A pair has a small but
/// nonzero probability, at most alpha; this checks that it is that small).
#[cfg(test)]
mod properties {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngSeed};
    use rand::{RngExt, SeedableRng};

    use super::*;

    /// `n` values: `floor_ms` × (1 + `spread` × Exp(1)).
    fn draw(rng: &mut rand::rngs::SmallRng, n: usize, floor_ms: f64, spread: f64) -> Vec<f64> {
        (0..n)
            .map(|_| {
                let u: f64 = rng.random_range(0.0..1.0);
                floor_ms * (1.0 + spread * -(1.0 - u).ln())
            })
            .collect()
    }

    fn config(cases: u32) -> Config {
        Config {
            cases,
            rng_seed: RngSeed::Fixed(22),
            failure_persistence: None,
            ..Config::default()
        }
    }

    proptest! {
        #![proptest_config(config(256))]

        #[test]
        fn an_a_a_pair_is_never_a_regression(
            seed in any::<u64>(),
            n in 5usize..=12,
            floor_ms in 0.2f64..300.0,
            spread in 0.05f64..0.6,
        ) {
            let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
            let base = draw(&mut rng, n, floor_ms, spread);
            let cand = draw(&mut rng, n, floor_ms, spread);
            let m = compare_metric("x", &base, &cand, Rules::default(), 1.0, None);
            prop_assert_ne!(m.verdict, Verdict::Regression, "{:?} vs {:?}: {:?}", base, cand, m);
        }

        #[test]
        fn a_slowdown_well_past_the_threshold_is_a_regression(
            seed in any::<u64>(),
            n in 15usize..=30,
            floor_ms in 5.0f64..300.0,
            spread in 0.05f64..0.3,
            factor in 2.0f64..4.0,
        ) {
            let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
            let base = draw(&mut rng, n, floor_ms, spread);
            let cand: Vec<f64> = draw(&mut rng, n, floor_ms, spread)
                .into_iter()
                .map(|v| v * factor)
                .collect();
            let m = compare_metric("x", &base, &cand, Rules::default(), 1.0, None);
            prop_assert_eq!(m.verdict, Verdict::Regression, "x{}: {:?}", factor, m);
        }
    }

    proptest! {
        #![proptest_config(config(32))]

        /// Rates over many pairs of one distribution: inconclusive at most possible_alpha by
        /// construction (far fewer with the threshold's margin), regressions at most alpha.
        #[test]
        fn a_a_pairs_are_rarely_inconclusive(
            seed in any::<u64>(),
            n in 5usize..=12,
            floor_ms in 0.2f64..300.0,
            spread in 0.05f64..0.6,
        ) {
            let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
            let pairs = 100;
            let (mut inconclusive, mut regressions) = (0, 0);
            for _ in 0..pairs {
                let base = draw(&mut rng, n, floor_ms, spread);
                let cand = draw(&mut rng, n, floor_ms, spread);
                let m = compare_metric("x", &base, &cand, Rules::default(), 1.0, None);
                inconclusive += usize::from(m.verdict == Verdict::Inconclusive);
                regressions += usize::from(m.verdict == Verdict::Regression);
            }
            prop_assert!(inconclusive <= 5, "{} of {} inconclusive", inconclusive, pairs);
            prop_assert!(regressions <= 1, "{} of {} regressions", regressions, pairs);
        }
    }
}
