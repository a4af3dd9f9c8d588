//! Compares runs read back from their `--out` directories: per size and operation, the
//! baseline's and candidate's head-of-line delay and SET time (median and range over the
//! repeats), the slowdown's estimate and confidence bounds, and a verdict: regression, no
//! regression (an improvement among them), or inconclusive (a possible regression, with the
//! repeats that would decide). Also the side-by-side view of several runs (one column per
//! server).
//!
//! Everything here but [`runs`] is pure: runs in, findings out, so the rules are unit-tested on
//! synthetic runs. The rule for one metric is in [`verdict`], its statistics in [`stats`],
//! rendering (table, markdown, JSON) in [`render`].
//!
//! # Head-of-line delay under one probe interval
//! A write no probe overlapped has no `hol_delay_ms`: it held the server for less than one
//! aggregate probe interval. It is compared as such: every `hol_delay_ms` is censored at the
//! coarser run's interval ([`stats::censor`]), so such writes, and probe delays finer than the
//! probes resolve, are ties at "under one interval" rather than missing.
//!
//! # Runs made differently
//! Differences between the runs' options are warnings above the verdict, and every metric is
//! still judged (a coarser probe rate only raises `hol_delay_ms`'s resolution), except one:
//! runs recorded by different probe engines measured `hol_delay_ms` differently (engine 1 waited
//! for each probe's reply before sending the next, so under load it also counted the probes'
//! own backlog), so their `hol_delay_ms` rows are [`Verdict::NotComparable`], the rows are
//! judged on `set_ms` alone, and the verdict is at best inconclusive (what other clients saw
//! is not judged). Likewise a `hol_delay_ms` row whose every value in both runs is under a
//! probe interval coarser than `--min-diff-ms` is inconclusive, not "no regression".

pub mod render;
pub mod runs;
pub mod stats;
pub mod verdict;

use std::collections::BTreeSet;

use serde::Serialize;

pub use runs::{
    GroupKey, PROBE_ENGINE_BEFORE_KEY, RepeatsRead, RunData, RunMeta, WriteSample, load_run,
    value_label,
};
pub use stats::{
    Interval, MannWhitney, Scale, Spread, bound_rank, censor, mann_whitney, repeats_for_bound,
    repeats_for_separation, repeats_to_reach, shift_interval, smallest_one_sided_p,
};
pub use verdict::{
    DEFAULT_ALPHA, DEFAULT_MIN_DIFF_MS, DEFAULT_POSSIBLE_ALPHA, DEFAULT_THRESHOLD,
    MetricComparison, Rules, Verdict, combine, compare_metric, not_comparable,
};

use crate::error::UsageError;
use crate::units::format_size;

