//! Watches a cluster's topology while a run goes: every [`WATCH_EVERY`] it asks one reachable
//! node for `CLUSTER SHARDS` (`CLUSTER SLOTS` before Redis 7.0) and reports what changed since
//! the last look: a replica promoted, a master demoted, a node gone, failing or new. A failover
//! in the middle of a run shows as such a change, with its wall-clock time, beside the probes'
//! errors and stalls of the nodes involved.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use crossbeam_channel::Sender;
use redis::Value;

use crate::measure::clock::RunClock;
use crate::measure::event::Event;
use crate::measure::target::ConnInfo;
use crate::measure::topology::{ReportedShard, Role, parse_cluster_shards, parse_cluster_slots};

/// How often the topology is read.
pub const WATCH_EVERY: Duration = Duration::from_secs(1);

/// What a node looks like from the cluster's view, as far as a run cares.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NodeView {
    role: Role,
    /// The first slot of its shard (which shard it is in), `None` for a shard without slots.
    shard_first_slot: Option<u16>,
    /// `online`, `loading`, `fail`... where the server says.
    health: Option<String>,
}

/// Reads the topology from the first node of a list that answers, and compares.
pub struct TopologyWatcher {
    nodes: Vec<ConnInfo>,
    conn: Option<redis::Connection>,
    last: Option<BTreeMap<String, NodeView>>,
}

impl TopologyWatcher {
    /// Watches through `nodes` (any order: the first that answers is asked, and kept while it
    /// does). The first [`poll`](Self::poll) sets the reference.
    pub fn new(nodes: Vec<ConnInfo>) -> TopologyWatcher {
        TopologyWatcher {
            nodes,
            conn: None,
            last: None,
        }
    }

    /// The changes since the last poll, node by node (`127.0.0.1:7004`, `replica -> master`);
    /// empty when nothing changed or no node could be asked.
    pub fn poll(&mut self) -> Vec<(String, String)> {
        let Some(now) = self.read() else {
            return Vec::new();
        };
        let changes = match &self.last {
            Some(last) => describe_changes(last, &now),
            None => Vec::new(),
        };
        self.last = Some(now);
        changes
    }

    fn read(&mut self) -> Option<BTreeMap<String, NodeView>> {
        // The node that answered last time first, then each in turn.
        if let Some(conn) = self.conn.as_mut() {
            match read_shards(conn) {
                Ok(shards) => return Some(views(&shards)),
                Err(_) => self.conn = None,
            }
        }
        for info in &self.nodes {
            let mut info = info.clone();
            info.connect_timeout = info.connect_timeout.min(Duration::from_secs(1));
            info.command_timeout = info.command_timeout.min(Duration::from_secs(2));
            let Ok(mut conn) = info.redis_connection() else {
                continue;
            };
            if let Ok(shards) = read_shards(&mut conn) {
                self.conn = Some(conn);
                return Some(views(&shards));
            }
        }
        None
    }
}

fn read_shards(conn: &mut redis::Connection) -> Result<Vec<ReportedShard>> {
    match redis::cmd("CLUSTER").arg("SHARDS").query::<Value>(conn) {
        Ok(reply) => parse_cluster_shards(&reply, false),
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
            Some(after) if after == before => {}
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

/// Starts the watcher thread: a look every [`WATCH_EVERY`] until `stop`; each change goes to
/// the collector as [`Event::Topology`].
pub fn spawn_topology_watch(
    mut watcher: TopologyWatcher,
    clock: RunClock,
    events: Sender<Event>,
    stop: Arc<AtomicBool>,
) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("topology".into())
        .spawn(move || {
            loop {
                let changes = watcher.poll();
                if !changes.is_empty() {
                    let at_us = clock.now_us();
                    if events.send(Event::Topology { at_us, changes }).is_err() {
                        return;
                    }
                }
                let until = Instant::now() + WATCH_EVERY;
                while Instant::now() < until {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(20));
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
        }
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
