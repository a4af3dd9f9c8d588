//! The nodes a large write can hold up: the `--url` node's replicas, or every node of its Redis
//! Cluster, found from the one node the user named.
//!
//! Discovery asks the URL's node, and only it, what the deployment looks like: `CLUSTER SHARDS`
//! where the server has it (Redis 7.0+, Valkey), `CLUSTER SLOTS` where it does not (Redis 6.2),
//! and `INFO replication` when cluster mode is off (a standalone master and its replicas; from a
//! replica, its master's). Parsing those replies is pure ([`parse_cluster_shards`],
//! [`parse_cluster_slots`], [`parse_info_replication`]) and so is putting the pieces together
//! ([`assemble`]), which is given the reachability check as a function: the unit tests run on
//! replies captured from real servers without a socket.
//!
//! A node is measured at the address it announces unless `--node-address FROM=TO` maps it
//! (containers and NAT announce addresses the tool cannot reach). Nodes that are not healthy or
//! cannot be reached are left out with one warning line each, so a run goes on with the nodes it
//! reaches; only the URL's own node must stay in.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::str::FromStr;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use redis::Value;
use serde::{Deserialize, Serialize};

use crate::error::UsageError;
use crate::measure::slots::{SLOT_COUNT, key_slot};
use crate::measure::target::{ConnInfo, info_field, join_host_port, split_host_port};

/// Limit on connecting to, and hearing PING back from, each discovered node: an announced address
/// that does not answer within it is taken as unreachable (NAT, a container's own address).
pub const REACH_TIMEOUT: Duration = Duration::from_secs(2);

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

/// `--topology`: which nodes a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TopologyMode {
    /// Every node discovered from the URL's.
    #[default]
    Auto,
    /// Only the URL's node, as before clusters were supported.
    Single,
}

impl FromStr for TopologyMode {
    type Err = UsageError;

    fn from_str(text: &str) -> Result<Self, UsageError> {
        match text {
            "auto" => Ok(TopologyMode::Auto),
            "single" => Ok(TopologyMode::Single),
            _ => Err(UsageError::invalid(
                "--topology",
                text,
                "expected auto (every node discovered from --url) or single (only the --url node)",
            )),
        }
    }
}

impl fmt::Display for TopologyMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TopologyMode::Auto => "auto",
            TopologyMode::Single => "single",
        })
    }
}

/// One `--node-address FROM=TO`: connect to `to` for the node that announces `from`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAddress {
    /// The address a node announces (`host:port`).
    pub from: String,
    /// Where the tool reaches it (`host:port`).
    pub to: String,
}

/// Parses `--node-address FROM=TO`, both `host:port` (`[v6]:port` for IPv6).
pub fn parse_node_address(text: &str) -> Result<NodeAddress, UsageError> {
    let bad = |reason: String| UsageError::invalid("--node-address", text, reason);
    let (from, to) = text.split_once('=').ok_or_else(|| {
        bad("expected FROM=TO, the address a node announces and where to reach it, e.g. 10.0.0.5:6379=127.0.0.1:7001".into())
    })?;
    let address = |side: &str, part: &str| {
        split_host_port(part.trim())
            .map(|(host, port)| join_host_port(&host, port))
            .ok_or_else(|| {
                bad(format!(
                    "{side} '{part}' is not host:port with a port from 1 to 65535"
                ))
            })
    };
    Ok(NodeAddress {
        from: address("FROM", from)?,
        to: address("TO", to)?,
    })
}

/// Every `--node-address`, by announced address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeAddressMap {
    to_by_from: BTreeMap<String, String>,
}

impl NodeAddressMap {
    /// Parses each `--node-address` value; mapping one address to two places is an error.
    pub fn parse<S: AsRef<str>>(values: &[S]) -> Result<Self, UsageError> {
        let mut map = NodeAddressMap::default();
        for value in values {
            let value = value.as_ref();
            let NodeAddress { from, to } = parse_node_address(value)?;
            if let Some(earlier) = map.to_by_from.get(&from)
                && *earlier != to
            {
                return Err(UsageError::invalid(
                    "--node-address",
                    value,
                    format!("{from} is already mapped to {earlier}"),
                ));
            }
            map.to_by_from.insert(from, to);
        }
        Ok(map)
    }

    /// Where to reach the node announcing `announced`, when a mapping names it.
    pub fn get(&self, announced: &str) -> Option<&str> {
        let normalized = split_host_port(announced).map(|(host, port)| join_host_port(&host, port));
        self.to_by_from
            .get(normalized.as_deref().unwrap_or(announced))
            .map(String::as_str)
    }

