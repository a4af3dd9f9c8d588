//! The measurement thread beside the probes that decides when a run ends (the writer, the
//! stall injector), and what it runs with. Apart from [`crate::run`], so that an actor and the
//! run that drives it do not depend on each other.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::thread::JoinHandle;

use anyhow::Result;
use crossbeam_channel::Sender;

use crate::measure::clock::RunClock;
use crate::measure::event::Event;
use crate::measure::serverview::{ViewSetup, Want, settings_for_writes};
use crate::measure::target::ConnInfo;

/// A measurement thread that runs beside the probes on the run's clock and decides when the run
/// ends: the writer of the main job ([`crate::measure::writer::WriterActor`]), the stall injector of `probe calibrate`.
/// It sends its events as [`Event::Write`] and ends with [`Event::WriterDone`] (or
/// [`Event::WriterFailed`]); it stops early when its `stop` flag is set.
pub trait Actor: Send {
    /// Steps it will take, for progress.
    fn steps_total(&self) -> usize;

    /// The keys it will create under `key_prefix` (checked to be free before the run).
    fn keys(&self, _key_prefix: &str) -> Vec<String> {
        Vec::new()
    }

    /// Work done before the run's clock starts (e.g. generating the value bytes), so that it
    /// disturbs nothing measured. `key_prefix` is the run's, `holprobe:<run-id>:`.
    fn prepare(&mut self, _key_prefix: &str) -> Result<()> {
        Ok(())
    }

    /// The server settings it needs for the server's own view (applied on the embedded server,
    /// and on an external one with `--tune-server`; restored afterwards).
    fn server_settings(&self) -> Vec<(&'static str, Want)> {
        settings_for_writes()
    }

    /// Opens its connection and starts its thread.
    fn spawn(self: Box<Self>, ctx: ActorContext) -> Result<JoinHandle<()>>;
}

/// What an [`Actor`] gets to run with.
pub struct ActorContext {
    /// How to connect to the server.
    pub conn: ConnInfo,
    /// The run's clock.
    pub clock: RunClock,
    /// The run's event channel.
    pub events: Sender<Event>,
    /// Set when the run stops.
    pub stop: Arc<AtomicBool>,
    /// Which server counters the actor may reset around its events.
    pub view: ViewSetup,
    /// The server runs on this host.
    pub server_local: bool,
}
