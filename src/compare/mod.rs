//! Compares runs read back from their `--out` directories: per size and operation, the
//! baseline's and candidate's head-of-line delay and SET time (median and range over the
//! repeats), their ratio, and a verdict: regression, improvement, no change or inconclusive.
//! Also the side-by-side view of several runs (one column per server).
//!
//! Everything here but [`runs`] is pure: runs in, findings out, so the rules are unit-tested on
//! synthetic runs. Rendering (table, markdown, JSON) is in [`render`].
//!
//! # The rule
//! A metric of a (size, op) row regressed when all three hold:
//! 1. **large enough to matter:** candidate median ≥ `threshold` × baseline median;
//! 2. **larger than the measurement's resolution:** candidate median − baseline median ≥
//!    `min_diff_ms` (for head-of-line delay, at least one aggregate probe interval of the
//!    coarser run, since that is how finely a probe can see a stall);
//! 3. **beyond the noise of the repeats:** a one-sided exact Mann-Whitney test of candidate >
//!    baseline over the repeats gives p ≤ `alpha`.
//!
//! Improvement is the mirror image.
//!
//! # Inconclusive
//! "No change" is a claim too, so a metric is **inconclusive** (not "no change") when the data
//! cannot decide: (a) the repeats are too few for the test ever to reach `alpha` (1 vs 1, 2 vs
//! 2, ... up to 4 vs 4 at the default 0.01), whatever the figures; or (b) the medians moved past
//! both the threshold and the resolution but the repeats overlap, so p > `alpha`: the spread
//! swamps a difference large enough to matter. Each says how many repeats per run would let the
//! test decide: for (a) the fewest that can reach `alpha`, for (b) an estimate from the share of
//! (baseline, candidate) pairs ordered the way the medians moved
//! ([`stats::repeats_for_separation`]). A row is a regression when either metric regressed,
//! else inconclusive when either is, else an improvement when either improved; `probe compare`
//! exits 1 on a regression, else 3 when any row is inconclusive.
//!
//! With 5 vs 5 repeats the smallest one-sided p is 1/252 ≈
//! 0.004; at the default `alpha` = 0.01 the test flags only when at least 24 of the 25
//! (baseline, candidate) pairs are ordered the same way (p = 2/252 ≈ 0.008). Why a strict
//! alpha and no multiple-test correction: a sweep compares ~28 cells (7 sizes × set/delete ×
//! 2 metrics) and a Bonferroni or Holm correction at 0.05 would ask each for p ≤ 0.0018, which
//! 5 repeats can never give; instead each cell needs near-complete separation *and* a ratio and
//! a difference past the noise floor, and the false-alarm rate is measured on real A/A runs
//! (docs/compare.md).
//!
//! # Runs made differently
//! Differences between the runs' options are warnings above the verdict, and every metric is
//! still judged (a coarser probe rate only raises `hol_delay_ms`'s resolution), except one:
//! runs recorded by different probe engines measured `hol_delay_ms` differently (engine 1 waited
//! for each probe's reply before sending the next, so under load it also counted the probes'
//! own backlog), so their `hol_delay_ms` rows are [`Verdict::NotComparable`] and the rows are
//! judged on `set_ms` alone.

pub mod render;
pub mod runs;
pub mod stats;

use std::collections::BTreeSet;

use serde::Serialize;

pub use runs::{PROBE_ENGINE_BEFORE_KEY, RunData, RunMeta, WriteSample, load_run};
pub use stats::{
    MannWhitney, Spread, mann_whitney, repeats_for_separation, repeats_to_reach,
    smallest_one_sided_p,
};

use crate::error::UsageError;
use crate::units::format_size;

/// When a difference counts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Rules {
    /// A regression needs candidate median ≥ threshold × baseline median (and an improvement
    /// ≤ baseline / threshold). Default 1.2.
    pub threshold: f64,
    /// Largest one-sided Mann-Whitney p-value that counts as beyond the noise. Default 0.01.
    pub alpha: f64,
    /// Smallest difference of medians that counts, ms. Default 1.
    pub min_diff_ms: f64,
}

