//! The measuring session every probe command runs through (the main job, observe mode,
//! `probe calibrate`): it owns the run id, the server-settings guard, the key ledger and its
//! cleanup, the event channel, the threads' start, stop and join, the streaming correlator and
//! the exports. A command supplies only what differs: its [`Actor`] (the writer, the stall
//! injector, or none to observe).
//!
//! # The way of a probe
//! A probe thread sends its record into the channel; the collector loop here files it in
//! probes.csv (as `--probes` says), hands it to the [`Correlator`] and counts it for the
//! metrics endpoint. About every 20 ms the loop moves the correlator's horizon on (the slowest
//! probe thread's last intended send; the actor's [`WriteMark`]) and takes the findings that
//! became final: stalls go to stalls.csv (once the server's logs could name them), writes to
//! summary.csv and the terminal, intervals to timeline.csv and probes.hlog. Nothing grows with
//! the length of the run: what the correlator holds is bounded by the slowest open window (a
//! silence is given up after the probes' `--timeout`), the findings kept for run.json by
//! [`KEEP_STALLS`], the writes by the plan.
//!
//! # Every way out
//! An export that cannot be written, a probe thread that lost the server, the actor's failure,
//! Ctrl-C: each stops the actor first (a write under way is finished and recorded), then the
//! probes, then removes the run's keys while the server is reachable, restores the server's
//! settings and writes the final exports (after an export error, as far as the disk takes
//! them, with run.json `failed`); only then is an export error returned.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use crossbeam_channel::{Receiver, RecvTimeoutError, bounded};

