use std::collections::BTreeMap;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream as StdStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::error::UsageError;

/// How long a normal scrape may take while hostile clients are connected (the brief's bound;
/// loopback answers in milliseconds).
const SCRAPE_LIMIT: Duration = Duration::from_secs(2);
/// `SHUTDOWN_WAIT` plus room for a busy 2-core machine.
const SHUTDOWN_LIMIT: Duration = Duration::from_millis(1500);

/// One HTTP response, read to the end of the connection.
#[derive(Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn parse_reply(bytes: &[u8]) -> Reply {
    let text = String::from_utf8_lossy(bytes);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no end of head in {text:?}"));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {head:?}"));
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    Reply {
        status,
        headers,
        body: body.to_string(),
    }
}

/// Sends `raw` on a new connection and reads until the server closes it.
fn exchange(addr: SocketAddr, raw: &str) -> io::Result<Reply> {
    let mut stream = StdStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(raw.as_bytes())?;
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes)?;
    Ok(parse_reply(&bytes))
}

fn get(addr: SocketAddr, path: &str) -> Reply {
    exchange(addr, &format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n")).unwrap()
}

/// One sample line of OpenMetrics text.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap();
            let (name, labels) = match series.split_once('{') {
                Some((name, labels)) => (name, labels.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split("\",")
                .filter(|pair| !pair.is_empty())
                .map(|pair| {
                    let (key, value) = pair.split_once('=').unwrap();
                    (key.to_string(), value.trim_matches('"').to_string())
                })
                .collect();
            Sample {
                name: name.to_string(),
                labels,
                value: value.parse().unwrap(),
            }
        })
        .collect()
}

/// The value of `name` for `target` (and bucket `le`, parsed as a number, for `_bucket`).
fn value(samples: &[Sample], name: &str, target: &str, le: Option<f64>) -> f64 {
    let found: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.name == name && s.labels["target"] == target)
        .filter(|s| match le {
            None => true,
            Some(le) => {
                let bound = &s.labels["le"];
                let bound = if bound == "+Inf" {
                    f64::INFINITY
                } else {
                    bound.parse().unwrap()
                };
                bound == le || (bound - le).abs() < 1e-12
            }
        })
        .collect();
    assert_eq!(found.len(), 1, "{name} {target} {le:?}: {found:?}");
    found[0].value
}

