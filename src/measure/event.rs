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
    /// The run's actor (the writer, the key scan, the injector) failed, in its own words: the
    /// run's status reason as it is.
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

/// The sending end of a run's event channel: a channel without a fixed buffer that refuses
/// [`EventSender::try_send`] once `capacity` events wait in it. Bounded as a crossbeam
/// `bounded` channel would be, but its memory grows with what waits rather than being
/// allocated and written up front (a 65536-slot `bounded` channel touched 6 MiB at every
/// run's start, about 1,700 page faults: a fifth of a short run's fixed CPU).
#[derive(Clone, Debug)]
pub struct EventSender {
    tx: crossbeam_channel::Sender<Event>,
    capacity: usize,
}

impl EventSender {
    /// Sends `event` whatever the channel holds (the writer's rare events, which must not be
    /// lost); an error only when the receiver is gone.
    pub fn send(&self, event: Event) -> Result<(), crossbeam_channel::SendError<Event>> {
        self.tx.send(event)
    }

    /// Sends `event` unless `capacity` events already wait (then [`TrySendError::Full`], which
    /// the probe threads count as dropped) or the receiver is gone.
    ///
    /// [`TrySendError::Full`]: crossbeam_channel::TrySendError::Full
    pub fn try_send(&self, event: Event) -> Result<(), crossbeam_channel::TrySendError<Event>> {
        if self.tx.len() >= self.capacity {
            return Err(crossbeam_channel::TrySendError::Full(event));
        }
        self.tx.try_send(event)
    }
}

/// A run's event channel: at most `capacity` events wait for [`EventSender::try_send`].
pub fn event_channel(capacity: usize) -> (EventSender, crossbeam_channel::Receiver<Event>) {
    let (tx, rx) = crossbeam_channel::unbounded();
    (EventSender { tx, capacity }, rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn try_send_refuses_past_the_capacity_and_send_does_not() {
        let (tx, rx) = event_channel(2);
        assert!(tx.try_send(Event::WriterDone).is_ok());
        assert!(tx.try_send(Event::WriterDone).is_ok());
        assert!(matches!(
            tx.try_send(Event::WriterDone),
            Err(crossbeam_channel::TrySendError::Full(_))
        ));
        // The writer's events are never refused.
        assert!(tx.send(Event::WriterDone).is_ok());
        assert_eq!(rx.len(), 3);
        rx.recv().unwrap();
        rx.recv().unwrap();
        assert!(tx.try_send(Event::WriterDone).is_ok());
        drop(rx);
        assert!(matches!(
            tx.try_send(Event::WriterDone),
            Err(crossbeam_channel::TrySendError::Disconnected(_))
        ));
    }
}
