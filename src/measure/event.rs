//! What the measurement threads send to the collector: one event stream on one clock. In a
//! module of its own so that the threads (probe, writer, host memory, injector, load generator)
//! and the run that
//! collects them do not depend on each other.

use crate::analyze::pressure::MemorySample;
use crate::record::{ProbeRecord, WriteRecord};

/// What the measurement threads send to the collector, all on one clock.
#[derive(Debug)]
pub enum Event {
    /// One probe, answered or failed.
    Probe(ProbeRecord),
    /// One write event (boxed: it is rare and large, and the channel's slots are sized by the
    /// largest variant).
    Write(Box<WriteRecord>),
    /// The writer ran its plan and its last quiet gap.
    WriterDone,
    /// The writer lost its connection and could not reconnect.
    WriterFailed(String),
    /// A reading of host memory (for the memory-pressure flags).
    Memory(MemorySample),
    /// What the server logged since the last poll (slow commands, latency events), to name
    /// the stalls with.
    ServerLog(Box<crate::measure::culprit::ServerLogBatch>),
    /// A probe thread of a run over several nodes lost its server (`error`) or, with `None`,
    /// has it back. While it is down the thread sends no probes, only [`Event::Skipped`].
    NodeState {
        /// The probe thread.
        thread: u16,
        /// When, µs since the run's start.
        at_us: u64,
        /// Why it is down; `None`: up again.
        error: Option<String>,
    },
    /// The cluster's topology changed (a failover, a node gone or new), as the topology
    /// watcher describes it, one line per node.
    Topology {
        /// When it was seen, µs since the run's start.
        at_us: u64,
        /// What changed, node by node (`host:port`, what happened to it).
        changes: Vec<(String, String)>,
        /// Nodes not probed so far that are ready to be probed from now on.
        joined: Vec<crate::measure::topology_watch::JoinedNode>,
    },
    /// A load generator thread's report (`probe load`; boxed: the channel's slots are sized by
    /// the largest variant).
    Load(Box<crate::measure::generator::EngineMsg>),
    /// A probe thread whose server is down skipped its probes intended up to `through_us`:
    /// nothing earlier will come from it.
    Skipped {
        /// The probe thread.
        thread: u16,
        /// The last skipped probe's intended time, µs since the run's start.
        through_us: u64,
    },
}