#[test]
fn a_scrape_shows_every_family_per_target_with_the_values_recorded() {
    let endpoint = MetricsEndpoint::bind("127.0.0.1:0").unwrap();
    let addr = endpoint.local_addr();
    assert_eq!(endpoint.url(), format!("http://{addr}/metrics"));
    let metrics = Arc::clone(endpoint.metrics());
    let v4 = target_label("127.0.0.1", 6379);
    let v6 = target_label("::1", 6380);
    assert_eq!(v4, "127.0.0.1:6379");
    assert_eq!(v6, "[::1]:6380");
    // 50 µs is on the first bound (le is inclusive), 51 µs in the next bucket, 20 s past
    // every bound; an error reply (40 µs) and a lost probe count as probes and errors only.
    for latency_us in [50, 51, 1_500, 1_500, 20_000_000] {
        metrics.probe(&v4, Some(latency_us), true);
    }
    metrics.probe(&v4, None, false);
    metrics.probe(&v4, Some(40), false);
    metrics.stall(&v4, 100_000);
    metrics.stall(&v4, 20_000);
    metrics.set_longest_stall(&v4, 100_000);
    metrics.set_longest_stall(&v4, 20_000);
    metrics.probe(&v6, Some(100), true);

    let reply = get(addr, "/metrics");
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.header("content-type"), Some(CONTENT_TYPE_OPENMETRICS));
    assert_eq!(reply.header("connection"), Some("close"));
    let text = &reply.body;
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert!(
        text.contains("# TYPE holprobe_probe_latency_seconds histogram\n"),
        "{text}"
    );
    assert!(
        text.contains("# UNIT holprobe_probe_latency_seconds seconds\n"),
        "{text}"
    );
    let samples = samples(text);
    let at = |name: &str, target: &str| value(&samples, name, target, None);
    let bucket = |target: &str, le: f64| {
        value(
            &samples,
            "holprobe_probe_latency_seconds_bucket",
            target,
            Some(le),
        )
    };

    assert_eq!(at("holprobe_probes_total", &v4), 7.0);
    assert_eq!(at("holprobe_probe_errors_total", &v4), 2.0);
    assert_eq!(at("holprobe_probe_latency_seconds_count", &v4), 5.0);
    let sum = at("holprobe_probe_latency_seconds_sum", &v4);
    assert!((sum - 20.003101).abs() < 1e-9, "{sum}");
    assert_eq!(bucket(&v4, 50e-6), 1.0);
    assert_eq!(bucket(&v4, 100e-6), 2.0);
    assert_eq!(bucket(&v4, 0.001), 2.0);
    assert_eq!(bucket(&v4, 0.002), 4.0);
    assert_eq!(bucket(&v4, 10.0), 4.0);
    assert_eq!(bucket(&v4, f64::INFINITY), 5.0);
    assert_eq!(at("holprobe_stalls_total", &v4), 2.0);
    assert!((at("holprobe_stall_seconds_total", &v4) - 0.12).abs() < 1e-9);
    assert_eq!(at("holprobe_longest_stall_seconds", &v4), 0.02);

    assert_eq!(at("holprobe_probes_total", &v6), 1.0);
    assert_eq!(at("holprobe_probe_errors_total", &v6), 0.0);
    assert_eq!(bucket(&v6, 100e-6), 1.0);
    assert_eq!(at("holprobe_stalls_total", &v6), 0.0);
    assert_eq!(at("holprobe_stall_seconds_total", &v6), 0.0);
    assert_eq!(at("holprobe_longest_stall_seconds", &v6), 0.0);

    for target in [&v4, &v6] {
        let buckets = samples
            .iter()
            .filter(|s| {
                s.name == "holprobe_probe_latency_seconds_bucket" && &s.labels["target"] == target
            })
            .count();
        assert_eq!(buckets, LATENCY_BOUNDS_US.len() + 1);
        assert_eq!(
            bucket(target, f64::INFINITY),
            at("holprobe_probe_latency_seconds_count", target),
            "+Inf bucket = _count for {target}"
        );
    }

    // HEAD: the same head, no body; a query string does not change the path.
    let head = exchange(addr, "HEAD /metrics HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
    assert_eq!(head.status, 200, "{head:?}");
    assert_eq!(head.header("content-type"), Some(CONTENT_TYPE_OPENMETRICS));
    assert!(head.body.is_empty(), "{head:?}");
    assert_eq!(get(addr, "/metrics?x=1").status, 200);
    endpoint.shutdown();
}

#[test]
fn other_paths_are_404_and_other_methods_405() {
    let endpoint = MetricsEndpoint::bind(":0").unwrap();
    let addr = endpoint.local_addr();
    assert_eq!(addr.ip(), Ipv4Addr::LOCALHOST);
    for path in ["/", "/metric", "/metrics/", "/metrics/x"] {
        assert_eq!(get(addr, path).status, 404, "{path}");
    }
    for method in ["POST", "PUT", "DELETE", "OPTIONS"] {
        let reply = exchange(
            addr,
            &format!("{method} /metrics HTTP/1.1\r\nHost: test\r\nContent-Length: 0\r\n\r\n"),
        )
        .unwrap();
        assert_eq!(reply.status, 405, "{method}: {reply:?}");
        assert_eq!(reply.header("allow"), Some("GET, HEAD"));
    }
    endpoint.shutdown();
}

