//! Large writes under load, correlated: pure functions from what was recorded (per-request
//! samples of the written server, its requests per second, the writer's events) to one finding
//! per write. No sockets, threads or clock.
//!
//! The request figures of a write (how many load requests overlapped it, the worst latency
//! among them, how many were delayed) come from the probe session's streaming correlator
//! ([`Correlator`]), fed each load request of the written server as a probe
//! ([`Sample::record`]): "overlapped" and "delayed" mean the same for the probes of the main job
//! and for the load clients, and the figures are found as the run goes, each request dropped
//! once fed ([`LoadCorrelator`]). The throughput figures (requests per second during the write
//! against the seconds around it) come from the per-second counts ([`writes_under_load`]).
//!
//! # No stall episodes
//! The correlator's episodes are not reported for the load clients. An episode is opened by a
//! request sent inside a silence, which fixed-rate probes always are; a closed-loop client
//! (the default) sends its next request only when a reply comes, so during a freeze every
//! waiting request was sent before the last reply. The episode then hangs on the one request
//! the last reply set off: stamped at the same µs as that reply (possible: the engine reads the
//! clock for both a few µs apart at most), it opens nothing and a 50 ms freeze goes unseen;
//! stamped a µs later, the episode is found but counts that one request as delayed while every
//! client waited. The per-write figures do not depend on episodes.
//!
//! # Requests without a reply
//! A request given up without a reply (a timeout, a broken connection) has no latency, only a
//! time it was given up at. The correlator counts it in no write's figures, as it counts no
//! unanswered probe: `requests_in_window`, `worst_latency_us` and `delayed_requests` are over
//! the answered requests (error replies included). Each write's `unanswered_requests` counts the
//! unanswered ones whose wait, from their start to being given up, met the write's window.
//! (Before the correlator, the three figures also counted those, with the time until they were
//! given up as their latency: `requests_in_window` then was today's `requests_in_window +
//! unanswered_requests`.)

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::analyze::correlate::{CorrelateConfig, Correlator, Finding, Horizon, WriteSummary};
use crate::record::{WriteOp, WriteRecord};
use crate::units::format_size;

pub use crate::measure::generator::Sample;

/// What the written server's load requests saw during one write (final once the correlator
/// hands it out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestFigures {
    /// Answered requests waiting at some moment of the write's window.
    pub requests_in_window: u64,
    /// The longest any of them waited inside the window, µs: from its start, or from the
    /// write's for one sent before it (what it waited before then was not the write's).
    pub worst_latency_us: Option<u64>,
    /// How many of them waited inside the window longer than the stall threshold.
    pub delayed_requests: u64,
    /// Requests given up without a reply whose wait met the window.
    pub unanswered_requests: u64,
}

impl RequestFigures {
    fn from_summary(summary: &WriteSummary, unanswered_requests: u64) -> RequestFigures {
        RequestFigures {
            requests_in_window: summary.probes_in_window,
            // The summary holds whole µs as ms: back to µs exactly.
            worst_latency_us: summary.worst_latency_ms.map(|ms| (ms * 1e3).round() as u64),
            delayed_requests: summary.probes_delayed,
            unanswered_requests,
        }
    }
}

/// The streaming correlator of the probe session, fed the written server's load requests and
/// the writer's events. Holds what an open window needs and the unanswered requests a write
/// still open or to come can meet; nothing grows with the number of requests.
#[derive(Debug)]
pub struct LoadCorrelator {
    correlator: Correlator,
    next_seq: u64,
    /// Writes given and not yet handed out: (seq, start, reply).
    open: VecDeque<(u32, u64, u64)>,
    /// Requests given up without a reply: (start, given up at).
    lost: Vec<(u64, u64)>,
    writes_from_us: u64,
}

