//! Watching a server with no end set, as an operator would: observe mode without --duration,
//! scraped at /metrics while it runs, a stall injected by a named client and named in the
//! results, then Ctrl-C: everything kept, the server's settings restored, the endpoint gone.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::{TestServer, read_csv, read_json};
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};

fn probe_bin() -> &'static str {
    env!("CARGO_BIN_EXE_probe")
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a child we started.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

/// GET /metrics over a plain socket: (status line, body).
fn scrape(port: u16) -> Option<(String, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_string(), body.to_string()))
}

/// The value of the sample `name{...}` (the first whose line starts so).
fn sample(body: &str, name: &str) -> Option<f64> {
    body.lines()
        .find(|line| line.starts_with(name))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn an_endless_watch_is_scraped_names_a_stall_and_keeps_everything_on_ctrl_c() {
    let server = TestServer::start(&[]);
    let metrics_port = holprobe::measure::target::free_port().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("watch");
    let child = Command::new(probe_bin())
        .args([
            "--url",
            &server.url(),
            "--tune-server",
            "--interval",
            "250ms",
        ])
        .args(["--metrics-addr", &format!("127.0.0.1:{metrics_port}")])
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    // Scraped while it runs: the counters move and the histogram adds up.
    thread::sleep(Duration::from_millis(1500));
    let (status, body) = scrape(metrics_port).expect("the endpoint answers while the run goes");
    assert!(status.contains("200"), "{status}");
    assert!(body.trim_end().ends_with("# EOF"), "{body}");
    let target = format!("target=\"127.0.0.1:{}\"", server.port());
    let probes = sample(&body, &format!("holprobe_probes_total{{{target}}}")).unwrap();
    assert!(probes > 500.0, "{probes} probes after 1.5 s:\n{body}");
    let count = sample(
        &body,
        &format!("holprobe_probe_latency_seconds_count{{{target}}}"),
    )
    .unwrap();
    let inf = sample(
        &body,
        &format!("holprobe_probe_latency_seconds_bucket{{le=\"+Inf\",{target}}}"),
    )
    .unwrap();
    assert_eq!(count, inf, "{body}");

    // A stall injected by a client that named itself.
    let mut culprit = server.conn();
    redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("culprit-test")
        .query::<()>(&mut culprit)
        .unwrap();
    redis::cmd("DEBUG")
        .arg("SLEEP")
        .arg("0.06")
        .query::<()>(&mut culprit)
        .unwrap();
    thread::sleep(Duration::from_millis(1500));
    let (_, later) = scrape(metrics_port).unwrap();
    let stalls = sample(&later, &format!("holprobe_stalls_total{{{target}}}")).unwrap();
    assert!(stalls >= 1.0, "{later}");

    // Ctrl-C ends the endless run cleanly.
    let sent = Instant::now();
    signal(child.id(), libc::SIGINT);
    let output = child.wait_with_output().unwrap();
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "{:?}",
        sent.elapsed()
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(130), "{stderr}");
    let run = read_json(&out.join("run.json"));
    assert_eq!(run["status"], "interrupted");
    assert!(run["options"]["duration_ms"].is_null());

    // The stall is in stalls.csv with its wall-clock start and its culprit.
    let rows = read_csv(&out.join("stalls.csv"));
    let named = rows
        .iter()
        .find(|r| r["server_command"] == "DEBUG SLEEP 0.06")
        .unwrap_or_else(|| panic!("no stall named DEBUG SLEEP 0.06 in {rows:?}"));
    assert!(
        named["server_client"].ends_with("culprit-test"),
        "{named:?}"
    );
    let ms: f64 = named["duration_ms"].parse().unwrap();
    assert!((55.0..=200.0).contains(&ms), "{named:?}");
    let wall = humantime::parse_rfc3339(&named["wall_start"]).expect("an RFC 3339 time");
    let started = run["started_unix_us"].as_u64().unwrap();
    let start_us: u64 = named["start_us"].parse().unwrap();
    let wall_us = wall
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    assert_eq!(wall_us, started + start_us, "{named:?}");
    // ... and on the terminal, among the longest stalls.
    assert!(
        stdout.contains("DEBUG SLEEP 0.06 (127.0.0.1:") && stdout.contains("culprit-test"),
        "{stdout}"
    );

    // One timeline row per 250 ms, in order, with wall-clock times.
    let timeline = read_csv(&out.join("timeline.csv"));
    assert!(timeline.len() >= 10, "{} rows", timeline.len());
    for (i, row) in timeline.iter().enumerate() {
        assert_eq!(row["start_us"], (i as u64 * 250_000).to_string());
        assert!(humantime::parse_rfc3339(&row["time"]).is_ok(), "{row:?}");
    }
    let probes_in_rows: u64 = timeline
        .iter()
        .map(|r| r["probes"].parse::<u64>().unwrap())
        .sum();
    assert_eq!(probes_in_rows, run["probes_recorded"].as_u64().unwrap());
    assert!(
        timeline
            .iter()
            .any(|r| r["max_us"].parse::<u64>().unwrap() >= 55_000),
        "no interval saw the 60 ms stall"
    );

    // probes.hlog reads back with HdrHistogram's own log reader: one histogram per row.
    let log = std::fs::read(out.join("probes.hlog")).unwrap();
    let mut deserializer = Deserializer::new();
    let mut histograms = 0;
    let mut total = 0;
    for entry in IntervalLogIterator::new(&log) {
        if let LogEntry::Interval(interval) = entry.expect("a valid log line") {
            let bytes = base64_decode(interval.encoded_histogram());
            let hist: hdrhistogram::Histogram<u64> =
                deserializer.deserialize(&mut bytes.as_slice()).unwrap();
            total += hist.len();
            histograms += 1;
        }
    }
    assert_eq!(histograms, timeline.len());
    let failed = run["baseline"]["probe_errors"].as_u64().unwrap();
    assert_eq!(total + failed, run["probes_recorded"].as_u64().unwrap());

    // The server's setting is back, and the endpoint is gone.
    let mut conn = server.conn();
    let (_, slower_than): (String, String) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("slowlog-log-slower-than")
        .query(&mut conn)
        .unwrap();
    assert_eq!(slower_than, "10000");
    assert!(TcpStream::connect(("127.0.0.1", metrics_port)).is_err());
    assert!(server.keys("holprobe:*").is_empty());
}

/// Standard base64, as the interval log stores its histograms.
fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .expect("base64")
}