#[test]
fn a_bad_metrics_addr_is_a_usage_error_naming_the_flag() {
    for bad in [
        "",
        "abc",
        "localhost",
        "1.2.3.4",
        "99999",
        ":99999",
        "-1",
        "::1:9090",
        "127.0.0.1:http",
        "127.0.0.1:",
        "[::1]",
        "[::1:9090",
    ] {
        let err = MetricsEndpoint::bind(bad).unwrap_err();
        let UsageError::InvalidValue { flag, value, .. } = &err else {
            panic!("{bad}: {err:?}");
        };
        assert_eq!(*flag, "--metrics-addr", "{bad}");
        assert_eq!(value, bad);
        let line = err.to_string();
        assert!(
            line.starts_with(&format!("invalid value '{bad}' for --metrics-addr: ")),
            "{line}"
        );
        assert!(!line.contains('\n'), "{line}");
    }
    let parsed = |text: &str| parse_metrics_addr(text).unwrap().to_string();
    assert_eq!(parsed("9090"), "127.0.0.1:9090");
    assert_eq!(parsed(":9090"), "127.0.0.1:9090");
    assert_eq!(parsed("0.0.0.0:9464"), "0.0.0.0:9464");
    assert_eq!(parsed("[::1]:9090"), "[::1]:9090");
    assert!(
        parse_metrics_addr("localhost:9090")
            .unwrap()
            .ip()
            .is_loopback()
    );
    assert!(
        parse_metrics_addr("::1:9090")
            .unwrap_err()
            .to_string()
            .contains("[::1]:9090")
    );
}

#[test]
fn an_address_in_use_is_a_usage_error_naming_the_flag() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let value = taken.local_addr().unwrap().to_string();
    let err = MetricsEndpoint::bind(&value).unwrap_err();
    let line = err.to_string();
    assert!(
        line.starts_with(&format!(
            "invalid value '{value}' for --metrics-addr: cannot listen there ("
        )),
        "{line}"
    );
    // Our own endpoint holds its port the same way.
    let endpoint = MetricsEndpoint::bind("127.0.0.1:0").unwrap();
    let again = endpoint.local_addr().to_string();
    assert!(MetricsEndpoint::bind(&again).is_err());
    endpoint.shutdown();
}

#[test]
fn shutdown_closes_the_port() {
    let endpoint = MetricsEndpoint::bind("127.0.0.1:0").unwrap();
    let addr = endpoint.local_addr();
    assert_ne!(addr.port(), 0);
    assert_eq!(get(addr, "/metrics").status, 200);
    endpoint.shutdown();
    assert!(StdStream::connect(addr).is_err(), "{addr} still accepts");
}

/// How a test ends the endpoint.
#[derive(Debug, Clone, Copy)]
enum End {
    Shutdown,
    Drop,
}

/// Connects `hostile` clients (kept connected), then checks that a normal scrape still
/// answers within [`SCRAPE_LIMIT`], that ending the endpoint takes less than
/// [`SHUTDOWN_LIMIT`], and that afterwards every hostile connection has been closed by the
/// server and the port refuses connections.
fn survives(
    end: End,
    setup: impl FnOnce(&ProbeMetrics),
    hostile: impl FnOnce(SocketAddr) -> Vec<StdStream>,
) {
    let endpoint = MetricsEndpoint::bind("127.0.0.1:0").unwrap();
    let addr = endpoint.local_addr();
    endpoint.metrics().probe("t:1", Some(100), true);
    setup(endpoint.metrics());
    let clients = hostile(addr);

    let started = Instant::now();
    let reply = get(addr, "/metrics");
    let took = started.elapsed();
    assert_eq!(reply.status, 200);
    assert!(
        reply
            .body
            .contains("holprobe_probes_total{target=\"t:1\"} 1\n"),
        "{}",
        &reply.body[..reply.body.len().min(2000)]
    );
    assert!(reply.body.ends_with("# EOF\n"));
    assert!(took < SCRAPE_LIMIT, "a normal scrape took {took:?}");

    let started = Instant::now();
    match end {
        End::Shutdown => endpoint.shutdown(),
        End::Drop => drop(endpoint),
    }
    let took = started.elapsed();
    assert!(took < SHUTDOWN_LIMIT, "{end:?} took {took:?}");

    for (i, mut client) in clients.into_iter().enumerate() {
        assert!(
            is_closed_by_server(&mut client),
            "hostile client {i} still open"
        );
    }
    assert!(StdStream::connect(addr).is_err(), "{addr} still accepts");
}

/// True when reading `client` reaches the end of the stream (or a reset) within 2 s,
/// draining whatever the server had sent first.
fn is_closed_by_server(client: &mut StdStream) -> bool {
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut buf = vec![0; 64 * 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        client.set_read_timeout(Some(left)).unwrap();
        match client.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false;
            }
            Err(err) if err.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return true,
        }
    }
}