/// One (size, op) of a comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RowComparison {
    /// Value size, bytes.
    pub size_bytes: u64,
    /// A collection's kind and elements (`hash 300k`); empty for a string.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub value: String,
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
    /// The (size, op)s the baseline made and the candidate only failed (`set 8M: OOM ...`):
    /// each makes the verdict a regression, as the candidate can no longer do it.
    pub candidate_failed: Vec<String>,
    /// The (size, op)s the baseline made and a candidate that did not complete (interrupted,
    /// failed or still running) never reached: each makes the verdict at least inconclusive.
    pub candidate_unmeasured: Vec<String>,
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
    // The repeats as the rows hold them, whatever run.json planned.
    let with_repeats = |run: &RunData| RunMeta {
        repeats_read: run.repeats_read(),
        ..run.meta.clone()
    };
    // A run against itself can only say no change: in a CI job, the candidate's path pointing
    // at the baseline's (it passed the gate with a warning; the hostile trial).
    let id = &baseline.meta.run_id;
    if *id == candidate.meta.run_id && baseline.writes == candidate.writes {
        return Err(UsageError::Conflict(format!(
            "BASELINE and CANDIDATE hold the same run ({id}) with the same figures: a run compared with itself can only say no change (does the candidate's path point at the baseline's run?)"
        )));
    }
    let (base_meta, cand_meta) = (with_repeats(baseline), with_repeats(candidate));
    let mut warnings = option_warnings(&base_meta, &cand_meta);
    warnings.extend(same_run_warning(baseline, candidate));
    warnings.extend(baseline.warnings.iter().cloned());
    warnings.extend(candidate.warnings.iter().cloned());

    // What the baseline made and the candidate did not, in three parts: failed there (a
    // regression), not reached by a candidate that stopped early (not known), or a plan of
    // other sizes (warned about). Of a string run only the sizes its run.json planned count as
    // not reached (a collection run plans element counts, so any of its rows may have been).
    let stopped_early = candidate.meta.status != "complete";
    let planned = &candidate.meta.planned_sizes_bytes;
    let planned_values = &candidate.meta.planned_values;
    // Whether the candidate's plan held this (size, value): a row of another value type (a
    // string's against a hash run's) was never to be reached, so it is not "not reached".
    let in_plan = |key: &GroupKey| {
        if key.1.is_empty() {
            planned_values.is_empty() && (planned.is_empty() || planned.contains(&key.0))
        } else {
            planned_values.contains(&key.1) || (planned_values.is_empty() && planned.is_empty())
        }
    };
    let mut missing: Vec<&GroupKey> = base_groups
        .keys()
        .filter(|k| !cand_groups.contains_key(*k))
        .collect();
    missing.sort_by(|a, b| (a.0, op_order(&a.2)).cmp(&(b.0, op_order(&b.2))));
    let (mut candidate_failed, mut unmeasured, mut base_only) =
        (Vec::new(), Vec::new(), Vec::new());
    for key in missing {
        if let Some(error) = candidate.failed_groups.get(key) {
            let error = error.lines().next().unwrap_or_default();
            candidate_failed.push(format!("{}: {error}", describe_keys(&[key])));
        } else if stopped_early && in_plan(key) {
            unmeasured.push(key);
        } else {
            base_only.push(key);
        }
    }
    let candidate_unmeasured: Vec<String> = if unmeasured.is_empty() {
        vec![]
    } else {
        vec![describe_keys(&unmeasured)]
    };
    let base_only = describe_keys(&base_only);
    let cand_only = describe_keys(
        &cand_groups
            .keys()
            .filter(|k| !base_groups.contains_key(*k))
            .collect::<Vec<_>>(),
    );
    let shared: Vec<&GroupKey> = base_groups
        .keys()
        .filter(|k| cand_groups.contains_key(*k))
        .collect();
    // Nothing in common is bad input, unless what the baseline made is what the candidate
    // failed or never reached: that is the verdict.
    if shared.is_empty() && candidate_failed.is_empty() && candidate_unmeasured.is_empty() {
        return Err(UsageError::Conflict(format!(
            "the runs share no size and operation: {} has {}; {} has {}",
            baseline.meta.dir.display(),
            describe_made(base_groups.keys()),
            candidate.meta.dir.display(),
            describe_made(cand_groups.keys())
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
    // hol_delay_ms rows only a faster probe rate can decide.
    let mut unresolved = 0;
    for key in shared {
        let (base, cand) = (&base_groups[key], &cand_groups[key]);
        // Head-of-line delay censored at the coarser run's probe interval: a write no probe
        // overlapped counts as "under one interval", not as missing.
        let hol = |group: &[&WriteSample]| -> Vec<f64> {
            let values: Vec<Option<f64>> = group.iter().map(|w| w.hol_delay_ms).collect();
            censor(&values, interval_ms)
        };
        let set_ms =
            |group: &[&WriteSample]| -> Vec<f64> { group.iter().map(|w| w.set_ms).collect() };
        let hol_delay = if hol_comparable {
            let (base_hol, cand_hol) = (hol(base), hol(cand));
            let mut judged = compare_metric(
                "hol_delay_ms",
                &base_hol,
                &cand_hol,
                rules,
                hol_min_diff,
                Some(interval_ms),
            );
            // Every value of both runs under a probe interval coarser than the difference
            // that counts: ties that say nothing of it (at 1 probe a second a doubled delay
            // read "<500 ms" twice, no regression; the hostile trial).
            let all_under = |values: &[f64]| values.iter().all(|&v| v <= interval_ms);
            if interval_ms > rules.min_diff_ms
                && all_under(&base_hol)
                && all_under(&cand_hol)
                && judged.verdict == Verdict::NoChange
            {
                unresolved += 1;
                judged.verdict = Verdict::Inconclusive;
                judged.reason = format!(
                    "every value under one probe interval ({interval_ms:.2} ms), coarser than --min-diff-ms {}: a faster --probe-rate resolves it",
                    rules.min_diff_ms
                );
            }
            judged
        } else {
            not_comparable(
                "hol_delay_ms",
                Spread::of_censored(&hol(base), interval_ms),
                Spread::of_censored(&hol(cand), interval_ms),
                hol_min_diff,
                format!("probe engines {base_engine} and {cand_engine}"),
            )
        };
        let set = compare_metric(
            "set_ms",
            &set_ms(base),
            &set_ms(cand),
            rules,
            rules.min_diff_ms,
            None,
        );
        let verdict = combine(&[hol_delay.verdict, set.verdict]);
        let repeats_needed = hol_delay.repeats_needed.max(set.repeats_needed);
        rows.push(RowComparison {
            size_bytes: key.0,
            value: key.1.clone(),
            op: key.2.clone(),
            hol_delay,
            set,
            verdict,
            repeats_needed,
        });
    }
    rows.sort_by(|a, b| (a.size_bytes, op_order(&a.op)).cmp(&(b.size_bytes, op_order(&b.op))));
    // Rows no number of repeats decides: the probes were too sparse (the verdict line's
    // "record with --repeat N" would not help them; the review).
    if unresolved > 0 {
        warnings.push(format!(
            "{unresolved} row(s) have every hol_delay_ms under one probe interval ({interval_ms:.2} ms), coarser than --min-diff-ms {}: record with {:.0} probes a second or more in all (--probe-rate x --probe-threads) to resolve them",
            rules.min_diff_ms,
            1e3 / rules.min_diff_ms
        ));
    }
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
    let verdict = if regressions > 0 || !candidate_failed.is_empty() {
        Verdict::Regression
    } else if inconclusive > 0 || !candidate_unmeasured.is_empty() || !hol_comparable {
        // hol_delay_ms not judged (different probe engines): what other clients saw is not
        // known to be no worse, and a gate must not pass on set_ms alone.
        Verdict::Inconclusive
    } else if improvements > 0 {
        Verdict::Improvement
    } else {
        Verdict::NoChange
    };
    Ok(Comparison {
        baseline: base_meta,
        candidate: cand_meta,
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
        verdict,
        candidate_failed,
        candidate_unmeasured,
    })
}

/// Rows of one size in the order a run makes them: set, overwrite, delete, then anything else.
pub fn op_order(op: &str) -> (u8, &str) {
    let rank = match op {
        "set" | "build" => 0,
        "overwrite" => 1,
        "read" => 2,
        "delete" => 3,
        "unlink" => 4,
        "expire" => 5,
        "evict" => 6,
        _ => 7,
    };
    (rank, op)
}

/// What a run made, as [`describe_keys`] says it, or "no successful writes".
pub fn describe_made<'a>(keys: impl IntoIterator<Item = &'a GroupKey>) -> String {
    let keys: Vec<&GroupKey> = keys.into_iter().collect();
    if keys.is_empty() {
        return "no successful writes".into();
    }
    describe_keys(&keys)
}

/// `set 1M,2M; delete 1M,2M`: the sizes of each operation, operations in run order (a
/// collection by its kind and elements: `delete hash 300k`).
pub fn describe_keys(keys: &[&GroupKey]) -> String {
    let mut ops: Vec<&str> = keys.iter().map(|(_, _, op)| op.as_str()).collect();
    ops.sort_by_key(|op| op_order(op));
    ops.dedup();
    ops.iter()
        .map(|op| {
            let sizes: Vec<String> = keys
                .iter()
                .filter(|(_, _, o)| o == op)
                .map(|(size, value, _)| size_label(*size, value))
                .collect();
            format!("{op} {}", sizes.join(","))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// A row's value for people: a string's bytes (`64M`), a collection's kind and elements.
pub fn size_label(size_bytes: u64, value: &str) -> String {
    if value.is_empty() {
        format_size(size_bytes)
    } else {
        value.to_string()
    }
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
        "analysis",
        format!("version {}", base.analysis_version),
        format!("version {}", cand.analysis_version),
        ": version 1 (before 2026-12-05) counted a probe meant to go out before a write's start from its intended send, so a write just after another client's stall could read that stall's length there; reanalyse that run (examples/reanalyze.rs) to compare like with like",
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
        "--same-connection",
        show(base.same_connection.map(|b| b.to_string())),
        show(cand.same_connection.map(|b| b.to_string())),
        if base.same_connection.is_none() || cand.same_connection.is_none() {
            ": a run recorded before 2026-12-05 (unknown) sent every SET on one connection, so a SET larger than the one before may have waited for the server to grow the query buffer it kept for that one (a copy in one block on jemalloc builds); later runs open a new connection first unless --same-connection"
        } else {
            ": with it a SET larger than the one before may wait for the server to grow the query buffer it kept for that one (a copy in one block on jemalloc builds)"
        },
    );
    differ(
        "repeats",
        show(base.repeats_read.describe()),
        show(cand.repeats_read.describe()),
        " (successful writes per size and op, as the rows hold them)",
    );
    let sizes = |m: &RunMeta| {
        let set: BTreeSet<u64> = m.planned_sizes_bytes.iter().copied().collect();
        set.iter()
            .map(|&s| format_size(s))
            .collect::<Vec<_>>()
            .join(",")
    };
    // A collection run plans elements, not sizes: its rows say what it has (only in the
    // baseline / the candidate).
    if !base.planned_sizes_bytes.is_empty() && !cand.planned_sizes_bytes.is_empty() {
        differ(
            "sizes",
            sizes(base),
            sizes(cand),
            ": only the sizes both have are compared",
        );
    }
    if base.hostname != cand.hostname || base.cpus != cand.cpus {
        warnings.push(format!(
            "the runs were made on different hosts ({} with {} cpus, {} with {} cpus): host speed is part of every figure",
            show(base.hostname.clone()),
            show(base.cpus.map(|n| n.to_string())),
            show(cand.hostname.clone()),
            show(cand.cpus.map(|n| n.to_string())),
        ));
    } else {
        // Cloud machines share one name ("vm"): their CPU model or kernel still tells them
        // apart (what only one run records says nothing).
        let told_apart = [
            ("CPU ", &base.cpu_model, &cand.cpu_model),
            // "Linux (Debian GNU/Linux 12) (kernel 6.18.44)" names itself.
            ("", &base.os, &cand.os),
        ]
        .into_iter()
        .find(|(_, b, c)| b.is_some() && c.is_some() && b != c);
        if let Some((what, b, c)) = told_apart {
            warnings.push(format!(
                "the runs were made on different hosts of one name ({what}{} against {what}{}): host speed is part of every figure",
                show(b.clone()),
                show(c.clone()),
            ));
        }
    }
    if base.tool_version != cand.tool_version {
        warnings.push(format!(
            "made by different holprobe versions ({} and {})",
            base.tool_version, cand.tool_version
        ));
    }
    warnings
}

/// Two directories of one run with different figures: one copy was edited or reanalysed (the
/// same figures are refused before: [`compare`]).
fn same_run_warning(baseline: &RunData, candidate: &RunData) -> Option<String> {
    let id = &baseline.meta.run_id;
    (*id == candidate.meta.run_id).then(|| {
        format!("both directories hold the same run ({id}), with different figures: one copy was edited or reanalysed")
    })
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
    /// A collection's kind and elements (`hash 300k`); empty for a string.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub value: String,
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
    let keys: BTreeSet<GroupKey> = groups.iter().flat_map(|g| g.keys().cloned()).collect();
    let mut rows: Vec<SideBySideRow> = keys
        .into_iter()
        .map(|key| {
            let per_run = |hol: bool| -> Vec<Option<Spread>> {
                groups
                    .iter()
                    .zip(runs)
                    .map(|(g, run)| {
                        let group = g.get(&key)?;
                        if !hol {
                            let values: Vec<f64> = group.iter().map(|w| w.set_ms).collect();
                            return Spread::of(&values);
                        }
                        // Each run's own resolution, as in its compare.
                        let at = run.meta.probe_interval_ms().unwrap_or(0.0);
                        let values: Vec<Option<f64>> =
                            group.iter().map(|w| w.hol_delay_ms).collect();
                        Spread::of_censored(&censor(&values, at), at)
                    })
                    .collect()
            };
            SideBySideRow {
                size_bytes: key.0,
                value: key.1.clone(),
                op: key.2.clone(),
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
