//! The probe instrument's threads beside the probes (the memory sampler, the slow-log poller, the
//! topology watcher) and the order that stops them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use anyhow::{Context, Result};

use crate::session::{BUG, panicked};

use crate::measure::culprit::{POLL_EVERY, ServerLogBatch, ServerLogPoller};
use crate::measure::event::Event;
use crate::measure::probe::ProbeShared;

/// The probe instrument's threads and their stop flags: stopped (and joined) in the order that
/// keeps every record (the actor, the session's, is stopped before them).
pub(super) struct Threads {
    pub(super) probes: Vec<JoinHandle<()>>,
    pub(super) probes_shared: Arc<ProbeShared>,
    pub(super) sampler: Option<JoinHandle<()>>,
    pub(super) sampler_stop: Arc<AtomicBool>,
    pub(super) poller: Option<JoinHandle<()>>,
    pub(super) poller_stop: Arc<AtomicBool>,
    pub(super) watcher: Option<JoinHandle<()>>,
    pub(super) watcher_stop: Arc<AtomicBool>,
}

impl Threads {
    pub(super) fn new() -> Threads {
        Threads {
            probes: Vec::new(),
            probes_shared: Arc::new(ProbeShared::default()),
            sampler: None,
            sampler_stop: Arc::new(AtomicBool::new(false)),
            poller: None,
            poller_stop: Arc::new(AtomicBool::new(false)),
            watcher: None,
            watcher_stop: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Stops and joins every thread (the topology watcher only if it ends within
    /// [`WATCHER_JOIN_WAIT`]). Returns what the first thread that panicked said, if one did.
    pub(super) fn stop_all(&mut self) -> Option<String> {
        let mut first = None;
        let mut note = |what: &str, handle: JoinHandle<()>| {
            if let Some(panic) = panicked(handle) {
                first.get_or_insert(format!("the {what} thread panicked: {panic}{BUG}"));
            }
        };
        self.probes_shared.stop.store(true, Ordering::Relaxed);
        self.sampler_stop.store(true, Ordering::Relaxed);
        for handle in self.probes.drain(..) {
            note("probe", handle);
        }
        if let Some(handle) = self.sampler.take() {
            note("memory sampler", handle);
        }
        // The watcher and the poller wait parked between looks: unparked, they see the stop.
        // The watcher is not waited for while a look of its own is under way (a frozen server
        // holds it up to its reply limit): its looks matter no more, and it ends after that one.
        self.watcher_stop.store(true, Ordering::Release);
        if let Some(handle) = self.watcher.take() {
            handle.thread().unpark();
            let until = std::time::Instant::now() + WATCHER_JOIN_WAIT;
            while !handle.is_finished() && std::time::Instant::now() < until {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            if handle.is_finished() {
                let _ = handle.join();
            }
        }
        // Last: its final poll covers the stalls the last probes closed.
        self.poller_stop.store(true, Ordering::Release);
        if let Some(handle) = self.poller.take() {
            handle.thread().unpark();
            note("slow-log poller", handle);
        }
        first
    }
}

/// How long the stop waits for the topology watcher to end before leaving it to end on its own.
const WATCHER_JOIN_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// Starts the slow-log poller thread: a poll every [`POLL_EVERY`] until `stop`, then one more (so
/// the stalls that closed last get their names; not after a poll that failed), each sent as
/// [`Event::ServerLog`]. Connection trouble is a note and a retry at the next poll, never the end
/// of the run.
pub fn spawn_poller(
    mut poller: ServerLogPoller,
    events: crate::measure::event::EventSender,
    stop: Arc<AtomicBool>,
) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("server-log".into())
        .spawn(move || {
            let mut failing = false;
            let mut missed_noted = false;
            loop {
                crate::measure::test_panic_point("poller");
                let last = stop.load(Ordering::Relaxed);
                if last && failing {
                    // The server did not answer the last poll (frozen, or gone): one more
                    // would wait out the reply limit again for nothing.
                    return;
                }
                let polled_unix_us = crate::measure::serverview::unix_now_us();
                let mut notes = poller.take_notes();
                let poll = match poller.poll() {
                    Ok(poll) => {
                        failing = false;
                        poll
                    }
                    Err(err) => {
                        if !failing {
                            notes.push(format!(
                                "could not read the server's slow log ({}); stalls meanwhile go unnamed",
                                crate::error::one_line(&err)
                            ));
                        }
                        failing = true;
                        crate::measure::culprit::ServerLogPoll::default()
                    }
                };
                notes.extend(poller.take_notes());
                if poll.missed_entries > 0 && !missed_noted {
                    missed_noted = true;
                    notes.push(
                        "the server's slow log dropped or was reset of entries before they were read (slowlog-max-len, or another client's SLOWLOG RESET): some stalls may go unnamed".into(),
                    );
                }
                let batch = ServerLogBatch {
                    // A failed poll still moves the namer on: the stalls until now go unnamed
                    // rather than wait.
                    polled_unix_us,
                    poll,
                    notes,
                };
                // Never blocks (the channel takes the writer's and the poller's events whatever
                // it holds): at the end nobody may drain it.
                if events.send(Event::ServerLog(Box::new(batch))).is_err()
                    || last
                {
                    return;
                }
                // Until the next poll, or the stop (the last poll then comes at once).
                crate::measure::park_until(std::time::Instant::now() + POLL_EVERY, &stop);
            }
        })
        .context("starting the server-log thread")
}
