//! The validated options of a probe run (the main job, observe mode, calibrate): what the
//! command line turns into before anything connects, what the session runs with, and what
//! run.json stores (and `probe compare` reads back).

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::measure::writer::{RecordedWriter, WriterPlan};
use crate::record::{ProbeCmd, ProbeRecord};
use crate::units::option_duration_ms;

/// Validated options of a probe run: what the user asked for, nothing that exists only once the
/// run has begun (its id, key prefix, metrics handle: the session's). Also stored in run.json,
/// and read back from it by `probe compare`, with the writer as the run recorded it
/// (`RunOptions<RecordedWriter>`, see [`RunOptions::recorded`]): options added after the first
/// release carry `#[serde(default)]`, the value a run recorded before them had.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunOptions<W = WriterPlan> {
    /// Probe threads, each with its own connection.
    pub probe_threads: u16,
    /// Probes per second per thread.
    pub probe_rate: f64,
    /// `ping` or `get`.
    pub probe_cmd: ProbeCmd,
    /// The writer's plan; `None` in observe mode.
    pub writer: Option<W>,
    /// Observe mode's length (or a cap on a writer run).
    #[serde(with = "option_duration_ms", rename = "duration_ms")]
    pub duration: Option<Duration>,
    /// Latency past which a probe counts as delayed, µs.
    pub stall_threshold_us: u64,
    /// Seed of the value bytes (`--random-state`): the one place a plan has it. Recorded as
    /// `random_state`; runs recorded before the rename say `seed`.
    #[serde(rename = "random_state", alias = "seed")]
    pub seed: u64,
    /// Ask for real-time (SCHED_FIFO) priority for the probe threads.
    #[serde(default)]
    pub realtime: bool,
    /// Where the exports go.
    pub out: Option<PathBuf>,
    /// Change the server's SLOWLOG and LATENCY settings for the run on an external server
    /// (`--tune-server`; always done on the embedded one), restoring them afterwards.
    #[serde(default)]
    pub tune_server: bool,
    /// Send values even when they would pass maxmemory or push the host into swap
    /// (`--force-memory`).
    #[serde(default)]
    pub force_memory: bool,
    /// Sizes to predict the blocking of from the size model (`--predict`), bytes.
    #[serde(default)]
    pub predict_bytes: Vec<u64>,
    /// Which probes get a row in probes.csv (`--probes`; every probe in runs recorded before
    /// the flag).
    #[serde(rename = "probes", default = "ProbesExport::all")]
    pub probes_export: ProbesExport,
    /// Where the Prometheus endpoint listens (`--metrics-addr`), for run.json (the endpoint
    /// itself is the run's, handed to the session beside the options).
    #[serde(default)]
    pub metrics_addr: Option<String>,
    /// Length of one row of timeline.csv (and of probes.hlog) (`--interval`; the default in
    /// runs recorded before the flag, which wrote no timeline).
    #[serde(
        with = "crate::units::duration_ms",
        rename = "interval_ms",
        default = "default_interval"
    )]
    pub interval: Duration,
}

/// Which probes get a row in probes.csv. Every other export, and every figure, comes from all
/// of them either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ProbesExport {
    /// Every probe (about 2,000 rows a second at the defaults).
    All,
    /// Probes that waited longer than the stall threshold, or got no reply or an error.
    Delayed,
    /// None: probes.csv holds its header only.
    None,
}

impl ProbesExport {
    /// [`ProbesExport::All`], what every run recorded before `--probes` wrote.
    fn all() -> ProbesExport {
        ProbesExport::All
    }

    /// The mode a run of about `length` gets when `--probes` is not given: every probe under
    /// [`PROBES_ALL_UP_TO`], the delayed ones beyond (a day at the defaults would be 170
    /// million rows).
    pub fn for_length(length: Option<Duration>) -> ProbesExport {
        match length {
            Some(length) if length >= PROBES_ALL_UP_TO => ProbesExport::Delayed,
            _ => ProbesExport::All,
        }
    }

