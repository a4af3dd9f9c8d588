//! `timeline.csv`: one row per `--interval` per target, with wall-clock time, so a long watch
//! can be plotted and lined up with the server's logs.

use serde::Serialize;

use crate::analyze::findings::Interval;
use crate::record::{NodeCols, NodeRole};

/// One row of timeline.csv.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimelineRow {
    /// Start of the interval, RFC 3339 UTC with µs.
    pub time: String,
    /// The same as Unix time, µs.
    pub unix_us: u64,
    /// The node probed (`host:port` as the topology reports it).
    pub target: String,
    /// Start of the interval, µs since the run's start.
    pub start_us: u64,
    /// Length of the interval, µs.
    pub length_us: u64,
    /// Probes intended in it.
    pub probes: u64,
    /// Of those, probes that got an error or no reply.
    pub errors: u64,
    /// Median latency, µs.
    pub p50_us: u64,
    /// 99th percentile latency, µs.
    pub p99_us: u64,
    /// 99.9th percentile latency, µs.
    pub p999_us: u64,
    /// Worst latency, µs.
    pub max_us: u64,
    /// Stall episodes that began in it.
    pub stalls: u64,
    /// Time in it covered by stall episodes, ms.
    pub stall_ms: f64,
    /// The longest stall that began in it, ms.
    pub longest_stall_ms: f64,
    /// The node's role (`master` or `replica`).
    pub role: NodeRole,
    /// The node's shard; empty outside a cluster.
    pub shard: Option<u16>,
}

impl TimelineRow {
    /// The row of `interval` of a run that started at `unix_start_us`.
    pub fn new(interval: &Interval, node: &NodeCols, unix_start_us: u64) -> TimelineRow {
        let unix_us = unix_start_us + interval.start_us;
        TimelineRow {
            time: crate::measure::clock::wall_time(unix_us),
            unix_us,
            target: node.node.clone(),
            start_us: interval.start_us,
            length_us: interval.length_us,
            probes: interval.probes,
            errors: interval.errors,
            p50_us: interval.p50_us,
            p99_us: interval.p99_us,
            p999_us: interval.p999_us,
            max_us: interval.max_us,
            stalls: interval.stalls,
            stall_ms: interval.stall_ms,
            longest_stall_ms: interval.longest_stall_ms,
            role: node.role,
            shard: node.shard,
        }
    }
}
