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

/// Settings of the analysis.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct CorrelateConfig {
    /// A probe waiting longer than this (from its intended send) is delayed; a silence longer
    /// than this is a stall.
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
    /// two sizes, and in runs recorded before it was kept).
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
        let latency = probe.latency_us;
        if probe.intended_us <= we && probe.reply_us >= ws {
            self.probes_in_window += 1;
            if latency > threshold_us {
                self.probes_delayed += 1;
            }
            let key = (
                latency,
                Reverse(probe.intended_us),
                Reverse(probe.thread),
                Reverse(probe.seq),
                probe.sent_us.saturating_sub(probe.intended_us),
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
            stall.write_seq = overlapping_write(&stall, &self.windows);
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

/// Room a probe heap keeps however far it drains: what a few 20 ms steps bring at 2 x 10000/s.
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

/// The write whose window overlaps the episode most (the earlier on a tie), if any does.
fn overlapping_write(episode: &Stall, windows: &[(u32, u64, u64)]) -> Option<u32> {
    let hi = windows.partition_point(|&(_, ws, _)| ws <= episode.end_us);
    windows[..hi]
        .iter()
        .rev()
        .take_while(|&&(_, _, we)| we >= episode.start_us)
        .map(|&(seq, ws, we)| (seq, overlap(episode.start_us, episode.end_us, ws, we)))
        .filter(|&(_, o)| o > 0)
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
#[path = "correlate_oracle.rs"]
mod correlate_oracle;

#[cfg(test)]
mod tests {
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
            let oracle = super::correlate_oracle::correlate_with_memory(&probes, &writes, &memory, THRESHOLD);
            prop_assert_eq!(&batch.stalls, &oracle.stalls);
            prop_assert_eq!(&batch.client_hiccups, &oracle.client_hiccups);
            prop_assert_eq!(&batch.writes, &oracle.writes);
            // The oracle keeps every latency exactly; the correlator's histograms count those
            // over 65.5 ms to 3 significant digits (memory that does not grow with the run):
            // a percentile up there may differ by that precision, nothing else may.
            let (b, o) = (&batch.baseline, &oracle.baseline);
            prop_assert_eq!(
                (b.probes, b.max_us, b.probe_errors, b.send_lag_p50_us, b.send_lag_p99_us, b.send_lag_max_us),
                (o.probes, o.max_us, o.probe_errors, o.send_lag_p50_us, o.send_lag_p99_us, o.send_lag_max_us)
            );
            for (got, want) in [(b.p50_us, o.p50_us), (b.p99_us, o.p99_us)] {
                prop_assert!(got.abs_diff(want) <= want / 1000, "{got} vs {want}");
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

    #[test]
    fn memory_stays_bounded_over_a_long_quiet_stream() {
        // Ten minutes at 2 x 1000/s, fed in 20 ms steps: what the correlator holds stays at
        // what a few steps bring, however long it runs.
        let mut correlator = Correlator::new(THRESHOLD).with_intervals(1_000_000);
        let mut held_max = 0;
        let mut intervals = 0;
        let mut t = 0;
        while t < 600_000_000 {
            for thread in 0..2u16 {
                let at = t + u64::from(thread) * 500;
                correlator.probe(&probe(thread, at, at, at + 30));
            }
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
            for thread in 0..2u16 {
                let at = t + u64::from(thread) * 50;
                correlator.probe(&probe(thread, at, at, at + 30));
            }
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
}
