//! The one layer that opens what a command works on, for every command: the `--url` server
//! (or `--host`/`--port`), a server the tool starts, a throwaway cluster or replica set
//! (`--cluster N` / `--replicas R`), and the nodes behind the server (topology discovery).
//! Commands receive an opened deployment; dropping it stops every server the tool started, on
//! every way out.

use anyhow::{Context, Result};

use super::Output;
use crate::cli::sections::target::TargetArgs;
use crate::cli::sections::topology::{DiscoveryPlan, TopologyPlan, choose_shard};
use crate::error::UsageError;
use crate::load::cluster::SlotMap;
use crate::load::keyspace::{KeyNaming, META_KEY};
use crate::measure::local_cluster::{LocalCluster, LocalTopologySpec};
use crate::measure::slots::SLOT_COUNT;
use crate::measure::target::{ConnInfo, Target, TargetSpec, info_field};
use crate::measure::topology::{Topology, TopologyKind, TopologyMode, discover};
use crate::record::{NodeRole, ProbeCmd};
use crate::session::Probed;

/// Opens one server. A server the tool did not start is first asked `INFO server` on a bounded
/// reader ([`crate::measure::resp::first_contact`]), so that a peer that is not a Redis server
/// ends the command with one line instead of holding the control connection.
pub fn open_target(spec: &TargetSpec) -> Result<Target> {
    if let TargetSpec::External(conn) = spec {
        crate::measure::resp::first_contact(conn)?;
    }
    Target::open(spec)
}

/// What a probing command (the main job, calibrate) works on: the server it was given or
/// started, the nodes it probes, and where its writes go.
pub struct Deployment {
    /// The `--url` server, the one the tool started, or the first node of the cluster it
    /// started.
    pub target: Target,
    /// Where the writes go when that is not [`Deployment::target`]: the chosen shard's master.
    written: Option<Target>,
    /// Every node probed (the target alone until [`Deployment::discover`]).
    pub probed: Probed,
    /// The throwaway cluster or replica set; its servers are stopped with the deployment.
    local: Option<LocalCluster>,
}

impl Deployment {
    /// Opens `spec`, or first starts the throwaway deployment `local` asks for (from the
    /// embedded server's binary and settings); says what it started.
    pub fn start(spec: &TargetSpec, local: &LocalTopologySpec, out: &Output) -> Result<Deployment> {
        let (target, local) = match spec {
            TargetSpec::Embedded {
                binary,
                extra_args,
                connect_timeout,
                command_timeout,
            } if !local.is_single_server() => {
                let cluster = local.start(binary.as_deref(), extra_args)?;
                out.note(&describe_local(&cluster));
                let mut conn = cluster.conn_info();
                conn.connect_timeout = *connect_timeout;
                conn.command_timeout = *command_timeout;
                let mut target = Target::open(&TargetSpec::External(conn))?;
                // The tool's own servers: it may tune them, as its single embedded one.
                target.server.embedded = true;
                target.server.binary = Some(cluster.binary().path.display().to_string());
                target.server.server_args = extra_args
                    .iter()
                    .map(|a| crate::measure::target::redacted_setting(a))
                    .collect();
                (target, Some(cluster))
            }
            _ => (open_target(spec)?, None),
        };
        Ok(Deployment {
            probed: Probed::single(&target),
            target,
            written: None,
            local,
        })
    }

