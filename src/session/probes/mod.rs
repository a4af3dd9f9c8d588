//! The probes as a session's instrument (the main job, observe mode, `probe calibrate`): probe
//! threads on every node probed, the memory sampler, the slow-log poller and a cluster's
//! topology watcher; one streaming correlator per node; and the exports (probes.csv,
//! writes.csv, stalls.csv, summary.csv, timeline.csv, probes.hlog, run.json).
//!
//! # The way of a probe
//! A probe thread sends its record into the session's channel; the collector here files it in
//! probes.csv (as `--probes` says), hands it to the [`Correlator`] and counts it for the
//! metrics endpoint. At each of the session's settles (about every 50 ms) the correlator's
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
//! stalls). They are joined without draining the channel: no send blocks (a probe record past
//! the channel's capacity is counted as dropped; a node's outage, a topology change and the
//! poller's batch are rare and always go in).
//!
//! # A node that joins
//! The topology watcher (a cluster's, or a standalone master's replicas) also says when a node
//! not probed so far is ready (new in the topology, a replica attached to a standalone master
//! with `REPLICAOF`, or a replica left out at the start that came online): the instrument starts its
//! probe threads and its correlator there and then ([`joins`]), numbered on from the last, so
//! its rows start at its join (run.json: a `joined` node event, and the node's `joined_us`).
//! Its threads are the probes' like any other, stopped with them; once the instrument stops,
//! a join still in the channel starts nothing.

mod collector;
mod cpu_wait;
mod joins;
mod namer;
mod nodes;
mod report;
mod sinks;
mod threads;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use crossbeam_channel::Receiver;

use crate::session::{
    BUG, EndOfRun, Ended, Instrument, KeyLedger, Limits, RunName, RunScope, RunSpec, Session,
    panicked, run_key_prefix, thread_died,
};

use crate::measure::actor::Actor;
use crate::measure::actor::ProbesStarted;
use crate::measure::culprit::ServerLogPoller;
use crate::measure::event::Event;
use crate::measure::hostmem::{MEMORY_SAMPLE_PERIOD, spawn_memory_sampler};
use crate::measure::probe::{ProbeConfig, probe_allowed, spawn_probes};
use crate::measure::serverview::{ViewSetup, settings_for_observing};
use crate::measure::target::Target;
use crate::measure::topology::TopologyKind;
use crate::measure::topology_watch::{JoinedNode, TopologyWatcher, spawn_topology_watch};
pub use crate::options::RunOptions;
use crate::output::export::RunStatus;
use crate::record::{NodeRole, ProbeCmd};
use collector::{Collector, Correlation, Meta, NodeState, run_json};
use joins::Joiner;
use namer::Namer;
pub use nodes::{Probed, ProbedNode};
#[cfg(test)]
pub(crate) use report::cpu_wait_in_stalls_ms;
pub use report::{KEEP_STALLS, Notice, RunReport};
pub(crate) use report::{cpu_wait_note, late_probe_note, observe_cpu_wait_note, query_buffer_note};
use report::{open_at_stop_note, timed_out_note};
use sinks::{MetricsSink, ProbeFiles, ProbeFinding, ProbeSinks, ProbeTerminal};
use threads::Threads;
pub use threads::spawn_poller;

/// How often run.json is rewritten while the run goes (and after every write).
const CHECKPOINT_EVERY: Duration = Duration::from_secs(5);

