//! A throwaway Redis Cluster, or a master with replicas, on free loopback ports: `--cluster N
//! [--replicas R]` and `--replicas R` without `--url`.
//!
//! Every node is the embedded server of [`crate::measure::target`] (its own temporary directory,
//! persistence off, its process group, killed if the tool dies), so a node is stopped on drop
//! like the single server, and so is every node already started when forming fails part-way.
//! The cluster is formed with the servers' own commands rather than `redis-cli --cluster create`,
//! which needs a redis-cli (or valkey-cli) of a matching version beside the server:
//! `CLUSTER ADDSLOTSRANGE` (ADDSLOTS on 6.2), `CLUSTER MEET`, `CLUSTER REPLICATE`. It is ready
//! when every node reports `cluster_state:ok`, knows every other node, and every replica is in
//! sync by its own account and its master's; where the server has `CLUSTER SHARDS`, also when
//! every node reports every other `online`, which is what discovery will read.
//!
//! Lives beside `target` and `topology` rather than inside `target` so the modules keep no
//! cycle (it uses the topology's roles and parser; the topology uses the target's connections).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

use crate::error::UsageError;
use crate::measure::target::{
    ConnInfo, EmbeddedServer, ServerBinary, ServerFlavor, free_port, info_field,
};
use crate::measure::topology::{Role, parse_cluster_shards, parse_info_replication};

/// How long forming the cluster (or syncing the replicas) may take once the servers run. It
/// takes a few seconds on loopback; the limit is for a loaded machine.
pub const FORM_TIMEOUT: Duration = Duration::from_secs(60);

/// `cluster-node-timeout` of a throwaway cluster, ms: short, so nodes that meet are soon
/// pinged by every other (gossip reaches a node at least every half of it).
pub const NODE_TIMEOUT_MS: u32 = 2000;

/// Most masters `--cluster` starts.
pub const MAX_MASTERS: usize = 16;
/// Most replicas per master `--replicas` starts.
pub const MAX_REPLICAS: usize = 5;

/// `--cluster N` and `--replicas R`, as the command line gives them (without `--url`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LocalTopologySpec {
    /// `--cluster N`: masters of a cluster to start; `None` for cluster mode off.
    pub cluster: Option<usize>,
    /// `--replicas R`: replicas per master.
    pub replicas: usize,
}

impl LocalTopologySpec {
    /// Checks the counts, naming the flag.
    pub fn validate(&self) -> Result<(), UsageError> {
        if let Some(masters) = self.cluster
            && !(1..=MAX_MASTERS).contains(&masters)
        {
            return Err(UsageError::invalid(
                "--cluster",
                masters,
                format!("expected 1 to {MAX_MASTERS} masters"),
            ));
        }
        if self.replicas > MAX_REPLICAS {
            return Err(UsageError::invalid(
                "--replicas",
                self.replicas,
                format!("expected 0 to {MAX_REPLICAS} replicas per master"),
            ));
        }
        Ok(())
    }

    /// True when it asks for neither: the single embedded server of before.
    pub fn is_single_server(&self) -> bool {
        self.cluster.is_none() && self.replicas == 0
    }

    /// Starts what it asks for (see [`LocalCluster::start`], [`LocalCluster::start_replicas`]).
    pub fn start(&self, server_bin: Option<&Path>, extra_args: &[String]) -> Result<LocalCluster> {
        self.validate()?;
        match self.cluster {
            Some(masters) => LocalCluster::start(server_bin, masters, self.replicas, extra_args),
            None => LocalCluster::start_replicas(server_bin, self.replicas, extra_args),
        }
    }
}

/// One server of a [`LocalCluster`].
pub struct LocalNode {
    server: EmbeddedServer,
    role: Role,
    shard: usize,
    /// `cluster-port`, where the server has the setting (7.0+); else the port + 10000.
    bus_port: Option<u16>,
}

impl LocalNode {
    /// Master or replica, as started.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The shard (0-based, masters in slot order) it was started in.
    pub fn shard(&self) -> usize {
        self.shard
    }

    /// Its loopback port.
    pub fn port(&self) -> u16 {
        self.server.port()
    }

