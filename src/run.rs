//! One probe run, end to end: prepare the key space, start the probe threads and the writer on
//! the run's clock, collect their events from one channel, write the exports as the run goes,
//! correlate, clean up. The binary and the examples both drive runs through [`run`].

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::analyze::correlate::{Analysis, Interval, Stall, WriteSummary};
pub use crate::measure::actor::{Actor, ActorContext};
pub use crate::measure::event::Event;
use crate::measure::target::Target;
use crate::measure::writer::{WriterActor, WriterPlan};
use crate::output::export::RunStatus;
use crate::record::{ProbeCmd, ProbeRecord, WriteRecord};
use crate::units::option_duration_ms;

/// Validated options of a probe run (also stored in run.json, and read back from it by
/// `probe compare`: options added after the first release carry `#[serde(default)]`, the value
/// a run recorded before them had).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunOptions {
    /// Probe threads, each with its own connection.
    pub probe_threads: u16,
    /// Probes per second per thread.
    pub probe_rate: f64,
    /// `ping` or `get`.
    pub probe_cmd: ProbeCmd,
    /// The writer's plan; `None` in observe mode.
    pub writer: Option<WriterPlan>,
    /// Observe mode's length (or a cap on a writer run).
    #[serde(with = "option_duration_ms", rename = "duration_ms")]
    pub duration: Option<Duration>,
    /// Latency past which a probe counts as delayed, µs.
    pub stall_threshold_us: u64,
    /// Seed of the value bytes.
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
    /// Where the Prometheus endpoint listens (`--metrics-addr`), for run.json.
    #[serde(default)]
    pub metrics_addr: Option<String>,
    /// The endpoint's figures, updated as the run goes (bound by the caller before anything
    /// starts, see [`crate::output::metrics::MetricsEndpoint`]).
    #[serde(skip)]
    pub metrics: Option<std::sync::Arc<crate::output::metrics::ProbeMetrics>>,
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
/// Default of [`RunOptions::seed`] (and of `--seed`).
pub const DEFAULT_SEED: u64 = 0x5eed;

impl Default for RunOptions {
    /// The command line's defaults: 2 probe threads × 1000 PING/s, a 1 ms stall threshold, no
    /// writer, no duration, no exports. As it stands this observes until the `interrupt` flag
    /// given to [`run`] is set: set [`RunOptions::duration`] to observe for a while, or
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
            metrics: None,
        }
    }
}

/// Default of [`RunOptions::interval`] (and of `--interval`).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);

fn default_interval() -> Duration {
    DEFAULT_INTERVAL
}

/// What a finished (or stopped) run found.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// The run's id (its keys were under `holprobe:<run_id>:`).
    pub run_id: String,
    /// How it ended.
    pub status: RunStatus,
    /// Why it stopped early, if it did.
    pub status_reason: Option<String>,
    /// The findings.
    pub analysis: Analysis,
    /// Every write event.
    pub writes: Vec<WriteRecord>,
    /// Probes recorded (the records themselves went to the correlator and probes.csv).
    pub probes_recorded: u64,
    /// Stall episodes found; `analysis.stalls` keeps at most [`crate::session::KEEP_STALLS`].
    pub stalls_found: u64,
    /// Their total length, ms.
    pub stall_ms_total: f64,
    /// Probe records dropped because the collector fell behind (expected 0).
    pub probes_dropped: u64,
    /// Warnings raised during the run (also in run.json).
    pub warnings: Vec<String>,
    /// Wall-clock time of the run's clock zero, µs since the Unix epoch.
    pub started_unix_us: u64,
    /// Server settings changed for the run (and restored), as `name old -> new`.
    pub server_settings: Vec<String>,
}

/// Something the caller may show while the run goes.
#[derive(Debug)]
pub enum Notice<'a> {
    /// The run's clock started; probes begin shortly.
    Started {
        /// Run id.
        run_id: &'a str,
        /// Steps the writer will take (0 in observe mode).
        steps_total: usize,
    },
    /// A write's figures are final (all probes around it are in).
    Write {
        /// The write as recorded.
        record: &'a WriteRecord,
        /// What the others saw.
        summary: &'a WriteSummary,
    },
    /// A stall episode is final (with its wall-clock start).
    Stall(&'a Stall),
    /// An interval of the timeline is final.
    Interval {
        /// The interval.
        interval: &'a Interval,
        /// Wall-clock time of the run's clock zero, µs since the Unix epoch.
        started_unix_us: u64,
    },
    /// About every 100 ms.
    Tick {
        /// Since the run's start.
        elapsed: Duration,
        /// Probes recorded so far.
        probes: usize,
        /// Writes done so far.
        writes: usize,
    },
}

