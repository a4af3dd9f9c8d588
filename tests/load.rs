//! Load mode end to end (populate, load, clean), against real redis-server processes.

mod common;

use std::collections::HashMap;
use std::path::Path;

use common::{TestServer, probe_cmd, read_csv, read_json};

/// The value after `label` on the first stdout line starting with it (`Total requests: 123`).
fn field<'a>(text: &'a str, label: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(label))
        .unwrap_or_else(|| panic!("no line starting with {label:?} in:\n{text}"))
        .trim()
}

fn number(text: &str) -> f64 {
    text.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not a number: {text:?}"))
}

fn stdout_of(assert: &assert_cmd::assert::Assert) -> String {
    String::from_utf8_lossy(&assert.get_output().stdout).to_string()
}

fn stderr_of(assert: &assert_cmd::assert::Assert) -> String {
    String::from_utf8_lossy(&assert.get_output().stderr).to_string()
}

fn populate(server: &TestServer, args: &[&str]) -> String {
    let assert = probe_cmd()
        .args(["populate", "--url", &server.url()])
        .args(args)
        .assert()
        .success();
    stdout_of(&assert)
}

fn dbsize(server: &TestServer) -> u64 {
    redis::cmd("DBSIZE").query(&mut server.conn()).unwrap()
}

fn strlen(server: &TestServer, key: &str) -> u64 {
    redis::cmd("STRLEN")
        .arg(key)
        .query(&mut server.conn())
        .unwrap()
}

/// Rows of the timeline for one `server` value.
fn rows_of<'a>(
    rows: &'a [HashMap<String, String>],
    server: &str,
) -> Vec<&'a HashMap<String, String>> {
    rows.iter().filter(|r| r["server"] == server).collect()
}

fn sum(rows: &[&HashMap<String, String>], column: &str) -> u64 {
    rows.iter().map(|r| r[column].parse::<u64>().unwrap()).sum()
}

/// The data rows of an .hgrm file: (value, percentile, total count).
fn hgrm_rows(path: &Path) -> Vec<(f64, f64, u64)> {
    holprobe::load::hgrm::data_rows(&std::fs::read_to_string(path).unwrap()).expect("hgrm rows")
}

