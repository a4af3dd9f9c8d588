//! The main job end to end, against real redis-server processes.

mod common;

use std::time::Duration;

use common::{
    TestServer, csv_header, probe_cmd, probe_writes, read_csv, read_json, refused_before_starting,
};
use predicates::prelude::*;

#[test]
fn embedded_server_run_writes_every_export() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let assert = probe_cmd()
        .args([
            "--writer-sizes",
            "1M,4M",
            "--gap",
            "150ms",
            "--probe-rate",
            "2000",
        ])
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    let stdout = String::from_utf8_lossy(&assert.get_output().stdout).to_string();
    let stderr = String::from_utf8_lossy(&assert.get_output().stderr).to_string();
    assert!(stderr.contains("started redis"), "{stderr}");
    // The text report by default: a header, then a row per write led by its wall-clock time.
    let header = stdout.lines().next().unwrap_or_default();
    assert!(
        header.starts_with("time (UTC)") && header.contains("others blocked"),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("  set          1M  ") && l.as_bytes()[2] == b':'),
        "{stdout}"
    );
    assert!(stdout.contains("\nbaseline: p50 "), "{stdout}");

    // Column contract.
    assert_eq!(
        csv_header(&out.join("probes.csv"))[..9],
        [
            "thread",
            "seq",
            "cmd",
            "intended_us",
            "sent_us",
            "reply_us",
            "latency_us",
            "ok",
            "error"
        ]
    );
    assert_eq!(
        csv_header(&out.join("writes.csv"))[..12],
        [
            "seq",
            "op",
            "size_bytes",
            "start_us",
            "sent_us",
            "reply_us",
            "set_ms",
            "ok",
            "error",
            "host_mem_pct",
            "host_swap_pct",
            "server_rss_bytes"
        ]
    );
    assert_eq!(
        csv_header(&out.join("stalls.csv"))[..5],
        [
            "start_us",
            "end_us",
            "duration_ms",
            "probes_delayed",
            "write_seq"
        ]
    );
    assert_eq!(
        csv_header(&out.join("summary.csv"))[..11],
        [
            "seq",
            "op",
            "size_bytes",
            "set_ms",
            "hol_delay_ms",
            "stall_ms",
            "probes_delayed",
            "stall_during_send_ms",
            "stall_after_send_ms",
            "host_mem_pct",
            "host_swap_pct"
        ]
    );

    let writes = read_csv(&out.join("writes.csv"));
    let ops: Vec<&str> = writes.iter().map(|w| w["op"].as_str()).collect();
    assert_eq!(ops, ["set", "delete", "set", "delete"]);
    assert_eq!(writes[2]["size_bytes"], (4u64 << 20).to_string());
    for w in &writes {
        assert_eq!(w["ok"], "true");
        let start: u64 = w["start_us"].parse().unwrap();
        let sent: u64 = w["sent_us"].parse().unwrap();
        let reply: u64 = w["reply_us"].parse().unwrap();
        assert!(start <= sent && sent <= reply, "{w:?}");
        assert!(w["server_rss_bytes"].parse::<u64>().unwrap() > 0);
    }
    let summary = read_csv(&out.join("summary.csv"));
    assert_eq!(summary.len(), 4);
    let probes = read_csv(&out.join("probes.csv"));
    // Two threads at 2000/s for at least 5 gaps of 150 ms.
    assert!(probes.len() > 2000, "{} probes", probes.len());
    let lat_ok = probes.iter().filter(|p| p["ok"] == "true").all(|p| {
        p["latency_us"].parse::<u64>().unwrap()
            == p["reply_us"].parse::<u64>().unwrap() - p["intended_us"].parse::<u64>().unwrap()
    });
    assert!(lat_ok, "latency_us must be reply_us - intended_us");

    let run = read_json(&out.join("run.json"));
    assert_eq!(run["status"], "complete");
    assert_eq!(run["server"]["embedded"], true);
    assert!(run["server"]["version"].as_str().unwrap().contains('.'));
    assert!(run["started_unix_us"].as_u64().unwrap() > 1_600_000_000_000_000);
    assert_eq!(run["options"]["probe_threads"], 2);
    assert_eq!(run["summary"].as_array().unwrap().len(), 4);
    assert!(run["baseline"]["p50_us"].as_u64().unwrap() > 0);
    assert!(run["host"]["cpus"].as_u64().unwrap() >= 1);
}