/// Runs probes on every node of `probed` (its first node is `target`, the one the actor works
/// on) with `actor` beside them (none: observe) until the actor is done, the duration is over,
/// `interrupt` is set, or the server goes away; see the module comment. `spec`: the command
/// (run.json's `mode`) and the `--metrics-addr` endpoint's figures, updated as the run goes.
pub fn measure_nodes(
    options: &RunOptions,
    target: &Target,
    probed: &Probed,
    mut actor: Option<Box<dyn Actor>>,
    spec: RunSpec,
    interrupt: &AtomicBool,
    notify: &mut dyn FnMut(Notice<'_>),
) -> Result<RunReport> {
    anyhow::ensure!(!probed.nodes.is_empty(), "a run probes at least one server");
    let mut control = target.conn.redis_connection()?;
    let probe_get_key = |key_prefix: &str| format!("{key_prefix}probe");
    let name = RunName::new(probed.key_tag.as_deref());
    // A probe the user may not send fails every time: said before anything is set or started
    // (every probe refused by the ACL made a `complete` run of error replies).
    probe_allowed(
        &target.conn,
        options.probe_cmd,
        &probe_get_key(&name.key_prefix),
    )?;
    // The server's settings for its own view (the guard restores them on every way out), and
    // every key the run may create, checked free and in the ledger from the start.
    let mut scope = RunScope::open(
        target,
        &name,
        &match &actor {
            Some(actor) => actor.server_settings(),
            None => settings_for_observing(options.stall_threshold_us),
        },
        target.server.embedded || options.tune_server,
        actor
            .as_ref()
            .is_none_or(|actor| actor.reclaims_dead_runs()),
        // The actor prepares once, before the clock starts (the writer lays out its steps and
        // generates its value), so it disturbs nothing measured.
        |key_prefix| {
            let mut keys = match actor.as_mut() {
                Some(actor) => actor.prepare(key_prefix)?,
                None => Vec::new(),
            };
            // GET probes read a key the session sets: a value of the run's like the actor's.
            if options.probe_cmd == ProbeCmd::Get {
                keys.push(probe_get_key(key_prefix));
            }
            Ok(keys)
        },
    )?;
    // PING probes create no key: their run sends the cleanup nothing for them (a scan's UNLINK
    // of a key never made was a write command on the user's server; keys_replay's test).
    let view = ViewSetup {
        reset_stats: target.server.embedded,
        reset_latency: target.server.embedded,
        server_pid: target
            .embedded
            .as_ref()
            .and_then(|server| server.pid())
            .or(target.server.local_pid),
    };
    let server_settings = scope.server_settings();

    let probe_config = ProbeConfig {
        threads: options.probe_threads,
        rate_per_thread: options.probe_rate,
        cmd: options.probe_cmd,
        get_key: probe_get_key(&name.key_prefix),
        realtime: options.realtime,
        first_thread: 0,
        // Over several nodes one going away (a failover) must not end the run.
        keep_going: probed.nodes.len() > 1,
    };
    // GET probes of nodes of other shards read a key of their own shard, set on its master and
    // removed from it at the end.
    let run_base = run_key_prefix(&name.run_id);
    let mut homed_probe_keys: Vec<String> = Vec::new();
    // The export files first: if they cannot be created, nothing has been written to the
    // server yet.
    let mut out = match &options.out {
        Some(dir) => Some(ProbeFiles::create(dir, options)?),
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
    // Up to 65536 probe records of ~100 bytes may wait (about 6 MiB, half a minute of headroom
    // at the default rates if the collector stalls; what does not fit is counted as dropped),
    // the memory taken only as they do.
    let mut session = Session::start(target, scope, name, spec, 1 << 16);
    let run = session.run.clone();
    let clock = run.clock;
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
            let probes_started =
                ProbesStarted::new(Arc::clone(&threads.probes_shared), thread_node.len() as u32);
            session.spawn_actor(actor, view, cluster_nodes, replicas, probes_started)
        });
        if let Err(err) = spawned {
            return abandon(&mut session, &mut threads, err);
        }
    }
    // The server's slow log names the stalls. Where it logs every command (the writer's view
    // of each write needs that), it is read back only after a command the LATENCY monitor timed
    // at 10 ms or more; LATENCY events and the keys the server removed name the rest (another
    // key's expiry, in a gap or in a write's window).
    let log_threshold = session.scope.tuning.effective("slowlog-log-slower-than");
    let logs_everything = log_threshold == Some(0);
    let naming = {
        let connected = if logs_everything {
            ServerLogPoller::connect_to_a_log_of_every_command(&target.conn)
        } else {
            ServerLogPoller::connect(&target.conn)
        };
        match connected
            .map(|poller| {
                // The event loop's longest cycle per poll, exact on the run's own server when
                // no actor reads the counters a reset clears.
                let poller = if target.server.embedded && !has_actor {
                    poller.resetting_stats()
                } else {
                    poller
                };
                let poller = poller.named(&crate::measure::culprit::run_client_name(
                    crate::measure::culprit::POLLER_CLIENT_NAME,
                    &run_base,
                ));
                poller.hearing_removed_keys(clock)
            })
            .and_then(|poller| {
                spawn_poller(poller, session.events(), Arc::clone(&threads.poller_stop))
            }) {
            Ok(handle) => {
                threads.poller = Some(handle);
                // The owner's server logs every command: said, since the slow log then names
                // only the stalls of a command LATENCY timed (the hostile trial's run named none
                // and said nothing).
                let set_by_the_run = target.server.embedded
                    || options.tune_server
                    || session
                        .scope
                        .tuning
                        .changed()
                        .iter()
                        .any(|c| c.name == "slowlog-log-slower-than");
                if logs_everything && !set_by_the_run {
                    session.warnings.push(
                        "the server logs every command (slowlog-log-slower-than 0): the slow log is read back to name a stall only after a command the LATENCY monitor timed at 10 ms or more (each probe's entry is in it); shorter stalls are named by LATENCY events and the keys the server removed only".into(),
                    );
                }
                if let Some(t) = log_threshold
                    && !logs_everything
                    && t > i64::try_from(options.stall_threshold_us).unwrap_or(i64::MAX)
                {
                    session.warnings.push(format!(
                        "the server logs commands slower than {:.1} ms only (slowlog-log-slower-than {t}): shorter stalls go unnamed (--tune-server lowers it for the run)",
                        t as f64 / 1e3
                    ));
                }
                Some(Namer {
                    own_prefix: run_base.as_bytes().to_vec(),
                    ..Namer::default()
                })
            }
            Err(err) => {
                session.warnings.push(format!(
                    "stalls go unnamed: could not read the server's slow log ({})",
                    crate::error::one_line(&err)
                ));
                None
            }
        }
    };
    // A cluster's topology is read every second, and so is a standalone master's list of
    // replicas: a failover shows with its time, and a node that comes is probed from then on.
    let mut joiner = None;
    let standalone = !cluster && (probed.topology.is_some() || probed.lone_master.is_some());
    if cluster || standalone {
        let watcher = match cluster {
            true => TopologyWatcher::new(probed.nodes.iter().map(|n| n.conn.clone()).collect()),
            // The first node is the master (the written one, or the observed replica's).
            false => TopologyWatcher::standalone(
                probed.nodes[0].conn.clone(),
                probed.nodes[0].cols.node.clone(),
            ),
        };
        let watcher = watcher.joining(
            probed.nodes[0].conn.clone(),
            probed.addresses.clone(),
            probed.nodes.iter().map(|n| n.cols.node.clone()),
            &probed
                .nodes
                .iter()
                .map(|n| n.conn.address())
                .collect::<Vec<_>>(),
        );
        match spawn_topology_watch(
            watcher,
            clock,
            session.events(),
            Arc::clone(&threads.watcher_stop),
        ) {
            Ok(handle) => {
                threads.watcher = Some(handle);
                joiner = Some(Joiner {
                    probed,
                    config: probe_config.clone(),
                    run_base: run_base.clone(),
                    homed_keys: homed_probe_keys.clone(),
                    clock,
                    events: session.events(),
                });
            }
            Err(err) => session.warnings.push(format!(
                "topology changes go unseen: {}",
                crate::error::one_line(&err)
            )),
        }
    }
    notify(Notice::Started {
        run_id: &run.name.run_id,
        steps_total,
        started_unix_us: clock.unix_start_us(),
    });

    let correlation = Correlation {
        stall_threshold_us: options.stall_threshold_us,
        interval_us: options.interval.as_micros().max(1) as u64,
    };
    let nodes = probed
        .nodes
        .iter()
        .map(|node| NodeState::new(node, correlation, !has_actor, 0, false))
        .collect();
    let state = Collector {
        nodes,
        last_intended: vec![None; thread_node.len()],
        thread_node,
        writes: Vec::new(),
        probes_recorded: 0,
        probe_errors: (0, None),
        wrote_since_checkpoint: false,
        node_events: Vec::new(),
        new_node_events: 0,
        naming,
        notes: Vec::new(),
        unix_start_us: clock.unix_start_us(),
    };
    // run.json stores the options as the run used them (the writer with its real key prefix).
    let effective_options = options.recorded(&run.name.key_prefix);
    // The files first: an export error stops a finding before the terminal shows it.
    let mut sinks = ProbeSinks::new();
    if let Some(files) = out {
        sinks.push(Box::new(files));
    }
    if let Some(metrics) = &run.metrics {
        sinks.push(Box::new(MetricsSink(Arc::clone(metrics))));
    }
    sinks.push(Box::new(ProbeTerminal(notify)));
    let mut probes = ProbeInstrument {
        state,
        threads,
        joiner,
        correlation,
        sinks,
        meta: Meta {
            run: &run,
            target,
            topology: probed.topology.as_ref(),
            options: &effective_options,
        },
        // Due at once: run.json says `running` from the loop's first settle on.
        last_checkpoint: Instant::now()
            .checked_sub(CHECKPOINT_EVERY)
            .unwrap_or_else(Instant::now),
        observe_cpu_from: (!has_actor)
            .then_some(view.server_pid)
            .flatten()
            .and_then(|pid| crate::measure::schedstat::main_thread_times(pid).map(|t| (pid, t))),
        observe_cpu_wait: cpu_wait::StallCpuWait::default(),
    };
    if let Some((_, from)) = probes.observe_cpu_from {
        probes
            .observe_cpu_wait
            .add((run.clock.now_us(), from.wait_ns));
    }
    let limits = Limits {
        deadline_us: options
            .duration
            .map(|d| schedule_start_us + d.as_micros() as u64),
        ends_with_actor: true,
    };
    let ended = session.run(&mut probes, limits, interrupt);
    let warnings = std::mem::take(&mut session.warnings);
    // Said restored only when they were: a restore that failed is a warning naming them.
    // Nor those the restore found changed since by someone else (a server restarted with
    // values of its own: the trial read "restored" for four settings it had left).
    let server_settings = if session.scope.tuning.changed().is_empty() {
        let left = session.scope.tuning.left_as_found();
        server_settings
            .into_iter()
            .filter(|s| !left.iter().any(|name| s.starts_with(&format!("{name} "))))
            .collect()
    } else {
        Vec::new()
    };
    probes.finish(ended, warnings, server_settings)
}

