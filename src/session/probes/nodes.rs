//! The servers a probe run measures: the written one first, then its replicas and the other
//! shards' nodes, each with how to connect and how the exports name it.

use anyhow::{Context, Result};

use crate::measure::slots::hash_tag_for;
use crate::measure::target::ConnInfo;
use crate::measure::target::Target;
use crate::measure::topology::{NodeAddressMap, Shard, Topology, TopologyKind};
use crate::measure::topology_watch::JoinedNode;
use crate::record::{NodeCols, NodeRole, ProbeCmd};

/// The servers a session probes: the first is the one the actor works on (`target`).
#[derive(Debug, Clone)]
pub struct Probed {
    /// Each with its own probe threads and connections, and its own correlator.
    pub nodes: Vec<ProbedNode>,
    /// Hash tag every key of the run carries (`holprobe:<run-id>:{tag}:`), so that a cluster
    /// routes them all to the written shard.
    pub key_tag: Option<String>,
    /// The deployment as discovered at the start (run.json `topology`).
    pub topology: Option<Topology>,
    /// `--node-address`: where a node that joins during the run is reached.
    pub addresses: NodeAddressMap,
    /// A standalone master probed alone (no replica at the start, so run.json has no
    /// `topology`): its one-node topology, which a replica that attaches during the run joins.
    pub lone_master: Option<Topology>,
}

/// One server probed.
#[derive(Debug, Clone)]
pub struct ProbedNode {
    /// How to connect (`readonly` for GET probes of a cluster replica).
    pub conn: ConnInfo,
    /// Its address, role and shard, as the exports name it.
    pub cols: NodeCols,
    /// It holds the written key's slot.
    pub same_shard: bool,
    /// Where GET probes' key lives when it is not the first node's: its hash tag and the master
    /// that holds it (the node itself, or its replica's master).
    pub probe_key_home: Option<(String, ConnInfo)>,
}

impl Probed {
    /// Every node of `topology`, the master of shard `written` first (the actor's), then its
    /// replicas, then the other shards' nodes; each connected with `template`'s settings (user,
    /// password, TLS, timeouts) at its own address. In a cluster the run's keys carry a hash tag
    /// of the written shard's slots, and GET probes of the other shards read a key of their own
    /// shard (replicas after `READONLY`).
    pub fn from_topology(
        topology: &Topology,
        written: usize,
        template: &ConnInfo,
        probe_cmd: ProbeCmd,
    ) -> Result<Probed> {
        let shard = topology
            .shards
            .get(written)
            .with_context(|| format!("no shard {written} in the topology"))?;
        let cluster = topology.kind == TopologyKind::Cluster;
        let tag_of = |shard: &Shard| -> Result<Option<String>> {
            if !cluster {
                return Ok(None);
            }
            hash_tag_for(&shard.slots)
                .map(Some)
                .with_context(|| format!("shard {} serves no slot", shard.index))
        };
        let written_tag = tag_of(shard)?;
        let mut order: Vec<&Shard> = vec![shard];
        order.extend(topology.shards.iter().filter(|s| s.index != written));
        let mut nodes = Vec::new();
        for shard in order {
            let tag = tag_of(shard)?;
            let master_conn = template.for_node(&shard.master.address)?;
            for node in shard.nodes() {
                let mut conn = template.for_node(&node.address)?;
                // Every node, masters too (where it changes nothing): a master demoted by a
                // failover mid-run still answers its probes' GETs, as a replica.
                conn.readonly = cluster && probe_cmd == ProbeCmd::Get;
                nodes.push(ProbedNode {
                    conn,
                    cols: NodeCols {
                        node: node.announced.clone(),
                        role: node.role,
                        shard: cluster.then_some(shard.index as u16),
                    },
                    same_shard: shard.index == written,
                    // The written shard's nodes read the run's own probe key (tagged for it);
                    // a replica of a standalone master reads the master's.
                    probe_key_home: match &tag {
                        Some(tag) if shard.index != written => {
                            Some((tag.clone(), master_conn.clone()))
                        }
                        _ => None,
                    },
                });
            }
        }
        Ok(Probed {
            nodes,
            key_tag: written_tag,
            topology: Some(topology.clone()),
            addresses: NodeAddressMap::default(),
            lone_master: None,
        })
    }

    /// A node the topology watcher found ready during the run, set up as the nodes found at the
    /// start are: its shard the one of the start's topology that serves its slots (named as
    /// then), connected with the first node's settings, GET probes of another shard reading
    /// that shard's key (set at the start on its master).
    pub fn joined(&self, joined: &JoinedNode, probe_cmd: ProbeCmd) -> Result<ProbedNode> {
        let topology = self
            .topology
            .as_ref()
            .or(self.lone_master.as_ref())
            .context("the run has no topology to place it in")?;
        let first = self.nodes.first().context("the run probes no node")?;
        let slot = joined
            .slots
            .first()
            .map(|&(lo, _)| lo)
            .context("it serves no slot")?;
        let shard = topology.shard_for_slot(slot).with_context(|| {
            format!("its shard (slot {slot}) was not in the topology at the start")
        })?;
        let cluster = topology.kind == TopologyKind::Cluster;
        let mut conn = first.conn.for_node(&joined.address)?;
        conn.readonly = cluster && probe_cmd == ProbeCmd::Get;
        let same_shard = first
            .cols
            .shard
            .is_none_or(|written| usize::from(written) == shard.index);
        let probe_key_home = match cluster && !same_shard {
            true => {
                let tag = hash_tag_for(&shard.slots)
                    .with_context(|| format!("shard {} serves no slot", shard.index))?;
                let mut master = first.conn.for_node(&shard.master.address)?;
                master.readonly = false;
                Some((tag, master))
            }
            false => None,
        };
        Ok(ProbedNode {
            conn,
            cols: NodeCols {
                node: joined.announced.clone(),
                role: joined.role,
                shard: cluster.then_some(shard.index as u16),
            },
            same_shard,
            probe_key_home,
        })
    }

    /// The URL's server alone.
    pub fn single(target: &Target) -> Probed {
        Probed {
            nodes: vec![ProbedNode {
                conn: target.conn.clone(),
                cols: NodeCols {
                    node: target.server.address.clone(),
                    role: NodeRole::Master,
                    shard: None,
                },
                same_shard: true,
                probe_key_home: None,
            }],
            key_tag: None,
            topology: None,
            addresses: NodeAddressMap::default(),
            lone_master: None,
        }
    }
}
