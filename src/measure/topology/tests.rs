use anyhow::{Result, bail};
use redis::Value;

use super::*;

/// The node of the URL, as announced and as dialled.
fn url_of(announced: &str, address: &str) -> UrlNode {
    UrlNode {
        announced: announced.into(),
        address: address.into(),
    }
}

fn reply(name: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/topology")
        .join(name);
    let bytes = std::fs::read(&path).unwrap();
    redis::parse_redis_value(&bytes).unwrap()
}

fn all_reachable(_: &str) -> Result<()> {
    Ok(())
}

/// `shards` assembled as a cluster seen from `url_node`, every node reachable; `link_up` says
/// which replica reports its link up.
fn cluster_of(
    shards: Vec<ReportedShard>,
    url_node: &UrlNode,
    link_up: &mut dyn FnMut(&str) -> bool,
) -> (Topology, Vec<String>) {
    assemble(
        TopologyKind::Cluster,
        shards,
        url_node,
        &NodeAddressMap::default(),
        &mut all_reachable,
        link_up,
    )
    .unwrap()
}

/// Valkey 9.1.2, 3 masters with 1 replica each, asked on a replica once all were online.
#[test]
fn valkey_cluster_shards() {
    let shards = parse_cluster_shards(&reply("valkey-9.1-cluster-shards.resp"), false).unwrap();
    assert_eq!(shards.len(), 3);
    let first = &shards[0];
    assert_eq!(first.slots, vec![(5461, 10922)]);
    assert_eq!(
        first.id.as_deref(),
        Some("3d594cb316cb371ebc31421c8d3bb3759c044655")
    );
    let master = first.master.as_ref().unwrap();
    assert_eq!(master.announced, "127.0.0.1:31102");
    assert_eq!(
        master.id.as_deref(),
        Some("860c16beb74e2db5b2def3aac852e82e4d71a72d")
    );
    assert_eq!(master.health.as_deref(), Some("online"));
    assert_eq!(first.replicas.len(), 1);
    assert_eq!(first.replicas[0].announced, "127.0.0.1:31104");
    assert_eq!(first.replicas[0].role, Role::Replica);

    let url_node = url_of("127.0.0.1:31104", "localhost:31104");
    let mut asked = Vec::new();
    let (topology, warnings) = assemble(
        TopologyKind::Cluster,
        shards,
        &url_node,
        &NodeAddressMap::default(),
        &mut |address| {
            asked.push(address.to_string());
            Ok(())
        },
        &mut |_| false,
    )
    .unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(topology.slots_covered(), 16384);
    let masters: Vec<&str> = topology
        .shards
        .iter()
        .map(|s| s.master.announced.as_str())
        .collect();
    // Numbered by lowest slot, not in the reply's order.
    assert_eq!(
        masters,
        ["127.0.0.1:31101", "127.0.0.1:31102", "127.0.0.1:31103"]
    );
    let url = topology.node("127.0.0.1:31104").unwrap();
    assert_eq!(
        (url.address.as_str(), url.role, url.shard),
        ("localhost:31104", Role::Replica, 1)
    );
    // Every node but the URL's own was checked.
    assert_eq!(asked.len(), 5);
    assert!(!asked.iter().any(|a| a.contains("31104")));
    assert_eq!(topology.shard_for_slot(5461).unwrap().index, 1);
    assert_eq!(topology.shard_for_key(b"foo").unwrap().index, 2);
}

/// Redis 7.0.15 right after `--cluster create`: the replicas have acknowledged no offset
/// yet and are reported `loading`; those that do not say themselves that their link is up are
/// left out with a warning each.
#[test]
fn redis_70_shards_with_loading_replicas() {
    let shards =
        parse_cluster_shards(&reply("redis-7.0-cluster-shards-fresh.resp"), false).unwrap();
    assert_eq!(shards.len(), 3);
    assert_eq!(shards[0].id, None);
    assert_eq!(shards[0].replicas[0].health.as_deref(), Some("loading"));
    let url_node = url_of("127.0.0.1:31001", "127.0.0.1:31001");
    let (topology, warnings) = cluster_of(shards, &url_node, &mut |_| false);
    assert_eq!(topology.nodes().len(), 3);
    assert_eq!(warnings.len(), 3, "{warnings:?}");
    assert_eq!(
        warnings[0],
        "replica 127.0.0.1:31004 is loading, not online: left out"
    );
}