/// The warning of probes that failed; `files`: the session writes probes.csv, whose error
/// column holds each one.
fn probes_failed_note(failed: u64, first: &str, files: bool) -> String {
    if files {
        format!("{failed} probe(s) failed (probes.csv's error column); the first: {first}")
    } else {
        format!("{failed} probe(s) failed; the first: {first}")
    }
}

/// The warning of stall episodes past those kept in memory; `files`: the session writes
/// run.json's stalls list and stalls.csv.
fn stalls_kept_note(found: u64, total_ms: f64, kept: usize, files: bool) -> String {
    if files {
        format!(
            "{found} stalls in all ({total_ms:.1} ms): run.json keeps the {kept} longest, stalls.csv every one"
        )
    } else {
        format!(
            "{found} stalls in all ({total_ms:.1} ms): only the {kept} longest were kept, and figures drawn from the stall list count those only"
        )
    }
}

/// The probes as a session's instrument: their threads (and the memory sampler, the slow-log
/// poller, the topology watcher), the collector of their events and the exports.
struct ProbeInstrument<'a, 'n> {
    state: Collector,
    threads: Threads,
    /// Starts the nodes that join (`None`: no topology watcher, or the instrument stopped).
    joiner: Option<Joiner<'a>>,
    /// How a joined node's correlator is set.
    correlation: Correlation,
    /// Where its findings go: the files, the metrics endpoint, the caller's notices.
    sinks: ProbeSinks<'n>,
    meta: Meta<'a>,
    last_checkpoint: Instant,
    /// A run without writes on a server whose main thread the tool can read: its pid and times
    /// at the start, for the run's CPU wait at the end ([`observe_cpu_wait_note`]).
    observe_cpu_from: Option<(u32, crate::measure::schedstat::ThreadTimes)>,
    /// With `observe_cpu_from`: the main thread's cumulative wait for a CPU, read at each
    /// settle, so that the end can tell the wait inside stalls from the rest.
    observe_cpu_wait: cpu_wait::StallCpuWait,
}

