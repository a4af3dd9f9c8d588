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
