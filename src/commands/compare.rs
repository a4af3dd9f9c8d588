//! `probe compare BASELINE CANDIDATE...`: judges runs read back from their `--out`
//! directories. Exit 0 = no regression, 1 = a regression, 2 = bad input, 3 = inconclusive.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use super::Output;
use crate::compare::render::{Format, render};
use crate::compare::{
    DEFAULT_ALPHA, DEFAULT_MIN_DIFF_MS, DEFAULT_POSSIBLE_ALPHA, DEFAULT_THRESHOLD, Rules,
    compare_all, load_run,
};
use crate::error::{EXIT_FAILURE, EXIT_INCONCLUSIVE, EXIT_OK, UsageError};

/// When a difference counts: shared by `probe compare` and `probe --baseline`.
#[derive(Debug, Clone, Args)]
pub struct RulesArgs {
    /// "Worse" means at least this many times the baseline: a regression needs the lower
    /// confidence bound of the ratio candidate / baseline at or past it (an improvement: the
    /// upper bound at or below 1/this).
    #[arg(long, value_name = "RATIO", default_value_t = DEFAULT_THRESHOLD, allow_negative_numbers = true)]
    pub threshold: f64,

    /// One-sided error of a regression call: a regression needs the (1 - P) lower confidence
    /// bounds of the slowdown past --threshold and --min-diff-ms. With 5 vs 5 repeats a bound
    /// exists from 1/252 = 0.004 up.
    #[arg(long, value_name = "P", default_value_t = DEFAULT_ALPHA, allow_negative_numbers = true)]
    pub alpha: f64,

    /// Smallest difference that counts, ms: a regression needs the lower confidence bound of
    /// candidate - baseline at or past it (for hol_delay_ms at least one probe interval, the
    /// resolution of a probe).
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_MIN_DIFF_MS, allow_negative_numbers = true)]
    pub min_diff_ms: f64,

    /// A metric not shown to regress at --alpha is inconclusive (a possible regression, exit
    /// 3) when its (1 - P) lower bounds are past the thresholds; else no regression. From
    /// --alpha (never inconclusive, unless the repeats are too few) to 0.5 (the estimate
    /// itself decides).
    #[arg(long, value_name = "P", default_value_t = DEFAULT_POSSIBLE_ALPHA, allow_negative_numbers = true)]
    pub possible_alpha: f64,
}

impl RulesArgs {
    /// Checks the values.
    pub fn to_rules(&self) -> Result<Rules, UsageError> {
        if !self.threshold.is_finite() || self.threshold <= 1.0 || self.threshold > 100.0 {
            return Err(UsageError::invalid(
                "--threshold",
                self.threshold,
                "expected a ratio above 1, such as 1.2 (20% slower)",
            ));
        }
        if !self.alpha.is_finite() || self.alpha <= 0.0 || self.alpha > 0.5 {
            return Err(UsageError::invalid(
                "--alpha",
                self.alpha,
                "expected a one-sided error above 0 and at most 0.5, such as 0.01",
            ));
        }
        if !self.min_diff_ms.is_finite() || self.min_diff_ms < 0.0 {
            return Err(UsageError::invalid(
                "--min-diff-ms",
                self.min_diff_ms,
                "expected a number of milliseconds, 0 or more",
            ));
        }
        if !self.possible_alpha.is_finite()
            || self.possible_alpha < self.alpha
            || self.possible_alpha > 0.5
        {
            return Err(UsageError::invalid(
                "--possible-alpha",
                self.possible_alpha,
                format!(
                    "expected a one-sided error from --alpha ({}) to 0.5, such as 0.1",
                    self.alpha
                ),
            ));
        }
        Ok(Rules {
            threshold: self.threshold,
            alpha: self.alpha,
            min_diff_ms: self.min_diff_ms,
            possible_alpha: self.possible_alpha,
        })
    }
}

/// Compare runs: per size and operation, baseline vs candidate head-of-line delay and SET time
/// over the repeats, with a verdict per row from the one-sided question "is the candidate
/// worse by at least --threshold and --min-diff-ms?": regression when the (1 - --alpha) lower
/// confidence bounds of the slowdown are past both; inconclusive (a possible regression) when
/// only the (1 - --possible-alpha) ones are, with the repeats that would decide; else no
/// regression (improvements included).
///
/// Exit status: 0 no regression; 1 at least one row regressed; 2 bad input; 3 no regression
/// found but some row inconclusive.
#[derive(Debug, Clone, Args)]
pub struct CompareArgs {
    /// The reference run: a `probe --out` directory.
    #[arg(value_name = "BASELINE")]
    pub baseline: PathBuf,

    /// The run to judge against it (several: a side-by-side table, then each against the
    /// baseline).
    #[arg(value_name = "CANDIDATE", required = true)]
    pub candidates: Vec<PathBuf>,

    #[command(flatten)]
    pub rules: RulesArgs,

    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// Runs `probe compare`; returns the exit status.
pub fn run(args: &CompareArgs, out: &mut Output) -> Result<i32> {
    let rules = args.rules.to_rules()?;
    let mut runs = vec![load_run("BASELINE", &args.baseline)?];
    for dir in &args.candidates {
        runs.push(load_run("CANDIDATE", dir)?);
    }
    let report = compare_all(&runs, rules)?;
    for line in render(&report, args.format).lines() {
        out.line(line);
    }
    Ok(exit_status(&report))
}

/// 1 on a regression, else 3 when some row is inconclusive, else 0.
pub fn exit_status(report: &crate::compare::CompareReport) -> i32 {
    if report.regression {
        EXIT_FAILURE
    } else if report.inconclusive {
        EXIT_INCONCLUSIVE
    } else {
        EXIT_OK
    }
}
