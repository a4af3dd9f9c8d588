//! The main job's flags (`probe --writer-sizes 64M,128M ...`) and their validation into
//! [`RunOptions`].

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::error::UsageError;
use crate::measure::writer::WriterPlan;
use crate::output::format::Format;
use crate::record::ProbeCmd;
use crate::run::{ProbesExport, RunOptions};
use crate::units::{parse_duration, parse_size_list};

/// Most probes per second one probe thread is allowed to attempt: at about 30 µs per loopback
/// round trip a thread cannot sustain much more, and past it the schedule only falls behind.
pub const MAX_PROBE_RATE: f64 = 20_000.0;
/// Most probe threads (each an OS thread with its own connection).
pub const MAX_PROBE_THREADS: u16 = 64;

/// Probing, writing and export options of the main job.
#[derive(Debug, Clone, Args)]
pub struct ProbeArgs {
    #[command(flatten)]
    pub topology: super::TopologyArgs,

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

    // --help: value sizes to write, and the one rule of every size flag.
    #[arg(
        long,
        value_name = "LIST",
        allow_hyphen_values = true,
        help = crate::size_help!(
            "Value sizes to write, comma-separated, e.g. 1M,64M,512M. Without it the tool observes: for --duration, or until Ctrl-C."
        )
    )]
    pub writer_sizes: Option<String>,

    /// Writes per size.
    #[arg(
        long,
        value_name = "N",
        default_value = "1",
        allow_negative_numbers = true
    )]
    pub repeat: String,

    /// Quiet probing before and after each write, so the baseline shows.
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "DURATION",
        default_value = "500ms"
    )]
    pub gap: String,

    /// Write each size twice to the same key: the second SET also frees the first value on the
    /// server's main thread.
    #[arg(long)]
    pub overwrite: bool,

    /// Keep every written key until the end (server memory grows with the sum of the sizes)
    /// instead of deleting each after its gap. Deletions are measured either way.
    #[arg(long)]
    pub keep: bool,

    /// Observe mode (no --writer-sizes): probe for this long (without it: until Ctrl-C or
    /// SIGTERM). With a writer: a cap on the run.
    #[arg(long, allow_hyphen_values = true, value_name = "DURATION")]
    pub duration: Option<String>,

    /// A probe waiting longer than this is delayed; a silence longer than this is a stall.
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "DURATION",
        default_value = "1ms"
    )]
    pub stall_threshold: String,

    /// Seed of the random value bytes, so runs repeat.
    #[arg(long, value_name = "N", default_value_t = 0x5eed)]
    pub seed: u64,

    /// Give the probe threads real-time (SCHED_FIFO) priority where permitted (root or
    /// CAP_SYS_NICE): a busy host then delays their wake-ups less.
    #[arg(long)]
    pub realtime: bool,

    /// Write probes.csv, writes.csv, stalls.csv, summary.csv, timeline.csv, probes.hlog and
    /// run.json here, as the run goes.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// Replace a run already in --out.
    #[arg(long)]
    pub force: bool,

    /// On a server given by --url, lower slowlog-log-slower-than and switch the latency
    /// monitor on for the run, so the server's own view of each write is complete (observe
    /// mode: so that stalls as short as --stall-threshold are named); the old values are
    /// restored afterwards, also on failure. (The embedded server is always tuned.)
    #[arg(long)]
    pub tune_server: bool,

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

    /// Observe mode: print a line (wall-clock time, probes, p50/p99/p99.9/max latency in µs,
    /// stalls) every this long, as redis-cli --latency-history does; 0 for none.
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "DURATION",
        default_value = "10s"
    )]
    pub report_every: String,

    /// Serve the run's figures for Prometheus at http://ADDR/metrics while it goes (OpenMetrics
    /// text: probe latency histogram, probes, errors, stalls): HOST:PORT, or PORT alone for
    /// 127.0.0.1:PORT. Listen beyond loopback only by naming the address (e.g. 0.0.0.0:9121).
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<String>,

    /// How many of the longest stalls the end of the run lists, each with its wall-clock
    /// time and its write or culprit: a number, or `all` (stalls.csv has every one).
    #[arg(long, value_name = "N|all", default_value = "5")]
    pub show_stalls: String,

    /// What stdout gets: `text`, a line per write (time, op, size, others blocked, own time,
    /// stalled, delayed probes) and a short footer; `json`, one document at the end with the
    /// findings run.json has (notes and progress stay on stderr); `markdown`, the per-write
    /// table and the footer.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,

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

