//! The per-second recorder of one generator thread: every reply into the current second's
//! aggregates (and, for the sampled server, one sample per request), seconds closed with the
//! thread's CPU share, and an outbox handed to the collector without ever blocking.

use std::collections::VecDeque;

use crate::measure::event::EventSender;
use crossbeam_channel::TrySendError;

use super::os::ThreadTimes;
use super::{EngineConfig, EngineMsg, Sample, SecondAgg, ThreadSecond};
use crate::load::scanner::Scanned;
use crate::measure::event::Event;

pub(super) struct Pending {
    /// Latency counts from here: the write (closed loop) or the intended send (open loop).
    pub(super) start_us: u64,
    /// When it was actually written (timeouts count from here).
    pub(super) sent_us: u64,
    /// SET value bytes (0 for a GET).
    pub(super) set_bytes: u32,
    /// The key's index (to send it again where a cluster redirects it).
    pub(super) key_index: u64,
}

/// Most per-thread messages held back while the collector is busy before samples are dropped.
const OUTBOX_LIMIT: usize = 512;
/// Samples per message: 64 KiB, under the mmap threshold `main` sets, so a batch's buffer comes
/// from the heap and goes back to it (not a mapping of its own per batch).
const SAMPLE_BATCH: usize = 4096;
/// How many connection problems one thread reports in full.
pub(super) const NOTES_PER_THREAD: u32 = 3;

/// Per-thread recording state: the current second's aggregates, the samples, the outbox.
pub(super) struct Recorder {
    pub(super) thread: u16,
    pub(super) start_us: u64,
    pub(super) threshold_us: u64,
    pub(super) sample_server: Option<usize>,
    pub(super) cur_second: u64,
    pub(super) cur: Vec<SecondAgg>,
    pub(super) samples: Vec<Sample>,
    pub(super) samples_dropped: u64,
    pub(super) outbox: VecDeque<EngineMsg>,
    pub(super) cpu_mark: (ThreadTimes, u64),
    pub(super) notes: u32,
}

impl Recorder {
    /// Thread `thread`'s recorder, its seconds counted from `start_us`.
    pub(super) fn new(thread: u16, start_us: u64, config: &EngineConfig) -> Recorder {
        Recorder {
            thread,
            start_us,
            threshold_us: config.delayed_threshold_us,
            sample_server: config.sample_server,
            cur_second: 0,
            cur: (0..config.servers.len())
                .map(|_| SecondAgg::new())
                .collect(),
            samples: Vec::with_capacity(if config.sample_server.is_some() {
                SAMPLE_BATCH
            } else {
                0
            }),
            samples_dropped: 0,
            outbox: VecDeque::new(),
            cpu_mark: (ThreadTimes::default(), 0),
            notes: 0,
        }
    }

    /// A request the cluster redirected (followed by the worker): counted, and said once.
    pub(super) fn redirected(&mut self, server: usize, ask: bool, text: &str) {
        let agg = &mut self.cur[server];
        if ask {
            agg.asked += 1;
        } else {
            agg.moved += 1;
        }
        if self.notes < NOTES_PER_THREAD {
            self.notes += 1;
            self.outbox.push_back(EngineMsg::Note(format!(
                "the cluster redirected a request ({text}): its slot map changed since the load started; redirected requests are sent again where it says"
            )));
        }
    }

    pub(super) fn reply(&mut self, server: usize, pending: Pending, reply: Scanned, done_us: u64) {
        let latency = done_us.saturating_sub(pending.start_us);
        let agg = &mut self.cur[server];
        let ok = match reply {
            Scanned::Bulk { len_bytes } if pending.set_bytes == 0 => {
                agg.record_ok(latency, len_bytes, self.threshold_us);
                true
            }
            Scanned::Nil if pending.set_bytes == 0 => {
                agg.record_ok(latency, 0, self.threshold_us);
                agg.misses += 1;
                true
            }
            Scanned::Status { ok: true } if pending.set_bytes > 0 => {
                agg.record_ok(latency, u64::from(pending.set_bytes), self.threshold_us);
                true
            }
            // A redirect that could not be followed (a second one, or its node unreachable).
            Scanned::Error(text) if text.starts_with("MOVED ") || text.starts_with("ASK ") => {
                agg.errors += 1;
                if self.notes < NOTES_PER_THREAD {
                    self.notes += 1;
                    self.outbox.push_back(EngineMsg::Note(format!(
                        "a redirected request could not be followed: {text}"
                    )));
                }
                false
            }
            Scanned::Error(text) => {
                agg.errors += 1;
                if self.notes < NOTES_PER_THREAD {
                    self.notes += 1;
                    self.outbox
                        .push_back(EngineMsg::Note(format!("the server answered: {text}")));
                }
                false
            }
            other => {
                agg.errors += 1;
                if self.notes < NOTES_PER_THREAD {
                    self.notes += 1;
                    self.outbox
                        .push_back(EngineMsg::Note(format!("unexpected reply {other:?}")));
                }
                false
            }
        };
        self.sample(server, pending.start_us, latency, ok, true);
    }

