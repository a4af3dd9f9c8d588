//! Which servers the main job probes: the `--url` server alone, or every node of its
//! deployment (its replicas; every shard of a Redis Cluster), and which shard it writes to.

use clap::Args;

use crate::error::UsageError;
use crate::measure::local_cluster::LocalTopologySpec;
use crate::measure::topology::{NodeAddressMap, Topology, TopologyMode};

/// The topology flags of the main job.
#[derive(Debug, Clone, Args)]
pub struct TopologyArgs {
    /// Which servers to probe: auto (the --url server and every node of its deployment: a
    /// master's replicas from INFO replication; every master and replica of a Redis Cluster from
    /// CLUSTER SHARDS, or CLUSTER SLOTS before Redis 7.0), or single (only the --url server).
    /// Each node gets its own probe threads and connections.
    #[arg(long, value_name = "auto|single", default_value = "auto")]
    pub topology: String,

    /// Reach a node that announces FROM (host:port) at TO (host:port) instead, for addresses
    /// that cannot be reached from here (NAT, containers). Repeatable.
    #[arg(long, value_name = "FROM=TO")]
    pub node_address: Vec<String>,

    /// The shard the writes go to, by index (0 = the shard of the lowest slots), by a node's
    /// id, or by a node's host:port [default: 0]. The writes' keys carry a hash tag of that
    /// shard's slots.
    #[arg(long, value_name = "N|NODE-ID|HOST:PORT")]
    pub shard: Option<String>,

    /// Without --url: start a throwaway Redis Cluster of N masters (from --server-bin, on free
    /// loopback ports, persistence off), probe every node and stop them all at the end.
    #[arg(long, value_name = "N")]
    pub cluster: Option<usize>,

    /// Without --url: replicas per master of the throwaway servers (with --cluster), or of one
    /// master started with R replicas (without).
    #[arg(long, value_name = "R", default_value_t = 0)]
    pub replicas: usize,
}

impl TopologyArgs {
    /// `--topology`, checked.
    pub fn mode(&self) -> Result<TopologyMode, UsageError> {
        self.topology.parse()
    }

    /// `--cluster` and `--replicas`, checked; `--url` cannot have them.
    pub fn local(&self, url_given: bool) -> Result<LocalTopologySpec, UsageError> {
        let spec = LocalTopologySpec {
            cluster: self.cluster,
            replicas: self.replicas,
        };
        spec.validate()?;
        if url_given && !spec.is_single_server() {
            return Err(UsageError::Conflict(
                "--cluster and --replicas start servers of the tool's own: they cannot be used with --url (which discovers the replicas and cluster nodes of that server)".into(),
            ));
        }
        Ok(spec)
    }

    /// Every `--node-address`, checked.
    pub fn address_map(&self) -> Result<NodeAddressMap, UsageError> {
        NodeAddressMap::parse(&self.node_address)
    }
}

/// The index of the shard `--shard` names in `topology` (0 without one).
pub fn choose_shard(choice: Option<&str>, topology: &Topology) -> Result<usize, UsageError> {
    let Some(text) = choice else {
        return Ok(0);
    };
    let bad = |reason: String| UsageError::invalid("--shard", text, reason);
    if let Ok(index) = text.parse::<usize>() {
        return if index < topology.shards.len() {
            Ok(index)
        } else {
            Err(bad(format!(
                "the deployment has {} shard(s), numbered from 0",
                topology.shards.len()
            )))
        };
    }
    topology
        .shards
        .iter()
        .find(|shard| {
            shard.nodes().any(|node| {
                node.id.as_deref() == Some(text) || node.announced == text || node.address == text
            })
        })
        .map(|shard| shard.index)
        .ok_or_else(|| {
            bad("no node of the deployment has that id or address (give a shard number, a node id, or host:port)".into())
        })
}
