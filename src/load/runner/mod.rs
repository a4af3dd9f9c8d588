//! One load run, end to end, as a measuring session (`session::Session`) with the
//! load generator as its instrument (`LoadInstrument`) and the prober's writer, when asked, as
//! its actor: the generator threads and the writer send into the session's one channel on one
//! run clock; the instrument folds the per-second reports into the timeline and the blocks,
//! writes the exports as the run goes, and at the end builds the per-write findings.
//!
//! With a writer, each request of the written server goes to the streaming correlator as it
//! arrives ([`LoadCorrelator`]) and is dropped: the horizon is what every generator thread says
//! it has sent (`unsampled_from_us` with each second) and the writer's mark, as for the probes.

mod collector;
mod plan;
mod report;
mod sinks;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Result;
use crossbeam_channel::Receiver;

use collector::{LoadCollector, LoadMeta};
pub use plan::{LoadOptions, LoadServer, RecordedLoadOptions, default_threads};
use plan::{client_servers, clients_per_server};
pub use report::{GeneratorReport, LoadNotice, LoadReport, SATURATED_CPU_PCT, STARVED_WAIT_PCT};
use sinks::{LoadFiles, LoadFinding, LoadSinks, LoadTerminal};

use super::analyze::LoadCorrelator;
use super::engine::{self, Control, EngineConfig, EngineServer};
use super::keyspace::KeyNaming;
use crate::measure::actor::Actor;
use crate::measure::event::Event;
use crate::measure::serverview::ViewSetup;
use crate::measure::writer::WriterActor;
use crate::output::export::{Mode, RunStatus};
use crate::session::{
    BUG, EndOfRun, Ended, Instrument, KeyLedger, Limits, RunName, RunScope, RunSpec, SETTLE_EVERY,
    Session, panicked,
};

