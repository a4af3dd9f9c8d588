//! The correlator: from a recorded timeline (probes and writes, all on the run's clock) to
//! findings: the baseline, the stall episodes, per write how long other clients were kept
//! waiting, and per interval the probes' latency. No sockets, no threads, no clock: everything
//! here is testable on synthetic timelines.
//!
//! It streams: [`Correlator`] takes events as they arrive, in any order the threads deliver
//! them, and hands out each finding once no event still to come can change it, keeping only
//! what an open window needs. A run of any length uses the same memory. [`correlate`] is the
//! same correlator fed a whole timeline at once, and a property test checks that both give the
//! same findings.
//!
//! # Stall episodes
//! A probe whose intended send time `t` is followed by no reply from the server (to any probe)
//! until `e`, with `e - t` above the threshold, proves the server was silent over `[t, e]`
//! while a client was waiting. Every probe intended in one gap between two consecutive replies
//! ends its silence at the same reply, so an episode is one such gap: start = the intended send
//! of its first probe, end = the reply that broke the silence. The true stall began at most one
//! aggregate probe interval before the start, so the duration is accurate to about one interval
//! (0.5 ms at 2 threads × 1000/s).
//!
//! An episode in which no probe was actually on the wire longer than the threshold was not the
//! server: every delayed probe left late, so the probe threads themselves were held up (the
//! client host was busy). Those are reported apart as client hiccups, never as server stalls.
//!
//! # Head-of-line delay
//! Probes are pipelined ([`crate::measure::probe`]): each leaves at its intended time whatever
//! earlier probes are doing, so a probe's latency is how long a client that arrived at that
//! moment waited for the server. A write's `hol_delay_ms` is the longest such wait among the
//! probes that overlapped it, less the idle round trip: the median latency of the baseline
//! probes answered before the write began (what the server gave when left alone up to then,
//! known when the write ends, so the figure is final at once and never moves afterwards). Its
//! resolution is the aggregate probe interval, and it does not grow with the probe rate.
//!
//! # When a finding is final
//! The caller says how far each input is complete ([`Horizon`]): every probe intended up to
//! `probes_through_us` is in (the slowest probe thread's last intended send; a probe thread
//! delivers its probes in order), and no write still to come starts before `writes_from_us`
//! (the writer's current write's start, or now when it is idle). Any reply still to come is
//! then later than `probes_through_us`, so the timeline is swept in time order up to there; a
//! stall is handed out once no unknown write can overlap it; a write once every probe and stall
//! touching it is known (and a host memory reading after it, when there are readings); an
//! interval once every probe intended in it and every stall touching it is known. The writes
//! of one actor must not overlap each other (one thread sends them one after the other).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

pub use crate::analyze::findings::{Baseline, Interval, Stall, WriteSummary};
use crate::analyze::pressure::{MemorySample, assess};
use crate::analyze::stats::{SizeModel, SizeSpread, by_size, size_model};
use crate::record::{ProbeRecord, WriteRecord};

/// The rule a run's per-write figures are analysed by, recorded in run.json
/// (`analysis_version`): 2 since 2026-12-05, when a probe meant to go out before a write's start
/// came to count from that start, and a stall to be tied to a write only where it overlaps its
/// window by more than the threshold; 1 (no field) before. `probe compare` says when two runs
/// differ in it.
pub const ANALYSIS_VERSION: u32 = 2;

/// Settings of the analysis.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct CorrelateConfig {
    /// A probe waiting longer than this (from its intended send; for a write's figures, from
    /// the write's start for one meant to go out before it) is delayed; a silence longer than
    /// this is a stall, tied to the write whose window it overlaps by more than this.
    pub stall_threshold_us: u64,
    /// A silence with no reply for this long is dropped, not waited for: the probes could
    /// not reach the server (connections reset, every probe failed), which is an outage the
    /// errors report, not a stall any reply proves. The session sets the probes' `--timeout`
    /// (no answered probe waits longer: the run fails first); `None`: no limit.
    pub max_silence_us: Option<u64>,
}

impl CorrelateConfig {
    /// A threshold and no limit on a silence (for recorded timelines).
    pub const fn with_threshold(stall_threshold_us: u64) -> CorrelateConfig {
        CorrelateConfig {
            stall_threshold_us,
            max_silence_us: None,
        }
    }
}

