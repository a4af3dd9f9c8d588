//! Reported shards put together into the topology a run measures, pure: the reachability
//! check is passed in, so the unit tests need no socket.

use anyhow::{Result, bail};

use super::flags::NodeAddressMap;
use super::model::{Node, Role, Shard, Topology, TopologyKind};
use super::parse::{ReportedNode, ReportedShard};

/// The node the URL reaches, as it appears among the reported nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlNode {
    /// Its announced `host:port` among the reported nodes.
    pub announced: String,
    /// The URL's `host:port`, its address unless `--node-address` maps it.
    pub address: String,
}

/// Puts reported shards together into the topology: maps addresses, leaves out nodes that are
/// not online (with a warning), checks every other node with `reach` (an unreachable one is left
/// out with a warning) and numbers the shards by lowest slot. A shard whose master is left out
/// goes with it (its slots have no master to write to). Fails only when the URL's own node does
/// not end up in the topology.
///
/// A replica reported in another state is first asked itself (`link_up`, given its address):
/// Redis 7.0's CLUSTER SHARDS calls a replica `loading` while its replication offset is 0, as on
/// a freshly created cluster with no data yet, though the replica's own INFO replication says
/// `master_link_status:up`. Only a replica that does not say so is left out.
pub fn assemble(
    kind: TopologyKind,
    reported: Vec<ReportedShard>,
    url_node: &UrlNode,
    map: &NodeAddressMap,
    reach: &mut dyn FnMut(&str) -> Result<()>,
    link_up: &mut dyn FnMut(&str) -> bool,
) -> Result<(Topology, Vec<String>)> {
    let mut warnings = Vec::new();
    let mut shards = Vec::new();
    let mut url_node_kept = false;
    let mut check = |node: &ReportedNode, warnings: &mut Vec<String>| -> Option<Node> {
        let name = match (&node.announced, &node.id) {
            (announced, _) if !announced.is_empty() => announced.clone(),
            (_, Some(id)) => format!("node {id}"),
            _ => "a node".to_string(),
        };
        let is_url_node = node.announced == url_node.announced;
        let confirmed_up = |link_up: &mut dyn FnMut(&str) -> bool| {
            node.role == Role::Replica
                && !node.announced.is_empty()
                && link_up(map.get(&node.announced).unwrap_or(&node.announced))
        };
        if let Some(health) = node.health.as_deref().filter(|h| *h != "online")
            && (is_url_node || !confirmed_up(link_up))
        {
            // The node the user named is measured whatever its state (a replica still
            // syncing): discovery is talking to it.
            if !is_url_node {
                warnings.push(format!(
                    "{} {name} is {health}, not online: left out",
                    node.role
                ));
                return None;
            }
            warnings.push(format!(
                "{} {name} (the --url node) is {health}, not online: measured anyway",
                node.role
            ));
        }
        if node.announced.is_empty() {
            warnings.push(format!(
                "{} {name} announces no address: left out",
                node.role
            ));
            return None;
        }
        let address = match map.get(&node.announced) {
            Some(to) => to.to_string(),
            None if is_url_node => url_node.address.clone(),
            None => node.announced.clone(),
        };
        // The URL's own node needs no check: discovery is talking to it.
        let checked = if is_url_node && address == url_node.address {
            Ok(())
        } else {
            reach(&address)
        };
        if let Err(err) = checked {
            let via = if address == node.announced {
                String::new()
            } else {
                format!(" at {address}")
            };
            warnings.push(format!(
                "{} {name} cannot be reached{via}: {}: left out (map its address with --node-address {}=HOST:PORT)",
                node.role,
                crate::error::one_line(&err),
                node.announced
            ));
            return None;
        }
        Some(Node {
            id: node.id.clone(),
            announced: node.announced.clone(),
            address,
            role: node.role,
            shard: 0,
        })
    };
    for shard in reported {
        let Some(reported_master) = shard.master else {
            warnings.push(format!(
                "a shard serving {} names no master: its replicas are left out",
                describe_slots(&shard.slots)
            ));
            continue;
        };
        let Some(master) = check(&reported_master, &mut warnings) else {
            if !shard.replicas.is_empty() {
                warnings.push(format!(
                    "the replicas of {} are left out with it",
                    reported_master.announced
                ));
            }
            continue;
        };
        let mut replicas: Vec<Node> = shard
            .replicas
            .iter()
            .filter_map(|replica| check(replica, &mut warnings))
            .collect();
        replicas.sort_by(|a, b| a.announced.cmp(&b.announced));
        url_node_kept |= std::iter::once(&master)
            .chain(&replicas)
            .any(|node| node.announced == url_node.announced);
        shards.push(Shard {
            index: 0,
            id: shard.id,
            slots: shard.slots,
            master,
            replicas,
        });
    }
    if !url_node_kept {
        bail!(
            "the --url node {} is not among the nodes found ({}): measure it alone with --topology single",
            url_node.address,
            if warnings.is_empty() {
                "the deployment does not list it".to_string()
            } else {
                warnings.join("; ")
            }
        );
    }
    shards.sort_by(|a, b| {
        let lowest = |shard: &Shard| {
            shard
                .slots
                .first()
                .map_or(u32::MAX, |&(lo, _)| u32::from(lo))
        };
        lowest(a)
            .cmp(&lowest(b))
            .then_with(|| a.master.announced.cmp(&b.master.announced))
    });
    for (index, shard) in shards.iter_mut().enumerate() {
        shard.index = index;
        shard.master.shard = index;
        for replica in &mut shard.replicas {
            replica.shard = index;
        }
    }
    Ok((Topology { kind, shards }, warnings))
}

fn describe_slots(slots: &[(u16, u16)]) -> String {
    if slots.is_empty() {
        return "no slots".into();
    }
    let ranges: Vec<String> = slots.iter().map(|(lo, hi)| format!("{lo}-{hi}")).collect();
    format!("slots {}", ranges.join(","))
}
