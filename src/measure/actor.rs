//! The measurement thread beside the probes that decides when a run ends (the writer, the
//! stall injector), and what it runs with. Apart from [`crate::run`], so that an actor and the
//! run that drives it do not depend on each other.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::measure::event::EventSender;
use anyhow::Result;

use crate::measure::clock::RunClock;
use crate::measure::serverview::{ViewSetup, Want, settings_for_writes};
use crate::measure::target::ConnInfo;

/// A measurement thread that runs beside the probes on the run's clock and decides when the run
/// ends: the writer of the main job ([`crate::measure::writer::WriterActor`]), the stall injector of `probe calibrate`.
/// It sends its events as [`Event::Write`] and ends with [`Event::WriterDone`] (or
/// [`Event::WriterFailed`]); it stops early when its `stop` flag is set.
pub trait Actor: Send {
    /// Steps it will take, for progress.
    fn steps_total(&self) -> usize;

    /// Work done once the run has its key prefix (`holprobe:<run-id>:`) and before its clock
    /// starts, so that it disturbs nothing measured (the writer lays out its steps and
    /// generates its value). Returns the keys it will create, checked free before the run.
    fn prepare(&mut self, _key_prefix: &str) -> Result<Vec<String>> {
        Ok(Vec::new())
    }

    /// The server settings it needs for the server's own view (applied on the embedded server,
    /// and on an external one with `--tune-server`; restored afterwards).
    fn server_settings(&self) -> Vec<(&'static str, Want)> {
        settings_for_writes()
    }

    /// Whether its run undoes what dead runs of the tool left on the server (their keys, the
    /// settings they changed), as `probe clean` does, before it starts. A run that promises to
    /// change nothing (`probe keys`) only says what it found.
    fn reclaims_dead_runs(&self) -> bool {
        true
    }

    /// Opens its connection and starts its thread.
    fn spawn(self: Box<Self>, ctx: ActorContext) -> Result<JoinHandle<()>>;
}

/// What an [`Actor`] gets to run with: the run's context, made once by the session.
pub struct ActorContext {
    /// The run's key prefix, `holprobe:<run-id>:` (every key the actor touches is under it).
    pub key_prefix: String,
    /// How to connect to the server.
    pub conn: ConnInfo,
    /// The run's clock.
    pub clock: RunClock,
    /// The run's event channel.
    pub events: EventSender,
    /// Set when the run stops.
    pub stop: Arc<AtomicBool>,
    /// Marked from before a write's start is taken until its record has been sent.
    pub mark: Arc<WriteMark>,
    /// Which server counters the actor may reset around its events.
    pub view: ViewSetup,
    /// The server runs on this host.
    pub server_local: bool,
    /// The tool started the server: the only one an `evict` op may lower `maxmemory` on.
    pub server_embedded: bool,
    /// In a cluster, every node (where to go when the written master fails over); empty
    /// otherwise.
    pub cluster_nodes: Vec<ConnInfo>,
    /// The written master's replicas the run probes: after each write the writer waits for
    /// them to apply it (`WAIT`), so that their figures of the write cover it.
    pub replicas: usize,
    /// Whether every probe thread has begun: an actor waits for it before its first op.
    pub probes_started: ProbesStarted,
}

/// Whether every probe thread of a run has sent its first probe. A writer waits for it before
/// its first op: a probe thread this host started late (one sent its first probe 794 ms after
/// its intended time, on a loaded 2-core host) would otherwise count that lateness, from
/// probes intended before the write, as the write's.
#[derive(Debug, Clone, Default)]
pub struct ProbesStarted {
    shared: Option<Arc<crate::measure::probe::ProbeShared>>,
    threads: u32,
}

impl ProbesStarted {
    /// The `threads` probe threads that share `shared`.
    pub fn new(shared: Arc<crate::measure::probe::ProbeShared>, threads: u32) -> ProbesStarted {
        ProbesStarted {
            shared: Some(shared),
            threads,
        }
    }

    /// True once every probe thread has sent its first probe (or there are none).
    pub fn all(&self) -> bool {
        self.shared
            .as_ref()
            .is_none_or(|s| s.threads_sending.load(Ordering::Acquire) >= self.threads)
    }

    /// Waits until [`Self::all`], the run is stopped, or `limit` passes; true when all began.
    pub fn wait(&self, stop: &AtomicBool, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while !self.all() {
            if stop.load(Ordering::Relaxed) || Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }
}

/// Tells the collector how far the writes are known: the actor marks the time right before it
/// takes a write's start, and clears the mark once the write's record is in the channel. The
/// collector reads the clock, then the mark, then drains the channel: no write it has not seen
/// starts before what [`WriteMark::writes_from`] returned. (The streaming correlator waits for
/// this before it ties a stall to a write or counts a probe as baseline.)
#[derive(Debug)]
pub struct WriteMark(AtomicU64);

impl Default for WriteMark {
    fn default() -> Self {
        WriteMark(AtomicU64::new(IDLE))
    }
}

const IDLE: u64 = u64::MAX;

impl WriteMark {
    /// Called before the write's start time is taken (and before any record of it is made).
    pub fn begin(&self, clock: &RunClock) {
        self.0.store(clock.now_us(), Ordering::SeqCst);
    }

    /// Called after the write's record was sent.
    pub fn end(&self) {
        self.0.store(IDLE, Ordering::SeqCst);
    }

    /// No write still to come (or not yet in the channel) starts before this, µs.
    pub fn writes_from(&self, clock: RunClock) -> u64 {
        let now = clock.now_us();
        self.0.load(Ordering::SeqCst).min(now)
    }
}

/// Sleeps `gap` (an actor's pause between its steps), waking early when `stop` is set: false
/// when stopped.
pub fn sleep_unless_stopped(gap: Duration, stop: &AtomicBool) -> bool {
    let deadline = Instant::now() + gap;
    loop {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return true;
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(20)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::probe::ProbeShared;

    #[test]
    fn an_actor_waits_for_every_probe_thread_to_begin() {
        let shared = Arc::new(ProbeShared::default());
        let started = ProbesStarted::new(Arc::clone(&shared), 2);
        let stop = AtomicBool::new(false);
        assert!(!started.wait(&stop, Duration::from_millis(5)));
        shared.threads_sending.fetch_add(1, Ordering::Release);
        assert!(!started.all());
        let sender = Arc::clone(&shared);
        let late = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            sender.threads_sending.fetch_add(1, Ordering::Release);
        });
        let begun = Instant::now();
        assert!(started.wait(&stop, Duration::from_secs(5)));
        assert!(begun.elapsed() >= Duration::from_millis(25));
        late.join().unwrap();
        // A run stopped meanwhile does not wait; a run without probe threads never waits.
        let none = ProbesStarted::new(Arc::new(ProbeShared::default()), 1);
        stop.store(true, Ordering::Relaxed);
        assert!(!none.wait(&stop, Duration::from_secs(5)));
        assert!(ProbesStarted::default().all());
    }
}
