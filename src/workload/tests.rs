use std::collections::HashSet;

use super::lazyfree::{FreedBy, LazyfreeSettings, Removal, avoidable_by, freed_by};
use super::*;
use crate::measure::resp::{Reply, ReplyLimits, parse_reply};

/// The commands `kind` builds for elements `first..first+count`, parsed back as RESP arrays.
fn built(kind: &dyn ValueKind, first: u64, count: u64, element_bytes: usize) -> Vec<Vec<Vec<u8>>> {
    let fill: Vec<u8> = (0..4096u32).map(|i| (i * 31 % 251) as u8).collect();
    let mut out = Vec::new();
    let commands = kind.build_batch(b"k", first, count, element_bytes, &fill, &mut out);
    let limits = ReplyLimits::for_values_up_to(1 << 20);
    let mut parsed = Vec::new();
    let mut at = 0;
    while at < out.len() {
        let (reply, used) = parse_reply(&out[at..], limits)
            .unwrap()
            .expect("a whole command");
        at += used;
        let Reply::Array(Some(items)) = reply else {
            panic!("not an array: {reply:?}")
        };
        parsed.push(
            items
                .into_iter()
                .map(|item| match item {
                    Reply::Bulk(Some(bytes)) => bytes,
                    other => panic!("not a bulk string: {other:?}"),
                })
                .collect(),
        );
    }
    assert_eq!(parsed.len(), commands, "{}: commands counted", kind.name());
    parsed
}

#[test]
fn every_collection_builds_distinct_members_of_the_asked_size() {
    for (name, command, per_element, member_at) in [
        ("hash", "HSET", 2, 0),
        ("set", "SADD", 1, 0),
        ("zset", "ZADD", 2, 1),
        ("list", "RPUSH", 1, 0),
    ] {
        let kind = kind_named(name).unwrap();
        let commands = built(kind, 5, 300, 16);
        assert_eq!(commands.len(), 1, "{name}: one command a batch");
        let args = &commands[0];
        assert_eq!(args[0], command.as_bytes(), "{name}");
        assert_eq!(args[1], b"k", "{name}");
        let elements: Vec<&Vec<u8>> = args[2..]
            .iter()
            .skip(member_at)
            .step_by(per_element)
            .collect();
        assert_eq!(elements.len(), 300, "{name}");
        assert!(elements.iter().all(|e| e.len() == 16), "{name}");
        let distinct: HashSet<_> = elements.iter().collect();
        assert_eq!(distinct.len(), 300, "{name}: members distinct");
    }
    // A zset's scores are the members' indexes.
    let zset = built(&kinds::zset::ZSET, 5, 3, 8);
    assert_eq!(zset[0][2], b"5");
    assert_eq!(zset[0][4], b"6");
}

#[test]
fn a_stream_batch_is_one_xadd_per_entry() {
    let commands = built(&kinds::stream::STREAM, 0, 7, 32);
    assert_eq!(commands.len(), 7);
    for args in &commands {
        assert_eq!(
            args[..4],
            [
                b"XADD".to_vec(),
                b"k".to_vec(),
                b"*".to_vec(),
                b"f".to_vec()
            ]
        );
        assert_eq!(args[4].len(), 32);
    }
}

#[test]
fn elements_of_one_byte_count_up_to_sixteen_distinct() {
    assert_eq!(distinct_elements(1), 16);
    assert_eq!(distinct_elements(4), 65536);
    assert_eq!(distinct_elements(16), u64::MAX);
    let mut out = Vec::new();
    element_bytes_into(0x1f, 1, b"xyz", &mut out);
    assert_eq!(out, b"f");
    out.clear();
    element_bytes_into(0xabc, 6, b"xyz", &mut out);
    assert_eq!(out, b"000abc");
    out.clear();
    element_bytes_into(1, 20, b"xyz", &mut out);
    assert_eq!(&out[..16], b"0000000000000001");
    assert_eq!(&out[16..], b"xyzx");
}

#[test]
fn a_shape_is_given_by_bytes_or_by_elements() {
    let hash = kind_named("hash").unwrap();
    let by_count = Shape::sized(hash, SizeBy::Elements(1_000_000), 16).unwrap();
    assert_eq!(by_count.elements, 1_000_000);
    assert_eq!(
        by_count.size_bytes(),
        32_000_000,
        "a field and a value each"
    );
    let by_bytes = Shape::sized(hash, SizeBy::Bytes(32_000_000), 16).unwrap();
    assert_eq!(by_bytes, by_count);
    let list = kind_named("list").unwrap();
    let list = Shape::sized(list, SizeBy::Bytes(1000), 16).unwrap();
    assert_eq!((list.elements, list.size_bytes()), (62, 992));
    let string = Shape::sized(&kinds::string::STRING, SizeBy::Bytes(64 << 20), 16).unwrap();
    assert_eq!((string.elements, string.size_bytes()), (1, 64 << 20));
}

#[test]
fn shapes_that_make_no_sense_name_their_flag() {
    let set = kind_named("set").unwrap();
    let err = |result: Result<Shape, crate::error::UsageError>| result.unwrap_err().to_string();
    let zero = err(Shape::sized(set, SizeBy::Elements(10), 0));
    assert!(
        zero.contains("--element-size") && zero.contains("'0'"),
        "{zero}"
    );
    let none = err(Shape::sized(set, SizeBy::Elements(0), 16));
    assert!(none.contains("--elements"), "{none}");
    let small = err(Shape::sized(set, SizeBy::Bytes(8), 16));
    assert!(
        small.contains("--writer-sizes") && small.contains("smaller than one set element"),
        "{small}"
    );
    let crowded = err(Shape::sized(set, SizeBy::Elements(100_000), 4));
    assert!(
        crowded.contains("--element-size") && crowded.contains("at least 5 bytes"),
        "{crowded}"
    );
    // A list's elements need not be distinct.
    assert!(Shape::sized(kind_named("list").unwrap(), SizeBy::Elements(100_000), 1).is_ok());
    let string = err(Shape::sized(
        &kinds::string::STRING,
        SizeBy::Elements(5),
        16,
    ));
    assert!(
        string.contains("--elements") && string.contains("no elements"),
        "{string}"
    );
    assert!(kind_named("sortedset").is_none());
    assert_eq!(kinds::kind_names(), "string, hash, list, set, zset, stream");
}

