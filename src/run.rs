//! One probe run, end to end: prepare the key space, start the probe threads and the writer on
//! the run's clock, collect their events from one channel, write the exports as the run goes,
//! correlate, clean up. The binary and the examples both drive runs through [`run`].

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use crossbeam_channel::{RecvTimeoutError, bounded};
use serde::Serialize;

use crate::analyze::correlate::{
    Analysis, CorrelateConfig, Stall, WriteSummary, correlate_with_memory,
};
use crate::analyze::pressure::MemorySample;
pub use crate::measure::actor::{Actor, ActorContext};
use crate::measure::clock::RunClock;
pub use crate::measure::event::Event;
use crate::measure::hostmem::{MEMORY_SAMPLE_PERIOD, spawn_memory_sampler};
use crate::measure::probe::{ProbeConfig, ProbeShared, spawn_probes};
use crate::measure::serverview::{ServerTuning, ViewSetup};
use crate::measure::target::Target;
use crate::measure::writer::{WriterActor, WriterPlan};
use crate::output::export::{
    HostInfo, PROBES_CSV, RUN_JSON, RowAppender, RunJson, RunStatus, STALLS_CSV, SUMMARY_CSV,
    ToolInfo, WRITES_CSV, csv_bytes, write_atomic,
};
use crate::record::{ProbeCmd, ProbeRecord, WriteOp, WriteRecord};
use crate::units::option_duration_ms;

/// Validated options of a probe run (also stored in run.json).
#[derive(Debug, Clone, Serialize)]
pub struct RunOptions {
    /// Probe threads, each with its own connection.
    pub probe_threads: u16,
    /// Probes per second per thread.
    pub probe_rate: f64,
    /// `ping` or `get`.
    pub probe_cmd: ProbeCmd,
    /// The writer's plan; `None` in observe mode.
    pub writer: Option<WriterPlan>,
    /// Observe mode's length (or a cap on a writer run).
    #[serde(with = "option_duration_ms", rename = "duration_ms")]
    pub duration: Option<Duration>,
    /// Latency past which a probe counts as delayed, µs.
    pub stall_threshold_us: u64,
    /// Seed of the value bytes.
    pub seed: u64,
    /// Ask for real-time (SCHED_FIFO) priority for the probe threads.
    pub realtime: bool,
    /// Where the exports go.
    pub out: Option<PathBuf>,
    /// Change the server's SLOWLOG and LATENCY settings for the run on an external server
    /// (`--tune-server`; always done on the embedded one), restoring them afterwards.
    pub tune_server: bool,
    /// Send values even when they would pass maxmemory or push the host into swap
    /// (`--force-memory`).
    pub force_memory: bool,
    /// Sizes to predict the blocking of from the size model (`--predict`), bytes.
    pub predict_bytes: Vec<u64>,
    /// Which probes get a row in probes.csv (`--probes`).
    #[serde(rename = "probes")]
    pub probes_export: ProbesExport,
}

/// Which probes get a row in probes.csv. Every other export, and every figure, comes from all
/// of them either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ProbesExport {
    /// Every probe (about 2,000 rows a second at the defaults).
    All,
    /// Probes that waited longer than the stall threshold, or got no reply or an error.
    Delayed,
    /// None: probes.csv holds its header only.
    None,
}

impl ProbesExport {
    /// The mode a run of about `length` gets when `--probes` is not given: every probe under
    /// [`PROBES_ALL_UP_TO`], the delayed ones beyond (a day at the defaults would be 170
    /// million rows).
    pub fn for_length(length: Option<Duration>) -> ProbesExport {
        match length {
            Some(length) if length >= PROBES_ALL_UP_TO => ProbesExport::Delayed,
            _ => ProbesExport::All,
        }
    }

    /// Whether `probe` gets a row.
    pub fn keeps(self, probe: &ProbeRecord, threshold_us: u64) -> bool {
        match self {
            ProbesExport::All => true,
            ProbesExport::Delayed => !probe.ok || probe.latency_us.is_none_or(|l| l > threshold_us),
            ProbesExport::None => false,
        }
    }
}

/// Runs expected to last this long or more keep only delayed probes in probes.csv unless
/// `--probes all` is given.
pub const PROBES_ALL_UP_TO: Duration = Duration::from_secs(600);