    /// Finds every node of the deployment (`--topology auto`), each probed on its own with
    /// `probe_cmd`; the writes (when the run `writes`) go to the chosen shard's master, which
    /// may not be the `--url` server. Notes and warnings go to `out`.
    pub fn discover(
        &mut self,
        plan: &TopologyPlan,
        writes: bool,
        probe_cmd: ProbeCmd,
        out: &Output,
    ) -> Result<()> {
        if plan.discovery.mode == TopologyMode::Single {
            // One server is one shard: `--shard 0` or its own address, nothing else.
            return match plan.shard.as_deref() {
                Some(choice) if choice != "0" && choice != self.target.conn.address() => {
                    Err(UsageError::invalid(
                        "--shard",
                        choice,
                        "the run measures one server (one shard, numbered 0)",
                    )
                    .into())
                }
                _ => Ok(()),
            };
        }
        let target = &self.target;
        let (topology, notes) = discover(&target.conn, &plan.discovery.addresses)?;
        for note in &notes {
            out.warn(note);
        }
        // A replica named by --url (cluster mode off) is where the writes would go: it
        // refuses them later, as before; the other nodes are still probed in observe mode.
        let url_is_replica = topology.kind == TopologyKind::Standalone
            && topology
                .node(&target.conn.address())
                .is_some_and(|n| n.role == NodeRole::Replica);
        if topology.nodes().len() <= 1 || (url_is_replica && writes) {
            // Not used then, but never ignored: a shard the deployment lacks is refused.
            choose_shard(plan.shard.as_deref(), &topology)?;
            // A lone standalone master: a replica that attaches during the run is probed
            // from then on.
            if topology.kind == TopologyKind::Standalone
                && topology.nodes().len() == 1
                && !url_is_replica
            {
                self.probed.lone_master = Some(topology);
                self.probed.addresses = plan.discovery.addresses.clone();
            }
            return Ok(());
        }
        let shard = choose_shard(plan.shard.as_deref(), &topology)?;
        let mut probed = Probed::from_topology(&topology, shard, &target.conn, probe_cmd)?;
        probed.addresses = plan.discovery.addresses.clone();
        out.note(&describe_topology(&topology, writes.then_some(shard)));
        let master = &topology.shards[shard].master.address;
        if *master != target.conn.address() {
            let mut written = Target::open(&TargetSpec::External(target.conn.for_node(master)?))?;
            written.server.embedded = target.server.embedded;
            written.server.binary = target.server.binary.clone();
            self.written = Some(written);
        }
        self.probed = probed;
        Ok(())
    }

    /// The server the writes go to (and the run's keys live on).
    pub fn written(&self) -> &Target {
        self.written.as_ref().unwrap_or(&self.target)
    }
}

impl Drop for Deployment {
    fn drop(&mut self) {
        self.target.shutdown();
        if let Some(cluster) = self.local.as_mut() {
            cluster.stop();
        }
    }
}

/// Says which server the command works on: the one it started, or the one at `--url`
/// (`verb`: "measuring", "loading"), and warns about its persistence.
pub fn describe_target(target: &Target, verb: &str, out: &Output) {
    let server = &target.server;
    match (&target.embedded, &server.binary) {
        (Some(embedded), Some(binary)) => out.note(&format!(
            "started {} {} ({binary}) on 127.0.0.1:{}, persistence {}; it is stopped when the run ends",
            server.flavor,
            server.version,
            embedded.port(),
            if target.persistence_on() {
                "on (--server-arg)"
            } else {
                "off"
            }
        )),
        _ => out.note(&format!(
            "{verb} {} ({} {})",
            target.conn, server.flavor, server.version
        )),
    }
    for warning in target.persistence_warnings() {
        out.warn(&warning);
    }
}

/// One line on what the run probes: `topology: cluster of 3 shards, 6 nodes (3 replicas);
/// writes go to shard 0 (127.0.0.1:7000, slots 0-5460)` (the writes' part only for a run that
/// writes: `probe keys` and observe mode write nothing).
fn describe_topology(topology: &Topology, written: Option<usize>) -> String {
    let nodes = topology.nodes().len();
    let replicas: usize = topology.shards.iter().map(|s| s.replicas.len()).sum();
    match topology.kind {
        TopologyKind::Cluster => format!(
            "topology: cluster of {} shard(s), {nodes} nodes ({replicas} replicas), each probed{}",
            topology.shards.len(),
            written
                .map(|w| format!(
                    "; writes go to shard {w} ({})",
                    topology.shards[w].master.announced
                ))
                .unwrap_or_default(),
        ),
        TopologyKind::Standalone => format!(
            "topology: {} with {replicas} replica(s), each probed",
            topology.shards[written.unwrap_or(0)].master.announced
        ),
    }
}