#[test]
fn populate_then_load_block_and_timeline_agree() {
    let server = TestServer::start(&[]);
    let stdout = populate(&server, &["--keys", "3000"]);
    assert!(
        stdout.contains("3000 written, 0 kept, 0 errors"),
        "{stdout}"
    );
    assert_eq!(dbsize(&server), 3001, "3000 keys and the description");
    let size = strlen(&server, "holprobe:load:42");
    assert!((1024..=4096).contains(&size), "{size}");

    // Again: existing keys are kept...
    let stdout = populate(&server, &["--keys", "3000", "--value-size", "100"]);
    assert!(stdout.contains("0 written, 3000 kept"), "{stdout}");
    assert_eq!(strlen(&server, "holprobe:load:42"), size);
    // ...unless --overwrite.
    populate(
        &server,
        &["--keys", "3000", "--value-size", "100", "--overwrite"],
    );
    assert_eq!(strlen(&server, "holprobe:load:42"), 100);
    populate(
        &server,
        &[
            "--keys",
            "3000",
            "--value-size",
            "1024..4096",
            "--overwrite",
        ],
    );

    let dir = tempfile::tempdir().unwrap();
    let assert = probe_cmd()
        .args(["load", "--url", &server.url()])
        .args(["--clients", "6", "--duration", "2s"])
        .arg("--out")
        .arg(dir.path())
        .assert()
        .success();
    let stdout = stdout_of(&assert);
    // The seed's block, line for line.
    let block: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("Concurrent clients"))
        .take(7)
        .collect();
    let labels = [
        "Concurrent clients: ",
        "Runtime: ",
        "Total requests: ",
        "Requests per second: ",
        "Bytes transferred: ",
        "Bytes per second: ",
        "Roundtrip latencies: 50th: ",
    ];
    for (line, label) in block.iter().zip(labels) {
        assert!(line.starts_with(label), "{line:?} should start {label:?}");
    }
    assert_eq!(field(&stdout, "Concurrent clients: "), "6");
    assert_eq!(field(&stdout, "Runtime: "), "2 s");
    assert_eq!(field(&stdout, "Errors: "), "0");
    assert_eq!(field(&stdout, "Timeouts: "), "0");
    let total: u64 = field(&stdout, "Total requests: ").parse().unwrap();
    assert!(total > 1000, "{total}");
    let rps = number(field(&stdout, "Requests per second: "));
    assert!((rps - total as f64 / 2.0).abs() < 0.01, "{rps} vs {total}");
    let mb = number(field(&stdout, "Bytes transferred: "));
    // GETs of 1024..4096-byte values: the bytes are value bytes, in MiB.
    let per_request = mb * 1_048_576.0 / total as f64;
    assert!((1024.0..=4096.0).contains(&per_request), "{per_request}");
    assert!(stdout.contains("99.9: "), "{stdout}");
    assert!(stdout.contains("generator: 1 thread"), "{stdout}");

    // The timeline agrees with the block.
    let rows = read_csv(&dir.path().join("load_timeline.csv"));
    let all = rows_of(&rows, "all");
    assert_eq!(all.len(), 2, "{rows:?}");
    assert_eq!(all.len(), rows.len(), "one server: only 'all' rows");
    assert_eq!(sum(&all, "requests"), total);
    let bytes = sum(&all, "bytes") as f64 / 1_048_576.0;
    assert_eq!(format!("{bytes:.2}"), format!("{mb:.2}"));
    assert_eq!(sum(&all, "errors"), 0);
    for (i, row) in all.iter().enumerate() {
        assert_eq!(row["second"], i.to_string());
        let p50: u64 = row["p50_us"].parse().unwrap();
        let p99: u64 = row["p99_us"].parse().unwrap();
        let max: u64 = row["max_us"].parse().unwrap();
        assert!(0 < p50 && p50 <= p99 && p99 <= max, "{row:?}");
        assert_eq!(row["writes"], "");
    }

    // The histogram file: every request, percentiles rising to 1.
    let hgrm = hgrm_rows(&dir.path().join("load_latency.hgrm"));
    let last = hgrm.last().unwrap();
    assert_eq!((last.1, last.2), (1.0, total));
    let p50_text = field(&stdout, "Roundtrip latencies: 50th: ");
    let p50_ms = number(&p50_text[..p50_text.find("us").unwrap()]) / 1000.0;
    let hgrm_p50 = hgrm.iter().find(|r| r.1 >= 0.5).unwrap().0;
    assert!(
        (hgrm_p50 - p50_ms).abs() <= p50_ms * 0.01 + 0.002,
        "{hgrm_p50} vs {p50_ms}"
    );

    let run = read_json(&dir.path().join("run.json"));
    assert_eq!(run["mode"], "load");
    assert_eq!(run["status"], "complete");
    assert_eq!(run["blocks"][0]["total_requests"], total);
    assert_eq!(run["options"]["clients"], 6);
    assert_eq!(run["keys_used"][0], 3000);
    assert_eq!(run["populations"][0]["keys"], 3000);
    assert!(run["generator"]["busiest_thread_cpu_pct"].as_f64().unwrap() > 0.0);
    // The load data stays for the next run; nothing else was added.
    assert_eq!(dbsize(&server), 3001);
}