/// Runs the load against `servers` as a measuring session until `--duration` is over (with a
/// writer and no `--duration`: until its plan is done), the writer fails, `interrupt` is set,
/// or a generator thread dies. Every exit path stops the writer, then the generator threads,
/// removes the writer's keys and writes the final exports. On a cluster the writer's keys carry
/// `writer_hash_tag`, the written master's shard's.
pub fn run_load(
    options: &LoadOptions,
    servers: &[LoadServer<'_>],
    writer_hash_tag: Option<&str>,
    interrupt: &AtomicBool,
    notify: &mut dyn FnMut(LoadNotice<'_>),
) -> Result<LoadReport> {
    anyhow::ensure!(!servers.is_empty(), "a load needs at least one server");
    // The writer is the same actor as the main job's; under load it changes no server setting
    // and resets no counter (it only reads the server's view), and it refuses a value that
    // would not fit, as in the main job.
    let mut actor: Option<Box<dyn Actor>> = options
        .writer
        .clone()
        .map(|plan| Box::new(WriterActor::new(plan, options.seed, false)) as Box<dyn Actor>);
    let written = servers[0].target;
    // The writer prepares once, before the clock starts (its steps and its value), so it
    // disturbs nothing measured.
    let prepare = |key_prefix: &str| match actor.as_mut() {
        Some(actor) => actor.prepare(key_prefix),
        None => Ok(Vec::new()),
    };
    // On a cluster the writer's keys carry the written master's shard's hash tag.
    let name = RunName::new(writer_hash_tag);
    let scope = RunScope::open(written, &name, &[], false, true, prepare)?;
    let local = servers.iter().filter(|s| s.target.server.local).count();
    let threads = options
        .threads
        .unwrap_or_else(|| {
            default_threads(
                options.clients,
                crate::measure::hostmem::logical_cpus(),
                // Servers no client talks to (replicas read from nowhere) need no thread.
                servers.iter().filter(|s| s.clients != Some(0)).count(),
                local,
            )
        })
        .min(options.clients.max(1) as u16)
        .max(1);
    let labels: Vec<String> = servers
        .iter()
        .map(|s| s.target.server.address.clone())
        .collect();
    let config = Arc::new(EngineConfig {
        servers: servers
            .iter()
            .map(|s| EngineServer {
                conn: s.target.conn.clone(),
                keys: s.keys.max(1),
                set_size: s.set_size,
                key_indices: s.key_indices.clone().filter(|k| !k.is_empty()),
                ops: s.ops,
            })
            .collect(),
        clients: options.clients,
        client_servers: client_servers(servers),
        threads,
        pipeline: options.pipeline,
        rate: options.rate,
        get_weight: options.get_weight,
        set_weight: options.set_weight,
        delayed_threshold_us: options.stall_threshold_us,
        timeout_us: options.timeout_us,
        sample_server: options.writer.as_ref().map(|_| 0),
        seed: options.seed,
        naming: KeyNaming::load(),
    });
    let has_writer = actor.is_some();
    let mut session = Session::start(
        written,
        scope,
        name,
        RunSpec::new(Mode::Load),
        CHANNEL_SLOTS,
    );
    let run = session.run.clone();
    let clock = run.clock;
    let control = Arc::new(Control::new());
    let (load_start_us, handles) = match engine::start(
        Arc::clone(&config),
        clock,
        |clock| clock.now_us() + 20_000,
        Arc::clone(&control),
        session.events(),
    ) {
        Ok(started) => started,
        Err(err) => {
            session.abandon();
            return Err(err);
        }
    };
    // With a writer the session ends the load, after the write under way (see its stop).
    if let Some(duration) = options.duration.filter(|_| !has_writer) {
        control.stop_at_us.fetch_min(
            load_start_us + duration.as_micros() as u64,
            Ordering::SeqCst,
        );
    }
    if let Some(actor) = actor.take()
        && let Err(err) = session.spawn_actor(
            actor,
            ViewSetup::default(),
            Vec::new(),
            0,
            crate::measure::actor::ProbesStarted::default(),
        )
    {
        control.stop_at_us.store(0, Ordering::SeqCst);
        for handle in handles {
            let _ = handle.join();
        }
        session.abandon();
        return Err(err);
    }
    notify(LoadNotice::Started {
        run_id: &run.name.run_id,
        threads,
    });

    // The files first: an export error stops a finding before the terminal shows it.
    let mut sinks = LoadSinks::new();
    if let Some(dir) = &options.out {
        sinks.push(Box::new(LoadFiles::new(dir, has_writer)));
    }
    sinks.push(Box::new(LoadTerminal(notify)));
    let requests = has_writer.then(|| LoadCorrelator::new(options.stall_threshold_us));
    let mut state = LoadCollector::new(threads, labels.clone(), load_start_us, requests);
    state.clients_per_server = clients_per_server(servers, options.clients);
    state.roles = servers.iter().map(|s| s.role.clone()).collect();
    // run.json stores the options as the run used them (the writer with its real key prefix).
    let effective_options = options.recorded(&run.name.key_prefix, writer_hash_tag);
    let mut load = LoadInstrument {
        state,
        handles: handles.into_iter().map(Some).collect(),
        panics: Vec::new(),
        control,
        sinks,
        meta: LoadMeta {
            run: &run,
            servers,
            options: &effective_options,
            threads,
            load_start_us,
        },
        last_checkpoint: Instant::now(),
    };
    let limits = Limits {
        deadline_us: options
            .duration
            .map(|d| load_start_us + d.as_micros() as u64),
        // Without --duration the load lasts as long as the writer's plan.
        ends_with_actor: options.duration.is_none(),
    };
    let ended = session.run(&mut load, limits, interrupt);
    let warnings = std::mem::take(&mut session.warnings);
    load.finish(ended, warnings)
}

/// Slots of the session's channel under load: the generator threads send a few reports a
/// second each (and, with a writer, batches of the written server's requests), the writer a
/// record per write.
const CHANNEL_SLOTS: usize = 1 << 14;

/// How often the exports are rewritten while the load runs.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// The load generator as a session's instrument: its threads, the collector of their
/// per-second reports and of the written server's requests, and the load exports.
struct LoadInstrument<'a, 'n> {
    state: LoadCollector,
    /// The generator threads, `None` once joined.
    handles: Vec<Option<JoinHandle<()>>>,
    /// What generator threads that ended early panicked with.
    panics: Vec<String>,
    control: Arc<Control>,
    /// Where its findings go: the files, the caller's notices.
    sinks: LoadSinks<'n>,
    meta: LoadMeta<'a>,
    last_checkpoint: Instant,
}

impl Instrument for LoadInstrument<'_, '_> {
    fn take(&mut self, event: Event, keys: &mut KeyLedger) -> Result<()> {
        match event {
            Event::Load(msg) => self.state.take(*msg, &mut self.sinks),
            Event::Write(write) => {
                self.state.take_writer(*write, keys);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn settle(&mut self, writes_from_us: u64, warnings: &[String]) -> Result<()> {
        self.state.settle(writes_from_us);
        self.state.notify_final_writes(&mut self.sinks, false)?;
        if self.last_checkpoint.elapsed() >= CHECKPOINT_EVERY {
            self.last_checkpoint = Instant::now();
            if self.sinks.take_checkpoints() {
                let complete_us = self.state.complete_us();
                let report = self.state.report(
                    &self.meta,
                    RunStatus::Running,
                    None,
                    warnings.to_vec(),
                    complete_us,
                );
                self.sinks.emit(&LoadFinding::Report(&report))?;
            }
        }
        Ok(())
    }

    fn tick(&mut self) {
        let elapsed = self
            .meta
            .run
            .clock
            .now_us()
            .saturating_sub(self.meta.load_start_us);
        let tick = LoadNotice::Tick {
            elapsed: Duration::from_micros(elapsed),
            last_second_requests: self.state.last_second_requests(),
        };
        // Only the terminal takes a notice, and it cannot fail.
        let _ = self.sinks.emit(&LoadFinding::Notice(tick));
    }

    fn check(&mut self) -> Option<EndOfRun> {
        // A thread that panicked ends the run; one that ended sent its last report first.
        for slot in &mut self.handles {
            if slot.as_ref().is_some_and(|h| h.is_finished())
                && let Some(panic) = slot.take().and_then(panicked)
            {
                let died = format!("a load generator thread panicked: {panic}{BUG}");
                return Some((RunStatus::Failed, Some(died)));
            }
        }
        if let Some(said) = self.control.unanswered() {
            return Some((RunStatus::Failed, Some(said)));
        }
        (self.state.done_threads >= self.meta.threads).then_some((RunStatus::Complete, None))
    }

    fn stop(&mut self, events: &Receiver<Event>, keys: &mut KeyLedger) -> Option<String> {
        // A server gone ends the load's length when it went, not a second later when that was
        // known (the rate of a killed server's load counted the dead second).
        let lost_at = self.control.lost_at_us.load(Ordering::SeqCst);
        let now = self
            .meta
            .run
            .clock
            .now_us()
            .min(lost_at)
            .max(self.meta.load_start_us);
        self.control.stop_at_us.fetch_min(now, Ordering::SeqCst);
        // The threads send their last reports whatever the channel holds: take them while waiting.
        while self.handles.iter().flatten().any(|h| !h.is_finished()) {
            if let Ok(event) = events.recv_timeout(SETTLE_EVERY) {
                let _ = self.take(event, keys);
            }
        }
        for handle in self.handles.iter_mut().filter_map(Option::take) {
            if let Some(panic) = panicked(handle) {
                self.panics
                    .push(format!("a load generator thread panicked: {panic}{BUG}"));
            }
        }
        self.panics.first().cloned()
    }

    fn failure(&self) -> Option<String> {
        None
    }
}

impl LoadInstrument<'_, '_> {
    /// The final exports and the report, every thread stopped, the keys removed and the
    /// settings restored; after an export error, what the disk takes and the error.
    fn finish(mut self, ended: Ended, warnings: Vec<String>) -> Result<LoadReport> {
        let Ended {
            status,
            status_reason,
            export_error,
        } = ended;
        let state = &mut self.state;
        let runtime_us = self
            .control
            .stop_at_us
            .load(Ordering::SeqCst)
            .saturating_sub(self.meta.load_start_us);
        state.full_seconds = Some((runtime_us / 1_000_000) as usize);
        state.finalize(true);
        state.finish_requests();
        let notified = state.notify_final_writes(&mut self.sinks, true);
        if let Some(err) = export_error {
            // What is in memory goes to the files that can take it, with run.json `failed`
            // (best effort: the disk may be full), and then the error ends the run.
            let reason = format!(
                "could not write the exports: {}",
                crate::error::one_line(&err)
            );
            let report = state.report(
                &self.meta,
                RunStatus::Failed,
                Some(reason),
                warnings,
                runtime_us,
            );
            let _ = self.sinks.emit(&LoadFinding::Report(&report));
            return Err(err);
        }
        // A failed write fails the run in run.json as in the exit status, as the main job's
        // (the hostile trial: exit 1 "1 write(s) failed", run.json `complete`); one whose
        // connection was lost under it leaves the run complete, but said.
        let (status, status_reason) = match (
            crate::output::export::failing_writes(state.writes()),
            crate::output::export::failed_writes(state.writes()),
        ) {
            (Some(failing), _) if status == RunStatus::Complete => {
                (RunStatus::Failed, Some(failing))
            }
            (None, Some(failed)) if status == RunStatus::Complete && status_reason.is_none() => {
                (status, Some(failed))
            }
            _ => (status, status_reason),
        };
        let report = state.report(&self.meta, status, status_reason, warnings, runtime_us);
        notified?;
        self.sinks.emit(&LoadFinding::Report(&report))?;
        Ok(report)
    }
}