/// Default `--threshold`.
pub const DEFAULT_THRESHOLD: f64 = 1.2;
/// Default `--alpha`.
pub const DEFAULT_ALPHA: f64 = 0.01;
/// Default `--min-diff-ms`: the tool's stated accuracy for a stall (about 1 ms at the default
/// probe rate), so smaller differences are not resolved.
pub const DEFAULT_MIN_DIFF_MS: f64 = 1.0;

impl Default for Rules {
    fn default() -> Self {
        Rules {
            threshold: DEFAULT_THRESHOLD,
            alpha: DEFAULT_ALPHA,
            min_diff_ms: DEFAULT_MIN_DIFF_MS,
        }
    }
}

/// The outcome for one metric or one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The candidate is slower, beyond threshold, resolution and noise.
    Regression,
    /// The candidate is faster, beyond threshold, resolution and noise.
    Improvement,
    /// Neither: the medians differ by less than the threshold or the resolution.
    NoChange,
    /// The data cannot decide: too few repeats for the test ever to reach its p-value, or a
    /// difference past threshold and resolution hidden in the spread of the repeats.
    Inconclusive,
    /// Not judged: the runs measured this metric differently (different probe engines), or one
    /// of them has no value, or too few, for it (a write no probe overlapped has no
    /// `hol_delay_ms`).
    NotComparable,
}

impl Verdict {
    /// `regression`, `improvement`, `no change`, `inconclusive`, `not comparable`.
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Regression => "regression",
            Verdict::Improvement => "improvement",
            Verdict::NoChange => "no change",
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
    /// Mann-Whitney one-sided p for "candidate slower".
    pub p_slower: Option<f64>,
    /// Mann-Whitney one-sided p for "candidate faster".
    pub p_faster: Option<f64>,
    /// The smallest difference that counted for this metric, ms.
    pub min_diff_ms: f64,
    /// The outcome.
    pub verdict: Verdict,
    /// Why, in a few words (which condition held or failed).
    pub reason: String,
    /// Inconclusive only: repeats per run (the same in both) that would let the test decide;
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
}

/// One (size, op) of a comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RowComparison {
    /// Value size, bytes.
    pub size_bytes: u64,
    /// `set`, `overwrite` or `delete`.
    pub op: String,
    /// Head-of-line delay: what the other clients saw.
    pub hol_delay: MetricComparison,
    /// The writer's own time.
    pub set: MetricComparison,
    /// Regression when either metric regressed; else inconclusive when either is; else
    /// improvement when one improved; a metric not comparable does not count.
    pub verdict: Verdict,
    /// The larger of the metrics' `repeats_needed`.
    pub repeats_needed: Option<usize>,
}

/// A candidate run against a baseline run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// The reference run.
    pub baseline: RunMeta,
    /// The run judged.
    pub candidate: RunMeta,
    /// The rules applied.
    pub rules: Rules,
    /// One row per (size, op) both runs have, in size order.
    pub rows: Vec<RowComparison>,
    /// Differences between the runs' options, sizes only one has, incomplete runs.
    pub warnings: Vec<String>,
    /// Metrics not judged in any row because the runs measured them differently
    /// (`hol_delay_ms` when the probe engines differ).
    pub not_comparable_metrics: Vec<&'static str>,
    /// Rows that regressed.
    pub regressions: usize,
    /// Rows that improved.
    pub improvements: usize,
    /// Rows the data cannot decide.
    pub inconclusive: usize,
    /// Repeats per run that would let every inconclusive row be decided (the largest any row
    /// needs); empty when none is inconclusive or more repeats would not settle one.
    pub repeats_needed: Option<usize>,
    /// Regression when any row regressed; else inconclusive when any row is; else improvement
    /// when any row improved; else no change.
    pub verdict: Verdict,
}

