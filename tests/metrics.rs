//! `--metrics-addr`: the Prometheus endpoint scraped while a real run goes, and refused when its
//! address is taken.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use assert_cmd::cargo::CommandCargoExt;
use common::{TestServer, probe_cmd};

/// `GET /metrics` over plain HTTP/1.0; the body, or `None` when nothing listens there.
fn scrape(addr: SocketAddr) -> Option<String> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    let (head, body) = reply.split_once("\r\n\r\n")?;
    assert!(head.starts_with("HTTP/1.0 200"), "{head}");
    Some(body.to_string())
}

/// Every sample of the text format, `name{labels}` -> value.
fn samples(body: &str) -> HashMap<String, f64> {
    body.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

#[test]
fn a_run_serves_its_figures_while_it_goes() {
    let server = TestServer::start(&[]);
    let mut child = Command::cargo_bin("probe")
        .unwrap()
        .args([
            "--url",
            &server.url(),
            "--duration",
            "3s",
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // stderr read on a thread of its own, so the run never blocks on a full pipe.
    let stderr = child.stderr.take().unwrap();
    let (lines_tx, lines_rx) = mpsc::channel::<String>();
    let reader = thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let mut notes = Vec::new();
    let addr: SocketAddr = loop {
        let line = lines_rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("no 'metrics at' line on stderr: {notes:?}"));
        if let Some(url) = line.strip_prefix("metrics at http://") {
            break url.strip_suffix("/metrics").unwrap().parse().unwrap();
        }
        notes.push(line);
    };
    assert!(addr.ip().is_loopback() && addr.port() != 0, "{addr}");
    let target = format!("{{target=\"127.0.0.1:{}\"}}", server.port());
    let metric = |samples: &HashMap<String, f64>, name: &str| -> f64 {
        *samples
            .get(&format!("{name}{target}"))
            .unwrap_or_else(|| panic!("no {name}{target} in {samples:?}"))
    };

    // First scrape once probes are counted.
    let deadline = Instant::now() + Duration::from_secs(10);
    let first = loop {
        let body = scrape(addr).expect("the endpoint answers during the run");
        let first = samples(&body);
        if metric(&first, "holprobe_probes_total") > 0.0 {
            break first;
        }
        assert!(Instant::now() < deadline, "no probe counted: {body}");
        thread::sleep(Duration::from_millis(50));
    };
    // A stall of 100 ms, from a client of its own.
    let mut conn = server.conn();
    redis::cmd("DEBUG")
        .arg("SLEEP")
        .arg("0.1")
        .query::<()>(&mut conn)
        .unwrap();
    thread::sleep(Duration::from_millis(200));
    let second = samples(&scrape(addr).expect("the endpoint answers during the run"));
    assert!(
        metric(&second, "holprobe_probes_total") > metric(&first, "holprobe_probes_total"),
        "probes did not grow: {first:?} then {second:?}"
    );

    // Scrape until the run ends and its endpoint closes; the last answer is the fullest.
    let mut last = second;
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Some(body) = scrape(addr) {
        last = samples(&body);
        assert!(Instant::now() < deadline, "the endpoint outlived the run");
        thread::sleep(Duration::from_millis(100));
    }
    let status = child.wait().unwrap();
    reader.join().unwrap();
    notes.extend(lines_rx.try_iter());
    assert!(status.success(), "{status}: {notes:?}");
    assert!(
        TcpStream::connect(addr).is_err(),
        "{addr} still open after the run"
    );

    let probes = metric(&last, "holprobe_probes_total");
    let errors = metric(&last, "holprobe_probe_errors_total");
    let count = metric(&last, "holprobe_probe_latency_seconds_count");
    assert!(probes > 1000.0, "{last:?}");
    assert!(
        (probes - errors - count).abs() <= 5.0,
        "histogram count {count} vs {probes} probes less {errors} errors"
    );
    let inf = *last
        .get(&format!(
            "holprobe_probe_latency_seconds_bucket{{target=\"127.0.0.1:{}\",le=\"+Inf\"}}",
            server.port()
        ))
        .unwrap_or_else(|| panic!("no +Inf bucket in {last:?}"));
    assert_eq!(inf, count);
    // The slept probes waited about 100 ms: the histogram holds some of 50 ms or more.
    let under_50ms = *last
        .get(&format!(
            "holprobe_probe_latency_seconds_bucket{{target=\"127.0.0.1:{}\",le=\"0.05\"}}",
            server.port()
        ))
        .unwrap_or_else(|| panic!("no 0.05 bucket in {last:?}"));
    assert!(under_50ms < count, "{last:?}");
    assert!(metric(&last, "holprobe_stalls_total") >= 1.0, "{last:?}");
    assert!(
        metric(&last, "holprobe_stall_seconds_total") >= 0.09,
        "{last:?}"
    );
    assert!(
        metric(&last, "holprobe_longest_stall_seconds") >= 0.09,
        "{last:?}"
    );
}

#[test]
fn a_busy_metrics_address_is_refused_before_anything_starts() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    // Port 1 refuses connections: a connection attempt would fail with exit 1, not 2.
    let output = probe_cmd()
        .args([
            "--url",
            "redis://127.0.0.1:1",
            "--duration",
            "1s",
            "--metrics-addr",
            &addr,
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!("'{addr}' for --metrics-addr")),
        "{stderr}"
    );
    assert!(output.stdout.is_empty());
}