    /// `127.0.0.1:port`, as the node announces itself.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port())
    }

    /// How to connect to it.
    pub fn conn_info(&self) -> ConnInfo {
        self.server.conn_info()
    }

    /// Its process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.server.pid()
    }
}

/// Servers started for one run and stopped with it: a cluster, or a master with replicas.
pub struct LocalCluster {
    /// Masters first (shard order), then replicas; stopped from the back.
    nodes: Vec<LocalNode>,
    cluster: bool,
    binary: ServerBinary,
    formed_in: Duration,
}

impl LocalCluster {
    /// Starts `masters` masters with `replicas_per_master` replicas each, in cluster mode, each
    /// with the `--server-arg` settings `extra_args`, forms the cluster (slots split evenly in
    /// shard order) and waits until it is ready (see the module comment). Every process is
    /// stopped if any step fails. As with [`EmbeddedServer::start`], the servers die with the
    /// thread that calls this: call it from one that lives as long as they are wanted.
    pub fn start(
        server_bin: Option<&Path>,
        masters: usize,
        replicas_per_master: usize,
        extra_args: &[String],
    ) -> Result<LocalCluster> {
        LocalTopologySpec {
            cluster: Some(masters),
            replicas: replicas_per_master,
        }
        .validate()?;
        let binary = ServerBinary::resolve(server_bin)?;
        let mut cluster = LocalCluster {
            nodes: Vec::new(),
            cluster: true,
            binary,
            formed_in: Duration::ZERO,
        };
        let started = Instant::now();
        let layout = (0..masters).map(|shard| (Role::Master, shard)).chain(
            (0..masters)
                .flat_map(|shard| (0..replicas_per_master).map(move |_| (Role::Replica, shard))),
        );
        for (role, shard) in layout {
            cluster.add_node(role, shard, extra_args)?;
        }
        cluster.form(masters)?;
        cluster.formed_in = started.elapsed();
        Ok(cluster)
    }

    /// Starts one master with `replicas` replicas (cluster mode off), joined by `REPLICAOF`,
    /// and waits until every replica is in sync. Every process is stopped if any step fails.
    pub fn start_replicas(
        server_bin: Option<&Path>,
        replicas: usize,
        extra_args: &[String],
    ) -> Result<LocalCluster> {
        LocalTopologySpec {
            cluster: None,
            replicas,
        }
        .validate()?;
        let binary = ServerBinary::resolve(server_bin)?;
        let mut set = LocalCluster {
            nodes: Vec::new(),
            cluster: false,
            binary,
            formed_in: Duration::ZERO,
        };
        let started = Instant::now();
        set.add_node(Role::Master, 0, extra_args)?;
        for _ in 0..replicas {
            set.add_node(Role::Replica, 0, extra_args)?;
        }
        let master = set.nodes[0].address();
        let (host, port) = master.split_once(':').unwrap_or(("127.0.0.1", "0"));
        for node in &set.nodes[1..] {
            let mut conn = connect(node)?;
            redis::cmd("REPLICAOF")
                .arg(host)
                .arg(port)
                .query::<()>(&mut conn)
                .with_context(|| format!("REPLICAOF {master} on {}", node.address()))?;
        }
        set.wait("the replicas did not sync", |set| {
            set.replicas_in_sync(false)
        })?;
        set.formed_in = started.elapsed();
        Ok(set)
    }

    /// Every node: masters in shard order, then replicas.
    pub fn nodes(&self) -> &[LocalNode] {
        &self.nodes
    }

    /// True for a cluster, false for a master with replicas.
    pub fn is_cluster(&self) -> bool {
        self.cluster
    }

    /// The binary every node runs.
    pub fn binary(&self) -> &ServerBinary {
        &self.binary
    }

    /// How to connect to the first master, from which the topology is discovered.
    pub fn conn_info(&self) -> ConnInfo {
        self.nodes
            .first()
            .map(LocalNode::conn_info)
            .unwrap_or_else(|| ConnInfo::loopback(0))
    }

    /// `redis://127.0.0.1:PORT` of the first master.
    pub fn url(&self) -> String {
        format!("redis://{}", self.conn_info().address())
    }

    /// Process ids of the nodes still running.
    pub fn pids(&self) -> Vec<u32> {
        self.nodes.iter().filter_map(LocalNode::pid).collect()
    }