    /// Whether `probe` gets a row.
    pub fn keeps(self, probe: &ProbeRecord, threshold_us: u64) -> bool {
        match self {
            ProbesExport::All => true,
            ProbesExport::Delayed => !probe.ok || probe.latency_us.is_none_or(|l| l > threshold_us),
            ProbesExport::None => false,
        }
    }
}

/// Runs expected to last this long or more keep only delayed probes in probes.csv unless
/// `--probes all` is given.
pub const PROBES_ALL_UP_TO: Duration = Duration::from_secs(600);

/// Default of [`RunOptions::probe_threads`] (and of `--probe-threads`).
pub const DEFAULT_PROBE_THREADS: u16 = 2;
/// Default of [`RunOptions::probe_rate`] (and of `--probe-rate`), probes/s per thread.
pub const DEFAULT_PROBE_RATE: f64 = 1000.0;
/// Default of [`RunOptions::stall_threshold_us`] (and of `--stall-threshold`), µs.
pub const DEFAULT_STALL_THRESHOLD_US: u64 = 1000;
/// Default of [`RunOptions::seed`] (and of `--random-state`).
pub const DEFAULT_SEED: u64 = 0x5eed;

impl Default for RunOptions {
    /// The command line's defaults: 2 probe threads × 1000 PING/s, a 1 ms stall threshold, no
    /// writer, no duration, no exports. As it stands this observes until the `interrupt` flag
    /// given to [`crate::run::run`] is set: set [`RunOptions::duration`] to observe for a while, or
    /// [`RunOptions::writer`] to measure writes.
    fn default() -> Self {
        RunOptions {
            probe_threads: DEFAULT_PROBE_THREADS,
            probe_rate: DEFAULT_PROBE_RATE,
            probe_cmd: ProbeCmd::Ping,
            writer: None,
            duration: None,
            stall_threshold_us: DEFAULT_STALL_THRESHOLD_US,
            seed: DEFAULT_SEED,
            realtime: false,
            out: None,
            tune_server: false,
            force_memory: false,
            predict_bytes: Vec::new(),
            probes_export: ProbesExport::All,
            interval: DEFAULT_INTERVAL,
            metrics_addr: None,
        }
    }
}

impl<W> RunOptions<W> {
    /// The time between two probes of all threads together, µs: the resolution of every stall
    /// figure.
    pub fn aggregate_interval_us(&self) -> f64 {
        crate::measure::probe::aggregate_interval_us(self.probe_threads, self.probe_rate)
    }

    /// The same options with the writer turned into another form by `writer`.
    fn map_writer<V>(self, writer: impl FnOnce(W) -> V) -> RunOptions<V> {
        RunOptions {
            probe_threads: self.probe_threads,
            probe_rate: self.probe_rate,
            probe_cmd: self.probe_cmd,
            writer: self.writer.map(writer),
            duration: self.duration,
            stall_threshold_us: self.stall_threshold_us,
            seed: self.seed,
            realtime: self.realtime,
            out: self.out,
            tune_server: self.tune_server,
            force_memory: self.force_memory,
            predict_bytes: self.predict_bytes,
            probes_export: self.probes_export,
            metrics_addr: self.metrics_addr,
            interval: self.interval,
        }
    }
}

impl RunOptions {
    /// The options as run.json records them: the writer with the run's key prefix (from the
    /// session's scope) and the seed of its values.
    pub fn recorded(&self, key_prefix: &str) -> RunOptions<RecordedWriter> {
        let seed = self.seed;
        self.clone().map_writer(|plan| RecordedWriter {
            plan,
            key_prefix: key_prefix.to_string(),
            seed,
            connection_recorded: true,
        })
    }
}

/// Default of [`RunOptions::interval`] (and of `--interval`).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);

fn default_interval() -> Duration {
    DEFAULT_INTERVAL
}
