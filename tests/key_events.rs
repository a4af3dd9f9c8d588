//! Keyspace notifications on a real server: the tool turns them on only where it may tune the
//! server, puts the old value back, and hears of an expiry that no client asked for, on the
//! run's clock, after the key's TTL ran out.

mod common;

use std::time::Duration;

use common::TestServer;
use holprobe::measure::clock::RunClock;
use holprobe::measure::keyspace::KeyEvents;
use holprobe::measure::serverview::{ServerTuning, settings_for_key_events};

fn config(server: &TestServer, name: &str) -> String {
    let mut conn = server.conn();
    let pair: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query(&mut conn)
        .unwrap();
    pair[1].clone()
}

#[test]
fn an_expiry_is_heard_with_its_key_and_the_setting_is_put_back() {
    let server = TestServer::start(&[]);
    let info = server.server.conn_info();
    assert_eq!(config(&server, "notify-keyspace-events"), "");
    // Not allowed to tune: only a note, nothing changed.
    let untouched = ServerTuning::apply(&info, &settings_for_key_events(), false);
    assert!(untouched.changed().is_empty());
    assert!(
        untouched
            .notes
            .iter()
            .any(|n| n.contains("notify-keyspace-events is \"\"") && n.contains("--tune-server")),
        "{:?}",
        untouched.notes
    );
    assert_eq!(config(&server, "notify-keyspace-events"), "");

    let mut tuning = ServerTuning::apply(&info, &settings_for_key_events(), true);
    let flags = config(&server, "notify-keyspace-events");
    assert!(
        flags.contains('E') && flags.contains('x') && flags.contains('e'),
        "{flags}"
    );

    let clock = RunClock::start();
    let events = KeyEvents::start(&info, clock).expect("subscribe");
    let mut conn = server.conn();
    // A 20,000-field hash: its expiry is a free of 20,000 allocations on the main thread.
    for batch in 0..20 {
        let mut cmd = redis::cmd("HSET");
        cmd.arg("holprobe:test:h");
        for field in batch * 1000..(batch + 1) * 1000 {
            cmd.arg(format!("{field:016}")).arg("v");
        }
        let _: i64 = cmd.query(&mut conn).unwrap();
    }
    let ttl_end_us = clock.now_us() + 50_000;
    let _: i64 = redis::cmd("PEXPIRE")
        .arg("holprobe:test:h")
        .arg(50)
        .query(&mut conn)
        .unwrap();
    let event = events
        .events()
        .recv_timeout(Duration::from_secs(5))
        .expect("the server's word of the expiry");
    assert_eq!(event.event, "expired");
    assert_eq!(event.key, b"holprobe:test:h");
    assert!(
        event.at_us >= ttl_end_us,
        "heard at {} before the TTL's end {ttl_end_us}",
        event.at_us
    );
    // The active expiry runs 10 times a second: well under a second late.
    assert!(
        event.at_us < ttl_end_us + 1_000_000,
        "{} vs {ttl_end_us}",
        event.at_us
    );
    let exists: i64 = redis::cmd("EXISTS")
        .arg("holprobe:test:h")
        .query(&mut conn)
        .unwrap();
    assert_eq!(exists, 0);
    drop(events);

    tuning.restore().unwrap();
    assert_eq!(config(&server, "notify-keyspace-events"), "");
}

/// Another key's active expiry during a write's window is named by its key and said to be in the
/// write's figures (issue: it was charged to the write with no word): with `--tune-server`, the
/// run hears the expired keys even while its server logs every command.
#[test]
fn another_key_s_expiry_in_a_write_s_window_is_named_and_flagged() {
    let server = TestServer::start(&[]);
    let mut conn = server.conn();
    // 40 hashes of 30,000 fields, not the run's: each expiry frees 30,000 allocations on the
    // main thread, a few ms; the active expiry runs 10 times a second, so their removals stall
    // the server every 100 ms or so while they run out.
    let keys: Vec<String> = (0..40).map(|i| format!("other:big:{i}")).collect();
    for key in &keys {
        for batch in 0..30 {
            let mut cmd = redis::cmd("HSET");
            cmd.arg(key);
            for field in batch * 1000..(batch + 1) * 1000 {
                cmd.arg(format!("{field:016}")).arg("v");
            }
            let _: i64 = cmd.query(&mut conn).unwrap();
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let url = server.url();
    let child = common::spawn_run(
        &[
            "--url",
            &url,
            "--tune-server",
            "--type",
            "list",
            "--elements",
            "1M",
            "--ops",
            "build,delete",
            "--repeat",
            "4",
            "--gap",
            "200ms",
        ],
        &out,
    );
    // They run out from 0.3 s on, one every 60 ms, over the run's builds.
    for (i, key) in keys.iter().enumerate() {
        let _: i64 = redis::cmd("PEXPIRE")
            .arg(key)
            .arg(300 + 60 * i)
            .query(&mut conn)
            .unwrap();
    }
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    // Every key expired (the last at 2.64 s; on a loaded host the active expiry can lag the
    // run's end a little).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !server.keys("other:big:*").is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(server.keys("other:big:*").len(), 0, "every key expired");

    let stalls = common::read_csv(&out.join("stalls.csv"));
    let in_writes: Vec<_> = stalls
        .iter()
        .filter(|s| !s["write_seq"].is_empty() && s["server_key"].contains("other:big:"))
        .collect();
    assert!(
        !in_writes.is_empty(),
        "no stall in a write's window named by a foreign key: {stalls:?}"
    );
    let meta = common::read_json(&out.join("run.json"));
    let warnings: Vec<&str> = meta["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w.as_str())
        .filter(|w| w.contains("not the run's"))
        .collect();
    assert!(!warnings.is_empty(), "{meta}");
    // One line per write, however many of its stalls came with such a removal.
    let writes: Vec<&str> = warnings
        .iter()
        .map(|w| w.split(':').next().unwrap())
        .collect();
    let distinct: std::collections::BTreeSet<&str> = writes.iter().copied().collect();
    assert_eq!(distinct.len(), writes.len(), "{warnings:?}");
    for warning in &warnings {
        assert!(warning.contains("expired other:big:"), "{warning}");
        assert!(!warning.contains("holprobe:"), "{warning}");
    }
    // Each flagged write is one whose window held such a stall.
    for stall in &in_writes {
        let seq = &stall["write_seq"];
        assert!(
            warnings
                .iter()
                .any(|w| w.starts_with(&format!("write {seq}:"))),
            "write {seq} not flagged: {warnings:?}"
        );
    }
    assert!(stderr.contains("not the run's"), "{stderr}");
}