/// Prefix of every key the tool creates.
pub const KEY_NAMESPACE: &str = "holprobe";

/// A new run id: 8 hex digits, random.
pub fn new_run_id() -> String {
    format!("{:08x}", rand::random::<u32>())
}

/// Runs probes (and the writer, when planned) against `target` until the plan is done, the
/// duration is over, `interrupt` is set, or the server goes away. Every exit path stops the
/// threads, removes the run's keys while the server is reachable and writes the final exports.
pub fn run(
    options: &RunOptions,
    target: &Target,
    interrupt: &AtomicBool,
    notify: &mut dyn FnMut(Notice<'_>),
) -> Result<RunReport> {
    let actor = options.writer.clone().map(|mut plan| {
        plan.seed = options.seed;
        Box::new(WriterActor::new(plan, options.force_memory)) as Box<dyn Actor>
    });
    run_with_actor(options, target, actor, interrupt, notify)
}

/// Runs probes with `actor` (in place of the writer `options` may plan) beside them: the same
/// measuring session, correlator and exports as the main job ([`crate::session::measure`]).
/// Without an actor it observes (for `options.duration`, or until `interrupt`).
pub fn run_with_actor(
    options: &RunOptions,
    target: &Target,
    actor: Option<Box<dyn Actor>>,
    interrupt: &AtomicBool,
    notify: &mut dyn FnMut(Notice<'_>),
) -> Result<RunReport> {
    crate::session::measure(options, target, actor, interrupt, notify)
}

/// A note when the probe behind some writes' `hol_delay_ms` left its thread a millisecond or
/// more late: those figures are partly this host's (its cores were busy), not the server's.
pub(crate) fn late_probe_note(writes: &[WriteSummary], realtime: bool) -> Option<String> {
    let late: Vec<f64> = writes
        .iter()
        .filter_map(|w| w.hol_probe_send_lag_ms)
        .filter(|&lag| lag >= LATE_PROBE_NOTE_MS)
        .collect();
    let worst = late.iter().copied().fold(0.0, f64::max);
    (!late.is_empty()).then(|| {
        format!(
            "in {} of {} writes the probe behind 'others blocked' left {LATE_PROBE_NOTE_MS} ms or more late (up to {worst:.1} ms): up to that much of those figures is this host's own delay, not the server's (hol_probe_send_lag_ms in summary.csv){}",
            late.len(),
            writes.len(),
            if realtime {
                ""
            } else {
                "; --realtime shortens it"
            }
        )
    })
}

/// How late the worst probe of a write must have left before the run says so.
const LATE_PROBE_NOTE_MS: f64 = 1.0;

#[cfg(test)]
mod tests {
    use clap::Parser;
    use serde::Serialize;

    use super::*;
    use crate::analyze::correlate::{Stall, WriteSummary};
    use crate::cli::ProbeArgs;
    use crate::measure::writer::WriterPlan;
    use crate::output::export::{columns, csv_bytes};
    use crate::record::{ProbeCmd, ProbeRecord, WriteOp, WriteRecord};

    /// The header csv derives from the struct's fields.
    fn derived_header<T: Serialize>(row: &T) -> Vec<String> {
        let bytes = csv_bytes(std::slice::from_ref(row), &[]).unwrap();
        let text = String::from_utf8(bytes).unwrap();
        text.lines()
            .next()
            .unwrap()
            .split(',')
            .map(String::from)
            .collect()
    }

    #[test]
    fn column_constants_match_the_structs() {
        let probe = ProbeRecord {
            thread: 0,
            seq: 0,
            cmd: ProbeCmd::Ping,
            intended_us: 0,
            sent_us: 0,
            reply_us: None,
            read_us: None,
            latency_us: None,
            ok: true,
            error: None,
        };
        assert_eq!(derived_header(&probe), columns::PROBES);
        let write = WriteRecord {
            seq: 1,
            op: WriteOp::Set,
            size_bytes: 1,
            start_us: 0,
            sent_us: 0,
            reply_us: 0,
            set_ms: 0.0,
            ok: true,
            error: None,
            host_mem_pct: 0.0,
            host_swap_pct: 0.0,
            server_rss_bytes: None,
            key: String::new(),
            server_exec_us: None,
            server_latency_event_ms: None,
            server_latency_event: None,
            server_eventloop_max_us: None,
            server_request_bytes: None,
        };
        assert_eq!(derived_header(&write), columns::WRITES);
        let stall = Stall {
            start_us: 0,
            end_us: 0,
            duration_ms: 0.0,
            probes_delayed: 0,
            write_seq: None,
            ..Stall::default()
        };
        assert_eq!(derived_header(&stall), columns::STALLS);
        let interval = crate::analyze::findings::Interval::empty(
            0,
            1,
            hdrhistogram::Histogram::new(3).unwrap(),
        );
        assert_eq!(
            derived_header(&crate::output::export::TimelineRow::new(&interval, "t", 0)),
            columns::TIMELINE
        );
        assert_eq!(derived_header(&blank_summary()), columns::SUMMARY);
    }

    /// A write summary with every field at zero or empty.
    fn blank_summary() -> WriteSummary {
        WriteSummary {
            seq: 1,
            op: WriteOp::Set,
            size_bytes: 1,
            set_ms: 0.0,
            hol_delay_ms: None,
            stall_ms: 0.0,
            probes_delayed: 0,
            stall_during_send_ms: 0.0,
            stall_after_send_ms: 0.0,
            host_mem_pct: 0.0,
            host_swap_pct: 0.0,
            probes_in_window: 0,
            worst_latency_ms: None,
            ok: true,
            server_exec_us: None,
            server_latency_event_ms: None,
            server_eventloop_max_us: None,
            server_request_bytes: None,
            memory_pressure: false,
            host_mem_peak_pct: 0.0,
            host_swap_grew_bytes: 0,
            hol_probe_send_lag_ms: None,
        }
    }

    #[test]
    fn a_run_says_when_its_worst_probes_left_late() {
        let summary = |lag: Option<f64>| WriteSummary {
            hol_delay_ms: lag.map(|l| l + 1.0),
            hol_probe_send_lag_ms: lag,
            ..blank_summary()
        };
        let on_time = [summary(Some(0.02)), summary(None), summary(Some(0.99))];
        assert_eq!(late_probe_note(&on_time, false), None);
        let late = [summary(Some(0.02)), summary(Some(3.46)), summary(Some(1.0))];
        let note = late_probe_note(&late, false).expect("a note");
        assert!(note.starts_with("in 2 of 3 writes"), "{note}");
        assert!(note.contains("up to 3.5 ms"), "{note}");
        assert!(note.contains("--realtime"), "{note}");
        let note = late_probe_note(&late, true).expect("a note");
        assert!(!note.contains("--realtime"), "{note}");
    }

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: ProbeArgs,
    }

    /// The library's defaults (what examples and other programs start from) are the CLI's.
    #[test]
    fn library_defaults_are_the_command_lines() {
        let cli = Wrapper::try_parse_from(["probe", "--writer-sizes", "1M"])
            .expect("clap parse")
            .args
            .to_options()
            .expect("valid options");
        let lib = RunOptions::default();
        assert_eq!(cli.probe_threads, lib.probe_threads);
        assert_eq!(cli.probe_rate, lib.probe_rate);
        assert_eq!(cli.probe_cmd, lib.probe_cmd);
        assert_eq!(cli.stall_threshold_us, lib.stall_threshold_us);
        assert_eq!(cli.seed, lib.seed);
        assert_eq!(cli.duration, lib.duration);
        assert_eq!(cli.probes_export, lib.probes_export);
        let cli_plan = cli.writer.expect("a writer plan");
        let lib_plan = WriterPlan::default();
        assert_eq!(cli_plan.repeat, lib_plan.repeat);
        assert_eq!(cli_plan.gap, lib_plan.gap);
        assert_eq!(cli_plan.overwrite, lib_plan.overwrite);
        assert_eq!(cli_plan.keep, lib_plan.keep);
        assert_eq!(cli_plan.commands, lib_plan.commands);
    }
}
