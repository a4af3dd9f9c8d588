//! A stall that no client sent a command for: a big hash's active expiry, watched in observe
//! mode on a server given by `--url` with `--tune-server`. The stall must read as what it is:
//! named by the LATENCY monitor's expiry events and by the expired key (keyspace notifications,
//! turned on for the run and turned back off after it), not as "N probes delayed".

mod common;

use std::time::Duration;

use common::{TestServer, probe_cmd, read_csv};

/// Builds a hash of `fields` 16-byte fields on the server, in batches of 1000.
fn build_hash(conn: &mut redis::Connection, key: &str, fields: u32) {
    for batch in 0..fields.div_ceil(1000) {
        let mut cmd = redis::cmd("HSET");
        cmd.arg(key);
        for field in batch * 1000..((batch + 1) * 1000).min(fields) {
            cmd.arg(format!("{field:016}")).arg("vvvvvvvvvvvvvvvv");
        }
        let _: i64 = cmd.query(conn).expect("HSET");
    }
}

fn config(conn: &mut redis::Connection, name: &str) -> String {
    let pair: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query(conn)
        .unwrap();
    pair[1].clone()
}

#[test]
fn an_expiring_hash_s_stall_is_named_by_its_event_and_key_in_observe_mode() {
    // Someone else's server: the latency monitor on (as operators run it), notifications off.
    let server = TestServer::start(&["latency-monitor-threshold 1"]);
    let mut conn = server.conn();
    let key = "app:big:hash";
    build_hash(&mut conn, key, 200_000);
    let out = tempfile::tempdir().unwrap();
    let expirer = {
        let mut conn = server.conn();
        std::thread::spawn(move || {
            // Well inside the run, with quiet probing around it.
            std::thread::sleep(Duration::from_millis(1500));
            let _: i64 = redis::cmd("PEXPIRE")
                .arg(key)
                .arg(50)
                .query(&mut conn)
                .unwrap();
        })
    };
    let run = probe_cmd()
        .args([
            "--url",
            &server.url(),
            "--duration",
            "4s",
            "--tune-server",
            "--out",
        ])
        .arg(out.path())
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    expirer.join().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stdout}\n{stderr}");
    let exists: i64 = redis::cmd("EXISTS").arg(key).query(&mut conn).unwrap();
    assert_eq!(exists, 0, "the hash expired");
    // The setting the run turned on is off again.
    assert_eq!(config(&mut conn, "notify-keyspace-events"), "");

    let stalls = read_csv(&out.path().join("stalls.csv"));
    let longest = stalls
        .iter()
        .max_by(|a, b| {
            let ms = |r: &std::collections::HashMap<String, String>| {
                r["duration_ms"].parse::<f64>().unwrap()
            };
            ms(a).total_cmp(&ms(b))
        })
        .expect("the expiry stalled the probes");
    let duration_ms: f64 = longest["duration_ms"].parse().unwrap();
    assert!(duration_ms >= 5.0, "a 200k-field hash's free: {longest:?}");
    assert!(
        longest["server_event"].contains("expire"),
        "named by the expiry's LATENCY events: {longest:?}"
    );
    assert_eq!(
        longest["server_key"],
        format!("expired {key}"),
        "{longest:?}"
    );
    assert!(
        longest["server_command"].is_empty(),
        "no client's command: {longest:?}"
    );
    // And the terminal says so in words.
    let line = stdout
        .lines()
        .chain(stderr.lines())
        .find(|l| l.contains("active expiry"))
        .unwrap_or_else(|| panic!("no 'active expiry' line:\n{stdout}\n{stderr}"));
    assert!(line.contains(&format!("expired {key}")), "{line}");
}
