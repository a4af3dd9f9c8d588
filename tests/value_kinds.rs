//! Every kind of large value, built on real servers with the commands the writer sends: the
//! server holds what the kind says (its TYPE, its count, the encoding the kind expects at that
//! size), and the kind's free effort predicts which thread the server frees it on (the server's
//! `lazyfreed_objects` counter, after an UNLINK).

mod common;

use common::TestServer;
use holprobe::measure::resp::{RawConn, Reply};
use holprobe::workload::lazyfree::{FreedBy, LazyfreeSettings, Removal, freed_by};
use holprobe::workload::{KINDS, ValueKind};

/// Builds `elements` of `kind` under `key` in batches of `batch`, pipelined as the writer does.
fn build(conn: &mut RawConn, kind: &dyn ValueKind, key: &[u8], elements: u64, batch: u64) {
    let fill: Vec<u8> = (0..65536u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let mut first = 0;
    while first < elements {
        let count = batch.min(elements - first);
        let mut out = Vec::new();
        let commands = kind.build_batch(key, first, count, 16, &fill, &mut out);
        conn.send_raw(&out).expect("send a batch");
        for _ in 0..commands {
            let reply = conn.read_reply().expect("a reply");
            assert!(reply.error().is_none(), "{}: {reply:?}", kind.name());
        }
        first += count;
    }
}

fn text(reply: Reply) -> String {
    match reply {
        Reply::Status(s) => s,
        Reply::Bulk(Some(b)) => String::from_utf8_lossy(&b).into_owned(),
        Reply::Integer(i) => i.to_string(),
        other => panic!("unexpected reply {other:?}"),
    }
}

fn integer(reply: Reply) -> i64 {
    match reply {
        Reply::Integer(i) => i,
        other => panic!("not an integer: {other:?}"),
    }
}

fn lazyfreed(conn: &mut RawConn) -> Option<u64> {
    let info = text(conn.command(&[b"INFO", b"memory"]).expect("INFO"));
    info.lines()
        .find_map(|line| line.strip_prefix("lazyfreed_objects:"))
        .and_then(|v| v.trim().parse().ok())
}

#[test]
fn every_kind_builds_what_it_says_and_frees_where_the_rule_says() {
    let mut servers = vec![("redis-7.0".to_string(), TestServer::start(&[]))];
    for name in ["redis-6.2", "valkey-9.1"] {
        if let Some(bin) = common::server(name) {
            servers.push((name.to_string(), TestServer::start_bin(Some(&bin), &[])));
        }
    }
    for (name, server) in &servers {
        eprintln!("{name}");
        kinds_on(server);
    }
}

fn kinds_on(server: &TestServer) {
    let mut conn = RawConn::connect(&server.server.conn_info()).expect("connect");
    for kind in KINDS.iter().copied().filter(|k| k.name() != "string") {
        for (elements, walked) in [(50u64, false), (40_000, true)] {
            let key = format!("holprobe:test:{}:{elements}", kind.name());
            build(&mut conn, kind, key.as_bytes(), elements, 1000);
            let ty = text(conn.command(&[b"TYPE", key.as_bytes()]).unwrap());
            assert_eq!(ty, kind.name());
            let count = integer(
                conn.command(&[kind.count_command().as_bytes(), key.as_bytes()])
                    .unwrap(),
            );
            assert_eq!(count as u64, elements, "{} {elements}", kind.name());
            let encoding = text(
                conn.command(&[b"OBJECT", b"ENCODING", key.as_bytes()])
                    .unwrap(),
            );
            let effort = kind.free_effort(&encoding, elements, 16);
            // A small collection is one allocation; a big one (but a list's or stream's nodes,
            // fewer than its elements) many.
            assert_eq!(
                effort > 64,
                walked,
                "{} {elements} {encoding}: effort {effort}",
                kind.name()
            );
            // The whole read has every element (a hash and a zset two items each).
            let (read, args) = kind.read_command();
            let mut command: Vec<&[u8]> = vec![read.as_bytes(), key.as_bytes()];
            command.extend(args.iter().map(|a| a.as_bytes()));
            let Reply::Array(Some(items)) = conn.command(&command).unwrap() else {
                panic!("{read}: not an array")
            };
            let per = if ["hash", "zset"].contains(&kind.name()) {
                2
            } else {
                1
            };
            assert_eq!(items.len() as u64, elements * per, "{read}");
            // The same read, thrown away as it arrives, counts the same.
            let mut request = Vec::new();
            holprobe::workload::encode_into(&mut request, &command);
            conn.send_raw(&request).unwrap();
            let seen = conn.discard_reply(64 << 20).unwrap();
            // A stream entry is its id, its field and its value.
            let leaves = if kind.name() == "stream" { 3 } else { per };
            assert_eq!(seen.elements, elements * leaves, "{read}, discarded");
            // UNLINK: freed in the background exactly when the rule says so.
            let before = lazyfreed(&mut conn).expect("lazyfreed_objects in INFO memory");
            assert_eq!(
                integer(conn.command(&[b"UNLINK", key.as_bytes()]).unwrap()),
                1
            );
            let expected = freed_by(Removal::Unlink, effort, &LazyfreeSettings::default());
            let mut after = lazyfreed(&mut conn).unwrap();
            for _ in 0..100 {
                if after > before || expected == Some(FreedBy::Main) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
                after = lazyfreed(&mut conn).unwrap();
            }
            let background = after > before;
            assert_eq!(
                background,
                expected == Some(FreedBy::Background),
                "{} of {elements} ({encoding}, effort {effort})",
                kind.name()
            );
        }
    }
}

/// The peak resident memory of this process so far, bytes (`VmHWM`).
fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmHWM")
        * 1024
}

#[test]
fn reading_a_64m_string_whole_keeps_the_client_s_memory_bounded() {
    let server = TestServer::start(&[]);
    let mut conn = RawConn::connect(&server.server.conn_info()).expect("connect");
    // 64 MiB made on the server (SETRANGE pads with zeros): the client never holds it.
    let size: u64 = 64 << 20;
    let offset = (size - 1).to_string();
    assert_eq!(
        integer(
            conn.command(&[b"SETRANGE", b"holprobe:test:big", offset.as_bytes(), b"x"])
                .unwrap()
        ),
        size as i64
    );
    let before = peak_rss_bytes();
    conn.send_raw(b"*2\r\n$3\r\nGET\r\n$17\r\nholprobe:test:big\r\n")
        .unwrap();
    let seen = conn
        .discard_reply(size + (1 << 20))
        .expect("the whole value");
    assert_eq!(seen.elements, 1);
    assert!(seen.bytes > size, "{seen:?}");
    let grew = peak_rss_bytes().saturating_sub(before);
    assert!(
        grew < 16 << 20,
        "the peak grew by {grew} bytes reading {size}"
    );
    // The check can fail: a reader that keeps the reply grows by the value.
    conn.set_limits(holprobe::measure::resp::ReplyLimits::for_values_up_to(size));
    let kept = conn.command(&[b"GET", b"holprobe:test:big"]).unwrap();
    let grew_kept = peak_rss_bytes().saturating_sub(before);
    assert!(
        grew_kept >= 60 << 20,
        "kept {} bytes, grew {grew_kept}",
        matches!(kept, Reply::Bulk(Some(ref b)) if b.len() as u64 == size)
    );
}
