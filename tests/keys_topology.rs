//! `probe keys` beyond one server: a replica scanned finds the keys written on its master, and a
//! 3-master cluster (a replica each) scanned from one node reports every key of every master
//! exactly once, on the node that owns its slot, or on that shard's replica with
//! `--read-from replicas`. The servers are the library's `LocalCluster` (Redis 7.0 from PATH),
//! stopped when each test ends; every test checks that none is left running.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use holprobe::measure::local_cluster::LocalCluster;
use holprobe::measure::target::ConnInfo;
use holprobe::measure::topology::{NodeAddressMap, Role, discover};

/// Fails when a process the test started is still there once its servers were dropped.
fn assert_gone(pids: &[u32]) {
    for pid in pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "server process {pid} still runs after its servers were dropped"
        );
    }
}

fn control(conn: &ConnInfo) -> redis::Connection {
    conn.redis_connection().expect("connect to a node")
}

/// The key `index` of the test's keyspace and its type: mostly strings, some small hashes,
/// lists, sets and zsets, so every count command is asked on every node.
fn key_of(index: usize) -> (String, &'static str) {
    let kind = match index % 10 {
        0 => "hash",
        1 => "list",
        2 => "set",
        3 => "zset",
        _ => "string",
    };
    (format!("topo:{kind}:{index}"), kind)
}

/// Writes `key` as a small value of `kind` on `conn`.
fn write_key(conn: &mut redis::Connection, key: &str, kind: &str) {
    let reply: redis::RedisResult<i64> = match kind {
        "hash" => redis::cmd("HSET")
            .arg(key)
            .arg("a")
            .arg("1")
            .arg("b")
            .arg("2")
            .query(conn),
        "list" => redis::cmd("RPUSH").arg(key).arg("a").arg("b").query(conn),
        "set" => redis::cmd("SADD").arg(key).arg("a").arg("b").query(conn),
        "zset" => redis::cmd("ZADD")
            .arg(key)
            .arg(1)
            .arg("a")
            .arg(2)
            .arg("b")
            .query(conn),
        _ => redis::cmd("SET")
            .arg(key)
            .arg("value")
            .query::<String>(conn)
            .map(|_| 1),
    };
    reply.unwrap_or_else(|e| panic!("writing {key}: {e}"));
}

/// A hash of `fields` fields, big enough to be the worst key of its node.
fn write_big_hash(conn: &mut redis::Connection, key: &str, fields: usize) {
    for chunk in (0..fields).collect::<Vec<_>>().chunks(1000) {
        let mut cmd = redis::cmd("HSET");
        cmd.arg(key);
        for i in chunk {
            cmd.arg(format!("field:{i}")).arg(format!("value:{i}"));
        }
        let _: i64 = cmd.query(conn).expect("HSET");
    }
}

/// Waits until `replicas` replicas of the master on `conn` acknowledged every write so far.
fn wait_replicated(conn: &mut redis::Connection, replicas: usize) {
    let acked: usize = redis::cmd("WAIT")
        .arg(replicas)
        .arg(10_000)
        .query(conn)
        .expect("WAIT");
    assert!(
        acked >= replicas,
        "{acked} of {replicas} replicas caught up"
    );
}

/// Runs `probe keys` with `args` (every key kept in keys.csv, JSON on stdout, files in `out`)
/// and returns run.json's document and keys.csv's rows.
fn scan(
    url: &str,
    args: &[&str],
    out: &Path,
) -> (serde_json::Value, Vec<BTreeMap<String, String>>) {
    let output = common::probe_cmd()
        .args(["keys", "--url", url, "--size-floor", "0", "--top", "3"])
        .args(["--format", "json", "--out"])
        .arg(out)
        .args(args)
        .timeout(Duration::from_secs(180))
        .output()
        .expect("run probe keys");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(0), "{stderr}\n{stdout}");
    let doc: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("one JSON document ({e}): {stdout}\n{stderr}"));
    assert_eq!(doc["status"], "complete", "{stdout}");
    // Nothing left behind or refused: the probe key is checked and removed on the master.
    for warning in doc["warnings"].as_array().expect("warnings") {
        let warning = warning.as_str().unwrap_or_default();
        assert!(!warning.contains("could not remove"), "{warning}");
    }
    assert_eq!(common::read_json(&out.join("run.json")), doc);
    let rows = common::read_csv(&out.join("keys.csv"))
        .into_iter()
        .map(|row| row.into_iter().collect())
        .collect();
    (doc, rows)
}