#[test]
fn two_servers_at_once() {
    let a = TestServer::start(&[]);
    let b = TestServer::start(&[]);
    populate(&a, &["--keys", "2000"]);
    populate(&b, &["--keys", "1000", "--value-size", "2048"]);
    let dir = tempfile::tempdir().unwrap();
    let assert = probe_cmd()
        .args(["load", "--url", &a.url(), "--url", &b.url()])
        .args(["--clients", "4", "--duration", "2s", "--ratio", "1:9"])
        .arg("--out")
        .arg(dir.path())
        .assert()
        .success();
    let stdout = stdout_of(&assert);
    let label_a = format!("127.0.0.1:{}", a.port());
    let label_b = format!("127.0.0.1:{}", b.port());
    assert!(
        stdout.contains(&format!("Server: {label_a}\nConcurrent clients: 2")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("Server: {label_b}\nConcurrent clients: 2")),
        "{stdout}"
    );
    assert!(
        stdout.contains("All 2 servers\nConcurrent clients: 4"),
        "{stdout}"
    );
    let totals: Vec<u64> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("Total requests: "))
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(totals.len(), 3);
    assert!(totals[0] > 0 && totals[1] > 0, "{totals:?}");
    assert_eq!(totals[0] + totals[1], totals[2]);

    let rows = read_csv(&dir.path().join("load_timeline.csv"));
    let all = rows_of(&rows, "all");
    let ra = rows_of(&rows, &label_a);
    let rb = rows_of(&rows, &label_b);
    assert_eq!((all.len(), ra.len(), rb.len()), (2, 2, 2), "{rows:?}");
    assert_eq!(sum(&ra, "requests"), totals[0]);
    assert_eq!(sum(&rb, "requests"), totals[1]);
    assert_eq!(sum(&all, "requests"), totals[2]);
    for second in 0..2 {
        let s = second.to_string();
        let count = |rows: &[&HashMap<String, String>]| {
            rows.iter()
                .find(|r| r["second"] == s)
                .map(|r| r["requests"].parse::<u64>().unwrap())
                .unwrap()
        };
        assert_eq!(count(&ra) + count(&rb), count(&all));
    }
    // Server b holds 2048-byte values only: its bytes per request say so (GETs and SETs alike).
    assert_eq!(sum(&rb, "bytes"), sum(&rb, "requests") * 2048);
    let run = read_json(&dir.path().join("run.json"));
    assert_eq!(run["blocks"].as_array().unwrap().len(), 3);
    assert_eq!(run["servers"].as_array().unwrap().len(), 2);

    // One server by two names is one server: refused before any load, one line (it was loaded
    // as two, with an "All 2 servers" total; the hostile trial).
    let twice = probe_cmd()
        .args(["load", "--url", &a.url()])
        .args(["--url", &format!("redis://localhost:{}", a.port())])
        .args(["--clients", "4", "--duration", "1s"])
        .assert()
        .code(2);
    let stderr = stderr_of(&twice);
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(
        errors[0].contains("is the same server as") && errors[0].contains("each server once"),
        "{stderr}"
    );
    assert!(!stdout_of(&twice).contains("Total requests"));
}

/// `calls` of one command in `INFO commandstats` (`cmdstat_get:calls=123,usec=...`).
fn command_calls(server: &TestServer, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.conn())
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// `--ratio SET:GET` as memtier_benchmark reads it: 1:4 sends about four GETs per SET, as the
/// server itself counts them.
#[test]
fn ratio_is_set_to_get_as_the_server_counts_it() {
    let server = TestServer::start(&[]);
    populate(&server, &["--keys", "1000", "--value-size", "64"]);
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query::<()>(&mut server.conn())
        .unwrap();
    let assert = probe_cmd()
        .args(["load", "--url", &server.url()])
        .args(["--clients", "4", "--duration", "2s", "--ratio", "1:4"])
        .assert()
        .success();
    assert!(
        stderr_of(&assert).contains("SET:GET 1:4"),
        "{}",
        stderr_of(&assert)
    );
    let (gets, sets) = (command_calls(&server, "get"), command_calls(&server, "set"));
    assert!(
        sets >= 100,
        "too few requests to judge: {gets} GET, {sets} SET"
    );
    let per_set = gets as f64 / sets as f64;
    // Thousands of independent draws of 4:1: well within 3..5 (the reverse order gives 0.25).
    assert!((3.0..5.0).contains(&per_set), "{gets} GET, {sets} SET");
}

