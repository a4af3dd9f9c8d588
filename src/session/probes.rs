//! The probes as a session's instrument (the main job, observe mode, `probe calibrate`): probe
//! threads on every node probed, the memory sampler, the slow-log poller and a cluster's
//! topology watcher; one streaming correlator per node; and the exports (probes.csv,
//! writes.csv, stalls.csv, summary.csv, timeline.csv, probes.hlog, run.json).
//!
//! # The way of a probe
//! A probe thread sends its record into the session's channel; the collector here files it in
//! probes.csv (as `--probes` says), hands it to the [`Correlator`] and counts it for the
//! metrics endpoint. At each of the session's settles (about every 20 ms) the correlator's
//! horizon moves on (the slowest probe thread's last intended send; the actor's
//! [`crate::measure::actor::WriteMark`]) and the findings that became final are filed: stalls go
//! to stalls.csv (once the server's logs could name them), writes to summary.csv and the
//! terminal, intervals to timeline.csv and probes.hlog. Nothing grows with the length of the
//! run: what the correlator holds is bounded by the slowest open window (a silence is given up
//! after the probes' `--timeout`), the findings kept for run.json by [`KEEP_STALLS`], the
//! writes by the plan.
//!
//! # Its threads at the end
//! The session stops the actor first and drains the channel; then the probes and the memory
//! sampler, the topology watcher, and the slow-log poller last (its final poll names the last
//! stalls). They are joined without draining the channel: a probe record never blocks (a full
//! channel counts it as dropped), and what may (a node's outage, a topology change, the poller's
//! batch, for at most a second) is rare and finds a channel just drained.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use crossbeam_channel::Receiver;

use super::{
    BUG, EndOfRun, Ended, Instrument, KeyLedger, Limits, RunScope, Session, panicked,
    run_key_prefix, thread_died,
};