    /// True when no `--node-address` was given.
    pub fn is_empty(&self) -> bool {
        self.to_by_from.is_empty()
    }
}

/// A node as a server's reply describes it, before its address is mapped or checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportedNode {
    /// Cluster node id, if the reply has one.
    pub id: Option<String>,
    /// `host:port` it announces; empty when the server does not know it.
    pub announced: String,
    /// Master or replica.
    pub role: Role,
    /// The server's word for its state (`online`, `loading`, `fail`; INFO's `wait_bgsave`...),
    /// or `None` where the reply gives none (CLUSTER SLOTS lists only nodes it deems usable).
    pub health: Option<String>,
}

/// A shard as a server's reply describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportedShard {
    /// Shard id, where the server has one (Valkey's CLUSTER SHARDS).
    pub id: Option<String>,
    /// Inclusive slot ranges, sorted.
    pub slots: Vec<(u16, u16)>,
    /// Its master, when the reply names one.
    pub master: Option<ReportedNode>,
    /// Its replicas as listed.
    pub replicas: Vec<ReportedNode>,
}

/// Parses a `CLUSTER SHARDS` reply (RESP2 arrays of alternating names and values, or RESP3
/// maps). `tls` picks a node's `tls-port` over its `port` when both are given.
pub fn parse_cluster_shards(reply: &Value, tls: bool) -> Result<Vec<ReportedShard>> {
    let shards = as_array(reply).context("CLUSTER SHARDS: expected an array of shards")?;
    let mut parsed = Vec::with_capacity(shards.len());
    for (n, shard) in shards.iter().enumerate() {
        let fields = as_fields(shard).with_context(|| format!("CLUSTER SHARDS: shard {n}"))?;
        let mut out = ReportedShard {
            id: None,
            slots: Vec::new(),
            master: None,
            replicas: Vec::new(),
        };
        for (name, value) in fields {
            match name.as_str() {
                "id" => out.id = as_text(value),
                "slots" => {
                    let bounds = as_array(value)
                        .with_context(|| format!("CLUSTER SHARDS: slots of shard {n}"))?
                        .iter()
                        .map(as_slot)
                        .collect::<Result<Vec<u16>>>()
                        .with_context(|| format!("CLUSTER SHARDS: slots of shard {n}"))?;
                    if bounds.len() % 2 != 0 {
                        bail!("CLUSTER SHARDS: shard {n} has an odd number of slot bounds");
                    }
                    out.slots = bounds.chunks(2).map(|pair| (pair[0], pair[1])).collect();
                }
                "nodes" => {
                    for node in as_array(value)
                        .with_context(|| format!("CLUSTER SHARDS: nodes of shard {n}"))?
                    {
                        let node = parse_shard_node(node, tls)
                            .with_context(|| format!("CLUSTER SHARDS: a node of shard {n}"))?;
                        match node.role {
                            Role::Master if out.master.is_none() => out.master = Some(node),
                            // A second master in one shard is a failover caught half-way: the
                            // one listed first is kept as master, the other taken as a replica.
                            _ => out.replicas.push(node),
                        }
                    }
                }
                _ => {}
            }
        }
        out.slots.sort_unstable();
        parsed.push(out);
    }
    Ok(parsed)
}

fn parse_shard_node(node: &Value, tls: bool) -> Result<ReportedNode> {
    let mut id = None;
    let (mut ip, mut endpoint, mut hostname) = (None, None, None);
    let (mut port, mut tls_port) = (None, None);
    let mut role = None;
    let mut health = None;
    for (name, value) in as_fields(node)? {
        match name.as_str() {
            "id" => id = as_text(value),
            "ip" => ip = as_text(value),
            "endpoint" => endpoint = as_text(value),
            "hostname" => hostname = as_text(value),
            "port" => port = as_port(value),
            "tls-port" => tls_port = as_port(value),
            "role" => role = as_text(value),
            "health" => health = as_text(value),
            _ => {}
        }
    }
    let role = match role.as_deref() {
        Some("master") | Some("primary") => Role::Master,
        Some("replica") | Some("slave") => Role::Replica,
        other => bail!("unknown role {other:?}"),
    };
    // The endpoint is the address the cluster tells clients to use (cluster-preferred-endpoint-
    // type); '?' or empty when it is unknown, then the IP.
    let known = |text: &Option<String>| text.clone().filter(|t| !t.is_empty() && t != "?");
    let host = known(&endpoint).or(known(&ip)).or(known(&hostname));
    let port = if tls {
        tls_port.or(port)
    } else {
        port.or(tls_port)
    };
    let announced = match (host, port) {
        (Some(host), Some(port)) => join_host_port(&host, port),
        _ => String::new(),
    };
    Ok(ReportedNode {
        id,
        announced,
        role,
        health,
    })
}

