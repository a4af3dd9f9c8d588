//! The main job over every node of a deployment, end to end through the `probe` binary: a
//! throwaway Redis 7.0 / Valkey 9.1 cluster of 3 masters with a replica each (`--cluster 3
//! --replicas 1`), a Redis 6.2 master with a replica (`--replicas 1`), and a failover in the
//! middle of a run against a cluster the test started itself. Every test checks that no server
//! is left running and no key left behind.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

use common::{probe_cmd, read_csv, read_json};
use holprobe::measure::local_cluster::{LocalCluster, LocalNode};

type Row = std::collections::HashMap<String, String>;

/// Every node's address in run.json's topology.
fn topology_nodes(run: &serde_json::Value) -> Vec<String> {
    run["topology"]["shards"]
        .as_array()
        .expect("run.json has the topology")
        .iter()
        .flat_map(|shard| {
            std::iter::once(shard["master"]["announced"].as_str().unwrap().to_string()).chain(
                shard["replicas"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| r["announced"].as_str().unwrap().to_string()),
            )
        })
        .collect()
}

/// Nothing listens on any of them any more: the tool stopped every server it started.
fn assert_all_stopped(nodes: &[String]) {
    for node in nodes {
        assert!(
            TcpStream::connect(node.as_str()).is_err(),
            "{node} still accepts connections after the run"
        );
    }
}

/// The longest stall of `node` tied to write `seq`, ms (0 when none).
fn longest_stall(stalls: &[Row], node: &str, seq: &str) -> f64 {
    stalls
        .iter()
        .filter(|s| s["node"] == node && s["write_seq"] == seq)
        .map(|s| s["duration_ms"].parse::<f64>().unwrap())
        .fold(0.0, f64::max)
}

/// The longest stall of `node` starting in `[from_us, to_us]`, ms.
fn longest_stall_starting(stalls: &[Row], node: &str, from_us: u64, to_us: u64) -> f64 {
    stalls
        .iter()
        .filter(|s| s["node"] == node)
        .filter(|s| (from_us..=to_us).contains(&s["start_us"].parse::<u64>().unwrap()))
        .map(|s| s["duration_ms"].parse::<f64>().unwrap())
        .fold(0.0, f64::max)
}

/// A throwaway cluster of 3 masters with a replica each: every node probed, one summary.csv row
/// per write per node, the writes on shard 0's master, and the cluster gone after the run.
/// `plan`: the value and its two ops (a 64M SET and DEL when empty).
fn cluster_run(server_bin: Option<&Path>, plan: &[&str]) -> (PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let mut cmd = probe_cmd();
    if let Some(bin) = server_bin {
        cmd.arg("--server-bin").arg(bin);
    }
    let plan = if plan.is_empty() {
        &["--writer-sizes", "64M"][..]
    } else {
        plan
    };
    let assert = cmd
        .args(["--cluster", "3", "--replicas", "1"])
        .args(plan)
        .arg("--out")
        .arg(&out)
        .timeout(Duration::from_secs(240))
        .assert()
        .success();
    let stdout = String::from_utf8_lossy(&assert.get_output().stdout).to_string();
    assert!(
        stdout.contains("other shards (4 nodes)") && stdout.contains("worst: "),
        "{stdout}"
    );
    let run = read_json(&out.join("run.json"));
    let nodes = topology_nodes(&run);
    assert_eq!(nodes.len(), 6, "{}", run["topology"]);
    assert_eq!(run["topology"]["kind"], "cluster");
    assert_eq!(run["topology"]["shards"].as_array().unwrap().len(), 3);
    assert_eq!(run["nodes"].as_array().unwrap().len(), 5);
    let written = run["node"]["node"].as_str().unwrap().to_string();
    assert_eq!(written, nodes[0], "the writes go to shard 0's master");

    let summary = read_csv(&out.join("summary.csv"));
    let writes = read_csv(&out.join("writes.csv"));
    assert_eq!(writes.len(), 2, "set (or build) and delete");
    assert_eq!(summary.len(), 2 * 6, "one row per write per node");
    let mut by_write: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for row in &summary {
        by_write
            .entry(row["seq"].as_str())
            .or_default()
            .insert(row["node"].as_str());
        let same = row["shard"] == "0";
        assert_eq!(row["same_shard"], same.to_string(), "{row:?}");
    }
    for nodes_of_write in by_write.values() {
        assert_eq!(nodes_of_write.len(), 6, "{by_write:?}");
    }
    for write in &writes {
        assert_eq!(write["node"], written, "{write:?}");
        assert_eq!(write["ok"], "true", "{write:?}");
    }
    // Every probe row names its node; every node was probed.
    let probes = read_csv(&out.join("probes.csv"));
    let probed: BTreeSet<&str> = probes.iter().map(|p| p["node"].as_str()).collect();
    assert_eq!(probed.len(), 6, "{probed:?}");
    assert_all_stopped(&nodes);
    (out, dir)
}