/// `started a cluster of 3 masters with 1 replica each (redis 7.0.15) on 127.0.0.1:40001..40006,
/// persistence off; they are stopped when the run ends`.
fn describe_local(cluster: &LocalCluster) -> String {
    let nodes = cluster.nodes();
    let masters = nodes
        .iter()
        .filter(|n| n.role() == NodeRole::Master)
        .count();
    let replicas = (nodes.len() - masters) / masters.max(1);
    let ports: Vec<String> = nodes.iter().map(|n| n.port().to_string()).collect();
    let what = if cluster.is_cluster() {
        format!("a cluster of {masters} master(s) with {replicas} replica(s) each")
    } else {
        format!("a master with {replicas} replica(s)")
    };
    format!(
        "started {what} ({} {}) on 127.0.0.1 ports {}, persistence off; they are stopped when the run ends",
        cluster.binary().flavor.name(),
        cluster.binary().version,
        ports.join(",")
    )
}

/// A cluster populate, load or clean works on: its topology and the master of the
/// population's description.
pub struct LoadCluster {
    /// Every reachable node, shard by shard.
    pub topology: Topology,
    /// Slot -> shard.
    pub slots: SlotMap,
    /// The master serving [`META_KEY`]'s slot.
    pub meta_conn: ConnInfo,
}

impl LoadCluster {
    /// The cluster behind `conn`: `None` for a server with cluster mode off (the single
    /// server path, whatever its replicas). `--topology single` refuses a cluster node in one
    /// line rather than failing request by request.
    pub fn of(conn: &ConnInfo, plan: &DiscoveryPlan, out: &Output) -> Result<Option<LoadCluster>> {
        if !cluster_enabled(conn)? {
            return Ok(None);
        }
        if plan.mode == TopologyMode::Single {
            return Err(UsageError::Conflict(format!(
                "{conn} is a Redis Cluster node: with --topology single the load keys of other nodes' slots would be answered MOVED; use --topology auto (the default) to work on every master"
            ))
            .into());
        }
        let (topology, notes) = discover(conn, &plan.addresses)?;
        for note in &notes {
            out.warn(note);
        }
        anyhow::ensure!(
            topology.kind == TopologyKind::Cluster,
            "{conn} says cluster_enabled:1 but the topology found is not a cluster"
        );
        let covered = topology.slots_covered();
        if covered < u32::from(SLOT_COUNT) {
            return Err(UsageError::Conflict(format!(
                "the cluster of {conn} serves only {covered} of {SLOT_COUNT} slots from reachable masters: the load keys of the others have nowhere to go (see --node-address)"
            ))
            .into());
        }
        let slots = SlotMap::new(&topology);
        let meta_shard = slots
            .shard_of_key(META_KEY.as_bytes())
            .context("no master serves the slot of the population's description")?;
        let meta_conn = conn.for_node(&topology.shards[meta_shard].master.address)?;
        out.note(&format!(
            "cluster of {} masters and {} replicas (from {conn}); {META_KEY} on {}",
            topology.shards.len(),
            topology.nodes().len() - topology.shards.len(),
            meta_conn.address()
        ));
        Ok(Some(LoadCluster {
            topology,
            slots,
            meta_conn,
        }))
    }

    /// The connection of every master, with the indices of the load keys `0..keys` its slots
    /// hold, shard by shard.
    pub fn masters(
        &self,
        conn: &ConnInfo,
        keys: u64,
    ) -> Result<Vec<(ConnInfo, std::sync::Arc<Vec<u32>>)>> {
        let (by_shard, _) = self.slots.partition(&KeyNaming::load(), keys);
        self.topology
            .shards
            .iter()
            .zip(by_shard)
            .map(|(shard, indices)| {
                Ok((
                    conn.for_node(&shard.master.address)?,
                    std::sync::Arc::new(indices),
                ))
            })
            .collect()
    }
}

/// `INFO cluster` says `cluster_enabled:1`.
pub fn cluster_enabled(conn: &ConnInfo) -> Result<bool> {
    let mut control = conn.redis_connection()?;
    let info: String = redis::cmd("INFO")
        .arg("cluster")
        .query(&mut control)
        .with_context(|| format!("INFO cluster on {conn}"))?;
    Ok(info_field(&info, "cluster_enabled") == Some("1"))
}

/// What populate and clean work on: the `--url` server (they need one: their keys outlive the
/// command), and the cluster behind it when it is a cluster node.
pub struct KeyspaceDeployment {
    /// The `--url` server.
    pub target: Target,
    /// Its cluster, when it is a cluster node.
    pub cluster: Option<LoadCluster>,
}

