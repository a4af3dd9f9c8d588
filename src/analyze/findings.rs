//! What the correlator finds, one type per finding: the baseline, a stall episode, a write's
//! summary. Each is a row of an export (run.json, stalls.csv, summary.csv), so the files come
//! from the same structs, and are read back through them (`probe compare`): fields added after
//! the first release carry `#[serde(default)]`, so files recorded before them still read. In a
//! module of their own so that the correlator and the statistics over its findings
//! ([`crate::analyze::stats`]) do not depend on each other.

use serde::{Deserialize, Serialize};

use crate::record::WriteOp;

/// Probe latency outside every write window: what the server gives when left alone.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    /// Probes with a reply outside write windows.
    pub probes: u64,
    /// Median latency, µs.
    pub p50_us: u64,
    /// 99th percentile latency, µs.
    pub p99_us: u64,
    /// Worst latency, µs.
    pub max_us: u64,
    /// Probes of the whole run that got an error or no reply.
    pub probe_errors: u64,
    /// The tool's own timing: median of (actual − intended send) over every probe, µs.
    pub send_lag_p50_us: u64,
    /// 99th percentile of the same: the probes' timing jitter.
    pub send_lag_p99_us: u64,
    /// Worst (actual − intended send), µs.
    pub send_lag_max_us: u64,
}

/// A stall episode: the server answered no probe while one was waiting past the threshold.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stall {
    /// Intended send of the first delayed probe, µs since the run's start.
    pub start_us: u64,
    /// The reply that ended the silence, µs since the run's start.
    pub end_us: u64,
    /// `end_us - start_us` in ms.
    pub duration_ms: f64,
    /// Probes intended inside the episode whose latency passed the threshold.
    pub probes_delayed: u64,
    /// The write whose window overlaps the episode most; empty when it overlaps none.
    pub write_seq: Option<u32>,
    /// Wall-clock time of `start_us`, RFC 3339 UTC with µs, to line the stall up with the
    /// server's logs and an incident timeline.
    #[serde(default)]
    pub wall_start: Option<String>,
    /// What the server's SLOWLOG (COMMANDLOG on Valkey 8.1+) logged as running while it was
    /// silent: the command and its first arguments, truncated. Empty when it logged nothing
    /// that explains the stall (or could not be read).
    #[serde(default)]
    pub server_command: Option<String>,
    /// The client that sent `server_command`: its address, and its name when it set one.
    #[serde(default)]
    pub server_client: Option<String>,
    /// LATENCY LATEST events the server recorded in the stall's seconds, then the event loop's
    /// longest cycle in the poll windows it falls in, e.g. `latency command 51ms; event loop
    /// max 50.3ms`.
    #[serde(default)]
    pub server_event: Option<String>,
    /// The keys the server expired or evicted during the stall, from its keyspace
    /// notifications (`expired holprobe:ab12:w1:hash`): what no client sent a command for.
    /// Empty where notifications are off (see `notify-keyspace-events`) or none was heard.
    #[serde(default)]
    pub server_key: Option<String>,
}