/// Redis 7.0 frees a deleted 300k-field hash on the main thread (`lazyfree-lazy-user-del no`),
/// on the master and, when the DEL reaches it, on its replica (about 70 ms each here): a stall of
/// that shard's nodes; the other shards' masters free nothing. The replica applies the DEL once
/// its master has executed it, so its stall may start just after the master's reply: the writer
/// waits for it (`WAIT`, writes.csv `replicated_us`) and the replica's window of the delete ends
/// there.
///
/// A 64 MiB string's DEL (about 4 ms) was this test's value until 2026-12-05: on 2 cores for six
/// servers and the tool the host's own noise reached it (other masters' stalls up to 7 ms), and
/// it failed now and then; the hash's freeze stands an order of magnitude above that noise, so
/// the bounds are fixed goals far from both. (The Valkey test keeps the 64M string.)
#[test]
fn redis_7_cluster_every_node_probed_and_the_delete_stalls_its_shard_only() {
    let plan = [
        "--type",
        "hash",
        "--elements",
        "300k",
        "--ops",
        "build,delete",
    ];
    let (out, _dir) = cluster_run(None, &plan);
    let run = read_json(&out.join("run.json"));
    let nodes = topology_nodes(&run);
    let stalls = read_csv(&out.join("stalls.csv"));
    let master = &nodes[0];
    let replica = &run["topology"]["shards"][0]["replicas"][0]["announced"]
        .as_str()
        .unwrap()
        .to_string();
    let delete = "2";
    let on_master = longest_stall(&stalls, master, delete);
    let writes = read_csv(&out.join("writes.csv"));
    let del = writes.iter().find(|w| w["seq"] == delete).unwrap();
    let (del_start, del_reply): (u64, u64) = (
        del["start_us"].parse().unwrap(),
        del["reply_us"].parse().unwrap(),
    );
    let on_replica = longest_stall_starting(&stalls, replica, del_start, del_reply + 50_000);
    assert!(on_master >= 20.0, "written master: {on_master} ms");
    assert!(on_replica >= 20.0, "its replica: {on_replica} ms");
    // The writer waited for the replica to apply the delete, and the replica's figures of the
    // delete cover its window up to then: its own stall is tied to the delete.
    let replicated: u64 = del["replicated_us"]
        .parse()
        .unwrap_or_else(|_| panic!("the delete waited for its replica: {del:?}"));
    assert!(replicated >= del_reply, "{del:?}");
    let tied = longest_stall(&stalls, replica, delete);
    assert!(
        tied >= 20.0,
        "its replica's stall tied to the delete: {tied} ms"
    );
    let summary = read_csv(&out.join("summary.csv"));
    let replica_row = summary
        .iter()
        .find(|r| r["seq"] == delete && r["node"] == *replica)
        .unwrap();
    let hol: f64 = replica_row["hol_delay_ms"].parse().unwrap();
    assert!(hol >= 20.0, "its replica's figure of the delete: {hol} ms");
    for shard in 1..3 {
        let other = run["topology"]["shards"][shard]["master"]["announced"]
            .as_str()
            .unwrap();
        let there = longest_stall(&stalls, other, delete);
        // What the other masters see during the delete is this host's own share (2 cores for
        // six servers and the tool): 0.8-7 ms in these runs. A figure near the written
        // master's would mean the stall was not the written shard's.
        assert!(
            there < on_master * 0.5,
            "master {other} of shard {shard}: {there} ms during the delete, against {on_master} ms on the written master"
        );
    }
}

#[test]
fn valkey_9_cluster_every_node_probed() {
    let Some(bin) = common::server("valkey-9.1") else {
        return;
    };
    let (out, _dir) = cluster_run(Some(&bin), &[]);
    let run = read_json(&out.join("run.json"));
    assert_eq!(run["server"]["flavor"], "valkey");
}

