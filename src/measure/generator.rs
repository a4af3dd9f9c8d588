//! What the load generator threads (`probe load`) report on the session's channel, as
//! [`crate::measure::event::Event::Load`]: one second of one thread's replies per server, the
//! written server's requests one by one (for the correlator), problems worth telling, and each
//! thread's totals. The generator itself lives in `crate::load::engine`; its reports live here,
//! beside the probes' and the writer's records, so that the event type depends on no command.

use hdrhistogram::Histogram;

use crate::record::{ProbeCmd, ProbeRecord};

/// What the threads report to the collector.
#[derive(Debug)]
pub enum EngineMsg {
    /// One second of one thread, per server. Sent for every second in order, empty or not.
    Second(ThreadSecond),
    /// Per-request samples (only for [`crate::load::engine::EngineConfig::sample_server`]), sent before the
    /// [`EngineMsg::Second`] that closes the period they fall in.
    Samples(Vec<Sample>),
    /// A connection problem worth telling the user (rate-limited).
    Note(String),
    /// The thread finished; no more messages from it.
    Done(ThreadSummary),
}

/// One thread's figures for one second.
#[derive(Debug)]
pub struct ThreadSecond {
    /// Which thread.
    pub thread: u16,
    /// Seconds since the load started.
    pub second: u64,
    /// One aggregate per server.
    pub servers: Vec<SecondAgg>,
    /// The thread's CPU time in this second, percent of wall time (`None` where unknown).
    pub cpu_pct: Option<f64>,
    /// Time the thread was runnable but waiting for a CPU in this second, percent of wall
    /// time (`None` where unknown): high when the host is oversubscribed.
    pub wait_pct: Option<f64>,
    /// Every request of [`crate::load::engine::EngineConfig::sample_server`] this thread started before this (run
    /// clock µs) has been sent as a [`Sample`], in this message's batch or earlier: the
    /// collector's horizon for the streaming correlator.
    pub unsampled_from_us: u64,
}

/// One thread's totals.
#[derive(Debug, Clone)]
pub struct ThreadSummary {
    /// Which thread.
    pub thread: u16,
    /// Connections it drove.
    pub clients: u32,
    /// CPU time over the run, µs (`None` where unknown).
    pub cpu_us: Option<u64>,
    /// Time runnable but waiting for a CPU over the run, µs (`None` where unknown).
    pub run_delay_us: Option<u64>,
    /// Wall time from start to finish, µs.
    pub wall_us: u64,
    /// Open loop: lateness of sends the thread itself made late (actual − intended), µs.
    pub schedule_lag: Histogram<u64>,
    /// Open loop: such sends more than 1 ms late.
    pub late_sends: u64,
    /// Open loop: scheduled requests never sent because their connection was full or down
    /// when the run ended.
    pub unsent: u64,
    /// Connections reopened after an error or a timeout.
    pub reconnects: u64,
    /// Connections still down at the end.
    pub disconnected_at_end: u32,
    /// Samples dropped because the collector fell behind (expected 0).
    pub samples_dropped: u64,
}

/// One load request of the written server: when its latency started counting and how long it
/// took (until its reply, or until it was given up on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Run clock, µs: the write of the request (closed loop) or its intended send (open loop).
    pub start_us: u64,
    /// Round trip, µs (for a request without reply: until it was counted lost).
    pub latency_us: u32,
    /// False for error replies, broken connections and timeouts.
    pub ok: bool,
    /// A reply came (an error reply too); false: the request was given up (timeout, broken
    /// connection) `latency_us` after its start.
    pub replied: bool,
}

impl Sample {
    /// When the reply came (or the request was given up), run clock µs.
    pub fn end_us(&self) -> u64 {
        self.start_us + u64::from(self.latency_us)
    }

