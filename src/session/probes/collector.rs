//! The probe instrument's collector: files its threads' events (every write to every node's
//! correlator), moves each correlator's horizon on and hands what became final to the run's
//! sinks ([`super::sinks`]); it keeps the findings run.json holds, and knows no file format.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use anyhow::Result;

use crate::session::{KeyLedger, RunContext};

use super::namer::Namer;
use super::nodes::ProbedNode;
use super::report::KEEP_STALLS;
use super::sinks::{NodeRef, ProbeFinding, ProbeSinks};
use super::threads::Threads;
use crate::analyze::correlate::{Analysis, CorrelateConfig, Correlator, Finding, Horizon, Stall};
use crate::measure::clock::wall_time;
use crate::measure::event::Event;
use crate::measure::probe::NO_REPLY_AT_STOP;
use crate::measure::target::Target;
use crate::measure::topology::Topology;
use crate::measure::writer::RecordedWriter;
use crate::options::RunOptions;
use crate::output::export::{NodeEvent, NodeFindings};
use crate::output::export::{RunJson, RunStatus, ToolInfo};
use crate::record::{NodeCols, NodeRole, SameShard, WriteRecord};

/// What run.json says of the run besides its findings.
pub(super) struct Meta<'a> {
    pub(super) run: &'a RunContext,
    pub(super) target: &'a Target,
    pub(super) topology: Option<&'a Topology>,
    pub(super) options: &'a RunOptions<RecordedWriter>,
}

pub(super) struct Collector {
    /// One per node probed; the first is the server the actor works on (the URL's).
    pub(super) nodes: Vec<NodeState>,
    /// The node of each probe thread, by thread number.
    pub(super) thread_node: Vec<usize>,
    pub(super) writes: Vec<WriteRecord>,
    pub(super) last_intended: Vec<Option<u64>>,
    pub(super) probes_recorded: u64,
    /// Probes answered with an error, or not as asked (the unanswered at the stop aside), and
    /// the first one's error.
    pub(super) probe_errors: (u64, Option<String>),
    /// A write's figures came since run.json was last written.
    pub(super) wrote_since_checkpoint: bool,
    pub(super) unix_start_us: u64,
    /// The first node's stalls waiting for the server's slow log to name them (`None`: no
    /// naming).
    pub(super) naming: Option<Namer>,
    /// Notes from the threads (the slow-log poller), for the run's warnings.
    pub(super) notes: Vec<String>,
    /// Nodes that went down or came back, in time order (run.json `node_events`).
    pub(super) node_events: Vec<NodeEvent>,
    /// Of those, the ones not yet shown.
    pub(super) new_node_events: usize,
}

/// What the session keeps of one node probed: its correlator and its findings.
pub(super) struct NodeState {
    pub(super) cols: NodeCols,
    pub(super) same_shard: SameShard,
    pub(super) correlator: Correlator,
    /// The findings kept: every write, at most [`KEEP_STALLS`] stalls and as many hiccups.
    pub(super) analysis: Analysis,
    pub(super) stalls_found: u64,
    pub(super) stall_ms_total: f64,
    /// The stalls found since the instrument last took them, (start, end) on the run clock,
    /// µs: an observe run's CPU wait inside them ([`super::cpu_wait`]).
    pub(super) stall_spans: Vec<(u64, u64)>,
    pub(super) hiccups_found: u64,
    /// Its probe threads whose server is away.
    pub(super) down_threads: BTreeSet<u16>,
    /// Its probes' schedule starts here (run clock, µs): 0 for a node probed from the start,
    /// later for one that joined. Its correlator takes no write that began earlier (no probe
    /// of its could have overlapped all of it) and its timeline no interval before.
    pub(super) probed_from_us: u64,
    /// It joined the run then (run.json `nodes[].joined_us`).
    pub(super) joined_us: Option<u64>,
}

/// How every node's correlator is set: the same for a node that joins later.
#[derive(Debug, Clone, Copy)]
pub(super) struct Correlation {
    pub(super) stall_threshold_us: u64,
    /// timeline.csv's interval.
    pub(super) interval_us: u64,
}