/// The same reply, each replica saying `master_link_status:up` itself (issue 22, item 2):
/// every node is kept, and only the replicas reported other than online were asked.
#[test]
fn loading_replicas_whose_own_link_is_up_are_kept() {
    let shards =
        parse_cluster_shards(&reply("redis-7.0-cluster-shards-fresh.resp"), false).unwrap();
    let url_node = url_of("127.0.0.1:31001", "127.0.0.1:31001");
    let mut asked = Vec::new();
    let (topology, warnings) = cluster_of(shards.clone(), &url_node, &mut |address| {
        asked.push(address.to_string());
        true
    });
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(topology.nodes().len(), 6, "{topology:#?}");
    asked.sort();
    assert_eq!(
        asked,
        ["127.0.0.1:31004", "127.0.0.1:31005", "127.0.0.1:31006"]
    );
    // One replica says its link is down: that one alone is left out.
    let (topology, warnings) = cluster_of(shards, &url_node, &mut |address| {
        address != "127.0.0.1:31005"
    });
    assert_eq!(topology.nodes().len(), 5);
    assert_eq!(
        warnings,
        ["replica 127.0.0.1:31005 is loading, not online: left out"]
    );
}

/// Redis 7.0.15 and 6.2.14, CLUSTER SLOTS once the replicas were in sync; Valkey 9.1.2 before
/// (CLUSTER SLOTS leaves out replicas that acknowledged nothing yet).
#[test]
fn cluster_slots_replies() {
    for (file, replicas) in [
        ("redis-7.0-cluster-slots.resp", 1),
        ("redis-6.2-cluster-slots.resp", 1),
        ("valkey-9.1-cluster-slots.resp", 0),
    ] {
        let shards = parse_cluster_slots(&reply(file)).unwrap();
        assert_eq!(shards.len(), 3, "{file}");
        assert_eq!(shards[0].slots, vec![(0, 5460)], "{file}");
        assert_eq!(shards[2].slots, vec![(10923, 16383)], "{file}");
        for shard in &shards {
            assert_eq!(shard.replicas.len(), replicas, "{file}");
            assert_eq!(
                shard.master.as_ref().unwrap().id.as_ref().unwrap().len(),
                40
            );
        }
    }
    let shards = parse_cluster_slots(&reply("redis-6.2-cluster-slots.resp")).unwrap();
    assert_eq!(
        shards[1].master.as_ref().unwrap().announced,
        "127.0.0.1:31202"
    );
    assert_eq!(shards[1].replicas[0].announced, "127.0.0.1:31205");
}

#[test]
fn cluster_slots_gathers_a_masters_ranges() {
    let node = |port: i64, id: &str| {
        Value::Array(vec![
            Value::BulkString(b"10.0.0.1".to_vec()),
            Value::Int(port),
            Value::BulkString(id.as_bytes().to_vec()),
        ])
    };
    let range = |lo: i64, hi: i64, master: Value, replica: Value| {
        Value::Array(vec![Value::Int(lo), Value::Int(hi), master, replica])
    };
    let reply = Value::Array(vec![
        range(100, 200, node(1, "a"), node(2, "b")),
        range(0, 99, node(3, "c"), node(4, "d")),
        range(201, 300, node(1, "a"), node(2, "b")),
    ]);
    let shards = parse_cluster_slots(&reply).unwrap();
    assert_eq!(shards.len(), 2);
    assert_eq!(shards[0].slots, vec![(100, 200), (201, 300)]);
    assert_eq!(shards[0].replicas.len(), 1);
    assert!(parse_cluster_slots(&Value::Array(vec![Value::Int(1)])).is_err());
    assert!(
        parse_cluster_slots(&Value::Array(vec![range(
            0,
            16384,
            node(1, "a"),
            node(2, "b")
        )]))
        .is_err()
    );
}