impl KeyspaceDeployment {
    /// Opens the `--url` server of `probe <command>` and finds its cluster. `clean` works over
    /// TLS (redis-rs); `populate` does not (plain sockets).
    pub fn open(
        args: &TargetArgs,
        discovery: &DiscoveryPlan,
        command: &str,
        allow_tls: bool,
        out: &Output,
    ) -> Result<KeyspaceDeployment> {
        let spec = args.to_spec(std::env::var("REDISCLI_AUTH").ok())?;
        if !allow_tls {
            refuse_tls(&spec, "--url", &spec_url(args))?;
        }
        if let TargetSpec::Embedded { .. } = spec {
            return Err(UsageError::Conflict(format!(
                "probe {command} needs --url (or --host/--port): its keys are meant to outlive the command, and a server the tool starts is stopped when it ends (probe load without --url populates its own server)"
            ))
            .into());
        }
        let target = open_target(&spec)?;
        let cluster = LoadCluster::of(&target.conn, discovery, out)?;
        Ok(KeyspaceDeployment { target, cluster })
    }

    /// Where the population's description lives: the cluster's master of its slot, or the
    /// server.
    pub fn meta_conn(&self) -> &ConnInfo {
        self.cluster
            .as_ref()
            .map_or(&self.target.conn, |c| &c.meta_conn)
    }
}

/// What `probe load` works on: every server given (or the one it started), and the cluster
/// behind a cluster node; every server the tool started is stopped when it drops.
pub struct LoadDeployment {
    /// One per `--url`, or the embedded server.
    pub opened: Vec<Target>,
    /// The cluster of the one cluster node given.
    pub cluster: Option<LoadCluster>,
}

impl LoadDeployment {
    /// Opens every server of `specs` (saying which, `loading ...`), and finds the cluster of a
    /// cluster node, which must then be the only server given.
    pub fn open(
        specs: &[TargetSpec],
        discovery: &DiscoveryPlan,
        out: &Output,
    ) -> Result<LoadDeployment> {
        let mut deployment = LoadDeployment {
            opened: Vec::with_capacity(specs.len()),
            cluster: None,
        };
        for spec in specs {
            let target = open_target(spec)?;
            describe_target(&target, "loading", out);
            deployment.opened.push(target);
        }
        // Two URLs of one server (`localhost` and `127.0.0.1`) loaded it as two, with an "all 2
        // servers" total (the hostile trial): the server's INFO run_id says it is one.
        let mut seen: Vec<(&str, String)> = Vec::new();
        for target in &deployment.opened {
            let Some(id) = target.server.run_id.as_deref() else {
                continue;
            };
            if let Some((_, first)) = seen.iter().find(|(known, _)| *known == id) {
                return Err(UsageError::invalid(
                    "--url",
                    target.conn.to_string(),
                    format!("is the same server as {first} (INFO run_id {id}): each server once"),
                )
                .into());
            }
            seen.push((id, target.conn.to_string()));
        }
        for target in deployment.opened.iter().filter(|t| t.embedded.is_none()) {
            if let Some(found) = LoadCluster::of(&target.conn, discovery, out)? {
                if deployment.opened.len() > 1 {
                    return Err(UsageError::invalid(
                        "--url",
                        target.conn.to_string(),
                        "is a cluster node: give one node of the cluster (the others are found) and no other server",
                    )
                    .into());
                }
                deployment.cluster = Some(found);
            }
        }
        Ok(deployment)
    }
}

impl Drop for LoadDeployment {
    fn drop(&mut self) {
        for target in &mut self.opened {
            target.shutdown();
        }
    }
}

/// The load clients and populate speak plain TCP from their own event loop or threads: a
/// `rediss://` server is refused before anything is sent.
pub fn refuse_tls(spec: &TargetSpec, flag: &'static str, url: &str) -> Result<(), UsageError> {
    if let TargetSpec::External(conn) = spec
        && conn.tls.is_some()
    {
        return Err(UsageError::invalid(
            flag,
            crate::measure::target::redact_url(url),
            "TLS (rediss://) is not supported by populate and load yet: their clients use plain sockets",
        ));
    }
    Ok(())
}

/// The URL a TLS refusal names: `--url`'s (redacted there), or the one --host/--port make.
fn spec_url(args: &TargetArgs) -> String {
    args.url
        .clone()
        .or_else(|| args.host_port_url().ok().flatten())
        .unwrap_or_default()
}