fn connect_and_send(addr: SocketAddr, raw: &str) -> StdStream {
    let mut stream = StdStream::connect(addr).unwrap();
    stream.write_all(raw.as_bytes()).unwrap();
    stream
}

#[test]
fn a_huge_declared_body_is_never_read_or_waited_for() {
    survives(
        End::Shutdown,
        |_| {},
        |addr| {
            let huge = "Content-Length: 9000000000000000000\r\n";
            // The one the review found: answered at once, and the connection closed without
            // waiting for (or draining) the 9 EB it announced.
            let mut checked = connect_and_send(
                addr,
                &format!("GET /metrics HTTP/1.1\r\nHost: t\r\n{huge}\r\n"),
            );
            checked
                .set_read_timeout(Some(Duration::from_secs(2)))
                .unwrap();
            let mut bytes = Vec::new();
            let started = Instant::now();
            checked.read_to_end(&mut bytes).unwrap();
            assert!(started.elapsed() < Duration::from_secs(2));
            let reply = parse_reply(&bytes);
            assert_eq!(reply.status, 200, "{reply:?}");
            assert!(reply.body.ends_with("# EOF\n"));
            // These send a little of their body and hold on.
            vec![
                connect_and_send(
                    addr,
                    &format!("GET /metrics HTTP/1.1\r\nHost: t\r\n{huge}\r\nabc"),
                ),
                connect_and_send(
                    addr,
                    &format!("POST /metrics HTTP/1.1\r\nHost: t\r\n{huge}\r\nabc"),
                ),
                connect_and_send(
                    addr,
                    &format!(
                        "POST /metrics HTTP/1.1\r\nHost: t\r\n{huge}Expect: 100-continue\r\n\r\n"
                    ),
                ),
            ]
        },
    );
}

#[test]
fn an_oversized_request_head_is_refused_without_reading_it_all() {
    let endpoint = MetricsEndpoint::bind("127.0.0.1:0").unwrap();
    let addr = endpoint.local_addr();
    let filler = "a".repeat(MAX_REQUEST_HEAD_BYTES + 1024);
    let mut stream = StdStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    // The head is never finished: the server must give up on its size alone.
    let _ = write!(stream, "GET /metrics HTTP/1.1\r\nX-Filler: {filler}");
    let mut bytes = Vec::new();
    let started = Instant::now();
    let read = stream.read_to_end(&mut bytes);
    assert!(started.elapsed() < Duration::from_secs(2));
    // A 431, or a reset: the server closes with our excess bytes unread, and the kernel's
    // RST may overtake its answer.
    match read {
        Ok(_) => {
            let head = String::from_utf8_lossy(&bytes);
            assert!(head.starts_with("HTTP/1.1 431"), "{head:?}");
        }
        Err(err) => assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err}"),
    }
    endpoint.shutdown();
}

#[test]
fn half_requests_held_open_do_not_block_a_scrape_or_the_end() {
    survives(
        End::Drop,
        |_| {},
        |addr| {
            vec![
                StdStream::connect(addr).unwrap(),
                connect_and_send(addr, "GET /metr"),
                connect_and_send(addr, "GET /metrics HTTP/1.1\r\nHost: t\r\n"),
            ]
        },
    );
}

#[test]
fn a_half_request_is_cut_off_after_the_header_timeout() {
    let endpoint = MetricsEndpoint::bind("127.0.0.1:0").unwrap();
    let addr = endpoint.local_addr();
    let started = Instant::now();
    let mut half = connect_and_send(addr, "GET /metrics HTTP/1.1\r\nHost: t\r\n");
    let mut silent = StdStream::connect(addr).unwrap();
    let mut half_closed_after = None;
    let mut silent_closed_after = None;
    let limit = CONNECTION_DEADLINE + Duration::from_secs(2);
    for (stream, closed_after) in [
        (&mut half, &mut half_closed_after),
        (&mut silent, &mut silent_closed_after),
    ] {
        stream
            .set_read_timeout(Some(limit.saturating_sub(started.elapsed())))
            .unwrap();
        let mut bytes = Vec::new();
        // Ok (hyper may answer 408 first) or a reset: either way the server let go.
        let _ = stream.read_to_end(&mut bytes);
        *closed_after = Some(started.elapsed());
    }
    let half_after = half_closed_after.unwrap();
    let silent_after = silent_closed_after.unwrap();
    assert!(
        half_after >= HEADER_READ_TIMEOUT - Duration::from_millis(200)
            && half_after < HEADER_READ_TIMEOUT + Duration::from_secs(2),
        "half a request was closed after {half_after:?}"
    );
    assert!(
        silent_after < CONNECTION_DEADLINE + Duration::from_secs(2),
        "a silent connection was closed after {silent_after:?}"
    );
    endpoint.shutdown();
}

