//! One load run, end to end, as a measuring session (`session::Session`) with the
//! load generator as its instrument (`LoadInstrument`) and the prober's writer, when asked, as
//! its actor: the generator threads and the writer send into the session's one channel on one
//! run clock; the instrument folds the per-second reports into the timeline and the blocks,
//! writes the exports as the run goes, and at the end builds the per-write findings.
//!
//! With a writer, each request of the written server goes to the streaming correlator as it
//! arrives ([`LoadCorrelator`]) and is dropped: the horizon is what every generator thread says
//! it has sent (`unsampled_from_us` with each second) and the writer's mark, as for the probes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use crossbeam_channel::Receiver;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::analyze::{
    LoadCorrelator, LoadTimeline, RequestFigures, WriteUnderLoad, writes_under_load,
};
use super::engine::{self, Control, EngineConfig, EngineMsg, EngineServer, OpMix, ThreadSummary};
use super::keyspace::{KeyNaming, LOAD_PREFIX, PopulationMeta, ValueSize};
use super::stats::{LoadBlock, LoadSecondRow, SecondAgg, new_histogram};
use crate::analyze::correlate::Horizon;
use crate::measure::actor::Actor;
use crate::measure::event::Event;
use crate::measure::serverview::ViewSetup;
use crate::measure::target::Target;
use crate::measure::writer::{RecordedWriter, WriterActor, WriterPlan};
use crate::output::export::{
    LOAD_LATENCY_HGRM, LOAD_TIMELINE_CSV, LOAD_WRITES_CSV, LoadRunJson, Mode, RUN_JSON, RunStatus,
    ToolInfo, columns, csv_bytes, write_atomic,
};
use crate::record::WriteRecord;
use crate::session::{
    BUG, EndOfRun, Ended, Instrument, KeyLedger, Limits, RunContext, RunScope, RunSpec,
    SETTLE_EVERY, Session, panicked,
};
use crate::units::option_duration_ms;

/// Validated options of a load run: what the user asked for. Stored in run.json with the
/// writer as the run recorded it (`LoadOptions<RecordedWriter>`, see
/// [`LoadOptions::recorded`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoadOptions<W = WriterPlan> {
    /// Connections in total, spread over the servers (client `c` on server `c % servers`).
    pub clients: u32,
    /// Generator threads; `None`: chosen from the cores (see [`default_threads`]).
    pub threads: Option<u16>,
    /// Length of the load. `None` with a writer: until the writer's plan is done.
    #[serde(with = "option_duration_ms", rename = "duration_ms")]
    pub duration: Option<Duration>,
    /// Open loop: requests per second in total. `None`: closed loop.
    pub rate: Option<f64>,
    /// Requests outstanding per connection at most.
    pub pipeline: u32,
    /// Relative weight of GETs (`--ratio get:set`).
    pub get_weight: u32,
    /// Relative weight of SETs.
    pub set_weight: u32,
    /// The prober's writer, run while the load runs.
    pub writer: Option<W>,
    /// A request slower than this is delayed, µs.
    pub stall_threshold_us: u64,
    /// A request unanswered this long is a timeout, µs.
    pub timeout_us: u64,
    /// Seed of key choice, SET bytes and the writer's value.
    pub seed: u64,
    /// Where the exports go.
    pub out: Option<PathBuf>,
    /// The hash tag the writer's keys carry (`holprobe:<run>:{tag}:`), so that on a cluster
    /// they land on the written server's shard; `None` off a cluster.
    pub writer_hash_tag: Option<String>,
}

impl LoadOptions {
    /// The options as run.json records them: the writer with the run's key prefix (from the
    /// session's scope) and the seed of its values.
    pub fn recorded(&self, key_prefix: &str) -> LoadOptions<RecordedWriter> {
        let o = self.clone();
        LoadOptions {
            clients: o.clients,
            threads: o.threads,
            duration: o.duration,
            rate: o.rate,
            pipeline: o.pipeline,
            get_weight: o.get_weight,
            set_weight: o.set_weight,
            writer: o.writer.map(|plan| RecordedWriter {
                plan,
                key_prefix: key_prefix.to_string(),
                seed: o.seed,
            }),
            stall_threshold_us: o.stall_threshold_us,
            timeout_us: o.timeout_us,
            seed: o.seed,
            out: o.out,
            writer_hash_tag: o.writer_hash_tag,
        }
    }
}

