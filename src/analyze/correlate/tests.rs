//! The correlator's tests: synthetic timelines with the awkward cases named, and the property
//! test that streaming and all-at-once (and the batch oracle) give the same findings.

use proptest::prelude::*;

use super::*;
use crate::record::{ProbeCmd, WriteOp};

const THRESHOLD: CorrelateConfig = CorrelateConfig::with_threshold(1000);

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
        host_mem_pct: 10.0,
        ..WriteRecord::timed(seq, op, format!("k{seq}"), 64 << 20, (start, sent, reply))
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

/// Another client's 100 ms DEBUG SLEEP ends 350 µs before a 23 µs DEL begins; the probes it
/// held are answered just after the DEL's start (their replies read late). Their wait before
/// the DEL's start is not the DEL's: it was charged whole (101 ms, 101 probes delayed: the
/// hostile trial of 2026-12-05).
#[test]
fn a_wait_that_began_before_a_write_is_counted_from_its_start() {
    let mut probes = timeline(0, 2_000_000, &[(937_500, 1_037_843)]);
    for p in &mut probes {
        if p.reply_us == Some(1_037_873) {
            p.reply_us = Some(1_038_516);
            p.read_us = p.reply_us;
            p.latency_us = Some(1_038_516 - p.intended_us);
        }
    }
    let writes = [write(1, WriteOp::Delete, 1_038_192, 1_038_200, 1_038_215)];
    let analysis = correlate(&probes, &writes, THRESHOLD);
    let summary = &analysis.writes[0];
    // 1_038_516 - 1_038_192 = 324 µs, less the baseline's 30.
    assert_eq!(summary.hol_delay_ms, Some(0.294), "{summary:?}");
    assert_eq!(summary.worst_latency_ms, Some(0.324));
    assert_eq!(summary.probes_delayed, 0);
    assert!(summary.probes_in_window > 100, "{summary:?}");
    // The stall is found, and is no write's.
    assert!(
        analysis
            .stalls
            .iter()
            .any(|s| s.duration_ms > 99.0 && s.write_seq.is_none()),
        "{:?}",
        analysis.stalls
    );

    // The same stall ending inside the DEL's window (its first reply after the silence at
    // 1_037_873, the DEL over [1_037_850, 1_037_896]): the DEL held no one, and the stall is
    // not tied to it (it was, by its 23 µs of overlap: the review of 2026-12-05).
    let probes = timeline(0, 2_000_000, &[(937_500, 1_037_843)]);
    let writes = [write(1, WriteOp::Delete, 1_037_850, 1_037_855, 1_037_896)];
    let analysis = correlate(&probes, &writes, THRESHOLD);
    let summary = &analysis.writes[0];
    assert!(
        summary.hol_delay_ms.is_some_and(|ms| ms < 0.1),
        "{summary:?}"
    );
    assert_eq!(summary.probes_delayed, 0);
    let long = analysis
        .stalls
        .iter()
        .find(|s| s.duration_ms > 99.0)
        .expect("the 100 ms stall");
    assert!(
        long.end_us > 1_037_850,
        "it ends inside the window: {long:?}"
    );
    assert_eq!(long.write_seq, None, "{long:?}");
    // A stall inside a write's window is still the write's.
    let probes = timeline(0, 2_000_000, &[(500_100, 504_100)]);
    let writes = [write(1, WriteOp::Delete, 500_000, 500_050, 504_100)];
    let analysis = correlate(&probes, &writes, THRESHOLD);
    assert_eq!(analysis.stalls.len(), 1, "{:?}", analysis.stalls);
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
    let rec =
        |thread: u16, intended: u64, sent: u64, reply: u64| probe(thread, intended, sent, reply);
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
    let analysis = correlate(&probes, &[], THRESHOLD);
    let (stalls, hiccups) = (analysis.stalls, analysis.client_hiccups);
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

/// A random timeline: 1 to 3 threads at 1000 to 5000/s each over 0.3 s, freezes of the
/// server, late sends (the client's own hiccups), lost and error replies, and writes
/// (one after the other) around some of it.
fn random_timeline(
    threads: u16,
    rate: u64,
    freezes: &[(u64, u64)],
    lates: &[(u64, u64)],
    losses: &[usize],
    write_spans: &[(u64, u64)],
) -> (Vec<ProbeRecord>, Vec<WriteRecord>) {
    let period = 1_000_000 / rate;
    let mut probes = Vec::new();
    for thread in 0..threads {
        let mut t = u64::from(thread) * period / u64::from(threads);
        let mut seq = 0;
        while t < 300_000 {
            let mut sent = t;
            for &(from, len) in lates {
                if t >= from && t < from + len {
                    sent = from + len + (t % 7);
                }
            }
            let mut reply = sent + 25 + (t * 7919 % 40);
            for &(fs, fe) in freezes {
                if reply > fs && sent < fe {
                    reply = fe + 20 + (t % 13);
                }
            }
            let mut p = probe(thread, t, sent, reply);
            p.seq = seq;
            // A thread held up reads what arrived meanwhile only when it runs again.
            for &(from, len) in lates {
                if reply >= from && reply < from + len && thread % 2 == 0 {
                    p.read_us = Some(from + len + 3);
                }
            }
            probes.push(p);
            seq += 1;
            t += period;
        }
    }
    for &i in losses {
        let n = probes.len().max(1);
        if let Some(p) = probes.get_mut(i % n) {
            if i % 2 == 0 {
                p.reply_us = None;
                p.read_us = None;
                p.latency_us = None;
            }
            p.ok = false;
            p.error = Some("lost".into());
        }
    }
    let mut writes = Vec::new();
    let mut from = 0;
    for (i, &(gap, len)) in write_spans.iter().enumerate() {
        let start = from + gap;
        let reply = start + len;
        let op = [WriteOp::Set, WriteOp::Overwrite, WriteOp::Delete][i % 3];
        writes.push(write(i as u32 + 1, op, start, start + len / 2, reply));
        from = reply + 1;
    }
    (probes, writes)
}

/// Feeds the timeline as the run's threads would: each probe when its thread has read it
/// (in order per thread, threads interleaved by read time), each write at its reply, the
/// horizon moved every `step_us` of the clock.
fn streamed(
    probes: &[ProbeRecord],
    writes: &[WriteRecord],
    memory: &[MemorySample],
    step_us: u64,
    intervals: Option<u64>,
) -> (Analysis, Vec<Interval>) {
    let mut correlator = Correlator::new(THRESHOLD);
    if let Some(len) = intervals {
        correlator = correlator.with_intervals(len);
    }
    // A probe reaches the collector when its thread read it; a failed one at its intended
    // time plus a little. A thread delivers in order.
    let delivered = |p: &ProbeRecord| p.read_us.unwrap_or(p.intended_us + 500);
    let mut order: Vec<&ProbeRecord> = probes.iter().collect();
    order.sort_by_key(|p| (p.thread, p.seq));
    let threads = probes.iter().map(|p| p.thread).max().map_or(0, |t| t + 1);
    let mut per_thread: Vec<VecDeque<&ProbeRecord>> = vec![VecDeque::new(); threads as usize];
    for p in order {
        per_thread[p.thread as usize].push_back(p);
    }
    // Each thread's delivery time: the latest read so far (in-order delivery).
    let mut last_intended: Vec<Option<u64>> = vec![None; threads as usize];
    let mut ready: Vec<u64> = vec![0; threads as usize];
    let end = probes.iter().filter_map(|p| p.read_us).max().unwrap_or(0) + 10 * step_us;
    let mut writes_left: VecDeque<&WriteRecord> = writes.iter().collect();
    let mut memory_left: VecDeque<&MemorySample> = memory.iter().collect();
    let mut analysis = Analysis::default();
    let mut found_intervals = Vec::new();
    let mut now = 0;
    while now <= end {
        for (thread, queue) in per_thread.iter_mut().enumerate() {
            while let Some(p) = queue.front() {
                let at = delivered(p).max(ready[thread]);
                if at > now {
                    break;
                }
                ready[thread] = at;
                last_intended[thread] = Some(p.intended_us);
                correlator.probe(p);
                queue.pop_front();
            }
        }
        while writes_left.front().is_some_and(|w| w.reply_us <= now) {
            correlator.write((*writes_left.pop_front().unwrap()).clone());
        }
        while memory_left.front().is_some_and(|m| m.at_us <= now) {
            correlator.memory(*memory_left.pop_front().unwrap());
        }
        let probes_through = last_intended
            .iter()
            .map(|l| l.unwrap_or(0))
            .min()
            .unwrap_or(0);
        // The writer is busy from a write's start until its record is given.
        let writes_from = writes_left.front().map_or(now, |w| w.start_us.min(now));
        correlator.advance(Horizon {
            probes_through_us: probes_through,
            writes_from_us: writes_from,
        });
        for finding in correlator.drain() {
            if let Finding::Interval(i) = &finding {
                found_intervals.push(i.clone());
            }
            analysis.push(finding);
        }
        now += step_us;
    }
    for queue in &mut per_thread {
        for p in queue.drain(..) {
            correlator.probe(p);
        }
    }
    for w in writes_left {
        correlator.write(w.clone());
    }
    for m in memory_left {
        correlator.memory(*m);
    }
    correlator.finish();
    for finding in correlator.drain() {
        if let Finding::Interval(i) = &finding {
            found_intervals.push(i.clone());
        }
        analysis.push(finding);
    }
    analysis.baseline = correlator.baseline();
    analysis.summarize_writes();
    (analysis, found_intervals)
}

fn memory_every(step: u64, to: u64) -> Vec<MemorySample> {
    (0..to / step)
        .map(|i| MemorySample {
            at_us: i * step,
            mem_pct: 40.0 + (i % 5) as f64,
            swap_used_bytes: if i % 17 == 3 { 1 << 20 } else { 0 },
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The same timeline fed as a stream (horizon moved every few ms, probes in the order
    /// their threads read them) and in one go gives the same findings, and both agree with
    /// the batch correlator this one replaced.
    #[test]
    fn streaming_equals_batch(
        threads in 1u16..=3,
        rate in prop::sample::select(vec![1000u64, 2000, 5000]),
        freezes in prop::collection::vec((0u64..290_000, 500u64..40_000), 0..5),
        lates in prop::collection::vec((0u64..290_000, 100u64..8_000), 0..3),
        losses in prop::collection::vec(0usize..5000, 0..6),
        write_spans in prop::collection::vec((1_000u64..60_000, 100u64..50_000), 0..5),
        step_us in prop::sample::select(vec![700u64, 5_000, 20_000]),
    ) {
        let freezes: Vec<(u64, u64)> = freezes.iter().map(|&(s, l)| (s, s + l)).collect();
        let (probes, writes) = random_timeline(threads, rate, &freezes, &lates, &losses, &write_spans);
        let memory = memory_every(10_000, 400_000);
        let batch = correlate_with_memory(&probes, &writes, &memory, THRESHOLD);
        let (stream, _) = streamed(&probes, &writes, &memory, step_us, None);
        prop_assert_eq!(&stream, &batch);
        let oracle = super::oracle::correlate_with_memory(&probes, &writes, &memory, THRESHOLD);
        prop_assert_eq!(&batch.stalls, &oracle.stalls);
        prop_assert_eq!(&batch.client_hiccups, &oracle.client_hiccups);
        prop_assert_eq!(&batch.writes, &oracle.writes);
        // The oracle keeps every latency exactly; the correlator's histograms count those
        // over 65.5 ms to 3 significant digits (memory that does not grow with the run):
        // a percentile up there may differ by that precision, nothing else may. A value so
        // kept lands in a bucket 1/1024 of it wide (64 µs at 65.5-131 ms), and the percentile
        // may take either neighbour's: within two widths (a case found 69 µs off at 68.3 ms,
        // proptest-regressions/analyze/correlate/tests.txt).
        let (b, o) = (&batch.baseline, &oracle.baseline);
        prop_assert_eq!(
            (b.probes, b.max_us, b.probe_errors, b.send_lag_p50_us, b.send_lag_p99_us, b.send_lag_max_us),
            (o.probes, o.max_us, o.probe_errors, o.send_lag_p50_us, o.send_lag_p99_us, o.send_lag_max_us)
        );
        for (got, want) in [(b.p50_us, o.p50_us), (b.p99_us, o.p99_us)] {
            prop_assert!(got.abs_diff(want) <= want / 512, "{got} vs {want}");
        }
    }

    /// Intervals come out in order, one per interval, the same streamed or not, and their
    /// counts add up to the run's.
    #[test]
    fn intervals_stream_like_batch(
        freezes in prop::collection::vec((0u64..290_000, 500u64..40_000), 0..4),
        losses in prop::collection::vec(0usize..600, 0..4),
        step_us in prop::sample::select(vec![900u64, 7_000]),
    ) {
        let freezes: Vec<(u64, u64)> = freezes.iter().map(|&(s, l)| (s, s + l)).collect();
        let (probes, _) = random_timeline(2, 1000, &freezes, &[], &losses, &[]);
        let (_, streamed_intervals) = streamed(&probes, &[], &[], step_us, Some(50_000));
        let (analysis, at_once) = streamed(&probes, &[], &[], 10_000_000, Some(50_000));
        prop_assert_eq!(&streamed_intervals, &at_once);
        for (i, interval) in streamed_intervals.iter().enumerate() {
            prop_assert_eq!(interval.start_us, i as u64 * 50_000);
        }
        let probes_total: u64 = streamed_intervals.iter().map(|i| i.probes).sum();
        prop_assert_eq!(probes_total, probes.len() as u64);
        let stalls_total: u64 = streamed_intervals.iter().map(|i| i.stalls).sum();
        prop_assert_eq!(stalls_total, analysis.stalls.len() as u64);
        let stall_ms: f64 = streamed_intervals.iter().map(|i| i.stall_ms).sum();
        let expected: f64 = analysis.stalls.iter().map(|s| s.duration_ms).sum();
        prop_assert!((stall_ms - expected).abs() < 1e-6, "{} vs {}", stall_ms, expected);
    }
}

/// A 30 µs probe on each of two threads, the second `offset_us` after the first at `t`.
fn probe_both_threads(correlator: &mut Correlator, t: u64, offset_us: u64) {
    for thread in 0..2u16 {
        let at = t + u64::from(thread) * offset_us;
        correlator.probe(&probe(thread, at, at, at + 30));
    }
}

#[test]
fn memory_stays_bounded_over_a_long_quiet_stream() {
    // Ten minutes at 2 x 1000/s, fed in 20 ms steps: what the correlator holds stays at
    // what a few steps bring, however long it runs.
    let mut correlator = Correlator::new(THRESHOLD).with_intervals(1_000_000);
    let mut held_max = 0;
    let mut intervals = 0;
    let mut t = 0;
    while t < 600_000_000 {
        probe_both_threads(&mut correlator, t, 500);
        t += 1000;
        if t % 20_000 == 0 {
            correlator.advance(Horizon {
                probes_through_us: t - 500,
                writes_from_us: t,
            });
            intervals += correlator
                .drain()
                .iter()
                .filter(|f| matches!(f, Finding::Interval(_)))
                .count();
            held_max = held_max.max(correlator.held());
        }
    }
    assert!(held_max <= 200, "{held_max}");
    assert!(correlator.intervals.len() <= 2);
    assert_eq!(intervals, 599);
}

#[test]
fn a_backlog_taken_at_once_gives_its_room_back_once_swept() {
    // A collector that fell behind takes 100,000 probes (5 s at 2 x 10000/s) before the
    // horizon moves: the heaps grow to hold them all, and must not keep that room after.
    let mut correlator = Correlator::new(THRESHOLD).with_intervals(1_000_000);
    let mut t = 0;
    while t < 5_000_000 {
        probe_both_threads(&mut correlator, t, 50);
        t += 100;
    }
    let grown = correlator.unsorted.capacity();
    assert!(grown >= 100_000, "{grown}");
    correlator.advance(Horizon {
        probes_through_us: t - 50,
        writes_from_us: t,
    });
    correlator.drain();
    for heap_room in [
        correlator.ahead_intended.capacity(),
        correlator.ahead_replies.capacity(),
        correlator.wire.capacity(),
        correlator.unsorted.capacity(),
    ] {
        assert!(heap_room <= HEAP_ROOM_KEPT, "{heap_room}");
    }
}

#[test]
fn a_silence_with_no_reply_is_dropped_after_the_limit_and_holds_nothing() {
    // The probes of one thread get no reply for 2 s (every one failed: connections reset),
    // then replies again. With a 1 s limit each silence is dropped a second after it
    // began, so the intervals keep coming (a second behind at most), and no stall is made
    // of the outage.
    let config = CorrelateConfig {
        stall_threshold_us: 1000,
        max_silence_us: Some(1_000_000),
    };
    let mut correlator = Correlator::new(config).with_intervals(100_000);
    let mut handed_out_before_replies = 0;
    let mut t = 0;
    while t < 3_000_000 {
        let mut p = probe(0, t, t, t + 30);
        if (500_000..2_500_000).contains(&t) {
            p.reply_us = None;
            p.read_us = None;
            p.latency_us = None;
            p.ok = false;
        }
        correlator.probe(&p);
        if t % 20_000 == 0 {
            correlator.advance(Horizon {
                probes_through_us: t,
                writes_from_us: t,
            });
            let intervals = correlator
                .drain()
                .into_iter()
                .filter(|f| matches!(f, Finding::Interval(_)))
                .count();
            if t < 2_500_000 {
                handed_out_before_replies += intervals;
            }
        }
        t += 1000;
    }
    correlator.finish();
    let rest = correlator.drain();
    assert!(
        handed_out_before_replies >= 14,
        "{handed_out_before_replies} intervals before the replies came back"
    );
    assert!(
        !rest.iter().any(|f| matches!(f, Finding::Stall(_))),
        "{rest:?}"
    );
    // Without a limit the same timeline holds every interval from the outage on.
    let mut unlimited = Correlator::new(THRESHOLD).with_intervals(100_000);
    let mut early = 0;
    let mut t = 0;
    while t < 2_400_000 {
        let mut p = probe(0, t, t, t + 30);
        if t >= 500_000 {
            p.reply_us = None;
            p.read_us = None;
            p.latency_us = None;
            p.ok = false;
        }
        unlimited.probe(&p);
        t += 1000;
    }
    unlimited.advance(Horizon {
        probes_through_us: t,
        writes_from_us: t,
    });
    early += unlimited
        .drain()
        .iter()
        .filter(|f| matches!(f, Finding::Interval(_)))
        .count();
    assert_eq!(early, 5);
}

#[test]
fn long_latencies_count_to_three_digits_and_the_max_stays_exact() {
    assert_eq!(three_digits(123_456), 123_000);
    assert_eq!(three_digits(999), 999);
    assert_eq!(three_digits(65_536), 65_500);
    let mut counts = Counts::new();
    for v in [30, 40, 2_000_123, 2_000_999, 5_123_456] {
        counts.add(v);
    }
    assert_eq!(counts.percentile(50.0), 2_000_000);
    assert_eq!(counts.max, Some(5_123_456));
    // A run full of long stalls keeps few entries: a 2 s stall's 4000 distinct latencies
    // fall in a few dozen.
    for v in 65_536..2_065_536u64 {
        counts.add(v);
    }
    assert!(counts.sparse.len() < 2_000, "{}", counts.sparse.len());
}
