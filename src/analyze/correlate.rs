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
//!
//! # Head-of-line delay
//! Probes are pipelined ([`crate::measure::probe`]): each leaves at its intended time whatever earlier
//! probes are doing, so a probe's latency is how long a client that arrived at that moment
//! waited for the server. A write's `hol_delay_ms` is the longest such wait among the probes
//! that overlapped it, less the idle round trip (the baseline median); its resolution is the
//! aggregate probe interval, and it does not grow with the probe rate.

use serde::Serialize;

pub use crate::analyze::findings::{Baseline, Stall, WriteSummary};
use crate::analyze::pressure::{MemorySample, assess};
use crate::analyze::stats::{SizeModel, SizeSpread, by_size, size_model};
use crate::record::{ProbeRecord, WriteRecord};

/// Settings of the analysis.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct CorrelateConfig {
    /// A probe waiting longer than this (from its intended send) is delayed; a silence longer
    /// than this is a stall.
    pub stall_threshold_us: u64,
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
pub fn send_lags(probes: &[ProbeRecord]) -> Vec<u64> {
    probes.iter().map(ProbeRecord::send_lag_us).collect()
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
    for probe in index.around(ws, we) {
        let (Some(reply), Some(latency)) = (probe.reply_us, probe.latency_us) else {
            continue;
        };
        if probe.intended_us <= we && reply >= ws {
            probes_in_window += 1;
            if latency > threshold_us {
                probes_delayed += 1;
            }
            if worst.is_none_or(|w| latency > w) {
                worst = Some(latency);
                worst_send_lag = probe.send_lag_us();
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{ProbeCmd, WriteOp};

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
            read_us: Some(reply_us),
            latency_us: Some(reply_us - intended_us),
            ok: true,
            error: None,
        }
    }

    /// Two threads at 1000/s each (every 500 µs together), 30 µs round trips, from `from` to
    /// `to`, with the server frozen over `[freeze_start, freeze_end)`. Pipelined, as the probe
    /// threads are: every probe leaves at its intended time, and those the freeze caught are all
    /// answered when it ends.
    fn timeline(from: u64, to: u64, freezes: &[(u64, u64)]) -> Vec<ProbeRecord> {
        timeline_at(from, to, 1000, freezes)
    }

    /// The same at `rate` probes/s per thread.
    fn timeline_at(from: u64, to: u64, rate: u64, freezes: &[(u64, u64)]) -> Vec<ProbeRecord> {
        let period = 1_000_000 / rate;
        let mut out = Vec::new();
        for thread in 0..2u16 {
            let mut t = from + u64::from(thread) * period / 2;
            while t < to {
                let mut reply = t + 30;
                for &(fs, fe) in freezes {
                    if reply > fs && t < fe {
                        reply = fe + 30;
                    }
                }
                out.push(probe(thread, t, t, reply));
                t += period;
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
        // 200 probes fell inside the freeze; those of its last millisecond waited less than
        // the threshold.
        assert_eq!(stall.probes_delayed, 198);
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
        assert_eq!(summary.hol_probe_send_lag_ms, Some(0.0));
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
        // A probe of a third connection, sent on time just before and lost to a reset: no
        // reply, so it proves nothing about the server.
        probes.push(ProbeRecord {
            reply_us: None,
            read_us: None,
            latency_us: None,
            ok: false,
            error: Some("connection reset by peer".into()),
            ..probe(2, 49_900, 49_900, 49_900)
        });
        let writes = [write(1, WriteOp::Set, 49_000, 52_000, 56_000)];
        let analysis = correlate(&probes, &writes, THRESHOLD);
        assert!(analysis.stalls.is_empty(), "{:?}", analysis.stalls);
        assert_eq!(analysis.client_hiccups.len(), 1);
        // Tied to the write it fell in, like a stall.
        assert_eq!(analysis.client_hiccups[0].write_seq, Some(1));
        // The write's worst wait was all the probe's own late start, and the summary says so.
        let summary = &analysis.writes[0];
        assert_eq!(summary.hol_delay_ms, Some(5.0));
        assert_eq!(summary.hol_probe_send_lag_ms, Some(5.0));
        assert!(analysis.baseline.send_lag_max_us >= 4_000);
    }

    #[test]
    fn a_freeze_behind_probes_in_flight_is_a_stall_not_a_hiccup() {
        // 2 threads x 10 000/s, the threads a little behind schedule when the server froze for
        // 100 ms (the numbers of a real calibration run of the one-at-a-time engine; a
        // pipelined thread descheduled for the whole freeze looks the same): both probes in
        // flight were intended before the first delayed probe, and every probe intended inside
        // the episode left only after it.
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
        // Pipelined probes leave no backlog behind a stall: right after the window the
        // baseline is as tight as ever.
        assert_eq!(analysis.baseline.p99_us, 30);
        assert_eq!(analysis.baseline.max_us, 30);
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
    fn pipelined_head_of_line_delay_does_not_move_with_the_probe_rate() {
        // The same 40 ms freeze inside a DEL, sampled at 100, 1000 and 10 000 probes/s per
        // thread: the worst wait is the freeze's length to within one aggregate interval, at
        // every rate, and the probes after it are answered at once.
        let writes = [write(1, WriteOp::Delete, 500_000, 500_010, 540_100)];
        let mut holds = Vec::new();
        for rate in [100, 1000, 10_000] {
            let probes = timeline_at(0, 1_000_000, rate, &[(500_050, 540_050)]);
            let analysis = correlate(&probes, &writes, THRESHOLD);
            let hol = analysis.writes[0].hol_delay_ms.unwrap();
            let interval_ms = 1e3 / (2 * rate) as f64;
            assert!(
                hol <= 40.05 && hol >= 40.0 - interval_ms - 0.1,
                "{rate}/s: {hol} ms"
            );
            assert_eq!(analysis.stalls.len(), 1, "{rate}/s");
            assert_eq!(analysis.baseline.max_us, 30, "{rate}/s");
            holds.push(hol);
        }
        assert!((holds[1] - holds[2]).abs() < 0.5, "{holds:?}");
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
