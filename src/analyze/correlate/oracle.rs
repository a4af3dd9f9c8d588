//! The batch correlator as it was before it streamed, kept as the oracle of the streaming
//! one (with its two changes: the baseline median before each write, and ties among worst probes
//! broken by intended time, thread and sequence).
#![allow(dead_code)]

use super::{Analysis, CorrelateConfig};
use crate::analyze::findings::{Baseline, Stall, WriteSummary};
use crate::analyze::pressure::{MemorySample, assess};
use crate::analyze::stats::{by_size, size_model};
use crate::record::{ProbeRecord, WriteRecord};

/// Runs the whole analysis, without host memory samples (memory pressure then rests on the
/// writer's own reading after each write).
pub(super) fn _correlate(
    probes: &[ProbeRecord],
    writes: &[WriteRecord],
    config: CorrelateConfig,
) -> Analysis {
    correlate_with_memory(probes, writes, &[], config)
}

/// Runs the whole analysis, with the host memory samples of the run (sorted by time) for the
/// memory-pressure flags.
pub(super) fn correlate_with_memory(
    probes: &[ProbeRecord],
    writes: &[WriteRecord],
    memory: &[MemorySample],
    config: CorrelateConfig,
) -> Analysis {
    let windows: Vec<(u64, u64)> = writes.iter().map(|w| (w.start_us, w.reply_us)).collect();
    let baseline = baseline(probes, &windows);
    let (mut stalls, mut client_hiccups) = stall_episodes(probes, config.stall_threshold_us);
    for episode in stalls.iter_mut().chain(client_hiccups.iter_mut()) {
        episode.write_seq = overlapping_write(episode, writes, config.stall_threshold_us);
    }
    let index = ProbeIndex::new(probes);
    let writes: Vec<WriteSummary> = writes
        .iter()
        .map(|w| {
            summarize_write(
                w,
                &index,
                &stalls,
                &baseline_before(probes, &windows, w.start_us),
                memory,
                config.stall_threshold_us,
            )
        })
        .collect();
    Analysis {
        baseline,
        stalls,
        client_hiccups,
        by_size: by_size(&writes),
        size_model: size_model(&writes),
        writes,
    }
}

/// Probe indices by intended send time, so that a write looks only at the probes that can
/// overlap it (a run has ~100k probes and ~100 writes, and is analysed after every write).
struct ProbeIndex<'a> {
    probes: &'a [ProbeRecord],
    order: Vec<usize>,
    intended: Vec<u64>,
    max_latency_us: u64,
}

impl<'a> ProbeIndex<'a> {
    fn new(probes: &'a [ProbeRecord]) -> Self {
        let mut order: Vec<usize> = (0..probes.len()).collect();
        order.sort_unstable_by_key(|&i| probes[i].intended_us);
        ProbeIndex {
            probes,
            intended: order.iter().map(|&i| probes[i].intended_us).collect(),
            order,
            max_latency_us: probes
                .iter()
                .filter_map(|p| p.latency_us)
                .max()
                .unwrap_or(0),
        }
    }

    /// The probes whose [intended, reply] can meet [from, to].
    fn around(&self, from: u64, to: u64) -> impl Iterator<Item = &'a ProbeRecord> {
        let lo = self
            .intended
            .partition_point(|&t| t < from.saturating_sub(self.max_latency_us));
        let hi = self.intended.partition_point(|&t| t <= to).max(lo);
        self.order[lo..hi].iter().map(|&i| &self.probes[i])
    }
}

/// The write whose window overlaps the episode most (the earlier on a tie), if one overlaps it
/// by more than `threshold_us`.
fn overlapping_write(episode: &Stall, writes: &[WriteRecord], threshold_us: u64) -> Option<u32> {
    writes
        .iter()
        .map(|w| {
            (
                w.seq,
                overlap(episode.start_us, episode.end_us, w.start_us, w.reply_us),
            )
        })
        .filter(|&(_, o)| o > threshold_us)
        .max_by_key(|&(seq, o)| (o, std::cmp::Reverse(seq)))
        .map(|(seq, _)| seq)
}

