//! What a load run tells its caller: the notices while it goes and the report at the end (with
//! the generator's own verdict: was the client the limit?).

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::load::analyze::WriteUnderLoad;
use crate::load::stats::{LoadBlock, LoadSecondRow};
use crate::output::export::{LoadRunJson, RunStatus};
use crate::record::WriteRecord;

/// Something the caller may show while the run goes.
#[derive(Debug, Clone, Copy)]
pub enum LoadNotice<'a> {
    /// The clients are connected and about to start.
    Started {
        /// The run's id (the writer's keys live under `holprobe:<run_id>:`).
        run_id: &'a str,
        /// Generator threads.
        threads: u16,
    },
    /// About every 100 ms.
    Tick {
        /// Since the load started.
        elapsed: Duration,
        /// Requests in the last complete second, all servers.
        last_second_requests: u64,
    },
    /// A write's figures are final (every request around it is in, and the second after it is
    /// complete).
    Write {
        /// The write as recorded.
        record: &'a WriteRecord,
        /// What the load clients saw.
        finding: &'a WriteUnderLoad,
    },
    /// A connection problem a generator thread reported.
    Problem(&'a str),
}

/// Whether the load generator itself was the limit.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GeneratorReport {
    /// Generator threads.
    pub threads: u16,
    /// Connections per thread.
    pub clients_per_thread: Vec<u32>,
    /// Each thread's CPU time over the run, percent of wall time (empty where unknown).
    pub thread_cpu_pct: Vec<Option<f64>>,
    /// The busiest thread over the run, percent.
    pub busiest_thread_cpu_pct: Option<f64>,
    /// The busiest thread in its busiest second, percent.
    pub busiest_second_cpu_pct: Option<f64>,
    /// Each thread's time runnable but waiting for a CPU, percent of wall time (empty where
    /// unknown): the host's oversubscription as the generator felt it.
    pub thread_wait_pct: Vec<Option<f64>>,
    /// The longest such wait over the run among the threads, percent.
    pub max_thread_wait_pct: Option<f64>,
    /// Open loop (`--rate`).
    pub open_loop: bool,
    /// Open loop: median lateness of sends the generator made late, µs.
    pub schedule_lag_p50_us: Option<u64>,
    /// Open loop: 99th percentile of the same, µs.
    pub schedule_lag_p99_us: Option<u64>,
    /// Open loop: sends more than 1 ms late because of the generator.
    pub late_sends: u64,
    /// Open loop: `late_sends` as a percentage of the generator's scheduled sends.
    pub late_sends_pct: Option<f64>,
    /// Open loop: scheduled requests never sent (their connection was full or down at the end).
    pub unsent: u64,
    /// Connections reopened after an error or timeout.
    pub reconnects: u64,
    /// Connections still down at the end.
    pub disconnected_at_end: u32,
    /// Per-request samples lost because the collector fell behind (expected 0).
    pub samples_dropped: u64,
    /// True when a thread ran at 90% CPU or more over the run, waited for a CPU 25% of the
    /// time or more, or the open-loop schedule fell behind (more than 1% of sends over 1 ms
    /// late): the figures may be the client's limit.
    pub saturated: bool,
    /// The verdict in words.
    pub verdict: String,
}

/// Busiest-thread CPU share over the run past which the generator counts as saturated.
pub const SATURATED_CPU_PCT: f64 = 90.0;
/// Share of the run a thread may wait for a CPU before the generator counts as starved.
pub const STARVED_WAIT_PCT: f64 = 25.0;

/// What a finished (or stopped) load run found.
#[derive(Debug, Clone)]
pub struct LoadReport {
    /// The run's id.
    pub run_id: String,
    /// How it ended.
    pub status: RunStatus,
    /// Why it stopped early, if it did.
    pub status_reason: Option<String>,
    /// Length of the load, seconds.
    pub runtime_s: f64,
    /// One block per server when there are several, then the total (`server = all`).
    pub blocks: Vec<LoadBlock>,
    /// Every timeline row.
    pub timeline: Vec<LoadSecondRow>,
    /// Every writer event.
    pub writes: Vec<WriteRecord>,
    /// What the load saw during each.
    pub writes_under_load: Vec<WriteUnderLoad>,
    /// Whether the generator was the limit.
    pub generator: GeneratorReport,
    /// Warnings (also in run.json).
    pub warnings: Vec<String>,
    /// Connection problems the generator threads reported as they happened (the first few per
    /// thread; also in run.json).
    pub problems: Vec<String>,
    /// Whole-run latency, all servers, µs.
    pub latency: Histogram<u64>,
    /// Run clock of the load's second 0, µs.
    pub load_start_us: u64,
    /// Wall-clock time of the run clock's zero, µs since the Unix epoch.
    pub started_unix_us: u64,
    /// The run's findings as run.json has them (the same value, written there with --out):
    /// what `--format json` prints.
    pub run_json: LoadRunJson,
}