#[test]
fn external_server_keeps_its_own_keys_and_loses_the_tools() {
    let server = TestServer::start(&[]);
    let mut conn = server.conn();
    redis::cmd("SET")
        .arg("user:1")
        .arg("precious")
        .query::<()>(&mut conn)
        .unwrap();
    let assert = probe_cmd()
        .args([
            "--url",
            &server.url(),
            "--writer-sizes",
            "2M",
            "--repeat",
            "2",
            "--gap",
            "100ms",
        ])
        .args(["--overwrite", "--probe-cmd", "get"])
        .assert()
        .success();
    let stderr = String::from_utf8_lossy(&assert.get_output().stderr).to_string();
    assert!(stderr.contains("deleting a large key stalls"), "{stderr}");
    let stdout = String::from_utf8_lossy(&assert.get_output().stdout).to_string();
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.get(14..24) == Some("overwrite "))
            .count(),
        2,
        "{stdout}"
    );
    let value: String = redis::cmd("GET").arg("user:1").query(&mut conn).unwrap();
    assert_eq!(value, "precious");
    assert!(
        server.keys("holprobe:*").is_empty(),
        "tool keys left: {:?}",
        server.keys("*")
    );
    assert_eq!(server.keys("*"), ["user:1"]);
}

#[test]
fn keep_holds_every_value_then_measures_each_deletion() {
    let server = TestServer::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    probe_writes(&server.url(), "1M,2M")
        .arg("--keep")
        .arg("--out")
        .arg(dir.path())
        .assert()
        .success();
    let ops: Vec<String> = read_csv(&dir.path().join("writes.csv"))
        .into_iter()
        .map(|w| w["op"].clone())
        .collect();
    assert_eq!(ops, ["set", "set", "delete", "delete"]);
    assert!(server.keys("holprobe:*").is_empty());
}

#[test]
fn observe_mode_measures_an_injected_debug_sleep() {
    let server = TestServer::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let sleeper = server.command_after::<()>(
        Duration::from_millis(1200),
        redis::cmd("DEBUG").arg("SLEEP").arg("0.2"),
    );
    let assert = probe_cmd()
        .args(["--url", &server.url(), "--duration", "2500ms"])
        .arg("--out")
        .arg(dir.path())
        .assert()
        .success();
    sleeper.join().unwrap().unwrap();
    let stdout = String::from_utf8_lossy(&assert.get_output().stdout).to_string();
    let stalls = read_csv(&dir.path().join("stalls.csv"));
    let mut durations: Vec<f64> = stalls
        .iter()
        .map(|s| s["duration_ms"].parse::<f64>().unwrap())
        .collect();
    durations.sort_by(|a, b| b.total_cmp(a));
    // One stall of 200 ms, the longest by far; a loaded 2-core machine may add stalls of its
    // own (tens of ms at worst) and stretch the measured one by a few ms.
    assert!(!durations.is_empty(), "no stall measured\n{stdout}");
    assert!(
        (195.0..=230.0).contains(&durations[0]),
        "measured {} ms for a 200 ms DEBUG SLEEP: {stalls:?}",
        durations[0]
    );
    assert!(
        durations.get(1).is_none_or(|&second| second < 150.0),
        "a second long stall: {stalls:?}"
    );
    // Named from the server's slow log (the server logs commands over 10 ms by default), in
    // the file and on the terminal.
    assert!(
        stalls
            .iter()
            .any(|s| s["server_command"] == "DEBUG SLEEP 0.2"),
        "{stalls:?}"
    );
    assert!(
        stdout.contains("ms  DEBUG SLEEP 0.2 (127.0.0.1:"),
        "{stdout}"
    );
    // The longest stalls are listed (5 by default), not every one.
    let listed = stdout
        .lines()
        .filter(|l| l.starts_with("  ") && l.get(4..5) == Some(":") && l.contains("ms  "))
        .count();
    assert!(
        (1..=5).contains(&listed),
        "{listed} stalls listed of {}:\n{stdout}",
        stalls.len()
    );
    let run = read_json(&dir.path().join("run.json"));
    assert_eq!(run["status"], "complete");
    assert!(run["options"]["writer"].is_null());
}