impl LoadCorrelator {
    /// A correlator with the run's stall threshold.
    pub fn new(stall_threshold_us: u64) -> LoadCorrelator {
        let mut correlator = Correlator::new(CorrelateConfig::with_threshold(stall_threshold_us));
        // Load mode samples no host memory: no write waits for a reading after it.
        correlator.memory_ended();
        LoadCorrelator {
            correlator,
            next_seq: 0,
            open: VecDeque::new(),
            lost: Vec::new(),
            writes_from_us: 0,
        }
    }

    /// Takes one request (in any order, as the generator threads deliver them).
    pub fn sample(&mut self, sample: &Sample) {
        self.correlator.probe(&sample.record(self.next_seq));
        self.next_seq += 1;
        if !sample.replied {
            self.lost.push((sample.start_us, sample.end_us()));
        }
    }

    /// Takes one write (in order; its window must not overlap an earlier one's).
    pub fn write(&mut self, record: WriteRecord) {
        self.open
            .push_back((record.seq, record.start_us, record.reply_us));
        self.correlator.write(record);
    }

    /// Moves the horizon on: every request that started at or before `probes_through_us` has
    /// been given; no write still to come starts before `writes_from_us`.
    pub fn advance(&mut self, horizon: Horizon) {
        self.writes_from_us = self.writes_from_us.max(horizon.writes_from_us);
        self.correlator.advance(horizon);
    }

    /// Every input is in: makes everything final.
    pub fn finish(&mut self) {
        self.writes_from_us = u64::MAX;
        self.correlator.finish();
    }

    /// The writes whose figures became final since the last call, in write order, by `seq`.
    pub fn drain(&mut self) -> Vec<(u32, RequestFigures)> {
        let mut out = Vec::new();
        for finding in self.correlator.drain() {
            // Episodes are not reported (see the module comment); intervals are the
            // per-second timeline's job.
            let Finding::Write(summary) = finding else {
                continue;
            };
            let (seq, start_us, reply_us) =
                self.open.pop_front().expect("a summary's write was given");
            debug_assert_eq!(seq, summary.seq);
            let lost = self
                .lost
                .iter()
                .filter(|&&(from, to)| from <= reply_us && to >= start_us)
                .count() as u64;
            out.push((seq, RequestFigures::from_summary(&summary, lost)));
        }
        // An unanswered request matters only to a write it can still meet.
        let needed_from = self
            .open
            .front()
            .map_or(self.writes_from_us, |&(_, start, _)| {
                start.min(self.writes_from_us)
            });
        self.lost.retain(|&(_, given_up)| given_up >= needed_from);
        out
    }

    /// Requests and replies held for windows still open, and unanswered requests kept.
    pub fn held(&self) -> usize {
        self.correlator.held() + self.lost.len()
    }
}

/// What the load clients saw during one writer event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WriteUnderLoad {
    /// Write number, from 1 (as in the prober's writes.csv).
    pub seq: u32,
    /// `set`, `overwrite` or `delete`.
    pub op: WriteOp,
    /// Value size, bytes.
    pub size_bytes: u64,
    /// The writer's own time from its first byte to the reply, ms.
    pub set_ms: f64,
    /// The writer began sending, run clock µs.
    pub start_us: u64,
    /// Its reply came, run clock µs.
    pub reply_us: u64,
    /// The write succeeded.
    pub ok: bool,
    /// Answered load requests of the written server waiting at some moment of the write's
    /// window (an error reply counts; a request given up does not: see `unanswered_requests`).
    pub requests_in_window: u64,
    /// The longest any of them waited inside the window, µs (from the write's start for one
    /// sent before it; empty: no answered request overlapped).
    pub worst_latency_us: Option<u64>,
    /// How many of them waited inside the window longer than the stall threshold.
    pub delayed_requests: u64,
    /// The second (since the load started) in which the write began.
    pub second: u64,
    /// Seconds the write's window touches.
    pub seconds: u64,
    /// Requests per second of the written server over those seconds (empty when one of them
    /// is not whole: the run ended in it, as when the server went).
    pub rps_during: Option<f64>,
    /// Requests per second over the neighbouring seconds (one before, one after) that hold no
    /// write; empty when neither is available.
    pub rps_around: Option<f64>,
    /// `(rps_around - rps_during) / rps_around`, percent: the throughput lost (negative: none,
    /// within noise).
    pub throughput_lost_pct: Option<f64>,
    /// `(rps_around - rps_during) × seconds`: requests the write cost the load.
    pub requests_lost: Option<f64>,
    /// Load requests of the written server given up without a reply (a timeout, a broken
    /// connection) that were waiting at some moment of the window: in none of the figures above.
    pub unanswered_requests: u64,
}

