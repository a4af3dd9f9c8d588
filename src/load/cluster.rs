//! Load mode on a Redis Cluster (or Valkey cluster): which shard each load key lives on, which
//! nodes the clients talk to and how many clients each gets. Pure: the topology comes in
//! (discovered by [`crate::measure::topology::discover`]), plans come out.
//!
//! The keys `holprobe:load:<i>` hash to every slot, so the population is split by shard once
//! (a list of key indices per shard, 4 bytes a key), and each load connection is bound to one
//! node and picks its keys from that node's shard, as `redis-benchmark --cluster` binds each
//! client to a node. With `--read-from replicas` the GETs go to the shards' replicas (their
//! connections send `READONLY` first) and the SETs, if any, to the masters: the clients are then
//! split between the two by the `--ratio` weights, so the mix is the ratio's only in
//! proportion of connections, not request by request.

use std::str::FromStr;

use super::engine::OpMix;
use super::keyspace::KeyNaming;
use crate::error::UsageError;
use crate::measure::slots::{SLOT_COUNT, key_slot};
use crate::measure::topology::{Role, Topology};

/// Where the GETs go (`--read-from`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReadFrom {
    /// Every request to the key's master.
    Masters,
    /// GETs to the replicas of the key's shard, SETs to its master.
    Replicas,
}

impl FromStr for ReadFrom {
    type Err = UsageError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "masters" => Ok(ReadFrom::Masters),
            "replicas" => Ok(ReadFrom::Replicas),
            _ => Err(UsageError::invalid(
                "--read-from",
                text,
                "expected masters or replicas",
            )),
        }
    }
}

/// Slot -> shard index, for every slot (`None` for a slot no reachable master serves).
#[derive(Debug, Clone)]
pub struct SlotMap {
    shard_of_slot: Vec<Option<u16>>,
    shards: usize,
}

impl SlotMap {
    /// The map of `topology`'s shards.
    pub fn new(topology: &Topology) -> SlotMap {
        let mut shard_of_slot = vec![None; usize::from(SLOT_COUNT)];
        for shard in &topology.shards {
            for &(lo, hi) in &shard.slots {
                for slot in lo..=hi.min(SLOT_COUNT - 1) {
                    shard_of_slot[usize::from(slot)] = Some(shard.index as u16);
                }
            }
        }
        SlotMap {
            shard_of_slot,
            shards: topology.shards.len(),
        }
    }

    /// The shard serving `key`.
    pub fn shard_of_key(&self, key: &[u8]) -> Option<usize> {
        self.shard_of_slot[usize::from(key_slot(key))].map(usize::from)
    }

    /// The indices `0..keys` of the load keys, by the shard serving each; keys of a slot no
    /// shard serves are counted in the second value.
    pub fn partition(&self, naming: &KeyNaming, keys: u64) -> (Vec<Vec<u32>>, u64) {
        let mut by_shard: Vec<Vec<u32>> = vec![Vec::new(); self.shards];
        let mut unserved = 0;
        let mut key = Vec::with_capacity(64);
        for index in 0..keys.min(u64::from(u32::MAX)) {
            key.clear();
            naming.push_key(index, &mut key);
            match self.shard_of_key(&key) {
                Some(shard) => by_shard[shard].push(index as u32),
                None => unserved += 1,
            }
        }
        (by_shard, unserved)
    }
}

/// One node of the cluster as the load sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadNode {
    /// `host:port` to connect to.
    pub address: String,
    /// `host:port` as the cluster announces it (the report's name).
    pub announced: String,
    /// Master or replica.
    pub role: Role,
    /// Its shard's index.
    pub shard: usize,
    /// What its clients send; `None`: no client talks to it (a replica with
    /// `--read-from masters`), though its block is still shown.
    pub ops: Option<OpMix>,
}

impl LoadNode {
    /// `master, shard 0`: the report's words for its part.
    pub fn describe(&self) -> String {
        let role = match self.role {
            Role::Master => "master",
            Role::Replica => "replica",
        };
        format!("{role}, shard {}", self.shard)
    }
}

/// Every node of `topology`, shard by shard, master first (so the first is shard 0's master,
/// the writer's), with what its clients send. With `--read-from replicas` every shard needs a
/// replica when there are GETs.
pub fn load_nodes(
    topology: &Topology,
    read_from: ReadFrom,
    set_weight: u32,
    get_weight: u32,
) -> Result<Vec<LoadNode>, UsageError> {
    let mut nodes = Vec::new();
    for shard in &topology.shards {
        if read_from == ReadFrom::Replicas && get_weight > 0 && shard.replicas.is_empty() {
            return Err(UsageError::invalid(
                "--read-from",
                "replicas",
                format!(
                    "shard {} (master {}) has no reachable replica to read from",
                    shard.index, shard.master.announced
                ),
            ));
        }
        for node in shard.nodes() {
            let ops = match (read_from, node.role) {
                (ReadFrom::Masters, Role::Master) => Some(OpMix::Ratio),
                (ReadFrom::Masters, Role::Replica) => None,
                (ReadFrom::Replicas, Role::Master) => (set_weight > 0).then_some(OpMix::SetsOnly),
                (ReadFrom::Replicas, Role::Replica) => (get_weight > 0).then_some(OpMix::GetsOnly),
            };
            nodes.push(LoadNode {
                address: node.address.clone(),
                announced: node.announced.clone(),
                role: node.role,
                shard: shard.index,
                ops,
            });
        }
    }
    Ok(nodes)
}