/// Everything the correlator finds in one timeline.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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
    /// over the repeats (empty in runs recorded before it was kept).
    #[serde(default)]
    pub by_size: Vec<SizeSpread>,
    /// Least-squares lines of delay against size over the `set` writes (empty with fewer than
    /// three sizes, and in runs recorded before it was kept).
    #[serde(default)]
    pub size_model: Option<SizeModel>,
}

impl Analysis {
    /// Files one finding (intervals are not kept here).
    pub fn push(&mut self, finding: Finding) {
        match finding {
            Finding::Stall(stall) => self.stalls.push(stall),
            Finding::Hiccup(stall) => self.client_hiccups.push(stall),
            Finding::Write(summary) => self.writes.push(summary),
            Finding::Interval(_) => {}
        }
    }

    /// Recomputes the statistics over the writes (`by_size`, `size_model`).
    pub fn summarize_writes(&mut self) {
        self.by_size = by_size(&self.writes);
        self.size_model = size_model(&self.writes);
    }
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
/// memory-pressure flags: the streaming correlator fed the whole timeline at once.
pub fn correlate_with_memory(
    probes: &[ProbeRecord],
    writes: &[WriteRecord],
    memory: &[MemorySample],
    config: CorrelateConfig,
) -> Analysis {
    let mut correlator = Correlator::new(config);
    for write in writes {
        correlator.write(write.clone());
    }
    for sample in memory {
        correlator.memory(*sample);
    }
    correlator.feed_recorded(probes);
    correlator.finish();
    let mut analysis = Analysis {
        baseline: correlator.baseline(),
        ..Analysis::default()
    };
    for finding in correlator.drain() {
        analysis.push(finding);
    }
    analysis.summarize_writes();
    analysis
}

/// What the correlator hands out, each once it is final.
#[derive(Debug, Clone, PartialEq)]
pub enum Finding {
    /// A server stall episode (in time order among stalls).
    Stall(Stall),
    /// A silence that was the client host's (in time order among hiccups).
    Hiccup(Stall),
    /// A write's summary (in write order).
    Write(WriteSummary),
    /// One interval of the timeline (in time order), when intervals are on.
    Interval(Interval),
}

/// How far each input is complete; see the module comment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Horizon {
    /// Every probe intended at or before this has been given, µs.
    pub probes_through_us: u64,
    /// No write still to come starts before this, µs.
    pub writes_from_us: u64,
}

/// Counts of µs values for nearest-rank percentiles in bounded memory: exact in a dense array
/// below 65.536 ms, above that in a map of values rounded down to 3 significant digits (so a
/// run full of long stalls holds at most a few thousand entries); the maximum is kept exact.
#[derive(Debug, Clone)]
struct Counts {
    dense: Vec<u64>,
    sparse: BTreeMap<u64, u64>,
    total: u64,
    max: Option<u64>,
}

const DENSE_US: usize = 1 << 16;

/// `value` rounded down to 3 significant digits (123_456 -> 123_000).
fn three_digits(value: u64) -> u64 {
    let mut scale = 1;
    while value / scale >= 1000 {
        scale *= 10;
    }
    value / scale * scale
}

impl Counts {
    fn new() -> Counts {
        Counts {
            dense: Vec::new(),
            sparse: BTreeMap::new(),
            total: 0,
            max: None,
        }
    }

    fn add(&mut self, value: u64) {
        if (value as usize) < DENSE_US {
            if self.dense.is_empty() {
                self.dense = vec![0; DENSE_US];
            }
            self.dense[value as usize] += 1;
        } else {
            *self.sparse.entry(three_digits(value)).or_insert(0) += 1;
        }
        self.total += 1;
        self.max = Some(self.max.map_or(value, |m| m.max(value)));
    }

    /// Nearest-rank percentile, as [`percentile`] over the sorted values (0 when empty).
    fn percentile(&self, pct: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = (((pct / 100.0) * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (value, &n) in self.dense.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return value as u64;
            }
        }
        for (&value, &n) in &self.sparse {
            seen += n;
            if seen >= rank {
                return value;
            }
        }
        self.max.unwrap_or(0)
    }
}

/// The silence since the last reply swept: the probes intended in it so far.
#[derive(Debug, Clone, Copy, Default)]
struct Gap {
    /// Intended send of its first probe (`None`: no probe waits since the last reply).
    first_us: Option<u64>,
    /// Probes in it that waited past the threshold (or got no reply).
    delayed: u64,
    /// The latest intended time in it, and how many delayed probes share it (a probe intended
    /// at the very reply that ends the gap is not inside the episode).
    last_us: u64,
    delayed_at_last: u64,
}

