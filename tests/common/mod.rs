//! Helpers for tests against real servers: a `redis-server` of the test's own on a free loopback
//! port (the library's embedded server, stopped on drop), and the `probe` binary.

#![allow(dead_code)]

pub mod bursts;

use std::path::{Path, PathBuf};
use std::process::Command;

use holprobe::measure::target::EmbeddedServer;

/// A real redis-server started for one test.
pub struct TestServer {
    pub server: EmbeddedServer,
}

impl TestServer {
    /// Starts `redis-server` from PATH (or `HOLPROBE_TEST_SERVER_BIN`) with extra settings.
    pub fn start(extra: &[&str]) -> TestServer {
        let bin = std::env::var_os("HOLPROBE_TEST_SERVER_BIN").map(PathBuf::from);
        Self::start_bin(bin.as_deref(), extra)
    }

    /// Starts a given binary.
    pub fn start_bin(bin: Option<&Path>, extra: &[&str]) -> TestServer {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let server = EmbeddedServer::start(bin, &extra).expect("start a redis-server for the test");
        TestServer { server }
    }

    pub fn port(&self) -> u16 {
        self.server.port()
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port())
    }

    pub fn conn(&self) -> redis::Connection {
        self.server
            .conn_info()
            .redis_connection()
            .expect("connect to the test server")
    }

    /// Every key matching `pattern`.
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        let mut conn = self.conn();
        redis::cmd("KEYS")
            .arg(pattern)
            .query(&mut conn)
            .expect("KEYS")
    }
}

/// The `probe` binary built for this test run.
pub fn probe_cmd() -> assert_cmd::Command {
    assert_cmd::Command::cargo_bin("probe").expect("the probe binary")
}

/// Rows of a CSV file as maps from column to value.
pub fn read_csv(path: &Path) -> Vec<std::collections::HashMap<String, String>> {
    let mut reader =
        csv::Reader::from_path(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let headers = reader.headers().expect("headers").clone();
    reader
        .records()
        .map(|r| {
            let r = r.expect("a valid CSV row");
            headers
                .iter()
                .map(String::from)
                .zip(r.iter().map(String::from))
                .collect()
        })
        .collect()
}

/// The CSV's header row.
pub fn csv_header(path: &Path) -> Vec<String> {
    let mut reader = csv::Reader::from_path(path).expect("open csv");
    reader
        .headers()
        .expect("headers")
        .iter()
        .map(String::from)
        .collect()
}

/// run.json as a JSON value.
pub fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("valid JSON")
}

/// The path of one of the four servers, from scripts/servers.sh (which never downloads here).
/// `None` with the reason printed when it is not there; in CI (HOLPROBE_REQUIRE_SERVERS=1) a
/// missing server fails the test instead.
pub fn server(name: &str) -> Option<PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/servers.sh");
    let output = Command::new("bash")
        .arg(&script)
        .args(["--no-fetch", name])
        .output()
        .expect("run scripts/servers.sh");
    let path = String::from_utf8_lossy(&output.stdout).trim().to_string();
    if output.status.success() && !path.is_empty() {
        return Some(PathBuf::from(path));
    }
    let reason = String::from_utf8_lossy(&output.stderr).trim().to_string();
    if std::env::var("HOLPROBE_REQUIRE_SERVERS").is_ok_and(|v| v == "1") {
        panic!("{name} is required (HOLPROBE_REQUIRE_SERVERS=1) but not found: {reason}");
    }
    eprintln!("skipping {name}: {reason} (run scripts/servers.sh to fetch it)");
    None
}