#[test]
fn free_effort_follows_the_encoding() {
    let hash = kind_named("hash").unwrap();
    assert_eq!(hash.free_effort("hashtable", 1_000_000, 16), 1_000_000);
    assert_eq!(hash.free_effort("listpack", 100, 16), 1);
    assert_eq!(hash.free_effort("ziplist", 100, 16), 1);
    assert_eq!(
        kind_named("zset").unwrap().free_effort("skiplist", 500, 16),
        500
    );
    assert_eq!(kind_named("set").unwrap().free_effort("intset", 500, 8), 1);
    assert_eq!(kinds::string::STRING.free_effort("raw", 1, 512 << 20), 1);
    // 2M 16-byte elements: 8 KiB nodes of 455 entries, about 4,400 nodes.
    let list = kind_named("list")
        .unwrap()
        .free_effort("quicklist", 2_000_000, 16);
    assert!((4_000..5_000).contains(&list), "{list}");
    assert_eq!(
        kind_named("list").unwrap().free_effort("listpack", 100, 16),
        1
    );
    // 1M entries of 16 bytes: 100 entries a node.
    assert_eq!(
        kind_named("stream")
            .unwrap()
            .free_effort("stream", 1_000_000, 16),
        10_000
    );
}

#[test]
fn strings_are_freed_on_the_main_thread_whatever_the_settings() {
    let all_lazy = LazyfreeSettings::from_config([
        ("lazyfree-lazy-user-del", "yes"),
        ("lazyfree-lazy-server-del", "yes"),
        ("lazyfree-lazy-expire", "yes"),
        ("lazyfree-lazy-eviction", "yes"),
        ("lazyfree-lazy-user-flush", "yes"),
    ]);
    for removal in [
        Removal::Delete,
        Removal::Unlink,
        Removal::Expire,
        Removal::Evict,
        Removal::Overwrite,
    ] {
        assert_eq!(
            freed_by(removal, 1, &all_lazy),
            Some(FreedBy::Main),
            "{removal:?}"
        );
        assert_eq!(
            freed_by(removal, 64, &all_lazy),
            Some(FreedBy::Main),
            "{removal:?}"
        );
        assert_eq!(avoidable_by(removal, 1), None);
        assert_eq!(
            freed_by(removal, 65, &all_lazy),
            Some(FreedBy::Background),
            "{removal:?}"
        );
    }
}

#[test]
fn a_big_collection_follows_its_removal_s_setting() {
    let redis_defaults = LazyfreeSettings::from_config([
        ("lazyfree-lazy-user-del", "no"),
        ("lazyfree-lazy-server-del", "no"),
        ("lazyfree-lazy-expire", "no"),
        ("lazyfree-lazy-eviction", "no"),
    ]);
    let effort = 1_000_000;
    assert_eq!(
        freed_by(Removal::Delete, effort, &redis_defaults),
        Some(FreedBy::Main)
    );
    assert_eq!(
        freed_by(Removal::Expire, effort, &redis_defaults),
        Some(FreedBy::Main)
    );
    assert_eq!(
        freed_by(Removal::Overwrite, effort, &redis_defaults),
        Some(FreedBy::Main)
    );
    assert_eq!(
        freed_by(Removal::Unlink, effort, &redis_defaults),
        Some(FreedBy::Background)
    );
    let only_expire = LazyfreeSettings {
        lazy_expire: Some(true),
        ..redis_defaults
    };
    assert_eq!(
        freed_by(Removal::Expire, effort, &only_expire),
        Some(FreedBy::Background)
    );
    assert_eq!(
        freed_by(Removal::Delete, effort, &LazyfreeSettings::default()),
        None
    );
    assert_eq!(
        freed_by(Removal::Unlink, effort, &LazyfreeSettings::default()),
        Some(FreedBy::Background)
    );
    let advice = avoidable_by(Removal::Delete, effort).unwrap();
    assert!(
        advice.contains("UNLINK") && advice.contains("lazyfree-lazy-user-del"),
        "{advice}"
    );
    assert!(
        avoidable_by(Removal::Expire, effort)
            .unwrap()
            .contains("lazyfree-lazy-expire yes")
    );
    assert_eq!(avoidable_by(Removal::Unlink, effort), None);
}

/// What CONFIG GET told goes back as CONFIG SET pairs (a replay server takes a cluster node's);
/// what it did not tell is left out.
#[test]
fn lazyfree_settings_go_back_as_config_pairs() {
    let told = LazyfreeSettings::from_config([
        ("lazyfree-lazy-user-del", "yes"),
        ("lazyfree-lazy-expire", "no"),
    ]);
    assert_eq!(
        told.to_config(),
        [
            ("lazyfree-lazy-user-del", "yes"),
            ("lazyfree-lazy-expire", "no")
        ]
    );
    let pairs: Vec<(&str, &str)> = told.to_config();
    assert_eq!(LazyfreeSettings::from_config(pairs), told);
}
