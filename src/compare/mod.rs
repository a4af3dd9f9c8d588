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
//! own backlog), so their `hol_delay_ms` rows are [`Verdict::NotComparable`] and the rows are
//! judged on `set_ms` alone.

pub mod render;
pub mod runs;
pub mod stats;
pub mod verdict;

use std::collections::BTreeSet;

use serde::Serialize;

pub use runs::{PROBE_ENGINE_BEFORE_KEY, RepeatsRead, RunData, RunMeta, WriteSample, load_run};
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
    // The repeats as the rows hold them, whatever run.json planned.
    let with_repeats = |run: &RunData| RunMeta {
        repeats_read: run.repeats_read(),
        ..run.meta.clone()
    };
    let (base_meta, cand_meta) = (with_repeats(baseline), with_repeats(candidate));
    let mut warnings = option_warnings(&base_meta, &cand_meta);
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
        // Head-of-line delay censored at the coarser run's probe interval: a write no probe
        // overlapped counts as "under one interval", not as missing.
        let hol = |group: &[&WriteSample]| -> Vec<f64> {
            let values: Vec<Option<f64>> = group.iter().map(|w| w.hol_delay_ms).collect();
            censor(&values, interval_ms)
        };
        let set_ms =
            |group: &[&WriteSample]| -> Vec<f64> { group.iter().map(|w| w.set_ms).collect() };
        let hol_delay = if hol_comparable {
            compare_metric(
                "hol_delay_ms",
                &hol(base),
                &hol(cand),
                rules,
                hol_min_diff,
                Some(interval_ms),
            )
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
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn meta(run_id: &str) -> RunMeta {
        RunMeta {
            dir: PathBuf::from(run_id),
            run_id: run_id.into(),
            status: "complete".into(),
            tool_version: "0.1.0".into(),
            server_flavor: "redis".into(),
            server_version: "7.0.15".into(),
            server_binary: None,
            server_appendonly: Some("no".into()),
            hostname: Some("vm".into()),
            cpus: Some(2),
            probe_threads: Some(2),
            probe_rate: Some(1000.0),
            probe_cmd: Some("ping".into()),
            stall_threshold_us: Some(1000),
            repeat: Some(5),
            gap_ms: Some(500.0),
            overwrite: Some(false),
            keep: Some(false),
            planned_sizes_bytes: vec![64 << 20],
            started_unix_us: Some(0),
            probe_engine_version: 2,
            written_node: None,
            repeats_read: RepeatsRead::default(),
        }
    }

    /// A run with `hol` and `set` values per (size, op).
    fn run(run_id: &str, rows: &[(u64, &str, &[f64], &[f64])]) -> RunData {
        let mut writes = Vec::new();
        let mut seq = 0;
        for (size, op, hol, set) in rows {
            for (h, s) in hol.iter().zip(set.iter()) {
                seq += 1;
                writes.push(WriteSample {
                    seq,
                    op: op.to_string(),
                    size_bytes: *size,
                    set_ms: *s,
                    hol_delay_ms: Some(*h),
                });
            }
        }
        RunData {
            meta: meta(run_id),
            writes,
            failed_writes: vec![],
            warnings: vec![],
        }
    }

    const M64: u64 = 64 << 20;

    #[test]
    fn a_clear_slowdown_is_a_regression() {
        let base = run(
            "a",
            &[(
                M64,
                "delete",
                &[40.0, 42.0, 41.0, 43.0, 39.0],
                &[40.0, 42.0, 41.0, 43.0, 39.0],
            )],
        );
        let cand = run(
            "b",
            &[(
                M64,
                "delete",
                &[55.0, 52.0, 58.0, 51.0, 60.0],
                &[40.5, 42.0, 41.0, 43.0, 39.5],
            )],
        );
        let c = compare(&base, &cand, Rules::default()).unwrap();
        assert_eq!(c.verdict, Verdict::Regression);
        let row = &c.rows[0];
        assert_eq!(row.hol_delay.verdict, Verdict::Regression);
        assert_eq!(row.set.verdict, Verdict::NoChange);
        assert!((row.hol_delay.p_slower.unwrap() - 1.0 / 252.0).abs() < 1e-12);
        assert!((row.hol_delay.ratio.unwrap() - 55.0 / 41.0).abs() < 1e-12);
        // The same runs swapped: an improvement, not a regression.
        let back = compare(&cand, &base, Rules::default()).unwrap();
        assert_eq!(back.verdict, Verdict::Improvement);
        assert_eq!(back.regressions, 0);
    }

    #[test]
    fn across_probe_engines_hol_delay_is_not_judged_but_set_ms_is() {
        let quick: &[f64] = &[40.0, 42.0, 41.0, 43.0, 39.0];
        let slow: &[f64] = &[80.0, 82.0, 81.0, 83.0, 79.0];
        // The candidate's hol_delay_ms is twice the baseline's, separated: a regression within
        // one engine.
        let mut old = run(
            "a",
            &[(M64, "set", quick, quick), (M64, "delete", quick, quick)],
        );
        old.meta.probe_engine_version = PROBE_ENGINE_BEFORE_KEY;
        let new = run(
            "b",
            &[(M64, "set", slow, quick), (M64, "delete", slow, slow)],
        );
        let c = compare(&old, &new, Rules::default()).unwrap();
        let text = c.warnings.join("\n");
        assert!(
            text.contains("differ in probe engine (baseline version 1, candidate version 2)"),
            "{text}"
        );
        assert!(
            text.contains("hol_delay_ms") && text.contains("not comparable"),
            "{text}"
        );
        assert_eq!(c.not_comparable_metrics, vec!["hol_delay_ms"]);
        for row in &c.rows {
            let hol = &row.hol_delay;
            assert_eq!(hol.verdict, Verdict::NotComparable, "{hol:?}");
            assert_eq!((hol.ratio, hol.diff_ms, hol.p_slower), (None, None, None));
            assert_eq!(hol.reason, "probe engines 1 and 2");
            // What each run measured is still shown.
            assert_eq!(hol.baseline_ms.unwrap().median, 41.0);
            assert_eq!(hol.candidate_ms.unwrap().median, 81.0);
        }
        // set_ms is judged as before: unchanged for set, a regression for delete.
        assert_eq!(c.rows[0].set.verdict, Verdict::NoChange);
        assert_eq!(c.rows[0].verdict, Verdict::NoChange);
        assert_eq!(c.rows[1].set.verdict, Verdict::Regression);
        assert_eq!(c.rows[1].verdict, Verdict::Regression);
        assert_eq!((c.regressions, c.verdict), (1, Verdict::Regression));

        // The same figures within one engine: hol_delay_ms regresses, and no engine warning.
        let mut same = old.clone();
        same.meta.probe_engine_version = 2;
        let c = compare(&same, &new, Rules::default()).unwrap();
        assert!(
            !c.warnings.iter().any(|w| w.contains("probe engine")),
            "{:?}",
            c.warnings
        );
        assert!(c.not_comparable_metrics.is_empty());
        assert_eq!(c.rows[0].hol_delay.verdict, Verdict::Regression);
        assert_eq!(c.regressions, 2);
        // A row with nothing comparable is not "no change".
        assert_eq!(
            combine(&[Verdict::NotComparable, Verdict::NotComparable]),
            Verdict::NotComparable
        );
    }

    /// A write no probe overlapped counts as "under one probe interval" (0.5 ms at 2 x
    /// 1000/s): short deletes on both sides are the same figure, and a delete that became long
    /// enough for the probes to see is judged against them, not "not comparable".
    #[test]
    fn a_write_no_probe_overlapped_counts_as_under_one_probe_interval() {
        let set: &[f64] = &[0.1, 0.12, 0.11, 0.1, 0.09];
        let mut base = run("a", &[(1 << 20, "delete", &[0.1; 5], set)]);
        let mut cand = run("b", &[(1 << 20, "delete", &[0.3; 5], set)]);
        for w in base.writes.iter_mut().chain(cand.writes.iter_mut()) {
            if w.seq > 2 {
                w.hol_delay_ms = None;
            }
        }
        let c = compare(&base, &cand, Rules::default()).unwrap();
        let hol = &c.rows[0].hol_delay;
        assert_eq!(hol.verdict, Verdict::NoChange, "{hol:?}");
        let (b, k) = (hol.baseline_ms.unwrap(), hol.candidate_ms.unwrap());
        assert_eq!((b.n, k.n), (5, 5));
        assert_eq!((b.median, b.censored_at_ms), (0.5, Some(0.5)));
        assert_eq!(hol.ratio_ci.unwrap().estimate, 1.0);
        assert_eq!(
            (c.rows[0].verdict, c.verdict),
            (Verdict::NoChange, Verdict::NoChange)
        );

        // None of the baseline's deletes had a probe inside; the candidate's take 3 ms.
        for w in base.writes.iter_mut() {
            w.hol_delay_ms = None;
        }
        for (w, v) in cand.writes.iter_mut().zip([3.0, 3.2, 2.9, 3.1, 3.3]) {
            w.hol_delay_ms = Some(v);
        }
        let c = compare(&base, &cand, Rules::default()).unwrap();
        let hol = &c.rows[0].hol_delay;
        assert_eq!(hol.verdict, Verdict::Regression, "{hol:?}");
        assert_eq!(c.verdict, Verdict::Regression);
        // And the other way round, an improvement.
        let back = compare(&cand, &base, Rules::default()).unwrap();
        assert_eq!(back.rows[0].hol_delay.verdict, Verdict::Improvement);
    }

    #[test]
    fn only_shared_sizes_are_compared_with_a_warning() {
        let v: &[f64] = &[1.0, 1.1, 1.2, 1.0, 1.1];
        let base = run("a", &[(1 << 20, "set", v, v), (M64, "set", v, v)]);
        let mut cand = run("b", &[(M64, "set", v, v), (128 << 20, "set", v, v)]);
        cand.meta.probe_rate = Some(500.0);
        let c = compare(&base, &cand, Rules::default()).unwrap();
        assert_eq!(c.rows.len(), 1);
        assert_eq!(c.rows[0].size_bytes, M64);
        let text = c.warnings.join("\n");
        assert!(
            text.contains("only in the baseline (not compared): set 1M"),
            "{text}"
        );
        assert!(
            text.contains("only in the candidate (not compared): set 128M"),
            "{text}"
        );
        assert!(text.contains("differ in probe rate"), "{text}");
        // The coarser probe interval (1 ms at 2 x 500/s) sets the hol resolution.
        assert_eq!(c.rows[0].hol_delay.min_diff_ms, 1.0);
    }

    #[test]
    fn runs_that_share_nothing_are_an_error() {
        let v: &[f64] = &[1.0; 5];
        let base = run("a", &[(1 << 20, "set", v, v)]);
        let cand = run("b", &[(M64, "set", v, v)]);
        let err = compare(&base, &cand, Rules::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("share no size"), "{err}");
        assert!(err.contains("set 1M") && err.contains("set 64M"), "{err}");
    }

    #[test]
    fn the_same_run_twice_is_no_change() {
        let base = run(
            "a",
            &[(
                M64,
                "set",
                &[1.0, 9.0, 3.0, 4.0, 20.0],
                &[5.0, 6.0, 7.0, 8.0, 9.0],
            )],
        );
        let c = compare(&base, &base, Rules::default()).unwrap();
        assert_eq!(c.verdict, Verdict::NoChange);
        assert!(c.warnings.iter().any(|w| w.contains("same run")));
    }

    #[test]
    fn side_by_side_has_a_column_per_run_and_every_row() {
        let v: &[f64] = &[1.0, 2.0, 3.0];
        let a = run("a", &[(1 << 20, "set", v, v)]);
        let b = run("b", &[(1 << 20, "set", v, v), (M64, "set", v, v)]);
        let c = run("c", &[(M64, "set", v, v)]);
        let report = compare_all(&[a, b, c], Rules::default());
        // a and c share nothing: an error, even though b is fine.
        assert!(report.is_err());
        let v: &[f64] = &[1.0, 2.0, 3.0];
        let a = run("a", &[(1 << 20, "set", v, v), (M64, "set", v, v)]);
        let b = run("b", &[(1 << 20, "set", v, v)]);
        let c = run("c", &[(M64, "set", v, v)]);
        let report = compare_all(&[a, b, c], Rules::default()).unwrap();
        let sbs = report.side_by_side.unwrap();
        assert_eq!(sbs.runs.len(), 3);
        assert_eq!(sbs.rows.len(), 2);
        assert!(sbs.rows[0].hol_delay_ms[2].is_none());
        assert_eq!(sbs.rows[1].set_ms[2].unwrap().median, 2.0);
        assert!(!report.regression);
    }
}