    /// The request as the correlator takes a probe: intended = sent = its start (the engine
    /// keeps no separate send time; in closed loop they are the same), reply = its end when a
    /// reply came, none when it was given up. The reply time is when the generator thread read
    /// it, so a generator held off its core delays it too (the probes have kernel stamps).
    pub fn record(&self, seq: u64) -> ProbeRecord {
        let reply_us = self.replied.then(|| self.end_us());
        ProbeRecord {
            thread: 0,
            seq,
            cmd: ProbeCmd::Get,
            intended_us: self.start_us,
            sent_us: self.start_us,
            reply_us,
            latency_us: self.replied.then_some(u64::from(self.latency_us)),
            ok: self.ok,
            error: None,
            read_us: reply_us,
        }
    }
}

/// One second (or a whole run) of replies from one server.
#[derive(Debug, Clone)]
pub struct SecondAgg {
    /// Requests answered as expected (GET value or nil, SET OK).
    pub requests: u64,
    /// Value bytes: GET payloads received plus SET values sent.
    pub bytes: u64,
    /// Error replies, and requests lost with a broken connection.
    pub errors: u64,
    /// Requests unanswered within the timeout.
    pub timeouts: u64,
    /// GETs of keys that were not there (nil).
    pub misses: u64,
    /// Requests whose latency passed the delay threshold.
    pub delayed: u64,
    /// Cluster `MOVED` replies (the key's slot is served by another node).
    pub moved: u64,
    /// Cluster `ASK` replies (the key's slot is migrating).
    pub asked: u64,
    /// Round-trip latencies of `requests`, µs.
    pub hist: Histogram<u64>,
}

impl Default for SecondAgg {
    fn default() -> Self {
        Self::new()
    }
}

impl SecondAgg {
    /// An empty aggregate.
    pub fn new() -> SecondAgg {
        SecondAgg {
            requests: 0,
            bytes: 0,
            errors: 0,
            timeouts: 0,
            misses: 0,
            delayed: 0,
            moved: 0,
            asked: 0,
            hist: new_histogram(),
        }
    }

    /// Records one good reply.
    #[inline]
    pub fn record_ok(&mut self, latency_us: u64, bytes: u64, threshold_us: u64) {
        self.requests += 1;
        self.bytes += bytes;
        if latency_us > threshold_us {
            self.delayed += 1;
        }
        record(&mut self.hist, latency_us);
    }

    /// Adds another aggregate to this one.
    pub fn merge(&mut self, other: &SecondAgg) {
        self.requests += other.requests;
        self.bytes += other.bytes;
        self.errors += other.errors;
        self.timeouts += other.timeouts;
        self.misses += other.misses;
        self.delayed += other.delayed;
        self.moved += other.moved;
        self.asked += other.asked;
        // Both histograms auto-resize, so addition cannot run out of range.
        let _ = self.hist.add(&other.hist);
    }

    /// The latency at quantile `q`, µs (0 without replies).
    pub fn quantile_us(&self, q: f64) -> u64 {
        if self.hist.is_empty() {
            0
        } else {
            self.hist.value_at_quantile(q)
        }
    }

    /// The worst latency, µs (0 without replies).
    pub fn max_us(&self) -> u64 {
        if self.hist.is_empty() {
            0
        } else {
            self.hist.max()
        }
    }
}

/// Records a value into an auto-resizing histogram. (`saturating_record` would not resize: it
/// clamps values above the current range to the histogram's *initial* highest value, 2.)
#[inline]
pub fn record(hist: &mut Histogram<u64>, value: u64) {
    if hist.record(value).is_err() {
        // Only when the counts array cannot grow any further: keep the count, at the top.
        hist.saturating_record(value);
    }
}

/// An auto-resizing histogram with 3 significant figures (µs values, 1 µs resolution).
pub fn new_histogram() -> Histogram<u64> {
    // 3 significant figures is always a valid precision.
    Histogram::new(3).unwrap_or_else(|_| unreachable!("sigfig 3 is valid"))
}
