//! Watches a cluster's topology while a run goes: every [`WATCH_EVERY`] it asks one reachable
//! node for `CLUSTER SHARDS` (`CLUSTER SLOTS` before Redis 7.0) and reports what changed since
//! the last look: a replica promoted, a master demoted, a node gone, failing or new. A failover
//! in the middle of a run shows as such a change, with its wall-clock time, beside the probes'
//! errors and stalls of the nodes involved. A standalone master is watched the same way through
//! its own INFO replication ([`TopologyWatcher::standalone`]): a replica attached or gone.
//!
//! Told which nodes the run probes ([`TopologyWatcher::joining`]), it also says which node is
//! ready to be probed from now on: one new in the topology, or one left out at the start (a
//! replica still loading) that has come online. Such a node must serve a shard with slots (a
//! master just met serves none) and answer a PING; a replica must say itself that its link to
//! its master is up ([`replica_link_up`]), whatever the topology calls it. A node that is not ready is
//! looked at again after [`RECHECK_EVERY`] or when its state changes, so an unreachable one
//! does not slow every look.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::measure::event::EventSender;
use anyhow::{Context, Result};
use redis::Value;

use crate::measure::clock::RunClock;
use crate::measure::event::Event;
use crate::measure::target::ConnInfo;
use crate::measure::topology::{
    NodeAddressMap, ReportedShard, Role, check_reachable, parse_cluster_shards,
    parse_cluster_slots, read_standalone_shard, replica_link_up, socket_addrs,
};

/// How often the topology is read.
pub const WATCH_EVERY: Duration = Duration::from_secs(1);

/// How long a node found not ready to be probed (unreachable, or a replica whose link is not
/// up) waits before it is checked again: a check may take [`crate::measure::topology::REACH_TIMEOUT`].
pub const RECHECK_EVERY: Duration = Duration::from_secs(5);

/// A node ready to be probed from now on: new in the topology, or come online.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinedNode {
    /// `host:port` as it announces itself (the exports' `node`).
    pub announced: String,
    /// Where it is reached (`announced` after `--node-address`).
    pub address: String,
    /// Master or replica.
    pub role: Role,
    /// The slots of its shard, inclusive ranges in order (never empty).
    pub slots: Vec<(u16, u16)>,
}

/// What one look at the topology found.
#[derive(Debug, Default)]
pub struct Look {
    /// What changed, node by node (`127.0.0.1:7004`, `replica -> master`).
    pub changes: Vec<(String, String)>,
    /// Nodes to probe from now on.
    pub joined: Vec<JoinedNode>,
}

/// What the watcher needs to say which nodes are ready to be probed.
struct Joining {
    /// The run's connection settings (user, password, TLS, timeouts).
    template: ConnInfo,
    map: NodeAddressMap,
    /// Announced addresses probed already (from the start, or reported joined).
    probed: BTreeSet<String>,
    /// Where the nodes probed from the start are reached: a node the topology names otherwise
    /// (a replica the URL named by host name, listed by its master by IP once its link is up)
    /// is the same server, not a new one.
    probed_sockets: Vec<std::net::SocketAddr>,
    /// Nodes found not ready, as they looked then, and when they may be checked again
    /// (sooner if their look changes: a replica `loading -> online`).
    not_before: BTreeMap<String, (NodeView, Instant)>,
}

/// What a node looks like from the cluster's view, as far as a run cares.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NodeView {
    role: Role,
    /// The first slot of its shard (which shard it is in), `None` for a shard without slots.
    shard_first_slot: Option<u16>,
    /// `online`, `loading`, `fail`... where the server says.
    health: Option<String>,
    /// The slots of its shard.
    slots: Vec<(u16, u16)>,
}

impl NodeView {
    /// How a look compares two views: the slots only through their first (which shard).
    fn same_as(&self, other: &NodeView) -> bool {
        self.role == other.role
            && self.shard_first_slot == other.shard_first_slot
            && self.health == other.health
    }
}

/// Where the topology is read.
enum Source {
    /// A cluster: `CLUSTER SHARDS` (or `SLOTS`) from the first node that answers.
    Cluster(Vec<ConnInfo>),
    /// A standalone master: its own INFO replication lists its replicas; the master is named
    /// as the run names it.
    Standalone { master: ConnInfo, announced: String },
}