/// How many of `clients` connections each node gets: spread evenly over the nodes that take
/// clients; with GET-only and SET-only nodes (`--read-from replicas` with SETs) the clients are
/// first split between the two groups by the ratio's weights, at least one per node.
pub fn clients_per_node(
    nodes: &[LoadNode],
    clients: u32,
    set_weight: u32,
    get_weight: u32,
) -> Result<Vec<u32>, UsageError> {
    let group = |ops: OpMix| -> Vec<usize> {
        (0..nodes.len())
            .filter(|&i| nodes[i].ops == Some(ops))
            .collect()
    };
    let (ratio, gets, sets) = (
        group(OpMix::Ratio),
        group(OpMix::GetsOnly),
        group(OpMix::SetsOnly),
    );
    let active = ratio.len() + gets.len() + sets.len();
    if active == 0 || (clients as usize) < active {
        return Err(UsageError::invalid(
            "--clients",
            clients,
            format!("at least one per node loaded ({active} nodes)"),
        ));
    }
    let mut counts = vec![0u32; nodes.len()];
    let mut spread = |members: &[usize], n: u32| {
        for k in 0..n as usize {
            counts[members[k % members.len()]] += 1;
        }
    };
    if !ratio.is_empty() {
        spread(&ratio, clients);
    } else if sets.is_empty() {
        spread(&gets, clients);
    } else if gets.is_empty() {
        spread(&sets, clients);
    } else {
        let weight = f64::from(set_weight) / f64::from(set_weight + get_weight);
        let set_clients = ((f64::from(clients) * weight).round() as u32)
            .clamp(sets.len() as u32, clients - gets.len() as u32);
        spread(&sets, set_clients);
        spread(&gets, clients - set_clients);
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::topology::{Node, Shard, TopologyKind};

    fn node(port: u16, role: Role, shard: usize) -> Node {
        Node {
            id: None,
            announced: format!("127.0.0.1:{port}"),
            address: format!("127.0.0.1:{port}"),
            role,
            shard,
        }
    }

    /// Three shards of equal slot ranges, one replica each (as `--cluster-replicas 1` makes).
    fn three_by_one() -> Topology {
        let ranges = [(0, 5460), (5461, 10922), (10923, 16383)];
        Topology {
            kind: TopologyKind::Cluster,
            shards: (0..3)
                .map(|i| Shard {
                    index: i,
                    id: None,
                    slots: vec![ranges[i]],
                    master: node(7000 + i as u16, Role::Master, i),
                    replicas: vec![node(7100 + i as u16, Role::Replica, i)],
                })
                .collect(),
        }
    }

    #[test]
    fn every_key_goes_to_the_shard_of_its_slot() {
        let topology = three_by_one();
        let map = SlotMap::new(&topology);
        let naming = KeyNaming::load();
        let (by_shard, unserved) = map.partition(&naming, 3000);
        assert_eq!(unserved, 0);
        assert_eq!(by_shard.iter().map(Vec::len).sum::<usize>(), 3000);
        for (shard, indices) in by_shard.iter().enumerate() {
            // About a third each (CRC16 spreads the names evenly).
            assert!(
                (800..1200).contains(&indices.len()),
                "{shard}: {}",
                indices.len()
            );
            for &i in indices {
                let slot = key_slot(naming.key(u64::from(i)).as_bytes());
                assert!(topology.shards[shard].serves(slot));
            }
        }
        // A slot nobody serves.
        let mut partial = topology.clone();
        partial.shards.pop();
        let (by_shard, unserved) = SlotMap::new(&partial).partition(&naming, 3000);
        assert_eq!(by_shard.len(), 2);
        assert!(unserved > 800, "{unserved}");
    }

    #[test]
    fn reads_from_replicas_split_the_clients_by_the_ratio() {
        let topology = three_by_one();
        let nodes = load_nodes(&topology, ReadFrom::Masters, 0, 1).unwrap();
        assert_eq!(nodes.len(), 6);
        assert_eq!(nodes[0].describe(), "master, shard 0");
        assert_eq!(
            clients_per_node(&nodes, 4, 0, 1).unwrap(),
            [2, 0, 1, 0, 1, 0]
        );
        let nodes = load_nodes(&topology, ReadFrom::Replicas, 0, 1).unwrap();
        assert_eq!(
            clients_per_node(&nodes, 4, 0, 1).unwrap(),
            [0, 2, 0, 1, 0, 1]
        );
        let nodes = load_nodes(&topology, ReadFrom::Replicas, 1, 3).unwrap();
        // 12 clients, SET:GET 1:3: 3 to the masters, 9 to the replicas.
        assert_eq!(
            clients_per_node(&nodes, 12, 1, 3).unwrap(),
            [1, 3, 1, 3, 1, 3]
        );
        // At least one per node loaded, whatever the ratio.
        assert_eq!(
            clients_per_node(&nodes, 6, 1, 100).unwrap(),
            [1, 1, 1, 1, 1, 1]
        );
        let err = clients_per_node(&nodes, 5, 1, 3).unwrap_err().to_string();
        assert!(err.contains("--clients"), "{err}");
        let mut bare = topology.clone();
        bare.shards[1].replicas.clear();
        let err = load_nodes(&bare, ReadFrom::Replicas, 0, 1)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--read-from") && err.contains("shard 1"),
            "{err}"
        );
        assert!("primary".parse::<ReadFrom>().is_err());
    }
}
