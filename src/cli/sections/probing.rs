//! The probing flags (`--probe-threads`, `--probe-rate`, `--probe-cmd`, `--stall-threshold`,
//! `--realtime`, `--tune-server`), declared once for the main job and calibrate, and checked
//! into a [`ProbingPlan`].

use std::time::Duration;

use clap::Args;

use crate::error::UsageError;
use crate::record::ProbeCmd;
use crate::units::parse_duration;

/// Most probes per second one probe thread is allowed to attempt: at about 30 µs per loopback
/// round trip a thread cannot sustain much more, and past it the schedule only falls behind.
pub const MAX_PROBE_RATE: f64 = 20_000.0;
/// Most probe threads (each an OS thread with its own connection).
pub const MAX_PROBE_THREADS: u16 = 64;

/// `--stall-threshold`: shared by every command that counts delayed requests (probes, or load
/// mode's requests).
#[derive(Debug, Clone, Args)]
pub struct StallArgs {
    /// A probe waiting longer than this is delayed; a silence longer than this is a stall.
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "DURATION",
        default_value = "1ms"
    )]
    pub stall_threshold: String,
}

impl StallArgs {
    /// `--stall-threshold`, checked.
    pub fn threshold(&self) -> Result<Duration, UsageError> {
        parse_stall_threshold(&self.stall_threshold)
    }
}

/// `--stall-threshold` worded for load mode, whose delayed things are requests.
#[derive(Debug, Clone, Args)]
#[command(mut_arg("stall_threshold", |a| a.help("A request slower than this counts as delayed")))]
pub struct RequestStallArgs {
    #[command(flatten)]
    pub stall: StallArgs,
}

/// The probe threads and what they send, worded for the main job.
#[derive(Debug, Clone, Args)]
pub struct ProbingArgs {
    /// Dedicated probe threads, each with its own connection.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub probe_threads: u32,

    /// Probes per second per thread, on a fixed schedule; the threads are staggered so that
    /// together they sample every 1/(N·R) s.
    #[arg(
        long,
        value_name = "R",
        default_value = "1000",
        allow_negative_numbers = true
    )]
    pub probe_rate: String,

    /// The probe command: PING, or GET of a small key the tool prepares.
    #[arg(long, value_enum, default_value_t = ProbeCmd::Ping)]
    pub probe_cmd: ProbeCmd,

    #[command(flatten)]
    pub stall: StallArgs,

    /// Give the probe threads real-time (SCHED_FIFO) priority where permitted (root or
    /// CAP_SYS_NICE): a busy host then delays their wake-ups less.
    #[arg(long)]
    pub realtime: bool,

    /// On a server given by --url, lower slowlog-log-slower-than and switch the latency
    /// monitor on for the run, so the server's own view of each write is complete (observe
    /// mode: so that stalls as short as --stall-threshold are named); the old values are
    /// restored afterwards, also on failure. (The embedded server is always tuned.)
    #[arg(long)]
    pub tune_server: bool,
}

/// The probing flags worded for `probe calibrate`.
#[derive(Debug, Clone, Args)]
#[command(
    mut_arg("probe_threads", |a| a.help("Dedicated probe threads, as in the main job")),
    mut_arg("probe_rate", |a| a.help("Probes per second per thread, as in the main job")),
    mut_arg("probe_cmd", |a| a.help("The probe command")),
    mut_arg("realtime", |a| a.help("Give the probe threads real-time (SCHED_FIFO) priority where permitted, as in the main job")),
    mut_arg("tune_server", |a| a.help("On a server given by --url, lower slowlog-log-slower-than and switch the latency monitor on for the run (restored afterwards)"))
)]
pub struct CalibrateProbingArgs {
    #[command(flatten)]
    pub probing: ProbingArgs,
}

/// [`ProbingArgs`], checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbingPlan {
    /// Probe threads, each with its own connection.
    pub threads: u16,
    /// Probes per second per thread.
    pub rate_per_thread: f64,
    /// `ping` or `get`.
    pub cmd: ProbeCmd,
    /// Latency past which a probe counts as delayed.
    pub stall_threshold: Duration,
    /// `--realtime`.
    pub realtime: bool,
    /// `--tune-server`.
    pub tune_server: bool,
}

impl ProbingArgs {
    /// Checks every value.
    pub fn to_plan(&self) -> Result<ProbingPlan, UsageError> {
        Ok(ProbingPlan {
            threads: parse_probe_threads(self.probe_threads)?,
            rate_per_thread: parse_rate("--probe-rate", &self.probe_rate)?,
            cmd: self.probe_cmd,
            stall_threshold: self.stall.threshold()?,
            realtime: self.realtime,
            tune_server: self.tune_server,
        })
    }
}

impl ProbingPlan {
    /// `--stall-threshold`, µs.
    pub fn stall_threshold_us(&self) -> u64 {
        self.stall_threshold.as_micros() as u64
    }

    /// The time between two probes of all threads together, µs.
    pub fn aggregate_interval_us(&self) -> f64 {
        crate::measure::probe::aggregate_interval_us(self.threads, self.rate_per_thread)
    }

    /// The options of a probe run that probes as this plan says, the others at the library's
    /// defaults ([`crate::run::RunOptions::default`]).
    pub fn run_options(&self) -> crate::run::RunOptions {
        crate::run::RunOptions {
            probe_threads: self.threads,
            probe_rate: self.rate_per_thread,
            probe_cmd: self.cmd,
            stall_threshold_us: self.stall_threshold_us(),
            realtime: self.realtime,
            tune_server: self.tune_server,
            ..crate::run::RunOptions::default()
        }
    }
}

/// Checks `--probe-threads`: 1 to [`MAX_PROBE_THREADS`].
pub fn parse_probe_threads(threads: u32) -> Result<u16, UsageError> {
    u16::try_from(threads)
        .ok()
        .filter(|&n| (1..=MAX_PROBE_THREADS).contains(&n))
        .ok_or_else(|| {
            UsageError::invalid(
                "--probe-threads",
                threads,
                format!("expected 1 to {MAX_PROBE_THREADS}"),
            )
        })
}

/// Parses `--stall-threshold`: a duration of at least 10 µs.
pub fn parse_stall_threshold(text: &str) -> Result<Duration, UsageError> {
    let threshold = parse_duration("--stall-threshold", text)?;
    if threshold < Duration::from_micros(10) {
        return Err(UsageError::invalid(
            "--stall-threshold",
            text,
            "must be at least 10us: below that, every loopback round trip would count",
        ));
    }
    Ok(threshold)
}

/// Parses a per-thread rate: from [`crate::units::MIN_RATE_PER_S`] to [`MAX_PROBE_RATE`].
pub fn parse_rate(flag: &'static str, text: &str) -> Result<f64, UsageError> {
    crate::units::RateFlag {
        flag,
        what: "probes",
        example: "1000",
        max_per_s: MAX_PROBE_RATE,
        above_max: "the tool sends at most 20000 probes/s per thread (each thread also reads every reply, and the server serves them all); add --probe-threads instead",
    }
    .parse(text)
}