/// Hands the stalls found since the last call to an observe run's reading of its server's CPU
/// wait (the first node's: the server whose main thread is read), and forgets the rest: kept,
/// every node's grew without end in a run with writes or an hour-long watch.
fn hand_over_stall_spans(nodes: &mut [NodeState], mut wait: Option<&mut cpu_wait::StallCpuWait>) {
    for (index, node) in nodes.iter_mut().enumerate() {
        let spans = std::mem::take(&mut node.stall_spans);
        if index == 0
            && let Some(wait) = wait.as_deref_mut()
        {
            wait.add_stalls(spans);
        }
    }
}

impl Instrument for ProbeInstrument<'_, '_> {
    fn take(&mut self, event: Event, keys: &mut KeyLedger) -> Result<()> {
        match event {
            Event::Topology {
                at_us,
                changes,
                joined,
            } => {
                let changes = Event::Topology {
                    at_us,
                    changes,
                    joined: Vec::new(),
                };
                self.state.take(changes, &mut self.sinks, keys)?;
                for node in &joined {
                    self.join(node);
                }
                Ok(())
            }
            event => self.state.take(event, &mut self.sinks, keys),
        }
    }

    fn settle(&mut self, writes_from_us: u64, warnings: &[String]) -> Result<()> {
        let observing = self.observe_cpu_from.is_some();
        hand_over_stall_spans(
            &mut self.state.nodes,
            observing.then_some(&mut self.observe_cpu_wait),
        );
        if let Some((pid, _)) = self.observe_cpu_from
            && let Some(now) = crate::measure::schedstat::main_thread_times(pid)
        {
            self.observe_cpu_wait
                .add((self.meta.run.clock.now_us(), now.wait_ns));
        }
        self.state.settle(writes_from_us, &mut self.sinks)?;
        if self.state.wrote_since_checkpoint || self.last_checkpoint.elapsed() >= CHECKPOINT_EVERY {
            self.last_checkpoint = Instant::now();
            self.state.wrote_since_checkpoint = false;
            self.state.take_baselines();
            if self.sinks.take_checkpoints() {
                let run_json = run_json(
                    &self.meta,
                    &self.state,
                    RunStatus::Running,
                    None,
                    &self.threads,
                    warnings,
                );
                self.sinks.emit(&ProbeFinding::Checkpoint(&run_json))?;
            }
        }
        Ok(())
    }