/// Reads the topology from the first node of a list that answers (a cluster's), or from a
/// standalone master, and compares.
pub struct TopologyWatcher {
    source: Source,
    conn: Option<redis::Connection>,
    last: Option<BTreeMap<String, NodeView>>,
    joining: Option<Joining>,
    /// Reads CLUSTER SHARDS' `tls-port` (the run's connections use TLS).
    tls: bool,
}

impl TopologyWatcher {
    /// Watches through `nodes` (any order: the first that answers is asked, and kept while it
    /// does). The first [`poll`](Self::poll) sets the reference.
    pub fn new(nodes: Vec<ConnInfo>) -> TopologyWatcher {
        TopologyWatcher::from_source(Source::Cluster(nodes))
    }

    /// Watches a standalone master, `announced` as the run names it, through its INFO
    /// replication: a replica that attaches during the run (`REPLICAOF`) is new in the topology.
    pub fn standalone(master: ConnInfo, announced: String) -> TopologyWatcher {
        TopologyWatcher::from_source(Source::Standalone { master, announced })
    }

    fn from_source(source: Source) -> TopologyWatcher {
        TopologyWatcher {
            source,
            conn: None,
            last: None,
            joining: None,
            tls: false,
        }
    }

    /// Also says, at each look, which nodes other than `probed` (announced addresses, reached
    /// at `probed_at`) are ready to be probed, reached with `template`'s settings at their
    /// address after `map`.
    pub fn joining(
        mut self,
        template: ConnInfo,
        map: NodeAddressMap,
        probed: impl IntoIterator<Item = String>,
        probed_at: &[String],
    ) -> TopologyWatcher {
        self.tls = template.tls.is_some();
        self.joining = Some(Joining {
            template,
            map,
            probed_sockets: probed_at.iter().flat_map(|a| socket_addrs(a)).collect(),
            probed: probed.into_iter().collect(),
            not_before: BTreeMap::new(),
        });
        self
    }

    /// The changes since the last poll, node by node (`127.0.0.1:7004`, `replica -> master`),
    /// and the nodes ready to be probed from now on (each reported once); empty when nothing
    /// changed or no node could be asked.
    pub fn poll(&mut self) -> Look {
        let Some(now) = self.read() else {
            return Look::default();
        };
        let changes = match &self.last {
            Some(last) => describe_changes(last, &now),
            None => Vec::new(),
        };
        let joined = match self.joining.as_mut() {
            Some(joining) => joining.ready(&now, Instant::now()),
            None => Vec::new(),
        };
        self.last = Some(now);
        Look { changes, joined }
    }

    fn read(&mut self) -> Option<BTreeMap<String, NodeView>> {
        // The node that answered last time first, then each in turn.
        let tls = self.tls;
        let read = |conn: &mut redis::Connection, info: &ConnInfo| match &self.source {
            Source::Cluster(_) => read_shards(conn, tls),
            Source::Standalone { announced, .. } => {
                read_standalone_shard(conn, info, announced).map(|shard| vec![shard])
            }
        };
        let asked: Vec<&ConnInfo> = match &self.source {
            Source::Cluster(nodes) => nodes.iter().collect(),
            Source::Standalone { master, .. } => vec![master],
        };
        if let Some(conn) = self.conn.as_mut() {
            match read(conn, asked[0]) {
                Ok(shards) => return Some(views(&shards)),
                Err(_) => self.conn = None,
            }
        }
        for info in asked {
            let mut info = info.clone();
            info.connect_timeout = info.connect_timeout.min(Duration::from_secs(1));
            info.command_timeout = info.command_timeout.min(Duration::from_secs(2));
            let Ok(mut conn) = info.redis_connection() else {
                continue;
            };
            if let Ok(shards) = read(&mut conn, &info) {
                self.conn = Some(conn);
                return Some(views(&shards));
            }
        }
        None
    }
}