/// (latency, intended, thread, seq, send lag) of a write's worst probe, ordered so that among
/// equal latencies the earliest probe wins.
type WorstKey = (u64, Reverse<u64>, Reverse<u16>, Reverse<u64>, u64);

/// A write waiting for its figures to be final.
#[derive(Debug, Clone)]
struct OpenWrite {
    record: WriteRecord,
    probes_in_window: u64,
    probes_delayed: u64,
    /// (latency, intended, thread, seq, send lag) of the worst probe: the key orders ties the
    /// same way whatever order the probes came in.
    worst: Option<WorstKey>,
    stall_us: u64,
    stall_during_send_us: u64,
    stall_after_send_us: u64,
    /// Median of the baseline probes answered before the write began, once known.
    baseline_p50_us: Option<u64>,
}

impl OpenWrite {
    fn take_probe(&mut self, probe: &ProbeRecord, threshold_us: u64) {
        let (Some(reply_us), Some(latency_us)) = (probe.reply_us, probe.latency_us) else {
            return;
        };
        self.take_answered(
            &Answered {
                reply_us,
                intended_us: probe.intended_us,
                latency_us,
                sent_us: probe.sent_us,
                thread: probe.thread,
                seq: probe.seq,
            },
            threshold_us,
        );
    }

    fn take_answered(&mut self, probe: &Answered, threshold_us: u64) {
        let (ws, we) = (self.record.start_us, self.record.reply_us);
        if probe.intended_us <= we && probe.reply_us >= ws {
            // What the probe waited inside the window: from its intended send, or from the
            // write's start for one meant to go out before it (its wait before then was not
            // the write's: a probe held 100 ms by another client's DEBUG SLEEP that ended just
            // before a 23 µs DEL was charged to the DEL whole; the hostile trial).
            let (latency, send_lag) =
                waited_since(probe.intended_us, probe.latency_us, probe.sent_us, ws);
            self.probes_in_window += 1;
            if latency > threshold_us {
                self.probes_delayed += 1;
            }
            let key = (
                latency,
                Reverse(probe.intended_us),
                Reverse(probe.thread),
                Reverse(probe.seq),
                send_lag,
            );
            if self.worst.is_none_or(|w| key > w) {
                self.worst = Some(key);
            }
        }
    }

    fn take_stall(&mut self, stall: &Stall) {
        let (ws, we) = (self.record.start_us, self.record.reply_us);
        let sent = self.record.sent_us.clamp(ws, we);
        self.stall_us += overlap(stall.start_us, stall.end_us, ws, we);
        self.stall_during_send_us += overlap(stall.start_us, stall.end_us, ws, sent);
        self.stall_after_send_us += overlap(stall.start_us, stall.end_us, sent, we);
    }
}

/// A probe's wait from `from_us` on (the later of its intended send and a write's start), µs,
/// and how late it left its thread after that: what of its latency and send lag falls inside
/// a window that starts at `from_us`.
fn waited_since(intended_us: u64, latency_us: u64, sent_us: u64, from_us: u64) -> (u64, u64) {
    let from = intended_us.max(from_us);
    (
        latency_us.saturating_sub(from - intended_us),
        sent_us.saturating_sub(from),
    )
}

/// An answered probe waiting to be sorted into the baseline (or not) in reply order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Answered {
    reply_us: u64,
    intended_us: u64,
    latency_us: u64,
    sent_us: u64,
    thread: u16,
    seq: u64,
}

/// An interval being filled.
#[derive(Debug, Clone)]
struct OpenInterval {
    probes: u64,
    errors: u64,
    latency: Histogram<u64>,
    stalls: u64,
    stall_us: u64,
    longest_stall_us: u64,
}

impl OpenInterval {
    fn new() -> OpenInterval {
        OpenInterval {
            probes: 0,
            errors: 0,
            latency: interval_histogram(),
            stalls: 0,
            stall_us: 0,
            longest_stall_us: 0,
        }
    }
}

/// An interval's latencies, µs, 3 significant digits: it grows to the largest value recorded,
/// so a quiet interval holds a few KB, not the ~190 KB a fixed hour-long range would.
fn interval_histogram() -> Histogram<u64> {
    Histogram::new(3).expect("valid histogram precision")
}