/// Nearest-rank percentile of an ascending slice (0 when empty).
pub(super) fn percentile(sorted: &[u64], pct: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((pct / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn overlaps_any(start: u64, end: u64, windows: &[(u64, u64)]) -> bool {
    windows.iter().any(|&(ws, we)| start <= we && end >= ws)
}

/// Length of the intersection of `[a0, a1]` and `[b0, b1]`, µs.
pub(super) fn overlap(a0: u64, a1: u64, b0: u64, b1: u64) -> u64 {
    a1.min(b1).saturating_sub(a0.max(b0))
}

/// The median of the baseline probes answered before `start`, as the baseline's p50.
fn baseline_before(probes: &[ProbeRecord], windows: &[(u64, u64)], start: u64) -> Baseline {
    let earlier: Vec<ProbeRecord> = probes
        .iter()
        .filter(|p| p.reply_us.is_some_and(|r| r < start))
        .cloned()
        .collect();
    baseline(&earlier, windows)
}

fn baseline(probes: &[ProbeRecord], windows: &[(u64, u64)]) -> Baseline {
    let mut latencies: Vec<u64> = probes
        .iter()
        .filter_map(|p| Some((p.intended_us, p.reply_us?, p.latency_us?)))
        .filter(|&(start, end, _)| !overlaps_any(start, end, windows))
        .map(|(_, _, latency)| latency)
        .collect();
    latencies.sort_unstable();
    let mut lags = send_lags(probes);
    lags.sort_unstable();
    Baseline {
        probes: latencies.len() as u64,
        p50_us: percentile(&latencies, 50.0),
        p99_us: percentile(&latencies, 99.0),
        max_us: latencies.last().copied().unwrap_or(0),
        probe_errors: probes.iter().filter(|p| !p.ok).count() as u64,
        send_lag_p50_us: percentile(&lags, 50.0),
        send_lag_p99_us: percentile(&lags, 99.0),
        send_lag_max_us: lags.last().copied().unwrap_or(0),
    }
}

/// Send lag (actual − intended) of every probe: the tool's own timing jitter. Probes never wait
/// for each other, so a late probe was late only because its thread was.
pub(super) fn send_lags(probes: &[ProbeRecord]) -> Vec<u64> {
    probes.iter().map(ProbeRecord::send_lag_us).collect()
}

/// Finds silences: returns (server stalls, client hiccups), each in time order.
pub(super) fn stall_episodes(
    probes: &[ProbeRecord],
    threshold_us: u64,
) -> (Vec<Stall>, Vec<Stall>) {
    let mut replies: Vec<u64> = probes.iter().filter_map(|p| p.reply_us).collect();
    replies.sort_unstable();
    // Each delayed probe gives a silence [intended, first reply at or after intended].
    let mut silences: Vec<(u64, u64)> = probes
        .iter()
        .filter_map(|p| {
            let idx = replies.partition_point(|&r| r < p.intended_us);
            let end = *replies.get(idx)?;
            (end - p.intended_us > threshold_us).then_some((p.intended_us, end))
        })
        .collect();
    silences.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (start, end) in silences {
        match merged.last_mut() {
            Some(last) if start < last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    let mut by_intended: Vec<&ProbeRecord> = probes.iter().collect();
    by_intended.sort_unstable_by_key(|p| p.intended_us);
    // Answered probes by send time, with the latest reply among each prefix: "some probe sent
    // before t was still unanswered at e" is then one binary search.
    let mut by_sent: Vec<(u64, u64)> = probes
        .iter()
        .filter_map(|p| Some((p.sent_us, p.reply_us?)))
        .collect();
    by_sent.sort_unstable();
    let latest_reply: Vec<u64> = by_sent
        .iter()
        .scan(0, |latest, &(_, reply)| {
            *latest = reply.max(*latest);
            Some(*latest)
        })
        .collect();
    let mut stalls = Vec::new();
    let mut hiccups = Vec::new();
    for (start, end) in merged {
        let lo = by_intended.partition_point(|p| p.intended_us < start);
        let hi = by_intended.partition_point(|p| p.intended_us < end);
        let inside = &by_intended[lo..hi];
        let probes_delayed = inside
            .iter()
            .filter(|p| p.latency_us.is_none_or(|l| l > threshold_us))
            .count() as u64;
        // Was any probe really waiting on the server: sent more than the threshold before the
        // silence ended, and answered only at its end or later? If every delayed probe left
        // late instead, the silence was this host's. (Probes without a reply, lost to a reset,
        // prove nothing either way.)
        let sent_before = by_sent.partition_point(|&(sent, _)| sent + threshold_us < end);
        let on_wire = sent_before > 0 && latest_reply[sent_before - 1] >= end;
        let stall = Stall {
            start_us: start,
            end_us: end,
            duration_ms: (end - start) as f64 / 1e3,
            probes_delayed,
            write_seq: None,
            ..Stall::default()
        };
        if on_wire {
            stalls.push(stall);
        } else {
            hiccups.push(stall);
        }
    }
    (stalls, hiccups)
}

fn summarize_write(
    write: &WriteRecord,
    index: &ProbeIndex<'_>,
    stalls: &[Stall],
    baseline: &Baseline,
    memory: &[MemorySample],
    threshold_us: u64,
) -> WriteSummary {
    let (ws, we) = (write.start_us, write.reply_us);
    let mut probes_in_window = 0;
    let mut probes_delayed = 0;
    let mut worst: Option<u64> = None;
    let mut worst_send_lag = 0;
    let mut worst_key = None;
    for probe in index.around(ws, we) {
        let (Some(reply), Some(_)) = (probe.reply_us, probe.latency_us) else {
            continue;
        };
        if probe.intended_us <= we && reply >= ws {
            // Its wait inside the window only: from its intended send, or from the write's
            // start for one meant to go out before it (computed here on its own, not by the
            // streaming correlator's `waited_since`, so that the two are checked against each other).
            let from = probe.intended_us.max(ws);
            let latency = reply.saturating_sub(from);
            let send_lag = probe.sent_us.saturating_sub(from);
            probes_in_window += 1;
            if latency > threshold_us {
                probes_delayed += 1;
            }
            let key = (
                latency,
                std::cmp::Reverse(probe.intended_us),
                std::cmp::Reverse(probe.thread),
                std::cmp::Reverse(probe.seq),
            );
            if worst_key.is_none_or(|w| key > w) {
                worst_key = Some(key);
                worst = Some(latency);
                worst_send_lag = send_lag;
            }
        }
    }
    let covered = |from: u64, to: u64| -> f64 {
        stalls
            .iter()
            .map(|s| overlap(s.start_us, s.end_us, from, to))
            .sum::<u64>() as f64
            / 1e3
    };
    let sent = write.sent_us.clamp(ws, we);
    let pressure = assess(ws, we, memory, write.host_mem_pct);
    WriteSummary {
        seq: write.seq,
        op: write.op,
        size_bytes: write.size_bytes,
        set_ms: write.set_ms,
        hol_delay_ms: worst.map(|w| w.saturating_sub(baseline.p50_us) as f64 / 1e3),
        stall_ms: covered(ws, we),
        probes_delayed,
        stall_during_send_ms: covered(ws, sent),
        stall_after_send_ms: covered(sent, we),
        host_mem_pct: write.host_mem_pct,
        host_swap_pct: write.host_swap_pct,
        probes_in_window,
        worst_latency_ms: worst.map(|w| w as f64 / 1e3),
        ok: write.ok,
        server_exec_us: write.server_exec_us,
        server_latency_event_ms: write.server_latency_event_ms,
        server_eventloop_max_us: write.server_eventloop_max_us,
        server_request_bytes: write.server_request_bytes,
        memory_pressure: pressure.memory_pressure,
        host_mem_peak_pct: pressure.host_mem_peak_pct,
        host_swap_grew_bytes: pressure.host_swap_grew_bytes,
        hol_probe_send_lag_ms: worst.map(|_| worst_send_lag as f64 / 1e3),
        ..WriteSummary::default()
    }
    .with_value_of(write)
}