/// Parses a `CLUSTER SLOTS` reply: one entry per slot range, `[start, end, master, replicas...]`,
/// each node `[host, port, id, ...]`. Ranges of the same master are gathered into one shard.
pub fn parse_cluster_slots(reply: &Value) -> Result<Vec<ReportedShard>> {
    let ranges = as_array(reply).context("CLUSTER SLOTS: expected an array of slot ranges")?;
    let mut shards: Vec<ReportedShard> = Vec::new();
    for (n, range) in ranges.iter().enumerate() {
        let items = as_array(range).with_context(|| format!("CLUSTER SLOTS: range {n}"))?;
        if items.len() < 3 {
            bail!("CLUSTER SLOTS: range {n} names no master");
        }
        let start = as_slot(&items[0]).with_context(|| format!("CLUSTER SLOTS: range {n}"))?;
        let end = as_slot(&items[1]).with_context(|| format!("CLUSTER SLOTS: range {n}"))?;
        let node = |value: &Value, role: Role| -> Result<ReportedNode> {
            let parts = as_array(value).with_context(|| format!("CLUSTER SLOTS: range {n}"))?;
            let host = parts.first().and_then(as_text).unwrap_or_default();
            let port = parts.get(1).and_then(as_port);
            let announced = match port {
                Some(port) if !host.is_empty() && host != "?" => join_host_port(&host, port),
                _ => String::new(),
            };
            Ok(ReportedNode {
                id: parts.get(2).and_then(as_text),
                announced,
                role,
                health: None,
            })
        };
        let master = node(&items[2], Role::Master)?;
        let replicas = items[3..]
            .iter()
            .map(|value| node(value, Role::Replica))
            .collect::<Result<Vec<_>>>()?;
        let same = |shard: &ReportedShard| {
            shard
                .master
                .as_ref()
                .is_some_and(|m| match (&m.id, &master.id) {
                    (Some(a), Some(b)) => a == b,
                    _ => m.announced == master.announced,
                })
        };
        match shards.iter_mut().find(|shard| same(shard)) {
            Some(shard) => {
                shard.slots.push((start, end));
                for replica in replicas {
                    if !shard.replicas.contains(&replica) {
                        shard.replicas.push(replica);
                    }
                }
            }
            None => shards.push(ReportedShard {
                id: None,
                slots: vec![(start, end)],
                master: Some(master),
                replicas,
            }),
        }
    }
    for shard in &mut shards {
        shard.slots.sort_unstable();
    }
    Ok(shards)
}

/// What `INFO replication` says of a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicationInfo {
    /// `role:master` or `role:slave`.
    pub role: Role,
    /// For a replica, its master's `host:port` (`master_host`, `master_port`).
    pub master: Option<String>,
    /// For a replica, whether `master_link_status` is `up`.
    pub master_link_up: bool,
    /// For a master, its replicas (`slaveN:` lines).
    pub replicas: Vec<ReplicaLine>,
}

/// One `slaveN:ip=...,port=...,state=...,offset=...,lag=...` line of a master's INFO.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaLine {
    /// `host:port` the replica announces (`replica-announce-ip`, or as the master sees it).
    pub announced: String,
    /// `online`, or `wait_bgsave` / `send_bulk` while it is being synced.
    pub state: String,
    /// Replication offset it acknowledged.
    pub offset: Option<i64>,
}