use crate::analyze::correlate::{Analysis, CorrelateConfig, Correlator, Finding, Horizon, Stall};
use crate::analyze::correlate::{Interval, WriteSummary};
use crate::measure::actor::Actor;
use crate::measure::clock::{RunClock, wall_time};
use crate::measure::culprit::{
    Culprit, LoopWindow, POLL_EVERY, RemovedKey, ServerCommandEntry, ServerLogBatch,
    ServerLogPoller, WallSpan, eventloop_label, key_label, name_stall,
};
use crate::measure::event::Event;
use crate::measure::hostmem::{MEMORY_SAMPLE_PERIOD, spawn_memory_sampler};
use crate::measure::probe::{ProbeConfig, ProbeShared, spawn_probes};
use crate::measure::serverview::{LatencyEvent, ViewSetup, settings_for_observing};
use crate::measure::slots::hash_tag_for;
use crate::measure::target::ConnInfo;
use crate::measure::target::Target;
use crate::measure::topology::{Shard, Topology, TopologyKind};
use crate::measure::topology_watch::{TopologyWatcher, spawn_topology_watch};
use crate::measure::writer::RecordedWriter;
pub use crate::options::{ProbesExport, RunOptions};
use crate::output::export::{
    HostInfo, Mode, PROBES_CSV, PROBES_HLOG, RUN_JSON, RowAppender, RunJson, RunStatus, STALLS_CSV,
    SUMMARY_CSV, TIMELINE_CSV, TimelineRow, ToolInfo, WRITES_CSV, columns, csv_bytes, write_atomic,
};
use crate::output::export::{NodeEvent, NodeFindings};
use crate::output::hlog::HlogWriter;
use crate::output::metrics::ProbeMetrics;
use crate::record::{NodeCols, NodeRole, ProbeCmd, SameShard, WriteRecord};

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
    /// What the other nodes saw (empty when only one server was probed).
    pub nodes: Vec<NodeFindings>,
    /// Nodes that went down or came back during the run.
    pub node_events: Vec<NodeEvent>,
    /// The run's findings as run.json has them (the same value, written there with --out):
    /// what `--format json` prints.
    pub run_json: RunJson,
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
        /// Wall-clock time of the run's clock zero, µs since the Unix epoch (every `*_us` of
        /// the run counts from it).
        started_unix_us: u64,
    },
    /// A write's figures are final (all probes around it are in).
    Write {
        /// The write as recorded.
        record: &'a WriteRecord,
        /// What the others saw.
        summary: &'a WriteSummary,
    },
    /// A write's figures on another node are final.
    NodeWrite {
        /// The node.
        node: &'a NodeCols,
        /// It holds the written key's slot.
        same_shard: bool,
        /// What that node's other clients saw.
        summary: &'a WriteSummary,
    },
    /// A node went down or came back (runs over several nodes).
    Node(&'a NodeEvent),
    /// A stall episode of the first node is final (with its wall-clock start).
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

/// How often run.json is rewritten while the run goes (and after every write).
const CHECKPOINT_EVERY: Duration = Duration::from_secs(5);

/// The servers a session probes: the first is the one the actor works on (`target`).
#[derive(Debug, Clone)]
pub struct Probed {
    /// Each with its own probe threads and connections, and its own correlator.
    pub nodes: Vec<ProbedNode>,
    /// Hash tag every key of the run carries (`holprobe:<run-id>:{tag}:`), so that a cluster
    /// routes them all to the written shard.
    pub key_tag: Option<String>,
    /// The deployment as discovered at the start (run.json `topology`).
    pub topology: Option<Topology>,
}

/// One server probed.
#[derive(Debug, Clone)]
pub struct ProbedNode {
    /// How to connect (`readonly` for GET probes of a cluster replica).
    pub conn: ConnInfo,
    /// Its address, role and shard, as the exports name it.
    pub cols: NodeCols,
    /// It holds the written key's slot.
    pub same_shard: bool,
    /// Where GET probes' key lives when it is not the first node's: its hash tag and the master
    /// that holds it (the node itself, or its replica's master).
    pub probe_key_home: Option<(String, ConnInfo)>,
}

impl Probed {
    /// Every node of `topology`, the master of shard `written` first (the actor's), then its
    /// replicas, then the other shards' nodes; each connected with `template`'s settings (user,
    /// password, TLS, timeouts) at its own address. In a cluster the run's keys carry a hash tag
    /// of the written shard's slots, and GET probes of the other shards read a key of their own
    /// shard (replicas after `READONLY`).
    pub fn from_topology(
        topology: &Topology,
        written: usize,
        template: &ConnInfo,
        probe_cmd: ProbeCmd,
    ) -> Result<Probed> {
        let shard = topology
            .shards
            .get(written)
            .with_context(|| format!("no shard {written} in the topology"))?;
        let cluster = topology.kind == TopologyKind::Cluster;
        let tag_of = |shard: &Shard| -> Result<Option<String>> {
            if !cluster {
                return Ok(None);
            }
            hash_tag_for(&shard.slots)
                .map(Some)
                .with_context(|| format!("shard {} serves no slot", shard.index))
        };
        let written_tag = tag_of(shard)?;
        let mut order: Vec<&Shard> = vec![shard];
        order.extend(topology.shards.iter().filter(|s| s.index != written));
        let mut nodes = Vec::new();
        for shard in order {
            let tag = tag_of(shard)?;
            let master_conn = template.for_node(&shard.master.address)?;
            for node in shard.nodes() {
                let mut conn = template.for_node(&node.address)?;
                // Every node, masters too (where it changes nothing): a master demoted by a
                // failover mid-run still answers its probes' GETs, as a replica.
                conn.readonly = cluster && probe_cmd == ProbeCmd::Get;
                nodes.push(ProbedNode {
                    conn,
                    cols: NodeCols {
                        node: node.announced.clone(),
                        role: node.role,
                        shard: cluster.then_some(shard.index as u16),
                    },
                    same_shard: shard.index == written,
                    // The written shard's nodes read the run's own probe key (tagged for it);
                    // a replica of a standalone master reads the master's.
                    probe_key_home: match &tag {
                        Some(tag) if shard.index != written => {
                            Some((tag.clone(), master_conn.clone()))
                        }
                        _ => None,
                    },
                });
            }
        }
        Ok(Probed {
            nodes,
            key_tag: written_tag,
            topology: Some(topology.clone()),
        })
    }

    /// The URL's server alone.
    pub fn single(target: &Target) -> Probed {
        Probed {
            nodes: vec![ProbedNode {
                conn: target.conn.clone(),
                cols: NodeCols {
                    node: target.server.address.clone(),
                    role: NodeRole::Master,
                    shard: None,
                },
                same_shard: true,
                probe_key_home: None,
            }],
            key_tag: None,
            topology: None,
        }
    }
}

/// Runs probes with `actor` beside them (none: observe) until the actor is done, the duration is
/// over, `interrupt` is set, or the server goes away; see the module comment.
pub fn measure(
    options: &RunOptions,
    target: &Target,
    actor: Option<Box<dyn Actor>>,
    interrupt: &AtomicBool,
    notify: &mut dyn FnMut(Notice<'_>),
) -> Result<RunReport> {
    measure_nodes(
        options,
        target,
        &Probed::single(target),
        actor,
        None,
        interrupt,
        notify,
    )
}

/// [`measure`] with probes on every node of `probed` (its first node is `target`, the one the
/// actor works on); `metrics`, the `--metrics-addr` endpoint's figures, updated as the run goes.
pub fn measure_nodes(
    options: &RunOptions,
    target: &Target,
    probed: &Probed,
    mut actor: Option<Box<dyn Actor>>,
    metrics: Option<Arc<ProbeMetrics>>,
    interrupt: &AtomicBool,
    notify: &mut dyn FnMut(Notice<'_>),
) -> Result<RunReport> {
    anyhow::ensure!(!probed.nodes.is_empty(), "a run probes at least one server");
    let mut control = target.conn.redis_connection()?;
    let probe_get_key = |key_prefix: &str| format!("{key_prefix}probe");
    // The server's settings for its own view (the guard restores them on every way out), and
    // every key the run may create, checked free and in the ledger from the start.
    let mut scope = RunScope::open(
        target,
        probed.key_tag.as_deref(),
        &match &actor {
            Some(actor) => actor.server_settings(),
            None => settings_for_observing(options.stall_threshold_us),
        },
        target.server.embedded || options.tune_server,
        // The actor prepares once, before the clock starts (the writer lays out its steps and
        // generates its value), so it disturbs nothing measured.
        |key_prefix| {
            let mut keys = match actor.as_mut() {
                Some(actor) => actor.prepare(key_prefix)?,
                None => Vec::new(),
            };
            keys.push(probe_get_key(key_prefix));
            Ok(keys)
        },
    )?;
    let (run_id, key_prefix) = (scope.run_id.clone(), scope.key_prefix.clone());
    let view = ViewSetup {
        reset_stats: target.server.embedded,
        reset_latency: target.server.embedded || scope.tuning.latency_monitor_turned_on(),
    };
    let server_settings = scope.server_settings();

    let probe_config = ProbeConfig {
        threads: options.probe_threads,
        rate_per_thread: options.probe_rate,
        cmd: options.probe_cmd,
        get_key: probe_get_key(&key_prefix),
        realtime: options.realtime,
        first_thread: 0,
        // Over several nodes one going away (a failover) must not end the run.
        keep_going: probed.nodes.len() > 1,
    };
    // GET probes of nodes of other shards read a key of their own shard, set on its master and
    // removed from it at the end.
    let run_base = run_key_prefix(&run_id);
    let mut homed_probe_keys: Vec<String> = Vec::new();
    // The export files first: if they cannot be created, nothing has been written to the
    // server yet.
    let mut out = match &options.out {
        Some(dir) => Some(OutFiles::create(dir, options)?),
        None => None,
    };
    if options.probe_cmd == ProbeCmd::Get {
        redis::cmd("SET")
            .arg(&probe_config.get_key)
            .arg(crate::measure::probe::PROBE_VALUE)
            .query::<()>(&mut control)
            .with_context(|| format!("preparing the probe key {}", probe_config.get_key))?;
        // Replicas read it too: wait (a second at most) until they have it.
        let replicas = |shard: Option<u16>| {
            probed
                .nodes
                .iter()
                .filter(|n| n.cols.role == NodeRole::Replica && n.cols.shard == shard)
                .count()
        };
        let wait_for = |conn: &mut redis::Connection, replicas: usize| {
            if replicas > 0 {
                let _ = redis::cmd("WAIT")
                    .arg(replicas)
                    .arg(1000)
                    .query::<i64>(conn);
            }
        };
        wait_for(&mut control, replicas(probed.nodes[0].cols.shard));
        for node in &probed.nodes {
            if let Some((tag, master)) = &node.probe_key_home {
                let key = format!("{run_base}{{{tag}}}:probe");
                if homed_probe_keys.contains(&key) {
                    continue;
                }
                homed_probe_keys.push(key.clone());
                // In the ledger before it is set: removed at the end from its master.
                scope.keys.created_on(master, &key);
                let set = master.redis_connection().and_then(|mut conn| {
                    redis::cmd("SET")
                        .arg(&key)
                        .arg(crate::measure::probe::PROBE_VALUE)
                        .query::<()>(&mut conn)
                        .map_err(anyhow::Error::from)?;
                    wait_for(&mut conn, replicas(node.cols.shard));
                    Ok(())
                });
                if let Err(err) = set {
                    scope.remove_keys(target, &mut Vec::new());
                    return Err(err.context(format!("preparing the probe key {key} on {master}")));
                }
            }
        }
    }
    let host = HostInfo::read();
    // 65536 slots of ~100 bytes, allocated up front: about 6 MiB, half a minute of headroom
    // at the default rates if the collector stalls (what does not fit is counted as dropped).
    let mut session = Session::start(target, scope, 1 << 16);
    let clock = session.clock;
    // Gives up a run whose threads could not all start.
    let abandon = |session: &mut Session<'_>, threads: &mut Threads, err: anyhow::Error| {
        threads.stop_all();
        session.abandon();
        Err(err)
    };
    let mut threads = Threads::new();
    if let Some(out) = out.as_mut()
        && let Err(err) = out.start_hlog(clock.unix_start_us())
    {
        return abandon(&mut session, &mut threads, err);
    }
    let schedule_start_us = 20_000;
    let mut thread_node = Vec::new();
    for (index, node) in probed.nodes.iter().enumerate() {
        let config = ProbeConfig {
            first_thread: thread_node.len() as u16,
            get_key: match &node.probe_key_home {
                Some((tag, _)) => format!("{run_base}{{{tag}}}:probe"),
                None => probe_config.get_key.clone(),
            },
            ..probe_config.clone()
        };
        match spawn_probes(
            &config,
            &node.conn,
            clock,
            schedule_start_us,
            session.events(),
            Arc::clone(&threads.probes_shared),
        ) {
            Ok(handles) => threads.probes.extend(handles),
            Err(err) => {
                let err = err.context(format!("probing {}", node.cols.node));
                return abandon(&mut session, &mut threads, err);
            }
        }
        thread_node.extend(std::iter::repeat_n(
            index,
            usize::from(options.probe_threads),
        ));
    }
    let steps_total = actor.as_ref().map_or(0, |a| a.steps_total());
    let has_actor = actor.is_some();
    let cluster = probed
        .topology
        .as_ref()
        .is_some_and(|t| t.kind == TopologyKind::Cluster);
    if let Some(actor) = actor.take() {
        let spawned = spawn_memory_sampler(
            clock,
            session.events(),
            Arc::clone(&threads.sampler_stop),
            MEMORY_SAMPLE_PERIOD,
        )
        .and_then(|sampler| {
            threads.sampler = Some(sampler);
            let cluster_nodes = if cluster {
                probed.nodes.iter().map(|n| n.conn.clone()).collect()
            } else {
                Vec::new()
            };
            // The written master's replicas (the first node's shard).
            let replicas = probed
                .nodes
                .iter()
                .filter(|n| n.same_shard && n.cols.role == NodeRole::Replica)
                .count();
            session.spawn_actor(actor, view, cluster_nodes, replicas)
        });
        if let Err(err) = spawned {
            return abandon(&mut session, &mut threads, err);
        }
    }
    // The server's slow log names the stalls, unless it logs every command (the writer's view
    // of each write needs that; its stalls are named by their write instead).
    let log_threshold = session.scope.tuning.effective("slowlog-log-slower-than");
    let naming = if log_threshold.is_none_or(|t| t != 0) {
        match ServerLogPoller::connect(&target.conn)
            .map(|poller| {
                // The event loop's longest cycle per poll, exact on the run's own server when
                // no actor reads the counters a reset clears.
                let poller = if target.server.embedded && !has_actor {
                    poller.resetting_stats()
                } else {
                    poller
                };
                poller.hearing_removed_keys(clock)
            })
            .and_then(|poller| {
                spawn_poller(poller, session.events(), Arc::clone(&threads.poller_stop))
            }) {
            Ok(handle) => {
                threads.poller = Some(handle);
                if let Some(t) = log_threshold
                    && t > i64::try_from(options.stall_threshold_us).unwrap_or(i64::MAX)
                {
                    session.warnings.push(format!(
                        "the server logs commands slower than {:.1} ms only (slowlog-log-slower-than {t}): shorter stalls go unnamed (--tune-server lowers it for the run)",
                        t as f64 / 1e3
                    ));
                }
                Some(Namer::default())
            }
            Err(err) => {
                session.warnings.push(format!(
                    "stalls go unnamed: could not read the server's slow log ({})",
                    crate::error::one_line(&err)
                ));
                None
            }
        }
    } else {
        None
    };
    // A cluster's topology is read every second: a failover shows with its time.
    if cluster {
        let watcher = TopologyWatcher::new(probed.nodes.iter().map(|n| n.conn.clone()).collect());
        match spawn_topology_watch(
            watcher,
            clock,
            session.events(),
            Arc::clone(&threads.watcher_stop),
        ) {
            Ok(handle) => threads.watcher = Some(handle),
            Err(err) => session.warnings.push(format!(
                "topology changes go unseen: {}",
                crate::error::one_line(&err)
            )),
        }
    }
    notify(Notice::Started {
        run_id: &run_id,
        steps_total,
        started_unix_us: clock.unix_start_us(),
    });

    let nodes = probed
        .nodes
        .iter()
        .map(|node| {
            let mut correlator = Correlator::new(CorrelateConfig {
                stall_threshold_us: options.stall_threshold_us,
                max_silence_us: Some(node.conn.command_timeout.as_micros() as u64),
            })
            .with_intervals(options.interval.as_micros().max(1) as u64);
            if !has_actor {
                correlator.memory_ended();
            }
            NodeState {
                cols: node.cols.clone(),
                same_shard: SameShard {
                    same_shard: node.same_shard,
                },
                correlator,
                analysis: Analysis::default(),
                stalls_found: 0,
                stall_ms_total: 0.0,
                hiccups_found: 0,
                down_threads: BTreeSet::new(),
            }
        })
        .collect();
    let state = Collector {
        nodes,
        last_intended: vec![None; thread_node.len()],
        thread_node,
        writes: Vec::new(),
        probes_recorded: 0,
        wrote_since_checkpoint: false,
        metrics,
        node_events: Vec::new(),
        new_node_events: 0,
        naming,
        notes: Vec::new(),
        unix_start_us: clock.unix_start_us(),
    };
    // run.json stores the options as the run used them (the writer with its real key prefix).
    let effective_options = options.recorded(&key_prefix);
    let mut probes = ProbeInstrument {
        state,
        threads,
        out,
        meta: Meta {
            run_id: &run_id,
            key_prefix: &key_prefix,
            clock,
            target,
            topology: probed.topology.as_ref(),
            host: &host,
            options: &effective_options,
        },
        notify,
        // Due at once: run.json says `running` from the loop's first settle on.
        last_checkpoint: Instant::now()
            .checked_sub(CHECKPOINT_EVERY)
            .unwrap_or_else(Instant::now),
    };
    let limits = Limits {
        deadline_us: options
            .duration
            .map(|d| schedule_start_us + d.as_micros() as u64),
        ends_with_actor: true,
    };
    let ended = session.run(&mut probes, limits, interrupt);
    let warnings = std::mem::take(&mut session.warnings);
    probes.finish(ended, warnings, run_id.clone(), server_settings)
}

/// The probes as a session's instrument: their threads (and the memory sampler, the slow-log
/// poller, the topology watcher), the collector of their events and the exports.
struct ProbeInstrument<'a, 'n> {
    state: Collector,
    threads: Threads,
    out: Option<OutFiles>,
    meta: Meta<'a>,
    notify: &'n mut dyn FnMut(Notice<'_>),
    last_checkpoint: Instant,
}

impl Instrument for ProbeInstrument<'_, '_> {
    fn take(&mut self, event: Event, keys: &mut KeyLedger) -> Result<()> {
        self.state.take(event, &mut self.out, keys)
    }

    fn settle(&mut self, writes_from_us: u64, warnings: &[String]) -> Result<()> {
        self.state
            .settle(writes_from_us, &mut self.out, &mut *self.notify)?;
        if self.state.wrote_since_checkpoint || self.last_checkpoint.elapsed() >= CHECKPOINT_EVERY {
            self.last_checkpoint = Instant::now();
            self.state.wrote_since_checkpoint = false;
            self.state.take_baselines();
            if let Some(out) = self.out.as_mut() {
                out.checkpoint(
                    &self.meta,
                    &self.state,
                    RunStatus::Running,
                    None,
                    &self.threads,
                    warnings,
                )?;
            }
        }
        Ok(())
    }

    fn tick(&mut self) {
        (self.notify)(Notice::Tick {
            elapsed: Duration::from_micros(self.meta.clock.now_us()),
            probes: self.state.probes_recorded as usize,
            writes: self.state.writes.len(),
        });
    }

    fn check(&mut self) -> Option<EndOfRun> {
        let threads = &mut self.threads;
        // A probe thread that ended without saying why (a panic) would hold the correlator's
        // horizon for good.
        if threads.probes_shared.failure().is_none()
            && let Some(index) = threads.probes.iter().position(|h| h.is_finished())
        {
            let died = thread_died("a probe thread", threads.probes.swap_remove(index));
            return Some((RunStatus::Failed, Some(died)));
        }
        // Nor may a memory sampler that ended hold the writes' figures; one that panicked
        // fails the run, as does a slow-log poller that did (it ends on its own only when the
        // channel stays full).
        if threads.sampler.as_ref().is_some_and(|h| h.is_finished()) {
            for node in &mut self.state.nodes {
                node.correlator.memory_ended();
            }
            if let Some(panic) = threads.sampler.take().and_then(panicked) {
                let died = format!("the memory sampler thread panicked: {panic}{BUG}");
                return Some((RunStatus::Failed, Some(died)));
            }
        }
        if threads.poller.as_ref().is_some_and(|h| h.is_finished())
            && let Some(panic) = threads.poller.take().and_then(panicked)
        {
            let died = format!("the slow-log poller thread panicked: {panic}{BUG}");
            return Some((RunStatus::Failed, Some(died)));
        }
        // A probe thread that could go on no more (reported beside the channel, so a full one
        // cannot hold it up).
        self.failure()
            .map(|failure| (RunStatus::Failed, Some(failure)))
    }

    fn stop(&mut self, _events: &Receiver<Event>, _keys: &mut KeyLedger) -> Option<String> {
        // Joined without draining the channel (see the module comment).
        self.threads.stop_all()
    }

    fn failure(&self) -> Option<String> {
        self.threads
            .probes_shared
            .failure()
            .map(|(thread, error)| format!("probe thread {thread} lost the server: {error}"))
    }
}

impl ProbeInstrument<'_, '_> {
    /// The final exports and the report, every thread stopped, the keys removed and the
    /// settings restored; after an export error, what the disk takes and the error.
    fn finish(
        mut self,
        ended: Ended,
        mut warnings: Vec<String>,
        run_id: String,
        server_settings: Vec<String>,
    ) -> Result<RunReport> {
        let Ended {
            status,
            status_reason,
            export_error,
        } = ended;
        let (state, out, meta) = (&mut self.state, &mut self.out, &self.meta);
        if let Some(err) = export_error {
            // What is still in memory goes to the files that can take it, and run.json says the
            // run failed (best effort: the disk may be full), before the error is returned.
            state.finish();
            let _ = state.file_findings(out, &mut |_| {});
            let _ = state.file_named(true, out, &mut |_| {});
            state.take_baselines();
            if let Some(out) = out.as_mut() {
                let _ = out.checkpoint(
                    meta,
                    state,
                    RunStatus::Failed,
                    Some(format!(
                        "could not write the exports: {}",
                        crate::error::one_line(&err)
                    )),
                    &self.threads,
                    &warnings,
                );
            }
            return Err(err);
        }
        // A failed write fails the run, in run.json as in the exit status.
        let (status, status_reason) = match crate::output::export::failed_writes(&state.writes) {
            Some(failed) if status == RunStatus::Complete => (RunStatus::Failed, Some(failed)),
            _ => (status, status_reason),
        };
        state.finish();
        state.file_findings(out, &mut *self.notify)?;
        state.file_named(true, out, &mut *self.notify)?;
        for note in std::mem::take(&mut state.notes) {
            if !warnings.contains(&note) {
                warnings.push(note);
            }
        }
        state.take_baselines();
        for node in &mut state.nodes {
            node.analysis.summarize_writes();
        }
        let options = meta.options;
        let shared = &self.threads.probes_shared;
        let realtime_threads = shared.realtime_threads.load(Ordering::Relaxed);
        if options.realtime && realtime_threads < u32::from(options.probe_threads) {
            warnings.push(
                "--realtime: real-time priority was not permitted (needs root or CAP_SYS_NICE); the probes ran at normal priority".into(),
            );
        }
        if let Some(note) = late_probe_note(&state.nodes[0].analysis.writes, options.realtime) {
            warnings.push(note);
        }
        let dropped = shared.dropped.load(Ordering::Relaxed);
        if dropped > 0 {
            warnings.push(format!(
                "{dropped} probe records were dropped because the collector fell behind: the figures miss them"
            ));
        }
        let first = &state.nodes[0];
        let omitted = first.stalls_found - first.analysis.stalls.len() as u64;
        if omitted > 0 {
            warnings.push(format!(
                "{} stalls in all ({:.1} ms): run.json keeps the {} longest, stalls.csv every one",
                first.stalls_found,
                first.stall_ms_total,
                first.analysis.stalls.len()
            ));
        }
        let run_json = run_json(
            meta,
            state,
            status,
            status_reason.clone(),
            &self.threads,
            &warnings,
        );
        if let Some(out) = out.as_mut() {
            out.flush_rows(state)?;
            out.write_run_json(&run_json)?;
        }
        Ok(RunReport {
            run_json,
            run_id,
            status,
            status_reason,
            nodes: state.nodes[1..].iter().map(NodeState::findings).collect(),
            node_events: std::mem::take(&mut state.node_events),
            analysis: std::mem::take(&mut state.nodes[0].analysis),
            writes: std::mem::take(&mut state.writes),
            probes_recorded: state.probes_recorded,
            stalls_found: state.nodes[0].stalls_found,
            stall_ms_total: state.nodes[0].stall_ms_total,
            hiccups_found: state.nodes[0].hiccups_found,
            probes_dropped: dropped,
            warnings,
            started_unix_us: meta.clock.unix_start_us(),
            server_settings,
        })
    }
}

/// The probe instrument's threads and their stop flags: stopped (and joined) in the order that
/// keeps every record (the actor, the session's, is stopped before them).
struct Threads {
    probes: Vec<JoinHandle<()>>,
    probes_shared: Arc<ProbeShared>,
    sampler: Option<JoinHandle<()>>,
    sampler_stop: Arc<AtomicBool>,
    poller: Option<JoinHandle<()>>,
    poller_stop: Arc<AtomicBool>,
    watcher: Option<JoinHandle<()>>,
    watcher_stop: Arc<AtomicBool>,
}

impl Threads {
    fn new() -> Threads {
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

    /// Stops and joins every thread. Returns what the first thread that panicked said, if one
    /// did.
    fn stop_all(&mut self) -> Option<String> {
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
        self.watcher_stop.store(true, Ordering::Relaxed);
        if let Some(handle) = self.watcher.take() {
            let _ = handle.join();
        }
        // Last: its final poll covers the stalls the last probes closed.
        self.poller_stop.store(true, Ordering::Relaxed);
        if let Some(handle) = self.poller.take() {
            note("slow-log poller", handle);
        }
        first
    }
}

struct Meta<'a> {
    run_id: &'a str,
    key_prefix: &'a str,
    clock: RunClock,
    target: &'a Target,
    topology: Option<&'a Topology>,
    host: &'a HostInfo,
    options: &'a RunOptions<RecordedWriter>,
}

struct Collector {
    /// One per node probed; the first is the server the actor works on (the URL's).
    nodes: Vec<NodeState>,
    /// The node of each probe thread, by thread number.
    thread_node: Vec<usize>,
    writes: Vec<WriteRecord>,
    last_intended: Vec<Option<u64>>,
    probes_recorded: u64,
    /// A write's figures came since run.json was last written.
    wrote_since_checkpoint: bool,
    unix_start_us: u64,
    metrics: Option<Arc<ProbeMetrics>>,
    /// The first node's stalls waiting for the server's slow log to name them (`None`: no
    /// naming).
    naming: Option<Namer>,
    /// Notes from the threads (the slow-log poller), for the run's warnings.
    notes: Vec<String>,
    /// Nodes that went down or came back, in time order (run.json `node_events`).
    node_events: Vec<NodeEvent>,
    /// Of those, the ones not yet shown.
    new_node_events: usize,
}

/// What the session keeps of one node probed: its correlator and its findings.
struct NodeState {
    cols: NodeCols,
    same_shard: SameShard,
    correlator: Correlator,
    /// The findings kept: every write, at most [`KEEP_STALLS`] stalls and as many hiccups.
    analysis: Analysis,
    stalls_found: u64,
    stall_ms_total: f64,
    hiccups_found: u64,
    /// Its probe threads whose server is away.
    down_threads: BTreeSet<u16>,
}

impl NodeState {
    /// Its findings as run.json's `nodes` lists them.
    fn findings(&self) -> NodeFindings {
        NodeFindings {
            node: self.cols.clone(),
            same_shard: self.same_shard.same_shard,
            baseline: self.analysis.baseline.clone(),
            summary: self.analysis.writes.clone(),
            stalls_found: self.stalls_found,
            stall_ms_total: self.stall_ms_total,
            client_hiccups_found: self.hiccups_found,
            longest_stalls: longest(&self.analysis.stalls, NODE_STALLS_KEPT),
        }
    }
}

/// Stalls each node other than the first keeps in run.json (stalls.csv has every one).
const NODE_STALLS_KEPT: usize = 20;

/// The `n` longest of `stalls`, in time order.
fn longest(stalls: &[Stall], n: usize) -> Vec<Stall> {
    let mut kept: Vec<&Stall> = stalls.iter().collect();
    kept.sort_by(|a, b| b.duration_ms.total_cmp(&a.duration_ms));
    kept.truncate(n);
    kept.sort_by_key(|s| s.start_us);
    kept.into_iter().cloned().collect()
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
    /// Keys the server expired or evicted (keyspace notifications), oldest first.
    removed_keys: std::collections::VecDeque<RemovedKey>,
    /// The event loop's longest cycle, poll window by poll window.
    loop_windows: std::collections::VecDeque<LoopWindow>,
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
        self.removed_keys.extend(batch.poll.removed_keys);
        for event in batch.poll.latency {
            self.events
                .retain(|e| e.name != event.name || e.at_unix_s != event.at_unix_s);
            self.events.push(event);
        }
        if batch.polled_unix_us > 0 {
            if let Some(max_us) = batch.poll.eventloop_max_us
                && self.read_through_unix_us > 0
            {
                self.loop_windows.push_back(LoopWindow {
                    start_unix_us: self.read_through_unix_us,
                    end_unix_us: batch.polled_unix_us,
                    max_us,
                });
            }
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
        while self
            .removed_keys
            .front()
            .is_some_and(|k| k.at_unix_us < horizon_s.saturating_mul(1_000_000))
        {
            self.removed_keys.pop_front();
        }
        while self
            .loop_windows
            .front()
            .is_some_and(|w| w.end_unix_us < horizon_s.saturating_mul(1_000_000))
        {
            self.loop_windows.pop_front();
        }
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
            stall.server_key = key_label(span, self.removed_keys.make_contiguous());
            let event_loop = eventloop_label(span, self.loop_windows.make_contiguous());
            // `latency command 80ms, expire-cycle 12ms; event loop max 80.2ms`
            let events = server_event.map(|events| format!("latency {events}"));
            stall.server_event = match (events, event_loop) {
                (Some(events), Some(event_loop)) => Some(format!("{events}; {event_loop}")),
                (events, event_loop) => events.or(event_loop),
            };
            out.push(stall);
        }
        out
    }
}

