//! Topology discovery against real clusters and replica sets started by the library's
//! `LocalCluster`: Redis 7.0 (from PATH), Valkey 9.1 and Redis 8.2 clusters of 3 masters with a
//! replica each, Redis 6.2 as a master with a replica and as a cluster (CLUSTER SLOTS, no SHARDS).
//! Every test also checks that no server it started is left running.

mod common;

use std::path::{Path, PathBuf};

use holprobe::measure::local_cluster::LocalCluster;
use holprobe::measure::slots::{hash_tag_for, key_slot};
use holprobe::measure::target::ConnInfo;
use holprobe::measure::topology::{NodeAddressMap, Role, Topology, TopologyKind, discover};

/// Redis 7.0 from PATH, as the other tests use it.
fn redis_70() -> Option<PathBuf> {
    common::server("redis-7.0")
}

/// Fails when a process the test started is still there once its cluster was dropped.
fn assert_gone(pids: &[u32]) {
    for pid in pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "server process {pid} still runs after its cluster was dropped"
        );
    }
}

fn control(conn: &ConnInfo) -> redis::Connection {
    conn.redis_connection().expect("connect to a node")
}

/// The topology found matches the nodes started: shards, roles, slots, every node once.
fn assert_matches(topology: &Topology, cluster: &LocalCluster, masters: usize, replicas: usize) {
    assert_eq!(topology.shards.len(), masters, "{topology:#?}");
    assert_eq!(
        topology.nodes().len(),
        cluster.nodes().len(),
        "{topology:#?}"
    );
    assert_eq!(topology.slots_covered(), 16384);
    for (index, shard) in topology.shards.iter().enumerate() {
        assert_eq!(shard.index, index);
        assert_eq!(shard.master.role, Role::Master);
        assert_eq!(shard.replicas.len(), replicas, "{shard:#?}");
        for replica in &shard.replicas {
            assert_eq!(replica.role, Role::Replica);
            assert_eq!(replica.shard, index);
        }
    }
    for local in cluster.nodes() {
        let found = topology
            .node(&local.address())
            .unwrap_or_else(|| panic!("{} not discovered: {topology:#?}", local.address()));
        assert_eq!(found.role, local.role(), "{}", local.address());
        assert_eq!(found.shard, local.shard(), "{}", local.address());
        assert_eq!(found.address, local.address());
        assert_eq!(
            found.id.is_some(),
            cluster.is_cluster(),
            "{}",
            local.address()
        );
    }
}

/// A 3-master cluster with a replica each: discovered alike from a master's and a replica's
/// URL; a key tagged for a shard is stored by that shard's master and MOVED by another; our
/// slots agree with CLUSTER KEYSLOT.
fn cluster_of_three(bin: &Path, name: &str) {
    let cluster = LocalCluster::start(Some(bin), 3, 1, &[]).expect("start the cluster");
    eprintln!(
        "{name}: 3 masters + 3 replicas formed and in sync in {:.2?}",
        cluster.formed_in()
    );
    let pids = cluster.pids();
    assert_eq!(pids.len(), 6);
    let replica = cluster
        .nodes()
        .iter()
        .find(|n| n.role() == Role::Replica)
        .expect("a replica");
    let mut found = Vec::new();
    for from in [&cluster.nodes()[0], replica] {
        let (topology, warnings) =
            discover(&from.conn_info(), &NodeAddressMap::default()).expect("discover");
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(topology.kind, TopologyKind::Cluster);
        assert_matches(&topology, &cluster, 3, 1);
        found.push(topology);
    }
    assert_eq!(
        found[0], found[1],
        "the same topology from a master and a replica"
    );
    let topology = &found[0];

    let mut conns: Vec<redis::Connection> = topology
        .shards
        .iter()
        .map(|shard| control(&cluster.conn_info().for_node(&shard.master.address).unwrap()))
        .collect();
    let mut keys: Vec<String> = ["foo", "{user1000}.following", "a{b}c", "{}x", "x{}{y}"]
        .iter()
        .map(|k| k.to_string())
        .collect();
    keys.extend((0..40).map(|n| format!("holprobe:run{n}:w{}", n * 7919)));
    for key in &keys {
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut conns[0])
            .expect("CLUSTER KEYSLOT");
        assert_eq!(key_slot(key.as_bytes()), slot, "{key}");
    }
    for shard in &topology.shards {
        let tag = hash_tag_for(&shard.slots).expect("a tag");
        let key = format!("holprobe:topologytest:{{{tag}}}:w0");
        assert_eq!(
            topology.shard_for_key(key.as_bytes()).unwrap().index,
            shard.index
        );
        let stored: String = redis::cmd("SET")
            .arg(&key)
            .arg("v")
            .query(&mut conns[shard.index])
            .expect("SET on the shard's own master");
        assert_eq!(stored, "OK");
        let other = (shard.index + 1) % conns.len();
        let refused = redis::cmd("SET")
            .arg(&key)
            .arg("v")
            .query::<String>(&mut conns[other])
            .expect_err("another master refuses the key");
        // MOVED to this shard's master.
        let refused = refused.to_string();
        assert!(refused.to_uppercase().contains("MOVED"), "{refused}");
        assert!(refused.ends_with(&shard.master.address), "{refused}");
        let _: i64 = redis::cmd("DEL")
            .arg(&key)
            .query(&mut conns[shard.index])
            .expect("DEL");
    }
    drop(conns);
    drop(cluster);
    assert_gone(&pids);
}