/// One server to load, with its population.
pub struct LoadServer<'a> {
    /// The server.
    pub target: &'a Target,
    /// GETs and SETs pick keys `0..keys`.
    pub keys: u64,
    /// Sizes of SET values.
    pub set_size: ValueSize,
    /// What the population says of itself.
    pub population: Option<PopulationMeta>,
    /// Connections to this server; `None` for every server: `--clients` spread evenly.
    pub clients: Option<u32>,
    /// On a cluster: the only key indices this server is sent (its shard's); see
    /// [`EngineServer::key_indices`].
    pub key_indices: Option<Arc<Vec<u32>>>,
    /// Which requests its clients send.
    pub ops: OpMix,
    /// On a cluster: its part (`master, shard 0`), shown with its block.
    pub role: Option<String>,
}

/// Something the caller may show while the run goes.
#[derive(Debug)]
pub enum LoadNotice<'a> {
    /// The clients are connected and about to start.
    Started {
        /// The run's id (the writer's keys live under `holprobe:<run_id>:`).
        run_id: &'a str,
        /// Generator threads.
        threads: u16,
    },
    /// About every 100 ms.
    Tick {
        /// Since the load started.
        elapsed: Duration,
        /// Requests in the last complete second, all servers.
        last_second_requests: u64,
    },
    /// A write's figures are final (every request around it is in, and the second after it is
    /// complete).
    Write {
        /// The write as recorded.
        record: &'a WriteRecord,
        /// What the load clients saw.
        finding: &'a WriteUnderLoad,
    },
    /// A connection problem a generator thread reported.
    Problem(&'a str),
}

/// Whether the load generator itself was the limit.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GeneratorReport {
    /// Generator threads.
    pub threads: u16,
    /// Connections per thread.
    pub clients_per_thread: Vec<u32>,
    /// Each thread's CPU time over the run, percent of wall time (empty where unknown).
    pub thread_cpu_pct: Vec<Option<f64>>,
    /// The busiest thread over the run, percent.
    pub busiest_thread_cpu_pct: Option<f64>,
    /// The busiest thread in its busiest second, percent.
    pub busiest_second_cpu_pct: Option<f64>,
    /// Each thread's time runnable but waiting for a CPU, percent of wall time (empty where
    /// unknown): the host's oversubscription as the generator felt it.
    pub thread_wait_pct: Vec<Option<f64>>,
    /// The longest such wait over the run among the threads, percent.
    pub max_thread_wait_pct: Option<f64>,
    /// Open loop (`--rate`).
    pub open_loop: bool,
    /// Open loop: median lateness of sends the generator made late, µs.
    pub schedule_lag_p50_us: Option<u64>,
    /// Open loop: 99th percentile of the same, µs.
    pub schedule_lag_p99_us: Option<u64>,
    /// Open loop: sends more than 1 ms late because of the generator.
    pub late_sends: u64,
    /// Open loop: `late_sends` as a percentage of the generator's scheduled sends.
    pub late_sends_pct: Option<f64>,
    /// Open loop: scheduled requests never sent (their connection was full or down at the end).
    pub unsent: u64,
    /// Connections reopened after an error or timeout.
    pub reconnects: u64,
    /// Connections still down at the end.
    pub disconnected_at_end: u32,
    /// Per-request samples lost because the collector fell behind (expected 0).
    pub samples_dropped: u64,
    /// True when a thread ran at 90% CPU or more over the run, waited for a CPU 25% of the
    /// time or more, or the open-loop schedule fell behind (more than 1% of sends over 1 ms
    /// late): the figures may be the client's limit.
    pub saturated: bool,
    /// The verdict in words.
    pub verdict: String,
}

/// Busiest-thread CPU share over the run past which the generator counts as saturated.
pub const SATURATED_CPU_PCT: f64 = 90.0;
/// Share of the run a thread may wait for a CPU before the generator counts as starved.
pub const STARVED_WAIT_PCT: f64 = 25.0;

