//! `probe keys --replay`: the worst keys' shapes rebuilt on a server the tool starts, their DEL,
//! UNLINK, expiry and read measured there beside their predictions, and the user's server only
//! read (its keys, values, DBSIZE and write commands the same after). Bad input is one line.

mod common;

use std::collections::HashMap;
use std::path::Path;

use common::TestServer;

/// The binary the replay starts (Debian's 7.0).
const SERVER_BIN: &str = "/usr/bin/redis-server";

/// Lua that adds fields ARGV[1]..ARGV[2] of 16 bytes (and values of 16) to the hash KEYS[1]:
/// the test's own build, server-side, so that 200k fields take a moment.
const BUILD_HASH: &str = r#"
for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do
  redis.call('HSET', KEYS[1], string.format('%016x', i), string.format('%016d', i))
end
return 1"#;

/// The calls of each write command the test watches, from INFO commandstats, and the server's
/// count of changes to its data (`rdb_changes_since_last_save`, which every write that changes
/// something moves). DEL is not watched by its calls: the probes' session deletes its own GET
/// key at the end whether or not it was made, and a DEL of a key that is not there changes
/// nothing (the count of changes shows it).
fn write_calls(conn: &mut redis::Connection) -> HashMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .expect("INFO");
    let watched = [
        "set", "hset", "unlink", "expire", "pexpire", "rename", "flushdb", "flushall", "restore",
        "hdel", "getdel", "sadd", "zadd", "rpush", "xadd",
    ];
    let mut calls = HashMap::new();
    for line in info.lines() {
        let Some((name, rest)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        if !watched.contains(&name) {
            continue;
        }
        let n = rest
            .split(',')
            .find_map(|f| f.strip_prefix("calls="))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        calls.insert(name.to_string(), n);
    }
    let persistence: String = redis::cmd("INFO")
        .arg("persistence")
        .query(conn)
        .expect("INFO");
    let changes = persistence
        .lines()
        .find_map(|l| l.strip_prefix("rdb_changes_since_last_save:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("rdb_changes_since_last_save");
    calls.insert("rdb_changes_since_last_save".into(), changes);
    calls
}

/// What the test checks is the same after the replay.
#[derive(Debug, PartialEq)]
struct Untouched {
    keys: Vec<String>,
    dbsize: u64,
    hash_fields: u64,
    some_fields: Vec<Option<String>>,
    /// The string's length and a checksum of its bytes (the bytes would flood a failure).
    string: (usize, u64),
    ttls: Vec<i64>,
    writes: HashMap<String, u64>,
}

fn untouched(server: &TestServer) -> Untouched {
    let mut conn = server.conn();
    let mut keys = server.keys("*");
    keys.sort();
    let ttls = keys
        .iter()
        .map(|k| redis::cmd("PTTL").arg(k).query(&mut conn).expect("PTTL"))
        .collect();
    Untouched {
        dbsize: redis::cmd("DBSIZE").query(&mut conn).expect("DBSIZE"),
        hash_fields: redis::cmd("HLEN")
            .arg("big:hash")
            .query(&mut conn)
            .expect("HLEN"),
        some_fields: [0u64, 77_777, 199_999]
            .iter()
            .map(|i| {
                redis::cmd("HGET")
                    .arg("big:hash")
                    .arg(format!("{i:016x}"))
                    .query(&mut conn)
                    .expect("HGET")
            })
            .collect(),
        string: {
            let bytes: Vec<u8> = redis::cmd("GET")
                .arg("big:string")
                .query(&mut conn)
                .expect("GET");
            let sum = bytes.iter().enumerate().fold(0u64, |acc, (i, &b)| {
                acc.wrapping_mul(31).wrapping_add(u64::from(b) ^ i as u64)
            });
            (bytes.len(), sum)
        },
        ttls,
        writes: write_calls(&mut conn),
        keys,
    }
}

#[test]
fn the_worst_keys_are_replayed_and_the_user_s_server_is_only_read() {
    if !Path::new(SERVER_BIN).is_file() {
        panic!("{SERVER_BIN} is needed (Debian's redis-server)");
    }
    let server = TestServer::start(&[]);
    let mut conn = server.conn();
    let mut first = 0u64;
    while first < 200_000 {
        let last = first + 9_999;
        let _: i64 = redis::cmd("EVAL")
            .arg(BUILD_HASH)
            .arg(1)
            .arg("big:hash")
            .arg(first)
            .arg(last)
            .query(&mut conn)
            .expect("build the hash");
        first = last + 1;
    }
    let value: Vec<u8> = (0..1u32 << 20).map(|i| (i * 7 % 251) as u8).collect();
    let _: () = redis::cmd("SET")
        .arg("big:string")
        .arg(&value)
        .query(&mut conn)
        .expect("SET");
    for i in 0..50 {
        let _: () = redis::cmd("SET")
            .arg(format!("small:{i}"))
            .arg("x")
            .query(&mut conn)
            .expect("SET small");
    }
    let before = untouched(&server);
    assert_eq!(before.dbsize, 52);
    assert_eq!(before.hash_fields, 200_000);

    let out = tempfile::tempdir().expect("tempdir");
    let dir = out.path().join("scan");
    let url = server.url();
    let (status, stdout, stderr) = common::probe_keys(&[
        "--url",
        &url,
        "--size-floor",
        "0",
        "--replay",
        "2",
        "--server-bin",
        SERVER_BIN,
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(status, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let after = untouched(&server);
    assert_eq!(before.keys, after.keys, "the scanned server's keys changed");
    assert_eq!(before.dbsize, after.dbsize);
    assert_eq!(
        (
            before.hash_fields,
            &before.some_fields,
            before.string,
            &before.ttls
        ),
        (
            after.hash_fields,
            &after.some_fields,
            after.string,
            &after.ttls
        ),
        "the scanned server's values changed"
    );
    assert_eq!(
        before.writes, after.writes,
        "write commands ran on the scanned server"
    );

    // The screen: the replay's table, with both keys.
    let table: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("replay on "))
        .collect();
    assert!(
        table
            .first()
            .is_some_and(|l| l.contains("redis 7.0") && l.contains("never its contents")),
        "{stdout}"
    );
    for key in ["big:hash", "big:string"] {
        assert!(
            table
                .iter()
                .any(|l| l.starts_with(&format!("\"{key}\"")) && l.contains(" / ")),
            "{key} not in the replay table:\n{stdout}"
        );
    }

    // replay.csv: the hash's DEL froze the replay server longer than the string's.
    let rows = common::read_csv(&dir.join("replay.csv"));
    assert_eq!(rows.len(), 2, "{rows:?}");
    let row = |key: &str| {
        rows.iter()
            .find(|r| r["key"] == key)
            .unwrap_or_else(|| panic!("no row of {key}: {rows:?}"))
    };
    let (hash, string) = (row("big:hash"), row("big:string"));
    assert_eq!(hash["error"], "", "{hash:?}");
    assert_eq!(string["error"], "", "{string:?}");
    assert_eq!(hash["built_elements"], "200000");
    assert_eq!(hash["built_encoding"], "hashtable");
    // Its fields and values are 16 bytes: the size read off the calibration is about that.
    let bytes: u64 = hash["built_element_bytes"].parse().expect("a size");
    assert!((12..=20).contains(&bytes), "{hash:?}");
    assert_eq!(string["built_element_bytes"], (1u64 << 20).to_string());
    let measured = |r: &HashMap<String, String>, op: &str| -> f64 {
        let cell = &r[&format!("{op}_measured_ms")];
        if cell.is_empty() {
            // No probe overlapped it: under one probe interval.
            assert!(
                r["under_one_interval"].split(';').any(|o| o == op),
                "{op}: {r:?}"
            );
            0.0
        } else {
            cell.parse().expect("a figure")
        }
    };
    let hash_del = measured(hash, "delete");
    let string_del = measured(string, "delete");
    assert!(
        hash_del > string_del,
        "hash DEL {hash_del} ms, string DEL {string_del} ms"
    );
    assert!(!hash["delete_measured_ms"].is_empty(), "{hash:?}");
    // The hash's eviction froze the replay server too (Redis 7.0: freed on the main thread, the
    // same work as its DEL; a 300k-field hash's took 68-87 ms in data/heldout/redis-7.0).
    assert!(
        !hash["evict_measured_ms"].is_empty() && measured(hash, "evict") >= 10.0,
        "{hash:?}"
    );
    for op in ["unlink", "expire", "evict", "read"] {
        measured(hash, op);
        measured(string, op);
    }
    // Predicted beside measured: the scan's own prediction of each.
    assert!(!hash["delete_predicted_ms"].is_empty(), "{hash:?}");
    // Each key's run is kept beside the scan's files, and run.json has the rows too.
    assert!(dir.join("replay-1").join("summary.csv").is_file());
    let doc = common::read_json(&dir.join("run.json"));
    assert_eq!(doc["replay"].as_array().map(Vec::len), Some(2), "{doc}");
    // `running` while the replay was under way (a kill -9 then leaves it so), `complete` after.
    assert_eq!(doc["status"], "complete", "{doc}");
    assert!(doc["status_reason"].is_null(), "{doc}");
}

#[test]
fn bad_replay_input_is_one_line_naming_the_flag() {
    let url = "redis://127.0.0.1:1";
    for (args, flag) in [
        (
            vec!["--url", url, "--replay", "0", "--server-bin", SERVER_BIN],
            "--replay",
        ),
        (
            vec!["--url", url, "--replay", "-3", "--server-bin", SERVER_BIN],
            "--replay",
        ),
        (
            vec!["--url", url, "--replay", "many", "--server-bin", SERVER_BIN],
            "--replay",
        ),
        (vec!["--url", url, "--replay", "2"], "--server-bin"),
        (
            vec![
                "--url",
                url,
                "--replay",
                "2",
                "--server-bin",
                "/nonexistent/redis-server",
            ],
            "--server-bin",
        ),
        (
            vec!["--replay", "2", "--refit", "--server-bin", SERVER_BIN],
            "--replay",
        ),
        // Without --url there is nothing to scan.
        (vec!["--replay", "2", "--server-bin", SERVER_BIN], "--url"),
    ] {
        let (status, stdout, stderr) = common::probe_keys(&args);
        assert_eq!(status, 2, "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
        assert!(stderr.contains(flag), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
    }
}

/// Ctrl-C during `--replay`: the keys replayed so far are kept in valid files (replay.csv and
/// run.json agree; the key cut short says it was), the exit is 130, the server the replay
/// started is stopped and its directory removed, and the scanned server is only read.
#[test]
fn ctrl_c_during_a_replay_keeps_the_keys_replayed_so_far() {
    let server = TestServer::start(&[]);
    let mut conn = server.conn();
    for (key, fields) in [("big:hash", 300_000u64), ("other:hash", 200_000)] {
        let mut first = 0u64;
        while first < fields {
            let last = (first + 9_999).min(fields - 1);
            let _: i64 = redis::cmd("EVAL")
                .arg(BUILD_HASH)
                .arg(1)
                .arg(key)
                .arg(first)
                .arg(last)
                .query(&mut conn)
                .expect("build the hash");
            first = last + 1;
        }
    }
    let dbsize: u64 = redis::cmd("DBSIZE").query(&mut conn).expect("DBSIZE");
    let writes = write_calls(&mut conn);

    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("scan");
    let servers = tmp.path().join("servers");
    std::fs::create_dir(&servers).expect("mkdir");
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("probe"))
        .args(["keys", "--url", &server.url(), "--size-floor", "0"])
        .args(["--replay", "2", "--server-bin", SERVER_BIN, "--out"])
        .arg(&dir)
        .env("TMPDIR", &servers)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn probe keys");
    // Interrupted once the first key's run is under way.
    let started = std::time::Instant::now();
    while !dir.join("replay-1").is_dir() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "the replay never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGINT);
    }
    let stderr = {
        use std::io::Read;
        let mut text = String::new();
        child
            .stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut text)
            .expect("read stderr");
        text
    };
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("interrupted; the keys scanned, and those replayed so far, were kept"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");

    let doc = common::read_json(&dir.join("run.json"));
    // The scan was whole, the replay not: run.json says interrupted (it read complete).
    assert_eq!(doc["status"], "interrupted", "{doc}");
    assert!(
        doc["status_reason"]
            .as_str()
            .is_some_and(|r| r.contains("--replay")),
        "{doc}"
    );
    let replayed = doc["replay"].as_array().expect("replay rows in run.json");
    let rows = common::read_csv(&dir.join("replay.csv"));
    assert!(!rows.is_empty() && rows.len() <= 2, "{rows:?}");
    assert_eq!(rows.len(), replayed.len(), "{rows:?}");
    // The worst key first; the one cut short is the last row, and says so (on a fast host
    // the first may have finished before the Ctrl-C).
    assert_eq!(rows[0]["key"], "big:hash", "{rows:?}");
    let last = rows.last().expect("a row");
    assert!(
        !last["error"].is_empty(),
        "the cut-short key says so: {rows:?}"
    );
    if rows.len() == 2 {
        assert_eq!(rows[0]["error"], "", "{rows:?}");
    }
    // The key's own run, where it had begun writing one, says it was cut short.
    let cut = dir.join(format!("replay-{}", rows.len())).join("run.json");
    if cut.is_file() {
        let cut = common::read_json(&cut);
        assert_eq!(cut["status"], "interrupted", "{cut}");
    }

    // The replay's server is gone, with its directory.
    let left: Vec<_> = std::fs::read_dir(&servers)
        .expect("read dir")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "left: {left:?}");
    // The scanned server: nothing written.
    assert_eq!(
        redis::cmd("DBSIZE")
            .query::<u64>(&mut conn)
            .expect("DBSIZE"),
        dbsize
    );
    assert_eq!(write_calls(&mut conn), writes);
}

/// A replay whose server does not start (an argument the server refuses) fails the run in
/// run.json as in the exit status: it read `complete` with exit 1 (hostile review, F6). The
/// scan's own figures are kept.
#[test]
fn a_replay_that_fails_fails_the_run_in_run_json() {
    let server = TestServer::start(&[]);
    let mut conn = server.conn();
    let _: i64 = redis::cmd("EVAL")
        .arg(BUILD_HASH)
        .arg(1)
        .arg("big:hash")
        .arg(0)
        .arg(19_999)
        .query(&mut conn)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let url = server.url();
    let out_arg = out.to_string_lossy().to_string();
    let (status, _stdout, stderr) = common::probe_keys(&[
        "--url",
        &url,
        "--replay",
        "1",
        "--server-bin",
        SERVER_BIN,
        "--server-arg",
        "no-such-directive yes",
        "--out",
        &out_arg,
    ]);
    assert_eq!(status, 1, "{stderr}");
    assert!(stderr.contains("--replay: "), "{stderr}");
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("run.json")).unwrap()).unwrap();
    assert_eq!(doc["status"], "failed", "{doc}");
    let reason = doc["status_reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("--replay failed (") && reason.contains("the scan is whole"),
        "{reason}"
    );
    assert_eq!(doc["keys_scanned"], 1, "{doc}");
    assert!(out.join("keys.csv").is_file());
}
