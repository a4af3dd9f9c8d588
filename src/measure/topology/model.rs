//! The nodes a run measures, by shard: what discovery finds and run.json records.

use serde::{Deserialize, Serialize};

use crate::measure::slots::{SLOT_COUNT, key_slot};

/// Whether the nodes form a Redis Cluster or a standalone master with replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TopologyKind {
    /// Cluster mode off: one master (serving every key) and its replicas.
    Standalone,
    /// Redis Cluster / Valkey cluster: shards by hash slot.
    Cluster,
}

/// A node's part in its shard (the exports' `role` column).
pub use crate::record::NodeRole as Role;

/// One server the run can measure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// The cluster node id (40 hex digits), when the server is in cluster mode.
    pub id: Option<String>,
    /// `host:port` as the deployment reports it: the name used in exports.
    pub announced: String,
    /// `host:port` the tool connects to: `announced` after `--node-address`, or the URL's own
    /// address for the URL's node.
    pub address: String,
    /// Master or replica.
    pub role: Role,
    /// Index of its shard in [`Topology::shards`].
    pub shard: usize,
}

/// A master, the slots it serves and its replicas.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// 0-based, in order of the lowest slot served (shards serving no slot come last).
    pub index: usize,
    /// The shard id `CLUSTER SHARDS` reports (Valkey), if any.
    pub id: Option<String>,
    /// Inclusive slot ranges, in order; `[(0, 16383)]` for a standalone master, which serves
    /// every key.
    pub slots: Vec<(u16, u16)>,
    /// The node writes to these slots go to.
    pub master: Node,
    /// Replicas of the master that are online and reachable.
    pub replicas: Vec<Node>,
}

impl Shard {
    /// Whether this shard serves `slot`.
    pub fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(lo, hi)| lo <= slot && slot <= hi)
    }

    /// Its master, then its replicas.
    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        std::iter::once(&self.master).chain(&self.replicas)
    }

    /// How many slots it serves.
    pub fn slot_count(&self) -> u32 {
        self.slots
            .iter()
            .map(|&(lo, hi)| u32::from(hi) - u32::from(lo) + 1)
            .sum()
    }
}

/// What the run measures: every reachable node, by shard. Recorded in run.json.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    /// Cluster or standalone.
    pub kind: TopologyKind,
    /// Shards in index order.
    pub shards: Vec<Shard>,
}

impl Topology {
    /// Every node: shard by shard, each master before its replicas.
    pub fn nodes(&self) -> Vec<&Node> {
        self.shards.iter().flat_map(Shard::nodes).collect()
    }

    /// The shard serving `slot`, if a reachable one does.
    pub fn shard_for_slot(&self, slot: u16) -> Option<&Shard> {
        self.shards.iter().find(|shard| shard.serves(slot))
    }

    /// The shard a key is written to.
    pub fn shard_for_key(&self, key: &[u8]) -> Option<&Shard> {
        self.shard_for_slot(key_slot(key))
    }

    /// The node announced as, or reached at, `address` (`host:port`).
    pub fn node(&self, address: &str) -> Option<&Node> {
        self.nodes()
            .into_iter()
            .find(|node| node.announced == address || node.address == address)
    }

    /// How many of the 16384 slots the shards serve (16384 when every slot has a reachable
    /// master).
    pub fn slots_covered(&self) -> u32 {
        let mut covered = vec![false; usize::from(SLOT_COUNT)];
        for &(lo, hi) in self.shards.iter().flat_map(|shard| &shard.slots) {
            for slot in lo..=hi.min(SLOT_COUNT - 1) {
                covered[usize::from(slot)] = true;
            }
        }
        covered.iter().filter(|&&served| served).count() as u32
    }
}