/// Parses `INFO replication`.
pub fn parse_info_replication(text: &str) -> Result<ReplicationInfo> {
    let role = match info_field(text, "role") {
        Some("master") => Role::Master,
        Some("slave") | Some("replica") => Role::Replica,
        other => bail!("INFO replication: unknown role {other:?}"),
    };
    let master = match (
        info_field(text, "master_host"),
        info_field(text, "master_port"),
    ) {
        (Some(host), Some(port)) => Some(join_host_port(
            host,
            port.parse()
                .with_context(|| format!("INFO replication: master_port '{port}'"))?,
        )),
        _ => None,
    };
    let mut replicas = Vec::new();
    for line in text.lines() {
        let Some((name, value)) = line.trim().split_once(':') else {
            continue;
        };
        if !(name.starts_with("slave") && name[5..].parse::<u32>().is_ok()) {
            continue;
        }
        let field = |key: &str| {
            value.split(',').find_map(|pair| {
                let (k, v) = pair.split_once('=')?;
                (k == key).then_some(v)
            })
        };
        let (Some(ip), Some(port)) = (field("ip"), field("port").and_then(|p| p.parse().ok()))
        else {
            bail!("INFO replication: {name} names no ip and port: {value}");
        };
        replicas.push(ReplicaLine {
            announced: join_host_port(ip, port),
            state: field("state").unwrap_or("unknown").to_string(),
            offset: field("offset").and_then(|o| o.parse().ok()),
        });
    }
    Ok(ReplicationInfo {
        role,
        master,
        master_link_up: info_field(text, "master_link_status") == Some("up"),
        replicas,
    })
}

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
pub fn assemble(
    kind: TopologyKind,
    reported: Vec<ReportedShard>,
    url_node: &UrlNode,
    map: &NodeAddressMap,
    reach: &mut dyn FnMut(&str) -> Result<()>,
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
        if let Some(health) = node.health.as_deref().filter(|h| *h != "online") {
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

/// Finds every node of the deployment the URL's node belongs to (see the module comment), each
/// reachable with the URL's user, password and TLS settings. Returns the topology and one warning
/// line per node left out.
pub fn discover(url: &ConnInfo, map: &NodeAddressMap) -> Result<(Topology, Vec<String>)> {
    let mut control = url.redis_connection()?;
    let info: String = redis::cmd("INFO")
        .arg("cluster")
        .query(&mut control)
        .with_context(|| format!("INFO cluster on {url}"))?;
    let mut reach = |address: &str| check_reachable(url, address);
    let url_address = url.address();
    if info_field(&info, "cluster_enabled") == Some("1") {
        let reported = match redis::cmd("CLUSTER")
            .arg("SHARDS")
            .query::<Value>(&mut control)
        {
            Ok(reply) => parse_cluster_shards(&reply, url.tls.is_some())?,
            // Redis 6.2 has no CLUSTER SHARDS: an error reply, and the connection is fine.
            Err(err) if err.code().is_some() => {
                let reply: Value = redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query(&mut control)
                    .with_context(|| format!("CLUSTER SLOTS on {url}"))?;
                parse_cluster_slots(&reply)?
            }
            Err(err) => return Err(anyhow!(err).context(format!("CLUSTER SHARDS on {url}"))),
        };
        let myid: String = redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut control)
            .with_context(|| format!("CLUSTER MYID on {url}"))?;
        let announced = reported
            .iter()
            .flat_map(|shard| shard.master.iter().chain(&shard.replicas))
            .find(|node| node.id.as_deref() == Some(myid.as_str()))
            .map(|node| node.announced.clone())
            .unwrap_or_else(|| url_address.clone());
        let url_node = UrlNode {
            announced,
            address: url_address,
        };
        // A master that serves no slot (a node just met, a replica not yet attached that
        // reports itself as a master) takes no key and no write: left out, with a word.
        let mut notes = Vec::new();
        let reported: Vec<ReportedShard> = reported
            .into_iter()
            .filter(|shard| {
                let serves = !shard.slots.is_empty();
                if !serves
                    && let Some(master) = &shard.master
                    && master.announced != url_node.announced
                {
                    notes.push(format!(
                        "{} serves no slot (still joining?): left out",
                        master.announced
                    ));
                }
                serves
                    || shard
                        .master
                        .as_ref()
                        .is_some_and(|m| m.announced == url_node.announced)
            })
            .collect();
        let (topology, mut warnings) =
            assemble(TopologyKind::Cluster, reported, &url_node, map, &mut reach)?;
        notes.append(&mut warnings);
        return Ok((topology, notes));
    }
    let own = info_replication(&mut control, url)?;
    let (master_announced, master_info, url_announced) = match own.role {
        Role::Master => (url_address.clone(), own, url_address.clone()),
        Role::Replica => {
            let master = own.master.clone().with_context(|| {
                format!("{url} is a replica but INFO replication names no master_host")
            })?;
            let master_address = map.get(&master).unwrap_or(&master).to_string();
            let master_conn = url.for_node(&master_address)?;
            let master_info = reach(&master_address)
                .and_then(|()| {
                    let mut conn = master_conn.redis_connection()?;
                    info_replication(&mut conn, &master_conn)
                })
                .with_context(|| {
                    format!(
                        "the --url node is a replica of {master}, which cannot be asked for its replicas at {master_address} (map its address with --node-address {master}=HOST:PORT, or measure the --url node alone with --topology single)"
                    )
                })?;
            // The URL's node among its master's replicas: the line whose address leads to the
            // same socket as the URL (the master lists it by IP, the URL may name a host).
            let url_socket = socket_addrs(&url_address);
            let url_announced = master_info
                .replicas
                .iter()
                .find(|line| {
                    let address = map.get(&line.announced).unwrap_or(&line.announced);
                    line.announced == url_address
                        || socket_addrs(address).iter().any(|a| url_socket.contains(a))
                })
                .map_or_else(|| url_address.clone(), |line| line.announced.clone());
            (master, master_info, url_announced)
        }
    };
    let mut replicas: Vec<ReportedNode> = master_info
        .replicas
        .iter()
        .map(|line| ReportedNode {
            id: None,
            announced: line.announced.clone(),
            role: Role::Replica,
            health: Some(line.state.clone()),
        })
        .collect();
    if !replicas.iter().any(|r| r.announced == url_announced) && master_announced != url_announced {
        // The master does not list the URL's replica (it announces another address, or its
        // link is down): measure it anyway, it is the node the user named.
        replicas.push(ReportedNode {
            id: None,
            announced: url_announced.clone(),
            role: Role::Replica,
            health: None,
        });
    }
    let reported = vec![ReportedShard {
        id: None,
        slots: vec![(0, SLOT_COUNT - 1)],
        master: Some(ReportedNode {
            id: None,
            announced: master_announced,
            role: Role::Master,
            health: None,
        }),
        replicas,
    }];
    let url_node = UrlNode {
        announced: url_announced,
        address: url_address,
    };
    assemble(
        TopologyKind::Standalone,
        reported,
        &url_node,
        map,
        &mut reach,
    )
}

fn info_replication(control: &mut redis::Connection, conn: &ConnInfo) -> Result<ReplicationInfo> {
    let text: String = redis::cmd("INFO")
        .arg("replication")
        .query(control)
        .with_context(|| format!("INFO replication on {conn}"))?;
    parse_info_replication(&text).with_context(|| format!("INFO replication on {conn}"))
}

fn socket_addrs(address: &str) -> Vec<SocketAddr> {
    split_host_port(address)
        .and_then(|(host, port)| (host.as_str(), port).to_socket_addrs().ok())
        .map(Iterator::collect)
        .unwrap_or_default()
}

/// Connects to `address` with the URL's settings and a short timeout, and sends PING.
pub fn check_reachable(url: &ConnInfo, address: &str) -> Result<()> {
    let mut conn = url.for_node(address)?;
    conn.connect_timeout = conn.connect_timeout.min(REACH_TIMEOUT);
    conn.command_timeout = conn.command_timeout.min(REACH_TIMEOUT);
    let mut control = conn.redis_connection()?;
    redis::cmd("PING")
        .query::<String>(&mut control)
        .with_context(|| format!("PING {conn}"))?;
    Ok(())
}

fn as_array(value: &Value) -> Result<&[Value]> {
    match value {
        Value::Array(items) | Value::Set(items) => Ok(items),
        other => bail!("expected an array, got {other:?}"),
    }
}

/// The name-value pairs of a RESP2 flat array or a RESP3 map.
fn as_fields(value: &Value) -> Result<Vec<(String, &Value)>> {
    match value {
        Value::Map(pairs) => Ok(pairs
            .iter()
            .filter_map(|(name, value)| Some((as_text(name)?, value)))
            .collect()),
        Value::Array(items) if items.len() % 2 == 0 => Ok(items
            .chunks(2)
            .filter_map(|pair| Some((as_text(&pair[0])?, &pair[1])))
            .collect()),
        other => bail!("expected name-value pairs, got {other:?}"),
    }
}

fn as_text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Some(text.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

fn as_port(value: &Value) -> Option<u16> {
    as_text(value)?.parse().ok().filter(|&port| port != 0)
}

fn as_slot(value: &Value) -> Result<u16> {
    as_text(value)
        .and_then(|text| text.parse::<u16>().ok())
        .filter(|&slot| slot < SLOT_COUNT)
        .ok_or_else(|| anyhow!("expected a slot number, got {value:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(name: &str) -> Value {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/golden/topology")
            .join(name);
        let bytes = std::fs::read(&path).unwrap();
        redis::parse_redis_value(&bytes).unwrap()
    }

    fn all_reachable(_: &str) -> Result<()> {
        Ok(())
    }

    /// Valkey 9.1.2, 3 masters with 1 replica each, asked on a replica once all were online.
    #[test]
    fn valkey_cluster_shards() {
        let shards = parse_cluster_shards(&reply("valkey-9.1-cluster-shards.resp"), false).unwrap();
        assert_eq!(shards.len(), 3);
        let first = &shards[0];
        assert_eq!(first.slots, vec![(5461, 10922)]);
        assert_eq!(
            first.id.as_deref(),
            Some("3d594cb316cb371ebc31421c8d3bb3759c044655")
        );
        let master = first.master.as_ref().unwrap();
        assert_eq!(master.announced, "127.0.0.1:31102");
        assert_eq!(
            master.id.as_deref(),
            Some("860c16beb74e2db5b2def3aac852e82e4d71a72d")
        );
        assert_eq!(master.health.as_deref(), Some("online"));
        assert_eq!(first.replicas.len(), 1);
        assert_eq!(first.replicas[0].announced, "127.0.0.1:31104");
        assert_eq!(first.replicas[0].role, Role::Replica);

        let url_node = UrlNode {
            announced: "127.0.0.1:31104".into(),
            address: "localhost:31104".into(),
        };
        let mut asked = Vec::new();
        let (topology, warnings) = assemble(
            TopologyKind::Cluster,
            shards,
            &url_node,
            &NodeAddressMap::default(),
            &mut |address| {
                asked.push(address.to_string());
                Ok(())
            },
        )
        .unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(topology.slots_covered(), 16384);
        let masters: Vec<&str> = topology
            .shards
            .iter()
            .map(|s| s.master.announced.as_str())
            .collect();
        // Numbered by lowest slot, not in the reply's order.
        assert_eq!(
            masters,
            ["127.0.0.1:31101", "127.0.0.1:31102", "127.0.0.1:31103"]
        );
        let url = topology.node("127.0.0.1:31104").unwrap();
        assert_eq!(
            (url.address.as_str(), url.role, url.shard),
            ("localhost:31104", Role::Replica, 1)
        );
        // Every node but the URL's own was checked.
        assert_eq!(asked.len(), 5);
        assert!(!asked.iter().any(|a| a.contains("31104")));
        assert_eq!(topology.shard_for_slot(5461).unwrap().index, 1);
        assert_eq!(topology.shard_for_key(b"foo").unwrap().index, 2);
    }

    /// Redis 7.0.15 right after `--cluster create`: the replicas have acknowledged no offset
    /// yet and are reported `loading`; they are left out with a warning each.
    #[test]
    fn redis_70_shards_with_loading_replicas() {
        let shards =
            parse_cluster_shards(&reply("redis-7.0-cluster-shards-fresh.resp"), false).unwrap();
        assert_eq!(shards.len(), 3);
        assert_eq!(shards[0].id, None);
        assert_eq!(shards[0].replicas[0].health.as_deref(), Some("loading"));
        let url_node = UrlNode {
            announced: "127.0.0.1:31001".into(),
            address: "127.0.0.1:31001".into(),
        };
        let (topology, warnings) = assemble(
            TopologyKind::Cluster,
            shards,
            &url_node,
            &NodeAddressMap::default(),
            &mut all_reachable,
        )
        .unwrap();
        assert_eq!(topology.nodes().len(), 3);
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        assert_eq!(
            warnings[0],
            "replica 127.0.0.1:31004 is loading, not online: left out"
        );
    }

    /// Redis 7.0.15 and 6.2.14, CLUSTER SLOTS once the replicas were in sync; Valkey 9.1.2 before
    /// (CLUSTER SLOTS leaves out replicas that acknowledged nothing yet).
    #[test]
    fn cluster_slots_replies() {
        for (file, replicas) in [
            ("redis-7.0-cluster-slots.resp", 1),
            ("redis-6.2-cluster-slots.resp", 1),
            ("valkey-9.1-cluster-slots.resp", 0),
        ] {
            let shards = parse_cluster_slots(&reply(file)).unwrap();
            assert_eq!(shards.len(), 3, "{file}");
            assert_eq!(shards[0].slots, vec![(0, 5460)], "{file}");
            assert_eq!(shards[2].slots, vec![(10923, 16383)], "{file}");
            for shard in &shards {
                assert_eq!(shard.replicas.len(), replicas, "{file}");
                assert_eq!(
                    shard.master.as_ref().unwrap().id.as_ref().unwrap().len(),
                    40
                );
            }
        }
        let shards = parse_cluster_slots(&reply("redis-6.2-cluster-slots.resp")).unwrap();
        assert_eq!(
            shards[1].master.as_ref().unwrap().announced,
            "127.0.0.1:31202"
        );
        assert_eq!(shards[1].replicas[0].announced, "127.0.0.1:31205");
    }

    #[test]
    fn cluster_slots_gathers_a_masters_ranges() {
        let node = |port: i64, id: &str| {
            Value::Array(vec![
                Value::BulkString(b"10.0.0.1".to_vec()),
                Value::Int(port),
                Value::BulkString(id.as_bytes().to_vec()),
            ])
        };
        let range = |lo: i64, hi: i64, master: Value, replica: Value| {
            Value::Array(vec![Value::Int(lo), Value::Int(hi), master, replica])
        };
        let reply = Value::Array(vec![
            range(100, 200, node(1, "a"), node(2, "b")),
            range(0, 99, node(3, "c"), node(4, "d")),
            range(201, 300, node(1, "a"), node(2, "b")),
        ]);
        let shards = parse_cluster_slots(&reply).unwrap();
        assert_eq!(shards.len(), 2);
        assert_eq!(shards[0].slots, vec![(100, 200), (201, 300)]);
        assert_eq!(shards[0].replicas.len(), 1);
        assert!(parse_cluster_slots(&Value::Array(vec![Value::Int(1)])).is_err());
        assert!(
            parse_cluster_slots(&Value::Array(vec![range(
                0,
                16384,
                node(1, "a"),
                node(2, "b")
            )]))
            .is_err()
        );
    }

    /// INFO replication of Redis 7.0.15 (master, replica), Redis 6.2.14 and Valkey 9.1.2 (whose
    /// lines end with `type=replica`).
    #[test]
    fn info_replication_texts() {
        let master_70 = "# Replication\r\nrole:master\r\nconnected_slaves:1\r\nslave0:ip=127.0.0.1,port=31004,state=online,offset=0,lag=0\r\nmaster_failover_state:no-failover\r\nmaster_replid:3a56cc602ffc93ea822e78425da7584841c93c9c\r\nmaster_replid2:0000000000000000000000000000000000000000\r\nmaster_repl_offset:0\r\nsecond_repl_offset:-1\r\nrepl_backlog_active:1\r\nrepl_backlog_size:1048576\r\nrepl_backlog_first_byte_offset:1\r\nrepl_backlog_histlen:0\r\n";
        let info = parse_info_replication(master_70).unwrap();
        assert_eq!(info.role, Role::Master);
        assert_eq!(info.master, None);
        assert_eq!(
            info.replicas,
            vec![ReplicaLine {
                announced: "127.0.0.1:31004".into(),
                state: "online".into(),
                offset: Some(0)
            }]
        );
        let replica_70 = "# Replication\r\nrole:slave\r\nmaster_host:127.0.0.1\r\nmaster_port:31001\r\nmaster_link_status:up\r\nmaster_last_io_seconds_ago:2\r\nmaster_sync_in_progress:0\r\nslave_read_repl_offset:0\r\nslave_repl_offset:0\r\nslave_priority:100\r\nslave_read_only:1\r\nreplica_announced:1\r\nconnected_slaves:0\r\nmaster_failover_state:no-failover\r\n";
        let info = parse_info_replication(replica_70).unwrap();
        assert_eq!(info.role, Role::Replica);
        assert_eq!(info.master.as_deref(), Some("127.0.0.1:31001"));
        assert!(info.master_link_up);
        assert!(info.replicas.is_empty());
        let master_62 = "# Replication\r\nrole:master\r\nconnected_slaves:1\r\nslave0:ip=127.0.0.1,port=31204,state=online,offset=0,lag=1\r\n";
        assert_eq!(
            parse_info_replication(master_62).unwrap().replicas[0].announced,
            "127.0.0.1:31204"
        );
        let master_valkey = "# Replication\r\nrole:master\r\nconnected_slaves:1\r\nslave0:ip=127.0.0.1,port=31106,state=online,offset=0,lag=1,type=replica\r\n";
        let info = parse_info_replication(master_valkey).unwrap();
        assert_eq!(info.replicas[0].announced, "127.0.0.1:31106");
        assert_eq!(info.replicas[0].state, "online");
        assert!(parse_info_replication("# Replication\r\n").is_err());
    }

    #[test]
    fn node_address_flags() {
        let map =
            NodeAddressMap::parse(&["10.0.0.5:6379=127.0.0.1:7001", "[fe80::1]:6379=[::1]:7002"])
                .unwrap();
        assert_eq!(map.get("10.0.0.5:6379"), Some("127.0.0.1:7001"));
        assert_eq!(map.get("[fe80::1]:6379"), Some("[::1]:7002"));
        assert_eq!(map.get("10.0.0.5:6380"), None);
        for (bad, says) in [
            ("10.0.0.5:6379", "expected FROM=TO"),
            ("10.0.0.5=127.0.0.1:7001", "FROM '10.0.0.5'"),
            ("10.0.0.5:6379=127.0.0.1:0", "TO '127.0.0.1:0'"),
            ("10.0.0.5:6379=", "TO ''"),
        ] {
            let err = parse_node_address(bad).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("invalid value '{bad}' for --node-address")),
                "{err}"
            );
            assert!(err.contains(says), "{err}");
            assert!(!err.contains('\n'), "{err}");
        }
        let err = NodeAddressMap::parse(&["a:1=b:2", "a:1=c:3"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("a:1 is already mapped to b:2"), "{err}");
        assert!(NodeAddressMap::parse(&["a:1=b:2", "a:1=b:2"]).is_ok());
    }

    #[test]
    fn topology_mode_flag() {
        assert_eq!("auto".parse::<TopologyMode>().unwrap(), TopologyMode::Auto);
        assert_eq!(
            "single".parse::<TopologyMode>().unwrap(),
            TopologyMode::Single
        );
        assert_eq!(TopologyMode::default(), TopologyMode::Auto);
        let err = "all".parse::<TopologyMode>().unwrap_err().to_string();
        assert!(
            err.starts_with("invalid value 'all' for --topology"),
            "{err}"
        );
    }

    /// A container's announced address mapped to the one the tool reaches, and another that
    /// cannot be reached: the first is measured at its mapped address, the second left out with
    /// one warning line.
    #[test]
    fn mapping_and_unreachable_nodes() {
        let node = |announced: &str, role| ReportedNode {
            id: None,
            announced: announced.into(),
            role,
            health: None,
        };
        let reported = vec![ReportedShard {
            id: None,
            slots: vec![(0, 16383)],
            master: Some(node("127.0.0.1:7000", Role::Master)),
            replicas: vec![
                node("172.17.0.3:6379", Role::Replica),
                node("172.17.0.4:6379", Role::Replica),
            ],
        }];
        let map = NodeAddressMap::parse(&["172.17.0.3:6379=127.0.0.1:7001"]).unwrap();
        let url_node = UrlNode {
            announced: "127.0.0.1:7000".into(),
            address: "127.0.0.1:7000".into(),
        };
        let (topology, warnings) = assemble(
            TopologyKind::Standalone,
            reported.clone(),
            &url_node,
            &map,
            &mut |address| match address {
                "127.0.0.1:7001" => Ok(()),
                _ => bail!("cannot connect to redis://{address}"),
            },
        )
        .unwrap();
        assert_eq!(topology.shards[0].replicas.len(), 1);
        let replica = &topology.shards[0].replicas[0];
        assert_eq!(replica.announced, "172.17.0.3:6379");
        assert_eq!(replica.address, "127.0.0.1:7001");
        assert_eq!(warnings, vec!["replica 172.17.0.4:6379 cannot be reached: cannot connect to redis://172.17.0.4:6379: left out (map its address with --node-address 172.17.0.4:6379=HOST:PORT)".to_string()]);

        // The URL's node left out with its master: an error naming --topology single.
        let url_node = UrlNode {
            announced: "172.17.0.4:6379".into(),
            address: "127.0.0.1:7004".into(),
        };
        let err = assemble(
            TopologyKind::Standalone,
            reported,
            &url_node,
            &NodeAddressMap::default(),
            &mut |_| bail!("refused"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("--topology single"), "{err}");
        assert!(!err.contains('\n'), "{err}");
    }

    #[test]
    fn topology_serializes_for_run_json() {
        let master = Node {
            id: None,
            announced: "127.0.0.1:7000".into(),
            address: "127.0.0.1:7000".into(),
            role: Role::Master,
            shard: 0,
        };
        let topology = Topology {
            kind: TopologyKind::Standalone,
            shards: vec![Shard {
                index: 0,
                id: None,
                slots: vec![(0, 16383)],
                master,
                replicas: Vec::new(),
            }],
        };
        let json = serde_json::to_value(&topology).unwrap();
        assert_eq!(json["kind"], "standalone");
        assert_eq!(json["shards"][0]["master"]["role"], "master");
        assert_eq!(json["shards"][0]["slots"][0][1], 16383);
        let back: Topology = serde_json::from_value(json).unwrap();
        assert_eq!(back, topology);
    }
}