/// What a finished (or stopped) load run found.
#[derive(Debug, Clone)]
pub struct LoadReport {
    /// The run's id.
    pub run_id: String,
    /// How it ended.
    pub status: RunStatus,
    /// Why it stopped early, if it did.
    pub status_reason: Option<String>,
    /// Length of the load, seconds.
    pub runtime_s: f64,
    /// One block per server when there are several, then the total (`server = all`).
    pub blocks: Vec<LoadBlock>,
    /// Every timeline row.
    pub timeline: Vec<LoadSecondRow>,
    /// Every writer event.
    pub writes: Vec<WriteRecord>,
    /// What the load saw during each.
    pub writes_under_load: Vec<WriteUnderLoad>,
    /// Whether the generator was the limit.
    pub generator: GeneratorReport,
    /// Warnings (also in run.json).
    pub warnings: Vec<String>,
    /// Connection problems the generator threads reported as they happened (the first few per
    /// thread; also in run.json).
    pub problems: Vec<String>,
    /// Whole-run latency, all servers, µs.
    pub latency: Histogram<u64>,
    /// Run clock of the load's second 0, µs.
    pub load_start_us: u64,
    /// Wall-clock time of the run clock's zero, µs since the Unix epoch.
    pub started_unix_us: u64,
    /// The run's findings as run.json has them (the same value, written there with --out):
    /// what `--format json` prints.
    pub run_json: LoadRunJson,
}

/// Default generator threads: one per core not taken by a server on this host, but at least
/// one per server (so each server's clients have their own event loop, as with one
/// redis-benchmark process per server), at most 8 and at most one per client. On a 2-core
/// machine with one local server: 1, as redis-benchmark; with two: 2.
pub fn default_threads(clients: u32, cores: usize, servers: usize, local_servers: usize) -> u16 {
    let free = cores.saturating_sub(local_servers).max(servers).clamp(1, 8);
    (free as u32).min(clients.max(1)) as u16
}