/// keys.csv's rows by key: every key once, with the node it was found on.
fn nodes_by_key(rows: &[BTreeMap<String, String>]) -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    for row in rows {
        let before = found.insert(row["key"].clone(), row["node"].clone());
        assert!(
            before.is_none(),
            "{} reported twice: on {} and {}",
            row["key"],
            before.unwrap_or_default(),
            row["node"]
        );
    }
    found
}

fn strings(value: &serde_json::Value) -> BTreeSet<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("an array: {value}"))
        .iter()
        .map(|v| v.as_str().expect("a string").to_string())
        .collect()
}

/// (a) A replica named by --url is scanned itself: the keys written on its master are found
/// there, each once, with their types, and the big one among the worst.
#[test]
fn a_replica_has_its_master_s_keys() {
    let Some(bin) = common::server("redis-7.0") else {
        return;
    };
    let set = LocalCluster::start_replicas(Some(&bin), 1, &[]).expect("start master + replica");
    let pids = set.pids();
    let master = &set.nodes()[0];
    let replica = &set.nodes()[1];
    assert_eq!(replica.role(), Role::Replica);
    let mut conn = control(&master.conn_info());
    let mut expected = BTreeMap::new();
    for index in 0..2_000 {
        let (key, kind) = key_of(index);
        write_key(&mut conn, &key, kind);
        expected.insert(key, kind);
    }
    write_big_hash(&mut conn, "topo:big", 20_000);
    expected.insert("topo:big".into(), "hash");
    wait_replicated(&mut conn, 1);
    let on_replica: u64 = redis::cmd("DBSIZE")
        .query(&mut control(&replica.conn_info()))
        .expect("DBSIZE");
    assert_eq!(on_replica, expected.len() as u64);

    let dir = tempfile::tempdir().unwrap();
    let (doc, rows) = scan(
        &format!("redis://{}", replica.address()),
        &[],
        &dir.path().join("scan"),
    );
    assert_eq!(doc["keys_scanned"], expected.len() as u64, "{doc}");
    assert_eq!(
        strings(&doc["nodes"]),
        BTreeSet::from([replica.address()]),
        "the replica itself is scanned"
    );
    assert_eq!(strings(&doc["nodes_done"]), strings(&doc["nodes"]));
    let found = nodes_by_key(&rows);
    assert_eq!(
        found.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>()
    );
    assert!(found.values().all(|node| *node == replica.address()));
    for row in &rows {
        assert_eq!(row["type"], expected[&row["key"]], "{row:?}");
    }
    assert_eq!(doc["top"][0]["key"], "topo:big", "{}", doc["top"]);
    assert_eq!(doc["top"][0]["elements"], 20_000);
    drop(conn);
    drop(set);
    assert_gone(&pids);
}