impl Joining {
    /// The nodes of `now` ready to be probed, marked probed; see the module comment.
    fn ready(&mut self, now: &BTreeMap<String, NodeView>, at: Instant) -> Vec<JoinedNode> {
        let mut joined = Vec::new();
        for (announced, view) in now {
            if self.probed.contains(announced)
                || view.slots.is_empty()
                || self
                    .not_before
                    .get(announced)
                    .is_some_and(|(then, t)| at < *t && then.same_as(view))
            {
                continue;
            }
            let address = self.map.get(announced).unwrap_or(announced).to_string();
            if socket_addrs(&address)
                .iter()
                .any(|a| self.probed_sockets.contains(a))
            {
                // Probed already, under the name it was given at the start.
                self.probed.insert(announced.clone());
                continue;
            }
            // A replica is asked itself whatever the topology calls it: a standalone master
            // lists one `online` as soon as it has sent the data, before the replica has
            // loaded it.
            let ready = match view.role {
                Role::Replica => replica_link_up(&self.template, &address),
                Role::Master => view.health.as_deref().is_none_or(|h| h == "online"),
            } && check_reachable(&self.template, &address).is_ok();
            if !ready {
                self.not_before
                    .insert(announced.clone(), (view.clone(), at + RECHECK_EVERY));
                continue;
            }
            self.not_before.remove(announced);
            self.probed.insert(announced.clone());
            joined.push(JoinedNode {
                announced: announced.clone(),
                address,
                role: view.role,
                slots: view.slots.clone(),
            });
        }
        joined
    }
}

fn read_shards(conn: &mut redis::Connection, tls: bool) -> Result<Vec<ReportedShard>> {
    match redis::cmd("CLUSTER").arg("SHARDS").query::<Value>(conn) {
        Ok(reply) => parse_cluster_shards(&reply, tls),
        Err(err) if err.code().is_some() => {
            let reply: Value = redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query(conn)
                .context("CLUSTER SLOTS")?;
            parse_cluster_slots(&reply)
        }
        Err(err) => Err(err.into()),
    }
}

fn views(shards: &[ReportedShard]) -> BTreeMap<String, NodeView> {
    let mut views = BTreeMap::new();
    for shard in shards {
        let first = shard.slots.first().map(|&(lo, _)| lo);
        for node in shard.master.iter().chain(&shard.replicas) {
            if node.announced.is_empty() {
                continue;
            }
            views.insert(
                node.announced.clone(),
                NodeView {
                    role: node.role,
                    shard_first_slot: first,
                    health: node.health.clone(),
                    slots: shard.slots.clone(),
                },
            );
        }
    }
    views
}

/// Each node whose role, shard or health changed, that went or that came, with what happened.
fn describe_changes(
    last: &BTreeMap<String, NodeView>,
    now: &BTreeMap<String, NodeView>,
) -> Vec<(String, String)> {
    let mut changes = Vec::new();
    for (node, before) in last {
        match now.get(node) {
            None => changes.push((node.clone(), "gone from the topology".to_string())),
            Some(after) if after.same_as(before) => {}
            Some(after) => {
                let mut parts = Vec::new();
                if after.role != before.role {
                    parts.push(format!("{} -> {}", before.role, after.role));
                }
                if after.shard_first_slot != before.shard_first_slot {
                    parts.push(format!(
                        "moved to the shard of slot {}",
                        after
                            .shard_first_slot
                            .map_or("none".to_string(), |s| s.to_string())
                    ));
                }
                if after.health != before.health {
                    parts.push(format!(
                        "{} -> {}",
                        before.health.as_deref().unwrap_or("?"),
                        after.health.as_deref().unwrap_or("?")
                    ));
                }
                changes.push((node.clone(), parts.join(", ")));
            }
        }
    }
    for (node, after) in now {
        if !last.contains_key(node) {
            changes.push((
                node.clone(),
                format!("new in the topology ({})", after.role),
            ));
        }
    }
    changes
}