impl ProbeArgs {
    /// Checks every value and builds the run's options. Nothing is sent anywhere before this
    /// succeeds.
    pub fn to_options(&self) -> Result<RunOptions, UsageError> {
        let probe_threads = parse_probe_threads(self.probe_threads)?;
        let probe_rate = parse_rate("--probe-rate", &self.probe_rate)?;
        let stall_threshold = parse_stall_threshold(&self.stall_threshold)?;
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
        let writer = match &self.writer_sizes {
            Some(list) => {
                let sizes = parse_size_list("--writer-sizes", list)?;
                let repeat: u32 = self
                    .repeat
                    .trim()
                    .parse()
                    .ok()
                    .filter(|&n| (1..=10_000).contains(&n))
                    .ok_or_else(|| {
                        UsageError::invalid(
                            "--repeat",
                            &self.repeat,
                            "expected a whole number from 1 to 10000",
                        )
                    })?;
                let gap = parse_duration("--gap", &self.gap)?;
                Some(WriterPlan {
                    sizes,
                    repeat,
                    gap,
                    overwrite: self.overwrite,
                    keep: self.keep,
                    commands: Vec::new(),
                    key_prefix: String::new(),
                    seed: self.seed,
                })
            }
            None => {
                for (flag, set) in [
                    ("--overwrite", self.overwrite),
                    ("--keep", self.keep),
                    ("--force-memory", self.force_memory),
                    ("--predict", self.predict.is_some()),
                ] {
                    if set {
                        return Err(UsageError::Conflict(format!(
                            "{flag} applies to writes: it needs --writer-sizes"
                        )));
                    }
                }
                None
            }
        };
        let predict_bytes = match &self.predict {
            Some(list) => {
                let sizes = parse_size_list("--predict", list)?;
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
            probe_threads,
            probe_rate,
            probe_cmd: self.probe_cmd,
            writer,
            duration,
            stall_threshold_us: stall_threshold.as_micros() as u64,
            seed: self.seed,
            realtime: self.realtime,
            out: self.out.clone(),
            tune_server: self.tune_server,
            force_memory: self.force_memory,
            predict_bytes,
            probes_export,
            interval,
            metrics_addr: self.metrics_addr.clone(),
            metrics: None,
        })
    }

    /// `--report-every`: `None` for 0.
    pub fn report_every(&self) -> Result<Option<Duration>, UsageError> {
        let every = parse_duration("--report-every", &self.report_every)?;
        Ok((!every.is_zero()).then_some(every))
    }

    /// `--show-stalls`: how many to list (`all`: every one kept).
    pub fn show_stalls(&self) -> Result<usize, UsageError> {
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

/// Parses a per-thread rate: positive, finite, at most [`MAX_PROBE_RATE`].
pub fn parse_rate(flag: &'static str, text: &str) -> Result<f64, UsageError> {
    let rate: f64 = text.trim().parse().map_err(|_| {
        UsageError::invalid(
            flag,
            text,
            "expected a number of probes per second, such as 1000",
        )
    })?;
    if !rate.is_finite() || rate <= 0.0 {
        return Err(UsageError::invalid(flag, text, "must be more than 0"));
    }
    if rate > MAX_PROBE_RATE {
        return Err(UsageError::invalid(
            flag,
            text,
            format!(
                "the tool sends at most {MAX_PROBE_RATE} probes/s per thread (each thread also reads every reply, and the server serves them all); add --probe-threads instead"
            ),
        ));
    }
    Ok(rate)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

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

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: ProbeArgs,
    }

    fn options(argv: &[&str]) -> Result<RunOptions, UsageError> {
        let mut full = vec!["probe"];
        full.extend_from_slice(argv);
        Wrapper::try_parse_from(full)
            .expect("clap parse")
            .args
            .to_options()
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