    fn tick(&mut self) {
        let tick = ProbeFinding::Tick {
            elapsed: Duration::from_micros(self.meta.run.clock.now_us()),
            probes: self.state.probes_recorded as usize,
            writes: self.state.writes.len(),
        };
        // Only the terminal takes it, and it cannot fail.
        let _ = self.sinks.emit(&tick);
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
        // channel is closed).
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
        // No node joins from now on; the threads are joined without draining the channel
        // (see the module comment).
        self.joiner = None;
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
    /// Probes `joined` from now on: its threads and its correlator; a node that cannot be
    /// probed is a warning of the run.
    fn join(&mut self, joined: &JoinedNode) {
        let Some(joiner) = &self.joiner else {
            return;
        };
        let first_thread = self.state.thread_node.len();
        match joiner.start(joined, first_thread, &self.threads.probes_shared) {
            Ok(started) => {
                self.threads.probes.extend(started.handles);
                // No reading comes any more once the sampler has stopped (or in observe mode,
                // where none runs).
                let memory_ended = self.threads.sampler.is_none();
                let node = NodeState::new(
                    &started.node,
                    self.correlation,
                    memory_ended,
                    started.probed_from_us,
                    true,
                );
                let cols = &started.node.cols;
                let detail = format!(
                    "probed from here on ({}{})",
                    cols.role,
                    cols.shard
                        .map(|s| format!(", shard {s}"))
                        .unwrap_or_default()
                );
                self.state.add_node(node, joiner.config.threads, detail);
            }
            Err(err) => {
                let note = format!(
                    "{} came during the run but is not probed: {}",
                    joined.announced,
                    crate::error::one_line(&err)
                );
                if !self.state.notes.contains(&note) {
                    self.state.notes.push(note);
                }
            }
        }
    }

    /// The final exports and the report, every thread stopped, the keys removed and the
    /// settings restored; after an export error, what the disk takes and the error.
    fn finish(
        mut self,
        ended: Ended,
        mut warnings: Vec<String>,
        server_settings: Vec<String>,
    ) -> Result<RunReport> {
        let Ended {
            status,
            status_reason,
            export_error,
        } = ended;
        let (state, sinks, meta) = (&mut self.state, &mut self.sinks, &self.meta);
        if let Some(err) = export_error {
            // What is still in memory goes to the files that can take it, and run.json says the
            // run failed (best effort: the disk may be full), before the error is returned.
            // The terminal hears nothing more: the command reports the error.
            sinks.silence_terminal();
            state.finish();
            let _ = state.file_findings(sinks);
            let _ = state.file_named(true, sinks);
            let _ = state.file_node_events(sinks);
            state.take_baselines();
            if sinks.take_checkpoints() {
                let run_json = run_json(
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
                let _ = sinks.emit(&ProbeFinding::Checkpoint(&run_json));
            }
            return Err(err);
        }
        // A failed write fails the run, in run.json as in the exit status; one whose connection
        // was lost under it (a failover the run rode out) leaves the run complete, but said.
        let (status, status_reason) = match (
            crate::output::export::failing_writes(&state.writes),
            crate::output::export::failed_writes(&state.writes),
        ) {
            (Some(failing), _) if status == RunStatus::Complete => {
                (RunStatus::Failed, Some(failing))
            }
            (None, Some(failed)) if status == RunStatus::Complete && status_reason.is_none() => {
                (status, Some(failed))
            }
            _ => (status, status_reason),
        };
        state.finish();
        state.file_findings(sinks)?;
        state.file_named(true, sinks)?;
        state.file_node_events(sinks)?;
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
        if let Some(note) = cpu_wait_note(&state.nodes[0].analysis.writes) {
            warnings.push(note);
        }
        if let Some(note) = query_buffer_note(&state.nodes[0].analysis.writes) {
            warnings.push(note);
        }
        if let Some((pid, from)) = self.observe_cpu_from
            && let Some(to) = crate::measure::schedstat::main_thread_times(pid)
        {
            hand_over_stall_spans(&mut state.nodes, Some(&mut self.observe_cpu_wait));
            self.observe_cpu_wait
                .add((self.meta.run.clock.now_us(), to.wait_ns));
            let node = &state.nodes[0];
            if let Some(note) = observe_cpu_wait_note(
                (to - from).wait_ns as f64 / 1e6,
                self.observe_cpu_wait.total_ms(),
                node.stall_ms_total,
                options.probe_threads,
                options.probe_rate,
            ) {
                warnings.push(note);
            }
        }
        // The files the warnings may point at exist only where this session writes them
        // (`--out` of the main job); `probe keys` writes keys.csv and run.json of its own, and
        // its warnings named a probes.csv and a stalls.csv it never wrote (the hostile trial).
        let files = options.out.is_some();
        if let Some(note) = open_at_stop_note(
            shared.unanswered_at_stop.load(Ordering::Relaxed),
            shared.longest_unanswered_at_stop_us.load(Ordering::Relaxed),
            options.stall_threshold_us,
            files,
        ) {
            warnings.push(note);
        }
        if let Some(note) = timed_out_note(
            shared.longest_timed_out_us.load(Ordering::Relaxed),
            options.stall_threshold_us,
            files,
        ) {
            warnings.push(note);
        }
        if let (failed @ 1.., Some(first)) = &state.probe_errors {
            // Said once with its cause: a run whose probe key another client deleted read
            // "3643 errors" and nothing more (the hostile trial).
            warnings.push(probes_failed_note(*failed, first, files));
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
            warnings.push(stalls_kept_note(
                first.stalls_found,
                first.stall_ms_total,
                first.analysis.stalls.len(),
                files,
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
        sinks.emit(&ProbeFinding::Checkpoint(&run_json))?;
        Ok(RunReport {
            run_json,
            run_id: meta.run.name.run_id.clone(),
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
            started_unix_us: meta.run.clock.unix_start_us(),
            server_settings,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without the session's files (`probe keys`, which writes keys.csv and run.json of its
    /// own) the warnings name none; with them, the main job's text is as it was.
    #[test]
    fn warnings_name_only_the_files_the_session_writes() {
        let with = probes_failed_note(265, "Connection reset by peer", true);
        assert_eq!(
            with,
            "265 probe(s) failed (probes.csv's error column); the first: Connection reset by peer"
        );
        let without = probes_failed_note(265, "Connection reset by peer", false);
        assert!(!without.contains(".csv"), "{without}");
        assert!(without.contains("265 probe(s) failed"), "{without}");
        let with = stalls_kept_note(1802, 3673.0, 1000, true);
        assert_eq!(
            with,
            "1802 stalls in all (3673.0 ms): run.json keeps the 1000 longest, stalls.csv every one"
        );
        let without = stalls_kept_note(1802, 3673.0, 1000, false);
        assert!(
            !without.contains("stalls.csv") && !without.contains("run.json"),
            "{without}"
        );
        // A stall open at the stop or at the timeout: probes.csv named only where written
        // (a keys scan's CI run said it).
        for files in [true, false] {
            let open = open_at_stop_note(9, 9_400, 1000, files).unwrap();
            let timed_out = timed_out_note(2_000_000, 1000, files).unwrap();
            for note in [open, timed_out] {
                assert_eq!(note.contains("probes.csv"), files, "{note}");
                assert!(note.contains("not among the stalls counted"), "{note}");
            }
        }
    }
}
