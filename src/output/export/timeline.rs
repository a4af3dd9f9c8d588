//! `timeline.csv`: one row per `--interval` per target, with wall-clock time, so a long watch
//! can be plotted and lined up with the server's logs.

use serde::Serialize;

use crate::analyze::findings::Interval;
use crate::record::{NodeCols, NodeRole};

/// One row of timeline.csv: the interval's time and node, then the interval's own columns
/// ([`Interval`]'s, one list for the findings and the file), then the node's role and shard.
#[derive(Debug, Clone, PartialEq)]
pub struct TimelineRow<'a> {
    /// When the interval began, and where.
    pub stamp: TimelineStamp,
    /// The interval's figures.
    pub interval: &'a Interval,
    /// The node's part in the deployment.
    pub place: TimelinePlace,
}

/// The columns of timeline.csv before the interval's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimelineStamp {
    /// Start of the interval, RFC 3339 UTC with µs.
    pub time: String,
    /// The same as Unix time, µs.
    pub unix_us: u64,
    /// The node probed (`host:port` as the topology reports it).
    pub target: String,
}

/// The columns of timeline.csv after the interval's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimelinePlace {
    /// The node's role (`master` or `replica`).
    pub role: NodeRole,
    /// The node's shard; empty outside a cluster.
    pub shard: Option<u16>,
}

impl Serialize for TimelineRow<'_> {
    /// One record of the three parts' columns in turn.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (&self.stamp, self.interval, &self.place).serialize(serializer)
    }
}

impl<'a> TimelineRow<'a> {
    /// The row of `interval` of a run that started at `unix_start_us`.
    pub fn new(interval: &'a Interval, node: &NodeCols, unix_start_us: u64) -> TimelineRow<'a> {
        let unix_us = unix_start_us + interval.start_us;
        TimelineRow {
            stamp: TimelineStamp {
                time: crate::measure::clock::wall_time(unix_us),
                unix_us,
                target: node.node.clone(),
            },
            interval,
            place: TimelinePlace {
                role: node.role,
                shard: node.shard,
            },
        }
    }
}