/// The streaming correlator; see the module comment.
#[derive(Debug)]
pub struct Correlator {
    config: CorrelateConfig,
    interval_us: Option<u64>,
    /// Probes not yet swept, by intended send: (intended, delayed).
    ahead_intended: BinaryHeap<Reverse<(u64, bool)>>,
    /// Replies not yet swept.
    ahead_replies: BinaryHeap<Reverse<u64>>,
    /// Everything at or before this has been swept.
    swept_through: Option<u64>,
    gap: Gap,
    /// Answered probes by send time, for "was a probe on the wire"; those sent long enough
    /// before the sweep are folded into `wire_latest_reply`.
    wire: BinaryHeap<Reverse<(u64, u64)>>,
    wire_latest_reply: Option<u64>,
    /// Stall episodes closed by the sweep, waiting until no unknown write can overlap them
    /// (with `true` for a server stall, `false` for a client hiccup).
    closed: VecDeque<(Stall, bool)>,
    /// Answered probes not yet sorted into the baseline, by reply.
    unsorted: BinaryHeap<Reverse<Answered>>,
    baseline_latency: Counts,
    send_lag: Counts,
    probe_errors: u64,
    /// Windows `(seq, start, reply)` of every write given, in order.
    windows: Vec<(u32, u64, u64)>,
    open_writes: VecDeque<OpenWrite>,
    memory: VecDeque<MemorySample>,
    memory_ended: bool,
    intervals: BTreeMap<u64, OpenInterval>,
    /// Intervals before this index have been handed out.
    intervals_done: u64,
    horizon: Horizon,
    finished: bool,
    out: Vec<Finding>,
}

impl Correlator {
    /// A correlator with no intervals.
    pub fn new(config: CorrelateConfig) -> Correlator {
        Correlator {
            config,
            interval_us: None,
            ahead_intended: BinaryHeap::new(),
            ahead_replies: BinaryHeap::new(),
            swept_through: None,
            gap: Gap::default(),
            wire: BinaryHeap::new(),
            wire_latest_reply: None,
            closed: VecDeque::new(),
            unsorted: BinaryHeap::new(),
            baseline_latency: Counts::new(),
            send_lag: Counts::new(),
            probe_errors: 0,
            windows: Vec::new(),
            open_writes: VecDeque::new(),
            memory: VecDeque::new(),
            memory_ended: false,
            intervals: BTreeMap::new(),
            intervals_done: 0,
            horizon: Horizon {
                probes_through_us: 0,
                writes_from_us: 0,
            },
            finished: false,
            out: Vec::new(),
        }
    }

    /// Also hands out one [`Interval`] per `interval_us` of the run (from time 0).
    pub fn with_intervals(mut self, interval_us: u64) -> Correlator {
        self.interval_us = Some(interval_us.max(1));
        self
    }

    /// Takes one probe.
    pub fn probe(&mut self, probe: &ProbeRecord) {
        let threshold = self.config.stall_threshold_us;
        let delayed = probe.latency_us.is_none_or(|l| l > threshold);
        self.ahead_intended
            .push(Reverse((probe.intended_us, delayed)));
        self.send_lag.add(probe.send_lag_us());
        if !probe.ok {
            self.probe_errors += 1;
        }
        if let Some(reply) = probe.reply_us {
            self.ahead_replies.push(Reverse(reply));
            self.wire.push(Reverse((probe.sent_us, reply)));
            if let Some(latency) = probe.latency_us {
                self.unsorted.push(Reverse(Answered {
                    reply_us: reply,
                    intended_us: probe.intended_us,
                    latency_us: latency,
                    sent_us: probe.sent_us,
                    thread: probe.thread,
                    seq: probe.seq,
                }));
            }
        }
        if let (Some(reply), Some(_)) = (probe.reply_us, probe.latency_us) {
            // Windows are in order and do not overlap: only those from the last one starting
            // before the reply back to the first ending after the send can hold the probe.
            let hi = self
                .open_writes
                .partition_point(|w| w.record.start_us <= reply);
            for write in self.open_writes.range_mut(..hi).rev() {
                if write.record.reply_us < probe.intended_us {
                    break;
                }
                write.take_probe(probe, threshold);
            }
        }
        if let Some(len) = self.interval_us {
            let index = probe.intended_us / len;
            let interval = self
                .intervals
                .entry(index)
                .or_insert_with(OpenInterval::new);
            interval.probes += 1;
            if !probe.ok {
                interval.errors += 1;
            }
            if let Some(latency) = probe.latency_us
                && interval.latency.record(latency.max(1)).is_err()
            {
                interval.latency.saturating_record(latency.max(1));
            }
        }
    }

