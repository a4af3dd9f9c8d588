//! `probe calibrate`'s flags: the target, probing and output sections and its own (what to
//! inject), checked into its one [`CalibratePlan`].

use std::time::Duration;

use clap::Args;

use crate::calibrate::{InjectionPlan, StallMethod};
use crate::cli::sections::output::{CalibrateOutputArgs, OutputPlan};
use crate::cli::sections::probing::CalibrateProbingArgs;
use crate::cli::sections::target::TargetArgs;
use crate::error::UsageError;
use crate::measure::target::TargetSpec;
use crate::run::RunOptions;
use crate::units::parse_duration;

/// Longest stall calibration injects.
const MAX_STALL: Duration = Duration::from_secs(10);

/// Flags of `probe calibrate`.
#[derive(Debug, Clone, Args)]
#[command(
    mut_arg("url", |a| a.help("Calibrate against an existing server: redis://[user:password@]host:port[/db] (or --host/--port). The password may instead come from REDISCLI_AUTH or --password. Without it the tool starts its own redis-server on a free loopback port and stops it afterwards")),
    mut_arg("server_bin", |a| a.help("The server binary to start when no --url is given [default: redis-server from PATH]; one only")),
    mut_arg("server_arg", |a| a.help("An extra setting for the started server, \"NAME VALUE\" (repeatable), e.g. --server-arg \"maxmemory 2gb\""))
)]
pub struct CalibrateArgs {
    #[command(flatten)]
    pub target: TargetArgs,

    /// Stall lengths to inject, comma-separated; a plain number is milliseconds, or give a
    /// unit (250us, 20ms, 0.5s).
    #[arg(
        long,
        value_name = "LIST",
        default_value = "5,20,50,100,250",
        allow_hyphen_values = true
    )]
    pub stalls: String,

    /// Injections per length (interleaved across the lengths).
    #[arg(
        long,
        value_name = "N",
        default_value = "3",
        allow_negative_numbers = true
    )]
    pub times: String,

    /// How to inject [default: debug-sleep where DEBUG is allowed, else lua-time, else
    /// lua-loop where TIME stands still inside scripts].
    #[arg(long, value_enum)]
    pub method: Option<StallMethod>,

    /// Quiet probing before and after each injection.
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "DURATION",
        default_value = "300ms"
    )]
    pub gap: String,

    #[command(flatten)]
    pub probing: CalibrateProbingArgs,

    #[command(flatten)]
    pub output: CalibrateOutputArgs,
}

/// Calibrate's plan: its flags, checked, before anything connects.
pub struct CalibratePlan {
    /// The server (or the one to start).
    pub target: TargetSpec,
    /// The probe run's options.
    pub options: RunOptions,
    /// What to inject.
    pub plan: InjectionPlan,
    /// `--method`, when given.
    pub method: Option<StallMethod>,
    /// `--out`, `--force`, `--format`.
    pub output: OutputPlan,
    /// Stalls no longer than the threshold plus one probe interval: a probe may miss them.
    pub short_stalls: Vec<String>,
}