    /// How long forming (or syncing) took, from the first server's start to ready.
    pub fn formed_in(&self) -> Duration {
        self.formed_in
    }

    /// Stops every node, replicas first (a Redis 7 master told to stop waits for replicas
    /// that lag), and removes their directories. Also done on drop.
    pub fn stop(&mut self) {
        while let Some(mut node) = self.nodes.pop() {
            node.server.stop();
        }
    }

    fn add_node(&mut self, role: Role, shard: usize, extra_args: &[String]) -> Result<()> {
        let mut settings = vec![
            // A replica links up without a 5 s wait for more replicas to share the transfer.
            "repl-diskless-sync-delay 0".to_string(),
            // The master pings its replicas every second, so they acknowledge an offset soon:
            // Redis 7.0 calls a replica at offset 0 `loading` in CLUSTER SHARDS.
            "repl-ping-replica-period 1".to_string(),
        ];
        if self.cluster {
            settings.extend([
                "cluster-enabled yes".to_string(),
                "cluster-config-file nodes.conf".to_string(),
                format!("cluster-node-timeout {NODE_TIMEOUT_MS}"),
            ]);
        }
        // A replica of a master with a password needs it too.
        let password = extra_args.iter().rev().find_map(|setting| {
            let mut words = setting.split_whitespace();
            (words.next()?.trim_start_matches("--") == "requirepass").then(|| words.next())?
        });
        let has_masterauth = extra_args
            .iter()
            .any(|setting| setting.trim_start_matches("--").starts_with("masterauth "));
        if let (Some(password), false) = (password, has_masterauth) {
            settings.push(format!("masterauth {password}"));
        }
        let has_cluster_port =
            self.binary.flavor == ServerFlavor::Valkey || self.binary.major() >= 7;
        let mut last_error = None;
        // The cluster bus listens on another port: `cluster-port` names a free one (7.0+); on
        // 6.2 it is the port + 10000, which must be free too and below 65536, so a start may
        // fail and is tried again on another port.
        for _attempt in 0..3 {
            let mut args = settings.clone();
            let bus_port = if self.cluster && has_cluster_port {
                Some(free_port()?)
            } else {
                None
            };
            if let Some(bus_port) = bus_port {
                args.push(format!("cluster-port {bus_port}"));
            }
            args.extend(extra_args.iter().cloned());
            match EmbeddedServer::start(Some(&self.binary.path), &args) {
                Ok(server) => {
                    self.nodes.push(LocalNode {
                        server,
                        role,
                        shard,
                        bus_port,
                    });
                    return Ok(());
                }
                Err(err) => last_error = Some(err),
            }
        }
        Err(last_error
            .unwrap_or_else(|| anyhow!("could not start"))
            .context(format!("starting the {role} of shard {shard}")))
    }

    fn form(&mut self, masters: usize) -> Result<()> {
        let mut conns = self.nodes.iter().map(connect).collect::<Result<Vec<_>>>()?;
        let has_range = self.binary.flavor == ServerFlavor::Valkey || self.binary.major() >= 7;
        for (index, (node, conn)) in self.nodes.iter().zip(&mut conns).enumerate() {
            // Distinct epochs up front, as redis-cli does: no collision to resolve later.
            redis::cmd("CLUSTER")
                .arg("SET-CONFIG-EPOCH")
                .arg(index + 1)
                .query::<()>(conn)
                .with_context(|| format!("CLUSTER SET-CONFIG-EPOCH on {}", node.address()))?;
            if node.role != Role::Master {
                continue;
            }
            let (lo, hi) = slot_range(node.shard, masters);
            let mut cmd = redis::cmd("CLUSTER");
            if has_range {
                cmd.arg("ADDSLOTSRANGE").arg(lo).arg(hi);
            } else {
                cmd.arg("ADDSLOTS").arg((lo..=hi).collect::<Vec<u16>>());
            }
            cmd.query::<()>(conn)
                .with_context(|| format!("assigning slots {lo}-{hi} to {}", node.address()))?;
        }
        for node in &self.nodes[1..] {
            let mut meet = redis::cmd("CLUSTER");
            meet.arg("MEET").arg("127.0.0.1").arg(node.port());
            if let Some(bus_port) = node.bus_port {
                meet.arg(bus_port);
            }
            meet.query::<()>(&mut conns[0])
                .with_context(|| format!("CLUSTER MEET {}", node.address()))?;
        }
        self.wait("the nodes did not all meet", |cluster| {
            cluster.all_known(&mut conns, false)
        })?;
        let mut master_ids = Vec::new();
        for (node, conn) in self.nodes.iter().zip(&mut conns).take(masters) {
            let id: String = redis::cmd("CLUSTER")
                .arg("MYID")
                .query(conn)
                .with_context(|| format!("CLUSTER MYID on {}", node.address()))?;
            master_ids.push(id);
        }
        for (node, conn) in self.nodes.iter().zip(&mut conns).skip(masters) {
            redis::cmd("CLUSTER")
                .arg("REPLICATE")
                .arg(&master_ids[node.shard])
                .query::<()>(conn)
                .with_context(|| {
                    format!(
                        "CLUSTER REPLICATE on {} (a replica of {})",
                        node.address(),
                        self.nodes[node.shard].address()
                    )
                })?;
        }
        self.wait("the cluster did not become ready", |cluster| {
            cluster.all_known(&mut conns, true)?;
            cluster.replicas_in_sync(true)?;
            if has_range {
                cluster.shards_all_online(&mut conns)?;
            }
            Ok(())
        })
    }