#[test]
fn bad_sizes_and_rates_are_refused_before_anything_starts() {
    for (args, needle) in [
        (
            vec!["--writer-sizes", "64X"],
            "invalid value '64X' for --writer-sizes",
        ),
        (vec!["--writer-sizes", "-1M"], "--writer-sizes"),
        (vec!["--writer-sizes", "0"], "--writer-sizes"),
        (vec!["--writer-sizes", "1.5.2M"], "--writer-sizes"),
        (vec!["--writer-sizes", ""], "--writer-sizes"),
        (
            vec!["--writer-sizes", "1M", "--probe-rate", "0"],
            "invalid value '0' for --probe-rate",
        ),
        (
            vec!["--writer-sizes", "1M", "--probe-rate", "-3"],
            "--probe-rate",
        ),
        (
            vec!["--writer-sizes", "1M", "--probe-rate", "1000000000"],
            "sends at most",
        ),
        (vec!["--writer-sizes", "1M", "--gap", "later"], "--gap"),
        (vec!["--writer-sizes", "1M", "--url", "http://x:1"], "--url"),
    ] {
        refused_before_starting(&args, needle);
    }
}

#[test]
fn a_size_over_the_servers_bulk_limit_is_refused_with_the_way_to_raise_it() {
    let server = TestServer::start(&["proto-max-bulk-len 1mb"]);
    probe_cmd()
        .args(["--url", &server.url(), "--writer-sizes", "2M"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("proto-max-bulk-len"));
    assert!(server.keys("*").is_empty());
}

/// `--probes delayed` keeps in probes.csv only the probes that waited past the threshold (the
/// ones an injected 100 ms stall held), `--probes none` none; every figure still counts them all.
#[test]
fn probes_csv_can_keep_only_the_delayed_probes_or_none() {
    let server = TestServer::start(&[]);
    for mode in ["delayed", "none"] {
        let dir = tempfile::tempdir().unwrap();
        let sleeper = server.command_after::<()>(
            Duration::from_millis(700),
            redis::cmd("DEBUG").arg("SLEEP").arg("0.1"),
        );
        probe_cmd()
            .args([
                "--url",
                &server.url(),
                "--duration",
                "1500ms",
                "--probes",
                mode,
            ])
            .arg("--out")
            .arg(dir.path())
            .assert()
            .success();
        sleeper.join().unwrap().unwrap();
        let rows = read_csv(&dir.path().join("probes.csv"));
        let run = read_json(&dir.path().join("run.json"));
        assert_eq!(run["options"]["probes"], mode);
        // The figures come from every probe: about 3000 of them in the baseline.
        assert!(
            run["baseline"]["probes"].as_u64().unwrap() > 1000,
            "{}",
            run["baseline"]
        );
        assert!(
            !read_csv(&dir.path().join("stalls.csv")).is_empty(),
            "the 100 ms stall is in stalls.csv"
        );
        match mode {
            "delayed" => {
                // The stall held about 2 x 100 probes; nothing on time is kept. How many others
                // a loaded machine delays past 1 ms varies (a CI run with the other tests beside
                // it: 1075 of about 3000), so the bound is that on-time probes were left out.
                let recorded = run["probes_recorded"].as_u64().unwrap() as usize;
                assert!(rows.len() >= 100, "{} rows", rows.len());
                assert!(
                    rows.len() < recorded,
                    "{} rows of {recorded} probes",
                    rows.len()
                );
                assert!(
                    rows.iter()
                        .all(|p| p["ok"] == "false"
                            || p["latency_us"].parse::<u64>().unwrap() > 1000)
                );
            }
            _ => assert!(rows.is_empty(), "{} rows", rows.len()),
        }
        assert_eq!(
            csv_header(&dir.path().join("probes.csv"))[..3],
            ["thread", "seq", "cmd"]
        );
    }
}

/// The "one screen": a sweep of four sizes fits in about 30 lines (stdout and
/// stderr together), and no line of the report is wider than 100 columns.
#[test]
fn a_four_size_sweep_fits_on_one_screen() {
    let assert = probe_cmd()
        .args(["--writer-sizes", "1M,4M,16M,64M"])
        .assert()
        .success();
    let stdout = String::from_utf8_lossy(&assert.get_output().stdout).to_string();
    let stderr = String::from_utf8_lossy(&assert.get_output().stderr).to_string();
    let all = format!("{stdout}{stderr}");
    let lines = all.lines().count();
    assert!(lines <= 32, "{lines} lines:\n{all}");
    for line in stdout.lines() {
        assert!(
            line.chars().count() <= 100,
            "{} columns: {line}",
            line.len()
        );
    }
    // A header and 8 write rows (a set and a delete per size), in write order.
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|l| l.get(2..3) == Some(":") && l.get(8..9) == Some("."))
        .collect();
    assert_eq!(rows.len(), 8, "{stdout}");
    assert!(rows[6].contains("  set         64M  "), "{stdout}");
    assert!(stdout.contains("stalls over 1ms: "), "{stdout}");
}