/// INFO replication of Redis 7.0.15 (master, replica), Redis 6.2.14 and Valkey 9.1.2 (whose
/// lines end with `type=replica`).
#[test]
fn info_replication_texts() {
    let master_70 = "# Replication\r\nrole:master\r\nconnected_slaves:1\r\nslave0:ip=127.0.0.1,port=31004,state=online,offset=0,lag=0\r\nmaster_failover_state:no-failover\r\nmaster_replid:3a56cc602ffc93ea822e78425da7584841c93c9c\r\nmaster_replid2:0000000000000000000000000000000000000000\r\nmaster_repl_offset:0\r\nsecond_repl_offset:-1\r\nrepl_backlog_active:1\r\nrepl_backlog_size:1048576\r\nrepl_backlog_first_byte_offset:1\r\nrepl_backlog_histlen:0\r\n";
    let info = parse_info_replication(master_70).unwrap();
    assert_eq!(info.role, Role::Master);
    assert_eq!(info.master, None);
    assert_eq!(
        info.replicas,
        vec![ReplicaLine {
            announced: "127.0.0.1:31004".into(),
            state: "online".into(),
            offset: Some(0)
        }]
    );
    let replica_70 = "# Replication\r\nrole:slave\r\nmaster_host:127.0.0.1\r\nmaster_port:31001\r\nmaster_link_status:up\r\nmaster_last_io_seconds_ago:2\r\nmaster_sync_in_progress:0\r\nslave_read_repl_offset:0\r\nslave_repl_offset:0\r\nslave_priority:100\r\nslave_read_only:1\r\nreplica_announced:1\r\nconnected_slaves:0\r\nmaster_failover_state:no-failover\r\n";
    let info = parse_info_replication(replica_70).unwrap();
    assert_eq!(info.role, Role::Replica);
    assert_eq!(info.master.as_deref(), Some("127.0.0.1:31001"));
    assert!(info.master_link_up);
    assert!(info.replicas.is_empty());
    let master_62 = "# Replication\r\nrole:master\r\nconnected_slaves:1\r\nslave0:ip=127.0.0.1,port=31204,state=online,offset=0,lag=1\r\n";
    assert_eq!(
        parse_info_replication(master_62).unwrap().replicas[0].announced,
        "127.0.0.1:31204"
    );
    let master_valkey = "# Replication\r\nrole:master\r\nconnected_slaves:1\r\nslave0:ip=127.0.0.1,port=31106,state=online,offset=0,lag=1,type=replica\r\n";
    let info = parse_info_replication(master_valkey).unwrap();
    assert_eq!(info.replicas[0].announced, "127.0.0.1:31106");
    assert_eq!(info.replicas[0].state, "online");
    assert!(parse_info_replication("# Replication\r\n").is_err());
}

#[test]
fn node_address_flags() {
    let map = NodeAddressMap::parse(&["10.0.0.5:6379=127.0.0.1:7001", "[fe80::1]:6379=[::1]:7002"])
        .unwrap();
    assert_eq!(map.get("10.0.0.5:6379"), Some("127.0.0.1:7001"));
    assert_eq!(map.get("[fe80::1]:6379"), Some("[::1]:7002"));
    assert_eq!(map.get("10.0.0.5:6380"), None);
    for (bad, says) in [
        ("10.0.0.5:6379", "expected FROM=TO"),
        ("10.0.0.5=127.0.0.1:7001", "FROM '10.0.0.5'"),
        ("10.0.0.5:6379=127.0.0.1:0", "TO '127.0.0.1:0'"),
        ("10.0.0.5:6379=", "TO ''"),
    ] {
        let err = parse_node_address(bad).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("invalid value '{bad}' for --node-address")),
            "{err}"
        );
        assert!(err.contains(says), "{err}");
        assert!(!err.contains('\n'), "{err}");
    }
    let err = NodeAddressMap::parse(&["a:1=b:2", "a:1=c:3"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("a:1 is already mapped to b:2"), "{err}");
    assert!(NodeAddressMap::parse(&["a:1=b:2", "a:1=b:2"]).is_ok());
}

