//! Helpers for tests against real servers: a `redis-server` of the test's own on a free loopback
//! port (the library's embedded server, stopped on drop), and the `probe` binary.

#![allow(dead_code)]

pub mod bursts;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use holprobe::measure::target::{ConnInfo, EmbeddedServer};

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

    /// Sends `command` on a connection of its own after `delay`, from a thread of its own: a
    /// fault injected while a run is under way. The connection is opened after the delay, so it
    /// is not one of the clients the run sees at its start.
    pub fn command_after<T: redis::FromRedisValue + Send + 'static>(
        &self,
        delay: Duration,
        command: &redis::Cmd,
    ) -> JoinHandle<redis::RedisResult<T>> {
        let port = self.port();
        let command = command.clone();
        thread::spawn(move || {
            thread::sleep(delay);
            let mut conn = ConnInfo::loopback(port)
                .redis_connection()
                .expect("connect to the test server");
            command.query(&mut conn)
        })
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

/// `CONFIG SET name value`, which must succeed.
pub fn config_set(conn: &mut redis::Connection, name: &str, value: &str) {
    redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .exec(conn)
        .unwrap_or_else(|e| panic!("CONFIG SET {name} {value}: {e}"));
}

/// Plants a run marker on the server as a run of the tool would leave it (or as someone
/// planting one would): the marker JSON under `<key_prefix>marker`, registered in
/// `holprobe:markers`; `keys` are set first (to "x"), as the run's keys would be.
pub fn plant_marker(conn: &mut redis::Connection, marker: &serde_json::Value, keys: &[&str]) {
    for key in keys {
        redis::cmd("SET").arg(*key).arg("x").exec(conn).unwrap();
    }
    let prefix = marker["key_prefix"]
        .as_str()
        .expect("a marker's key_prefix");
    let key = format!("{prefix}marker");
    redis::cmd("SET")
        .arg(&key)
        .arg(marker.to_string())
        .exec(conn)
        .unwrap();
    redis::cmd("SADD")
        .arg("holprobe:markers")
        .arg(&key)
        .exec(conn)
        .unwrap();
}

/// As [`plant_marker`], with the marker sealed by this machine's key as a run of the tool seals
/// its own: a dead run's marker as `kill -9` leaves it.
pub fn plant_sealed_marker(
    conn: &mut redis::Connection,
    marker: &serde_json::Value,
    keys: &[&str],
) {
    let mut sealed: holprobe::session::marker::RunMarker =
        serde_json::from_value(marker.clone()).expect("a run marker");
    // Written on this server, as a run's is, unless the test says otherwise.
    if marker.get("server_run_id").is_none() {
        sealed.server_run_id = holprobe::session::marker::server_run_id(conn);
    }
    sealed.seal().expect("this machine's key");
    plant_marker(conn, &serde_json::to_value(&sealed).unwrap(), keys);
}

/// The `probe` binary built for this test run.
pub fn probe_cmd() -> assert_cmd::Command {
    assert_cmd::Command::cargo_bin("probe").expect("the probe binary")
}

/// `probe ARGS --out OUT` started in the background (stdout dropped, stderr piped), returned
/// once its run has begun: run.json (status `running`) is there from a run's start. Fails the
/// test if it is not within 30 s.
pub fn spawn_run(args: &[&str], out: &Path) -> std::process::Child {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let child = Command::new(env!("CARGO_BIN_EXE_probe"))
        .args(args)
        .arg("--out")
        .arg(out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start probe");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !out.join("run.json").exists() {
        assert!(Instant::now() < deadline, "no run.json within 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// A server binary that does not exist: a command given it that is refused proves that nothing
/// was started.
pub const NO_SERVER: [&str; 2] = ["--server-bin", "/nonexistent/redis-server"];

/// `probe ARGS` (with `NO_SERVER`) refused before anything starts: exit 2, `needle` on stderr,
/// and no panic.
pub fn refused_before_starting(args: &[&str], needle: &str) {
    use predicates::prelude::*;
    probe_cmd()
        .args(args)
        .args(NO_SERVER)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(needle))
        .stderr(predicate::str::contains("panicked").not());
}

/// `probe --url URL --writer-sizes SIZES --gap 50ms`: the shortest run that writes these sizes.
pub fn probe_writes(url: &str, sizes: &str) -> assert_cmd::Command {
    let mut probe = probe_cmd();
    probe.args(["--url", url, "--writer-sizes", sizes, "--gap", "50ms"]);
    probe
}

/// How a command ended, what it printed, and how long it ran.
pub struct Exited {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub took: Duration,
}

/// Runs `command` to its end.
pub fn run_to_end(command: &mut assert_cmd::Command) -> Exited {
    let started = Instant::now();
    let output = command.output().expect("run the command");
    Exited {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        took: started.elapsed(),
    }
}

/// Runs `command` to its end, which must exit with `code` (its stderr is shown when not).
pub fn exits_with(command: &mut assert_cmd::Command, code: i32) -> Exited {
    let exited = run_to_end(command);
    assert_eq!(exited.code, Some(code), "{}", exited.stderr);
    exited
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

/// Runs `probe keys ARGS` and returns (exit code, stdout, stderr).
pub fn probe_keys(args: &[&str]) -> (i32, String, String) {
    let output = probe_cmd()
        .arg("keys")
        .args(args)
        .output()
        .expect("run probe keys");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}