    /// Takes the probes of a recorded run, every write of which has already been given: fed in
    /// time order with the horizon moving as it goes, so that what the correlator holds stays
    /// small (the findings are the same in any order: see the tests). Then [`Self::finish`].
    pub fn feed_recorded(&mut self, probes: &[ProbeRecord]) {
        let mut order: Vec<&ProbeRecord> = probes.iter().collect();
        order.sort_by_key(|p| p.intended_us);
        for chunk in order.chunks(4096) {
            for probe in chunk {
                self.probe(probe);
            }
            let last = chunk.last().map_or(0, |p| p.intended_us);
            self.advance(Horizon {
                probes_through_us: last.saturating_sub(1),
                writes_from_us: u64::MAX,
            });
        }
    }

    /// Takes one write (its window must not overlap an earlier one's).
    pub fn write(&mut self, record: WriteRecord) {
        let threshold = self.config.stall_threshold_us;
        self.windows
            .push((record.seq, record.start_us, record.reply_us));
        let mut open = OpenWrite {
            record,
            probes_in_window: 0,
            probes_delayed: 0,
            worst: None,
            stall_us: 0,
            stall_during_send_us: 0,
            stall_after_send_us: 0,
            baseline_p50_us: None,
        };
        // The probes already given that can overlap it are among those not yet sorted into the
        // baseline: the others were answered before `writes_from_us`, so before it began.
        for answered in &self.unsorted {
            open.take_answered(&answered.0, threshold);
        }
        self.open_writes.push_back(open);
    }

    /// Takes one host memory reading (in time order).
    pub fn memory(&mut self, sample: MemorySample) {
        self.memory.push_back(sample);
    }

    /// No more host memory readings will come (or none ever will).
    pub fn memory_ended(&mut self) {
        self.memory_ended = true;
    }

    /// Moves the horizon on and makes final what it allows.
    pub fn advance(&mut self, horizon: Horizon) {
        self.horizon = Horizon {
            probes_through_us: horizon
                .probes_through_us
                .max(self.horizon.probes_through_us),
            writes_from_us: horizon.writes_from_us.max(self.horizon.writes_from_us),
        };
        self.settle();
    }

    /// Every input is in: makes everything final.
    pub fn finish(&mut self) {
        self.finished = true;
        self.memory_ended = true;
        self.horizon = Horizon {
            probes_through_us: u64::MAX,
            writes_from_us: u64::MAX,
        };
        self.sweep();
        // A silence still open at the end was broken by no reply: it proves nothing.
        self.gap = Gap::default();
        self.settle();
    }

    /// Findings made final since the last call, in the order they became final.
    pub fn drain(&mut self) -> Vec<Finding> {
        std::mem::take(&mut self.out)
    }

    /// The baseline so far (over the whole run once finished).
    pub fn baseline(&self) -> Baseline {
        Baseline {
            probes: self.baseline_latency.total,
            p50_us: self.baseline_latency.percentile(50.0),
            p99_us: self.baseline_latency.percentile(99.0),
            max_us: self.baseline_latency.max.unwrap_or(0),
            probe_errors: self.probe_errors,
            send_lag_p50_us: self.send_lag.percentile(50.0),
            send_lag_p99_us: self.send_lag.percentile(99.0),
            send_lag_max_us: self.send_lag.max.unwrap_or(0),
        }
    }

    /// Probes and replies held for windows still open (for the memory benchmarks and tests).
    pub fn held(&self) -> usize {
        self.ahead_intended.len() + self.ahead_replies.len() + self.wire.len() + self.unsorted.len()
    }

    fn settle(&mut self) {
        self.sweep();
        self.sort_baseline();
        self.settle_stalls();
        self.settle_writes();
        self.settle_intervals();
        self.trim_memory();
        self.release_spare();
    }

    /// Gives back what the probe heaps grew to in a backlog once it has drained. A collector
    /// that fell behind (a starved host: the channel full, 65,536 probes taken in one step)
    /// leaves them holding room for every probe of the backlog, 88 bytes each (11 MiB after one
    /// at 2 x 10000/s), and a `Vec` never shrinks on its own: over hours the memory would
    /// follow the longest backlog ever seen, not the one at hand.
    fn release_spare(&mut self) {
        shrink_when_spare(&mut self.ahead_intended);
        shrink_when_spare(&mut self.ahead_replies);
        shrink_when_spare(&mut self.wire);
        shrink_when_spare(&mut self.unsorted);
    }