impl CalibrateArgs {
    /// Checks every flag into calibrate's plan.
    pub fn validate(&self) -> Result<CalibratePlan, UsageError> {
        let probing = self.probing.probing.to_plan()?;
        let threshold = probing.stall_threshold;
        // The rate's floor keeps this within a second; never a panic whatever it is.
        let interval = Duration::try_from_secs_f64(probing.aggregate_interval_us() / 1e6)
            .unwrap_or(Duration::MAX);
        let mut stalls_us = Vec::new();
        let mut short_stalls = Vec::new();
        for part in self.stalls.split(',') {
            let stall = parse_stall(part)?;
            if stall <= threshold {
                return Err(UsageError::invalid(
                    "--stalls",
                    part.trim(),
                    format!(
                        "must be longer than --stall-threshold ({}): a shorter silence is never a stall",
                        self.probing.probing.stall.stall_threshold
                    ),
                ));
            }
            if stall <= threshold + interval {
                short_stalls.push(part.trim().to_string());
            }
            stalls_us.push(stall.as_micros() as u64);
        }
        let times: u32 = self
            .times
            .trim()
            .parse()
            .ok()
            .filter(|n| (1..=1000).contains(n))
            .ok_or_else(|| {
                UsageError::invalid(
                    "--times",
                    &self.times,
                    "expected a whole number from 1 to 1000",
                )
            })?;
        let gap = parse_duration("--gap", &self.gap)?;
        if gap < Duration::from_millis(20) {
            return Err(UsageError::invalid(
                "--gap",
                &self.gap,
                "must be at least 20ms, so a baseline shows between injections",
            ));
        }
        let plan = InjectionPlan {
            stalls_us,
            times,
            gap,
        };
        let output = self.output.output.to_plan();
        let target = self.target.to_spec(std::env::var("REDISCLI_AUTH").ok())?;
        let timeout = match &target {
            TargetSpec::External(conn) => conn.command_timeout,
            TargetSpec::Embedded {
                command_timeout, ..
            } => *command_timeout,
        };
        if let Some(&longest) = plan.stalls_us.iter().max()
            && Duration::from_micros(longest) >= timeout
        {
            return Err(UsageError::invalid(
                "--stalls",
                &self.stalls,
                format!(
                    "a stall of {:.0} ms would outlast --timeout ({:?}): the probes would give up on the server",
                    longest as f64 / 1e3,
                    timeout
                ),
            ));
        }
        Ok(CalibratePlan {
            target,
            // No writer: the value seed is 0, as calibrate's run.json has always recorded.
            options: RunOptions {
                seed: 0,
                out: output.out.clone(),
                ..probing.run_options()
            },
            plan,
            method: self.method,
            output,
            short_stalls,
        })
    }
}

/// One stall length: a plain number is ms.
fn parse_stall(text: &str) -> Result<Duration, UsageError> {
    let trimmed = text.trim();
    let stall = match trimmed.parse::<f64>() {
        // Too long for a Duration (1e300) is as much out of range as 11 s.
        Ok(ms) if ms.is_finite() && ms > 0.0 => {
            Duration::try_from_secs_f64(ms / 1e3).unwrap_or(Duration::MAX)
        }
        Ok(_) => {
            return Err(UsageError::invalid(
                "--stalls",
                trimmed,
                "a stall length must be more than 0",
            ));
        }
        Err(_) => parse_duration("--stalls", trimmed)?,
    };
    if stall.is_zero() || stall > MAX_STALL {
        return Err(UsageError::invalid(
            "--stalls",
            trimmed,
            "expected a length from 1us to 10s",
        ));
    }
    Ok(stall)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validate(argv: &[&str]) -> Result<CalibratePlan, UsageError> {
        crate::cli::parse_flags::<CalibrateArgs>(argv).validate()
    }

    #[test]
    fn defaults_are_the_issues() {
        let v = validate(&[]).unwrap();
        assert_eq!(v.plan.stalls_us, [5_000, 20_000, 50_000, 100_000, 250_000]);
        assert_eq!(v.plan.times, 3);
        assert_eq!(v.options.probe_threads, 2);
        assert_eq!(v.options.probe_rate, 1000.0);
        let v = validate(&[
            "--stalls",
            "250us,2ms,0.5s",
            "--stall-threshold",
            "100us",
            "--probe-rate",
            "10000",
        ])
        .unwrap();
        assert_eq!(v.plan.stalls_us, [250, 2_000, 500_000]);
        assert!(v.short_stalls.is_empty());
        let v = validate(&["--probe-rate", "100"]).unwrap();
        assert_eq!(v.short_stalls, ["5"]);
    }

    #[test]
    fn bad_values_name_their_flag() {
        for (argv, flag) in [
            (vec!["--stalls", "5,x"], "--stalls"),
            (vec!["--stalls", "0"], "--stalls"),
            (vec!["--stalls", "-5"], "--stalls"),
            (vec!["--stalls", "11s"], "--stalls"),
            (vec!["--stalls", "1"], "--stalls"), // not above the 1 ms threshold
            (vec!["--times", "0"], "--times"),
            (vec!["--gap", "5ms"], "--gap"),
            (vec!["--probe-rate", "0"], "--probe-rate"),
            (vec!["--probe-threads", "0"], "--probe-threads"),
        ] {
            let err = match validate(&argv) {
                Ok(_) => panic!("{argv:?} accepted"),
                Err(err) => err.to_string(),
            };
            assert!(err.contains(flag), "{argv:?}: {err}");
        }
    }
}