/// `--format json`: stdout is one document, run.json's very findings, with every write.
#[test]
fn format_json_prints_run_json_on_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let assert = probe_cmd()
        .args([
            "--writer-sizes",
            "1M,2M",
            "--gap",
            "100ms",
            "--format",
            "json",
        ])
        .arg("--out")
        .arg(dir.path())
        .assert()
        .success();
    let stdout = String::from_utf8_lossy(&assert.get_output().stdout).to_string();
    let stderr = String::from_utf8_lossy(&assert.get_output().stderr).to_string();
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON document");
    let writes = read_csv(&dir.path().join("writes.csv"));
    assert_eq!(writes.len(), 4);
    let summary = doc["summary"].as_array().unwrap();
    assert_eq!(summary.len(), writes.len(), "{stdout}");
    assert_eq!(doc["status"], "complete");
    assert!(doc["baseline"]["probes"].as_u64().unwrap() > 0);
    // The same document as run.json.
    assert_eq!(doc, read_json(&dir.path().join("run.json")));
    // Notes stay on stderr.
    assert!(stderr.contains("started redis"), "{stderr}");
}

/// `--format markdown`: the per-write table and the footer as a table.
#[test]
fn format_markdown_prints_the_tables() {
    let assert = probe_cmd()
        .args([
            "--writer-sizes",
            "1M",
            "--gap",
            "100ms",
            "--format",
            "markdown",
        ])
        .assert()
        .success();
    let stdout = String::from_utf8_lossy(&assert.get_output().stdout).to_string();
    assert!(
        stdout.contains("| time (UTC) | write | op | size | others blocked (ms) | own time (ms) |"),
        "{stdout}"
    );
    assert!(stdout.contains("| ---"), "{stdout}");
    assert!(stdout.contains("| 1 | set | 1M | "), "{stdout}");
    assert!(stdout.contains("| baseline | p50 "), "{stdout}");
    assert!(
        !stdout.contains("time (UTC)    op"),
        "no text rows: {stdout}"
    );
}