/// Default of [`RunOptions::probe_threads`] (and of `--probe-threads`).
pub const DEFAULT_PROBE_THREADS: u16 = 2;
/// Default of [`RunOptions::probe_rate`] (and of `--probe-rate`), probes/s per thread.
pub const DEFAULT_PROBE_RATE: f64 = 1000.0;
/// Default of [`RunOptions::stall_threshold_us`] (and of `--stall-threshold`), µs.
pub const DEFAULT_STALL_THRESHOLD_US: u64 = 1000;
/// Default of [`RunOptions::seed`] (and of `--seed`).
pub const DEFAULT_SEED: u64 = 0x5eed;

impl Default for RunOptions {
    /// The command line's defaults: 2 probe threads × 1000 PING/s, a 1 ms stall threshold, no
    /// writer, no duration, no exports. As it stands this observes until the `interrupt` flag
    /// given to [`run`] is set: set [`RunOptions::duration`] to observe for a while, or
    /// [`RunOptions::writer`] to measure writes.
    fn default() -> Self {
        RunOptions {
            probe_threads: DEFAULT_PROBE_THREADS,
            probe_rate: DEFAULT_PROBE_RATE,
            probe_cmd: ProbeCmd::Ping,
            writer: None,
            duration: None,
            stall_threshold_us: DEFAULT_STALL_THRESHOLD_US,
            seed: DEFAULT_SEED,
            realtime: false,
            out: None,
            tune_server: false,
            force_memory: false,
            predict_bytes: Vec::new(),
            probes_export: ProbesExport::All,
        }
    }
}

/// What a finished (or stopped) run found.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// The run's id (its keys were under `holprobe:<run_id>:`).
    pub run_id: String,
    /// How it ended.
    pub status: RunStatus,
    /// Why it stopped early, if it did.
    pub status_reason: Option<String>,
    /// The findings.
    pub analysis: Analysis,
    /// Every write event.
    pub writes: Vec<WriteRecord>,
    /// Every probe.
    pub probes: Vec<ProbeRecord>,
    /// Probe records dropped because the collector fell behind (expected 0).
    pub probes_dropped: u64,
    /// Warnings raised during the run (also in run.json).
    pub warnings: Vec<String>,
    /// Wall-clock time of the run's clock zero, µs since the Unix epoch.
    pub started_unix_us: u64,
    /// Server settings changed for the run (and restored), as `name old -> new`.
    pub server_settings: Vec<String>,
}

/// Something the caller may show while the run goes.
#[derive(Debug)]
pub enum Notice<'a> {
    /// The run's clock started; probes begin shortly.
    Started {
        /// Run id.
        run_id: &'a str,
        /// Steps the writer will take (0 in observe mode).
        steps_total: usize,
    },
    /// A write's figures are final (all probes around it are in).
    Write {
        /// The write as recorded.
        record: &'a WriteRecord,
        /// What the others saw.
        summary: &'a WriteSummary,
    },
    /// A stall episode ended (observe mode reports them as they come).
    Stall(&'a Stall),
    /// About every 100 ms.
    Tick {
        /// Since the run's start.
        elapsed: Duration,
        /// Probes recorded so far.
        probes: usize,
        /// Writes done so far.
        writes: usize,
    },
}

/// Prefix of every key the tool creates.
pub const KEY_NAMESPACE: &str = "holprobe";

/// A new run id: 8 hex digits, random.
pub fn new_run_id() -> String {
    format!("{:08x}", rand::random::<u32>())
}