#[test]
fn topology_mode_flag() {
    assert_eq!("auto".parse::<TopologyMode>().unwrap(), TopologyMode::Auto);
    assert_eq!(
        "single".parse::<TopologyMode>().unwrap(),
        TopologyMode::Single
    );
    assert_eq!(TopologyMode::default(), TopologyMode::Auto);
    let err = "all".parse::<TopologyMode>().unwrap_err().to_string();
    assert!(
        err.starts_with("invalid value 'all' for --topology"),
        "{err}"
    );
}

/// A container's announced address mapped to the one the tool reaches, and another that
/// cannot be reached: the first is measured at its mapped address, the second left out with
/// one warning line.
#[test]
fn mapping_and_unreachable_nodes() {
    let node = |announced: &str, role| ReportedNode {
        id: None,
        announced: announced.into(),
        role,
        health: None,
    };
    let reported = vec![ReportedShard {
        id: None,
        slots: vec![(0, 16383)],
        master: Some(node("127.0.0.1:7000", Role::Master)),
        replicas: vec![
            node("172.17.0.3:6379", Role::Replica),
            node("172.17.0.4:6379", Role::Replica),
        ],
    }];
    let map = NodeAddressMap::parse(&["172.17.0.3:6379=127.0.0.1:7001"]).unwrap();
    let url_node = url_of("127.0.0.1:7000", "127.0.0.1:7000");
    let (topology, warnings) = assemble(
        TopologyKind::Standalone,
        reported.clone(),
        &url_node,
        &map,
        &mut |address| match address {
            "127.0.0.1:7001" => Ok(()),
            _ => bail!("cannot connect to redis://{address}"),
        },
        &mut |_| false,
    )
    .unwrap();
    assert_eq!(topology.shards[0].replicas.len(), 1);
    let replica = &topology.shards[0].replicas[0];
    assert_eq!(replica.announced, "172.17.0.3:6379");
    assert_eq!(replica.address, "127.0.0.1:7001");
    assert_eq!(warnings, vec!["replica 172.17.0.4:6379 cannot be reached: cannot connect to redis://172.17.0.4:6379: left out (map its address with --node-address 172.17.0.4:6379=HOST:PORT)".to_string()]);

    // The URL's node left out with its master: an error naming --topology single.
    let url_node = url_of("172.17.0.4:6379", "127.0.0.1:7004");
    let err = assemble(
        TopologyKind::Standalone,
        reported,
        &url_node,
        &NodeAddressMap::default(),
        &mut |_| bail!("refused"),
        &mut |_| false,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("--topology single"), "{err}");
    assert!(!err.contains('\n'), "{err}");
}

#[test]
fn topology_serializes_for_run_json() {
    let master = Node {
        id: None,
        announced: "127.0.0.1:7000".into(),
        address: "127.0.0.1:7000".into(),
        role: Role::Master,
        shard: 0,
    };
    let topology = Topology {
        kind: TopologyKind::Standalone,
        shards: vec![Shard {
            index: 0,
            id: None,
            slots: vec![(0, 16383)],
            master,
            replicas: Vec::new(),
        }],
    };
    let json = serde_json::to_value(&topology).unwrap();
    assert_eq!(json["kind"], "standalone");
    assert_eq!(json["shards"][0]["master"]["role"], "master");
    assert_eq!(json["shards"][0]["slots"][0][1], 16383);
    let back: Topology = serde_json::from_value(json).unwrap();
    assert_eq!(back, topology);
}
