//! The main job's flags (`probe --writer-sizes 64M,128M ...`): the shared sections (topology,
//! probing, workload, output) and the main job's own, checked into its one [`MainPlan`].

use std::time::Duration;

use clap::Args;

use crate::cli::sections::output::{OutputArgs, OutputPlan};
use crate::cli::sections::probing::ProbingArgs;
use crate::cli::sections::target::TargetArgs;
use crate::cli::sections::topology::{TopologyArgs, TopologyPlan};
use crate::cli::sections::workload::WorkloadArgs;
use crate::error::UsageError;
use crate::measure::target::TargetSpec;
use crate::measure::writer::WriterPlan;
use crate::run::{ProbesExport, RunOptions};
use crate::units::{parse_duration, parse_size_list};

/// Probing, writing and export options of the main job.
#[derive(Debug, Clone, Args)]
pub struct ProbeArgs {
    #[command(flatten)]
    pub topology: TopologyArgs,

    #[command(flatten)]
    pub probing: ProbingArgs,

    #[command(flatten)]
    pub workload: WorkloadArgs,

    /// Observe mode (no --writer-sizes): probe for this long (without it: until Ctrl-C or
    /// SIGTERM). With a writer: a cap on the run.
    #[arg(long, allow_hyphen_values = true, value_name = "DURATION")]
    pub duration: Option<String>,

    /// Send values even when they would pass the server's maxmemory or push this host into
    /// swap (by default such a write is refused with how much memory it needs).
    #[arg(long)]
    pub force_memory: bool,

    // --help: the sizes to predict, and the one rule of every size flag.
    #[arg(
        long,
        value_name = "LIST",
        allow_hyphen_values = true,
        help = crate::size_help!(
            "After the sweep, predict the blocking of these sizes (comma-separated, e.g. 1G,2G) from the size model; sizes outside the measured range are flagged as extrapolations."
        )
    )]
    pub predict: Option<String>,

    /// Which probes get a row in probes.csv: all, delayed (past --stall-threshold, or failed) or
    /// none [default: all; delayed for a run of 10 minutes or more]. Every figure comes from
    /// all of them either way.
    #[arg(long, value_name = "MODE", value_enum)]
    pub probes: Option<ProbesExport>,

    /// Length of one row of timeline.csv and one histogram of probes.hlog.
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "DURATION",
        default_value = "1s"
    )]
    pub interval: String,

    /// Observe mode: print a line (wall-clock time, probes, p50/p99/p99.9/max latency, µs under
    /// a millisecond and ms from one, stalls) every this long, as redis-cli --latency-history does; 0 for none. A whole
    /// number of --interval rows [default: 10s, or the first multiple of --interval past it]
    #[arg(long, allow_hyphen_values = true, value_name = "DURATION")]
    pub report_every: Option<String>,

    /// Serve the run's figures for Prometheus at http://ADDR/metrics while it goes (OpenMetrics
    /// text: probe latency histogram, probes, errors, stalls): HOST:PORT, or PORT alone for
    /// 127.0.0.1:PORT. Listen beyond loopback only by naming the address (e.g. 0.0.0.0:9121).
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<String>,

    /// How many of the longest stalls the end of the run lists, each with its wall-clock
    /// time and its write or culprit: a number, or `all` (stalls.csv has every one).
    #[arg(
        long,
        value_name = "N|all",
        default_value = "5",
        allow_negative_numbers = true
    )]
    pub show_stalls: String,

    #[command(flatten)]
    pub output: OutputArgs,

    /// Text: the long per-write line (every figure: the stall split into during and after the
    /// send, host memory and swap, the server's own view: SLOWLOG execution, latency event,
    /// event-loop maximum), the probes' send lag, each stall's server events, and client
    /// hiccups even when they do not matter (by default listed only when their longest is at
    /// least half the longest stall, or one fell inside a write).
    #[arg(short, long)]
    pub verbose: bool,

    /// Print the plan, the memory the server and the client will need, and the commands the
    /// run would send; start, connect to and send nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// The main job's plan: everything its flags say, checked, before anything connects; it does
/// not change afterwards.
#[derive(Debug, Clone)]
pub struct MainPlan {
    /// The server (or the one to start).
    pub target: TargetSpec,
    /// Which of its nodes to probe, which shard to write to, what to start.
    pub topology: TopologyPlan,
    /// The run's options (what the library's [`crate::run::run`] takes).
    pub run: RunOptions,
    /// `--out`, `--force`, `--format`.
    pub output: OutputPlan,
    /// `--report-every`: `None` for 0.
    pub report_every: Option<Duration>,
    /// `--show-stalls`: how many to list (`all`: every one kept).
    pub show_stalls: usize,
    /// `--verbose`.
    pub verbose: bool,
    /// `--dry-run`.
    pub dry_run: bool,
}

