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
    /// upper bound at or below 1/this). [default: 1.2]
    #[arg(long, value_name = "RATIO", allow_negative_numbers = true)]
    pub threshold: Option<String>,

    /// One-sided error of a regression call: a regression needs the (1 - P) lower confidence
    /// bounds of the slowdown past --threshold and --min-diff-ms. With 5 vs 5 repeats a bound
    /// exists from 1/252 = 0.004 up. [default: 0.01]
    #[arg(long, value_name = "P", allow_negative_numbers = true)]
    pub alpha: Option<String>,

    /// Smallest difference that counts, ms: a regression needs the lower confidence bound of
    /// candidate - baseline at or past it (for hol_delay_ms at least one probe interval, the
    /// resolution of a probe). [default: 1]
    #[arg(long, value_name = "MS", allow_negative_numbers = true)]
    pub min_diff_ms: Option<String>,

    /// A metric not shown to regress at --alpha is inconclusive (a possible regression, exit
    /// 3) when its (1 - P) lower bounds are past the thresholds; else no regression. From
    /// --alpha (never inconclusive, unless the repeats are too few) to 0.5 (the estimate
    /// itself decides). [default: 0.1, or --alpha when that is larger]
    #[arg(long, value_name = "P", allow_negative_numbers = true)]
    pub possible_alpha: Option<String>,
}

impl RulesArgs {
    /// The first of these flags given, if any (they mean nothing without a compare).
    pub fn first_given(&self) -> Option<&'static str> {
        [
            ("--threshold", self.threshold.is_some()),
            ("--alpha", self.alpha.is_some()),
            ("--min-diff-ms", self.min_diff_ms.is_some()),
            ("--possible-alpha", self.possible_alpha.is_some()),
        ]
        .into_iter()
        .find_map(|(flag, given)| given.then_some(flag))
    }

    /// Checks the values (each error quotes the value as given).
    pub fn to_rules(&self) -> Result<Rules, UsageError> {
        let number = |flag: &'static str,
                      text: &Option<String>,
                      default: f64,
                      ok: &dyn Fn(f64) -> bool,
                      expected: &str| {
            let Some(text) = text else {
                return Ok(default);
            };
            match text.trim().parse::<f64>() {
                Ok(value) if value.is_finite() && ok(value) => Ok(value),
                _ => Err(UsageError::invalid(flag, text, expected.to_string())),
            }
        };
        let threshold = number(
            "--threshold",
            &self.threshold,
            DEFAULT_THRESHOLD,
            &|v| v > 1.0 && v <= 100.0,
            "expected a ratio above 1 and at most 100, such as 1.2 (20% slower)",
        )?;
        let alpha = number(
            "--alpha",
            &self.alpha,
            DEFAULT_ALPHA,
            &|v| v > 0.0 && v <= 0.5,
            "expected a one-sided error above 0 and at most 0.5, such as 0.01",
        )?;
        let min_diff_ms = number(
            "--min-diff-ms",
            &self.min_diff_ms,
            DEFAULT_MIN_DIFF_MS,
            &|v| (0.0..=86_400_000.0).contains(&v),
            "expected a number of milliseconds, 0 or more (at most a day)",
        )?;
        // Not given: the default, raised to --alpha (--alpha 0.2 alone was refused for a
        // --possible-alpha of 0.1 the user never gave: the hostile trial).
        let possible_alpha = match &self.possible_alpha {
            None => DEFAULT_POSSIBLE_ALPHA.max(alpha),
            given => number(
                "--possible-alpha",
                given,
                DEFAULT_POSSIBLE_ALPHA,
                &|v| v >= alpha && v <= 0.5,
                &format!("expected a one-sided error from --alpha ({alpha}) to 0.5"),
            )?,
        };
        Ok(Rules {
            threshold,
            alpha,
            min_diff_ms,
            possible_alpha,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(alpha: Option<&str>, possible: Option<&str>) -> Result<Rules, UsageError> {
        RulesArgs {
            threshold: None,
            alpha: alpha.map(str::to_string),
            min_diff_ms: None,
            possible_alpha: possible.map(str::to_string),
        }
        .to_rules()
    }

    /// --alpha 0.2 alone was refused for the default --possible-alpha 0.1, a value the user
    /// never gave (the hostile trial): the default follows --alpha up.
    #[test]
    fn the_default_possible_alpha_follows_alpha_up() {
        assert_eq!(
            rules(None, None).unwrap().possible_alpha,
            DEFAULT_POSSIBLE_ALPHA
        );
        assert_eq!(rules(Some("0.2"), None).unwrap().possible_alpha, 0.2);
        let err = rules(Some("0.3"), Some("0.2")).unwrap_err().to_string();
        assert!(err.contains("'0.2' for --possible-alpha"), "{err}");
        let err = rules(Some("1e300"), None).unwrap_err().to_string();
        assert!(err.contains("'1e300' for --alpha"), "{err}");
    }
}
