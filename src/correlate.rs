//! The correlator: pure functions from a recorded timeline (probes and writes, all on the run's
//! clock) to findings: the baseline, the stall episodes, and per write how long other clients
//! were kept waiting. No sockets, no threads, no clock: everything here is testable on synthetic
//! timelines.
//!
//! # Stall episodes
//! A probe whose intended send time `t` is followed by no reply from the server (to any probe)
//! until `e`, with `e - t` above the threshold, proves the server was silent over `[t, e]`
//! while a client was waiting. Such intervals from all probes are merged into episodes: start =
//! the intended send of the first delayed probe, end = the reply that broke the silence. The
//! true stall began at most one aggregate probe interval before the start, so the duration is
//! accurate to about one interval (0.5 ms at 2 threads × 1000/s).
//!
//! An episode in which no probe was actually on the wire longer than the threshold was not the
//! server: every delayed probe left late, so the probe threads themselves were held up (the
//! client host was busy). Those are reported apart as client hiccups, never as server stalls.

use serde::Serialize;

use crate::pressure::{MemorySample, assess};
use crate::record::{ProbeRecord, WriteOp, WriteRecord};
use crate::stats::{SizeModel, SizeSpread, by_size, size_model};

/// Settings of the analysis.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct CorrelateConfig {
    /// A probe waiting longer than this (from its intended send) is delayed; a silence longer
    /// than this is a stall.
    pub stall_threshold_us: u64,
}

/// Probe latency outside every write window: what the server gives when left alone.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
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
    /// The tool's own timing: median of (actual − intended send), µs, over the probes whose
    /// thread was idle at their intended time (a probe queued behind a stalled one is late by
    /// design and is left out).
    pub send_lag_p50_us: u64,
    /// 99th percentile of the same: the probes' timing jitter.
    pub send_lag_p99_us: u64,
    /// Worst (actual − intended send), µs.
    pub send_lag_max_us: u64,
}

/// A stall episode: the server answered no probe while one was waiting past the threshold.
#[derive(Debug, Clone, PartialEq, Serialize)]
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
}

/// Per write: what other clients saw while it ran.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WriteSummary {
    /// Write number, from 1.
    pub seq: u32,
    /// `set`, `overwrite`, `delete` or `command`.
    pub op: WriteOp,
    /// Value size, bytes.
    pub size_bytes: u64,
    /// The writer's own elapsed time (what the seed measured), ms.
    pub set_ms: f64,
    /// Worst latency among probes overlapping the write, minus the baseline median, ms. Empty
    /// when no probe overlapped the write.
    pub hol_delay_ms: Option<f64>,
    /// Time inside the write's window covered by stall episodes, ms.
    pub stall_ms: f64,
    /// Probes overlapping the write whose latency passed the threshold.
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
    /// Worst latency among them, ms (empty without probes).
    pub worst_latency_ms: Option<f64>,
    /// Whether the write itself succeeded.
    pub ok: bool,
    /// The server's SLOWLOG execution time of the command, µs (see [`WriteRecord`]).
    pub server_exec_us: Option<u64>,
    /// The largest LATENCY event the server recorded during the write, ms.
    pub server_latency_event_ms: Option<u64>,
    /// The server's longest event-loop cycle during the write, µs.
    pub server_eventloop_max_us: Option<u64>,
    /// The request size in Valkey's COMMANDLOG `large-request`, bytes.
    pub server_request_bytes: Option<u64>,
    /// True when host swap grew during the write or host memory passed 90%: the figures then
    /// include the host's paging, not only the server's own cost.
    pub memory_pressure: bool,
    /// The highest host memory use from the write's start to just after its reply, percent.
    pub host_mem_peak_pct: f64,
    /// How much host swap use grew during the write, bytes.
    pub host_swap_grew_bytes: u64,
    /// The head-of-line delay without the client's own lateness: the same worst-minus-median,
    /// over latencies replayed as if every probe had left on time or right after its thread's
    /// previous reply ([`replay_without_client_lag`]). Empty when no probe overlapped.
    pub hol_delay_server_ms: Option<f64>,
}