/// Targets enough for a response of several MB, more than the socket buffers of a client
/// that never reads (and the server's send buffer) can take.
fn many_targets(metrics: &ProbeMetrics) {
    for i in 0..1500 {
        let target = format!("10.0.{}.{}:6379", i / 250, i % 250);
        metrics.probe(&target, Some(1000 + i), true);
    }
}

fn never_reads(addr: SocketAddr) -> StdStream {
    connect_and_send(addr, "GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n")
}

#[test]
fn a_client_that_never_reads_does_not_block_a_scrape_or_the_end() {
    survives(End::Shutdown, many_targets, |addr| vec![never_reads(addr)]);
}

#[test]
fn a_client_that_never_reads_is_cut_off_at_the_connection_deadline() {
    let endpoint = MetricsEndpoint::bind("127.0.0.1:0").unwrap();
    let addr = endpoint.local_addr();
    many_targets(endpoint.metrics());
    let full = get(addr, "/metrics");
    let full_len: usize = full.header("content-length").unwrap().parse().unwrap();
    assert_eq!(full.body.len(), full_len);
    assert!(
        full_len > 2 << 20,
        "only {full_len} bytes: not enough to block"
    );

    let mut stuck = never_reads(addr);
    std::thread::sleep(CONNECTION_DEADLINE + Duration::from_secs(1));
    // Now read: only what the kernel buffers held when the server gave up, then the end.
    stuck
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let mut bytes = Vec::new();
    let _ = stuck.read_to_end(&mut bytes);
    assert!(
        bytes.len() < full_len,
        "got {} of {full_len} bytes: the write was not cut off",
        bytes.len()
    );
    assert!(is_closed_by_server(&mut stuck));
    endpoint.shutdown();
}

#[test]
fn a_thousand_connections_at_once_do_not_lock_out_a_scrape_or_delay_the_end() {
    survives(
        End::Shutdown,
        |_| {},
        |addr| {
            (0..1000)
                .map(|i| {
                    if i % 2 == 0 {
                        StdStream::connect(addr).unwrap()
                    } else {
                        connect_and_send(addr, "GET /metrics HTTP/1.1\r\n")
                    }
                })
                .collect()
        },
    );
}

#[test]
fn updates_do_not_wait_for_scrapes() {
    // Not a speed goal (that belongs in a benchmark): a sanity bound that catches a lock
    // held across an encode or an allocation per call gone quadratic.
    let endpoint = MetricsEndpoint::bind("127.0.0.1:0").unwrap();
    let metrics = Arc::clone(endpoint.metrics());
    let addr = endpoint.local_addr();
    let scraper = std::thread::spawn(move || {
        for _ in 0..20 {
            assert_eq!(get(addr, "/metrics").status, 200);
        }
    });
    let started = Instant::now();
    for i in 0..200_000u64 {
        metrics.probe("127.0.0.1:6379", Some(i % 20_000), i % 100 != 0);
    }
    let took = started.elapsed();
    scraper.join().unwrap();
    let text = metrics.encode().unwrap();
    assert!(text.contains("holprobe_probes_total{target=\"127.0.0.1:6379\"} 200000\n"));
    assert!(text.contains("holprobe_probe_errors_total{target=\"127.0.0.1:6379\"} 2000\n"));
    assert!(
        took < Duration::from_secs(5),
        "200 000 updates took {took:?}"
    );
    endpoint.shutdown();
}