    /// Sweeps intended sends and replies in time order up to the probe horizon (an intended
    /// send before a reply at the same µs: that reply ends its silence).
    fn sweep(&mut self) {
        let limit = self.horizon.probes_through_us;
        let threshold = self.config.stall_threshold_us;
        loop {
            let next_intended = self
                .ahead_intended
                .peek()
                .map(|r| r.0)
                .filter(|&(t, _)| t <= limit);
            let next_reply = self
                .ahead_replies
                .peek()
                .map(|r| r.0)
                .filter(|&r| r <= limit);
            let next = match (next_intended, next_reply) {
                (Some((t, _)), Some(r)) => Some(t.min(r)),
                (Some((t, _)), None) => Some(t),
                (None, r) => r,
            };
            if let Some(next) = next {
                self.drop_silence_older_than(next);
            }
            match (next_intended, next_reply) {
                (Some((t, delayed)), reply) if reply.is_none_or(|r| t <= r) => {
                    self.ahead_intended.pop();
                    if self.gap.first_us.is_none() {
                        self.gap = Gap {
                            first_us: Some(t),
                            ..Gap::default()
                        };
                    }
                    if t != self.gap.last_us {
                        self.gap.last_us = t;
                        self.gap.delayed_at_last = 0;
                    }
                    if delayed {
                        self.gap.delayed += 1;
                        self.gap.delayed_at_last += 1;
                    }
                }
                (_, Some(reply)) => {
                    self.ahead_replies.pop();
                    while let Some(&Reverse((sent, r))) = self.wire.peek() {
                        if sent + threshold >= reply {
                            break;
                        }
                        self.wire.pop();
                        self.wire_latest_reply =
                            Some(self.wire_latest_reply.map_or(r, |l| l.max(r)));
                    }
                    let gap = std::mem::take(&mut self.gap);
                    if let Some(start) = gap.first_us
                        && reply - start > threshold
                    {
                        let delayed = gap.delayed
                            - if gap.last_us == reply {
                                gap.delayed_at_last
                            } else {
                                0
                            };
                        // Was any probe really waiting on the server: sent more than the
                        // threshold before the silence ended, and answered only at its end or
                        // later? If every delayed probe left late instead, the silence was this
                        // host's. (Probes without a reply prove nothing either way.)
                        let on_wire = self.wire_latest_reply.is_some_and(|l| l >= reply);
                        let stall = Stall {
                            start_us: start,
                            end_us: reply,
                            duration_ms: (reply - start) as f64 / 1e3,
                            probes_delayed: delayed,
                            write_seq: None,
                            ..Stall::default()
                        };
                        if on_wire {
                            self.stall_into_intervals(&stall);
                        }
                        self.closed.push_back((stall, on_wire));
                    }
                }
                _ => break,
            }
        }
        self.drop_silence_older_than(limit);
        self.swept_through = Some(limit);
    }

    /// Drops the open silence when `now` is more than `max_silence_us` past its first probe
    /// with no reply in between (what happens depends on the timeline only, not on how far the
    /// horizon moved at a time).
    fn drop_silence_older_than(&mut self, now: u64) {
        if let (Some(max), Some(first)) = (self.config.max_silence_us, self.gap.first_us)
            && now > first.saturating_add(max)
        {
            self.gap = Gap::default();
        }
    }

    fn stall_into_intervals(&mut self, stall: &Stall) {
        let Some(len) = self.interval_us else {
            return;
        };
        for index in stall.start_us / len..=stall.end_us / len {
            let (from, to) = (index * len, (index + 1) * len);
            let covered = overlap(stall.start_us, stall.end_us, from, to);
            if covered == 0 && index != stall.start_us / len {
                continue;
            }
            let interval = self
                .intervals
                .entry(index)
                .or_insert_with(OpenInterval::new);
            interval.stall_us += covered;
            if index == stall.start_us / len {
                interval.stalls += 1;
                interval.longest_stall_us =
                    interval.longest_stall_us.max(stall.end_us - stall.start_us);
            }
        }
    }