/// Connections per server: as given, or `clients` spread evenly (client `c` on server
/// `c % servers`).
fn clients_per_server(servers: &[LoadServer<'_>], clients: u32) -> Vec<u32> {
    let n = servers.len().max(1) as u32;
    servers
        .iter()
        .enumerate()
        .map(|(k, s)| {
            s.clients
                .unwrap_or(clients / n + u32::from((k as u32) < clients % n))
        })
        .collect()
}

/// The engine's server of each connection when the servers have counts of their own
/// (round-robin over the servers with connections left, so each generator thread gets a mix);
/// empty otherwise (client `c` on server `c % servers`).
fn client_servers(servers: &[LoadServer<'_>]) -> Vec<u16> {
    if servers.iter().all(|s| s.clients.is_none()) {
        return Vec::new();
    }
    let mut left: Vec<u32> = servers.iter().map(|s| s.clients.unwrap_or(0)).collect();
    let mut order = Vec::new();
    while left.iter().any(|&n| n > 0) {
        for (k, n) in left.iter_mut().enumerate() {
            if *n > 0 {
                *n -= 1;
                order.push(k as u16);
            }
        }
    }
    order
}

/// Runs the load against `servers` as a measuring session until `--duration` is over (with a
/// writer and no `--duration`: until its plan is done), the writer fails, `interrupt` is set,
/// or a generator thread dies. Every exit path stops the writer, then the generator threads,
/// removes the writer's keys and writes the final exports.
pub fn run_load(
    options: &LoadOptions,
    servers: &[LoadServer<'_>],
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
    let scope = RunScope::open(
        written,
        options.writer_hash_tag.as_deref(),
        &[],
        false,
        prepare,
    )?;
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
    let mut session = Session::start(written, scope, RunSpec::new(Mode::Load), CHANNEL_SLOTS);
    let run = session.run.clone();
    let clock = run.clock;
    let control = Arc::new(Control {
        stop_at_us: AtomicU64::new(u64::MAX),
    });
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
        && let Err(err) = session.spawn_actor(actor, ViewSetup::default(), Vec::new(), 0)
    {
        control.stop_at_us.store(0, Ordering::SeqCst);
        for handle in handles {
            let _ = handle.join();
        }
        session.abandon();
        return Err(err);
    }
    notify(LoadNotice::Started {
        run_id: &run.run_id,
        threads,
    });

    let requests = has_writer.then(|| LoadCorrelator::new(options.stall_threshold_us));
    let mut state = LoadCollector::new(threads, labels.clone(), load_start_us, requests);
    state.clients_per_server = clients_per_server(servers, options.clients);
    state.roles = servers.iter().map(|s| s.role.clone()).collect();
    // run.json stores the options as the run used them (the writer with its real key prefix).
    let effective_options = options.recorded(&run.key_prefix);
    let mut load = LoadInstrument {
        state,
        handles: handles.into_iter().map(Some).collect(),
        panics: Vec::new(),
        control,
        out: options.out.as_deref().map(OutDir::new),
        meta: LoadMeta {
            run: &run,
            servers,
            options: &effective_options,
            threads,
            load_start_us,
        },
        notify,
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
    out: Option<OutDir>,
    meta: LoadMeta<'a>,
    notify: &'n mut dyn FnMut(LoadNotice<'_>),
    last_checkpoint: Instant,
}

impl Instrument for LoadInstrument<'_, '_> {
    fn take(&mut self, event: Event, keys: &mut KeyLedger) -> Result<()> {
        match event {
            Event::Load(msg) => self.state.take(*msg, &mut *self.notify),
            Event::Write(write) => self.state.take_writer(*write, keys),
            _ => {}
        }
        Ok(())
    }

    fn settle(&mut self, writes_from_us: u64, warnings: &[String]) -> Result<()> {
        self.state.settle(writes_from_us);
        self.state.notify_final_writes(&mut *self.notify, false);
        if self.last_checkpoint.elapsed() >= CHECKPOINT_EVERY {
            self.last_checkpoint = Instant::now();
            if let Some(out) = self.out.as_mut() {
                let complete_us = self.state.finals.len() as u64 * 1_000_000;
                let report = self.state.report(
                    &self.meta,
                    RunStatus::Running,
                    None,
                    warnings.to_vec(),
                    complete_us,
                );
                out.write(&self.meta, &report)?;
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
        (self.notify)(LoadNotice::Tick {
            elapsed: Duration::from_micros(elapsed),
            last_second_requests: self.state.last_second_requests(),
        });
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
        (self.state.done_threads >= self.meta.threads).then_some((RunStatus::Complete, None))
    }

    fn stop(&mut self, events: &Receiver<Event>, keys: &mut KeyLedger) -> Option<String> {
        let now = self.meta.run.clock.now_us().max(self.meta.load_start_us);
        self.control.stop_at_us.fetch_min(now, Ordering::SeqCst);
        // The threads send their last reports blocking: take them while waiting.
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
        state.notify_final_writes(&mut *self.notify, true);
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
            if let Some(out) = self.out.as_mut() {
                let _ = out.write(&self.meta, &report);
            }
            return Err(err);
        }
        let report = state.report(&self.meta, status, status_reason, warnings, runtime_us);
        if let Some(out) = self.out.as_mut() {
            out.write(&self.meta, &report)?;
        }
        Ok(report)
    }
}

/// What run.json says of the load besides its findings.
struct LoadMeta<'a> {
    run: &'a RunContext,
    servers: &'a [LoadServer<'a>],
    options: &'a LoadOptions<RecordedWriter>,
    threads: u16,
    load_start_us: u64,
}

struct SecondSlot {
    reported: u16,
    aggs: Vec<SecondAgg>,
    cpu_max: Option<f64>,
    wait_max: Option<f64>,
}

struct FinalSecond {
    per_server: Vec<LoadSecondRow>,
    all: LoadSecondRow,
}

struct LoadCollector {
    threads: u16,
    labels: Vec<String>,
    load_start_us: u64,
    slots: Vec<SecondSlot>,
    finals: Vec<FinalSecond>,
    run_aggs: Vec<SecondAgg>,
    summaries: Vec<ThreadSummary>,
    done_threads: u16,
    /// The correlator of the written server's requests (with a writer).
    requests: Option<LoadCorrelator>,
    /// Per generator thread: every request of the written server it started before this has
    /// been taken (`u64::MAX` once it is done).
    unsampled_from_us: Vec<u64>,
    writes: Vec<WriteRecord>,
    /// Each write's request figures, once final.
    figures: BTreeMap<u32, RequestFigures>,
    writes_notified: usize,
    problems: Vec<String>,
    /// Whole seconds of load, once the run has stopped: a last, partial second is no fair
    /// neighbour for a write's throughput.
    full_seconds: Option<usize>,
    /// Connections per server (the blocks' client counts).
    clients_per_server: Vec<u32>,
    /// Each server's part on a cluster (the blocks' headings).
    roles: Vec<Option<String>>,
}

impl LoadCollector {
    fn new(
        threads: u16,
        labels: Vec<String>,
        load_start_us: u64,
        requests: Option<LoadCorrelator>,
    ) -> LoadCollector {
        let servers = labels.len();
        LoadCollector {
            clients_per_server: vec![0; servers],
            roles: vec![None; servers],
            threads,
            labels,
            load_start_us,
            slots: Vec::new(),
            finals: Vec::new(),
            run_aggs: (0..servers).map(|_| SecondAgg::new()).collect(),
            summaries: Vec::new(),
            done_threads: 0,
            requests,
            unsampled_from_us: vec![0; usize::from(threads)],
            writes: Vec::new(),
            figures: BTreeMap::new(),
            writes_notified: 0,
            problems: Vec::new(),
            full_seconds: None,
        }
    }

    fn take(&mut self, msg: EngineMsg, notify: &mut dyn FnMut(LoadNotice<'_>)) {
        match msg {
            EngineMsg::Second(second) => {
                if let Some(from) = self.unsampled_from_us.get_mut(usize::from(second.thread)) {
                    *from = (*from).max(second.unsampled_from_us);
                }
                let index = second.second as usize;
                while self.slots.len() <= index {
                    self.slots.push(SecondSlot {
                        reported: 0,
                        aggs: (0..self.labels.len()).map(|_| SecondAgg::new()).collect(),
                        cpu_max: None,
                        wait_max: None,
                    });
                }
                if index < self.finals.len() {
                    // A straggler for a second already closed (a thread ran past the stop by a
                    // hair): fold it into the last final row so no request is lost.
                    self.fold_late(second.servers);
                } else {
                    let slot = &mut self.slots[index];
                    slot.reported += 1;
                    for (agg, add) in slot.aggs.iter_mut().zip(&second.servers) {
                        agg.merge(add);
                    }
                    slot.cpu_max = max_opt(slot.cpu_max, second.cpu_pct);
                    slot.wait_max = max_opt(slot.wait_max, second.wait_pct);
                    self.finalize(false);
                }
            }
            EngineMsg::Samples(samples) => {
                if let Some(requests) = self.requests.as_mut() {
                    for sample in &samples {
                        requests.sample(sample);
                    }
                }
            }
            EngineMsg::Note(text) => {
                notify(LoadNotice::Problem(&text));
                if self.problems.len() < 20 {
                    self.problems.push(text);
                }
            }
            EngineMsg::Done(summary) => {
                if let Some(from) = self.unsampled_from_us.get_mut(usize::from(summary.thread)) {
                    *from = u64::MAX;
                }
                self.done_threads += 1;
                self.summaries.push(summary);
            }
        }
    }

    fn take_writer(&mut self, write: WriteRecord, keys: &mut KeyLedger) {
        keys.track(&write);
        if let Some(requests) = self.requests.as_mut() {
            requests.write(write.clone());
        }
        self.writes.push(write);
    }

    /// Moves the correlator's horizon on (`writes_from_us`: the writer's mark, read before its
    /// channel was drained) and keeps the figures that became final.
    fn settle(&mut self, writes_from_us: u64) {
        let Some(requests) = self.requests.as_mut() else {
            return;
        };
        let through = self.unsampled_from_us.iter().copied().min().unwrap_or(0);
        requests.advance(Horizon {
            probes_through_us: through.saturating_sub(1),
            writes_from_us,
        });
        self.figures.extend(requests.drain());
    }

    /// Every request and write is in: every figure becomes final.
    fn finish_requests(&mut self) {
        if let Some(requests) = self.requests.as_mut() {
            requests.finish();
            self.figures.extend(requests.drain());
        }
    }

    /// Closes every second all threads have reported (every second, with `force`).
    fn finalize(&mut self, force: bool) {
        while self.finals.len() < self.slots.len() {
            let index = self.finals.len();
            if !force && self.slots[index].reported < self.threads {
                break;
            }
            let slot = &mut self.slots[index];
            let aggs = std::mem::take(&mut slot.aggs);
            let second = index as u64;
            let start_us = self.load_start_us + second * 1_000_000;
            let mut all = SecondAgg::new();
            let mut per_server = Vec::with_capacity(aggs.len());
            for ((agg, label), run) in aggs.iter().zip(&self.labels).zip(&mut self.run_aggs) {
                all.merge(agg);
                run.merge(agg);
                per_server.push(LoadSecondRow::from_agg(
                    second,
                    label,
                    agg,
                    start_us,
                    slot.cpu_max,
                    slot.wait_max,
                ));
            }
            self.finals.push(FinalSecond {
                per_server,
                all: LoadSecondRow::from_agg(
                    second,
                    "all",
                    &all,
                    start_us,
                    slot.cpu_max,
                    slot.wait_max,
                ),
            });
        }
    }

    fn fold_late(&mut self, aggs: Vec<SecondAgg>) {
        let Some(last) = self.finals.len().checked_sub(1) else {
            return;
        };
        let start_us = self.finals[last].all.start_us;
        let mut all = SecondAgg::new();
        for (k, agg) in aggs.iter().enumerate() {
            self.run_aggs[k].merge(agg);
            all.merge(agg);
            let row = &mut self.finals[last].per_server[k];
            add_counts(row, agg);
        }
        add_counts(&mut self.finals[last].all, &all);
        debug_assert_eq!(start_us, self.finals[last].all.start_us);
    }

    fn last_second_requests(&self) -> u64 {
        self.finals.last().map_or(0, |f| f.all.requests)
    }

    /// Requests per whole second of the written server (server 0).
    fn written_server_rps(&self) -> Vec<u64> {
        self.finals
            .iter()
            .take(self.full_seconds.unwrap_or(usize::MAX))
            .map(|f| f.per_server.first().map_or(0, |r| r.requests))
            .collect()
    }

    /// One finding per write whose request figures are final.
    fn findings(&self) -> Vec<WriteUnderLoad> {
        let rps = self.written_server_rps();
        writes_under_load(
            &self.writes,
            &self.figures,
            LoadTimeline {
                load_start_us: self.load_start_us,
                requests_per_second: &rps,
            },
        )
    }

    /// Tells the caller about writes whose figures can no longer change: the correlator's are
    /// final and the second after the write is complete (or the run is over).
    fn notify_final_writes(&mut self, notify: &mut dyn FnMut(LoadNotice<'_>), all: bool) {
        let complete = self.finals.len() as u64;
        let ready = self.writes[self.writes_notified..]
            .iter()
            .take_while(|w| {
                self.figures.contains_key(&w.seq)
                    && (all
                        || w.reply_us.saturating_sub(self.load_start_us) / 1_000_000 + 2
                            <= complete)
            })
            .count();
        if ready == 0 {
            return;
        }
        let findings = self.findings();
        for record in &self.writes[self.writes_notified..self.writes_notified + ready] {
            if let Some(finding) = findings.iter().find(|f| f.seq == record.seq) {
                notify(LoadNotice::Write { record, finding });
            }
        }
        self.writes_notified += ready;
    }

    fn timeline(&self) -> Vec<LoadSecondRow> {
        let several = self.labels.len() > 1;
        let mut rows = Vec::with_capacity(self.finals.len() * (1 + self.labels.len()));
        for second in &self.finals {
            let tags = self.write_tags(second.all.start_us);
            if several {
                for row in &second.per_server {
                    let mut row = row.clone();
                    if row.server == self.labels[0] {
                        row.writes = tags.clone();
                    }
                    rows.push(row);
                }
            }
            let mut all = second.all.clone();
            all.writes = tags;
            rows.push(all);
        }
        rows
    }

    fn write_tags(&self, second_start_us: u64) -> String {
        let second_end_us = second_start_us + 1_000_000;
        self.writes
            .iter()
            .filter(|w| w.start_us < second_end_us && w.reply_us >= second_start_us)
            .map(WriteUnderLoad::tag)
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn report(
        &self,
        meta: &LoadMeta<'_>,
        status: RunStatus,
        status_reason: Option<String>,
        mut warnings: Vec<String>,
        runtime_us: u64,
    ) -> LoadReport {
        let runtime_s = runtime_us as f64 / 1e6;
        let mut blocks = Vec::new();
        let clients_on = |server: usize| self.clients_per_server[server];
        let mut total = SecondAgg::new();
        for (k, agg) in self.run_aggs.iter().enumerate() {
            total.merge(agg);
            if self.labels.len() > 1 {
                let mut block = LoadBlock::from_agg(&self.labels[k], clients_on(k), runtime_s, agg);
                block.role = self.roles[k].clone();
                blocks.push(block);
            }
        }
        blocks.push(LoadBlock::from_agg(
            "all",
            meta.options.clients,
            runtime_s,
            &total,
        ));
        let generator = self.generator(meta);
        if generator.saturated {
            warnings.push(
                "the load generator was the limit or fell behind: see the generator line".into(),
            );
        }
        if generator.samples_dropped > 0 {
            warnings.push(format!(
                "{} per-request samples were dropped (the collector fell behind): the per-write figures miss them",
                generator.samples_dropped
            ));
        }
        if generator.disconnected_at_end > 0 {
            warnings.push(format!(
                "{} connection(s) were down at the end and could not be reopened",
                generator.disconnected_at_end
            ));
        }
        let writes_under_load = self.findings();
        let run_json = LoadRunJson {
            tool: ToolInfo::default(),
            mode: meta.run.mode,
            status,
            status_reason: status_reason.clone(),
            run_id: meta.run.run_id.clone(),
            key_prefix: meta.run.key_prefix.clone(),
            load_key_prefix: LOAD_PREFIX.to_string(),
            started_unix_us: meta.run.clock.unix_start_us(),
            load_start_us: meta.load_start_us,
            elapsed_us: meta.run.clock.now_us(),
            runtime_s,
            servers: meta
                .servers
                .iter()
                .map(|s| s.target.server.clone())
                .collect(),
            populations: meta.servers.iter().map(|s| s.population.clone()).collect(),
            keys_used: meta.servers.iter().map(|s| s.keys).collect(),
            host: meta.run.host.clone(),
            options: meta.options.clone(),
            threads: meta.threads,
            blocks: blocks.clone(),
            generator: generator.clone(),
            writes: self.writes.clone(),
            writes_under_load: writes_under_load.clone(),
            warnings: warnings.clone(),
            problems: self.problems.clone(),
        };
        LoadReport {
            run_id: meta.run.run_id.clone(),
            status,
            status_reason,
            runtime_s,
            blocks,
            timeline: self.timeline(),
            writes: self.writes.clone(),
            writes_under_load,
            generator,
            warnings,
            problems: self.problems.clone(),
            latency: total.hist,
            load_start_us: self.load_start_us,
            started_unix_us: meta.run.clock.unix_start_us(),
            run_json,
        }
    }

    fn generator(&self, meta: &LoadMeta<'_>) -> GeneratorReport {
        let mut summaries: Vec<&ThreadSummary> = self.summaries.iter().collect();
        summaries.sort_by_key(|s| s.thread);
        let share = |part: Option<u64>, wall: u64| {
            part.filter(|_| wall > 0)
                .map(|p| (1000.0 * p as f64 / wall as f64).round() / 10.0)
        };
        let thread_cpu_pct: Vec<Option<f64>> = summaries
            .iter()
            .map(|s| share(s.cpu_us, s.wall_us))
            .collect();
        let thread_wait_pct: Vec<Option<f64>> = summaries
            .iter()
            .map(|s| share(s.run_delay_us, s.wall_us))
            .collect();
        let max_wait = thread_wait_pct.iter().copied().fold(None, max_opt);
        let busiest = thread_cpu_pct
            .iter()
            .flatten()
            .copied()
            .fold(None, |m: Option<f64>, c| Some(m.map_or(c, |m| m.max(c))));
        let busiest_second = self
            .finals
            .iter()
            .filter_map(|f| f.all.client_cpu_pct)
            .fold(None, |m: Option<f64>, c| Some(m.map_or(c, |m| m.max(c))));
        let open_loop = meta.options.rate.is_some();
        let mut lag = new_histogram();
        for s in &summaries {
            let _ = lag.add(&s.schedule_lag);
        }
        let late_sends: u64 = summaries.iter().map(|s| s.late_sends).sum();
        let late_sends_pct =
            (open_loop && !lag.is_empty()).then(|| 100.0 * late_sends as f64 / lag.len() as f64);
        let cpu_saturated = busiest.is_some_and(|c| c >= SATURATED_CPU_PCT);
        let starved = max_wait.is_some_and(|w| w >= STARVED_WAIT_PCT);
        let schedule_behind = late_sends_pct.is_some_and(|p| p > 1.0);
        let mut verdict = match busiest {
            Some(cpu) => format!(
                "{} thread(s), busiest at {cpu:.0}% CPU over the run{}",
                meta.threads,
                busiest_second.map_or(String::new(), |s| format!(
                    " ({s:.0}% in its busiest second)"
                ))
            ),
            None => format!("{} thread(s), CPU use unknown on this OS", meta.threads),
        };
        if let Some(wait) = max_wait {
            verdict.push_str(&format!(", waiting for a CPU {wait:.1}% of the time"));
        }
        if open_loop {
            verdict.push_str(&format!(
                "; open-loop schedule: {late_sends} of {} sends over 1 ms late because of the generator",
                lag.len()
            ));
        }
        verdict.push_str(if cpu_saturated {
            ": SATURATED, a thread was busy nearly all the time: the figures may show the client's limit rather than the server's (add --threads, or run the client elsewhere)"
        } else if starved {
            ": CPU-STARVED, the host is oversubscribed and the generator often waited for a core: latencies include that wait and throughput is the host's limit (fewer processes on the host, or the client elsewhere)"
        } else if schedule_behind {
            ": SCHEDULE BEHIND, more than 1% of sends left over 1 ms late with the threads mostly idle: the host did not wake the generator on time, so latencies include that lateness"
        } else {
            ": not saturated"
        });
        GeneratorReport {
            threads: meta.threads,
            clients_per_thread: summaries.iter().map(|s| s.clients).collect(),
            thread_cpu_pct,
            busiest_thread_cpu_pct: busiest,
            busiest_second_cpu_pct: busiest_second,
            thread_wait_pct,
            max_thread_wait_pct: max_wait,
            open_loop,
            schedule_lag_p50_us: (open_loop && !lag.is_empty()).then(|| lag.value_at_quantile(0.5)),
            schedule_lag_p99_us: (open_loop && !lag.is_empty())
                .then(|| lag.value_at_quantile(0.99)),
            late_sends,
            late_sends_pct,
            unsent: summaries.iter().map(|s| s.unsent).sum(),
            reconnects: summaries.iter().map(|s| s.reconnects).sum(),
            disconnected_at_end: summaries.iter().map(|s| s.disconnected_at_end).sum(),
            samples_dropped: summaries.iter().map(|s| s.samples_dropped).sum(),
            saturated: cpu_saturated || starved || schedule_behind,
            verdict,
        }
    }
}

fn max_opt(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn add_counts(row: &mut LoadSecondRow, agg: &SecondAgg) {
    row.requests += agg.requests;
    row.bytes += agg.bytes;
    row.errors += agg.errors;
    row.timeouts += agg.timeouts;
    row.misses += agg.misses;
    row.delayed += agg.delayed;
    if !agg.hist.is_empty() {
        row.max_us = row.max_us.max(agg.hist.max());
    }
}

struct OutDir {
    dir: PathBuf,
}

impl OutDir {
    fn new(dir: &Path) -> OutDir {
        OutDir {
            dir: dir.to_path_buf(),
        }
    }

    fn write(&mut self, meta: &LoadMeta<'_>, report: &LoadReport) -> Result<()> {
        write_atomic(
            &self.dir.join(LOAD_TIMELINE_CSV),
            &csv_bytes(&report.timeline, columns::LOAD_TIMELINE)?,
        )?;
        write_atomic(
            &self.dir.join(LOAD_LATENCY_HGRM),
            super::hgrm::percentile_distribution(&report.latency).as_bytes(),
        )?;
        if meta.options.writer.is_some() {
            write_atomic(
                &self.dir.join(LOAD_WRITES_CSV),
                &csv_bytes(&report.writes_under_load, columns::LOAD_WRITES)?,
            )?;
        }
        let bytes = serde_json::to_vec_pretty(&report.run_json).context("encoding run.json")?;
        write_atomic(&self.dir.join(RUN_JSON), &bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_threads_leave_a_core_to_each_local_server() {
        assert_eq!(default_threads(50, 2, 1, 1), 1);
        assert_eq!(default_threads(50, 2, 2, 2), 2);
        assert_eq!(default_threads(50, 8, 1, 1), 7);
        assert_eq!(default_threads(50, 64, 1, 0), 8);
        assert_eq!(default_threads(3, 64, 1, 0), 3);
        assert_eq!(default_threads(0, 4, 1, 0), 1);
        assert_eq!(default_threads(50, 1, 3, 3), 3);
    }
}
