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

/// Six plain Redis 7.0 servers made a cluster the way a user makes one: `redis-cli --cluster
/// create ... --cluster-replicas 1`, no data. The masters ping their replicas once a minute
/// (`repl-ping-replica-period 60`), so every replica's offset stays 0 as on a fresh idle cluster
/// in the first seconds, where Redis 7.0's CLUSTER SHARDS calls it `loading`. Returns once every
/// replica says `master_link_status:up` itself; `None` without redis-server 7.0 or redis-cli.
fn created_cluster() -> Option<Vec<holprobe::measure::target::EmbeddedServer>> {
    use holprobe::measure::target::{EmbeddedServer, free_port};
    let bin = redis_70()?;
    let cli = bin.with_file_name("redis-cli");
    if !cli.exists() {
        eprintln!("skipping: no redis-cli beside {}", bin.display());
        return None;
    }
    let servers: Vec<EmbeddedServer> = (0..6)
        .map(|_| {
            let args = vec![
                "cluster-enabled yes".to_string(),
                "cluster-config-file nodes.conf".to_string(),
                format!("cluster-port {}", free_port().expect("a free port")),
                "repl-ping-replica-period 60".to_string(),
                "repl-diskless-sync-delay 0".to_string(),
            ];
            EmbeddedServer::start(Some(&bin), &args).expect("start a cluster node")
        })
        .collect();
    let addresses: Vec<String> = servers
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.port()))
        .collect();
    let created = std::process::Command::new(&cli)
        .arg("--cluster")
        .arg("create")
        .args(&addresses)
        .args(["--cluster-replicas", "1", "--cluster-yes"])
        .output()
        .expect("run redis-cli --cluster create");
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stdout)
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let links_up = servers
            .iter()
            .map(|s| {
                let info: String = redis::cmd("INFO")
                    .arg("replication")
                    .query(&mut control(&s.conn_info()))
                    .expect("INFO replication");
                !info.contains("role:slave") || info.contains("master_link_status:up")
            })
            .filter(|up| *up)
            .count();
        let replicas = servers
            .iter()
            .filter(|s| {
                let info: String = redis::cmd("INFO")
                    .arg("replication")
                    .query(&mut control(&s.conn_info()))
                    .expect("INFO replication");
                info.contains("role:slave")
            })
            .count();
        // And the first node knows each replica as its master's (gossip), as `redis-cli
        // --cluster check` would show.
        let reply: redis::Value = redis::cmd("CLUSTER")
            .arg("SHARDS")
            .query(&mut control(&servers[0].conn_info()))
            .expect("CLUSTER SHARDS");
        let shards = holprobe::measure::topology::parse_cluster_shards(&reply, false)
            .expect("parse CLUSTER SHARDS");
        let known = shards.len() == 3 && shards.iter().all(|shard| shard.replicas.len() == 1);
        if links_up == 6 && replicas == 3 && known {
            return Some(servers);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the replicas' links did not come up within 60 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Issue 22, item 2: on a freshly created cluster every node is found, though CLUSTER SHARDS
/// still calls the idle replicas `loading`: each replica's own INFO replication
/// (`master_link_status:up`) is asked before it is left out.
#[test]
fn a_freshly_created_cluster_has_every_replica_found() {
    let Some(servers) = created_cluster() else {
        return;
    };
    let pids: Vec<u32> = servers.iter().filter_map(|s| s.pid()).collect();
    let url = servers[0].conn_info();
    // The case of the issue: the node asked calls some replica `loading`.
    let reply: redis::Value = redis::cmd("CLUSTER")
        .arg("SHARDS")
        .query(&mut control(&url))
        .expect("CLUSTER SHARDS");
    let loading = holprobe::measure::topology::parse_cluster_shards(&reply, false)
        .expect("parse CLUSTER SHARDS")
        .iter()
        .flat_map(|shard| shard.replicas.clone())
        .filter(|r| r.health.as_deref() == Some("loading"))
        .count();
    assert!(loading > 0, "no replica reported loading: {reply:?}");
    let (topology, warnings) = discover(&url, &NodeAddressMap::default()).expect("discover");
    assert!(
        !warnings.iter().any(|w| w.contains("left out")),
        "{warnings:?}"
    );
    assert_eq!(topology.nodes().len(), 6, "{topology:#?}");
    assert_eq!(topology.shards.len(), 3);
    for shard in &topology.shards {
        assert_eq!(shard.replicas.len(), 1, "{shard:#?}");
    }
    // The same through the `probe` binary, as the issue ran it: 6 nodes probed.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let assert = common::probe_cmd()
        .arg("--url")
        .arg(format!("redis://127.0.0.1:{}", servers[0].port()))
        .args(["--writer-sizes", "4M", "--overwrite"])
        .arg("--out")
        .arg(&out)
        .timeout(std::time::Duration::from_secs(120))
        .assert()
        .success();
    let stderr = String::from_utf8_lossy(&assert.get_output().stderr).to_string();
    assert!(!stderr.contains("left out"), "{stderr}");
    let probes = common::read_csv(&out.join("probes.csv"));
    let probed: std::collections::BTreeSet<&str> =
        probes.iter().map(|p| p["node"].as_str()).collect();
    assert_eq!(probed.len(), 6, "{probed:?}\n{stderr}");
    drop(servers);
    assert_gone(&pids);
}

/// Issue 22, item 2: a node that joins during the run is probed from then on. A cluster of 3
/// masters with no replica; once the run has begun, a fourth server joins as a replica of the
/// written master (`redis-cli --cluster add-node ... --cluster-slave`): its probes are in
/// probes.csv from its join on and not before, with a `joined` node event beside the topology
/// change, its figures of the writes after its join in summary.csv, and run.json's `nodes` says
/// when it joined. Then it is stopped: it goes down as any node does, and the run completes.
#[test]
fn a_node_that_joins_during_the_run_is_probed_from_then_on() {
    use holprobe::measure::target::{EmbeddedServer, free_port};
    use std::process::Command;
    use std::time::Duration;
    let Some(bin) = redis_70() else { return };
    let cli = bin.with_file_name("redis-cli");
    if !cli.exists() {
        eprintln!("skipping: no redis-cli beside {}", bin.display());
        return;
    }
    let cluster = LocalCluster::start(Some(&bin), 3, 0, &[]).expect("a cluster of 3 masters");
    let mut pids = cluster.pids();
    let written = cluster
        .nodes()
        .iter()
        .find(|n| n.shard() == 0)
        .expect("shard 0's master");
    let mut newcomer = EmbeddedServer::start(
        Some(&bin),
        &[
            "cluster-enabled yes".to_string(),
            "cluster-config-file nodes.conf".to_string(),
            format!("cluster-port {}", free_port().expect("a free port")),
        ],
    )
    .expect("start the node that joins");
    pids.extend(newcomer.pid());
    let joining = format!("127.0.0.1:{}", newcomer.port());

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let url = format!("redis://{}", written.address());
    let child = common::spawn_run(
        &[
            "--url",
            &url,
            "--writer-sizes",
            "1M",
            "--repeat",
            "40",
            "--gap",
            "500ms",
        ],
        &out,
    );
    let master_id: String = redis::cmd("CLUSTER")
        .arg("MYID")
        .query(&mut control(&written.conn_info()))
        .expect("CLUSTER MYID");
    let added = Command::new(&cli)
        .args(["--cluster", "add-node", &joining, &written.address()])
        .args(["--cluster-slave", "--cluster-master-id", &master_id])
        .output()
        .expect("run redis-cli --cluster add-node");
    assert!(
        added.status.success(),
        "{}",
        String::from_utf8_lossy(&added.stdout)
    );
    // Linked up, then seen by the watcher (a look a second) and probed for a few seconds.
    wait_for_link_up(&newcomer.conn_info());
    wait_for_joined(&out, &joining);
    std::thread::sleep(Duration::from_secs(2));
    // It leaves before the run ends.
    newcomer.stop();
    let output = child.wait_with_output().expect("probe ends");
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert!(output.status.success(), "{stderr}");

    let run = common::read_json(&out.join("run.json"));
    let joined_us = assert_joined_then_down(
        &run,
        &joining,
        "probed from here on (replica, shard 0)",
        None,
        &stderr,
    );
    // The nodes probed from the start say no join.
    assert!(
        run["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["node"] != joining.as_str())
            .all(|n| n.get("joined_us").is_none()),
        "{}",
        run["nodes"]
    );

    let probes = common::read_csv(&out.join("probes.csv"));
    let intended = |node: &str| -> Vec<u64> {
        probes
            .iter()
            .filter(|p| p["node"] == node)
            .map(|p| p["intended_us"].parse().expect("intended_us"))
            .collect()
    };
    let newcomer_probes = intended(&joining);
    assert!(
        newcomer_probes.len() > 1000,
        "{} probes of {joining}",
        newcomer_probes.len()
    );
    assert!(
        newcomer_probes.iter().all(|&t| t >= joined_us),
        "a probe of {joining} before its join at {joined_us} µs: {:?}",
        newcomer_probes.iter().min()
    );
    // The written master was probed from the start, long before.
    let first = *intended(&written.address())
        .iter()
        .min()
        .expect("probes of the master");
    assert!(first + 1_000_000 < joined_us, "{first} vs {joined_us}");

    let writes = common::read_csv(&out.join("writes.csv"));
    let start_of = |seq: &str| -> u64 {
        writes
            .iter()
            .find(|w| w["seq"] == seq)
            .map(|w| w["start_us"].parse().expect("start_us"))
            .expect("the summary's write")
    };
    let summary = common::read_csv(&out.join("summary.csv"));
    let newcomer_rows: Vec<_> = summary
        .iter()
        .filter(|r| r["node"] == joining.as_str())
        .collect();
    assert!(!newcomer_rows.is_empty(), "no summary row of {joining}");
    assert!(
        newcomer_rows
            .iter()
            .all(|r| start_of(&r["seq"]) >= joined_us),
        "a summary row of {joining} for a write before its join"
    );
    assert!(
        newcomer_rows.len()
            < summary
                .iter()
                .filter(|r| r["node"] == written.address().as_str())
                .count(),
        "the writes before its join have no row of it"
    );
    let timeline = common::read_csv(&out.join("timeline.csv"));
    let newcomer_intervals: Vec<_> = timeline
        .iter()
        .filter(|r| r["target"] == joining.as_str())
        .collect();
    assert!(
        !newcomer_intervals.is_empty(),
        "no timeline row of {joining}"
    );
    assert!(
        newcomer_intervals.iter().all(|r| {
            let start: u64 = r["start_us"].parse().unwrap();
            let length: u64 = r["length_us"].parse().unwrap();
            start + length > joined_us
        }),
        "a timeline row of {joining} before its join"
    );
    drop(newcomer);
    drop(cluster);
    std::thread::sleep(Duration::from_millis(200));
    assert_gone(&pids);
}

/// The run completed, and `node`, which joined during it, has a `joined` event with `detail`,
/// a topology change beside it (with `topology_detail` where given), one `down` after its join
/// (it was stopped before the run's end), and an entry in run.json's `nodes` as a replica of the
/// written shard with its `joined_us`. Returns when it joined (run clock, µs).
fn assert_joined_then_down(
    run: &serde_json::Value,
    node: &str,
    detail: &str,
    topology_detail: Option<&str>,
    stderr: &str,
) -> u64 {
    assert_eq!(run["status"], "complete", "{stderr}");
    let events = run["node_events"].as_array().expect("node events");
    let of_node: Vec<&serde_json::Value> = events.iter().filter(|e| e["node"] == node).collect();
    eprintln!("the node events of {node}: {of_node:?}");
    let joined = of_node
        .iter()
        .find(|e| e["event"] == "joined")
        .unwrap_or_else(|| panic!("no joined event for {node}: {events:#?}\n{stderr}"));
    let joined_us = joined["at_us"].as_u64().expect("at_us");
    assert_eq!(joined["detail"], detail, "{joined}");
    assert!(
        of_node
            .iter()
            .any(|e| e["event"] == "topology" && topology_detail.is_none_or(|d| e["detail"] == d)),
        "the topology change is said too: {of_node:#?}"
    );
    // Leaving works as for any node: down once, after it joined.
    let down: Vec<_> = of_node.iter().filter(|e| e["event"] == "down").collect();
    assert_eq!(down.len(), 1, "{of_node:#?}");
    assert!(down[0]["at_us"].as_u64().unwrap() > joined_us, "{down:?}");
    let entry = run["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .find(|n| n["node"] == node)
        .unwrap_or_else(|| panic!("{node} not in run.json's nodes: {}", run["nodes"]));
    assert_eq!(entry["joined_us"].as_u64(), Some(joined_us), "{entry}");
    assert_eq!(entry["role"], "replica");
    assert_eq!(entry["same_shard"], true);
    joined_us
}

/// Waits (30 s at most) for the replica at `conn` to say its link to its master is up.
fn wait_for_link_up(conn: &ConnInfo) {
    use std::time::{Duration, Instant};
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut control(conn))
            .expect("INFO replication");
        if info.contains("master_link_status:up") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the new replica did not link up: {info}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits (20 s at most) for the running run's run.json in `out` to say that `node` joined.
fn wait_for_joined(out: &Path, node: &str) {
    use std::time::{Duration, Instant};
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        // run.json is rewritten after every write (atomically: read whole or not yet there).
        let text = std::fs::read_to_string(out.join("run.json")).unwrap_or_default();
        let run: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        let seen = run["node_events"].as_array().is_some_and(|events| {
            events
                .iter()
                .any(|e| e["node"] == node && e["event"] == "joined")
        });
        if seen {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{node} was not probed within 20 s of its link up: {}",
            run["node_events"]
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A standalone master probed alone (no replica at the start); once the run has begun, a
/// second server attaches as its replica (`replicaof`): the master's INFO replication lists it,
/// and it is probed from then on, its probes in probes.csv from its join and not before, with a
/// `joined` node event beside the topology change and run.json's `nodes` saying when. Then it
/// is stopped, goes down as any node does, and the run completes.
#[test]
fn a_replica_that_attaches_to_a_standalone_master_is_probed_from_then_on() {
    use holprobe::measure::target::EmbeddedServer;
    use std::time::Duration;
    let Some(bin) = redis_70() else { return };
    // The full sync starts at once (Redis 7.0 waits 5 s for more replicas by default).
    let mut master = EmbeddedServer::start(Some(&bin), &["repl-diskless-sync-delay 0".to_string()])
        .expect("start the master");
    let mut pids: Vec<u32> = master.pid().into_iter().collect();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let url = format!("redis://127.0.0.1:{}", master.port());
    let child = common::spawn_run(
        &[
            "--url",
            &url,
            "--writer-sizes",
            "1M",
            "--repeat",
            "30",
            "--gap",
            "500ms",
        ],
        &out,
    );
    let mut replica = EmbeddedServer::start(
        Some(&bin),
        &[format!("replicaof 127.0.0.1 {}", master.port())],
    )
    .expect("start the replica");
    pids.extend(replica.pid());
    let joining = format!("127.0.0.1:{}", replica.port());
    wait_for_link_up(&replica.conn_info());
    wait_for_joined(&out, &joining);
    std::thread::sleep(Duration::from_secs(2));
    replica.stop();
    let output = child.wait_with_output().expect("probe ends");
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert!(output.status.success(), "{stderr}");

    let run = common::read_json(&out.join("run.json"));
    let joined_us = assert_joined_then_down(
        &run,
        &joining,
        "probed from here on (replica)",
        Some("new in the topology (replica)"),
        &stderr,
    );
    let events = run["node_events"].as_array().expect("node events");
    // Two servers, each probed once: the master from the start (run.json's `node`, no join of
    // its own), the replica from its join (the one other node).
    let master_name = format!("127.0.0.1:{}", master.port());
    assert_eq!(run["node"]["node"], master_name.as_str(), "{}", run["node"]);
    let names: Vec<&str> = run["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["node"].as_str().unwrap())
        .collect();
    assert_eq!(names, [joining.as_str()]);
    assert!(
        !events
            .iter()
            .any(|e| e["event"] == "joined" && e["node"] != joining.as_str()),
        "{events:#?}"
    );

    let probes = common::read_csv(&out.join("probes.csv"));
    let of_node = |name: &str| -> Vec<u64> {
        probes
            .iter()
            .filter(|p| p["node"] == name)
            .map(|p| p["intended_us"].parse().expect("intended_us"))
            .collect()
    };
    let replica_probes = of_node(&joining);
    assert!(
        replica_probes.len() > 1000,
        "{} probes of {joining}",
        replica_probes.len()
    );
    assert!(
        replica_probes.iter().all(|&t| t >= joined_us),
        "a probe of {joining} before its join at {joined_us} µs: {:?}",
        replica_probes.iter().min()
    );
    let master_first = *of_node(&format!("127.0.0.1:{}", master.port()))
        .iter()
        .min()
        .expect("probes of the master");
    assert!(
        master_first + 1_000_000 < joined_us,
        "{master_first} vs {joined_us}"
    );
    master.stop();
    std::thread::sleep(Duration::from_millis(200));
    assert_gone(&pids);
}