    /// Retries `ready` until it passes or [`FORM_TIMEOUT`] is over; the error names the last
    /// condition not met.
    fn wait(&mut self, what: &str, mut ready: impl FnMut(&mut Self) -> Result<()>) -> Result<()> {
        let deadline = Instant::now() + FORM_TIMEOUT;
        loop {
            let outcome = ready(self);
            match outcome {
                Ok(()) => return Ok(()),
                Err(err) if Instant::now() > deadline => {
                    return Err(err.context(format!("{what} within {} s", FORM_TIMEOUT.as_secs())));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// Every node lists every node, none in handshake or failing, with `cluster_state:ok` when
    /// `complete` (slots assigned and replicas attached).
    fn all_known(&self, conns: &mut [redis::Connection], complete: bool) -> Result<()> {
        for (node, conn) in self.nodes.iter().zip(conns.iter_mut()) {
            let listing: String = redis::cmd("CLUSTER")
                .arg("NODES")
                .query(conn)
                .with_context(|| format!("CLUSTER NODES on {}", node.address()))?;
            let lines: Vec<&str> = listing.lines().filter(|l| !l.trim().is_empty()).collect();
            if lines.len() != self.nodes.len() {
                bail!(
                    "{} knows {} of {} nodes",
                    node.address(),
                    lines.len(),
                    self.nodes.len()
                );
            }
            for line in &lines {
                let flags = line.split_whitespace().nth(2).unwrap_or("");
                if let Some(flag) = flags
                    .split(',')
                    .find(|f| matches!(*f, "handshake" | "noaddr" | "fail" | "fail?"))
                {
                    bail!("{} sees a node as {flag}: {line}", node.address());
                }
            }
            if complete {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(conn)
                    .with_context(|| format!("CLUSTER INFO on {}", node.address()))?;
                let state = info_field(&info, "cluster_state").unwrap_or("unknown");
                if state != "ok" {
                    bail!("{} has cluster_state:{state}", node.address());
                }
                let replicas = lines.iter().filter(|l| l.contains("slave")).count();
                let expected = self
                    .nodes
                    .iter()
                    .filter(|n| n.role == Role::Replica)
                    .count();
                if replicas != expected {
                    bail!("{} sees {replicas} of {expected} replicas", node.address());
                }
            }
        }
        Ok(())
    }

    /// Each replica's link to its master is up, and its master lists it online; with
    /// `acknowledged`, at a non-zero offset too.
    fn replicas_in_sync(&self, acknowledged: bool) -> Result<()> {
        for replica in self.nodes.iter().filter(|n| n.role == Role::Replica) {
            let own = replication(replica)?;
            if !own.master_link_up {
                bail!("replica {} has its master link down", replica.address());
            }
            let master = self
                .nodes
                .iter()
                .find(|n| n.role == Role::Master && n.shard == replica.shard)
                .context("a replica without a master")?;
            let listed = replication(master)?
                .replicas
                .into_iter()
                // By port: a replica may announce another IP (replica-announce-ip).
                .find(|line| line.announced.ends_with(&format!(":{}", replica.port())));
            match listed {
                Some(line) if line.state != "online" => bail!(
                    "master {} lists replica {} as {}",
                    master.address(),
                    replica.address(),
                    line.state
                ),
                Some(line) if acknowledged && line.offset.unwrap_or(0) <= 0 => bail!(
                    "replica {} has acknowledged no offset to {} yet",
                    replica.address(),
                    master.address()
                ),
                Some(_) => {}
                None => bail!(
                    "master {} does not list replica {}",
                    master.address(),
                    replica.address()
                ),
            }
        }
        Ok(())
    }

    /// Every node's CLUSTER SHARDS reports every node `online` (Redis 7.0 reports a replica
    /// `loading` until its offset reaches that node by gossip).
    fn shards_all_online(&self, conns: &mut [redis::Connection]) -> Result<()> {
        for (node, conn) in self.nodes.iter().zip(conns.iter_mut()) {
            let reply: redis::Value = redis::cmd("CLUSTER")
                .arg("SHARDS")
                .query(conn)
                .with_context(|| format!("CLUSTER SHARDS on {}", node.address()))?;
            let shards = parse_cluster_shards(&reply, false)?;
            let reported = shards
                .iter()
                .flat_map(|shard| shard.master.iter().chain(&shard.replicas));
            let mut count = 0;
            for other in reported {
                count += 1;
                if let Some(health) = other.health.as_deref().filter(|h| *h != "online") {
                    bail!("{} reports {} as {health}", node.address(), other.announced);
                }
            }
            if count != self.nodes.len() {
                bail!(
                    "{} lists {count} of {} nodes in CLUSTER SHARDS",
                    node.address(),
                    self.nodes.len()
                );
            }
        }
        Ok(())
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The slots of master `shard` of `masters`: even shares, in order, covering all 16384.
fn slot_range(shard: usize, masters: usize) -> (u16, u16) {
    let total = usize::from(crate::measure::slots::SLOT_COUNT);
    let lo = shard * total / masters;
    let hi = (shard + 1) * total / masters - 1;
    (lo as u16, hi as u16)
}

fn connect(node: &LocalNode) -> Result<redis::Connection> {
    let mut conn = node.conn_info();
    conn.command_timeout = Duration::from_secs(10);
    conn.redis_connection()
}

fn replication(node: &LocalNode) -> Result<crate::measure::topology::ReplicationInfo> {
    let mut conn = connect(node)?;
    let text: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut conn)
        .with_context(|| format!("INFO replication on {}", node.address()))?;
    parse_info_replication(&text).with_context(|| format!("INFO replication on {}", node.address()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_split_evenly_and_cover_everything() {
        assert_eq!(slot_range(0, 1), (0, 16383));
        assert_eq!(
            (0..3).map(|s| slot_range(s, 3)).collect::<Vec<_>>(),
            vec![(0, 5460), (5461, 10921), (10922, 16383)]
        );
        for masters in 1..=MAX_MASTERS {
            let mut next = 0u32;
            for shard in 0..masters {
                let (lo, hi) = slot_range(shard, masters);
                assert_eq!(u32::from(lo), next);
                assert!(hi >= lo);
                next = u32::from(hi) + 1;
            }
            assert_eq!(next, 16384);
        }
    }

    #[test]
    fn counts_are_checked_naming_the_flag() {
        let spec = |cluster, replicas| LocalTopologySpec { cluster, replicas };
        assert!(spec(None, 0).is_single_server());
        assert!(spec(Some(3), 1).validate().is_ok());
        assert!(spec(None, 2).validate().is_ok());
        let err = spec(Some(0), 1).validate().unwrap_err().to_string();
        assert!(err.starts_with("invalid value '0' for --cluster"), "{err}");
        let err = spec(Some(17), 0).validate().unwrap_err().to_string();
        assert!(err.contains("--cluster"), "{err}");
        let err = spec(None, 6).validate().unwrap_err().to_string();
        assert!(err.starts_with("invalid value '6' for --replicas"), "{err}");
    }
}