#[test]
fn redis_70_cluster_three_masters_one_replica_each() {
    let Some(bin) = redis_70() else { return };
    cluster_of_three(&bin, "redis 7.0");
}

#[test]
fn valkey_91_cluster_three_masters_one_replica_each() {
    let Some(bin) = common::server("valkey-9.1") else {
        return;
    };
    cluster_of_three(&bin, "valkey 9.1");
}

#[test]
fn redis_82_cluster_three_masters_one_replica_each() {
    let Some(bin) = common::server("redis-8.2") else {
        return;
    };
    cluster_of_three(&bin, "redis 8.2");
}

/// Redis 6.2 has no CLUSTER SHARDS: discovery falls back to CLUSTER SLOTS, and the cluster is
/// formed with ADDSLOTS.
#[test]
fn redis_62_cluster_through_cluster_slots() {
    let Some(bin) = common::server("redis-6.2") else {
        return;
    };
    let cluster = LocalCluster::start(Some(&bin), 3, 1, &[]).expect("start the 6.2 cluster");
    eprintln!(
        "redis 6.2: 3 masters + 3 replicas formed and in sync in {:.2?}",
        cluster.formed_in()
    );
    let mut conn = control(&cluster.conn_info());
    let shards = redis::cmd("CLUSTER")
        .arg("SHARDS")
        .query::<redis::Value>(&mut conn);
    assert!(shards.is_err(), "6.2 answered CLUSTER SHARDS: {shards:?}");
    let pids = cluster.pids();
    let (topology, warnings) =
        discover(&cluster.conn_info(), &NodeAddressMap::default()).expect("discover");
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(topology.kind, TopologyKind::Cluster);
    assert_matches(&topology, &cluster, 3, 1);
    drop(conn);
    drop(cluster);
    assert_gone(&pids);
}

/// Redis 6.2, cluster mode off: a master and its replica found through INFO replication, from
/// either end.
#[test]
fn redis_62_master_and_replica() {
    let Some(bin) = common::server("redis-6.2") else {
        return;
    };
    let set = LocalCluster::start_replicas(Some(&bin), 1, &[]).expect("start master + replica");
    eprintln!(
        "redis 6.2: master + 1 replica in sync in {:.2?}",
        set.formed_in()
    );
    assert!(!set.is_cluster());
    let pids = set.pids();
    for from in set.nodes() {
        let (topology, warnings) =
            discover(&from.conn_info(), &NodeAddressMap::default()).expect("discover");
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(topology.kind, TopologyKind::Standalone);
        assert_matches(&topology, &set, 1, 1);
        assert_eq!(topology.shards[0].slots, vec![(0, 16383)]);
    }
    drop(set);
    assert_gone(&pids);
}

/// A replica announcing an address nobody listens on (127.0.0.2: the servers bind 127.0.0.1):
/// without a mapping it is left out with one warning line and the run would go on with the
/// master; `--node-address` maps it to where it listens.
#[test]
fn unreachable_announced_address_warns_and_maps() {
    let Some(bin) = redis_70() else { return };
    let set = LocalCluster::start_replicas(
        Some(&bin),
        1,
        &["replica-announce-ip 127.0.0.2".to_string()],
    )
    .expect("start master + replica");
    let pids = set.pids();
    let replica = &set.nodes()[1];
    let announced = format!("127.0.0.2:{}", replica.port());

    let (topology, warnings) =
        discover(&set.conn_info(), &NodeAddressMap::default()).expect("discover");
    assert_eq!(topology.nodes().len(), 1, "{topology:#?}");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with(&format!("replica {announced} cannot be reached")),
        "{}",
        warnings[0]
    );
    assert!(
        warnings[0].contains(&format!("--node-address {announced}=HOST:PORT")),
        "{}",
        warnings[0]
    );
    assert!(!warnings[0].contains('\n'));

    let map = NodeAddressMap::parse(&[format!("{announced}={}", replica.address())]).unwrap();
    let (topology, warnings) = discover(&set.conn_info(), &map).expect("discover");
    assert!(warnings.is_empty(), "{warnings:?}");
    let found = &topology.shards[0].replicas;
    assert_eq!(found.len(), 1, "{topology:#?}");
    assert_eq!(found[0].announced, announced);
    assert_eq!(found[0].address, replica.address());
    drop(set);
    assert_gone(&pids);
}

/// Forming fails part-way (the servers start, but in cluster mode off, so assigning slots
/// fails): the error says what failed, and none of the servers started is left running.
#[test]
fn failed_formation_leaves_no_server() {
    let Some(bin) = redis_70() else { return };
    let marker = "cluster-enabled no";
    let err = match LocalCluster::start(Some(&bin), 2, 1, &[marker.to_string()]) {
        Ok(_) => panic!("a cluster formed from servers in cluster mode off"),
        Err(err) => holprobe::error::one_line(&err),
    };
    assert!(err.contains("cluster support disabled"), "{err}");
    let ours = std::process::id().to_string();
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            let cmdline = std::fs::read(path.join("cmdline")).ok()?;
            let stat = std::fs::read_to_string(path.join("stat")).ok()?;
            // Field 4 of stat, after the parenthesised name, is the parent's pid.
            let parent = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .to_string();
            let args = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            (parent == ours && args.contains("--cluster-enabled no")).then_some(args)
        })
        .collect();
    assert!(left.is_empty(), "left running: {left:?}");
}
