//! The servers' own words for their deployment, parsed without a socket: `CLUSTER SHARDS`
//! (RESP2 or RESP3), `CLUSTER SLOTS` (Redis 6.2), `INFO replication`. The unit tests run on
//! replies captured from real servers (tests/golden/topology).

use anyhow::{Context, Result, anyhow, bail};
use redis::Value;

use super::model::Role;
use crate::measure::slots::SLOT_COUNT;
use crate::measure::target::{info_field, join_host_port};

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
