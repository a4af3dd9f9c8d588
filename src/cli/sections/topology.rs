//! Which servers a command reaches: the `--url` server alone, or every node of its deployment
//! (its replicas; every shard of a Redis Cluster), which shard the main job writes to, and the
//! throwaway deployments it may start.

use clap::Args;

use crate::error::UsageError;
use crate::measure::local_cluster::LocalTopologySpec;
use crate::measure::topology::{NodeAddressMap, Topology, TopologyMode};

/// How to find the nodes behind the `--url` server: shared by every command that reaches a
/// deployment (the main job probes them; populate, load and clean work on a cluster's masters).
#[derive(Debug, Clone, Args)]
pub struct DiscoveryArgs {
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
}

/// [`DiscoveryArgs`], checked.
#[derive(Debug, Clone)]
pub struct DiscoveryPlan {
    /// `--topology`.
    pub mode: TopologyMode,
    /// Every `--node-address`.
    pub addresses: NodeAddressMap,
}

impl DiscoveryArgs {
    /// Checks `--topology` and every `--node-address`.
    pub fn to_plan(&self) -> Result<DiscoveryPlan, UsageError> {
        Ok(DiscoveryPlan {
            mode: self.topology.parse()?,
            addresses: NodeAddressMap::parse(&self.node_address)?,
        })
    }
}

/// The topology flags of populate, load and clean: the discovery flags, worded for a command
/// that works on a cluster's masters.
#[derive(Debug, Clone, Args)]
#[command(
    mut_arg("topology", |a| a.help("auto: on a Redis Cluster node, work on the whole cluster (every master, each key on its slot's master; a block per node); single: only the --url server, refused on a cluster node (most keys would be answered MOVED)")),
    mut_arg("node_address", |a| a.help("Reach a cluster node that announces FROM (host:port) at TO (host:port) instead (NAT, containers). Repeatable"))
)]
pub struct LoadTopologyArgs {
    #[command(flatten)]
    pub discovery: DiscoveryArgs,
}

/// The topology flags of the main job: discovery, the written shard, and the throwaway
/// deployments it may start.
#[derive(Debug, Clone, Args)]
pub struct TopologyArgs {
    #[command(flatten)]
    pub discovery: DiscoveryArgs,

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

/// [`TopologyArgs`], checked.
#[derive(Debug, Clone)]
pub struct TopologyPlan {
    /// `--topology` and `--node-address`.
    pub discovery: DiscoveryPlan,
    /// `--shard`, resolved against the topology once it is known ([`choose_shard`]).
    pub shard: Option<String>,
    /// `--cluster` and `--replicas`.
    pub local: LocalTopologySpec,
}

impl TopologyArgs {
    /// Checks every flag; `--url` (`url_given`) cannot have `--cluster` or `--replicas`.
    pub fn to_plan(&self, url_given: bool) -> Result<TopologyPlan, UsageError> {
        let discovery = self.discovery.to_plan()?;
        let local = LocalTopologySpec {
            cluster: self.cluster,
            replicas: self.replicas,
        };
        local.validate()?;
        if url_given && !local.is_single_server() {
            return Err(UsageError::Conflict(
                "--cluster and --replicas start servers of the tool's own: they cannot be used with --url (which discovers the replicas and cluster nodes of that server)".into(),
            ));
        }
        Ok(TopologyPlan {
            discovery,
            shard: self.shard.clone(),
            local,
        })
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