/// `--report-every` when none is given (rounded up to a whole number of `--interval`s).
const DEFAULT_REPORT_EVERY: Duration = Duration::from_secs(10);

impl ProbeArgs {
    /// Checks every flag, `target`'s too, into the main job's plan. Nothing is sent anywhere
    /// before this succeeds.
    pub fn to_plan(&self, target: &TargetArgs) -> Result<MainPlan, UsageError> {
        let run = self.to_options()?;
        let report_every = self.report_every()?;
        // A line gathers whole --interval rows: 500ms printed a line a second, 1us was taken.
        // The default follows --interval (`--interval 3s` refused the 10 s nobody typed).
        let report_every = match (&self.report_every, report_every) {
            (None, _) => {
                let interval = run.interval.as_micros().max(1);
                let default = DEFAULT_REPORT_EVERY.as_micros().div_ceil(interval) * interval;
                Some(Duration::from_micros(default as u64))
            }
            (Some(given), Some(every))
                if every.as_micros() % run.interval.as_micros().max(1) != 0 =>
            {
                return Err(UsageError::invalid(
                    "--report-every",
                    given,
                    format!(
                        "a line gathers whole --interval rows ({}): give a multiple of it, or a shorter --interval",
                        self.interval
                    ),
                ));
            }
            (Some(_), every) => every,
        };
        let show_stalls = self.show_stalls()?;
        if run.writer.is_some()
            && let Some(given) = &self.report_every
        {
            return Err(UsageError::invalid(
                "--report-every",
                given,
                "applies to observing (no --writer-sizes or --type): a run with writes prints a row per write",
            ));
        }
        let target_spec = target.to_spec(std::env::var("REDISCLI_AUTH").ok())?;
        let timeout = match &target_spec {
            TargetSpec::External(conn) => conn.command_timeout,
            TargetSpec::Embedded {
                command_timeout, ..
            } => *command_timeout,
        };
        // A stall that long ends the run (--timeout) before it could be counted.
        if Duration::from_micros(run.stall_threshold_us) >= timeout {
            return Err(UsageError::Conflict(format!(
                "--stall-threshold {} is not shorter than --timeout {}: the run gives the server up before such a stall ends, so none could be counted",
                self.probing.stall.stall_threshold, target.server.timeout
            )));
        }
        let topology = self.topology.to_plan(target.url.is_some())?;
        Ok(MainPlan {
            target: target_spec,
            topology,
            run,
            output: self.output.to_plan(),
            report_every,
            show_stalls,
            verbose: self.verbose,
            dry_run: self.dry_run,
        })
    }

    /// Checks the probing, writing and export flags into the run's options.
    pub fn to_options(&self) -> Result<RunOptions, UsageError> {
        let probing = self.probing.to_plan()?;
        let duration = match &self.duration {
            Some(text) => {
                let d = parse_duration("--duration", text)?;
                if d.is_zero() {
                    return Err(UsageError::invalid(
                        "--duration",
                        text,
                        "must be longer than 0",
                    ));
                }
                Some(d)
            }
            None => None,
        };
        let writer = self.workload.to_plan()?;
        if writer.is_none() {
            let [overwrite, keep] = self.workload.writer_only_flags();
            for (flag, set) in [
                overwrite,
                keep,
                ("--force-memory", self.force_memory),
                ("--predict", self.predict.is_some()),
                // Observe mode ran with `--repeat 0 --gap -1s` unsaid (the hostile trial).
                ("--repeat", self.workload.repeat != "1"),
                ("--gap", self.workload.gap != "500ms"),
            ] {
                if set {
                    return Err(UsageError::Conflict(format!(
                        "{flag} applies to writes: it needs --writer-sizes"
                    )));
                }
            }
        }
        let predict_bytes = match &self.predict {
            Some(list) => {
                let sizes = parse_size_list("--predict", list)?;
                if let Some(w) = writer.as_ref().filter(|w| !w.is_string()) {
                    return Err(UsageError::invalid(
                        "--predict",
                        list,
                        format!(
                            "the size model fits strings' SETs, and a {} run makes none (`probe keys` predicts a collection's freezes)",
                            w.value_type
                        ),
                    ));
                }
                let distinct: std::collections::BTreeSet<u64> = writer
                    .as_ref()
                    .map(|w| w.sizes.iter().copied().collect())
                    .unwrap_or_default();
                if distinct.len() < 2 {
                    return Err(UsageError::invalid(
                        "--predict",
                        list,
                        "the size model needs a sweep of at least two distinct --writer-sizes, e.g. --writer-sizes 16M,64M,128M",
                    ));
                }
                sizes
            }
            None => Vec::new(),
        };
        // Observing with no end is a run beyond any length.
        let length = match (&writer, duration) {
            (None, None) => Some(Duration::MAX),
            _ => expected_length(duration, &writer),
        };
        let probes_export = self
            .probes
            .unwrap_or_else(|| ProbesExport::for_length(length));
        let interval = parse_duration("--interval", &self.interval)?;
        if interval < Duration::from_millis(10) || interval > Duration::from_secs(3600) {
            return Err(UsageError::invalid(
                "--interval",
                &self.interval,
                "expected 10ms to 1h",
            ));
        }
        Ok(RunOptions {
            writer,
            duration,
            seed: self.workload.seed,
            out: self.output.out.clone(),
            force_memory: self.force_memory,
            predict_bytes,
            probes_export,
            interval,
            metrics_addr: self.metrics_addr.clone(),
            ..probing.run_options()
        })
    }