/// Redis 6.2 as a master with one replica (`--replicas 1`, INFO replication): two nodes, no
/// shards, both probed, one summary row per write per node.
#[test]
fn redis_6_master_with_a_replica() {
    let Some(bin) = common::server("redis-6.2") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    probe_cmd()
        .arg("--server-bin")
        .arg(&bin)
        .args(["--replicas", "1", "--writer-sizes", "16M", "--out"])
        .arg(&out)
        .args(["--server-arg", "hz 20"])
        .timeout(Duration::from_secs(120))
        .assert()
        .success();
    let run = read_json(&out.join("run.json"));
    assert_eq!(run["topology"]["kind"], "standalone");
    // The settings the tool started its servers with are recorded, as for one server.
    assert_eq!(
        run["server"]["server_args"],
        serde_json::json!(["hz 20"]),
        "{}",
        run["server"]
    );
    let nodes = topology_nodes(&run);
    assert_eq!(nodes.len(), 2, "{}", run["topology"]);
    let summary = read_csv(&out.join("summary.csv"));
    assert_eq!(summary.len(), 2 * 2);
    let roles: BTreeSet<&str> = summary.iter().map(|r| r["role"].as_str()).collect();
    assert_eq!(roles, BTreeSet::from(["master", "replica"]));
    assert!(summary.iter().all(|r| r["shard"].is_empty()));
    // The server's view is the written master's: its rows have it (the tool started it, so its
    // main thread's times are read), a replica's row none of it.
    let server_view = ["server_cpu_run_us", "server_cpu_wait_us", "server_exec_us"];
    for row in &summary {
        let filled = server_view.iter().filter(|c| !row[**c].is_empty()).count();
        match row["role"].as_str() {
            "master" => assert_eq!(filled, server_view.len(), "{row:?}"),
            _ => assert_eq!(
                filled, 0,
                "a replica's row with its master's figures: {row:?}"
            ),
        }
        if row["role"] == "replica" {
            for column in ["freed_by", "server_latency_event_ms"] {
                assert!(row[column].is_empty(), "{column}: {row:?}");
            }
        }
    }
    assert_all_stopped(&nodes);
}

/// A run of `repeat` writes of each of `sizes`, 300 ms apart, against the cluster at `url`, started
/// in the background so the test can fail the cluster under it.
fn start_writes(url: &str, sizes: &str, repeat: &str, out: &Path) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_probe"))
        .args(["--url", url, "--writer-sizes", sizes, "--repeat", repeat])
        .args(["--gap", "300ms", "--out"])
        .arg(out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Shard 0's node of `role` (the run writes to shard 0, the first master's).
fn shard_0(cluster: &LocalCluster, role: holprobe::record::NodeRole) -> &LocalNode {
    cluster
        .nodes()
        .iter()
        .find(|n| n.shard() == 0 && n.role() == role)
        .unwrap_or_else(|| panic!("shard 0 has a {role}"))
}

/// Stops the cluster and checks that every one of its servers is gone.
fn assert_stopped(cluster: LocalCluster) {
    let pids = cluster.pids();
    drop(cluster);
    thread::sleep(Duration::from_millis(200));
    for pid in pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "server {pid} still runs"
        );
    }
}

/// A manual failover of the written shard in the middle of a run: the run goes on and completes,
/// the failover is in run.json's node events with its time, the writer follows the MOVED to
/// the new master, and no key of the run is left on any node.
#[test]
fn a_failover_mid_run_leaves_a_complete_run() {
    let cluster = LocalCluster::start(None, 3, 1, &[]).expect("a cluster of 3 masters");
    let url = cluster.url();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let child = start_writes(&url, "4M", "12", &out);
    thread::sleep(Duration::from_secs(3));
    // Shard 0's replica takes over.
    let replica = shard_0(&cluster, holprobe::record::NodeRole::Replica);
    let mut conn = replica.conn_info().redis_connection().unwrap();
    redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .query::<()>(&mut conn)
        .expect("CLUSTER FAILOVER");
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let run = read_json(&out.join("run.json"));
    assert_eq!(run["status"], "complete", "{stderr}");
    let events = run["node_events"].as_array().expect("node events");
    let promoted = replica.address();
    assert!(
        events.iter().any(|e| e["event"] == "topology"
            && e["node"] == promoted.as_str()
            && e["detail"] == "replica -> master"),
        "{events:?}"
    );
    assert!(
        stderr.contains(&format!("{promoted} topology: replica -> master")),
        "{stderr}"
    );
    let writes = read_csv(&out.join("writes.csv"));
    assert_eq!(writes.len(), 24, "every write of the plan was made");
    let moved: Vec<&Row> = writes.iter().filter(|w| w["moved"] != "0").collect();
    assert!(!moved.is_empty(), "no write followed a MOVED: {writes:?}");
    assert!(
        moved.iter().all(|w| w["node"] == promoted.as_str()),
        "{moved:?}"
    );
    let last = writes.last().unwrap();
    assert_eq!(last["ok"], "true", "{last:?}");
    for node in cluster.nodes() {
        let mut conn = node.conn_info().redis_connection().unwrap();
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("holprobe:*")
            .query(&mut conn)
            .unwrap();
        assert!(keys.is_empty(), "{}: {keys:?}", node.address());
    }
    assert_stopped(cluster);
}