impl NodeState {
    /// A node's state before its first probe, its probes due from `probed_from_us`
    /// (`joined`: it was not probed from the start); `memory_ended`: no host memory reading
    /// will come (observe mode, or the sampler has stopped).
    pub(super) fn new(
        node: &ProbedNode,
        correlation: Correlation,
        memory_ended: bool,
        probed_from_us: u64,
        joined: bool,
    ) -> NodeState {
        let mut correlator = Correlator::new(CorrelateConfig {
            stall_threshold_us: correlation.stall_threshold_us,
            max_silence_us: Some(node.conn.command_timeout.as_micros() as u64),
        })
        .with_intervals(correlation.interval_us.max(1));
        if memory_ended {
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
            stall_spans: Vec::new(),
            hiccups_found: 0,
            down_threads: BTreeSet::new(),
            probed_from_us,
            joined_us: joined.then_some(probed_from_us),
        }
    }

    /// The node as a finding names it (`index`: its place among the nodes probed).
    pub(super) fn view(&self, index: usize) -> NodeRef<'_> {
        NodeRef {
            index,
            cols: &self.cols,
            same_shard: &self.same_shard,
        }
    }

    /// Its findings as run.json's `nodes` lists them.
    pub(super) fn findings(&self) -> NodeFindings {
        NodeFindings {
            node: self.cols.clone(),
            same_shard: self.same_shard.same_shard,
            baseline: self.analysis.baseline.clone(),
            summary: self.analysis.writes.clone(),
            stalls_found: self.stalls_found,
            stall_ms_total: self.stall_ms_total,
            client_hiccups_found: self.hiccups_found,
            longest_stalls: longest(&self.analysis.stalls, NODE_STALLS_KEPT),
            joined_us: self.joined_us,
        }
    }
}

/// Stalls each node other than the first keeps in run.json (stalls.csv has every one).
pub(super) const NODE_STALLS_KEPT: usize = 20;

/// The `n` longest of `stalls`, in time order.
pub(super) fn longest(stalls: &[Stall], n: usize) -> Vec<Stall> {
    let mut kept: Vec<&Stall> = stalls.iter().collect();
    kept.sort_by(|a, b| b.duration_ms.total_cmp(&a.duration_ms));
    kept.truncate(n);
    kept.sort_by_key(|s| s.start_us);
    kept.into_iter().cloned().collect()
}

impl Collector {
    /// A node probed from now on by `threads` probe threads, numbered on from the last
    /// thread's; said in the node events. Returns its first thread's number.
    pub(super) fn add_node(&mut self, node: NodeState, threads: u16, detail: String) -> usize {
        let first_thread = self.thread_node.len();
        let index = self.nodes.len();
        self.thread_node
            .extend(std::iter::repeat_n(index, usize::from(threads)));
        self.last_intended
            .extend(std::iter::repeat_n(None, usize::from(threads)));
        self.node_events.push(NodeEvent {
            node: node.cols.node.clone(),
            at_us: node.probed_from_us,
            wall: wall_time(self.unix_start_us + node.probed_from_us),
            event: "joined".into(),
            detail: Some(detail),
        });
        self.new_node_events += 1;
        self.nodes.push(node);
        first_thread
    }