/// Compares `candidate` with `baseline` on every (size, op) both have. An error when they
/// share none.
pub fn compare(
    baseline: &RunData,
    candidate: &RunData,
    rules: Rules,
) -> Result<Comparison, UsageError> {
    let base_groups = baseline.groups();
    let cand_groups = candidate.groups();
    let mut warnings = option_warnings(&baseline.meta, &candidate.meta);
    warnings.extend(baseline.warnings.iter().cloned());
    warnings.extend(candidate.warnings.iter().cloned());

    let only = |a: &std::collections::BTreeMap<(u64, String), Vec<&WriteSample>>,
                b: &std::collections::BTreeMap<(u64, String), Vec<&WriteSample>>| {
        let missing: Vec<&(u64, String)> = a.keys().filter(|k| !b.contains_key(*k)).collect();
        describe_keys(&missing)
    };
    let base_only = only(&base_groups, &cand_groups);
    let cand_only = only(&cand_groups, &base_groups);
    let shared: Vec<&(u64, String)> = base_groups
        .keys()
        .filter(|k| cand_groups.contains_key(*k))
        .collect();
    if shared.is_empty() {
        return Err(UsageError::Conflict(format!(
            "the runs share no size and operation: {} has {}; {} has {}",
            baseline.meta.dir.display(),
            describe_groups(&base_groups),
            candidate.meta.dir.display(),
            describe_groups(&cand_groups)
        )));
    }
    if !base_only.is_empty() {
        warnings.push(format!("only in the baseline (not compared): {base_only}"));
    }
    if !cand_only.is_empty() {
        warnings.push(format!("only in the candidate (not compared): {cand_only}"));
    }

    // Head-of-line delay is resolved to one aggregate probe interval of the coarser run.
    let interval_ms = [
        baseline.meta.probe_interval_ms(),
        candidate.meta.probe_interval_ms(),
    ]
    .into_iter()
    .flatten()
    .fold(0.0_f64, f64::max);
    let hol_min_diff = rules.min_diff_ms.max(interval_ms);
    let (base_engine, cand_engine) = (
        baseline.meta.probe_engine_version,
        candidate.meta.probe_engine_version,
    );
    let hol_comparable = base_engine == cand_engine;

    let mut rows = Vec::new();
    for key in shared {
        let (base, cand) = (&base_groups[key], &cand_groups[key]);
        let values = |group: &[&WriteSample], hol: bool| -> Vec<f64> {
            group
                .iter()
                .filter_map(|w| if hol { w.hol_delay_ms } else { Some(w.set_ms) })
                .collect()
        };
        let hol_delay = if hol_comparable {
            compare_metric(
                "hol_delay_ms",
                &values(base, true),
                &values(cand, true),
                rules,
                hol_min_diff,
            )
        } else {
            not_comparable(
                "hol_delay_ms",
                &values(base, true),
                &values(cand, true),
                hol_min_diff,
                format!("probe engines {base_engine} and {cand_engine}"),
            )
        };
        let set = compare_metric(
            "set_ms",
            &values(base, false),
            &values(cand, false),
            rules,
            rules.min_diff_ms,
        );
        let hol_delay = too_few_overlapped(hol_delay, &set, rules);
        let verdict = combine(&[hol_delay.verdict, set.verdict]);
        let repeats_needed = hol_delay.repeats_needed.max(set.repeats_needed);
        rows.push(RowComparison {
            size_bytes: key.0,
            op: key.1.clone(),
            hol_delay,
            set,
            verdict,
            repeats_needed,
        });
    }
    rows.sort_by(|a, b| (a.size_bytes, op_order(&a.op)).cmp(&(b.size_bytes, op_order(&b.op))));
    if let Some(best) = rows
        .iter()
        .filter_map(|r| {
            let (b, c) = (r.set.baseline_ms?, r.set.candidate_ms?);
            Some((b.n, c.n))
        })
        .map(|(b, c)| (smallest_one_sided_p(b, c), b, c))
        .find(|&(p, _, _)| p > rules.alpha)
    {
        warnings.push(format!(
            "with {} vs {} repeats the test cannot reach p <= {} (its smallest p is {:.3}): such rows are inconclusive; record with --repeat {} or more",
            best.1,
            best.2,
            rules.alpha,
            best.0,
            repeats_to_reach(rules.alpha)
        ));
    }
    let regressions = rows
        .iter()
        .filter(|r| r.verdict == Verdict::Regression)
        .count();
    let improvements = rows
        .iter()
        .filter(|r| r.verdict == Verdict::Improvement)
        .count();
    let inconclusive = rows
        .iter()
        .filter(|r| r.verdict == Verdict::Inconclusive)
        .count();
    let repeats_needed = rows
        .iter()
        .filter(|r| r.verdict == Verdict::Inconclusive)
        .filter_map(|r| r.repeats_needed)
        .max();
    Ok(Comparison {
        baseline: baseline.meta.clone(),
        candidate: candidate.meta.clone(),
        rules,
        rows,
        warnings,
        not_comparable_metrics: if hol_comparable {
            vec![]
        } else {
            vec!["hol_delay_ms"]
        },
        regressions,
        improvements,
        inconclusive,
        repeats_needed,
        verdict: if regressions > 0 {
            Verdict::Regression
        } else if inconclusive > 0 {
            Verdict::Inconclusive
        } else if improvements > 0 {
            Verdict::Improvement
        } else {
            Verdict::NoChange
        },
    })
}

