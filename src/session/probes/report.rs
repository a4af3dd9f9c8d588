//! What a probe run tells its caller: the notices while it goes ([`Notice`]) and the report at
//! the end ([`RunReport`]), with the note on late probes.

use std::time::Duration;

use crate::analyze::correlate::{Analysis, Stall};
use crate::analyze::correlate::{Interval, WriteSummary};
use crate::output::export::{NodeEvent, NodeFindings};
use crate::output::export::{RunJson, RunStatus};
use crate::record::{NodeCols, WriteRecord};

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
    /// Client hiccups found; `analysis.client_hiccups` keeps at most [`KEEP_STALLS`].
    pub hiccups_found: u64,
    /// Probe records dropped because the collector fell behind (expected 0).
    pub probes_dropped: u64,
    /// Warnings raised during the run (also in run.json).
    pub warnings: Vec<String>,
    /// Wall-clock time of the run's clock zero, µs since the Unix epoch.
    pub started_unix_us: u64,
    /// Server settings changed for the run (and restored), as `name old -> new`.
    pub server_settings: Vec<String>,
    /// What the other nodes saw (empty when only one server was probed).
    pub nodes: Vec<NodeFindings>,
    /// Nodes that went down or came back during the run.
    pub node_events: Vec<NodeEvent>,
    /// The run's findings as run.json has them (the same value, written there with --out):
    /// what `--format json` prints.
    pub run_json: RunJson,
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
        /// Wall-clock time of the run's clock zero, µs since the Unix epoch (every `*_us` of
        /// the run counts from it).
        started_unix_us: u64,
    },
    /// A write's figures are final (all probes around it are in).
    Write {
        /// The write as recorded.
        record: &'a WriteRecord,
        /// What the others saw.
        summary: &'a WriteSummary,
    },
    /// A write's figures on another node are final.
    NodeWrite {
        /// The node.
        node: &'a NodeCols,
        /// It holds the written key's slot.
        same_shard: bool,
        /// What that node's other clients saw.
        summary: &'a WriteSummary,
    },
    /// A node went down or came back (runs over several nodes).
    Node(&'a NodeEvent),
    /// A stall episode of the first node is final (with its wall-clock start).
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

/// The stall that made the run give the server up (`--timeout`): its probes failed, so no stall
/// figure holds it, and a run ended by a 2 s freeze printed "stalls over 1ms: 0".
/// `files`: the session writes probes.csv (a `probe keys` scan writes none: its notes named one).
pub(crate) fn timed_out_note(
    longest_us: u64,
    stall_threshold_us: u64,
    files: bool,
) -> Option<String> {
    (longest_us >= stall_threshold_us).then(|| {
        format!(
            "the server answered no probe for {:.1} ms before the run gave it up (--timeout): a stall at least that long ended the run, and it is not among the stalls counted{}",
            longest_us as f64 / 1e3,
            if files {
                " (its probes are the failed rows of probes.csv)"
            } else {
                ""
            }
        )
    })
}

/// A stall still under way when the run stopped (`--duration` ran out, Ctrl-C, a `--timeout`):
/// its probes were never answered, so no stall figure holds it, and "stalls over 1ms: 0" read as
/// a quiet server while a 2 s `DEBUG SLEEP` was half done (the hostile trial). Said when the
/// oldest unanswered probe had waited past the stall threshold.
pub(crate) fn open_at_stop_note(
    unanswered: u64,
    longest_us: u64,
    stall_threshold_us: u64,
    files: bool,
) -> Option<String> {
    (unanswered > 0 && longest_us >= stall_threshold_us).then(|| {
        format!(
            "the server had not answered {unanswered} probe(s) when the run stopped, the oldest sent {:.1} ms before: a stall of at least that long was under way at the end, and it is not among the stalls counted{}",
            longest_us as f64 / 1e3,
            if files {
                " (its probes are the failed rows of probes.csv, \"no reply before the run stopped\")"
            } else {
                ""
            }
        )
    })
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

/// A note when the server's main thread waited for a CPU during some writes for a good part of
/// what others waited (`server_cpu_wait_us`): on this host its CPUs were short, and up to that
/// part of those figures is the host's, not the server's. A write's part is at most its
/// `hol_delay_ms` (the wait of a whole window may be spread over many probes).
pub(crate) fn cpu_wait_note(writes: &[WriteSummary]) -> Option<String> {
    let short: Vec<f64> = writes
        .iter()
        .filter_map(|w| {
            let held_ms = w.hol_delay_ms?;
            let part_ms = (w.server_cpu_wait_us? as f64 / 1e3).min(held_ms);
            (part_ms >= CPU_WAIT_NOTE_MS && part_ms >= CPU_WAIT_NOTE_SHARE * held_ms)
                .then_some(part_ms)
        })
        .collect();
    let worst = short.iter().copied().fold(0.0, f64::max);
    (!short.is_empty()).then(|| {
        format!(
            "in {} of {} writes the server's main thread waited {CPU_WAIT_NOTE_MS} ms or more for a CPU, a tenth or more of 'others blocked' (up to {worst:.1} ms of a figure): this host's CPUs were short (the server's threads, the probes' and anything else running), so up to that much of those figures is the host's, not the server's (server_cpu_wait_us in summary.csv)",
            short.len(),
            writes.len(),
        )
    })
}

/// The least a write held others (its median over such writes), ms, before a grown query
/// buffer is said to be why ([`query_buffer_note`]).
const QUERY_BUFFER_NOTE_MS: f64 = 10.0;

/// A note when SETs (and overwrites of strings) that made the server grow the query buffer it
/// had kept on the writer's connection from an earlier large value held others a median
/// [`QUERY_BUFFER_NOTE_MS`] or more, and twice the other such writes' median where there are
/// any: on a jemalloc build the server copies that buffer in one block
/// ([`crate::record::WriteRecord::writer_qbuf_free_bytes`]).
pub(crate) fn query_buffer_note(writes: &[WriteSummary]) -> Option<String> {
    let sets: Vec<&WriteSummary> = writes
        .iter()
        .filter(|w| w.ok && w.hol_delay_ms.is_some() && w.writer_qbuf_free_bytes.is_some())
        .collect();
    let grew = |w: &WriteSummary| {
        w.writer_qbuf_free_bytes
            .is_some_and(|free| crate::measure::writer::grows_kept_buffer(free, w.size_bytes))
    };
    let held = |ws: &[&WriteSummary]| -> Vec<f64> {
        let mut v: Vec<f64> = ws.iter().filter_map(|w| w.hol_delay_ms).collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let median = |v: &[f64]| v[v.len() / 2];
    let (grown, rest): (Vec<&WriteSummary>, Vec<&WriteSummary>) =
        sets.iter().partition(|w| grew(w));
    let (grown_ms, rest_ms) = (held(&grown), held(&rest));
    if grown_ms.is_empty() || median(&grown_ms) < QUERY_BUFFER_NOTE_MS {
        return None;
    }
    if !rest_ms.is_empty() && median(&grown_ms) < 2.0 * median(&rest_ms) {
        return None;
    }
    let kept = grown
        .iter()
        .filter_map(|w| w.writer_qbuf_free_bytes)
        .max()
        .unwrap_or(0);
    let range = |v: &[f64]| format!("{:.1}-{:.1} ms", v[0], v[v.len() - 1]);
    let others = if rest_ms.is_empty() {
        String::new()
    } else {
        format!(", the other {} {}", rest_ms.len(), range(&rest_ms))
    };
    Some(format!(
        "{} of {} SETs came while the server still kept a query buffer of up to {:.1} MiB on the writer's connection from an earlier large value, smaller than the new one, and held others {}{others}: the server grows that buffer for the larger value, and a build whose allocator copies on growing (jemalloc) does it in one block. It keeps such a buffer until its cron trims it, 1-2 s after the value on an idle server and longer with many clients: a client that sends a larger value on the same connection sooner pays for it (writer_qbuf_free_bytes in summary.csv; without --same-connection the writer opens a new connection before such a SET, where the server lets it)",
        grown_ms.len(),
        sets.len(),
        kept as f64 / (1u64 << 20) as f64,
        range(&grown_ms),
    ))
}

/// A note for a run without writes (observe mode) when the server's main thread waited for a
/// CPU inside the stalls counted `in_stalls_ms` ([`cpu_wait_in_stalls_ms`]: at most that much),
/// a millisecond or more and a tenth or more of the `stall_ms` of stalls counted: on this host
/// its CPUs were short, and the probes' own load is part of that (an idle Redis 7.0 counted 278
/// stalls, 791 ms, in 10 s at 2 x 5000/s, its main thread waiting 1.1 s for a CPU over the run;
/// 19 stalls, 49 ms, at 2 x 500/s). `wait_ms` is the wait over the whole run (schedstat, its
/// first and last readings), said beside it: the note compared that with the stalls before,
/// and said "up to 179.9 ms of those stalls is the host's" of stalls that were DEBUG SLEEPs.
pub(crate) fn observe_cpu_wait_note(
    wait_ms: f64,
    in_stalls_ms: f64,
    stall_ms: f64,
    probe_threads: u16,
    probe_rate: f64,
) -> Option<String> {
    let part_ms = in_stalls_ms.min(stall_ms);
    (stall_ms > 0.0 && part_ms >= CPU_WAIT_NOTE_MS && part_ms >= CPU_WAIT_NOTE_SHARE * stall_ms)
        .then(|| {
            format!(
                "the server's main thread waited up to {part_ms:.1} ms for a CPU during the {stall_ms:.1} ms of stalls counted ({wait_ms:.1} ms over the run): this host's CPUs were short (the server's threads, the probes' own {probe_threads} x {probe_rate}/s and anything else running), so up to that much of those stalls is the host's, not the server's; a run at a lower --probe-rate shows how much"
            )
        })
}

/// The most of the server's main-thread wait for a CPU that can lie inside `stalls` ((start,
/// end) on the run clock, µs), ms: over each interval between two readings of `samples` (run
/// clock µs, cumulative wait ns, in time order), the lesser of the wait in it and the stalls'
/// time in it. An upper bound, as tight as the readings are close (the session's settle, 50 ms).
pub(crate) fn cpu_wait_in_stalls_ms(samples: &[(u64, u64)], stalls: &[(u64, u64)]) -> f64 {
    let mut spans: Vec<(u64, u64)> = stalls.iter().copied().filter(|s| s.1 > s.0).collect();
    spans.sort_unstable();
    let mut total_us = 0.0;
    let mut first = 0;
    for pair in samples.windows(2) {
        let ((from, wait_from), (to, wait_to)) = (pair[0], pair[1]);
        if to <= from {
            continue;
        }
        // Spans wholly before this interval are before every later one too (sorted by start,
        // ends may not be: only those that end before `from` and start before it go).
        while first < spans.len() && spans[first].1 <= from && spans[first].0 <= from {
            first += 1;
        }
        let mut overlap_us = 0u64;
        let mut covered_to = from;
        for &(start, end) in &spans[first..] {
            if start >= to {
                break;
            }
            // The union of the spans inside [from, to): overlapping stalls count once.
            let (a, b) = (start.max(covered_to), end.min(to));
            if b > a {
                overlap_us += b - a;
                covered_to = b;
            }
        }
        let wait_us = wait_to.saturating_sub(wait_from) as f64 / 1e3;
        total_us += wait_us.min(overlap_us as f64);
    }
    total_us / 1e3
}

/// How long the server's main thread must have waited for a CPU during a write, and which share
/// of its `hol_delay_ms` that must be, before the run says so.
const CPU_WAIT_NOTE_MS: f64 = 1.0;
const CPU_WAIT_NOTE_SHARE: f64 = 0.1;

/// How late the worst probe of a write must have left before the run says so.
const LATE_PROBE_NOTE_MS: f64 = 1.0;

/// Stalls (and, apart, client hiccups) kept for run.json and the report: beyond this many the
/// shortest ones not tied to a write go (stalls.csv still has every one). A busy host can give
/// a stall a second for hours; run.json, rewritten every few seconds, stays a few hundred KB.
pub const KEEP_STALLS: usize = 1_000;