/// Runs probes (and the writer, when planned) against `target` until the plan is done, the
/// duration is over, `interrupt` is set, or the server goes away. Every exit path stops the
/// threads, removes the run's keys while the server is reachable and writes the final exports.
pub fn run(
    options: &RunOptions,
    target: &Target,
    interrupt: &AtomicBool,
    notify: &mut dyn FnMut(Notice<'_>),
) -> Result<RunReport> {
    let actor = options.writer.clone().map(|mut plan| {
        plan.seed = options.seed;
        Box::new(WriterActor::new(plan, options.force_memory)) as Box<dyn Actor>
    });
    run_with_actor(options, target, actor, interrupt, notify)
}

/// Runs probes with `actor` (in place of the writer `options` may plan) beside them: the same
/// probe threads, clock, collector, correlator and exports as the main job. Without an actor it
/// observes (for `options.duration`, or until `interrupt`).
pub fn run_with_actor(
    options: &RunOptions,
    target: &Target,
    mut actor: Option<Box<dyn Actor>>,
    interrupt: &AtomicBool,
    notify: &mut dyn FnMut(Notice<'_>),
) -> Result<RunReport> {
    let run_id = new_run_id();
    let key_prefix = format!("{KEY_NAMESPACE}:{run_id}:");
    let mut warnings = Vec::new();
    let mut control = target.conn.redis_connection()?;

    // The server's settings for its own view; the guard restores them on every way out.
    let mut tuning = match &actor {
        Some(actor) => ServerTuning::apply(
            &target.conn,
            &actor.server_settings(),
            target.server.embedded || options.tune_server,
        ),
        None => ServerTuning::apply(&target.conn, &[], false),
    };
    warnings.append(&mut tuning.notes);
    let view = ViewSetup {
        reset_stats: target.server.embedded,
        reset_latency: target.server.embedded || tuning.latency_monitor_turned_on(),
    };
    let server_settings: Vec<String> = tuning
        .changed()
        .iter()
        .map(|c| format!("{} {} -> {}", c.name, c.old, c.new))
        .collect();

    let probe_config = ProbeConfig {
        threads: options.probe_threads,
        rate_per_thread: options.probe_rate,
        cmd: options.probe_cmd,
        get_key: format!("{key_prefix}probe"),
        realtime: options.realtime,
    };
    // The prefix is new by construction; still, never touch a key that is already there.
    let mut own_keys = vec![probe_config.get_key.clone()];
    if let Some(actor) = &actor {
        own_keys.extend(actor.keys(&key_prefix));
    }
    let existing: i64 = redis::cmd("EXISTS")
        .arg(&own_keys)
        .query(&mut control)
        .context("checking that the run's keys are free")?;
    if existing > 0 {
        anyhow::bail!(
            "{existing} key(s) under {key_prefix} already exist on the server: refusing to touch them"
        );
    }
    // The actor prepares before the clock starts (the writer generates its value), so it
    // disturbs nothing measured.
    if let Some(actor) = actor.as_mut() {
        actor.prepare(&key_prefix)?;
    }
    // The export files first: if they cannot be created, nothing has been written to the
    // server yet.
    let mut out = match &options.out {
        Some(dir) => Some(OutFiles::create(
            dir,
            options.probes_export,
            options.stall_threshold_us,
        )?),
        None => None,
    };
    if options.probe_cmd == ProbeCmd::Get {
        redis::cmd("SET")
            .arg(&probe_config.get_key)
            .arg(crate::measure::probe::PROBE_VALUE)
            .query::<()>(&mut control)
            .with_context(|| format!("preparing the probe key {}", probe_config.get_key))?;
    }
    let host = HostInfo::read();
    let clock = RunClock::start();
    // 65536 slots of ~100 bytes, allocated up front: about 6 MiB, half a minute of headroom
    // at the default rates if the collector stalls (what does not fit is counted as dropped).
    let (tx, rx) = bounded::<Event>(1 << 16);
    let shared = Arc::new(ProbeShared::default());
    let writer_stop = Arc::new(AtomicBool::new(false));
    // Apart from the writer's: the host's memory is read until the last write has ended.
    let sampler_stop = Arc::new(AtomicBool::new(false));
    let schedule_start_us = 20_000;
    let mut probe_handles = match spawn_probes(
        &probe_config,
        &target.conn,
        clock,
        schedule_start_us,
        tx.clone(),
        Arc::clone(&shared),
    ) {
        Ok(handles) => handles,
        Err(err) => {
            cleanup_keys(&mut control, std::slice::from_ref(&probe_config.get_key));
            return Err(err);
        }
    };
    let steps_total = actor.as_ref().map_or(0, |a| a.steps_total());
    let has_actor = actor.is_some();
    let mut writer_handle = None;
    let mut sampler_handle = None;
    if let Some(actor) = actor.take() {
        let spawned = spawn_memory_sampler(
            clock,
            tx.clone(),
            Arc::clone(&sampler_stop),
            MEMORY_SAMPLE_PERIOD,
        )
        .and_then(|sampler| {
            sampler_handle = Some(sampler);
            actor.spawn(ActorContext {
                conn: target.conn.clone(),
                clock,
                events: tx.clone(),
                stop: Arc::clone(&writer_stop),
                view,
                server_local: target.server.local,
            })
        });
        match spawned {
            Ok(handle) => writer_handle = Some(handle),
            Err(err) => {
                shared.stop.store(true, Ordering::Relaxed);
                writer_stop.store(true, Ordering::Relaxed);
                sampler_stop.store(true, Ordering::Relaxed);
                for handle in probe_handles.drain(..) {
                    let _ = handle.join();
                }
                if let Some(handle) = sampler_handle.take() {
                    let _ = handle.join();
                }
                cleanup_keys(&mut control, std::slice::from_ref(&probe_config.get_key));
                return Err(err);
            }
        }
    }
    drop(tx);
    notify(Notice::Started {
        run_id: &run_id,
        steps_total,
    });

    let correlate_config = CorrelateConfig {
        stall_threshold_us: options.stall_threshold_us,
    };
    let mut state = Collector {
        probes: Vec::new(),
        writes: Vec::new(),
        memory: Vec::new(),
        last_intended: vec![None; options.probe_threads as usize],
        writes_notified: 0,
        stalls_notified: 0,
        actor_ended: false,
        live_keys: BTreeSet::new(),
        analysis: Analysis::default(),
    };
    let deadline_us = options
        .duration
        .map(|d| schedule_start_us + d.as_micros() as u64);
    let mut status = RunStatus::Complete;
    let mut status_reason = None;
    let mut last_tick = Instant::now();
    let mut last_checkpoint = Instant::now();
    // run.json stores the options as the run used them (the writer with its real key prefix).
    let effective_options = RunOptions {
        writer: options.writer.clone().map(|mut plan| {
            plan.key_prefix = key_prefix.clone();
            plan.seed = options.seed;
            plan
        }),
        ..options.clone()
    };
    let meta = Meta {
        run_id: &run_id,
        key_prefix: &key_prefix,
        clock,
        target,
        host: &host,
        options: &effective_options,
    };

    // An export that cannot be written (a full disk) ends the run, but only after every thread
    // has been stopped and the keys removed: it is returned at the end.
    let mut export_error: Option<anyhow::Error> = None;
    loop {
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(event) => match state.take(event, &mut out) {
                Ok(Some((end_status, reason))) => {
                    status = end_status;
                    status_reason = reason;
                    break;
                }
                Ok(None) => {}
                Err(err) => {
                    export_error = Some(err);
                    break;
                }
            },
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        // The actor's thread ended: its last event, if it sent one, is taken below as the run
        // stops; if it sent none, it died (see after the stop).
        if writer_handle.as_ref().is_some_and(|h| h.is_finished()) {
            break;
        }
        // A probe thread that could go on no more (reported beside the channel, so a full one
        // cannot hold it up).
        if let Some((thread, error)) = shared.failure() {
            status = RunStatus::Failed;
            status_reason = Some(format!("probe thread {thread} lost the server: {error}"));
            break;
        }
        if interrupt.load(Ordering::Relaxed) {
            status = RunStatus::Interrupted;
            status_reason = Some("interrupted by a signal (Ctrl-C or SIGTERM)".into());
            break;
        }
        if let Some(deadline) = deadline_us
            && clock.now_us() >= deadline
        {
            if has_actor {
                status = RunStatus::Interrupted;
                status_reason = Some("--duration ended before the writer's plan".into());
            }
            break;
        }
        if last_tick.elapsed() >= Duration::from_millis(100) {
            last_tick = Instant::now();
            notify(Notice::Tick {
                elapsed: Duration::from_micros(clock.now_us()),
                probes: state.probes.len(),
                writes: state.writes.len(),
            });
        }
        let pending_writes = state.writes.len() > state.writes_notified
            && state
                .watermark()
                .is_some_and(|mark| state.writes[state.writes_notified].reply_us < mark);
        let periodic = !has_actor && last_checkpoint.elapsed() >= Duration::from_secs(1);
        if pending_writes || periodic {
            last_checkpoint = Instant::now();
            state.analyze(correlate_config);
            state.notify_final(notify);
            if let Some(out) = out.as_mut()
                && let Err(err) =
                    out.checkpoint(&meta, &state, RunStatus::Running, None, &shared, &warnings)
            {
                export_error = Some(err);
                break;
            }
        }
    }

    // Stop everything, keep every record that is still in flight. The writer first: a write
    // under way when the run stops (Ctrl-C) is finished and recorded, and the probes go on
    // until it is, so its figures cover all of it. Its events keep being taken meanwhile (it
    // sends them blocking).
    let mut take_late = |event: Event,
                         state: &mut Collector,
                         out: &mut Option<OutFiles>,
                         status: &mut RunStatus,
                         status_reason: &mut Option<String>| {
        match state.take(event, out) {
            Ok(Some((end_status, reason))) if *status == RunStatus::Complete => {
                *status = end_status;
                *status_reason = reason;
            }
            Ok(_) => {}
            Err(err) => {
                export_error.get_or_insert(err);
            }
        }
    };
    writer_stop.store(true, Ordering::Relaxed);
    if let Some(handle) = writer_handle {
        while !handle.is_finished() {
            if let Ok(event) = rx.recv_timeout(Duration::from_millis(20)) {
                take_late(event, &mut state, &mut out, &mut status, &mut status_reason);
            }
        }
        let _ = handle.join();
    }
    shared.stop.store(true, Ordering::Relaxed);
    sampler_stop.store(true, Ordering::Relaxed);
    for handle in probe_handles {
        let _ = handle.join();
    }
    if let Some(handle) = sampler_handle {
        let _ = handle.join();
    }
    while let Ok(event) = rx.try_recv() {
        take_late(event, &mut state, &mut out, &mut status, &mut status_reason);
    }
    if status == RunStatus::Complete {
        if let Some((thread, error)) = shared.failure() {
            status = RunStatus::Failed;
            status_reason = Some(format!("probe thread {thread} lost the server: {error}"));
        } else if has_actor && !state.actor_ended {
            // Its thread is gone and it never said done or failed: it died (a panic).
            status = RunStatus::Failed;
            status_reason = Some(
                "the writer thread stopped without finishing its plan (a bug in holprobe: please report it)".into(),
            );
        }
    }

    let mut leftover: Vec<String> = state.live_keys.iter().cloned().collect();
    if options.probe_cmd == ProbeCmd::Get {
        leftover.push(probe_config.get_key.clone());
    }
    if !leftover.is_empty() {
        match target.conn.redis_connection() {
            Ok(mut fresh) => {
                if let Err(err) = cleanup_keys_checked(&mut fresh, &leftover) {
                    warnings.push(format!(
                        "could not remove {} key(s) under {key_prefix}: {err}",
                        leftover.len()
                    ));
                }
            }
            Err(err) => warnings.push(format!(
                "could not remove {} key(s) under {key_prefix}: {err:#}",
                leftover.len()
            )),
        }
    }

    // Every thread is stopped and the keys are gone: now an export error may end the run (the
    // settings guard restores the server's settings as it drops).
    if let Some(err) = export_error {
        return Err(err);
    }
    state.writes_notified = state.writes_notified.min(state.writes.len());
    state.analyze(correlate_config);
    state.notify_all(notify);
    if let Err(err) = tuning.restore() {
        warnings.push(format!(
            "could not restore the server's settings ({}): {err:#}",
            server_settings.join(", ")
        ));
    }
    let realtime_threads = shared.realtime_threads.load(Ordering::Relaxed);
    if options.realtime && realtime_threads < u32::from(options.probe_threads) {
        warnings.push(
            "--realtime: real-time priority was not permitted (needs root or CAP_SYS_NICE); the probes ran at normal priority".into(),
        );
    }
    if let Some(note) = late_probe_note(&state.analysis.writes, options.realtime) {
        warnings.push(note);
    }
    let dropped = shared.dropped.load(Ordering::Relaxed);
    if dropped > 0 {
        warnings.push(format!(
            "{dropped} probe records were dropped because the collector fell behind: the figures miss them"
        ));
    }
    if let Some(out) = out.as_mut() {
        out.checkpoint(
            &meta,
            &state,
            status,
            status_reason.clone(),
            &shared,
            &warnings,
        )?;
    }
    Ok(RunReport {
        run_id,
        status,
        status_reason,
        analysis: state.analysis,
        writes: state.writes,
        probes: state.probes,
        probes_dropped: dropped,
        warnings,
        started_unix_us: clock.unix_start_us(),
        server_settings,
    })
}

/// A note when the probe behind some writes' `hol_delay_ms` left its thread a millisecond or
/// more late: those figures are partly this host's (its cores were busy), not the server's.
fn late_probe_note(writes: &[WriteSummary], realtime: bool) -> Option<String> {
    let late: Vec<f64> = writes
        .iter()
        .filter_map(|w| w.hol_probe_send_lag_ms)
        .filter(|&lag| lag >= LATE_PROBE_NOTE_MS)
        .collect();
    let worst = late.iter().copied().fold(0.0, f64::max);
    (!late.is_empty()).then(|| {
        format!(
            "in {} of {} writes the probe behind 'others blocked' left {LATE_PROBE_NOTE_MS} ms or more late (up to {worst:.1} ms): up to that much of those figures is this host's own delay, not the server's (hol_probe_send_lag_ms in summary.csv){}",
            late.len(),
            writes.len(),
            if realtime {
                ""
            } else {
                "; --realtime shortens it"
            }
        )
    })
}

/// How late the worst probe of a write must have left before the run says so.
const LATE_PROBE_NOTE_MS: f64 = 1.0;

fn cleanup_keys(control: &mut redis::Connection, keys: &[String]) {
    let _ = cleanup_keys_checked(control, keys);
}

fn cleanup_keys_checked(
    control: &mut redis::Connection,
    keys: &[String],
) -> redis::RedisResult<()> {
    if keys.is_empty() {
        return Ok(());
    }
    redis::cmd("DEL")
        .arg(keys)
        .query::<i64>(control)
        .map(|_| ())
}

struct Meta<'a> {
    run_id: &'a str,
    key_prefix: &'a str,
    clock: RunClock,
    target: &'a Target,
    host: &'a HostInfo,
    options: &'a RunOptions,
}

struct Collector {
    probes: Vec<ProbeRecord>,
    writes: Vec<WriteRecord>,
    memory: Vec<MemorySample>,
    last_intended: Vec<Option<u64>>,
    writes_notified: usize,
    stalls_notified: usize,
    live_keys: BTreeSet<String>,
    analysis: Analysis,
    /// The actor said it was done, or failed.
    actor_ended: bool,
}

impl Collector {
    /// Files one event. Returns the run's end status when the event ends the run.
    fn take(
        &mut self,
        event: Event,
        out: &mut Option<OutFiles>,
    ) -> Result<Option<(RunStatus, Option<String>)>> {
        match event {
            Event::Probe(probe) => {
                if let Some(out) = out.as_mut()
                    && out.probes_export.keeps(&probe, out.stall_threshold_us)
                {
                    out.probes.push(&probe)?;
                }
                if let Some(slot) = self.last_intended.get_mut(probe.thread as usize) {
                    *slot = Some(probe.intended_us);
                }
                self.probes.push(probe);
            }
            Event::Write(write) => {
                if let Some(out) = out.as_mut() {
                    out.writes.push(&write)?;
                    out.writes.flush()?;
                }
                match write.op {
                    WriteOp::Set | WriteOp::Overwrite => {
                        self.live_keys.insert(write.key.clone());
                    }
                    WriteOp::Delete if write.ok => {
                        self.live_keys.remove(&write.key);
                    }
                    // A custom command may have removed the key: the final cleanup deletes it
                    // again, which is harmless.
                    WriteOp::Delete | WriteOp::Command | WriteOp::Inject => {}
                }
                self.writes.push(*write);
            }
            Event::Memory(sample) => self.memory.push(sample),
            Event::WriterDone => {
                self.actor_ended = true;
                return Ok(Some((RunStatus::Complete, None)));
            }
            Event::WriterFailed(error) => {
                self.actor_ended = true;
                return Ok(Some((
                    RunStatus::Failed,
                    Some(format!("the writer lost the server: {error}")),
                )));
            }
        }
        Ok(None)
    }

    /// The intended time every probe thread has reported past: anything before it is in. (A
    /// thread that fails ends the run, so none is left out.)
    fn watermark(&self) -> Option<u64> {
        self.last_intended.iter().min().copied().flatten()
    }

    fn analyze(&mut self, config: CorrelateConfig) {
        self.analysis = correlate_with_memory(&self.probes, &self.writes, &self.memory, config);
    }

    fn notify_final(&mut self, notify: &mut dyn FnMut(Notice<'_>)) {
        let Some(mark) = self.watermark() else {
            return;
        };
        while self.writes_notified < self.writes.len()
            && self.writes[self.writes_notified].reply_us < mark
        {
            let i = self.writes_notified;
            notify(Notice::Write {
                record: &self.writes[i],
                summary: &self.analysis.writes[i],
            });
            self.writes_notified += 1;
        }
        while let Some(stall) = self.analysis.stalls.get(self.stalls_notified) {
            if stall.end_us >= mark {
                break;
            }
            notify(Notice::Stall(stall));
            self.stalls_notified += 1;
        }
    }

    fn notify_all(&mut self, notify: &mut dyn FnMut(Notice<'_>)) {
        for i in self.writes_notified..self.writes.len() {
            notify(Notice::Write {
                record: &self.writes[i],
                summary: &self.analysis.writes[i],
            });
        }
        self.writes_notified = self.writes.len();
        for stall in self.analysis.stalls.iter().skip(self.stalls_notified) {
            notify(Notice::Stall(stall));
        }
        self.stalls_notified = self.analysis.stalls.len();
    }
}

/// Column names of the CSV exports; a unit test checks them against the structs.
pub mod columns {
    /// probes.csv
    pub const PROBES: &[&str] = &[
        "thread",
        "seq",
        "cmd",
        "intended_us",
        "sent_us",
        "reply_us",
        "latency_us",
        "ok",
        "error",
        "read_us",
    ];
    /// writes.csv
    pub const WRITES: &[&str] = &[
        "seq",
        "op",
        "size_bytes",
        "start_us",
        "sent_us",
        "reply_us",
        "set_ms",
        "ok",
        "error",
        "host_mem_pct",
        "host_swap_pct",
        "server_rss_bytes",
        "key",
        "server_exec_us",
        "server_latency_event_ms",
        "server_latency_event",
        "server_eventloop_max_us",
        "server_request_bytes",
    ];
    /// stalls.csv
    pub const STALLS: &[&str] = &[
        "start_us",
        "end_us",
        "duration_ms",
        "probes_delayed",
        "write_seq",
    ];
    /// summary.csv
    pub const SUMMARY: &[&str] = &[
        "seq",
        "op",
        "size_bytes",
        "set_ms",
        "hol_delay_ms",
        "stall_ms",
        "probes_delayed",
        "stall_during_send_ms",
        "stall_after_send_ms",
        "host_mem_pct",
        "host_swap_pct",
        "probes_in_window",
        "worst_latency_ms",
        "ok",
        "server_exec_us",
        "server_latency_event_ms",
        "server_eventloop_max_us",
        "server_request_bytes",
        "memory_pressure",
        "host_mem_peak_pct",
        "host_swap_grew_bytes",
        "hol_probe_send_lag_ms",
    ];
}

struct OutFiles {
    dir: PathBuf,
    probes: RowAppender,
    writes: RowAppender,
    probes_export: ProbesExport,
    stall_threshold_us: u64,
}

impl OutFiles {
    fn create(
        dir: &std::path::Path,
        probes_export: ProbesExport,
        stall_threshold_us: u64,
    ) -> Result<OutFiles> {
        Ok(OutFiles {
            dir: dir.to_path_buf(),
            probes_export,
            stall_threshold_us,
            probes: RowAppender::create(&dir.join(PROBES_CSV), columns::PROBES)?,
            writes: RowAppender::create(&dir.join(WRITES_CSV), columns::WRITES)?,
        })
    }

    fn checkpoint(
        &mut self,
        meta: &Meta<'_>,
        state: &Collector,
        status: RunStatus,
        status_reason: Option<String>,
        shared: &ProbeShared,
        warnings: &[String],
    ) -> Result<()> {
        self.probes.flush()?;
        self.writes.flush()?;
        write_atomic(
            &self.dir.join(STALLS_CSV),
            &csv_bytes(&state.analysis.stalls, columns::STALLS)?,
        )?;
        write_atomic(
            &self.dir.join(SUMMARY_CSV),
            &csv_bytes(&state.analysis.writes, columns::SUMMARY)?,
        )?;
        let run_json = RunJson {
            tool: ToolInfo::default(),
            status,
            status_reason,
            run_id: meta.run_id,
            key_prefix: meta.key_prefix,
            started_unix_us: meta.clock.unix_start_us(),
            elapsed_us: meta.clock.now_us(),
            server: &meta.target.server,
            host: meta.host,
            options: meta.options,
            probe_engine: shared.engine_info(),
            probes_dropped: shared.dropped.load(Ordering::Relaxed),
            probes_recorded: state.probes.len() as u64,
            analysis: &state.analysis,
            warnings,
        };
        let json = serde_json::to_vec_pretty(&run_json).context("encoding run.json")?;
        write_atomic(&self.dir.join(RUN_JSON), &json)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use serde::Serialize;

    use super::*;
    use crate::analyze::correlate::{Stall, WriteSummary};
    use crate::cli::ProbeArgs;
    use crate::measure::writer::WriterPlan;
    use crate::output::export::csv_bytes;
    use crate::record::{ProbeCmd, ProbeRecord, WriteOp, WriteRecord};

    /// The header csv derives from the struct's fields.
    fn derived_header<T: Serialize>(row: &T) -> Vec<String> {
        let bytes = csv_bytes(std::slice::from_ref(row), &[]).unwrap();
        let text = String::from_utf8(bytes).unwrap();
        text.lines()
            .next()
            .unwrap()
            .split(',')
            .map(String::from)
            .collect()
    }

    #[test]
    fn column_constants_match_the_structs() {
        let probe = ProbeRecord {
            thread: 0,
            seq: 0,
            cmd: ProbeCmd::Ping,
            intended_us: 0,
            sent_us: 0,
            reply_us: None,
            read_us: None,
            latency_us: None,
            ok: true,
            error: None,
        };
        assert_eq!(derived_header(&probe), columns::PROBES);
        let write = WriteRecord {
            seq: 1,
            op: WriteOp::Set,
            size_bytes: 1,
            start_us: 0,
            sent_us: 0,
            reply_us: 0,
            set_ms: 0.0,
            ok: true,
            error: None,
            host_mem_pct: 0.0,
            host_swap_pct: 0.0,
            server_rss_bytes: None,
            key: String::new(),
            server_exec_us: None,
            server_latency_event_ms: None,
            server_latency_event: None,
            server_eventloop_max_us: None,
            server_request_bytes: None,
        };
        assert_eq!(derived_header(&write), columns::WRITES);
        let stall = Stall {
            start_us: 0,
            end_us: 0,
            duration_ms: 0.0,
            probes_delayed: 0,
            write_seq: None,
        };
        assert_eq!(derived_header(&stall), columns::STALLS);
        assert_eq!(derived_header(&blank_summary()), columns::SUMMARY);
    }

    /// A write summary with every field at zero or empty.
    fn blank_summary() -> WriteSummary {
        WriteSummary {
            seq: 1,
            op: WriteOp::Set,
            size_bytes: 1,
            set_ms: 0.0,
            hol_delay_ms: None,
            stall_ms: 0.0,
            probes_delayed: 0,
            stall_during_send_ms: 0.0,
            stall_after_send_ms: 0.0,
            host_mem_pct: 0.0,
            host_swap_pct: 0.0,
            probes_in_window: 0,
            worst_latency_ms: None,
            ok: true,
            server_exec_us: None,
            server_latency_event_ms: None,
            server_eventloop_max_us: None,
            server_request_bytes: None,
            memory_pressure: false,
            host_mem_peak_pct: 0.0,
            host_swap_grew_bytes: 0,
            hol_probe_send_lag_ms: None,
        }
    }

    #[test]
    fn a_run_says_when_its_worst_probes_left_late() {
        let summary = |lag: Option<f64>| WriteSummary {
            hol_delay_ms: lag.map(|l| l + 1.0),
            hol_probe_send_lag_ms: lag,
            ..blank_summary()
        };
        let on_time = [summary(Some(0.02)), summary(None), summary(Some(0.99))];
        assert_eq!(late_probe_note(&on_time, false), None);
        let late = [summary(Some(0.02)), summary(Some(3.46)), summary(Some(1.0))];
        let note = late_probe_note(&late, false).expect("a note");
        assert!(note.starts_with("in 2 of 3 writes"), "{note}");
        assert!(note.contains("up to 3.5 ms"), "{note}");
        assert!(note.contains("--realtime"), "{note}");
        let note = late_probe_note(&late, true).expect("a note");
        assert!(!note.contains("--realtime"), "{note}");
    }

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: ProbeArgs,
    }

    /// The library's defaults (what examples and other programs start from) are the CLI's.
    #[test]
    fn library_defaults_are_the_command_lines() {
        let cli = Wrapper::try_parse_from(["probe", "--writer-sizes", "1M"])
            .expect("clap parse")
            .args
            .to_options()
            .expect("valid options");
        let lib = RunOptions::default();
        assert_eq!(cli.probe_threads, lib.probe_threads);
        assert_eq!(cli.probe_rate, lib.probe_rate);
        assert_eq!(cli.probe_cmd, lib.probe_cmd);
        assert_eq!(cli.stall_threshold_us, lib.stall_threshold_us);
        assert_eq!(cli.seed, lib.seed);
        assert_eq!(cli.duration, lib.duration);
        assert_eq!(cli.probes_export, lib.probes_export);
        let cli_plan = cli.writer.expect("a writer plan");
        let lib_plan = WriterPlan::default();
        assert_eq!(cli_plan.repeat, lib_plan.repeat);
        assert_eq!(cli_plan.gap, lib_plan.gap);
        assert_eq!(cli_plan.overwrite, lib_plan.overwrite);
        assert_eq!(cli_plan.keep, lib_plan.keep);
        assert_eq!(cli_plan.commands, lib_plan.commands);
    }
}