/// The written shard's master killed in the middle of a run: its probes report it down once,
/// the cluster promotes the replica (node timeout 2 s), the writer reconnects and follows the
/// MOVED to it, and the run completes with the plan's later writes made on the new master.
#[test]
fn a_killed_master_replaced_by_its_replica_leaves_a_complete_run() {
    let cluster = LocalCluster::start(None, 3, 1, &[]).expect("a cluster of 3 masters");
    let url = cluster.url();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let child = start_writes(&url, "1M", "30", &out);
    thread::sleep(Duration::from_secs(3));
    let master = shard_0(&cluster, holprobe::record::NodeRole::Master);
    let replica = shard_0(&cluster, holprobe::record::NodeRole::Replica);
    let pid = master.pid().expect("the master runs");
    // SAFETY: a plain kill(2) of a process this test started.
    unsafe {
        libc::kill(pid as i32, libc::SIGKILL);
    }
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let run = read_json(&out.join("run.json"));
    assert_eq!(run["status"], "complete", "{stderr}");
    let events = run["node_events"].as_array().expect("node events");
    let dead = master.address();
    let downs: Vec<_> = events
        .iter()
        .filter(|e| e["node"] == dead.as_str() && e["event"] == "down")
        .collect();
    assert_eq!(downs.len(), 1, "reported once: {events:?}");
    assert!(
        events
            .iter()
            .any(|e| e["node"] == replica.address().as_str()
                && e["event"] == "topology"
                && e["detail"]
                    .as_str()
                    .unwrap_or("")
                    .contains("replica -> master")),
        "{events:?}"
    );
    let writes = read_csv(&out.join("writes.csv"));
    assert_eq!(writes.len(), 60, "every write of the plan was made");
    let last = writes.last().unwrap();
    assert_eq!(last["ok"], "true", "{last:?}");
    assert_eq!(last["node"], replica.address(), "{last:?}");
    assert_stopped(cluster);
}

/// The cleanup removes the other shards' GET probe keys at the same time, each server within its
/// own reply limit. With 3 of 7 masters frozen (`kill -STOP`) during a 4 s run at `--timeout
/// 2s`, each of their keys waited a limit of its own, one after the other (3 x 2 s after the
/// run's end). Now the whole removal takes one limit: the tool is gone within the run's 4 s, one
/// limit and a margin of 2 s for a loaded host of its run starting; each frozen server's key
/// is said not removed, and the written shard's keys are gone.
#[test]
fn frozen_shards_share_one_cleanup_limit() {
    use std::time::Instant;
    // 7 masters, 3 of them frozen: the 4 that answer are a majority, and keep serving their
    // slots (a cluster that has lost slots, or a node in a minority, refuses every command by
    // default: "CLUSTERDOWN").
    let cluster = LocalCluster::start(
        None,
        7,
        0,
        &["cluster-require-full-coverage no".to_string()],
    )
    .expect("a cluster of 7 masters");
    let written = cluster
        .nodes()
        .iter()
        .find(|n| n.shard() == 0)
        .expect("shard 0's master");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let url = format!("redis://{}", written.address());
    let mut child = common::spawn_run(
        &[
            "--url",
            &url,
            "--probe-cmd",
            "get",
            "--timeout",
            "2s",
            "--duration",
            "4s",
        ],
        &out,
    );
    let started = Instant::now();
    thread::sleep(Duration::from_millis(500));
    let others: Vec<&LocalNode> = cluster
        .nodes()
        .iter()
        .filter(|n| n.shard() != 0)
        .take(3)
        .collect();
    assert_eq!(others.len(), 3);
    let signal = |sig: i32| {
        for node in &others {
            // SAFETY: a plain kill(2) of a process this test started.
            unsafe {
                libc::kill(node.pid().expect("the master runs") as i32, sig);
            }
        }
    };
    signal(libc::SIGSTOP);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            signal(libc::SIGCONT);
            panic!("probe did not stop within 60 s of its run's start");
        }
        thread::sleep(Duration::from_millis(20));
    };
    let took = started.elapsed();
    signal(libc::SIGCONT);
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    eprintln!(
        "exit {:?} {took:?} after the run's start: {stderr}",
        status.code()
    );
    let not_removed = stderr
        .lines()
        .filter(|l| l.contains("could not remove") && l.contains("timed out after 2 s"))
        .count();
    assert_eq!(not_removed, 3, "one line per frozen server's key: {stderr}");
    assert!(
        took < Duration::from_secs(4 + 2 + 2),
        "took {took:?} after the run's start: {stderr}"
    );
    // The written shard answered: its keys are gone (the others' keys, on servers thawed now,
    // are the marker's to find).
    let mut conn = written.conn_info().redis_connection().unwrap();
    let left: Vec<String> = redis::cmd("KEYS")
        .arg("holprobe:*:probe*")
        .query(&mut conn)
        .unwrap();
    assert!(left.is_empty(), "{left:?}");
    assert_stopped(cluster);
}