/// Per write: what other clients saw while it ran.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WriteSummary {
    /// Write number, from 1.
    pub seq: u32,
    /// `set`, `build`, `overwrite`, `read`, `delete`, `unlink`, `expire` or `command`.
    pub op: WriteOp,
    /// Value size, bytes.
    pub size_bytes: u64,
    /// The writer's own elapsed time (what the seed measured), ms.
    pub set_ms: f64,
    /// Head-of-line delay: the longest any other client arriving during the write waited for
    /// the server (the worst wait inside the write's window among the probes overlapping it,
    /// counted from the write's start for one meant to go out before it, minus the baseline
    /// median), ms. Empty when no probe overlapped the write.
    pub hol_delay_ms: Option<f64>,
    /// Time inside the write's window covered by stall episodes, ms.
    pub stall_ms: f64,
    /// Probes overlapping the write whose wait inside its window passed the threshold.
    pub probes_delayed: u64,
    /// Part of `stall_ms` while the value was still being sent (start → last byte sent).
    pub stall_during_send_ms: f64,
    /// Part of `stall_ms` after the last byte (last byte → reply).
    pub stall_after_send_ms: f64,
    /// Host memory in use right after the write, percent.
    pub host_mem_pct: f64,
    /// Host swap in use right after the write, percent.
    pub host_swap_pct: f64,
    /// Probes overlapping the write (with a reply).
    pub probes_in_window: u64,
    /// The worst wait inside the window among them (as for `hol_delay_ms`, before the
    /// baseline is taken off), ms (empty without probes).
    pub worst_latency_ms: Option<f64>,
    /// Whether the write itself succeeded.
    pub ok: bool,
    /// The server's SLOWLOG execution time of the command, µs (see [`crate::record::WriteRecord`]).
    #[serde(default)]
    pub server_exec_us: Option<u64>,
    /// The largest LATENCY event the server recorded during the write, ms.
    #[serde(default)]
    pub server_latency_event_ms: Option<u64>,
    /// The server's longest event-loop cycle during the write, µs.
    #[serde(default)]
    pub server_eventloop_max_us: Option<u64>,
    /// The request size in Valkey's COMMANDLOG `large-request`, bytes.
    #[serde(default)]
    pub server_request_bytes: Option<u64>,
    /// True when host swap grew during the write or host memory passed 90%: the figures then
    /// include the host's paging, not only the server's own cost (false in runs recorded
    /// before it was judged).
    #[serde(default)]
    pub memory_pressure: bool,
    /// The highest host memory use from the write's start to just after its reply, percent
    /// (0 in runs recorded before it was kept).
    #[serde(default)]
    pub host_mem_peak_pct: f64,
    /// How much host swap use grew during the write, bytes (0 in runs recorded before it was
    /// kept).
    #[serde(default)]
    pub host_swap_grew_bytes: u64,
    /// How late the probe behind `hol_delay_ms` left its thread (after the write's start, for
    /// one meant to go out before it), ms: at most that much of the figure was the tool's own lateness (its thread waited for a core), not the server (less
    /// when the server was frozen anyway while the probe was late). Empty without probes.
    #[serde(default)]
    pub hol_probe_send_lag_ms: Option<f64>,
    /// The kind of value (see [`crate::record::WriteRecord::value_type`]; empty in runs
    /// recorded before value types).
    #[serde(default)]
    pub value_type: Option<String>,
    /// Elements of the value.
    #[serde(default)]
    pub elements: Option<u64>,
    /// Bytes of one element.
    #[serde(default)]
    pub element_bytes: Option<u64>,
    /// The server's encoding of the value (`OBJECT ENCODING`).
    #[serde(default)]
    pub encoding: Option<String>,
    /// Which thread freed the value (`main`, `background`), as the server's counters tell.
    #[serde(default)]
    pub freed_by: Option<crate::workload::lazyfree::FreedBy>,
    /// How long the server's main thread ran during the write, µs (see
    /// [`crate::record::WriteRecord::server_cpu_run_us`]).
    #[serde(default)]
    pub server_cpu_run_us: Option<u64>,
    /// How long the server's main thread waited for a CPU during the write, µs (see
    /// [`crate::record::WriteRecord::server_cpu_wait_us`]).
    #[serde(default)]
    pub server_cpu_wait_us: Option<u64>,
    /// The main thread's quiet pace over the same readings, µs (see
    /// [`crate::record::WriteRecord::server_cpu_idle_us`]).
    #[serde(default)]
    pub server_cpu_idle_us: Option<u64>,
    /// The free room of the writer's connection's query buffer before the write, bytes (see
    /// [`crate::record::WriteRecord::writer_qbuf_free_bytes`]).
    #[serde(default)]
    pub writer_qbuf_free_bytes: Option<u64>,
}

impl WriteSummary {
    /// The value's columns of `record`, carried over as the correlator summarizes it.
    pub fn with_value_of(mut self, record: &crate::record::WriteRecord) -> WriteSummary {
        self.value_type = record.value_type.clone();
        self.elements = record.elements;
        self.element_bytes = record.element_bytes;
        self.encoding = record.encoding.clone();
        self.freed_by = record.freed_by;
        self.server_cpu_run_us = record.server_cpu_run_us;
        self.server_cpu_wait_us = record.server_cpu_wait_us;
        self.server_cpu_idle_us = record.server_cpu_idle_us;
        self.writer_qbuf_free_bytes = record.writer_qbuf_free_bytes;
        self
    }

    /// For tests: a write that succeeded, seen by one probe whose delay was `hol_delay_ms`
    /// (also its worst latency), every other figure zero or empty.
    #[cfg(test)]
    pub(crate) fn seen_once(
        seq: u32,
        op: WriteOp,
        size_bytes: u64,
        set_ms: f64,
        hol_delay_ms: Option<f64>,
    ) -> WriteSummary {
        WriteSummary {
            seq,
            op,
            size_bytes,
            set_ms,
            hol_delay_ms,
            probes_in_window: 1,
            worst_latency_ms: hol_delay_ms,
            ok: true,
            ..Default::default()
        }
    }
}

/// One interval of the timeline (`--interval`, a row of timeline.csv): the probes intended in
/// it and the stalls that touched it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Interval {
    /// Start, µs since the run's start.
    pub start_us: u64,
    /// Length, µs.
    pub length_us: u64,
    /// Probes intended in it.
    pub probes: u64,
    /// Of those, probes that got an error or no reply.
    pub errors: u64,
    /// Median latency, µs (HdrHistogram, 3 significant digits).
    pub p50_us: u64,
    /// 99th percentile latency, µs.
    pub p99_us: u64,
    /// 99.9th percentile latency, µs.
    pub p999_us: u64,
    /// Worst latency, µs.
    pub max_us: u64,
    /// Stall episodes that began in it.
    pub stalls: u64,
    /// Time in it covered by stall episodes, ms.
    pub stall_ms: f64,
    /// The longest stall episode that began in it, ms (0 without one).
    pub longest_stall_ms: f64,
    /// The latencies themselves, µs (for probes.hlog, reports over several intervals and
    /// the metrics endpoint).
    #[serde(skip)]
    pub latency: hdrhistogram::Histogram<u64>,
}

impl Interval {
    /// An interval in which no probe was intended.
    pub fn empty(start_us: u64, length_us: u64, latency: hdrhistogram::Histogram<u64>) -> Interval {
        Interval {
            start_us,
            length_us,
            probes: 0,
            errors: 0,
            p50_us: 0,
            p99_us: 0,
            p999_us: 0,
            max_us: 0,
            stalls: 0,
            stall_ms: 0.0,
            longest_stall_ms: 0.0,
            latency,
        }
    }
}