impl Collector {
    /// Files one event (the actor's last word is the session's).
    fn take(
        &mut self,
        event: Event,
        out: &mut Option<OutFiles>,
        keys: &mut KeyLedger,
    ) -> Result<()> {
        match event {
            Event::Probe(probe) => {
                let thread = probe.thread as usize;
                let Some(&index) = self.thread_node.get(thread) else {
                    return Ok(());
                };
                let node = &mut self.nodes[index];
                if let Some(out) = out.as_mut()
                    && out.probes_export.keeps(&probe, out.stall_threshold_us)
                {
                    out.probes.push(&(&probe, &node.cols))?;
                }
                self.last_intended[thread] = Some(probe.intended_us);
                self.probes_recorded += 1;
                if let Some(metrics) = &self.metrics {
                    metrics.probe(&node.cols.node, probe.latency_us, probe.ok);
                }
                node.correlator.probe(&probe);
            }
            Event::Write(write) => {
                if let Some(out) = out.as_mut() {
                    // A write a failover redirected says where it went.
                    let cols = match &write.sent_to {
                        Some(node) => NodeCols {
                            node: node.clone(),
                            ..self.nodes[0].cols.clone()
                        },
                        None => self.nodes[0].cols.clone(),
                    };
                    out.writes.push(&(&*write, &cols))?;
                    out.writes.flush()?;
                }
                keys.track(&write);
                for node in &mut self.nodes {
                    let mut record = (*write).clone();
                    // A replica of the written master applies the write after its master has
                    // executed it: its window of the write ends when it had (the writer's WAIT).
                    if node.same_shard.same_shard
                        && node.cols.role == NodeRole::Replica
                        && let Some(replicated_us) = write.replicated_us
                    {
                        record.reply_us = record.reply_us.max(replicated_us);
                    }
                    node.correlator.write(record);
                }
                self.writes.push(*write);
            }
            Event::Memory(sample) => {
                for node in &mut self.nodes {
                    node.correlator.memory(sample);
                }
            }
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
            Event::WriterDone | Event::WriterFailed(_) | Event::Load(_) => {}
            Event::Skipped { thread, through_us } => {
                if let Some(slot) = self.last_intended.get_mut(thread as usize) {
                    *slot = Some(slot.unwrap_or(0).max(through_us));
                }
            }
            Event::NodeState {
                thread,
                at_us,
                error,
            } => {
                let Some(&index) = self.thread_node.get(thread as usize) else {
                    return Ok(());
                };
                let node = &mut self.nodes[index];
                let was_down = !node.down_threads.is_empty();
                match &error {
                    Some(_) => node.down_threads.insert(thread),
                    None => node.down_threads.remove(&thread),
                };
                let is_down = !node.down_threads.is_empty();
                // Once per outage of the node, not once per thread.
                if was_down != is_down {
                    let event = NodeEvent {
                        node: node.cols.node.clone(),
                        at_us,
                        wall: wall_time(self.unix_start_us + at_us),
                        event: if is_down { "down" } else { "back" }.into(),
                        detail: error,
                    };
                    self.node_events.push(event);
                    self.new_node_events += 1;
                }
            }
            Event::Topology { at_us, changes } => {
                for (node, detail) in changes {
                    self.node_events.push(NodeEvent {
                        node,
                        at_us,
                        wall: wall_time(self.unix_start_us + at_us),
                        event: "topology".into(),
                        detail: Some(detail),
                    });
                    self.new_node_events += 1;
                }
            }
        }
        Ok(())
    }

