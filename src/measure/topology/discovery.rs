//! Discovery's connections: the `--url` node asked what the deployment looks like, every other
//! node checked reachable.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use redis::Value;

use super::assembly::{UrlNode, assemble};
use super::flags::NodeAddressMap;
use super::model::{Role, Topology, TopologyKind};
use super::parse::{
    ReplicaLine, ReplicationInfo, ReportedNode, ReportedShard, parse_cluster_shards,
    parse_cluster_slots, parse_info_replication,
};
use crate::measure::slots::SLOT_COUNT;
use crate::measure::target::{ConnInfo, info_field, split_host_port};

/// Limit on connecting to, and hearing PING back from, each discovered node: an announced address
/// that does not answer within it is taken as unreachable (NAT, a container's own address).
pub const REACH_TIMEOUT: Duration = Duration::from_secs(2);

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
    let mut link_up = |address: &str| replica_link_up(url, address);
    let url_address = url.address();
    if info_field(&info, "cluster_enabled") == Some("1") {
        let mut reported = match redis::cmd("CLUSTER")
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
        // A node that never met another announces no IP of its own (`:7407@17407 myself`):
        // it is the one discovery is talking to, at the --url's address (a one-node cluster
        // was refused under --topology auto; the hostile trial).
        for node in reported
            .iter_mut()
            .flat_map(|shard| shard.master.iter_mut().chain(shard.replicas.iter_mut()))
            .filter(|node| node.id.as_deref() == Some(myid.as_str()) && node.announced.is_empty())
        {
            node.announced = url_address.clone();
        }
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
        let (topology, mut warnings) = assemble(
            TopologyKind::Cluster,
            reported,
            &url_node,
            map,
            &mut reach,
            &mut link_up,
        )?;
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
    let mut shard = standalone_shard(master_announced, &master_info.replicas);
    if !shard.replicas.iter().any(|r| r.announced == url_announced)
        && shard
            .master
            .as_ref()
            .is_some_and(|m| m.announced != url_announced)
    {
        // The master does not list the URL's replica (it announces another address, or its
        // link is down): measure it anyway, it is the node the user named.
        shard.replicas.push(ReportedNode {
            id: None,
            announced: url_announced.clone(),
            role: Role::Replica,
            health: None,
        });
    }
    let reported = vec![shard];
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
        &mut link_up,
    )
}

/// A standalone deployment as one shard of every slot: the master (at `master_announced`) and
/// the replicas its INFO replication lists, each with the state the master gives it.
pub fn standalone_shard(master_announced: String, replicas: &[ReplicaLine]) -> ReportedShard {
    ReportedShard {
        id: None,
        slots: vec![(0, SLOT_COUNT - 1)],
        master: Some(ReportedNode {
            id: None,
            announced: master_announced,
            role: Role::Master,
            health: None,
        }),
        replicas: replicas
            .iter()
            .map(|line| ReportedNode {
                id: None,
                announced: line.announced.clone(),
                role: Role::Replica,
                health: Some(line.state.clone()),
            })
            .collect(),
    }
}

/// A standalone master's shard as it is now ([`standalone_shard`]), from its INFO replication on
/// `control`; an error when the node is no longer a master.
pub fn read_standalone_shard(
    control: &mut redis::Connection,
    conn: &ConnInfo,
    master_announced: &str,
) -> Result<ReportedShard> {
    let info = info_replication(control, conn)?;
    anyhow::ensure!(
        info.role == Role::Master,
        "{conn} is no longer a master (INFO replication)"
    );
    Ok(standalone_shard(
        master_announced.to_string(),
        &info.replicas,
    ))
}

fn info_replication(control: &mut redis::Connection, conn: &ConnInfo) -> Result<ReplicationInfo> {
    let text: String = redis::cmd("INFO")
        .arg("replication")
        .query(control)
        .with_context(|| format!("INFO replication on {conn}"))?;
    parse_info_replication(&text).with_context(|| format!("INFO replication on {conn}"))
}

/// The socket addresses `address` (`host:port`) resolves to; none when it does not.
pub fn socket_addrs(address: &str) -> Vec<SocketAddr> {
    split_host_port(address)
        .and_then(|(host, port)| (host.as_str(), port).to_socket_addrs().ok())
        .map(Iterator::collect)
        .unwrap_or_default()
}

/// Whether the node at `address` says itself that it is a replica whose link to its master is
/// up (INFO replication `role:slave`, `master_link_status:up`), asked with the URL's settings and
/// the short timeout of [`check_reachable`]; `false` when it cannot be asked.
pub fn replica_link_up(url: &ConnInfo, address: &str) -> bool {
    let asked = || -> Result<bool> {
        let mut conn = url.for_node(address)?;
        conn.connect_timeout = conn.connect_timeout.min(REACH_TIMEOUT);
        conn.command_timeout = conn.command_timeout.min(REACH_TIMEOUT);
        let mut control = conn.redis_connection()?;
        let info = info_replication(&mut control, &conn)?;
        Ok(info.role == Role::Replica && info.master_link_up)
    };
    asked().unwrap_or(false)
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