    /// `--report-every`: `None` for 0.
    fn report_every(&self) -> Result<Option<Duration>, UsageError> {
        let Some(text) = &self.report_every else {
            return Ok(None);
        };
        let every = parse_duration("--report-every", text)?;
        Ok((!every.is_zero()).then_some(every))
    }

    /// `--show-stalls`: how many to list (`all`: every one kept).
    fn show_stalls(&self) -> Result<usize, UsageError> {
        let text = self.show_stalls.trim();
        if text.eq_ignore_ascii_case("all") {
            return Ok(usize::MAX);
        }
        text.parse().map_err(|_| {
            UsageError::invalid(
                "--show-stalls",
                &self.show_stalls,
                "expected a number (0 for none) or `all`",
            )
        })
    }
}

/// How long a run is expected to last: its `--duration`, or for a writer plan its quiet gaps,
/// which dominate it.
fn expected_length(duration: Option<Duration>, writer: &Option<WriterPlan>) -> Option<Duration> {
    let plan = writer.as_ref().map(WriterPlan::minimum_duration);
    match (duration, plan) {
        (Some(d), Some(p)) => Some(d.min(p)),
        (d, p) => d.or(p),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_csv_keeps_every_probe_of_a_short_run_and_the_delayed_ones_of_a_long_one() {
        let mode = |args: &[&str]| options(args).unwrap().probes_export;
        assert_eq!(mode(&["--duration", "9m"]), ProbesExport::All);
        assert_eq!(mode(&["--duration", "10m"]), ProbesExport::Delayed);
        assert_eq!(
            mode(&["--duration", "2h", "--probes", "all"]),
            ProbesExport::All
        );
        assert_eq!(
            mode(&["--duration", "1s", "--probes", "none"]),
            ProbesExport::None
        );
        // A sweep's length is its quiet gaps: 10 sizes x 5 repeats x (set + delete) x 500 ms.
        assert_eq!(
            mode(&[
                "--writer-sizes",
                "1M,2M,4M,8M,16M,32M,64M,128M,256M,512M",
                "--repeat",
                "5"
            ]),
            ProbesExport::All
        );
        assert_eq!(
            mode(&["--writer-sizes", "1M", "--repeat", "600"]),
            ProbesExport::Delayed
        );
        // --duration caps a writer run.
        assert_eq!(
            mode(&[
                "--writer-sizes",
                "1M",
                "--repeat",
                "600",
                "--duration",
                "1m"
            ]),
            ProbesExport::All
        );
    }

    fn options(argv: &[&str]) -> Result<RunOptions, UsageError> {
        crate::cli::parse_flags::<ProbeArgs>(argv).to_options()
    }

    /// `--report-every`'s default follows `--interval` (`--interval 3s` refused the 10 s default
    /// nobody typed, on writer runs too, where it is not even used); a value given is checked.
    #[test]
    fn report_every_defaults_to_whole_intervals() {
        let plan = |argv: &[&str]| {
            crate::cli::parse_flags::<ProbeArgs>(argv)
                .to_plan(&crate::cli::parse_flags::<TargetArgs>(&[]))
                .map(|plan| plan.report_every)
        };
        let secs = |s: f64| Ok(Some(Duration::from_secs_f64(s)));
        assert_eq!(plan(&["--duration", "1m"]), secs(10.0));
        assert_eq!(plan(&["--duration", "1m", "--interval", "3s"]), secs(12.0));
        assert_eq!(
            plan(&["--writer-sizes", "1M", "--interval", "300ms"]),
            secs(10.2)
        );
        assert_eq!(plan(&["--duration", "1m", "--report-every", "0"]), Ok(None));
        assert_eq!(
            plan(&[
                "--duration",
                "1m",
                "--interval",
                "3s",
                "--report-every",
                "9s"
            ]),
            secs(9.0)
        );
        let err = plan(&[
            "--duration",
            "1m",
            "--interval",
            "3s",
            "--report-every",
            "10s",
        ])
        .unwrap_err()
        .to_string();
        assert!(err.contains("'10s' for --report-every"), "{err}");
        // Given with writes, where no report line is printed: refused, as --repeat is without.
        let err = plan(&["--writer-sizes", "1M", "--report-every", "2s"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("'2s' for --report-every"), "{err}");
    }

    /// A stall threshold no shorter than the reply limit can never count a stall (the run gives
    /// the server up first); a reply limit under a millisecond fails every connection.
    #[test]
    fn a_threshold_past_the_timeout_and_a_tiny_timeout_are_refused() {
        let plan = |probe: &[&str], target: &[&str]| {
            crate::cli::parse_flags::<ProbeArgs>(probe)
                .to_plan(&crate::cli::parse_flags::<TargetArgs>(target))
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        let err = plan(&["--duration", "1s", "--stall-threshold", "100s"], &[]).unwrap_err();
        assert!(
            err.contains("--stall-threshold 100s") && err.contains("--timeout 30s"),
            "{err}"
        );
        let err = plan(
            &["--duration", "1s", "--stall-threshold", "5ms"],
            &["--timeout", "5ms"],
        )
        .unwrap_err();
        assert!(err.contains("--timeout 5ms"), "{err}");
        assert!(
            plan(
                &["--duration", "1s", "--stall-threshold", "5ms"],
                &["--timeout", "6ms"]
            )
            .is_ok()
        );
        let err = plan(&["--duration", "1s"], &["--timeout", "1us"]).unwrap_err();
        assert!(err.contains("'1us' for --timeout"), "{err}");
    }

    #[test]
    fn defaults_match_the_issue() {
        let o = options(&["--writer-sizes", "64M,128M"]).unwrap();
        assert_eq!(o.probe_threads, 2);
        assert_eq!(o.probe_rate, 1000.0);
        assert_eq!(o.stall_threshold_us, 1000);
        let w = o.writer.unwrap();
        assert_eq!(w.sizes, vec![64 << 20, 128 << 20]);
        assert_eq!(w.repeat, 1);
        assert_eq!(w.gap, Duration::from_millis(500));
    }

    #[test]
    fn bad_values_name_their_flag() {
        for (argv, flag) in [
            (vec!["--writer-sizes", "64X"], "--writer-sizes"),
            (vec!["--writer-sizes", "-1M"], "--writer-sizes"),
            (vec!["--writer-sizes", ""], "--writer-sizes"),
            (
                vec!["--writer-sizes", "1M", "--probe-rate", "0"],
                "--probe-rate",
            ),
            (
                vec!["--writer-sizes", "1M", "--probe-rate", "-5"],
                "--probe-rate",
            ),
            (
                vec!["--writer-sizes", "1M", "--probe-rate", "1000000000"],
                "--probe-rate",
            ),
            (
                vec!["--writer-sizes", "1M", "--probe-threads", "0"],
                "--probe-threads",
            ),
            (vec!["--writer-sizes", "1M", "--repeat", "0"], "--repeat"),
            (vec!["--writer-sizes", "1M", "--gap", "soon"], "--gap"),
            (vec!["--duration", "0s"], "--duration"),
            (
                vec!["--writer-sizes", "64M", "--predict", "1G"],
                "--predict",
            ),
            (
                vec!["--writer-sizes", "64M,64M", "--predict", "1G"],
                "--predict",
            ),
            (
                vec!["--writer-sizes", "1M,2M", "--predict", "1X"],
                "--predict",
            ),
            (
                vec![
                    "--type",
                    "hash",
                    "--writer-sizes",
                    "1M,2M,4M",
                    "--predict",
                    "64M",
                ],
                "--predict",
            ),
        ] {
            let err = options(&argv).unwrap_err().to_string();
            assert!(err.contains(flag), "{argv:?}: {err}");
        }
    }

    #[test]
    fn observing_needs_no_duration() {
        // No writes and no --duration: observe until Ctrl-C, keeping only delayed probes in
        // probes.csv (a run of no set length).
        let bare = options(&[]).unwrap();
        assert!(bare.writer.is_none() && bare.duration.is_none());
        assert_eq!(bare.probes_export, ProbesExport::Delayed);
        assert!(options(&["--duration", "1s", "--keep"]).is_err());
        assert!(options(&["--duration", "1s"]).unwrap().writer.is_none());
    }
}