    /// Requests that got no reply: counted as errors or timeouts, and as failed samples.
    pub(super) fn lost(
        &mut self,
        server: usize,
        lost: &mut VecDeque<Pending>,
        now_us: u64,
        timeout: bool,
    ) {
        for pending in lost.drain(..) {
            if timeout {
                self.cur[server].timeouts += 1;
            } else {
                self.cur[server].errors += 1;
            }
            let waited = now_us.saturating_sub(pending.start_us);
            self.sample(server, pending.start_us, waited, false, false);
        }
    }

    #[inline]
    pub(super) fn sample(
        &mut self,
        server: usize,
        start_us: u64,
        latency_us: u64,
        ok: bool,
        replied: bool,
    ) {
        if self.sample_server == Some(server) {
            self.samples.push(Sample {
                start_us,
                latency_us: latency_us.min(u64::from(u32::MAX)) as u32,
                ok,
                replied,
            });
            if self.samples.len() >= SAMPLE_BATCH {
                self.ship_samples();
            }
        }
    }

    pub(super) fn ship_samples(&mut self) {
        if self.samples.is_empty() {
            return;
        }
        let batch = std::mem::replace(&mut self.samples, Vec::with_capacity(SAMPLE_BATCH));
        if self.outbox.len() >= OUTBOX_LIMIT {
            self.samples_dropped += batch.len() as u64;
        } else {
            self.outbox.push_back(EngineMsg::Samples(batch));
        }
    }

    pub(super) fn second_of(&self, us: u64) -> u64 {
        us.saturating_sub(self.start_us) / 1_000_000
    }

    /// The second `now_us` falls in, but never past the run's last second once the stop time
    /// is known (replies after the stop are counted in the last second).
    pub(super) fn clamped_second(&self, now_us: u64, stop_at: u64) -> u64 {
        let second = self.second_of(now_us);
        if stop_at == u64::MAX {
            second
        } else {
            second.min(self.second_of(stop_at.saturating_sub(1)))
        }
    }

    /// Closes every second before `second`; `unsampled_from` (asked only when a second closes)
    /// is what [`ThreadSecond::unsampled_from_us`] says.
    pub(super) fn advance_to(
        &mut self,
        second: u64,
        now_us: u64,
        unsampled_from: impl FnOnce() -> u64,
    ) {
        if self.cur_second >= second {
            return;
        }
        let unsampled_from_us = unsampled_from();
        while self.cur_second < second {
            self.close_second(now_us, unsampled_from_us);
            self.cur_second += 1;
        }
    }

    /// Ships the current second (samples first, so the collector has them when the second is
    /// final) and starts a fresh one with the same number.
    pub(super) fn close_second(&mut self, now_us: u64, unsampled_from_us: u64) {
        self.ship_samples();
        let servers = self.cur.len();
        let aggs = std::mem::replace(
            &mut self.cur,
            (0..servers).map(|_| SecondAgg::new()).collect(),
        );
        let times = ThreadTimes::now();
        let wall = now_us.saturating_sub(self.cpu_mark.1);
        let share = |now: Option<u64>, then: Option<u64>| match (now, then) {
            (Some(now), Some(then)) if wall > 0 => {
                Some(100.0 * now.saturating_sub(then) as f64 / wall as f64)
            }
            _ => None,
        };
        let cpu_pct = share(times.cpu_us, self.cpu_mark.0.cpu_us);
        let wait_pct = share(times.run_delay_us, self.cpu_mark.0.run_delay_us);
        self.cpu_mark = (times, now_us);
        self.outbox.push_back(EngineMsg::Second(ThreadSecond {
            thread: self.thread,
            second: self.cur_second,
            servers: aggs,
            cpu_pct,
            wait_pct,
            unsampled_from_us,
        }));
    }

    /// Hands queued messages to the collector without ever blocking.
    pub(super) fn deliver(&mut self, tx: &EventSender) {
        while let Some(msg) = self.outbox.pop_front() {
            match tx.try_send(Event::Load(Box::new(msg))) {
                Ok(()) => {}
                Err(TrySendError::Full(event)) => {
                    if let Event::Load(msg) = event {
                        self.outbox.push_front(*msg);
                    }
                    return;
                }
                Err(TrySendError::Disconnected(_)) => {
                    self.outbox.clear();
                    return;
                }
            }
        }
    }
}