    /// Sorts answered probes into the baseline in reply order, as far as no unknown write can
    /// overlap them and no unknown probe was answered before them.
    fn sort_baseline(&mut self) {
        let limit = self
            .horizon
            .writes_from_us
            .min(self.horizon.probes_through_us.saturating_add(1));
        while let Some(&Reverse(answered)) = self.unsorted.peek() {
            if answered.reply_us >= limit {
                break;
            }
            self.unsorted.pop();
            if in_any_window(&self.windows, answered.intended_us, answered.reply_us) {
                continue;
            }
            // The writes that began at or before this reply take their baseline before it
            // counts.
            for write in &mut self.open_writes {
                if write.baseline_p50_us.is_none() && write.record.start_us <= answered.reply_us {
                    write.baseline_p50_us = Some(self.baseline_latency.percentile(50.0));
                }
            }
            self.baseline_latency.add(answered.latency_us);
        }
    }

    /// Hands out closed episodes that no unknown write can overlap, each tied to its write.
    fn settle_stalls(&mut self) {
        while let Some((stall, _)) = self.closed.front() {
            if stall.end_us >= self.horizon.writes_from_us && !self.finished {
                break;
            }
            let (mut stall, on_wire) = self.closed.pop_front().expect("peeked");
            stall.write_seq =
                overlapping_write(&stall, &self.windows, self.config.stall_threshold_us);
            if on_wire {
                let hi = self
                    .open_writes
                    .partition_point(|w| w.record.start_us <= stall.end_us);
                for write in self.open_writes.range_mut(..hi).rev() {
                    if write.record.reply_us < stall.start_us {
                        break;
                    }
                    write.take_stall(&stall);
                }
                self.out.push(Finding::Stall(stall));
            } else {
                self.out.push(Finding::Hiccup(stall));
            }
        }
    }

    /// Hands out the writes whose figures can no longer change, in order.
    fn settle_writes(&mut self) {
        while let Some(write) = self.open_writes.front() {
            let end = write.record.reply_us;
            let probes_in = self.finished || self.horizon.probes_through_us >= end;
            let silence_closed = self.gap.first_us.is_none_or(|first| first > end);
            let stalls_in = self.closed.front().is_none_or(|(s, _)| s.start_us > end);
            let memory_in = self.memory_ended || self.memory.back().is_some_and(|m| m.at_us > end);
            let baseline_in = self.finished
                || write.baseline_p50_us.is_some()
                || self.horizon.writes_from_us > write.record.start_us;
            if !(probes_in && silence_closed && stalls_in && memory_in && baseline_in) {
                break;
            }
            let write = self.open_writes.pop_front().expect("peeked");
            let baseline_p50 = write
                .baseline_p50_us
                .unwrap_or_else(|| self.baseline_latency.percentile(50.0));
            let memory: Vec<MemorySample> = self.memory.iter().copied().collect();
            self.out
                .push(Finding::Write(summarize(&write, baseline_p50, &memory)));
        }
    }

    /// Hands out the intervals nothing still to come can change.
    fn settle_intervals(&mut self) {
        let Some(len) = self.interval_us else {
            return;
        };
        let swept = if self.finished {
            u64::MAX
        } else {
            self.swept_through.map_or(0, |s| s.saturating_add(1))
        };
        while let Some((&index, _)) = self.intervals.first_key_value() {
            let end = (index + 1).saturating_mul(len);
            let ready = self.finished
                || (swept >= end && self.gap.first_us.is_none_or(|first| first >= end));
            if !ready {
                break;
            }
            // Intervals with no probe at all (a gap in the timeline) are handed out empty.
            while self.intervals_done < index {
                let start = self.intervals_done * len;
                self.out.push(Finding::Interval(Interval::empty(
                    start,
                    len,
                    interval_histogram(),
                )));
                self.intervals_done += 1;
            }
            let (_, open) = self.intervals.pop_first().expect("peeked");
            self.out.push(Finding::Interval(Interval {
                start_us: index * len,
                length_us: len,
                probes: open.probes,
                errors: open.errors,
                p50_us: open.latency.value_at_quantile(0.5),
                p99_us: open.latency.value_at_quantile(0.99),
                p999_us: open.latency.value_at_quantile(0.999),
                max_us: open.latency.max(),
                stalls: open.stalls,
                stall_ms: open.stall_us as f64 / 1e3,
                longest_stall_ms: open.longest_stall_us as f64 / 1e3,
                latency: open.latency,
            }));
            self.intervals_done = index + 1;
        }
    }

    /// Drops host memory readings no write still open or to come needs (keeping the last one
    /// before them: it is their reference).
    fn trim_memory(&mut self) {
        let needed_from = self
            .open_writes
            .front()
            .map_or(self.horizon.writes_from_us, |w| w.record.start_us);
        while self.memory.len() >= 2 && self.memory[1].at_us < needed_from {
            self.memory.pop_front();
        }
    }
}

