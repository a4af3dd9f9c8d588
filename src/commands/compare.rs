//! `probe compare BASELINE CANDIDATE...`: judges runs read back from their `--out`
//! directories. Exit 0 = no regression, 1 = a regression, 2 = bad input, 3 = inconclusive.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use super::Output;
use crate::compare::render::{Format, render};
use crate::compare::{
    DEFAULT_ALPHA, DEFAULT_MIN_DIFF_MS, DEFAULT_THRESHOLD, Rules, compare_all, load_run,
};
use crate::error::{EXIT_FAILURE, EXIT_INCONCLUSIVE, EXIT_OK, UsageError};

/// When a difference counts: shared by `probe compare` and `probe --baseline`.
#[derive(Debug, Clone, Args)]
pub struct RulesArgs {
    /// A regression needs the candidate's median to be at least this many times the
    /// baseline's (and an improvement at most 1/this).
    #[arg(long, value_name = "RATIO", default_value_t = DEFAULT_THRESHOLD, allow_negative_numbers = true)]
    pub threshold: f64,

    /// Largest one-sided Mann-Whitney p-value over the repeats that counts as beyond the noise.
    /// With 5 vs 5 repeats the smallest possible p is 1/252 = 0.004.
    #[arg(long, value_name = "P", default_value_t = DEFAULT_ALPHA, allow_negative_numbers = true)]
    pub alpha: f64,

    /// Smallest difference of medians that counts, ms (for hol_delay_ms at least one probe
    /// interval, the resolution of a probe).
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_MIN_DIFF_MS, allow_negative_numbers = true)]
    pub min_diff_ms: f64,
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
                "expected a p-value above 0 and at most 0.5, such as 0.01",
            ));
        }
        if !self.min_diff_ms.is_finite() || self.min_diff_ms < 0.0 {
            return Err(UsageError::invalid(
                "--min-diff-ms",
                self.min_diff_ms,
                "expected a number of milliseconds, 0 or more",
            ));
        }
        Ok(Rules {
            threshold: self.threshold,
            alpha: self.alpha,
            min_diff_ms: self.min_diff_ms,
        })
    }
}

/// Compare runs: per size and operation, baseline vs candidate head-of-line delay and SET time
/// over the repeats, with a verdict per row: regression, improvement, no change, or
/// inconclusive (too few repeats for the test ever to reach --alpha, or a difference past
/// --threshold hidden in the spread of the repeats; it says how many repeats would decide).
///
/// Exit status: 0 no regression (improvements and unchanged rows only); 1 at least one row
/// regressed; 2 bad input; 3 no regression found but some row inconclusive.
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