#[test]
fn writes_under_load_are_reported_and_in_the_timeline() {
    let server = TestServer::start(&[]);
    populate(&server, &["--keys", "2000"]);
    let dir = tempfile::tempdir().unwrap();
    let assert = probe_cmd()
        .args(["load", "--url", &server.url()])
        .args(["--clients", "4", "--writer-sizes", "8M", "--gap", "1s"])
        .arg("--out")
        .arg(dir.path())
        .assert()
        .success();
    let stdout = stdout_of(&assert);
    let stderr = stderr_of(&assert);
    assert!(stderr.contains("deleting a large key stalls"), "{stderr}");
    let set_line = stdout
        .lines()
        .find(|l| l.starts_with("set "))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(set_line.contains("length:   8M"), "{set_line}");
    assert!(set_line.contains("load worst: "), "{set_line}");
    assert!(stdout.lines().any(|l| l.starts_with("delete ")), "{stdout}");

    let writes = read_csv(&dir.path().join("load_writes.csv"));
    let ops: Vec<&str> = writes.iter().map(|w| w["op"].as_str()).collect();
    assert_eq!(ops, ["set", "delete"]);
    for w in &writes {
        assert_eq!(w["ok"], "true");
        // Four closed-loop clients are always waiting on the server: some overlap each write.
        let overlapping: u64 = w["requests_in_window"].parse().unwrap();
        assert!(overlapping >= 1, "{w:?}");
        let worst: u64 = w["worst_latency_us"].parse().unwrap();
        let delayed: u64 = w["delayed_requests"].parse().unwrap();
        assert!(worst > 0 && delayed <= overlapping, "{w:?}");
        assert!(w["rps_during"].parse::<f64>().unwrap() > 0.0, "{w:?}");
    }
    // Each write shows in the timeline row of the second it ran in.
    let rows = read_csv(&dir.path().join("load_timeline.csv"));
    for (tag, w) in ["1:set:8M", "2:delete:8M"].iter().zip(&writes) {
        let second = &w["second"];
        let row = rows
            .iter()
            .find(|r| &r["second"] == second)
            .unwrap_or_else(|| panic!("no row {second}: {rows:?}"));
        assert!(row["writes"].contains(tag), "{row:?}");
    }
    let total: u64 = field(&stdout, "Total requests: ").parse().unwrap();
    assert_eq!(sum(&rows_of(&rows, "all"), "requests"), total);
    let run = read_json(&dir.path().join("run.json"));
    assert_eq!(run["writes_under_load"].as_array().unwrap().len(), 2);
    assert_eq!(run["writes"][0]["size_bytes"], 8 << 20);
    // The writer's keys are gone; the load data stays.
    let mut all_keys = server.keys("holprobe:*");
    all_keys.retain(|k| !k.starts_with("holprobe:load:"));
    assert!(all_keys.is_empty(), "{all_keys:?}");
    assert_eq!(dbsize(&server), 2001);
}