    /// Moves the correlator's horizon on and files what became final (`writes_from_us`: the
    /// actor's mark, read before the channel was drained).
    fn settle(
        &mut self,
        writes_from_us: u64,
        out: &mut Option<OutFiles>,
        notify: &mut dyn FnMut(Notice<'_>),
    ) -> Result<()> {
        // Every thread of a node has delivered up to its last intended send; a thread that has
        // delivered nothing yet holds its node back.
        for (index, node) in self.nodes.iter_mut().enumerate() {
            let probes_through_us = self
                .thread_node
                .iter()
                .zip(&self.last_intended)
                .filter(|(n, _)| **n == index)
                .map(|(_, l)| l.unwrap_or(0))
                .min()
                .unwrap_or(0);
            node.correlator.advance(Horizon {
                probes_through_us,
                writes_from_us,
            });
        }
        self.file_findings(out, notify)?;
        self.file_named(false, out, notify)?;
        let first_new = self.node_events.len() - self.new_node_events;
        for event in &self.node_events[first_new..] {
            notify(Notice::Node(event));
        }
        if self.new_node_events > 0 {
            self.new_node_events = 0;
            self.wrote_since_checkpoint = true;
        }
        Ok(())
    }

    /// Files one final stall (named, when naming is on).
    fn file_stall(
        &mut self,
        index: usize,
        stall: Stall,
        out: &mut Option<OutFiles>,
        notify: &mut dyn FnMut(Notice<'_>),
    ) -> Result<()> {
        let node = &mut self.nodes[index];
        node.stalls_found += 1;
        node.stall_ms_total += stall.duration_ms;
        if let Some(metrics) = &self.metrics {
            metrics.stall(&node.cols.node, stall.end_us - stall.start_us);
        }
        if let Some(out) = out.as_mut() {
            out.stalls.push(&(&stall, &node.cols))?;
        }
        if index == 0 {
            notify(Notice::Stall(&stall));
        }
        keep_bounded(&mut node.analysis.stalls, stall);
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
            self.file_stall(0, stall, out, notify)?;
        }
        Ok(())
    }

    /// Takes the correlators' final findings into the exports, the terminal and the kept
    /// analysis.
    fn file_findings(
        &mut self,
        out: &mut Option<OutFiles>,
        notify: &mut dyn FnMut(Notice<'_>),
    ) -> Result<()> {
        for index in 0..self.nodes.len() {
            let findings = self.nodes[index].correlator.drain();
            for finding in findings {
                self.file_finding(index, finding, out, notify)?;
            }
        }
        Ok(())
    }

    fn file_finding(
        &mut self,
        index: usize,
        finding: Finding,
        out: &mut Option<OutFiles>,
        notify: &mut dyn FnMut(Notice<'_>),
    ) -> Result<()> {
        match finding {
            Finding::Stall(mut stall) => {
                stall.wall_start = Some(wall_time(self.unix_start_us + stall.start_us));
                // The server-log poller reads the first node's logs.
                match self.naming.as_mut() {
                    Some(namer) if index == 0 => namer.waiting.push_back(stall),
                    _ => self.file_stall(index, stall, out, notify)?,
                }
            }
            Finding::Hiccup(mut hiccup) => {
                hiccup.wall_start = Some(wall_time(self.unix_start_us + hiccup.start_us));
                let node = &mut self.nodes[index];
                node.hiccups_found += 1;
                keep_bounded(&mut node.analysis.client_hiccups, hiccup);
            }
            Finding::Write(summary) => {
                let record = self
                    .writes
                    .iter()
                    .find(|w| w.seq == summary.seq)
                    .expect("a summary's write was taken");
                let node = &self.nodes[index];
                if index == 0 {
                    notify(Notice::Write {
                        record,
                        summary: &summary,
                    });
                } else {
                    notify(Notice::NodeWrite {
                        node: &node.cols,
                        same_shard: node.same_shard.same_shard,
                        summary: &summary,
                    });
                }
                self.nodes[index].analysis.writes.push(summary);
                self.wrote_since_checkpoint = true;
                if let Some(out) = out.as_mut() {
                    out.stalls.flush()?;
                    write_atomic(&out.dir.join(SUMMARY_CSV), &self.summary_csv()?)?;
                }
            }
            Finding::Interval(interval) => {
                let node = &self.nodes[index];
                if let Some(metrics) = &self.metrics {
                    metrics.set_longest_stall(
                        &node.cols.node,
                        (interval.longest_stall_ms * 1e3) as u64,
                    );
                }
                if let Some(out) = out.as_mut() {
                    if let Some(hlog) = out.hlog.as_mut() {
                        // The first node's histograms untagged, the others tagged with their
                        // address (the interval-log format's `Tag=`).
                        let tag = (index > 0).then_some(node.cols.node.as_str());
                        hlog.append(
                            interval.start_us,
                            interval.length_us,
                            &interval.latency,
                            tag,
                        )?;
                    }
                    out.timeline.push(&TimelineRow::new(
                        &interval,
                        &node.cols,
                        self.unix_start_us,
                    ))?;
                    out.timeline.flush()?;
                    out.stalls.flush()?;
                    out.probes.flush()?;
                }
                if index == 0 {
                    notify(Notice::Interval {
                        interval: &interval,
                        started_unix_us: self.unix_start_us,
                    });
                }
            }
        }
        Ok(())
    }

    /// summary.csv: every node's row of each write, in write order, the first node's first.
    fn summary_csv(&self) -> Result<Vec<u8>> {
        let mut rows: Vec<(&WriteSummary, &NodeCols, &SameShard)> = self
            .nodes
            .iter()
            .flat_map(|node| {
                node.analysis
                    .writes
                    .iter()
                    .map(move |w| (w, &node.cols, &node.same_shard))
            })
            .collect();
        rows.sort_by_key(|(w, _, _)| w.seq);
        csv_bytes(&rows, columns::SUMMARY)
    }

    /// Every correlator: no more events; the baselines into the kept findings.
    fn finish(&mut self) {
        for node in &mut self.nodes {
            node.correlator.finish();
        }
    }

    fn take_baselines(&mut self) {
        for node in &mut self.nodes {
            node.analysis.baseline = node.correlator.baseline();
        }
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
        // run.json also when the rows could not go (a full disk): it says how the run ended.
        let flushed = self.flush_rows(state);
        let run_json = run_json(meta, state, status, status_reason, threads, warnings);
        self.write_run_json(&run_json)?;
        flushed
    }

    /// Every appended row on disk, and summary.csv rewritten.
    fn flush_rows(&mut self, state: &Collector) -> Result<()> {
        self.probes.flush()?;
        self.writes.flush()?;
        self.stalls.flush()?;
        self.timeline.flush()?;
        write_atomic(&self.dir.join(SUMMARY_CSV), &state.summary_csv()?)
    }

    fn write_run_json(&self, run_json: &RunJson) -> Result<()> {
        let json = serde_json::to_vec_pretty(run_json).context("encoding run.json")?;
        write_atomic(&self.dir.join(RUN_JSON), &json)
    }
}

/// run.json's findings as they stand: written by every checkpoint, and at the end also handed
/// to the caller.
fn run_json(
    meta: &Meta<'_>,
    state: &Collector,
    status: RunStatus,
    status_reason: Option<String>,
    threads: &Threads,
    warnings: &[String],
) -> RunJson {
    let shared = &threads.probes_shared;
    let first = &state.nodes[0];
    let analysis = &first.analysis;
    RunJson {
        tool: ToolInfo::default(),
        mode: Mode::Probe,
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
        stalls_found: Some(first.stalls_found),
        stall_ms_total: Some(first.stall_ms_total),
        client_hiccups_found: Some(first.hiccups_found),
        analysis: analysis.clone(),
        node: Some(first.cols.clone()),
        topology: meta.topology.cloned(),
        node_events: state.node_events.clone(),
        nodes: state.nodes[1..].iter().map(NodeState::findings).collect(),
        warnings: warnings.to_vec(),
    }
}