/// Everything the correlator finds in one timeline.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Analysis {
    /// Latency outside write windows, and the tool's own send jitter.
    pub baseline: Baseline,
    /// Server stall episodes, in time order.
    pub stalls: Vec<Stall>,
    /// Silences in which every delayed probe left late: the client host, not the server.
    pub client_hiccups: Vec<Stall>,
    /// One row per write, in write order (`summary` in run.json, as summary.csv).
    #[serde(rename = "summary")]
    pub writes: Vec<WriteSummary>,
    /// Per op and size: median, min, max and the 95% interval of `set_ms` and `hol_delay_ms`
    /// over the repeats.
    pub by_size: Vec<SizeSpread>,
    /// Least-squares lines of delay against size over the `set` writes (empty with fewer than
    /// two sizes).
    pub size_model: Option<SizeModel>,
}

/// Runs the whole analysis, without host memory samples (memory pressure then rests on the
/// writer's own reading after each write).
pub fn correlate(
    probes: &[ProbeRecord],
    writes: &[WriteRecord],
    config: CorrelateConfig,
) -> Analysis {
    correlate_with_memory(probes, writes, &[], config)
}

/// Runs the whole analysis, with the host memory samples of the run (sorted by time) for the
/// memory-pressure flags.
pub fn correlate_with_memory(
    probes: &[ProbeRecord],
    writes: &[WriteRecord],
    memory: &[MemorySample],
    config: CorrelateConfig,
) -> Analysis {
    let windows: Vec<(u64, u64)> = writes.iter().map(|w| (w.start_us, w.reply_us)).collect();
    let baseline = baseline(probes, &windows);
    let (mut stalls, mut client_hiccups) = stall_episodes(probes, config.stall_threshold_us);
    for episode in stalls.iter_mut().chain(client_hiccups.iter_mut()) {
        episode.write_seq = overlapping_write(episode, writes);
    }
    let index = ProbeIndex::new(probes);
    let writes: Vec<WriteSummary> = writes
        .iter()
        .map(|w| {
            summarize_write(
                w,
                &index,
                &stalls,
                &baseline,
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
/// Each probe also carries its latency without the client's own lateness.
struct ProbeIndex<'a> {
    probes: &'a [ProbeRecord],
    replayed: Vec<Option<u64>>,
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
            replayed: replay_without_client_lag(probes),
            intended: order.iter().map(|&i| probes[i].intended_us).collect(),
            order,
            max_latency_us: probes
                .iter()
                .filter_map(|p| p.latency_us)
                .max()
                .unwrap_or(0),
        }
    }

    /// The probes whose [intended, reply] can meet [from, to], each with its replayed latency.
    fn around(&self, from: u64, to: u64) -> impl Iterator<Item = (&'a ProbeRecord, Option<u64>)> {
        let lo = self
            .intended
            .partition_point(|&t| t < from.saturating_sub(self.max_latency_us));
        let hi = self.intended.partition_point(|&t| t <= to).max(lo);
        self.order[lo..hi]
            .iter()
            .map(|&i| (&self.probes[i], self.replayed[i]))
    }
}

/// The write whose window overlaps the episode most (the earlier on a tie), if any does.
fn overlapping_write(episode: &Stall, writes: &[WriteRecord]) -> Option<u32> {
    writes
        .iter()
        .map(|w| {
            (
                w.seq,
                overlap(episode.start_us, episode.end_us, w.start_us, w.reply_us),
            )
        })
        .filter(|&(_, o)| o > 0)
        .max_by_key(|&(seq, o)| (o, std::cmp::Reverse(seq)))
        .map(|(seq, _)| seq)
}

/// Nearest-rank percentile of an ascending slice (0 when empty).
pub fn percentile(sorted: &[u64], pct: f64) -> u64 {
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
pub fn overlap(a0: u64, a1: u64, b0: u64, b1: u64) -> u64 {
    a1.min(b1).saturating_sub(a0.max(b0))
}

fn baseline(probes: &[ProbeRecord], windows: &[(u64, u64)]) -> Baseline {
    let mut latencies: Vec<u64> = probes
        .iter()
        .filter_map(|p| Some((p.intended_us, p.reply_us?, p.latency_us?)))
        .filter(|&(start, end, _)| !overlaps_any(start, end, windows))
        .map(|(_, _, latency)| latency)
        .collect();
    latencies.sort_unstable();
    let mut lags = on_time_send_lags(probes);
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

/// Open-loop latencies with the client's own lateness taken out, one per probe (in `probes`'
/// order; `None` without a reply).
///
/// Each thread is replayed as a perfect client: a probe leaves at its intended time, or when the
/// thread's previous (replayed) reply came if that is later, and spends on the wire what it
/// really spent (`reply - sent`). A probe that left late only because its thread was not
/// scheduled gets its on-time latency back; a probe held behind a stalled reply keeps all of its
/// wait, so server stalls and the queueing they cause are untouched. What cannot be taken out:
/// a reply that sat in the socket while the thread was descheduled counts as the server's.
pub fn replay_without_client_lag(probes: &[ProbeRecord]) -> Vec<Option<u64>> {
    let mut order: Vec<usize> = (0..probes.len()).collect();
    order.sort_unstable_by_key(|&i| (probes[i].thread, probes[i].seq));
    let mut out = vec![None; probes.len()];
    let mut previous: Option<(u16, u64)> = None; // (thread, replayed reply)
    for i in order {
        let probe = &probes[i];
        let free_at = match previous {
            Some((thread, reply)) if thread == probe.thread => reply,
            _ => 0,
        };
        let Some(reply) = probe.reply_us else {
            // No reply: the thread reconnected; its next probe starts afresh.
            previous = None;
            continue;
        };
        let v_sent = probe.intended_us.max(free_at);
        let v_reply = v_sent + reply.saturating_sub(probe.sent_us);
        out[i] = Some(v_reply - probe.intended_us);
        previous = Some((probe.thread, v_reply));
    }
    out
}

/// Send lag (actual − intended) of the probes whose thread was idle at their intended time: the
/// tool's own timing jitter. A probe queued behind a stalled reply leaves late by design (its
/// latency still counts from the intended time), so it says nothing about the tool's timing.
pub fn on_time_send_lags(probes: &[ProbeRecord]) -> Vec<u64> {
    let mut by_thread: Vec<&ProbeRecord> = probes.iter().collect();
    by_thread.sort_unstable_by_key(|p| (p.thread, p.seq));
    by_thread
        .windows(2)
        .filter(|pair| {
            pair[0].thread == pair[1].thread
                && pair[0].reply_us.is_some_and(|r| r <= pair[1].intended_us)
        })
        .map(|pair| pair[1].send_lag_us())
        .collect()
}

/// Finds silences: returns (server stalls, client hiccups), each in time order.
pub fn stall_episodes(probes: &[ProbeRecord], threshold_us: u64) -> (Vec<Stall>, Vec<Stall>) {
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
    // Per thread, by send time: a thread has at most one probe outstanding, the last it sent.
    let mut by_thread: std::collections::BTreeMap<u16, Vec<&ProbeRecord>> = Default::default();
    for probe in probes {
        by_thread.entry(probe.thread).or_default().push(probe);
    }
    for list in by_thread.values_mut() {
        list.sort_unstable_by_key(|p| p.sent_us);
    }
    let waited_on_wire = |p: &ProbeRecord, end: u64| {
        p.sent_us < end && end - p.sent_us > threshold_us && p.reply_us.is_none_or(|r| r >= end)
    };
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
        // Was any probe really waiting on the server, sent and unanswered past the threshold?
        // Besides the probes intended inside, look at each thread's last probe sent before the
        // end: at high rates the probe in flight when the server froze was intended (and sent)
        // just before the episode's start, while every probe intended inside leaves only after
        // the end, behind it.
        let on_wire = inside.iter().any(|p| waited_on_wire(p, end))
            || by_thread.values().any(|list| {
                let idx = list.partition_point(|p| p.sent_us < end);
                idx > 0 && waited_on_wire(list[idx - 1], end)
            });
        let stall = Stall {
            start_us: start,
            end_us: end,
            duration_ms: (end - start) as f64 / 1e3,
            probes_delayed,
            write_seq: None,
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
    let mut worst_server: Option<u64> = None;
    for (probe, server_latency) in index.around(ws, we) {
        let (Some(reply), Some(latency)) = (probe.reply_us, probe.latency_us) else {
            continue;
        };
        if probe.intended_us <= we && reply >= ws {
            probes_in_window += 1;
            if latency > threshold_us {
                probes_delayed += 1;
            }
            worst = Some(worst.map_or(latency, |w| w.max(latency)));
            if let Some(v) = server_latency {
                worst_server = Some(worst_server.map_or(v, |w| w.max(v)));
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
        hol_delay_server_ms: worst_server.map(|w| w.saturating_sub(baseline.p50_us) as f64 / 1e3),
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::ProbeCmd;

    const THRESHOLD: CorrelateConfig = CorrelateConfig {
        stall_threshold_us: 1000,
    };

    /// A probe that left on time and was answered after `wait_us`.
    fn probe(thread: u16, intended_us: u64, sent_us: u64, reply_us: u64) -> ProbeRecord {
        ProbeRecord {
            thread,
            seq: 0,
            cmd: ProbeCmd::Ping,
            intended_us,
            sent_us,
            reply_us: Some(reply_us),
            latency_us: Some(reply_us - intended_us),
            ok: true,
            error: None,
        }
    }

    /// Two threads at 1000/s each (every 500 µs together), 30 µs round trips, from `from` to
    /// `to`, with the server frozen over `[freeze_start, freeze_end)`: probes sent during the
    /// freeze are answered at its end, and each thread then catches up back to back, as the
    /// real probe threads do.
    fn timeline(from: u64, to: u64, freezes: &[(u64, u64)]) -> Vec<ProbeRecord> {
        let mut out = Vec::new();
        for thread in 0..2u16 {
            let mut free_at = 0u64; // when this thread can send again
            let mut t = from + u64::from(thread) * 500;
            while t < to {
                let sent = t.max(free_at);
                let mut reply = sent + 30;
                for &(fs, fe) in freezes {
                    if reply > fs && sent < fe {
                        reply = fe + 30;
                    }
                }
                out.push(probe(thread, t, sent, reply));
                free_at = reply;
                t += 1000;
            }
        }
        out
    }

    fn write(seq: u32, op: WriteOp, start: u64, sent: u64, reply: u64) -> WriteRecord {
        WriteRecord {
            seq,
            op,
            key: format!("k{seq}"),
            size_bytes: 64 << 20,
            start_us: start,
            sent_us: sent,
            reply_us: reply,
            set_ms: (reply - start) as f64 / 1e3,
            ok: true,
            error: None,
            host_mem_pct: 10.0,
            host_swap_pct: 0.0,
            server_rss_bytes: None,
            server_exec_us: None,
            server_latency_event_ms: None,
            server_latency_event: None,
            server_eventloop_max_us: None,
            server_request_bytes: None,
        }
    }

    #[test]
    fn a_quiet_timeline_has_no_stalls_and_a_tight_baseline() {
        let probes = timeline(0, 1_000_000, &[]);
        let analysis = correlate(&probes, &[], THRESHOLD);
        assert!(analysis.stalls.is_empty());
        assert!(analysis.client_hiccups.is_empty());
        assert_eq!(analysis.baseline.probes, probes.len() as u64);
        assert_eq!(analysis.baseline.p50_us, 30);
        assert_eq!(analysis.baseline.max_us, 30);
    }

    #[test]
    fn a_100ms_freeze_measures_100ms_within_one_interval() {
        let probes = timeline(0, 1_000_000, &[(300_200, 400_200)]);
        let analysis = correlate(&probes, &[], THRESHOLD);
        assert_eq!(analysis.stalls.len(), 1, "{:?}", analysis.stalls);
        let stall = &analysis.stalls[0];
        // First probe intended after the freeze began is at 300_500; the silence ends with the
        // first reply after the freeze, 400_230.
        assert_eq!(stall.start_us, 300_500);
        assert_eq!(stall.end_us, 400_230);
        assert!(
            (stall.duration_ms - 100.0).abs() <= 0.5,
            "{}",
            stall.duration_ms
        );
        // 200 probes fell inside the freeze; all were delayed (a few caught up just after).
        assert!(
            (195..=202).contains(&stall.probes_delayed),
            "{}",
            stall.probes_delayed
        );
        assert_eq!(stall.write_seq, None);
    }

    #[test]
    fn two_stalls_in_one_write_are_both_counted() {
        let probes = timeline(0, 1_000_000, &[(400_000, 410_000), (500_000, 520_000)]);
        let writes = [write(1, WriteOp::Set, 350_000, 480_000, 600_000)];
        let analysis = correlate(&probes, &writes, THRESHOLD);
        assert_eq!(analysis.stalls.len(), 2);
        assert!(analysis.stalls.iter().all(|s| s.write_seq == Some(1)));
        let summary = &analysis.writes[0];
        let total: f64 = analysis.stalls.iter().map(|s| s.duration_ms).sum();
        assert!((summary.stall_ms - total).abs() < 1e-9);
        assert!(
            (summary.stall_ms - 30.0).abs() <= 1.0,
            "{}",
            summary.stall_ms
        );
        // The first stall fell while the value was being sent, the second after its last byte.
        assert!((summary.stall_during_send_ms - 10.0).abs() <= 0.5);
        assert!((summary.stall_after_send_ms - 20.0).abs() <= 0.5);
        // The worst probe waited about 20 ms; baseline median is 30 µs.
        let hol = summary.hol_delay_ms.unwrap();
        assert!((19.0..=20.1).contains(&hol), "{hol}");
        assert!(summary.probes_delayed >= 55, "{}", summary.probes_delayed);
    }

    #[test]
    fn a_stall_that_begins_before_a_write_counts_only_its_overlap() {
        let probes = timeline(0, 1_000_000, &[(200_000, 300_000)]);
        let writes = [write(1, WriteOp::Overwrite, 250_000, 250_100, 260_000)];
        let analysis = correlate(&probes, &writes, THRESHOLD);
        assert_eq!(analysis.stalls.len(), 1);
        let summary = &analysis.writes[0];
        assert!(
            (summary.stall_ms - 10.0).abs() < 1e-9,
            "{}",
            summary.stall_ms
        );
        assert_eq!(analysis.stalls[0].write_seq, Some(1));
    }

    #[test]
    fn a_window_with_no_probes_reports_no_delay() {
        let probes = timeline(0, 100_000, &[]);
        let writes = [write(1, WriteOp::Set, 500_000, 500_010, 500_020)];
        let analysis = correlate(&probes, &writes, THRESHOLD);
        let summary = &analysis.writes[0];
        assert_eq!(summary.hol_delay_ms, None);
        assert_eq!(summary.probes_in_window, 0);
        assert_eq!(summary.probes_delayed, 0);
        assert_eq!(summary.stall_ms, 0.0);
    }

    #[test]
    fn errored_probes_are_counted_but_do_not_invent_stalls() {
        let mut probes = timeline(0, 100_000, &[]);
        // A connection reset: no reply at all.
        probes[10].reply_us = None;
        probes[10].latency_us = None;
        probes[10].ok = false;
        probes[10].error = Some("connection reset".into());
        // A server error reply: it is still a reply.
        probes[20].ok = false;
        probes[20].error = Some("LOADING".into());
        let analysis = correlate(&probes, &[], THRESHOLD);
        assert!(analysis.stalls.is_empty());
        assert_eq!(analysis.baseline.probe_errors, 2);
        assert_eq!(analysis.baseline.probes, probes.len() as u64 - 1);
    }

    #[test]
    fn probes_that_left_late_on_a_busy_client_are_hiccups_not_stalls() {
        // Both threads descheduled for 5 ms: every probe of that span leaves late, each is
        // answered in 30 µs. The server was never silent while a probe waited on it.
        let mut probes = Vec::new();
        for thread in 0..2u16 {
            let mut t = u64::from(thread) * 500;
            while t < 100_000 {
                let sent = if (50_000..55_000).contains(&t) {
                    55_000 + t % 1000
                } else {
                    t
                };
                probes.push(probe(thread, t, sent, sent + 30));
                t += 1000;
            }
        }
        let writes = [write(1, WriteOp::Set, 49_000, 52_000, 56_000)];
        let analysis = correlate(&probes, &writes, THRESHOLD);
        assert!(analysis.stalls.is_empty(), "{:?}", analysis.stalls);
        assert_eq!(analysis.client_hiccups.len(), 1);
        // Tied to the write it fell in, like a stall.
        assert_eq!(analysis.client_hiccups[0].write_seq, Some(1));
        assert!(analysis.baseline.send_lag_max_us >= 4_000);
    }

    #[test]
    fn a_freeze_behind_probes_in_flight_is_a_stall_not_a_hiccup() {
        // 2 threads x 10 000/s, the threads a little behind schedule when the server froze for
        // 100 ms (the numbers of a real calibration run): both probes in flight were intended
        // before the first delayed probe, and every probe intended inside the episode left
        // only after it, behind them.
        let rec = |thread: u16, intended: u64, sent: u64, reply: u64| {
            probe(thread, intended, sent, reply)
        };
        let probes = vec![
            rec(0, 1_044_100, 1_044_100, 1_044_158),
            rec(0, 1_044_200, 1_044_200, 1_044_387),
            rec(1, 1_044_150, 1_044_150, 1_044_400),
            rec(0, 1_044_300, 1_044_391, 1_044_446),
            rec(1, 1_044_250, 1_044_401, 1_044_475),
            rec(0, 1_044_400, 1_044_450, 1_144_753),
            rec(1, 1_044_350, 1_044_475, 1_144_970),
            rec(0, 1_044_500, 1_144_759, 1_145_054),
            rec(1, 1_044_450, 1_144_981, 1_145_073),
            rec(0, 1_044_600, 1_145_065, 1_145_109),
            rec(1, 1_044_550, 1_145_074, 1_145_127),
        ];
        let (stalls, hiccups) = stall_episodes(&probes, 1000);
        assert!(hiccups.is_empty(), "{hiccups:?}");
        assert_eq!(stalls.len(), 1);
        assert_eq!(stalls[0].start_us, 1_044_500);
        assert_eq!(stalls[0].end_us, 1_144_753);
    }

    #[test]
    fn baseline_excludes_write_windows() {
        let probes = timeline(0, 1_000_000, &[(400_000, 450_000)]);
        let writes = [write(1, WriteOp::Delete, 399_000, 399_010, 450_100)];
        let analysis = correlate(&probes, &writes, THRESHOLD);
        // Only the few probes queued behind the backlog just after the window are slower.
        assert_eq!(analysis.baseline.p99_us, 30);
        assert!(
            analysis.baseline.max_us < 2_000,
            "{}",
            analysis.baseline.max_us
        );
        assert!(analysis.writes[0].hol_delay_ms.unwrap() > 49.0);
    }

    #[test]
    fn memory_samples_flag_the_write_during_which_swap_grew() {
        let probes = timeline(0, 1_000_000, &[]);
        let writes = [
            write(1, WriteOp::Set, 100_000, 150_000, 200_000),
            write(2, WriteOp::Set, 500_000, 550_000, 600_000),
        ];
        let memory: Vec<MemorySample> = (0..50)
            .map(|i| MemorySample {
                at_us: i * 20_000,
                mem_pct: 50.0,
                // Swap grows from 0 to 64 MiB between 520 ms and 580 ms: inside write 2.
                swap_used_bytes: if i * 20_000 >= 520_000 { 64 << 20 } else { 0 },
            })
            .collect();
        let analysis = correlate_with_memory(&probes, &writes, &memory, THRESHOLD);
        assert!(!analysis.writes[0].memory_pressure);
        assert!(analysis.writes[1].memory_pressure);
        assert_eq!(analysis.writes[1].host_swap_grew_bytes, 64 << 20);
        // Without samples only the after-write reading (10%) is known: no flag.
        let plain = correlate(&probes, &writes, THRESHOLD);
        assert!(plain.writes.iter().all(|w| !w.memory_pressure));
    }

    #[test]
    fn replay_keeps_server_waits_and_drops_the_clients_own_lateness() {
        // A server freeze: replayed latencies equal the measured ones (catch-up included).
        let frozen = timeline(0, 1_000_000, &[(300_200, 400_200)]);
        let replayed = replay_without_client_lag(&frozen);
        for (probe, v) in frozen.iter().zip(&replayed) {
            assert_eq!(*v, probe.latency_us, "{probe:?}");
        }
        let writes = [write(1, WriteOp::Delete, 300_000, 300_010, 400_200)];
        let analysis = correlate(&frozen, &writes, THRESHOLD);
        assert_eq!(
            analysis.writes[0].hol_delay_server_ms,
            analysis.writes[0].hol_delay_ms
        );

        // A probe thread descheduled for 8 ms during a 30 µs DEL: the probes left late and were
        // answered at once. Open-loop latency shows 8 ms; the server's part is 30 µs.
        let mut late = timeline(0, 100_000, &[]);
        for probe in late
            .iter_mut()
            .filter(|p| (50_000..58_000).contains(&p.intended_us))
        {
            probe.sent_us = 58_000 + probe.intended_us % 1000;
            probe.reply_us = Some(probe.sent_us + 30);
            probe.latency_us = Some(probe.sent_us + 30 - probe.intended_us);
        }
        let writes = [write(1, WriteOp::Delete, 50_100, 50_110, 50_130)];
        let analysis = correlate(&late, &writes, THRESHOLD);
        let summary = &analysis.writes[0];
        assert!(summary.hol_delay_ms.unwrap() > 7.0, "{summary:?}");
        assert!(summary.hol_delay_server_ms.unwrap() < 0.1, "{summary:?}");
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let data: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&data, 50.0), 50);
        assert_eq!(percentile(&data, 99.0), 99);
        assert_eq!(percentile(&data, 100.0), 100);
        assert_eq!(percentile(&[], 50.0), 0);
        assert_eq!(percentile(&[7], 99.9), 7);
    }
}