#[test]
fn clean_leaves_nothing_behind() {
    let server = TestServer::start(&[]);
    redis::cmd("SET")
        .arg("user:1")
        .arg("precious")
        .query::<()>(&mut server.conn())
        .unwrap();
    populate(&server, &["--keys", "2500", "--value-size", "64"]);
    assert_eq!(dbsize(&server), 2502);
    let assert = probe_cmd()
        .args(["clean", "--url", &server.url(), "--batch", "100"])
        .assert()
        .success();
    let stdout = stdout_of(&assert);
    assert!(
        stdout.contains(
            "removed 2501 keys under holprobe:load: (a population of 2500 and its description, holprobe:load:meta)"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("none left"), "{stdout}");
    assert!(server.keys("holprobe:*").is_empty());
    assert_eq!(server.keys("*"), ["user:1"]);
    // A second clean finds nothing and says so.
    let assert = probe_cmd()
        .args(["clean", "--url", &server.url()])
        .assert()
        .success();
    assert!(stdout_of(&assert).contains("removed 0 keys"));
}

#[test]
fn a_population_that_does_not_fit_is_refused_with_numbers() {
    let server = TestServer::start(&["maxmemory 8mb"]);
    let assert = probe_cmd()
        .args(["populate", "--url", &server.url(), "--keys", "100000"])
        .assert()
        .code(2);
    let stderr = stderr_of(&assert);
    assert!(stderr.contains("--keys"), "{stderr}");
    assert!(stderr.contains("maxmemory"), "{stderr}");
    // Memory in the unit that fits: 8 MiB of maxmemory, not "0.01 GiB".
    assert!(stderr.contains("maxmemory 8.0 MiB"), "{stderr}");
    assert!(stderr.contains("use --keys"), "{stderr}");
    assert_eq!(dbsize(&server), 0, "nothing was written");
    // The default count fits: a quarter of the room left under maxmemory.
    let assert = probe_cmd()
        .args(["populate", "--url", &server.url()])
        .assert()
        .success();
    let stderr = stderr_of(&assert);
    assert!(stderr.contains("--keys defaults to"), "{stderr}");
    assert!(stderr.contains("maxmemory"), "{stderr}");
}

/// SETs larger than the population's values that would grow it past maxmemory are refused
/// before the load starts (the hostile trial's `--ratio 1:1 --value-size 64K` over 500-byte
/// values evicted every key of the server's owner), naming the flag and the numbers; SETs of
/// the population's own size run.
#[test]
fn sets_that_would_grow_past_maxmemory_are_refused() {
    let server = TestServer::start(&["maxmemory 40mb", "maxmemory-policy allkeys-lru"]);
    let mut conn = server.conn();
    for i in 0..1000 {
        let _: () = redis::cmd("SET")
            .arg(format!("owner:{i}"))
            .arg("x".repeat(500))
            .query(&mut conn)
            .unwrap();
    }
    populate(&server, &["--keys", "2000", "--value-size", "500"]);
    let assert = probe_cmd()
        .args([
            "load",
            "--url",
            &server.url(),
            "--clients",
            "2",
            "--ratio",
            "1:1",
        ])
        .args(["--value-size", "64K", "--duration", "1s"])
        .assert()
        .code(2);
    let stderr = stderr_of(&assert);
    assert!(stderr.contains("for --value-size"), "{stderr}");
    assert!(stderr.contains("maxmemory 40.0 MiB"), "{stderr}");
    assert_eq!(
        stderr.lines().filter(|l| l.starts_with("error:")).count(),
        1,
        "{stderr}"
    );
    let info: String = redis::cmd("INFO").arg("stats").query(&mut conn).unwrap();
    assert!(info.contains("evicted_keys:0"), "{info}");
    // The population's own size grows nothing.
    probe_cmd()
        .args([
            "load",
            "--url",
            &server.url(),
            "--clients",
            "2",
            "--ratio",
            "1:1",
        ])
        .args(["--duration", "1s"])
        .assert()
        .success();
    let owners: u64 = (0..1000)
        .map(|i| {
            redis::cmd("EXISTS")
                .arg(format!("owner:{i}"))
                .query::<u64>(&mut conn)
                .unwrap()
        })
        .sum();
    assert_eq!(owners, 1000);
}

/// A write of the load's writer that fails (here refused before it is sent: it would make the
/// server evict) fails the run in run.json as in the exit status, as in the main job (trial 37,
/// J10: exit 1, run.json `complete`).
#[test]
fn a_failed_write_under_load_fails_the_run_in_run_json() {
    let server = TestServer::start(&["maxmemory 40mb", "maxmemory-policy allkeys-lru"]);
    populate(&server, &["--keys", "2000", "--value-size", "1K"]);
    let dir = tempfile::tempdir().unwrap();
    let assert = probe_cmd()
        .args(["load", "--url", &server.url(), "--clients", "2"])
        .args(["--writer-sizes", "16M", "--repeat", "1", "--gap", "1s"])
        .args(["--duration", "8s"])
        .arg("--out")
        .arg(dir.path())
        .assert()
        .code(1);
    let stderr = stderr_of(&assert);
    let run = common::read_json(&dir.path().join("run.json"));
    assert_eq!(run["status"], "failed", "{stderr}\n{run}");
    assert!(
        run["status_reason"]
            .as_str()
            .is_some_and(|r| r.contains("1 write(s) failed")),
        "{run}"
    );
}

#[test]
fn embedded_open_loop_keeps_its_rate() {
    // No --url: the tool starts and populates its own server.
    let assert = probe_cmd()
        .args(["load", "--keys", "1000", "--value-size", "512"])
        .args(["--clients", "4", "--rate", "2000", "--duration", "2s"])
        .assert()
        .success();
    let stdout = stdout_of(&assert);
    let stderr = stderr_of(&assert);
    assert!(stderr.contains("started redis"), "{stderr}");
    assert!(stderr.contains("populated 1000 keys"), "{stderr}");
    // Open loop: 2000/s for 2 s is 4000 scheduled requests; only those still unsent at the end
    // (their connection busy with an outstanding one) are missing. A closed loop of 4 clients
    // would make tens of thousands.
    let total: u64 = field(&stdout, "Total requests: ").parse().unwrap();
    assert!((3800..=4000).contains(&total), "{total}\n{stdout}");
    assert!(stdout.contains("open loop: schedule lag"), "{stdout}");
    let mb = number(field(&stdout, "Bytes transferred: "));
    assert_eq!(
        format!("{mb:.2}"),
        format!("{:.2}", total as f64 * 512.0 / 1_048_576.0)
    );
}

#[test]
fn mistakes_are_refused_before_anything_is_sent() {
    let server = TestServer::start(&[]);
    // No population yet.
    let assert = probe_cmd()
        .args(["load", "--url", &server.url(), "--duration", "1s"])
        .assert()
        .code(2);
    assert!(stderr_of(&assert).contains("probe populate --url"));
    let assert = probe_cmd()
        .args(["populate", "--keys", "10"])
        .assert()
        .code(2);
    assert!(stderr_of(&assert).contains("needs --url"));
    let assert = probe_cmd()
        .args(["load", "--url", &server.url(), "--ratio", "3"])
        .assert()
        .code(2);
    assert!(stderr_of(&assert).contains("--ratio"));
    let assert = probe_cmd()
        .args(["populate", "--url", &server.url(), "--value-size", "4K..1K"])
        .assert()
        .code(2);
    assert!(stderr_of(&assert).contains("--value-size"));
    populate(&server, &["--keys", "100"]);
    let assert = probe_cmd()
        .args(["load", "--url", &server.url(), "--keys", "5000"])
        .assert()
        .code(2);
    assert!(stderr_of(&assert).contains("holds only 100 load keys"));
    assert_eq!(dbsize(&server), 101);
}

/// `load --format json`: stdout is one JSON document with the blocks and every write the load
/// saw (notes and progress stay on stderr).
#[test]
fn format_json_is_one_document_with_every_write() {
    let server = TestServer::start(&[]);
    populate(&server, &["--keys", "2000"]);
    let assert = probe_cmd()
        .args(["load", "--url", &server.url()])
        .args(["--clients", "2", "--writer-sizes", "1M", "--gap", "1s"])
        .args(["--format", "json"])
        .assert()
        .success();
    let doc: serde_json::Value =
        serde_json::from_str(&stdout_of(&assert)).expect("stdout is one JSON document");
    assert_eq!(doc["mode"], "load");
    assert_eq!(doc["status"], "complete");
    let writes = doc["writes"].as_array().unwrap();
    assert_eq!(writes.len(), 2, "set and delete: {doc}");
    assert_eq!(doc["writes_under_load"].as_array().unwrap().len(), 2);
    let blocks = doc["blocks"].as_array().unwrap();
    assert!(!blocks.is_empty());
    let requests: u64 = blocks
        .iter()
        .map(|b| b["total_requests"].as_u64().unwrap_or(0))
        .sum();
    assert!(requests > 0, "{doc}");
}

/// With a writer and `--duration`, the load lasts its duration: the writer's plan (a set and a
/// delete, about 2 s) being done does not end it. (The session could also end it early when it
/// saw the writer's thread finished before it had taken the writer's last word from the
/// channel: a rare race, which this test does not provoke reliably.)
#[test]
fn a_writer_done_before_duration_leaves_the_load_its_duration() {
    let server = TestServer::start(&[]);
    populate(&server, &["--keys", "2000"]);
    let dir = tempfile::tempdir().unwrap();
    for _ in 0..3 {
        probe_cmd()
            .args(["load", "--url", &server.url()])
            .args(["--clients", "2", "--writer-sizes", "1M", "--gap", "1s"])
            .args(["--duration", "5s", "--out"])
            .arg(dir.path())
            .arg("--force")
            .assert()
            .success();
        let run = read_json(&dir.path().join("run.json"));
        assert_eq!(run["status"], "complete", "{run}");
        assert_eq!(run["writes"].as_array().unwrap().len(), 2, "{run}");
        let runtime = run["runtime_s"].as_f64().unwrap();
        // At least the duration; past it only by a slow host's delay in stopping.
        assert!((4.9..15.0).contains(&runtime), "runtime {runtime} s: {run}");
    }
}

/// SETs the server refuses are not a load it served (the hostile trial: thousands of errors and
/// exit 0): to a replica they are refused before anything is sent, and a user whose ACL lacks
/// SET fails the run.
#[test]
fn sets_a_server_refuses_fail_the_load() {
    let master = TestServer::start(&[]);
    let replica = TestServer::start(&[&format!("replicaof 127.0.0.1 {}", master.port())]);
    populate(&master, &["--keys", "1000", "--value-size", "64"]);
    let synced = std::time::Instant::now();
    while redis::cmd("EXISTS")
        .arg("holprobe:load:meta")
        .query::<u32>(&mut replica.conn())
        .unwrap()
        == 0
    {
        assert!(
            synced.elapsed() < std::time::Duration::from_secs(20),
            "replica never synced"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let assert = probe_cmd()
        .args([
            "load",
            "--url",
            &replica.url(),
            "--duration",
            "1s",
            "--ratio",
            "1:5",
        ])
        .assert()
        .code(2);
    let stderr = stderr_of(&assert);
    assert!(
        stderr.contains("'1:5' for --ratio") && stderr.contains("replica"),
        "{stderr}"
    );
    // Reading the replica is fine.
    probe_cmd()
        .args(["load", "--url", &replica.url(), "--duration", "1s"])
        .assert()
        .success();

    redis::cmd("ACL")
        .arg(vec![
            "SETUSER",
            "noset",
            "on",
            ">noset-pass",
            "~*",
            "&*",
            "+@all",
            "-set",
        ])
        .query::<()>(&mut master.conn())
        .unwrap();
    let url = format!("redis://noset:noset-pass@127.0.0.1:{}", master.port());
    let assert = probe_cmd()
        .args(["load", "--url", &url, "--duration", "1s", "--ratio", "1:1"])
        .assert()
        .code(1);
    let stderr = stderr_of(&assert);
    assert!(stderr.contains("answered with an error"), "{stderr}");
}

/// The population's description on the server names its random state `random_state`, never
/// "seed"; a description written before the rename (`seed`) is still read, and the next
/// populate leaves only the new name. `--seed`, the flag's old name, is still accepted.
#[test]
fn the_population_names_its_random_state_and_reads_the_old_name() {
    let server = TestServer::start(&[]);
    populate(&server, &["--keys", "200", "--seed", "9"]);
    let meta = |server: &TestServer| -> HashMap<String, String> {
        redis::cmd("HGETALL")
            .arg("holprobe:load:meta")
            .query(&mut server.conn())
            .unwrap()
    };
    let fields = meta(&server);
    assert_eq!(fields["random_state"], "9", "{fields:?}");
    assert!(!fields.contains_key("seed"), "{fields:?}");

    // As an earlier version left it.
    let _: () = redis::pipe()
        .hdel("holprobe:load:meta", "random_state")
        .hset("holprobe:load:meta", "seed", 5)
        .query(&mut server.conn())
        .unwrap();
    let assert = probe_cmd()
        .args(["load", "--url", &server.url()])
        .args(["--clients", "1", "--duration", "1s", "--format", "json"])
        .assert()
        .success();
    let stdout = stdout_of(&assert);
    assert!(
        !(stdout.clone() + &stderr_of(&assert))
            .to_lowercase()
            .contains("seed")
    );
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["populations"][0]["random_state"], 5, "{doc}");
    assert_eq!(doc["populations"][0]["keys"], 200, "{doc}");
    assert!(doc["options"]["random_state"].is_u64(), "{doc}");

    populate(&server, &["--keys", "200", "--random-state", "11"]);
    let fields = meta(&server);
    assert_eq!(fields["random_state"], "11", "{fields:?}");
    assert!(!fields.contains_key("seed"), "{fields:?}");
}

/// A population description whose sizes no load makes (written by anyone who may write under
/// the namespace) is refused in one line: its sizes overflowed the check of SETs against
/// maxmemory (hostile review, F4).
#[test]
fn a_population_description_no_load_wrote_is_refused() {
    let server = TestServer::start(&[]);
    for (min, max) in [("1", "18446744073709551615"), ("4096", "1024")] {
        let _: () = redis::cmd("HSET")
            .arg("holprobe:load:meta")
            .arg("keys")
            .arg(100)
            .arg("value_min_bytes")
            .arg(min)
            .arg("value_max_bytes")
            .arg(max)
            .query(&mut server.conn())
            .unwrap();
        let assert = probe_cmd()
            .args(["load", "--url", &server.url()])
            .args(["--duration", "1s", "--ratio", "1:1", "--value-size", "64K"])
            .assert()
            .code(1);
        let stderr = stderr_of(&assert);
        let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(errors.len(), 1, "{stderr}");
        assert!(
            errors[0]
                .contains("holprobe:load:meta exists but is not a holprobe population description")
                && errors[0].contains(&format!("{min}..{max}")),
            "{stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// `probe load` of `server` with 2 clients for 1 s (more arguments may follow).
fn load_for_a_second(server: &TestServer) -> assert_cmd::Command {
    let mut cmd = probe_cmd();
    cmd.args([
        "load",
        "--url",
        &server.url(),
        "--clients",
        "2",
        "--duration",
        "1s",
    ]);
    cmd
}

/// A population whose keys went away is not announced whole: populate samples the previous
/// population past its own range and cuts the description to what it wrote; a load whose GETs
/// miss says so, and fails when every GET missed (the hostile trial: "a population of 20000
/// keys" over 5000, and 118k GETs/s of nil replies, exit 0).
#[test]
fn a_population_that_went_away_is_said_and_its_misses_too() {
    let server = TestServer::start(&[]);
    populate(&server, &["--keys", "4000", "--value-size", "64"]);
    let unlink = |range: std::ops::Range<u64>| {
        let mut pipe = redis::pipe();
        for i in range {
            pipe.cmd("UNLINK").arg(format!("holprobe:load:{i}"));
        }
        let _: () = pipe.query(&mut server.conn()).unwrap();
    };
    unlink(0..4000);
    let assert = probe_cmd()
        .args(["populate", "--url", &server.url(), "--keys", "1000"])
        .args(["--value-size", "64"])
        .assert()
        .success();
    let (stdout, stderr) = (stdout_of(&assert), stderr_of(&assert));
    assert!(
        stderr.contains("the previous population was of 4000 keys, but 32 of 32 sampled past holprobe:load:999 are gone"),
        "{stderr}"
    );
    assert!(
        format!("{stdout}{stderr}").contains("the server now holds a population of 1000 keys"),
        "{stdout}\n{stderr}"
    );
    // A quarter of the keys gone: the load warns, with the share.
    unlink(0..250);
    let assert = load_for_a_second(&server).assert().success();
    let stderr = stderr_of(&assert);
    let warned = stderr
        .lines()
        .find(|l| l.contains("GETs (") && l.contains("found no key"))
        .unwrap_or_else(|| panic!("{stderr}"));
    let pct: f64 = warned
        .split("GETs (")
        .nth(1)
        .unwrap()
        .split('%')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!((15.0..=35.0).contains(&pct), "{warned}");
    // Every key gone: no value was read, and the run fails.
    unlink(250..1000);
    let assert = load_for_a_second(&server).assert().code(1);
    let stderr = stderr_of(&assert);
    assert!(
        stderr.contains("found no key: no value was read"),
        "{stderr}"
    );
}

/// A damaged description is removed with the rest (clean removed nothing, exit 1), and a load
/// whose SETs write other sizes into the population updates its description.
#[test]
fn clean_removes_a_damaged_description_and_sets_update_the_sizes() {
    let server = TestServer::start(&[]);
    populate(&server, &["--keys", "500", "--value-size", "1K"]);
    let assert = load_for_a_second(&server)
        .args(["--ratio", "1:1", "--value-size", "100..200"])
        .assert()
        .success();
    let stderr = stderr_of(&assert);
    assert!(
        stderr.contains("its description now says 100..1024 bytes"),
        "{stderr}"
    );
    let min: u64 = redis::cmd("HGET")
        .arg("holprobe:load:meta")
        .arg("value_min_bytes")
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(min, 100);
    let _: () = redis::cmd("DEL")
        .arg("holprobe:load:meta")
        .query(&mut server.conn())
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("holprobe:load:meta")
        .arg("garbage")
        .query(&mut server.conn())
        .unwrap();
    let assert = probe_cmd()
        .args(["clean", "--url", &server.url()])
        .assert()
        .success();
    assert!(stderr_of(&assert).contains("removed with the rest"));
    assert!(server.keys("holprobe:*").is_empty());
}

/// More clients than the open-files limit allows are refused before any connects, naming
/// --clients (they failed one by one after a few hundred had connected: exit 1).
#[test]
fn more_clients_than_open_files_are_refused() {
    let server = TestServer::start(&[]);
    populate(&server, &["--keys", "100", "--value-size", "64"]);
    let bin = assert_cmd::cargo::cargo_bin("probe");
    let output = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "ulimit -n 256 && exec {} load --url {} --clients 1000 --duration 1s",
            bin.display(),
            server.url()
        ))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("'1000' for --clients") && stderr.contains("ulimit -n"),
        "{stderr}"
    );
    let errors = stderr.lines().filter(|l| l.starts_with("error")).count();
    assert_eq!(errors, 1, "{stderr}");
}