impl WriteUnderLoad {
    /// `seq:op:size`, as in the timeline's `writes` column.
    pub fn tag(record: &WriteRecord) -> String {
        format!(
            "{}:{}:{}",
            record.seq,
            record.op.name(),
            format_size(record.size_bytes)
        )
    }
}

/// Inputs of [`writes_under_load`].
#[derive(Debug, Clone, Copy)]
pub struct LoadTimeline<'a> {
    /// Run clock of the load's second 0, µs.
    pub load_start_us: u64,
    /// Requests per second of the written server, index = second; only complete seconds.
    pub requests_per_second: &'a [u64],
}

/// One finding per write whose request figures are final (`requests`, by seq, from
/// [`LoadCorrelator`]), with its throughput figures from the per-second counts (a neighbouring
/// second holding any of `writes` is no fair comparison).
pub fn writes_under_load(
    writes: &[WriteRecord],
    requests: &BTreeMap<u32, RequestFigures>,
    timeline: LoadTimeline<'_>,
) -> Vec<WriteUnderLoad> {
    let second_of = |us: u64| us.saturating_sub(timeline.load_start_us) / 1_000_000;
    let busy: Vec<(u64, u64)> = writes
        .iter()
        .map(|w| (second_of(w.start_us), second_of(w.reply_us)))
        .collect();
    let has_write = |second: u64| busy.iter().any(|&(a, b)| a <= second && second <= b);
    let rps = |second: u64| timeline.requests_per_second.get(second as usize).copied();

    writes
        .iter()
        .filter_map(|write| Some((write, requests.get(&write.seq)?)))
        .map(|(write, figures)| {
            let first = second_of(write.start_us);
            let last = second_of(write.reply_us);
            let seconds = last - first + 1;
            let during: Option<Vec<u64>> = (first..=last).map(rps).collect();
            let rps_during = during
                .as_ref()
                .map(|d| d.iter().sum::<u64>() as f64 / d.len().max(1) as f64);
            let neighbours: Vec<u64> = [first.checked_sub(1), Some(last + 1)]
                .into_iter()
                .flatten()
                .filter(|&s| !has_write(s))
                .filter_map(rps)
                .collect();
            let rps_around = (!neighbours.is_empty() && during.is_some())
                .then(|| neighbours.iter().sum::<u64>() as f64 / neighbours.len() as f64);
            let lost = rps_around
                .zip(rps_during)
                .map(|(around, during)| around - during);
            WriteUnderLoad {
                seq: write.seq,
                op: write.op,
                size_bytes: write.size_bytes,
                set_ms: write.set_ms,
                start_us: write.start_us,
                reply_us: write.reply_us,
                ok: write.ok,
                requests_in_window: figures.requests_in_window,
                worst_latency_us: figures.worst_latency_us,
                delayed_requests: figures.delayed_requests,
                second: first,
                seconds,
                rps_during,
                rps_around,
                throughput_lost_pct: rps_around
                    .zip(lost)
                    .filter(|&(around, _)| around > 0.0)
                    .map(|(around, lost)| 100.0 * lost / around),
                requests_lost: lost.map(|l| l * seconds as f64),
                unanswered_requests: figures.unanswered_requests,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const THRESHOLD_US: u64 = 1_000;

    fn write(seq: u32, start_us: u64, reply_us: u64) -> WriteRecord {
        WriteRecord::timed(
            seq,
            WriteOp::Set,
            "k".into(),
            64 << 20,
            (start_us, reply_us, reply_us),
        )
    }

    fn sample(start_us: u64, latency_us: u32) -> Sample {
        Sample {
            start_us,
            latency_us,
            ok: true,
            replied: true,
        }
    }

    fn error_reply(start_us: u64, latency_us: u32) -> Sample {
        Sample {
            ok: false,
            ..sample(start_us, latency_us)
        }
    }

    /// A request given up `waited_us` after its start (a timeout, a broken connection).
    fn given_up(start_us: u64, waited_us: u32) -> Sample {
        Sample {
            start_us,
            latency_us: waited_us,
            ok: false,
            replied: false,
        }
    }

    /// (requests_in_window, worst_latency_us, delayed_requests) per write.
    type Scanned = (u64, Option<u64>, u64);

    /// The scan load mode used before the correlator, kept as the oracle: every sample against
    /// every write (a sample given up counted with its wait as its latency).
    fn scan(writes: &[WriteRecord], samples: &[Sample], threshold_us: u64) -> Vec<Scanned> {
        writes
            .iter()
            .map(|write| {
                let mut in_window = 0u64;
                let mut worst: Option<u64> = None;
                let mut delayed = 0u64;
                for sample in samples {
                    if sample.start_us <= write.reply_us && sample.end_us() >= write.start_us {
                        in_window += 1;
                        // Its wait inside the window: from its start, or the write's.
                        let latency = sample.end_us() - sample.start_us.max(write.start_us);
                        worst = Some(worst.map_or(latency, |w| w.max(latency)));
                        if latency > threshold_us {
                            delayed += 1;
                        }
                    }
                }
                (in_window, worst, delayed)
            })
            .collect()
    }

    fn answered(samples: &[Sample]) -> Vec<Sample> {
        samples.iter().copied().filter(|s| s.replied).collect()
    }

    fn lost_only(samples: &[Sample]) -> Vec<Sample> {
        samples.iter().copied().filter(|s| !s.replied).collect()
    }

    /// What the correlator found: figures by write, and the most it held at once.
    struct Found {
        figures: BTreeMap<u32, RequestFigures>,
        max_held: usize,
    }

    impl Found {
        fn take(&mut self, findings: Vec<(u32, RequestFigures)>) {
            for (seq, figures) in findings {
                assert!(
                    self.figures.insert(seq, figures).is_none(),
                    "seq {seq} twice"
                );
            }
        }

        fn scanned(&self) -> Vec<Scanned> {
            self.figures
                .values()
                .map(|f| (f.requests_in_window, f.worst_latency_us, f.delayed_requests))
                .collect()
        }
    }

    /// The whole timeline at once.
    fn at_once(writes: &[WriteRecord], samples: &[Sample]) -> Found {
        let mut correlator = LoadCorrelator::new(THRESHOLD_US);
        for w in writes {
            correlator.write(w.clone());
        }
        for s in samples {
            correlator.sample(s);
        }
        correlator.finish();
        let mut found = Found {
            figures: BTreeMap::new(),
            max_held: correlator.held(),
        };
        found.take(correlator.drain());
        found
    }

    /// As the runner feeds it: each request when its reply came (or it was given up), each
    /// write at its reply, the horizon moved every `step_us`: requests through the earliest
    /// start still undelivered (what the generator threads report), writes from the next
    /// write's start while it is under way.
    fn streamed(writes: &[WriteRecord], samples: &[Sample], step_us: u64) -> Found {
        let mut correlator = LoadCorrelator::new(THRESHOLD_US);
        let mut by_end: Vec<Sample> = samples.to_vec();
        by_end.sort_by_key(|s| (s.end_us(), s.start_us));
        let mut undelivered: std::collections::BTreeMap<(u64, usize), ()> = by_end
            .iter()
            .enumerate()
            .map(|(i, s)| ((s.start_us, i), ()))
            .collect();
        let mut next_sample = 0;
        let mut next_write = 0;
        let mut found = Found {
            figures: BTreeMap::new(),
            max_held: 0,
        };
        let end = by_end
            .last()
            .map_or(0, Sample::end_us)
            .max(writes.last().map_or(0, |w| w.reply_us))
            + 2 * step_us;
        let mut now = 0;
        while now <= end {
            while next_sample < by_end.len() && by_end[next_sample].end_us() <= now {
                let s = by_end[next_sample];
                correlator.sample(&s);
                undelivered.remove(&(s.start_us, next_sample));
                next_sample += 1;
            }
            while next_write < writes.len() && writes[next_write].reply_us <= now {
                correlator.write(writes[next_write].clone());
                next_write += 1;
            }
            let pending_from = undelivered
                .keys()
                .next()
                .map_or(now, |&(start, _)| start.min(now));
            let writes_from = writes.get(next_write).map_or(now, |w| w.start_us.min(now));
            correlator.advance(Horizon {
                probes_through_us: pending_from.saturating_sub(1),
                writes_from_us: writes_from,
            });
            found.take(correlator.drain());
            found.max_held = found.max_held.max(correlator.held());
            now += step_us;
        }
        correlator.finish();
        found.take(correlator.drain());
        found
    }

    #[test]
    fn the_correlator_gives_the_old_scans_figures_and_counts_the_unanswered_apart() {
        let writes = [write(1, 10_000, 20_000), write(2, 100_000, 100_500)];
        let samples = [
            sample(9_000, 12_000),      // spans the whole write: in, delayed
            sample(9_500, 500),         // ends exactly at the write's start: in
            sample(9_000, 999),         // ends 1 µs before it: out
            sample(20_000, 300),        // starts exactly at its reply: in
            sample(20_001, 100),        // starts 1 µs after: out
            error_reply(12_000, 2_000), // an error reply: in, delayed
            given_up(15_000, 30_000),   // timed out: in neither, lost
            sample(14_000, 900),        // inside, fast
            given_up(99_000, 1_200),    // a broken connection during write 2: lost
            sample(200_000, 100),       // long after
        ];
        let old = scan(&writes, &samples, THRESHOLD_US);
        assert_eq!(old, [(6, Some(30_000), 3), (1, Some(200), 0)]);
        let streamed = streamed(&writes, &samples, 700);
        let at_once = at_once(&writes, &samples);
        // The answered requests: the old scan's figures exactly.
        let expected = scan(&writes, &answered(&samples), THRESHOLD_US);
        // The request that spans the whole write waited 11 ms of it (1 ms before it began).
        assert_eq!(expected, [(5, Some(11_000), 2), (0, None, 0)]);
        assert_eq!(streamed.scanned(), expected);
        assert_eq!(at_once.scanned(), expected);
        // The unanswered ones apart: what the old scan counted on top.
        let lost: Vec<u64> = streamed
            .figures
            .values()
            .map(|f| f.unanswered_requests)
            .collect();
        assert_eq!(lost, [1, 1]);
        assert_eq!(
            lost,
            scan(&writes, &lost_only(&samples), THRESHOLD_US)
                .iter()
                .map(|s| s.0)
                .collect::<Vec<_>>()
        );
        for (new, old) in streamed.figures.values().zip(&old) {
            assert_eq!(new.requests_in_window + new.unanswered_requests, old.0);
        }
        assert_eq!(streamed.figures, at_once.figures);
    }

    #[test]
    fn a_freeze_under_closed_loop_clients_streams_in_little_memory() {
        // Four closed-loop clients, 200 µs round trips, each sending its next request when a
        // reply comes; the server frozen over [500 ms, 550 ms) by a write: each client's
        // request met by the freeze is answered at its end. 10 s of it.
        let mut samples = Vec::new();
        for client in 0..4u64 {
            let mut t = client * 50;
            while t < 10_000_000 {
                let mut reply = t + 200;
                if reply > 500_000 && t < 550_000 {
                    reply = 550_000 + 30 * client;
                }
                samples.push(sample(t, (reply - t) as u32));
                t = reply;
            }
        }
        let writes = [write(1, 499_900, 550_100), write(2, 5_000_000, 5_000_300)];
        let found = streamed(&writes, &samples, 5_000);
        assert_eq!(found.scanned(), scan(&writes, &samples, THRESHOLD_US));
        let figures = found.figures[&1];
        // Client 2's request, sent before the write's start (499 900) and answered at 550 060:
        // its wait inside the write's window (client 3's went out after that start).
        assert_eq!(figures.worst_latency_us, Some(50_160));
        assert_eq!(figures.delayed_requests, 4);
        assert_eq!(found.figures[&2].worst_latency_us, Some(200));
        // The correlator holds a few ms of requests, not the run.
        assert!(
            found.max_held < samples.len() / 100,
            "{} of {}",
            found.max_held,
            samples.len()
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Streamed in delivery order with the runner's horizons, the correlator gives the old
        /// scan's figures over the answered requests, and counts the unanswered apart; as the
        /// whole timeline at once.
        #[test]
        fn streamed_figures_are_the_scans(
            raw in prop::collection::vec((0u64..400_000, 1u32..40_000, 0u8..20), 1..300),
            windows in prop::collection::vec((1u64..60_000, 1u64..40_000), 0..6),
            step_us in 300u64..20_000,
        ) {
            let samples: Vec<Sample> = raw
                .iter()
                .map(|&(start, latency, kind)| match kind {
                    0 => given_up(start, latency),
                    1 => error_reply(start, latency),
                    _ => sample(start, latency),
                })
                .collect();
            let mut writes = Vec::new();
            let mut t = 0;
            for (i, &(gap, len)) in windows.iter().enumerate() {
                writes.push(write(i as u32 + 1, t + gap, t + gap + len));
                t += gap + len;
            }
            let found = streamed(&writes, &samples, step_us);
            prop_assert_eq!(found.figures.len(), writes.len());
            prop_assert_eq!(found.scanned(), scan(&writes, &answered(&samples), THRESHOLD_US));
            let lost: Vec<u64> = found.figures.values().map(|f| f.unanswered_requests).collect();
            let expected_lost: Vec<u64> = scan(&writes, &lost_only(&samples), THRESHOLD_US)
                .iter()
                .map(|s| s.0)
                .collect();
            prop_assert_eq!(lost, expected_lost);
            prop_assert_eq!(&found.figures, &at_once(&writes, &samples).figures);
        }
    }

    /// What `writes_under_load` finds of `writes` when no request overlapped them, the load
    /// from the run's start at `rps` requests a second.
    fn unloaded(writes: &[WriteRecord], rps: &[u64]) -> Vec<WriteUnderLoad> {
        writes_under_load(
            writes,
            &no_requests(writes),
            LoadTimeline {
                load_start_us: 0,
                requests_per_second: rps,
            },
        )
    }

    /// Figures for every write, none overlapped.
    fn no_requests(writes: &[WriteRecord]) -> BTreeMap<u32, RequestFigures> {
        writes
            .iter()
            .map(|w| {
                (
                    w.seq,
                    RequestFigures {
                        requests_in_window: 0,
                        worst_latency_us: None,
                        delayed_requests: 0,
                        unanswered_requests: 0,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn worst_latency_delays_and_lost_throughput() {
        // Load starts at 1 s on the run clock; the write spans 3.2 s - 3.3 s (load second 2).
        let writes = [write(1, 3_200_000, 3_300_000)];
        let samples = [
            sample(3_000_000, 400),    // before the write
            sample(3_150_000, 60_000), // sent before, answered inside: waited 10 ms of the write
            sample(3_250_000, 51_000), // inside, delayed
            sample(3_299_000, 500),    // inside, fast
            sample(3_400_000, 300),    // after
        ];
        let rps = [1000, 1000, 800, 1000, 1000];
        let found = writes_under_load(
            &writes,
            &at_once(&writes, &samples).figures,
            LoadTimeline {
                load_start_us: 1_000_000,
                requests_per_second: &rps,
            },
        );
        let f = &found[0];
        assert_eq!(f.requests_in_window, 3);
        assert_eq!(f.worst_latency_us, Some(51_000));
        assert_eq!(f.delayed_requests, 2);
        assert_eq!(f.unanswered_requests, 0);
        assert_eq!((f.second, f.seconds), (2, 1));
        assert_eq!(f.rps_during, Some(800.0));
        assert_eq!(f.rps_around, Some(1000.0));
        assert_eq!(f.throughput_lost_pct, Some(20.0));
        assert_eq!(f.requests_lost, Some(200.0));
    }

    #[test]
    fn only_writes_with_final_figures_get_a_row() {
        let writes = [
            write(1, 1_100_000, 1_200_000),
            write(2, 2_100_000, 2_200_000),
        ];
        let mut figures = no_requests(&writes);
        figures.remove(&2);
        let rps = [900, 500, 600, 1000];
        let found = writes_under_load(
            &writes,
            &figures,
            LoadTimeline {
                load_start_us: 0,
                requests_per_second: &rps,
            },
        );
        assert_eq!(found.len(), 1);
        // Write 2, still without figures, still keeps second 2 from being write 1's neighbour.
        assert_eq!(found[0].rps_around, Some(900.0));
    }

    #[test]
    fn neighbours_holding_writes_or_missing_are_skipped() {
        // Two writes in seconds 1 and 2; the second's only clean neighbour is second 3, the
        // first's is second 0.
        let writes = [
            write(1, 1_100_000, 1_200_000),
            write(2, 2_100_000, 2_900_000),
        ];
        let rps = [900, 500, 600, 1000];
        let found = unloaded(&writes, &rps);
        assert_eq!(found[0].rps_around, Some(900.0));
        assert_eq!(found[1].rps_around, Some(1000.0));
        assert_eq!(found[0].worst_latency_us, None);
        assert_eq!(found[0].requests_in_window, 0);
        // A write in a second not yet complete has no throughput figure.
        let late = [write(3, 9_000_000, 9_100_000)];
        let late = unloaded(&late, &rps);
        assert_eq!(late[0].rps_around, None);
        assert_eq!(late[0].throughput_lost_pct, None);
        // Nor is its own rate known (it read 0 req/s when the server went in that second).
        assert_eq!(late[0].rps_during, None);
        assert_eq!(late[0].requests_lost, None);
        assert!(
            crate::load::report::write_line(&late[0], 1_000).contains("throughput: not known"),
            "{}",
            crate::load::report::write_line(&late[0], 1_000)
        );
    }

    #[test]
    fn a_write_spanning_seconds_averages_them() {
        let writes = [write(1, 1_500_000, 2_500_000)];
        let rps = [1000, 700, 900, 1000];
        let found = unloaded(&writes, &rps);
        assert_eq!(found[0].seconds, 2);
        assert_eq!(found[0].rps_during, Some(800.0));
        assert_eq!(found[0].rps_around, Some(1000.0));
        assert_eq!(found[0].requests_lost, Some(400.0));
    }

    #[test]
    fn columns_match_the_struct() {
        let writes = [write(1, 0, 1)];
        let found = unloaded(&writes, &[]);
        let mut writer = csv::Writer::from_writer(Vec::new());
        writer.serialize(&found[0]).unwrap();
        let text = String::from_utf8(writer.into_inner().unwrap()).unwrap();
        let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
        assert_eq!(header, crate::output::export::columns::LOAD_WRITES);
        assert_eq!(WriteUnderLoad::tag(&write(7, 0, 1)), "7:set:64M");
    }
}
