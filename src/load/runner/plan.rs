//! What a load run is asked to do: its options (the plan, as run.json records it too), the
//! servers it loads, and the pure rules that spread the clients and choose the threads.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::load::engine::OpMix;
use crate::load::keyspace::{PopulationMeta, ValueSize};
use crate::measure::target::Target;
use crate::measure::writer::{RecordedWriter, WriterPlan};
use crate::units::option_duration_ms;

/// Validated options of a load run: what the user asked for. Stored in run.json with the
/// writer as the run recorded it ([`RecordedLoadOptions`], see [`LoadOptions::recorded`]).
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
    /// Seed of key choice, SET bytes and the writer's value (`--random-state`; recorded as
    /// `random_state`, read under its old name `seed` too).
    #[serde(rename = "random_state", alias = "seed")]
    pub seed: u64,
    /// Where the exports go.
    pub out: Option<PathBuf>,
}

/// The options of a load run as run.json records them: the plan with the writer as the run
/// used it, and the hash tag its keys carried (which the deployment decides, not the flags).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecordedLoadOptions {
    /// The plan, the writer with the run's key prefix and the seed of its values.
    #[serde(flatten)]
    pub plan: LoadOptions<RecordedWriter>,
    /// The hash tag the writer's keys carry (`holprobe:<run>:{tag}:`), so that on a cluster
    /// they land on the written server's shard; `None` off a cluster.
    pub writer_hash_tag: Option<String>,
}

impl LoadOptions {
    /// The options as run.json records them: the writer with the run's key prefix (from the
    /// session's run name) and the seed of its values, and the hash tag of its keys.
    pub fn recorded(&self, key_prefix: &str, writer_hash_tag: Option<&str>) -> RecordedLoadOptions {
        let o = self.clone();
        let plan = LoadOptions {
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
                connection_recorded: true,
            }),
            stall_threshold_us: o.stall_threshold_us,
            timeout_us: o.timeout_us,
            seed: o.seed,
            out: o.out,
        };
        RecordedLoadOptions {
            plan,
            writer_hash_tag: writer_hash_tag.map(str::to_string),
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
pub(super) fn clients_per_server(servers: &[LoadServer<'_>], clients: u32) -> Vec<u32> {
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
pub(super) fn client_servers(servers: &[LoadServer<'_>]) -> Vec<u16> {
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