/// Rows of one size in the order a run makes them: set, overwrite, delete, then anything else.
pub fn op_order(op: &str) -> (u8, &str) {
    let rank = match op {
        "set" => 0,
        "overwrite" => 1,
        "delete" => 2,
        _ => 3,
    };
    (rank, op)
}

fn combine(verdicts: &[Verdict]) -> Verdict {
    if verdicts.contains(&Verdict::Regression) {
        Verdict::Regression
    } else if verdicts.contains(&Verdict::Inconclusive) {
        // An improvement beside a metric that cannot tell is not a finding to act on.
        Verdict::Inconclusive
    } else if verdicts.contains(&Verdict::Improvement) {
        Verdict::Improvement
    } else if verdicts.iter().all(|&v| v == Verdict::NotComparable) {
        Verdict::NotComparable
    } else {
        Verdict::NoChange
    }
}

fn describe_groups(
    groups: &std::collections::BTreeMap<(u64, String), Vec<&WriteSample>>,
) -> String {
    if groups.is_empty() {
        return "no successful writes".into();
    }
    describe_keys(&groups.keys().collect::<Vec<_>>())
}

/// `set 1M,2M; delete 1M,2M`: the sizes of each operation, operations in run order.
fn describe_keys(keys: &[&(u64, String)]) -> String {
    let mut ops: Vec<&str> = keys.iter().map(|(_, op)| op.as_str()).collect();
    ops.sort_by_key(|op| op_order(op));
    ops.dedup();
    ops.iter()
        .map(|op| {
            let sizes: Vec<String> = keys
                .iter()
                .filter(|(_, o)| o == op)
                .map(|(size, _)| format_size(*size))
                .collect();
            format!("{op} {}", sizes.join(","))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// A `hol_delay_ms` with too few values for the test while the writes themselves are enough: the
/// missing ones are writes no probe overlapped (shorter than a probe interval), which more
/// repeats would not give, so it is not judged rather than inconclusive.
fn too_few_overlapped(
    hol_delay: MetricComparison,
    set: &MetricComparison,
    rules: Rules,
) -> MetricComparison {
    let (Some(hol_b), Some(hol_c), Some(set_b), Some(set_c)) = (
        hol_delay.baseline_ms,
        hol_delay.candidate_ms,
        set.baseline_ms,
        set.candidate_ms,
    ) else {
        return hol_delay;
    };
    let writes_enough = smallest_one_sided_p(set_b.n, set_c.n) <= rules.alpha;
    let values_too_few = smallest_one_sided_p(hol_b.n, hol_c.n) > rules.alpha;
    if hol_delay.verdict != Verdict::Inconclusive || !writes_enough || !values_too_few {
        return hol_delay;
    }
    MetricComparison {
        verdict: Verdict::NotComparable,
        repeats_needed: None,
        reason: format!(
            "only {} and {} of {} and {} writes overlapped a probe",
            hol_b.n, hol_c.n, set_b.n, set_c.n
        ),
        ..hol_delay
    }
}

/// One metric the runs measured differently: each run's values, but no ratio, test or verdict,
/// so nothing downstream can read a judgement into it. `why` says what differed.
pub fn not_comparable(
    metric: &'static str,
    baseline: &[f64],
    candidate: &[f64],
    min_diff_ms: f64,
    why: String,
) -> MetricComparison {
    MetricComparison {
        metric,
        baseline_ms: Spread::of(baseline),
        candidate_ms: Spread::of(candidate),
        ratio: None,
        diff_ms: None,
        p_slower: None,
        p_faster: None,
        min_diff_ms,
        verdict: Verdict::NotComparable,
        reason: why,
        repeats_needed: None,
    }
}

/// Applies the rule to one metric.
pub fn compare_metric(
    metric: &'static str,
    baseline: &[f64],
    candidate: &[f64],
    rules: Rules,
    min_diff_ms: f64,
) -> MetricComparison {
    let baseline_ms = Spread::of(baseline);
    let candidate_ms = Spread::of(candidate);
    let mut result = MetricComparison {
        metric,
        baseline_ms,
        candidate_ms,
        ratio: None,
        diff_ms: None,
        p_slower: None,
        p_faster: None,
        min_diff_ms,
        verdict: Verdict::NoChange,
        reason: String::new(),
        repeats_needed: None,
    };
    // Nothing measured on a side (a write no probe overlapped has no hol_delay_ms): not judged,
    // neither "no change" nor a reason to call the row inconclusive.
    let (Some(base), Some(cand)) = (baseline_ms, candidate_ms) else {
        result.verdict = Verdict::NotComparable;
        result.reason = format!(
            "no {metric} values in the {}",
            if baseline_ms.is_none() {
                "baseline"
            } else {
                "candidate"
            }
        );
        return result;
    };
    let diff = cand.median - base.median;
    result.diff_ms = Some(diff);
    result.ratio = (base.median > 0.0).then(|| cand.median / base.median);
    let Some(mw) = mann_whitney(baseline, candidate) else {
        result.reason = "no test possible".into();
        return result;
    };
    result.p_slower = Some(mw.p_larger);
    result.p_faster = Some(mw.p_smaller);

    let slower_direction = diff >= 0.0;
    let p = if slower_direction {
        mw.p_larger
    } else {
        mw.p_smaller
    };
    let ratio_ok = match result.ratio {
        Some(r) if slower_direction => r >= rules.threshold,
        Some(r) => r <= 1.0 / rules.threshold,
        // The baseline median is not above 0: only a rise to above 0 is a ratio past any
        // threshold.
        None => slower_direction && cand.median > 0.0,
    };
    let diff_ok = diff.abs() >= min_diff_ms;
    let p_ok = p <= rules.alpha;
    // (a) Too few repeats: the test can never reach alpha, so neither a change nor its absence
    // can be shown.
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
    let moved = match result.ratio {
        Some(r) => format!("x{r:.2}"),
        None => "from 0".to_string(),
    };
    if ratio_ok && diff_ok && p_ok {
        result.verdict = if slower_direction {
            Verdict::Regression
        } else {
            Verdict::Improvement
        };
        result.reason = format!(
            "{} {:.2} ms ({moved}), p {p:.3}",
            if slower_direction {
                "slower by"
            } else {
                "faster by"
            },
            diff.abs(),
        );
        return result;
    }
    // (b) A difference large enough to matter, hidden in the spread of the repeats.
    if ratio_ok && diff_ok {
        let pairs = (base.n * cand.n) as f64;
        let separation = if slower_direction {
            mw.u_candidate_larger / pairs
        } else {
            1.0 - mw.u_candidate_larger / pairs
        };
        result.verdict = Verdict::Inconclusive;
        result.repeats_needed = repeats_for_separation(separation, rules.alpha);
        result.reason = format!(
            "{moved} but the repeats overlap, p {p:.3} > {}; {}",
            rules.alpha,
            match result.repeats_needed {
                Some(n) => format!("about {n} per run could tell"),
                None => "more repeats would hardly tell".to_string(),
            }
        );
        return result;
    }
    let mut failed = Vec::new();
    if !ratio_ok {
        failed.push(match result.ratio {
            Some(r) => format!("ratio {r:.2} within {:.2}x", rules.threshold),
            None => "no ratio".into(),
        });
    }
    if !diff_ok {
        failed.push(format!(
            "difference {:.2} ms below {min_diff_ms:.2} ms",
            diff.abs()
        ));
    }
    result.reason = failed.join("; ");
    result
}

/// Differences between two runs' options that make their figures less comparable.
fn option_warnings(base: &RunMeta, cand: &RunMeta) -> Vec<String> {
    let mut warnings = Vec::new();
    let mut differ = |what: &str, b: String, c: String, why: &str| {
        if b != c {
            warnings.push(format!(
                "the runs differ in {what} (baseline {b}, candidate {c}){why}"
            ));
        }
    };
    let show = |v: Option<String>| v.unwrap_or_else(|| "unknown".into());
    differ(
        "probe engine",
        format!("version {}", base.probe_engine_version),
        format!("version {}", cand.probe_engine_version),
        ": each engine measures hol_delay_ms differently, so it is not comparable and no hol_delay_ms row is judged; set_ms still is",
    );
    differ(
        "probe rate",
        show(base.probe_rate.map(|r| format!("{r}/s"))),
        show(cand.probe_rate.map(|r| format!("{r}/s"))),
        ": head-of-line delay is resolved to one probe interval of the coarser run",
    );
    differ(
        "probe threads",
        show(base.probe_threads.map(|n| n.to_string())),
        show(cand.probe_threads.map(|n| n.to_string())),
        "",
    );
    differ(
        "probe command",
        show(base.probe_cmd.clone()),
        show(cand.probe_cmd.clone()),
        "",
    );
    differ(
        "stall threshold",
        show(base.stall_threshold_us.map(|n| format!("{n}us"))),
        show(cand.stall_threshold_us.map(|n| format!("{n}us"))),
        "",
    );
    differ(
        "gap",
        show(base.gap_ms.map(|n| format!("{n}ms"))),
        show(cand.gap_ms.map(|n| format!("{n}ms"))),
        "",
    );
    differ(
        "--keep",
        show(base.keep.map(|b| b.to_string())),
        show(cand.keep.map(|b| b.to_string())),
        ": server memory differs",
    );
    differ(
        "repeats",
        show(base.repeat.map(|n| n.to_string())),
        show(cand.repeat.map(|n| n.to_string())),
        "",
    );
    let sizes = |m: &RunMeta| {
        let set: BTreeSet<u64> = m.planned_sizes_bytes.iter().copied().collect();
        set.iter()
            .map(|&s| format_size(s))
            .collect::<Vec<_>>()
            .join(",")
    };
    differ(
        "sizes",
        sizes(base),
        sizes(cand),
        ": only the sizes both have are compared",
    );
    if base.hostname != cand.hostname || base.cpus != cand.cpus {
        warnings.push(format!(
            "the runs were made on different hosts ({} with {} cpus, {} with {} cpus): host speed is part of every figure",
            show(base.hostname.clone()),
            show(base.cpus.map(|n| n.to_string())),
            show(cand.hostname.clone()),
            show(cand.cpus.map(|n| n.to_string())),
        ));
    }
    if base.tool_version != cand.tool_version {
        warnings.push(format!(
            "made by different holprobe versions ({} and {})",
            base.tool_version, cand.tool_version
        ));
    }
    if base.run_id == cand.run_id {
        warnings.push(format!(
            "both directories hold the same run ({}): the compare can only say no change",
            base.run_id
        ));
    }
    warnings
}

/// Several runs side by side: per (size, op), each run's median and range.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SideBySide {
    /// Each run's server, in column order.
    pub runs: Vec<RunMeta>,
    /// Every (size, op) any run has, in size order.
    pub rows: Vec<SideBySideRow>,
}

/// One (size, op) across the runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SideBySideRow {
    /// Value size, bytes.
    pub size_bytes: u64,
    /// `set`, `overwrite` or `delete`.
    pub op: String,
    /// Head-of-line delay per run (empty where the run has no value), ms.
    pub hol_delay_ms: Vec<Option<Spread>>,
    /// Writer's time per run, ms.
    pub set_ms: Vec<Option<Spread>>,
}

/// The runs side by side, one column each.
pub fn side_by_side(runs: &[RunData]) -> SideBySide {
    let groups: Vec<_> = runs.iter().map(RunData::groups).collect();
    let keys: BTreeSet<(u64, String)> = groups.iter().flat_map(|g| g.keys().cloned()).collect();
    let mut rows: Vec<SideBySideRow> = keys
        .into_iter()
        .map(|key| {
            let per_run = |hol: bool| -> Vec<Option<Spread>> {
                groups
                    .iter()
                    .map(|g| {
                        let values: Vec<f64> = g
                            .get(&key)?
                            .iter()
                            .filter_map(|w| if hol { w.hol_delay_ms } else { Some(w.set_ms) })
                            .collect();
                        Spread::of(&values)
                    })
                    .collect()
            };
            SideBySideRow {
                size_bytes: key.0,
                op: key.1.clone(),
                hol_delay_ms: per_run(true),
                set_ms: per_run(false),
            }
        })
        .collect();
    rows.sort_by(|a, b| (a.size_bytes, op_order(&a.op)).cmp(&(b.size_bytes, op_order(&b.op))));
    SideBySide {
        runs: runs.iter().map(|r| r.meta.clone()).collect(),
        rows,
    }
}

/// Everything one `probe compare` (or a run with `--baseline` / several `--server-bin`) finds:
/// the runs side by side (when more than two) and each candidate against the baseline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompareReport {
    /// Every run side by side, baseline first (only with more than one candidate).
    pub side_by_side: Option<SideBySide>,
    /// Each candidate against the baseline.
    pub comparisons: Vec<Comparison>,
    /// True when any comparison found a regression (exit status 1).
    pub regression: bool,
    /// True when no comparison found a regression and at least one is inconclusive (exit
    /// status 3).
    pub inconclusive: bool,
}

/// Compares every candidate with the baseline (`runs[0]`).
pub fn compare_all(runs: &[RunData], rules: Rules) -> Result<CompareReport, UsageError> {
    let Some((baseline, candidates)) = runs.split_first() else {
        return Err(UsageError::Conflict("nothing to compare".into()));
    };
    let comparisons = candidates
        .iter()
        .map(|candidate| compare(baseline, candidate, rules))
        .collect::<Result<Vec<_>, _>>()?;
    let regression = comparisons.iter().any(|c| c.verdict == Verdict::Regression);
    Ok(CompareReport {
        side_by_side: (runs.len() > 2).then(|| side_by_side(runs)),
        regression,
        inconclusive: !regression
            && comparisons
                .iter()
                .any(|c| c.verdict == Verdict::Inconclusive),
        comparisons,
    })
}

#[cfg(test)]
mod tests;