use crate::analyze::correlate::{Analysis, CorrelateConfig, Correlator, Finding, Horizon, Stall};
use crate::analyze::correlate::{Interval, WriteSummary};
use crate::measure::actor::{Actor, ActorContext, WriteMark};
use crate::measure::clock::{RunClock, wall_time};
use crate::measure::culprit::{
    Culprit, POLL_EVERY, ServerCommandEntry, ServerLogBatch, ServerLogPoller, WallSpan, name_stall,
};
use crate::measure::event::Event;
use crate::measure::hostmem::{MEMORY_SAMPLE_PERIOD, spawn_memory_sampler};
use crate::measure::probe::{ProbeConfig, ProbeShared, spawn_probes};
use crate::measure::serverview::{LatencyEvent, ServerTuning, ViewSetup, settings_for_observing};
use crate::measure::target::Target;
pub use crate::options::{ProbesExport, RunOptions};
use crate::output::export::{
    HostInfo, PROBES_CSV, PROBES_HLOG, RUN_JSON, RowAppender, RunJson, RunStatus, STALLS_CSV,
    SUMMARY_CSV, TIMELINE_CSV, TimelineRow, ToolInfo, WRITES_CSV, columns, csv_bytes, write_atomic,
};
use crate::output::hlog::HlogWriter;
use crate::output::metrics::ProbeMetrics;
use crate::record::{ProbeCmd, WriteOp, WriteRecord};

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
    /// Probes recorded (the records themselves went to the correlator and probes.csv).
    pub probes_recorded: u64,
    /// Stall episodes found; `analysis.stalls` keeps at most [`crate::session::KEEP_STALLS`].
    pub stalls_found: u64,
    /// Their total length, ms.
    pub stall_ms_total: f64,
    /// Client hiccups found; `analysis.client_hiccups` keeps at most [`KEEP_STALLS`].
    pub hiccups_found: u64,
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
    /// A stall episode is final (with its wall-clock start).
    Stall(&'a Stall),
    /// An interval of the timeline is final.
    Interval {
        /// The interval.
        interval: &'a Interval,
        /// Wall-clock time of the run's clock zero, µs since the Unix epoch.
        started_unix_us: u64,
    },
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

/// The prefix of every key a run creates, `holprobe:<run-id>:` (load mode's writer too).
pub fn run_key_prefix(run_id: &str) -> String {
    format!("{KEY_NAMESPACE}:{run_id}:")
}

/// How a run ended: its status, and the reason run.json's `status_reason` gives.
pub(crate) type EndOfRun = (RunStatus, Option<String>);

/// Ctrl-C or SIGTERM (every command says it in the same words).
pub(crate) fn interrupted_by_signal() -> EndOfRun {
    (
        RunStatus::Interrupted,
        Some("interrupted by a signal (Ctrl-C or SIGTERM)".into()),
    )
}

/// `--duration` ran out while the writer still had writes to make.
pub(crate) fn duration_before_plan() -> EndOfRun {
    (
        RunStatus::Interrupted,
        Some("--duration ended before the writer's plan".into()),
    )
}

/// The end an actor's (the writer's) last event says: done, or failed; `None` for any other
/// event.
pub(crate) fn actor_end(event: &Event) -> Option<EndOfRun> {
    match event {
        Event::WriterDone => Some((RunStatus::Complete, None)),
        Event::WriterFailed(error) => Some((
            RunStatus::Failed,
            Some(format!("the writer lost the server: {error}")),
        )),
        Event::Probe(_) | Event::Write(_) | Event::Memory(_) | Event::ServerLog(_) => None,
    }
}

/// A note when the probe behind some writes' `hol_delay_ms` left its thread a millisecond or
/// more late: those figures are partly this host's (its cores were busy), not the server's.
pub(crate) fn late_probe_note(writes: &[WriteSummary], realtime: bool) -> Option<String> {
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

/// Stalls (and, apart, client hiccups) kept for run.json and the report: beyond this many the
/// shortest ones not tied to a write go (stalls.csv still has every one). A busy host can give
/// a stall a second for hours; run.json, rewritten every few seconds, stays a few hundred KB.
pub const KEEP_STALLS: usize = 1_000;

/// How often the loop moves the correlator on and takes its findings.
const SETTLE_EVERY: Duration = Duration::from_millis(20);
/// How often run.json is rewritten while the run goes (and after every write).
const CHECKPOINT_EVERY: Duration = Duration::from_secs(5);

/// Runs probes with `actor` beside them (none: observe) until the actor is done, the duration is
/// over, `interrupt` is set, or the server goes away; see the module comment.
pub fn measure(
    options: &RunOptions,
    target: &Target,
    mut actor: Option<Box<dyn Actor>>,
    interrupt: &AtomicBool,
    notify: &mut dyn FnMut(Notice<'_>),
) -> Result<RunReport> {
    let run_id = new_run_id();
    let key_prefix = run_key_prefix(&run_id);
    let mut warnings = Vec::new();
    let mut control = target.conn.redis_connection()?;

    // The server's settings for its own view; the guard restores them on every way out.
    let mut tuning = match &actor {
        Some(actor) => ServerTuning::apply(
            &target.conn,
            &actor.server_settings(),
            target.server.embedded || options.tune_server,
        ),
        None => ServerTuning::apply(
            &target.conn,
            &settings_for_observing(options.stall_threshold_us),
            target.server.embedded || options.tune_server,
        ),
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
    let mut keys = KeyLedger::default();
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
    // Every key the actor may create is in the ledger from the start, so that one written by an
    // actor that then dies before reporting it is still removed (DEL of a key never made does
    // nothing). The probe key joins it only when GET probes create it.
    for key in &own_keys[1..] {
        keys.created(key);
    }
    // The actor prepares before the clock starts (the writer generates its value), so it
    // disturbs nothing measured.
    if let Some(actor) = actor.as_mut() {
        actor.prepare(&key_prefix)?;
    }
    // The export files first: if they cannot be created, nothing has been written to the
    // server yet.
    let mut out = match &options.out {
        Some(dir) => Some(OutFiles::create(dir, options)?),
        None => None,
    };
    if options.probe_cmd == ProbeCmd::Get {
        keys.created(&probe_config.get_key);
        redis::cmd("SET")
            .arg(&probe_config.get_key)
            .arg(crate::measure::probe::PROBE_VALUE)
            .query::<()>(&mut control)
            .with_context(|| format!("preparing the probe key {}", probe_config.get_key))?;
    }
    let host = HostInfo::read();
    let clock = RunClock::start();
    if let Some(out) = out.as_mut()
        && let Err(err) = out.start_hlog(clock.unix_start_us())
    {
        keys.remove_all(target, &key_prefix, &mut warnings);
        return Err(err);
    }
    // 65536 slots of ~100 bytes, allocated up front: about 6 MiB, half a minute of headroom
    // at the default rates if the collector stalls (what does not fit is counted as dropped).
    let (tx, rx) = bounded::<Event>(1 << 16);
    let mut threads = Threads::new();
    let schedule_start_us = 20_000;
    match spawn_probes(
        &probe_config,
        &target.conn,
        clock,
        schedule_start_us,
        tx.clone(),
        Arc::clone(&threads.probes_shared),
    ) {
        Ok(handles) => threads.probes = handles,
        Err(err) => {
            keys.remove_all(target, &key_prefix, &mut warnings);
            return Err(err);
        }
    }
    let steps_total = actor.as_ref().map_or(0, |a| a.steps_total());
    let has_actor = actor.is_some();
    if let Some(actor) = actor.take() {
        let spawned = spawn_memory_sampler(
            clock,
            tx.clone(),
            Arc::clone(&threads.sampler_stop),
            MEMORY_SAMPLE_PERIOD,
        )
        .and_then(|sampler| {
            threads.sampler = Some(sampler);
            actor.spawn(ActorContext {
                conn: target.conn.clone(),
                clock,
                events: tx.clone(),
                stop: Arc::clone(&threads.actor_stop),
                mark: Arc::clone(&threads.write_mark),
                view,
                server_local: target.server.local,
            })
        });
        match spawned {
            Ok(handle) => threads.actor = Some(handle),
            Err(err) => {
                threads.stop_all();
                keys.remove_all(target, &key_prefix, &mut warnings);
                return Err(err);
            }
        }
    }
    // The server's slow log names the stalls, unless it logs every command (the writer's view
    // of each write needs that; its stalls are named by their write instead).
    let log_threshold = tuning.effective("slowlog-log-slower-than");
    let naming = if log_threshold.is_none_or(|t| t != 0) {
        match ServerLogPoller::connect(&target.conn)
            .and_then(|poller| spawn_poller(poller, tx.clone(), Arc::clone(&threads.poller_stop)))
        {
            Ok(handle) => {
                threads.poller = Some(handle);
                if let Some(t) = log_threshold
                    && t > i64::try_from(options.stall_threshold_us).unwrap_or(i64::MAX)
                {
                    warnings.push(format!(
                        "the server logs commands slower than {:.1} ms only (slowlog-log-slower-than {t}): shorter stalls go unnamed (--tune-server lowers it for the run)",
                        t as f64 / 1e3
                    ));
                }
                Some(Namer::default())
            }
            Err(err) => {
                warnings.push(format!(
                    "stalls go unnamed: could not read the server's slow log ({})",
                    crate::error::one_line(&err)
                ));
                None
            }
        }
    } else {
        None
    };
    drop(tx);
    notify(Notice::Started {
        run_id: &run_id,
        steps_total,
    });

    let mut correlator = Correlator::new(CorrelateConfig {
        stall_threshold_us: options.stall_threshold_us,
        max_silence_us: Some(target.conn.command_timeout.as_micros() as u64),
    })
    .with_intervals(options.interval.as_micros().max(1) as u64);
    if !has_actor {
        correlator.memory_ended();
    }
    let mut state = Collector {
        correlator,
        writes: Vec::new(),
        last_intended: vec![None; options.probe_threads as usize],
        probes_recorded: 0,
        actor_ended: false,
        analysis: Analysis::default(),
        stalls_found: 0,
        stall_ms_total: 0.0,
        hiccups_found: 0,
        wrote_since_checkpoint: false,
        target_label: target.server.address.clone(),
        metrics: options.metrics.clone(),
        naming,
        notes: Vec::new(),
        unix_start_us: clock.unix_start_us(),
    };
    let deadline_us = options
        .duration
        .map(|d| schedule_start_us + d.as_micros() as u64);
    let mut status = RunStatus::Complete;
    let mut status_reason = None;
    let mut last_tick = Instant::now();
    let mut last_settle = Instant::now();
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
        match rx.recv_timeout(SETTLE_EVERY) {
            Ok(event) => {
                let step = state.take(event, &mut out, &mut keys);
                if ends_loop(step, &mut status, &mut status_reason, &mut export_error) {
                    break;
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        // The actor's thread ended: its last event, if it sent one, is taken below as the run
        // stops; if it sent none, it died (see after the stop).
        if threads.actor.as_ref().is_some_and(|h| h.is_finished()) {
            break;
        }
        // A probe thread that ended without saying why (a panic) would hold the correlator's
        // horizon for good.
        if threads.probes_shared.failure().is_none()
            && let Some(index) = threads.probes.iter().position(|h| h.is_finished())
        {
            let died = thread_died("a probe thread", threads.probes.swap_remove(index));
            (status, status_reason) = (RunStatus::Failed, Some(died));
            break;
        }
        // Nor may a memory sampler that ended hold the writes' figures; one that panicked
        // fails the run, as does a slow-log poller that did (it ends on its own only when the
        // channel stays full).
        if threads.sampler.as_ref().is_some_and(|h| h.is_finished()) {
            state.correlator.memory_ended();
            if let Some(panic) = threads.sampler.take().and_then(panicked) {
                let died = format!("the memory sampler thread panicked: {panic}{BUG}");
                (status, status_reason) = (RunStatus::Failed, Some(died));
                break;
            }
        }
        if threads.poller.as_ref().is_some_and(|h| h.is_finished())
            && let Some(panic) = threads.poller.take().and_then(panicked)
        {
            let died = format!("the slow-log poller thread panicked: {panic}{BUG}");
            (status, status_reason) = (RunStatus::Failed, Some(died));
            break;
        }
        // A probe thread that could go on no more (reported beside the channel, so a full one
        // cannot hold it up).
        if let Some((thread, error)) = threads.probes_shared.failure() {
            status = RunStatus::Failed;
            status_reason = Some(format!("probe thread {thread} lost the server: {error}"));
            break;
        }
        if interrupt.load(Ordering::Relaxed) {
            (status, status_reason) = interrupted_by_signal();
            break;
        }
        if let Some(deadline) = deadline_us
            && clock.now_us() >= deadline
        {
            if has_actor {
                (status, status_reason) = duration_before_plan();
            }
            break;
        }
        if last_tick.elapsed() >= Duration::from_millis(100) {
            last_tick = Instant::now();
            notify(Notice::Tick {
                elapsed: Duration::from_micros(clock.now_us()),
                probes: state.probes_recorded as usize,
                writes: state.writes.len(),
            });
        }
        if last_settle.elapsed() >= SETTLE_EVERY {
            last_settle = Instant::now();
            let settled = state
                .settle(&threads, clock, &rx, &mut out, &mut keys, notify)
                .and_then(|end| {
                    if let Some(end) = end {
                        return Ok(Some(end));
                    }
                    if state.wrote_since_checkpoint || last_checkpoint.elapsed() >= CHECKPOINT_EVERY
                    {
                        last_checkpoint = Instant::now();
                        state.wrote_since_checkpoint = false;
                        state.analysis.baseline = state.correlator.baseline();
                        if let Some(out) = out.as_mut() {
                            out.checkpoint(
                                &meta,
                                &state,
                                RunStatus::Running,
                                None,
                                &threads,
                                &warnings,
                            )?;
                        }
                    }
                    Ok(None)
                });
            if ends_loop(settled, &mut status, &mut status_reason, &mut export_error) {
                break;
            }
        }
    }

    // Stop everything, keep every record that is still in flight. The actor first: a write
    // under way when the run stops (Ctrl-C) is finished and recorded, and the probes go on
    // until it is, so its figures cover all of it. Its events keep being taken meanwhile (it
    // sends them blocking).
    let mut take_late = |event: Event,
                         state: &mut Collector,
                         out: &mut Option<OutFiles>,
                         keys: &mut KeyLedger,
                         status: &mut RunStatus,
                         status_reason: &mut Option<String>| {
        match state.take(event, out, keys) {
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
    threads.actor_stop.store(true, Ordering::Relaxed);
    let mut actor_panic = None;
    if let Some(handle) = threads.actor.take() {
        while !handle.is_finished() {
            if let Ok(event) = rx.recv_timeout(SETTLE_EVERY) {
                take_late(
                    event,
                    &mut state,
                    &mut out,
                    &mut keys,
                    &mut status,
                    &mut status_reason,
                );
            }
        }
        actor_panic = panicked(handle);
    }
    let stop_panic = threads.stop_all();
    while let Ok(event) = rx.try_recv() {
        take_late(
            event,
            &mut state,
            &mut out,
            &mut keys,
            &mut status,
            &mut status_reason,
        );
    }
    if status == RunStatus::Complete {
        if let Some((thread, error)) = threads.probes_shared.failure() {
            status = RunStatus::Failed;
            status_reason = Some(format!("probe thread {thread} lost the server: {error}"));
        } else if has_actor && !state.actor_ended {
            // Its thread is gone and it never said done or failed: it died (a panic).
            status = RunStatus::Failed;
            status_reason = Some(match actor_panic {
                Some(panic) => format!("the writer thread panicked: {panic}{BUG}"),
                None => format!("the writer thread stopped without finishing its plan{BUG}"),
            });
        } else if let Some(died) = actor_panic
            .map(|panic| format!("the writer thread panicked: {panic}{BUG}"))
            .or(stop_panic)
        {
            status = RunStatus::Failed;
            status_reason = Some(died);
        }
    }
    keys.remove_all(target, &key_prefix, &mut warnings);

    // Every thread is stopped and the keys are gone: now an export error may end the run (the
    // settings guard restores the server's settings as it drops).
    if let Some(err) = export_error {
        // What is still in memory goes to the files that can take it, and run.json says the
        // run failed (best effort: the disk may be full), before the error is returned.
        state.correlator.finish();
        let _ = state.file_findings(&mut out, &mut |_| {});
        let _ = state.file_named(true, &mut out, &mut |_| {});
        state.analysis.baseline = state.correlator.baseline();
        if let Some(out) = out.as_mut() {
            let _ = out.checkpoint(
                &meta,
                &state,
                RunStatus::Failed,
                Some(format!(
                    "could not write the exports: {}",
                    crate::error::one_line(&err)
                )),
                &threads,
                &warnings,
            );
        }
        return Err(err);
    }
    state.correlator.finish();
    state.file_findings(&mut out, notify)?;
    state.file_named(true, &mut out, notify)?;
    for note in std::mem::take(&mut state.notes) {
        if !warnings.contains(&note) {
            warnings.push(note);
        }
    }
    state.analysis.baseline = state.correlator.baseline();
    state.analysis.summarize_writes();
    if let Err(err) = tuning.restore() {
        warnings.push(format!(
            "could not restore the server's settings ({}): {err:#}",
            server_settings.join(", ")
        ));
    }
    let shared = &threads.probes_shared;
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
    let omitted = state.stalls_found - state.analysis.stalls.len() as u64;
    if omitted > 0 {
        warnings.push(format!(
            "{} stalls in all ({:.1} ms): run.json keeps the {} longest, stalls.csv every one",
            state.stalls_found,
            state.stall_ms_total,
            state.analysis.stalls.len()
        ));
    }
    if let Some(out) = out.as_mut() {
        out.checkpoint(
            &meta,
            &state,
            status,
            status_reason.clone(),
            &threads,
            &warnings,
        )?;
    }
    Ok(RunReport {
        run_id,
        status,
        status_reason,
        analysis: state.analysis,
        writes: state.writes,
        probes_recorded: state.probes_recorded,
        stalls_found: state.stalls_found,
        stall_ms_total: state.stall_ms_total,
        hiccups_found: state.hiccups_found,
        probes_dropped: dropped,
        warnings,
        started_unix_us: clock.unix_start_us(),
        server_settings,
    })
}

/// Files what one step of the collector loop says (an event taken, a settle): true when it
/// ends the loop, with its end in `status` and `status_reason`, or its export error kept.
fn ends_loop(
    step: Result<Option<EndOfRun>>,
    status: &mut RunStatus,
    status_reason: &mut Option<String>,
    export_error: &mut Option<anyhow::Error>,
) -> bool {
    match step {
        Ok(Some((end_status, reason))) => {
            *status = end_status;
            *status_reason = reason;
            true
        }
        Ok(None) => false,
        Err(err) => {
            *export_error = Some(err);
            true
        }
    }
}

/// The keys a run created and has not deleted: removed at the end while the server is
/// reachable, whatever ended the run.
#[derive(Debug, Default)]
pub struct KeyLedger {
    live: BTreeSet<String>,
}

impl KeyLedger {
    /// A key the run is about to create.
    pub fn created(&mut self, key: &str) {
        self.live.insert(key.to_string());
    }

    /// A key the run deleted.
    pub fn deleted(&mut self, key: &str) {
        self.live.remove(key);
    }

    /// Files a write event.
    pub fn track(&mut self, write: &WriteRecord) {
        match write.op {
            WriteOp::Set | WriteOp::Overwrite => self.created(&write.key),
            WriteOp::Delete if write.ok => self.deleted(&write.key),
            // A custom command may have removed the key: the final cleanup deletes it again,
            // which is harmless.
            WriteOp::Delete | WriteOp::Command | WriteOp::Inject => {}
        }
    }

    /// Deletes every key left, on a fresh connection (the run's may be broken); a failure is a
    /// warning, never an error that hides the results.
    pub fn remove_all(&mut self, target: &Target, key_prefix: &str, warnings: &mut Vec<String>) {
        if self.live.is_empty() {
            return;
        }
        let keys: Vec<&String> = self.live.iter().collect();
        let removed = target.conn.redis_connection().and_then(|mut conn| {
            redis::cmd("DEL")
                .arg(&keys)
                .query::<i64>(&mut conn)
                .map_err(anyhow::Error::from)
        });
        match removed {
            Ok(_) => self.live.clear(),
            Err(err) => warnings.push(format!(
                "could not remove {} key(s) under {key_prefix}: {err:#}",
                keys.len()
            )),
        }
    }
}

/// The session's threads and their stop flags: stopped (and joined) in the order that keeps
/// every record.
struct Threads {
    probes: Vec<JoinHandle<()>>,
    probes_shared: Arc<ProbeShared>,
    actor: Option<JoinHandle<()>>,
    actor_stop: Arc<AtomicBool>,
    write_mark: Arc<WriteMark>,
    sampler: Option<JoinHandle<()>>,
    sampler_stop: Arc<AtomicBool>,
    poller: Option<JoinHandle<()>>,
    poller_stop: Arc<AtomicBool>,
}

impl Threads {
    fn new() -> Threads {
        Threads {
            probes: Vec::new(),
            probes_shared: Arc::new(ProbeShared::default()),
            actor: None,
            actor_stop: Arc::new(AtomicBool::new(false)),
            write_mark: Arc::new(WriteMark::default()),
            sampler: None,
            sampler_stop: Arc::new(AtomicBool::new(false)),
            poller: None,
            poller_stop: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Stops and joins every thread (the actor's too, when still running). Returns what the
    /// first thread that panicked said, if one did.
    fn stop_all(&mut self) -> Option<String> {
        let mut first = None;
        let mut note = |what: &str, handle: JoinHandle<()>| {
            if let Some(panic) = panicked(handle) {
                first.get_or_insert(format!("the {what} thread panicked: {panic}{BUG}"));
            }
        };
        self.actor_stop.store(true, Ordering::Relaxed);
        if let Some(handle) = self.actor.take() {
            note("writer", handle);
        }
        self.probes_shared.stop.store(true, Ordering::Relaxed);
        self.sampler_stop.store(true, Ordering::Relaxed);
        for handle in self.probes.drain(..) {
            note("probe", handle);
        }
        if let Some(handle) = self.sampler.take() {
            note("memory sampler", handle);
        }
        // Last: its final poll covers the stalls the last probes closed.
        self.poller_stop.store(true, Ordering::Relaxed);
        if let Some(handle) = self.poller.take() {
            note("slow-log poller", handle);
        }
        first
    }
}

/// What a failure that is the tool's own fault adds.
const BUG: &str = " (a bug in holprobe: please report it)";

/// Joins a thread that has ended: what it panicked with, if it did.
fn panicked(handle: JoinHandle<()>) -> Option<String> {
    let payload = handle.join().err()?;
    Some(
        payload
            .downcast_ref::<&str>()
            .map(|text| text.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".to_string()),
    )
}

/// Why a thread that should still run has ended: its panic, or that it stopped unexpectedly.
fn thread_died(what: &str, handle: JoinHandle<()>) -> String {
    match panicked(handle) {
        Some(panic) => format!("{what} panicked: {panic}{BUG}"),
        None => format!("{what} stopped unexpectedly{BUG}"),
    }
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
    correlator: Correlator,
    writes: Vec<WriteRecord>,
    last_intended: Vec<Option<u64>>,
    probes_recorded: u64,
    /// The findings kept: every write, at most [`KEEP_STALLS`] stalls and as many hiccups.
    analysis: Analysis,
    stalls_found: u64,
    stall_ms_total: f64,
    hiccups_found: u64,
    /// A write's figures came since run.json was last written.
    wrote_since_checkpoint: bool,
    /// The actor said it was done, or failed.
    actor_ended: bool,
    target_label: String,
    unix_start_us: u64,
    metrics: Option<Arc<ProbeMetrics>>,
    /// Stalls waiting for the server's slow log to name them (`None`: no naming).
    naming: Option<Namer>,
    /// Notes from the threads (the slow-log poller), for the run's warnings.
    notes: Vec<String>,
}

/// Starts the slow-log poller thread: a poll every [`POLL_EVERY`] until `stop`, then one more (so the
/// stalls that closed last get their names), each sent as [`Event::ServerLog`]. Connection
/// trouble is a note and a retry at the next poll, never the end of the run.
pub fn spawn_poller(
    mut poller: ServerLogPoller,
    events: crossbeam_channel::Sender<Event>,
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
                // Never blocks for long: at the end nobody may drain a full channel.
                if events
                    .send_timeout(Event::ServerLog(Box::new(batch)), POLL_EVERY * 4)
                    .is_err()
                    || last
                {
                    return;
                }
                let wake = std::time::Instant::now() + POLL_EVERY;
                while std::time::Instant::now() < wake
                    && !stop.load(Ordering::Relaxed)
                {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            }
        })
        .context("starting the server-log thread")
}

/// What the server's logs said lately, and the stalls waiting for them.
#[derive(Debug, Default)]
struct Namer {
    entries: std::collections::VecDeque<ServerCommandEntry>,
    events: Vec<LatencyEvent>,
    /// Every command that ended before this (Unix µs) has been read.
    read_through_unix_us: i64,
    waiting: std::collections::VecDeque<Stall>,
}

/// How long a stall waits for the slow-log poll after its end, µs (a poll comes every 250 ms).
const NAMER_WAITS_AT_MOST_US: i64 = 5_000_000;

/// How long the namer keeps what the server logged, s: a stall is named within a poll or two
/// of its end, so a minute is plenty, and memory stays flat.
const NAMER_KEEPS_S: i64 = 60;

impl Namer {
    fn take(&mut self, batch: ServerLogBatch) {
        self.entries.extend(batch.poll.entries);
        for event in batch.poll.latency {
            self.events
                .retain(|e| e.name != event.name || e.at_unix_s != event.at_unix_s);
            self.events.push(event);
        }
        if batch.polled_unix_us > 0 {
            self.read_through_unix_us = batch.polled_unix_us;
        }
        let horizon_s = self.read_through_unix_us / 1_000_000 - NAMER_KEEPS_S;
        while self
            .entries
            .front()
            .is_some_and(|e| e.logged_unix_s < horizon_s)
        {
            self.entries.pop_front();
        }
        self.events.retain(|e| e.at_unix_s >= horizon_s);
    }

    /// The stalls whose end the logs have covered (all of them when `all`), named.
    fn named(&mut self, unix_start_us: u64, all: bool) -> Vec<Stall> {
        let mut out = Vec::new();
        // Should the poller stop sending (its thread gone), a stall waits no longer than this
        // after its end, and goes unnamed.
        let given_up_before = crate::measure::serverview::unix_now_us() - NAMER_WAITS_AT_MOST_US;
        while let Some(stall) = self.waiting.front() {
            let end_unix_us = (unix_start_us + stall.end_us) as i64;
            if !all && end_unix_us >= self.read_through_unix_us && end_unix_us >= given_up_before {
                break;
            }
            let mut stall = self.waiting.pop_front().expect("peeked");
            let span = WallSpan {
                start_unix_us: (unix_start_us + stall.start_us) as i64,
                end_unix_us,
            };
            let Culprit {
                server_command,
                server_client,
                server_event,
            } = name_stall(span, self.entries.make_contiguous(), &self.events);
            stall.server_command = server_command;
            stall.server_client = server_client;
            stall.server_event = server_event;
            out.push(stall);
        }
        out
    }
}

impl Collector {
    /// Files one event. Returns the run's end status when the event ends the run.
    fn take(
        &mut self,
        event: Event,
        out: &mut Option<OutFiles>,
        keys: &mut KeyLedger,
    ) -> Result<Option<EndOfRun>> {
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
                self.probes_recorded += 1;
                if let Some(metrics) = &self.metrics {
                    metrics.probe(&self.target_label, probe.latency_us, probe.ok);
                }
                self.correlator.probe(&probe);
            }
            Event::Write(write) => {
                if let Some(out) = out.as_mut() {
                    out.writes.push(&write)?;
                    out.writes.flush()?;
                }
                keys.track(&write);
                self.correlator.write((*write).clone());
                self.writes.push(*write);
            }
            Event::Memory(sample) => self.correlator.memory(sample),
            Event::ServerLog(batch) => {
                for note in &batch.notes {
                    if !self.notes.contains(note) {
                        self.notes.push(note.clone());
                    }
                }
                if let Some(namer) = self.naming.as_mut() {
                    namer.take(*batch);
                }
            }
            Event::WriterDone | Event::WriterFailed(_) => {
                self.actor_ended = true;
                return Ok(actor_end(&event));
            }
        }
        Ok(None)
    }

    /// Moves the correlator's horizon on and files what became final. The actor's mark is read
    /// before the channel is drained: a write it no longer marks has already been sent.
    fn settle(
        &mut self,
        threads: &Threads,
        clock: RunClock,
        rx: &Receiver<Event>,
        out: &mut Option<OutFiles>,
        keys: &mut KeyLedger,
        notify: &mut dyn FnMut(Notice<'_>),
    ) -> Result<Option<EndOfRun>> {
        let writes_from_us = threads.write_mark.writes_from(clock);
        let mut end = None;
        while let Ok(event) = rx.try_recv() {
            if let Some(e) = self.take(event, out, keys)? {
                end = Some(e);
                break;
            }
        }
        // Every thread has delivered up to its last intended send; a thread that has delivered
        // nothing yet holds everything back.
        let probes_through_us = self
            .last_intended
            .iter()
            .map(|l| l.unwrap_or(0))
            .min()
            .unwrap_or(0);
        self.correlator.advance(Horizon {
            probes_through_us,
            writes_from_us,
        });
        self.file_findings(out, notify)?;
        self.file_named(false, out, notify)?;
        Ok(end)
    }

    /// Files one final stall (named, when naming is on).
    fn file_stall(
        &mut self,
        stall: Stall,
        out: &mut Option<OutFiles>,
        notify: &mut dyn FnMut(Notice<'_>),
    ) -> Result<()> {
        self.stalls_found += 1;
        self.stall_ms_total += stall.duration_ms;
        if let Some(metrics) = &self.metrics {
            metrics.stall(&self.target_label, stall.end_us - stall.start_us);
        }
        if let Some(out) = out.as_mut() {
            out.stalls.push(&stall)?;
        }
        notify(Notice::Stall(&stall));
        keep_bounded(&mut self.analysis.stalls, stall);
        Ok(())
    }

    /// Files the stalls the server's logs have caught up with (every one waiting, at the end).
    fn file_named(
        &mut self,
        all: bool,
        out: &mut Option<OutFiles>,
        notify: &mut dyn FnMut(Notice<'_>),
    ) -> Result<()> {
        let named = match self.naming.as_mut() {
            Some(namer) => namer.named(self.unix_start_us, all),
            None => return Ok(()),
        };
        for stall in named {
            self.file_stall(stall, out, notify)?;
        }
        Ok(())
    }

    /// Takes the correlator's final findings into the exports, the terminal and the kept
    /// analysis.
    fn file_findings(
        &mut self,
        out: &mut Option<OutFiles>,
        notify: &mut dyn FnMut(Notice<'_>),
    ) -> Result<()> {
        for finding in self.correlator.drain() {
            match finding {
                Finding::Stall(mut stall) => {
                    stall.wall_start = Some(wall_time(self.unix_start_us + stall.start_us));
                    match self.naming.as_mut() {
                        Some(namer) => namer.waiting.push_back(stall),
                        None => self.file_stall(stall, out, notify)?,
                    }
                }
                Finding::Hiccup(mut hiccup) => {
                    hiccup.wall_start = Some(wall_time(self.unix_start_us + hiccup.start_us));
                    self.hiccups_found += 1;
                    keep_bounded(&mut self.analysis.client_hiccups, hiccup);
                }
                Finding::Write(summary) => {
                    let record = self
                        .writes
                        .iter()
                        .find(|w| w.seq == summary.seq)
                        .expect("a summary's write was taken");
                    notify(Notice::Write {
                        record,
                        summary: &summary,
                    });
                    self.analysis.writes.push(summary);
                    self.wrote_since_checkpoint = true;
                    if let Some(out) = out.as_mut() {
                        out.stalls.flush()?;
                        write_atomic(
                            &out.dir.join(SUMMARY_CSV),
                            &csv_bytes(&self.analysis.writes, columns::SUMMARY)?,
                        )?;
                    }
                }
                Finding::Interval(interval) => {
                    if let Some(metrics) = &self.metrics {
                        metrics.set_longest_stall(
                            &self.target_label,
                            (interval.longest_stall_ms * 1e3) as u64,
                        );
                    }
                    if let Some(out) = out.as_mut() {
                        if let Some(hlog) = out.hlog.as_mut() {
                            hlog.append(
                                interval.start_us,
                                interval.length_us,
                                &interval.latency,
                                None,
                            )?;
                        }
                        out.timeline.push(&TimelineRow::new(
                            &interval,
                            &self.target_label,
                            self.unix_start_us,
                        ))?;
                        out.timeline.flush()?;
                        out.stalls.flush()?;
                        out.probes.flush()?;
                    }
                    notify(Notice::Interval {
                        interval: &interval,
                        started_unix_us: self.unix_start_us,
                    });
                }
            }
        }
        Ok(())
    }
}

/// Keeps a stall in a list of at most [`KEEP_STALLS`]: past that, the shortest one not tied to
/// a write goes (the list stays in time order).
fn keep_bounded(list: &mut Vec<Stall>, stall: Stall) {
    list.push(stall);
    if list.len() > KEEP_STALLS
        && let Some((index, _)) = list
            .iter()
            .enumerate()
            .filter(|(_, s)| s.write_seq.is_none())
            .min_by(|a, b| a.1.duration_ms.total_cmp(&b.1.duration_ms))
    {
        list.remove(index);
    }
}

/// The files of an `--out` directory while the run goes.
struct OutFiles {
    dir: PathBuf,
    probes: RowAppender,
    writes: RowAppender,
    stalls: RowAppender,
    timeline: RowAppender,
    /// Opened once the run's clock has started (its header holds the start time).
    hlog: Option<HlogWriter>,
    probes_export: ProbesExport,
    stall_threshold_us: u64,
}

impl OutFiles {
    fn create(dir: &std::path::Path, options: &RunOptions) -> Result<OutFiles> {
        let files = OutFiles {
            dir: dir.to_path_buf(),
            probes_export: options.probes_export,
            stall_threshold_us: options.stall_threshold_us,
            probes: RowAppender::create(&dir.join(PROBES_CSV), columns::PROBES)?,
            writes: RowAppender::create(&dir.join(WRITES_CSV), columns::WRITES)?,
            stalls: RowAppender::create(&dir.join(STALLS_CSV), columns::STALLS)?,
            timeline: RowAppender::create(&dir.join(TIMELINE_CSV), columns::TIMELINE)?,
            hlog: None,
        };
        write_atomic(
            &dir.join(SUMMARY_CSV),
            &csv_bytes::<crate::analyze::findings::WriteSummary>(&[], columns::SUMMARY)?,
        )?;
        Ok(files)
    }

    fn start_hlog(&mut self, unix_start_us: u64) -> Result<()> {
        self.hlog = Some(HlogWriter::create(
            &self.dir.join(PROBES_HLOG),
            unix_start_us,
        )?);
        Ok(())
    }

    fn checkpoint(
        &mut self,
        meta: &Meta<'_>,
        state: &Collector,
        status: RunStatus,
        status_reason: Option<String>,
        threads: &Threads,
        warnings: &[String],
    ) -> Result<()> {
        self.probes.flush()?;
        self.writes.flush()?;
        self.stalls.flush()?;
        self.timeline.flush()?;
        write_atomic(
            &self.dir.join(SUMMARY_CSV),
            &csv_bytes(&state.analysis.writes, columns::SUMMARY)?,
        )?;
        let shared = &threads.probes_shared;
        let analysis = &state.analysis;
        let run_json = RunJson {
            tool: ToolInfo::default(),
            status,
            status_reason,
            run_id: meta.run_id.to_string(),
            key_prefix: meta.key_prefix.to_string(),
            started_unix_us: meta.clock.unix_start_us(),
            elapsed_us: meta.clock.now_us(),
            server: meta.target.server.clone(),
            host: meta.host.clone(),
            options: meta.options.clone(),
            probe_engine: Some(shared.engine_info()),
            probes_dropped: shared.dropped.load(Ordering::Relaxed),
            probes_recorded: state.probes_recorded,
            stalls_found: Some(state.stalls_found),
            stall_ms_total: Some(state.stall_ms_total),
            client_hiccups_found: Some(state.hiccups_found),
            analysis: analysis.clone(),
            warnings: warnings.to_vec(),
        };
        let json = serde_json::to_vec_pretty(&run_json).context("encoding run.json")?;
        write_atomic(&self.dir.join(RUN_JSON), &json)
    }
}