/// (b) A 3-master cluster with a replica each, keys over all the slots and a big hash on each
/// shard: scanned from one master, every master is scanned and every key reported once, on its
/// slot's master; with `--read-from replicas` (from a replica's URL), on its shard's replica.
#[test]
fn a_cluster_scan_covers_every_master_once_and_the_replicas_on_request() {
    let Some(bin) = common::server("redis-7.0") else {
        return;
    };
    let cluster = LocalCluster::start(Some(&bin), 3, 1, &[]).expect("start the cluster");
    let pids = cluster.pids();
    let (topology, warnings) =
        discover(&cluster.conn_info(), &NodeAddressMap::default()).expect("discover");
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(topology.shards.len(), 3);
    let mut conns: Vec<redis::Connection> = topology
        .shards
        .iter()
        .map(|shard| control(&cluster.conn_info().for_node(&shard.master.address).unwrap()))
        .collect();
    // Key -> (type, shard).
    let mut expected: BTreeMap<String, (&str, usize)> = BTreeMap::new();
    for index in 0..3_000 {
        let (key, kind) = key_of(index);
        let shard = topology
            .shard_for_key(key.as_bytes())
            .expect("a shard")
            .index;
        write_key(&mut conns[shard], &key, kind);
        expected.insert(key, (kind, shard));
    }
    for shard in &topology.shards {
        let tag = holprobe::measure::slots::hash_tag_for(&shard.slots).expect("a tag");
        let key = format!("topo:big:{{{tag}}}");
        write_big_hash(&mut conns[shard.index], &key, 5_000 * (shard.index + 1));
        expected.insert(key, ("hash", shard.index));
    }
    let mut per_shard = vec![0u64; 3];
    for (_, shard) in expected.values() {
        per_shard[*shard] += 1;
    }
    for (shard, conn) in conns.iter_mut().enumerate() {
        let size: u64 = redis::cmd("DBSIZE").query(conn).expect("DBSIZE");
        assert_eq!(size, per_shard[shard], "shard {shard}");
        assert!(
            size > 500,
            "the keys spread over every shard: {per_shard:?}"
        );
        wait_replicated(conn, 1);
    }
    let masters: BTreeSet<String> = topology
        .shards
        .iter()
        .map(|s| s.master.address.clone())
        .collect();
    let replicas: BTreeSet<String> = topology
        .shards
        .iter()
        .flat_map(|s| s.replicas.iter().map(|r| r.address.clone()))
        .collect();
    assert_eq!(replicas.len(), 3);

    for read_from in ["masters", "replicas"] {
        let dir = tempfile::tempdir().unwrap();
        // The masters from a master's URL; the replicas from a replica's.
        let url = match read_from {
            "masters" => format!("redis://{}", topology.shards[1].master.address),
            _ => format!("redis://{}", topology.shards[2].replicas[0].address),
        };
        let (doc, rows) = scan(&url, &["--read-from", read_from], &dir.path().join("scan"));
        let scanned = if read_from == "masters" {
            &masters
        } else {
            &replicas
        };
        assert_eq!(&strings(&doc["nodes"]), scanned, "{read_from}: {doc}");
        assert_eq!(&strings(&doc["nodes_done"]), scanned, "{read_from}");
        assert_eq!(doc["keys_scanned"], expected.len() as u64, "{read_from}");
        let found = nodes_by_key(&rows);
        assert_eq!(
            found.keys().collect::<Vec<_>>(),
            expected.keys().collect::<Vec<_>>(),
            "{read_from}"
        );
        for row in &rows {
            let (kind, shard) = expected[&row["key"]];
            assert_eq!(row["type"], kind, "{read_from}: {row:?}");
            let owner = &topology.shards[shard];
            let node = if read_from == "masters" {
                &owner.master.address
            } else {
                &owner.replicas[0].address
            };
            assert_eq!(&row["node"], node, "{read_from}: {row:?}");
        }
        // The biggest hash (shard 2's) is the worst key.
        let top_key = doc["top"][0]["key"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert_eq!(expected.get(&top_key), Some(&("hash", 2)), "{}", doc["top"]);
        assert_eq!(doc["top"][0]["elements"], 15_000, "{read_from}");
        assert!(doc.get("nodes_lazyfree").is_none(), "alike nodes: {doc}");
    }

    // Each key is priced with its own node's lazyfree settings: with lazyfree-lazy-user-del on
    // shard 0's master only, its big hash's DEL is a background free there, while shard 1's
    // stays on the main thread (all were priced with the --url node's: the hostile trial).
    let delete_ms = |rows: &[BTreeMap<String, String>], shard: usize| -> f64 {
        let key = rows
            .iter()
            .find(|r| r["key"].starts_with("topo:big:") && expected[&r["key"]].1 == shard)
            .expect("the shard's big hash");
        key["delete_ms"].parse().expect("delete_ms")
    };
    let url = format!("redis://{}", topology.shards[1].master.address);
    let (_, before) = scan(&url, &[], &tempfile::tempdir().unwrap().path().join("a"));
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("lazyfree-lazy-user-del")
        .arg("yes")
        .query::<()>(&mut conns[0])
        .unwrap();
    let (doc, after) = scan(&url, &[], &tempfile::tempdir().unwrap().path().join("b"));
    let shard0 = &topology.shards[0].master.announced;
    assert_eq!(
        doc["nodes_lazyfree"][shard0]["lazy_user_del"], true,
        "{}",
        doc["nodes_lazyfree"]
    );
    assert!(
        delete_ms(&after, 0) < delete_ms(&before, 0) / 5.0,
        "shard 0's DEL {} ms before, {} after",
        delete_ms(&before, 0),
        delete_ms(&after, 0)
    );
    assert_eq!(delete_ms(&after, 1), delete_ms(&before, 1));
    drop(conns);
    drop(cluster);
    assert_gone(&pids);
}