/// Starts the watcher thread: a look every [`WATCH_EVERY`] until `stop` (set it, then unpark the
/// thread); each change and each node ready to be probed goes to the collector as
/// [`Event::Topology`].
pub fn spawn_topology_watch(
    mut watcher: TopologyWatcher,
    clock: RunClock,
    events: EventSender,
    stop: Arc<AtomicBool>,
) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("topology".into())
        .spawn(move || {
            loop {
                let Look { changes, joined } = watcher.poll();
                if !changes.is_empty() || !joined.is_empty() {
                    let at_us = clock.now_us();
                    let event = Event::Topology {
                        at_us,
                        changes,
                        joined,
                    };
                    if events.send(event).is_err() {
                        return;
                    }
                }
                if crate::measure::park_until(Instant::now() + WATCH_EVERY, &stop) {
                    return;
                }
            }
        })
        .context("starting the topology watcher")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(role: Role, slot: u16, health: &str) -> NodeView {
        NodeView {
            role,
            shard_first_slot: Some(slot),
            health: Some(health.into()),
            slots: vec![(slot, slot + 99)],
        }
    }

    /// Only a node not probed, of a shard with slots, is checked; one that is not ready (here:
    /// nothing listens at its address) is not reported, and is checked again only after
    /// [`RECHECK_EVERY`] or once its state changes.
    #[test]
    fn a_node_is_reported_joined_only_when_ready() {
        let mut joining = Joining {
            template: ConnInfo::loopback(1),
            map: NodeAddressMap::default(),
            probed: BTreeSet::from(["127.0.0.1:1".to_string()]),
            probed_sockets: socket_addrs("127.0.0.1:1"),
            not_before: BTreeMap::new(),
        };
        let mut slotless = view(Role::Master, 0, "online");
        slotless.slots.clear();
        slotless.shard_first_slot = None;
        let look = BTreeMap::from([
            // Probed from the start.
            ("127.0.0.1:1".to_string(), view(Role::Master, 0, "online")),
            // A master just met, serving no slot.
            ("127.0.0.1:2".to_string(), slotless),
            // Online, but nothing listens there.
            ("127.0.0.1:3".to_string(), view(Role::Replica, 0, "online")),
        ]);
        let at = Instant::now();
        assert!(joining.ready(&look, at).is_empty());
        assert_eq!(
            joining.not_before.keys().collect::<Vec<_>>(),
            ["127.0.0.1:3"],
            "only the node checked waits for its next check"
        );
        let due = |joining: &Joining| joining.not_before["127.0.0.1:3"].1;
        assert_eq!(due(&joining), at + RECHECK_EVERY);
        // A second later: not checked again (its due time stays).
        assert!(joining.ready(&look, at + Duration::from_secs(1)).is_empty());
        assert_eq!(due(&joining), at + RECHECK_EVERY);
        // Its state changed: checked at once.
        let mut changed = look.clone();
        changed.insert("127.0.0.1:3".into(), view(Role::Replica, 0, "loading"));
        let later = at + Duration::from_secs(2);
        assert!(joining.ready(&changed, later).is_empty());
        assert_eq!(due(&joining), later + RECHECK_EVERY);
        // Due again.
        let due_at = later + RECHECK_EVERY;
        assert!(joining.ready(&changed, due_at).is_empty());
        assert_eq!(due(&joining), due_at + RECHECK_EVERY);
        assert!(!joining.probed.contains("127.0.0.1:3"));
    }

    /// A replica the run probes from the start under the name the URL gave it (a host name),
    /// which its master lists by IP once its link is up: the same server, not joined again.
    #[test]
    fn a_node_probed_under_another_name_is_not_joined_again() {
        let mut joining = Joining {
            template: ConnInfo::loopback(1),
            map: NodeAddressMap::default(),
            probed: BTreeSet::from(["localhost:1".to_string()]),
            probed_sockets: socket_addrs("127.0.0.1:1"),
            not_before: BTreeMap::new(),
        };
        let look = BTreeMap::from([("127.0.0.1:1".to_string(), view(Role::Replica, 0, "online"))]);
        assert!(joining.ready(&look, Instant::now()).is_empty());
        assert!(joining.probed.contains("127.0.0.1:1"));
        assert!(joining.not_before.is_empty(), "not even checked");
    }

    /// A failover: the master fails and its replica takes over; then a node leaves.
    #[test]
    fn changes_are_described_node_by_node() {
        let before = BTreeMap::from([
            ("m:1".to_string(), view(Role::Master, 0, "online")),
            ("r:1".to_string(), view(Role::Replica, 0, "online")),
        ]);
        let after = BTreeMap::from([
            ("m:1".to_string(), view(Role::Replica, 0, "fail")),
            ("r:1".to_string(), view(Role::Master, 0, "online")),
            ("n:1".to_string(), view(Role::Replica, 0, "online")),
        ]);
        let described = |changes: Vec<(String, String)>| -> Vec<String> {
            changes
                .into_iter()
                .map(|(node, what)| format!("{node} {what}"))
                .collect()
        };
        assert_eq!(
            described(describe_changes(&before, &after)),
            [
                "m:1 master -> replica, online -> fail",
                "r:1 replica -> master",
                "n:1 new in the topology (replica)",
            ]
        );
        assert_eq!(
            described(describe_changes(&after, &before)),
            [
                "m:1 replica -> master, fail -> online",
                "n:1 gone from the topology",
                "r:1 master -> replica",
            ]
        );
        assert!(describe_changes(&before, &before).is_empty());
    }
}