    /// Files one event (the actor's last word is the session's).
    pub(super) fn take(
        &mut self,
        event: Event,
        sinks: &mut ProbeSinks<'_>,
        keys: &mut KeyLedger,
    ) -> Result<()> {
        match event {
            Event::Probe(probe) => {
                let thread = probe.thread as usize;
                let Some(&index) = self.thread_node.get(thread) else {
                    return Ok(());
                };
                let node = &mut self.nodes[index];
                sinks.emit(&ProbeFinding::Probe {
                    node: &node.cols,
                    probe: &probe,
                })?;
                self.last_intended[thread] = Some(probe.intended_us);
                self.probes_recorded += 1;
                if let Some(error) = probe.error.as_ref().filter(|e| *e != NO_REPLY_AT_STOP) {
                    self.probe_errors.0 += 1;
                    self.probe_errors.1.get_or_insert_with(|| error.clone());
                }
                node.correlator.probe(&probe);
            }
            Event::Write(write) => {
                // A write a failover redirected says where it went.
                let sent_to = match &write.sent_to {
                    Some(node) => NodeCols {
                        node: node.clone(),
                        ..self.nodes[0].cols.clone()
                    },
                    None => self.nodes[0].cols.clone(),
                };
                sinks.emit(&ProbeFinding::Write {
                    write: &write,
                    sent_to: &sent_to,
                })?;
                keys.track(&write);
                for (index, node) in self.nodes.iter_mut().enumerate() {
                    if write.start_us < node.probed_from_us {
                        continue;
                    }
                    let mut record = (*write).clone();
                    // The server's view (its logs, counters and main thread) is the written
                    // server's: another node's row has its clients' figures only.
                    if index > 0 {
                        record.forget_server_view();
                    }
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
            // The nodes it says joined are the instrument's to start.
            Event::Topology { at_us, changes, .. } => {
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
    pub(super) fn settle(&mut self, writes_from_us: u64, sinks: &mut ProbeSinks<'_>) -> Result<()> {
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
        self.file_findings(sinks)?;
        self.file_named(false, sinks)?;
        self.file_node_events(sinks)
    }

    /// Says the node events that came since the last call (a node down or back, a failover):
    /// on every settle, and once more at the run's end, so that one seen last is said too.
    pub(super) fn file_node_events(&mut self, sinks: &mut ProbeSinks<'_>) -> Result<()> {
        let first_new = self.node_events.len() - self.new_node_events;
        for event in &self.node_events[first_new..] {
            sinks.emit(&ProbeFinding::NodeEvent(event))?;
        }
        if self.new_node_events > 0 {
            self.new_node_events = 0;
            self.wrote_since_checkpoint = true;
        }
        Ok(())
    }

    /// Files one final stall (named, when naming is on).
    pub(super) fn file_stall(
        &mut self,
        index: usize,
        stall: Stall,
        sinks: &mut ProbeSinks<'_>,
    ) -> Result<()> {
        let node = &mut self.nodes[index];
        node.stalls_found += 1;
        node.stall_ms_total += stall.duration_ms;
        node.stall_spans.push((stall.start_us, stall.end_us));
        sinks.emit(&ProbeFinding::Stall {
            node: node.view(index),
            stall: &stall,
        })?;
        keep_bounded(&mut node.analysis.stalls, stall);
        Ok(())
    }

    /// Files the stalls the server's logs have caught up with (every one waiting, at the end).
    pub(super) fn file_named(&mut self, all: bool, sinks: &mut ProbeSinks<'_>) -> Result<()> {
        let named = match self.naming.as_mut() {
            Some(namer) => {
                let named = namer.named(self.unix_start_us, all);
                for line in namer.foreign.drain(..) {
                    if !self.notes.contains(&line) {
                        self.notes.push(line);
                    }
                }
                named
            }
            None => return Ok(()),
        };
        for stall in named {
            self.file_stall(0, stall, sinks)?;
        }
        Ok(())
    }

    /// Takes the correlators' final findings into the exports, the terminal and the kept
    /// analysis.
    pub(super) fn file_findings(&mut self, sinks: &mut ProbeSinks<'_>) -> Result<()> {
        for index in 0..self.nodes.len() {
            let findings = self.nodes[index].correlator.drain();
            for finding in findings {
                self.file_finding(index, finding, sinks)?;
            }
        }
        Ok(())
    }

    pub(super) fn file_finding(
        &mut self,
        index: usize,
        finding: Finding,
        sinks: &mut ProbeSinks<'_>,
    ) -> Result<()> {
        match finding {
            Finding::Stall(mut stall) => {
                stall.wall_start = Some(wall_time(self.unix_start_us + stall.start_us));
                // The server-log poller reads the first node's logs.
                match self.naming.as_mut() {
                    Some(namer) if index == 0 => namer.waiting.push_back(stall),
                    _ => self.file_stall(index, stall, sinks)?,
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
                sinks.emit(&ProbeFinding::Summary {
                    node: node.view(index),
                    record,
                    summary: &summary,
                })?;
                self.nodes[index].analysis.writes.push(summary);
                self.wrote_since_checkpoint = true;
            }
            // A node that joined has nothing to say of the time before it.
            Finding::Interval(interval)
                if interval.start_us + interval.length_us <= self.nodes[index].probed_from_us => {}
            Finding::Interval(interval) => {
                sinks.emit(&ProbeFinding::Interval {
                    node: self.nodes[index].view(index),
                    interval: &interval,
                    started_unix_us: self.unix_start_us,
                })?;
            }
        }
        Ok(())
    }

    /// Every correlator: no more events; the baselines into the kept findings.
    pub(super) fn finish(&mut self) {
        for node in &mut self.nodes {
            node.correlator.finish();
        }
    }

    pub(super) fn take_baselines(&mut self) {
        for node in &mut self.nodes {
            node.analysis.baseline = node.correlator.baseline();
        }
    }
}

/// Keeps a stall in a list of at most [`KEEP_STALLS`]: past that, the shortest one not tied to
/// a write goes (the list stays in time order). Stalls tied to a write all stay, so a list can
/// be full of them: the [`LONGEST_UNTIED_KEPT`] longest stalls not tied to a write stay too
/// (the list then grows past the bound), or a second-long freeze after a long build (thousands
/// of short stalls tied to it) would be the one dropped.
pub(super) fn keep_bounded(list: &mut Vec<Stall>, stall: Stall) {
    list.push(stall);
    if list.len() <= KEEP_STALLS {
        return;
    }
    let untied = || {
        list.iter()
            .enumerate()
            .filter(|(_, s)| s.write_seq.is_none())
    };
    if untied().count() <= LONGEST_UNTIED_KEPT {
        return;
    }
    if let Some((index, _)) = untied().min_by(|a, b| a.1.duration_ms.total_cmp(&b.1.duration_ms)) {
        list.remove(index);
    }
}

/// How many of the longest stalls not tied to a write a full list of stalls keeps regardless.
pub(super) const LONGEST_UNTIED_KEPT: usize = 20;

/// run.json's findings as they stand: written by every checkpoint, and at the end also handed
/// to the caller.
pub(super) fn run_json(
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
        mode: meta.run.mode,
        status,
        status_reason,
        run_id: meta.run.name.run_id.clone(),
        key_prefix: meta.run.name.key_prefix.clone(),
        started_unix_us: meta.run.clock.unix_start_us(),
        elapsed_us: meta.run.clock.now_us(),
        server: meta.target.server.clone(),
        host: meta.run.host.clone(),
        options: meta.options.clone(),
        probe_engine: Some(shared.engine_info()),
        analysis_version: Some(crate::analyze::correlate::ANALYSIS_VERSION),
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
        notes: crate::output::report::closing_notes(
            &analysis.writes,
            meta.target.server.mem_allocator.as_deref(),
            meta.target.server.no_unlink,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::sink::Sink;

    fn stall(start_us: u64, duration_ms: f64, write_seq: Option<u32>) -> Stall {
        Stall {
            start_us,
            end_us: start_us + (duration_ms * 1e3) as u64,
            duration_ms,
            write_seq,
            ..Stall::default()
        }
    }

    /// Keeps the node events it is handed.
    struct NodeEvents(std::rc::Rc<std::cell::RefCell<Vec<String>>>);

    impl<'f> Sink<ProbeFinding<'f>> for NodeEvents {
        fn emit(&mut self, finding: &ProbeFinding<'f>) -> Result<()> {
            if let ProbeFinding::NodeEvent(event) = finding {
                let detail = event.detail.clone().unwrap_or_default();
                self.0.borrow_mut().push(format!("{} {detail}", event.node));
            }
            Ok(())
        }
    }

    /// A failover seen in the last drain, after the last settle, is said at the run's end
    /// (it was in run.json but never on the terminal), and a node event is said once.
    #[test]
    fn a_node_event_that_came_last_is_said_once() {
        let mut state = Collector {
            nodes: Vec::new(),
            thread_node: Vec::new(),
            writes: Vec::new(),
            last_intended: Vec::new(),
            probes_recorded: 0,
            probe_errors: (0, None),
            wrote_since_checkpoint: false,
            unix_start_us: 0,
            naming: None,
            notes: Vec::new(),
            node_events: Vec::new(),
            new_node_events: 0,
        };
        let said = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let mut sinks = ProbeSinks::new();
        sinks.push(Box::new(NodeEvents(said.clone())));
        let failover = Event::Topology {
            at_us: 9_000_000,
            changes: vec![("127.0.0.1:7001".into(), "replica -> master".into())],
            joined: Vec::new(),
        };
        state
            .take(failover, &mut sinks, &mut KeyLedger::default())
            .unwrap();
        assert!(said.borrow().is_empty(), "said before it was filed");
        state.file_node_events(&mut sinks).unwrap();
        state.file_node_events(&mut sinks).unwrap();
        assert_eq!(*said.borrow(), ["127.0.0.1:7001 replica -> master"]);
        assert!(state.wrote_since_checkpoint);
    }

    #[test]
    fn a_full_list_drops_its_shortest_stall_not_tied_to_a_write() {
        let mut list: Vec<Stall> = (0..KEEP_STALLS as u64)
            .map(|k| stall(k * 10_000, 2.0 + k as f64, None))
            .collect();
        // The shortest of all is tied to a write: it stays.
        list[3] = stall(30_000, 0.5, Some(7));
        keep_bounded(&mut list, stall(99_000_000, 1.5, None));
        assert_eq!(list.len(), KEEP_STALLS);
        assert!(list.iter().any(|s| s.write_seq == Some(7)));
        // The newcomer (1.5 ms) was the shortest untied one.
        assert!(!list.iter().any(|s| s.start_us == 99_000_000));
        keep_bounded(&mut list, stall(99_000_000, 500.0, None));
        assert_eq!(list.len(), KEEP_STALLS);
        // Now stall 0 (2 ms) went, and the list stays in time order.
        assert!(!list.iter().any(|s| s.start_us == 0));
        assert!(list.windows(2).all(|w| w[0].start_us <= w[1].start_us));
    }

    #[test]
    fn a_list_full_of_stalls_tied_to_writes_keeps_the_long_ones_that_are_not() {
        // A 4M-field build ties thousands of short stalls to its write; a second-long freeze
        // after it, tied to none, was the one dropped (it was the only untied candidate).
        let mut list: Vec<Stall> = (0..KEEP_STALLS as u64 + 500)
            .map(|k| stall(k * 10_000, 2.0, Some(1)))
            .collect();
        keep_bounded(&mut list, stall(99_000_000, 1111.5, None));
        keep_bounded(&mut list, stall(99_500_000, 1063.9, None));
        assert!(list.iter().any(|s| s.duration_ms == 1111.5));
        assert!(list.iter().any(|s| s.duration_ms == 1063.9));
        assert_eq!(longest(&list, 1)[0].duration_ms, 1111.5);
        // Past the untied ones kept regardless, the shortest untied goes again.
        for k in 0..LONGEST_UNTIED_KEPT as u64 {
            keep_bounded(&mut list, stall(100_000_000 + k, 5.0 + k as f64, None));
        }
        let untied = list.iter().filter(|s| s.write_seq.is_none()).count();
        assert_eq!(untied, LONGEST_UNTIED_KEPT);
        assert!(list.iter().any(|s| s.duration_ms == 1063.9));
        assert!(!list.iter().any(|s| s.duration_ms == 5.0));
    }

    #[test]
    fn the_longest_stalls_come_back_in_time_order() {
        let stalls = [
            stall(0, 5.0, None),
            stall(10, 1.0, None),
            stall(20, 9.0, Some(1)),
            stall(30, 7.0, None),
        ];
        let kept = longest(&stalls, 2);
        assert_eq!(
            kept.iter().map(|s| s.start_us).collect::<Vec<_>>(),
            [20, 30]
        );
        assert_eq!(longest(&stalls, 10).len(), 4);
    }
}