/// Room a probe heap keeps however far it drains: what a few of the session's 50 ms settles bring at 2 x 10000/s.
const HEAP_ROOM_KEPT: usize = 4096;

/// Shrinks a heap's room to twice what it holds (at least [`HEAP_ROOM_KEPT`]) once it is a
/// quarter full at most (so a heap that grows again doubles at most once before the next
/// shrink: the copies stay amortized).
fn shrink_when_spare<T: Ord>(heap: &mut BinaryHeap<T>) {
    if heap.capacity() > HEAP_ROOM_KEPT && heap.len() <= heap.capacity() / 4 {
        heap.shrink_to((heap.len() * 2).max(HEAP_ROOM_KEPT));
    }
}

/// A write's summary from its accumulated figures.
fn summarize(write: &OpenWrite, baseline_p50_us: u64, memory: &[MemorySample]) -> WriteSummary {
    let record = &write.record;
    let worst = write.worst.map(|w| w.0);
    let pressure = assess(
        record.start_us,
        record.reply_us,
        memory,
        record.host_mem_pct,
    );
    WriteSummary {
        seq: record.seq,
        op: record.op,
        size_bytes: record.size_bytes,
        set_ms: record.set_ms,
        hol_delay_ms: worst.map(|w| w.saturating_sub(baseline_p50_us) as f64 / 1e3),
        stall_ms: write.stall_us as f64 / 1e3,
        probes_delayed: write.probes_delayed,
        stall_during_send_ms: write.stall_during_send_us as f64 / 1e3,
        stall_after_send_ms: write.stall_after_send_us as f64 / 1e3,
        host_mem_pct: record.host_mem_pct,
        host_swap_pct: record.host_swap_pct,
        probes_in_window: write.probes_in_window,
        worst_latency_ms: worst.map(|w| w as f64 / 1e3),
        ok: record.ok,
        server_exec_us: record.server_exec_us,
        server_latency_event_ms: record.server_latency_event_ms,
        server_eventloop_max_us: record.server_eventloop_max_us,
        server_request_bytes: record.server_request_bytes,
        memory_pressure: pressure.memory_pressure,
        host_mem_peak_pct: pressure.host_mem_peak_pct,
        host_swap_grew_bytes: pressure.host_swap_grew_bytes,
        hol_probe_send_lag_ms: write.worst.map(|w| w.4 as f64 / 1e3),
        ..WriteSummary::default()
    }
    .with_value_of(record)
}

/// Whether `[start, end]` meets any write window (windows in order, not overlapping).
fn in_any_window(windows: &[(u32, u64, u64)], start: u64, end: u64) -> bool {
    let hi = windows.partition_point(|&(_, ws, _)| ws <= end);
    windows[..hi].last().is_some_and(|&(_, _, we)| we >= start)
}

/// The write whose window overlaps the episode most (the earlier on a tie), if one overlaps it
/// by more than `threshold_us`: others waited past the threshold inside that window, as its
/// figures count a wait (from its start). Another client's stall that ended just inside a
/// 23 µs DEL's window was tied to the DEL (the DEL's figures, counted from its start, say it
/// held no one: a review of 2026-12-05).
fn overlapping_write(
    episode: &Stall,
    windows: &[(u32, u64, u64)],
    threshold_us: u64,
) -> Option<u32> {
    let hi = windows.partition_point(|&(_, ws, _)| ws <= episode.end_us);
    windows[..hi]
        .iter()
        .rev()
        .take_while(|&&(_, _, we)| we >= episode.start_us)
        .map(|&(seq, ws, we)| (seq, overlap(episode.start_us, episode.end_us, ws, we)))
        .filter(|&(_, o)| o > threshold_us)
        .max_by_key(|&(seq, o)| (o, Reverse(seq)))
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

/// Send lag (actual − intended) of every probe: the tool's own timing jitter. Probes never wait
/// for each other, so a late probe was late only because its thread was.
pub fn send_lags(probes: &[ProbeRecord]) -> Vec<u64> {
    probes.iter().map(ProbeRecord::send_lag_us).collect()
}

/// Length of the intersection of `[a0, a1]` and `[b0, b1]`, µs.
pub fn overlap(a0: u64, a1: u64, b0: u64, b1: u64) -> u64 {
    a1.min(b1).saturating_sub(a0.max(b0))
}

#[cfg(test)]
mod oracle;

#[cfg(test)]
mod tests;
